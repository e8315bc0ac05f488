"""prepare() end to end: layout, manifest, round trip, reuse, change detection, PreparedData,
duplicate removal across corpora and in any memory, a killed prepare."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from nmt_cli.config import Config, load_config
from nmt_cli.data.cleaning import DuplicateFinder
from nmt_cli.data.prepare import prepare
from nmt_cli.data.prepared import PreparedData
from nmt_cli.errors import InputError, NmtError
from nmt_cli.specials import SPECIAL_IDS

SMALL = {"data.synthetic_train_size": 600, "data.synthetic_valid_size": 40, "data.synthetic_test_size": 30,
         "data.vocab_size": 300}


def synthetic_config(**extra):
    return load_config(None, {**SMALL, **extra})


@pytest.fixture(scope="module")
def synthetic_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared") / "synthetic"
    prepare(synthetic_config(), out, progress=False)
    return out


def test_layout_and_manifest(synthetic_dir):
    names = {p.name for p in synthetic_dir.iterdir()}
    for split in ("train", "valid", "test"):
        assert {f"{split}.de", f"{split}.en", f"{split}.align", f"{split}.src.00000.bin", f"{split}.src.00000.idx.npy",
                f"{split}.tgt.00000.bin", f"{split}.tgt.00000.idx.npy", f"{split}.src.lengths.npy",
                f"{split}.tgt.lengths.npy"} <= names
    assert {"manifest.json", "config.yaml", "spm.model"} <= names
    manifest = json.loads((synthetic_dir / "manifest.json").read_text())
    assert manifest["splits"]["train"]["kept"] == 600 and manifest["splits"]["valid"]["kept"] == 40
    assert manifest["special_ids"] == SPECIAL_IDS and manifest["token_dtype"] == "uint16"
    assert manifest["tokenizer"]["joint"] and manifest["tokenizer"]["src_vocab_size"] == 300
    assert manifest["inputs"]["train"]["generator"] == "synthetic" and len(manifest["fingerprint"]) == 64
    assert manifest["tool_version"] and manifest["source"]["kind"] == "synthetic"


def test_prepared_data_api_and_round_trip(synthetic_dir):
    data = PreparedData(synthetic_dir)
    assert (data.src_lang, data.tgt_lang) == ("de", "en")
    assert data.config.data.synthetic_train_size == 600
    for name in ("train", "valid", "test"):
        split = data.split(name)
        sources = data.text_path(name, "src").read_text(encoding="utf-8").splitlines()
        targets = data.text_path(name, "tgt").read_text(encoding="utf-8").splitlines()
        assert len(split) == len(sources) == len(targets)
        for i in range(len(split)):
            assert split.src[i].dtype == np.int64 and split.src.lengths[i] == len(split.src[i])
            assert data.tokenizer.src.decode(split.src[i].tolist()) == sources[i]
            assert data.tokenizer.decode_tgt(split.tgt[i]) == targets[i]
        assert not np.isin(split.src[0], [SPECIAL_IDS["bos"], SPECIAL_IDS["eos"]]).any()
    alignments = data.gold_alignment_path("train").read_text().splitlines()
    assert len(alignments) == len(data.split("train"))


def test_prepared_data_errors(tmp_path, synthetic_dir):
    with pytest.raises(NmtError, match="not a prepared directory"):
        PreparedData(tmp_path)
    (tmp_path / "manifest.json").write_text("{broken")
    with pytest.raises(NmtError, match="invalid JSON"):
        PreparedData(tmp_path)
    with pytest.raises(NmtError, match=r"no split 'dev' \(splits: train, valid, test\)"):
        PreparedData(synthetic_dir).split("dev")


def test_reuse_change_detection_and_force(tmp_path, capsys):
    out = tmp_path / "p"
    first = prepare(synthetic_config(), out)
    assert first["reused"] is False
    again = prepare(synthetic_config(), out)
    assert again["reused"] is True and again["fingerprint"] == first["fingerprint"]
    assert "up to date" in capsys.readouterr().err
    forced = prepare(synthetic_config(), out, force=True, progress=False)
    assert forced["reused"] is False and forced["created"] >= first["created"]
    changed = prepare(synthetic_config(**{"data.synthetic_seed": 2}), out, progress=False)
    assert changed["reused"] is False and changed["fingerprint"] != first["fingerprint"]
    assert not list(tmp_path.glob(".p.*"))  # no temporary directories left behind


def write_corpus(folder, pairs, split="train"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.de").write_text("".join(d + "\n" for d, _ in pairs), encoding="utf-8")
    (folder / f"{split}.en").write_text("".join(e + "\n" for _, e in pairs), encoding="utf-8")


FILE_PAIRS = [(f"Der Hund Nummer {i} läuft schnell .", f"The dog number {i} runs fast .") for i in range(200)]


def files_config(**extra):
    return load_config(None, {"data.source": "files", "data.path": "corpus", "data.valid_split": "",
                              "data.test_split": "", "data.vocab_size": 120, **extra})


def test_files_relative_path_and_input_change(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "corpus", FILE_PAIRS)
    manifest = prepare(files_config(), "out", progress=False)
    assert list(manifest["splits"]) == ["train"] and manifest["splits"]["train"]["kept"] == 200
    assert not (tmp_path / "out" / "train.align").exists()
    assert PreparedData("out").config.data.path == str(tmp_path / "corpus")  # stored absolute
    assert prepare(files_config(), "out", progress=False)["reused"]
    write_corpus(tmp_path / "corpus", FILE_PAIRS[:-1] + [("Eine Katze .", "A cat .")])
    rebuilt = prepare(files_config(), "out", progress=False)
    assert not rebuilt["reused"] and rebuilt["inputs"] != manifest["inputs"]


def test_failure_keeps_previous_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "corpus", FILE_PAIRS)
    prepare(files_config(), "out", progress=False)
    before = (tmp_path / "out" / "manifest.json").read_text()
    (tmp_path / "corpus" / "train.en").write_bytes(b"x\n" * 199 + b"\xff\n")
    with pytest.raises(InputError, match=r"train\.en:200: not valid UTF-8"):
        prepare(files_config(), "out", progress=False)
    assert (tmp_path / "out" / "manifest.json").read_text() == before
    assert not list(tmp_path.glob(".out.*"))


def test_refuses_to_replace_an_unrelated_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "corpus", FILE_PAIRS)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("keep me")
    with pytest.raises(NmtError, match="not a prepared directory"):
        prepare(files_config(), "out", progress=False)
    assert (tmp_path / "out" / "notes.txt").read_text() == "keep me"


def test_everything_dropped_is_an_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "corpus", [("ein", "one two three four five")] * 5)
    with pytest.raises(NmtError, match="no pairs left after cleaning.*length_ratio"):
        prepare(files_config(), "out", progress=False)


def test_separate_unigram_models_and_sampling(tmp_path):
    manifest = prepare(synthetic_config(**{"data.joint_vocab": False, "data.spm_model_type": "unigram",
                                           "data.vocab_size": 200, "data.spm_input_sentence_size": 250,
                                           "data.src_lang": "en", "data.tgt_lang": "de"}),
                       tmp_path / "sep", progress=False)
    tokenizer = manifest["tokenizer"]
    assert not tokenizer["joint"] and tokenizer["files"] == ["spm.src.model", "spm.tgt.model"]
    assert tokenizer["sampled_pairs"] == 250 and tokenizer["model_type"] == "unigram"
    data = PreparedData(tmp_path / "sep")
    assert data.text_path("valid", "src").name == "valid.en"
    first = data.text_path("valid", "src").read_text().splitlines()[0]
    assert data.tokenizer.src.decode(data.split("valid").src[0].tolist()) == first
    assert data.tokenizer.src_vocab_size == data.tokenizer.tgt_vocab_size == 200


def test_multi30k_first_pairs(multi30k, tmp_path, monkeypatch):
    monkeypatch.chdir(multi30k.parent)
    config = Config.from_dict({"data": {"source": "files", "path": "multi30k", "train_split": "train",
                                        "valid_split": "val", "test_split": "test2016", "max_train_pairs": 2000,
                                        "max_eval_pairs": 200, "vocab_size": 500}})
    manifest = prepare(config, tmp_path / "m30k", progress=False)
    assert manifest["splits"]["train"]["read"] == 2000 and manifest["splits"]["valid"]["source_split"] == "val"
    assert manifest["inputs"]["test"]["test2016.de"]  # sha256 of the full input file
    data = PreparedData(tmp_path / "m30k")
    lines = data.text_path("train", "tgt").read_text(encoding="utf-8").splitlines()
    train = data.split("train")
    assert all(data.tokenizer.decode_tgt(train.tgt[i]) == lines[i] for i in range(len(train)))
    raw = (multi30k / "train.en").read_text(encoding="utf-8").splitlines()
    remaining = iter(" ".join(line.split()) for line in raw[:2000])
    assert all(line in remaining for line in lines)  # kept lines in their original order


# ---- duplicate removal --------------------------------------------------------------------------------


def first_of_each(rows):
    """The rows whose (source, target) no earlier row had: what duplicate removal keeps."""
    seen, kept = set(), []
    for row in rows:
        if row[:2] not in seen:
            seen.add(row[:2])
            kept.append(row)
    return kept


def prepared_text(folder, *files):
    return list(zip(*((folder / file).read_text(encoding="utf-8").splitlines() for file in files)))


VOLATILE = ("created", "elapsed_seconds", "pairs_per_second")


def test_dedup_keeps_the_first_of_each_pair_across_corpora_in_any_memory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = random.Random(3)
    write_corpus(tmp_path / "corpus", [FILE_PAIRS[rng.randrange(60)] for _ in range(700)]
                 + [("ein", "one two three four five")] * 3)  # dropped for length_ratio, never duplicates
    write_corpus(tmp_path / "web", [FILE_PAIRS[rng.randrange(40, 100)] for _ in range(500)])
    corpora = {"data.corpora": [{"name": "web", "source": "files", "path": "web", "weight": 2.0}]}
    everything = prepare(files_config(**corpora), "all", progress=False)
    spills = []
    monkeypatch.setattr(DuplicateFinder, "_spill_hashes",
                        lambda finder, spill=DuplicateFinder._spill_hashes: spills.append(spill(finder)))
    tiny = prepare(files_config(**corpora, **{"data.dedup": True, "data.dedup_memory_mb": 0.01}), "tiny",
                   progress=False)
    assert len(spills) > 4  # runs of about 200 hashes
    roomy = prepare(files_config(**corpora, **{"data.dedup": True}), "roomy", progress=False)

    numbers = [number for number, (start, end, _) in enumerate(PreparedData("all").corpus_mix())
               for _ in range(start, end)]
    rows = [(*pair, number) for pair, number in zip(prepared_text(tmp_path / "all", "train.de", "train.en"), numbers)]
    expected = first_of_each(rows)
    assert len(expected) == 100 and len(rows) == 1200
    assert prepared_text(tmp_path / "tiny", "train.de", "train.en") == [row[:2] for row in expected]
    train = tiny["splits"]["train"]
    assert [c["pairs"] for c in train["corpora"]] == [sum(row[2] == n for row in expected) for n in (0, 1)]
    assert train["kept"] == 100 and train["read"] == 1203
    assert train["dropped"] == {"duplicate": 1100, "length_ratio": 3}
    assert train["dropped"] == {**everything["splits"]["train"]["dropped"], "duplicate": 1100}

    # the memory it may use changes nothing: the same bytes, and the same fingerprint
    assert tiny["fingerprint"] == roomy["fingerprint"] != everything["fingerprint"]
    assert {k: v for k, v in tiny.items() if k not in VOLATILE} == {k: v for k, v in roomy.items() if k not in VOLATILE}
    files = sorted(path.name for path in (tmp_path / "tiny").iterdir())
    assert files == sorted(path.name for path in (tmp_path / "roomy").iterdir()) and ".dedup" not in str(files)
    for name in files:
        if name not in ("manifest.json", "config.yaml"):
            assert (tmp_path / "tiny" / name).read_bytes() == (tmp_path / "roomy" / name).read_bytes(), name


def test_dedup_keeps_word_links_in_step(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = random.Random(5)
    write_corpus(tmp_path / "corpus", [FILE_PAIRS[rng.randrange(30)] for _ in range(300)])
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "train.align").write_text("".join(f"{n % 7}-{n // 7 % 7}\n" for n in range(300)))
    links = {"data.alignment_path": "links", "data.dedup_memory_mb": 0.005}
    prepare(files_config(**links), "all", progress=False)
    manifest = prepare(files_config(**links, **{"data.dedup": True}), "dedup", progress=False)
    expected = first_of_each(prepared_text(tmp_path / "all", "train.de", "train.en", "train.align"))
    assert prepared_text(tmp_path / "dedup", "train.de", "train.en", "train.align") == expected
    assert manifest["splits"]["train"]["kept"] == len(expected) == 30
    assert len(PreparedData("dedup").split("train").links) == 30


@pytest.mark.slow  # nmt in a subprocess
def test_a_killed_prepare_leaves_nothing_and_the_next_run_completes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "corpus", [FILE_PAIRS[n % 150] for n in range(30_000)])
    settings = ["--set", "data.dedup=true", "--set", "data.dedup_memory_mb=0.01", "--set", "data.source=files",
                "--set", "data.path=corpus", "--set", "data.valid_split=", "--set", "data.test_split=",
                "--set", "data.vocab_size=120", "--quiet"]
    process = subprocess.Popen([sys.executable, "-m", "nmt_cli", "prepare", *settings, "--out", "out"],
                               env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".out.*.tmp/.dedup.*/hashes-*")):  # hashes spilled: mid-way through
            assert process.poll() is None and time.monotonic() < deadline, "prepare ended before it spilled"
            time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.glob(f".out.{process.pid}.*.tmp"))  # what it left: its temporary directory, whole

    manifest = prepare(files_config(**{"data.dedup": True}), "out", progress=False)
    assert manifest["splits"]["train"]["kept"] == 150 and manifest["splits"]["train"]["dropped"] == {"duplicate": 29_850}
    PreparedData("out").verify()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus", "out"]  # the dead run's leftovers are gone
