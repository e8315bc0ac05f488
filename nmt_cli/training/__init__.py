"""Training: batching, loss, schedules, the loop, checkpoints kept, averaging, curves.

Python API: ``train(config, prepared_dir, run_dir)`` returns a :class:`TrainSummary`;
``plot_learning_curve(run_dir)``;
``describe_model(model)`` for ``nmt train --dry-run``.
"""

from nmt_cli.training.curves import plot_learning_curve
from nmt_cli.training.summary import describe_model
from nmt_cli.training.trainer import TrainSummary, train

__all__ = [
    "TrainSummary",
    "describe_model",
    "plot_learning_curve",
    "train",
]
