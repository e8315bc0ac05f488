"""nmt-cli's side of the comparisons, run like a peer: a subprocess on 2 threads.

Training runs ``nmt train``; its progress lines are timed by the bench's clock as they
arrive, like every peer's, and the target tokens of each interval come from
``<run>/metrics.jsonl``.
Translation runs this module as a worker (``python -m peers.ours translate ...`` in
``bench/``): it loads the model with ``load_translator`` (torch, torch int8, or our
exported model in CTranslate2), translates a warm-up slice, then times ``translate`` over
the file in length-sorted batches of 32 sentences (model load excluded), like the peers'
own reported decode times.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from common import BENCH_DIR, REPO, THREADS, UNBUFFERED, nmt_command, run_measured, thread_env
from peers.arch import DecodeSpec, RnnSpec, TimedRun, TrainSpec, TransformerSpec
from peers.results import TrainResult, TranslateResult, check, count_output, progress_lines, stop_after

from nmt_cli.checkpoint import STEP_DIR, list_checkpoints

from nmt_cli.training.progress import read_metrics

NAME = "nmt-cli"
PARAMS_LINE = re.compile(r": ([\d,]+) parameters")
PROGRESS_LINE = re.compile(r"\bstep (\d+)/\d+ \| epoch ")  # training.progress.progress_line


def model_section(spec: TransformerSpec | RnnSpec, arch: str | None = None) -> dict:
    """``model:`` settings for ``spec``; ``arch`` overrides the family (``linear_transformer``)."""
    if isinstance(spec, TransformerSpec):
        return {"arch": arch or "transformer", "d_model": spec.d_model, "heads": spec.heads,
                "ffn_dim": spec.ffn, "encoder_layers": spec.layers, "decoder_layers": spec.layers,
                "dropout": spec.dropout, "attention_dropout": spec.attention_dropout,
                "norm_position": "post" if spec.post_norm else "pre",
                "tie_embeddings": spec.tied_embeddings}
    family = "rnn_bahdanau" if spec.attention == "additive" else "rnn_luong"
    return {"arch": arch or family, "rnn_cell": spec.cell, "embed_dim": spec.embed,
            "hidden_size": spec.hidden, "rnn_layers": spec.layers, "dropout": spec.dropout,
            "attention": spec.attention, "tie_embeddings": spec.tied_embeddings}


def train_section(train_spec: TrainSpec, threads: int = THREADS, timed: TimedRun | None = None) -> dict:
    """``train:`` settings for ``train_spec`` on ``threads`` threads (no validation until the last step;
    ``timed``: none at all, a checkpoint every ``timed.save_every`` steps, every one kept)."""
    if train_spec.loss_normalization != "tokens":
        raise ValueError(f"nmt-cli divides an update's loss by its target tokens, not by "
                         f"{train_spec.loss_normalization}")
    section = {"max_tokens": train_spec.max_tokens, "max_steps": train_spec.steps, "lr": train_spec.lr,
               "warmup_steps": train_spec.warmup, "label_smoothing": train_spec.label_smoothing,
               "optimizer": train_spec.optimizer, "schedule": train_spec.schedule,
               "adam_betas": list(train_spec.adam_betas),
               "weight_decay": train_spec.weight_decay, "clip_norm": train_spec.clip_norm,
               "seed": train_spec.seed, "num_threads": threads, "log_every": train_spec.log_every,
               "valid_every": train_spec.steps, "valid_bleu": False, "early_stop_metric": "loss",
               "keep_last": 1, "keep_best": 1, "precision": train_spec.precision}
    if timed is not None:
        section.update(valid_every=0, save_every=timed.save_every, keep_last=train_spec.steps, keep_best=0)
    return section


def checkpoints(run: Path) -> dict[int, Path]:
    """{step: checkpoint} of the complete checkpoints of a run that ``train`` made (``result.model``)."""
    return {int(STEP_DIR.match(path.name).group(1)): path for path in list_checkpoints(run)}


def train(prepared: Path, spec: TransformerSpec | RnnSpec, train_spec: TrainSpec, out_dir: Path,
          threads: int = THREADS, arch: str | None = None, timed: TimedRun | None = None) -> TrainResult:
    """``nmt train`` for ``train_spec.steps`` steps (no validation until the last step), or until
    ``timed`` stops it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    config = {"model": model_section(spec, arch), "train": train_section(train_spec, threads, timed)}
    config_path = out_dir / "train.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    run = out_dir / "run"
    command = nmt_command("train", "--config", config_path, "--data", prepared, "--out", run, "--restart",
                          "--device", "cpu")
    stamps: list[tuple[float, str]] = []
    stop = stop_after(timed.stop_seconds, PROGRESS_LINE.search) if timed else None
    measured = check(NAME, run_measured(command, out_dir / "train.log", env=thread_env(threads, UNBUFFERED), cwd=REPO,
                                        stamps=stamps, stop_when=stop), stopped=timed is not None)
    tokens_per_update = {record["step"]: record["tokens_per_update"] for record in read_metrics(run)
                         if record.get("kind") == "train"}

    def parse(line: str) -> tuple[int, float] | None:
        match = PROGRESS_LINE.search(line)
        return (int(match.group(1)), tokens_per_update[int(match.group(1))]) if match else None

    params = PARAMS_LINE.search(measured.log.read_text(errors="replace"))
    return TrainResult(
        toolkit=NAME,
        progress=progress_lines(stamps, parse),
        parameters=int(params.group(1).replace(",", "")) if params else None,
        measured=measured,
        model=run,
    )


