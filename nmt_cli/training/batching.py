"""Token-budget batches with length bucketing, sharded per process, resumable by position.

Sentences are sorted by length and cut into batches whose *padded* size stays within
``max_tokens`` (fairseq-style): a batch of ``B`` pairs costs ``B * max(S, T)`` where
``S`` is the longest source and ``T`` the longest target plus one (BOS/EOS).

Memory does not grow with the corpus: batching reads pair lengths, never token ids, and
holds one *window* at a time (:class:`WindowedBatches`). Each epoch the training split is
dealt into ``ceil(draws / train.batch_window)`` windows: every corpus is cut into blocks of
consecutive pairs and block ``j`` goes to window ``j mod windows``, so each window is a
spread-out sample of every corpus. A window draws its pairs by their corpus's weight
(weight 3: every pair three times; 0.5: a seeded half of them), is sorted and cut, and its
batches are shuffled and dealt to the processes. The windows of an epoch come in a seeded
order. Every choice is seeded by ``(seed, epoch, ...)``, so the stream depends only on
``(epoch, batch index)`` and a resumed run sees exactly the batches an uninterrupted run
would. A split within one window (up to ``batch_window`` draws) is sorted whole.
"""

from __future__ import annotations

import math
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

__all__ = ["Batch", "BatchStream", "WindowedBatches", "check_fits_model", "collate", "collate_links",
           "epoch_batches", "make_batches", "shard_batches", "split_lengths"]


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
        recorded = data.manifest["splits"][name]["tokens"]  # the longest of each side, without reading them
        for side, limit in (("src", model.max_source_length), ("tgt", model.max_target_length)):
            if limit is None or recorded[side]["max_length"] <= limit:
                continue
            lengths = getattr(data.split(name), side).lengths
            longest = int(np.argmax(lengths))
            raise InputError(data.text_path(name, side),
                             f"{int(lengths[longest])} tokens, more than the model takes ({limit}, from "
                             "model.max_positions); raise model.max_positions or prepare the data with a lower "
                             "data.max_length", longest + 1)


def padded_sizes(src_lengths: np.ndarray, tgt_lengths: np.ndarray) -> np.ndarray:
    """Per pair, the padded width it forces on a batch: ``max(S, T + 1)``."""
    return np.maximum(src_lengths.astype(np.int64), tgt_lengths.astype(np.int64) + 1)


