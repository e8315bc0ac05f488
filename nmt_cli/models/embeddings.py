"""Token embeddings with position information for the Transformer family.

The input of each stack is ``dropout(sqrt(d_model) * E[x_t] + PE_t)`` (Vaswani et al. 2017,
section 3.4), with ``PE`` either the fixed sinusoids or a learned table. Sequences are
right-padded, so position ``t`` of a real token never depends on the padding.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from nmt_cli.errors import NmtError
from nmt_cli.models.dropout import Dropout
from nmt_cli.specials import PAD_ID

__all__ = [
    "token_table",
    "sinusoidal_table",
    "SinusoidalPositions",
    "LearnedPositions",
    "TransformerEmbedding",
]


def token_table(vocab_size: int, d_model: int) -> nn.Embedding:
    """An embedding table initialised ``N(0, d_model^-1/2)`` with a zero PAD row.

    With the ``sqrt(d_model)`` input scaling this gives unit-variance inputs, and as a tied
    output projection it gives logits of unit scale.
    """
    table = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
    nn.init.normal_(table.weight, mean=0.0, std=d_model**-0.5)
    with torch.no_grad():
        table.weight[PAD_ID].zero_()
    return table


def sinusoidal_table(length: int, d_model: int) -> Tensor:
    """``PE(pos, 2i) = sin(pos / 10000^(2i/d))``, ``PE(pos, 2i+1) = cos(pos / 10000^(2i/d))``."""
    position = torch.arange(length, dtype=torch.float64)[:, None]  # (N, 1)
    inverse_frequency = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (d/2,)
    angles = position * inverse_frequency  # (N, d/2)
    table = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (N, d/2, 2): interleaved sin, cos
    return table.reshape(length, d_model).float()  # (N, d)


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal encodings; the table grows on demand, so any length works."""

    def __init__(self, d_model: int, initial_length: int):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("table", sinusoidal_table(initial_length, d_model), persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Encodings of positions ``offset .. offset + length - 1``: (length, d_model)."""
        end = offset + length
        if end > self.table.size(0):
            grown = sinusoidal_table(max(end, 2 * self.table.size(0)), self.d_model)
            self.table = grown.to(device=self.table.device, dtype=self.table.dtype)
        return self.table[offset:end]


class LearnedPositions(nn.Module):
    """A learned table of ``max_positions`` position vectors."""

    def __init__(self, d_model: int, max_positions: int):
        super().__init__()
        self.table = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.table.weight, mean=0.0, std=d_model**-0.5)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        end = offset + length
        if end > self.table.num_embeddings:
            raise NmtError(
                f"sequence of {end} tokens exceeds model.max_positions={self.table.num_embeddings} "
                "(learned positions); raise model.max_positions or shorten the input"
            )
        return self.table.weight[offset:end]  # (length, d_model)


class TransformerEmbedding(nn.Module):
    """``dropout(scale * E[x] + PE)`` over a (possibly shared) token table."""

    def __init__(self, tokens: nn.Embedding, positions: nn.Module, scale: bool, dropout: float):
        super().__init__()
        self.tokens = tokens
        self.positions = positions
        self.scale = math.sqrt(tokens.embedding_dim) if scale else 1.0
        self.dropout = Dropout(dropout)

    def forward(self, token_ids: Tensor, offset: int = 0) -> Tensor:
        """(B, T) token ids at positions ``offset ..`` -> (B, T, d_model)."""
        embedded = self.tokens(token_ids) * self.scale  # (B, T, d)
        return self.dropout(embedded + self.positions(token_ids.size(1), offset))  # (B, T, d)
