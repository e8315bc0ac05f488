"""`nmt evaluate --confidence`: Spearman's rho, the flag for the worst sentences, and bad JSONL."""

from __future__ import annotations

import json
import math

import pytest
import sacrebleu
from click.testing import CliRunner

from nmt_cli.cli import cli
from nmt_cli.cli import evaluate as _evaluate_command  # noqa: F401  (registers `nmt evaluate`)
from nmt_cli.evaluation.confidence import average_ranks, flag_quality, lowest_share, spearman


def test_spearman_equals_the_rank_difference_formula_without_ties():
    # ranks differ by d = (-1, 1, -1, 1, 0): rho = 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 1 - 24 / 120
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    assert spearman([10, 20, 30], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([0.1, 5, 7], [1, 2, 300]) == pytest.approx(1.0)  # ranks only: any monotone map


def test_ties_share_the_mean_of_their_ranks():
    assert average_ranks([5, 1, 5]).tolist() == [2.5, 1.0, 2.5]
    assert average_ranks([3, 3, 3, 0]).tolist() == [3.0, 3.0, 3.0, 1.0]
    # y ranks (1.5, 1.5, 3.5, 3.5): sum dx dy = 4, sum dx^2 = 5, sum dy^2 = 4 -> 4 / sqrt(20)
    assert spearman([1, 2, 3, 4], [1, 1, 2, 2]) == pytest.approx(4 / math.sqrt(20))
    assert spearman([1, 2, 3], [7, 7, 7]) is None  # undefined when one side is constant
    assert spearman([1], [2]) is None


def test_lowest_share_flags_ceil_share_n_and_every_tie_at_the_threshold():
    threshold, mask = lowest_share([5, 1, 4, 2, 3, 6, 7, 8, 9, 10, 11], 0.1)  # ceil(1.1) = 2
    assert threshold == 2 and mask.sum() == 2 and mask[1] and mask[3]
    threshold, mask = lowest_share([1, 2, 2, 3] + [9] * 16, 0.1)  # k = 2 lands on a tie of two
    assert threshold == 2 and mask.sum() == 3
    threshold, mask = lowest_share(list(range(450)), 0.1)  # 0.1 * 450 is 45.000000000000004 in floats
    assert threshold == 44 and mask.sum() == 45


#: 20 sentences; by chrF the worst 10% are sentences 0 and 1; by confidence the lowest are 0 and 2
CONFIDENCE = [-3.0, -0.5, -2.5] + [-0.4 + 0.01 * i for i in range(17)]
CHRF = [5.0, 8.0, 60.0] + [40.0 + i for i in range(17)]


def test_the_flag_of_the_lowest_confidences_against_the_worst_by_chrf():
    flag = flag_quality(CONFIDENCE, CHRF, "log_prob_per_token", 0.1)
    assert (flag.threshold, flag.chosen_on, flag.flagged, flag.worst, flag.hits) == (-2.5, "this set", 2, 2, 1)
    assert flag.precision == pytest.approx(0.5) and flag.recall == pytest.approx(0.5)
    assert flag.random_precision == pytest.approx(0.1)
    given = flag_quality(CONFIDENCE, CHRF, "log_prob_per_token", 0.1, threshold=-0.45)  # also flags sentence 1
    assert (given.flagged, given.hits, given.chosen_on) == (3, 2, "given")
    assert given.precision == pytest.approx(2 / 3) and given.recall == pytest.approx(1.0)
    nothing = flag_quality(CONFIDENCE, CHRF, "log_prob_per_token", 0.1, threshold=-10)
    assert nothing.flagged == 0 and nothing.precision is None and nothing.recall == 0


HYPS = ["the cat sat on the mat", "a dog barks", "xq zv", "it is raining today", "he reads a book",
        "the house is big", "she walks home", "qqq", "we eat bread", "the sun shines"]
REFS = ["the cat sat on the mat", "a dog is barking", "the bird sings", "it rains today", "he reads a good book",
        "the house is large", "she walks home", "they play football", "we eat bread", "the sun is shining"]
#: higher where the output is better; the two garbage outputs (2 and 7) have the lowest two
LOG_PROBS = [-0.1, -0.6, -2.9, -0.7, -0.5, -0.4, -0.2, -2.0, -0.15, -0.45]
MIN_PROBS = [0.9, 0.3, 0.01, 0.2, 0.4, 0.5, 0.8, 0.02, 0.85, 0.6]


def write_jsonl(path, texts, log_probs, min_probs=None):
    """Records as nmt translate --format jsonl writes them; a None log-prob: a line it did not decode
    (an empty line: empty text, no confidence)."""
    with path.open("w", encoding="utf-8") as out:
        for i, (text, value) in enumerate(zip(texts, log_probs)):
            record = {"text": "" if value is None else text, "score": 0.0, "tokens": [], "nbest": []}
            if value is not None:
                record["confidence"] = {"log_prob_per_token": value}
                if min_probs is not None:
                    record["confidence"]["min_token_prob"] = min_probs[i]
            out.write(json.dumps(record) + "\n")
    return path


def evaluate(*args):
    return CliRunner().invoke(cli, ["evaluate", *map(str, args)], catch_exceptions=False)


@pytest.fixture()
def dev(tmp_path):
    refs = tmp_path / "dev.en"
    refs.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    return write_jsonl(tmp_path / "dev.jsonl", HYPS, LOG_PROBS, MIN_PROBS), refs


def test_the_report_ranks_every_field_against_sacrebleus_sentence_chrf(dev):
    jsonl, refs = dev
    result = evaluate("--confidence", jsonl, "--ref", refs, "--flag-share", "0.2", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    chrf = [sacrebleu.sentence_chrf(hyp, [ref]).score for hyp, ref in zip(HYPS, REFS)]
    assert report["sentences"] == 10 and report["left_out"] == 0
    assert report["correlations"]["log_prob_per_token"] == pytest.approx(spearman(LOG_PROBS, chrf))
    assert report["correlations"]["min_token_prob"] == pytest.approx(spearman(MIN_PROBS, chrf))
    flag = report["flag"]
    assert flag["threshold"] == -2.0 and flag["flagged"] == 2 and flag["worst"] == 2
    assert flag["precision"] == 1.0 and flag["recall"] == 1.0  # sentences 2 and 7 are also the worst by chrF

    table = evaluate("--confidence", jsonl, "--ref", refs, "--confidence-field", "min_token_prob",
                     "--flag-share", "0.2")
    assert table.exit_code == 0, table.output
    assert "min_token_prob <= 0.02 (chosen on this set, its lowest 20%" in table.stdout
    assert f"log_prob_per_token   {spearman(LOG_PROBS, chrf):+.3f}" in table.stdout
    assert "precision 1.000, recall 1.000 (a random flag: precision 0.200)" in table.stdout


def test_a_threshold_chosen_on_dev_is_applied_to_another_set(dev, tmp_path):
    _, refs = dev
    # the test set: the same references, but the output of sentence 4 is now garbage with a high confidence
    test_hyps = HYPS[:4] + ["zzz yyy"] + HYPS[5:]
    test = write_jsonl(tmp_path / "test.jsonl", test_hyps, LOG_PROBS)
    result = evaluate("--confidence", test, "--ref", refs, "--threshold", "-2.0", "--flag-share", "0.2", "--json")
    assert result.exit_code == 0, result.output
    flag = json.loads(result.stdout)["flag"]
    chrf = [sacrebleu.sentence_chrf(hyp, [ref]).score for hyp, ref in zip(test_hyps, REFS)]
    assert [i for i, score in enumerate(chrf) if score == 0] == [2, 4, 7]  # a tie at the worst 20%: all three count
    assert flag["chosen_on"] == "given" and flag["threshold"] == -2.0
    assert (flag["flagged"], flag["worst"], flag["hits"]) == (2, 3, 2)  # the confident garbage (4) is missed
    assert flag["precision"] == 1.0 and flag["recall"] == pytest.approx(2 / 3)
    assert "min_token_prob" not in json.loads(result.stdout)["correlations"]  # the test records lack it


def test_lines_not_decoded_are_left_out_and_counted(dev, tmp_path):
    _, refs = dev
    jsonl = write_jsonl(tmp_path / "blank.jsonl", HYPS, LOG_PROBS[:9] + [None])
    result = evaluate("--confidence", jsonl, "--ref", refs, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    chrf = [sacrebleu.sentence_chrf(hyp, [ref]).score for hyp, ref in zip(HYPS[:9], REFS[:9])]
    assert report["sentences"] == 9 and report["left_out"] == 1
    assert report["correlations"]["log_prob_per_token"] == pytest.approx(spearman(LOG_PROBS[:9], chrf))


def test_a_field_the_engine_does_not_give_cannot_set_the_flag(dev, tmp_path):
    _, refs = dev
    jsonl = write_jsonl(tmp_path / "ct2.jsonl", HYPS, LOG_PROBS)  # no min_token_prob: no per-token scores
    result = evaluate("--confidence", jsonl, "--ref", refs, "--confidence-field", "min_token_prob")
    assert result.exit_code == 1
    assert result.stderr == f"error: {jsonl}:1: missing field 'confidence.min_token_prob'\n"


@pytest.mark.parametrize("line, problem", [
    ('{"text": "a", "confidence": {"log_prob_per_token": -1}', "invalid JSON"),
    ('["a"]', "expected a JSON object"),
    ('{"confidence": {"log_prob_per_token": -1}}', "missing field 'text'"),
    ('{"text": "a"}', "missing field 'confidence'"),
    ('{"text": "a", "confidence": {"min_token_prob": 0.5}}', "missing field 'confidence.log_prob_per_token'"),
    ('{"text": "a", "confidence": {"log_prob_per_token": "high"}}',
     "field 'confidence.log_prob_per_token' must be a number, got \"high\""),
    ('{"text": "a", "confidence": {"log_prob_per_token": null}}',
     "field 'confidence.log_prob_per_token' must be a number, got null"),
])
def test_bad_records_are_one_line_errors_naming_file_and_line(dev, tmp_path, line, problem):
    good, refs = dev
    lines = good.read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:2] + [line] + lines[3:]) + "\n", encoding="utf-8")
    result = evaluate("--confidence", bad, "--ref", refs)
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {bad}:3: {problem}") and result.stderr.count("\n") == 1


def test_a_record_count_that_differs_from_the_references_names_the_first_unpaired_line(dev, tmp_path):
    good, refs = dev
    short = tmp_path / "short.jsonl"
    short.write_text("".join(good.read_text(encoding="utf-8").splitlines(keepends=True)[:7]), encoding="utf-8")
    result = evaluate("--confidence", short, "--ref", refs)
    assert result.exit_code == 1
    assert result.stderr == f"error: {short}:8: has 7 records but {refs} has 10 lines; they must pair line by line\n"


def test_confidence_options_belong_to_the_confidence_mode(dev):
    jsonl, refs = dev
    assert "--threshold goes with --confidence" in evaluate("--hyp", refs, "--ref", refs, "--threshold", "1").output
    assert "--hyp does not go with --confidence" in evaluate("--confidence", jsonl, "--hyp", refs, "--ref", refs).output
    assert "--confidence needs --ref" in evaluate("--confidence", jsonl).output
