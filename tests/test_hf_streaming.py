"""``data.streaming``: ``nmt prepare`` reads a hub dataset as an ``IterableDataset``, once and a
batch at a time, and prepares exactly what the downloaded split gives.

The hub is never contacted: the datasets are local folders in the hub's own layout (a
README with ``configs``, parquet shards with a ``translation`` column), loaded by the same
``load_dataset(path, config)`` call as a hub id.
"""

from __future__ import annotations

import itertools
import json
import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the hub is never contacted in tests

import pytest

from nmt_cli.config import Config, CorpusConfig, DataConfig
from nmt_cli.data import prepare as prepare_module
from nmt_cli.data.prepare import prepare
from nmt_cli.data.sources import hf as hf_source
from nmt_cli.data.sources import open_corpus
from nmt_cli.data.synthetic import generate
from nmt_cli.errors import ConfigError

SPLITS = ("train", "validation", "test")


def write_hub_dataset(folder, train_pairs: int, shards: int = 2):
    """A dataset in the hub's layout (config ``de-en``): ``train_pairs`` training pairs in
    ``shards`` parquet files, one pair in four repeated (duplicates for ``data.dedup``), and
    small validation and test splits."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pairs = list(itertools.islice(generate(5), train_pairs + 40))
    train = [pairs[n - 3] if n % 4 == 3 else pairs[n] for n in range(train_pairs)]
    rows = {"train": train, "validation": pairs[train_pairs:train_pairs + 20], "test": pairs[train_pairs + 20:]}
    (folder / "de-en").mkdir(parents=True)
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: de-en\n  data_files:\n"
        + "".join(f"  - split: {split}\n    path: de-en/{split}-*\n" for split in SPLITS) + "---\n")
    for split, split_pairs in rows.items():
        parts = shards if split == "train" else 1
        size = -(-len(split_pairs) // parts)
        for part in range(parts):
            chunk = split_pairs[part * size:(part + 1) * size]
            table = pa.table({"translation": [{"de": p.german, "en": p.english} for p in chunk]})
            pq.write_table(table, folder / "de-en" / f"{split}-{part:05d}-of-{parts:05d}.parquet", row_group_size=50)
    return folder


def hub_config(folder, streaming: bool, **data) -> Config:
    return Config().with_overrides({
        "data.source": "hf", "data.path": str(folder), "data.hf_config": "de-en", "data.streaming": streaming,
        "data.dedup": True, "data.dedup_memory_mb": 0.001, "data.vocab_size": 120, "data.spm_input_sentence_size": 300,
        **{f"data.{key}": value for key, value in data.items()}})


@pytest.fixture(autouse=True)
def hf_cache(tmp_path_factory, monkeypatch):
    """The Hugging Face cache (where a split that is not streamed is downloaded) inside the test's folder."""
    import datasets

    cache = tmp_path_factory.mktemp("hf-cache")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    return cache


def prepared_files(directory):
    """Every file of a prepared directory but the manifest, and the manifest's fingerprint and arrays."""
    manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    files = {path.name: path.read_bytes() for path in sorted(directory.iterdir())
             if path.name not in ("manifest.json", "config.yaml")}
    return files, manifest


def test_a_streamed_split_prepares_the_same_directory_as_the_downloaded_one(tmp_path, hf_cache):
    folder = write_hub_dataset(tmp_path / "wmt", 400)
    downloaded = prepare(hub_config(folder, streaming=False), tmp_path / "downloaded", progress=False)
    assert any(hf_cache.rglob("*.arrow"))  # without streaming, load_dataset converted the split into the cache
    cached = sorted(hf_cache.rglob("*"))
    streamed = prepare(hub_config(folder, streaming=True), tmp_path / "streamed", progress=False)
    assert sorted(hf_cache.rglob("*")) == cached  # the stream added nothing to the cache
    assert streamed["fingerprint"] == downloaded["fingerprint"]
    assert streamed["arrays"] == downloaded["arrays"] and streamed["splits"] == downloaded["splits"]
    assert streamed["splits"]["train"]["dropped"]["duplicate"] >= 100  # one pair in four repeats an earlier one
    files, _ = prepared_files(tmp_path / "streamed")
    assert files == prepared_files(tmp_path / "downloaded")[0]
    assert {"spm.model", "train.de", "train.en", "train.src.00000.bin", "train.src.lengths.npy", "valid.de",
            "test.en"} <= set(files)
    # the same fingerprint: a prepared directory is reused whichever way it was read
    assert prepare(hub_config(folder, streaming=False), tmp_path / "streamed", progress=False)["reused"]


