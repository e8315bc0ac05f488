"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs").

Attention with the similarity ``sim(q, k) = phi(q) . phi(k)``, ``phi(x) = elu(x) + 1``::

    V'_i = phi(Q_i)^T sum_j phi(K_j) V_j^T / (phi(Q_i)^T sum_j phi(K_j))

Non-causal: ``phi(Q) (phi(K)^T V)`` normalised by ``phi(Q) sum_j phi(K_j)``, linear in length.
Causal (``j <= i``) with ``S_i = sum_{j<=i} phi(K_j) V_j^T`` and ``Z_i = sum_{j<=i} phi(K_j)``:
``V'_i = phi(Q_i)^T S_i / (phi(Q_i)^T Z_i)``; in training computed chunk by chunk, in decoding
as an RNN carrying ``S`` and ``Z`` (constant cost per step).

Every denominator gets ``EPS`` added: ``phi > 0`` keeps it positive for any real key, and the
epsilon keeps a query whose keys are all padding (or whose sums underflow in low precision)
at 0 instead of NaN. Its effect on real rows is ``EPS / (phi(Q_i)^T Z_i)``, far below float32
resolution for normal activations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_cli.config import ModelConfig
from nmt_cli.registry import ATTENTION_KERNELS

__all__ = ["EPS", "feature_map", "LinearAttention"]

EPS = 1e-6


def feature_map(x: Tensor) -> Tensor:
    """``phi(x) = elu(x) + 1``, strictly positive."""
    return F.elu(x) + 1.0


def _exclusive_cumsum(x: Tensor, dim: int) -> Tensor:
    """Sum of all earlier entries along ``dim`` (zero for the first)."""
    shifted = x.narrow(dim, 0, x.size(dim) - 1).cumsum(dim)
    return torch.cat([torch.zeros_like(x.narrow(dim, 0, 1)), shifted], dim=dim)


@ATTENTION_KERNELS.register("linear")
class LinearAttention(nn.Module):
    """Linear-attention kernel; the methods of every kernel (see multihead.py).

    ``chunk_size``: positions per chunk in the parallel causal form. Inside a chunk the
    lower-triangular ``phi(Q) phi(K)^T`` is explicit; across chunks each chunk reads the
    prefix state ``S, Z`` of all earlier chunks, so memory is O(N (C + D M / C)) per head,
    never the (N, D, M) tensor of a per-position cumulative sum. There is no attention
    dropout: the linear order never forms the weights it would drop.
    """

    def __init__(self, chunk_size: int = 64, eps: float = EPS):
        super().__init__()
        self.chunk_size = chunk_size
        self.eps = eps

    @classmethod
    def from_config(cls, cfg: ModelConfig, site: str) -> "LinearAttention":
        return cls(cfg.linear_chunk_size)

    def summarize(self, k: Tensor, v: Tensor, key_mask: Tensor) -> dict[str, Tensor]:
        """``phi(K)`` with padded keys zeroed, ``S = phi(K)^T V`` and ``Z = sum_j phi(K_j)``."""
        phi_k = feature_map(k).masked_fill(~key_mask[:, None, :, None], 0.0)  # (B, H, S, D)
        return {
            "phi_k": phi_k,
            "v": v,  # (B, H, S, M)
            "s": torch.matmul(phi_k.transpose(-2, -1), v),  # (B, H, D, M)
            "z": phi_k.sum(dim=-2, keepdim=True),  # (B, H, 1, D)
        }

    def read(self, q: Tensor, summary: dict[str, Tensor], need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """Non-causal ``phi(Q) S / (phi(Q) Z)``; weights ``phi(q).phi(k_j) / sum_j phi(q).phi(k_j)``."""
        phi_q = feature_map(q)  # (B, H, T, D)
        if need_weights:
            similarity = torch.matmul(phi_q, summary["phi_k"].transpose(-2, -1))  # (B, H, T, S)
            weights = similarity / (similarity.sum(dim=-1, keepdim=True) + self.eps)  # (B, H, T, S)
            return torch.matmul(weights, summary["v"]), weights  # (B, H, T, M)
        return self._normalised(torch.matmul(phi_q, summary["s"]), phi_q, summary["z"]), None

    def causal(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """``V'_i = phi(Q_i)^T S_i / (phi(Q_i)^T Z_i)`` for all i at once, chunk by chunk."""
        phi_q, phi_k = feature_map(q), feature_map(k)  # (B, H, N, D)
        batch, heads, length, _ = phi_q.shape
        chunk = min(self.chunk_size, length)
        chunks = -(-length // chunk)
        pad = chunks * chunk - length  # zero rows after the end: they add nothing to S or Z
        phi_q, phi_k, v = (F.pad(t, (0, 0, 0, pad)).unflatten(2, (chunks, chunk)) for t in (phi_q, phi_k, v))
        # phi_q, phi_k: (B, H, n, C, D); v: (B, H, n, C, M)
        within = torch.matmul(phi_q, phi_k.transpose(-2, -1)).tril()  # (B, H, n, C, C): j <= i in chunk
        if chunks == 1:  # the usual sentence: no earlier chunk, so S and Z before it are zero
            context = torch.matmul(within, v) / (within.sum(dim=-1, keepdim=True) + self.eps)
            return context.flatten(2, 3)  # (B, H, N, M)
        chunk_s = torch.matmul(phi_k.transpose(-2, -1), v)  # (B, H, n, D, M)
        prefix_s = _exclusive_cumsum(chunk_s, dim=2)  # (B, H, n, D, M): S before each chunk
        prefix_z = _exclusive_cumsum(phi_k.sum(dim=-2, keepdim=True), dim=2)  # (B, H, n, 1, D)
        numerator = torch.matmul(within, v) + torch.matmul(phi_q, prefix_s)  # (B, H, n, C, M)
        denominator = within.sum(dim=-1, keepdim=True) + (phi_q * prefix_z).sum(dim=-1, keepdim=True)
        context = numerator / (denominator + self.eps)  # (B, H, n, C, M)
        return context.flatten(2, 3)[:, :, :length]  # (B, H, N, M)

    def step(
        self, q: Tensor, k: Tensor, v: Tensor, state: dict[str, Tensor] | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """RNN form: ``S_i = S_{i-1} + phi(K_i) V_i^T``, ``Z_i = Z_{i-1} + phi(K_i)``; q, k, v (B, H, 1, .)."""
        phi_q, phi_k = feature_map(q), feature_map(k)  # (B, H, 1, D)
        s = torch.matmul(phi_k.transpose(-2, -1), v)  # (B, H, D, M)
        z = phi_k  # (B, H, 1, D)
        if state is not None:
            s = state["s"] + s
            z = state["z"] + z
        return self._normalised(torch.matmul(phi_q, s), phi_q, z), {"s": s, "z": z}

    def reorder(self, state: dict[str, Tensor], rows: Tensor) -> dict[str, Tensor]:
        return {"s": state["s"].index_select(0, rows), "z": state["z"].index_select(0, rows)}

    def _normalised(self, numerator: Tensor, phi_q: Tensor, z: Tensor) -> Tensor:
        """``numerator / (phi(Q) . Z + eps)``: (B, H, T, M), (B, H, T, D), (B, H, 1, D)."""
        return numerator / ((phi_q * z).sum(dim=-1, keepdim=True) + self.eps)
