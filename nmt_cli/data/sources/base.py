"""What every data source shares: the :class:`Corpus` interface, the pairs it yields and
helpers for reading them.

Readers never decide what to do with a bad pair: a pair that cannot be read (invalid
UTF-8, a line with no partner, a malformed record) comes out with a :class:`Problem`, and
:mod:`nmt_cli.data.cleaning` raises it or counts it according to ``data.on_invalid``.
Problems no skipping can repair (missing or empty files, a missing language) raise in the
reader. Line numbers are 1-based lines of the file (rows for a dataset), so line N of the
source always stays with line N of the target.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from nmt_cli.config import DataConfig

@dataclass(frozen=True)
class Problem:
    """Why a pair could not be read: a short reason (counted in reports) and a message."""

    reason: str  # invalid_utf8, unpaired_line, bad_record, missing_text
    path: str
    message: str


@dataclass(frozen=True)
class RawPair:
    line: int  # 1-based line (or row) in the source
    source: str
    target: str
    alignment: str | None = None  # gold Pharaoh alignment (synthetic corpus only)
    problem: Problem | None = None

    @classmethod
    def invalid(cls, line: int, reason: str, path: str | os.PathLike, message: str) -> "RawPair":
        return cls(line, "", "", None, Problem(reason, str(path), message))


class Corpus:
    """One configured source: which splits it has, their pairs and a fingerprint of them."""

    #: whether it may be an entry of ``data.corpora`` (mixed into the training split by weight)
    mixable = True

    def __init__(self, data: DataConfig):
        self.data = data
        self.kind = data.source  # the name it is registered and opened by
        self.src_lang, self.tgt_lang = data.src_lang, data.tgt_lang

    def splits(self) -> dict[str, str]:
        """Prepared split name -> split name in the source; a split named "" is left out."""
        names = {"train": self.data.train_split, "valid": self.data.valid_split, "test": self.data.test_split}
        return {prepared: name for prepared, name in names.items() if name}

    def pairs(self, split: str) -> Iterator[RawPair]:
        """The pairs of the source split ``split``, in order."""
        raise NotImplementedError

    def fingerprint(self, split: str) -> dict[str, Any]:
        """What identifies the split's content (checksums, or generator settings)."""
        raise NotImplementedError

    def size_hint(self, split: str) -> int | None:
        """Number of pairs when it is known cheaply (for progress bars), else None."""
        return None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.data.path, "splits": self.splits()}


def file_digest(path: Path) -> tuple[str, int]:
    """sha256 and number of lines of a file, read in 1 MiB blocks."""
    digest, lines, last = hashlib.sha256(), 0, b"\n"
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
            lines += block.count(b"\n")
            last = block[-1:]
    return digest.hexdigest(), lines + (last != b"\n")


def pair_from_record(record: Any, line: int, where: str | Path, src_lang: str, tgt_lang: str) -> RawPair:
    """A pair from ``{"translation": {src: .., tgt: ..}}`` or ``{src: .., tgt: ..}``."""
    if isinstance(record, dict) and isinstance(record.get("translation"), dict):
        record = record["translation"]
    if not isinstance(record, dict):
        return RawPair.invalid(line, "bad_record", where, "expected an object with the two languages")
    texts = []
    for lang in (src_lang, tgt_lang):
        text = record.get(lang)
        if text is None:
            return RawPair.invalid(line, "missing_text", where, f"no '{lang}' text")
        if not isinstance(text, str):
            return RawPair.invalid(line, "bad_record", where, f"'{lang}' is not a string")
        texts.append(text)
    return RawPair(line, texts[0], texts[1])


def iter_limited(pairs: Iterable[RawPair], limit: int) -> Iterator[RawPair]:
    """The first ``limit`` pairs (all when ``limit`` is 0)."""
    for number, pair in enumerate(pairs, 1):
        if limit and number > limit:
            return
        yield pair
