"""Every source kind yields the same numbered pairs; structural problems fail with one line."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the hub is never contacted in tests

import pytest

from nmt_cli.config import CorpusConfig, DataConfig
from nmt_cli.data.sources import Corpus, RawPair, file_digest, open_corpus
from nmt_cli.errors import ConfigError, InputError, NmtError
from nmt_cli.registry import DATA_SOURCES

GERMAN = ["Ein Hund läuft.", "Zwei Katzen schlafen.", "Das Kind lacht."]
ENGLISH = ["A dog runs.", "Two cats sleep.", "The child laughs."]


def write_files(folder, split="train", de=GERMAN, en=ENGLISH):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.de").write_text("".join(line + "\n" for line in de), encoding="utf-8")
    (folder / f"{split}.en").write_text("".join(line + "\n" for line in en), encoding="utf-8")
    return folder


def texts(corpus, split="train"):
    return [(p.line, p.source, p.target) for p in corpus.pairs(split)]


EXPECTED = [(i + 1, de, en) for i, (de, en) in enumerate(zip(GERMAN, ENGLISH))]


def test_text_files(tmp_path):
    corpus = open_corpus(DataConfig(source="files", path=str(write_files(tmp_path))))
    assert texts(corpus) == EXPECTED
    assert corpus.size_hint("train") == 3
    assert set(corpus.fingerprint("train")) == {"train.de", "train.en"}


def test_text_files_reverse_direction(tmp_path):
    corpus = open_corpus(DataConfig(source="files", path=str(write_files(tmp_path)), src_lang="en", tgt_lang="de"))
    assert [(p.source, p.target) for p in corpus.pairs("train")] == list(zip(ENGLISH, GERMAN))


def test_only_newline_ends_a_line(tmp_path):
    write_files(tmp_path, de=["eins\r", "zwei\u2028drei", "vier\x0bfünf"], en=["one", "two three", "four five"])
    pairs = list(open_corpus(DataConfig(source="files", path=str(tmp_path))).pairs("train"))
    assert [p.source for p in pairs] == ["eins", "zwei\u2028drei", "vier\x0bfünf"]
    assert [p.target for p in pairs] == ["one", "two three", "four five"]


def test_mismatched_line_counts_yield_unpaired_problem(tmp_path):
    write_files(tmp_path, en=ENGLISH + ["Extra line."])
    pairs = list(open_corpus(DataConfig(source="files", path=str(tmp_path))).pairs("train"))
    assert [p.problem for p in pairs[:3]] == [None] * 3
    problem = pairs[3].problem
    assert pairs[3].line == 4 and problem.reason == "unpaired_line"
    assert problem.path.endswith("train.en") and "train.de ends at line 3" in problem.message


def test_invalid_utf8_names_side_and_column(tmp_path):
    write_files(tmp_path)
    (tmp_path / "train.en").write_bytes(b"A dog runs.\nTwo \xff cats.\nThe child laughs.\n")
    pairs = list(open_corpus(DataConfig(source="files", path=str(tmp_path))).pairs("train"))
    assert pairs[1].problem.reason == "invalid_utf8" and pairs[1].line == 2
    assert pairs[1].problem.path.endswith("train.en") and "byte 0xff at column 5" in pairs[1].problem.message
    assert (pairs[2].source, pairs[2].target) == (GERMAN[2], ENGLISH[2])


def test_missing_empty_and_unconfigured_inputs(tmp_path):
    write_files(tmp_path)
    with pytest.raises(InputError, match=r"train\.fr: file not found \(split 'train', language 'fr'.*train\.de"):
        list(open_corpus(DataConfig(source="files", path=str(tmp_path), tgt_lang="fr")).pairs("train"))
    (tmp_path / "val.de").write_text("")
    (tmp_path / "val.en").write_text("x\n")
    with pytest.raises(InputError, match=r"val\.de: empty file"):
        open_corpus(DataConfig(source="files", path=str(tmp_path))).fingerprint("val")
    with pytest.raises(InputError, match="data folder not found"):
        open_corpus(DataConfig(source="files", path=str(tmp_path / "nowhere")))
    with pytest.raises(ConfigError, match="'data.path' is required"):
        open_corpus(DataConfig(source="tsv"))
    with pytest.raises(ConfigError, match="must differ"):
        open_corpus(DataConfig(source="files", path=str(tmp_path), tgt_lang="de"))


def test_relative_path_is_resolved_against_working_directory(tmp_path, monkeypatch):
    write_files(tmp_path / "data" / "multi")
    monkeypatch.chdir(tmp_path / "data")
    corpus = open_corpus(DataConfig(source="files", path="multi"))
    assert corpus.describe()["path"] == str(tmp_path / "data" / "multi")
    assert texts(corpus) == EXPECTED


def test_tsv_with_and_without_header(tmp_path):
    (tmp_path / "train.tsv").write_text("".join(f"{d}\t{e}\n" for d, e in zip(GERMAN, ENGLISH)))
    (tmp_path / "test.tsv").write_text("en\tde\n" + "".join(f"{e}\t{d}\n" for d, e in zip(GERMAN, ENGLISH))
                                       + "only one field\n")
    corpus = open_corpus(DataConfig(source="tsv", path=str(tmp_path)))
    assert texts(corpus) == EXPECTED
    pairs = list(corpus.pairs("test"))
    assert [(p.line, p.source, p.target) for p in pairs[:3]] == [(n + 1, d, e) for n, d, e in EXPECTED]
    assert pairs[3].line == 5 and pairs[3].problem.reason == "bad_record"
    assert "expected 2 tab-separated fields, found 1" in pairs[3].problem.message


def test_jsonl_flat_and_translation_objects(tmp_path):
    records = [{"translation": {"de": GERMAN[0], "en": ENGLISH[0]}}, {"de": GERMAN[1], "en": ENGLISH[1], "id": 7},
               {"de": GERMAN[2], "en": ENGLISH[2]}]
    lines = [json.dumps(r, ensure_ascii=False) for r in records] + ["{not json", '{"de": "x"}', '{"de": 1, "en": "y"}']
    (tmp_path / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    pairs = list(open_corpus(DataConfig(source="jsonl", path=str(tmp_path))).pairs("train"))
    assert [(p.line, p.source, p.target) for p in pairs[:3]] == EXPECTED
    assert [(p.line, p.problem.reason) for p in pairs[3:]] == [(4, "bad_record"), (5, "missing_text"), (6, "bad_record")]
    assert "invalid JSON" in pairs[3].problem.message and "no 'en' text" in pairs[4].problem.message


@pytest.fixture(autouse=True)
def hf_cache(tmp_path_factory, monkeypatch):
    """What ``load_dataset`` downloads (a split that is not streamed) goes to the test's folder."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("hf-cache"))


