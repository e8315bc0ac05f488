"""RNN encoder-decoders with attention: ``rnn_bahdanau`` and ``rnn_luong``.

Both implement :mod:`nmt_cli.models.base` with GRU or LSTM cells (``model.rnn_cell``),
``model.rnn_layers`` layers, any score function of :mod:`nmt_cli.models.attention.scores`
(``model.attention``) and global, local-m or local-p attention (``model.local_attention``).

* ``rnn_bahdanau`` (Bahdanau, Cho and Bengio 2014): bidirectional encoder
  ``h_i = [fwd_i; bwd_i]`` (each direction ``hidden_size / 2``), decoder started from
  ``s_0 = tanh(W_s bwd_1)``; at step t the attention reads ``s_{t-1}`` to form ``c_t``, then
  ``s_t = f(s_{t-1}, y_{t-1}, c_t)`` and a maxout readout of ``[s_t; c_t; E y_{t-1}]`` gives
  the logits.
* ``rnn_luong`` (Luong, Pham and Manning 2015): stacked unidirectional encoder and decoder,
  the decoder started from the encoder's final state; attention on the top decoder state
  ``s_t``, attentional hidden ``h~_t = tanh(W_c [c_t; s_t])``, logits ``W_s h~_t``; with
  ``model.input_feeding`` the next input is ``[E y_t; h~_t]``.

Tied weights (``model.tie_embeddings``): the output projection shares the target embedding
matrix when its input size is ``embed_dim`` (always for ``rnn_bahdanau``, whose readout has
``embed_dim`` units; for ``rnn_luong`` only when ``hidden_size == embed_dim``), and with a
joint vocabulary the source embedding is the target embedding. Embeddings enter both models
as ``sqrt(E) E[x]`` (``model.scale_embeddings``, as in the Transformer).

Memory (batch first): ``src_mask`` (B, S), ``encoder_states`` (B, S, H), ``attention_keys``
(projected once per sentence), ``init_hidden`` (B, layers, H) and for LSTM ``init_cell``.
State: ``hidden`` (and ``cell``) (B, layers, H), ``step`` (B,) the decoder step index (used
by local-m), and for Luong with input feeding ``feed`` (B, H) = ``h~_{t-1}``. Teacher forcing
runs the encoder once and reuses the keys; it loops over time only where the recurrence
needs the attention output (Bahdanau, Luong with input feeding).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from nmt_cli.config import ModelConfig
from nmt_cli.errors import NmtError
from nmt_cli.models.attention.local import wrap_local
from nmt_cli.models.attention.scores import AttentionSizes, build_score_attention
from nmt_cli.models.base import Memory, Seq2SeqModel, State
from nmt_cli.models.dropout import Dropout
from nmt_cli.models.embeddings import token_table
from nmt_cli.registry import MODEL_FAMILIES

__all__ = ["StackedRNN", "AttentionalRNN", "BahdanauRNN", "LuongRNN"]

RNN_CELLS = {"gru": nn.GRU, "lstm": nn.LSTM}
TorchState = Tensor | tuple[Tensor, Tensor]  # torch's (layers*dirs, B, H) h, or (h, c) for LSTM


class StackedRNN(nn.Module):
    """``nn.GRU`` or ``nn.LSTM`` whose state is a dict of batch-first (B, layers*dirs, H) tensors."""

    def __init__(self, cell: str, input_size: int, hidden_size: int, layers: int, dropout: float,
                 bidirectional: bool = False):
        super().__init__()
        self.is_lstm = cell == "lstm"
        self.rnn = RNN_CELLS[cell](
            input_size, hidden_size, num_layers=layers, dropout=dropout if layers > 1 else 0.0,
            bidirectional=bidirectional, batch_first=True,
        )

    def forward(self, inputs: Tensor, state: State | None = None,
                lengths: Tensor | None = None) -> tuple[Tensor, State]:
        """(B, T, I) inputs -> (B, T, dirs*H) outputs and the final state.

        With ``lengths`` (B,) the batch is packed: each sentence stops at its own length,
        so padding never changes its states (padded outputs are zero).
        """
        hidden = None if state is None else self.to_torch(state)
        if lengths is None:
            outputs, final = self._run(inputs, hidden)
            return outputs, self.from_torch(final)
        packed = pack_padded_sequence(inputs, lengths.cpu(), batch_first=True, enforce_sorted=False)
        packed_outputs, final = self._run(packed, hidden)
        outputs, _ = pad_packed_sequence(packed_outputs, batch_first=True, total_length=inputs.size(1))
        return outputs, self.from_torch(final)  # (B, T, dirs*H)

    def to_torch(self, state: State) -> TorchState:
        """Batch-first state -> torch's (layers*dirs, B, H) ``h`` or ``(h, c)``.

        A step-by-step loop converts once before its first step and keeps torch's layout
        (``step``, :meth:`top_hidden`) until :meth:`from_torch` after its last.
        """
        hidden = state["hidden"].transpose(0, 1).contiguous()  # (layers*dirs, B, H)
        return (hidden, state["cell"].transpose(0, 1).contiguous()) if self.is_lstm else hidden

    def from_torch(self, final: TorchState) -> State:
        """torch's (layers*dirs, B, H) state -> batch-first (B, layers*dirs, H) tensors."""
        if self.is_lstm:
            return {"hidden": final[0].transpose(0, 1), "cell": final[1].transpose(0, 1)}
        return {"hidden": final.transpose(0, 1)}

    def step(self, inputs: Tensor, hidden: TorchState) -> tuple[Tensor, TorchState]:
        """One time step in torch's layout: (B, 1, I) -> (B, 1, H) top-layer output, next state."""
        return self._run(inputs, hidden)

    def _run(self, inputs: Tensor | PackedSequence, hidden: TorchState | None) -> tuple[Tensor, TorchState]:
        """``self.rnn``, in float32 under fp16 autocast on CPU, where oneDNN has no fp16 LSTM."""
        on_cpu = inputs.data.device.type == "cpu"  # .data: a PackedSequence's tensor too
        if not (self.is_lstm and on_cpu and torch.is_autocast_enabled("cpu")
                and torch.get_autocast_dtype("cpu") == torch.float16):
            return self.rnn(inputs, hidden)
        if hidden is not None:
            hidden = tuple(part.float() for part in hidden)
        with torch.autocast("cpu", enabled=False):
            return self.rnn(inputs.float(), hidden)

    def top_hidden(self, hidden: TorchState) -> Tensor:
        """The top layer's hidden state ``s_t`` (B, H) of a torch-layout state."""
        return (hidden[0] if self.is_lstm else hidden)[-1]


