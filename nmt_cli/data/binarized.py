"""Token ids on disk, in shards, read a sentence or a block at a time: nothing here grows with the corpus.

A split's side (``<prefix>`` = ``<dir>/<split>.<src|tgt>``) is:

* ``<prefix>.lengths.npy``: ``uint32`` token count of every sentence of the split, in order;
* shards ``<prefix>.<k>.bin`` (``k`` = ``00000``, ``00001`` ...): the ids of a run of at most
  ``data.shard_pairs`` consecutive sentences, concatenated (no BOS/EOS), dtype ``uint16``
  when the vocabulary has fewer than 65,536 entries, else ``int32``; a shard never holds
  sentences of two corpora (``data.corpora``), so each corpus stays a run of shards of its own;
* ``<prefix>.<k>.idx.npy``: ``int64`` offsets of length ``n + 1`` into that shard's ids.

Writers stream: ids go straight to the file, offsets and lengths to files of their own, so
no per-sentence Python object and no whole-split array is held. A prepared directory is
built under a temporary name and renamed into place whole (:mod:`nmt_cli.fileio`), so a
kill never leaves a half-written split behind. Readers check that each index and its ids
agree when a shard is opened (a truncated or replaced file fails naming it, not in the
middle of training). The lengths are memory-mapped (``.lengths``); batching and collation
read lengths and ids by plain reads (:meth:`ShardedTokenArray.read_lengths`,
:meth:`TokenArray.__getitem__`), so the pages of a large split never stay counted in the
training process's RSS.

The piece links of a split (:mod:`nmt_cli.data.links`) are one unsharded array of the same
kind, ``<prefix>.bin`` + ``<prefix>.idx.npy`` (:class:`TokenArrayWriter`, :class:`TokenArray`).
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from nmt_cli.errors import NmtError
from nmt_cli.fileio import atomic_open

SIDES = ("src", "tgt")
LENGTH_DTYPE = np.dtype(np.uint32)
#: bytes copied at a time when an offsets spill file becomes an ``.npy``
_COPY_CHUNK = 1 << 22


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


def shard_name(split: str, side: str, shard: int) -> str:
    """``train.src.00003``: the stem of a shard's ``.bin`` and ``.idx.npy``."""
    return f"{split}.{side}.{shard:05d}"


def array_files(split: str, shards: int) -> list[str]:
    """Names of the files holding the token ids of ``split`` (both sides, ``shards`` shards each)."""
    return [name for side in SIDES for name in
            [f"{split}.{side}.lengths.npy"] + [f"{shard_name(split, side, k)}{suffix}"
                                               for k in range(shards) for suffix in (".bin", ".idx.npy")]]


def shard_sizes(parts: Sequence[int], shard_pairs: int) -> list[int]:
    """Sentences per shard for a split made of ``parts`` (pairs of each corpus, in order):
    each part cut into shards of at most ``shard_pairs``, never one shard across two parts."""
    sizes = []
    for count in parts:
        sizes += [min(shard_pairs, count - start) for start in range(0, count, shard_pairs)]
    return sizes


class _NpyStream:
    """A 1-D ``.npy`` file written by appending blocks: the element count goes in its header
    when it closes (the blocks wait in a spill file beside it until then)."""

    def __init__(self, path: Path, dtype: np.dtype):
        self.path, self.dtype, self.count = path, np.dtype(dtype), 0
        self._spill_path = path.with_name(f".{path.name}.spill")
        self._spill = open(self._spill_path, "wb")

    def write(self, values: np.ndarray) -> None:
        self._spill.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.count += len(values)

    def close(self) -> None:
        self._spill.close()
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (self.count,)}
        with atomic_open(self.path, "wb") as out, open(self._spill_path, "rb") as spilled:
            np.lib.format.write_array_header_1_0(out, header)
            shutil.copyfileobj(spilled, out, _COPY_CHUNK)
        self._spill_path.unlink()

    def abort(self) -> None:
        self._spill.close()
        self._spill_path.unlink(missing_ok=True)


