"""What the sources that read a local folder share (``files``, ``tsv``, ``jsonl``): the
folder, the files of a split and their sha256 fingerprints."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from nmt_cli.config import DataConfig
from nmt_cli.data.sources.base import Corpus, file_digest
from nmt_cli.errors import InputError
from nmt_cli.textio import decode_line, iter_raw_lines


def lines_or_problems(path: Path) -> Iterator[tuple[int, str | None, str]]:
    """(line number, text or None, problem) for every line: a line that is not UTF-8 is
    reported rather than raised, so ``data.on_invalid`` decides what happens to its pair."""
    for number, raw in iter_raw_lines(path):
        try:
            yield number, decode_line(raw, path, number), ""
        except InputError as exc:
            yield number, None, exc.problem


class LocalFilesCorpus(Corpus):
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