class AttentionalRNN(Seq2SeqModel):
    """What both RNN families share: embeddings, attention, output layer and the decode loop.

    Subclasses build ``self.encoder`` (a :class:`StackedRNN`) and implement ``_decoder_init``
    (encoder final state -> initial decoder state) and ``_decode_block`` (a block of target
    tokens -> output features, attention weights and the next state).
    """

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool,
                 feature_dim: int):
        super().__init__()
        self.tgt_embed = token_table(tgt_vocab_size, cfg.embed_dim)
        share_source = joint_vocab and cfg.tie_embeddings
        if share_source and src_vocab_size != tgt_vocab_size:
            raise NmtError(f"a joint vocabulary needs equal sizes, got {src_vocab_size} (source) "
                           f"and {tgt_vocab_size} (target)")
        self.src_embed = self.tgt_embed if share_source else token_table(src_vocab_size, cfg.embed_dim)
        self.dropout = Dropout(cfg.dropout)
        # the tables are N(0, 1/E) (token_table); scaled by sqrt(E) the RNNs get unit-variance inputs
        self.embed_scale = math.sqrt(cfg.embed_dim) if cfg.scale_embeddings else 1.0
        sizes = AttentionSizes(cfg.hidden_size, cfg.hidden_size, cfg.hidden_size, cfg.max_positions)
        if cfg.attention == "location":  # one score per source position
            self.max_source_length = cfg.max_positions
        self.attention = wrap_local(
            build_score_attention(cfg.attention, sizes), cfg.local_attention, cfg.local_window, sizes
        )
        self.output = nn.Linear(feature_dim, tgt_vocab_size)  # features -> logits
        if cfg.tie_embeddings and feature_dim == cfg.embed_dim:
            self.output.weight = self.tgt_embed.weight

    @classmethod
    def from_config(cls, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool):
        return cls(cfg, src_vocab_size, tgt_vocab_size, joint_vocab)

    # ---- subclass hooks ----------------------------------------------------------------
    def _decoder_init(self, encoder_final: State) -> Memory:  # pragma: no cover - abstract
        """Encoder final state -> ``{"init_hidden": (B, layers, H)[, "init_cell": ...]}``."""
        raise NotImplementedError

    def _decode_block(self, tokens: Tensor, memory: Memory, state: State
                      ) -> tuple[Tensor, Tensor, State]:  # pragma: no cover - abstract
        """(B, T) target tokens -> features (B, T, F), attention (B, T, S), next state."""
        raise NotImplementedError

    def _embed(self, table: nn.Embedding, tokens: Tensor) -> Tensor:
        """``dropout(sqrt(E) E[x])`` (B, T) -> (B, T, E).

        Unscaled, the small N(0, 1/E) embeddings are drowned by the other half of the decoder
        input (the context, or Luong's fed-back ``h~_{t-1}``), and training starts markedly
        slower.
        """
        return self.dropout(table(tokens) * self.embed_scale)

    # ---- the interface of nmt_cli.models.base ------------------------------------------
    def encode(self, src_tokens: Tensor, src_mask: Tensor) -> Memory:
        embedded = self._embed(self.src_embed, src_tokens)  # (B, S, E)
        # An empty source still runs one (padding) step; its attention mask stays all False.
        lengths = src_mask.sum(dim=-1).clamp(min=1)  # (B,)
        states, final = self.encoder(embedded, lengths=lengths)  # (B, S, H)
        return {
            "src_mask": src_mask,
            "encoder_states": states,
            "attention_keys": self.attention.precompute_keys(states),  # once per sentence
            **self._decoder_init(final),
        }

    def initial_state(self, memory: Memory) -> State:
        """Decoder state before the first target token (``state=None`` in ``decode_step``)."""
        batch = memory["src_mask"].size(0)
        steps = torch.zeros(batch, dtype=torch.long, device=memory["src_mask"].device)  # (B,)
        state = {"hidden": memory["init_hidden"], "step": steps}
        if "init_cell" in memory:
            state["cell"] = memory["init_cell"]
        return state

    def decode_step(self, prev_tokens: Tensor, memory: Memory, state: State | None,
                    need_attention: bool = False, features_only: bool = False) -> tuple[Tensor, State, Tensor | None]:
        state = self.initial_state(memory) if state is None else state
        features, weights, state = self._decode_block(prev_tokens[:, None], memory, state)
        logits = features[:, 0] if features_only else self.output(features[:, 0])  # (B, F) or (B, V)
        return logits, state, weights[:, None, None, 0] if need_attention else None  # (B, 1, 1, S)

    def forward(self, src_tokens: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor,
                need_attention: bool = False, features_only: bool = False,
                full_context_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing; ``tgt_mask`` is not needed (a recurrent step never reads later tokens)."""
        if full_context_attention:
            raise NmtError("full-context attention needs a Transformer decoder: an RNN decoder reads the target "
                           "left to right")
        memory = self.encode(src_tokens, src_mask)
        features, weights, _ = self._decode_block(tgt_in, memory, self.initial_state(memory))
        logits = features if features_only else self.output(features)  # (B, T, F) or (B, T, V)
        return logits, weights[:, None, None] if need_attention else None  # (B, 1, 1, T, S)

    def output_layer(self) -> nn.Linear:
        return self.output

    @staticmethod
    def _block_steps(tokens: Tensor, state: State) -> Tensor:
        """Decoder step index (B, T) of each token in a block that starts at ``state["step"]``."""
        return state["step"][:, None] + torch.arange(tokens.size(1), device=tokens.device)

    def _attend(self, queries: Tensor, memory: Memory, steps: Tensor) -> tuple[Tensor, Tensor]:
        """(B, T, H) queries at decoder steps (B, T) -> context (B, T, H), weights (B, T, S)."""
        return self.attention(
            queries, memory["attention_keys"], memory["encoder_states"], memory["src_mask"], steps
        )


@MODEL_FAMILIES.register("rnn_bahdanau")
class BahdanauRNN(AttentionalRNN):
    """Bidirectional encoder; ``c_t`` from ``s_{t-1}``; ``s_t = f(s_{t-1}, y_{t-1}, c_t)``; maxout readout."""

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool):
        super().__init__(cfg, src_vocab_size, tgt_vocab_size, joint_vocab, feature_dim=cfg.embed_dim)
        hidden, half = cfg.hidden_size, cfg.hidden_size // 2
        self.encoder = StackedRNN(
            cfg.rnn_cell, cfg.embed_dim, half, cfg.rnn_layers, cfg.dropout, bidirectional=True
        )
        self.init_proj = nn.Linear(half, hidden)  # W_s: s_0 = tanh(W_s bwd_1)
        self.decoder_rnn = StackedRNN(
            cfg.rnn_cell, cfg.embed_dim + hidden, hidden, cfg.rnn_layers, cfg.dropout
        )
        self.readout = nn.Linear(2 * hidden + cfg.embed_dim, 2 * cfg.embed_dim)  # maxout pieces

    def _decoder_init(self, encoder_final: State) -> Memory:
        backward_first = encoder_final["hidden"][:, 1::2]  # (B, layers, H/2): bwd_1 of each layer
        init = {"init_hidden": torch.tanh(self.init_proj(backward_first))}  # (B, layers, H)
        if "cell" in encoder_final:
            init["init_cell"] = torch.zeros_like(init["init_hidden"])  # the LSTM memory starts empty
        return init

    def _decode_block(self, tokens: Tensor, memory: Memory, state: State) -> tuple[Tensor, Tensor, State]:
        embedded = self._embed(self.tgt_embed, tokens)  # (B, T, E)
        steps = self._block_steps(tokens, state)  # (B, T)
        hidden = self.decoder_rnn.to_torch(state)
        outputs, contexts, weights = [], [], []
        # split once: slicing per step would give each step's backward a zero-filled (B, T, E) gradient
        for t, embedded_t in enumerate(embedded.split(1, dim=1)):
            query = self.decoder_rnn.top_hidden(hidden)[:, None]  # (B, 1, H): top layer s_{t-1}
            context, step_weights = self._attend(query, memory, steps[:, t:t + 1])  # c_t, alpha_t
            step_input = torch.cat([embedded_t, context], dim=-1)  # (B, 1, E+H)
            output, hidden = self.decoder_rnn.step(step_input, hidden)  # (B, 1, H): s_t
            outputs.append(output)
            contexts.append(context)
            weights.append(step_weights)
        readout_input = torch.cat([torch.cat(outputs, 1), torch.cat(contexts, 1), embedded], dim=-1)
        pieces = self.readout(readout_input)  # (B, T, 2H+E) -> (B, T, 2E)
        features = pieces.unflatten(-1, (-1, 2)).amax(dim=-1)  # (B, T, E): maxout over pairs
        next_state = {**self.decoder_rnn.from_torch(hidden), "step": steps[:, -1] + 1}
        return self.dropout(features), torch.cat(weights, 1), next_state


@MODEL_FAMILIES.register("rnn_luong")
class LuongRNN(AttentionalRNN):
    """Stacked encoder/decoder; attention on ``s_t``; ``h~_t = tanh(W_c [c_t; s_t])``; input feeding."""

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool):
        super().__init__(cfg, src_vocab_size, tgt_vocab_size, joint_vocab, feature_dim=cfg.hidden_size)
        hidden = cfg.hidden_size
        self.input_feeding = cfg.input_feeding
        self.encoder = StackedRNN(cfg.rnn_cell, cfg.embed_dim, hidden, cfg.rnn_layers, cfg.dropout)
        decoder_input = cfg.embed_dim + (hidden if self.input_feeding else 0)
        self.decoder_rnn = StackedRNN(cfg.rnn_cell, decoder_input, hidden, cfg.rnn_layers, cfg.dropout)
        self.combine = nn.Linear(2 * hidden, hidden, bias=False)  # W_c

    def _decoder_init(self, encoder_final: State) -> Memory:
        return {f"init_{name}": value for name, value in encoder_final.items()}  # (B, layers, H)

    def initial_state(self, memory: Memory) -> State:
        state = super().initial_state(memory)
        if self.input_feeding:
            state["feed"] = torch.zeros_like(memory["init_hidden"][:, -1])  # (B, H): h~_0 = 0
        return state

    def _attentional_hidden(self, states: Tensor, memory: Memory, steps: Tensor) -> tuple[Tensor, Tensor]:
        """``h~_t = tanh(W_c [c_t; s_t])`` for (B, T, H) top decoder states -> (B, T, H), (B, T, S)."""
        context, weights = self._attend(states, memory, steps)  # (B, T, H), (B, T, S)
        return self.dropout(torch.tanh(self.combine(torch.cat([context, states], dim=-1)))), weights

    def _decode_block(self, tokens: Tensor, memory: Memory, state: State) -> tuple[Tensor, Tensor, State]:
        embedded = self._embed(self.tgt_embed, tokens)  # (B, T, E)
        steps = self._block_steps(tokens, state)  # (B, T)
        next_step = {"step": steps[:, -1] + 1}
        if not self.input_feeding:  # the recurrence does not need the attention: one call for all T
            states, rnn_state = self.decoder_rnn(embedded, state)  # (B, T, H)
            features, weights = self._attentional_hidden(states, memory, steps)
            return features, weights, {**rnn_state, **next_step}
        feed, hidden, features, weights = state["feed"], self.decoder_rnn.to_torch(state), [], []
        for t, embedded_t in enumerate(embedded.unbind(1)):  # unbound once, as in BahdanauRNN
            step_input = torch.cat([embedded_t, feed], dim=-1)[:, None]  # (B, 1, E+H)
            top, hidden = self.decoder_rnn.step(step_input, hidden)  # (B, 1, H)
            attentional, step_weights = self._attentional_hidden(top, memory, steps[:, t:t + 1])
            feed = attentional[:, 0]  # (B, H)
            features.append(attentional)
            weights.append(step_weights)
        rnn_state = self.decoder_rnn.from_torch(hidden)
        return torch.cat(features, 1), torch.cat(weights, 1), {**rnn_state, **next_step, "feed": feed}
