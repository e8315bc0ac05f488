"""Corpora larger than memory: token shards, windowed batching over them, a killed prepare.

Shards and windows are made tiny here (``data.shard_pairs``, ``train.batch_window``) so a
few hundred pairs take the paths a 40M-pair corpus takes.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from nmt_cli.checkpoint import list_checkpoints
from nmt_cli.config import Config, load_config
from nmt_cli.data.prepare import prepare
from nmt_cli.data.prepared import PreparedData
from nmt_cli.errors import NmtError
from nmt_cli.training import train
from nmt_cli.training.progress import read_metrics

REPO = Path(__file__).resolve().parents[1]
PAIRS = [(f"Der Hund Nummer {i} läuft schnell .", f"The dog number {i} runs fast .") for i in range(200)]
SMALL = {"data.source": "synthetic", "data.synthetic_train_size": 400, "data.synthetic_valid_size": 20,
         "data.synthetic_test_size": 10, "data.vocab_size": 300}
TINY_MODEL = {"model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64, "model.encoder_layers": 1,
              "model.decoder_layers": 1, "model.dropout": 0.2, "train.max_tokens": 300, "train.num_threads": 1,
              "train.warmup_steps": 10, "train.lr": 3e-3, "train.log_every": 1, "train.valid_every": 0,
              "train.early_stop_metric": "loss", "train.save_every": 7}


def write_corpus(folder: Path, pairs: list[tuple[str, str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.de").write_text("".join(de + "\n" for de, _ in pairs), encoding="utf-8")
    (folder / "train.en").write_text("".join(en + "\n" for _, en in pairs), encoding="utf-8")


def files_config(**extra) -> Config:
    return load_config(None, {"data.source": "files", "data.path": "corpus", "data.valid_split": "",
                              "data.test_split": "", "data.vocab_size": 120, **extra})


def token_ids(path: Path, split: str = "train") -> list[tuple[list[int], list[int]]]:
    data = PreparedData(path)
    pairs = data.split(split)
    return [(pairs.src[i].tolist(), pairs.tgt[i].tolist()) for i in range(len(pairs))]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> tuple[Path, Path]:
    """(one shard per split, shards of 37 pairs) of the same small synthetic corpus."""
    root = tmp_path_factory.mktemp("sharded")
    prepare(Config().with_overrides(SMALL), root / "whole", progress=False)
    prepare(Config().with_overrides({**SMALL, "data.shard_pairs": 37}), root / "shards", progress=False)
    return root / "whole", root / "shards"


def test_shards_hold_the_same_pairs_as_one_array(sharded):
    whole, shards = sharded
    manifest = json.loads((shards / "manifest.json").read_text())
    assert manifest["format_version"] == 2
    assert manifest["splits"]["train"]["shards"] == [37] * 10 + [30]
    assert manifest["splits"]["valid"]["shards"] == [20]
    assert sorted(path.name for path in shards.glob("train.src.*.bin")) == [f"train.src.{k:05d}.bin" for k in range(11)]
    assert {f"train.tgt.{k:05d}.idx.npy" for k in range(11)} | {"train.src.lengths.npy"} <= set(manifest["arrays"])
    for split in ("train", "valid", "test"):
        assert token_ids(shards, split) == token_ids(whole, split)
    data = PreparedData(shards)
    data.verify()
    train_split = data.split("train")
    assert train_split.src.lengths.tolist() == [len(ids) for ids, _ in token_ids(shards)]
    assert np.array_equal(train_split.tgt.read_lengths([(36, 40), (0, 2)]),
                          np.concatenate([train_split.tgt.lengths[36:40], train_split.tgt.lengths[:2]]))
    # the shard size lays the files out but is not part of the data: a rerun with another reuses it
    assert prepare(Config().with_overrides({**SMALL, "data.shard_pairs": 5}), shards, progress=False)["reused"]


def test_a_damaged_shard_or_an_older_format_is_named(sharded, tmp_path):
    _, shards = sharded
    damaged = tmp_path / "damaged"
    shutil.copytree(shards, damaged)
    shard = damaged / "train.tgt.00004.bin"
    shard.write_bytes(shard.read_bytes()[:-4])
    with pytest.raises(NmtError, match="train.tgt.00004.bin: has"):
        PreparedData(damaged)
    older = tmp_path / "older"
    shutil.copytree(shards, older)
    manifest = json.loads((older / "manifest.json").read_text())
    (older / "manifest.json").write_text(json.dumps({**manifest, "format_version": 1}))
    with pytest.raises(NmtError, match=r"format version 1 is not supported \(expected 2.*prepare the data again"):
        PreparedData(older)


def _losses(run: Path) -> dict[int, float]:
    return {record["step"]: record["loss"] for record in read_metrics(run) if record["kind"] == "train"}


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step-{step:08d}" / "model.safetensors"))


@pytest.mark.slow  # four short trainings
def test_sharded_data_in_windows_trains_the_same_and_resumes_bit_exact(sharded, tmp_path):
    """Windows of 60 pairs (7 a epoch), shards of 37: one shard or eleven train the same steps;
    stopped at step 9 (mid-window, mid-epoch) and resumed, the run ends on the same bits."""
    whole, shards = sharded
    config = Config().with_overrides({**TINY_MODEL, "train.batch_window": 60, "train.max_steps": 24})
    log = io.StringIO()
    train(config, shards, tmp_path / "straight", stream=log)
    assert "400 training pairs in about" in log.getvalue()  # several windows: the count is estimated
    train(config, whole, tmp_path / "one-shard", stream=io.StringIO())
    expected = _losses(tmp_path / "straight")
    assert sorted(expected) == list(range(1, 25))
    assert _losses(tmp_path / "one-shard") == expected

    train(config.with_overrides({"train.max_steps": 9}), shards, tmp_path / "resumed", stream=io.StringIO())
    assert [path.name for path in list_checkpoints(tmp_path / "resumed")][-1] == "step-00000009"
    log = io.StringIO()
    train(config, shards, tmp_path / "resumed", stream=log)
    assert "resuming from step-00000009" in log.getvalue()
    assert _losses(tmp_path / "resumed") == expected
    resumed, straight = _weights(tmp_path / "resumed", 24), _weights(tmp_path / "straight", 24)
    assert resumed.keys() == straight.keys() and all(torch.equal(resumed[k], straight[k]) for k in straight)


@pytest.mark.slow  # a short training
def test_weighted_corpora_keep_shards_of_their_own_and_mix_by_weight(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "corpus", PAIRS[:70])
    write_corpus(tmp_path / "general", [(f"Eine Katze {i} schläft .", f"A cat {i} sleeps .") for i in range(90)])
    corpora = [{"name": "general", "source": "files", "path": "general", "weight": 0.5}]
    config = files_config(**{"data.weight": 2.0, "data.corpora": corpora, "data.shard_pairs": 40})
    manifest = prepare(config, "mixed", progress=False)
    train_stats = manifest["splits"]["train"]
    assert train_stats["shards"] == [40, 30, 40, 40, 10]  # never one shard across the two corpora
    assert not list(tmp_path.glob("mixed/train.corpus*"))
    data = PreparedData("mixed")
    assert data.corpus_mix() == [(0, 70, 2.0), (70, 160, 0.5)]
    split = data.split("train")
    assert data.tokenizer.src.decode(split.src[69].tolist()) == PAIRS[69][0]
    assert data.tokenizer.src.decode(split.src[70].tolist()) == "Eine Katze 0 schläft ."
    log = io.StringIO()
    run = Config().with_overrides({**TINY_MODEL, "train.max_steps": 2, "train.batch_window": 100})
    train(run, "mixed", tmp_path / "run", stream=log)
    assert "160 training pairs (mixed: main 70 x2, general 90 x0.5)" in log.getvalue()


def test_dedup_across_shards_keeps_what_the_in_memory_method_keeps(tmp_path, monkeypatch):
    """Many repeats, within and across two corpora, hashes sorted in runs of a few hundred and
    shards of 13 pairs: the same pairs as a set in memory keeps, each encoded as on its own."""
    monkeypatch.chdir(tmp_path)
    rng = random.Random(5)
    main_pairs = [PAIRS[rng.randrange(80)] for _ in range(600)]
    web_pairs = [PAIRS[rng.randrange(50, 130)] for _ in range(400)]
    write_corpus(tmp_path / "corpus", main_pairs)
    write_corpus(tmp_path / "web", web_pairs)
    corpora = {"data.corpora": [{"name": "web", "source": "files", "path": "web", "weight": 1.0}]}
    manifest = prepare(files_config(**corpora, **{"data.dedup": True, "data.dedup_memory_mb": 0.01,
                                                  "data.shard_pairs": 13}), "tiny", progress=False)
    seen: set[tuple[str, str]] = set()
    kept = [[], []]
    for number, pairs in enumerate((main_pairs, web_pairs)):
        for pair in pairs:
            if pair not in seen:
                seen.add(pair)
                kept[number].append(pair)
    assert [c["pairs"] for c in manifest["splits"]["train"]["corpora"]] == [len(kept[0]), len(kept[1])] == [80, 49]
    assert manifest["splits"]["train"]["dropped"] == {"duplicate": 1000 - 129}
    assert manifest["splits"]["train"]["shards"] == [13] * 6 + [2] + [13] * 3 + [10]
    data = PreparedData("tiny")
    expected = [(data.tokenizer.encode_src(de), data.tokenizer.encode_tgt(en)) for de, en in kept[0] + kept[1]]
    assert token_ids(Path("tiny")) == expected


@pytest.mark.slow  # nmt in a subprocess
def test_a_prepare_killed_while_writing_shards_leaves_nothing_and_the_next_run_completes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "corpus", [PAIRS[n % 200] for n in range(40_000)])
    settings = ["--set", "data.source=files", "--set", "data.path=corpus", "--set", "data.valid_split=",
                "--set", "data.test_split=", "--set", "data.vocab_size=120", "--set", "data.shard_pairs=500",
                "--quiet"]
    process = subprocess.Popen([sys.executable, "-m", "nmt_cli", "prepare", *settings, "--out", "out"],
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(".out.*.tmp/train.src.00003.bin")):  # mid-way through the shards
            assert process.poll() is None and time.monotonic() < deadline, "prepare ended before its 4th shard"
            time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.glob(f".out.{process.pid}.*.tmp"))  # what it left: its temporary directory, whole

    manifest = prepare(files_config(**{"data.shard_pairs": 500}), "out", progress=False)
    assert manifest["splits"]["train"]["shards"] == [500] * 80
    PreparedData("out").verify()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus", "out"]  # the dead run's leftovers are gone
