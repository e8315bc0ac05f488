"""Parallel text from every source kind through one interface: numbered (source, target) pairs.

``open_corpus(data_config)`` returns a :class:`Corpus` for ``data.source``:

* ``synthetic``: the built-in grammar (:mod:`nmt_cli.data.synthetic`), with gold alignments;
* ``files``: ``<path>/<split>.<lang>`` text files read line by line in lockstep;
* ``tsv``: ``<path>/<split>.tsv`` with ``source<TAB>target`` (a first line naming the two
  languages, e.g. ``en<TAB>de``, is read as a header that says which column is which);
* ``jsonl``: ``<path>/<split>.jsonl``, objects with the two language keys or a
  ``translation`` object holding them;
* ``hf``: ``datasets.load_dataset(path, hf_config, split=..., streaming=True)``;
  ``hf_disk``: ``datasets.load_from_disk(path)[split]``. Rows have a ``translation``
  column (``{"de": ..., "en": ...}``) or one column per language.

Readers never decide what to do with a bad pair: a pair that cannot be read (invalid
UTF-8, a line with no partner, a malformed record) comes out with a :class:`Problem`, and
:mod:`nmt_cli.data.cleaning` raises it or counts it according to ``data.on_invalid``.
Problems no skipping can repair (missing or empty files, a missing language) raise here.
Line numbers are 1-based lines of the file (rows for ``hf``), so line N of the source
always stays with line N of the target.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any, Iterable, Iterator

from nmt_cli.config import DataConfig
from nmt_cli.data import synthetic
from nmt_cli.errors import InputError, NmtError
from nmt_cli.textio import decode_line, iter_raw_lines

PREPARED_SPLITS = ("train", "valid", "test")
HF_BATCH = 1000


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

    kind = ""

    def __init__(self, data: DataConfig):
        self.data = data
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


def open_corpus(data: DataConfig) -> Corpus:
    """The :class:`Corpus` for ``data.source``."""
    kinds: dict[str, type[Corpus]] = {
        "synthetic": SyntheticCorpus, "files": TextFilesCorpus, "tsv": TsvCorpus,
        "jsonl": JsonlCorpus, "hf": HubCorpus, "hf_disk": DiskDatasetCorpus,
    }
    return kinds[data.source](data)


# ---- synthetic ------------------------------------------------------------------------------


class SyntheticCorpus(Corpus):
    """The built-in German-English grammar; each split has its own seed (``<seed>:<split>``)."""

    kind = "synthetic"

    def __init__(self, data: DataConfig):
        super().__init__(data)
        self.sizes = {"train": data.synthetic_train_size, "valid": data.synthetic_valid_size,
                      "test": data.synthetic_test_size}

    def splits(self) -> dict[str, str]:
        return {name: name for name in PREPARED_SPLITS if self.sizes[name] > 0}

    def pairs(self, split: str) -> Iterator[RawPair]:
        german_first = self.src_lang == "de"
        stream = synthetic.generate(f"{self.data.synthetic_seed}:{split}")
        for line, pair in zip(range(1, self.sizes[split] + 1), stream):
            if german_first:
                yield RawPair(line, pair.german, pair.english, pair.alignment)
            else:
                yield RawPair(line, pair.english, pair.german, invert_alignment(pair.alignment))

    def fingerprint(self, split: str) -> dict[str, Any]:
        return {"generator": "synthetic", "grammar_version": synthetic.GRAMMAR_VERSION,
                "seed": f"{self.data.synthetic_seed}:{split}", "pairs": self.sizes[split]}

    def size_hint(self, split: str) -> int | None:
        return self.sizes[split]

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "seed": self.data.synthetic_seed, "sizes": self.sizes,
                "grammar_version": synthetic.GRAMMAR_VERSION}


def invert_alignment(alignment: str) -> str:
    """Swap the sides of a Pharaoh alignment (``i-j`` -> ``j-i``), sorted."""
    links = sorted((int(j), int(i)) for i, _, j in (link.partition("-") for link in alignment.split()))
    return " ".join(f"{i}-{j}" for i, j in links)


# ---- local files ----------------------------------------------------------------------------


def file_digest(path: Path) -> tuple[str, int]:
    """sha256 and number of lines of a file, read in 1 MiB blocks."""
    digest, lines, last = hashlib.sha256(), 0, b"\n"
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
            lines += block.count(b"\n")
            last = block[-1:]
    return digest.hexdigest(), lines + (last != b"\n")


def lines_or_problems(path: Path) -> Iterator[tuple[int, str | None, str]]:
    """(line number, text or None, problem) for every line: a line that is not UTF-8 is
    reported rather than raised, so ``data.on_invalid`` decides what happens to its pair."""
    for number, raw in iter_raw_lines(path):
        try:
            yield number, decode_line(raw, path, number), ""
        except InputError as exc:
            yield number, None, exc.problem


class _LocalFilesCorpus(Corpus):
    """A folder with one or more files per split; fingerprints are their sha256 sums."""

    def __init__(self, data: DataConfig):
        super().__init__(data)
        self.folder = Path(data.path).expanduser().resolve()
        if not self.folder.is_dir():
            raise InputError(self.folder, f"data folder not found (data.path: {data.path})")
        self._digests: dict[Path, tuple[str, int]] = {}

    def files(self, split: str) -> list[Path]:
        raise NotImplementedError

    def _checked(self, path: Path, what: str) -> Path:
        if not path.is_file():
            found = sorted(p.name for p in self.folder.iterdir() if p.is_file() and not p.name.startswith("."))
            raise InputError(path, f"file not found ({what}; the folder has: {', '.join(found[:12]) or 'no files'})")
        if path.stat().st_size == 0:
            raise InputError(path, "empty file")
        return path

    def _digest(self, path: Path) -> tuple[str, int]:
        if path not in self._digests:
            self._digests[path] = file_digest(path)
        return self._digests[path]

    def fingerprint(self, split: str) -> dict[str, Any]:
        return {path.name: self._digest(path)[0] for path in self.files(split)}

    def size_hint(self, split: str) -> int | None:
        return self._digest(self.files(split)[0])[1]

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.folder), "splits": self.splits()}


class TextFilesCorpus(_LocalFilesCorpus):
    kind = "files"

    def files(self, split: str) -> list[Path]:
        return [self._checked(self.folder / f"{split}.{lang}", f"split '{split}', language '{lang}'")
                for lang in (self.src_lang, self.tgt_lang)]

    def pairs(self, split: str) -> Iterator[RawPair]:
        src_path, tgt_path = self.files(split)
        for src, tgt in zip_longest(lines_or_problems(src_path), lines_or_problems(tgt_path)):
            if src is None or tgt is None:
                short, long_, (line, _, _) = ((src_path, tgt_path, tgt) if src is None else (tgt_path, src_path, src))
                yield RawPair.invalid(line, "unpaired_line", long_,
                                      f"{short.name} ends at line {line - 1} but {long_.name} goes on "
                                      "(the files have different line counts)")
                continue
            (line, source, src_problem), (_, target, tgt_problem) = src, tgt
            if source is None or target is None:
                path, problem = (src_path, src_problem) if source is None else (tgt_path, tgt_problem)
                yield RawPair.invalid(line, "invalid_utf8", path, problem)
            else:
                yield RawPair(line, source, target)


class TsvCorpus(_LocalFilesCorpus):
    kind = "tsv"

    def files(self, split: str) -> list[Path]:
        return [self._checked(self.folder / f"{split}.tsv", f"split '{split}'")]

    def pairs(self, split: str) -> Iterator[RawPair]:
        (path,) = self.files(split)
        columns = (0, 1)
        for line, text, problem in lines_or_problems(path):
            if text is None:
                yield RawPair.invalid(line, "invalid_utf8", path, problem)
                continue
            fields = text.split("\t")
            if line == 1 and len(fields) == 2 and set(fields) == {self.src_lang, self.tgt_lang}:
                columns = (fields.index(self.src_lang), fields.index(self.tgt_lang))
                continue
            if len(fields) != 2:
                yield RawPair.invalid(line, "bad_record", path, f"expected 2 tab-separated fields, found {len(fields)}")
            else:
                yield RawPair(line, fields[columns[0]], fields[columns[1]])


class JsonlCorpus(_LocalFilesCorpus):
    kind = "jsonl"

    def files(self, split: str) -> list[Path]:
        return [self._checked(self.folder / f"{split}.jsonl", f"split '{split}'")]

    def pairs(self, split: str) -> Iterator[RawPair]:
        (path,) = self.files(split)
        for line, text, problem in lines_or_problems(path):
            if text is None:
                yield RawPair.invalid(line, "invalid_utf8", path, problem)
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                yield RawPair.invalid(line, "bad_record", path, f"invalid JSON ({exc.msg})")
                continue
            except (ValueError, RecursionError) as exc:  # a number of thousands of digits, deep nesting
                yield RawPair.invalid(line, "bad_record", path, f"unreadable JSON ({str(exc).split(':')[0]})")
                continue
            yield _pair_from_record(record, line, path, self.src_lang, self.tgt_lang)


def _pair_from_record(record: Any, line: int, where: str | Path, src_lang: str, tgt_lang: str) -> RawPair:
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


# ---- Hugging Face datasets ------------------------------------------------------------------


class _DatasetsCorpus(Corpus):
    """Rows of a ``datasets`` split, read in batches; the language columns are found once."""

    def dataset(self, split: str) -> Any:
        raise NotImplementedError

    def pairs(self, split: str) -> Iterator[RawPair]:
        dataset = self.dataset(split)
        where = f"{self.data.path}[{split}]"
        line = 0
        for batch in dataset.iter(batch_size=HF_BATCH):
            if line == 0:
                self._check_columns(batch, where)
            rows = batch.get("translation") or [dict(zip(batch, values)) for values in zip(*batch.values())]
            for record in rows:
                line += 1
                yield _pair_from_record(record, line, where, self.src_lang, self.tgt_lang)

    def _check_columns(self, batch: dict[str, list], where: str) -> None:
        if "translation" in batch:
            return
        missing = [lang for lang in (self.src_lang, self.tgt_lang) if lang not in batch]
        if missing:
            raise InputError(where, f"no 'translation' column and no '{missing[0]}' column "
                                    f"(columns: {', '.join(batch) or 'none'})")


def _directory_fingerprint(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` (relative path -> digest)."""
    return {str(p.relative_to(folder)): file_digest(p)[0]
            for p in sorted(folder.rglob("*")) if p.is_file() and ".cache" not in p.parts}


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class HubCorpus(_DatasetsCorpus):
    """``load_dataset(path, hf_config, split=...)``: a hub id or a local folder in hub layout."""

    kind = "hf"

    def dataset(self, split: str) -> Any:
        import datasets

        try:
            return datasets.load_dataset(self.data.path, self.data.hf_config or None, split=split, streaming=True)
        except Exception as exc:  # datasets raises many types; show one line, never a traceback
            raise NmtError(f"{self.data.path}: cannot load split '{split}' ({_one_line(exc)})") from None

    def fingerprint(self, split: str) -> dict[str, Any]:
        identity = {"dataset": self.data.path, "config": self.data.hf_config, "split": split}
        local = Path(self.data.path).expanduser()
        if local.is_dir():
            identity["files"] = _directory_fingerprint(local.resolve())
        return identity


