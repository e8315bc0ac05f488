"""Where the torch engine's beam-5 decoding time goes, and the ceiling the matrix products set.

The work of ``engine_ratio.py``: random-weight Transformers of the tiny (2+2 layers, d 128)
and base (6+6, d 512) shapes with an 8,000-piece vocabulary, Multi30k test2016 sources,
beam 5, batches of 32, every output forced to exactly ``LENGTH`` pieces, one thread, the
float32 engine ``nmt translate`` uses (Linear layers packed for oneDNN).

- **Parts**: wall time of one decode split by timers around the functions that do each
  part (the Linear layers, the attention read, the cache append, the log-softmax, the
  search's bookkeeping, the reorders, the encoder), each part's time exclusive of the
  parts it calls; the rest of a decoder step (embeddings, layer norms, residuals, the
  Python between them) and what lies outside the loop (batching, tokenization, building
  hypotheses) are what remains. ``torch.profiler`` is not used: it slowed the large cache
  copies of the base shape threefold, and a profile must describe the run it explains.
- **Ceiling**: the Linear layers' FLOPs (counted from the rows each one multiplied) at the
  best rate the packed product reaches on this decode's shapes: the output tokens/s a
  decode would reach if everything but those products were free. CTranslate2 float32 on
  the same work (its own ``translate_batch`` running the same decoder steps on the same
  batches, ``engine_ratio.CTranslate2Steps``) is printed beside it.
- **Kernels**: GFLOP/s of the packed product against ``nn.Linear`` (MKL) on the decoder's
  shapes, and torch's softmax against ``short_softmax`` on the short rows of early steps.

- **Real text**: the same parts for the trained tiny Transformer of ``translate_speed.py``
  (trained there or here, once) decoding all of Multi30k test2016 under that table's rule
  (at most 100 pieces, alpha 0.6, batches of 32), where sentences finish at different
  steps and leave the batch: the decoder steps and rows they hold, what a step costs when
  it holds one sentence's 5 rows (the part of a step that does not grow with its rows),
  and CTranslate2 float32 decoding the same model under the same rule; then both engines
  again with 64 and 128 sentences per batch, where that fixed cost weighs less.

``python bench/decode_profile.py``; ``--quick``: 16 sentences, tiny shape only (real text:
the quick model of ``translate_speed.py``, 100 sentences, at most 16 pieces).
"""

from __future__ import annotations

import time
from collections import Counter

import torch
from torch import nn

from common import Report, bench_arguments, fmt, repeats_of, wrapped_functions
from engine_ratio import ENGINES, LENGTH, forced_work, random_engines, shared_tokenizer
from peers.arch import DecodeSpec
from peers.ours import WARMUP_SENTENCES, decode_overrides
from translate_speed import QUICK_MAX_LENGTH, text_quality, tiny_transformer

from nmt_cli.decoding import load_translator
from nmt_cli.decoding.strategies.beam import BeamSearch
from nmt_cli.models.attention import multihead
from nmt_cli.models.attention.multihead import short_softmax
from nmt_cli.models.packed import PackedLinear

class PartTimer:
    """Exclusive wall time of nested timed calls: a part's own time, less the parts it calls."""

    def __init__(self):
        self.seconds: Counter = Counter()
        self._stack: list[list] = []  # [part, started, time of children]

    def wrap(self, part: str, function):
        def timed(*args, **kwargs):
            frame = [part, time.perf_counter(), 0.0]
            self._stack.append(frame)
            try:
                return function(*args, **kwargs)
            finally:
                self._stack.pop()
                elapsed = time.perf_counter() - frame[1]
                self.seconds[part] += elapsed - frame[2]
                if self._stack:
                    self._stack[-1][2] += elapsed
        return timed


DECODER_REST = "rest of a decoder step (embeddings, layer norms, residuals, Python)"
OUTSIDE = "outside the loop (batching, tokenization, hypotheses)"
PARTS = ("Linear layers (oneDNN packed products)", "attention read (Q K^T, softmax, P V)",
         "self-attention cache append", "log-softmax over the vocabulary", "beam search bookkeeping",
         "reorders of cache and memory", "encoder (except its Linear layers)", DECODER_REST, OUTSIDE)


def part_seconds(translator, texts: list[str]) -> tuple[Counter, float]:
    """Seconds of each of :data:`PARTS` in one decode of ``texts``, and its wall time."""
    model, timer = translator.model, PartTimer()
    linear, attention, append, log_softmax, search, reorder, encoder = PARTS[:7]
    patches = [(PackedLinear, "forward", linear), (multihead, "explicit_attention", attention),
               (multihead.SoftmaxAttention, "step", append), (BeamSearch, "advance", search),
               (type(model), "step_log_probs", log_softmax), (type(model), "decode_step", DECODER_REST),
               (type(model), "reorder_state", reorder), (type(model), "reorder_memory", reorder),
               (type(model), "encode", encoder)]
    with wrapped_functions(patches, timer.wrap):
        started = time.perf_counter()
        timer.wrap(OUTSIDE, translator.translate)(texts)
        wall = time.perf_counter() - started
    return timer.seconds, wall


