"""The Transformer (Vaswani et al. 2017) and the linear-attention Transformer (Katharopoulos et al. 2020).

Both implement :class:`nmt_cli.models.base.Seq2SeqModel`. Each sublayer is wrapped as
``LayerNorm(x + Sublayer(x))`` (post-norm, the paper) or ``x + Sublayer(LayerNorm(x))``
(pre-norm, with a final LayerNorm on each stack); ``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2``.

Every attention site (``encoder_self``, ``decoder_self``, ``cross``) runs the kernel named by
``model.attention_kernel`` (softmax by default); ``linear_transformer`` is the same network
with linear attention at the sites named in ``model.linear_sites``, whose decoder
self-attention then runs as an RNN at decoding time.

Decoding state (``decode_step``):

* ``memory["cross"]``: per decoder layer, the encoder keys/values projected once by ``encode``
  (softmax: ``k, v`` (B, H, S, d_k); linear: also ``S = phi(K)^T V`` and ``Z``). Beam search
  gives each sentence K decoder rows; ``reorder_memory`` then keeps one memory row per
  sentence and records in each summary's ``"group"`` how many consecutive decoder rows it
  serves, so the memory is never copied per beam and the K queries read it at once.
* ``state["layers"]``: per decoder layer, the self-attention state: the key/value cache
  ``k, v`` (B, H, t, d_k), or the running sums ``s`` (B, H, d_k, d_k) and ``z`` (B, H, 1, d_k)
  for linear attention (constant cost per step). ``state["step"]`` is the number of tokens
  consumed so far (a Python int, left alone by reordering). Reordering goes through each
  layer's kernel (``reorder``): the softmax kernel defers the gather of its cache to the
  next step, which copies the kept rows and appends the new position at once.
* ``model.alignment_null``: a learned vector is appended to every sentence's encoder
  states, after its padding (:func:`~nmt_cli.models.attention.common.append_null_position`),
  so every cross-attention can put weight on no source word; the guided head learns to
  put it there for the target words the links leave unaligned. The weights the model
  returns then have one column more than the source, the null's, last.
* ``model.use_cache = False`` switches to decoding without any cache: each step re-runs the
  decoder over the whole prefix ``state["tokens"]`` (B, t). Outputs are identical; the cost
  of a step grows with the prefix. It exists to measure what the cache saves.

Parameter count of Transformer base (6+6 layers, d_model 512, 8 heads, FFN 2048, one joint
37,000-piece vocabulary, tied source/target/output embeddings, post-norm, no output bias):
embeddings 37,000 x 512 = 18,944,000; encoder layer 3,152,384 (attention 1,050,624,
FFN 2,099,712, two LayerNorms 2,048); decoder layer 4,204,032 (two attentions, FFN, three
LayerNorms); total 63,082,496 (the paper's Table 3 rounds its base model to 65M).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_cli.config import ModelConfig
from nmt_cli.errors import NmtError
from nmt_cli.models.attention.common import append_null_position
from nmt_cli.models.attention.multihead import MultiHeadAttention, build_kernel
from nmt_cli.models.base import Memory, Seq2SeqModel, State, index_select_tree
from nmt_cli.models.dropout import Dropout
from nmt_cli.models.embeddings import LearnedPositions, SinusoidalPositions, TransformerEmbedding, token_table
from nmt_cli.registry import MODEL_FAMILIES

__all__ = ["Transformer", "LinearTransformer"]


class FeedForward(nn.Module):
    """Position-wise ``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2``."""

    def __init__(self, d_model: int, ffn_dim: int, activation_dropout: float):
        super().__init__()
        self.linear1 = nn.Linear(d_model, ffn_dim)
        self.linear2 = nn.Linear(ffn_dim, d_model)
        self.dropout = Dropout(activation_dropout)
        for linear in (self.linear1, self.linear2):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(F.relu(self.linear1(x))))  # (B, T, d)


class Residual(nn.Module):
    """Residual connection and LayerNorm around one sublayer, post- or pre-norm.

    Use as ``residual.add(x, sublayer(residual.input(x)))``.
    """

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def input(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre_norm else x

    def add(self, x: Tensor, sublayer_output: Tensor) -> Tensor:
        x = self.dropout.add_to(x, sublayer_output)
        return x if self.pre_norm else self.norm(x)


class EncoderLayer(nn.Module):
    """Self-attention and FFN sublayers."""

    def __init__(self, cfg: ModelConfig, kernel: nn.Module):
        super().__init__()
        pre_norm = cfg.norm_position == "pre"
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, kernel)
        self.self_res = Residual(cfg.d_model, cfg.dropout, pre_norm)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation_dropout)
        self.ffn_res = Residual(cfg.d_model, cfg.dropout, pre_norm)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.self_res.add(x, self.self_attn(self.self_res.input(x), mask))  # (B, S, d)
        return self.ffn_res.add(x, self.ffn(self.ffn_res.input(x)))  # (B, S, d)


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention and FFN sublayers."""

    def __init__(self, cfg: ModelConfig, self_kernel: nn.Module, cross_kernel: nn.Module):
        super().__init__()
        pre_norm = cfg.norm_position == "pre"
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, self_kernel)
        self.self_res = Residual(cfg.d_model, cfg.dropout, pre_norm)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cross_kernel)
        self.cross_res = Residual(cfg.d_model, cfg.dropout, pre_norm)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation_dropout)
        self.ffn_res = Residual(cfg.d_model, cfg.dropout, pre_norm)

    def forward(
        self, x: Tensor, cross: dict, need_weights: bool, full_context_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Whole target prefix (B, T, d) -> (B, T, d), cross weights (B, H, T, S) | None.

        With ``full_context_mask`` (B, T) every position attends to every real target
        position, not only to its prefix.
        """
        normed = self.self_res.input(x)
        attended = (self.self_attn.causal(normed) if full_context_mask is None
                    else self.self_attn(normed, full_context_mask))
        return self._cross_and_ffn(self.self_res.add(x, attended), cross, need_weights)

    def step(
        self, x: Tensor, cross: dict, state: dict | None, need_weights: bool
    ) -> tuple[Tensor, dict, Tensor | None]:
        """One new position (B, 1, d) -> (B, 1, d), self-attention state, weights (B, H, 1, S) | None."""
        attended, state = self.self_attn.step(self.self_res.input(x), state)
        x, weights = self._cross_and_ffn(self.self_res.add(x, attended), cross, need_weights)
        return x, state, weights

    def _cross_and_ffn(self, x: Tensor, cross: dict, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        attended, weights = self.cross_attn.cross(self.cross_res.input(x), cross, need_weights)
        x = self.cross_res.add(x, attended)
        return self.ffn_res.add(x, self.ffn(self.ffn_res.input(x))), weights


class Encoder(nn.Module):
    """Embedding, a stack of encoder layers and (pre-norm) a final LayerNorm."""

    def __init__(self, cfg: ModelConfig, embedding: TransformerEmbedding, kernels: list[nn.Module]):
        super().__init__()
        self.embedding = embedding
        self.layers = nn.ModuleList(EncoderLayer(cfg, kernel) for kernel in kernels)
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_position == "pre" else nn.Identity()

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        x = self.embedding(tokens)  # (B, S, d)
        for layer in self.layers:
            x = layer(x, mask)
        return self.final_norm(x)  # (B, S, d)


class Decoder(nn.Module):
    """Embedding, a stack of decoder layers and (pre-norm) a final LayerNorm."""

    def __init__(self, cfg: ModelConfig, embedding: TransformerEmbedding, layers: list[DecoderLayer]):
        super().__init__()
        self.embedding = embedding
        self.layers = nn.ModuleList(layers)
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_position == "pre" else nn.Identity()

    def forward(
        self, tokens: Tensor, cross: list[dict], need_weights: bool, full_context_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """(B, T) prefix -> hidden (B, T, d), cross weights (B, L, H, T, S) | None; see
        :meth:`DecoderLayer.forward` for ``full_context_mask``."""
        x = self.embedding(tokens)  # (B, T, d)
        all_weights = []
        for layer, layer_cross in zip(self.layers, cross):
            x, weights = layer(x, layer_cross, need_weights, full_context_mask)
            all_weights.append(weights)
        return self.final_norm(x), torch.stack(all_weights, dim=1) if need_weights else None

    def step(
        self, tokens: Tensor, cross: list[dict], states: list[dict] | None, position: int, need_weights: bool
    ) -> tuple[Tensor, list[dict], Tensor | None]:
        """(B,) tokens at ``position`` -> hidden (B, d), new states, weights (B, L, H, S) | None."""
        x = self.embedding(tokens[:, None], offset=position)  # (B, 1, d)
        states = states or [None] * len(self.layers)
        new_states, all_weights = [], []
        for layer, layer_cross, state in zip(self.layers, cross, states):
            x, state, weights = layer.step(x, layer_cross, state, need_weights)
            new_states.append(state)
            all_weights.append(weights)
        attention = torch.stack(all_weights, dim=1).squeeze(3) if need_weights else None  # (B, L, H, S)
        return self.final_norm(x).squeeze(1), new_states, attention  # (B, d)


@MODEL_FAMILIES.register("transformer")
class Transformer(Seq2SeqModel):
    """Encoder-decoder Transformer; ``model.attention_kernel`` (softmax) except at ``linear_sites``."""

    def __init__(
        self,
        cfg: ModelConfig,
        src_vocab_size: int,
        tgt_vocab_size: int,
        joint_vocab: bool,
        linear_sites: frozenset[str] = frozenset(),
    ):
        super().__init__()
        _check_vocabulary(src_vocab_size, tgt_vocab_size, joint_vocab)
        self.attention_layers = cfg.decoder_layers
        self.attention_heads = cfg.heads
        if cfg.positions == "learned":  # the decoder's inputs are BOS + the target
            self.max_source_length, self.max_target_length = cfg.max_positions, cfg.max_positions - 1
        #: False: decode by re-running the decoder over the whole prefix (see module docstring)
        self.use_cache = True

        def kernel(site: str) -> nn.Module:
            return build_kernel("linear" if site in linear_sites else cfg.attention_kernel, cfg, site)

        tgt_table = token_table(tgt_vocab_size, cfg.d_model)
        shared_source = joint_vocab and cfg.tie_embeddings
        src_table = tgt_table if shared_source else token_table(src_vocab_size, cfg.d_model)
        self.encoder = Encoder(
            cfg,
            _embedding(cfg, src_table),
            [kernel("encoder_self") for _ in range(cfg.encoder_layers)],
        )
        self.decoder = Decoder(
            cfg,
            _embedding(cfg, tgt_table),
            [DecoderLayer(cfg, kernel("decoder_self"), kernel("cross")) for _ in range(cfg.decoder_layers)],
        )
        self.output_projection = _output_projection(cfg, tgt_table, tgt_vocab_size)
        #: ``model.alignment_null``: the learned null position after each source (see the module docstring)
        self.null_position = (nn.Parameter(torch.randn(cfg.d_model) * cfg.d_model**-0.5) if cfg.alignment_null
                              else None)

    @classmethod
    def from_config(cls, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool):
        return cls(cfg, src_vocab_size, tgt_vocab_size, joint_vocab)

    def encode(self, src_tokens: Tensor, src_mask: Tensor) -> Memory:
        encoded = self.encoder(src_tokens, src_mask)  # (B, S, d)
        if self.null_position is not None:
            encoded, src_mask = append_null_position(encoded, src_mask, self.null_position)  # (B, S + 1, ...)
        cross = [layer.cross_attn.summarize_memory(encoded, src_mask) for layer in self.decoder.layers]
        return {"src_mask": src_mask, "cross": cross}

    def decode_step(
        self, prev_tokens: Tensor, memory: Memory, state: State | None, need_attention: bool = False,
        features_only: bool = False,
    ) -> tuple[Tensor, State, Tensor | None]:
        if not self.use_cache:
            return self._decode_step_without_cache(prev_tokens, memory, state, need_attention, features_only)
        position = 0 if state is None else state["step"]
        layer_states = None if state is None else state["layers"]
        hidden, layer_states, attention = self.decoder.step(
            prev_tokens, memory["cross"], layer_states, position, need_attention
        )
        output = hidden if features_only else self.output_projection(hidden)
        return output, {"step": position + 1, "layers": layer_states}, attention

    def reorder_memory(self, memory: Memory, indices: Tensor) -> Memory:
        """Memory for decoder rows ``indices``; rows that repeat one memory row in runs of equal
        length (beam search) share it instead of copying it (see the module docstring)."""
        group = memory["cross"][0].get("group", 1)
        rows = indices if group == 1 else torch.div(indices, group, rounding_mode="floor")  # memory rows
        blocks = torch.unique_consecutive(rows)
        new_group = rows.numel() // blocks.numel()
        if new_group * blocks.numel() != rows.numel() or not torch.equal(blocks.repeat_interleave(new_group), rows):
            blocks, new_group = rows, 1  # an irregular selection: one memory row per decoder row
        cross = [{**summary, "group": new_group} for summary in index_select_tree(memory["cross"], blocks)]
        return {"src_mask": memory["src_mask"].index_select(0, blocks), "cross": cross}

    def reorder_state(self, state: State, indices: Tensor) -> State:
        if "layers" not in state:  # decoding without a cache: the prefix tokens
            return super().reorder_state(state, indices)
        layers = [layer.self_attn.kernel.reorder(layer_state, indices)
                  for layer, layer_state in zip(self.decoder.layers, state["layers"])]
        return {"step": state["step"], "layers": layers}

    def _decode_step_without_cache(
        self, prev_tokens: Tensor, memory: Memory, state: State | None, need_attention: bool,
        features_only: bool = False,
    ) -> tuple[Tensor, State, Tensor | None]:
        tokens = prev_tokens[:, None]  # (B, 1)
        if state is not None:
            tokens = torch.cat([state["tokens"], tokens], dim=1)  # (B, t)
        hidden, attention = self.decoder(tokens, memory["cross"], need_attention)  # (B, t, d)
        last_attention = attention[:, :, :, -1] if need_attention else None  # (B, L, H, S)
        output = hidden[:, -1] if features_only else self.output_projection(hidden[:, -1])
        return output, {"tokens": tokens}, last_attention

    def forward(
        self,
        src_tokens: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        tgt_mask: Tensor,
        need_attention: bool = False,
        features_only: bool = False,
        full_context_attention: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing. ``tgt_mask`` is implied: targets are right-padded and attention is causal.

        ``full_context_attention``: the attention comes from a second decoder pass in which
        every target position sees the whole target (``tgt_mask`` masks the padding), the
        full-context alignment of Garg et al. 2019; the logits stay causal.
        """
        memory = self.encode(src_tokens, src_mask)
        causal_attention = need_attention and not full_context_attention
        hidden, attention = self.decoder(tgt_in, memory["cross"], causal_attention)  # (B, T, d)
        if need_attention and full_context_attention:
            _, attention = self.decoder(tgt_in, memory["cross"], True, full_context_mask=tgt_mask)
        logits = hidden if features_only else self.output_projection(hidden)
        return logits, attention  # (B, T, V) or (B, T, d), (B, L, H, T, S) | None

    def output_layer(self) -> nn.Linear:
        return self.output_projection


@MODEL_FAMILIES.register("linear_transformer")
class LinearTransformer(Transformer):
    """The Transformer with linear attention at ``model.linear_sites``."""

    @classmethod
    def from_config(cls, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool):
        return cls(cfg, src_vocab_size, tgt_vocab_size, joint_vocab, linear_sites=frozenset(cfg.linear_sites))


def _output_projection(cfg: ModelConfig, tgt_table: nn.Embedding, tgt_vocab_size: int) -> nn.Linear:
    """Decoder states to target logits: the target embedding itself when tied, else its own
    matrix drawn from N(0, d^-1/2)."""
    projection = nn.Linear(cfg.d_model, tgt_vocab_size, bias=False)
    if cfg.tie_embeddings:
        projection.weight = tgt_table.weight
    else:
        nn.init.normal_(projection.weight, mean=0.0, std=cfg.d_model**-0.5)
    return projection


def _embedding(cfg: ModelConfig, table: nn.Embedding) -> TransformerEmbedding:
    if cfg.positions == "learned":
        positions: nn.Module = LearnedPositions(cfg.d_model, cfg.max_positions)
    else:
        positions = SinusoidalPositions(cfg.d_model, cfg.max_positions)
    return TransformerEmbedding(table, positions, cfg.scale_embeddings, cfg.dropout)


def _check_vocabulary(src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool) -> None:
    if joint_vocab and src_vocab_size != tgt_vocab_size:
        raise NmtError(
            f"a joint vocabulary needs equal sizes, got {src_vocab_size} (source) "
            f"and {tgt_vocab_size} (target)"
        )
