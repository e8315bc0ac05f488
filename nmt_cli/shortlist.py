"""A lexical shortlist: the target pieces a sentence's translation may use, from its source pieces.

For each source SentencePiece piece ``s`` the shortlist keeps its ``k`` most likely target
pieces by lexical translation probability ``p(t | s) = c(s, t) / sum_t' c(s, t')``, where
``c`` counts the word links of a parallel corpus carried to pieces (a word link links
every piece of both words); it also keeps the ``frequent`` most frequent target pieces of
that corpus (Marian's ``--shortlist FILE 50 50``). A sentence's candidates are the union of
its source pieces' lists, the frequent pieces, UNK, BOS and EOS (CTranslate2's fixed
candidates) and whatever else the sentence forces (its prefix, its constraints):
:meth:`Shortlist.candidates`. Candidates are per sentence, never per batch, so a sentence's
translation does not depend on what else is in its batch (mozilla/translations#977).

The file (``shortlist.txt``), a line each, UTF-8:

* ``nmt-cli shortlist 1``: the format and its version;
* a JSON object: ``tokenizer`` (:func:`tokenizer_identity` of the SentencePiece model(s)),
  ``source_vocab``, ``target_vocab``, ``k``, ``frequent`` and what it was built from
  (``built_from``: pairs, links ...);
* ``*<TAB>`` the frequent target piece ids, most frequent first, separated by spaces;
* ``<source id><TAB><target ids>``: a source piece's list, most likely first (a piece never
  linked has no line).

Ids, not pieces, so that the file is exact; the tokenizer's identity makes a shortlist used
with another SentencePiece model a one-line error. :class:`ShortlistCounts` counts a corpus
and :func:`build_shortlist_from_counts` makes the shortlist; :mod:`nmt_cli.shortlist_build`
feeds it from Pharaoh links or nmt-cli's aligner.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence

import numpy as np

from nmt_cli.errors import InputError, NmtError
from nmt_cli.fileio import atomic_open
from nmt_cli.specials import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from nmt_cli.textio import iter_lines

__all__ = ["DEFAULT_FREQUENT", "DEFAULT_K", "FIXED_CANDIDATES", "HEADER", "Shortlist", "ShortlistCounts",
           "build_shortlist_from_counts", "read_shortlist", "tokenizer_identity", "write_shortlist"]

#: Marian's ``50 50``: a source piece's best translations and the most frequent target pieces
DEFAULT_K = 50
DEFAULT_FREQUENT = 50
#: the first line of a shortlist file: the format and its version
HEADER = "nmt-cli shortlist 1"
#: candidates of every sentence: CTranslate2's fixed ones (UNK, BOS, EOS)
FIXED_CANDIDATES = (UNK_ID, BOS_ID, EOS_ID)


class HasModelFiles(Protocol):
    def model_files(self) -> dict[str, bytes]: ...


def tokenizer_identity(tokenizer: HasModelFiles) -> str:
    """``sha256:`` of the SentencePiece model file(s) (by name, in order): the same pieces
    and ids exactly when the identities are equal."""
    digest = hashlib.sha256()
    for name, data in sorted(tokenizer.model_files().items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return "sha256:" + digest.hexdigest()


@dataclass(frozen=True)
class Shortlist:
    """A shortlist as read or built: each source piece's best target pieces (``translations``,
    most likely first), the ``frequent`` target pieces, the vocabulary sizes and the
    tokenizer's identity; ``path`` is the file it was read from (None: built here)."""

    tokenizer: str
    source_vocab: int
    target_vocab: int
    k: int
    frequent: tuple[int, ...]
    translations: dict[int, tuple[int, ...]]
    built_from: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def name(self) -> str:
        """How outputs name it: its file, or ``built``."""
        return str(self.path) if self.path is not None else "built"

    @property
    def fingerprint(self) -> str:
        """The first 12 hex digits of the sha256 of its lists: equal lists, equal fingerprints."""
        digest = hashlib.sha256(self.tokenizer.encode())
        digest.update(np.asarray(self.frequent, dtype=np.int64).tobytes())
        for source in sorted(self.translations):
            digest.update(np.asarray([source, -1, *self.translations[source]], dtype=np.int64).tobytes())
        return digest.hexdigest()[:12]

    def candidates(self, source: Sequence[int], forced: Iterable[int] = ()) -> np.ndarray:
        """(C,) the sorted target ids one sentence may output: the lists of its ``source``
        pieces, the frequent pieces, :data:`FIXED_CANDIDATES` and ``forced`` (its prefix and
        constraint pieces)."""
        ids = set(FIXED_CANDIDATES)
        ids.update(self.frequent)
        for piece in set(source):
            ids.update(self.translations.get(int(piece), ()))
        ids.update(int(piece) for piece in forced)
        return np.fromiter(sorted(ids), dtype=np.int64, count=len(ids))

    def check_tokenizer(self, tokenizer: HasModelFiles, user: str) -> None:
        """A one-line error unless the shortlist was built with ``tokenizer``'s SentencePiece
        model(s) (``user`` names the model it would go with)."""
        if tokenizer_identity(tokenizer) != self.tokenizer:
            raise NmtError(f"{self.name}: built with another SentencePiece model than {user} "
                           f"({self.tokenizer[:19]}... vs {tokenizer_identity(tokenizer)[:19]}...); build the "
                           "shortlist with the model's own tokenizer")

    def describe(self) -> dict[str, Any]:
        """What a record says of it: file, sizes, fingerprint."""
        return {"file": self.name, "k": self.k, "frequent": len(self.frequent), "sources": len(self.translations),
                "fingerprint": self.fingerprint}


