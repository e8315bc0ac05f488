"""Translating text files: lines in, a translation or a JSON record per line out.

``nmt translate`` is a thin layer over :func:`translate_file`. Input lines are plain
sentences or JSONL records with per-sentence fields such as a target prefix or
constraints, and a glossary's terms found in a line become its constraints
(:mod:`nmt_cli.input_formats`). Output line N always belongs to input line N: a blank
input line gives a blank output line, and a translation never contains a line break. Input is read and translated
``chunk_size`` lines at a time, so files of any size stream through; a file output
appears atomically when the translation succeeds, with the signature (checkpoint,
step, search settings, version) in ``<output>.signature``. Word alignments, on
request, are read by the one alignment reader (:mod:`nmt_cli.alignment.reader`); the
translation service builds its answers with :func:`output_record` too. A line longer
than the model takes stops the job with an error naming it, unless
``decode.on_long_line`` says to truncate or skip such lines (each one is reported on
stderr, and its JSONL record says ``"long_input"``), and so is each line whose
translation lacks one of its constraints. A JSONL record says how confident the model
was, whether the output looks degenerate (``--retry-degenerate`` decodes such lines again
with the repetition guards on) and which constraints and terms were met.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import sys
from dataclasses import dataclass
from typing import Iterator

from nmt_cli.alignment.extract import forced_attention
from nmt_cli.alignment.reader import (AttentionReading, SentenceAlignment, default_full_context, default_shift,
                                      read_alignment)
from nmt_cli.config import DecodeConfig
from nmt_cli.decoding import Hypothesis, SentenceError, Translator
from nmt_cli.decoding.constraints import constraints_met
from nmt_cli.decoding.guards import degeneration
from nmt_cli.decoding.request import Request
from nmt_cli.errors import InputError, NmtError
from nmt_cli.fileio import atomic_write_text, open_output, writes_in_place
from nmt_cli.glossary import Glossary
from nmt_cli.input_formats import Input, read_inputs
from nmt_cli.pharaoh import format_links
from nmt_cli.progress import Progress
from nmt_cli.textio import CHUNK_LINES, STDIN, display_name, iter_chunks, one_line

__all__ = ["OutputOptions", "RETRY_GUARDS", "confidence", "degenerate", "guarded",
           "hypothesis_alignment", "output_signature", "output_record", "translate_file"]

#: the repetition guards ``--retry-degenerate`` switches on where they are off
RETRY_GUARDS = {"no_repeat_ngram": 3, "repetition_penalty": 1.2}

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


def output_record(line: Input, hypothesis: Hypothesis, translator: Translator,
                  reading: AttentionReading | None = None, retried: bool = False) -> dict:
    """The JSONL record: ``text, score, tokens`` (target pieces), ``nbest``; for a decoded
    line ``confidence``, and ``degenerate`` (why the output looks broken) when it does;
    ``constraints_met`` and ``terms`` for a line with constraints or glossary terms (read off
    the output pieces, so for any engine);
    ``retried`` for a line decoded again; with a ``reading``, ``alignment`` (Pharaoh links)."""

    def entry(hyp: Hypothesis) -> dict:
        return {"text": one_line(hyp.text), "score": hyp.score,
                "tokens": translator.tokenizer.tgt_pieces(hyp.tokens)}

    request = line.request
    record = {**entry(hypothesis), "nbest": [entry(hyp) for hyp in hypothesis.nbest]}
    if hypothesis.long_input:
        record["long_input"] = hypothesis.long_input
    if hypothesis.nbest:
        record["confidence"] = confidence(hypothesis)
    reason = degenerate(request, hypothesis)
    if reason:
        record["degenerate"] = reason
    met = constraints_met(request.constraints, hypothesis.tokens)
    own = len(request.constraints) - len(line.terms)
    if own:
        record["constraints_met"] = met[:own]
    if line.terms:
        record["terms"] = [{"source": term.source, "target": list(term.targets), "met": term_met}
                           for term, term_met in zip(line.terms, met[own:])]
    if retried:
        record["retried"] = True
    if reading is not None:
        record["alignment"] = format_links(hypothesis_alignment(request.text, hypothesis, translator, reading).links)
    return record


def confidence(hypothesis: Hypothesis) -> dict:
    """``log_prob_per_token`` (EOS counted) and, where the engine scored each token, the
    probability of the least likely one, ``min_token_prob``."""
    result = {"log_prob_per_token": hypothesis.log_prob / (len(hypothesis.tokens) + 1)}
    if hypothesis.token_log_probs:
        result["min_token_prob"] = math.exp(min(hypothesis.token_log_probs))
    return result


def degenerate(request: Request, hypothesis: Hypothesis) -> str:
    """Why the translation looks degenerate (:func:`~nmt_cli.decoding.guards.degeneration`),
    or ``""``; a line cut or skipped as too long is not judged (``long_input`` says so)."""
    return "" if hypothesis.long_input else degeneration(len(request.source), hypothesis.tokens)


def guarded(translator: Translator) -> Translator | None:
    """The translator ``--retry-degenerate`` decodes flagged lines again with: each repetition
    guard that is off switched on (:data:`RETRY_GUARDS`); ``None`` when both are on already
    (a retry would decode the same)."""
    decode = translator.decode
    overrides = {f"decode.{key}": value for key, value in RETRY_GUARDS.items()
                 if getattr(decode, key) == getattr(DecodeConfig, key)}
    return translator.with_decode(overrides) if overrides else None


def output_signature(translator: Translator, retry: Translator | None) -> str:
    """The translator's signature, with the guards of a retry (:func:`guarded`) before the version."""
    signature = translator.signature()
    if retry is None:
        return signature
    settings = ",".join(f"{key}={getattr(retry.decode, key):g}" for key in RETRY_GUARDS)
    head, _, version = signature.rpartition("|")
    return f"{head}|retry:{settings}|{version}"


