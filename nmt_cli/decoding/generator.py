"""One generation loop for every model family.

The loop only uses the model interface of :mod:`nmt_cli.models.base`: ``encode`` once,
``reorder_memory`` to give each sentence its rows, then ``step_log_probs`` (the
log-softmax of ``decode_step``, or an ensemble's mean) per output position with
``reorder_state`` after it. The state is whatever the model keeps (RNN
hidden states, a Transformer key/value cache, the linear-attention sums ``S`` and
``Z``); the loop never looks inside it. The search strategy (``decode.search``, from
:data:`~nmt_cli.registry.SEARCH_STRATEGIES`) decides which rows go on, and rows of
finished sentences leave the batch so later steps cost less. Each sentence is a
:class:`~nmt_cli.decoding.request.Request`; the strategy reads its per-sentence fields.
Before the search, :func:`fit_constraints` applies ``decode.on_unmet`` to sentences whose
prefix and constraints cannot fit their output limit; after it, every hypothesis of a
sentence with constraints says which it contains (``Hypothesis.constraints_met``).

With a lexical shortlist (:mod:`nmt_cli.shortlist`) each sentence may output only its own
candidates (its source pieces' lists, the frequent pieces, the specials, its prefix and
constraint pieces): the model projects onto the batch's candidates alone and each row's
softmax is taken over its sentence's (:mod:`nmt_cli.decoding.candidates`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass
from typing import Iterator, Sequence, Union

import numpy as np
import torch
from torch import Tensor

from nmt_cli.config import DecodeConfig
from nmt_cli.decoding.batching import batch_token_budget, pad_sources, token_budget_batches
from nmt_cli.decoding.candidates import BatchCandidates
from nmt_cli.decoding.constraints import constraints_met, shortest_length
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.decoding.request import Request, UnfitConstraintsError
from nmt_cli.decoding.search import max_output_length, max_output_lengths
from nmt_cli.decoding.strategies.base import Finished, Search
from nmt_cli.decoding.workers import WorkerPool, map_in_processes
from nmt_cli.device import model_device
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.registry import SEARCH_STRATEGIES
from nmt_cli.shortlist import Shortlist
from nmt_cli.specials import BOS_ID

#: what :func:`generate` translates: requests, or bare source ids (a request with nothing else)
Source = Union[Request, Sequence[int]]


def as_request(source: Source) -> Request:
    """``source`` as a :class:`Request` (bare ids: a request that asks nothing else)."""
    return source if isinstance(source, Request) else Request(source)


def make_search(requests: Sequence[Request], max_lens: Tensor, decode: DecodeConfig, keep_attention: bool,
                generator: torch.Generator | None = None) -> Search:
    """The strategy ``decode.search`` names, for one batch of requests."""
    return SEARCH_STRATEGIES.get(decode.search)(requests, max_lens, decode, keep_attention, generator)


@dataclass(frozen=True)
class BatchTask:
    """One batch of non-empty requests to decode, as a worker process receives it, with each
    request's shortlist candidates (None: no shortlist) among the ``target_vocab`` tokens."""

    requests: list[Request]
    decode: DecodeConfig
    need_attention: bool
    candidates: list[np.ndarray] | None = None
    target_vocab: int = 0


def decode_task(model: Seq2SeqModel, device: torch.device, number: int, task: BatchTask) -> list[Hypothesis]:
    """Batch ``number`` of a call: sampling draws from a generator seeded with ``decode.seed``
    plus the batch number, so outputs never depend on which process decodes it."""
    generator = None
    if task.decode.sampling != "none":
        generator = torch.Generator(device=device).manual_seed(task.decode.seed + number)
    return decode_batch(model, task.requests, task.decode, device, task.need_attention, generator, task.candidates,
                        task.target_vocab)


def decoding_workers(model: Seq2SeqModel, device: torch.device, workers: int) -> WorkerPool:
    """``workers`` forked CPU processes that decode :class:`BatchTask` s with ``model`` as it
    is now, to keep for many :func:`generate` calls (its ``pool``)."""
    return WorkerPool(functools.partial(decode_task, model, torch.device(device)), workers)


