"""``nmt train``, ``nmt average`` and ``nmt plot``: thin layers over :mod:`nmt_cli.training`."""

from __future__ import annotations

from pathlib import Path

import click

from nmt_cli.cli import cli
from nmt_cli.cli.options import DEVICE_HELP, config_options
from nmt_cli.config import Config, config_replace
from nmt_cli.errors import NmtError


@cli.command("train")
@config_options
@click.option("--data", "prepared_dir", type=click.Path(file_okay=False), default=None,
              help="Prepared directory (output of `nmt prepare`).")
@click.option("--out", "run_dir", type=click.Path(file_okay=False), default=None,
              help="Run directory; one with checkpoints is resumed from its newest.")
@click.option("--max-tokens", type=int, default=None, help="Tokens per batch (same as --set train.max_tokens=N).")
@click.option("--restart", is_flag=True, help="Delete the run directory's checkpoints and logs and start over.")
@click.option("--init-from", type=click.Path(exists=True), default=None,
              help="Fine-tune: start from this run's (or checkpoint's) weights (same as --set train.init_from=PATH).")
@click.option("--init-keep", type=click.Choice(["optimizer", "schedule"]), multiple=True,
              help="With --init-from: also continue its optimizer state or learning-rate schedule (repeatable).")
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@click.option("--dry-run", is_flag=True, help="Build the model, print its summary and parameter count, stop.")
def train_command(config: Config, prepared_dir: str | None, run_dir: str | None, max_tokens: int | None,
                  restart: bool, init_from: str | None, init_keep: tuple[str, ...], device: str,
                  dry_run: bool) -> None:
    """Train a model on a prepared directory (multi-GPU: run it under torchrun)."""
    changes = {"max_tokens": max_tokens, "init_from": str(Path(init_from).resolve()) if init_from else None,
               "init_keep": list(init_keep) or None}
    config = config_replace(config, "train", **{key: value for key, value in changes.items() if value is not None})
    if dry_run:
        click.echo(_model_summary(config, prepared_dir))
        return
    if prepared_dir is None or run_dir is None:
        raise NmtError("nmt train needs --data PREPARED_DIR and --out RUN_DIR")
    from nmt_cli.training import train

    summary = train(config, prepared_dir, run_dir, restart=restart, device=device)
    if summary.stop_reason == "interrupted":
        click.echo(f"interrupted at step {summary.step}; checkpoint {summary.last_checkpoint} saved, "
                   "run the same command to resume", err=True)
        raise SystemExit(130)


def _model_summary(config: Config, prepared_dir: str | None) -> str:
    """Architecture and parameter count with the prepared vocabulary (or ``data.vocab_size``)."""
    from nmt_cli.models import build_model
    from nmt_cli.training import describe_model

    if prepared_dir is not None:
        from nmt_cli.data.prepared import PreparedData

        tokenizer = PreparedData(prepared_dir).tokenizer
        sizes = (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
    else:
        sizes = (config.data.vocab_size, config.data.vocab_size, config.data.joint_vocab)
    model = build_model(config.model, *sizes)
    vocab = f"vocabulary {sizes[0]:,} source / {sizes[1]:,} target" + (" (joint)" if sizes[2] else "")
    return f"{describe_model(model)}\n{config.model.arch}: {vocab}"


@cli.command("average")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory of the averaged checkpoint.")
@click.option("--last", type=int, default=None, help="Average only the newest N checkpoints.")
def average_command(inputs: tuple[str, ...], out_dir: str, last: int | None) -> None:
    """Average the weights of a run's checkpoints (or of the checkpoint directories given)."""
    from nmt_cli.checkpoint import checkpoints_to_average, write_average

    paths = checkpoints_to_average(inputs, last)
    written = write_average(paths, out_dir)
    click.echo(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {written}")


@cli.command("plot")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="PNG to write (default: RUN_DIR/learning_curve.png).")
def plot_command(run_dir: str, out_path: str | None) -> None:
    """Draw a run's learning curve (loss and validation BLEU over steps) from its metrics."""
    from nmt_cli.training import plot_learning_curve

    click.echo(str(plot_learning_curve(run_dir, out_path)))
