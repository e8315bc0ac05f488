"""``nmt translate``: stream text through a checkpoint, line by line.

Output line N always belongs to input line N: a blank input line gives a blank output
line. Input is read and translated ``--chunk-size`` lines at a time, so files of any
size stream through. A file output appears atomically when the command succeeds.
The signature line (checkpoint, step, search settings, version) goes to stderr and,
for a file output, to ``<output>.signature``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator

import click

from nmt_cli.cli import cli
from nmt_cli.config import parse_overrides
from nmt_cli.errors import ConfigError, InputError
from nmt_cli.fileio import atomic_open, atomic_write_text

if TYPE_CHECKING:  # torch is imported only when a command translates (`nmt evaluate --hyp` never does)
    from nmt_cli.decoding import Hypothesis, Translator


def decode_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--beam --alpha --nbest --workers --average --device --engine --quantize --set``; passes a
    ``translator_factory``.

    Calling ``translator_factory(checkpoint)`` loads the checkpoint (or exported model) with
    these settings through :func:`nmt_cli.decoding.load_translator`.
    """

    @click.option("--beam", type=click.IntRange(min=1), help="Beam size; 1 = greedy [default: the checkpoint's].")
    @click.option("--alpha", type=float, help="GNMT length penalty alpha [default: the checkpoint's].")
    @click.option("--nbest", type=click.IntRange(min=1), help="Hypotheses per sentence (at most the beam size).")
    @click.option("--workers", type=click.IntRange(min=1),
                  help="CPU: batches decoded at once, sharing the torch threads (decode.workers) [default: 1].")
    @click.option("--average", metavar="last:N", help="Average the weights of the run's last N checkpoints.")
    @click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N (bf16 on CUDA).")
    @click.option("--engine", type=click.Choice(["auto", "torch", "ctranslate2"]), default="auto", show_default=True,
                  help="auto: ctranslate2 for an `nmt export` directory, torch otherwise; ctranslate2 on a "
                       "checkpoint converts it first (pip install 'nmt-cli[ctranslate2]').")
    @click.option("--quantize", metavar="TYPE",
                  help="torch: int8 (dynamic int8 Linear/LSTM/GRU, CPU); ctranslate2: float32, int8, "
                       "int8_float32, int16, float16 or bfloat16 [default: the export's].")
    @click.option("--set", "overrides", multiple=True, metavar="decode.KEY=VALUE",
                  help="Any decoding setting, e.g. --set decode.max_len_b=50 (repeatable).")
    @functools.wraps(func)
    def wrapper(*args: Any, beam, alpha, nbest, workers, average, device, engine, quantize, overrides,
                **kwargs: Any) -> Any:
        changes = _decode_overrides(overrides)
        flags = (("beam_size", beam), ("alpha", alpha), ("nbest", nbest), ("workers", workers))
        changes.update({key: value for key, value in flags if value is not None})
        def factory(checkpoint: str) -> Translator:
            from nmt_cli.decoding import load_translator

            return load_translator(checkpoint, engine=engine, device=device, average=average, quantize=quantize,
                                   overrides=changes)

        return func(*args, translator_factory=factory, **kwargs)

    return wrapper


def _decode_overrides(items: tuple[str, ...]) -> dict[str, Any]:
    """``("decode.beam_size=4",)`` -> ``{"beam_size": 4}``; other sections are refused."""
    changes = {}
    for key, value in parse_overrides(items).items():
        section, _, name = key.partition(".")
        if section != "decode" or not name:
            raise ConfigError(f"--set {key}: only decode.* settings apply when translating")
        changes[name] = value
    return changes


