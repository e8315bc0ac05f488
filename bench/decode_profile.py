"""Where the torch engine's beam-5 decoding time goes, and the ceiling the matrix products set.

The work of ``engine_ratio.py``: random-weight Transformers of the tiny (2+2 layers, d 128)
and base (6+6, d 512) shapes with an 8,000-piece vocabulary, Multi30k test2016 sources,
beam 5, batches of 32, every output forced to exactly ``LENGTH`` pieces, one thread, the
float32 engine ``nmt translate`` uses (Linear layers packed for oneDNN).

- **Parts**: the self CPU time of torch's operations under ``torch.profiler``, grouped by
  what they do; *Python and dispatch* is the unprofiled wall time minus all of it (the
  interpreter, argument parsing, allocation outside kernels).
- **Ceiling**: the Linear layers' FLOPs (counted from the rows each one multiplied) at the
  best rate the packed product reaches on this decode's shapes: the output tokens/s a
  decode would reach if everything but those products were free. CTranslate2 float32 on
  the same work is printed beside it.
- **Kernels**: GFLOP/s of the packed product against ``nn.Linear`` (MKL) on the decoder's
  shapes, and torch's softmax against ``short_softmax`` on the short rows of early steps.

``python bench/decode_profile.py``; ``--quick``: 16 sentences, tiny shape only.
"""

from __future__ import annotations

import time
from collections import Counter

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from common import Report, bench_arguments, fmt, repeats_of
from engine_ratio import ENGINES, LENGTH, SHAPES, random_engines, read_multi30k, shared_tokenizer

from nmt_cli.allocator import keep_freed_memory
from nmt_cli.models.attention.multihead import short_softmax
from nmt_cli.models.packed import PackedLinear

#: torch operations by the part of a decoding step they do; the rest is "other operations"
PARTS = {
    "Linear layers (oneDNN packed products)": {"mkldnn::_linear_pointwise", "aten::addmm", "aten::mm"},
    "attention products (Q K^T, P V)": {"aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product_flash_attention_for_cpu"},
    "softmax and log-softmax": {"aten::_log_softmax", "aten::_softmax", "aten::exp_", "aten::exp", "aten::amax",
                                "aten::div_", "aten::sub"},
    "cache: append (cat) and beam reorder (index_select)": {"aten::cat", "aten::index_select"},
    "beam search (top-k, gathers, masks)": {"aten::topk", "aten::gather", "aten::index", "aten::remainder",
                                            "aten::div", "aten::eq", "aten::isfinite", "aten::nonzero",
                                            "aten::masked_fill_", "aten::where", "aten::sort"},
}
OTHER, INTERPRETER = "other operations (layer norm, residuals, activations, copies)", "Python and dispatch"


