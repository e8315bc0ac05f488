"""``--engine ctranslate2``: the same API, tokenization, batching and scores as the Translator.

:class:`CTranslate2Translator` duck-types :class:`nmt_cli.decoding.Translator`
(``translate``, ``translate_stream``, ``decode``, ``tokenizer``, ``signature``) over a
directory written by ``nmt export``. How our search settings map onto CTranslate2's:

* Beam search is the same algorithm (the 2K best extensions, EOS candidates within the
  top K finish, a sentence stops with K finished hypotheses). CTranslate2 normalises
  scores by ``|y|^penalty`` (EOS not counted) instead of the GNMT ``((5 + |y|) / 6)^alpha``
  (EOS counted), and with a penalty of 0 it stops a sentence as soon as its best beam
  ends. So it runs with a vanishing penalty (it then waits for K hypotheses, as we do),
  returns all K with their ``log P``, and they are re-ranked here by our GNMT score.
  A hypothesis cut at the length limit carries no EOS in CTranslate2; its ``log P`` is
  recomputed with ``score_batch``, which adds ``log p(EOS)`` as our search does when it
  forces EOS there, so scores and rankings match ours there too.
* The maximum length ``a * |x| + b`` is per sentence here but per batch in CTranslate2:
  sentences are grouped by their limit, then batched by ``decode.max_tokens`` (the device's
  budget where it is 0, as in the torch engine) / ``decode.max_sentences`` within each
  group, so every sentence gets exactly its own limit.
* ``decode.min_len``: CTranslate2's ``min_decoding_length`` (EOS blocked before it). CTranslate2
  blocks EOS before its softmax, so the tokens of those steps get renormalised probabilities,
  ``p(y_t) / (1 - p(EOS))``; our search blocks EOS after it (as fairseq does) and counts
  ``p(y_t)``. Each hypothesis's ``log P`` gets ``sum log(1 - p(EOS | y_<t))`` over those steps,
  with ``log p(EOS | y_<t)`` from one ``score_batch`` call per batch (at the default
  ``min_len`` of 1 one short query per sentence), so scores and rankings match ours. Above 1
  the renormalisation also changes which beams CTranslate2 keeps (each parent beam has its own
  ``p(EOS)``), so beam search may then find other hypotheses than ours.
* A request's prefix is CTranslate2's ``target_prefix``; its sentence's limit is raised to
  the prefix's length, as in the torch engine, and its hypotheses' ``log P`` (the prefix's
  tokens and EOS counted, as ours) come from ``score_batch``.
* ``decode.search``: ``auto``, ``greedy`` (beam size 1) and ``beam``.
* ``decode.workers`` batches run at once (CTranslate2's ``inter_threads``), each on an
  equal share of torch's intra-op thread count.
* Alignments: CTranslate2 returns the last decoder layer's cross-attention averaged over
  its heads, the default reading of :mod:`nmt_cli.alignment.reader`; a hypothesis carries
  it as (1, 1, T, S), so other ``--layer/--heads`` readings are refused.
* Sampling (``decode.sampling``) is not offered: CTranslate2 draws from another random stream.
* A lexical shortlist is the export's vocabulary map (``nmt export --shortlist``, ``vmap.txt``),
  used when the export has one (``use_vmap``). CTranslate2 decodes a batch over the union of
  its sentences' candidates, so a sentence's output may depend on its batch-mates
  (mozilla/translations#977). ``decode.shortlist_scope``: ``batch`` (the default) takes that
  union, the fast way; ``sentence`` makes each sentence its own batch (the ``decode.workers``
  batches still run at once), so each gets exactly its own candidates, as in the torch
  engine, at the cost of batching (slower than no map on the CPU). What this engine
  recomputes with ``score_batch`` (per-token scores, a prefix's hypotheses, those cut at the
  limit, the ``min_len`` correction) is scored over the whole vocabulary, not the candidates.
* Per-token scores, when the caller asks for them (``token_scores``: JSONL records, the
  service): every returned hypothesis (the n-best entries) is scored in one ``score_batch``
  call per batch, a teacher-forced pass, and carries its ``log p`` per token and EOS in
  ``token_log_probs``. Plain text output skips that pass, so speed tables time the search alone.
* Constraints and phrases to avoid (a request's ``constraints`` / ``avoid``) are refused
  with a one-line error naming ``--engine torch``: CTranslate2 has no constrained search,
  and its ``suppress_sequences`` apply to a whole batch, not to one sentence. So are the
  repetition guards: CTranslate2's ``repetition_penalty`` divides logits (CTRL's), not
  log-probabilities, and its ``no_repeat_ngram_size`` is not checked to match ours.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import tempfile
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.batching import batch_token_budget, token_budget_batches
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.decoding.request import Request
from nmt_cli.decoding.search import length_penalty, max_output_length
from nmt_cli.decoding.translator import (Item, Sentence, apply_decode_overrides, as_requests, averaged_label,
                                         fit_requests, signature_parts, stream_in_chunks)
from nmt_cli.device import is_auto, resolve_device
from nmt_cli.errors import NmtError
from nmt_cli.export import export_ctranslate2, is_export_dir, read_export_record, require_ctranslate2
from nmt_cli.export.record import ExportRecord
from nmt_cli.shortlist import read_shortlist
from nmt_cli.registry import ENGINES
from nmt_cli.textio import CHUNK_LINES
from nmt_cli.tokenization import Tokenizer

#: CTranslate2 weight/compute types ``--quantize`` may ask for at load time
COMPUTE_TYPES = ("default", "float32", "int8", "int8_float32", "int16", "float16", "bfloat16")
#: a length penalty too small to change any ranking but non-zero, so beam search waits for K hypotheses
VANISHING_PENALTY = 1e-6
#: the ``decode.search`` strategies CTranslate2 runs (greedy is its beam size 1)
SEARCHES = ("auto", "greedy", "beam")


def _load(ctranslate2, record: ExportRecord, device: torch.device, compute_type: str, workers: int):
    """A ``ctranslate2.Translator``; on the CPU ``workers`` batches run at once (``inter_threads``).

    What CTranslate2 refuses (a missing CUDA library or file, a compute type the device
    lacks) is one line naming the directory and the device."""
    workers = workers if device.type == "cpu" else 1
    try:
        translator = ctranslate2.Translator(
            str(record.path), device=device.type, device_index=device.index or 0, compute_type=compute_type,
            inter_threads=workers, intra_threads=max(1, torch.get_num_threads() // workers))
        if device.type == "cuda":  # cuBLAS is loaded at the first product: find out now, not mid-translation
            translator.translate_batch([["▁"]], beam_size=1, max_decoding_length=1)
    except (RuntimeError, ValueError) as error:  # a missing library or file; a compute type the device lacks
        raise NmtError(f"{record.path}: CTranslate2 cannot load the model on {device}: {error}") from None
    return translator


class CTranslate2Translator:
    """An exported model in a ``ctranslate2.Translator``, with our tokenizer and search settings."""

    engine = "ctranslate2"

    def __init__(self, record: ExportRecord, decode: DecodeConfig, device: str = "auto",
                 compute_type: str = "default", checkpoint: str = "", use_vmap: bool | None = None):
        _check_supported(decode)
        if use_vmap and record.shortlist is None:
            raise NmtError(f"{record.path}: has no vocabulary map; export it with nmt export --shortlist FILE")
        #: whether the export's vocabulary map restricts each sentence's output (None: when it has one)
        self.use_vmap = record.shortlist is not None if use_vmap is None else use_vmap
        if compute_type not in COMPUTE_TYPES:
            raise NmtError(f"unknown --quantize {compute_type!r} for ctranslate2; choose from {', '.join(COMPUTE_TYPES)}")
        ctranslate2 = require_ctranslate2()
        resolved = resolve_device(device)
        try:
            self._translator = _load(ctranslate2, record, resolved, compute_type, decode.workers)
        except NmtError:  # e.g. a GPU, but not the CUDA libraries this CTranslate2 was built for
            if resolved.type != "cuda" or not is_auto(device):
                raise
            resolved = torch.device("cpu")  # auto: the best device CTranslate2 can use here
            self._translator = _load(ctranslate2, record, resolved, compute_type, decode.workers)
        self.record = record
        self.decode = decode
        self.device = resolved
        self.checkpoint = checkpoint or str(record.path)
        self.tokenizer = _tokenizer(record)
        self._target_ids = {self.tokenizer.tgt.id_to_piece(i): i for i in range(self.tokenizer.tgt_vocab_size)}
        self.compute_type = self._translator.compute_type
        #: None: alignments read the attention CTranslate2 returns (the default heads), never a guided head
        self.config = None

    @classmethod
    def from_export(cls, path: str | os.PathLike, device: str = "auto", compute_type: str | None = None,
                    overrides: Mapping[str, Any] | None = None, checkpoint: str = "",
                    use_vmap: bool | None = None) -> "CTranslate2Translator":
        """Load ``nmt export``'s directory; decode settings: the run's, then ``overrides``;
        ``use_vmap``: its vocabulary map (None: when it has one)."""
        record = read_export_record(path)
        decode = apply_decode_overrides(record.decode_defaults(), overrides)
        return cls(record, decode, device, compute_type or "default", checkpoint, use_vmap)

    def with_decode(self, overrides: Mapping[str, Any]) -> "CTranslate2Translator":
        """The same loaded model with other search settings (``{"decode.beam_size": 1}``)."""
        variant = copy.copy(self)
        variant.decode = _check_supported(apply_decode_overrides(self.decode, overrides))
        return variant

    def translate(self, sentences: Sequence[Sentence], with_attention: bool = False,
                  token_scores: bool = False) -> list[Hypothesis]:
        """One hypothesis per sentence (a text or a :class:`Request`), in order; blank texts give
        empty translations, and a request's prefix starts its translation."""
        fitted = fit_requests(as_requests(self.tokenizer, sentences), self.record.positions,
                              self.decode.on_long_line)
        requests = [request for request, _ in fitted]
        if any(request.constraints or request.avoid for request in requests):
            raise NmtError("constraints and phrases to avoid are not supported by the ctranslate2 engine; "
                           "use --engine torch")
        results = [Hypothesis(tokens=[], score=0.0, log_prob=0.0) for _ in requests]
        pending = []
        beam = self._beam()
        for batch, limit in self._batches(requests):
            pieces = [self.tokenizer.src_pieces(requests[i].source) for i in batch]
            prefixes = [self.tokenizer.tgt_pieces(requests[i].prefix) or None for i in batch]
            pending.append((batch, limit, pieces, prefixes, self._translator.translate_batch(
                pieces, prefixes if any(prefixes) else None, asynchronous=True, beam_size=beam,
                num_hypotheses=beam, length_penalty=self._penalty(), max_decoding_length=limit,
                min_decoding_length=min(self.decode.min_len, limit), max_input_length=0, return_scores=True,
                return_attention=with_attention, use_vmap=self.use_vmap)))
        for batch, limit, pieces, prefixes, outcomes in pending:
            outcomes = [outcome.result() for outcome in outcomes]
            # a sentence with a prefix is rescored whole by _hypothesis: no correction to query for it
            blocked = self._blocked_eos_mass(pieces, [[] if prefix else outcome.hypotheses
                                                      for prefix, outcome in zip(prefixes, outcomes)],
                                             min(self.decode.min_len, limit))
            for index, source_pieces, prefix, outcome, eos_mass in zip(batch, pieces, prefixes, outcomes, blocked):
                results[index] = self._hypothesis(outcome, source_pieces, limit, with_attention,
                                                  rescore=prefix is not None, blocked_eos=eos_mass)
            if token_scores:
                self._add_token_log_probs([results[index] for index in batch], pieces)
        return [dataclasses.replace(result, long_input=how) for result, (_, how) in zip(results, fitted)]

    def translate_stream(self, sentences: Iterable[Item], chunk_size: int = CHUNK_LINES,
                         with_attention: bool = False, token_scores: bool = False
                         ) -> Iterator[tuple[Item, Hypothesis]]:
        """``(sentence, hypothesis)`` pairs in input order, ``chunk_size`` sentences at a time."""
        return stream_in_chunks(self.translate, sentences, chunk_size, with_attention, token_scores)

    def signature(self) -> str:
        """The Translator's signature fields plus the engine and its compute type."""
        average = averaged_label(self.record.averaged)
        parts = signature_parts(self.decode, self.checkpoint, self.record.step, average)
        shortlist = self.record.shortlist
        vmap = ([f"shortlist:{shortlist['k']}+{shortlist['frequent']}@{shortlist['fingerprint']}",
                 f"vmap:{self.decode.shortlist_scope}"] if self.use_vmap else [])
        return "|".join([*parts[:-1], "engine:ctranslate2", f"compute:{self.compute_type}", *vmap, parts[-1]])

    def output_limits(self, requests: Sequence[Request]) -> list[int]:
        """Each request's output limit ``floor(a * |x| + b)`` (at least 1, at least its prefix),
        within the position table: the decoder reads BOS and the output, so at most
        ``positions - 1`` tokens, as in the torch engine (``max_target_length``)."""
        longest = self.record.positions - 1
        return [min(max(max_output_length(len(request.source), self.decode.max_len_a, self.decode.max_len_b),
                        len(request.prefix)), longest)
                for request in requests]

    def _batches(self, requests: Sequence[Request]) -> list[tuple[list[int], int]]:
        """(indices, output limit) batches: non-empty requests grouped by limit, then by token
        budget; with the vocabulary map at ``decode.shortlist_scope`` sentence, a sentence a
        batch (its own candidates)."""
        nonempty = [i for i, request in enumerate(requests) if request.source]
        limits = dict(zip(nonempty, self.output_limits([requests[i] for i in nonempty])))
        budget = batch_token_budget(self.decode.max_tokens, self.device)
        batches = []
        for limit in sorted(set(limits.values()), reverse=True):
            group = [i for i in nonempty if limits[i] == limit]
            lengths = [len(requests[i].source) for i in group]
            sentences = 1 if self._per_sentence() else self.decode.max_sentences
            for batch in token_budget_batches(lengths, budget, sentences):
                batches.append(([group[j] for j in batch], limit))
        return batches

    def _per_sentence(self) -> bool:
        """Whether each sentence is decoded alone, over its own candidates (the map at sentence scope)."""
        return self.use_vmap and self.decode.shortlist_scope == "sentence"

    def _beam(self) -> int:
        """CTranslate2's beam size: 1 for ``decode.search: greedy``, else ``decode.beam_size``."""
        return 1 if self.decode.search == "greedy" else self.decode.beam_size

    def _penalty(self) -> float:
        return 0.0 if self._beam() == 1 else VANISHING_PENALTY

    def _blocked_eos_mass(self, sources: list[list[str]], hypotheses: list[list[list[str]]],
                          steps: int) -> list[list[float]]:
        """Per sentence and hypothesis, ``sum_{t < steps} log(1 - p(EOS | y_<t))``: what CTranslate2's
        renormalisation of the first ``steps`` steps (EOS blocked before its softmax) added to
        its ``log P``. Every distinct prefix is scored once, all in one ``score_batch`` call."""
        queries: dict[tuple[int, tuple[str, ...]], int] = {}
        for sentence, hyps in enumerate(hypotheses):
            for pieces in hyps:
                for step in range(min(steps, len(pieces) + 1)):
                    queries.setdefault((sentence, tuple(pieces[:step])), len(queries))
        if not queries:  # min_len 0, or every sentence rescored whole
            return [[0.0] * len(hyps) for hyps in hypotheses]
        scored = self._translator.score_batch([sources[sentence] for sentence, _ in queries],
                                              [list(prefix) for _, prefix in queries], max_input_length=0)
        eos = [float(scoring.log_probs[-1]) for scoring in scored]  # log p(EOS | prefix)
        return [[sum(math.log1p(-math.exp(eos[queries[(sentence, tuple(pieces[:step]))]]))
                     for step in range(min(steps, len(pieces) + 1)))
                 for pieces in hyps]
                for sentence, hyps in enumerate(hypotheses)]

    def _add_token_log_probs(self, hypotheses: list[Hypothesis], sources: list[list[str]]) -> None:
        """Fill each n-best entry's ``token_log_probs`` (the best's too), one ``score_batch`` call
        for the batch; ``sources`` are the hypotheses' source pieces."""
        entries = [(entry, pieces) for hypothesis, pieces in zip(hypotheses, sources) for entry in hypothesis.nbest]
        scored = self._translator.score_batch([pieces for _, pieces in entries],
                                              [self.tokenizer.tgt_pieces(entry.tokens) for entry, _ in entries],
                                              max_input_length=0)
        for (entry, _), scoring in zip(entries, scored):
            entry.token_log_probs = [float(value) for value in scoring.log_probs]  # each token, then EOS
        for hypothesis in hypotheses:
            hypothesis.token_log_probs = hypothesis.nbest[0].token_log_probs

    def _hypothesis(self, result: Any, source_pieces: list[str], limit: int, with_attention: bool,
                    rescore: bool = False, blocked_eos: Sequence[float] = ()) -> Hypothesis:
        """Re-rank CTranslate2's hypotheses by the GNMT score; the best with the n-best list.

        ``rescore`` (a sentence with a prefix): take every hypothesis's ``log P`` from
        ``score_batch``, which counts the prefix's tokens and EOS as our search does.
        ``blocked_eos``: each hypothesis's correction for the steps where EOS was blocked
        (:meth:`_blocked_eos_mass`)."""
        log_probs = [float(score) * max(len(pieces), 1) ** self._penalty()
                     for score, pieces in zip(result.scores, result.hypotheses)]
        if blocked_eos:
            log_probs = [log_prob + mass for log_prob, mass in zip(log_probs, blocked_eos)]
        # a hypothesis cut at the limit has no EOS: score_batch adds log p(EOS | y), as our search
        # does when it forces EOS there
        rescored = [number for number, pieces in enumerate(result.hypotheses) if rescore or len(pieces) == limit]
        if rescored:
            scored = self._translator.score_batch([source_pieces] * len(rescored),
                                                  [result.hypotheses[number] for number in rescored],
                                                  max_input_length=0)
            for number, scoring in zip(rescored, scored):
                log_probs[number] = float(sum(scoring.log_probs))
        entries = []
        for number, pieces in enumerate(result.hypotheses):
            tokens = [self._target_ids[piece] for piece in pieces]
            attention = None
            if with_attention:
                rows = np.asarray(result.attention[number], dtype=np.float32)  # (T, S_padded)
                attention = (rows[:, :len(source_pieces)] if tokens
                             else np.zeros((0, len(source_pieces)), np.float32))[None, None]  # (1, 1, T, S)
            entries.append(Hypothesis(
                tokens=tokens, log_prob=log_probs[number], attention=attention,
                score=log_probs[number] / length_penalty(len(tokens) + 1, self.decode.alpha),
                text=self.tokenizer.decode_tgt(tokens)))
        entries.sort(key=lambda hypothesis: -hypothesis.score)
        if rescore:  # a prefix that reaches the limit leaves every beam the same: keep one, as our search does
            distinct: dict[tuple[int, ...], Hypothesis] = {}
            for entry in entries:
                distinct.setdefault(tuple(entry.tokens), entry)
            entries = list(distinct.values())
        nbest = entries[: self.decode.nbest]
        best = nbest[0]
        return Hypothesis(tokens=best.tokens, score=best.score, log_prob=best.log_prob, text=best.text,
                          nbest=nbest, attention=best.attention)


