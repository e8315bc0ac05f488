"""Mask-Align: no position sees its own token, the leak stays out of the weights, it trains and aligns."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from nmt_cli.alignment.api import Aligner
from nmt_cli.config import Config
from nmt_cli.data.prepared import PreparedData
from nmt_cli.errors import ConfigError, NmtError
from nmt_cli.models import build_model
from nmt_cli.training import train
from nmt_cli.training.progress import read_metrics

SMALL = {"model.arch": "mask_align", "model.d_model": 16, "model.heads": 2, "model.ffn_dim": 32,
         "model.encoder_layers": 1, "model.decoder_layers": 3, "model.dropout": 0.0,
         "train.valid_bleu": False, "train.early_stop_metric": "loss"}


def _model():
    torch.manual_seed(0)
    return build_model(Config().with_overrides(SMALL).model, 50, 50, True).eval()


def _batch():
    src = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]])
    src_mask = src != 0
    tgt_in = torch.tensor([[2, 20, 21, 22, 23], [2, 30, 31, 0, 0]])  # BOS y
    tgt_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)  # y + EOS
    return src, src_mask, tgt_in, tgt_mask


def test_no_position_sees_the_token_it_predicts():
    model = _model()
    src, src_mask, tgt_in, tgt_mask = _batch()
    logits, _ = model(src, src_mask, tgt_in, tgt_mask)
    for position in range(4):  # position t predicts y_t = tgt_in[:, t + 1]
        changed = tgt_in.clone()
        changed[0, position + 1] = 40
        other, _ = model(src, src_mask, changed, tgt_mask)
        assert torch.allclose(other[0, position], logits[0, position], atol=1e-5)
        assert not torch.allclose(other[0, :4], logits[0, :4], atol=1e-5)  # the others do see it


def test_the_weights_are_the_last_layer_over_the_source_without_the_leak():
    model = _model()
    src, src_mask, tgt_in, tgt_mask = _batch()
    _, attention = model(src, src_mask, tgt_in, tgt_mask, need_attention=True)
    assert attention.shape == (2, 1, 2, 5, 5) and model.attention_layers == 1
    assert torch.all(attention[1, ..., 3:] == 0)  # padded source
    sums = attention.sum(dim=-1)
    assert torch.all(sums > 0) and torch.all(sums < 1)  # the leak took the rest


def test_it_cannot_translate():
    model = _model()
    src, src_mask, _, _ = _batch()
    with pytest.raises(NmtError, match="cannot translate"):
        model.decode_step(torch.tensor([2, 2]), model.encode(src, src_mask), None)
    with pytest.raises(ConfigError, match="train.valid_bleu': a mask_align model cannot translate"):
        Config().with_overrides({"model.arch": "mask_align"})


def test_it_trains_with_validation_aer_and_aligns(tiny_prepared, tmp_path):
    config = Config().with_overrides({**SMALL, "train.max_steps": 4, "train.valid_every": 2, "train.max_tokens": 300,
                                      "train.num_threads": 1, "train.early_stop_metric": "aer"})
    summary = train(config, tiny_prepared, tmp_path / "run", stream=io.StringIO())
    assert summary.best["metric"] == "aer"
    assert [r["step"] for r in read_metrics(tmp_path / "run") if r["kind"] == "valid" and "aer" in r] == [2, 4]
    data = PreparedData(tiny_prepared)
    sources = data.text_path("valid", "src").read_text(encoding="utf-8").splitlines()[:3]
    targets = data.text_path("valid", "tgt").read_text(encoding="utf-8").splitlines()[:3]
    for sentence, target in zip(Aligner(tmp_path / "run").align(sources, targets), targets):
        assert sorted(j for _, j in sentence.links) == list(range(len(target.split())))
        np.testing.assert_allclose(sentence.matrix.sum(axis=1), 1.0, atol=1e-6)