def wall_seconds(translator, texts: list[str], repeats: int) -> tuple[float, list]:
    """The fastest of ``repeats`` decodes of ``texts``, and the hypotheses it produced."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        hypotheses = translator.translate(texts)
        best = min(best, time.perf_counter() - started)
    return best, hypotheses


def pieces(hypotheses: list) -> int:
    """Output pieces of a decode."""
    return sum(len(h.tokens) for h in hypotheses)


def worth(hypotheses: list, references: list[str], max_length: int) -> str:
    """A decode's BLEU and share of outputs at the length limit, for the row beside its speed."""
    measured = text_quality([h.text for h in hypotheses], [len(h.tokens) for h in hypotheses], references,
                            max_length)
    return f"BLEU {measured.bleu:.1f}, {100 * measured.at_limit:.1f}% at the limit"


def step_rows(translator, texts: list[str]) -> tuple[list[int], float]:
    """The rows of every decoder step of one beam-search decode of ``texts``, and its wall time."""
    rows: list[int] = []
    advance = BeamSearch.advance

    def counted(search, step, log_probs, attention):
        rows.append(log_probs.size(0))
        return advance(search, step, log_probs, attention)

    BeamSearch.advance = counted
    try:
        started = time.perf_counter()
        translator.translate(texts)
        return rows, time.perf_counter() - started
    finally:
        BeamSearch.advance = advance


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


REAL_TEXT = "trained tiny, real text"
ALONE_SENTENCES = 32  # decoded one at a time for the cost of a one-sentence step
LARGER_BATCHES = (64, 128)  # sentences per batch: how the gap to CTranslate2 moves with a step's rows


