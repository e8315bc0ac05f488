"""Decoding with and without a lexical shortlist (Marian's 50 50): the tiny student's shape, one thread.

One process, a random-weight Transformer of the ``tiny`` student preset's shape (6 encoder /
2 decoder layers, d 256, FFN 1536) with a real 8,000-piece SentencePiece vocabulary trained on
Multi30k. The shortlist is built from Multi30k's first 20,000 training pairs with diagonal
word links (word ``i`` with word ``round(i * |t| / |s|)``): the links matter here only for the
size of each sentence's candidate set, which they give at Marian's ``k = 50`` and ``N = 50``.
Every engine decodes the same Multi30k test2016 sentences in batches of 32, and every output
is forced to ``LENGTH`` pieces (as in ``engine_ratio``), so each row does the same number of
decoder steps: the rows differ only in what the output layer computes. CTranslate2 is called
directly, with and without ``use_vmap``, on the batches ``nmt translate``'s ctranslate2 engine
forms at each ``decode.shortlist_scope``: ``batch`` (the default), the same batches of 32 as
without the map, each decoded over the union of its sentences' candidates; ``sentence``, one
sentence a batch, so that each gets its own candidates.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from common import Report, bench_arguments, fmt, repeats_of
from engine_ratio import FORCED_LENGTH, LENGTH, interleaved_cpu_runs, read_multi30k, shared_tokenizer

from nmt_cli.allocator import keep_freed_memory
from nmt_cli.checkpoint import save_checkpoint
from nmt_cli.config import Config, ModelConfig
from nmt_cli.decoding import load_translator
from nmt_cli.decoding.batching import token_budget_batches
from nmt_cli.export import export_ctranslate2, require_ctranslate2
from nmt_cli.models import build_model
from nmt_cli.shortlist import ShortlistCounts, build_shortlist_from_counts, tokenizer_identity
from nmt_cli.tokenization import Tokenizer
from nmt_cli.tokenization.spm import word_spans

#: the tiny student preset's shape (nmt_cli.distill.STUDENT_PRESETS)
TINY = ModelConfig(d_model=256, heads=8, ffn_dim=1536, encoder_layers=6, decoder_layers=2, dropout=0.0)
BATCH_SENTENCES = 32
BEAMS = (1, 5)
#: the batches nmt translate's ctranslate2 engine decodes with its map, by decode.shortlist_scope
SCOPE_BATCHES = {"batch": BATCH_SENTENCES, "sentence": 1}
PAIRS = 20000


def diagonal_shortlist(tokenizer: Tokenizer, pairs: int):
    """Marian's 50 50 from ``pairs`` Multi30k training pairs with diagonal word links."""
    counts = ShortlistCounts(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    sources, targets = read_multi30k("train.de", pairs), read_multi30k("train.en", pairs)
    for src_pieces, tgt_pieces in zip(tokenizer.src.encode(sources, out_type=str),
                                      tokenizer.tgt.encode(targets, out_type=str)):
        src_words, tgt_words = word_spans(src_pieces), word_spans(tgt_pieces)
        if not src_words or not tgt_words:
            continue
        links = {(s, t) for i, src_word in enumerate(src_words)
                 for s in src_word for t in tgt_words[round(i * (len(tgt_words) - 1) / max(len(src_words) - 1, 1))]}
        counts.add(tokenizer.src.piece_to_id(src_pieces), tokenizer.tgt.piece_to_id(tgt_pieces),
                   np.asarray(sorted(links), dtype=np.int64).reshape(-1, 2))
    return build_shortlist_from_counts(counts, tokenizer_identity(tokenizer))


class CTranslate2Forced:
    """CTranslate2's search on batches of ``batch`` sentences, ``LENGTH + 1`` pieces per output
    (the torch engine's ``LENGTH`` and its forced EOS step), with or without the vocabulary map."""

    def __init__(self, export_dir: Path, tokenizer: Tokenizer, beam: int, use_vmap: bool, batch: int):
        self.tokenizer, self.beam, self.use_vmap, self.batch = tokenizer, beam, use_vmap, batch
        self.translator = require_ctranslate2().Translator(str(export_dir), device="cpu", compute_type="int8",
                                                           inter_threads=1, intra_threads=1)

    def translate(self, texts: list[str]) -> list[list[str]]:
        sources = [self.tokenizer.src_pieces(self.tokenizer.encode_src(text)) for text in texts]
        outputs: list[list[str]] = [[] for _ in texts]
        for batch in token_budget_batches([len(source) for source in sources], 10**9, self.batch):
            results = self.translator.translate_batch(
                [sources[i] for i in batch], beam_size=self.beam, max_decoding_length=LENGTH + 1,
                min_decoding_length=LENGTH + 1, max_input_length=0, use_vmap=self.use_vmap)
            for index, result in zip(batch, results):
                outputs[index] = result.hypotheses[0][:LENGTH]
        return outputs


def engines(tokenizer: Tokenizer, shortlist, beam: int, scratch: Path) -> dict:
    """Each row's engine: torch fp32 and int8 with and without the shortlist, CTranslate2 int8
    without its map and with it at each ``decode.shortlist_scope`` (batches of 32, or of one)."""
    torch.manual_seed(0)
    model = build_model(TINY, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, True)
    checkpoint = save_checkpoint(scratch / "step-00000001", model.state_dict(), Config(model=TINY), tokenizer,
                                 {"step": 1})
    forced = {**FORCED_LENGTH, "decode.beam_size": beam}
    loaded = {}
    for quantize in (None, "int8"):
        for listed in (None, shortlist):
            name = f"torch {quantize or 'fp32'}{' + shortlist' if listed else ''}"
            loaded[name] = load_translator(checkpoint, engine="torch", device="cpu", quantize=quantize,
                                           overrides=forced, shortlist=listed)
    exported = export_ctranslate2(checkpoint, scratch / "export", "int8", shortlist=shortlist)
    loaded["CTranslate2 int8"] = CTranslate2Forced(exported, tokenizer, beam, False, BATCH_SENTENCES)
    for scope, batch in SCOPE_BATCHES.items():
        loaded[f"CTranslate2 int8 + vmap, {scope} scope"] = CTranslate2Forced(exported, tokenizer, beam, True, batch)
    return loaded


def main() -> None:
    parser = bench_arguments(__doc__.splitlines()[0])
    args = parser.parse_args()
    repeats = repeats_of(args)
    torch.set_num_threads(1)
    keep_freed_memory()
    tokenizer = shared_tokenizer()
    shortlist = diagonal_shortlist(tokenizer, 2000 if args.quick else PAIRS)
    texts = read_multi30k("test2016.de", 16 if args.quick else 200)
    candidates = [len(shortlist.candidates(tokenizer.encode_src(text))) for text in texts]
    report = Report("shortlist_speed", "Decoding with and without a lexical shortlist (tiny student shape, 1 thread)",
                    ["shape", "beam", "engine", "out tok/s (CPU time)", "vs the same engine without"],
                    quick=args.quick)
    for beam in BEAMS:
        with tempfile.TemporaryDirectory() as scratch:
            loaded = engines(tokenizer, shortlist, beam, Path(scratch))
            runs = interleaved_cpu_runs(loaded, texts, repeats)
        rate = {name: len(texts) * LENGTH / min(seconds) for name, seconds in runs.items()}
        for name in loaded:
            base = name.split(" + ")[0]
            report.add_row("tiny student", str(beam), name, fmt(rate[name]),
                           "" if base == name else f"{rate[name] / rate[base]:.2f}x")
    report.notes += [
        f"random weights of the tiny student's shape (6 + 2 layers, d 256, FFN 1536), 8,000-piece joint vocabulary; "
        f"Multi30k test2016 sources ({len(texts)}); batches of {BATCH_SENTENCES}; every output forced to {LENGTH} "
        f"pieces; fastest of {repeats} run(s), process CPU time of a decode after a warm-up, 1 thread",
        f"shortlist k 50, 50 frequent, from {2000 if args.quick else PAIRS:,} Multi30k training pairs with diagonal "
        f"word links; a sentence has {int(np.median(candidates))} candidates (median; "
        f"{min(candidates)}-{max(candidates)}) of {tokenizer.tgt_vocab_size:,} pieces",
        "the torch engine's shortlist is per sentence (each row's softmax over its own sentence's candidates, the "
        "projection over the batch's union); CTranslate2's map takes the batch's union: nmt-cli's ctranslate2 "
        "engine does so at decode.shortlist_scope batch (the default), and runs a sentence a batch at sentence "
        "scope so that no output depends on its batch-mates",
        f"load average when measured: {os.getloadavg()[0]:.2f} (a shared machine: figures under load are not "
        "benchmark figures)",
    ]
    report.emit(args.json)


if __name__ == "__main__":
    main()
