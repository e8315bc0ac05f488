"""``--quantize int8`` in the torch engine: every model family, dynamic int8 Linear/LSTM/GRU layers.

Random-weight models: the quantized network must stay close to the float32 one (teacher-forced
log-probabilities within a stated tolerance) and translate through the usual Translator API.
A trained model keeps its BLEU within a stated bound; CTranslate2's int8 against the same
model: tests/test_ctranslate2_engine.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sacrebleu
import torch
from click.testing import CliRunner

from nmt_cli.checkpoint import load_checkpoint
from nmt_cli.cli import cli
from nmt_cli.cli import translate as _translate_command  # noqa: F401  (registers `nmt translate`)
from nmt_cli.config import ModelConfig
from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding import Translator, load_translator
from nmt_cli.errors import NmtError
from nmt_cli.models.attention.multihead import MultiHeadAttention
from nmt_cli.models.quantization import quantize_model
from nmt_cli.specials import BOS_ID
from tests.test_export import save_run
from tests.test_translator import tiny_tokenizer

FAMILIES = {
    "transformer": dict(arch="transformer"),
    "linear_transformer": dict(arch="linear_transformer", linear_sites=("decoder_self", "cross")),
    "rnn_bahdanau (LSTM)": dict(arch="rnn_bahdanau", rnn_cell="lstm"),
    "rnn_luong (GRU)": dict(arch="rnn_luong", rnn_cell="gru", attention="general"),
}
SIZES = dict(d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0,
             embed_dim=32, hidden_size=32)
#: largest |log p_int8 - log p_fp32| allowed for any token of the test batch
LOG_PROB_TOLERANCE = 0.1


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_checkpoint(request, tmp_path_factory) -> Path:
    config = ModelConfig(**SIZES, **FAMILIES[request.param])
    return save_run(tmp_path_factory.mktemp("run"), config, tiny_tokenizer())


def teacher_forced_log_probs(model, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        tgt_in = torch.cat([torch.full((tgt.size(0), 1), BOS_ID), tgt[:, :-1]], dim=1)
        logits, _ = model(src, torch.ones_like(src, dtype=torch.bool), tgt_in, torch.ones_like(tgt_in, dtype=torch.bool))
    return logits.float().log_softmax(-1)


def test_int8_model_stays_close_to_float32(family_checkpoint: Path) -> None:
    checkpoint = load_checkpoint(family_checkpoint)
    model = checkpoint.build_model("cpu")
    quantized = quantize_model(checkpoint.build_model("cpu"), "int8", torch.device("cpu"))
    quantized_types = {type(module).__module__ for module in quantized.modules()}
    assert any("quantized.dynamic" in name for name in quantized_types)
    assert not any(type(module) is torch.nn.Linear for module in quantized.modules())  # every Linear is int8
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, checkpoint.tokenizer.src_vocab_size, (3, 7), generator=generator)
    tgt = torch.randint(4, checkpoint.tokenizer.tgt_vocab_size, (3, 6), generator=generator)
    difference = (teacher_forced_log_probs(quantized, src, tgt) - teacher_forced_log_probs(model, src, tgt)).abs()
    assert 0 < difference.max() < LOG_PROB_TOLERANCE  # changed (int8), but only a little


def test_int8_translator_translates_line_exactly(family_checkpoint: Path) -> None:
    texts = ["der mann sieht die katze", "", "ein hund läuft schnell im park"]
    translator = load_translator(family_checkpoint, quantize="int8")
    assert isinstance(translator, Translator)
    hypotheses = translator.translate(texts)
    assert hypotheses[1].tokens == [] and all(h.tokens for h in (hypotheses[0], hypotheses[2]))
    assert "quantize:int8" in translator.signature()


#: largest BLEU change int8 may cause on the session's trained Transformer (d_model 64, beam 5): torch's
#: dynamic int8 costs this small model about half a point; the bench measures Multi30k's
INT8_BLEU_TOLERANCE = 1.0


@pytest.mark.slow  # trains the 800-step trained_transformer
def test_int8_keeps_a_trained_models_bleu(trained_transformer) -> None:
    run, prepared = trained_transformer
    data = PreparedData(prepared)
    sources, references = (data.text_path("test", side).read_text(encoding="utf-8").splitlines()
                           for side in ("src", "tgt"))

    def bleu(translator) -> float:
        return sacrebleu.corpus_bleu([h.text for h in translator.translate(sources)], [references]).score

    float32 = bleu(load_translator(run))
    int8 = bleu(load_translator(run, quantize="int8"))
    assert float32 > 20  # a model that translates, so a bound on the change means something
    assert abs(int8 - float32) <= INT8_BLEU_TOLERANCE


def test_split_in_proj_gives_the_fused_projections_outputs() -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4, kernel=_softmax_kernel())
    memory, mask, queries = torch.randn(2, 5, 16), torch.ones(2, 5, dtype=torch.bool), torch.randn(2, 3, 16)
    fused, _ = attention.cross(queries, attention.summarize_memory(memory, mask))
    attention.split_in_proj()
    split, _ = attention.cross(queries, attention.summarize_memory(memory, mask))
    torch.testing.assert_close(split, fused, rtol=1e-6, atol=1e-6)
    assert set(attention.state_dict()) >= {"q_proj.weight", "kv_proj.weight"}


def _softmax_kernel():
    from nmt_cli.models.attention.multihead import SoftmaxAttention

    return SoftmaxAttention()


def test_unknown_quantization_is_one_line(family_checkpoint: Path) -> None:
    with pytest.raises(NmtError, match="unknown --quantize 'int4' for the torch engine"):
        load_translator(family_checkpoint, quantize="int4")
    result = CliRunner().invoke(cli, ["translate", "--checkpoint", str(family_checkpoint), "--quantize", "int4"],
                                input="der mann\n", catch_exceptions=False)
    assert result.exit_code == 1 and result.output.count("\n") == 1
