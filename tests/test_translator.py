"""The Translator API on real checkpoints saved with random weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt_cli.checkpoint import (STATE, checkpoint_dir_name, checkpoints_to_average, load_checkpoint,
                                load_checkpoint_config, save_checkpoint, write_average)
from nmt_cli.config import Config, DecodeConfig, ModelConfig
from nmt_cli.decoding import Translator, generate
from nmt_cli.decoding.translator import apply_decode_overrides
from nmt_cli.errors import ConfigError, NmtError
from nmt_cli.models import build_model
from nmt_cli.tokenization import Tokenizer, train_sentencepiece

WORDS_DE = "der die das ein eine mann frau hund katze sieht läuft schnell langsam im park".split()
WORDS_EN = "the a man woman dog cat sees runs fast slowly in park".split()
TINY_MODEL = dict(d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=2, dropout=0.0,
                  embed_dim=16, hidden_size=16)


def tiny_tokenizer(vocab_size: int = 64) -> Tokenizer:
    rng = np.random.default_rng(0)
    sentences = [" ".join(rng.choice(words, size=int(rng.integers(2, 7))))
                 for words in (WORDS_DE, WORDS_EN) for _ in range(100)]
    return Tokenizer(train_sentencepiece(sentences, vocab_size=vocab_size))


def build_checkpoint(run_dir: Path, arch: str = "transformer", steps: tuple[int, ...] = (10,),
                     tokenizer: Tokenizer | None = None) -> Path:
    """Save random-weight checkpoints ``run_dir/checkpoints/step-*`` and return the newest."""
    tokenizer = tokenizer or tiny_tokenizer()
    config = Config(
        model=ModelConfig(arch=arch, **TINY_MODEL),
        decode=DecodeConfig(beam_size=2, alpha=0.6, max_len_a=1.0, max_len_b=5),
    )
    path = run_dir
    for step in steps:
        torch.manual_seed(step)
        model = build_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
        path = save_checkpoint(run_dir / "checkpoints" / checkpoint_dir_name(step), model.state_dict(), config,
                               tokenizer, {"step": step})
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("run"), steps=(10, 20))


TEXTS = ["der mann sieht die katze", "", "   ", "ein hund läuft schnell im park", "☃ Ωmega 漢字 !", "frau"]


def test_translations_are_line_exact_and_blank_texts_stay_empty(checkpoint):
    translator = Translator.from_checkpoint(checkpoint)
    hypotheses = translator.translate(TEXTS)
    assert len(hypotheses) == len(TEXTS)
    for text, hypothesis in zip(TEXTS, hypotheses):
        assert hypothesis.text == translator.tokenizer.decode_tgt(hypothesis.tokens)
        if not text.strip():
            assert hypothesis.text == "" and hypothesis.tokens == []
        else:
            assert hypothesis.tokens  # min_len 1
            assert len(hypothesis.tokens) <= len(translator.tokenizer.encode_src(text)) + 5  # max_len a=1, b=5


def test_translator_output_is_the_generators_output_detokenised(checkpoint):
    translator = Translator.from_checkpoint(checkpoint, overrides={"decode.nbest": 2})
    sources = [translator.tokenizer.encode_src(text) if text.strip() else [] for text in TEXTS]
    expected = generate(translator.model, sources, translator.decode)
    for hypothesis, reference in zip(translator.translate(TEXTS), expected):
        assert hypothesis.tokens == reference.tokens
        assert hypothesis.score == pytest.approx(reference.score)
        decoded = [translator.tokenizer.decode_tgt(h.tokens) for h in reference.nbest]
        assert [h.text for h in hypothesis.nbest] == decoded


def test_decode_settings_come_from_the_checkpoint_and_can_be_overridden(checkpoint):
    assert Translator.from_checkpoint(checkpoint).decode.beam_size == 2
    greedy = Translator.from_checkpoint(checkpoint, overrides={"decode.beam_size": 1, "decode.alpha": 0.0})
    assert (greedy.decode.beam_size, greedy.decode.alpha) == (1, 0.0)
    explicit = Translator.from_checkpoint(checkpoint, decode=DecodeConfig(beam_size=3))
    assert explicit.decode.beam_size == 3
    with pytest.raises(ConfigError, match="decode.beam"):
        Translator.from_checkpoint(checkpoint, overrides={"decode.beam": 3})


def test_with_decode_shares_the_model_and_checks_the_settings_like_set(checkpoint):
    translator = Translator.from_checkpoint(checkpoint)
    wide = translator.with_decode({"decode.beam_size": 4, "decode.nbest": 3})
    assert wide.model is translator.model and translator.decode.beam_size == 2
    expected = Translator.from_checkpoint(checkpoint, overrides={"decode.beam_size": 4, "decode.nbest": 3})
    assert [h.tokens for h in wide.translate(TEXTS)] == [h.tokens for h in expected.translate(TEXTS)]
    assert "|beam:4|" in wide.signature()
    with pytest.raises(ConfigError, match="decode.nbest': must be at most decode.beam_size"):
        translator.with_decode({"decode.nbest": 3})
    with pytest.raises(ConfigError, match="config key 'decode.beam_size': expected an integer"):
        translator.with_decode({"decode.beam_size": "wide"})


def test_checkpoint_config_is_read_without_the_weights(checkpoint, tmp_path):
    assert load_checkpoint_config(checkpoint) == load_checkpoint(checkpoint).config
    assert load_checkpoint_config(checkpoint.parent.parent).model.d_model == 16  # a run directory: its newest
    with pytest.raises(NmtError, match="checkpoint not found"):
        load_checkpoint_config(tmp_path / "missing")


def test_signature_names_checkpoint_step_and_search_settings(checkpoint):
    signature = Translator.from_checkpoint(checkpoint, overrides={"decode.beam_size": 4}).signature()
    fields = dict(part.split(":", 1) for part in signature.split("|"))
    assert fields["checkpoint"] == str(checkpoint) and fields["step"] == "20"
    assert (fields["beam"], fields["alpha"], fields["maxlen"]) == ("4", "0.6", "1*src+5")
    assert fields["version"] and fields["average"] == "no"
    assert set(fields) == {"checkpoint", "step", "average", "beam", "alpha", "maxlen", "minlen", "version"}
    chosen = Translator.from_checkpoint(checkpoint, overrides={"decode.search": "beam"}).signature()
    assert chosen == signature.replace("|beam:4|", "|beam:2|").replace("|minlen:1|", "|minlen:1|search:beam|")


def test_a_request_with_a_prefix_starts_its_translation_with_it(checkpoint):
    from nmt_cli.decoding.request import Request

    translator = Translator.from_checkpoint(checkpoint, overrides={"decode.nbest": 2})
    prefixes = ["the dog", "", "", "a cat runs", "", "woman sees"]
    requests = [Request.from_text(translator.tokenizer, text, prefix) for text, prefix in zip(TEXTS, prefixes)]
    plain, prefixed = translator.translate(TEXTS), translator.translate(requests)
    for text, prefix, request, without, hypothesis in zip(TEXTS, prefixes, requests, plain, prefixed):
        if not text.strip():  # blank in, blank out
            assert hypothesis.tokens == [] and hypothesis.text == ""
        elif not prefix:
            assert (hypothesis.tokens, hypothesis.score) == (without.tokens, without.score)
        else:
            assert all(h.tokens[:len(request.prefix)] == list(request.prefix) for h in hypothesis.nbest)
            assert hypothesis.text.startswith(prefix)


def test_average_last_two_loads_the_mean_of_the_weights(checkpoint):
    averaged = Translator.from_checkpoint(checkpoint, average="last:2")
    first = Translator.from_checkpoint(checkpoint.parent / checkpoint_dir_name(10)).model.state_dict()
    last = Translator.from_checkpoint(checkpoint).model.state_dict()
    for name, tensor in averaged.model.state_dict().items():
        torch.testing.assert_close(tensor, (first[name] + last[name]) / 2)
    assert "average:2:step-00000010..step-00000020|" in averaged.signature()


def test_a_checkpoint_written_by_nmt_average_names_its_sources_in_the_signature(checkpoint, tmp_path):
    paths = checkpoints_to_average([checkpoint.parent], last=2)
    written = Translator.from_checkpoint(write_average(paths, tmp_path / "averaged"))
    on_the_fly = Translator.from_checkpoint(checkpoint, average="last:2")
    for name, tensor in written.model.state_dict().items():
        torch.testing.assert_close(tensor, on_the_fly.model.state_dict()[name])
    assert "|average:2:step-00000010..step-00000020|" in written.signature()


def test_streaming_in_chunks_gives_the_same_translations_in_order(checkpoint):
    translator = Translator.from_checkpoint(checkpoint)
    lines = TEXTS * 3
    streamed = list(translator.translate_stream(iter(lines), chunk_size=4))
    assert [text for text, _ in streamed] == lines
    whole = translator.translate(lines)
    assert [h.text for _, h in streamed] == [h.text for h in whole]


def test_attention_covers_the_source_pieces_and_output_tokens(checkpoint):
    translator = Translator.from_checkpoint(checkpoint)
    text = TEXTS[3]
    (hypothesis,) = translator.translate([text], with_attention=True)
    source_length = len(translator.tokenizer.encode_src(text))
    assert hypothesis.attention.shape == (2, 2, len(hypothesis.tokens), source_length)  # (L, H, T, S)
    np.testing.assert_allclose(hypothesis.attention.sum(axis=-1), 1.0, atol=1e-5)


def test_missing_checkpoint_and_vocabulary_mismatch_fail_with_one_line(tmp_path, checkpoint):
    with pytest.raises(NmtError, match="checkpoint not found") as missing:
        Translator.from_checkpoint(tmp_path / "nowhere")
    assert "\n" not in str(missing.value)
    other = build_checkpoint(tmp_path / "other", tokenizer=tiny_tokenizer(vocab_size=48))
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    for item in checkpoint.iterdir():
        source = other / item.name if item.name.startswith("spm") else item
        (swapped / item.name).write_bytes(source.read_bytes())
    with pytest.raises(NmtError, match="vocabulary") as mismatch:
        Translator.from_checkpoint(swapped)
    assert "\n" not in str(mismatch.value)


def test_translation_on_a_cpu_stays_float32_where_training_would_default_to_bf16(checkpoint, monkeypatch):
    """``train.precision: auto`` is bf16 on a CPU with bf16 units (bench/bf16_quality.py measured training
    only); translation there keeps float32, so a checkpoint translates alike on every CPU."""
    from nmt_cli import precision as precision_module

    monkeypatch.setattr(precision_module, "cpu_has_native_bf16", lambda: True)
    assert precision_module.Precision("auto", torch.device("cpu"), family="transformer").dtype == torch.bfloat16
    translator = Translator.from_checkpoint(checkpoint, device="cpu")
    assert translator.precision.name == "fp32" and translator.precision.dtype is None


def test_cuda_request_without_cuda_is_a_clear_error(checkpoint):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(NmtError, match="CUDA is not available"):
        Translator.from_checkpoint(checkpoint, device="cuda")


@pytest.mark.parametrize("arch", ["linear_transformer", "rnn_bahdanau", "rnn_luong"])
def test_every_architecture_translates_from_a_saved_checkpoint(tmp_path, arch):
    translator = Translator.from_checkpoint(build_checkpoint(tmp_path, arch=arch), overrides={"decode.nbest": 2})
    hypotheses = translator.translate(TEXTS)
    assert [bool(h.tokens) for h in hypotheses] == [bool(t.strip()) for t in TEXTS]
    assert all(len(h.nbest) == 2 for h, t in zip(hypotheses, TEXTS) if t.strip())


@pytest.mark.parametrize("arch, scaled_when_format_1", [("rnn_luong", False), ("transformer", True)])
def test_format_1_rnn_checkpoints_load_with_the_unscaled_embeddings_they_were_trained_on(
        tmp_path, arch, scaled_when_format_1):
    path = build_checkpoint(tmp_path, arch=arch)
    assert load_checkpoint(path).config.model.scale_embeddings is True
    state = json.loads((path / STATE).read_text(encoding="utf-8"))
    (path / STATE).write_text(json.dumps({**state, "format": 1}), encoding="utf-8")
    assert load_checkpoint(path).config.model.scale_embeddings is scaled_when_format_1
    (path / STATE).write_text(json.dumps({**state, "format": 0}), encoding="utf-8")
    with pytest.raises(NmtError, match="unsupported checkpoint format 0"):
        load_checkpoint(path)


def test_decoding_workers_are_forked_once_and_kept_until_closed(checkpoint):
    from tests.test_workers import live_children

    before = live_children()
    alone = Translator.from_checkpoint(checkpoint, device="cpu", overrides={"decode.max_sentences": 1})
    translator = alone.with_decode({"decode.workers": 2})
    first = translator.translate(TEXTS)
    workers = live_children() - before
    assert len(workers) == 2
    again = translator.with_decode({"decode.alpha": 0.6}).translate(TEXTS)  # a copy shares the workers
    assert live_children() - before == workers
    assert [h.tokens for h in first] == [h.tokens for h in again] == [h.tokens for h in alone.translate(TEXTS)]
    translator.close()
    assert live_children() == before
    assert [h.tokens for h in translator.translate(TEXTS)] == [h.tokens for h in first]  # forks new ones
    assert len(live_children() - before) == 2 and not (live_children() - before) & workers
    translator.close()


def test_decode_overrides_report_every_problem_together():
    assert apply_decode_overrides(DecodeConfig(), {"decode.beam_size": 3}).beam_size == 3
    with pytest.raises(ConfigError) as info:
        apply_decode_overrides(DecodeConfig(), {"train.lr": 1, "decode.beam_size": "wide", "decode.bem": 2})
    lines = str(info.value).splitlines()
    assert len(lines) == 3
    assert lines[0] == "train.lr: only decode.* settings can change when translating"
    assert "unknown config key 'decode.bem'" in lines[1] and "expected an integer" in lines[2]
