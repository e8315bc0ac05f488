"""fairseq (the ``fairseq-fixed`` 0.12.3.1 build): preprocess and ``fairseq-train``, for the
training-speed table; ``fairseq-generate`` for time to quality.

The official fairseq 0.12.2 does not import on Python 3.11 (a dataclass with a mutable
default); ``fairseq-fixed`` is a community build of 0.12 that does. It is not in the
translation-speed table: ``fairseq-generate``'s length penalty (``score / |y|^lenpen``) is not
the GNMT penalty the other rows share, so its decoding would not be equal work. fairseq's RNN is an LSTM with Luong-style ("general") attention: no GRU, no additive
attention.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from common import UNBUFFERED, run_measured, thread_env
from peers.arch import RnnSpec, TimedRun, TrainSpec, TransformerSpec
from peers.corpus import PieceCorpus, counted_vocabulary
from peers.install import venv_bin
from peers.results import TrainResult, check, progress_lines, stop_after

NAME = "fairseq-fixed"
PEER = "fairseq"
ENV = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
PARAMS_LINE = re.compile(r"num\. shared model params: ([\d,]+)")
CHECKPOINT_NAME = re.compile(r"^checkpoint_\d+_(\d+)\.pt$")  # checkpoint_<epoch>_<updates>.pt
HYPOTHESIS_LINE = re.compile(r"^H-(\d+)\t[^\t]*\t(.*)$")


def deviations(spec: TransformerSpec | RnnSpec) -> list[str]:
    """Settings of ``spec`` this toolkit cannot express."""
    if isinstance(spec, RnnSpec) and spec.attention != "general":
        return [f"fairseq's LSTM model has Luong-style general attention, not {spec.attention}"]
    return []


def _binarize(dictionary: Path, dest: Path, splits: dict[str, Path]) -> None:
    """``fairseq-preprocess`` the given ``{split: prefix}`` with our shared dictionary."""
    if (dest / "preprocess.done").is_file():
        return
    command = [venv_bin(PEER, "fairseq-preprocess"), "--source-lang", "src", "--target-lang", "tgt",
               "--srcdict", dictionary, "--tgtdict", dictionary, "--destdir", dest, "--workers", 1]
    for split, prefix in splits.items():
        command += [f"--{split}pref", prefix]
    check(NAME, run_measured(command, dest.parent / f"{dest.name}.preprocess.log", env=thread_env(1)))
    (dest / "preprocess.done").write_text("")


def _model_arguments(spec: TransformerSpec | RnnSpec) -> list:
    if isinstance(spec, TransformerSpec):
        arguments = ["--arch", "transformer", "--encoder-layers", spec.layers, "--decoder-layers", spec.layers,
                     "--encoder-embed-dim", spec.d_model, "--decoder-embed-dim", spec.d_model,
                     "--encoder-ffn-embed-dim", spec.ffn, "--decoder-ffn-embed-dim", spec.ffn,
                     "--encoder-attention-heads", spec.heads, "--decoder-attention-heads", spec.heads,
                     "--dropout", spec.dropout, "--attention-dropout", spec.attention_dropout]
        if not spec.post_norm:
            arguments += ["--encoder-normalize-before", "--decoder-normalize-before"]
    else:
        if spec.cell != "lstm":
            raise ValueError(f"fairseq has no {spec.cell.upper()} model, only LSTM")
        arguments = ["--arch", "lstm", "--encoder-embed-dim", spec.embed, "--decoder-embed-dim", spec.embed,
                     "--decoder-out-embed-dim", spec.embed, "--encoder-hidden-size", spec.hidden // 2,
                     "--encoder-bidirectional", "--decoder-hidden-size", spec.hidden,
                     "--encoder-layers", spec.layers, "--decoder-layers", spec.layers, "--dropout", spec.dropout]
    return arguments + (["--share-all-embeddings"] if spec.tied_embeddings else [])


def train(corpus: PieceCorpus, spec: TransformerSpec | RnnSpec, train_spec: TrainSpec,
          out_dir: Path, threads: int, timed: TimedRun | None = None) -> TrainResult:
    """Train for ``train_spec.steps`` updates, its ``train_inner`` lines timed as they arrive;
    ``timed``: until the bench stops it, ``checkpoint_<epoch>_<updates>.pt`` every
    ``timed.save_every`` updates, all kept, and no other checkpoint."""
    if train_spec.precision != "fp32":
        raise ValueError(f"fairseq-fixed 0.12.3.1 has no {train_spec.precision} training on CPU (--bf16 implies a TPU)")
    if (train_spec.optimizer, train_spec.schedule) != ("adam", "inverse_sqrt"):
        raise ValueError(f"fairseq runner: adam with inverse_sqrt only, not {train_spec.optimizer} with "
                         f"{train_spec.schedule}")
    if train_spec.loss_normalization != "tokens":
        raise ValueError(f"fairseq runner: loss_normalization tokens only, not {train_spec.loss_normalization}")
    out_dir.mkdir(parents=True, exist_ok=True)
    dictionary = out_dir / "dict.txt"
    dictionary.write_text(counted_vocabulary(corpus, " "), encoding="utf-8")
    data = out_dir / "bin"
    _binarize(dictionary, data, {"train": corpus.path / "train", "valid": corpus.path / "valid"})
    command = [venv_bin(PEER, "fairseq-train"), data, "--task", "translation", "--source-lang", "src",
               "--target-lang", "tgt", *_model_arguments(spec),
               "--optimizer", "adam", "--adam-betas", str(train_spec.adam_betas), "--lr", train_spec.lr,
               "--weight-decay", train_spec.weight_decay,
               "--lr-scheduler", "inverse_sqrt", "--warmup-updates", train_spec.warmup,
               "--warmup-init-lr", "1e-07", "--clip-norm", train_spec.clip_norm,
               "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", train_spec.label_smoothing,
               "--max-tokens", train_spec.max_tokens, "--max-update", train_spec.steps,
               "--required-batch-size-multiple", 1, "--seed", train_spec.seed,
               "--log-format", "json", "--log-interval", train_spec.log_every, "--no-progress-bar",
               "--disable-validation", "--no-epoch-checkpoints", "--save-dir", out_dir / "checkpoints",
               "--cpu", "--num-workers", 0]
    if timed is not None:
        command += ["--save-interval-updates", timed.save_every, "--keep-interval-updates", -1, "--no-last-checkpoints"]
    stamps: list[tuple[float, str]] = []
    stop = stop_after(timed.stop_seconds, _progress) if timed else None
    measured = check(NAME, run_measured(command, out_dir / "train.log", env=thread_env(threads, {**ENV, **UNBUFFERED}),
                                        stamps=stamps, stop_when=stop), stopped=timed is not None)
    params = PARAMS_LINE.search(measured.log.read_text(errors="replace"))
    return TrainResult(
        toolkit=NAME,
        progress=progress_lines(stamps, _progress),
        parameters=int(params.group(1).replace(",", "")) if params else None,
        measured=measured,
        model=out_dir / "checkpoints" if timed else out_dir / "checkpoints" / "checkpoint_last.pt",
    )


def checkpoints(folder: Path) -> dict[int, Path]:
    """{updates: checkpoint} in a timed run's checkpoint folder (``result.model``)."""
    return {int(match.group(1)): path for path in folder.glob("checkpoint_*_*.pt")
            if (match := CHECKPOINT_NAME.match(path.name))}


