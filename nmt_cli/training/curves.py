"""The learning-curve picture of a run: losses and validation BLEU over steps."""

from __future__ import annotations

import io
import os
from pathlib import Path

from nmt_cli.errors import NmtError
from nmt_cli.fileio import atomic_write_bytes
from nmt_cli.training.progress import METRICS, read_metrics

__all__ = ["plot_learning_curve", "CURVE"]

CURVE = "learning_curve.png"


def plot_learning_curve(run_dir: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Draw ``<run>/metrics.jsonl`` into a PNG (default ``<run>/learning_curve.png``).

    Left panel: training loss and validation loss (nats per target token);
    right panel: validation BLEU when the run measured it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    train = [r for r in records if r.get("kind") == "train"]
    valid = [r for r in records if r.get("kind") == "valid"]
    if not train and not valid:
        raise NmtError(f"{run_dir / 'metrics.jsonl'}: no training metrics to plot")
    with_bleu = [r for r in valid if r.get("bleu") is not None]

    figure, (loss_axis, bleu_axis) = plt.subplots(1, 2, figsize=(11, 4))
    loss_axis.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss (smoothed)")
    loss_axis.plot([r["step"] for r in valid], [r["loss"] for r in valid], marker="o", label="valid loss (NLL)")
    loss_axis.set_xlabel("step")
    loss_axis.set_ylabel("loss per target token")
    loss_axis.legend()
    bleu_axis.plot([r["step"] for r in with_bleu], [r["bleu"] for r in with_bleu], marker="o", color="C2")
    bleu_axis.set_xlabel("step")
    bleu_axis.set_ylabel("validation BLEU (greedy)")
    figure.suptitle(run_dir.name)
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=100)
    plt.close(figure)
    target = Path(out) if out is not None else run_dir / CURVE
    atomic_write_bytes(target, image.getvalue(), inputs=[run_dir / METRICS])
    return target
