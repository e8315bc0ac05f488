"""Aligning a corpus of any size: the pairs a chunk at a time, each chunk's result kept on disk.

:func:`aligned_pairs` reads the pairs lazily, ``chunk_lines`` at a time, aligns a chunk, keeps
its alignments in a file of a :class:`~nmt_cli.resumable.ChunkFolder` (the words, soft
matrices and links, as :class:`~nmt_cli.alignment.output.SoftNpzWriter` writes them, with
float64 matrices so that nothing is rounded on the way) and yields them: memory holds one
chunk, never the corpus. A run that stops keeps its finished chunks, and the next one,
reading the same pairs with the same aligner settings, aligns only the others, so the
outputs it writes are exactly those of a run that never stopped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Iterable, Iterator

import numpy as np

from nmt_cli.alignment.api import Aligner
from nmt_cli.alignment.output import AlignmentOutputs, HeatmapChoice, SoftNpzWriter, load_soft_npz, write_outputs
from nmt_cli.alignment.reader import SentenceAlignment
from nmt_cli.pharaoh import iter_alignments
from nmt_cli.progress import Progress
from nmt_cli.resumable import CHUNKS, ChunkFolder
from nmt_cli.textio import CHUNK_LINES

__all__ = ["aligned_chunks", "aligned_pairs", "align_into"]

Pair = tuple[str, str]


def aligned_chunks(aligner: Aligner, folder: str | os.PathLike) -> ChunkFolder:
    """The folder that keeps ``aligner``'s finished chunks."""
    return ChunkFolder(folder, aligner.deciding_settings, ".npz")


def aligned_pairs(aligner: Aligner, pairs: Iterable[Pair], chunks: ChunkFolder, chunk_lines: int = CHUNK_LINES,
                  progress: Progress | None = None) -> Iterator[SentenceAlignment]:
    """Each (source, target) pair's alignment, in order, aligned ``chunk_lines`` pairs at a time
    with each chunk kept in ``chunks`` (:func:`aligned_chunks`; a chunk found there from a
    stopped run is not aligned again). ``progress`` counts the pairs aligned now; the caller
    removes the chunks once the alignments are written."""

    def align(chunk: list[Pair], handle: IO[bytes]) -> None:
        with SoftNpzWriter(handle, compress=False, matrix_dtype=np.float64) as writer:
            for k, sentence in enumerate(aligner.align([source for source, _ in chunk],
                                                       [target for _, target in chunk])):
                writer.add(k, sentence)
            writer.close({})

    for chunk, path, made in chunks.results(pairs, chunk_lines, align):
        if progress is not None and made:
            progress.update(len(chunk))
        yield from load_soft_npz(path)[0]


def align_into(aligner: Aligner, pairs: Iterable[Pair], out_dir: str | os.PathLike,
               heatmaps: HeatmapChoice = HeatmapChoice(),
               gold_path: str | os.PathLike | None = None, input_name: str = "<stdin>",
               chunk_lines: int = CHUNK_LINES, progress: bool = True, soft: bool = True) -> AlignmentOutputs:
    """``nmt align``: align ``pairs`` (read lazily; ``input_name`` names them in errors) into the
    files of :mod:`~nmt_cli.alignment.output` in ``out_dir``, ``chunk_lines`` pairs at a time,
    resuming from the chunks a stopped run left in ``out_dir/.chunks``, with the ``heatmaps``
    chosen; with ``gold_path``, its links (read in step with the pairs) are drawn on the
    heatmaps and scored; ``soft=False`` leaves out the soft files."""
    chunks = aligned_chunks(aligner, Path(out_dir) / CHUNKS)
    gold = iter_alignments(gold_path) if gold_path is not None else None
    counter = Progress("align", unit="pairs", enabled=progress)
    written = write_outputs(out_dir, aligned_pairs(aligner, pairs, chunks, chunk_lines, counter), aligner.settings,
                            heatmaps, gold, (input_name, str(gold_path)), soft)
    counter.close()
    chunks.remove()
    return written
