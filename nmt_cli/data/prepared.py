"""Read access to a prepared directory (the output of ``nmt prepare``).

``PreparedData(path)`` checks the manifest once, and that every token file has the size
the manifest records (a ``stat`` each); token shards are opened only when a split
is asked for, so opening a WMT-size directory costs nothing. A directory of an older
format (format version 1: one token file per side, before shards) is refused with a
message saying to prepare it again. :meth:`PreparedData.verify`
also checks the sha256 sums the manifest records (``nmt train`` does, before it starts).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from nmt_cli.config import Config, load_config
from nmt_cli.data.binarized import SIDES, ParallelSplit, array_files
from nmt_cli.data.prepare import FORMAT, FORMAT_VERSION, MANIFEST
from nmt_cli.data.sources import file_digest
from nmt_cli.errors import NmtError
from nmt_cli.tokenization import Tokenizer


class PreparedData:
    """``manifest``, ``tokenizer``, ``src_lang``, ``tgt_lang``, ``config`` and the splits."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        manifest_path = self.path / MANIFEST
        if not manifest_path.is_file():
            raise NmtError(f"{self.path}: not a prepared directory (no {MANIFEST}); run `nmt prepare --out {self.path}`")
        try:
            manifest: Any = json.loads(manifest_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise NmtError(f"{manifest_path}: invalid JSON ({exc})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise NmtError(f"{manifest_path}: not a manifest written by nmt prepare")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise NmtError(f"{manifest_path}: format version {manifest.get('format_version')} is not supported "
                           f"(expected {FORMAT_VERSION}, token arrays in shards); prepare the data again "
                           f"(nmt prepare --force --out {self.path})")
        self.manifest: dict[str, Any] = manifest
        self.src_lang: str = manifest["src_lang"]
        self.tgt_lang: str = manifest["tgt_lang"]
        self._check_sizes()
        self.tokenizer = Tokenizer.from_directory(self.path)
        self.config: Config = load_config(self.path / "config.yaml")

    def _recorded_arrays(self) -> dict[str, dict[str, Any]]:
        """Size and sha256 of each token file (manifests written before they were recorded: none)."""
        return self.manifest.get("arrays", {})

    def _check_sizes(self) -> None:
        for name, record in self._recorded_arrays().items():
            path = self.path / name
            size = path.stat().st_size if path.is_file() else None
            if size != record["bytes"]:
                found = "is missing" if size is None else f"has {size:,} bytes"
                raise NmtError(f"{path}: {found} but the manifest records {record['bytes']:,} (truncated or "
                               "changed since nmt prepare); prepare the data again")

    def verify(self) -> None:
        """Open every split, check its offsets and lengths agree, and compare each token file
        with the sha256 the manifest records."""
        for name in self.split_names:
            split = self.split(name)
            split.src.check()
            split.tgt.check()
            for file in array_files(name, len(self.manifest["splits"][name]["shards"])):
                record = self._recorded_arrays().get(file)
                if record is not None and file_digest(self.path / file)[0] != record["sha256"]:
                    raise NmtError(f"{self.path / file}: its content differs from what nmt prepare wrote "
                                   "(sha256 mismatch); prepare the data again")

    @property
    def split_names(self) -> list[str]:
        return list(self.manifest["splits"])

    def _check_split(self, name: str) -> None:
        if name not in self.manifest["splits"]:
            raise NmtError(f"{self.path}: no split '{name}' (splits: {', '.join(self.split_names)})")

    def split(self, name: str) -> ParallelSplit:
        """Token ids of ``train``, ``valid`` or ``test`` (read from their shards as asked for)."""
        self._check_split(name)
        stats = self.manifest["splits"][name]
        split = ParallelSplit(self.path, name, self.manifest["token_dtype"], stats["shards"])
        if len(split) != stats["kept"]:
            raise NmtError(f"{split.src.lengths_path}: holds {len(split):,} sentences but the manifest records "
                           f"{stats['kept']:,}; prepare the data again")
        return split

    def corpus_mix(self) -> list[tuple[int, int, float]]:
        """The training split's corpora as ``(first pair, end, weight)``: one per corpus of
        ``data.corpora`` (and the main source), in order, or the whole split at weight 1."""
        train = self.manifest["splits"]["train"]
        corpora = train.get("corpora") or [{"pairs": train["kept"], "weight": 1.0}]
        ends = np.cumsum([corpus["pairs"] for corpus in corpora]).tolist()
        if ends[-1] != train["kept"]:
            raise NmtError(f"{self.path / MANIFEST}: its corpora hold {ends[-1]:,} training pairs, not the "
                           f"{train['kept']:,} it records; prepare the data again")
        return [(end - corpus["pairs"], end, float(corpus["weight"])) for corpus, end in zip(corpora, ends)]

    def text_path(self, split: str, side: str) -> Path:
        """The cleaned text of one side (``"src"`` or ``"tgt"``), one sentence per line."""
        self._check_split(split)
        if side not in SIDES:
            raise ValueError(f"side must be 'src' or 'tgt', not {side!r}")
        return self.path / f"{split}.{self.src_lang if side == 'src' else self.tgt_lang}"

    def gold_alignment_path(self, split: str) -> Path | None:
        """The split's word links (Pharaoh, source-target words): the synthetic corpus's gold
        ones, or those ``data.alignment_path`` gave; None when it has none."""
        self._check_split(split)
        path = self.path / f"{split}.align"
        return path if path.is_file() else None

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={s['kept']}" for name, s in self.manifest["splits"].items())
        return f"PreparedData({str(self.path)!r}, {self.src_lang}-{self.tgt_lang}, {sizes})"
