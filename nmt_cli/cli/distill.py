"""``nmt distill``: a thin layer over :mod:`nmt_cli.distill`."""

from __future__ import annotations

import sys

import click

from nmt_cli.cli import cli
from nmt_cli.cli.options import DEVICE_HELP
from nmt_cli.config import parse_overrides
from nmt_cli.distill import (DEFAULT_AVERAGE_LAST, DEFAULT_DROP_SHARE, KEEP_CHOICES, STUDENT_DECODERS,
                             STUDENT_PRESETS, DistillOptions, distill, distill_check)
from nmt_cli.shortlist import DEFAULT_FREQUENT, DEFAULT_K
from nmt_cli.textio import CHUNK_LINES


@cli.command("distill", context_settings={"show_default": True})
@click.option("--teacher", "teachers", multiple=True, type=click.Path(),
              help="The teacher's run or checkpoint directory; repeat it to distill an ensemble.")
@click.option("--data", "data", type=click.Path(file_okay=False),
              help="The prepared directory the teacher was trained on: its training source is translated.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for every stage (rerun the same command to resume).")
@click.option("--student", default=None,
              help=f"A preset ({', '.join(STUDENT_PRESETS)}: 6 encoder / 2 decoder layers, d 256 or 512) on the "
                   "teacher's settings, or a config file (its model, train and decode sections)  [default: tiny; "
                   "--check: one of tiny's shape at the check teacher's width].")
@click.option("--student-decoder", type=click.Choice(list(STUDENT_DECODERS)), default="softmax",
              help="The student decoder's self-attention: softmax, or linear attention (a constant cost per "
                   "output token; no CTranslate2 export).")
@click.option("--keep", type=click.Choice(KEEP_CHOICES), default="closest",
              help="Which of the teacher's n-best translations a line keeps: the closest to the reference by "
                   "chrF, or the beam's best.")
@click.option("--drop-share", type=click.FloatRange(0.0, 1.0, max_open=True), default=DEFAULT_DROP_SHARE,
              help="Share of the pairs dropped: those the teacher scores worst per token.")
@click.option("--beam", type=click.IntRange(min=1), default=None,
              help="The teacher's beam and n-best size  [default: the teacher's decode.beam_size].")
@click.option("--average-last", type=click.IntRange(min=1), default=DEFAULT_AVERAGE_LAST,
              help="The student's last checkpoints averaged.")
@click.option("--shortlist-k", type=click.IntRange(min=0), default=DEFAULT_K,
              help="The lexical shortlist's target pieces per source piece (by lexical translation probability "
                   "in the teacher's alignments of the kept pairs).")
@click.option("--shortlist-frequent", type=click.IntRange(min=0), default=DEFAULT_FREQUENT,
              help="The lexical shortlist's most frequent target pieces, candidates of every sentence.")
@click.option("--no-shortlist", is_flag=True, help="No shortlist stage (and no vocabulary map in the export).")
@click.option("--corpus-from", type=click.Path(file_okay=False), default=None,
              help="Another student of a corpus already distilled: take the translate, filter and shortlist "
                   "stages from this nmt distill directory (same teachers, data and corpus options) and run only "
                   "the student's stages in OUT.")
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override a setting of the student's config, e.g. --set train.max_steps=20000 (repeatable).")
@click.option("--chunk-lines", type=click.IntRange(min=1), default=CHUNK_LINES,
              help="Sentences translated between two resume points.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="CPU processes translating at once  [default: every core].")
@click.option("--device", default="auto", help=DEVICE_HELP)
@click.option("--check", is_flag=True,
              help="Train a small teacher on the synthetic corpus in OUT, distill it with few steps, and compare "
                   "their BLEU on its test split (no --teacher or --data).")
@click.option("--quiet", "-q", is_flag=True, help="No progress output from data preparation.")
def distill_command(teachers, data, out_dir, student, student_decoder, keep, drop_share, beam, average_last,
                    shortlist_k, shortlist_frequent, no_shortlist, corpus_from, overrides, chunk_lines, workers,
                    device, check, quiet) -> None:
    """Distill a teacher (or an ensemble) into a small student: translate the training source,
    drop the worst pairs, prepare them with the teacher's pieces, train, average, export.

    A lexical shortlist of the kept pairs (the teacher's alignments) becomes the export's
    vocabulary map (OUT/shortlist/shortlist.txt, for nmt translate --shortlist too).

    Every stage is recorded in OUT/distill.json and a rerun resumes where it stopped.
    """
    if check and (teachers or data):
        raise click.UsageError("--check trains its own teacher on the synthetic corpus: leave out --teacher and --data")
    if not check and (not teachers or not data):
        raise click.UsageError("nmt distill needs --teacher and --data (or --check)")
    if check and corpus_from:
        raise click.UsageError("--check distills its own teacher's corpus: leave out --corpus-from")
    options = DistillOptions(keep=keep, drop_share=drop_share, beam=beam, student=student,
                             student_decoder=student_decoder, average_last=average_last,
                             overrides=parse_overrides(overrides), chunk_lines=chunk_lines,
                             shortlist=None if no_shortlist else (shortlist_k, shortlist_frequent))
    settings = {"device": device, "workers": workers, "progress": not quiet, "stream": sys.stderr}
    record = (distill_check(out_dir, options, **settings) if check
              else distill(teachers, data, out_dir, options, corpus_from=corpus_from, **settings))
    for name, stage in record["stages"].items():
        click.echo(f"{name:<10} {stage['seconds']:>9,.1f} s" + (f"  {stage['skipped']}" if "skipped" in stage else "")
                   + (f"  taken from {stage['reused_from']}" if "reused_from" in stage else ""))
    click.echo(f"student: {record['student']}" + (f"  export: {record['export']}" if record["export"] else "")
               + (f"  shortlist: {record['shortlist']}" if record.get("shortlist") else ""))
    for name, score in record.get("check", {}).items():
        click.echo(f"{name:<28} BLEU {score['bleu']:5.1f}  {score['sentences_per_second']:>8,.1f} sentences/s")