@dataclass(frozen=True)
class Engine:
    """How nmt-cli decodes: ``torch`` (``quantize`` None or ``int8``) or ``ctranslate2`` (a compute type)."""

    name: str = "torch"
    quantize: str | None = None
    use_cache: bool = True
    workers: int = 1
    #: decode with the checkpoint's own length rule and batch budget (beam and alpha still the table's)
    shipped_defaults: bool = False
    #: a lexical shortlist file; ``none``: no shortlist at all; None: the engine's default (an
    #: export's own vocabulary map for ctranslate2, none for torch)
    shortlist: str | None = None

    def tag(self) -> str:
        listed = "" if self.shortlist is None else "noshortlist" if self.shortlist == "none" else "shortlist"
        parts = [self.name, self.quantize or "fp32", "" if self.use_cache else "nocache",
                 "" if self.workers == 1 else f"workers{self.workers}", "shipped" if self.shipped_defaults else "",
                 listed]
        return ".".join(part for part in parts if part)


WARMUP_SENTENCES = 64


def _run_tag(beam: int, engine: Engine) -> str:
    """The part of a :func:`translate` run's file names that tells its beam and engine apart."""
    return f"beam{beam}.{engine.tag()}"


def hypotheses_path(out_dir: Path, beam: int, engine: Engine) -> Path:
    """Where :func:`translate` writes the output pieces of ``engine`` at ``beam`` in ``out_dir``."""
    return out_dir / f"hyp.{_run_tag(beam, engine)}.txt"


