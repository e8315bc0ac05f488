"""Files ``nmt align`` writes into its output directory (each one atomically)::

    <out>/alignments.align   hard links, Pharaoh ``i-j`` (0-based source-target), a line per pair
    <out>/soft.npz           each pair's matrix (T_words, S_words), words and links, in blocks
                             of pairs (:class:`SoftNpzWriter`); plus settings (a JSON string);
                             no pickles
    <out>/soft.json          {"settings": ..., "sentences": [{"line", "src_words", "tgt_words",
                             "matrix", "links"}]}
    <out>/settings.json      the settings alone (checkpoint, step, layer/heads, shift, method, ...)
    <out>/heatmaps/line-N.png   heatmaps of the chosen pairs (N = 1-based line number)

:func:`write_outputs` takes the pairs as they come (an iterable, aligned a chunk at a time)
and writes each one into every file at once: the files grow a pair at a time and appear
when the last pair is in; only the pairs chosen for heatmaps are kept until then, a block of
pairs of ``soft.npz`` and its zip directory (six entries a block of
:data:`SOFT_BLOCK_PAIRS` pairs, written last). ``soft=False`` leaves both soft files out,
when only the links are wanted.
"""

from __future__ import annotations

import contextlib
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable, Iterator, Sequence

import numpy as np

from nmt_cli.alignment.aer import AlignmentCounts, AlignmentScore
from nmt_cli.alignment.heatmap import save_heatmap
from nmt_cli.alignment.reader import SentenceAlignment
from nmt_cli.errors import InputError, NmtError
from nmt_cli.fileio import atomic_open, atomic_write_json
from nmt_cli.pharaoh import GoldAlignment, format_links
from nmt_cli.textio import check_same_length

__all__ = ["SOFT_ARRAYS", "SOFT_BLOCK_PAIRS", "AlignmentOutputs", "HeatmapChoice", "SoftNpzWriter", "iter_soft_npz",
           "load_soft_npz", "write_outputs"]

JSON_DECIMALS = 4


#: pairs whose soft matrices share the entries of ``soft.npz`` (a block)
SOFT_BLOCK_PAIRS = 2000
#: the arrays of a block ``b`` of ``soft.npz``, each its entry ``NAME_b.npy``
SOFT_ARRAYS = ("shapes", "matrices", "word_counts", "words", "link_counts", "links")


class SoftNpzWriter:
    """A ``soft.npz`` written a pair at a time into ``handle``: the zip of ``.npy`` entries that
    ``np.savez`` makes (``compress``: as ``np.savez_compressed``), read by :func:`iter_soft_npz`.

    Pairs are written ``block_pairs`` at a time, each block ``b`` as the arrays of
    :data:`SOFT_ARRAYS`: ``shapes_b`` (pairs, 2), ``matrices_b`` (each pair's matrix
    flattened, one after another, as ``matrix_dtype``: float32 in ``soft.npz``),
    ``word_counts_b`` (pairs, 2: source, target), ``words_b`` (UTF-8 bytes, every word followed
    by a newline: a pair's source words, then its target words), ``link_counts_b`` (pairs,)
    and ``links_b`` (links, 2); then ``settings`` (a JSON string). So memory holds a block,
    and the zip's index, held until the file is closed, six entries a block, not four a pair."""

    def __init__(self, handle: IO[bytes], compress: bool = True, matrix_dtype: type = np.float32,
                 block_pairs: int = SOFT_BLOCK_PAIRS):
        self._zip = zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED,
                                    allowZip64=True)
        self._matrix_dtype = matrix_dtype
        self._block_pairs = block_pairs
        self._block: list[SentenceAlignment] = []
        self._blocks = 0

    def __enter__(self) -> "SoftNpzWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self._zip.close()  # after an error too: the zip lets go of the handle before it is thrown away

    def _array(self, name: str, array: np.ndarray) -> None:
        with self._zip.open(f"{name}.npy", "w", force_zip64=True) as entry:
            np.lib.format.write_array(entry, np.asanyarray(array), allow_pickle=False)

    def add(self, sentence: SentenceAlignment) -> None:
        """The next pair: its matrix, words and links."""
        self._block.append(sentence)
        if len(self._block) == self._block_pairs:
            self._write_block()

    def _write_block(self) -> None:
        block, b = self._block, self._blocks
        words = "".join(word + "\n" for sentence in block for word in (*sentence.src_words, *sentence.tgt_words))
        arrays = {
            "shapes": np.array([sentence.matrix.shape for sentence in block], dtype=np.int64).reshape(-1, 2),
            "matrices": np.concatenate([sentence.matrix.astype(self._matrix_dtype).ravel() for sentence in block]),
            "word_counts": np.array([(len(sentence.src_words), len(sentence.tgt_words)) for sentence in block],
                                    dtype=np.int64),
            "words": np.frombuffer(words.encode("utf-8"), dtype=np.uint8),
            "link_counts": np.array([len(sentence.links) for sentence in block], dtype=np.int64),
            "links": np.array([link for sentence in block for link in sentence.links], dtype=np.int64).reshape(-1, 2),
        }
        for name in SOFT_ARRAYS:
            self._array(f"{name}_{b}", arrays[name])
        self._block, self._blocks = [], b + 1

    def close(self, settings: dict) -> None:
        if self._block:
            self._write_block()
        self._array("settings", np.array(json.dumps(settings)))
        self._zip.close()


