"""The model a server answers with: a translation engine plus what requests are checked against.

The service uses only the engine interface :class:`Engine` (which
:class:`~nmt_cli.decoding.Translator` offers), so any engine with the same methods can
serve; :func:`load_served_model` is the one place that loads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

import torch

from nmt_cli.checkpoint import load_checkpoint_config
from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.decoding import load_translator
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.decoding.request import Request
from nmt_cli.export import is_export_dir, read_export_record
from nmt_cli.tokenization import Tokenizer

__all__ = ["Engine", "ServedModel", "load_served_model", "source_token_limit"]


class Engine(Protocol):
    """What the service needs from a translation engine."""

    decode: DecodeConfig
    tokenizer: Tokenizer
    device: torch.device

    def translate(self, sentences: Sequence[str | Request], with_attention: bool = False,
                  token_scores: bool = False) -> list[Hypothesis]: ...

    def with_decode(self, overrides: Mapping[str, Any]) -> "Engine": ...

    def signature(self) -> str: ...


@dataclass(frozen=True)
class ServedModel:
    """An engine, its language pair and the longest source (in pieces) it accepts."""

    engine: Engine
    src_lang: str
    tgt_lang: str
    max_source_tokens: int


def load_served_model(checkpoint: str | os.PathLike, **translator_options: Any) -> ServedModel:
    """Load ``checkpoint`` (a checkpoint, run or ``nmt export`` directory) with
    :func:`nmt_cli.decoding.load_translator` and ``translator_options`` (as ``nmt translate``'s)."""
    exported = is_export_dir(checkpoint)
    config = read_export_record(checkpoint).config() if exported else load_checkpoint_config(checkpoint)
    engine = load_translator(checkpoint, **translator_options)
    return ServedModel(engine, config.data.src_lang, config.data.tgt_lang,
                       source_token_limit(config.model, engine.decode))


def source_token_limit(model: ModelConfig, decode: DecodeConfig) -> int:
    """Source pieces a request may send: ``model.max_positions``, and with learned positions
    also no more than lets the longest allowed output (``a * S + b`` tokens after BOS) fit the table."""
    limit = model.max_positions
    if model.positions == "learned" and model.arch.endswith("transformer") and decode.max_len_a > 0:
        limit = min(limit, int((model.max_positions - 1 - decode.max_len_b) / decode.max_len_a))
    return max(limit, 1)
