"""Build a lexical shortlist (:mod:`nmt_cli.shortlist`) from a parallel corpus and its word links.

The links are given (a Pharaoh file, a line per pair: ``nmt align``'s, eflomal's, fast_align's)
or made here by nmt-cli's aligner (:class:`~nmt_cli.alignment.api.Aligner`: one model or an
ensemble, optionally with a reverse-direction model and symmetrization), ``chunk_lines``
pairs at a time through a :class:`~nmt_cli.resumable.ChunkFolder`, so that an interrupted
alignment resumes at its first unfinished chunk (``nmt shortlist --aligner``, ``nmt
distill``'s shortlist stage).

Word links become piece links as ``nmt prepare`` makes them (:func:`nmt_cli.data.links.piece_links`:
a word link links every piece of both words); a pair whose pieces spell other words than
its whitespace tokens adds its target pieces to the frequency counts but no links
(``unmatched_pairs``).
"""

from __future__ import annotations

import itertools
import os
from typing import Iterator, Sequence, TextIO

import numpy as np

from nmt_cli.alignment.api import Aligner, AlignOptions
from nmt_cli.alignment.corpus import align_links_into, link_chunks
from nmt_cli.checkpoint import tokenizer_directory
from nmt_cli.data.links import piece_links
from nmt_cli.errors import InputError, NmtError
from nmt_cli.pharaoh import parse_links
from nmt_cli.progress import Progress
from nmt_cli.shortlist import (DEFAULT_FREQUENT, DEFAULT_K, Shortlist, ShortlistCounts, build_shortlist_from_counts,
                               tokenizer_identity, write_shortlist)
from nmt_cli.textio import CHUNK_LINES, count_lines, iter_lines
from nmt_cli.tokenization import Tokenizer
from nmt_cli.tokenization.spm import word_spans

__all__ = ["align_in_chunks", "build_shortlist", "shortlist_from_links"]

#: pairs encoded together (SentencePiece's batch call)
ENCODE_BATCH = 10_000


def paired_lines(*paths: str | os.PathLike) -> Iterator[tuple[str, ...]]:
    """The files' lines side by side; files of different lengths are a one-line error naming
    the shorter one."""
    count = 0
    for lines in itertools.zip_longest(*(iter_lines(path) for path in paths)):
        if any(line is None for line in lines):
            short = paths[lines.index(None)]
            raise InputError(short, f"ends at line {count:,} but the other files go on; they must pair line by line")
        count += 1
        yield lines


def shortlist_from_links(source: str | os.PathLike, target: str | os.PathLike, links: str | os.PathLike,
                         tokenizer: Tokenizer, k: int = DEFAULT_K, frequent: int = DEFAULT_FREQUENT,
                         stream: TextIO | None = None, built_from: dict | None = None) -> Shortlist:
    """The shortlist of the pairs ``source``/``target`` (a sentence a line) and their word
    links ``links`` (Pharaoh, a line per pair), in ``tokenizer``'s pieces."""
    counts = ShortlistCounts(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    unmatched = 0
    lines = enumerate(paired_lines(source, target, links), start=1)
    with Progress("shortlist", total=count_lines(source), unit="pairs", enabled=stream is not None,
                  stream=stream) as progress:
        while batch := list(itertools.islice(lines, ENCODE_BATCH)):
            src_pieces = tokenizer.src.encode([src for _, (src, _, _) in batch], out_type=str)
            tgt_pieces = tokenizer.tgt.encode([tgt for _, (_, tgt, _) in batch], out_type=str)
            for (number, (src_text, tgt_text, link_text)), src, tgt in zip(batch, src_pieces, tgt_pieces):
                word_links = parse_links(link_text, links, number).possible
                src_ids, tgt_ids = tokenizer.src.piece_to_id(src), tokenizer.tgt.piece_to_id(tgt)
                src_words, tgt_words = word_spans(src), word_spans(tgt)
                if len(src_words) != len(src_text.split()) or len(tgt_words) != len(tgt_text.split()):
                    unmatched += 1
                    counts.add(src_ids, tgt_ids, _NO_LINKS)
                    continue
                outside = [(i, j) for i, j in word_links if i >= len(src_words) or j >= len(tgt_words)]
                if outside:
                    i, j = min(outside)
                    raise InputError(links, f"link {i}-{j} is outside the pair ({len(src_words)} source and "
                                            f"{len(tgt_words)} target words)", number)
                counts.add(src_ids, tgt_ids, piece_links(word_links, src, tgt))
            progress.update(len(batch))
    record = {"links_file": str(links), "unmatched_pairs": unmatched, **(built_from or {})}
    return build_shortlist_from_counts(counts, tokenizer_identity(tokenizer), k, frequent, record)


_NO_LINKS = np.zeros((0, 2), dtype=np.int64)


def align_in_chunks(aligners: Sequence[str | os.PathLike], source: str | os.PathLike, target: str | os.PathLike,
                    out: str | os.PathLike, reverse: Sequence[str | os.PathLike] = (),
                    options: AlignOptions = AlignOptions(), device: str = "cpu", chunk_lines: int = CHUNK_LINES,
                    stream: TextIO | None = None) -> dict:
    """Word links of every pair by ``aligners`` (with ``reverse``: symmetrized) into the Pharaoh
    file ``out``, resumable (:func:`~nmt_cli.alignment.corpus.align_links_into`: its chunks,
    kept in ``<out>.chunks/``, are removed by the caller once the shortlist is written, with
    :func:`~nmt_cli.alignment.corpus.link_chunks`); returns what the alignment cost and which
    aligner made it."""
    aligner = Aligner(list(aligners), options, device, list(reverse) or None)
    written = align_links_into(aligner, paired_lines(source, target), out, chunk_lines, count_lines(source),
                               "shortlist align", stream)
    return {"pairs": written.pairs, "chunks": -(-written.pairs // chunk_lines),
            "align_seconds": round(written.seconds, 1), "aligner": aligner.settings}


def build_shortlist(source: str | os.PathLike, target: str | os.PathLike, tokenizer_from: str | os.PathLike,
                    links: str | os.PathLike | None = None, aligners: Sequence[str | os.PathLike] = (),
                    reverse: Sequence[str | os.PathLike] = (), k: int = DEFAULT_K,
                    frequent: int = DEFAULT_FREQUENT, device: str = "cpu", stream: TextIO | None = None,
                    aligned: str | os.PathLike | None = None, out: str | os.PathLike | None = None) -> Shortlist:
    """``nmt shortlist``: the shortlist of a corpus in the pieces of ``tokenizer_from`` (a
    prepared, checkpoint, run or export directory), from the Pharaoh ``links`` or, without
    them, from the links ``aligners`` make (written to the Pharaoh file ``aligned``, resumable
    until the shortlist is written); written to ``out`` (:func:`~nmt_cli.shortlist.write_shortlist`)."""
    if (links is None) == (not aligners):
        raise NmtError("shortlist: give either word links (--links) or an aligner (--aligner), not both or neither")
    tokenizer = Tokenizer.from_directory(tokenizer_directory(tokenizer_from))
    built_from: dict = {"source": str(source), "target": str(target)}
    if links is None:
        if aligned is None:
            raise NmtError("shortlist: aligning needs a file for its links")
        links = aligned
        built_from["aligner"] = align_in_chunks(aligners, source, target, links, reverse, device=device,
                                                stream=stream)["aligner"]
    built = shortlist_from_links(source, target, links, tokenizer, k, frequent, stream, built_from)
    if out is not None:
        write_shortlist(out, built)
    if aligners:
        link_chunks(links).remove()  # the shortlist holds what they were for
    return built
