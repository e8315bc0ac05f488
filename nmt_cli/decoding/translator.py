"""Text in, translations out: the Python API behind ``nmt translate``.

A :class:`Translator` holds a model, the SentencePiece models it was trained with and
the search settings. It never prints and never reads files or stdin: callers pass
strings and get :class:`~nmt_cli.decoding.hypothesis.Hypothesis` objects back.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import torch

from nmt_cli import __version__
from nmt_cli.allocator import keep_freed_memory
from nmt_cli.checkpoint import load_averaged, load_checkpoint
from nmt_cli.config import Config, DecodeConfig
from nmt_cli.decoding.generator import check_decode_config, generate
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.errors import NmtError
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.precision import Precision
from nmt_cli.tokenization import Tokenizer


def resolve_device(device: str | torch.device) -> torch.device:
    """``"cpu"``, ``"cuda"`` or ``"cuda:N"``; CUDA must be present."""
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise NmtError(f"unknown device {device!r}; use cpu or cuda") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise NmtError(f"device {device!r} requested but CUDA is not available on this machine")
    if resolved.type not in ("cpu", "cuda"):
        raise NmtError(f"unsupported device {device!r}; use cpu or cuda")
    return resolved


def averaged_label(averaged: Sequence[str]) -> str | None:
    """``N:first..last`` for weights averaged over N checkpoints, None for a single one.

    Read from the checkpoint's state, so ``--average last:N`` at translation time and a
    checkpoint written by ``nmt average`` are both named in the signature.
    """
    if not averaged:
        return None
    names = [Path(path).name for path in averaged]
    return f"{len(names)}:{names[0]}..{names[-1]}"


def with_decode_overrides(decode: DecodeConfig, overrides: Mapping[str, Any]) -> DecodeConfig:
    """``decode`` with ``{"beam_size": 4}`` applied, checked like ``--set decode.beam_size=4``."""
    if not overrides:
        return decode
    changes = {f"decode.{key}": value for key, value in overrides.items()}
    return Config(decode=decode).with_overrides(changes).decode


class Translator:
    """A model with its tokenizer and search settings; ``translate(list[str])``.

    On CUDA the model runs under bf16 autocast (fp16 on GPUs without native bf16); the search
    itself stays in float32/64.
    """

    def __init__(
        self,
        model: Seq2SeqModel,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        device: str | torch.device = "cpu",
        checkpoint: str = "",
        step: int = 0,
        average: str | None = None,
    ):
        check_decode_config(decode)
        keep_freed_memory()
        self.device = resolve_device(device)
        # bf16 autocast on GPUs with native bf16, fp16 on older ones (which only emulate bf16), fp32 on CPU
        self.precision = Precision("auto", self.device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.decode = decode
        self.checkpoint = checkpoint
        self.step = step
        self.average = average

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike,
        device: str | torch.device = "cpu",
        average: str | None = None,
        decode: DecodeConfig | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> "Translator":
        """Load a checkpoint (or a run's newest one), optionally averaging ``last:N``.

        ``decode`` defaults to the checkpoint's own ``decode`` settings; ``overrides``
        (``{"beam_size": 1}``) are applied on top and validated like ``--set decode.*``.
        """
        resolved_device = resolve_device(device)
        checkpoint = load_averaged(average, path) if average else load_checkpoint(path)
        settings = with_decode_overrides(decode or checkpoint.config.decode, overrides or {})
        model = checkpoint.build_model(resolved_device)
        return cls(model, checkpoint.tokenizer, settings, resolved_device,
                   checkpoint=str(checkpoint.path), step=checkpoint.step,
                   average=averaged_label(checkpoint.state.get("averaged", [])))

    def with_decode(self, overrides: Mapping[str, Any]) -> "Translator":
        """The same model and tokenizer with other search settings (``{"beam_size": 1}``).

        The settings are validated like ``--set decode.*``; the model is shared, not copied.
        """
        variant = copy.copy(self)
        variant.decode = with_decode_overrides(self.decode, overrides)
        check_decode_config(variant.decode)
        return variant

    def translate(self, texts: Sequence[str], with_attention: bool = False) -> list[Hypothesis]:
        """One hypothesis per text, in order; blank texts give empty translations.

        Characters the SentencePiece model does not know become its unknown token.
        """
        sources = [self.tokenizer.encode_src(text) if text.strip() else [] for text in texts]
        with self.precision.autocast():
            hypotheses = generate(self.model, sources, self.decode, self.device, with_attention)
        return [self._with_text(hypothesis) for hypothesis in hypotheses]

    def translate_stream(
        self, texts: Iterable[str], chunk_size: int = 2000, with_attention: bool = False
    ) -> Iterator[tuple[str, Hypothesis]]:
        """``(text, hypothesis)`` pairs in input order, translating ``chunk_size`` texts at a time.

        Only one chunk is held in memory, so inputs of any size stream through.
        """
        chunk: list[str] = []
        for text in texts:
            chunk.append(text)
            if len(chunk) == chunk_size:
                yield from zip(chunk, self.translate(chunk, with_attention))
                chunk = []
        if chunk:
            yield from zip(chunk, self.translate(chunk, with_attention))

    def signature(self) -> str:
        """Every setting that changes the output, sacreBLEU-style ``key:value|...``."""
        decode = self.decode
        parts = [
            f"checkpoint:{self.checkpoint or '-'}",
            f"step:{self.step}",
            f"average:{self.average or 'no'}",
            f"beam:{decode.beam_size}",
            f"alpha:{decode.alpha:g}",
            f"maxlen:{decode.max_len_a:g}*src+{decode.max_len_b}",
            f"minlen:{decode.min_len}",
        ]
        if decode.sampling != "none":
            limit = f"top_k:{decode.top_k}" if decode.sampling == "top_k" else f"top_p:{decode.top_p:g}"
            parts += [f"sampling:{decode.sampling}", limit, f"temperature:{decode.temperature:g}",
                      f"seed:{decode.seed}"]
        parts.append(f"version:{__version__}")
        return "|".join(parts)

    def _with_text(self, hypothesis: Hypothesis) -> Hypothesis:
        nbest = [dataclasses.replace(h, text=self.tokenizer.decode_tgt(h.tokens)) for h in hypothesis.nbest]
        return dataclasses.replace(hypothesis, text=self.tokenizer.decode_tgt(hypothesis.tokens), nbest=nbest)


__all__ = ["Translator", "resolve_device"]
