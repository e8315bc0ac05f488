"""Work done a chunk at a time whose finished chunks survive an interruption.

A command that works through a long input (``nmt align``, the links of ``nmt align
bootstrap``, the aligner of ``nmt shortlist`` and of ``nmt distill``'s shortlist stage,
distill's translation) takes it a chunk at a time (:func:`~nmt_cli.textio.iter_chunks`) and
keeps each chunk's result as a file of its own in a folder, written atomically once the
chunk is done, with the seconds it took beside it (``NAME.seconds``: a stage's cost is what
its chunks took, whichever session made them). The file's name holds the chunk's number
and a sha256 of the chunk's items and of the settings that make its result, so a rerun,
reading the same input again, finds the chunks it finished and works only on the others:
it resumes exactly where it stopped, and a chunk whose input or settings changed is made
again, never mixed in. Once the results are merged into the command's outputs, the chunks
go (:meth:`ChunkFolder.remove`), and with them nothing the folder held that they were not.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Generic, Iterable, Iterator, Sequence, TypeVar

from nmt_cli.fileio import atomic_open, atomic_write_text
from nmt_cli.progress import Progress
from nmt_cli.textio import iter_chunks

__all__ = ["CHUNKS", "Chunk", "ChunkFolder"]

#: the folder, beside a command's output, that keeps its finished chunks until the output is written
CHUNKS = ".chunks"
#: ends the name of the file beside a chunk that holds the seconds it took
SECONDS = ".seconds"

Item = TypeVar("Item")


@dataclass(frozen=True)
class Chunk(Generic[Item]):
    """A chunk of items, the file holding its result, whether it was made now (False: kept
    from a run before) and the seconds making it took, in whichever session made it."""

    items: list[Item]
    path: Path
    made: bool
    seconds: float


class ChunkFolder:
    """The finished chunks of one output, in ``folder``: ``suffix`` ends their names, and
    ``settings`` (JSON) is what besides its items decides a chunk's result."""

    def __init__(self, folder: str | os.PathLike, settings: Any, suffix: str):
        self.folder = Path(folder)
        self.suffix = suffix
        self._settings = json.dumps(settings, sort_keys=True, ensure_ascii=False)
        self._names = re.compile(rf"^(\d{{8}})-[0-9a-f]{{20}}{re.escape(suffix)}$")

    def key(self, chunk: Sequence[Any]) -> str:
        """What identifies a chunk's result: the sha256 of the settings and its items (JSON)."""
        digest = hashlib.sha256(self._settings.encode("utf-8"))
        for item in chunk:
            digest.update(b"\n" + json.dumps(item, ensure_ascii=False).encode("utf-8"))
        return digest.hexdigest()[:20]

    def remaining(self, total: int, size: int) -> int:
        """Of ``total`` items taken ``size`` at a time, those in chunks not yet in the folder
        (under any key): what a rerun will work on when its input and settings are unchanged,
        the total of its progress."""
        kept = {int(match.group(1)) for match in map(self._names.match, self._entries()) if match}
        return total - sum(min(size, total - number * size) for number in kept if number * size < total)

    def results(self, items: Iterable[Item], size: int, make: Callable[[list[Item], IO[bytes]], None],
                progress: Progress | None = None) -> Iterator[Chunk[Item]]:
        """Each chunk of ``size`` items, taken lazily, with the file of its result: a finished
        one is kept, any other is made by ``make(chunk, handle)`` into a file written
        atomically. ``progress`` counts the items of the chunks made now."""
        for number, chunk in enumerate(iter_chunks(items, size)):
            path = self.folder / f"{number:08d}-{self.key(chunk)}{self.suffix}"
            made = not path.is_file()
            if made:
                self.folder.mkdir(parents=True, exist_ok=True)
                began = time.perf_counter()
                with atomic_open(path, "wb") as handle:
                    make(chunk, handle)
                    seconds = time.perf_counter() - began
                    atomic_write_text(_seconds_path(path), f"{seconds!r}\n")  # before the chunk appears
                if progress is not None:
                    progress.update(len(chunk))
            else:
                seconds = _read_seconds(path)
            yield Chunk(chunk, path, made, seconds)

    def remove(self) -> None:
        """Drop the chunks (once the output that merges them is written): their files, the
        seconds beside them and what a killed writer left of one; the folder too once empty,
        so that nothing else in it is deleted."""
        for name in self._entries():
            base = name[1:] if name.startswith(".") else name  # a lock or temporary: .NAME.lock, .NAME.PID.X.tmp
            chunk = base.split(".", 1)[0] + self.suffix
            if self._names.match(chunk) and base.startswith(chunk):
                with contextlib.suppress(FileNotFoundError):
                    (self.folder / name).unlink()
        with contextlib.suppress(OSError):
            self.folder.rmdir()

    def _entries(self) -> list[str]:
        try:
            return [entry.name for entry in self.folder.iterdir() if entry.is_file()]
        except FileNotFoundError:
            return []


def _seconds_path(path: Path) -> Path:
    return path.with_name(path.name + SECONDS)


def _read_seconds(path: Path) -> float:
    """The seconds a chunk took (0 for one kept without them)."""
    try:
        return float(_seconds_path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return 0.0
