"""The ``tsv`` data source: see :class:`TsvCorpus`."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from nmt_cli.data.sources.base import RawPair
from nmt_cli.data.sources.local import LocalFilesCorpus, lines_or_problems
from nmt_cli.registry import DATA_SOURCES


@DATA_SOURCES.register("tsv")
class TsvCorpus(LocalFilesCorpus):
    """``<path>/<split>.tsv``: ``source<TAB>target`` lines (a first line naming the two languages is a header)."""

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
