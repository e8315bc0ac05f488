"""``nmt align``: word alignments from attention; ``score``: AER; ``sweep``: pick layer/heads;
``bootstrap``: train a model that aligns well without an external aligner."""

from __future__ import annotations

import itertools
import json
import sys

import click

from nmt_cli.alignment.aer import score_files
from nmt_cli.alignment.agreement import AGREEMENT_SAMPLE, agreeing_aligner
from nmt_cli.alignment.api import SYMMETRIZATION_CHOICES, Aligner, AlignOptions
from nmt_cli.alignment.corpus import align_into
from nmt_cli.alignment.inputs import split_pairs
from nmt_cli.alignment.model import AlignmentModel
from nmt_cli.alignment.output import HeatmapChoice
from nmt_cli.alignment.sweep import sweep
from nmt_cli.alignment.symmetrize import AVERAGE_THRESHOLD
from nmt_cli.alignment.symmetrize import describe as describe_symmetrization
from nmt_cli.bootstrap import DEFAULT_ROUNDS, aligner_command, bootstrap
from nmt_cli.cli import cli
from nmt_cli.cli.options import DEVICE_HELP, config_options, link_options, reading_options
from nmt_cli.config import Config
from nmt_cli.pharaoh import GoldAlignment, read_alignments
from nmt_cli.textio import (CHUNK_LINES, STDIN, check_same_length, count_lines, display_name, iter_lines, iter_parallel,
                            read_parallel)

FILE = click.Path(dir_okay=False)


def _heatmap_lines(chosen: str) -> list[int]:
    """``--heatmap-lines 3,7`` (1-based; whether the input has them is known once it is read)."""
    try:
        lines = {int(item) for item in chosen.split(",") if item.strip()}
    except ValueError:
        raise click.BadParameter(f"{chosen!r}: expected comma-separated line numbers", param_hint="--heatmap-lines")
    if any(line < 1 for line in lines):
        raise click.BadParameter(f"line {min(lines)} is not a line number (they start at 1)",
                                 param_hint="--heatmap-lines")
    return sorted(lines)


def _read_gold(path: str, src_path: str | None, pairs: int) -> list[GoldAlignment]:
    """Gold links, one line per sentence pair of ``src_path`` (None: standard input)."""
    gold = read_alignments(path)
    check_same_length(src_path or "<stdin>", pairs, path, len(gold))
    return gold


@cli.group("align", invoke_without_command=True, context_settings={"show_default": True})
@click.option("--checkpoint", "checkpoints", multiple=True, type=click.Path(),
              help="Checkpoint or run directory (source -> target model); repeat it to align with an ensemble "
              "(the mean of the models' word weights; their vocabularies may differ).")
@click.option("--src", "src_path", type=FILE, help="Source sentences, one per line (else stdin 'src ||| tgt').")
@click.option("--tgt", "tgt_path", type=FILE, help="Target sentences, paired line by line with --src.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Output directory.")
@reading_options
@click.option("--shift/--no-shift", default=None,
              help="shift-att: read the step where the word is the decoder input (try `nmt align sweep`) "
              "[default: as the model was trained to align: on for a head guided at that step, else off].")
@click.option("--heatmaps", type=click.IntRange(min=0), default=0, help="Heatmap PNGs of the first N pairs.")
@click.option("--heatmap-lines", default="", help="Heatmaps of these 1-based lines too, e.g. 3,17.")
@click.option("--gold", "gold_path", type=FILE, help="Gold Pharaoh file: drawn on heatmaps; AER printed.")
@click.option("--reverse-checkpoint", "reverse_checkpoints", multiple=True, type=click.Path(),
              help="Target -> source model: symmetrize both directions (repeatable, like --checkpoint).")
@click.option("--symmetrize", "symmetrization", type=click.Choice(SYMMETRIZATION_CHOICES), default=None,
              help="How to combine the two directions: their links (intersection ... grow-diag-final-and), or "
              "'average': a link where the mean of the two models' word weights exceeds --average-threshold "
              "[default: average when every model has a guided head with a null position, else grow-diag-final-and].")
@click.option("--average-threshold", type=click.FloatRange(0.0, 1.0, max_open=True), default=AVERAGE_THRESHOLD,
              help="Where the two directions are averaged (--symmetrize average, the default for guided models "
              "with a null position): the mean weight a link needs.")