class ShortlistCounts:
    """Link and target piece counts of a corpus, added a sentence at a time, in bounded memory
    (the link pairs of :data:`FLUSH_PAIRS` sentences are merged into sorted unique keys)."""

    FLUSH_PAIRS = 1_000_000

    def __init__(self, source_vocab: int, target_vocab: int):
        self.source_vocab, self.target_vocab = source_vocab, target_vocab
        self.target_counts = np.zeros(target_vocab, dtype=np.int64)
        self.keys = np.zeros(0, dtype=np.int64)  # source * target_vocab + target, sorted
        self.counts = np.zeros(0, dtype=np.int64)
        self._pending: list[np.ndarray] = []
        self._pending_size = 0
        self.pairs = self.links = 0

    def add(self, source: Sequence[int], target: Sequence[int], links: np.ndarray) -> None:
        """One sentence pair: its piece ids and its piece links ``(n, 2)`` (positions in
        ``source`` and ``target``)."""
        source, target = np.asarray(source, dtype=np.int64), np.asarray(target, dtype=np.int64)
        self.pairs += 1
        np.add.at(self.target_counts, target, 1)
        if len(links):
            keys = source[links[:, 0]] * self.target_vocab + target[links[:, 1]]
            self._pending.append(keys)
            self._pending_size += len(keys)
            self.links += len(keys)
            if self._pending_size >= self.FLUSH_PAIRS:
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        keys, counts = np.unique(np.concatenate(self._pending), return_counts=True)
        merged_keys = np.concatenate([self.keys, keys])
        merged_counts = np.concatenate([self.counts, counts])
        self.keys, inverse = np.unique(merged_keys, return_inverse=True)
        self.counts = np.bincount(inverse, weights=merged_counts, minlength=len(self.keys)).astype(np.int64)
        self._pending, self._pending_size = [], 0

    def link_counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every linked (source, target) piece pair and its count, sorted by source then target."""
        self._flush()
        return self.keys // self.target_vocab, self.keys % self.target_vocab, self.counts


def build_shortlist_from_counts(counts: ShortlistCounts, tokenizer: str, k: int = DEFAULT_K,
                                frequent: int = DEFAULT_FREQUENT, built_from: dict[str, Any] | None = None
                                ) -> Shortlist:
    """Each source piece's ``k`` target pieces of highest ``p(t | s)`` (the more frequent
    target first on a tie, then the lower id) and the ``frequent`` most frequent target
    pieces (PAD and BOS left out: never output; UNK and EOS are candidates anyway)."""
    if k < 0 or frequent < 0:
        raise NmtError(f"shortlist: k and the frequent count must be at least 0, not {k} and {frequent}")
    sources, targets, links = counts.link_counts()
    # order: by source, then count (descending), then the target's own frequency, then id
    order = np.lexsort((targets, -counts.target_counts[targets], -links, sources))
    sources, targets = sources[order], targets[order]
    starts = np.flatnonzero(np.r_[True, sources[1:] != sources[:-1]]) if len(sources) else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], len(sources)] if len(sources) else starts
    translations = {int(sources[start]): tuple(int(t) for t in targets[start:min(end, start + k)])
                    for start, end in zip(starts, ends) if k > 0}
    ranked = np.lexsort((np.arange(counts.target_vocab), -counts.target_counts))
    never = {PAD_ID, BOS_ID}
    top = [int(t) for t in ranked if counts.target_counts[t] > 0 and int(t) not in never][:frequent]
    record = {"pairs": counts.pairs, "links": counts.links, **(built_from or {})}
    return Shortlist(tokenizer, counts.source_vocab, counts.target_vocab, k, tuple(top), translations, record)


def write_shortlist(path: str | os.PathLike, shortlist: Shortlist) -> Path:
    """Write ``shortlist`` to ``path`` atomically (the format of the module docstring)."""
    header = {"tokenizer": shortlist.tokenizer, "source_vocab": shortlist.source_vocab,
              "target_vocab": shortlist.target_vocab, "k": shortlist.k, "frequent": len(shortlist.frequent),
              "built_from": shortlist.built_from}
    with atomic_open(path, "w") as handle:
        handle.write(HEADER + "\n")
        handle.write(json.dumps(header, sort_keys=True) + "\n")
        handle.write("*\t" + " ".join(map(str, shortlist.frequent)) + "\n")
        for source in sorted(shortlist.translations):
            handle.write(f"{source}\t" + " ".join(map(str, shortlist.translations[source])) + "\n")
    return Path(path)


def read_shortlist(path: str | os.PathLike) -> Shortlist:
    """The shortlist in ``path``; anything wrong is an :class:`InputError` naming the file
    and line (a wrong version, a bad header, an id outside the vocabulary, a repeated source)."""
    path = Path(path)
    lines = iter_lines(path)
    first = next(lines, None)
    if first != HEADER:
        found = "an empty file" if first is None else repr(first[:40])
        raise InputError(path, f"not an nmt-cli shortlist of this version (expected {HEADER!r}, found {found})", 1)
    header = _header(path, next(lines, None))
    sources, targets = header["source_vocab"], header["target_vocab"]
    frequent: tuple[int, ...] | None = None
    translations: dict[int, tuple[int, ...]] = {}
    for number, line in enumerate(lines, start=3):
        key, tab, values = line.partition("\t")
        if not tab:
            raise InputError(path, "expected <source id or *><TAB><target ids>", number)
        ids = _ids(path, number, values, targets, "target")
        if key == "*":
            if frequent is not None:
                raise InputError(path, "a second line of frequent pieces (*)", number)
            frequent = ids
            continue
        (source,) = _ids(path, number, key, sources, "source") or (None,)
        if source is None or " " in key.strip():
            raise InputError(path, f"bad source id {key!r}", number)
        if source in translations:
            raise InputError(path, f"source piece {source} listed twice", number)
        if len(ids) > header["k"]:
            raise InputError(path, f"{len(ids)} target pieces, more than k = {header['k']}", number)
        translations[source] = ids
    if frequent is None:
        raise InputError(path, "has no line of frequent pieces ('*<TAB>ids')")
    return Shortlist(header["tokenizer"], sources, targets, header["k"], frequent, translations,
                     header.get("built_from", {}), path)


def _header(path: Path, line: str | None) -> dict[str, Any]:
    """The JSON header of line 2, checked."""
    try:
        header = json.loads(line or "")
    except json.JSONDecodeError as exc:
        raise InputError(path, f"the header is not JSON ({exc.msg})", 2) from None
    if not isinstance(header, dict):
        raise InputError(path, "the header is not a JSON object", 2)
    for key in ("source_vocab", "target_vocab", "k"):
        if not isinstance(header.get(key), int) or isinstance(header.get(key), bool) or header[key] < 0:
            raise InputError(path, f"the header's {key!r} is not a count", 2)
    if not isinstance(header.get("tokenizer"), str) or not header["tokenizer"].startswith("sha256:"):
        raise InputError(path, "the header names no tokenizer ('tokenizer': 'sha256:...')", 2)
    return header


def _ids(path: Path, number: int, text: str, size: int, side: str) -> tuple[int, ...]:
    """Space-separated ids, each below ``size``."""
    try:
        ids = tuple(int(token) for token in text.split())
    except ValueError:
        raise InputError(path, f"{side} ids must be integers: {text[:40]!r}", number) from None
    bad = [piece for piece in ids if not 0 <= piece < size]
    if bad:
        raise InputError(path, f"{side} id {bad[0]} is outside the {side} vocabulary ({size} pieces)", number)
    return ids
