"""Ensembles through the one generation loop, and forced scoring (`nmt score`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from nmt_cli.cli import cli
from nmt_cli.cli import score as _score_command  # noqa: F401  (registers `nmt score`)
from nmt_cli.cli import translate as _translate_command  # noqa: F401  (registers `nmt translate`)
from nmt_cli.decoding import Translator
from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.errors import NmtError
from tests.test_translator import build_checkpoint, tiny_tokenizer

TEXTS = ["der mann sieht die katze", "", "ein hund läuft schnell im park", "frau", "die katze läuft langsam"]
TARGETS = ["the man sees the cat", "", "a dog runs fast in the park", "", "the cat runs"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    tokenizer = tiny_tokenizer()
    root = tmp_path_factory.mktemp("ensemble")
    return {
        "transformer": build_checkpoint(root / "a", "transformer", steps=(3,), tokenizer=tokenizer),
        "other": build_checkpoint(root / "b", "transformer", steps=(5,), tokenizer=tokenizer),
        "rnn": build_checkpoint(root / "c", "rnn_luong", steps=(7,), tokenizer=tokenizer),
        "foreign": build_checkpoint(root / "d", "transformer", steps=(3,), tokenizer=tiny_tokenizer(80)),
    }


@pytest.mark.parametrize("overrides", [{"decode.beam_size": 1}, {"decode.beam_size": 3, "decode.nbest": 3}])
def test_an_ensemble_of_a_model_with_itself_is_the_model(checkpoints, overrides):
    alone = Translator.from_checkpoint(checkpoints["transformer"], overrides=overrides).translate(TEXTS)
    twice = Translator.from_checkpoint([checkpoints["transformer"]] * 2, overrides=overrides)
    assert isinstance(twice.model, Ensemble)
    together = twice.translate(TEXTS)
    for one, two in zip(alone, together):
        assert [h.tokens for h in one.nbest] == [h.tokens for h in two.nbest]
        assert [h.score for h in two.nbest] == pytest.approx([h.score for h in one.nbest], abs=1e-5)


def test_two_models_score_a_translation_between_theirs(checkpoints):
    paths = [checkpoints["transformer"], checkpoints["rnn"]]  # different families, one vocabulary
    first, second = (Translator.from_checkpoint(path).score(TEXTS, TARGETS) for path in paths)
    both = Translator.from_checkpoint(paths).score(TEXTS, TARGETS)
    for one, two, mean in zip(first, second, both):
        if one is None:
            assert two is None and mean is None
            continue
        assert min(one.log_prob, two.log_prob) <= mean.log_prob <= max(one.log_prob, two.log_prob)
        assert mean.log_prob == pytest.approx((one.log_prob + two.log_prob) / 2, abs=1e-4)
        assert mean.tokens == one.tokens == len(mean.token_log_probs)


def test_an_ensembles_translation_scores_what_forced_scoring_gives_it(checkpoints):
    translator = Translator.from_checkpoint([checkpoints["transformer"], checkpoints["other"]],
                                            overrides={"decode.beam_size": 3, "decode.alpha": 0.0})
    hypotheses = translator.translate(TEXTS)
    scores = translator.score(TEXTS, [h.text for h in hypotheses])
    for text, hypothesis, score in zip(TEXTS, hypotheses, scores):
        if text.strip() and translator.tokenizer.encode_tgt(hypothesis.text) == hypothesis.tokens:
            assert score.log_prob == pytest.approx(hypothesis.log_prob, abs=1e-4)
    assert "checkpoint:" in translator.signature() and "+" in translator.signature().split("|")[0]


@pytest.mark.parametrize("beam", [1, 3])
def test_an_ensembles_prefixed_translation_starts_with_the_prefix_and_scores_it(checkpoints, beam):
    from nmt_cli.decoding.request import Request

    translator = Translator.from_checkpoint([checkpoints["transformer"], checkpoints["rnn"]],
                                            overrides={"decode.beam_size": beam, "decode.alpha": 0.0})
    prefixes = ["the cat", "", "a dog", "woman", ""]
    requests = [Request.from_text(translator.tokenizer, text, prefix) for text, prefix in zip(TEXTS, prefixes)]
    hypotheses = translator.translate(requests)
    scores = translator.score(TEXTS, [h.text for h in hypotheses])
    for text, request, hypothesis, score in zip(TEXTS, requests, hypotheses, scores):
        if not text.strip():
            continue
        assert hypothesis.tokens[:len(request.prefix)] == list(request.prefix)
        if translator.tokenizer.encode_tgt(hypothesis.text) == hypothesis.tokens:  # the prefix is scored too
            assert score.log_prob == pytest.approx(hypothesis.log_prob, abs=1e-4)


def test_an_ensembles_translation_is_aligned_by_its_first_members_guided_head(checkpoints, tmp_path):
    from nmt_cli.alignment.reader import AttentionReading
    from nmt_cli.checkpoint import load_checkpoint, save_checkpoint
    from nmt_cli.translation import hypothesis_alignment

    loaded = load_checkpoint(checkpoints["transformer"])
    guided_config = loaded.config.with_overrides({"train.alignment_weight": 0.05, "model.alignment_full_context": True})
    guided = save_checkpoint(tmp_path / "guided", loaded.build_model("cpu").state_dict(), guided_config,
                             loaded.tokenizer, {"step": 3})
    alone = Translator.from_checkpoint(guided, overrides={"decode.beam_size": 1})
    both = Translator.from_checkpoint([guided, checkpoints["rnn"]], overrides={"decode.beam_size": 1})
    (hypothesis,) = both.translate(TEXTS[:1], with_attention=True)
    assert hypothesis.tokens
    # forced decoding of the ensemble's translation (shift-att, full context) reads its first member
    expected = hypothesis_alignment(TEXTS[0], hypothesis, alone, AttentionReading())
    aligned = hypothesis_alignment(TEXTS[0], hypothesis, both, AttentionReading())
    np.testing.assert_allclose(aligned.matrix, expected.matrix, atol=1e-6)
    assert aligned.links == expected.links


def test_an_ensemble_needs_one_vocabulary(checkpoints):
    with pytest.raises(NmtError, match="another SentencePiece model.*one vocabulary"):
        Translator.from_checkpoint([checkpoints["transformer"], checkpoints["foreign"]])


def run(*args, input=None):
    return CliRunner().invoke(cli, [*map(str, args)], input=input, catch_exceptions=False)


def test_nmt_score_writes_a_line_per_pair_text_and_jsonl(checkpoints, tmp_path):
    (tmp_path / "src").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    (tmp_path / "tgt").write_text("\n".join(TARGETS) + "\n", encoding="utf-8")
    expected = Translator.from_checkpoint(checkpoints["transformer"]).score(TEXTS, TARGETS)
    text = run("score", "--checkpoint", checkpoints["transformer"], "--src", tmp_path / "src", "--tgt", tmp_path / "tgt")
    assert text.exit_code == 0, text.output
    lines = text.stdout.split("\n")[:-1]
    assert len(lines) == len(TEXTS) and lines[1] == ""  # a blank source has no score
    for line, score in zip(lines, expected):
        if score is not None:
            total, per_token = map(float, line.split("\t"))
            assert (total, per_token) == pytest.approx((score.log_prob, score.per_token), abs=1e-4)
    out = tmp_path / "scores.jsonl"
    jsonl = run("score", "--checkpoint", checkpoints["transformer"], "--src", tmp_path / "src", "--tgt",
                tmp_path / "tgt", "--format", "jsonl", "-o", out)
    assert jsonl.exit_code == 0 and jsonl.stdout == ""
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert records[1]["log_prob"] is None and records[3]["tokens"] == 1  # an empty target: EOS alone
    assert np.sum(records[0]["token_log_probs"]) == pytest.approx(records[0]["log_prob"])


def test_nmt_score_reranks_the_nbest_lists_nmt_translate_writes(checkpoints, tmp_path):
    (tmp_path / "src").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    nbest = run("translate", "--checkpoint", checkpoints["transformer"], "--checkpoint", checkpoints["rnn"],
                "--input", tmp_path / "src", "--output", tmp_path / "nbest.jsonl", "--format", "jsonl",
                "--beam", "3", "--nbest", "3")
    assert nbest.exit_code == 0, nbest.output
    result = run("score", "--checkpoint", checkpoints["other"], "--src", tmp_path / "src", "--nbest",
                 tmp_path / "nbest.jsonl", "--format", "jsonl")
    assert result.exit_code == 0, result.output
    lists = [json.loads(line)["nbest"] for line in (tmp_path / "nbest.jsonl").read_text().splitlines()]
    scored = [json.loads(line)["nbest"] for line in result.stdout.splitlines()]
    assert [[c["text"] for c in entry] for entry in scored] == [[c["text"] for c in entry] for entry in lists]
    assert all(isinstance(c["log_prob"], float) for entry in scored for c in entry)
    (tmp_path / "bad.jsonl").write_text("{}\n" * len(TEXTS), encoding="utf-8")
    bad = run("score", "--checkpoint", checkpoints["other"], "--src", tmp_path / "src", "--nbest",
              tmp_path / "bad.jsonl", "--format", "jsonl")
    assert bad.exit_code == 1 and f"error: {tmp_path / 'bad.jsonl'}:1: expected a JSONL record" in bad.stderr
    (tmp_path / "short").write_text("the man\n", encoding="utf-8")
    short = run("score", "--checkpoint", checkpoints["other"], "--src", tmp_path / "src", "--tgt", tmp_path / "short")
    expected = f"error: {tmp_path / 'short'}: has 1 lines but {tmp_path / 'src'} has 5; they must pair line by line"
    assert short.exit_code == 1 and expected in short.stderr
    assert short.stdout == ""  # the pairing fails while the first chunk is read, before any line is written
