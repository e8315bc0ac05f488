"""Token-budget batches with length bucketing, sharded per process, resumable by position.

Sentences are sorted by length and cut into batches whose *padded* size stays within
``max_tokens`` (fairseq-style): a batch of ``B`` pairs costs ``B * max(S, T)`` where
``S`` is the longest source and ``T`` the longest target plus one (BOS/EOS). Each epoch
shuffles the order of its batches with a generator seeded by ``(seed, epoch)``, so the
stream depends only on ``(epoch, batch index)`` and a resumed run sees exactly the
batches an uninterrupted run would.

The batches of an epoch come from :class:`FixedBatches` (the same every epoch, built
once) or, for a training split mixed from several corpora, :class:`WeightedBatches`:
each epoch draws every corpus's pairs by its weight (weight 3: every pair three times;
0.5: a seeded half of them) and batches the draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from nmt_cli.data.binarized import ParallelSplit
from nmt_cli.data.prepared import PreparedData
from nmt_cli.errors import InputError, NmtError
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.specials import BOS_ID, EOS_ID, PAD_ID

__all__ = ["Batch", "BatchStream", "FixedBatches", "WeightedBatches", "check_fits_model", "collate",
           "collate_links", "epoch_batches", "make_batches", "shard_batches"]


@dataclass
class Batch:
    """Padded tensors for teacher forcing: ``tgt_in = BOS + y``, ``tgt_out = y + EOS``.

    Masks are True on real tokens. ``num_tokens`` (target tokens incl. EOS) is a Python
    int so loss normalisation and throughput need no device synchronisation.

    ``links`` (when the split has word links, :mod:`nmt_cli.data.links`): one row
    ``(sentence, target position, source position)`` per piece link, where target position
    ``t`` is the piece ``tgt_out[:, t]`` (predicted at decoder step ``t``, the decoder input
    at step ``t + 1``) and source position ``s`` is ``src[:, s]``; ``link_weights`` gives each
    link ``1 / (links of its target piece)``, so every linked target piece carries a
    distribution over source pieces that sums to one.
    """

    src: Tensor  # (B, S) long
    src_mask: Tensor  # (B, S) bool
    tgt_in: Tensor  # (B, T) long
    tgt_out: Tensor  # (B, T) long
    tgt_mask: Tensor  # (B, T) bool
    num_tokens: int
    links: Tensor | None = None  # (N, 3) long
    link_weights: Tensor | None = None  # (N,) float

    def to(self, device: torch.device) -> "Batch":
        if device.type == "cpu":
            return self
        tensors = (self.src, self.src_mask, self.tgt_in, self.tgt_out, self.tgt_mask, self.links, self.link_weights)
        moved = [t if t is None else t.pin_memory().to(device, non_blocking=True) for t in tensors]
        return Batch(*moved[:5], num_tokens=self.num_tokens, links=moved[5], link_weights=moved[6])


def check_fits_model(data: PreparedData, splits: list[str], model: Seq2SeqModel) -> None:
    """Fail before training when a pair of ``splits`` is longer than ``model`` takes
    (learned positions, location attention), naming its line in the cleaned text."""
    for name in splits:
        split = data.split(name)
        for side, lengths, limit in (("src", split.src.lengths, model.max_source_length),
                                     ("tgt", split.tgt.lengths, model.max_target_length)):
            if limit is None or len(lengths) == 0 or int(lengths.max()) <= limit:
                continue
            longest = int(np.argmax(lengths))
            raise InputError(data.text_path(name, side),
                             f"{int(lengths[longest])} tokens, more than the model takes ({limit}, from "
                             "model.max_positions); raise model.max_positions or prepare the data with a lower "
                             "data.max_length", longest + 1)


def padded_sizes(src_lengths: np.ndarray, tgt_lengths: np.ndarray) -> np.ndarray:
    """Per pair, the padded width it forces on a batch: ``max(S, T + 1)``."""
    return np.maximum(src_lengths, tgt_lengths + 1)


def make_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Cut length-sorted pair indices into batches of at most ``max_tokens`` padded tokens.

    A pair longer than ``max_tokens`` on its own gets a batch of one. Deterministic.
    """
    sizes = padded_sizes(src_lengths, tgt_lengths)
    order = np.lexsort((tgt_lengths, src_lengths, sizes))  # primary key: padded size
    sorted_sizes = sizes[order].tolist()
    batches, start = [], 0
    for end, size in enumerate(sorted_sizes):
        # sizes are non-decreasing, so the newest pair sets the batch width
        if end > start and (end - start + 1) * size > max_tokens:
            batches.append(order[start:end])
            start = end
    if start < len(order):
        batches.append(order[start:])
    return batches