class DiskDatasetCorpus(_DatasetsCorpus):
    """A ``DatasetDict.save_to_disk`` folder, read with ``load_from_disk``."""

    kind = "hf_disk"

    def __init__(self, data: DataConfig):
        super().__init__(data)
        self.folder = Path(data.path).expanduser().resolve()
        self._loaded: Any = None

    def _dataset_dict(self) -> Any:
        if self._loaded is None:
            import datasets

            try:
                self._loaded = datasets.load_from_disk(str(self.folder))
            except Exception as exc:
                raise InputError(self.folder, f"cannot load a saved dataset ({_one_line(exc)})") from None
            if not isinstance(self._loaded, datasets.DatasetDict):
                raise InputError(self.folder, "expected a DatasetDict (with splits) saved by save_to_disk")
        return self._loaded

    def dataset(self, split: str) -> Any:
        loaded = self._dataset_dict()
        if split not in loaded:
            raise InputError(self.folder, f"no split '{split}' (splits: {', '.join(loaded)})")
        return loaded[split]

    def fingerprint(self, split: str) -> dict[str, Any]:
        self.dataset(split)  # fails with one line when the folder or split is missing
        return {"split": split, "files": _directory_fingerprint(self.folder / split)}

    def size_hint(self, split: str) -> int | None:
        return len(self.dataset(split))

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.folder), "splits": self.splits()}


def iter_limited(pairs: Iterable[RawPair], limit: int) -> Iterator[RawPair]:
    """The first ``limit`` pairs (all when ``limit`` is 0)."""
    for number, pair in enumerate(pairs, 1):
        if limit and number > limit:
            return
        yield pair