def real_text_rows(report: Report, args, repeats: int) -> None:
    """The parts, steps and one-sentence step cost of decoding real text with a trained model,
    and CTranslate2 float32 on the same model and rule."""
    checkpoint, source, reference = tiny_transformer(args.work, args.quick)
    texts = source.read_text(encoding="utf-8").splitlines()
    references = reference.read_text(encoding="utf-8").splitlines()
    decode = DecodeSpec(max_length=QUICK_MAX_LENGTH if args.quick else DecodeSpec.max_length)
    ours = load_translator(checkpoint, engine="torch", overrides=decode_overrides(decode))
    ctranslate2 = load_translator(checkpoint, engine="ctranslate2", quantize="float32",
                                  overrides=decode_overrides(decode))
    for translator in (ours, ctranslate2):
        translator.translate(texts[:WARMUP_SENTENCES])
    (wall, ours_out), (ctranslate2_wall, ctranslate2_out) = (
        wall_seconds(ours, texts, repeats), wall_seconds(ctranslate2, texts, repeats))
    tokens, ctranslate2_tokens = pieces(ours_out), pieces(ctranslate2_out)
    parts, timed_wall = part_seconds(ours, texts)
    for part in PARTS:
        report.add_row(REAL_TEXT, part, f"{parts[part]:.3f}", f"{parts[part] / timed_wall:.0%}", "")
    report.add_row(REAL_TEXT, "whole decode", f"{wall:.3f}", "100%",
                   f"{fmt(tokens / wall)} out tok/s, {fmt(tokens)} pieces, "
                   f"{worth(ours_out, references, decode.max_length)} (with the timers: {timed_wall:.3f} s)")
    rows, _ = step_rows(ours, texts)
    full = decode.beam * decode.batch_sentences
    report.add_row(REAL_TEXT, "decoder steps", "", "",
                   f"{len(rows):,} steps holding {sum(rows) / len(rows):.0f} of {full} rows on average; "
                   f"{sum(r <= full // 4 for r in rows) / len(rows):.0%} of them {full // 4} rows or fewer")
    alone = load_translator(checkpoint, engine="torch", overrides=decode_overrides(
        DecodeSpec(max_length=decode.max_length, batch_sentences=1)))
    first = texts[:ALONE_SENTENCES]
    alone.translate(first)  # warm-up
    alone_rows, alone_wall = step_rows(alone, first)
    per_step = alone_wall / len(alone_rows)
    report.add_row(REAL_TEXT, "every step at the cost of a one-sentence step", f"{per_step * len(rows):.3f}",
                   f"{per_step * len(rows) / wall:.0%}",
                   f"{per_step * 1e3:.2f} ms per step of {decode.beam} rows, times {len(rows):,} steps")
    report.add_row(REAL_TEXT, "CTranslate2 float32, same model and rule", f"{ctranslate2_wall:.3f}",
                   f"{ctranslate2_wall / wall:.0%}",
                   f"{fmt(ctranslate2_tokens / ctranslate2_wall)} out tok/s, {fmt(ctranslate2_tokens)} pieces, "
                   f"{worth(ctranslate2_out, references, decode.max_length)}")
    for sentences in LARGER_BATCHES:
        larger = decode_overrides(DecodeSpec(max_length=decode.max_length, batch_sentences=sentences))
        engines = [ours.with_decode(larger), ctranslate2.with_decode(larger)]  # the loaded models, other batches
        for translator in engines:
            translator.translate(texts[:WARMUP_SENTENCES])
        (torch_wall, torch_out), (ct2_wall, ct2_out) = (wall_seconds(e, texts, repeats) for e in engines)
        torch_pieces, ct2_pieces = pieces(torch_out), pieces(ct2_out)
        torch_rate, ct2_rate = torch_pieces / torch_wall, ct2_pieces / ct2_wall
        report.add_row(REAL_TEXT, f"the same decode in batches of {sentences} sentences", f"{torch_wall:.3f}",
                       f"{torch_wall / wall:.0%}",
                       f"{fmt(torch_rate)} out tok/s, {fmt(torch_pieces)} pieces, "
                       f"{worth(torch_out, references, decode.max_length)}; CTranslate2 float32 {fmt(ct2_rate)} "
                       f"({ct2_wall:.3f} s), {fmt(ct2_pieces)} pieces, "
                       f"{worth(ct2_out, references, decode.max_length)}: torch at {torch_rate / ct2_rate:.2f}x")
    report.notes.append(
        f"real text: the trained tiny Transformer of translate_speed.py on Multi30k test2016, beam {decode.beam}, at "
        f"most {decode.max_length} pieces, GNMT alpha {decode.alpha}, batches of {decode.batch_sentences}, one "
        f"worker; warm-up on the first {WARMUP_SENTENCES} sentences; a one-sentence step: the wall time of decoding "
        f"the first {ALONE_SENTENCES} sentences one at a time ({decode.beam} rows a step; encoding included) over "
        "the steps it took; larger batches: the same rule with more sentences per batch, for both engines, so "
        "a step's fixed cost is spread over more rows (the equal-work translation table has batches of 32 and of 64)")


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    args = parser.parse_args()
    repeats = repeats_of(args)
    tokenizer = shared_tokenizer()
    report = Report("decode_profile", "Where beam-5 decoding time goes (torch float32 engine, 1 thread)",
                    ["shape", "part", "seconds", "share", "note"], quick=args.quick)
    kernels = []
    for shape, model_config, texts in forced_work(args.quick):
        engines = random_engines(model_config, tokenizer,
                                 [e for e in ENGINES if e[0] in ("torch fp32", "CTranslate2 float32")])
        ours, ctranslate2 = engines["torch fp32"], engines["CTranslate2 float32"]
        for translator in engines.values():
            translator.translate(texts[:8])  # warm-up
        tokens = len(texts) * LENGTH
        (wall, ours_out), (ctranslate2_wall, ctranslate2_out) = (
            wall_seconds(ours, texts, repeats), wall_seconds(ctranslate2, texts, repeats))
        assert pieces(ours_out) == pieces(ctranslate2_out) == tokens, "every output must have the forced length"
        parts, timed_wall = part_seconds(ours, texts)
        for part in PARTS:
            report.add_row(shape, part, f"{parts[part]:.3f}", f"{parts[part] / timed_wall:.0%}", "")
        report.add_row(shape, "whole decode", f"{wall:.3f}", "100%",
                       f"{fmt(tokens / wall)} out tok/s (with the timers: {timed_wall:.3f} s)")
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
    real_text_rows(report, args, repeats)
    for shape, (rows, inputs, outputs), (mkl, packed) in kernels:
        report.add_row(shape, f"kernel: {rows} x {inputs} -> {outputs} product", "", "",
                       f"nn.Linear (MKL) {mkl:.0f} GFLOP/s, packed (oneDNN) {packed:.0f} GFLOP/s")
    for length in (4, 12, 40):
        plain, short = softmax_microseconds(160, length)
        report.add_row("-", f"kernel: softmax of 160 x 4 rows of {length}", "", "",
                       f"torch {plain:.0f} us, short_softmax {short:.0f} us")
    report.notes += [
        f"random weights, 8,000-piece joint vocabulary; every output exactly {LENGTH} pieces; beam 5, batches of "
        f"32; whole decode: fastest of {repeats} run(s) after a warm-up; parts: one more run with the timers, "
        "shares of that run's wall time",
        "the ceiling row assumes every other part costs nothing; its share is of the whole decode",
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
