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
   ``max_length_ratio`` times the shorter), ``duplicate`` (``dedup``; 64-bit hashes of the
   pairs seen so far, about 70 bytes per training pair).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Iterator

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
    """Applies the rules above to one split; ``stats()`` reports what it did."""

    def __init__(self, data: DataConfig, training: bool):
        self.data = data
        self.training = training
        self.read = 0
        self.kept = 0
        self.normalized = 0
        self.dropped: Counter[str] = Counter()
        self._seen: set[int] = set()

    def clean(self, pairs: Iterable[RawPair]) -> Iterator[CleanPair]:
        for pair in pairs:
            self.read += 1
            cleaned = self._clean_one(pair)
            if cleaned is not None:
                self.kept += 1
                yield cleaned

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
        if data.dedup:
            key = int.from_bytes(hashlib.blake2b(f"{source}\t{target}".encode(), digest_size=8).digest(), "little")
            if key in self._seen:
                return "duplicate"
            self._seen.add(key)
        return None

    def _drop(self, reason: str) -> None:
        self.dropped[reason] += 1
        return None

    def stats(self) -> dict:
        return {"read": self.read, "kept": self.kept, "normalized": self.normalized,
                "dropped": dict(sorted(self.dropped.items()))}