def make_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Cut length-sorted pair indices into batches of at most ``max_tokens`` padded tokens.

    Greedy: each batch takes as many of the next pairs (by padded size) as fit. A pair longer
    than ``max_tokens`` on its own gets a batch of one. Deterministic.
    """
    sizes = padded_sizes(src_lengths, tgt_lengths)
    order = np.lexsort((tgt_lengths, src_lengths, sizes))  # primary key: padded size
    sorted_sizes = sizes[order]
    batches, start = [], 0
    while start < len(order):
        # sizes are non-decreasing, so "count pairs from start fit" holds up to some count: find it
        low, high = 1, min(len(order) - start, max(1, max_tokens // int(sorted_sizes[start])))
        while low < high:
            middle = (low + high + 1) // 2
            if middle * int(sorted_sizes[start + middle - 1]) <= max_tokens:
                low = middle
            else:
                high = middle - 1
        batches.append(order[start : start + low])
        start += low
    return batches


def shard_batches(batches: list[np.ndarray], epoch: int, seed: int, rank: int, world_size: int,
                  window: int = 0) -> list[np.ndarray]:
    """This rank's batches of one window of ``epoch``: a seeded shuffle, cut to an equal count per rank.

    Every rank draws the same permutation (seeded by ``(seed, epoch, window)``) and takes every
    ``world_size``-th batch from ``rank`` on, so shards are disjoint; the few batches left over
    are dropped this epoch.
    """
    per_rank = len(batches) // world_size
    order = np.random.default_rng([seed, epoch, window]).permutation(len(batches))[: per_rank * world_size]
    return [batches[i] for i in order[rank::world_size]]


#: pairs per block when the split is dealt into windows: the unit of each length read
BLOCK_PAIRS = 4096

#: reads the lengths of pairs ``[start, stop)`` of each range: (source lengths, target lengths)
LengthReader = Callable[[list[tuple[int, int]]], tuple[np.ndarray, np.ndarray]]


def split_lengths(split: ParallelSplit) -> LengthReader:
    """The :data:`LengthReader` of a prepared split (plain file reads, :meth:`ShardedTokenArray.read_lengths`)."""
    return lambda ranges: (split.src.read_lengths(ranges), split.tgt.read_lengths(ranges))


class WindowedBatches:
    """The batches of each epoch, window by window (see the module's docstring).

    ``corpora`` are ``(first pair, end, weight)`` (:meth:`PreparedData.corpus_mix`): each
    pair of a corpus is drawn ``weight`` times per epoch on average, the whole part of the
    weight repeating it, the fraction drawing that share of the window's pairs of the corpus
    without replacement, seeded by ``(seed, epoch, 1, window)``.
    """

    def __init__(self, lengths: LengthReader, corpora: list[tuple[int, int, float]], max_tokens: int, seed: int,
                 window: int):
        self.lengths, self.corpora, self.max_tokens, self.seed = lengths, corpora, max_tokens, seed
        draws = sum((end - start) * weight for start, end, weight in corpora)
        self.windows = max(1, math.ceil(draws / window))
        self.fixed = all(weight == int(weight) for _, _, weight in corpora)  # the same draw every epoch
        self._counts: dict[int, list[int]] = {}
        self._cut: tuple[int, int, list[np.ndarray]] | None = None

    def ranges(self, window: int) -> list[list[tuple[int, int]]]:
        """Per corpus, the pair ranges (blocks) dealt to ``window``."""
        dealt = []
        for start, end, _ in self.corpora:
            block = max(1, min(BLOCK_PAIRS, math.ceil((end - start) / self.windows)))
            dealt.append([(first, min(first + block, end))
                          for first in range(start + window * block, end, block * self.windows)])
        return dealt

    def draw(self, epoch: int, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pairs ``window`` draws in ``epoch`` (a pair may repeat), and their source and target lengths."""
        rng = np.random.default_rng([self.seed, epoch, 1, window])  # not the streams that order batches
        picked, src, tgt = [], [], []
        for ranges, (_, _, weight) in zip(self.ranges(window), self.corpora):
            if not ranges:
                continue
            pairs = np.concatenate([np.arange(first, end, dtype=np.int64) for first, end in ranges])
            src_lengths, tgt_lengths = self.lengths(ranges)
            whole, fraction = int(weight), weight - int(weight)
            chosen = [np.arange(len(pairs))] * whole
            if fraction:
                chosen.append(rng.choice(len(pairs), size=int(round(fraction * len(pairs))), replace=False))
            chosen = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
            picked.append(pairs[chosen])
            src.append(src_lengths[chosen])
            tgt.append(tgt_lengths[chosen])
        if not picked:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(picked), np.concatenate(src), np.concatenate(tgt)

    def batches(self, epoch: int, window: int) -> list[np.ndarray]:
        """The batches (pair indices) of ``window`` in ``epoch``; the last window cut is kept."""
        key = (0 if self.fixed else epoch, window)
        if self._cut is None or self._cut[:2] != key:
            picked, src, tgt = self.draw(epoch, window)
            self._cut = (*key, [picked[batch] for batch in make_batches(src, tgt, self.max_tokens)])
        return self._cut[2]

    def counts(self, epoch: int) -> list[int]:
        """How many batches each window of ``epoch`` has (cuts every window: resuming mid-epoch)."""
        key = 0 if self.fixed else epoch
        if key not in self._counts:
            self._counts = {key: [len(self.batches(epoch, window)) for window in range(self.windows)]}
        return self._counts[key]

    def order(self, epoch: int) -> list[int]:
        """The windows of ``epoch`` in the order they are trained on."""
        return np.random.default_rng([self.seed, epoch, 2]).permutation(self.windows).tolist()

    def batches_per_epoch(self, epoch: int) -> tuple[int, bool]:
        """Batches of ``epoch`` (all processes), and whether that is exact: with several windows,
        the first window's count times the windows (counting them all would cut every window)."""
        first = self.order(epoch)[0]
        return len(self.batches(epoch, first)) * self.windows, self.windows == 1


def epoch_batches(data: PreparedData, split: ParallelSplit, max_tokens: int, seed: int,
                  window: int) -> WindowedBatches:
    """The batches of each epoch of ``split``, the training split of ``data``, drawn by the
    weights of its corpora (a single corpus: every pair once)."""
    return WindowedBatches(split_lengths(split), data.corpus_mix(), max_tokens, seed, window)


class BatchStream:
    """Endless per-rank sequence of batch indices, epoch after epoch (epochs count from 1).

    Walks the windows of each epoch (:class:`WindowedBatches`) in their order, taking this
    rank's share of each. ``position`` (the epoch and this rank's index of the *next* batch
    in it) is the resumable state; resuming mid-epoch cuts the windows before it to count them.
    """

    def __init__(self, batches: WindowedBatches, seed: int, rank: int = 0, world_size: int = 1, epoch: int = 1,
                 index: int = 0):
        self.batches = batches
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.epoch, self.index = epoch, index
        self._start_epoch(skip=index)

    @property
    def position(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch": self.index}

    def __iter__(self) -> "BatchStream":
        return self

    def __next__(self) -> np.ndarray:
        indices = self._mine[self._at]
        self._at += 1
        self.index += 1
        self._settle()
        return indices

    def _start_epoch(self, skip: int) -> None:
        """Go to this rank's batch ``skip`` of ``self.epoch``."""
        self._windows = self.batches.order(self.epoch)
        self._window, self._mine, self._at = -1, [], 0
        if skip:
            counts = self.batches.counts(self.epoch)
            for number, window in enumerate(self._windows):
                mine = counts[window] // self.world_size
                if skip < mine:
                    self._window = number - 1
                    break
                skip -= mine
            else:  # past this epoch's end (resumed on more processes, which drop more left-over batches)
                self.epoch, self.index = self.epoch + 1, 0
                self._start_epoch(skip=0)
                return
        self._settle()
        self._at = skip

    def _settle(self) -> None:
        """Make ``_mine[_at]`` the next batch: past a window's end, the next window; past the
        last window, the next epoch (so ``position`` never points past an epoch's end)."""
        while self._at >= len(self._mine):
            if self._window + 1 == len(self._windows):
                if self.index == 0:
                    raise NmtError(f"the training split gives {sum(self.batches.counts(self.epoch))} batches, in "
                                   f"windows too few to give each of the {self.world_size} processes one; lower "
                                   "train.max_tokens, raise train.batch_window or use fewer processes")
                self.epoch, self.index = self.epoch + 1, 0
                self._windows, self._window = self.batches.order(self.epoch), -1
            self._window += 1
            window = self._windows[self._window]
            self._mine = shard_batches(self.batches.batches(self.epoch, window), self.epoch, self.seed, self.rank,
                                       self.world_size, window)
            self._at = 0


def collate(split: ParallelSplit, indices: np.ndarray) -> Batch:
    """Gather pairs ``indices`` of ``split`` into padded LongTensors and masks."""
    sources = [split.src[index] for index in indices.tolist()]
    targets = [split.tgt[index] for index in indices.tolist()]
    src_lengths = np.array([len(source) for source in sources], dtype=np.int64)
    tgt_lengths = np.array([len(target) for target in targets], dtype=np.int64)
    width_src = max(int(src_lengths.max()), 1)
    width_tgt = int(tgt_lengths.max()) + 1
    src = np.full((len(indices), width_src), PAD_ID, dtype=np.int64)  # (B, S)
    tgt_in = np.full((len(indices), width_tgt), PAD_ID, dtype=np.int64)  # (B, T)
    tgt_out = np.full((len(indices), width_tgt), PAD_ID, dtype=np.int64)  # (B, T)
    tgt_in[:, 0] = BOS_ID
    for row, (source, target, tgt_len) in enumerate(zip(sources, targets, tgt_lengths.tolist())):
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
