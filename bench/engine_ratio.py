"""Decoding engines on identical work: torch fp32 / int8 against CTranslate2 float32 / int8, one thread.

One process, one random-weight Transformer per shape (tiny: 2+2 layers, d 128; base: 6+6,
d 512) with a real 8,000-piece SentencePiece vocabulary trained on Multi30k, exported to
CTranslate2 by ``nmt export``'s code. Every engine decodes the same Multi30k test2016
sentences in the same batches of 32 with beam 5 and runs ``LENGTH + 1`` decoder steps per
batch, so the work is identical whatever the weights say: the torch engine emits exactly
``LENGTH`` pieces (EOS blocked before, forced at the limit, which takes one more step), and
CTranslate2's ``translate_batch`` is asked for exactly ``LENGTH + 1`` pieces. CTranslate2 is
called directly: ``nmt translate``'s ctranslate2 engine re-scores every output cut at the limit
with ``score_batch`` (to add ``log p(EOS)`` as our search does), work the torch engine does
not do, which forced lengths would put on every output. Time is the process CPU time of one
decode (robust on a shared machine), after a warm-up; the figure is the fastest of
``--repeats`` runs, engines interleaved. Each engine is compared with CTranslate2 at its own
weight type (float32 with float32, int8 with int8).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from common import MULTI30K, Report, bench_arguments, fmt, repeats_of

from nmt_cli.allocator import keep_freed_memory
from nmt_cli.checkpoint import save_checkpoint
from nmt_cli.config import Config, ModelConfig
from nmt_cli.decoding import load_translator
from nmt_cli.decoding.batching import token_budget_batches
from nmt_cli.export import export_ctranslate2, require_ctranslate2
from nmt_cli.models import build_model
from nmt_cli.tokenization import Tokenizer, train_sentencepiece

LENGTH = 30
SHAPES = {
    "tiny": (ModelConfig(d_model=128, heads=4, ffn_dim=512, encoder_layers=2, decoder_layers=2, dropout=0.0), 200),
    "base": (ModelConfig(d_model=512, heads=8, ffn_dim=2048, encoder_layers=6, decoder_layers=6, dropout=0.0), 48),
}
BEAM, BATCH_SENTENCES = 5, 32
#: (row name, engine, weight type, the row its ratio is taken against)
ENGINES = (("torch fp32", "torch", None, "CTranslate2 float32"),
           ("torch int8", "torch", "int8", "CTranslate2 int8"),
           ("CTranslate2 float32", "ctranslate2", "float32", "CTranslate2 float32"),
           ("CTranslate2 int8", "ctranslate2", "int8", "CTranslate2 int8"))


@dataclass
class ForcedOutput:
    """One output of :class:`CTranslate2Steps`: its first ``LENGTH`` pieces."""

    tokens: list[str]


class CTranslate2Steps:
    """CTranslate2's beam search on the batches the torch engine forms, ``LENGTH + 1`` pieces per
    output: the torch engine's ``LENGTH`` pieces and the step that forces its EOS, whose piece
    is left out of the output so that both engines return ``LENGTH`` pieces."""

    def __init__(self, export_dir: Path, tokenizer: Tokenizer, weights: str):
        self.tokenizer = tokenizer
        self.translator = require_ctranslate2().Translator(str(export_dir), device="cpu", compute_type=weights,
                                                           inter_threads=1, intra_threads=1)

    def translate(self, texts: list[str]) -> list[ForcedOutput]:
        sources = [self.tokenizer.src_pieces(self.tokenizer.encode_src(text)) for text in texts]
        outputs: list[ForcedOutput | None] = [None] * len(texts)
        for batch in token_budget_batches([len(source) for source in sources], 10**9, BATCH_SENTENCES):
            results = self.translator.translate_batch(
                [sources[i] for i in batch], beam_size=BEAM, max_decoding_length=LENGTH + 1,
                min_decoding_length=LENGTH + 1, max_input_length=0)
            for index, result in zip(batch, results):
                pieces = result.hypotheses[0]
                assert len(pieces) == LENGTH + 1, "CTranslate2 must run every decoder step"
                outputs[index] = ForcedOutput(pieces[:LENGTH])
        return outputs


def cpu_seconds(engine, texts: list[str]) -> float:
    """Process CPU time of one decode of ``texts``, checked to have done the forced work (an
    engine's outputs are hypotheses, or lists of pieces)."""
    started = time.process_time()
    outputs = engine.translate(texts)
    elapsed = time.process_time() - started
    lengths = [len(output) if isinstance(output, list) else len(output.tokens) for output in outputs]
    assert all(length == LENGTH for length in lengths), "every output must have the forced length"
    return elapsed


def interleaved_cpu_runs(engines: dict, texts: list[str], repeats: int) -> dict[str, list[float]]:
    """``name -> CPU seconds of each run``: every engine warmed up on the first texts (untimed),
    then ``repeats`` rounds that decode ``texts`` with each engine in turn, so a slow spell hits all."""
    for engine in engines.values():
        engine.translate(texts[:8])
    runs = {name: [] for name in engines}
    for _ in range(repeats):
        for name, engine in engines.items():
            runs[name].append(cpu_seconds(engine, texts))
    return runs


def read_multi30k(name: str, count: int) -> list[str]:
    return (MULTI30K / name).read_text(encoding="utf-8").splitlines()[:count]


def shared_tokenizer() -> Tokenizer:
    """The 8,000-piece joint SentencePiece model every shape uses, trained on Multi30k."""
    return Tokenizer(train_sentencepiece(read_multi30k("train.de", 20000) + read_multi30k("train.en", 20000),
                                         vocab_size=8000))


#: the torch engine's rule: beam 5, batches of 32, every output exactly LENGTH pieces
FORCED_LENGTH = {f"decode.{key}": value for key, value in {
    "beam_size": BEAM, "max_len_a": 0, "max_len_b": LENGTH, "min_len": LENGTH, "max_sentences": BATCH_SENTENCES,
    "max_tokens": 10**9}.items()}


def random_engines(model_config: ModelConfig, tokenizer: Tokenizer, engines=ENGINES) -> dict:
    """A random-weight model of ``model_config`` loaded by each of ``engines``: the torch engine
    under :data:`FORCED_LENGTH`, CTranslate2 as :class:`CTranslate2Steps` on its export."""
    torch.manual_seed(0)
    model = build_model(model_config, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, True)
    loaded = {}
    with tempfile.TemporaryDirectory() as scratch:
        checkpoint = save_checkpoint(Path(scratch) / "step-00000001", model.state_dict(),
                                     Config(model=model_config), tokenizer, {"step": 1})
        for name, engine, weights, _ in engines:
            if engine == "torch":
                loaded[name] = load_translator(checkpoint, quantize=weights, overrides=FORCED_LENGTH)
            else:
                exported = export_ctranslate2(checkpoint, Path(scratch) / name.replace(" ", "-"), weights)
                loaded[name] = CTranslate2Steps(exported, tokenizer, weights)
    return loaded


def forced_work(quick: bool):
    """Set this process to one thread; yield (shape, model config, sources) of every shape measured
    (``--quick``: the tiny shape on 16 sentences)."""
    torch.set_num_threads(1)
    keep_freed_memory()
    for shape, (model_config, sentences) in SHAPES.items():
        if quick and shape == "base":
            continue
        yield shape, model_config, read_multi30k("test2016.de", 16 if quick else sentences)


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    args = parser.parse_args()
    repeats = repeats_of(args)
    tokenizer = shared_tokenizer()
    report = Report("engine_ratio", "Decoding engines on identical work (beam 5, 1 thread, forced length)",
                    ["shape", "engine", "out tok/s (CPU time)", "sent/s (CPU time)", "vs CTranslate2, same weights"],
                    quick=args.quick)
    for shape, model_config, texts in forced_work(args.quick):
        engines = random_engines(model_config, tokenizer)
        runs = interleaved_cpu_runs(engines, texts, repeats)
        sentences = {name: len(texts) / min(seconds) for name, seconds in runs.items()}
        for name, _, _, base in ENGINES:
            report.add_row(shape, name, fmt(sentences[name] * LENGTH), fmt(sentences[name]),
                           f"{sentences[name] / sentences[base]:.2f}x")
    report.notes += [
        f"random weights, 8,000-piece joint vocabulary; Multi30k test2016 sources (tiny: 200, base: 48); beam "
        f"{BEAM}, the same batches of {BATCH_SENTENCES}, 1 thread; every engine runs {LENGTH + 1} decoder steps per "
        f"batch: the torch engine emits exactly {LENGTH} pieces and forces EOS at the next step, CTranslate2's "
        f"translate_batch emits exactly {LENGTH + 1}; out tok/s counts {LENGTH} pieces per sentence for both; "
        f"fastest of {repeats} run(s), process CPU time of a decode after a warm-up",
        "CTranslate2 called directly (no re-scoring of outputs cut at the limit, which nmt translate's "
        "ctranslate2 engine adds and the torch engine does not do); output quality is not a column: random "
        "weights and forced lengths make every output equally meaningless, and the same lengths",
        "forced lengths keep every batch full to the last step, so this compares the cost of full decoding steps; "
        "on real text (the equal-work translation table) batches shrink as sentences finish, the torch engine's "
        "fixed cost per step (decode_profile) weighs more, and the ranking can turn",
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
