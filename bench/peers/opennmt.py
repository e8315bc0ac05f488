"""OpenNMT-py 3.5.1: train with ``onmt_train``, translate with ``onmt_translate``.

Quirks handled here (see PEERS.md): checkpoints hold an ``argparse.Namespace``, so
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` is set; the GPU-minded defaults ``bucket_size
262144`` and ``num_workers 2`` slow a CPU run 6-10x, so ``4096`` and ``0`` are used.
Its Transformer layers are pre-norm only (a post-norm spec runs pre-norm here).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from common import UNBUFFERED, run_measured, thread_env
from peers.arch import DecodeSpec, RnnSpec, TimedRun, TrainSpec, TransformerSpec
from peers.corpus import PieceCorpus, counted_vocabulary
from peers.install import venv_bin
from peers.results import TrainResult, TranslateResult, check, count_output, progress_lines, stop_after

NAME = "OpenNMT-py"
PEER = "opennmt"
ENV = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
STEP_LINE = re.compile(r"Step\s+(\d+)/\s*\d+;.*?bsz:\s*[\d.]+/\s*([\d.]+)/.*?([\d.]+)/\s*([\d.]+) tok/s")
PARAMS_LINE = re.compile(r"\* number of parameters: (\d+)")
AVERAGE_TIME_LINE = re.compile(r"Average translation time \(ms\): ([\d.]+)")
CHECKPOINT_NAME = re.compile(r"^model_step_(\d+)\.pt$")


def deviations(spec: TransformerSpec | RnnSpec) -> list[str]:
    """Settings of ``spec`` this toolkit cannot express."""
    if isinstance(spec, TransformerSpec) and spec.post_norm:
        return ["OpenNMT-py's Transformer is pre-norm only"]
    if isinstance(spec, RnnSpec) and spec.attention == "additive":
        return ["OpenNMT-py's RNN decoder scores additive (mlp) attention Luong's way: it attends with the new "
                "state s_t and feeds the attentional output back into the next step (input feeding), and starts "
                "from the encoder's final states; nmt-cli's Bahdanau decoder attends with s_{t-1}, feeds c_t into "
                "the recurrence, starts from tanh(W_s h_1 backward) and has a maxout readout (hence the parameter "
                "counts, and the matmul rate is counted on nmt-cli's model for both)"]
    return []


def _model_options(spec: TransformerSpec | RnnSpec) -> dict:
    if isinstance(spec, TransformerSpec):
        return {"encoder_type": "transformer", "decoder_type": "transformer",
                "enc_layers": spec.layers, "dec_layers": spec.layers, "hidden_size": spec.d_model,
                "word_vec_size": spec.d_model, "transformer_ff": spec.ffn, "heads": spec.heads,
                "position_encoding": True, "dropout": [spec.dropout], "attention_dropout": [spec.attention_dropout],
                "share_embeddings": spec.tied_embeddings, "share_decoder_embeddings": spec.tied_embeddings}
    return {"encoder_type": "brnn", "decoder_type": "rnn", "rnn_type": spec.cell.upper(),
            "enc_layers": spec.layers, "dec_layers": spec.layers, "hidden_size": spec.hidden,
            "word_vec_size": spec.embed,
            "global_attention": "mlp" if spec.attention == "additive" else spec.attention, "input_feed": 1,
            "dropout": [spec.dropout], "share_embeddings": spec.tied_embeddings,
            "share_decoder_embeddings": spec.tied_embeddings}


def _noam_learning_rate(spec: TransformerSpec | RnnSpec, train: TrainSpec) -> float:
    """OpenNMT-py's noam schedule peaks at ``lr * d^-0.5 * warmup^-0.5``; solve for ``train.lr``."""
    width = spec.d_model if isinstance(spec, TransformerSpec) else spec.hidden
    return train.lr * (width * train.warmup) ** 0.5


def _schedule_options(spec: TransformerSpec | RnnSpec, train: TrainSpec) -> dict:
    """``inverse_sqrt`` as noam (the same shape); ``constant`` as no decay at all (its own decay would
    start at update 50,000, beyond any run here, but is turned off all the same)."""
    if train.schedule == "inverse_sqrt":
        return {"decay_method": "noam", "learning_rate": _noam_learning_rate(spec, train),
                "warmup_steps": train.warmup}
    if train.schedule == "constant":
        return {"decay_method": "none", "learning_rate": train.lr, "start_decay_steps": 10**9}
    raise ValueError(f"OpenNMT-py runner: no {train.schedule} schedule")


