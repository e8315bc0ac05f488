"""``nmt-export.json``: what an exported directory holds and where it came from."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt_cli.config import Config, DecodeConfig
from nmt_cli.errors import NmtError

EXPORT_RECORD = "nmt-export.json"
RECORD_FORMAT = 1


@dataclass(frozen=True)
class ExportRecord:
    """The parsed record of an exported model directory."""

    path: Path
    data: dict[str, Any]

    @property
    def engine(self) -> str:
        return str(self.data["engine"])

    @property
    def step(self) -> int:
        return int(self.data.get("step", 0))

    @property
    def source_checkpoint(self) -> str:
        return str(self.data.get("source_checkpoint", ""))

    @property
    def averaged(self) -> list[str]:
        return list(self.data.get("averaged") or [])

    @property
    def quantization(self) -> str:
        return str(self.data["quantization"])

    @property
    def positions(self) -> int:
        """Rows of the exported position table: the longest source and output it can encode."""
        return int(self.data["positions"])

    @property
    def shortlist(self) -> dict[str, Any] | None:
        """The lexical shortlist written as the vocabulary map (its file, sizes, fingerprint), or None."""
        return self.data.get("shortlist")

    @property
    def tokenizer_files(self) -> list[str]:
        return list(self.data["tokenizer_files"])

    def decode_defaults(self) -> DecodeConfig:
        """The run's ``decode`` settings, saved at export time."""
        return self.config().decode

    def config(self) -> Config:
        """The whole config the exported checkpoint was trained with (languages, model, decoding)."""
        return Config.from_dict(self.data["config"])


def is_export_dir(path: str | os.PathLike) -> bool:
    """True when ``path`` is a directory written by ``nmt export``."""
    return (Path(path) / EXPORT_RECORD).is_file()


def read_export_record(path: str | os.PathLike) -> ExportRecord:
    """Parse ``<path>/nmt-export.json``; a missing or broken record is a one-line error."""
    path = Path(path)
    file = path / EXPORT_RECORD
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise NmtError(f"{file}: unreadable export record ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT or "config" not in data:
        raise NmtError(f"{file}: not an nmt-cli export record of format {RECORD_FORMAT}")
    return ExportRecord(path=path, data=data)


__all__ = ["EXPORT_RECORD", "RECORD_FORMAT", "ExportRecord", "is_export_dir", "read_export_record"]
