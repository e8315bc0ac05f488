"""Transformer and linear-attention Transformer behind the Seq2SeqModel interface."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from nmt_cli.checkpoint import load_checkpoint
from nmt_cli.config import LINEAR_SITES, ModelConfig
from nmt_cli.errors import ConfigError, NmtError
from nmt_cli.models.attention.linear import LinearAttention
from nmt_cli.models.attention.multihead import SoftmaxAttention
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.registry import ATTENTION_KERNELS, MODEL_FAMILIES
from nmt_cli.models.embeddings import sinusoidal_table
from nmt_cli.models.transformer import LinearTransformer, Transformer
from nmt_cli.specials import BOS_ID, PAD_ID

VOCAB = 23

SOFTMAX_VARIANTS = [
    {"arch": "transformer", "norm_position": norm, "positions": positions}
    for norm, positions in itertools.product(("post", "pre"), ("sinusoidal", "learned"))
]
LINEAR_VARIANTS = [
    {"arch": "linear_transformer", "linear_sites": sites, "norm_position": ("post", "pre")[n % 2]}
    for n, sites in enumerate(
        combo for size in (1, 2, 3) for combo in itertools.combinations(LINEAR_SITES, size)
    )
]
VARIANTS = SOFTMAX_VARIANTS + LINEAR_VARIANTS


def variant_id(variant: dict) -> str:
    return "-".join("+".join(v) if isinstance(v, tuple) else str(v) for v in variant.values())


def tiny_config(**overrides) -> ModelConfig:
    settings = dict(
        d_model=16, heads=2, ffn_dim=24, encoder_layers=2, decoder_layers=2, dropout=0.1,
        attention_dropout=0.1, activation_dropout=0.1, max_positions=32, linear_chunk_size=3,
    )
    settings.update(overrides)
    return ModelConfig(**settings)


def build(variant: dict, joint: bool = True, **overrides):
    cfg = tiny_config(**variant, **overrides)
    torch.manual_seed(0)
    model = MODEL_FAMILIES.get(cfg.arch).from_config(cfg, VOCAB, VOCAB, joint)
    return model.double().eval()


def lengths_to_mask(lengths):
    """(B,) lengths -> (B, longest) mask, True = real token."""
    return torch.arange(int(lengths.max()))[None, :] < lengths[:, None]


def batch(src_lengths, tgt_lengths, seed=1):
    """Right-padded random source and BOS-initial target prefixes with their masks."""
    gen = torch.Generator().manual_seed(seed)
    src_lengths, tgt_lengths = torch.tensor(src_lengths), torch.tensor(tgt_lengths)
    src_mask, tgt_mask = lengths_to_mask(src_lengths), lengths_to_mask(tgt_lengths)
    src = torch.randint(4, VOCAB, src_mask.shape, generator=gen).masked_fill(~src_mask, PAD_ID)
    tgt = torch.randint(4, VOCAB, tgt_mask.shape, generator=gen).masked_fill(~tgt_mask, PAD_ID)
    tgt[:, 0] = BOS_ID
    return src, src_mask, tgt, tgt_mask


def decode_all(model, src, src_mask, tgt, need_attention=True):
    """Feed ``tgt`` one token at a time through ``decode_step``: logits (B, T, V), attention (B, L, H, T, S)."""
    memory, state = model.encode(src, src_mask), None
    logits, attention = [], []
    for t in range(tgt.size(1)):
        step_logits, state, step_attention = model.decode_step(tgt[:, t], memory, state, need_attention)
        logits.append(step_logits)
        attention.append(step_attention)
    return torch.stack(logits, 1), torch.stack(attention, 3) if need_attention else None


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_incremental_decoding_equals_teacher_forcing(variant):
    model = build(variant)
    src, src_mask, tgt, tgt_mask = batch([7, 4, 5], [6, 6, 6])
    logits, attention = model(src, src_mask, tgt, tgt_mask, need_attention=True)
    assert logits.shape == (3, 6, VOCAB)
    assert attention.shape == (3, model.attention_layers, model.attention_heads, 6, 7)
    step_logits, step_attention = decode_all(model, src, src_mask, tgt)
    torch.testing.assert_close(step_logits, logits)
    torch.testing.assert_close(step_attention, attention)
    assert torch.all(attention.masked_select(~src_mask[:, None, None, None, :]) == 0.0)
    torch.testing.assert_close(attention.sum(-1), torch.ones_like(attention.sum(-1)))


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_decoding_without_cache_equals_with_cache(variant):
    model = build(variant)
    src, src_mask, tgt, _ = batch([5, 3], [5, 5])
    cached = decode_all(model, src, src_mask, tgt)
    model.use_cache = False
    uncached = decode_all(model, src, src_mask, tgt)
    torch.testing.assert_close(uncached, cached)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_reordering_equals_recomputing_with_reordered_inputs(variant, use_cache):
    model = build(variant)
    model.use_cache = use_cache
    src, src_mask, tgt, _ = batch([6, 3, 5], [5, 5, 5])
    order = torch.tensor([2, 0, 0, 1])
    memory, state = model.encode(src, src_mask), None
    for t in range(2):
        _, state, _ = model.decode_step(tgt[:, t], memory, state)
    memory, state = model.reorder_memory(memory, order), model.reorder_state(state, order)
    reordered_tgt = tgt[order]
    for t in range(2, 5):
        logits, state, attention = model.decode_step(reordered_tgt[:, t], memory, state, need_attention=True)
    expected_logits, expected_attention = decode_all(model, src[order], src_mask[order], reordered_tgt)
    torch.testing.assert_close(logits, expected_logits[:, -1])
    torch.testing.assert_close(attention, expected_attention[:, :, :, -1])


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_reordering_after_every_step_and_twice_in_a_row_equals_recomputing(variant):
    # beam search reorders after every step; the softmax cache defers each gather to the next
    # step, so reorders that follow one another must compose (inference mode, as in decoding:
    # under autograd the gather takes another path)
    with torch.inference_mode():
        reorder_after_every_step(build(variant))


def reorder_after_every_step(model):
    src, src_mask, tgt, _ = batch([6, 3, 5], [6, 6, 6])
    orders = [torch.tensor([2, 0, 1]), torch.tensor([1, 1, 0]), torch.tensor([0, 2, 2]), torch.tensor([2, 1, 0])]
    memory, state, rows = model.encode(src, src_mask), None, torch.arange(3)
    for t in range(5):
        logits, state, attention = model.decode_step(tgt[rows, t], memory, state, need_attention=True)
        order = orders[t % len(orders)]
        state, memory, rows = model.reorder_state(state, order), model.reorder_memory(memory, order), rows[order]
        if t == 2:  # a second reorder with no step between
            second = orders[0]
            state, memory, rows = model.reorder_state(state, second), model.reorder_memory(memory, second), rows[second]
    logits, state, attention = model.decode_step(tgt[rows, 5], memory, state, need_attention=True)
    history = torch.stack([tgt[rows, t] for t in range(6)], dim=1)  # what each row was fed, after all reorders
    expected_logits, expected_attention = decode_all(model, src[rows], src_mask[rows], history)
    torch.testing.assert_close(logits, expected_logits[:, -1])
    torch.testing.assert_close(attention, expected_attention[:, :, :, -1])


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("need_attention", [True, False])
@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_beams_sharing_a_memory_row_decode_as_with_a_copy_each(variant, need_attention, use_cache):
    # beam search gives each sentence K rows: the Transformer keeps one memory row per sentence
    # for them; the result must be that of the plain per-row copy (Seq2SeqModel's reorder)
    model = build(variant)
    model.use_cache = use_cache
    src, src_mask, tgt, _ = batch([6, 3, 5], [5, 5, 5])
    selections = [torch.tensor([0, 0, 1, 1, 2, 2]),  # expand to 2 beams a sentence
                  torch.tensor([1, 0, 3, 3, 5, 4]),  # beams reordered within their sentences
                  torch.tensor([0, 1, 4, 5]),  # the second sentence finished
                  torch.tensor([1, 0, 2, 2])]
    with torch.inference_mode():
        shared, copied = model.encode(src, src_mask), model.encode(src, src_mask)
        states, rows = [None, None], torch.arange(3)
        for t, selection in enumerate(selections):
            outputs = []
            for number, memory in enumerate((shared, copied)):
                logits, states[number], attention = model.decode_step(tgt[rows, t], memory, states[number],
                                                                      need_attention)
                outputs.append((logits, attention))
            torch.testing.assert_close(outputs[0], outputs[1])
            states = [model.reorder_state(state, selection) for state in states]
            shared = model.reorder_memory(shared, selection)
            copied = Seq2SeqModel.reorder_memory(model, copied, selection)
            rows = rows[selection]
        assert shared["cross"][0]["group"] == 2 and shared["cross"][0]["v"].size(0) == 2  # two sentences left


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_padding_a_batch_changes_no_sentence(variant):
    model = build(variant)
    src_lengths, tgt_lengths = [5, 2, 8], [4, 7, 2]
    src, src_mask, tgt, tgt_mask = batch(src_lengths, tgt_lengths)
    logits, attention = model(src, src_mask, tgt, tgt_mask, need_attention=True)
    for i, (s, t) in enumerate(zip(src_lengths, tgt_lengths)):
        row = slice(i, i + 1)
        alone_logits, alone_attention = model(src[row, :s], src_mask[row, :s], tgt[row, :t], tgt_mask[row, :t], True)
        torch.testing.assert_close(logits[i : i + 1, :t], alone_logits)
        torch.testing.assert_close(attention[i : i + 1, :, :, :t, :s], alone_attention)


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
@pytest.mark.parametrize("joint", [True, False])
def test_gradients_reach_every_parameter(variant, joint):
    model = build(variant, joint=joint).train()
    src, src_mask, tgt, tgt_mask = batch([5, 3], [4, 6])
    logits, _ = model(src, src_mask, tgt, tgt_mask)
    logits.logsumexp(-1).sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
        assert torch.isfinite(parameter.grad).all() and parameter.grad.abs().sum() > 0, name


def test_linear_decoder_state_has_constant_size():
    model = build({"arch": "linear_transformer", "linear_sites": ("decoder_self",)})
    src, src_mask, tgt, _ = batch([4, 6], [9, 9])
    memory, state, sizes = model.encode(src, src_mask), None, set()
    for t in range(9):
        _, state, _ = model.decode_step(tgt[:, t], memory, state)
        sizes.add(tuple(tensor.numel() for layer in state["layers"] for tensor in layer.values()))
    assert len(sizes) == 1
    assert set(state["layers"][0]) == {"s", "z"}


def test_softmax_decoder_cache_grows_one_position_per_step():
    model = build(SOFTMAX_VARIANTS[0])
    src, src_mask, tgt, _ = batch([4, 6], [5, 5])
    memory, state = model.encode(src, src_mask), None
    for t in range(5):
        _, state, _ = model.decode_step(tgt[:, t], memory, state)
        assert state["layers"][0]["k"].shape == (2, 2, t + 1, 8)
        # contiguous from the first step: a cache in the head-split view's strides made every reorder slow
        assert state["layers"][0]["k"].is_contiguous() and state["layers"][0]["v"].is_contiguous()


def expected_base_parameters(vocab: int, d: int, ffn: int, enc: int, dec: int) -> int:
    attention = 4 * (d * d + d)  # W^Q, W^K, W^V, W^O with biases
    feed_forward = d * ffn + ffn + ffn * d + d
    layer_norm = 2 * d
    encoder_layer = attention + feed_forward + 2 * layer_norm
    decoder_layer = 2 * attention + feed_forward + 3 * layer_norm
    return vocab * d + enc * encoder_layer + dec * decoder_layer  # one shared embedding table


def test_transformer_base_has_the_papers_parameter_count():
    """Vaswani et al. (2017) base with a shared 37,000-piece vocabulary: 63,082,496 (~63M)."""
    cfg = ModelConfig(arch="transformer")  # the defaults are the base model
    with torch.device("meta"):
        model = Transformer.from_config(cfg, 37000, 37000, joint_vocab=True)
    assert model.num_parameters() == expected_base_parameters(37000, 512, 2048, 6, 6) == 63_082_496


def test_embedding_sharing_follows_vocabulary_and_tie_setting():
    joint = build(SOFTMAX_VARIANTS[0], joint=True)
    src_table = joint.encoder.embedding.tokens.weight
    assert src_table is joint.decoder.embedding.tokens.weight is joint.output_projection.weight
    separate = build(SOFTMAX_VARIANTS[0], joint=False)
    assert separate.encoder.embedding.tokens.weight is not separate.decoder.embedding.tokens.weight
    assert separate.decoder.embedding.tokens.weight is separate.output_projection.weight
    untied = build(SOFTMAX_VARIANTS[0], joint=True, tie_embeddings=False)
    assert untied.decoder.embedding.tokens.weight is not untied.output_projection.weight
    assert untied.num_parameters() == joint.num_parameters() + 2 * VOCAB * 16


def test_sinusoidal_table_matches_formula():
    table = sinusoidal_table(50, 16)
    for pos, i in [(0, 0), (3, 1), (17, 5), (49, 7)]:
        angle = pos / 10000 ** (2 * i / 16)
        assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = build(SOFTMAX_VARIANTS[0])
    tokens = torch.tensor([[5, 6, 7]])
    embedding = model.encoder.embedding
    expected = embedding.tokens.weight[tokens] * 4.0 + sinusoidal_table(3, 16).double()
    torch.testing.assert_close(embedding(tokens), expected)


def test_sinusoidal_positions_extend_past_the_initial_table():
    model = build(SOFTMAX_VARIANTS[0], max_positions=4)
    src, src_mask, tgt, tgt_mask = batch([9], [7])
    logits, _ = model(src, src_mask, tgt, tgt_mask)
    torch.testing.assert_close(decode_all(model, src, src_mask, tgt, need_attention=False)[0], logits)


def test_learned_positions_refuse_sequences_longer_than_the_table():
    model = build(SOFTMAX_VARIANTS[1], max_positions=4)
    src, src_mask, tgt, tgt_mask = batch([5], [3])
    with pytest.raises(NmtError, match="max_positions"):
        model(src, src_mask, tgt, tgt_mask)


@pytest.mark.parametrize("sites", [("decoder",), ()])
def test_bad_linear_sites_list_the_valid_ones(sites):
    with pytest.raises(ConfigError, match="encoder_self, decoder_self, cross"):
        tiny_config(arch="linear_transformer", linear_sites=sites)


@pytest.fixture
def toy_kernel():
    """A kernel registered from this module alone: softmax attention that records the sites it
    is built for; unregistered after the test."""

    @ATTENTION_KERNELS.register("toy")
    class ToyKernel(SoftmaxAttention):
        sites: list[str] = []

        @classmethod
        def from_config(cls, cfg: ModelConfig, site: str) -> "ToyKernel":
            cls.sites.append(site)
            return cls(cfg.attention_dropout)

    yield ToyKernel
    ATTENTION_KERNELS._entries.pop("toy")


def kernel_names(model) -> dict[str, set[str]]:
    """Site -> names of the kernel classes there."""
    encoder = {type(layer.self_attn.kernel).__name__ for layer in model.encoder.layers}
    decoder_self = {type(layer.self_attn.kernel).__name__ for layer in model.decoder.layers}
    cross = {type(layer.cross_attn.kernel).__name__ for layer in model.decoder.layers}
    return {"encoder_self": encoder, "decoder_self": decoder_self, "cross": cross}


def test_a_kernel_registered_anywhere_is_a_valid_choice(toy_kernel):
    model = build(SOFTMAX_VARIANTS[0], attention_kernel="toy")
    assert toy_kernel.sites == ["encoder_self"] * 2 + ["decoder_self", "cross"] * 2
    assert kernel_names(model) == dict.fromkeys(LINEAR_SITES, {"ToyKernel"})
    src, src_mask, tgt, tgt_mask = batch([5, 3], [4, 2])
    with torch.no_grad():  # the same computation as the softmax kernel's, on the same weights
        torch.testing.assert_close(model(src, src_mask, tgt, tgt_mask)[0],
                                   build(SOFTMAX_VARIANTS[0])(src, src_mask, tgt, tgt_mask)[0])
    linear = build({"arch": "linear_transformer", "linear_sites": ("decoder_self",)}, attention_kernel="toy")
    assert kernel_names(linear) == {"encoder_self": {"ToyKernel"}, "decoder_self": {"LinearAttention"},
                                    "cross": {"ToyKernel"}}
    aligner = MODEL_FAMILIES.get("mask_align").from_config(tiny_config(arch="mask_align", attention_kernel="toy"),
                                                           VOCAB, VOCAB, True)
    assert {type(layer.self_attn.kernel) for layer in aligner.encoder.layers} == {toy_kernel}
    assert type(aligner.layers[-1].cross_attn.kernel) is toy_kernel
    assert {type(layer.self_attn.kernel) for layer in aligner.layers} == {SoftmaxAttention}  # its masked one


def test_unknown_and_misplaced_kernels_are_config_errors():
    with pytest.raises(ConfigError, match="'model.attention_kernel': 'flash' is not one of: linear, softmax"):
        tiny_config(attention_kernel="flash")
    for arch in ("transformer", "linear_transformer", "mask_align"):
        with pytest.raises(ConfigError, match="linear attention goes where model.linear_sites says .*: softmax$"):
            tiny_config(arch=arch, attention_kernel="linear")
    assert ATTENTION_KERNELS.get("linear") is LinearAttention and ATTENTION_KERNELS.get("softmax") is SoftmaxAttention


def test_a_checkpoint_from_before_attention_kernel_loads_with_softmax(tmp_path):
    from tests.test_translator import build_checkpoint

    path = build_checkpoint(tmp_path / "run")
    state = json.loads((path / "state.json").read_text())
    del state["config"]["model"]["attention_kernel"]
    (path / "state.json").write_text(json.dumps(state))
    loaded = load_checkpoint(path)
    assert loaded.config.model.attention_kernel == "softmax"
    assert kernel_names(loaded.build_model("cpu")) == dict.fromkeys(LINEAR_SITES, {"SoftmaxAttention"})


def test_registry_builds_both_architectures():
    assert MODEL_FAMILIES.get("transformer") is Transformer
    assert MODEL_FAMILIES.get("linear_transformer") is LinearTransformer


@pytest.mark.parametrize("variant", [SOFTMAX_VARIANTS[0], LINEAR_VARIANTS[0]], ids=variant_id)
def test_step_log_probs_is_the_log_softmax_of_decode_step_logits(variant):
    model = build(variant).float()
    src, src_mask, _, _ = batch([5, 3], [2, 2])
    prev = torch.full((2,), BOS_ID)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        logits, _, _ = model.decode_step(prev, memory, None)
        log_probs, _, _ = model.step_log_probs(prev, memory, None)
    torch.testing.assert_close(log_probs, logits.log_softmax(dim=-1))
