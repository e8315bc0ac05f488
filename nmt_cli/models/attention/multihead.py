"""Multi-head attention over a pluggable kernel (Vaswani et al. 2017, section 3.2).

``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O`` with
``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`` and ``d_k = d_model / h``.

:class:`MultiHeadAttention` owns the projections and splits heads; a *kernel* computes
``Attention`` on per-head tensors (B, H, T, d_k). Every kernel has the same five methods:

* ``summarize(k, v, key_mask) -> summary``: what queries read from a fixed set of keys
  (an encoder memory), computed once per sentence; a dict of batch-first tensors.
* ``read(q, summary, need_weights) -> (context, weights | None)``: non-causal attention;
  weights are (B, H, T, S), exactly 0 on padded keys.
* ``causal(q, k, v) -> context``: parallel causal self-attention (training).
* ``step(q, k, v, state | None) -> (context, state)``: causal self-attention for one new
  position given everything before it (decoding); ``state`` is a dict of batch-first tensors.
* ``reorder(state, rows) -> state``: the state of decoding rows ``rows`` (beam search).

A kernel is a module of this package with a class registered by
``@ATTENTION_KERNELS.register("name")`` and built by :func:`build_kernel` through its
classmethod ``from_config(cfg, site)`` (the model's settings and the site it serves:
``encoder_self``, ``decoder_self`` or ``cross``). :class:`SoftmaxAttention` (``softmax``) is
the kernel here; :class:`nmt_cli.models.attention.linear.LinearAttention` (``linear``) is the other.

Causal self-attention takes no key mask: targets are right-padded, so every key a real
query ``i`` may see (positions ``j <= i``) is real.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_cli.config import ModelConfig
from nmt_cli.models.attention.common import attend, masked_softmax
from nmt_cli.models.dropout import dropout
from nmt_cli.models.linear import products_of
from nmt_cli.registry import ATTENTION_KERNELS

__all__ = ["AttentionKernel", "MultiHeadAttention", "SoftmaxAttention", "build_kernel"]

Summary = dict[str, Tensor]
KernelState = dict[str, Tensor]


class AttentionKernel(Protocol):
    """The signature every kernel implements (see the module docstring)."""

    @classmethod
    def from_config(cls, cfg: ModelConfig, site: str) -> "AttentionKernel": ...

    def summarize(self, k: Tensor, v: Tensor, key_mask: Tensor) -> Summary: ...

    def read(self, q: Tensor, summary: Summary, need_weights: bool) -> tuple[Tensor, Tensor | None]: ...

    def causal(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor: ...

    def step(self, q: Tensor, k: Tensor, v: Tensor, state: KernelState | None) -> tuple[Tensor, KernelState]: ...

    def reorder(self, state: KernelState, rows: Tensor) -> KernelState: ...


def build_kernel(name: str, cfg: ModelConfig, site: str) -> AttentionKernel:
    """The kernel registered as ``name``, for ``site`` (encoder_self, decoder_self or cross) of a model ``cfg``."""
    return ATTENTION_KERNELS.get(name).from_config(cfg, site)


def fused_attention(q: Tensor, k: Tensor, v: Tensor, **options) -> Tensor:
    """``F.scaled_dot_product_attention``, in float32 for bf16/fp16 inputs on CPU.

    torch's CPU kernel for bf16 is several times slower than for float32 (forward and
    backward), while the products around it are the fast part of bf16 autocast on a CPU with
    AMX; the attention itself is a small share of the work, so it runs in float32 and only
    its output is cast back.
    """
    if q.device.type != "cpu" or q.dtype not in (torch.bfloat16, torch.float16):
        return F.scaled_dot_product_attention(q, k, v, **options)
    with torch.autocast("cpu", enabled=False):  # autocast would cast the inputs back to bf16
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), **options).to(q.dtype)


#: key lengths up to which attention on a CPU runs as two batched products and a softmax
#: (:func:`explicit_attention`) rather than ``scaled_dot_product_attention``'s fused kernel. The
#: fused kernel works in blocks of queries and keys; for rows this short its per-block work costs
#: more than the (T, S) weights it avoids storing, most of all in the backward pass
#: (``bench/attention_kernels.py`` times both, forward and backward, by key length and head size;
#: on both AMD EPYCs it measured, AVX2 and AVX-512, the explicit kernel was the faster up to 96 keys
#: at both head shapes, and either could be at 128).
EXPLICIT_MAX_KEYS = 96


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None,
                       dropout_p: float = 0.0) -> Tensor:
    """``dropout(softmax(q k^T / sqrt(d_k) + bias)) v``: (B, H, T, d_k), (B, H, S, d_k) x2 -> (B, H, T, d_k).

    ``bias`` broadcasts against the (B, H, T, S) scores and holds 0 for keys a query may
    see and ``-inf`` for the others (padding: (B, 1, 1, S), built once per sentence; the
    future: (T, S)). Every query must see at least one key: a row that sees none would be NaN,
    where the fused kernel gives 0 (a summary's key mask always keeps a sentence's real
    tokens, and a causal query sees itself). The weights' dropout is
    :func:`~nmt_cli.models.dropout.dropout`, applied only when ``dropout_p > 0``.

    Used for short keys on a CPU (:data:`EXPLICIT_MAX_KEYS`) and for decoding steps, where a
    single query per row attends (two products and a softmax over S entries beat the fused
    kernel there too: 20-40% less time for 160 rows, 4-8 heads, 15-30 keys).
    """
    scores = torch.matmul(q, k.transpose(-2, -1)).mul_(q.size(-1) ** -0.5)  # (B, H, T, S)
    if bias is not None:
        scores = scores.add_(bias)
    weights = short_softmax(scores)
    return torch.matmul(dropout(weights, dropout_p, True) if dropout_p else weights, v)


def explicit_wins(q: Tensor, k: Tensor) -> bool:
    """Whether :func:`explicit_attention` is the faster kernel for these queries and keys."""
    return q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64) and k.size(-2) <= EXPLICIT_MAX_KEYS


def causal_bias(length: int, like: Tensor) -> Tensor:
    """(T, T): 0 where key ``j <= i`` (query ``i``), ``-inf`` above the diagonal."""
    return torch.full((length, length), float("-inf"), dtype=like.dtype, device=like.device).triu_(1)


#: torch's CPU softmax over a last dimension shorter than this takes a scalar path (a row of
#: 8 costs as much as a row of 100), forward and backward; the first steps of decoding attend
#: to so few positions, and so do the self-attention rows of short training sentences
SHORT_ROW = 16


def _written_out_softmax(scores: Tensor) -> Tensor:
    """``exp(x - max) / sum`` over the last dimension, in a new tensor."""
    exp = (scores - scores.amax(dim=-1, keepdim=True)).exp_()
    return exp.div_(exp.sum(dim=-1, keepdim=True))


class _ShortRowSoftmax(torch.autograd.Function):
    """``y = exp(x - max) / sum`` over the last dimension, with the softmax gradient
    ``dx = y * (dy - sum_j dy_j y_j)`` written out: both as a few vectorised operations over
    the whole tensor instead of torch's per-row scalar kernels."""

    @staticmethod
    def forward(ctx, scores: Tensor) -> Tensor:
        weights = _written_out_softmax(scores)
        ctx.save_for_backward(weights)
        return weights

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (weights,) = ctx.saved_tensors
        return (grad - (grad * weights).sum(dim=-1, keepdim=True)).mul_(weights)


