"""Decoding cost per step against output length: cache, no cache, linear attention.

One sentence (batch 1) is decoded greedily by the project's generation loop with random
weights on two CPU threads, forced to emit exactly N tokens: ``decode.min_len = N``
forbids EOS and the maximum length ``0 * |x| + N`` forces it. The figure is the whole
decode's time divided by N, for N = 64, 128, ..., 8192 (``--quick``: up to 512).

* Transformer with the key/value cache: step t attends to t cached keys, so the time
  per step grows with the length once attention outweighs the feed-forward layers.
* Transformer without the cache: step t re-runs the decoder over the whole prefix, so
  the time per step grows linearly (the whole decode quadratically).
* Linear Transformer in RNN mode (``linear_sites: decoder_self``): step t updates the
  sums ``S_t = S_{t-1} + phi(k_t) v_t^T`` and ``Z_t = Z_{t-1} + phi(k_t)`` and reads
  ``phi(q_t)^T S_t / phi(q_t)^T Z_t``, a constant cost: the time per step stays flat.

The last row gives the ratio of the last to the first length's time per step.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch
from common import THREADS, Report, bench_arguments, fmt, repeats_of

from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.decoding import generate
from nmt_cli.models import Seq2SeqModel, build_model

LENGTHS = [64 * 2**i for i in range(8)]  # 64 .. 8192
QUICK_LENGTHS = [64, 128, 256, 512]
SOURCE_LENGTH = 20
REPEAT_SECONDS = 20.0
VOCAB = 8000
VARIANTS = {  # column -> (architecture, use the key/value cache)
    "transformer + cache": ("transformer", True),
    "transformer, no cache": ("transformer", False),
    "linear transformer (RNN mode)": ("linear_transformer", True),
}


def build(arch: str, use_cache: bool, sizes: ModelConfig) -> Seq2SeqModel:
    torch.manual_seed(0)
    model = build_model(replace(sizes, arch=arch, linear_sites=("decoder_self",)), VOCAB, VOCAB, True).eval()
    model.use_cache = use_cache
    return model


def ms_per_step(model: Seq2SeqModel, length: int, repeats: int) -> float:
    """Fastest of ``repeats`` forced decodes of exactly ``length`` tokens, in ms per token.

    A decode that takes longer than :data:`REPEAT_SECONDS` is not repeated: timer noise
    is negligible at that scale and the quadratic no-cache decodes would take hours.
    """
    source = torch.randint(4, VOCAB, (SOURCE_LENGTH,), generator=torch.Generator().manual_seed(1)).tolist()
    decode = DecodeConfig(beam_size=1, min_len=length, max_len_a=0.0, max_len_b=length)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        (hypothesis,) = generate(model, [source], decode)
        best = min(best, time.perf_counter() - started)
        if len(hypothesis.tokens) != length:
            raise RuntimeError(f"expected {length} tokens, decoded {len(hypothesis.tokens)}")
        if best > REPEAT_SECONDS:
            break
    return 1000 * best / length


def measure(lengths: list[int], sizes: ModelConfig, repeats: int, no_cache_max: int) -> dict[str, list[float]]:
    """Column -> ms/step at each length (the no-cache column stops after ``no_cache_max``)."""
    table = {}
    for column, (arch, use_cache) in VARIANTS.items():
        model = build(arch, use_cache, sizes)
        ms_per_step(model, 8, 1)  # warm-up: first-call allocations
        limit = lengths[-1] if use_cache else no_cache_max
        table[column] = [ms_per_step(model, length, repeats) for length in lengths if length <= limit]
    return table


def cell(times: list[float], lengths: list[int], row: int) -> str:
    """ms/step at ``lengths[row]``, or the estimated time of the whole decode when it was not run.

    Without the cache the time per step grows linearly with the length, so the whole
    decode grows with its square: estimated from the longest length measured.
    """
    if row < len(times):
        return fmt(times[row], 3)
    measured = len(times) - 1
    seconds = times[measured] * lengths[measured] / 1000 * (lengths[row] / lengths[measured]) ** 2
    return f"not run (~{seconds / 60:.0f} min)"


def growth(times: list[float], lengths: list[int]) -> str:
    """Time per step at the longest length measured over that at the shortest."""
    ratio = f"{times[-1] / times[0]:.2f}x"
    if len(times) == len(lengths):
        return ratio
    return f"{ratio} ({fmt(lengths[len(times) - 1])} / {lengths[0]})"


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn-dim", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=3, help="encoder and decoder layers")
    parser.add_argument("--threads", type=int, default=THREADS, help="torch CPU threads")
    parser.add_argument("--no-cache-max", type=int, default=4096,
                        help="longest output decoded without the cache (its cost is quadratic)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = ModelConfig(d_model=args.d_model, heads=args.heads, ffn_dim=args.ffn_dim, dropout=0.0,
                        encoder_layers=args.layers, decoder_layers=args.layers)
    lengths = QUICK_LENGTHS if args.quick else LENGTHS
    table = measure(lengths, sizes, repeats_of(args), args.no_cache_max)

    report = Report("decode_length", "Decoding time per step (ms) against output length", ["output length",
                    *VARIANTS], quick=args.quick, versions={"torch": torch.__version__})
    for row, length in enumerate(lengths):
        report.add_row(fmt(length), *(cell(table[column], lengths, row) for column in VARIANTS))
    report.add_row(f"{lengths[-1]} / {lengths[0]}", *(growth(table[column], lengths) for column in VARIANTS))
    report.notes += [
        f"Random weights, d_model {args.d_model}, {args.heads} heads, FFN {args.ffn_dim}, {args.layers}+{args.layers} "
        f"layers, vocabulary {VOCAB}, source of {SOURCE_LENGTH} tokens, batch 1, greedy, {args.threads} CPU threads.",
        "Each decode is forced to exactly N tokens (EOS forbidden before N, forced at N); the figure is the "
        f"whole decode's time over N, fastest of the repeats (a decode over {REPEAT_SECONDS} s runs once).",
        f"Without the cache, outputs longer than {fmt(args.no_cache_max)} tokens are not decoded "
        "(--no-cache-max): the whole decode grows with the square of the length; the cell estimates its time.",
    ]
    report.emit(args.json)
    return table


if __name__ == "__main__":
    main()
