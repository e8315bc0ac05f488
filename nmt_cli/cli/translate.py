"""``nmt translate``: stream text through a checkpoint (:func:`nmt_cli.translation.translate_file`)."""

from __future__ import annotations

import click

from nmt_cli.cli import cli
from nmt_cli.cli.options import checkpoints_option, decode_options, reading_options
from nmt_cli.textio import CHUNK_LINES


@cli.command("translate")
@checkpoints_option(required=True)
@click.option("--input", "-i", "input_path", default="-", show_default=True, help="Source text, one sentence a line.")
@click.option("--input-format", type=click.Choice(["text", "jsonl"]), default="text", show_default=True,
              help='text: a sentence a line; jsonl: a record a line, {"text": ...} with optional "prefix" '
                   '(target text the translation starts with), "constraints" (phrases it must contain; an '
                   'array in their place lists alternatives) and "avoid" (phrases it must not contain).')
@click.option("--output", "-o", "output_path", default="-", show_default=True, help="Where translations go.")
@click.option("--format", "output_format", type=click.Choice(["text", "jsonl"]), default="text", show_default=True,
              help="text: one translation a line; jsonl: text, score, tokens, nbest, confidence, and degenerate, "
                   "terms, constraints_met, retried, alignment where they apply.")
@click.option("--glossary", "glossary_path", type=click.Path(dir_okay=False),
              help="TSV of terms, 'source<TAB>target' a line: each source term found in a line (on word "
                   "boundaries, longest first) makes its target a constraint; a source listed twice has "
                   "alternatives.")
@click.option("--glossary-ignore-case", is_flag=True, help="Find the glossary's source terms in any case.")
@click.option("--retry-degenerate", is_flag=True,
              help="Decode a translation that loops or has an implausible length again with the repetition "
                   "guards on (decode.no_repeat_ngram 3, decode.repetition_penalty 1.2 where unset); the retry "
                   "replaces it unless it is degenerate too.")
@click.option("--alignments", is_flag=True,
              help="Pharaoh word alignments of each translation: in <output>.align (text) or the JSONL records.")
@reading_options
@click.option("--chunk-size", type=click.IntRange(min=1), default=CHUNK_LINES, show_default=True,
              help="Lines read and translated at a time.")
@decode_options
def translate(checkpoints, input_path, input_format, output_path, output_format, glossary_path,
              glossary_ignore_case, retry_degenerate, alignments, reading, chunk_size, translator_options) -> None:
    """Translate text with a trained checkpoint (stdin to stdout by default).

    The signature line (checkpoint, step, search settings, version) goes to stderr and,
    for a file output, to <output>.signature.
    """
    if alignments and output_format == "text" and output_path == "-":
        raise click.UsageError("--alignments with text output needs --output FILE (or use --format jsonl)")
    if glossary_ignore_case and glossary_path is None:
        raise click.UsageError("--glossary-ignore-case needs --glossary FILE")
    from nmt_cli.decoding import load_translator
    from nmt_cli.glossary import read_glossary
    from nmt_cli.translation import OutputOptions, guarded, output_signature, translate_file

    glossary = read_glossary(glossary_path, glossary_ignore_case) if glossary_path is not None else None
    translator = load_translator(checkpoints, **translator_options)
    if output_format == "text" and translator.decode.nbest > 1:
        raise click.UsageError("--nbest above 1 needs --format jsonl (text output has one line per input line)")
    retry = guarded(translator) if retry_degenerate else None
    click.echo(f"signature: {output_signature(translator, retry)}", err=True)
    options = OutputOptions(format=output_format, reading=reading if alignments else None, chunk_size=chunk_size)
    translate_file(translator, input_path, output_path, options, input_format=input_format, glossary=glossary,
                   retry=retry)