def write_hub_layout(folder):
    """A local copy shaped like the hub repository ``wmt/wmt14`` (config ``de-en``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "de-en").mkdir(parents=True)
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: de-en\n  data_files:\n"
        + "".join(f"  - split: {s}\n    path: de-en/{s}-*\n" for s in ("train", "validation", "test"))
        + "---\n")
    for split in ("train", "validation", "test"):
        table = pa.table({"translation": [{"de": d, "en": e} for d, e in zip(GERMAN, ENGLISH)]})
        pq.write_table(table, folder / "de-en" / f"{split}-00000-of-00001.parquet")
    return folder


@pytest.mark.parametrize("streaming", [False, True])
def test_hf_hub_layout_parquet_translation_column(tmp_path, streaming):
    folder = write_hub_layout(tmp_path / "wmt14")
    corpus = open_corpus(DataConfig(source="hf", path=str(folder), hf_config="de-en", streaming=streaming))
    assert texts(corpus, "validation") == EXPECTED
    fingerprint = corpus.fingerprint("train")
    assert fingerprint["config"] == "de-en" and "de-en/train-00000-of-00001.parquet" in fingerprint["files"]
    with pytest.raises(NmtError, match="cannot load split 'val'.*(Bad|Unknown) split"):
        list(corpus.pairs("val"))


def test_hf_json_files_with_plain_language_columns(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text(
        "".join(json.dumps({"de": d, "en": e}) + "\n" for d, e in zip(GERMAN, ENGLISH)))
    assert texts(open_corpus(DataConfig(source="hf", path=str(tmp_path)))) == EXPECTED
    with pytest.raises(InputError, match="no 'translation' column and no 'fr' column"):
        list(open_corpus(DataConfig(source="hf", path=str(tmp_path), tgt_lang="fr")).pairs("train"))


def test_hf_disk_dataset_dict(tmp_path):
    import datasets

    rows = {"de": GERMAN, "en": ENGLISH}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows),
                          "test": datasets.Dataset.from_dict({"translation": [
                              {"de": d, "en": e} for d, e in zip(GERMAN, ENGLISH)]})}).save_to_disk(tmp_path / "saved")
    corpus = open_corpus(DataConfig(source="hf_disk", path=str(tmp_path / "saved")))
    assert texts(corpus) == EXPECTED and texts(corpus, "test") == EXPECTED
    assert corpus.size_hint("train") == 3 and corpus.fingerprint("train")["files"]
    with pytest.raises(InputError, match="no split 'validation' \\(splits: train, test\\)"):
        corpus.fingerprint("validation")
    with pytest.raises(InputError, match="cannot load a saved dataset"):
        open_corpus(DataConfig(source="hf_disk", path=str(tmp_path / "missing"))).fingerprint("train")


def test_file_digest_counts_lines_without_final_newline(tmp_path):
    path = tmp_path / "x"
    path.write_bytes(b"a\nb\nc")
    assert file_digest(path)[1] == 3
    path.write_bytes(b"a\nb\n")
    assert file_digest(path)[1] == 2


@pytest.fixture
def toy_source():
    """A data source registered from this module alone, unregistered after the test."""

    @DATA_SOURCES.register("toy")
    class ToyCorpus(Corpus):
        """Pairs made up from the split's name."""

        def pairs(self, split):
            yield RawPair(1, f"{split} eins", f"{split} one")

        def fingerprint(self, split):
            return {"toy": split}

    yield ToyCorpus
    DATA_SOURCES._entries.pop("toy")


