"""Token-budget batching, per-rank sharding, resumable stream position, collation."""

from __future__ import annotations

import numpy as np
import pytest

from nmt_cli.data.binarized import ParallelSplit, ShardedTokenWriter
from nmt_cli.errors import NmtError
from nmt_cli.specials import BOS_ID, EOS_ID, PAD_ID
from nmt_cli.training import batching
from nmt_cli.training.batching import (BatchStream, WindowedBatches, collate, make_batches, padded_sizes,
                                       shard_batches)


@pytest.fixture()
def lengths() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    src = rng.integers(1, 40, size=500)
    tgt = rng.integers(1, 40, size=500)
    return src, tgt


def test_batches_cover_every_pair_once_within_the_budget(lengths):
    src, tgt = lengths
    batches = make_batches(src, tgt, max_tokens=256)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(src)))
    for batch in batches:
        cost = len(batch) * int(padded_sizes(src[batch], tgt[batch]).max())
        assert cost <= 256


def test_bucketing_keeps_padding_small(lengths):
    src, tgt = lengths
    batches = make_batches(src, tgt, max_tokens=256)
    sizes = padded_sizes(src, tgt)
    padded = sum(len(b) * int(sizes[b].max()) for b in batches)
    assert padded <= 1.1 * int(sizes.sum())  # sorting by length: under 10% padding here


def test_a_pair_over_the_budget_gets_its_own_batch():
    batches = make_batches(np.array([3, 50, 4]), np.array([3, 60, 2]), max_tokens=20)
    assert [b.tolist() for b in batches if 1 in b.tolist()] == [[1]]


def reader(src: np.ndarray, tgt: np.ndarray):
    """A length reader over in-memory arrays (as :func:`split_lengths` reads a prepared split)."""
    return lambda ranges: (np.concatenate([src[a:b] for a, b in ranges]), np.concatenate([tgt[a:b] for a, b in ranges]))


def windowed(src, tgt, max_tokens, seed=3, corpora=None, window=1_000_000) -> WindowedBatches:
    return WindowedBatches(reader(src, tgt), corpora or [(0, len(src), 1.0)], max_tokens, seed, window)


def test_shards_are_disjoint_equal_and_seeded(lengths):
    src, tgt = lengths
    batches = make_batches(src, tgt, max_tokens=128)
    shards = [shard_batches(batches, epoch=1, seed=7, rank=r, world_size=3) for r in range(3)]
    assert len({len(s) for s in shards}) == 1 and len(shards[0]) == len(batches) // 3
    ids = [tuple(b.tolist()) for shard in shards for b in shard]
    assert len(ids) == len(set(ids))  # no batch on two ranks
    again = shard_batches(batches, epoch=1, seed=7, rank=1, world_size=3)
    assert all(np.array_equal(a, b) for a, b in zip(again, shards[1]))
    next_epoch = shard_batches(batches, epoch=2, seed=7, rank=1, world_size=3)
    assert any(not np.array_equal(a, b) for a, b in zip(next_epoch, shards[1]))
    with pytest.raises(NmtError, match="too few"):
        BatchStream(windowed(src[:3], tgt[:3], 1000), seed=7, rank=0, world_size=3)


def test_stream_resumes_at_its_position_across_epochs(lengths):
    src, tgt = lengths
    batches = windowed(src, tgt, max_tokens=512)
    stream = BatchStream(batches, seed=3)
    per_epoch = len(batches.batches(1, 0))  # one window, one process: every batch of the epoch
    assert batches.batches_per_epoch(1) == (per_epoch, True)
    taken = [next(stream) for _ in range(per_epoch + 5)]
    assert stream.position == {"epoch": 2, "batch": 5}
    first_epoch = sorted(np.concatenate(taken[:per_epoch]).tolist())
    assert first_epoch == list(range(len(src)))  # one epoch = every pair once
    resumed = BatchStream(batches, seed=3, epoch=1, index=7)
    for expected in taken[7:]:
        assert np.array_equal(next(resumed), expected)


