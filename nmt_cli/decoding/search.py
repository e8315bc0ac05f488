"""The search step as small pure functions (Sockeye / fairseq style).

Each function takes tensors and returns tensors; none of them keeps state. The
strategies in :mod:`nmt_cli.decoding.strategies` combine them:

* :func:`apply_length_limits_`: EOS forbidden before ``min_len`` tokens, forced at the
  per-sentence maximum ``a * |x| + b`` (:func:`max_output_lengths`);
* :func:`force_tokens_`: a row's next token fixed in advance (a target prefix);
* :func:`beam_step`: extend every hypothesis by every token and keep the best candidates;
* :func:`length_penalty`: the GNMT normaliser ``lp(y) = ((5 + |y|) / 6) ** alpha``;
* :func:`greedy_tokens` and :func:`sample_tokens` (temperature, top-k, top-p);
* the guards, which read each row's output so far (a (N, t) token tensor):
  :func:`penalise_repeats` (``decode.repetition_penalty``), :func:`repeated_ngram_mask`
  (``decode.no_repeat_ngram``) and :func:`phrase_end_mask` (a request's ``avoid``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from nmt_cli.specials import EOS_ID

NEG_INF = float("-inf")


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ``lp(y) = ((5 + |y|) / 6) ** alpha`` (Wu et al. 2016).

    ``length`` counts the output tokens including EOS. ``alpha = 0`` gives 1 (no
    normalisation); the final score of a hypothesis is ``log P(y | x) / lp(y)``.
    """
    return ((5.0 + length) / 6.0) ** alpha


def max_output_lengths(src_lengths: Tensor, a: float, b: int) -> Tensor:
    """Per-sentence limit ``floor(a * |x| + b)`` on output tokens before EOS (at least 1)."""
    return (a * src_lengths.double() + b).floor().long().clamp(min=1)  # (B,)


def max_output_length(src_length: int, a: float, b: int) -> int:
    """One sentence's :func:`max_output_lengths`, for code that holds lengths, not tensors."""
    return max(math.floor(a * src_length + b), 1)


def apply_length_limits_(log_probs: Tensor, step: int, min_len: int, max_lens: Tensor, shortest: int = 0) -> Tensor:
    """Mask, in place, the next-token distribution of each row for output position ``step``.

    Rows that already hold ``max_lens`` tokens may only emit EOS (with the model's own
    EOS probability); before ``min_len`` tokens EOS is forbidden. The maximum wins when
    the two disagree, so every row ends. ``log_probs`` (N, V), ``max_lens`` (N,);
    returns ``log_probs`` with blocked entries at ``-inf``. Writing in place spares a
    copy of the (N, V) array at every step. ``shortest``, a lower bound of ``max_lens``
    the caller knows, spares the search for rows at their limit in the steps before it.
    """
    at_limit = (max_lens <= step).nonzero().squeeze(1) if step >= shortest else max_lens[:0]  # (R,) rows that must end
    eos = log_probs[at_limit, EOS_ID] if at_limit.numel() else None  # (R,), a copy
    if step < min_len:
        log_probs[:, EOS_ID] = NEG_INF
    if eos is not None:
        forced = torch.full_like(log_probs[at_limit], NEG_INF)  # (R, V)
        forced[:, EOS_ID] = eos
        log_probs[at_limit] = forced
    return log_probs


def force_tokens_(log_probs: Tensor, forced: Tensor) -> Tensor:
    """Rows with ``forced >= 0`` may only emit that token, at its own log-probability; in place.

    ``log_probs`` (N, V), ``forced`` (N,) a token id per row, -1 where the row is free. The
    forced token keeps the model's log-probability, so it counts in the score as any
    chosen token does (fairseq's ``prefix_tokens``).
    """
    rows = (forced >= 0).nonzero().squeeze(1)  # (R,)
    if rows.numel():
        tokens = forced[rows]  # (R,)
        kept = log_probs[rows, tokens]  # (R,), a copy
        log_probs[rows] = NEG_INF
        log_probs[rows, tokens] = kept
    return log_probs


