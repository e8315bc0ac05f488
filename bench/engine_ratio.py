"""Decoding engines on identical work: torch fp32 / int8 against CTranslate2 float32 / int8, one thread.

One process, one random-weight Transformer per shape (tiny: 2+2 layers, d 128; base: 6+6,
d 512) with a real 8,000-piece SentencePiece vocabulary trained on Multi30k, exported to
CTranslate2 by ``nmt export``'s code. Every engine decodes the same Multi30k test2016
sentences with beam 5, batches of 32 and every output forced to exactly ``LENGTH`` pieces
(EOS blocked before, forced at the limit), so the work is identical whatever the weights
say. Time is the process CPU time of ``translate`` (robust on a shared machine), after a
warm-up; the figure is the fastest of ``--repeats`` runs, engines interleaved.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from common import MULTI30K, Report, bench_arguments, fmt, repeats_of

from nmt_cli.allocator import keep_freed_memory
from nmt_cli.checkpoint import save_checkpoint
from nmt_cli.config import Config, ModelConfig
from nmt_cli.decoding import load_translator
from nmt_cli.models import build_model
from nmt_cli.tokenization import Tokenizer, train_sentencepiece

LENGTH = 30
SHAPES = {
    "tiny": (ModelConfig(d_model=128, heads=4, ffn_dim=512, encoder_layers=2, decoder_layers=2, dropout=0.0), 200),
    "base": (ModelConfig(d_model=512, heads=8, ffn_dim=2048, encoder_layers=6, decoder_layers=6, dropout=0.0), 48),
}
ENGINES = (("torch fp32", "torch", None), ("torch int8", "torch", "int8"),
           ("CTranslate2 float32", "ctranslate2", "float32"), ("CTranslate2 int8", "ctranslate2", "int8"))


def cpu_seconds(translator, texts: list[str]) -> float:
    started = time.process_time()
    hypotheses = translator.translate(texts)
    elapsed = time.process_time() - started
    assert all(len(h.tokens) == LENGTH for h in hypotheses), "every output must have the forced length"
    return elapsed


def read_multi30k(name: str, count: int) -> list[str]:
    return (MULTI30K / name).read_text(encoding="utf-8").splitlines()[:count]


def shared_tokenizer() -> Tokenizer:
    """The 8,000-piece joint SentencePiece model every shape uses, trained on Multi30k."""
    return Tokenizer(train_sentencepiece(read_multi30k("train.de", 20000) + read_multi30k("train.en", 20000),
                                         vocab_size=8000))


#: beam 5, batches of 32, every output exactly LENGTH pieces
FORCED_LENGTH = {f"decode.{key}": value for key, value in {
    "beam_size": 5, "max_len_a": 0, "max_len_b": LENGTH, "min_len": LENGTH, "max_sentences": 32,
    "max_tokens": 10**9}.items()}


def random_engines(model_config: ModelConfig, tokenizer: Tokenizer, engines=ENGINES) -> dict:
    """A random-weight model of ``model_config`` loaded by each of ``engines`` (name, engine, quantize)."""
    torch.manual_seed(0)
    model = build_model(model_config, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, True)
    with tempfile.TemporaryDirectory() as scratch:
        checkpoint = save_checkpoint(Path(scratch) / "step-00000001", model.state_dict(),
                                     Config(model=model_config), tokenizer, {"step": 1})
        return {name: load_translator(checkpoint, engine=engine, quantize=quantize, overrides=FORCED_LENGTH)
                for name, engine, quantize in engines}


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
                    ["shape", "engine", "out tok/s (CPU time)", "vs CTranslate2 float32"], quick=args.quick)
    for shape, model_config, texts in forced_work(args.quick):
        engines = random_engines(model_config, tokenizer)
        for translator in engines.values():
            translator.translate(texts[:8])  # warm-up
        runs = {name: [] for name in engines}
        for _ in range(repeats):
            for name, translator in engines.items():
                runs[name].append(cpu_seconds(translator, texts))
        rates = {name: len(texts) * LENGTH / min(seconds) for name, seconds in runs.items()}
        for name, rate in rates.items():
            report.add_row(shape, name, fmt(rate), f"{rate / rates['CTranslate2 float32']:.2f}x")
    report.notes += [
        f"random weights, 8,000-piece joint vocabulary; Multi30k test2016 sources (tiny: 200, base: 48); every "
        f"output exactly {LENGTH} pieces; beam 5, batches of 32, 1 thread; fastest of {repeats} run(s), "
        "process CPU time of translate() after a warm-up",
        "CTranslate2 through nmt translate's ctranslate2 engine (its own threads' CPU time included)",
        "forced lengths keep every batch full to the last step, so this compares the cost of full decoding steps; "
        "on real text (the equal-work translation table) batches shrink as sentences finish, the torch engine's "
        "fixed cost per step (decode_profile: the search's bookkeeping and the rest of a decoder step) weighs "
        "more, and the ranking can turn",
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
