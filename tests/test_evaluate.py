"""`nmt evaluate` and the sacreBLEU wrappers, checked against sacreBLEU itself."""

from __future__ import annotations

import json

import pytest
import sacrebleu
import torch
from click.testing import CliRunner

from nmt_cli.checkpoint import save_checkpoint
from nmt_cli.cli import cli
from nmt_cli.cli import evaluate as _evaluate_command  # noqa: F401  (registers `nmt evaluate`)
from nmt_cli.config import Config, DataConfig, DecodeConfig, ModelConfig
from nmt_cli.data.prepare import prepare
from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding import Translator
from nmt_cli.errors import NmtError
from nmt_cli.evaluation import corpus_scores, parse_metrics
from nmt_cli.textio import read_lines
from nmt_cli.models import build_model

HYP = ["The cat sat on the mat.", "A dog barks loudly.", "It is raining today.", "He reads a good book."]
REF1 = ["The cat sat on a mat.", "The dog barks loudly.", "It rains today.", "He is reading a good book."]
REF2 = ["A cat was sitting on the mat.", "A dog is barking.", "Today it is raining.", "He reads a nice book."]
BASELINE = ["Cat mat.", "Dog.", "Rain today.", "He book."]


@pytest.fixture()
def files(tmp_path):
    paths = {}
    for name, lines in {"hyp": HYP, "ref1": REF1, "ref2": REF2, "base": BASELINE, "short": HYP[:3]}.items():
        paths[name] = tmp_path / f"{name}.txt"
        paths[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def evaluate(*args: str):
    return CliRunner().invoke(cli, ["evaluate", *map(str, args)], catch_exceptions=False)


def test_scores_equal_sacrebleus_own_corpus_scores_with_two_references(files):
    result = evaluate("--hyp", files["hyp"], "--ref", files["ref1"], "--ref", files["ref2"], "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    scores = {entry["name"]: entry for entry in report["scores"]}
    refs = [REF1, REF2]
    assert scores["BLEU"]["score"] == pytest.approx(sacrebleu.corpus_bleu(HYP, refs).score)
    assert scores["chrF2"]["score"] == pytest.approx(sacrebleu.corpus_chrf(HYP, refs).score)
    assert scores["TER"]["score"] == pytest.approx(sacrebleu.corpus_ter(HYP, refs).score)
    assert scores["BLEU"]["signature"].startswith("nrefs:2|") and "version:" in scores["BLEU"]["signature"]


def test_lowercase_and_tokenizer_options_match_sacrebleu_and_enter_the_signature(files):
    upper_hyp = files["hyp"].parent / "upper.txt"
    upper_hyp.write_text("\n".join(line.upper() for line in HYP) + "\n", encoding="utf-8")
    result = evaluate("--hyp", upper_hyp, "--ref", files["ref1"], "--metrics", "bleu", "--lowercase",
                      "--tokenize", "intl", "--json")
    assert result.exit_code == 0, result.output
    (bleu,) = json.loads(result.stdout)["scores"]
    expected = sacrebleu.corpus_bleu([line.upper() for line in HYP], [REF1], lowercase=True, tokenize="intl")
    assert bleu["score"] == pytest.approx(expected.score) == pytest.approx(sacrebleu.corpus_bleu(HYP, [REF1], tokenize="intl").score)
    assert "case:lc" in bleu["signature"] and "tok:intl" in bleu["signature"]


def test_text_output_is_sacrebleus_format_and_chrf_plus_uses_word_bigrams(files):
    result = evaluate("--hyp", files["hyp"], "--ref", files["ref1"], "--metrics", "bleu,chrf", "--chrf-plus")
    assert result.exit_code == 0, result.output
    bleu_line, chrf_line = result.stdout.splitlines()
    expected_bleu = sacrebleu.corpus_bleu(HYP, [REF1]).score
    assert bleu_line.startswith("BLEU|nrefs:1|") and f"= {expected_bleu:.2f} " in bleu_line
    expected_chrf = sacrebleu.corpus_chrf(HYP, [REF1], word_order=2).score
    assert chrf_line.startswith("chrF2++|") and "|nw:2|" in chrf_line and chrf_line.endswith(f"= {expected_chrf:.2f}")


def test_mismatched_line_counts_fail_naming_files_and_counts(files):
    result = evaluate("--hyp", files["short"], "--ref", files["ref1"])
    assert result.exit_code == 1
    expected = f"error: {files['ref1']}: has 4 lines but {files['short']} has 3; they must pair line by line\n"
    assert result.stderr == expected
    baseline = evaluate("--hyp", files["hyp"], "--ref", files["ref1"], "--baseline", files["short"])
    assert baseline.exit_code == 1 and "short.txt: has 3 lines but" in baseline.stderr


def test_paired_bootstrap_reports_a_p_value(files):
    result = evaluate("--hyp", files["hyp"], "--ref", files["ref1"], "--baseline", files["base"],
                      "--metrics", "bleu", "--bootstrap-samples", "200", "--json")
    assert result.exit_code == 0, result.output
    (bleu,) = json.loads(result.stdout)["bootstrap"]["results"]
    assert bleu["name"] == "BLEU" and 0 < bleu["p_value"] <= 1
    assert bleu["system"] == pytest.approx(sacrebleu.corpus_bleu(HYP, [REF1]).score)
    assert bleu["baseline"] == pytest.approx(sacrebleu.corpus_bleu(BASELINE, [REF1]).score)
    assert "bs:200" in bleu["signature"]
    text = evaluate("--hyp", files["hyp"], "--ref", files["ref1"], "--baseline", files["base"], "--metrics", "chrf")
    assert "p = " in text.stdout.splitlines()[-1]


def test_library_wrappers_and_their_errors(tmp_path):
    (ter,) = corpus_scores(HYP, [REF1], ["ter"])
    assert ter.name == "TER" and ter.score == pytest.approx(sacrebleu.corpus_ter(HYP, [REF1]).score)
    assert parse_metrics("BLEU, chrf,bleu") == ["bleu", "chrf"]
    with pytest.raises(NmtError, match="unknown metric 'meteor'; valid: bleu, chrf, ter"):
        parse_metrics("bleu,meteor")
    broken = tmp_path / "broken.txt"
    broken.write_bytes(b"fine\nalso fine\n\xc3\x28 broken\n")
    with pytest.raises(NmtError, match=r"broken.txt:3: not valid UTF-8"):
        read_lines(broken)
    odd = tmp_path / "odd.txt"
    odd.write_text("one\u2028still one\r\ntwo\n", encoding="utf-8", newline="")
    assert read_lines(odd) == ["one\u2028still one", "two"]


def test_usage_needs_one_of_the_two_modes(files):
    assert evaluate("--hyp", files["hyp"]).exit_code == 2
    assert evaluate("--hyp", files["hyp"], "--ref", files["ref1"], "--checkpoint", "x").exit_code == 2


@pytest.fixture(scope="module")
def prepared_and_checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluate")
    data = DataConfig(source="synthetic", synthetic_train_size=200, synthetic_valid_size=8,
                      synthetic_test_size=12, vocab_size=80)
    prepare(Config(data=data), root / "prepared", progress=False)
    tokenizer = PreparedData(root / "prepared").tokenizer
    config = Config(model=ModelConfig(arch="rnn_luong", embed_dim=16, hidden_size=16, dropout=0.0),
                    decode=DecodeConfig(beam_size=2, max_len_a=1.0, max_len_b=3))
    torch.manual_seed(0)
    model = build_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
    checkpoint = save_checkpoint(root / "run" / "checkpoints" / "step-00000005", model.state_dict(), config, tokenizer, {"step": 5})
    return root / "prepared", checkpoint


def test_checkpoint_on_a_prepared_split_translates_and_scores_in_one_command(prepared_and_checkpoint, tmp_path):
    prepared, checkpoint = prepared_and_checkpoint
    output = tmp_path / "test.hyp"
    result = evaluate("--checkpoint", checkpoint, "--data", prepared, "--split", "test", "--beam", "1",
                      "--output", output, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    data = PreparedData(prepared)
    sources = read_lines(data.text_path("test", "src"))
    references = read_lines(data.text_path("test", "tgt"))
    expected = [h.text for h in Translator.from_checkpoint(checkpoint, overrides={"decode.beam_size": 1}).translate(sources)]
    assert read_lines(output) == expected
    bleu = next(entry for entry in report["scores"] if entry["name"] == "BLEU")
    assert bleu["score"] == pytest.approx(sacrebleu.corpus_bleu(expected, [references]).score)
    assert "|beam:1|" in report["translation_signature"]
    missing = evaluate("--checkpoint", checkpoint, "--data", tmp_path / "nothing")
    assert missing.exit_code == 1 and "not a prepared directory" in missing.stderr