def block_size(vocab: int) -> int:
    """Entries per vocabulary block in :func:`beam_step`: a divisor of ``vocab`` near 64 if one exists.

    Blocks of 32 to 128 keep both selection stages short; a divisor spares padding.
    """
    divisors = [size for size in range(32, 129) if vocab % size == 0]
    return min(divisors, key=lambda size: abs(size - 64)) if divisors else 64


def beam_step(log_probs: Tensor, scores: Tensor, num_candidates: int) -> tuple[Tensor, Tensor, Tensor]:
    """One beam expansion: ``score(y_<t, v) = score(y_<t) + log p(v | y_<t, x)``, best first.

    ``log_probs`` (B, K, V) next-token log-probabilities of K hypotheses per sentence,
    ``scores`` (B, K) their running log-probabilities (``-inf`` for unused beams).
    Returns the ``num_candidates`` (C) best extensions per sentence: scores (B, C),
    tokens (B, C) and the beam each extends (B, C), sorted by score. Sums are formed in
    the precision of ``scores``.

    ``topk`` over all K * V extensions costs more than the softmax before it on CPU, so
    the selection runs in two stages: each beam's
    vocabulary is cut into blocks of :func:`block_size` entries, the C blocks with the best
    ``score + max log p`` are kept, and the C best extensions are taken from those
    blocks. This is exact: every one of the C best extensions lies in a block whose
    maximum is at least the C-th best score, and at most C blocks have such a maximum.
    """
    batch, beams, vocab = log_probs.shape
    size = block_size(vocab)
    blocks = -(-vocab // size)
    if blocks <= num_candidates:  # small vocabulary: one stage is as cheap
        total = (scores.unsqueeze(-1) + log_probs.to(scores.dtype)).view(batch, beams * vocab)  # (B, K * V)
        top_scores, flat = total.topk(min(num_candidates, beams * vocab), dim=1)  # (B, C)
        return top_scores, flat % vocab, torch.div(flat, vocab, rounding_mode="floor")
    if vocab % size:  # padding copies the whole array: block_size avoids it for most vocabularies
        log_probs = torch.nn.functional.pad(log_probs, (0, blocks * size - vocab), value=NEG_INF)
    grouped = log_probs.reshape(batch, beams * blocks, size)  # (B, K * nb, size)
    block_best = scores.repeat_interleave(blocks, dim=1) + grouped.amax(dim=-1).to(scores.dtype)  # (B, K * nb)
    _, chosen = block_best.topk(num_candidates, dim=1)  # (B, C) block numbers
    members = grouped.gather(1, chosen.unsqueeze(-1).expand(-1, -1, size))  # (B, C, size)
    chosen_beams = torch.div(chosen, blocks, rounding_mode="floor")  # (B, C)
    total = (scores.gather(1, chosen_beams).unsqueeze(-1) + members.to(scores.dtype)).view(batch, -1)  # (B, C * size)
    top_scores, flat = total.topk(num_candidates, dim=1)  # (B, C)
    block = chosen.gather(1, torch.div(flat, size, rounding_mode="floor"))  # (B, C)
    tokens = (block % blocks) * size + flat % size  # (B, C); padding only ever scores -inf
    return top_scores, tokens.clamp_(max=vocab - 1), torch.div(block, blocks, rounding_mode="floor")


def greedy_tokens(log_probs: Tensor) -> Tensor:
    """``argmax_v log p(v | y_<t, x)`` per row: (N, V) -> (N,)."""
    return log_probs.argmax(dim=-1)


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest entries of each row (others ``-inf``); ``k <= 0`` keeps all."""
    if k <= 0 or k >= logits.size(-1):
        return logits
    kth = logits.topk(k, dim=-1).values[:, -1:]  # (N, 1)
    return logits.masked_fill(logits < kth, NEG_INF)


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter: keep the smallest set of tokens whose probability reaches ``p``.

    The most probable token is always kept, so a row never becomes empty.
    """
    if p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (N, V)
    probs = sorted_logits.softmax(dim=-1)  # (N, V)
    mass_before = probs.cumsum(dim=-1) - probs  # (N, V)
    drop_sorted = mass_before >= p  # the tokens before this one already reach p
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, NEG_INF)


