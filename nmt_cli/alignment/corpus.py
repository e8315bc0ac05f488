"""Aligning a corpus of any size: the pairs a chunk at a time, each chunk's result kept on disk.

:func:`aligned_pairs` reads the pairs lazily, ``chunk_lines`` at a time, aligns a chunk, keeps
its alignments in a file of a :class:`~nmt_cli.resumable.ChunkFolder` (the words, soft
matrices and links, as :class:`~nmt_cli.alignment.output.SoftNpzWriter` writes them, with
float64 matrices so that nothing is rounded on the way) and yields them: memory holds one
chunk, never the corpus. A run that stops keeps its finished chunks, and the next one,
reading the same pairs with the same aligner settings, aligns only the others, so the
outputs it writes are exactly those of a run that never stopped.

:func:`align_links_into` does the same for a Pharaoh file alone (the links of ``nmt align
bootstrap``, of ``nmt shortlist --aligner`` and of ``nmt distill``'s shortlist stage): each
chunk keeps only its lines, in :func:`link_chunks` beside the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable, Iterator, TextIO

import numpy as np

from nmt_cli.alignment.api import Aligner
from nmt_cli.alignment.output import AlignmentOutputs, HeatmapChoice, SoftNpzWriter, iter_soft_npz, write_outputs
from nmt_cli.alignment.reader import SentenceAlignment
from nmt_cli.fileio import atomic_open
from nmt_cli.pharaoh import format_links, iter_alignments
from nmt_cli.progress import Progress
from nmt_cli.resumable import CHUNKS, ChunkFolder
from nmt_cli.textio import CHUNK_LINES, iter_lines

__all__ = ["LinksWritten", "aligned_chunks", "aligned_pairs", "align_into", "align_links_into", "link_chunks"]

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
            for sentence in aligner.align([source for source, _ in chunk], [target for _, target in chunk]):
                writer.add(sentence)
            writer.close({})

    for chunk in chunks.results(pairs, chunk_lines, align, progress):
        yield from iter_soft_npz(chunk.path)


def align_into(aligner: Aligner, pairs: Iterable[Pair], out_dir: str | os.PathLike,
               heatmaps: HeatmapChoice = HeatmapChoice(),
               gold_path: str | os.PathLike | None = None, input_name: str = "<stdin>",
               chunk_lines: int = CHUNK_LINES, progress: bool = True, soft: bool = True,
               total: int | None = None) -> AlignmentOutputs:
    """``nmt align``: align ``pairs`` (read lazily; ``input_name`` names them in errors) into the
    files of :mod:`~nmt_cli.alignment.output` in ``out_dir``, ``chunk_lines`` pairs at a time,
    resuming from the chunks a stopped run left in ``out_dir/.chunks``, with the ``heatmaps``
    chosen; with ``gold_path``, its links (read in step with the pairs) are drawn on the
    heatmaps and scored; ``soft=False`` leaves out the soft files. ``total``: the pairs, when
    known, for the progress's ETA."""
    chunks = aligned_chunks(aligner, Path(out_dir) / CHUNKS)
    gold = iter_alignments(gold_path) if gold_path is not None else None
    todo = None if total is None else chunks.remaining(total, chunk_lines)
    counter = Progress("align", total=todo, unit="pairs", enabled=progress)
    written = write_outputs(out_dir, aligned_pairs(aligner, pairs, chunks, chunk_lines, counter), aligner.settings,
                            heatmaps, gold, (input_name, str(gold_path)), soft)
    counter.close()
    chunks.remove()
    return written


@dataclass(frozen=True)
class LinksWritten:
    """What :func:`align_links_into` wrote: pairs, links, and the seconds its chunks took to
    align, in whichever session aligned them."""

    pairs: int
    links: int
    seconds: float


def link_chunks(target: str | os.PathLike, aligner: Aligner | None = None) -> ChunkFolder:
    """The folder ``TARGET.chunks`` that keeps the finished chunks of the Pharaoh file
    ``target``, keyed by ``aligner``'s settings (None: a folder opened to remove them)."""
    target = Path(target)
    settings = aligner.deciding_settings if aligner is not None else None
    return ChunkFolder(target.parent / f"{target.name}{CHUNKS}", settings, ".align")


def align_links_into(aligner: Aligner, pairs: Iterable[Pair], target: str | os.PathLike,
                     chunk_lines: int = CHUNK_LINES, total: int | None = None, label: str = "align",
                     stream: TextIO | None = None) -> LinksWritten:
    """Align ``pairs`` (read lazily) ``chunk_lines`` at a time into the Pharaoh file ``target``
    (atomically), each chunk's lines kept in :func:`link_chunks` so that a rerun aligns only
    the chunks not finished; the caller removes them once what it makes of the links is
    written. Progress (``label``, on ``stream``; none without one) counts the pairs aligned
    now, of the ``total`` pairs when it is given."""
    chunks = link_chunks(target, aligner)

    def align(chunk: list[Pair], handle: IO[bytes]) -> None:
        for sentence in aligner.align([source for source, _ in chunk], [tgt for _, tgt in chunk]):
            handle.write((format_links(sentence.links) + "\n").encode("utf-8"))

    count = links = 0
    seconds = 0.0
    todo = None if total is None else chunks.remaining(total, chunk_lines)
    with atomic_open(target) as handle, Progress(label, total=todo, enabled=stream is not None,
                                                 stream=stream) as counter:
        for chunk in chunks.results(pairs, chunk_lines, align, counter):
            for line in iter_lines(chunk.path):
                handle.write(line + "\n")
                links += len(line.split())
            count += len(chunk.items)
            seconds += chunk.seconds
    return LinksWritten(count, links, seconds)
