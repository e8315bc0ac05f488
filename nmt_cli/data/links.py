"""Word links of a split: read beside its pairs, then carried from words to SentencePiece pieces.

``data.alignment_path`` names a folder with ``<split>.align`` Pharaoh files (``i-j``:
source word ``i``, target word ``j``, 0-based whitespace tokens; one line per pair of the
source split, in order; an empty line is a pair without links). ``nmt prepare`` reads
the file in step with the pairs (:func:`attach_links`), so cleaning keeps or drops a
pair's links with the pair, and writes two files per split:

* ``<split>.align``: the word links of the kept pairs, as given (references, AER);
* ``<split>.links.bin`` / ``.idx.npy``: the same links between pieces
  (:func:`piece_links`), flat ``(source piece, target piece)`` pairs per sentence, read
  by :class:`nmt_cli.data.binarized.ParallelSplit` as ``split.links[i]`` (shape (n, 2)).

A word link ``(i, j)`` links every piece of source word ``i`` with every piece of target
word ``j`` (the convention of OpenNMT-py and fairseq for subword alignments). Piece
positions count the pieces of the sentence without BOS/EOS: source piece ``s`` is
column ``s`` of the cross-attention, target piece ``t`` the row that predicts it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from nmt_cli.data.binarized import TokenArrayWriter
from nmt_cli.data.cleaning import normalize_text
from nmt_cli.data.sources import RawPair
from nmt_cli.errors import InputError
from nmt_cli.pharaoh import Link, parse_links
from nmt_cli.progress import Progress
from nmt_cli.textio import iter_lines
from nmt_cli.tokenization import Tokenizer
from nmt_cli.tokenization.spm import word_spans

__all__ = ["LINK_DTYPE", "attach_links", "piece_links", "write_piece_links"]

LINK_DTYPE = np.dtype(np.int32)
ENCODE_BATCH = 10_000


def attach_links(pairs: Iterable[RawPair], path: Path, normalize: bool) -> Iterator[RawPair]:
    """Each pair with the next line of ``path`` as its ``alignment``, checked against its words.

    A bad link, an index beyond the pair's words (as cleaning will leave them) or a file
    with another number of lines than the split has pairs raises :class:`InputError`
    naming the file and line. Stops reading when the consumer stops (``max_train_pairs``).
    """
    lines = iter_lines(path)
    number = 0
    for number, pair in enumerate(pairs, start=1):
        text = next(lines, None)
        if text is None:
            raise InputError(path, f"ends at line {number - 1}, but the split goes on (one line per pair)", number)
        if pair.problem is None:
            _check_range(parse_links(text, path, number).possible, pair, normalize, path, number)
        yield dataclasses.replace(pair, alignment=text)
    if next(lines, None) is not None:
        raise InputError(path, f"has more lines than the split's {number} pairs (one line per pair)", number + 1)


def _check_range(links: Iterable[Link], pair: RawPair, normalize: bool, path: Path, number: int) -> None:
    sizes = [len((normalize_text(text) if normalize else text).split()) for text in (pair.source, pair.target)]
    for i, j in sorted(links):
        if i >= sizes[0] or j >= sizes[1]:
            raise InputError(path, f"link {i}-{j} is outside the pair ({sizes[0]} source and {sizes[1]} target "
                                   "words)", number)


def piece_links(links: Iterable[Link], src_pieces: Sequence[str], tgt_pieces: Sequence[str]) -> np.ndarray:
    """Word links -> (n, 2) ``(source piece, target piece)`` positions, sorted by target piece."""
    src_spans, tgt_spans = word_spans(src_pieces), word_spans(tgt_pieces)
    pairs = {(s, t) for i, j in links for s in src_spans[i] for t in tgt_spans[j]}
    return np.asarray(sorted(pairs, key=lambda st: (st[1], st[0])), dtype=LINK_DTYPE).reshape(-1, 2)


def _same_words(pieces: Sequence[str], text: str) -> bool:
    """Whether the pieces spell the text's whitespace words (word ``k`` = token ``k``)."""
    return len(word_spans(pieces)) == len(text.split())


def write_piece_links(directory: Path, split: str, src_lang: str, tgt_lang: str, tokenizer: Tokenizer,
                      pairs: int, progress: bool) -> dict[str, int]:
    """Map ``<split>.align`` to pieces into ``<split>.links.*``; counts for the manifest.

    A pair whose pieces spell other words than its whitespace tokens keeps its word links
    in ``<split>.align`` but gets no piece links (counted as ``unmatched_pairs``).
    """
    writer = TokenArrayWriter(directory / f"{split}.links", LINK_DTYPE)
    counts = {"pairs_with_links": 0, "word_links": 0, "piece_links": 0, "unmatched_pairs": 0}
    texts = zip(iter_lines(directory / f"{split}.{src_lang}"), iter_lines(directory / f"{split}.{tgt_lang}"),
                iter_lines(directory / f"{split}.align"))
    try:
        with Progress(f"links {split}", pairs, unit="sentences", enabled=progress) as bar:
            while batch := list(zip(range(ENCODE_BATCH), texts)):
                _write_batch(writer, tokenizer, [item for _, item in batch], directory / f"{split}.align", counts)
                bar.update(len(batch))
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return counts


def _write_batch(writer: TokenArrayWriter, tokenizer: Tokenizer, batch: list[tuple[str, str, str]], path: Path,
                 counts: dict[str, int]) -> None:
    src_pieces = tokenizer.src.encode([src for src, _, _ in batch], out_type=str)
    tgt_pieces = tokenizer.tgt.encode([tgt for _, tgt, _ in batch], out_type=str)
    sentences = []
    for (src_text, tgt_text, text), src, tgt in zip(batch, src_pieces, tgt_pieces):
        links = parse_links(text, path).possible
        counts["word_links"] += len(links)
        if _same_words(src, src_text) and _same_words(tgt, tgt_text):
            mapped = piece_links(links, src, tgt)
        else:
            counts["unmatched_pairs"] += 1
            mapped = np.zeros((0, 2), dtype=LINK_DTYPE)
        counts["pairs_with_links"] += bool(len(mapped))
        counts["piece_links"] += len(mapped)
        sentences.append(mapped.reshape(-1).tolist())
    writer.extend(sentences)
