"""Memory of writing ``nmt align``'s ``soft.npz`` as the pairs grow: blocks of pairs, or an entry per array a pair.

``SoftNpzWriter`` (blocks of ``SOFT_BLOCK_PAIRS`` pairs, six arrays a block) and the layout
it replaced (four ``.npy`` entries a pair: ``matrix_k``, ``src_words_k``, ``tgt_words_k``,
``links_k``, written here as that writer did) each write the same pairs into a file; the
figure is the peak of the memory Python and numpy allocate while writing (``tracemalloc``),
above what was allocated before: the zip's index, which stays in memory until the file is
closed, and the pairs held. Every pair is the same 12 x 10 matrix with its words and links,
made once, so nothing but the writer's memory is counted.
"""

from __future__ import annotations

import json
import os
import time
import tracemalloc
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
from common import Report, bench_arguments, fmt, fresh_dir

from nmt_cli.alignment.output import SoftNpzWriter
from nmt_cli.alignment.reader import SentenceAlignment

#: pairs written in each layout (the layout before blocks is slow under tracemalloc: fewer)
PAIRS = {"blocks": (10_000, 40_000, 160_000), "entries": (10_000, 40_000)}
QUICK_PAIRS = {"blocks": (2_000, 8_000), "entries": (500, 2_000)}


def one_pair() -> SentenceAlignment:
    """A pair of 10 source and 12 target words, its matrix and a link a target word."""
    matrix = np.random.default_rng(0).random((12, 10))
    return SentenceAlignment([f"quelle{i}" for i in range(10)], [f"target{j}" for j in range(12)],
                             matrix / matrix.sum(axis=1, keepdims=True), [(j % 10, j) for j in range(12)])


def write_blocks(path: Path, pair: SentenceAlignment, pairs: int) -> None:
    with open(path, "wb") as handle, SoftNpzWriter(handle) as writer:
        for _ in range(pairs):
            writer.add(pair)
        writer.close({})


def write_entry_per_pair(path: Path, pair: SentenceAlignment, pairs: int) -> None:
    """The layout before blocks: four ``.npy`` zip entries a pair."""
    with open(path, "wb") as handle, zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
        def array(name: str, value: np.ndarray) -> None:
            with archive.open(f"{name}.npy", "w", force_zip64=True) as entry:
                np.lib.format.write_array(entry, np.asanyarray(value), allow_pickle=False)

        for k in range(pairs):
            array(f"matrix_{k}", pair.matrix.astype(np.float32))
            array(f"src_words_{k}", np.array(pair.src_words, dtype=str))
            array(f"tgt_words_{k}", np.array(pair.tgt_words, dtype=str))
            array(f"links_{k}", np.array(pair.links, dtype=np.int64).reshape(-1, 2))
        array("settings", np.array(json.dumps({})))


def measure(write: Callable[[Path, SentenceAlignment, int], None], path: Path, pairs: int) -> tuple[int, int, float]:
    """Peak bytes allocated while writing (above the start), zip entries, seconds."""
    pair = one_pair()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    began = time.perf_counter()
    write(path, pair, pairs)
    seconds = time.perf_counter() - began
    peak = tracemalloc.get_traced_memory()[1] - start
    tracemalloc.stop()
    with zipfile.ZipFile(path) as archive:
        entries = len(archive.namelist())
    path.unlink()
    return peak, entries, seconds


def main() -> None:
    args = bench_arguments(__doc__.splitlines()[0]).parse_args()
    work = fresh_dir(args.work / "soft_npz_memory")
    report = Report("soft_npz_memory", "soft.npz: memory while writing, by pairs", [
        "layout", "pairs", "zip entries", "peak memory (MiB)", "bytes a pair", "seconds"], quick=args.quick)
    load = os.getloadavg()
    layouts = (("blocks", "blocks of 2,000 pairs (now)", write_blocks),
               ("entries", "4 entries a pair (before)", write_entry_per_pair))
    for layout, name, write in layouts:
        for pairs in (QUICK_PAIRS if args.quick else PAIRS)[layout]:
            peak, entries, seconds = measure(write, work / "soft.npz", pairs)
            report.add_row(name, f"{pairs:,}", f"{entries:,}", fmt(peak / 2**20, 1), fmt(peak / pairs, 1),
                           fmt(seconds, 1))
    report.notes += [
        "Peak of tracemalloc's traced memory (Python objects and numpy arrays) while one writer writes the "
        "file, above what was allocated before it began: the zip index and the pairs the writer holds; "
        "single runs, seconds under tracemalloc (slower than without).",
        "Every pair is the same 12 x 10 float32 matrix with 10 + 12 words and 12 links; the file is deflated "
        "as nmt align writes it.",
        f"Load average (1/5/15 minutes) when measured: {'/'.join(f'{value:.1f}' for value in load)}; the machine "
        "is shared, so the seconds are not benchmark figures (the memory does not depend on the load).",
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
