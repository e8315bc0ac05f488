"""prepare() end to end: layout, manifest, round trip, reuse, change detection, PreparedData."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nmt_cli.config import Config, load_config
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
        assert {f"{split}.de", f"{split}.en", f"{split}.align", f"{split}.src.bin", f"{split}.src.idx.npy",
                f"{split}.tgt.bin", f"{split}.tgt.idx.npy"} <= names
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
