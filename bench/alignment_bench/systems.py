"""nmt-cli's aligners under test: plain attention and the bootstrap's rounds (``nmt align
bootstrap``), models guided by eflomal, Mask-Align; each with the models it aligns with
and what building them cost."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alignment_bench.corpora import BenchCorpus
from alignment_bench.eflomal import write_reversed_guide
from alignment_bench.settings import Settings, seed_suffix
from alignment_bench.training import bootstrap_record, model_config, train_model

from nmt_cli.bootstrap import ALIGNER_SYMMETRIZATION, BootstrapLayout, reverse_config
from nmt_cli.config import Config
from nmt_cli.stages import PipelineRecord

#: the nmt-cli systems --systems can pick (bootstrap brings the plain-attention rows: its first stages)
NMT_SYSTEMS = ("bootstrap", "guided", "mask-align")
#: the setting of a row of ours aligning with both directions; the row adds how they were
#: combined, which ``nmt align`` picks for the models unless the system names one
BOTH_DIRECTIONS = "both directions"
AGREE_HEADS = "--agree-heads"


@dataclass(frozen=True)
class NmtSystem:
    """One nmt-cli system as the bench aligns with it: its model(s) and the seconds it took to build them."""

    name: str  # the table's system column
    setting: str
    checkpoint: Path
    seconds: float
    reverse: Path | None = None  # a reverse-direction model: the two directions are symmetrized
    translates: bool = True  # its model translates; BLEU is measured for those without a reverse
    symmetrization: str | None = None  # how its default row combines two directions (None: nmt align's default)
    why: str = "nmt align's defaults"  # what its default row's reading is, for the row's setting
    ensemble: tuple[Path, ...] = ()  # more models of the forward direction, aligning as an ensemble with it
    reverse_ensemble: tuple[Path, ...] = ()  # the same for the reverse direction
    agree_heads: bool = False  # each direction read as the two agree most (``nmt align --agree-heads``)
    stage: str = ""  # which of a system's models (a bootstrap round): prefixes every row's setting, tuned ones too
    blind: str = ""  # a headline row: the name of its links of the blind pairs (``<blind>.align``)

    @property
    def runs(self) -> list[Path]:
        """Every model it aligns with."""
        return [self.checkpoint, *self.ensemble] + ([self.reverse, *self.reverse_ensemble] if self.reverse else [])

    @property
    def label(self) -> str:
        """The table's setting of its default row: the stage, then the setting."""
        return (f"{self.stage}: " if self.stage else "") + self.setting

    def align_options(self, symmetrization: str | None) -> list:
        """``nmt align``'s model options: every checkpoint, and how two directions combine (None: its default)."""
        models = [option for path in (self.checkpoint, *self.ensemble) for option in ("--checkpoint", path)]
        if self.reverse is None:
            return models
        reverse = [option for path in (self.reverse, *self.reverse_ensemble)
                   for option in ("--reverse-checkpoint", path)]
        return (models + reverse + ([AGREE_HEADS] if self.agree_heads else [])
                + (["--symmetrize", symmetrization] if symmetrization else []))


#: one row of the table: the same system trained with train.seed 1..N (one entry without seeds)
Seeded = list[NmtSystem]


def system_names(text: str) -> tuple[str, ...]:
    """The systems of a ``--systems`` comma list."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in NMT_SYSTEMS]
    if unknown:
        raise SystemExit(f"--systems: unknown system {unknown[0]!r} (choose from {', '.join(NMT_SYSTEMS)})")
    return names


def nmt_systems(corpus: BenchCorpus, settings: Settings, guide: Path | None, eflomal_seconds: float) -> list[Seeded]:
    """The nmt-cli systems of ``settings.systems``, each with its models of every seed:
    plain (one and both directions) and bootstrapped models, guided by eflomal (when it ran), Mask-Align."""
    plain, booted = bootstrap_systems(corpus, settings) if "bootstrap" in settings.systems else ([], [])
    guided = guided_systems(corpus, settings, guide, eflomal_seconds) if (
        guide is not None and "guided" in settings.systems) else []
    masked = [[system] for system in mask_align_systems(corpus, settings)] if "mask-align" in settings.systems else []
    return plain + guided + booted + masked


def by_row(per_seed: list[list[NmtSystem]]) -> list[Seeded]:
    """Rows of systems from lists of the same rows, one list per seed."""
    return [list(row) for row in zip(*per_seed, strict=True)]


def bootstrap_systems(corpus: BenchCorpus, settings: Settings) -> tuple[list[Seeded], list[Seeded]]:
    """``nmt align bootstrap``'s models of every seed: its two plain stages (one and both
    directions) and its guided rounds (:func:`bootstrap_rounds`)."""
    plain, booted = [], []
    for seed in range(1, settings.seeds + 1):
        record = bootstrap_record(corpus, settings, seed)
        cost = record.cumulative_seconds()
        layout = BootstrapLayout(record.root)
        forward, reverse = layout.run("forward"), layout.run("reverse")
        name = "nmt-cli plain attention"
        plain.append([
            NmtSystem(name, "default reading (last layer, heads averaged)", forward, cost["forward"]),
            NmtSystem(name, BOTH_DIRECTIONS, forward, cost["reverse"], reverse=reverse, translates=False,
                      blind="plain-attention"),
            NmtSystem(name, f"{BOTH_DIRECTIONS} with {AGREE_HEADS}", forward, cost["reverse"], reverse=reverse,
                      translates=False, agree_heads=True, why="nmt align's default symmetrization"),
        ])
        booted.append(bootstrap_rounds(record, settings.rounds))
    return by_row(plain), by_row(booted)


def bootstrap_rounds(record: PipelineRecord, rounds: int) -> list[NmtSystem]:
    """Each of the first ``rounds`` guided rounds of a bootstrap: de-en alone, and the pair (the
    last one the aligner the command names), each timed with every stage before it."""
    cost = record.cumulative_seconds()
    layout = BootstrapLayout(record.root)
    name = "nmt-cli bootstrap (no external aligner)"
    rows = []
    for round_number in range(1, rounds + 1):
        forward_stage, reverse_stage = layout.guided(round_number)
        forward, reverse = layout.run(forward_stage), layout.run(reverse_stage)
        named = round_number == rounds
        stage = f"round {round_number}"
        rows += [
            NmtSystem(name, "default reading (supervised head)", forward, cost[forward_stage], stage=stage),
            NmtSystem(name, BOTH_DIRECTIONS, forward, cost[reverse_stage], reverse=reverse, translates=False,
                      symmetrization=ALIGNER_SYMMETRIZATION, stage=stage, blind="bootstrap" if named else "",
                      why="default readings" + ("; the aligner the command names" if named else "")),
        ]
    return rows


def train_both_directions(corpus: BenchCorpus, settings: Settings, names: tuple[str, str],
                          configs: tuple[Config, Config]) -> list[tuple[Path, float]]:
    """The forward and reverse models of ``configs``, trained as the models ``names``: each one's run and seconds."""
    bases = [settings.folders(corpus.name).model(name) for name in names]
    return [(base / "run", train_model(settings, base, config)) for base, config in zip(bases, configs)]