def generate(
    model: Seq2SeqModel,
    sources: Sequence[Source],
    decode: DecodeConfig,
    device: torch.device | str | None = None,
    need_attention: bool = False,
    pool: WorkerPool | None = None,
    shortlist: Shortlist | None = None,
) -> list[Hypothesis]:
    """Translate :class:`Request` s (or bare source ids, no BOS/EOS); one :class:`Hypothesis`
    each, in input order. A request's prefix starts its output.

    ``device`` defaults to the one the model's weights are on. Sentences are decoded in
    batches of at most ``decode.max_tokens`` source tokens (0: the device's,
    :func:`~nmt_cli.decoding.batching.batch_token_budget`) and ``decode.max_sentences``
    sentences, formed from length-sorted input. An empty source
    gives an empty hypothesis. The model decodes in evaluation mode (no dropout) and gets
    its own mode back afterwards.

    On CPU, ``decode.workers`` batches are decoded at once, each in a forked process with
    one thread (:mod:`nmt_cli.decoding.workers`): the many small operations of a decoding
    step keep two single-threaded workers busier than one two-threaded one (the
    ``inter_threads`` of CTranslate2). They are forked for this call, or are ``pool``
    (:func:`decoding_workers` of this model), kept by the caller from call to call.
    Sampling seeds a generator per batch (:func:`decode_task`), so outputs never depend on
    the worker count.

    Constraints that cannot fit a sentence's output limit follow ``decode.on_unmet``
    (:func:`fit_constraints`; ``error`` raises :class:`~nmt_cli.decoding.request.UnfitConstraintsError`
    naming the sentence's index in ``sources``).

    ``shortlist``: each sentence may output only its candidates
    (:func:`sentence_candidates`), whatever else is in its batch.
    """
    device = model_device(model) if device is None else torch.device(device)
    asked = [as_request(source) for source in sources]
    requests = fit_constraints(asked, decode, model.max_target_length)
    results: list[Hypothesis] = [Hypothesis(tokens=[], score=0.0, log_prob=0.0) for _ in requests]
    nonempty = [i for i, request in enumerate(requests) if len(request.source) > 0]
    lengths = [len(requests[i].source) for i in nonempty]
    budget = batch_token_budget(decode.max_tokens, device)
    batches = [[nonempty[j] for j in batch] for batch in token_budget_batches(lengths, budget, decode.max_sentences)]

    tasks = [BatchTask([requests[i] for i in indices], decode, need_attention,
                       None if shortlist is None else [sentence_candidates(shortlist, requests[i]) for i in indices],
                       0 if shortlist is None else shortlist.target_vocab)
             for indices in batches]
    decode_numbered = functools.partial(decode_task, model, device)
    workers = min(decode.workers, len(batches)) if device.type == "cpu" else 1
    with evaluation_mode(model):
        if pool is not None and device.type == "cpu" and tasks:
            decoded = pool.map(tasks)
        elif workers <= 1:
            decoded = [decode_numbered(number, task) for number, task in enumerate(tasks)]
        else:
            decoded = map_in_processes(decode_numbered, tasks, workers)
    for indices, hypotheses in zip(batches, decoded):
        for index, hypothesis in zip(indices, hypotheses):
            results[index] = hypothesis
    return [_with_constraints_met(result, request.constraints) if request.constraints else result
            for result, request in zip(results, asked)]


def sentence_candidates(shortlist: Shortlist, request: Request) -> np.ndarray:
    """The target ids ``request`` may output: its source pieces' shortlist candidates, with
    its prefix and every alternative of its constraints forced in."""
    forced = [*request.prefix, *(piece for constraint in request.constraints for alternative in constraint
                                 for piece in alternative)]
    return shortlist.candidates(request.source, forced)


def output_limit(request: Request, decode: DecodeConfig, max_target_length: int | None) -> int:
    """A sentence's output limit before constraints, as :func:`decode_batch` sets it:
    ``floor(a * |x| + b)`` (at least 1), raised to its prefix's length, within the model's."""
    limit = max(max_output_length(len(request.source), decode.max_len_a, decode.max_len_b), len(request.prefix))
    return limit if max_target_length is None else min(limit, max_target_length)


def needed_length(request: Request) -> int:
    """Output tokens a sentence's prefix and constraints take at least (each constraint's
    shortest alternative, none overlapping)."""
    return len(request.prefix) + sum(shortest_length(constraint) for constraint in request.constraints)


def fit_constraints(requests: Sequence[Request], decode: DecodeConfig, max_target_length: int | None) -> list[Request]:
    """The requests to search, after ``decode.on_unmet`` for those whose prefix and constraints
    need more tokens than their output limit (:func:`needed_length`, :func:`output_limit`).

    ``error`` raises :class:`UnfitConstraintsError` with the request's index; ``relax``
    keeps the request (:func:`decode_batch` raises its limit to fit) unless it needs more
    than the model's longest output, which is an error; ``drop`` keeps the constraints that
    fit, in order, and leaves the rest out of the search (their ``constraints_met`` then
    says only whether the output happens to contain them).
    """
    fitted = []
    for index, request in enumerate(requests):
        needed = needed_length(request)
        limit = output_limit(request, decode, max_target_length)
        if not request.constraints or not request.source or needed <= limit:
            fitted.append(request)
        elif decode.on_unmet == "drop":
            kept, room = [], limit - min(len(request.prefix), limit)
            for constraint in request.constraints:
                if shortest_length(constraint) <= room:
                    kept.append(constraint)
                    room -= shortest_length(constraint)
            fitted.append(dataclasses.replace(request, constraints=tuple(kept)))
        elif decode.on_unmet == "relax" and (max_target_length is None or needed <= max_target_length):
            fitted.append(request)
        elif decode.on_unmet == "relax":
            raise UnfitConstraintsError(index, needed, max_target_length, model_limit=True)
        else:
            raise UnfitConstraintsError(index, needed, limit)
    return fitted


