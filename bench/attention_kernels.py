"""Training attention on a CPU: the fused kernel against explicit products, by key length and head size.

For each head shape of the models ``train_speed.py`` trains (the tiny Transformer's 4 heads of
32, the base's 8 heads of 64) and each sentence length ``L``, a batch of about 2,048 tokens
(``2048 // L`` sentences of ``L`` tokens) runs self-attention forward and backward, as a
training step does: queries, keys and values are head-split views of one fused projection, as
in ``MultiHeadAttention``. Each length is timed with a key mask (encoder self-attention and
cross-attention: sentences of ``L/3`` to ``L`` real tokens) and causally (the decoder), through

* ``fused``: ``torch.nn.functional.scaled_dot_product_attention``;
* ``explicit``: :func:`nmt_cli.models.attention.multihead.explicit_attention`, two batched
  products and a softmax.

The last column says which one ``SoftmaxAttention`` takes at that length
(``EXPLICIT_MAX_KEYS``) and whether it is the faster one measured here: the table is the evidence
for that constant. ``--quick``: two lengths, one repeat.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from common import THREADS, Report, bench_arguments, fmt, load_averages, repeats_of, shared_load_note

from nmt_cli.models.attention import multihead
from nmt_cli.models.attention.multihead import MultiHeadAttention, SoftmaxAttention, causal_bias, explicit_attention

TOKENS = 2048  # a batch's tokens, train_speed.py's max_tokens
HEAD_SHAPES = ((4, 32, "tiny"), (8, 64, "base"))  # heads, d_k, the model they come from
LENGTHS = (8, 16, 24, 32, 48, 64, 96, 128)
QUICK_LENGTHS = (16, 128)  # one on each side of EXPLICIT_MAX_KEYS
CALLS = 30  # forward + backward passes timed per repeat, after 5 untimed ones


def attention_inputs(heads: int, d_k: int, length: int, generator: torch.Generator):
    """The fused projection (B, L, 3 H d_k) a batch's attention starts from, its key mask
    (B, L) and the upstream gradient of the context (B, H, L, d_k)."""
    batch = max(1, TOKENS // length)
    projected = torch.randn(batch, length, 3 * heads * d_k, generator=generator).requires_grad_()
    lengths = torch.randint(max(1, length // 3), length + 1, (batch,), generator=generator)
    lengths[0] = length
    key_mask = torch.arange(length)[None, :] < lengths[:, None]
    upstream = torch.randn(batch, heads, length, d_k, generator=generator)
    return projected, key_mask, upstream


def kernels(heads: int, key_mask: torch.Tensor, causal: bool):
    """The two ways to compute the attention of a projected batch, as functions of it; the heads
    are split and the padding bias built by the model's own code."""
    split_heads = MultiHeadAttention(1, heads, SoftmaxAttention())._split_heads  # uses only the head count
    summary = SoftmaxAttention().summarize(key_mask.float(), key_mask.float(), key_mask)
    mask, bias = summary["mask"], summary["bias"]

    def fused(projected):
        q, k, v = split_heads(projected, 3)
        if causal:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def explicit(projected):
        q, k, v = split_heads(projected, 3)
        return explicit_attention(q, k, v, causal_bias(q.size(2), q) if causal else bias)

    return {"fused": fused, "explicit": explicit}


def milliseconds(function, projected: torch.Tensor, upstream: torch.Tensor, calls: int) -> float:
    """Mean wall milliseconds of one forward and backward pass."""
    for _ in range(5):
        function(projected).backward(upstream)
    started = time.perf_counter()
    for _ in range(calls):
        function(projected).backward(upstream)
    return (time.perf_counter() - started) / calls * 1e3


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=THREADS, help=f"torch threads (default {THREADS})")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    report = Report("attention_kernels", f"Training attention kernels by key length ({args.threads} CPU thread"
                    f"{'s' if args.threads > 1 else ''})",
                    ["heads x d_k", "keys (L)", "sentences", "attention", "fused ms", "explicit ms",
                     "explicit / fused", "SoftmaxAttention takes"], quick=args.quick)
    load_before = load_averages()
    generator = torch.Generator().manual_seed(0)
    calls, picked_slower = 3 if args.quick else CALLS, []
    for heads, d_k, model in HEAD_SHAPES:
        for length in QUICK_LENGTHS if args.quick else LENGTHS:
            projected, key_mask, upstream = attention_inputs(heads, d_k, length, generator)
            for kind in ("masked", "causal"):
                functions = kernels(heads, key_mask, causal=kind == "causal")
                times = {name: [] for name in functions}
                for _ in range(repeats_of(args)):  # the kernels alternate, so a change of load hits both
                    for name, function in functions.items():
                        times[name].append(milliseconds(function, projected, upstream, calls))
                fused, explicit = (statistics.median(times[name]) for name in ("fused", "explicit"))
                takes = "explicit" if length <= multihead.EXPLICIT_MAX_KEYS else "fused"
                faster = "explicit" if explicit < fused else "fused"
                if takes != faster:
                    picked_slower.append(f"{model} L {length} {kind}")
                report.add_row(f"{heads} x {d_k} ({model})", str(length), fmt(projected.size(0)), kind,
                               f"{fused:.2f}", f"{explicit:.2f}", f"{explicit / fused:.2f}",
                               takes + ("" if takes == faster else " (the slower here)"))
    report.notes += [
        f"Each figure: mean milliseconds of one forward and backward pass over {calls} passes after 5 untimed "
        f"ones, median of {repeats_of(args)} repeat(s), the two kernels alternating; float32, batches of "
        f"about {TOKENS:,} tokens.",
        f"SoftmaxAttention takes the explicit kernel for keys up to EXPLICIT_MAX_KEYS = "
        f"{multihead.EXPLICIT_MAX_KEYS} on a CPU (float32 and float64), the fused one beyond. Where that was "
        "the slower one here: " + (", ".join(picked_slower) if picked_slower else "nowhere") + ".",
        shared_load_note(load_before),
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
