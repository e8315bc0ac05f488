"""Forced-decoding attention on every architecture (random weights), selection and shift."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nmt_cli.alignment.extract import forced_attention
from nmt_cli.alignment.reader import HeadSelection
from nmt_cli.config import ModelConfig
from nmt_cli.errors import NmtError
from nmt_cli.models import build_model

TINY = dict(d_model=16, heads=2, ffn_dim=32, encoder_layers=2, decoder_layers=3, embed_dim=8, hidden_size=16,
            dropout=0.0)
ARCHITECTURES = {
    "transformer": {},
    "linear_transformer": {"linear_sites": ("decoder_self", "cross")},
    "rnn_bahdanau": {},
    "rnn_luong": {"attention": "general", "local_attention": "local-p", "local_window": 2},
}
PAIRS = [([5, 6, 7, 8, 9], [10, 11, 12]), ([13, 14], [15, 16, 17, 18, 19, 20]), ([21], [22])]


def tiny_model(arch: str):
    torch.manual_seed(0)
    return build_model(ModelConfig(arch=arch, **TINY, **ARCHITECTURES[arch]), 40, 40, True).eval()


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_shapes_follow_the_pieces_and_rows_are_distributions(arch):
    model = tiny_model(arch)
    attentions = forced_attention(model, PAIRS, shift=False, batch_size=2)
    for (src, tgt), attention in zip(PAIRS, attentions):
        assert attention.shape == (model.attention_layers, model.attention_heads, len(tgt), len(src))
        assert np.all(attention >= 0)
        sums = attention.sum(axis=-1)
        if arch == "rnn_luong":  # local-p multiplies by a Gaussian: rows sum to at most one
            assert np.all(sums <= 1 + 1e-5) and np.all(sums > 0)
        else:  # no EOS column in the source, so every row is the whole distribution
            np.testing.assert_allclose(sums, 1.0, atol=1e-5)


@pytest.mark.parametrize("arch", ["transformer", "rnn_bahdanau"])
def test_batching_and_padding_do_not_change_the_weights(arch):
    model = tiny_model(arch)
    together = forced_attention(model, PAIRS, shift=True, batch_size=3)
    alone = [forced_attention(model, [pair], shift=True)[0] for pair in PAIRS]
    for a, b in zip(together, alone):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_shift_reads_the_row_where_the_word_is_the_decoder_input():
    model = tiny_model("transformer")
    src, tgt = PAIRS[1]
    plain = forced_attention(model, [(src, tgt)], shift=False)[0]
    shifted = forced_attention(model, [(src, tgt)], shift=True)[0]
    bos_input = torch.tensor([[2, *tgt]])  # rows 0..T: BOS, y_0, ..., y_{T-1} as decoder inputs
    _, full = model(torch.tensor([src]), torch.ones(1, len(src), dtype=torch.bool), bos_input,
                    torch.ones(1, len(tgt) + 1, dtype=torch.bool), need_attention=True)
    full = full[0].detach().numpy()  # (L, H, T+1, S)
    np.testing.assert_allclose(plain, full[:, :, : len(tgt)], atol=1e-6)
    np.testing.assert_allclose(shifted, full[:, :, 1:], atol=1e-6)


def test_empty_sides_give_empty_matrices_without_running_the_model():
    model = tiny_model("rnn_bahdanau")
    attentions = forced_attention(model, [([], [5, 6]), ([5], [])], shift=False)
    assert [a.shape for a in attentions] == [(1, 1, 2, 0), (1, 1, 0, 1)]


def test_head_selection_averages_the_chosen_layers_and_heads():
    attention = np.arange(3 * 2 * 1 * 2, dtype=float).reshape(3, 2, 1, 2)  # (L, H, T, S)
    np.testing.assert_allclose(HeadSelection(-1, None).apply(attention), attention[2].mean(axis=0))
    np.testing.assert_allclose(HeadSelection(0, (1,)).apply(attention), attention[0, 1])
    np.testing.assert_allclose(HeadSelection(None, None).apply(attention), attention.mean(axis=(0, 1)))


def test_head_selection_parsing_and_range_checks():
    assert HeadSelection.parse("-2", "0,1") == HeadSelection(-2, (0, 1))
    assert HeadSelection.parse("all", "all") == HeadSelection(None, None)
    assert HeadSelection.parse("all", "all").describe() == "layer=all heads=all"
    with pytest.raises(NmtError, match="--layer"):
        HeadSelection.parse("last", "all")
    with pytest.raises(NmtError, match="3 decoder layer"):
        HeadSelection(3, None).check(layers=3, heads=2)
    with pytest.raises(NmtError, match="2 head"):
        HeadSelection(-3, (2,)).check(layers=3, heads=2)


def test_selection_inside_extraction_equals_selection_afterwards():
    model = tiny_model("transformer")
    selection = HeadSelection(1, (0,))
    full = forced_attention(model, PAIRS, shift=True)
    reduced = forced_attention(model, PAIRS, shift=True, selection=selection)
    for whole, part in zip(full, reduced):
        np.testing.assert_allclose(part, selection.apply(whole), atol=1e-7)
