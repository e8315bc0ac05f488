"""Token ids on disk: one flat array per split and side, read lazily through ``np.memmap``.

Layout of a side (``<prefix>`` = ``<dir>/<split>.<src|tgt>``):

* ``<prefix>.bin``: every sentence's ids concatenated (no BOS/EOS), dtype ``uint16`` when
  the vocabulary has fewer than 65,536 entries, else ``int32``;
* ``<prefix>.idx.npy``: ``int64`` offsets of length ``n + 1``; sentence ``i`` is
  ``bin[idx[i]:idx[i + 1]]``.

Writers stream to temporary files and rename on ``close`` so a kill never leaves a
half-written split behind. Readers check that the index and the ids agree (a truncated
or replaced file fails when it is opened, naming it, not in the middle of training).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np

from nmt_cli.errors import NmtError
from nmt_cli.fileio import atomic_open

SIDES = ("src", "tgt")


def array_files(split: str) -> list[str]:
    """Names of the files holding the token ids of ``split`` (both sides)."""
    return [f"{split}.{side}{suffix}" for side in SIDES for suffix in (".bin", ".idx.npy")]


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


class TokenArrayWriter:
    """Append sentences of token ids; ``close()`` publishes ``.bin`` and ``.idx.npy``."""

    def __init__(self, prefix: str | os.PathLike, dtype: np.dtype):
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        self._bin_ctx = atomic_open(self.prefix.with_name(self.prefix.name + ".bin"), "wb")
        self._bin = self._bin_ctx.__enter__()
        self._offsets = [0]
        self._total = 0

    def append(self, ids: list[int] | np.ndarray) -> None:
        array = np.asarray(ids, dtype=self.dtype)
        self._bin.write(array.tobytes())
        self._total += len(array)
        self._offsets.append(self._total)

    def extend(self, sentences: list[list[int]]) -> None:
        """Append many sentences with one write (much faster than ``append`` per sentence)."""
        lengths = np.fromiter((len(s) for s in sentences), dtype=np.int64, count=len(sentences))
        flat = np.fromiter(itertools.chain.from_iterable(sentences), dtype=self.dtype, count=int(lengths.sum()))
        self._bin.write(flat.tobytes())
        ends = self._total + np.cumsum(lengths)
        self._offsets.extend(ends.tolist())
        self._total = int(ends[-1]) if len(ends) else self._total

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @property
    def num_tokens(self) -> int:
        return self._total

    def close(self) -> None:
        self._bin_ctx.__exit__(None, None, None)
        with atomic_open(self.prefix.with_name(self.prefix.name + ".idx.npy"), "wb") as handle:
            np.save(handle, np.asarray(self._offsets, dtype=np.int64))

    def abort(self) -> None:
        """Drop what was written (the temporary file is removed)."""
        try:
            self._bin_ctx.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)
        except KeyboardInterrupt:
            pass


class TokenArray:
    """Read-only view of one side of a split; sentences are sliced from a memory map."""

    def __init__(self, prefix: str | os.PathLike, dtype: np.dtype | str):
        prefix = Path(prefix)
        dtype = np.dtype(dtype)
        index_path = prefix.with_name(prefix.name + ".idx.npy")
        bin_path = prefix.with_name(prefix.name + ".bin")
        try:
            self.offsets = np.load(index_path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise NmtError(f"{index_path}: not a token index ({exc}); prepare the data again") from None
        self.lengths = np.diff(self.offsets)
        if self.offsets.ndim != 1 or len(self.offsets) == 0 or self.offsets[0] != 0 or (self.lengths < 0).any():
            raise NmtError(f"{index_path}: not a token index (offsets must rise from 0); prepare the data again")
        expected = int(self.offsets[-1]) * dtype.itemsize
        size = bin_path.stat().st_size if bin_path.is_file() else None
        if size != expected:
            found = "is missing" if size is None else f"has {size:,} bytes"
            raise NmtError(f"{bin_path}: {found} but its index needs {expected:,} (truncated or changed since "
                           "nmt prepare); prepare the data again")
        self.data = np.zeros(0, dtype=dtype) if expected == 0 else np.memmap(bin_path, dtype=dtype, mode="r")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:
        return np.asarray(self.data[self.offsets[index] : self.offsets[index + 1]], dtype=np.int64)


class ParallelSplit:
    """Source and target token arrays of one prepared split (``train``, ``valid``, ``test``)."""

    def __init__(self, directory: str | os.PathLike, split: str, dtype: np.dtype | str):
        directory = Path(directory)
        self.name = split
        self.src = TokenArray(directory / f"{split}.src", dtype)
        self.tgt = TokenArray(directory / f"{split}.tgt", dtype)
        if len(self.src) != len(self.tgt):
            raise NmtError(f"{directory}: split {split} has {len(self.src)} source and {len(self.tgt)} target "
                           "sentences; prepare the data again")

    def __len__(self) -> int:
        return len(self.src)
