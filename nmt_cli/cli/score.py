"""``nmt score``: log-probabilities of given translations (:mod:`nmt_cli.scoring`)."""

from __future__ import annotations

import click

from nmt_cli.cli import cli
from nmt_cli.cli.options import checkpoints_option, model_options

FILE = click.Path(dir_okay=False)


@cli.command("score")
@checkpoints_option(required=True)
@click.option("--src", "src_path", type=FILE, required=True, help="Source sentences, one per line.")
@click.option("--tgt", "tgt_path", type=FILE, help="Their translations, paired line by line.")
@click.option("--nbest", "nbest_path", type=FILE,
              help="Instead of --tgt: n-best lists as `nmt translate --format jsonl` writes them (reranking).")
@click.option("--output", "-o", "output_path", default="-", show_default=True, help="Where the scores go.")
@click.option("--format", "output_format", type=click.Choice(["text", "jsonl"]), default="text", show_default=True,
              help="text: 'log_prob<TAB>per_token' a line; jsonl: also the log-probability of every token.")
@model_options
def score(checkpoints, src_path, tgt_path, nbest_path, output_path, output_format, translator_options) -> None:
    """Score each sentence pair: log P(target | source), summed and per target token (EOS counted).

    With several --checkpoint the score is the mean of the models' log-probabilities,
    as when they translate together. A blank source line gets a blank output line.
    """
    if (tgt_path is None) == (nbest_path is None):
        raise click.UsageError("give exactly one of --tgt and --nbest")
    if nbest_path is not None and output_format != "jsonl":
        raise click.UsageError("--nbest writes JSONL records: add --format jsonl")
    from nmt_cli.decoding import Translator
    from nmt_cli.scoring import score_file, score_nbest_file

    translator = Translator.from_checkpoint(checkpoints, **translator_options)
    if nbest_path is not None:
        score_nbest_file(translator, src_path, nbest_path, output_path)
    else:
        score_file(translator, src_path, tgt_path, output_path, output_format)
