"""What every run of the alignment bench shares: corpus and model sizes, the command-line
options, and the one place that names the folders a run writes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common import SHARED_DATA

from nmt_cli.alignment.symmetrize import AVERAGE_THRESHOLD
from nmt_cli.bootstrap import DEFAULT_ROUNDS


@dataclass(frozen=True)
class Scale:
    """Corpus and model sizes of one mode."""

    synthetic_train: int
    synthetic_test: int
    steps: dict  # corpus name -> training steps
    model: dict
    vocab_size: int
    max_tokens: int
    precision: str
    thresholds: tuple[float, ...] = ()  # tuned readings try argmax links and these thresholds

    @property
    def average_thresholds(self) -> list[float]:
        """The thresholds a tuned ``--symmetrize average`` tries: ``nmt align``'s default and the scale's."""
        return sorted({AVERAGE_THRESHOLD, *self.thresholds})


QUICK = Scale(synthetic_train=300, synthetic_test=30, steps={"synthetic": 10}, vocab_size=200, max_tokens=1024,
              precision="fp32", thresholds=(),
              model=dict(arch="transformer", d_model=32, heads=2, ffn_dim=64, encoder_layers=1, decoder_layers=2,
                         dropout=0.0))
FULL = Scale(synthetic_train=20000, synthetic_test=500,
             steps={"synthetic": 2000, "multi30k": 2000, "multi30k+tatoeba": 2000}, vocab_size=8000,
             max_tokens=4096, precision="bf16", thresholds=(0.1, 0.2, 0.3, 0.4, 0.5),
             model=dict(arch="transformer", d_model=128, heads=4, ffn_dim=512, encoder_layers=3, decoder_layers=3,
                        dropout=0.1))


def seed_suffix(seed: int) -> str:
    """What a model's folder adds for its ``train.seed``: nothing for seed 1 (the folders of
    runs made before the bench had seeds), ``-seedN`` for the others."""
    return "" if seed == 1 else f"-seed{seed}"


@dataclass(frozen=True)
class CorpusFolders:
    """Where a run writes for one corpus (``<work>/<corpus>/``)."""

    root: Path

    @property
    def raw(self) -> Path:
        """The text ``nmt prepare`` reads and the gold sets."""
        return self.root / "raw"

    def bootstrap(self, seed: int = 1) -> Path:
        """``nmt align bootstrap``'s directory for ``train.seed`` ``seed``; its config
        (``.yaml``) and log (``.log``) are beside it."""
        return self.root / f"bootstrap{seed_suffix(seed)}"

    @property
    def eflomal(self) -> Path:
        """eflomal's links and logs, one set per run."""
        return self.root / "eflomal"

    @property
    def guide(self) -> Path:
        """The eflomal links the guided models learn."""
        return self.root / "eflomal-links"

    @property
    def reversed_guide(self) -> Path:
        """The same links for the opposite direction."""
        return self.root / "eflomal-links-reverse"

    def model(self, name: str) -> Path:
        """A training run of the bench: its config, prepared data, run and logs."""
        return self.root / name

    def scores(self, number: int) -> Path:
        """The alignments, logs and BLEU of the ``number``-th nmt-cli system."""
        return self.root / "scores" / str(number)


@dataclass(frozen=True)
class Settings:
    """What every run of this bench shares."""

    work: Path  # everything the run writes: <--work>/align_quality/<quick|full>
    scale: Scale
    threads: int
    reuse: bool
    eflomal_runs: int  # eflomal runs per corpus (it takes no seed): median and range
    systems: tuple[str, ...]  # of systems.NMT_SYSTEMS
    device: str = "cpu"  # where every nmt-cli step runs (nmt's --device)
    #: the bootstrap's and the guided models are each trained with train.seed 1..seeds (the
    #: rows give mean and range); the guided ones also align as one ensemble when seeds > 1
    seeds: int = 1
    data: Path = SHARED_DATA  # the real data the de-en corpora read
    rounds: int = DEFAULT_ROUNDS  # nmt align bootstrap --rounds

    def folders(self, corpus: str) -> CorpusFolders:
        return CorpusFolders(self.work / corpus)