def train(corpus: PieceCorpus, spec: TransformerSpec | RnnSpec, train_spec: TrainSpec,
          out_dir: Path, threads: int, timed: TimedRun | None = None) -> TrainResult:
    """Train for ``train_spec.steps`` steps, its ``Step`` lines timed as they arrive; ``timed``:
    until the bench stops it, ``model_step_<N>.pt`` every ``timed.save_every`` steps, all kept."""
    if train_spec.precision != "fp32":
        raise ValueError(f"OpenNMT-py 3.5.1 has no {train_spec.precision} training (model_dtype: fp32 or fp16)")
    if train_spec.weight_decay:
        raise ValueError("OpenNMT-py 3.5.1's adam has no weight decay")
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = out_dir / "vocab.txt"
    vocab.write_text(counted_vocabulary(corpus, "\t"), encoding="utf-8")
    options = {
        "data": {"corpus_1": {"path_src": str(corpus.text("train", "src")),
                              "path_tgt": str(corpus.text("train", "tgt"))},
                 "valid": {"path_src": str(corpus.text("valid", "src")),
                           "path_tgt": str(corpus.text("valid", "tgt"))}},
        "src_vocab": str(vocab), "tgt_vocab": str(vocab), "share_vocab": True,
        "src_vocab_size": 1_000_000, "tgt_vocab_size": 1_000_000, "vocab_size_multiple": 1,
        "save_model": str(out_dir / "model"),
        "save_checkpoint_steps": timed.save_every if timed else train_spec.steps,
        "keep_checkpoint": -1 if timed else 1,
        "train_steps": train_spec.steps, "valid_steps": 10 * train_spec.steps + 1,
        "report_every": train_spec.log_every, "seed": train_spec.seed,
        "batch_type": "tokens", "batch_size": train_spec.max_tokens, "bucket_size": 4096,
        "num_workers": 0, "world_size": 1, "gpu_ranks": [], "accum_count": [1],
        "optim": train_spec.optimizer, "adam_beta1": train_spec.adam_betas[0],
        "adam_beta2": train_spec.adam_betas[1], **_schedule_options(spec, train_spec),
        "label_smoothing": train_spec.label_smoothing, "normalization": train_spec.loss_normalization,
        "max_grad_norm": train_spec.clip_norm,
        "param_init": 0.0, "param_init_glorot": True,
        **_model_options(spec),
    }
    config = out_dir / "train.yaml"
    config.write_text(yaml.safe_dump(options), encoding="utf-8")
    stamps: list[tuple[float, str]] = []
    stop = stop_after(timed.stop_seconds, _progress) if timed else None
    measured = check(NAME, run_measured([venv_bin(PEER, "onmt_train"), "-config", config], out_dir / "train.log",
                                        env=thread_env(threads, {**ENV, **UNBUFFERED}), stamps=stamps,
                                        stop_when=stop), stopped=timed is not None)
    params = PARAMS_LINE.search(measured.log.read_text(errors="replace"))
    return TrainResult(
        toolkit=NAME,
        progress=progress_lines(stamps, _progress),
        parameters=int(params.group(1)) if params else None,
        measured=measured,
        model=out_dir if timed else out_dir / f"model_step_{train_spec.steps}.pt",
    )


def checkpoints(folder: Path) -> dict[int, Path]:
    """{steps: checkpoint} in a timed run's folder (``result.model``)."""
    return {int(match.group(1)): path for path in folder.glob("model_step_*.pt")
            if (match := CHECKPOINT_NAME.match(path.name))}


def _progress(line: str) -> tuple[int, float] | None:
    """(steps done, target tokens per step) of a ``Step`` line (one step an update: no accumulation)."""
    match = STEP_LINE.search(line)
    return (int(match.group(1)), float(match.group(2))) if match else None


def translate(model: Path, source: Path, decode: DecodeSpec, out_dir: Path, threads: int,
              own_defaults: bool = False) -> TranslateResult:
    """Translate ``source`` pieces; time is OpenNMT-py's reported total translation time.

    The same rule as every toolkit: at most ``max_length`` pieces (its default
    ``max_length_ratio`` cap, 1.25 x source, is switched off) and the GNMT penalty
    (``-length_penalty wu -alpha``); ``own_defaults``: only the beam and batch given, its own
    length limits and length penalty (``avg``: the score over the length). ``onmt_translate``
    offers no warm-up, so its time includes the first batch.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    hypotheses = out_dir / f"hyp.beam{decode.beam}.txt"
    command = [venv_bin(PEER, "onmt_translate"), "-model", model, "-src", source, "-output", hypotheses,
               "-beam_size", decode.beam, "-batch_size", decode.batch_sentences, "-batch_type", "sents",
               "-report_time", "-seed", 1]
    if not own_defaults:
        command += ["-max_length", decode.max_length, "-max_length_ratio", 0,  # 0: no cap at 1.25 x source
                    "-length_penalty", "wu", "-alpha", decode.alpha]
    measured = check(NAME, run_measured(command, out_dir / f"translate.beam{decode.beam}.log",
                                        env=thread_env(threads, ENV)))
    sentences, tokens = count_output(hypotheses)
    average_ms = float(AVERAGE_TIME_LINE.search(measured.log.read_text(errors="replace")).group(1))
    seconds = average_ms * sentences / 1000  # its total is rounded to 0.1 s; the average is finer
    return TranslateResult(NAME, sentences, tokens, seconds, hypotheses, measured)