@ENGINES.register("ctranslate2")
def load_export(paths: Sequence[str | os.PathLike], device: str = "auto", average: str | None = None,
                quantize: str | None = None, overrides: Mapping[str, Any] | None = None,
                shortlist: str | os.PathLike | bool | None = None) -> CTranslate2Translator:
    """A :class:`CTranslate2Translator` for an ``nmt export`` directory, or for a checkpoint
    converted first (into a temporary directory, removed once loaded) with ``quantize`` as
    the weight type; for an export ``quantize`` is any compute type (default: the export's own).

    ``shortlist``: None uses an export's vocabulary map when it has one, False never; a file
    must be the shortlist the export was made with (a checkpoint is converted with it)."""
    if len(paths) > 1:
        raise NmtError("an ensemble of several --checkpoint runs only on the torch engine")
    (path,) = paths
    use_vmap = None if shortlist is None else bool(shortlist)
    if is_export_dir(path):
        if average:
            raise NmtError(f"{path}: --average applies to training checkpoints; use nmt export --average")
        if shortlist not in (None, False, True):
            _check_same_shortlist(read_export_record(path), shortlist)
        return CTranslate2Translator.from_export(path, device, quantize, overrides, use_vmap=use_vmap)
    with tempfile.TemporaryDirectory(prefix="nmt-ct2-") as scratch:
        exported_dir = export_ctranslate2(path, os.path.join(scratch, "model"), quantize or "float32", average,
                                          shortlist or None)
        return CTranslate2Translator.from_export(exported_dir, device, None, overrides, checkpoint=str(path),
                                                 use_vmap=use_vmap)