def shard_batches(batches: list[np.ndarray], epoch: int, seed: int, rank: int, world_size: int) -> list[np.ndarray]:
    """This rank's batches for ``epoch``: a seeded shuffle, cut to an equal count per rank.

    Every rank draws the same permutation and takes every ``world_size``-th batch from
    ``rank`` on, so shards are disjoint; the few batches left over are dropped this epoch.
    """
    per_rank = len(batches) // world_size
    if per_rank == 0:
        raise NmtError(
            f"the training split gives {len(batches)} batches, fewer than the {world_size} processes; "
            "lower train.max_tokens or use fewer processes"
        )
    order = np.random.default_rng([seed, epoch]).permutation(len(batches))[: per_rank * world_size]
    return [batches[i] for i in order[rank::world_size]]


class FixedBatches:
    """The same batches every epoch: :func:`make_batches` of the whole split, built once."""

    def __init__(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int):
        self.batches = make_batches(src_lengths, tgt_lengths, max_tokens)

    def __call__(self, epoch: int) -> list[np.ndarray]:
        return self.batches


class WeightedBatches:
    """Each epoch's batches of a draw of the pairs by their corpus's weight.

    ``corpus_numbers`` (N,) gives each pair's corpus, ``weights`` each corpus's expected
    draws per pair and epoch: the whole part of a weight repeats every pair, the
    fraction draws that share of the corpus's pairs without replacement, seeded by
    ``(seed, epoch)``. The draw is then cut by length like :func:`make_batches`.
    """

    def __init__(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray, corpus_numbers: np.ndarray,
                 weights: list[float], max_tokens: int, seed: int):
        self.src_lengths, self.tgt_lengths, self.max_tokens, self.seed = src_lengths, tgt_lengths, max_tokens, seed
        self.members = [np.flatnonzero(corpus_numbers == number) for number in range(len(weights))]
        self.weights = weights
        self._cached: tuple[int, list[np.ndarray]] | None = None

    def draw(self, epoch: int) -> np.ndarray:
        """The pair indices of ``epoch`` (a pair may appear several times)."""
        rng = np.random.default_rng([self.seed, epoch, 1])  # not the stream that orders the batches
        picked = []
        for members, weight in zip(self.members, self.weights):
            whole, fraction = int(weight), weight - int(weight)
            picked += [members] * whole
            picked.append(rng.choice(members, size=int(round(fraction * len(members))), replace=False))
        return np.concatenate(picked)

    def __call__(self, epoch: int) -> list[np.ndarray]:
        if self._cached is None or self._cached[0] != epoch:
            picked = self.draw(epoch)
            batches = make_batches(self.src_lengths[picked], self.tgt_lengths[picked], self.max_tokens)
            self._cached = (epoch, [picked[batch] for batch in batches])
        return self._cached[1]


def epoch_batches(data: PreparedData, split: ParallelSplit, max_tokens: int,
                  seed: int) -> FixedBatches | WeightedBatches:
    """The batches of each epoch of ``split``, the training split of ``data``: the same every
    epoch, or a new weighted draw per epoch when it is mixed from several corpora."""
    lengths = (split.src.lengths, split.tgt.lengths)
    mix = data.corpus_mix()
    if mix is None:
        return FixedBatches(*lengths, max_tokens)
    return WeightedBatches(*lengths, *mix, max_tokens, seed)


