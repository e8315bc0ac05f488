"""`nmt translate` end to end on a random-weight checkpoint."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from nmt_cli.cli import cli
from nmt_cli.cli import translate as _translate_command  # noqa: F401  (registers `nmt translate`)
from nmt_cli.decoding import Translator
from nmt_cli.decoding.guards import degeneration
from nmt_cli.pharaoh import parse_links
from tests.test_translator import build_checkpoint

LINES = ["der mann sieht die katze", "", "ein hund läuft schnell im park", "   ", "☃ 漢字", "frau"]
INPUT = "\n".join(LINES) + "\n"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_checkpoint(tmp_path_factory.mktemp("run"))


def run(*args: str, input: str | bytes | None = None):
    return CliRunner().invoke(cli, ["translate", *args], input=input, catch_exceptions=False)


def test_stdin_to_stdout_is_line_exact_with_blank_lines_kept(checkpoint):
    result = run("--checkpoint", str(checkpoint), input=INPUT)
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")
    assert lines[-1] == "" and len(lines) - 1 == len(LINES)
    expected = Translator.from_checkpoint(checkpoint).translate(LINES)
    assert lines[:-1] == [h.text for h in expected]
    assert [line == "" for line in lines[:-1]] == [not text.strip() for text in LINES]


def test_signature_goes_to_stderr_and_next_to_the_output_file(checkpoint, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text(INPUT, encoding="utf-8")
    output = tmp_path / "out.txt"
    result = run("--checkpoint", str(checkpoint), "--input", str(source), "--output", str(output), "--beam", "3")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    (stderr_signature,) = [line for line in result.stderr.splitlines() if line.startswith("signature: ")]
    saved = (tmp_path / "out.txt.signature").read_text(encoding="utf-8").strip()
    assert stderr_signature == f"signature: {saved}"
    assert "|beam:3|" in saved and f"checkpoint:{checkpoint}" in saved
    assert len(output.read_text(encoding="utf-8").split("\n")) == len(LINES) + 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_chunked_streaming_and_crlf_input_give_the_same_lines(checkpoint):
    whole = run("--checkpoint", str(checkpoint), input=INPUT).stdout
    chunked = run("--checkpoint", str(checkpoint), "--chunk-size", "2", input=INPUT.replace("\n", "\r\n"))
    assert chunked.stdout == whole
    parallel = run("--checkpoint", str(checkpoint), "--workers", "2", "--set", "decode.max_sentences=1",
                   input=INPUT)
    assert parallel.stdout == whole


def test_jsonl_records_hold_text_score_tokens_and_nbest(checkpoint):
    result = run("--checkpoint", str(checkpoint), "--format", "jsonl", "--beam", "3", "--nbest", "2", input=INPUT)
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == len(LINES)
    translator = Translator.from_checkpoint(checkpoint, overrides={"decode.beam_size": 3})
    for text, record, hypothesis in zip(LINES, records, translator.translate(LINES)):
        reason = degeneration(len(translator.tokenizer.encode_src(text)) if text.strip() else 0, hypothesis.tokens)
        assert record.get("degenerate", "") == reason
        if text.strip():
            assert set(record) - {"degenerate"} == {"text", "score", "tokens", "nbest", "confidence"}
            assert len(record["nbest"]) == 2 and record["nbest"][0]["text"] == record["text"]
            assert record["nbest"][0]["score"] >= record["nbest"][1]["score"]
            assert "".join(record["tokens"]).replace("\u2581", " ").strip() == record["text"]
            per_token = hypothesis.log_prob / (len(hypothesis.tokens) + 1)
            assert record["confidence"]["log_prob_per_token"] == pytest.approx(per_token)
            if hypothesis.token_log_probs is not None:
                least = math.exp(min(hypothesis.token_log_probs))
                assert record["confidence"]["min_token_prob"] == pytest.approx(least)
        else:
            assert record == {"text": "", "score": 0.0, "tokens": [], "nbest": []}
    assert any(record.get("degenerate") for record in records)  # random weights loop or run on


def test_alignments_are_pharaoh_links_within_the_sentences(checkpoint, tmp_path):
    output = tmp_path / "out.txt"
    result = run("--checkpoint", str(checkpoint), "--output", str(output), "--alignments", input=INPUT)
    assert result.exit_code == 0, result.output
    translations = output.read_text(encoding="utf-8").split("\n")[:-1]
    alignments = (tmp_path / "out.txt.align").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(alignments) == len(LINES)
    for source, translation, line in zip(LINES, translations, alignments):
        links = parse_links(line).sure
        assert bool(links) == bool(source.strip())
        assert all(0 <= i < len(source.split()) and 0 <= j < len(translation.split()) for i, j in links)
        assert {j for _, j in links} == set(range(len(translation.split())))  # every target word linked
    jsonl = run("--checkpoint", str(checkpoint), "--format", "jsonl", "--alignments", input=INPUT)
    assert [json.loads(line)["alignment"] for line in jsonl.stdout.splitlines()] == alignments


def test_user_errors_are_one_line(checkpoint, tmp_path):
    missing = run("--checkpoint", str(tmp_path / "nope"), input=INPUT)
    assert missing.exit_code == 1
    assert missing.stderr == f"error: {tmp_path / 'nope'}: checkpoint not found\n"
    bad_bytes = run("--checkpoint", str(checkpoint), input=b"gut\n\xff\xfe kaputt\n")
    assert bad_bytes.exit_code == 1 and "error: <stdin>:2: not valid UTF-8" in bad_bytes.stderr
    wrong_section = run("--checkpoint", str(checkpoint), "--set", "train.lr=1", input=INPUT)
    assert wrong_section.exit_code == 1 and "only decode.* settings" in wrong_section.stderr
    nbest_text = run("--checkpoint", str(checkpoint), "--beam", "2", "--nbest", "2", input=INPUT)
    assert nbest_text.exit_code == 2 and "--format jsonl" in nbest_text.stderr


def test_set_changes_the_search(checkpoint):
    short = run("--checkpoint", str(checkpoint), "--set", "decode.max_len_a=0", "--set", "decode.max_len_b=1",
                "--format", "jsonl", input=INPUT)
    assert short.exit_code == 0, short.output
    assert all(len(json.loads(line)["tokens"]) <= 1 for line in short.stdout.splitlines())
    assert "maxlen:0*src+1" in short.stderr


def test_jsonl_input_records_translate_like_text_lines_and_a_prefix_starts_the_translation(checkpoint):
    plain = run("--checkpoint", str(checkpoint), "--format", "jsonl", input=INPUT)
    records = [{"text": line} for line in LINES]
    records[0]["prefix"] = "the cat"
    records[4]["prefix"] = ""
    jsonl_input = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    result = run("--checkpoint", str(checkpoint), "--input-format", "jsonl", "--format", "jsonl", input=jsonl_input)
    assert result.exit_code == 0, result.output
    expected, got = plain.stdout.splitlines(), result.stdout.splitlines()
    assert got[1:] == expected[1:]  # no prefix (or an empty one): the same record as from a text line
    first = json.loads(got[0])
    pieces = Translator.from_checkpoint(checkpoint).tokenizer
    prefix_pieces = pieces.tgt_pieces(pieces.encode_tgt("the cat"))
    assert first["tokens"][:len(prefix_pieces)] == prefix_pieces and first["text"].startswith("the cat")
    text_output = run("--checkpoint", str(checkpoint), "--input-format", "jsonl", input=jsonl_input)
    assert text_output.stdout.split("\n")[0] == first["text"]


@pytest.mark.parametrize("line, problem", [
    ('{"text": "der mann"', "invalid JSON (Expecting ',' delimiter at column 20)"),
    ("", "invalid JSON (Expecting value at column 1)"),
    ('["der mann"]', 'expected a JSON object such as {"text": "..."}, got an array'),
    ('"der mann"', 'expected a JSON object such as {"text": "..."}, got a string'),
    ('{"prefix": "the"}', "missing field 'text' (the source sentence)"),
    ('{"text": 3}', "field 'text' must be a string, got a number"),
    ('{"text": "der mann", "prefix": ["the"]}', "field 'prefix' must be a string, got an array"),
    ('{"text": "der mann", "prefix": null}', "field 'prefix' must be a string, got null"),
    ('{"text": "der mann", "glossary": {}}',
     "unknown field 'glossary'; the fields are text, prefix, constraints, avoid"),
    ('{"text": "der mann", "constraints": "the man"}',
     "field 'constraints' must be an array of phrases (strings, or arrays of alternative strings), got a string"),
    ('{"text": "der mann", "constraints": ["man", ""]}', "field 'constraints[1]' is an empty string"),
    ('{"text": "der mann", "constraints": [["man", " "]]}', "field 'constraints[0][1]' is an empty string"),
    ('{"text": "der mann", "constraints": [[]]}',
     "field 'constraints[0]' is an empty array (give at least one alternative)"),
    ('{"text": "der mann", "constraints": [3]}',
     "field 'constraints[0]' must be a string or an array of alternative strings, got a number"),
    ('{"text": "der mann", "constraints": [[["man"]]]}', "field 'constraints[0][0]' must be a string, got an array"),
    ('{"text": "der mann", "avoid": [["man"]]}', "field 'avoid[0]' must be a string, got an array"),
    ('{"text": "der mann", "avoid": null}', "field 'avoid' must be an array of strings, got null"),
])
def test_a_bad_jsonl_input_line_is_one_error_naming_file_and_line(checkpoint, tmp_path, line, problem):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "frau"}\n' + line + "\n", encoding="utf-8")
    result = run("--checkpoint", str(checkpoint), "--input", str(source), "--input-format", "jsonl",
                 "--output", str(tmp_path / "out.txt"))
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == f"error: {source}:2: {problem}"
    assert "Traceback" not in result.output and not (tmp_path / "out.txt").exists()