def wall_seconds(translator, texts: list[str], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        hypotheses = translator.translate(texts)
        best = min(best, time.perf_counter() - started)
    assert all(len(h.tokens) == LENGTH for h in hypotheses), "every output must have the forced length"
    return best


def part_seconds(translator, texts: list[str]) -> Counter:
    """Self CPU seconds of the profiled decode's operations, by part."""
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        translator.translate(texts)
    parts: Counter = Counter()
    for event in profiler.key_averages():
        part = next((name for name, ops in PARTS.items() if event.key in ops), OTHER)
        parts[part] += event.self_cpu_time_total / 1e6
    return parts


def linear_flops(model: nn.Module, translator, texts: list[str]) -> tuple[int, list[tuple[int, int, int]]]:
    """FLOPs of the packed Linear layers in one decode of ``texts``, and the four (rows, in, out)
    shapes that carry most of them."""
    shapes: Counter = Counter()

    def count(module: PackedLinear, inputs, output) -> None:
        rows = inputs[0].numel() // module.in_features
        shapes[(rows, module.in_features, module.out_features)] += 2 * rows * module.in_features * module.out_features

    hooks = [module.register_forward_hook(count) for module in model.modules() if isinstance(module, PackedLinear)]
    try:
        translator.translate(texts)
    finally:
        for hook in hooks:
            hook.remove()
    return sum(shapes.values()), [shape for shape, _ in shapes.most_common(4)]


def gflops(function, flops: int, repeats: int = 50) -> float:
    function()
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(repeats):
            function()
        best = min(best, (time.perf_counter() - started) / repeats)
    return flops / best / 1e9


def kernel_rates(shape: tuple[int, int, int]) -> tuple[float, float]:
    """GFLOP/s of ``nn.Linear`` (MKL) and of :class:`PackedLinear` on (rows, in, out)."""
    rows, inputs, outputs = shape
    linear = nn.Linear(inputs, outputs).eval()
    packed = PackedLinear(linear)
    x = torch.randn(rows, inputs)
    flops = 2 * rows * inputs * outputs
    with torch.no_grad():
        return gflops(lambda: linear(x), flops), gflops(lambda: packed(x), flops)


def softmax_microseconds(rows: int, length: int) -> tuple[float, float]:
    scores = torch.randn(rows, 4, 1, length)
    times = []
    for function in (lambda: scores.softmax(dim=-1), lambda: short_softmax(scores)):
        function()
        started = time.perf_counter()
        for _ in range(2000):
            function()
        times.append((time.perf_counter() - started) / 2000 * 1e6)
    return times[0], times[1]


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    args = parser.parse_args()
    torch.set_num_threads(1)
    keep_freed_memory()
    repeats = repeats_of(args)
    tokenizer = shared_tokenizer()
    report = Report("decode_profile", "Where beam-5 decoding time goes (torch float32 engine, 1 thread)",
                    ["shape", "part", "seconds", "share", "note"], quick=args.quick)
    kernels = []
    for shape, (model_config, sentences) in SHAPES.items():
        if args.quick and shape == "base":
            continue
        texts = read_multi30k("test2016.de", 16 if args.quick else sentences)
        engines = random_engines(model_config, tokenizer, [e for e in ENGINES if e[0] in ("torch fp32", "CTranslate2 float32")])
        ours, ctranslate2 = engines["torch fp32"], engines["CTranslate2 float32"]
        for translator in engines.values():
            translator.translate(texts[:8])  # warm-up
        tokens = len(texts) * LENGTH
        wall = wall_seconds(ours, texts, repeats)
        ctranslate2_wall = wall_seconds(ctranslate2, texts, repeats)
        parts = part_seconds(ours, texts)
        parts[INTERPRETER] = max(0.0, wall - sum(parts.values()))
        for part in [*PARTS, OTHER, INTERPRETER]:
            report.add_row(shape, part, f"{parts[part]:.3f}", f"{parts[part] / wall:.0%}", "")
        report.add_row(shape, "whole decode", f"{wall:.3f}", "100%", f"{fmt(tokens / wall)} out tok/s")
        flops, shapes = linear_flops(ours.model, ours, texts)
        rates = [kernel_rates(linear_shape) for linear_shape in shapes]
        best_packed = max(packed for _, packed in rates)
        kernels += [(shape, linear_shape, rate) for linear_shape, rate in zip(shapes, rates)]
        products = flops / (best_packed * 1e9)
        report.add_row(shape, "ceiling: Linear FLOPs at the packed product's best rate, nothing else",
                       f"{products:.3f}", f"{products / wall:.0%}",
                       f"{fmt(tokens / products)} out tok/s ({flops / 1e9:.2f} GFLOP at {best_packed:.0f} GFLOP/s)")
        report.add_row(shape, "CTranslate2 float32, same work", f"{ctranslate2_wall:.3f}",
                       f"{ctranslate2_wall / wall:.0%}", f"{fmt(tokens / ctranslate2_wall)} out tok/s")
    for shape, (rows, inputs, outputs), (mkl, packed) in kernels:
        report.add_row(shape, f"kernel: {rows} x {inputs} -> {outputs} product", "", "",
                       f"nn.Linear (MKL) {mkl:.0f} GFLOP/s, packed (oneDNN) {packed:.0f} GFLOP/s")
    for length in (4, 12, 40):
        plain, short = softmax_microseconds(160, length)
        report.add_row("-", f"kernel: softmax of 160 x 4 rows of {length}", "", "",
                       f"torch {plain:.0f} us, short_softmax {short:.0f} us")
    report.notes += [
        f"random weights, 8,000-piece joint vocabulary; every output exactly {LENGTH} pieces; beam 5, batches of "
        f"32; seconds: fastest of {repeats} unprofiled run(s) after a warm-up (parts: one profiled run)",
        "parts group operations by name: amax serves both short_softmax and the search's block maxima; "
        "index_select reorders the cache and gathers the memory for new beams",
        "share: of the torch engine's whole decode; the ceiling row assumes every other part costs nothing",
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
