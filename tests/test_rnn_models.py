"""rnn_bahdanau and rnn_luong behind the one model interface of nmt_cli.models.base."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nmt_cli.config import ModelConfig
from nmt_cli.errors import ConfigError
from nmt_cli.models import build_model
from nmt_cli.specials import BOS_ID, PAD_ID

VOCAB = 23
SETTINGS = [  # arch, cell, score, local mode, input feeding
    ("rnn_bahdanau", "gru", "additive", "global", True),
    ("rnn_bahdanau", "lstm", "general", "local-p", True),
    ("rnn_bahdanau", "gru", "location", "local-m", True),
    ("rnn_bahdanau", "lstm", "dot", "global", True),
    ("rnn_luong", "lstm", "dot", "global", True),
    ("rnn_luong", "gru", "general", "local-m", False),
    ("rnn_luong", "lstm", "concat", "local-p", True),
    ("rnn_luong", "gru", "location", "global", False),
]
IDS = ["-".join(str(part) for part in setting) for setting in SETTINGS]


def make_model(arch, cell, score, local, feeding, dropout=0.0, **changes):
    sizes = {"embed_dim": 8, "hidden_size": 10, "rnn_layers": 2, "local_window": 2, "max_positions": 16}
    config = ModelConfig(
        arch=arch, rnn_cell=cell, attention=score, local_attention=local, input_feeding=feeding,
        dropout=dropout, **{**sizes, **changes},
    )
    torch.manual_seed(0)
    model = build_model(config, VOCAB, VOCAB, True).double()
    return model.train() if dropout else model.eval()


def make_batch(lengths, target_len, seed=0):
    """Random sentences padded to max(lengths); targets start with BOS."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (len(lengths), max(lengths)), generator=generator)
    src_mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
    tgt = torch.randint(4, VOCAB, (len(lengths), target_len), generator=generator)
    tgt[:, 0] = BOS_ID
    return src.masked_fill(~src_mask, PAD_ID), src_mask, tgt, torch.ones_like(tgt, dtype=torch.bool)


def decode_incrementally(model, memory, tgt, state=None):
    logits, attention = [], []
    for t in range(tgt.size(1)):
        step_logits, state, step_attention = model.decode_step(tgt[:, t], memory, state, need_attention=True)
        logits.append(step_logits)
        attention.append(step_attention)
    return torch.stack(logits, 1), torch.stack(attention, 3), state  # (B, T, V), (B, 1, 1, T, S)


@pytest.mark.parametrize("setting", SETTINGS, ids=IDS)
def test_incremental_decoding_equals_teacher_forcing(setting):
    model = make_model(*setting)
    src, src_mask, tgt, tgt_mask = make_batch([7, 3, 5], target_len=9)  # targets outgrow sources
    with torch.no_grad():
        logits, attention = model(src, src_mask, tgt, tgt_mask, need_attention=True)
        step_logits, step_attention, _ = decode_incrementally(model, model.encode(src, src_mask), tgt)
    assert logits.shape == (3, 9, VOCAB) and attention.shape == (3, 1, 1, 9, 7)
    torch.testing.assert_close(step_logits, logits)
    torch.testing.assert_close(step_attention, attention)
    assert torch.all(attention.masked_select(~src_mask[:, None, None, None, :].expand_as(attention)) == 0)


@pytest.mark.parametrize("setting", SETTINGS, ids=IDS)
def test_reordering_equals_recomputing_with_reordered_inputs(setting):
    model = make_model(*setting)
    src, src_mask, tgt, tgt_mask = make_batch([6, 2, 4], target_len=5)
    order = torch.tensor([2, 0, 0])  # beam search permutes, duplicates (0) and drops (1) rows
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        _, _, state = decode_incrementally(model, memory, tgt[:, :2])
        memory, state = model.reorder_memory(memory, order), model.reorder_state(state, order)
        continued, continued_attention, _ = decode_incrementally(model, memory, tgt[order, 2:], state)
        expected, expected_attention = model(
            src[order], src_mask[order], tgt[order], tgt_mask[order], need_attention=True
        )
    torch.testing.assert_close(continued, expected[:, 2:])
    torch.testing.assert_close(continued_attention, expected_attention[..., 2:, :])


@pytest.mark.parametrize("setting", SETTINGS, ids=IDS)
def test_padding_the_batch_changes_no_sentence(setting):
    model = make_model(*setting)
    src, src_mask, tgt, tgt_mask = make_batch([5, 3], target_len=6)
    longer_src, longer_mask, longer_tgt, _ = make_batch([9], target_len=8, seed=1)
    padded_src = torch.full((3, 11), PAD_ID)  # a longer sentence plus two extra pad columns
    padded_src[:2, :5], padded_src[2, :9] = src, longer_src[0]
    padded_tgt = torch.full((3, 8), PAD_ID)
    padded_tgt[:2, :6], padded_tgt[2] = tgt, longer_tgt[0]
    with torch.no_grad():
        logits, attention = model(src, src_mask, tgt, tgt_mask, need_attention=True)
        padded_logits, padded_attention = model(padded_src, padded_src != PAD_ID, padded_tgt,
                                                padded_tgt != PAD_ID, need_attention=True)
    torch.testing.assert_close(padded_logits[:2, :6], logits)
    torch.testing.assert_close(padded_attention[:2, ..., :6, :5], attention)
    assert torch.all(padded_attention[:2, ..., 5:] == 0)