class TokenArrayWriter:
    """Append sentences of token ids; ``close()`` publishes ``<prefix>.bin`` and ``<prefix>.idx.npy``."""

    def __init__(self, prefix: str | os.PathLike, dtype: np.dtype):
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        self._bin_ctx = atomic_open(self.prefix.with_name(self.prefix.name + ".bin"), "wb")
        self._bin = self._bin_ctx.__enter__()
        self._offsets = _NpyStream(self.prefix.with_name(self.prefix.name + ".idx.npy"), np.int64)
        self._offsets.write(np.zeros(1, dtype=np.int64))
        self._total = 0

    def append(self, ids: list[int] | np.ndarray) -> None:
        self.extend([ids])

    def extend(self, sentences: Sequence[Sequence[int]]) -> np.ndarray:
        """Append many sentences with one write; their lengths."""
        lengths = np.fromiter((len(s) for s in sentences), dtype=np.int64, count=len(sentences))
        flat = np.fromiter(itertools.chain.from_iterable(sentences), dtype=self.dtype, count=int(lengths.sum()))
        self._bin.write(flat.tobytes())
        ends = self._total + np.cumsum(lengths)
        self._offsets.write(ends)
        self._total = int(ends[-1]) if len(ends) else self._total
        return lengths

    def __len__(self) -> int:
        return self._offsets.count - 1

    @property
    def num_tokens(self) -> int:
        return self._total

    def close(self) -> None:
        self._bin_ctx.__exit__(None, None, None)
        self._offsets.close()

    def abort(self) -> None:
        """Drop what was written (the temporary files are removed)."""
        self._offsets.abort()
        try:
            self._bin_ctx.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)
        except KeyboardInterrupt:
            pass


