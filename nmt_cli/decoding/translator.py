"""Text in, translations out: the Python API behind ``nmt translate``.

A :class:`Translator` holds a model, the SentencePiece models it was trained with and
the search settings. It never prints and never reads files or stdin: callers pass
strings and get :class:`~nmt_cli.decoding.hypothesis.Hypothesis` objects back.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import torch

from nmt_cli import __version__
from nmt_cli.allocator import keep_freed_memory
from nmt_cli.checkpoint import load_averaged, load_checkpoint
from nmt_cli.config import Config, DecodeConfig
from nmt_cli.decoding.generator import generate
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.device import resolve_device
from nmt_cli.errors import ConfigError, NmtError
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.precision import Precision
from nmt_cli.tokenization import Tokenizer


def averaged_label(averaged: Sequence[str]) -> str | None:
    """``N:first..last`` for weights averaged over N checkpoints, None for a single one.

    Read from the checkpoint's state, so ``--average last:N`` at translation time and a
    checkpoint written by ``nmt average`` are both named in the signature.
    """
    if not averaged:
        return None
    names = [Path(path).name for path in averaged]
    return f"{len(names)}:{names[0]}..{names[-1]}"


class LongInputError(NmtError):
    """Input ``index`` (0-based) has more source tokens than the model takes."""

    def __init__(self, index: int, length: int, limit: int):
        self.index, self.length, self.limit = index, length, limit
        super().__init__(f"input {index + 1}: {self.problem}")

    @property
    def problem(self) -> str:
        return (f"{self.length} source tokens, more than the model takes ({self.limit}, model.max_positions); "
                "--on-long-line truncate or skip translates such lines (decode.on_long_line)")


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
        device: str | torch.device = "auto",
        checkpoint: str = "",
        step: int = 0,
        average: str | None = None,
    ):
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
        device: str | torch.device = "auto",
        average: str | None = None,
        decode: DecodeConfig | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> "Translator":
        """Load a checkpoint (or a run's newest one), optionally averaging ``last:N``.

        ``decode`` defaults to the checkpoint's own ``decode`` settings; ``overrides``
        (``{"decode.beam_size": 1}``, as ``--set`` writes them) are applied on top and
        validated with the rest of the config. Only ``decode.*`` keys may change.
        """
        resolved_device = resolve_device(device)
        checkpoint = load_averaged(average, path) if average else load_checkpoint(path)
        other = sorted(key for key in overrides or {} if not key.startswith("decode."))
        if other:
            raise ConfigError(f"{other[0]}: only decode.* settings can change when translating")
        settings = Config(decode=decode or checkpoint.config.decode).with_overrides(overrides or {}).decode
        model = checkpoint.build_model(resolved_device)
        return cls(model, checkpoint.tokenizer, settings, resolved_device,
                   checkpoint=str(checkpoint.path), step=checkpoint.step,
                   average=averaged_label(checkpoint.state.get("averaged", [])))

    def translate(self, texts: Sequence[str], with_attention: bool = False) -> list[Hypothesis]:
        """One hypothesis per text, in order; blank texts give empty translations.

        Characters the SentencePiece model does not know become its unknown token.
        """
        sources = [self.tokenizer.encode_src(text) if text.strip() else [] for text in texts]
        handled = [self._fit(index, source) for index, source in enumerate(sources)]
        with self.precision.autocast():
            hypotheses = generate(self.model, [source for source, _ in handled], self.decode, self.device,
                                  with_attention)
        return [dataclasses.replace(self._with_text(hypothesis), long_input=how)
                for hypothesis, (_, how) in zip(hypotheses, handled)]

    def _fit(self, index: int, source: list[int]) -> tuple[list[int], str]:
        """A source the model can take, and what ``decode.on_long_line`` did to it."""
        limit = self.model.max_source_length
        if limit is None or len(source) <= limit:
            return source, ""
        if self.decode.on_long_line == "truncate":
            return source[:limit], "truncated"
        if self.decode.on_long_line == "skip":
            return [], "skipped"
        raise LongInputError(index, len(source), limit)

    def translate_stream(
        self, texts: Iterable[str], chunk_size: int = 2000, with_attention: bool = False
    ) -> Iterator[tuple[str, Hypothesis]]:
        """``(text, hypothesis)`` pairs in input order, translating ``chunk_size`` texts at a time.

        Only one chunk is held in memory, so inputs of any size stream through.
        """
        chunk: list[str] = []
        done = 0
        for text in texts:
            chunk.append(text)
            if len(chunk) == chunk_size:
                yield from zip(chunk, self._translate_chunk(chunk, done, with_attention))
                done += len(chunk)
                chunk = []
        if chunk:
            yield from zip(chunk, self._translate_chunk(chunk, done, with_attention))

    def _translate_chunk(self, chunk: list[str], offset: int, with_attention: bool) -> list[Hypothesis]:
        """:meth:`translate`; a too-long input is numbered within the whole stream."""
        try:
            return self.translate(chunk, with_attention)
        except LongInputError as exc:
            raise LongInputError(offset + exc.index, exc.length, exc.limit) from None

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
        if decode.on_long_line != "error":
            parts.append(f"long:{decode.on_long_line}")
        if decode.sampling != "none":
            limit = f"top_k:{decode.top_k}" if decode.sampling == "top_k" else f"top_p:{decode.top_p:g}"
            parts += [f"sampling:{decode.sampling}", limit, f"temperature:{decode.temperature:g}",
                      f"seed:{decode.seed}"]
        parts.append(f"version:{__version__}")
        return "|".join(parts)

    def _with_text(self, hypothesis: Hypothesis) -> Hypothesis:
        nbest = [dataclasses.replace(h, text=self.tokenizer.decode_tgt(h.tokens)) for h in hypothesis.nbest]
        return dataclasses.replace(hypothesis, text=self.tokenizer.decode_tgt(hypothesis.tokens), nbest=nbest)


__all__ = ["LongInputError", "Translator"]