def read_input(path: str) -> Iterator[str]:
    """Lines of ``path`` (``-``: stdin) without line ends, read lazily; only ``\\n`` ends a line."""
    name = "<stdin>" if path == "-" else path
    with contextlib.ExitStack() as stack:
        if path == "-":
            binary: IO[bytes] = sys.stdin.buffer
        else:
            try:
                binary = stack.enter_context(open(path, "rb"))
            except OSError as exc:
                raise InputError(path, f"cannot read ({exc.strerror})") from None
        for number, raw in enumerate(binary, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(name, "not valid UTF-8", line=number) from None
            yield line.removesuffix("\n").removesuffix("\r")


@contextlib.contextmanager
def open_output(path: str | None) -> Iterator[IO[bytes] | None]:
    """Binary stdout for ``-``, an atomically written file otherwise, nothing for ``None``."""
    if path is None:
        yield None
    elif path == "-":
        yield sys.stdout.buffer
    else:
        with atomic_open(path, "wb") as handle:
            yield handle


def one_line(text: str) -> str:
    """Keep the line structure: a translation never contains a line break."""
    return text.replace("\r", " ").replace("\n", " ")


def jsonl_record(hypothesis: Hypothesis, translator: Translator, alignment: str | None) -> dict:
    """``text, score, tokens`` (target pieces), ``nbest`` and optionally ``alignment``."""

    def entry(hyp: Hypothesis) -> dict:
        pieces = translator.tokenizer.tgt_pieces(hyp.tokens)
        return {"text": one_line(hyp.text), "score": hyp.score, "tokens": pieces}

    record = {**entry(hypothesis), "nbest": [entry(hyp) for hyp in hypothesis.nbest]}
    if alignment is not None:
        record["alignment"] = alignment
    return record


def pharaoh_alignment(source: str, hypothesis: Hypothesis, translator: Translator) -> str:
    """Word links ``i-j`` between the source line and its translation, from the attention."""
    from nmt_cli.alignment.pharaoh import format_links
    from nmt_cli.alignment.words import word_alignment

    if hypothesis.attention is None or not hypothesis.tokens:
        return ""
    src_pieces = translator.tokenizer.src_pieces(translator.tokenizer.encode_src(source))
    tgt_pieces = translator.tokenizer.tgt_pieces(hypothesis.tokens)
    return format_links(word_alignment(src_pieces, tgt_pieces, hypothesis.attention))


class Progress:
    """Sentences and sentences/s on one stderr line, only when stderr is a terminal."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self.count = 0
        self.started = self.shown = time.monotonic()

    def update(self) -> None:
        self.count += 1
        now = time.monotonic()
        if self.enabled and now - self.shown >= 0.5:
            self.shown = now
            click.echo(f"\rtranslated {self.count:,} sentences, {self.rate():,.1f} sentences/s", err=True, nl=False)

    def rate(self) -> float:
        return self.count / max(time.monotonic() - self.started, 1e-9)

    def close(self) -> None:
        if self.enabled:
            click.echo(f"\rtranslated {self.count:,} sentences, {self.rate():,.1f} sentences/s", err=True)


@cli.command("translate")
@click.option("--checkpoint", required=True, type=click.Path(),
              help="Checkpoint directory, run directory (newest) or `nmt export` directory.")
@click.option("--input", "-i", "input_path", default="-", show_default=True, help="Source text, one sentence a line.")
@click.option("--output", "-o", "output_path", default="-", show_default=True, help="Where translations go.")
@click.option("--format", "output_format", type=click.Choice(["text", "jsonl"]), default="text", show_default=True,
              help="text: one translation a line; jsonl: text, score, tokens, nbest (and alignment).")
@click.option("--alignments", is_flag=True,
              help="Pharaoh word alignments of each translation: in <output>.align (text) or the JSONL records.")
@click.option("--chunk-size", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Lines read and translated at a time.")
@decode_options
def translate(checkpoint, input_path, output_path, output_format, alignments, chunk_size, translator_factory) -> None:
    """Translate text with a trained checkpoint (stdin to stdout by default)."""
    text_alignments = alignments and output_format == "text"
    if text_alignments and output_path == "-":
        raise click.UsageError("--alignments with text output needs --output FILE (or use --format jsonl)")
    translator: Translator = translator_factory(checkpoint)
    if output_format == "text" and translator.decode.nbest > 1:
        raise click.UsageError("--nbest above 1 needs --format jsonl (text output has one line per input line)")
    signature = translator.signature()
    click.echo(f"signature: {signature}", err=True)
    align_path = f"{output_path}.align" if text_alignments else None
    progress = Progress()
    with open_output(output_path) as out, open_output(align_path) as align_out:
        pairs = translator.translate_stream(read_input(input_path), chunk_size, with_attention=alignments)
        for source, hypothesis in pairs:
            alignment = pharaoh_alignment(source, hypothesis, translator) if alignments else None
            if output_format == "jsonl":
                line = json.dumps(jsonl_record(hypothesis, translator, alignment), ensure_ascii=False)
            else:
                line = one_line(hypothesis.text)
            out.write((line + "\n").encode("utf-8"))
            if align_out is not None:
                align_out.write((alignment + "\n").encode("utf-8"))
            progress.update()
            if progress.count % chunk_size == 0:
                out.flush()  # a reader at the end of a pipe gets each chunk as soon as it is done
        out.flush()
    progress.close()
    if output_path != "-":
        atomic_write_text(f"{output_path}.signature", signature + "\n")
