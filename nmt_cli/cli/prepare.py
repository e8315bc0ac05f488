"""``nmt prepare``: clean, tokenise and binarise parallel text into a prepared directory."""

from __future__ import annotations

import click

from nmt_cli.cli import cli
from nmt_cli.cli.options import config_options
from nmt_cli.config import Config, config_replace
from nmt_cli.data.prepare import prepare


@cli.command("prepare")
@config_options
@click.option("--out", "-o", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Prepared directory to write (built atomically; reused when up to date).")
@click.option("--force", is_flag=True, help="Rebuild even when the directory is up to date.")
@click.option("--on-invalid", type=click.Choice(["error", "skip"]), default=None,
              help="Bad pairs (invalid UTF-8, unpaired lines, bad records): stop (default) or drop and count.")
@click.option("--tokenizer-from", type=click.Path(exists=True, file_okay=False), default=None,
              help="Encode with the SentencePiece model(s) of this prepared directory, run or checkpoint "
                   "instead of training new ones (data to fine-tune that model on).")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def prepare_command(config: Config, out_dir: str, force: bool, on_invalid: str | None, tokenizer_from: str | None,
                    quiet: bool) -> None:
    """Read data.source, clean it, train SentencePiece and write token arrays to OUT."""
    if on_invalid:
        config = config_replace(config, "data", on_invalid=on_invalid)
    if tokenizer_from is not None:
        from nmt_cli.checkpoint import tokenizer_directory  # a run's checkpoints: loads torch

        tokenizer_from = tokenizer_directory(tokenizer_from)
    manifest = prepare(config, out_dir, force=force, progress=not quiet, tokenizer_from=tokenizer_from)
    click.echo(format_report(manifest, out_dir))


def format_report(manifest: dict, out_dir: str) -> str:
    """A short human-readable summary of a manifest."""
    lines = [f"{'reused' if manifest.get('reused') else 'prepared'} {out_dir} "
             f"({manifest['src_lang']}->{manifest['tgt_lang']}, source: {manifest['source']['kind']})"]
    for name, stats in manifest["splits"].items():
        dropped = ", ".join(f"{reason} {count:,}" for reason, count in stats["dropped"].items()) or "none"
        tokens = stats["tokens"]
        lines.append(f"  {name:<5} {stats['kept']:>10,} pairs (read {stats['read']:,}; dropped: {dropped}; "
                     f"normalized {stats['normalized']:,}; tokens {tokens['src']['tokens']:,} src "
                     f"/ {tokens['tgt']['tokens']:,} tgt in {len(stats['shards']):,} "
                     f"shard{'s' if len(stats['shards']) > 1 else ''})")
        if "links" in stats:
            links = stats["links"]
            lines.append(f"        word links: {links['word_links']:,} in {links['pairs_with_links']:,} pairs -> "
                         f"{links['piece_links']:,} piece links ({links['unmatched_pairs']:,} pairs whose pieces "
                         "spell other words left without)")
    tok = manifest["tokenizer"]
    vocab = (f"joint {tok['src_vocab_size']}" if tok["joint"]
             else f"src {tok['src_vocab_size']}, tgt {tok['tgt_vocab_size']}")
    origin = f" (from {tok['from']})" if tok.get("from") else ""
    lines.append(f"  vocab {tok['model_type']} {vocab}{origin}; token dtype {manifest['token_dtype']}")
    requested = tok.get("vocab_size_requested")
    if requested and min(tok["src_vocab_size"], tok["tgt_vocab_size"]) < requested:
        lines.append(f"  note: SentencePiece made fewer pieces ({vocab}) than data.vocab_size={requested} asks for: "
                     "the training text holds no more")
    for corpus in manifest["splits"]["train"].get("corpora", []):
        lines.append(f"  train corpus {corpus['name']}: {corpus['pairs']:,} pairs, weight {corpus['weight']:g}")
    when = "built earlier in" if manifest.get("reused") else "time"
    lines.append(f"  {when} {manifest['elapsed_seconds']:.1f}s, {manifest['pairs_per_second']:,.0f} pairs/s")
    return "\n".join(lines)