@click.option("--agree-heads", is_flag=True,
              help="With --reverse-checkpoint, instead of --layer/--heads/--shift: read each direction with the "
              f"head or head average and shift on which the two models' links agree most over the first "
              f"{AGREEMENT_SAMPLE:,} pairs (no gold links needed; for models without a guided head).")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, help="Sentence pairs per forward pass.")
@click.option("--chunk-size", type=click.IntRange(min=1), default=CHUNK_LINES,
              help="Pairs read, aligned and kept at a time (OUT/.chunks: a rerun of a stopped run resumes there).")
@click.option("--soft/--no-soft", default=True,
              help="Write soft.npz and soft.json (the soft word matrices; leave them out when only the links "
              "are wanted).")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--device", default="auto", help=DEVICE_HELP)
@click.pass_context
def align(ctx: click.Context, checkpoints, src_path, tgt_path, out_dir, reading, shift, heatmaps, heatmap_lines,
          gold_path, reverse_checkpoints, symmetrization, average_threshold, agree_heads, batch_size, chunk_size,
          soft, quiet, device) -> None:
    """Align sentence pairs with a model's cross-attention (forced decoding of the given target).

    Writes OUT/alignments.align (Pharaoh i-j, 0-based source-target words), soft word
    matrices with their words (soft.npz, soft.json), settings.json and heatmaps/. The pairs
    stream through --chunk-size at a time; an interrupted run resumes at its first
    unfinished chunk when run again.
    Subcommands: `nmt align score` computes AER, precision and recall; `nmt align sweep`
    finds the layer, heads and shift that align best on gold-aligned sentences.
    """
    if ctx.invoked_subcommand is not None:
        return
    if not checkpoints or not out_dir:
        raise click.UsageError("nmt align needs --checkpoint and --out (or use `nmt align score` / `sweep`)")
    if (src_path is None) != (tgt_path is None):
        raise click.UsageError("give both --src and --tgt, or neither (then stdin holds 'source ||| target' lines)")
    if agree_heads and (len(checkpoints) != 1 or len(reverse_checkpoints) != 1):
        raise click.UsageError("--agree-heads needs one --checkpoint and one --reverse-checkpoint (no ensembles)")
    if agree_heads and (reading.selection is not None or shift is not None):
        raise click.UsageError("--agree-heads chooses the heads and shift: leave out --layer, --heads and --shift")
    pairs = iter_parallel(src_path, tgt_path) if src_path is not None else split_pairs(iter_lines(STDIN))
    lines = _heatmap_lines(heatmap_lines)
    options = AlignOptions(reading=reading, shift=shift, batch_size=batch_size, symmetrization=symmetrization,
                           average_threshold=average_threshold)
    if agree_heads:
        sample = list(itertools.islice(pairs, AGREEMENT_SAMPLE))  # the readings are chosen on the first pairs
        pairs = itertools.chain(sample, pairs)
        aligner, ranked = agreeing_aligner(options, checkpoints[0], reverse_checkpoints[0],
                                           [source for source, _ in sample], [target for _, target in sample], device)
        click.echo(f"agreed readings: {ranked[0].describe()}", err=True)
    else:
        aligner = Aligner(checkpoints, options, device, reverse_checkpoints)
    written = align_into(aligner, pairs, out_dir, HeatmapChoice(heatmaps, lines), gold_path,
                         display_name(src_path or STDIN), chunk_size, progress=not quiet, soft=soft,
                         total=count_lines(src_path) if src_path is not None and not quiet else None)
    settings = aligner.settings
    combined = describe_symmetrization(aligner.symmetrization, average_threshold)
    counts = "+".join(str(len(side)) for side in (checkpoints, reverse_checkpoints) if side)
    models = f"{counts} models, " if max(len(checkpoints), len(reverse_checkpoints)) > 1 else ""
    click.echo(
        f"aligned {written.pairs} pairs ({models}{settings['selection']}, "
        f"shift={'on' if settings['shift'] else 'off'}, "
        f"{'full context, ' if settings['full_context'] else ''}{'null, ' if settings['null'] else ''}"
        f"{reading.method}{', ' + combined if reverse_checkpoints else ''}) -> {out_dir}: "
        f"{', '.join(path.name for path in written.paths)}, {len(written.heatmaps)} heatmap(s)",
        err=True,
    )
    if written.score is not None:
        click.echo(written.score.summary())


