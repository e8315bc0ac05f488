"""Work done a chunk at a time whose finished chunks survive an interruption.

A command that streams a long input (``nmt align``, the links of ``nmt align bootstrap``)
takes it a chunk at a time (:func:`~nmt_cli.textio.iter_chunks`) and keeps each chunk's
result as a file of its own in a folder, written atomically once the chunk is done. The
file's name holds the chunk's number and a sha256 of the chunk's items and of the settings
that make its result, so a rerun, reading the same input again, finds the chunks it
finished and works only on the others: it resumes exactly where it stopped, and a chunk
whose input or settings changed is made again, never mixed in. Once the results are merged
into the command's outputs, the folder goes (:meth:`ChunkFolder.remove`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Sequence, TypeVar

from nmt_cli.fileio import atomic_open
from nmt_cli.textio import iter_chunks

__all__ = ["CHUNKS", "ChunkFolder", "ChunkResult"]

#: the folder, beside a command's output, that keeps its finished chunks until the output is written
CHUNKS = ".chunks"

Item = TypeVar("Item")
#: a chunk of items, the file holding its result, and whether it was made now (False: kept from a run before)
ChunkResult = tuple[list[Item], Path, bool]


class ChunkFolder:
    """The finished chunks of one output, in ``folder``: ``suffix`` ends their names, and
    ``settings`` (JSON) is what besides its items decides a chunk's result."""

    def __init__(self, folder: str | os.PathLike, settings: Any, suffix: str):
        self.folder = Path(folder)
        self.suffix = suffix
        self._settings = json.dumps(settings, sort_keys=True, ensure_ascii=False)

    def key(self, chunk: Sequence[Any]) -> str:
        """What identifies a chunk's result: the sha256 of the settings and its items (JSON)."""
        digest = hashlib.sha256(self._settings.encode("utf-8"))
        for item in chunk:
            digest.update(b"\n" + json.dumps(item, ensure_ascii=False).encode("utf-8"))
        return digest.hexdigest()[:20]

    def results(self, items: Iterable[Item], size: int,
                make: Callable[[list[Item], IO[bytes]], None]) -> Iterator[ChunkResult]:
        """Each chunk of ``size`` items, taken lazily, with the file of its result: a finished
        one is kept, any other is made by ``make(chunk, handle)`` into a file written atomically."""
        for number, chunk in enumerate(iter_chunks(items, size)):
            path = self.folder / f"{number:08d}-{self.key(chunk)}{self.suffix}"
            made = not path.is_file()
            if made:
                self.folder.mkdir(parents=True, exist_ok=True)
                with atomic_open(path, "wb") as handle:
                    make(chunk, handle)
            yield chunk, path, made

    def remove(self) -> None:
        """Drop the chunks (once the output that merges them is written)."""
        shutil.rmtree(self.folder, ignore_errors=True)
