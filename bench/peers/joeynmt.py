"""JoeyNMT 2.3.0: ``python -m joeynmt train``, for the training-speed table.

Quirks handled here (see PEERS.md): ``overwrite: true`` wipes ``model_dir``, so configs
and vocabulary live one level up. Its one validation (at the last step, which writes the
checkpoint) decodes a 20-sentence subset only. It is not in the translation table: its
decoder re-runs the whole prefix every step and a greedy batch runs until its last
sentence ends (PEERS.md), so it was one to two orders of magnitude slower than the rest.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from common import run_measured, thread_env
from peers.arch import RnnSpec, TrainSpec, TransformerSpec
from peers.corpus import PieceCorpus
from peers.install import venv_bin
from peers.results import TrainResult, check

NAME = "JoeyNMT"
PEER = "joeynmt"
STEP_LINE = re.compile(r"Step:\s+(\d+),.*Tokens per Sec:\s+([\d.]+)")
PARAMS_LINE = re.compile(r"Total params: (\d+)")
VALIDATION_SENTENCES = 20


def deviations(spec: TransformerSpec | RnnSpec) -> list[str]:
    """Settings of ``spec`` this toolkit cannot express (none)."""
    return []


def _model_section(spec: TransformerSpec | RnnSpec) -> dict:
    if isinstance(spec, TransformerSpec):
        def stack() -> dict:
            return {"type": "transformer", "num_layers": spec.layers, "num_heads": spec.heads,
                    "hidden_size": spec.d_model, "ff_size": spec.ffn, "dropout": spec.dropout,
                    "layer_norm": "post" if spec.post_norm else "pre",
                    "embeddings": {"embedding_dim": spec.d_model, "scale": True}}

        return {"initializer": "xavier_uniform", "embed_initializer": "xavier_uniform",
                "tied_embeddings": spec.tied_embeddings, "tied_softmax": spec.tied_embeddings,
                "encoder": stack(), "decoder": stack()}
    embeddings = {"embedding_dim": spec.embed, "scale": False}
    return {"tied_embeddings": spec.tied_embeddings, "tied_softmax": spec.tied_embeddings,
            "encoder": {"type": "recurrent", "rnn_type": spec.cell, "hidden_size": spec.hidden // 2,
                        "bidirectional": True, "num_layers": spec.layers, "dropout": spec.dropout,
                        "embeddings": embeddings},
            "decoder": {"type": "recurrent", "rnn_type": spec.cell, "hidden_size": spec.hidden,
                        "attention": "bahdanau", "input_feeding": True, "init_hidden": "bridge",
                        "num_layers": spec.layers, "dropout": spec.dropout, "embeddings": embeddings}}


def _config(corpus: PieceCorpus, vocab: Path, model_dir: Path, model_section: dict,
            training: dict, testing: dict, splits: dict) -> dict:
    side = {"level": "word", "lowercase": False, "normalize": False, "max_length": -1,
            "min_length": 1, "voc_file": str(vocab)}
    return {"name": "bench", "joeynmt_version": "2.3.0", "model_dir": str(model_dir),
            "use_cuda": False, "fp16": False, "random_seed": 1, "num_workers": 0,
            "data": {**splits, "dataset_type": "plain", "sample_dev_subset": VALIDATION_SENTENCES,
                     "src": {"lang": "src", **side}, "trg": {"lang": "tgt", **side}},
            "training": training, "testing": testing, "model": model_section}


def train(corpus: PieceCorpus, spec: TransformerSpec | RnnSpec, train_spec: TrainSpec,
          out_dir: Path, threads: int) -> TrainResult:
    """Train for ``train_spec.steps`` updates; tokens/s parsed from its ``Step:`` lines."""
    if train_spec.precision != "fp32":
        raise ValueError(f"JoeyNMT 2.3 has no {train_spec.precision} training (its fp16 option is float16 autocast)")
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = out_dir / "vocab.txt"
    vocab.write_text("".join(piece + "\n" for piece in corpus.vocabulary), encoding="utf-8")
    training = {
        "optimizer": "adam", "adam_betas": [0.9, 0.98], "scheduling": "warmupinversesquareroot",
        "learning_rate": train_spec.lr, "learning_rate_warmup": train_spec.warmup,
        "learning_rate_min": 1e-9, "loss": "crossentropy", "label_smoothing": train_spec.label_smoothing,
        "normalization": "tokens", "batch_size": train_spec.max_tokens, "batch_type": "token",
        "epochs": 1000, "updates": train_spec.steps, "logging_freq": train_spec.log_every,
        "validation_freq": train_spec.steps - train_spec.steps % train_spec.log_every,
        "early_stopping_metric": "loss", "eval_metrics": [], "keep_best_ckpts": 1,
        "clip_grad_norm": 1.0, "shuffle": True, "overwrite": True, "print_valid_sents": [],
    }
    testing = {"beam_size": 1, "batch_size": 32, "batch_type": "sentence", "max_output_length": 64}
    prefix = str(corpus.path)
    config = _config(corpus, vocab, out_dir / "model", _model_section(spec), training, testing,
                     {"train": f"{prefix}/train", "dev": f"{prefix}/valid"})
    config_path = out_dir / "train.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    measured = check(NAME, run_measured([venv_bin(PEER, "python"), "-m", "joeynmt", "train", config_path, "-t"],
                                        out_dir / "train.log", env=thread_env(threads)))
    log = measured.log.read_text(errors="replace")
    params = PARAMS_LINE.search(log)
    return TrainResult(
        toolkit=NAME,
        interval_tokens_per_second=[float(rate) for _, rate in STEP_LINE.findall(log)],
        tokens_per_step=None,  # JoeyNMT does not log batch sizes
        parameters=int(params.group(1)) if params else None,
        measured=measured,
        model=config_path,
    )
