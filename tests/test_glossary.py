"""Glossaries: reading the TSV, finding terms in sentences, and `nmt translate --glossary` end to end."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nmt_cli.cli import cli
from nmt_cli.cli import translate as _translate_command  # noqa: F401  (registers `nmt translate`)
from nmt_cli.decoding import Translator
from nmt_cli.errors import InputError
from nmt_cli.glossary import Glossary, Term, read_glossary
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.decoding.request import Request
from nmt_cli.input_formats import Input, make_input
from nmt_cli.translation import _retry, degenerate, guarded
from tests.test_translator import build_checkpoint

LINES = ["der mann sieht die katze", "", "ein hund läuft schnell im park", "frau"]
INPUT = "\n".join(LINES) + "\n"


def sources(glossary: Glossary, sentence: str) -> list[str]:
    return [term.source for term in glossary.matches(sentence)]


# --- reading ---------------------------------------------------------------------------------------------------


def test_a_source_listed_twice_has_its_targets_as_alternatives_and_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_bytes("\ufeffHaus\thouse\n\nHaus\thome\n  Katze \t cat \nHaus\thouse\n\n".encode())
    glossary = read_glossary(path)
    assert list(glossary.terms.values()) == [Term("Haus", ("house", "home")), Term("Katze", ("cat",))]


@pytest.mark.parametrize("content, line, problem", [
    (b"Haus\thouse\nKatze cat\n", 2, "expected 'source term<TAB>target term', found no tab"),
    (b"Haus\thouse\tdom\n", 1, "expected 'source term<TAB>target term', found 2 tabs"),
    (b"Haus\thouse\n\t cat\n", 2, "empty source term"),
    (b"Haus\t \n", 1, "empty target term"),
    (b"Haus\thouse\nK\xe4tze\tcat\n", 2, "not valid UTF-8 (byte 0xe4 at column 2)"),
])
def test_a_bad_glossary_line_is_an_error_naming_file_and_line(tmp_path, content, line, problem):
    path = tmp_path / "terms.tsv"
    path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        read_glossary(path)
    assert str(caught.value) == f"{path}:{line}: {problem}"


# --- matching --------------------------------------------------------------------------------------------------


def test_terms_match_on_word_boundaries_in_any_script():
    glossary = Glossary.from_pairs([("Haus", "house"), ("C++", "C++"), ("東京", "Tokyo"), ("é", "e"), ("re", "x")])
    assert sources(glossary, "Das Haus, ein Haus.") == ["Haus"]
    assert sources(glossary, "Hausboot Rathaus Haus_1 Haus2") == []
    assert sources(glossary, "Ich lerne C++ und C++11") == ["C++"]
    assert sources(glossary, "東京") == ["東京"] and sources(glossary, "東京都") == []  # 都 continues the word
    assert sources(glossary, "cafe\u0301 é") == ["é"]  # a combining accent belongs to the word before it
    assert sources(glossary, "(re) re-do are") == ["re"]


def test_case_is_kept_unless_ignored():
    pairs = [("Haus", "house"), ("straße", "street"), ("İstanbul", "Istanbul")]
    assert sources(Glossary.from_pairs(pairs), "das haus, die STRASSE, İstanbul") == ["İstanbul"]
    ignoring = Glossary.from_pairs(pairs + [("haus", "home")], ignore_case=True)
    assert ignoring.matches("das HAUS in İSTANBUL") == [Term("Haus", ("house", "home")),
                                                        Term("İstanbul", ("Istanbul",))]


def test_overlaps_resolve_leftmost_longest_and_a_term_counts_once():
    glossary = Glossary.from_pairs([("New York", "NY"), ("York City Hall", "YCH"), ("New York City", "NYC"),
                                    ("Hall", "H"), ("City", "C")])
    assert sources(glossary, "New York City Hall") == ["New York City", "Hall"]
    assert sources(glossary, "City and New York, City") == ["City", "New York"]
    assert sources(glossary, "in York City Hall") == ["York City Hall"]


def test_a_sentences_terms_become_its_last_constraints_each_with_its_alternatives(tmp_path):
    tokenizer = Translator.from_checkpoint(build_checkpoint(tmp_path)).tokenizer
    glossary = Glossary.from_pairs([("hund", "dog"), ("hund", "hound"), ("park", "park")])
    line = make_input(tokenizer, glossary, "ein hund im park", constraints=["a"])
    assert line.terms == (Term("hund", ("dog", "hound")), Term("park", ("park",)))
    encode = tokenizer.encode_tgt
    assert line.request.constraints == ((tuple(encode("a")),), (tuple(encode("dog")), tuple(encode("hound"))),
                                        (tuple(encode("park")),))
    assert make_input(tokenizer, glossary, "  ").request.constraints == ()  # blank in, blank out


# --- nmt translate --glossary ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_checkpoint(tmp_path_factory.mktemp("run"))


def run(*args: str, input: str | bytes | None = None):
    return CliRunner().invoke(cli, ["translate", *args], input=input, catch_exceptions=False)


def test_a_glossary_that_matches_nothing_changes_nothing(checkpoint, tmp_path):
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("Flugzeug\tplane\nmannschaft\tteam\n", encoding="utf-8")
    for output_format in ("text", "jsonl"):
        plain = run("--checkpoint", str(checkpoint), "--format", output_format, input=INPUT)
        with_glossary = run("--checkpoint", str(checkpoint), "--format", output_format, "--glossary", str(glossary),
                            input=INPUT)
        assert with_glossary.exit_code == 0, with_glossary.output
        assert with_glossary.stdout_bytes == plain.stdout_bytes
        assert "warning" not in with_glossary.stderr


@pytest.mark.parametrize("beam", ["1", "2"])
def test_a_term_in_one_line_leaves_the_other_lines_of_its_batch_as_they_were(checkpoint, tmp_path, beam):
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("katze\tcat\n", encoding="utf-8")
    options = ("--checkpoint", str(checkpoint), "--format", "jsonl", "--beam", beam)
    plain = run(*options, input=INPUT).stdout.splitlines()
    with_glossary = run(*options, "--glossary", str(glossary), input=INPUT).stdout.splitlines()
    assert with_glossary[1:] == plain[1:] and with_glossary[0] != plain[0]


def test_the_terms_found_are_in_the_translation_and_the_records_say_so(checkpoint, tmp_path):
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("HUND\tdog\nhund\thound\nkatze\tcat\nPark\tpark\n", encoding="utf-8")
    result = run("--checkpoint", str(checkpoint), "--format", "jsonl", "--glossary", str(glossary),
                 "--glossary-ignore-case", input=INPUT)
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [[(term["source"], term["target"]) for term in record.get("terms", [])] for record in records] == [
        [("katze", ["cat"])], [], [("HUND", ["dog", "hound"]), ("Park", ["park"])], []]
    translator = Translator.from_checkpoint(checkpoint)
    loaded = read_glossary(glossary, ignore_case=True)
    for text, record in zip(LINES, records):
        line = make_input(translator.tokenizer, loaded, text)
        (hypothesis,) = translator.translate([line.request])
        assert [term["met"] for term in record.get("terms", [])] == hypothesis.constraints_met
        assert "constraints_met" not in record  # the record's own constraints: none here
    terms = [term for record in records for term in record.get("terms", [])]
    assert all(term["met"] for term in terms)  # the constrained search put every term in
    for record in records:
        for term in record.get("terms", []):
            assert any(target in record["text"] for target in term["target"])
    assert "warning" not in result.stderr


def test_constraints_that_do_not_fit_stop_at_their_line_unless_relaxed_or_dropped(checkpoint, tmp_path):
    source = tmp_path / "in.jsonl"
    long = "a phrase far longer than the output limit of this short line"
    records = [{"text": "frau"}] + [{"text": "ein hund", "constraints": ["dog", long]}] * 7
    source.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    options = ("--checkpoint", str(checkpoint), "--input", str(source), "--input-format", "jsonl", "--format", "jsonl")
    stopped = run(*options, "--output", str(tmp_path / "out"))
    assert stopped.exit_code == 1 and not (tmp_path / "out").exists()
    assert stopped.stderr.splitlines()[-1].startswith(f"error: {source}:2: its prefix and constraints need ")
    relaxed = run(*options, "--on-unmet", "relax")
    assert relaxed.exit_code == 0, relaxed.output
    assert [json.loads(line).get("constraints_met") for line in relaxed.stdout.splitlines()] == [None] + [[True] * 2] * 7
    dropped = run(*options, "--on-unmet", "drop")
    assert dropped.exit_code == 0, dropped.output
    assert [json.loads(line).get("constraints_met") for line in dropped.stdout.splitlines()] == [None] + [
        [True, False]] * 7
    warnings = [line for line in dropped.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: {source}:{number}: not met: constraints[1]" for number in range(2, 7)] + [
        "warning: 7 lines have constraints that were not met"]


def test_the_glossarys_terms_follow_a_records_own_constraints(checkpoint, tmp_path):
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("hund\tdog\n", encoding="utf-8")
    records = [{"text": LINES[2], "constraints": ["the", ["a", "an"]]}, {"text": LINES[0], "avoid": ["the"]}]
    result = run("--checkpoint", str(checkpoint), "--input-format", "jsonl", "--format", "jsonl",
                 "--glossary", str(glossary), input="".join(json.dumps(record) + "\n" for record in records))
    assert result.exit_code == 0, result.output
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert len(first["constraints_met"]) == 2 and [term["source"] for term in first["terms"]] == ["hund"]
    assert "constraints_met" not in second and "terms" not in second


def test_a_bad_glossary_stops_before_translating_with_one_line(checkpoint, tmp_path):
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("hund\tdog\nkatze\n", encoding="utf-8")
    result = run("--checkpoint", str(checkpoint), "--glossary", str(glossary), "--output", str(tmp_path / "out"),
                 input=INPUT)
    assert result.exit_code == 1 and not (tmp_path / "out").exists()
    assert result.stderr == f"error: {glossary}:2: expected 'source term<TAB>target term', found no tab\n"
    missing = run("--checkpoint", str(checkpoint), "--glossary", str(tmp_path / "nope.tsv"), input=INPUT)
    assert missing.exit_code == 1 and missing.stderr == f"error: {tmp_path / 'nope.tsv'}: file not found\n"
    alone = run("--checkpoint", str(checkpoint), "--glossary-ignore-case", input=INPUT)
    assert alone.exit_code == 2 and "--glossary-ignore-case needs --glossary FILE" in alone.stderr


# --- --retry-degenerate ----------------------------------------------------------------------------------------


def test_retry_degenerate_replaces_a_degenerate_line_by_a_guarded_decode_that_is_not(checkpoint):
    result = run("--checkpoint", str(checkpoint), "--format", "jsonl", "--retry-degenerate", "--chunk-size", "3",
                 input=INPUT)
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    translator = Translator.from_checkpoint(checkpoint)
    retry = guarded(translator)
    assert retry.decode.no_repeat_ngram == 3 and retry.decode.repetition_penalty == 1.2
    requests = [make_input(translator.tokenizer, None, text).request for text in LINES]
    first, again = translator.translate(requests), retry.translate(requests)
    assert any(degenerate(request, hypothesis) for request, hypothesis in zip(requests, first))
    for request, record, plain, guarded_one in zip(requests, records, first, again):
        flagged = bool(degenerate(request, plain))
        kept = guarded_one if flagged and not degenerate(request, guarded_one) else plain
        assert record["text"] == kept.text and record.get("retried", False) == flagged
        assert record.get("degenerate", "") == degenerate(request, kept)
    assert any(record.get("retried") and "degenerate" not in record for record in records)  # a retry kept
    text = run("--checkpoint", str(checkpoint), "--retry-degenerate", input=INPUT)
    assert text.stdout.splitlines() == [record["text"] for record in records]
    assert "|retry:no_repeat_ngram=3,repetition_penalty=1.2|version:" in text.stderr


def test_retry_keeps_a_guard_the_user_set_and_is_off_when_both_are_set(checkpoint):
    translator = Translator.from_checkpoint(checkpoint, overrides={"decode.no_repeat_ngram": 2})
    retry = guarded(translator)
    assert retry.decode.no_repeat_ngram == 2 and retry.decode.repetition_penalty == 1.2
    assert guarded(retry) is None


def test_a_retry_that_is_degenerate_too_leaves_the_first_translation():
    class Looping:  # a retry translator whose every output loops
        def translate(self, requests, with_attention, token_scores):
            return [Hypothesis(tokens=[7] * 8, score=-1.0, log_prob=-1.0) for _ in requests]

    lines = [Input(Request(source=(4, 5, 6, 7, 8))), Input(Request(source=(4, 5, 6, 7)))]
    first = [Hypothesis(tokens=[9], score=-2.0, log_prob=-2.0), Hypothesis(tokens=[4, 5, 6], score=-3.0, log_prob=-3.0)]
    hypotheses = list(first)
    assert _retry(Looping(), lines, hypotheses, False, False) == {0}  # too short: retried, the retry loops
    assert hypotheses == first
