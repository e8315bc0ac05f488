"""The architecture, batch and schedule that every toolkit gets in one comparison.

Each runner translates these into its toolkit's own options; where a toolkit cannot
express a setting (OpenNMT-py's Transformer is pre-norm only, fairseq has neither GRU
nor Bahdanau attention), the runner says so in :func:`deviations`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransformerSpec:
    """A Transformer encoder-decoder; embeddings shared by encoder, decoder and output layer."""

    layers: int = 2
    d_model: int = 128
    heads: int = 4
    ffn: int = 512
    dropout: float = 0.1
    attention_dropout: float = 0.0
    post_norm: bool = True
    tied_embeddings: bool = True

    kind = "transformer"

    def describe(self) -> str:
        norm = "post-norm" if self.post_norm else "pre-norm"
        return f"Transformer {self.layers}+{self.layers} layers, d {self.d_model}, {self.heads} heads, ffn {self.ffn}, {norm}"


@dataclass(frozen=True)
class RnnSpec:
    """An attentional RNN: bidirectional encoder (``hidden / 2`` per direction), and
    ``attention`` either ``additive`` (Bahdanau) or ``general`` (Luong, with input feeding).

    ``embed == hidden`` lets every toolkit tie its output layer to the embeddings
    (OpenNMT-py ties only when the decoder output size equals the embedding size).
    """

    cell: str = "lstm"
    embed: int = 256
    hidden: int = 256
    layers: int = 1
    dropout: float = 0.1
    tied_embeddings: bool = True
    attention: str = "additive"

    kind = "rnn"

    def describe(self) -> str:
        family = "Bahdanau" if self.attention == "additive" else f"Luong ({self.attention}, input feeding)"
        return f"{family} RNN ({self.cell.upper()}), embedding {self.embed}, hidden {self.hidden}, {self.layers} layer(s)"


@dataclass(frozen=True)
class TrainSpec:
    """Batch, steps and schedule, the same for every toolkit.

    ``max_tokens`` is the peers' meaning: padded tokens per side in one batch (fairseq's
    ``--max-tokens``, OpenNMT-py's token batches), which is also what
    ``train.max_tokens`` counts (rows x ``max(S, T + 1)``). Each table reports the measured
    target tokens per step where a toolkit logs them, so the batches can be compared.
    """

    max_tokens: int = 2048
    steps: int = 400
    log_every: int = 20
    #: ``adam`` (with ``adam_betas``) or ``sgd`` (plain, no momentum)
    optimizer: str = "adam"
    #: ``inverse_sqrt``: ``lr`` after a linear warm-up of ``warmup`` updates, then 1/sqrt decay;
    #: ``constant``: ``lr`` throughout (``warmup`` unused)
    schedule: str = "inverse_sqrt"
    lr: float = 5e-4
    warmup: int = 400
    label_smoothing: float = 0.1
    #: what an update's summed loss is divided by: ``tokens``, its target tokens (nmt-cli, fairseq's
    #: criterion, OpenNMT-py's documented Transformer settings); ``sents``, its sentences (OpenNMT-py's
    #: default); with no clipping, Adam's step hardly depends on it, SGD's does
    loss_normalization: str = "tokens"
    adam_betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.0
    #: gradient clipping by global norm (0 = off)
    clip_norm: float = 1.0
    seed: int = 1
    #: ``fp32``, or ``bf16``: each toolkit's bf16 training on CPU where it has one (a ValueError where not)
    precision: str = "fp32"


@dataclass(frozen=True)
class TimedRun:
    """A training run stopped by the bench's clock instead of a step count.

    The toolkit saves a checkpoint every ``save_every`` updates and keeps them all (a multiple
    of ``TrainSpec.log_every``, so each checkpoint has a progress line to date it), and the
    bench stops it with SIGTERM to its process group at the first progress line stamped after
    ``stop_seconds``: by then every checkpoint dated before ``stop_seconds`` is written, since
    each toolkit logs an update before it saves it and the next line comes after the save.
    """

    save_every: int
    stop_seconds: float


@dataclass(frozen=True)
class DecodeSpec:
    """Translation settings shared by every toolkit: one maximum-length rule, one length penalty.

    ``max_length`` is an absolute cap on output pieces (no ratio to the source length:
    CTranslate2 has only a per-batch absolute limit, so this is the rule every toolkit can
    apply exactly). ``alpha`` is the GNMT length penalty ``((5 + |y|) / 6)^alpha``.
    """

    beam: int = 5
    batch_sentences: int = 32
    max_length: int = 100
    alpha: float = 0.6


TINY_TRANSFORMER = TransformerSpec()
BASE_TRANSFORMER = TransformerSpec(layers=6, d_model=512, heads=8, ffn=2048)
TINY_RNN = RnnSpec()
TINY_LUONG_RNN = RnnSpec(attention="general")
