"""Token-budget batching, per-rank sharding, resumable stream position, collation."""

from __future__ import annotations

import numpy as np
import pytest

from nmt_cli.data.binarized import ParallelSplit, TokenArrayWriter
from nmt_cli.errors import NmtError
from nmt_cli.specials import BOS_ID, EOS_ID, PAD_ID
from nmt_cli.training.batching import (BatchStream, FixedBatches, WeightedBatches, collate, make_batches,
                                       padded_sizes, shard_batches)


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
    with pytest.raises(NmtError, match="fewer than"):
        shard_batches(batches[:2], epoch=1, seed=7, rank=0, world_size=3)


def test_stream_resumes_at_its_position_across_epochs(lengths):
    src, tgt = lengths
    batches = FixedBatches(src, tgt, max_tokens=512)
    stream = BatchStream(batches, seed=3)
    per_epoch = len(batches(1))  # one process: every batch of the epoch
    taken = [next(stream) for _ in range(per_epoch + 5)]
    assert stream.position == {"epoch": 2, "batch": 5}
    first_epoch = sorted(np.concatenate(taken[:per_epoch]).tolist())
    assert first_epoch == list(range(len(src)))  # one epoch = every pair once
    resumed = BatchStream(batches, seed=3, epoch=1, index=7)
    for expected in taken[7:]:
        assert np.array_equal(next(resumed), expected)


def _split(tmp_path, pairs: list[tuple[list[int], list[int]]]) -> ParallelSplit:
    for side, column in (("src", 0), ("tgt", 1)):
        writer = TokenArrayWriter(tmp_path / f"train.{side}", np.uint16)
        for pair in pairs:
            writer.append(pair[column])
        writer.close()
    return ParallelSplit(tmp_path, "train", np.uint16)


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
    numbers = np.repeat(np.array([0, 1], dtype=np.int16), [len(src) // 4, len(src) - len(src) // 4])
    weighted = WeightedBatches(src, tgt, numbers, [3.0, 0.5], max_tokens=512, seed=3)
    drawn = weighted.draw(1)
    small, large = np.flatnonzero(numbers == 0), np.flatnonzero(numbers == 1)
    counts = np.bincount(drawn, minlength=len(src))
    assert set(counts[small].tolist()) == {3}  # upsampled: every pair three times
    assert counts[large].sum() == round(0.5 * len(large)) and counts[large].max() == 1
    assert not np.array_equal(np.sort(weighted.draw(2)), np.sort(drawn))  # another half next epoch
    assert sorted(np.concatenate(weighted(1)).tolist()) == sorted(drawn.tolist())
    assert all(len(batch) * int(padded_sizes(src[batch], tgt[batch]).max()) <= 512 for batch in weighted(1)
               if len(batch) > 1)
    stream = BatchStream(weighted, seed=3)
    taken = [next(stream) for _ in range(len(weighted(1)) + 5)]
    resumed = BatchStream(WeightedBatches(src, tgt, numbers, [3.0, 0.5], 512, seed=3), seed=3, epoch=1, index=4)
    for expected in taken[4:]:
        assert np.array_equal(next(resumed), expected)