def iter_soft_npz(path: str | os.PathLike) -> Iterator[SentenceAlignment]:
    """The pairs :class:`SoftNpzWriter` wrote, in order, read a block at a time (a file of
    the layout before blocks, four entries a pair ``matrix_k``, ``src_words_k``,
    ``tgt_words_k``, ``links_k``, a pair at a time)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            for k in range(sum(1 for key in data.files if key.startswith("matrix_"))):
                yield SentenceAlignment(src_words=data[f"src_words_{k}"].tolist(),
                                        tgt_words=data[f"tgt_words_{k}"].tolist(), matrix=data[f"matrix_{k}"],
                                        links=[(int(i), int(j)) for i, j in data[f"links_{k}"]])
            blocks = sum(1 for key in data.files if key.startswith("matrices_"))
            for b in range(blocks):
                arrays = {name: data[f"{name}_{b}"] for name in SOFT_ARRAYS}
                words = bytes(arrays["words"]).decode("utf-8").split("\n")
                matrix_end = np.cumsum(arrays["shapes"].prod(axis=1))
                word_end = np.cumsum(arrays["word_counts"].sum(axis=1))
                link_end = np.cumsum(arrays["link_counts"])
                for k, (rows, columns) in enumerate(arrays["shapes"].tolist()):
                    matrix = arrays["matrices"][matrix_end[k] - rows * columns:matrix_end[k]].reshape(rows, columns)
                    sources, targets = arrays["word_counts"][k].tolist()
                    pair_words = words[word_end[k] - sources - targets:word_end[k]]
                    links = arrays["links"][link_end[k] - arrays["link_counts"][k]:link_end[k]]
                    yield SentenceAlignment(src_words=pair_words[:sources], tgt_words=pair_words[sources:],
                                            matrix=matrix, links=[(int(i), int(j)) for i, j in links])
    except (OSError, KeyError, ValueError, UnicodeDecodeError, zipfile.BadZipFile) as exc:
        raise NmtError(f"{path}: not a soft-alignment file written by nmt align ({exc})") from None


def load_soft_npz(path: str | os.PathLike) -> tuple[list[SentenceAlignment], dict]:
    """Every pair :class:`SoftNpzWriter` wrote, and the settings."""
    sentences = list(iter_soft_npz(path))
    try:
        with np.load(path, allow_pickle=False) as data:
            settings = json.loads(str(data["settings"]))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise NmtError(f"{path}: not a soft-alignment file written by nmt align ({exc})") from None
    return sentences, settings


def _json_sentence(k: int, sentence: SentenceAlignment) -> str:
    """Pair ``k``'s entry of ``soft.json``, weights rounded to :data:`JSON_DECIMALS` decimals."""
    return json.dumps({
        "line": k + 1,
        "src_words": sentence.src_words,
        "tgt_words": sentence.tgt_words,
        "matrix": np.round(sentence.matrix, JSON_DECIMALS).tolist(),
        "links": format_links(sentence.links),
    }, ensure_ascii=False)