class BatchStream:
    """Endless per-rank sequence of batch indices, epoch after epoch (epochs count from 1).

    ``epoch_batches(epoch)`` gives the batches of an epoch (:class:`FixedBatches` or
    :class:`WeightedBatches`). ``position`` (the epoch and index of the *next* batch) is
    the resumable state.
    """

    def __init__(self, epoch_batches: Callable[[int], list[np.ndarray]], seed: int, rank: int = 0,
                 world_size: int = 1, epoch: int = 1, index: int = 0):
        self.epoch_batches = epoch_batches
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.epoch, self.index = epoch, index
        self._order = shard_batches(epoch_batches(epoch), epoch, seed, rank, world_size)
        self._roll_over()

    @property
    def position(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch": self.index}

    def __iter__(self) -> "BatchStream":
        return self

    def __next__(self) -> np.ndarray:
        indices = self._order[self.index]
        self.index += 1
        self._roll_over()
        return indices

    def _roll_over(self) -> None:
        if self.index >= len(self._order):
            self.epoch, self.index = self.epoch + 1, 0
            self._order = shard_batches(self.epoch_batches(self.epoch), self.epoch, self.seed, self.rank,
                                        self.world_size)


def collate(split: ParallelSplit, indices: np.ndarray) -> Batch:
    """Gather pairs ``indices`` of ``split`` into padded LongTensors and masks."""
    src_lengths = split.src.lengths[indices]
    tgt_lengths = split.tgt.lengths[indices]
    width_src = max(int(src_lengths.max()), 1)
    width_tgt = int(tgt_lengths.max()) + 1
    src = np.full((len(indices), width_src), PAD_ID, dtype=np.int64)  # (B, S)
    tgt_in = np.full((len(indices), width_tgt), PAD_ID, dtype=np.int64)  # (B, T)
    tgt_out = np.full((len(indices), width_tgt), PAD_ID, dtype=np.int64)  # (B, T)
    tgt_in[:, 0] = BOS_ID
    for row, (index, tgt_len) in enumerate(zip(indices.tolist(), tgt_lengths.tolist())):
        source = split.src[index]
        target = split.tgt[index]
        src[row, : len(source)] = source
        tgt_in[row, 1 : tgt_len + 1] = target
        tgt_out[row, :tgt_len] = target
        tgt_out[row, tgt_len] = EOS_ID
    src_mask = np.arange(width_src)[None, :] < src_lengths[:, None]  # (B, S)
    tgt_mask = np.arange(width_tgt)[None, :] <= tgt_lengths[:, None]  # (B, T): y + EOS
    links, weights = collate_links(split, indices) if split.links is not None else (None, None)
    return Batch(
        src=torch.from_numpy(src),
        src_mask=torch.from_numpy(src_mask),
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        tgt_mask=torch.from_numpy(tgt_mask),
        num_tokens=int(tgt_lengths.sum()) + len(indices),
        links=links,
        link_weights=weights,
    )


def collate_links(split: ParallelSplit, indices: np.ndarray) -> tuple[Tensor, Tensor]:
    """The piece links of pairs ``indices`` as :attr:`Batch.links` and :attr:`Batch.link_weights`."""
    per_pair = [split.links_of(index) for index in indices.tolist()]  # (n, 2) (source, target) each
    rows = np.repeat(np.arange(len(per_pair)), [len(links) for links in per_pair])
    pairs = np.concatenate(per_pair) if per_pair else np.zeros((0, 2), dtype=np.int64)
    links = np.stack([rows, pairs[:, 1], pairs[:, 0]], axis=1).astype(np.int64)  # (N, 3)
    if not len(links):
        return torch.from_numpy(links), torch.zeros(0)
    # links sharing (sentence, target piece) split one unit of probability
    _, group, counts = np.unique(links[:, :2], axis=0, return_inverse=True, return_counts=True)
    weights = (1.0 / counts)[group.reshape(-1)].astype(np.float32)
    return torch.from_numpy(links), torch.from_numpy(weights)
