"""``nmt export``: a trained Transformer as a CTranslate2 model directory.

The directory holds the converted weights, the SentencePiece model(s) and
``nmt-export.json``; ``nmt translate --checkpoint DIR`` translates with it, no run needed.
"""

from __future__ import annotations

import click

from nmt_cli.cli import cli

QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16")  # nmt_cli.export.QUANTIZATIONS


@cli.command("export")
@click.option("--checkpoint", required=True, type=click.Path(), help="Checkpoint directory or run directory (newest).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory to write (new, empty, or an earlier export, which is replaced).")
@click.option("--quantization", type=click.Choice(QUANTIZATIONS), default="float32", show_default=True,
              help="Weight type stored in the CTranslate2 model.")
@click.option("--average", metavar="last:N", help="Average the weights of the run's last N checkpoints first.")
@click.option("--shortlist", "shortlist_path", type=click.Path(dir_okay=False),
              help="A lexical shortlist (nmt shortlist) written as CTranslate2's vocabulary map (vmap.txt), "
                   "which translation then uses.")
def export(checkpoint, out_dir, quantization, average, shortlist_path) -> None:
    """Export a Transformer checkpoint to CTranslate2 (pip install 'nmt-cli[ctranslate2]')."""
    from nmt_cli.export import export_ctranslate2, read_export_record

    written = export_ctranslate2(checkpoint, out_dir, quantization, average, shortlist_path)
    record = read_export_record(written)
    averaged = f", averaged over {len(record.averaged)} checkpoints" if record.averaged else ""
    click.echo(f"exported {record.source_checkpoint} (step {record.step}{averaged}) to {written} "
               f"as CTranslate2 {quantization}" + (" with its vocabulary map" if record.shortlist else ""), err=True)
