"""Training: batching, loss, schedules, the loop, checkpoints kept, averaging, curves.

Python API: ``train(config, prepared_dir, run_dir)`` returns a :class:`TrainSummary`;
``average_checkpoints(paths, out_dir)``; ``plot_learning_curve(run_dir)``;
``describe_model(model)`` for ``nmt train --dry-run``.
"""

from nmt_cli.training.averaging import average_checkpoints, checkpoints_to_average
from nmt_cli.training.curves import plot_learning_curve
from nmt_cli.training.summary import describe_model
from nmt_cli.training.trainer import TrainSummary, train

__all__ = [
    "TrainSummary",
    "average_checkpoints",
    "checkpoints_to_average",
    "describe_model",
    "plot_learning_curve",
    "train",
]
