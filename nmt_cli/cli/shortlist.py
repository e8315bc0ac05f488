"""``nmt shortlist``: a lexical shortlist from a parallel corpus (:mod:`nmt_cli.shortlist_build`)."""

from __future__ import annotations

import sys

import click

from nmt_cli.cli import cli
from nmt_cli.cli.options import DEVICE_HELP
from nmt_cli.shortlist import DEFAULT_FREQUENT, DEFAULT_K

FILE = click.Path(dir_okay=False)


@cli.command("shortlist", context_settings={"show_default": True})
@click.option("--src", "source", required=True, type=FILE, help="Source sentences, one per line.")
@click.option("--tgt", "target", required=True, type=FILE, help="Target sentences, paired line by line with --src.")
@click.option("--links", type=FILE,
              help="Their word links, Pharaoh i-j a line per pair (nmt align, eflomal, fast_align); else --aligner.")
@click.option("--aligner", "aligners", multiple=True, type=click.Path(),
              help="A checkpoint or run that aligns the pairs (nmt align's reading); repeat it for an ensemble.")
@click.option("--reverse-aligner", "reverse", multiple=True, type=click.Path(),
              help="A target -> source model: the two directions' links are symmetrized.")
@click.option("--tokenizer", "tokenizer_from", type=click.Path(file_okay=False),
              help="The SentencePiece model(s) of the model it is for: a prepared, checkpoint, run or export "
                   "directory  [default: the first --aligner].")
@click.option("--out", "out_path", required=True, type=FILE,
              help="The shortlist file; with --aligner its links go to OUT.align (rerun to resume).")
@click.option("--k", "k", type=click.IntRange(min=0), default=DEFAULT_K,
              help="Target pieces kept per source piece, by lexical translation probability.")
@click.option("--frequent", type=click.IntRange(min=0), default=DEFAULT_FREQUENT,
              help="The most frequent target pieces, candidates of every sentence.")
@click.option("--device", default="auto", help=DEVICE_HELP)
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def shortlist(source, target, links, aligners, reverse, tokenizer_from, out_path, k, frequent, device,
              quiet) -> None:
    """Build a lexical shortlist: each source piece's K likeliest target pieces, and the most frequent ones.

    Use it with nmt translate --shortlist and nmt export --shortlist.
    """
    from nmt_cli.shortlist_build import build_shortlist

    if tokenizer_from is None and not aligners:
        raise click.UsageError("name the model's tokenizer with --tokenizer (or an --aligner)")
    built = build_shortlist(source, target, tokenizer_from or aligners[0], links, aligners, reverse, k, frequent,
                            device, None if quiet else sys.stderr, aligned=f"{out_path}.align", out=out_path)
    click.echo(f"shortlist: {len(built.translations):,} source pieces, k {built.k}, {len(built.frequent)} frequent, "
               f"from {built.built_from['pairs']:,} pairs and {built.built_from['links']:,} piece links -> {out_path}",
               err=True)