def translate_file(translator: Translator, input_path: str | os.PathLike = STDIN,
                   output_path: str | os.PathLike = STDIN, options: OutputOptions = OutputOptions(),
                   progress: bool = True, input_format: str = "text", glossary: Glossary | None = None,
                   retry: Translator | None = None) -> int:
    """Translate ``input_path`` (``-``: stdin; ``input_format`` ``text`` or ``jsonl``) into
    ``output_path`` (``-``: stdout), with the terms of ``glossary`` as constraints; return the
    line count. ``retry`` (``--retry-degenerate``, :func:`guarded`): decode the degenerate
    lines again with it, keeping the retry where it is not degenerate."""
    reading = options.reading
    to_file = str(output_path) != STDIN and not writes_in_place(output_path)
    align_path = f"{output_path}.align" if reading is not None and options.format == "text" else None
    if align_path and not to_file:
        raise NmtError(f"{output_path}: text alignments go to <output>.align, which needs a file as --output")
    input_name = display_name(input_path)
    counter = Progress("translate", unit="sentences", enabled=progress)
    long_lines, unmet = _LineWarnings(input_name), _LineWarnings(input_name)
    with open_output(output_path, inputs=[input_path]) as out, \
            (open_output(align_path, inputs=[input_path]) if align_path else contextlib.nullcontext()) as align_out:
        inputs = _ReadAhead(read_inputs(input_path, input_format, translator.tokenizer, glossary))
        pairs = translator.translate_stream(inputs.requests(), options.chunk_size, with_attention=reading is not None,
                                            token_scores=options.format == "jsonl")
        for chunk in iter_chunks(_named_errors(pairs, input_name), options.chunk_size):
            lines = [inputs.take() for _ in chunk]
            hypotheses = [hypothesis for _, hypothesis in chunk]
            retried = (_retry(retry, lines, hypotheses, reading is not None, options.format == "jsonl")
                       if retry is not None else set())
            for index, (line, hypothesis) in enumerate(zip(lines, hypotheses)):
                source = line.request.text
                if options.format == "jsonl":
                    text = json.dumps(output_record(line, hypothesis, translator, reading, index in retried),
                                      ensure_ascii=False)
                else:
                    text = one_line(hypothesis.text)
                out.write((text + "\n").encode("utf-8"))
                if align_out is not None:
                    links = hypothesis_alignment(source, hypothesis, translator, reading).links
                    align_out.write((format_links(links) + "\n").encode("utf-8"))
                counter.update()
                _warn(counter.count, line, hypothesis, long_lines, unmet)
            out.flush()  # a reader at the end of a pipe gets each chunk as soon as it is done
    counter.close()
    long_lines.close()
    unmet.close()
    if to_file:
        atomic_write_text(f"{output_path}.signature", output_signature(translator, retry) + "\n")
    return counter.count


