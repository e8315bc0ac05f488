"""Cleaning of parallel pairs: normalisation, filters and bad pairs, counted per reason.

Rules, in the order they apply (a pair is dropped as a whole, so line N of the source
always stays with line N of the target):

1. A pair the reader could not read (invalid UTF-8, a line without a partner, a malformed
   record) stops preparation with one line naming file and line, or with
   ``data.on_invalid: skip`` is dropped and counted under its reason.
2. Normalisation (``data.normalize``): invisible characters removed (zero-width spaces and
   joiners, BOM, soft hyphens, control characters), Unicode NFC, every run of whitespace
   (tabs, no-break spaces, line separators ...) one space, no leading/trailing spaces.
   Line breaks inside a text are always replaced by a space.
3. ``empty``: either side empty (every split).
4. Training split only: ``too_short`` (fewer than ``min_length`` words on a side),
   ``too_long`` (more than ``max_length``), ``length_ratio`` (longer side more than
   ``max_length_ratio`` times the shorter), ``duplicate`` (``dedup``: a pair whose 64-bit
   hash an earlier kept pair has; the first one stays). Duplicates are found after the
   split is written, by :class:`DuplicateFinder` in memory bounded by ``data.dedup_memory_mb``
   whatever the corpus size, and the caller copies the text without them.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from nmt_cli.config import DataConfig
from nmt_cli.data.sources import RawPair
from nmt_cli.errors import InputError

# zero-width space/non-joiner/joiner, word joiner, BOM, soft hyphen, and control characters
# that are not whitespace (whitespace controls such as TAB become spaces instead)
_INVISIBLE = re.compile("[\u200b-\u200d\u2060\ufeff\u00ad\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")


def normalize_text(text: str) -> str:
    """Invisible characters removed, NFC, whitespace runs collapsed to single spaces."""
    return " ".join(unicodedata.normalize("NFC", _INVISIBLE.sub("", text)).split())


@dataclass(frozen=True)
class CleanPair:
    line: int  # line in the source, for messages
    source: str
    target: str
    alignment: str | None


class PairCleaner:
    """Applies the rules above to one split; ``stats()`` reports what it did.

    With ``data.dedup`` on a training split, :meth:`clean` yields the duplicates too and
    shows every pair it yields to a :class:`DuplicateFinder` spilling to ``scratch``; once
    the pairs are written, :meth:`duplicates` says which to leave out.
    """

    def __init__(self, data: DataConfig, training: bool, scratch: Path | None = None):
        self.data = data
        self.training = training
        self.read = 0
        self.kept = 0
        self.normalized = 0
        self.dropped: Counter[str] = Counter()
        self.finder = None
        if training and data.dedup:
            if scratch is None:
                raise ValueError("duplicate removal needs a scratch folder")
            self.finder = DuplicateFinder(scratch, int(data.dedup_memory_mb * 2**20))

    def clean(self, pairs: Iterable[RawPair]) -> Iterator[CleanPair]:
        for pair in pairs:
            self.read += 1
            cleaned = self._clean_one(pair)
            if cleaned is not None:
                self.kept += 1
                if self.finder is not None:
                    self.finder.add(cleaned.source, cleaned.target)
                yield cleaned

    def duplicates(self) -> Iterator[np.ndarray]:
        """After :meth:`clean`: ascending numbers (0: the first pair it yielded) of the pairs
        that repeat an earlier one, in blocks; ``stats()`` counts them as dropped from now on."""
        count = self.finder.finish()
        self.kept -= count
        if count:
            self.dropped["duplicate"] += count
        return self.finder.numbers()

    def _clean_one(self, pair: RawPair) -> CleanPair | None:
        if pair.problem is not None:
            if self.data.on_invalid == "error":
                raise InputError(pair.problem.path, pair.problem.message + " (use --on-invalid skip to drop such pairs)",
                                 pair.line)
            return self._drop(pair.problem.reason)
        source, target = self._normalize(pair.source), self._normalize(pair.target)
        if source != pair.source or target != pair.target:
            self.normalized += 1
        if not source or not target:
            return self._drop("empty")
        if self.training:
            reason = self._training_filter(source, target)
            if reason:
                return self._drop(reason)
        return CleanPair(pair.line, source, target, pair.alignment)

    def _normalize(self, text: str) -> str:
        return normalize_text(text) if self.data.normalize else text.replace("\n", " ")

    def _training_filter(self, source: str, target: str) -> str | None:
        data = self.data
        src_words, tgt_words = len(source.split()), len(target.split())
        if min(src_words, tgt_words) < data.min_length:
            return "too_short"
        if data.max_length and max(src_words, tgt_words) > data.max_length:
            return "too_long"
        if data.max_length_ratio and max(src_words, tgt_words) > data.max_length_ratio * min(src_words, tgt_words):
            return "length_ratio"
        return None

    def _drop(self, reason: str) -> None:
        self.dropped[reason] += 1
        return None

    def stats(self) -> dict:
        return {"read": self.read, "kept": self.kept, "normalized": self.normalized,
                "dropped": dict(sorted(self.dropped.items()))}


# ---- duplicate removal in bounded memory --------------------------------------------------------

_RECORD = np.dtype([("hash", "<u8"), ("number", "<u8")])  # a pair's hash and its number, in the sorted runs
_NUMBER = np.dtype([("number", "<u8")])  # a duplicate's number, in the runs sorted by number
_HASH_BYTES = 48  # a buffered hash, its place in the sort order, gathered copies and its record (16)
_MERGED_BYTES = 80  # a record read back, gathered, sorted and copied to be written (16 each), its sort order
_NUMBER_BYTES = 48  # a duplicate's number buffered, gathered, sorted; read back as a Python int (~40)
_MIN_BLOCK = 4096  # records read from a run at a time, at least, where the memory allows it


class DuplicateFinder:
    """Which of the pairs shown to :meth:`add` repeat an earlier one, in about ``memory_bytes``.

    A pair's key is the 64-bit BLAKE2b hash of ``source<TAB>target``; pairs with equal
    hashes count as equal, as they did in a set of hashes (the chance that two of n distinct
    pairs collide, dropping one of them, is about n^2 / 2^65: one in 3,700 for 100 million
    distinct pairs, one in 37 for a billion). The hashes are
    buffered; a full buffer is sorted by hash, each with its pair's number, and spilled
    to ``folder`` as a run. :meth:`finish` merges the runs a block of each at a time: in
    (hash, number) order every pair after the first of its hash is a duplicate. Those
    numbers come out in hash order, so they are sorted again the same way (runs spilled,
    then merged) into ``folder/duplicates``, which :meth:`numbers` reads back in blocks.
    """

    def __init__(self, folder: Path, memory_bytes: int):
        self.spill = _Spill(Path(folder))
        self.memory = memory_bytes
        self._hashes = bytearray()
        self._added = 0
        self._runs: list[_Run] = []
        self._count = 0

    @property
    def runs(self) -> int:
        """Runs of hashes spilled so far (several: the pairs did not fit the memory)."""
        return len(self._runs)

    def add(self, source: str, target: str) -> None:
        self._hashes += hashlib.blake2b(f"{source}\t{target}".encode(), digest_size=8).digest()
        self._added += 1
        if len(self._hashes) >= max(1, self.memory // _HASH_BYTES) * 8:
            self._spill_hashes()

    def finish(self) -> int:
        """Find the duplicates among the pairs added; their number."""
        if self._hashes:
            self._spill_hashes()
        repeats = _RunWriter(self.spill, "repeats", _NUMBER, max(1, self.memory // 2 // _NUMBER_BYTES))
        previous = None
        for block in _merged(self._runs, self.spill, self.memory // 2, _MERGED_BYTES):
            hashes = block["hash"]
            repeated = np.empty(len(hashes), dtype=bool)
            repeated[1:] = hashes[1:] == hashes[:-1]
            repeated[0] = previous is not None and hashes[0] == previous
            previous = hashes[-1]
            repeats.add(block["number"][repeated])
        with open(self.spill.folder / "duplicates", "wb") as handle:
            for block in _merged(repeats.close(), self.spill, self.memory, _NUMBER_BYTES):
                block["number"].tofile(handle)
                self._count += len(block)
        return self._count

    def numbers(self) -> Iterator[np.ndarray]:
        """The duplicates' numbers in ascending order, a block at a time (after :meth:`finish`)."""
        yield from _Run(self.spill.folder / "duplicates", np.dtype("<u8"), self._count).blocks(
            max(1, self.memory // _NUMBER_BYTES))

    def _spill_hashes(self) -> None:
        hashes = np.frombuffer(self._hashes, dtype="<u8")
        order = np.argsort(hashes, kind="stable")
        records = np.empty(len(hashes), dtype=_RECORD)
        records["hash"] = hashes[order]
        records["number"] = order
        records["number"] += self._added - len(hashes)
        del hashes, order
        self._hashes = bytearray()
        self._runs.append(self.spill.write("hashes", records))


class _Run:
    """A file of records sorted in the order of their fields, read a block at a time."""

    def __init__(self, path: Path, dtype: np.dtype, count: int):
        self.path, self.dtype, self.count = path, dtype, count
        self.read = 0

    def next_block(self, size: int) -> np.ndarray:
        with open(self.path, "rb") as handle:
            handle.seek(self.read * self.dtype.itemsize)
            block = np.frombuffer(handle.read(min(size, self.count - self.read) * self.dtype.itemsize), self.dtype)
        self.read += len(block)
        return block

    def blocks(self, size: int) -> Iterator[np.ndarray]:
        while self.read < self.count:
            yield self.next_block(size)


class _Spill:
    """Run files in one folder, each under a name of its own."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._made = 0

    def create(self, kind: str) -> Path:
        self._made += 1
        return self.folder / f"{kind}-{self._made}"

    def write(self, kind: str, records: np.ndarray) -> _Run:
        path = self.create(kind)
        with open(path, "wb") as handle:
            records.tofile(handle)
        return _Run(path, records.dtype, len(records))


class _RunWriter:
    """Collects records in any order and spills them as sorted runs of at most about ``capacity``."""

    def __init__(self, spill: _Spill, kind: str, dtype: np.dtype, capacity: int):
        self.spill, self.kind, self.dtype, self.capacity = spill, kind, dtype, capacity
        self._pending: list[np.ndarray] = []
        self._size = 0
        self._runs: list[_Run] = []

    def add(self, values: np.ndarray) -> None:
        if len(values):
            self._pending.append(values)
            self._size += len(values)
        if self._size >= self.capacity:
            self._write()

    def close(self) -> list[_Run]:
        if self._size:
            self._write()
        return self._runs

    def _write(self) -> None:
        records = np.empty(self._size, dtype=self.dtype)
        records[self.dtype.names[0]] = np.concatenate(self._pending)
        self._pending, self._size = [], 0
        self._runs.append(self.spill.write(self.kind, _sorted(records)))


def _merged(runs: list[_Run], spill: _Spill, memory: int, record_bytes: int) -> Iterator[np.ndarray]:
    """The records of sorted ``runs`` as one sorted sequence, in blocks, in about ``memory``
    bytes (``record_bytes`` per record read); the runs are removed once read.

    Runs too many to read a block of at least ``_MIN_BLOCK`` records of each at once are
    first merged in groups into longer runs (on disk), until few enough are left.
    """
    fan_in = max(2, memory // (record_bytes * _MIN_BLOCK))
    while len(runs) > fan_in:
        longer = []
        for start in range(0, len(runs), fan_in):
            group = runs[start : start + fan_in]
            path, count = spill.create("merged"), 0
            with open(path, "wb") as handle:
                for block in _merged_blocks(group, max(1, memory // record_bytes // len(group))):
                    block.tofile(handle)
                    count += len(block)
            longer.append(_Run(path, group[0].dtype, count))
        runs = longer
    yield from _merged_blocks(runs, max(1, memory // record_bytes // max(1, len(runs))))


def _merged_blocks(runs: list[_Run], block: int) -> Iterator[np.ndarray]:
    """One round of :func:`_merged`: at most ``block`` records of each run in memory. Each
    step yields every loaded record up to the smallest last loaded record of the runs with
    more to read: nothing unread comes before it."""
    loaded = [np.empty(0, dtype=run.dtype) for run in runs]
    while True:
        for i, run in enumerate(runs):
            if not len(loaded[i]) and run.read < run.count:
                loaded[i] = run.next_block(block)
        pending = [tuple(records[-1]) for records, run in zip(loaded, runs) if len(records) and run.read < run.count]
        bound = min(pending) if pending else None
        taken = []
        for i, records in enumerate(loaded):
            cut = len(records) if bound is None else int(np.count_nonzero(_at_most(records, bound)))
            taken.append(records[:cut])
            loaded[i] = records[cut:]
        if not any(len(records) for records in taken):
            break
        yield _sorted(np.concatenate(taken))
    for run in runs:
        run.path.unlink()


def _at_most(records: np.ndarray, bound: tuple) -> np.ndarray:
    """Which records come no later than ``bound`` in the order of their fields."""
    before = np.zeros(len(records), dtype=bool)
    equal = np.ones(len(records), dtype=bool)
    for name, value in zip(records.dtype.names, bound):
        before |= equal & (records[name] < value)
        equal &= records[name] == value
    return before | equal


def _sorted(records: np.ndarray) -> np.ndarray:
    return records[np.lexsort([records[name] for name in reversed(records.dtype.names)])]