def short_softmax(scores: Tensor) -> Tensor:
    """``softmax`` over the last dimension, as ``exp(x - max) / sum`` for rows shorter than :data:`SHORT_ROW`.

    The same values and gradient; on CPU a few vectorised operations beat torch's scalar kernels
    for short rows (``bench/decode_profile.py`` times the forward, ``bench/attention_kernels.py``
    forward and backward). Longer rows and other devices take ``softmax``.
    """
    if scores.size(-1) >= SHORT_ROW or scores.device.type != "cpu":
        return scores.softmax(dim=-1)
    if scores.requires_grad:
        return _ShortRowSoftmax.apply(scores)
    return _written_out_softmax(scores)


@ATTENTION_KERNELS.register("softmax")
class SoftmaxAttention(nn.Module):
    """Scaled dot-product attention ``softmax(Q K^T / sqrt(d_k)) V``.

    Without weights it runs ``torch.nn.functional.scaled_dot_product_attention`` (fused), or
    the same formula as two products and a softmax where that is faster (short keys on a CPU,
    decoding steps: :func:`explicit_attention`); with weights it computes the formula
    explicitly and returns them. ``dropout`` applies to the weights in training. The decoding state is the key/value cache ``{"k", "v"}`` (B, H, t, d_k),
    with ``"rows"`` (B',) when a reorder is pending: beam search reorders the cache after
    every step and the next step appends to it, two copies of the whole cache, so
    :meth:`reorder` only records the rows and :meth:`step` gathers them and appends the new
    position in one copy (:func:`gather_append`).
    """

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.dropout = dropout

    @classmethod
    def from_config(cls, cfg: ModelConfig, site: str) -> "SoftmaxAttention":
        return cls(cfg.attention_dropout)

    def _dropout_p(self) -> float:
        return self.dropout if self.training else 0.0

    def summarize(self, k: Tensor, v: Tensor, key_mask: Tensor) -> Summary:
        mask = key_mask[:, None, None, :]  # (B, 1, 1, S)
        bias = torch.zeros(mask.shape, dtype=k.dtype, device=k.device).masked_fill_(~mask, float("-inf"))
        return {"k": k, "v": v, "mask": mask, "bias": bias}

    def read(self, q: Tensor, summary: Summary, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        k, v, mask = summary["k"], summary["v"], summary["mask"]
        decoding = q.size(2) == 1 or summary.get("group", 1) > 1  # one query per row, or a beam's few
        bias = summary.get("bias")  # absent from a summary of per-query masks (Mask-Align), read fused
        explicit = explicit_wins(q, k) or decoding and not self.training and q.dtype == torch.float32
        if not need_weights and explicit and bias is not None:
            return explicit_attention(q, k, v, bias, self._dropout_p()), None
        if not need_weights:
            context = fused_attention(q, k, v, attn_mask=mask, dropout_p=self._dropout_p())
            return context, None  # (B, H, T, d_k)
        scores = torch.matmul(q, k.transpose(-2, -1)) * q.size(-1) ** -0.5  # (B, H, T, S)
        weights = masked_softmax(scores, mask)  # (B, H, T, S)
        dropped = dropout(weights, self.dropout, self.training)
        return attend(dropped, v), weights  # (B, H, T, d_k), (B, H, T, S)

    def causal(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if explicit_wins(q, k):
            return explicit_attention(q, k, v, causal_bias(q.size(2), q), self._dropout_p())
        return fused_attention(q, k, v, is_causal=True, dropout_p=self._dropout_p())

    def step(
        self, q: Tensor, k: Tensor, v: Tensor, state: KernelState | None
    ) -> tuple[Tensor, KernelState]:
        if state is None:  # contiguous: a cache in the head-split view's strides makes every later cat and reorder slow
            k, v = k.contiguous(), v.contiguous()
        else:
            rows = state.get("rows")
            k = gather_append(state["k"], rows, k)  # (B, H, t, d_k)
            v = gather_append(state["v"], rows, v)  # (B, H, t, d_k)
        if not self.training and q.dtype == torch.float32:
            context = explicit_attention(q, k, v)  # (B, H, 1, d_k)
        else:
            context = fused_attention(q, k, v, dropout_p=self._dropout_p())
        return context, {"k": k, "v": v}

    def reorder(self, state: KernelState, rows: Tensor) -> KernelState:
        pending = state.get("rows")
        return {"k": state["k"], "v": state["v"], "rows": rows if pending is None else pending[rows]}


def gather_append(cache: Tensor, rows: Tensor | None, new: Tensor) -> Tensor:
    """``cat([cache[rows], new], dim=2)`` in one copy: (B, H, t, d), (B',), (B', H, 1, d) -> (B', H, t + 1, d).

    ``rows`` ``None`` keeps every row in place. Under autograd (which ``out=`` does not
    support), and off the CPU (where the one-copy form has not been checked), it takes the
    two copies.
    """
    if rows is None:
        return torch.cat([cache, new], dim=2)
    if cache.device.type != "cpu" or (torch.is_grad_enabled() and (cache.requires_grad or new.requires_grad)):
        return torch.cat([cache.index_select(0, rows), new], dim=2)
    batch, heads, length, width = cache.shape
    out = cache.new_empty(rows.numel(), heads, length + 1, width)
    torch.index_select(cache, 0, rows, out=out[:, :, :length])
    out[:, :, length:] = new
    return out


class MultiHeadAttention(nn.Module):
    """Projections ``W^Q, W^K, W^V`` (one fused matrix) and ``W^O`` around a kernel.

    Encoder self-attention: ``forward``; decoder self-attention: ``causal`` (training) and
    ``step`` (decoding); cross-attention: ``summarize_memory`` once per sentence, then ``cross``.
    """

    def __init__(self, d_model: int, heads: int, kernel: AttentionKernel):
        super().__init__()
        self.d_model = d_model
        self.heads = heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)  # rows: [W^Q; W^K; W^V] for all heads
        self.out_proj = nn.Linear(d_model, d_model)  # W^O
        self.kernel = kernel
        self.q_proj: nn.Linear | None = None  # set by split_in_proj (int8 inference)
        self.kv_proj: nn.Linear | None = None
        for block in self.in_proj.weight.detach().split(d_model):
            nn.init.xavier_uniform_(block)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.in_proj.bias)
        nn.init.zeros_(self.out_proj.bias)

    def _split_heads(self, projected: Tensor, parts: int) -> tuple[Tensor, ...]:
        """(B, T, parts * d_model) -> ``parts`` views (B, H, T, d_k) (a split projection's output)."""
        return _by_head(projected, parts, self.heads).unbind(0)

    def _merge_heads(self, context: Tensor) -> Tensor:
        """(B, H, T, d_k) -> Concat(heads) W^O: (B, T, d_model)."""
        batch, _, length, _ = context.shape
        return self.out_proj(context.transpose(1, 2).reshape(batch, length, self.d_model))

    def _project(self, x: Tensor, first: int, parts: int) -> tuple[Tensor, ...]:
        """Apply ``parts`` of [W^Q; W^K; W^V] starting at block ``first`` (0 = Q, 1 = K): (B, T, d) ->
        ``parts`` tensors (B, H, T, d_k).

        The product leaves the bias out; :class:`_BiasedHeads` adds it while it copies each part into
        a contiguous per-head layout, which the attention's batched products take without another
        copy (the bias would otherwise be a pass over the output of its own, and every head split a
        copy inside ``matmul``).
        """
        if self.q_proj is not None:  # split by split_in_proj: layers packed or quantized for inference
            layer = self.in_proj if parts == 3 else self.q_proj if first == 0 else self.kv_proj
            return self._split_heads(layer(x), parts)
        weight, bias = self.in_proj.weight, self.in_proj.bias
        if parts < 3:
            rows = slice(first * self.d_model, (first + parts) * self.d_model)
            weight, bias = weight[rows], bias[rows]
        project = products_of(self.in_proj)  # F.linear, or training's products (models/linear.py)
        return _BiasedHeads.apply(project(x, weight, None), bias, self.heads, parts)

    def split_in_proj(self) -> None:
        """Copy the Q rows and the K, V rows of ``in_proj`` into two Linear layers of their own.

        Cross-attention applies [W^Q] and [W^K; W^V] separately by slicing the fused weight,
        which a quantized Linear (whose weight is packed) cannot do; with the split the
        outputs are the same and every projection is a Linear module.
        """
        d = self.d_model
        self.q_proj = nn.Linear(d, d).to(self.in_proj.weight.device)
        self.kv_proj = nn.Linear(d, 2 * d).to(self.in_proj.weight.device)
        with torch.no_grad():
            self.q_proj.weight.copy_(self.in_proj.weight[:d])
            self.q_proj.bias.copy_(self.in_proj.bias[:d])
            self.kv_proj.weight.copy_(self.in_proj.weight[d:])
            self.kv_proj.bias.copy_(self.in_proj.bias[d:])

    def forward(self, x: Tensor, key_mask: Tensor) -> Tensor:
        """Non-causal self-attention: (B, T, d_model), mask (B, T) -> (B, T, d_model)."""
        q, k, v = self._project(x, first=0, parts=3)  # (B, H, T, d_k) each
        context, _ = self.kernel.read(q, self.kernel.summarize(k, v, key_mask), need_weights=False)
        return self._merge_heads(context)

    def causal(self, x: Tensor) -> Tensor:
        """Causal self-attention over a whole right-padded sequence: (B, T, d) -> (B, T, d)."""
        q, k, v = self._project(x, first=0, parts=3)
        return self._merge_heads(self.kernel.causal(q, k, v))

    def step(self, x: Tensor, state: KernelState | None) -> tuple[Tensor, KernelState]:
        """Causal self-attention for one new position: (B, 1, d) -> (B, 1, d) and the new state."""
        q, k, v = self._project(x, first=0, parts=3)  # (B, H, 1, d_k) each
        context, state = self.kernel.step(q, k, v, state)
        return self._merge_heads(context), state

    def summarize_memory(self, memory: Tensor, key_mask: Tensor) -> Summary:
        """Project encoder states to keys and values once: (B, S, d), (B, S) -> kernel summary."""
        k, v = self._project(memory, first=1, parts=2)  # (B, H, S, d_k) each
        return self.kernel.summarize(k, v, key_mask)

    def cross(self, x: Tensor, summary: Summary, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """Queries (B, T, d) attend to a summarised memory -> (B, T, d), weights (B, H, T, S) | None.

        ``summary["group"]`` (if set) says that each memory row serves that many consecutive
        query rows (the beams of a sentence): their queries are read against it at once, so
        the memory is never repeated per beam.
        """
        (q,) = self._project(x, first=0, parts=1)  # (B, H, T, d_k)
        group = summary.get("group", 1)
        if group > 1:
            q = _group_rows(q, group)  # (B / group, H, group * T, d_k)
        context, weights = self.kernel.read(q, summary, need_weights)
        if group > 1:
            context = _ungroup_rows(context, group)
            weights = None if weights is None else _ungroup_rows(weights, group)
        return self._merge_heads(context), weights


def _by_head(projected: Tensor, parts: int, heads: int) -> Tensor:
    """(B, T, parts * H * d_k) -> a view (parts, B, H, T, d_k) of the same memory."""
    batch, length, _ = projected.shape
    return projected.view(batch, length, parts, heads, -1).permute(2, 0, 3, 1, 4)


class _BiasedHeads(torch.autograd.Function):
    """``projected + bias`` split into ``parts`` contiguous tensors of heads, one copy each:
    (B, T, parts * H * d_k), (parts * H * d_k,) -> ``parts`` x (B, H, T, d_k).

    The gradient writes the parts' gradients back into the projection's layout, again one copy
    each, and sums it over the rows for the bias.
    """

    @staticmethod
    def forward(ctx, projected: Tensor, bias: Tensor, heads: int, parts: int) -> tuple[Tensor, ...]:
        ctx.bias_dtype = bias.dtype
        by_head = _by_head(projected, parts, heads)
        bias = bias.to(projected.dtype).view(parts, 1, heads, 1, -1)
        return tuple(torch.add(by_head[part], bias[part], out=projected.new_empty(by_head.shape[1:]))
                     for part in range(parts))

    @staticmethod
    def backward(ctx, *grads: Tensor):  # a part without a gradient comes as zeros (autograd materializes them)
        batch, heads, length, width = grads[0].shape
        grad_projected = grads[0].new_empty(batch, length, len(grads), heads, width)
        for part, grad in enumerate(grads):
            grad_projected[:, :, part].copy_(grad.transpose(1, 2))
        grad_projected = grad_projected.view(batch, length, -1)
        grad_bias = grad_projected.flatten(0, 1).sum(0, dtype=ctx.bias_dtype) if ctx.needs_input_grad[1] else None
        return grad_projected, grad_bias, None, None


def _group_rows(x: Tensor, group: int) -> Tensor:
    """(B, H, T, F) -> (B / group, H, group * T, F): consecutive rows become one row's queries."""
    batch, heads, length, features = x.shape
    return (x.view(batch // group, group, heads, length, features).transpose(1, 2)
            .reshape(batch // group, heads, group * length, features))


def _ungroup_rows(x: Tensor, group: int) -> Tensor:
    """The inverse of :func:`_group_rows`: (B / group, H, group * T, F) -> (B, H, T, F)."""
    blocks, heads, grouped, features = x.shape
    return (x.view(blocks, heads, group, grouped // group, features).transpose(1, 2)
            .reshape(blocks * group, heads, grouped // group, features))
