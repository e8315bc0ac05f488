"""eflomal: its forward, reverse and symmetrized links of a corpus's sets over repeated runs,
and the links of the whole training text that the guided models learn (:data:`GUIDE`).

eflomal 2.0.0 takes no seed (``eflomal-align`` has no option for one; its sampler seeds
itself from ``/dev/urandom``), so its runs differ and cannot be repeated: the bench reports
each reading's median and range over its runs.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from alignment_bench.corpora import BenchCorpus, PairSet, text_lines
from alignment_bench.intervals import sentence_counts
from alignment_bench.settings import Settings
from alignment_bench.steps import run_step
from peers.install import venv_bin

from nmt_cli.alignment import AlignmentScore, read_alignments, score_alignments, symmetrize, write_alignments
from nmt_cli.fileio import atomic_write_json
from nmt_cli.pharaoh import write_reversed_alignments

EFLOMAL_READINGS = ("forward", "reverse", "intersection", "grow-diag-final", "grow-diag-final-and")
SYMMETRIZED = ("intersection", "grow-diag-final", "grow-diag-final-and")
GUIDE = "grow-diag-final-and"  # the eflomal links a guided model learns


@dataclass(frozen=True)
class EflomalReading:
    """One reading of eflomal's links over its runs."""

    runs: list[list]  # per run, the links of every line appended to the training text (blind, dev, test)
    seconds: list[float]  # per run

    def links(self, pairs: PairSet, run: int) -> list:
        return self.runs[run][pairs.start:pairs.start + pairs.size]

    def scores(self, pairs: PairSet) -> list[AlignmentScore]:
        """Every run's score on ``pairs``."""
        return [links_score(pairs, self.links(pairs, run)) for run in range(len(self.runs))]

    def median_run(self, pairs: PairSet) -> int:
        """The run whose AER on ``pairs`` is the median (the lower middle one of an even count)."""
        aers = [score.aer for score in self.scores(pairs)]
        return sorted(range(len(aers)), key=lambda run: aers[run])[(len(aers) - 1) // 2]

    def counts(self, pairs: PairSet) -> np.ndarray:
        """Per-sentence counts on ``pairs`` summed over every run (:mod:`alignment_bench.intervals`)."""
        return sum(links_counts(pairs, self.links(pairs, run)) for run in range(len(self.runs)))


def sentence_lengths(src: Path, tgt: Path) -> list[tuple[int, int]]:
    return [(len(de.split()), len(en.split())) for de, en in zip(text_lines(src), text_lines(tgt))]


def links_score(pairs: PairSet, links: list) -> AlignmentScore:
    """Score the links of ``pairs`` against their gold."""
    return score_alignments(read_alignments(pairs.gold), links, sentence_lengths(pairs.src, pairs.tgt))


def links_counts(pairs: PairSet, links: list) -> np.ndarray:
    """Per-sentence counts of the links of ``pairs`` against their gold."""
    return sentence_counts(read_alignments(pairs.gold), links, sentence_lengths(pairs.src, pairs.tgt))


def _eflomal_readings(forward: Path, reverse: Path, lengths: list[tuple[int, int]]) -> dict[str, list]:
    """Forward, reverse and symmetrized links of the last ``len(lengths)`` lines."""
    count = len(lengths)
    forward_links = [pair.sure for pair in read_alignments(forward)[-count:]]
    reverse_links = [pair.sure for pair in read_alignments(reverse)[-count:]]
    readings = {"forward": forward_links, "reverse": reverse_links}
    for method in SYMMETRIZED:
        readings[method] = [symmetrize(f, r, method, src_len, tgt_len)
                            for f, r, (src_len, tgt_len) in zip(forward_links, reverse_links, lengths)]
    return readings


def _appended_lengths(corpus: BenchCorpus) -> list[tuple[int, int]]:
    lengths = sentence_lengths(corpus.text("train", "de"), corpus.text("train", "en"))
    return lengths[-corpus.appended:]


def run_eflomal(corpus: BenchCorpus, settings: Settings, runs: int) -> tuple[dict[str, EflomalReading], Path]:
    """eflomal on the training text ``runs`` times: each reading over the runs; and the
    folder with the :data:`GUIDE` links of the whole training text of the first run."""
    tool = venv_bin("eflomal", "eflomal-align")
    lengths = _appended_lengths(corpus)
    links: dict[str, list] = {name: [] for name in EFLOMAL_READINGS}
    seconds = []
    out = settings.folders(corpus.name).eflomal
    for repeat in range(runs):
        forward, reverse, spent = _run(corpus, settings, tool, out, repeat)
        seconds.append(spent)
        for name, found in _eflomal_readings(forward, reverse, lengths).items():
            links[name].append(found)
    guide = _write_guide(corpus, out / "0.forward.align", out / "0.reverse.align", settings)
    return {name: EflomalReading(found, seconds) for name, found in links.items()}, guide


def _run(corpus: BenchCorpus, settings: Settings, tool: Path, out: Path, repeat: int) -> tuple[Path, Path, float]:
    """One eflomal run on the training text: its forward and reverse links and its seconds.

    With ``--reuse-models`` a finished run of the same training text is kept (its record,
    written once both link files are whole, names the text's size), so a resumed or re-rendered
    bench reads the same runs: eflomal cannot repeat a run, and the blind links and the
    headline interval come from them.
    """
    forward, reverse = out / f"{repeat}.forward.align", out / f"{repeat}.reverse.align"
    record, source, target = out / f"{repeat}.json", corpus.text("train", "de"), corpus.text("train", "en")
    text_size = {"train_de_bytes": source.stat().st_size, "train_en_bytes": target.stat().st_size}
    if settings.reuse and record.is_file():
        kept = json.loads(record.read_text())
        if all(kept.get(key) == value for key, value in text_size.items()):
            return forward, reverse, kept["seconds"]
    out.mkdir(parents=True, exist_ok=True)
    measured = run_step([str(tool), "-s", source, "-t", target, "-f", forward, "-r", reverse, "--overwrite"],
                        out / f"{repeat}.log", settings)
    atomic_write_json(record, {**text_size, "seconds": measured.seconds})
    return forward, reverse, measured.seconds


def guide_links(corpus: BenchCorpus, settings: Settings) -> Path:
    """The :data:`GUIDE` links of the training text: an earlier run's (``--reuse-models``), else one eflomal run's."""
    folder = settings.folders(corpus.name).guide
    if settings.reuse and (folder / "train.align").is_file():
        return folder
    forward, reverse, _ = _run(corpus, settings, venv_bin("eflomal", "eflomal-align"),
                                 settings.folders(corpus.name).eflomal, 0)
    return _write_guide(corpus, forward, reverse, settings)


def median_seconds(reading: EflomalReading) -> float:
    return statistics.median(reading.seconds)


def _write_guide(corpus: BenchCorpus, forward: Path, reverse: Path, settings: Settings) -> Path:
    """:data:`GUIDE` links of every training pair: the links a guided model learns. With
    ``--reuse-models`` the links of an earlier run stay (eflomal takes no seed, and a kept
    guided model learned those)."""
    folder = settings.folders(corpus.name).guide
    if settings.reuse and (folder / "train.align").is_file():
        return folder
    lengths = sentence_lengths(corpus.text("train", "de"), corpus.text("train", "en"))
    links = _eflomal_readings(forward, reverse, lengths)[GUIDE]
    folder.mkdir(parents=True, exist_ok=True)
    write_alignments(folder / "train.align", links)
    return folder


def write_reversed_guide(guide: Path, folder: Path) -> Path:
    """The guide's links for the opposite direction (``i-j`` as ``j-i``), written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    write_reversed_alignments(guide / "train.align", folder / "train.align")
    return folder
