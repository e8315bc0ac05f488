"""The ``files`` data source: see :class:`TextFilesCorpus`."""

from __future__ import annotations

from itertools import zip_longest
from pathlib import Path
from typing import Iterator

from nmt_cli.data.sources.base import RawPair
from nmt_cli.data.sources.local import LocalFilesCorpus, lines_or_problems
from nmt_cli.registry import DATA_SOURCES


@DATA_SOURCES.register("files")
class TextFilesCorpus(LocalFilesCorpus):
    """``<path>/<split>.<lang>``: one text file per language, read line by line in lockstep."""

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
