"""A checkpoint loaded for alignment: text pairs -> pieces -> forced-decoding attention."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from nmt_cli.alignment.extract import forced_attention
from nmt_cli.alignment.reader import (AttentionReading, HeadSelection, SentenceAlignment, default_full_context,
                                      default_null, read_alignment)
from nmt_cli.checkpoint import load_checkpoint
from nmt_cli.device import resolve_device
from nmt_cli.errors import NmtError
from nmt_cli.tokenization import Tokenizer

__all__ = ["EncodedPair", "AlignmentModel", "encode_pairs"]


@dataclass(frozen=True)
class EncodedPair:
    """One sentence pair as surface pieces (an unknown character shows as itself) and ids."""

    src_pieces: list[str]
    tgt_pieces: list[str]
    src_ids: list[int]
    tgt_ids: list[int]

    def read(self, attention: np.ndarray, reading: AttentionReading) -> SentenceAlignment:
        """Words, word matrix and links from this pair's selected piece attention (T, S)."""
        return read_alignment(self.src_pieces, self.tgt_pieces, attention, reading)


def encode_pairs(tokenizer: Tokenizer, src_lines: Sequence[str], tgt_lines: Sequence[str]) -> list[EncodedPair]:
    """Sentence pairs as surface pieces and ids, as forced decoding reads them."""
    if len(src_lines) != len(tgt_lines):
        raise NmtError(f"{len(src_lines)} source but {len(tgt_lines)} target sentences")
    src_pieces = [tokenizer.src.encode(line, out_type=str) for line in src_lines]
    tgt_pieces = [tokenizer.tgt.encode(line, out_type=str) for line in tgt_lines]
    return [
        EncodedPair(src, tgt, tokenizer.src.piece_to_id(src), tokenizer.tgt.piece_to_id(tgt))
        for src, tgt in zip(src_pieces, tgt_pieces)
    ]


class AlignmentModel:
    """A model and its tokenizer, loaded once; forced decoding in batches of ``batch_size`` pairs."""

    def __init__(self, path: str | os.PathLike, device: str = "cpu", batch_size: int = 32):
        checkpoint = load_checkpoint(path)
        self.path = checkpoint.path
        self.step = checkpoint.step
        self.arch = checkpoint.config.model.arch
        self.config = checkpoint.config
        self.tokenizer = checkpoint.tokenizer
        self.model = checkpoint.build_model(resolve_device(device))
        self.batch_size = batch_size

    @property
    def layers_and_heads(self) -> tuple[int, int]:
        return self.model.attention_layers, self.model.attention_heads

    def check(self, selection: HeadSelection) -> None:
        """Fail with one line naming this checkpoint when the selection does not exist in it."""
        try:
            selection.check(*self.layers_and_heads)
        except NmtError as exc:
            raise NmtError(f"{self.path}: {exc}") from None

    def encode(self, src_lines: Sequence[str], tgt_lines: Sequence[str]) -> list[EncodedPair]:
        return encode_pairs(self.tokenizer, src_lines, tgt_lines)

    def attention(self, pairs: Sequence[EncodedPair], shift: bool,
                  selection: HeadSelection | None = None) -> list[np.ndarray]:
        """Piece attention per pair: (L, H, T, S), or (T, S) averaged over ``selection``; in the
        decoder pass the model's guided head learned in (:func:`default_full_context`), with
        its null position's column last when it has one (:func:`default_null`)."""
        ids = [(pair.src_ids, pair.tgt_ids) for pair in pairs]
        return forced_attention(self.model, ids, shift, self.batch_size, selection,
                                full_context=default_full_context(self.config), null=default_null(self.config))
