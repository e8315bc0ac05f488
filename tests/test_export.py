"""`nmt export` to CTranslate2 on random-weight checkpoints: the exported network computes ours.

Each architecture variant (post/pre-norm, shared/separate embeddings, learned/sinusoidal
positions, scaled or unscaled embeddings, averaged checkpoints) is checked by scoring the
same target sequences with CTranslate2 (``score_batch``) and with our teacher-forced
forward pass: the per-token log-probabilities must agree to float32 precision.
"""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from nmt_cli.checkpoint import checkpoint_dir_name, load_averaged, load_checkpoint, save_checkpoint
from nmt_cli.cli import cli
from nmt_cli.cli import export as _export_command  # noqa: F401  (registers `nmt export`)
from nmt_cli.config import Config, DecodeConfig, ModelConfig
from nmt_cli.errors import NmtError
from nmt_cli.export import EXPORT_RECORD, export_ctranslate2, read_export_record
from nmt_cli.models import build_model
from nmt_cli.specials import BOS_ID, EOS_ID
from nmt_cli.tokenization import Tokenizer, train_sentencepiece
from tests.test_transformer import toy_kernel  # noqa: F401  (a fixture: a kernel registered for one test)
from tests.test_translator import WORDS_DE, WORDS_EN, tiny_tokenizer

ctranslate2 = pytest.importorskip("ctranslate2", reason="CTranslate2 is not installed (pip install 'nmt-cli[ctranslate2]')")

SMALL = dict(d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0, max_positions=64)
SOURCES = ["der mann sieht die katze", "ein hund läuft schnell im park", "frau"]
TARGETS = ["the man sees the cat", "a dog runs fast in the park", "woman"]


def separate_tokenizer() -> Tokenizer:
    rng = np.random.default_rng(1)
    def model(words: list[str], size: int) -> bytes:
        sentences = [" ".join(rng.choice(words, size=int(rng.integers(2, 7)))) for _ in range(200)]
        return train_sentencepiece(sentences, vocab_size=size)
    return Tokenizer(model(WORDS_DE, 60), model(WORDS_EN, 50))