def sample_tokens(
    log_probs: Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Draw one token per row from ``softmax(log p / T)`` restricted to top-k / top-p.

    Entries already at ``-inf`` (length limits) stay impossible. (N, V) -> (N,).
    """
    logits = top_p_filter(top_k_filter(log_probs / temperature, top_k), top_p)  # (N, V)
    probs = logits.float().softmax(dim=-1)  # (N, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def penalise_repeats(log_probs: Tensor, outputs: Tensor, penalty: float) -> Tensor:
    """``log_softmax(where(v in y_<t, penalty * log p(v), log p(v)))`` per row.

    A log-probability is at most 0, so ``penalty > 1`` makes every token already in the
    row's output less likely, and the renormalisation hands that mass to the others.
    ``log_probs`` (N, V), ``outputs`` (N, t) the tokens each row holds; returns (N, V).
    """
    seen = torch.zeros_like(log_probs, dtype=torch.bool).scatter_(1, outputs, True)  # (N, V)
    return torch.where(seen, log_probs * penalty, log_probs).log_softmax(dim=-1)


def repeated_ngram_mask(outputs: Tensor, n: int, vocab: int) -> Tensor:
    """(N, V) True for each token that would make an n-gram occur twice in its row (fairseq's
    ``no_repeat_ngram_size``): the tokens that followed an earlier occurrence of the row's
    last ``n - 1`` tokens. ``outputs`` (N, t); all False while ``t < n``."""
    rows, length = outputs.shape
    mask = torch.zeros((rows, vocab + 1), dtype=torch.bool, device=outputs.device)  # column V: no token
    if length < n:
        return mask[:, :vocab]
    grams = outputs.unfold(1, n, 1)  # (N, t - n + 1, n), every n-gram of each row
    tail = outputs[:, length - n + 1:]  # (N, n - 1), the row's last n - 1 tokens
    seen_before = (grams[:, :, :-1] == tail[:, None, :]).all(dim=-1)  # (N, t - n + 1)
    mask.scatter_(1, grams[:, :, -1].masked_fill(~seen_before, vocab), True)
    return mask[:, :vocab]


def phrase_end_mask(outputs: Tensor, heads: Tensor, last: Tensor, owner: Tensor, row_owner: Tensor,
                    vocab: int) -> Tensor:
    """(N, V) True for the last token of each phrase whose other tokens end the row's output.

    Blocking those tokens keeps every phrase out of the output (a request's ``avoid``).
    The batch's M phrases: ``heads`` (M, W) all but their last token, right-aligned and
    padded on the left with -1 (any token), ``last`` (M,) their last token, ``owner``
    (M,) the sentence each belongs to; ``row_owner`` (N,) each row's sentence and
    ``outputs`` (N, t) its tokens.
    """
    rows, length = outputs.shape
    width = heads.size(1)
    if length < width:  # short outputs: -2 matches no token, and -1 in heads matches anything
        outputs = torch.nn.functional.pad(outputs, (width - length, 0), value=-2)
    tail = outputs[:, outputs.size(1) - width:]  # (N, W)
    ends = ((tail[:, None, :] == heads[None]) | (heads[None] < 0)).all(dim=-1)  # (N, M)
    ends &= row_owner[:, None] == owner[None, :]
    mask = torch.zeros((rows, vocab + 1), dtype=torch.bool, device=outputs.device)
    mask.scatter_(1, last[None, :].expand(rows, -1).masked_fill(~ends, vocab), True)
    return mask[:, :vocab]


__all__ = [
    "length_penalty",
    "max_output_lengths",
    "apply_length_limits_",
    "force_tokens_",
    "beam_step",
    "greedy_tokens",
    "top_k_filter",
    "top_p_filter",
    "sample_tokens",
    "penalise_repeats",
    "repeated_ngram_mask",
    "phrase_end_mask",
]