@pytest.mark.parametrize("setting", SETTINGS, ids=IDS)
def test_one_backward_pass_reaches_every_parameter(setting):
    model = make_model(*setting, dropout=0.1)
    src, src_mask, tgt, tgt_mask = make_batch([6, 4, 5], target_len=7)
    logits, _ = model(src, src_mask, tgt, tgt_mask)
    F.cross_entropy(logits.flatten(0, 1), tgt.roll(-1, dims=1).flatten()).backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
        assert torch.isfinite(parameter.grad).all(), name


@pytest.mark.parametrize("arch", ["rnn_bahdanau", "rnn_luong"])
def test_attention_keys_are_projected_once_per_sentence(arch, monkeypatch):
    model = make_model(arch, "gru", "additive", "global", True)
    calls = []
    project = model.attention.precompute_keys
    monkeypatch.setattr(model.attention, "precompute_keys", lambda states: calls.append(1) or project(states))
    src, src_mask, tgt, tgt_mask = make_batch([4, 6], target_len=5)
    model(src, src_mask, tgt, tgt_mask)
    assert len(calls) == 1


def test_embeddings_are_tied_as_documented():
    bahdanau = make_model("rnn_bahdanau", "gru", "additive", "global", True)
    assert bahdanau.output.weight is bahdanau.tgt_embed.weight and bahdanau.src_embed is bahdanau.tgt_embed
    luong = make_model("rnn_luong", "gru", "dot", "global", True)  # hidden 10 != embed 8: not tieable
    assert luong.output.weight is not luong.tgt_embed.weight and luong.src_embed is luong.tgt_embed
    luong_tied = make_model("rnn_luong", "gru", "dot", "global", True, embed_dim=10)
    assert luong_tied.output.weight is luong_tied.tgt_embed.weight
    config = ModelConfig(arch="rnn_bahdanau", embed_dim=8, hidden_size=10)
    separate = build_model(config, VOCAB, VOCAB + 5, joint_vocab=False)
    assert separate.src_embed is not separate.tgt_embed
    assert separate.output.weight is separate.tgt_embed.weight


def test_an_empty_source_attends_to_nothing():
    model = make_model("rnn_luong", "lstm", "general", "global", True)
    src, src_mask, tgt, tgt_mask = make_batch([4, 1], target_len=3)
    src_mask[1] = False
    with torch.no_grad():
        logits, attention = model(src, src_mask, tgt, tgt_mask, need_attention=True)
    assert torch.isfinite(logits).all() and torch.all(attention[1] == 0)


def test_config_errors_name_the_key_and_list_choices():
    with pytest.raises(ConfigError) as caught:
        build_model(ModelConfig(arch="rnn_elman"), VOCAB, VOCAB, True)
    assert "rnn_bahdanau" in str(caught.value) and "rnn_luong" in str(caught.value)
    with pytest.raises(ConfigError, match="model.hidden_size"):
        build_model(ModelConfig(arch="rnn_bahdanau", hidden_size=9), VOCAB, VOCAB, True)
    with pytest.raises(ConfigError, match="model.rnn_cell"):
        build_model(ModelConfig(arch="rnn_luong", rnn_cell="elman"), VOCAB, VOCAB, True)


@pytest.mark.parametrize("arch", ["rnn_bahdanau", "rnn_luong"])
def test_embeddings_enter_scaled_by_the_square_root_of_their_width(arch):
    """``sqrt(E) E[x]`` with table ``E`` equals unscaled inputs from the table ``sqrt(E) E``."""
    scaled = make_model(arch, "lstm", "general", "global", True, tie_embeddings=False)
    plain = make_model(arch, "lstm", "general", "global", True, tie_embeddings=False, scale_embeddings=False)
    state = scaled.state_dict()
    state["tgt_embed.weight"] = state["tgt_embed.weight"] * 8**0.5  # embed_dim 8
    state["src_embed.weight"] = state["src_embed.weight"] * 8**0.5
    plain.load_state_dict(state)
    src, src_mask, tgt, tgt_mask = make_batch([5, 3], 4)
    torch.testing.assert_close(scaled(src, src_mask, tgt, tgt_mask)[0], plain(src, src_mask, tgt, tgt_mask)[0])
    unchanged = make_model(arch, "lstm", "general", "global", True, tie_embeddings=False, scale_embeddings=False)
    assert not torch.allclose(scaled(src, src_mask, tgt, tgt_mask)[0], unchanged(src, src_mask, tgt, tgt_mask)[0])