def translate(checkpoint: Path, source_text: Path, decode: DecodeSpec, out_dir: Path, threads: int = THREADS,
              label: str = NAME, engine: Engine = Engine()) -> TranslateResult:
    """Translate raw source text in a worker subprocess; output pieces counted from its token ids.

    ``engine.workers`` batches are decoded at once, each on ``threads // workers`` threads
    (``decode.workers``; CTranslate2's ``inter_threads``). The worker first translates the
    first sentences once, untimed (warm-up), then times the whole file.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = _run_tag(decode.beam, engine)
    hypotheses = hypotheses_path(out_dir, decode.beam, engine)
    timing = out_dir / f"timing.{tag}.json"
    command = [sys.executable, "-m", "peers.ours", "translate", checkpoint, source_text, hypotheses,
               "--beam", decode.beam, "--alpha", decode.alpha, "--batch", decode.batch_sentences,
               "--max-length", decode.max_length, "--threads", threads, "--workers", engine.workers,
               "--engine", engine.name, *(["--quantize", engine.quantize] if engine.quantize else []),
               *([] if engine.use_cache else ["--no-cache"]),
               *(["--shipped-defaults"] if engine.shipped_defaults else []),
               *(["--shortlist", engine.shortlist] if engine.shortlist is not None else [])]
    measured = check(label, run_measured(command, out_dir / f"translate.{tag}.log", env=thread_env(threads),
                                         stdout=timing, cwd=BENCH_DIR))
    seconds = json.loads(timing.read_text().splitlines()[-1])["seconds"]
    sentences, tokens = count_output(hypotheses)
    return TranslateResult(label, sentences, tokens, seconds, hypotheses, measured)


def decode_overrides(decode: DecodeSpec, workers: int = 1, shipped_defaults: bool = False) -> dict:
    """``load_translator`` overrides that decode under ``decode``'s rule: an absolute cap of
    ``max_length`` pieces, batches of ``batch_sentences``, ``workers`` batches at once; with
    ``shipped_defaults`` only the beam, alpha and workers, the rest as the checkpoint has it."""
    settings = {"beam_size": decode.beam, "alpha": decode.alpha, "workers": workers}
    if not shipped_defaults:
        settings.update(max_len_a=0.0, max_len_b=decode.max_length, max_tokens=10**9,
                        max_sentences=decode.batch_sentences)
    return {f"decode.{key}": value for key, value in settings.items()}


def _translate_worker(args: argparse.Namespace) -> None:
    """Load, warm up, then time one ``translate`` call over the whole file in length-sorted
    batches of ``--batch`` sentences (``decode.max_sentences``)."""
    import torch

    from nmt_cli.decoding import load_translator

    torch.set_num_threads(args.threads)
    decode = DecodeSpec(beam=args.beam, batch_sentences=args.batch, max_length=args.max_length, alpha=args.alpha)
    shortlist = None if args.shortlist is None else False if args.shortlist == "none" else args.shortlist
    translator = load_translator(args.checkpoint, engine=args.engine, quantize=args.quantize,
                                 overrides=decode_overrides(decode, args.workers, args.shipped_defaults),
                                 shortlist=shortlist)
    if args.no_cache:
        translator.model.use_cache = False
    texts = args.source.read_text(encoding="utf-8").splitlines()
    translator.translate(texts[:WARMUP_SENTENCES])
    started = time.perf_counter()
    hypotheses = translator.translate(texts)
    seconds = time.perf_counter() - started
    pieces = [translator.tokenizer.tgt_pieces(hypothesis.tokens) for hypothesis in hypotheses]
    args.output.write_text("".join(" ".join(p) + "\n" for p in pieces), encoding="utf-8")
    print(json.dumps({"seconds": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description="nmt-cli translation worker for the benchmarks")
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("translate")
    worker.add_argument("checkpoint", type=Path)
    worker.add_argument("source", type=Path)
    worker.add_argument("output", type=Path)
    worker.add_argument("--beam", type=int, required=True)
    worker.add_argument("--alpha", type=float, required=True, help="GNMT length penalty")
    worker.add_argument("--batch", type=int, required=True)
    worker.add_argument("--max-length", type=int, required=True)
    worker.add_argument("--threads", type=int, required=True)
    worker.add_argument("--workers", type=int, default=1, help="batches decoded at once (decode.workers)")
    worker.add_argument("--no-cache", action="store_true", help="Transformer: model.use_cache = False")
    worker.add_argument("--shipped-defaults", action="store_true",
                        help="the checkpoint's own length rule and batch budget (beam and alpha as given)")
    worker.add_argument("--engine", default="torch", choices=("torch", "ctranslate2"))
    worker.add_argument("--quantize", default=None, help="torch: int8; ctranslate2: a compute type")
    worker.add_argument("--shortlist", default=None,
                        help="a lexical shortlist file, or none (default: the engine's: an export's own vocabulary "
                             "map for ctranslate2, none for torch)")
    _translate_worker(parser.parse_args())


if __name__ == "__main__":
    main()