@dataclass(frozen=True)
class HeatmapChoice:
    """The pairs drawn as heatmaps: the first ``first`` (as many as there are) and the 1-based
    ``lines`` (each must be there)."""

    first: int = 0
    lines: Sequence[int] = ()

    def wanted(self, line: int) -> bool:
        return line <= self.first or line in self.lines


@dataclass(frozen=True)
class AlignmentOutputs:
    """What :func:`write_outputs` wrote: the files, the heatmaps, the number of pairs and,
    given gold links, their score."""

    paths: list[Path]
    heatmaps: list[Path]
    pairs: int
    score: AlignmentScore | None


def write_outputs(
    out_dir: str | os.PathLike,
    sentences: Iterable[SentenceAlignment],
    settings: dict,
    heatmaps: HeatmapChoice = HeatmapChoice(),
    gold: Iterable[GoldAlignment] | None = None,
    names: tuple[str, str] = ("<input>", "<gold>"),
    soft: bool = True,
) -> AlignmentOutputs:
    """Write every output file listed in the module docstring (``soft=False``: not
    ``soft.npz`` and ``soft.json``), a pair at a time as ``sentences`` yields them, and the
    ``heatmaps`` chosen. ``gold`` (read in step with the pairs) is drawn on the heatmaps and
    scored; ``names`` name the input and the gold file in the errors of a gold file that does
    not pair with it."""
    out_dir = Path(out_dir)
    names_written = ("alignments.align", "soft.npz", "soft.json", "settings.json") if soft else \
        ("alignments.align", "settings.json")
    paths = [out_dir / name for name in names_written]
    drawn: dict[int, tuple[SentenceAlignment, GoldAlignment | None]] = {}
    golds = iter(gold) if gold is not None else None
    counts = AlignmentCounts()
    pairs = 0
    with contextlib.ExitStack() as outputs:
        links_out = outputs.enter_context(atomic_open(paths[0], "w"))
        if soft:
            soft_npz = outputs.enter_context(SoftNpzWriter(outputs.enter_context(atomic_open(paths[1], "wb"))))
            soft_json = outputs.enter_context(atomic_open(paths[2], "w"))
            soft_json.write('{"settings": ' + json.dumps(settings, ensure_ascii=False) + ',\n "sentences": [')
        for k, sentence in enumerate(sentences):
            pair_gold = None
            if golds is not None:
                pair_gold = next(golds, None)
                if pair_gold is None:
                    raise InputError(names[1], f"has {k} lines but {names[0]} goes on; they must pair line by line")
                counts.add(pair_gold, sentence.links, (len(sentence.src_words), len(sentence.tgt_words)))
            links_out.write(format_links(sentence.links) + "\n")
            if soft:
                soft_npz.add(sentence)
                soft_json.write(("\n" if k == 0 else ",\n") + _json_sentence(k, sentence))
            if heatmaps.wanted(k + 1):
                drawn[k + 1] = (sentence, pair_gold)
            pairs = k + 1
        if golds is not None and next(golds, None) is not None:
            check_same_length(names[0], pairs, names[1], pairs + 1 + sum(1 for _ in golds))
        outside = sorted(set(heatmaps.lines) - set(drawn))
        if outside:
            raise NmtError(f"heatmap line {outside[0]} is out of range: there are {pairs} sentence pairs")
        if soft:
            soft_json.write("\n]}\n")
            soft_npz.close(settings)
    atomic_write_json(paths[-1], settings)
    return AlignmentOutputs(paths, _write_heatmaps(out_dir / "heatmaps", drawn), pairs,
                            counts.score() if golds is not None else None)


def _write_heatmaps(directory: Path, drawn: dict) -> list[Path]:
    """One PNG per chosen line (``drawn``: line -> its sentence and gold links), hard links
    (and gold links) drawn on top."""
    written = []
    for line, (sentence, gold) in sorted(drawn.items()):
        path = directory / f"line-{line:06d}.png"
        save_heatmap(path, sentence.matrix, sentence.src_words, sentence.tgt_words, links=sentence.links,
                     gold=gold, title=f"line {line}")
        written.append(path)
    return written
