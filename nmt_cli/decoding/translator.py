"""Text in, translations out: the Python API behind ``nmt translate``.

A :class:`Translator` holds a model, the SentencePiece models it was trained with and
the search settings. It never prints and never reads files or stdin: callers pass
strings (or :class:`~nmt_cli.decoding.request.Request` s, for a sentence that asks for
more, such as a target prefix) and get :class:`~nmt_cli.decoding.hypothesis.Hypothesis`
objects back. With a lexical shortlist (``shortlist``, :mod:`nmt_cli.shortlist`) each
sentence's output is restricted to its own candidates.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar, Union

import torch

from nmt_cli import __version__
from nmt_cli.allocator import keep_freed_memory
from nmt_cli.checkpoint import load_averaged, load_checkpoint
from nmt_cli.config import Config, DecodeConfig
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.generator import decoding_workers, generate
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.decoding.request import Request, SentenceError
from nmt_cli.decoding.scoring import PairScore, score_pairs
from nmt_cli.decoding.workers import WorkerPool
from nmt_cli.device import is_auto, resolve_device
from nmt_cli.errors import ConfigError, NmtError
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.models.packed import can_pack, pack_linear_layers
from nmt_cli.models.quantization import quantize_model
from nmt_cli.precision import Precision
from nmt_cli.shortlist import Shortlist, read_shortlist
from nmt_cli.textio import CHUNK_LINES
from nmt_cli.tokenization import Tokenizer

#: a sentence to translate: its text, or a :class:`Request` with more to ask
Sentence = Union[str, Request]
Item = TypeVar("Item", bound=Sentence)


def averaged_label(averaged: Sequence[str]) -> str | None:
    """``N:first..last`` for weights averaged over N checkpoints, None for a single one.

    Read from the checkpoint's state, so ``--average last:N`` at translation time and a
    checkpoint written by ``nmt average`` are both named in the signature.
    """
    if not averaged:
        return None
    names = [Path(path).name for path in averaged]
    return f"{len(names)}:{names[0]}..{names[-1]}"


class LongInputError(SentenceError):
    """Input ``index`` (0-based) has more source tokens than the model takes."""

    def __init__(self, index: int, length: int, limit: int):
        self.length, self.limit = length, limit
        super().__init__(index, f"{length} source tokens, more than the model takes ({limit}, model.max_positions); "
                         "--on-long-line truncate or skip translates such lines (decode.on_long_line)")


class Translator:
    """A model with its tokenizer and search settings; ``translate(list[str])``.

    On CUDA the model runs under bf16 autocast (fp16 on GPUs without native bf16); the search
    itself stays in float32/64. On CPU with ``decode.workers`` > 1 the worker processes are
    forked on the first call and kept for the next ones (:meth:`close` stops them; they
    also stop at exit), so they stay warm and a server forks once.
    """

    def __init__(
        self,
        model: Seq2SeqModel,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        device: str | torch.device = "auto",
        checkpoint: str = "",
        step: int | str = 0,
        average: str | None = None,
        quantize: str | None = None,
        config: Config | None = None,
        shortlist: Shortlist | None = None,
    ):
        keep_freed_memory()
        self.device = resolve_device(device)
        # bf16 autocast on GPUs with native bf16, fp16 on older ones (which only emulate bf16); fp32 on
        # every CPU, since no family is named: bf16 decoding on a CPU has not been measured against fp32
        self.precision = Precision("auto", self.device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.decode = decode
        self.checkpoint = checkpoint
        self.step = step
        self.average = average
        self.quantize = quantize
        #: the (first) checkpoint's config (None: built from parts), e.g. which head reads alignments
        self.config = config
        #: the lexical shortlist each sentence's output is restricted to (None: the whole vocabulary)
        self.shortlist = shortlist
        if shortlist is not None:
            shortlist.check_tokenizer(tokenizer, checkpoint or "the model")
        #: CPU decoding workers by count, forked on first use; shared with :meth:`with_decode`'s copies
        self._pools: dict[int, WorkerPool] = {}

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike | Sequence[str | os.PathLike],
        device: str | torch.device = "auto",
        average: str | None = None,
        decode: DecodeConfig | None = None,
        overrides: Mapping[str, Any] | None = None,
        quantize: str | None = None,
        shortlist: Shortlist | str | os.PathLike | None = None,
    ) -> "Translator":
        """Load a checkpoint (or a run's newest one), optionally averaging ``last:N``.

        Several paths make an ensemble (:class:`~nmt_cli.decoding.ensemble.Ensemble`) of
        models that share one SentencePiece model; ``average`` applies to each. ``decode``
        defaults to the (first) checkpoint's own ``decode`` settings; ``overrides``
        (``{"decode.beam_size": 1}``, as ``--set`` writes them) are applied on top and
        validated with the rest of the config. Only ``decode.*`` keys may change.
        ``quantize="int8"``: dynamic int8 quantization of the Linear and LSTM/GRU layers (CPU,
        which ``device="auto"`` then means);
        otherwise, on the CPU, float32 Linear layers are packed for oneDNN (:mod:`nmt_cli.models.packed`).
        ``shortlist``: a lexical shortlist (or its file) built with the model's SentencePiece
        model; each sentence may then output only its candidates.
        """
        if isinstance(shortlist, (str, os.PathLike)):
            shortlist = read_shortlist(shortlist)
        if quantize is not None and is_auto(device):
            device = "cpu"  # torch's dynamic int8 kernels run on the CPU alone, GPU or not
        resolved_device = resolve_device(device)
        paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        checkpoints = [load_averaged(average, p) if average else load_checkpoint(p) for p in paths]
        for other_checkpoint in checkpoints[1:]:
            if other_checkpoint.tokenizer.model_files() != checkpoints[0].tokenizer.model_files():
                raise NmtError(f"{other_checkpoint.path}: uses another SentencePiece model than "
                               f"{checkpoints[0].path}; an ensemble needs one vocabulary")
        first = checkpoints[0]
        settings = apply_decode_overrides(decode or first.config.decode, overrides)
        models = [checkpoint.build_model(resolved_device) for checkpoint in checkpoints]
        if quantize is not None:
            models = [quantize_model(model, quantize, resolved_device) for model in models]
        elif can_pack(resolved_device):
            models = [pack_linear_layers(model.eval()) for model in models]
        return cls(models[0] if len(models) == 1 else Ensemble(models), first.tokenizer, settings, resolved_device,
                   checkpoint="+".join(str(checkpoint.path) for checkpoint in checkpoints),
                   step="+".join(str(checkpoint.step) for checkpoint in checkpoints),
                   average=averaged_label(first.state.get("averaged", [])), quantize=quantize,
                   config=first.config, shortlist=shortlist)

    def with_decode(self, overrides: Mapping[str, Any]) -> "Translator":
        """The same model and tokenizer with other search settings (``{"decode.beam_size": 1}``).

        The settings are validated like ``--set decode.*``; the model is shared, not copied.
        """
        variant = copy.copy(self)
        variant.decode = apply_decode_overrides(self.decode, overrides)
        return variant

    def translate(self, sentences: Sequence[Sentence], with_attention: bool = False,
                  token_scores: bool = False) -> list[Hypothesis]:
        """One hypothesis per sentence (a text or a :class:`Request`), in order; blank texts give
        empty translations, and a request's prefix starts its translation.

        Characters the SentencePiece model does not know become its unknown token. The search
        keeps every token's log-probability at no cost, so ``token_scores`` (which asks an
        engine for ``Hypothesis.token_log_probs``) changes nothing here.
        """
        requests = as_requests(self.tokenizer, sentences)
        fitted = fit_requests(requests, self.model.max_source_length, self.decode.on_long_line)
        pool = self._worker_pool()
        with self.precision.autocast():
            hypotheses = generate(self.model, [request for request, _ in fitted], self.decode, self.device,
                                  with_attention, pool, self.shortlist)
        return [dataclasses.replace(self._with_text(hypothesis), long_input=how)
                for hypothesis, (_, how) in zip(hypotheses, fitted)]

    def close(self) -> None:
        """Stop the decoding workers; a later call forks new ones."""
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    def _worker_pool(self) -> WorkerPool | None:
        """The kept CPU workers for ``decode.workers`` (None for one, or off the CPU)."""
        workers = self.decode.workers
        if workers <= 1 or self.device.type != "cpu":
            return None
        pool = self._pools.get(workers)
        if pool is None or pool.closed:
            pool = self._pools[workers] = decoding_workers(self.model, self.device, workers)
        return pool

    def score(self, sources: Sequence[str], targets: Sequence[str], batch_size: int = 32) -> list[PairScore | None]:
        """``log P(target | source)`` of each pair under the model (or the ensemble's mean);
        a blank source gets None."""
        pairs = [(self.tokenizer.encode_src(source) if source.strip() else [], self.tokenizer.encode_tgt(target))
                 for source, target in zip(sources, targets)]
        with self.precision.autocast():
            return score_pairs(self.model, pairs, self.device, batch_size)

    def translate_stream(
        self, sentences: Iterable[Item], chunk_size: int = CHUNK_LINES, with_attention: bool = False,
        token_scores: bool = False,
    ) -> Iterator[tuple[Item, Hypothesis]]:
        """``(sentence, hypothesis)`` pairs in input order, translating ``chunk_size`` sentences at a time.

        Only one chunk is held in memory, so inputs of any size stream through.
        """
        return stream_in_chunks(self.translate, sentences, chunk_size, with_attention, token_scores)

    def signature(self) -> str:
        """Every setting that changes the output, sacreBLEU-style ``key:value|...``."""
        parts = signature_parts(self.decode, self.checkpoint, self.step, self.average)
        if self.quantize:
            parts.insert(-1, f"quantize:{self.quantize}")
        if self.shortlist is not None:
            parts.insert(-1, shortlist_part(self.shortlist))
        return "|".join(parts)

    def _with_text(self, hypothesis: Hypothesis) -> Hypothesis:
        nbest = [dataclasses.replace(h, text=self.tokenizer.decode_tgt(h.tokens)) for h in hypothesis.nbest]
        return dataclasses.replace(hypothesis, text=self.tokenizer.decode_tgt(hypothesis.tokens), nbest=nbest)


def apply_decode_overrides(decode: DecodeConfig, overrides: Mapping[str, Any] | None) -> DecodeConfig:
    """``decode`` with ``{"decode.beam_size": 1, ...}`` (as ``--set`` writes them) applied and
    validated; a key of another section is refused. Every problem is reported together."""
    overrides = overrides or {}
    problems = [f"{key}: only decode.* settings can change when translating"
                for key in sorted(key for key in overrides if not key.startswith("decode."))]
    try:
        decode = Config(decode=decode).with_overrides(
            {key: value for key, value in overrides.items() if key.startswith("decode.")}).decode
    except ConfigError as exc:
        problems.extend(str(exc).splitlines())
    if problems:
        raise ConfigError("\n".join(problems))
    return decode


def signature_parts(decode: DecodeConfig, checkpoint: str, step: int | str, average: str | None) -> list[str]:
    """The ``key:value`` fields of a translation signature; the version comes last."""
    parts = [
        f"checkpoint:{checkpoint or '-'}",
        f"step:{step}",
        f"average:{average or 'no'}",
        f"beam:{decode.beam_size}",
        f"alpha:{decode.alpha:g}",
        f"maxlen:{decode.max_len_a:g}*src+{decode.max_len_b}",
        f"minlen:{decode.min_len}",
    ]
    if decode.search != "auto":
        parts.append(f"search:{decode.search}")
    if decode.on_long_line != "error":
        parts.append(f"long:{decode.on_long_line}")
    if decode.no_repeat_ngram:
        parts.append(f"no_repeat_ngram:{decode.no_repeat_ngram}")
    if decode.repetition_penalty != 1.0:
        parts.append(f"repetition_penalty:{decode.repetition_penalty:g}")
    if decode.on_unmet != "error":  # it changes only the outputs of sentences with constraints
        parts.append(f"unmet:{decode.on_unmet}")
    if decode.sampling != "none":
        limit = f"top_k:{decode.top_k}" if decode.sampling == "top_k" else f"top_p:{decode.top_p:g}"
        parts += [f"sampling:{decode.sampling}", limit, f"temperature:{decode.temperature:g}", f"seed:{decode.seed}"]
    parts.append(f"version:{__version__}")
    return parts


def shortlist_part(shortlist: Shortlist) -> str:
    """The signature field of a lexical shortlist: its sizes and the fingerprint of its lists."""
    return f"shortlist:{shortlist.k}+{len(shortlist.frequent)}@{shortlist.fingerprint}"


def as_requests(tokenizer: Tokenizer, sentences: Sequence[Sentence]) -> list[Request]:
    """Each sentence as a :class:`Request` (a text: its source, nothing else asked)."""
    return [sentence if isinstance(sentence, Request) else Request.from_text(tokenizer, sentence)
            for sentence in sentences]


def fit_requests(requests: Sequence[Request], limit: int | None, on_long_line: str) -> list[tuple[Request, str]]:
    """Each request with its source as the model can take it, and what ``decode.on_long_line``
    did to it (``"truncated"``, ``"skipped"`` or ``""``); ``error`` raises :class:`LongInputError`."""
    fitted = []
    for index, request in enumerate(requests):
        source = request.source
        if limit is None or len(source) <= limit:
            fitted.append((request, ""))
        elif on_long_line == "truncate":
            fitted.append((dataclasses.replace(request, source=source[:limit]), "truncated"))
        elif on_long_line == "skip":
            fitted.append((dataclasses.replace(request, source=()), "skipped"))
        else:
            raise LongInputError(index, len(source), limit)
    return fitted


def stream_in_chunks(
    translate: Callable[[Sequence[Item], bool, bool], list[Hypothesis]], sentences: Iterable[Item], chunk_size: int,
    with_attention: bool, token_scores: bool,
) -> Iterator[tuple[Item, Hypothesis]]:
    """``(sentence, hypothesis)`` pairs in input order, calling ``translate`` on ``chunk_size``
    sentences at a time; an input's error (:class:`SentenceError`) is numbered within the whole stream."""
    chunk: list[Item] = []
    done = 0
    for sentence in sentences:
        chunk.append(sentence)
        if len(chunk) == chunk_size:
            yield from zip(chunk, _translate_chunk(translate, chunk, done, with_attention, token_scores))
            done += len(chunk)
            chunk = []
    if chunk:
        yield from zip(chunk, _translate_chunk(translate, chunk, done, with_attention, token_scores))


def _translate_chunk(translate: Callable[[Sequence[Item], bool, bool], list[Hypothesis]], chunk: list[Item],
                     offset: int, with_attention: bool, token_scores: bool) -> list[Hypothesis]:
    try:
        return translate(chunk, with_attention, token_scores)
    except SentenceError as exc:
        raise exc.at(offset + exc.index) from None


__all__ = ["LongInputError", "Sentence", "Translator", "apply_decode_overrides", "as_requests", "averaged_label",
           "fit_requests", "shortlist_part", "signature_parts", "stream_in_chunks"]
