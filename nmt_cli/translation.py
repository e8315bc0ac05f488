"""Translating text files: lines in, a translation or a JSON record per line out.

``nmt translate`` is a thin layer over :func:`translate_file`. Output line N always
belongs to input line N: a blank input line gives a blank output line, and a
translation never contains a line break. Input is read and translated
``chunk_size`` lines at a time, so files of any size stream through; a file output
appears atomically when the translation succeeds, with the signature (checkpoint,
step, search settings, version) in ``<output>.signature``. Word alignments, on
request, are read by the one alignment reader (:mod:`nmt_cli.alignment.reader`); the
translation service builds its answers with :func:`output_record` too.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass

from nmt_cli.alignment.pharaoh import format_links
from nmt_cli.alignment.reader import AttentionReading, hypothesis_alignment
from nmt_cli.decoding import Hypothesis, Translator
from nmt_cli.fileio import atomic_write_text, open_output
from nmt_cli.progress import Progress
from nmt_cli.textio import STDIN, iter_lines, one_line
from nmt_cli.tokenization import Tokenizer

__all__ = ["OutputOptions", "output_record", "translate_file"]

@dataclass(frozen=True)
class OutputOptions:
    """What :func:`translate_file` writes: ``text`` or ``jsonl``, and alignments when
    ``reading`` is given (in ``<output>.align`` for text, in each record for JSONL)."""

    format: str = "text"
    reading: AttentionReading | None = None
    chunk_size: int = 2000


def output_record(source: str, hypothesis: Hypothesis, tokenizer: Tokenizer,
                  reading: AttentionReading | None = None) -> dict:
    """The JSONL record: ``text, score, tokens`` (target pieces), ``nbest`` and, with a
    ``reading``, ``alignment`` (Pharaoh links)."""

    def entry(hyp: Hypothesis) -> dict:
        return {"text": one_line(hyp.text), "score": hyp.score, "tokens": tokenizer.tgt_pieces(hyp.tokens)}

    record = {**entry(hypothesis), "nbest": [entry(hyp) for hyp in hypothesis.nbest]}
    if reading is not None:
        record["alignment"] = format_links(hypothesis_alignment(source, hypothesis, tokenizer, reading).links)
    return record


def translate_file(translator: Translator, input_path: str | os.PathLike = STDIN,
                   output_path: str | os.PathLike = STDIN, options: OutputOptions = OutputOptions(),
                   progress: bool = True) -> int:
    """Translate ``input_path`` (``-``: stdin) into ``output_path`` (``-``: stdout); return the line count."""
    reading = options.reading
    align_path = f"{output_path}.align" if reading is not None and options.format == "text" else None
    counter = Progress("translate", unit="sentences", enabled=progress)
    with open_output(output_path) as out, \
            (open_output(align_path) if align_path else contextlib.nullcontext()) as align_out:
        pairs = translator.translate_stream(iter_lines(input_path), options.chunk_size,
                                            with_attention=reading is not None)
        for source, hypothesis in pairs:
            if options.format == "jsonl":
                line = json.dumps(output_record(source, hypothesis, translator.tokenizer, reading),
                                  ensure_ascii=False)
            else:
                line = one_line(hypothesis.text)
            out.write((line + "\n").encode("utf-8"))
            if align_out is not None:
                links = hypothesis_alignment(source, hypothesis, translator.tokenizer, reading).links
                align_out.write((format_links(links) + "\n").encode("utf-8"))
            counter.update()
            if counter.count % options.chunk_size == 0:
                out.flush()  # a reader at the end of a pipe gets each chunk as soon as it is done
        out.flush()
    counter.close()
    if str(output_path) != STDIN:
        atomic_write_text(f"{output_path}.signature", translator.signature() + "\n")
    return counter.count