def _with_constraints_met(hypothesis: Hypothesis, constraints) -> Hypothesis:
    """``hypothesis`` and its n-best entries, each saying which ``constraints`` its output contains."""
    nbest = [dataclasses.replace(entry, constraints_met=constraints_met(constraints, entry.tokens))
             for entry in hypothesis.nbest]
    return dataclasses.replace(hypothesis, constraints_met=constraints_met(constraints, hypothesis.tokens),
                               nbest=nbest)


@contextlib.contextmanager
def evaluation_mode(model: Seq2SeqModel) -> Iterator[None]:
    """Dropout off while decoding; a model in training mode is put back into it afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def decode_batch(
    model: Seq2SeqModel,
    requests: Sequence[Request],
    decode: DecodeConfig,
    device: torch.device,
    need_attention: bool = False,
    generator: torch.Generator | None = None,
    candidates: Sequence[np.ndarray] | None = None,
    target_vocab: int = 0,
) -> list[Hypothesis]:
    """Search one padded batch of non-empty requests; hypotheses in the order given.
    ``candidates``: each request's shortlist candidates among the ``target_vocab`` tokens
    (None: the whole vocabulary).

    A sentence's output limit is ``a * |x| + b``, raised to what its prefix and constraints
    need (:func:`needed_length`), and never past the model's last position.
    """
    src, src_mask = pad_sources([request.source for request in requests], device)  # (B, S)
    src_lengths = src_mask.sum(dim=1)  # (B,)
    max_lens = max_output_lengths(src_lengths, decode.max_len_a, decode.max_len_b)  # (B,)
    if any(request.prefix or request.constraints for request in requests):
        needed = torch.tensor([needed_length(request) for request in requests], device=max_lens.device)
        max_lens = torch.maximum(max_lens, needed)
    if model.max_target_length is not None:  # never step past the model's last position
        max_lens = max_lens.clamp(max=model.max_target_length)
    search = make_search(requests, max_lens, decode, need_attention, generator)
    shortlisted = None if candidates is None else BatchCandidates.build(candidates, target_vocab, device)
    run_search(model, src, src_mask, search, need_attention, shortlisted)
    shape = (model.attention_layers, model.attention_heads)
    return [
        _hypothesis(finished, int(length), shape)
        for finished, length in zip(search.best(decode.nbest), src_lengths.tolist())
    ]


@torch.inference_mode()
def run_search(model: Seq2SeqModel, src: Tensor, src_mask: Tensor, search: Search, need_attention: bool,
               candidates: BatchCandidates | None = None) -> None:
    """The decoding loop: encode once, then one ``decode_step`` per output position.

    ``src`` and ``src_mask`` are (B, S); the results are left in ``search.finished``.
    ``candidates``: the batch's shortlist (each row computes and chooses only its sentence's).
    """
    memory = model.encode(src, src_mask)
    expand = search.initial_rows()
    if expand is not None:
        memory = model.reorder_memory(memory, expand)
    rows = src.size(0) if expand is None else expand.numel()
    tokens = torch.full((rows,), BOS_ID, dtype=torch.long, device=src.device)  # (N,)
    state = None
    step = 0
    while True:
        if candidates is None:
            log_probs, state, attention = model.step_log_probs(tokens, memory, state, need_attention)  # (N, V)
        else:
            log_probs, state, attention = model.step_log_probs(
                tokens, memory, state, need_attention, candidates.step(search.row_sentences()))  # (N, C)
            log_probs = candidates.expand(log_probs)  # (N, V)
        outcome = search.advance(step, log_probs, attention)
        if outcome is None:
            return
        if outcome.state_rows is not None:
            state = model.reorder_state(state, outcome.state_rows)
        if outcome.memory_rows is not None:
            memory = model.reorder_memory(memory, outcome.memory_rows)
        tokens = outcome.tokens
        step += 1


def _hypothesis(nbest: list[Finished], src_length: int, attention_shape: tuple[int, int]) -> Hypothesis:
    """The best of ``nbest`` with the whole list attached (entries without their own list)."""
    entries = [
        Hypothesis(
            tokens=hyp.tokens,
            score=hyp.score,
            log_prob=hyp.log_prob,
            token_log_probs=hyp.token_log_probs,
            **_attention_arrays(hyp.attention, src_length, attention_shape),
        )
        for hyp in nbest
    ]
    best = entries[0]
    return Hypothesis(
        tokens=best.tokens,
        score=best.score,
        log_prob=best.log_prob,
        nbest=entries,
        attention=best.attention,
        token_log_probs=best.token_log_probs,
    )


def _attention_arrays(steps: list[Tensor] | None, src_length: int, shape: tuple[int, int]) -> dict:
    """Per-token (L, H, S_padded) weights -> ``attention`` (L, H, T, S)."""
    if steps is None:
        return {}
    if steps:
        heads = torch.stack(steps, dim=2)[..., :src_length].cpu().numpy()  # (L, H, T, S)
    else:
        heads = np.zeros((*shape, 0, src_length), dtype=np.float32)
    return {"attention": heads}


__all__ = ["Source", "as_request", "generate", "decode_batch", "fit_constraints", "needed_length", "output_limit",
           "run_search", "make_search", "sentence_candidates"]