def save_run(run_dir: Path, model_config: ModelConfig, tokenizer: Tokenizer, steps=(10,)) -> Path:
    """Random-weight checkpoints ``run_dir/checkpoints/step-*``; returns the newest."""
    config = Config(model=model_config, decode=DecodeConfig(beam_size=3, alpha=0.6))
    path = run_dir
    for step in steps:
        torch.manual_seed(step)
        model = build_model(model_config, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
        with torch.no_grad():  # random LayerNorm parameters, so a misplaced norm cannot go unnoticed
            for name, parameter in model.named_parameters():
                if "norm" in name:
                    parameter.normal_(1.0 if name.endswith("weight") else 0.0, 0.3)
        path = save_checkpoint(run_dir / "checkpoints" / checkpoint_dir_name(step), model.state_dict(), config,
                               tokenizer, {"step": step})
    return path


def our_log_probs(checkpoint, src: list[int], tgt: list[int]) -> np.ndarray:
    """Teacher-forced log p(y_t | y_<t, x) of ``tgt`` + EOS under our model."""
    model = checkpoint.build_model("cpu")
    tgt_in = torch.tensor([[BOS_ID, *tgt]])
    tgt_out = torch.tensor([[*tgt, EOS_ID]])
    src_tensor = torch.tensor([src])
    with torch.no_grad():
        logits, _ = model(src_tensor, torch.ones_like(src_tensor, dtype=torch.bool), tgt_in,
                          torch.ones_like(tgt_in, dtype=torch.bool))
    return logits.log_softmax(-1).gather(2, tgt_out[..., None])[0, :, 0].numpy()


def assert_same_scores(checkpoint, export_dir: Path, atol: float = 2e-4) -> None:
    tokenizer = checkpoint.tokenizer
    translator = ctranslate2.Translator(str(export_dir), device="cpu", intra_threads=1)
    for source, target in zip(SOURCES, TARGETS):
        src, tgt = tokenizer.encode_src(source), tokenizer.encode_tgt(target)
        (scored,) = translator.score_batch([tokenizer.src_pieces(src)], [tokenizer.tgt_pieces(tgt)])
        np.testing.assert_allclose(np.array(scored.log_probs), our_log_probs(checkpoint, src, tgt), atol=atol)


VARIANTS = {
    "post-norm, shared, sinusoidal": dict(norm_position="post", positions="sinusoidal"),
    "pre-norm, shared, learned": dict(norm_position="pre", positions="learned"),
    "pre-norm, untied, unscaled": dict(norm_position="pre", tie_embeddings=False, scale_embeddings=False),
    "post-norm, separate vocabularies": dict(norm_position="post", separate=True),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_exported_model_scores_like_ours(tmp_path: Path, variant: str) -> None:
    options = dict(VARIANTS[variant])
    tokenizer = separate_tokenizer() if options.pop("separate", False) else tiny_tokenizer()
    checkpoint_path = save_run(tmp_path / "run", ModelConfig(**SMALL, **options), tokenizer)
    out = export_ctranslate2(checkpoint_path, tmp_path / "export")
    assert_same_scores(load_checkpoint(checkpoint_path), out)
    names = {path.name for path in out.iterdir()}
    assert {EXPORT_RECORD, "model.bin", "config.json"} <= names
    assert ("spm.model" in names) == tokenizer.joint and ("spm.tgt.model" in names) != tokenizer.joint


def test_averaged_export_scores_like_the_averaged_weights(tmp_path: Path) -> None:
    newest = save_run(tmp_path / "run", ModelConfig(**SMALL), tiny_tokenizer(), steps=(10, 20, 30))
    out = export_ctranslate2(newest, tmp_path / "export", average="last:2")
    averaged = load_averaged("last:2", newest)
    assert_same_scores(averaged, out)
    record = read_export_record(out)
    assert [Path(p).name for p in record.averaged] == ["step-00000020", "step-00000030"] and record.step == 30


def test_export_record_says_what_was_exported(tmp_path: Path) -> None:
    checkpoint_path = save_run(tmp_path / "run", ModelConfig(**SMALL), tiny_tokenizer())
    out = export_ctranslate2(checkpoint_path, tmp_path / "export", quantization="int8")
    record = json.loads((out / EXPORT_RECORD).read_text())
    assert record["engine"] == "ctranslate2" and record["quantization"] == "int8"
    assert record["step"] == 10 and record["source_checkpoint"] == str(checkpoint_path.resolve())
    assert record["architecture"]["d_model"] == 32 and record["positions"] == 64
    assert record["decode"]["beam_size"] == 3
    assert record["versions"]["ctranslate2"] == ctranslate2.__version__


def run_export(*args: str):
    return CliRunner().invoke(cli, ["export", *args], catch_exceptions=False)


def test_cli_refuses_to_overwrite_a_directory_that_is_not_an_export(tmp_path: Path) -> None:
    checkpoint_path = save_run(tmp_path / "run", ModelConfig(**SMALL), tiny_tokenizer())
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    result = run_export("--checkpoint", str(checkpoint_path), "--out", str(taken))
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "is not an earlier export" in result.output
    assert (taken / "notes.txt").read_text() == "mine"
    first = run_export("--checkpoint", str(checkpoint_path), "--out", str(tmp_path / "out"))
    assert first.exit_code == 0, first.output
    again = run_export("--checkpoint", str(checkpoint_path), "--out", str(tmp_path / "out"), "--quantization", "int8")
    assert again.exit_code == 0, again.output  # an earlier export is replaced
    assert read_export_record(tmp_path / "out").quantization == "int8"


@pytest.mark.parametrize("arch", ["rnn_bahdanau", "linear_transformer"])
def test_rnn_and_linear_attention_cannot_be_exported(tmp_path: Path, arch: str) -> None:
    model_config = ModelConfig(arch=arch, **SMALL, embed_dim=16, hidden_size=16)
    checkpoint_path = save_run(tmp_path / "run", model_config, tiny_tokenizer())
    result = run_export("--checkpoint", str(checkpoint_path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and f"{arch} models cannot be exported to CTranslate2" in result.output
    assert not (tmp_path / "out").exists()


def test_a_kernel_other_than_softmax_cannot_be_exported(tmp_path: Path, toy_kernel) -> None:
    checkpoint_path = save_run(tmp_path / "run", ModelConfig(**SMALL, attention_kernel="toy"), tiny_tokenizer())
    result = run_export("--checkpoint", str(checkpoint_path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert "the toy attention kernel (model.attention_kernel) cannot be exported" in result.output
    assert not (tmp_path / "out").exists()


def test_a_model_with_a_null_position_cannot_be_exported(tmp_path: Path) -> None:
    checkpoint_path = save_run(tmp_path / "run", ModelConfig(**SMALL, alignment_null=True), tiny_tokenizer())
    result = run_export("--checkpoint", str(checkpoint_path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "null position (model.alignment_null) cannot be exported" in result.output
    assert not (tmp_path / "out").exists()


def test_without_ctranslate2_the_error_says_how_to_install(tmp_path: Path, monkeypatch) -> None:
    checkpoint_path = save_run(tmp_path / "run", ModelConfig(**SMALL), tiny_tokenizer())
    real_import = builtins.__import__

    def no_ctranslate2(name, *args, **kwargs):
        if name == "ctranslate2" or name.startswith("ctranslate2."):
            raise ImportError("No module named 'ctranslate2'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ctranslate2)
    with pytest.raises(NmtError, match=r"pip install 'nmt-cli\[ctranslate2\]'"):
        export_ctranslate2(checkpoint_path, tmp_path / "out")
    result = CliRunner().invoke(cli, ["translate", "--checkpoint", str(checkpoint_path), "--engine", "ctranslate2"],
                                input="der mann\n", catch_exceptions=False)
    assert result.exit_code == 1 and "pip install 'nmt-cli[ctranslate2]'" in result.output


def test_cli_offers_the_library_quantizations() -> None:
    from nmt_cli.cli.export import QUANTIZATIONS as CLI_QUANTIZATIONS
    from nmt_cli.export import QUANTIZATIONS

    assert CLI_QUANTIZATIONS == QUANTIZATIONS  # the CLI keeps its own copy so --help needs no torch