def _retry(retry: Translator, lines: list[Input], hypotheses: list[Hypothesis], with_attention: bool,
           token_scores: bool) -> set[int]:
    """Decode the degenerate lines of a chunk again with ``retry``; a retry that is not
    degenerate replaces the first translation in ``hypotheses``. The positions retried."""
    flagged = [index for index, (line, hypothesis) in enumerate(zip(lines, hypotheses))
               if degenerate(line.request, hypothesis)]
    if not flagged:
        return set()
    again = retry.translate([lines[index].request for index in flagged], with_attention, token_scores)
    for index, hypothesis in zip(flagged, again):
        if not degenerate(lines[index].request, hypothesis):
            hypotheses[index] = hypothesis
    return set(flagged)


def _warn(number: int, line: Input, hypothesis: Hypothesis, long_lines: _LineWarnings,
          unmet: _LineWarnings) -> None:
    """Report on stderr what happened to input line ``number``: cut or skipped as too long,
    constraints (``constraints[i]`` of its record, its glossary terms) its translation lacks."""
    if hypothesis.long_input:
        long_lines.warn(number, f"longer than the model takes; {hypothesis.long_input}",
                        f"lines longer than the model takes were {hypothesis.long_input}")
    own = len(line.request.constraints) - len(line.terms)
    names = [f"constraints[{index}]" for index in range(own)] + [f"term {term.source!r}" for term in line.terms]
    met = constraints_met(line.request.constraints, hypothesis.tokens)
    missed = [name for name, name_met in zip(names, met) if not name_met]
    if missed:
        unmet.warn(number, f"not met: {', '.join(missed)}", "lines have constraints that were not met")


class _ReadAhead:
    """The inputs the stream has read but not yet translated: their requests go to the
    translator, their glossary terms wait here, in order, for their translations."""

    def __init__(self, inputs: Iterator[Input]):
        self._inputs, self._waiting = inputs, collections.deque()

    def requests(self) -> Iterator[Request]:
        """The requests of the inputs, each kept until :meth:`take`."""
        for line in self._inputs:
            self._waiting.append(line)
            yield line.request

    def take(self) -> Input:
        """The oldest input waiting (the stream answers in input order)."""
        return self._waiting.popleft()


def _named_errors(pairs, input_name: str):
    """``pairs``, with an input the search refuses named by its line."""
    try:
        yield from pairs
    except SentenceError as exc:
        raise InputError(input_name, exc.problem, exc.index + 1) from None


class _LineWarnings:
    """Warnings on stderr naming the input line (the first few, then a count)."""

    SHOWN = 5

    def __init__(self, input_name: str):
        self.input_name, self.count, self.summary = input_name, 0, ""

    def warn(self, line: int, problem: str, summary: str) -> None:
        self.count, self.summary = self.count + 1, summary
        if self.count <= self.SHOWN:
            print(f"warning: {self.input_name}:{line}: {problem}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.count > self.SHOWN:
            print(f"warning: {self.count} {self.summary}", file=sys.stderr)