@align.command("score")
@click.option("--gold", "gold_path", type=FILE, required=True, help="Gold Pharaoh file (i-j sure, ipj possible).")
@click.option("--hyp", "hyp_path", type=FILE, required=True, help="Hypothesis Pharaoh file.")
@click.option("--src", "src_path", type=FILE, help="Tokenised source, to report gold links outside the sentence.")
@click.option("--tgt", "tgt_path", type=FILE, help="Tokenised target (with --src).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def score(gold_path, hyp_path, src_path, tgt_path, as_json) -> None:
    """Alignment error rate, precision and recall of HYP against GOLD (corpus level)."""
    result = score_files(gold_path, hyp_path, src_path, tgt_path)
    click.echo(json.dumps(result.to_dict()) if as_json else result.summary())
    if result.out_of_range and as_json:
        click.echo(f"warning: {result.out_of_range} gold link(s) outside their sentence left out, "
                   f"first at {result.out_of_range_example}", err=True)


@align.command("sweep")
@click.option("--checkpoint", type=click.Path(), required=True, help="Checkpoint or run directory.")
@click.option("--src", "src_path", type=FILE, required=True, help="Development source sentences.")
@click.option("--tgt", "tgt_path", type=FILE, required=True, help="Development target sentences.")
@click.option("--gold", "gold_path", type=FILE, required=True, help="Their gold Pharaoh links (i-j, ipj).")
@link_options
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Rows to print.")
@click.option("--json", "as_json", is_flag=True, help="Print every result as JSON lines.")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
def sweep_command(checkpoint, src_path, tgt_path, gold_path, method, threshold, top, as_json, batch_size,
                  device) -> None:
    """Score every decoder layer, head and shift setting against gold links; best first."""
    src_lines, tgt_lines = read_parallel(src_path, tgt_path)
    gold = _read_gold(gold_path, src_path, len(src_lines))
    results = sweep(AlignmentModel(checkpoint, device, batch_size), src_lines, tgt_lines, gold, method, threshold)
    if as_json:
        for result in results:
            click.echo(json.dumps({"options": result.reading.options(), **result.score.to_dict()}))
        return
    click.echo(f"{'rank':>4}  {'AER':>6}  {'prec.':>6}  {'recall':>6}  nmt align options")
    for rank, result in enumerate(results[:top], start=1):
        score = result.score
        click.echo(f"{rank:>4}  {score.aer:.4f}  {score.precision:.4f}  {score.recall:.4f}  {result.reading.options()}")
    click.echo(f"best: nmt align {results[0].reading.options()}  (picked on {len(gold)} pairs: report AER on others)")


@align.command("bootstrap")
@config_options
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for every stage (rerun the same command to resume).")
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@click.option("--rounds", type=click.IntRange(min=1), default=DEFAULT_ROUNDS, show_default=True,
              help="Guided rounds: each after the first continues the previous round's pair on the links "
                   "that pair gives.")
@click.option("--refine-steps", type=click.IntRange(min=1), default=None,
              help="Training steps of each later round, per direction  [default: a fifth of train.max_steps].")
@click.option("--quiet", "-q", is_flag=True, help="No progress output from data preparation.")
def bootstrap_command(config: Config, out_dir: str, device: str, rounds: int, refine_steps: int | None,
                      quiet: bool) -> None:
    """Train forward and reverse models on the config, symmetrize their attention links, and
    train a model guided by those links in each direction (no external aligner); each later
    round aligns the text again with that pair and goes on training it on those links. Align
    with the last pair as the last line says: `nmt align --checkpoint OUT/guided-2/run
    --reverse-checkpoint OUT/guided-reverse-2/run --symmetrize average`."""
    record = bootstrap(config, out_dir, device=device, progress=not quiet, stream=sys.stderr, rounds=rounds,
                       refine_steps=refine_steps)
    for name, stage in record["stages"].items():
        click.echo(f"{name:<16} {stage['seconds']:>9,.1f} s" + (
            f"  forward {stage['reading']}, reverse {stage['reverse_reading']}, agreement {stage['agreement']:.4f}"
            if name == "links" else ""))
    click.echo(f"aligner: nmt align {aligner_command(record)}")