class StreamSpy:
    """Wraps what ``load_dataset`` returns: counts the rows each iteration hands out, and at
    every batch how many of them the cleaner of ``nmt prepare`` has not taken yet."""

    def __init__(self):
        self.opened: list[tuple[str, bool]] = []  # (split, streaming) of each load_dataset call
        self.iterations: dict[str, int] = {}
        self.rows: dict[str, int] = {}
        self.taken = 0  # pairs the cleaner has pulled, all splits
        self.handed = 0  # rows the dataset has handed out, all splits
        self.most_waiting = 0

    def load(self, real_load):
        def load_dataset(path, name=None, split=None, streaming=False, **kwargs):
            self.opened.append((split, streaming))
            dataset = real_load(path, name, split=split, streaming=streaming, **kwargs)
            return SpiedDataset(dataset, split, self)
        return load_dataset

    def batches(self, dataset, split, batch_size):
        self.iterations[split] = self.iterations.get(split, 0) + 1
        for batch in dataset.iter(batch_size=batch_size):
            rows = len(next(iter(batch.values())))
            self.handed += rows
            self.rows[split] = self.rows.get(split, 0) + rows
            self.most_waiting = max(self.most_waiting, self.handed - self.taken)
            yield batch

    def counted(self, pairs):
        for pair in pairs:
            self.taken += 1
            yield pair


class SpiedDataset:
    def __init__(self, dataset, split, spy):
        self.dataset, self.split, self.spy = dataset, split, spy
        self.info = dataset.info

    def iter(self, batch_size):
        return self.spy.batches(self.dataset, self.split, batch_size)

    def __len__(self):
        return len(self.dataset)


def spied_prepare(folder, out, monkeypatch, streaming=True, **data) -> tuple[StreamSpy, dict]:
    import datasets

    spy = StreamSpy()
    monkeypatch.setattr(datasets, "load_dataset", spy.load(datasets.load_dataset))

    class CountingCleaner(prepare_module.PairCleaner):
        def clean(self, pairs):
            return super().clean(spy.counted(pairs))

    monkeypatch.setattr(prepare_module, "PairCleaner", CountingCleaner)
    return spy, prepare(hub_config(folder, streaming=streaming, **data), out, progress=False)


@pytest.mark.parametrize("pairs", [200, 800])
def test_a_stream_is_read_once_and_never_more_than_a_batch_ahead_of_the_cleaner(pairs, tmp_path, monkeypatch):
    monkeypatch.setattr(hf_source, "HF_BATCH", 16)
    folder = write_hub_dataset(tmp_path / "wmt", pairs)
    spy, manifest = spied_prepare(folder, tmp_path / "prepared", monkeypatch)
    assert {streaming for _, streaming in spy.opened} == {True}
    assert spy.iterations == {"train": 1, "validation": 1, "test": 1}  # one pass over each stream
    assert spy.rows == {"train": pairs, "validation": 20, "test": 20}
    # whatever the corpus size, the rows read but not yet cleaned are at most one batch
    assert spy.most_waiting <= 16
    assert manifest["tokenizer"]["sampled_pairs"] == 150  # SentencePiece's sample is bounded by its setting


def test_a_stream_is_read_no_further_than_the_pairs_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_source, "HF_BATCH", 16)
    folder = write_hub_dataset(tmp_path / "wmt", 800)
    spy, manifest = spied_prepare(folder, tmp_path / "prepared", monkeypatch, max_train_pairs=100)
    assert manifest["splits"]["train"]["read"] == 100
    assert spy.rows["train"] <= 100 + 16  # the rest of the split is never fetched


def test_a_stream_gives_its_size_only_when_the_card_lists_it(tmp_path):
    folder = write_hub_dataset(tmp_path / "wmt", 60)
    assert open_corpus(hub_config(folder, streaming=True).data).size_hint("train") is None  # no split sizes listed
    card = (folder / "README.md").read_text(encoding="utf-8")
    listed = "".join(f"  - name: {split}\n    num_bytes: 2000\n    num_examples: {rows}\n"
                     for split, rows in (("train", 60), ("validation", 20), ("test", 20)))
    (folder / "README.md").write_text(card.replace("---\n", "---\ndataset_info:\n- config_name: de-en\n  splits:\n"
                                                   + listed, 1), encoding="utf-8")
    assert open_corpus(hub_config(folder, streaming=True).data).size_hint("train") == 60
    assert open_corpus(hub_config(folder, streaming=False).data).size_hint("train") == 60


def test_streaming_is_a_setting_of_hub_sources_only():
    with pytest.raises(ConfigError, match="'data.streaming' reads Hugging Face hub datasets"):
        DataConfig(source="files", path="somewhere", streaming=True)
    assert DataConfig(source="files", path="somewhere", streaming=True,
                      corpora=(CorpusConfig(name="more", source="hf", path="wmt/wmt14"),)).streaming
    assert "streaming" in DataConfig.RESOURCE_KEYS  # it never changes what is prepared