@pytest.mark.parametrize("world_size", [1, 2])
def test_windows_spread_the_split_cover_each_pair_once_and_resume_anywhere(lengths, world_size, monkeypatch):
    """A window of 60 pairs over 500: 9 windows of 8-pair blocks dealt round-robin; each epoch
    still gives every pair once (less the batches left over per rank), and every position resumes exactly."""
    monkeypatch.setattr(batching, "BLOCK_PAIRS", 8)
    src, tgt = lengths
    batches = windowed(src, tgt, max_tokens=256, window=60)
    assert batches.windows == 9
    dealt = [pair for window in range(9) for first, end in batches.ranges(window)[0] for pair in range(first, end)]
    assert sorted(dealt) == list(range(len(src)))
    assert all(len(batches.ranges(window)[0]) > 1 for window in range(9))  # spread out, not one run
    streams = [BatchStream(batches, seed=3, rank=rank, world_size=world_size) for rank in range(world_size)]
    per_rank = sum(count // world_size for count in batches.counts(1))
    epoch = [[next(stream) for _ in range(per_rank)] for stream in streams]
    assert all(stream.position == {"epoch": 2, "batch": 0} for stream in streams)
    pairs = np.concatenate([batch for rank in epoch for batch in rank])
    assert len(pairs) == len(set(pairs.tolist()))  # no pair twice in an epoch, on any rank
    if world_size == 1:
        assert sorted(pairs.tolist()) == list(range(len(src)))
    for index in (0, 1, per_rank // 2, per_rank - 1):
        resumed = BatchStream(windowed(src, tgt, max_tokens=256, window=60), seed=3, rank=world_size - 1,
                              world_size=world_size, index=index)
        for expected in epoch[-1][index:]:
            assert np.array_equal(next(resumed), expected)
    assert batches.order(1) != batches.order(2)  # windows come in another order each epoch


def _split(tmp_path, pairs: list[tuple[list[int], list[int]]]) -> ParallelSplit:
    for side, column in (("src", 0), ("tgt", 1)):
        writer = ShardedTokenWriter(tmp_path, "train", side, np.uint16, [1] * len(pairs))  # a shard per pair
        writer.extend([pair[column] for pair in pairs])
        writer.close()
    return ParallelSplit(tmp_path, "train", np.uint16, [1] * len(pairs))


def test_collate_builds_teacher_forcing_tensors(tmp_path):
    split = _split(tmp_path, [([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14])])
    batch = collate(split, np.array([0, 1]))
    assert batch.src.tolist() == [[5, 6, 7], [10, PAD_ID, PAD_ID]]
    assert batch.src_mask.tolist() == [[True, True, True], [True, False, False]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 8, 9, PAD_ID, PAD_ID], [BOS_ID, 11, 12, 13, 14]]
    assert batch.tgt_out.tolist() == [[8, 9, EOS_ID, PAD_ID, PAD_ID], [11, 12, 13, 14, EOS_ID]]
    assert batch.tgt_mask.tolist() == [[True, True, True, False, False], [True] * 5]
    assert batch.num_tokens == int(batch.tgt_mask.sum()) == 8


def test_weighted_batches_draw_each_corpus_by_its_weight_and_resume_exactly(lengths):
    src, tgt = lengths
    small, large = (0, len(src) // 4), (len(src) // 4, len(src))
    corpora = [(*small, 3.0), (*large, 0.5)]
    weighted = windowed(src, tgt, max_tokens=512, corpora=corpora)
    drawn, drawn_src, drawn_tgt = weighted.draw(1, 0)
    assert np.array_equal(drawn_src, src[drawn]) and np.array_equal(drawn_tgt, tgt[drawn])
    counts = np.bincount(drawn, minlength=len(src))
    assert set(counts[slice(*small)].tolist()) == {3}  # upsampled: every pair three times
    assert counts[slice(*large)].sum() == round(0.5 * (large[1] - large[0])) and counts[slice(*large)].max() == 1
    assert not np.array_equal(np.sort(weighted.draw(2, 0)[0]), np.sort(drawn))  # another half next epoch
    assert sorted(np.concatenate(weighted.batches(1, 0)).tolist()) == sorted(drawn.tolist())
    assert all(len(batch) * int(padded_sizes(src[batch], tgt[batch]).max()) <= 512
               for batch in weighted.batches(1, 0) if len(batch) > 1)
    mixed = [batch for batch in weighted.batches(1, 0) if (batch < small[1]).any() and (batch >= small[1]).any()]
    assert mixed  # one window: the corpora share batches, as one sorted draw
    stream = BatchStream(weighted, seed=3)
    taken = [next(stream) for _ in range(len(weighted.batches(1, 0)) + 5)]
    resumed = BatchStream(windowed(src, tgt, 512, corpora=corpora), seed=3, epoch=1, index=4)
    for expected in taken[4:]:
        assert np.array_equal(next(resumed), expected)


def test_weighted_windows_draw_every_corpus_by_its_weight(lengths):
    """Several windows: each draws its share of every corpus, and the epoch keeps the weights."""
    src, tgt = lengths
    corpora = [(0, 100, 3.0), (100, 500, 0.5)]
    weighted = windowed(src, tgt, max_tokens=512, corpora=corpora, window=100)
    assert weighted.windows == 5  # 300 + 200 draws
    drawn = [weighted.draw(1, window)[0] for window in range(weighted.windows)]
    assert all((d < 100).any() and (d >= 100).any() for d in drawn)  # every window mixes both
    counts = np.bincount(np.concatenate(drawn), minlength=len(src))
    assert set(counts[:100].tolist()) == {3} and counts[100:].max() == 1
    assert abs(int(counts[100:].sum()) - 200) <= weighted.windows  # rounding per window
    assert weighted.counts(1) != weighted.counts(2) or not np.array_equal(weighted.draw(1, 0)[0],
                                                                           weighted.draw(2, 0)[0])