def generate(checkpoint: Path, corpus: PieceCorpus, beam: int, out_dir: Path, threads: int,
             lenpen: float = 1.0) -> Path:
    """``fairseq-generate`` the test split of ``corpus`` (binarised once per training run, in its
    folder above ``checkpoints``, with the dictionary it trained with); hypotheses as piece text in
    input order. fairseq's own search: ``lenpen`` (its default 1: score over length), its
    default length limit (200 tokens), batches of 32 with ``--required-batch-size-multiple 1``
    (else it drops the last partial batch)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    run = checkpoint.parent.parent
    data = run / "bin-test"
    _binarize(run / "dict.txt", data, {"test": corpus.path / "test"})
    command = [venv_bin(PEER, "fairseq-generate"), data, "--path", checkpoint, "--gen-subset", "test",
               "--source-lang", "src", "--target-lang", "tgt", "--beam", beam, "--lenpen", lenpen,
               "--batch-size", 32, "--required-batch-size-multiple", 1, "--seed", 1, "--cpu", "--num-workers", 0]
    generated = out_dir / f"generate.beam{beam}.txt"
    check(NAME, run_measured(command, out_dir / f"generate.beam{beam}.log", env=thread_env(threads, ENV),
                             stdout=generated))
    found = {int(match.group(1)): match.group(2) for line in generated.read_text(encoding="utf-8").splitlines()
             if (match := HYPOTHESIS_LINE.match(line))}
    expected = corpus.sentences("test", "src")
    if sorted(found) != list(range(expected)):
        raise ValueError(f"{generated}: {len(found)} hypotheses for {expected} test sentences")
    hypotheses = out_dir / f"hyp.beam{beam}.txt"
    hypotheses.write_text("".join(found[index] + "\n" for index in range(expected)), encoding="utf-8")
    return hypotheses


def _progress(line: str) -> tuple[int, float] | None:
    """(updates done, target tokens per update) of a JSON ``train_inner`` line: its
    ``num_updates`` and ``wpb`` (target tokens per batch, one batch an update here)."""
    if "| train_inner |" not in line or "{" not in line:
        return None
    entry = json.loads(line[line.index("{"):])
    return int(entry["num_updates"]), float(entry["wpb"])