def test_a_source_registered_anywhere_is_a_valid_choice(toy_source):
    corpus = open_corpus(DataConfig(source="toy", path="anything"))
    assert isinstance(corpus, toy_source) and corpus.kind == "toy"
    assert [(p.source, p.target) for p in corpus.pairs("train")] == [("train eins", "train one")]
    assert CorpusConfig(name="more", source="toy", path="anything").source == "toy"  # it can be mixed in
    help_text = str(DataConfig.__dataclass_fields__["source"].metadata["help"])
    assert "toy: Pairs made up from the split's name" in help_text and "tsv: ``<path>/<split>.tsv``" in help_text
    with pytest.raises(ConfigError, match="'csv' is not one of: files, hf, hf_disk, jsonl, synthetic, toy, tsv"):
        DataConfig(source="csv")


def test_unknown_source_lists_the_registered_ones():
    with pytest.raises(ConfigError, match="unknown data source 'csv'; valid: files, hf, hf_disk, jsonl, synthetic, "
                                          "tsv"):
        DATA_SOURCES.get("csv")


def test_a_source_that_cannot_be_mixed_in_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        CorpusConfig(name="more", source="synthetic", path="anything")
    assert str(info.value) == ("config key 'data.corpora.source': 'synthetic' cannot be mixed in (a corpus names "
                               "only a path and a split); valid: files, hf, hf_disk, jsonl, tsv")
