"""eflomal: its forward, reverse and symmetrized links of a corpus over repeated runs, and
the links of the whole training text that the guided models learn (:data:`GUIDE`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from alignment_bench.corpora import BenchCorpus, GoldSet, text_lines
from alignment_bench.settings import Settings
from alignment_bench.steps import run_step
from peers.install import venv_bin

from nmt_cli.alignment import AlignmentScore, read_alignments, score_alignments, symmetrize, write_alignments
from nmt_cli.pharaoh import write_reversed_alignments

EFLOMAL_READINGS = ("forward", "reverse", "intersection", "grow-diag-final", "grow-diag-final-and")
SYMMETRIZED = ("intersection", "grow-diag-final", "grow-diag-final-and")
GUIDE = "grow-diag-final-and"  # the eflomal links a guided model learns


@dataclass(frozen=True)
class EflomalReading:
    """One reading of eflomal's links over its runs."""

    links: list  # of the test pairs, from the run with the median AER
    seconds: float  # the median time of a run
    aers: list[float]  # every run's AER (eflomal takes no seed, so runs differ)


def sentence_lengths(src: Path, tgt: Path) -> list[tuple[int, int]]:
    return [(len(de.split()), len(en.split())) for de, en in zip(text_lines(src), text_lines(tgt))]


def links_score(gold: GoldSet, links: list, offset: int = 0) -> AlignmentScore:
    """Score the links of ``gold``'s pairs, taken from ``links`` starting at ``offset``."""
    lengths = sentence_lengths(gold.src, gold.tgt)
    return score_alignments(read_alignments(gold.gold), links[offset:offset + len(lengths)], lengths)


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


def run_eflomal(corpus: BenchCorpus, settings: Settings) -> tuple[dict[str, EflomalReading], Path]:
    """eflomal on the training text, ``repeats`` times: each reading over the runs; and the
    folder with the :data:`GUIDE` links of the whole training text of the first run."""
    tool = venv_bin("eflomal", "eflomal-align")
    test_lengths = sentence_lengths(corpus.test.src, corpus.test.tgt)
    runs: dict[str, list[tuple[list, float, float]]] = {name: [] for name in EFLOMAL_READINGS}
    out = settings.folders(corpus.name).eflomal
    for repeat in range(settings.repeats):
        forward, reverse = out / f"{repeat}.forward.align", out / f"{repeat}.reverse.align"
        out.mkdir(parents=True, exist_ok=True)
        measured = run_step([str(tool), "-s", corpus.text("train", "de"), "-t", corpus.text("train", "en"),
                             "-f", forward, "-r", reverse, "--overwrite"], out / f"{repeat}.log", settings)
        for name, links in _eflomal_readings(forward, reverse, test_lengths).items():
            aer = links_score(corpus.test, links).aer
            runs[name].append((links, measured.seconds, aer))
    guide = _write_guide(corpus, out / "0.forward.align", out / "0.reverse.align", settings)
    results = {}
    for name, found in runs.items():
        ordered = sorted(found, key=lambda run: run[2])
        results[name] = EflomalReading(ordered[len(ordered) // 2][0], statistics.median(run[1] for run in found),
                                       [run[2] for run in found])
    return results, guide


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