def _check_same_shortlist(record: ExportRecord, path: str | os.PathLike) -> None:
    """A one-line error unless the export's vocabulary map is the shortlist ``path``."""
    fingerprint = read_shortlist(path).fingerprint
    written = record.shortlist
    if written is None or written["fingerprint"] != fingerprint:
        has = "no vocabulary map" if written is None else f"the vocabulary map of {written['file']}"
        raise NmtError(f"{record.path}: has {has}, not {path}; export it with nmt export --shortlist {path}")


def _check_supported(decode: DecodeConfig) -> DecodeConfig:
    """``decode`` unless it asks for what this engine cannot do (sampling, another search)."""
    if decode.sampling != "none":
        raise NmtError("decode.sampling is not supported by the ctranslate2 engine; use --engine torch")
    if decode.search not in SEARCHES:
        raise NmtError(f"decode.search {decode.search} is not supported by the ctranslate2 engine "
                       f"({', '.join(SEARCHES)}); use --engine torch")
    if decode.repetition_penalty != 1.0 or decode.no_repeat_ngram > 0:
        raise NmtError("decode.repetition_penalty and decode.no_repeat_ngram are not supported by the ctranslate2 "
                       "engine; use --engine torch")
    return decode


def _tokenizer(record: ExportRecord) -> Tokenizer:
    """The SentencePiece model(s) copied into the export (source first when separate)."""
    return Tokenizer.from_files(*(record.path / name for name in record.tokenizer_files))


__all__ = ["CTranslate2Translator", "COMPUTE_TYPES", "SEARCHES", "VANISHING_PENALTY", "load_export"]