def guided_pairs(corpus: BenchCorpus, settings: Settings, guide: Path,
                 shift: bool = True) -> list[tuple[tuple[Path, float], tuple[Path, float]]]:
    """Per seed (``train.seed`` 1..N), the de-en and en-de models guided by eflomal's links
    (the en-de one by the same links reversed), each run with its seconds; ``shift`` False:
    trained with ``model.alignment_shift`` false (the dev sweep's other choice)."""
    forward_config = model_config(corpus, settings, alignment_path=str(guide)).with_overrides(
        {"train.alignment_weight": 0.05, "model.alignment_null": True, "model.alignment_shift": shift})
    reversed_guide = write_reversed_guide(guide, settings.folders(corpus.name).reversed_guide)
    reverse_guided = reverse_config(forward_config).with_overrides({"data.alignment_path": str(reversed_guide)})
    kind = "" if shift else "-noshift"
    pairs = []
    for seed in range(1, settings.seeds + 1):
        suffix, seeded = seed_suffix(seed), {"train.seed": seed}
        pairs.append(tuple(train_both_directions(
            corpus, settings, (f"guided-eflomal{kind}{suffix}", f"guided-eflomal-reverse{kind}{suffix}"),
            (forward_config.with_overrides(seeded), reverse_guided.with_overrides(seeded)))))
    return pairs


def guided_systems(corpus: BenchCorpus, settings: Settings, guide: Path, eflomal_seconds: float,
                   shift: bool = True) -> list[Seeded]:
    """Guided by eflomal's links, every seed: de-en, and with the en-de model both directions
    symmetrized (as Garg et al. 2019 report their aligner); with ``--seeds N`` > 1 the N pairs
    aligning as one ensemble too."""
    pairs = guided_pairs(corpus, settings, guide, shift)
    name = "nmt-cli guided by eflomal" + ("" if shift else " (model.alignment_shift false)")
    per_seed = [[
        NmtSystem(name, "default reading (supervised head)", forward, eflomal_seconds + forward_seconds),
        NmtSystem(name, BOTH_DIRECTIONS, forward, eflomal_seconds + forward_seconds + reverse_seconds,
                  reverse=reverse, translates=False, blind="guided-eflomal" if shift else ""),
    ] for (forward, forward_seconds), (reverse, reverse_seconds) in pairs]
    rows = by_row(per_seed)
    if len(pairs) > 1:
        (forward, _), (reverse, _) = pairs[0]
        seconds = eflomal_seconds + sum(run[1] for pair in pairs for run in pair)
        rows.append([NmtSystem(name, f"ensemble of {len(pairs)} seeds per direction, {BOTH_DIRECTIONS}",
                               forward, seconds, reverse=reverse, translates=False,
                               ensemble=tuple(pair[0][0] for pair in pairs[1:]),
                               reverse_ensemble=tuple(pair[1][0] for pair in pairs[1:]))])
    return rows


def mask_align_systems(corpus: BenchCorpus, settings: Settings) -> list[NmtSystem]:
    """Mask-Align (``model.arch: mask_align``) in both directions: the other path without an external aligner."""
    forward_config = model_config(corpus, settings).with_overrides({"model.arch": "mask_align"})
    (forward, forward_seconds), (reverse, reverse_seconds) = train_both_directions(
        corpus, settings, ("mask-align-forward", "mask-align-reverse"),
        (forward_config, reverse_config(forward_config)))
    name = "nmt-cli Mask-Align (no external aligner)"
    return [
        NmtSystem(name, "default reading (its one cross-attention, heads averaged)", forward, forward_seconds,
                  translates=False),
        NmtSystem(name, BOTH_DIRECTIONS, forward, forward_seconds + reverse_seconds, reverse=reverse,
                  translates=False),
    ]
