"""The ``jsonl`` data source: see :class:`JsonlCorpus`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from nmt_cli.data.sources.base import RawPair, pair_from_record
from nmt_cli.data.sources.local import LocalFilesCorpus, lines_or_problems
from nmt_cli.registry import DATA_SOURCES


@DATA_SOURCES.register("jsonl")
class JsonlCorpus(LocalFilesCorpus):
    """``<path>/<split>.jsonl``: one object per line with the two language keys, or a ``translation`` object."""

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
            yield pair_from_record(record, line, path, self.src_lang, self.tgt_lang)