class ShardedTokenWriter:
    """One side of a split, written shard by shard: :meth:`extend` cuts sentences at the
    shard sizes given (:func:`shard_sizes`) and records every length in ``.lengths.npy``."""

    def __init__(self, directory: Path, split: str, side: str, dtype: np.dtype, sizes: Sequence[int]):
        self.directory, self.split, self.side, self.dtype = directory, split, side, np.dtype(dtype)
        self.sizes = list(sizes)
        self._lengths = _NpyStream(directory / f"{split}.{side}.lengths.npy", LENGTH_DTYPE)
        self._shard, self._writer = -1, None
        self.num_tokens, self.longest = 0, 0

    def extend(self, sentences: list[list[int]]) -> None:
        while sentences:
            if self._writer is None or len(self._writer) == self.sizes[self._shard]:
                self._next_shard()
            room = self.sizes[self._shard] - len(self._writer)
            lengths = self._writer.extend(sentences[:room])
            self._lengths.write(lengths)
            self.num_tokens += int(lengths.sum())
            self.longest = max(self.longest, int(lengths.max(initial=0)))
            sentences = sentences[room:]

    def _next_shard(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._shard += 1
        if self._shard >= len(self.sizes):
            raise ValueError(f"more sentences than the {sum(self.sizes)} the shards of {self.split} hold")
        self._writer = TokenArrayWriter(self.directory / shard_name(self.split, self.side, self._shard), self.dtype)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._lengths.count != sum(self.sizes):
            raise ValueError(f"{self.split}.{self.side}: wrote {self._lengths.count} sentences, the shards "
                             f"hold {sum(self.sizes)}")
        self._lengths.close()

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.abort()
        self._lengths.abort()


class TokenArray:
    """Read-only view of one array of sentences (a shard, or a split's links).

    Sentences are read with ``os.pread`` (their two offsets, then their ids), not through a
    memory map: batches pick sentences all over a shard, and the pages a map faults in
    (with the kernel's read-ahead around each) stay counted in the reading process's RSS,
    which would then grow with the corpus as training goes on.
    """

    def __init__(self, prefix: str | os.PathLike, dtype: np.dtype | str):
        prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        self.index_path = prefix.with_name(prefix.name + ".idx.npy")
        self.bin_path = prefix.with_name(prefix.name + ".bin")
        try:
            offsets = np.load(self.index_path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise NmtError(f"{self.index_path}: not a token index ({exc}); prepare the data again") from None
        if offsets.ndim != 1 or len(offsets) == 0 or offsets.dtype != np.int64 or offsets[0] != 0:
            raise NmtError(f"{self.index_path}: not a token index (offsets must rise from 0); prepare the data again")
        self._count, self._header = len(offsets) - 1, offsets.offset
        expected = int(offsets[-1]) * self.dtype.itemsize
        del offsets
        size = self.bin_path.stat().st_size if self.bin_path.is_file() else None
        if size != expected:
            found = "is missing" if size is None else f"has {size:,} bytes"
            raise NmtError(f"{self.bin_path}: {found} but its index needs {expected:,} (truncated or changed since "
                           "nmt prepare); prepare the data again")
        self._files: tuple[int, int] | None = None  # (index, ids) descriptors, opened at the first read

    def read_lengths(self) -> np.ndarray:
        """Every sentence's length, from the index read whole (:meth:`ShardedTokenArray.check`);
        fails unless the offsets rise."""
        lengths = np.diff(np.load(self.index_path, allow_pickle=False))
        if (lengths < 0).any():
            raise NmtError(f"{self.index_path}: not a token index (offsets must rise from 0); prepare the data again")
        return lengths

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> np.ndarray:
        if self._files is None:
            self._files = (os.open(self.index_path, os.O_RDONLY), os.open(self.bin_path, os.O_RDONLY))
        index_file, ids_file = self._files
        start, end = np.frombuffer(os.pread(index_file, 16, self._header + 8 * index), dtype=np.int64).tolist()
        ids = os.pread(ids_file, (end - start) * self.dtype.itemsize, start * self.dtype.itemsize)
        return np.frombuffer(ids, dtype=self.dtype).astype(np.int64)

    def __del__(self) -> None:
        if getattr(self, "_files", None) is not None:
            for descriptor in self._files:
                os.close(descriptor)


class ShardedTokenArray:
    """One side of a prepared split: its shards and lengths, indexed by sentence number."""

    def __init__(self, directory: Path, split: str, side: str, dtype: np.dtype | str, sizes: Sequence[int]):
        self.lengths_path = directory / f"{split}.{side}.lengths.npy"
        try:
            self.lengths = np.load(self.lengths_path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise NmtError(f"{self.lengths_path}: not a length array ({exc}); prepare the data again") from None
        if self.lengths.ndim != 1 or self.lengths.dtype != LENGTH_DTYPE or len(self.lengths) != sum(sizes):
            raise NmtError(f"{self.lengths_path}: holds {self.lengths.shape} {self.lengths.dtype} lengths, not "
                           f"the {sum(sizes):,} the manifest records; prepare the data again")
        self.shards = [TokenArray(directory / shard_name(split, side, k), dtype) for k in range(len(sizes))]
        for k, (shard, size) in enumerate(zip(self.shards, sizes)):
            if len(shard) != size:
                raise NmtError(f"{shard.index_path}: indexes {len(shard):,} sentences but the manifest records "
                               f"{size:,} for shard {k}; prepare the data again")
        self.starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, index: int) -> np.ndarray:
        shard = int(np.searchsorted(self.starts, index, side="right")) - 1
        return self.shards[shard][index - int(self.starts[shard])]

    def read_lengths(self, ranges: Iterable[tuple[int, int]]) -> np.ndarray:
        """The lengths of sentences ``[start, stop)`` of each range, concatenated, read from the
        file (not through the memory map, whose pages would stay counted in this process)."""
        itemsize, offset = LENGTH_DTYPE.itemsize, self.lengths.offset
        blocks = []
        with open(self.lengths_path, "rb") as handle:
            for start, stop in ranges:
                raw = os.pread(handle.fileno(), (stop - start) * itemsize, offset + start * itemsize)
                blocks.append(np.frombuffer(raw, dtype=LENGTH_DTYPE))
        return np.concatenate(blocks) if blocks else np.zeros(0, dtype=LENGTH_DTYPE)

    def check(self) -> None:
        """Every shard's offsets rise, and its lengths are those ``.lengths.npy`` records (a shard in
        memory at a time)."""
        for shard, start in zip(self.shards, self.starts.tolist()):
            if not np.array_equal(shard.read_lengths(), self.read_lengths([(start, start + len(shard))])):
                raise NmtError(f"{self.lengths_path}: disagrees with {shard.index_path}; prepare the data again")


class ParallelSplit:
    """Source and target token arrays of one prepared split (``train``, ``valid``, ``test``).

    ``shards`` is the number of sentences of each shard (the manifest's ``splits.<split>.shards``);
    ``links`` holds the split's piece links when ``nmt prepare`` was given word links for it
    (:mod:`nmt_cli.data.links`; flat ``int32`` pairs, see :meth:`links_of`), else None.
    """

    def __init__(self, directory: str | os.PathLike, split: str, dtype: np.dtype | str, shards: Sequence[int]):
        directory = Path(directory)
        self.name = split
        self.src = ShardedTokenArray(directory, split, "src", dtype, shards)
        self.tgt = ShardedTokenArray(directory, split, "tgt", dtype, shards)
        links = directory / f"{split}.links"
        self.links = TokenArray(links, np.int32) if links.with_name(links.name + ".idx.npy").is_file() else None
        if self.links is not None and len(self.links) != len(self.src):
            raise NmtError(f"{directory}: split {split} has {len(self.src)} sentences but {len(self.links)} "
                           "lines of links; prepare the data again")

    def links_of(self, index: int) -> np.ndarray:
        """Pair ``index``'s piece links, (n, 2) ``(source piece, target piece)`` rows."""
        return self.links[index].reshape(-1, 2)

    def __len__(self) -> int:
        return len(self.src)
