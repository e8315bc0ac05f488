"""Translating text files: lines in, a translation or a JSON record per line out.

``nmt translate`` is a thin layer over :func:`translate_file`. Input lines are plain
sentences or JSONL records with per-sentence fields such as a target prefix
(:mod:`nmt_cli.input_formats`). Output line N always belongs to input line N: a blank
input line gives a blank output line, and a translation never contains a line break. Input is read and translated
``chunk_size`` lines at a time, so files of any size stream through; a file output
appears atomically when the translation succeeds, with the signature (checkpoint,
step, search settings, version) in ``<output>.signature``. Word alignments, on
request, are read by the one alignment reader (:mod:`nmt_cli.alignment.reader`); the
translation service builds its answers with :func:`output_record` too. A line longer
than the model takes stops the job with an error naming it, unless
``decode.on_long_line`` says to truncate or skip such lines (each one is reported on
stderr, and its JSONL record says ``"long_input"``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass

from nmt_cli.alignment.extract import forced_attention
from nmt_cli.alignment.reader import (AttentionReading, SentenceAlignment, default_full_context, default_shift,
                                      read_alignment)
from nmt_cli.decoding import Hypothesis, SentenceError, Translator
from nmt_cli.errors import InputError, NmtError
from nmt_cli.fileio import atomic_write_text, open_output, writes_in_place
from nmt_cli.input_formats import read_requests
from nmt_cli.pharaoh import format_links
from nmt_cli.progress import Progress
from nmt_cli.textio import CHUNK_LINES, STDIN, display_name, one_line

__all__ = ["OutputOptions", "hypothesis_alignment", "output_record", "translate_file"]

@dataclass(frozen=True)
class OutputOptions:
    """What :func:`translate_file` writes: ``text`` or ``jsonl``, and alignments when
    ``reading`` is given (in ``<output>.align`` for text, in each record for JSONL)."""

    format: str = "text"
    reading: AttentionReading | None = None
    chunk_size: int = CHUNK_LINES


def hypothesis_alignment(source: str, hypothesis: Hypothesis, translator: Translator,
                         reading: AttentionReading) -> SentenceAlignment:
    """Words, soft word matrix and links between a source line and its translation (the
    model's default heads unless ``reading`` names others); a blank source or an empty
    translation has no links.

    A model whose guided head learned links at the step where a word is the decoder input
    (:func:`~nmt_cli.alignment.reader.default_shift`) or with the whole target in view
    (:func:`~nmt_cli.alignment.reader.default_full_context`) is read that way, by forced
    decoding of the translation: the search kept only the causal steps that predicted
    each word. So is a model with a null position (its column is not kept by the
    search). Otherwise the attention the translation was decoded with is read (either
    engine).
    """
    reading = reading.for_model(translator.config)
    tokenizer = translator.tokenizer
    src_ids = tokenizer.encode_src(source) if source.strip() else []
    src_pieces = tokenizer.src_pieces(src_ids)
    tgt_pieces = tokenizer.tgt_pieces(hypothesis.tokens)
    attention = None
    if src_pieces and tgt_pieces:
        reading.selection.check(*hypothesis.attention.shape[:2])
        shift, full_context = default_shift(translator.config), default_full_context(translator.config)
        if shift or full_context or reading.null:
            with translator.precision.autocast():
                (attention,) = forced_attention(translator.model, [(src_ids, list(hypothesis.tokens))], shift,
                                                selection=reading.selection, full_context=full_context,
                                                null=reading.null)  # (T, S [+ 1])
        else:
            attention = reading.selection.apply(hypothesis.attention)  # (T, S)
    return read_alignment(src_pieces, tgt_pieces, attention, reading)


def output_record(source: str, hypothesis: Hypothesis, translator: Translator,
                  reading: AttentionReading | None = None) -> dict:
    """The JSONL record: ``text, score, tokens`` (target pieces), ``nbest`` and, with a
    ``reading``, ``alignment`` (Pharaoh links)."""

    def entry(hyp: Hypothesis) -> dict:
        return {"text": one_line(hyp.text), "score": hyp.score,
                "tokens": translator.tokenizer.tgt_pieces(hyp.tokens)}

    record = {**entry(hypothesis), "nbest": [entry(hyp) for hyp in hypothesis.nbest]}
    if hypothesis.long_input:
        record["long_input"] = hypothesis.long_input
    if reading is not None:
        record["alignment"] = format_links(hypothesis_alignment(source, hypothesis, translator, reading).links)
    return record


def translate_file(translator: Translator, input_path: str | os.PathLike = STDIN,
                   output_path: str | os.PathLike = STDIN, options: OutputOptions = OutputOptions(),
                   progress: bool = True, input_format: str = "text") -> int:
    """Translate ``input_path`` (``-``: stdin; ``input_format`` ``text`` or ``jsonl``) into
    ``output_path`` (``-``: stdout); return the line count."""
    reading = options.reading
    to_file = str(output_path) != STDIN and not writes_in_place(output_path)
    align_path = f"{output_path}.align" if reading is not None and options.format == "text" else None
    if align_path and not to_file:
        raise NmtError(f"{output_path}: text alignments go to <output>.align, which needs a file as --output")
    counter = Progress("translate", unit="sentences", enabled=progress)
    long_lines = _LongLines(display_name(input_path))
    with open_output(output_path, inputs=[input_path]) as out, \
            (open_output(align_path, inputs=[input_path]) if align_path else contextlib.nullcontext()) as align_out:
        requests = read_requests(input_path, input_format, translator.tokenizer)
        pairs = translator.translate_stream(requests, options.chunk_size, with_attention=reading is not None)
        for request, hypothesis in long_lines.named(pairs):
            source = request.text
            if options.format == "jsonl":
                line = json.dumps(output_record(source, hypothesis, translator, reading),
                                  ensure_ascii=False)
            else:
                line = one_line(hypothesis.text)
            out.write((line + "\n").encode("utf-8"))
            if align_out is not None:
                links = hypothesis_alignment(source, hypothesis, translator, reading).links
                align_out.write((format_links(links) + "\n").encode("utf-8"))
            counter.update()
            long_lines.note(counter.count, hypothesis)
            if counter.count % options.chunk_size == 0:
                out.flush()  # a reader at the end of a pipe gets each chunk as soon as it is done
        out.flush()
    counter.close()
    long_lines.close()
    if to_file:
        atomic_write_text(f"{output_path}.signature", translator.signature() + "\n")
    return counter.count


class _LongLines:
    """Names the input line of a source longer than the model takes: in the error that
    stops the job, or in a warning on stderr for each one truncated or skipped (the
    first few, then a count)."""

    SHOWN = 5

    def __init__(self, input_name: str):
        self.input_name, self.count, self.how = input_name, 0, ""

    def named(self, pairs):
        try:
            yield from pairs
        except SentenceError as exc:
            raise InputError(self.input_name, exc.problem, exc.index + 1) from None

    def note(self, line: int, hypothesis: Hypothesis) -> None:
        if not hypothesis.long_input:
            return
        self.count, self.how = self.count + 1, hypothesis.long_input
        if self.count <= self.SHOWN:
            print(f"warning: {self.input_name}:{line}: longer than the model takes; {hypothesis.long_input}",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.count > self.SHOWN:
            print(f"warning: {self.count} lines longer than the model takes were {self.how}", file=sys.stderr)
