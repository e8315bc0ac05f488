"""The training loop: token-budget batches, accumulation, validation, checkpoints.

``train(config, prepared_dir, run_dir)`` is the whole of ``nmt train``. It resumes
``run_dir`` from its newest checkpoint when there is one, and a resumed run repeats the
uninterrupted run exactly: the checkpoint holds the weights, the optimizer and scheduler
state, every random generator and the position in the batch stream.

One optimizer step ("update") takes ``train.update_freq`` batches on each process. Its
loss is the sum of the smoothed token losses divided by the number of target tokens
in the whole update (all batches, all processes), so the gradient does not depend on
how the tokens were split into batches or processes.

The :class:`Trainer` only runs the loop; its parts live beside it: the counters it
carries (:mod:`~nmt_cli.training.state`), what it minimises (:mod:`~nmt_cli.training.objectives`),
the optimizer step (:mod:`~nmt_cli.training.updater`), validation and early stopping
(:mod:`~nmt_cli.training.validation`), checkpoints resumed from and kept
(:mod:`~nmt_cli.training.checkpointing`), the run directory (:mod:`~nmt_cli.training.run_dir`),
DDP (:mod:`~nmt_cli.training.distributed`), Ctrl-C (:mod:`~nmt_cli.training.interrupt`) and
what a person sees (:mod:`~nmt_cli.training.report`, :mod:`~nmt_cli.training.progress`).
"""

from __future__ import annotations

import contextlib
import gc
import random
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from nmt_cli.allocator import keep_freed_memory
from nmt_cli.checkpoint import list_checkpoints, load_weights, save_checkpoint, write_average
from nmt_cli.config import Config
from nmt_cli.data.prepared import PreparedData
from nmt_cli.fileio import atomic_write_json
from nmt_cli.models import build_model
from nmt_cli.precision import Precision
from nmt_cli.training.batching import BatchStream, check_fits_model, collate, epoch_batches
from nmt_cli.training.checkpointing import (CheckpointKeeper, load_initial, load_resumable, restore_training,
                                            start_from_initial)
from nmt_cli.training.curves import plot_learning_curve
from nmt_cli.training.distributed import DistributedContext, init_distributed, wrap_model
from nmt_cli.training.interrupt import StopRequest
from nmt_cli.training.meter import IntervalMeter
from nmt_cli.training.objectives import ObjectiveContext, build_objective
from nmt_cli.training.packed_layers import pack_training_layers
from nmt_cli.training.progress import RunLog
from nmt_cli.training.report import SessionReport
from nmt_cli.training.resume import capture_rng_state
from nmt_cli.training.run_dir import RunDirectory
from nmt_cli.training.state import TrainingState
from nmt_cli.training.updater import Updater
from nmt_cli.training.validation import EarlyStopping, check_validation_split, validate_on_main

__all__ = ["TrainSummary", "Trainer", "train"]


@dataclass
class TrainSummary:
    """How a call to :func:`train` ended."""

    run_dir: Path
    step: int
    epoch: int
    stop_reason: str  # max_steps | max_epochs | max_minutes | early_stop | interrupted
    best: dict[str, Any] | None
    last_checkpoint: Path | None
    averaged_checkpoint: Path | None
    target_tokens_per_second: float  # this session, all processes, validation time excluded
    train_seconds: float
    parameters: int
    peak_rss_mb: float  # this process (rank 0 under torchrun), from getrusage
    init_from: dict[str, Any] | None = None  # fine-tuning: the checkpoint the run started from

    def to_json(self) -> dict[str, Any]:
        """The record written to ``<run>/summary.json`` (read by recipes and benchmarks)."""
        return {
            "step": self.step,
            "epoch": self.epoch,
            "stop_reason": self.stop_reason,
            "best": self.best,
            "last_checkpoint": str(self.last_checkpoint) if self.last_checkpoint else None,
            "averaged_checkpoint": str(self.averaged_checkpoint) if self.averaged_checkpoint else None,
            "target_tokens_per_second": round(self.target_tokens_per_second, 1),
            "train_seconds": round(self.train_seconds, 1),
            "parameters": self.parameters,
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "init_from": self.init_from,
        }


def train(config: Config, prepared_dir: str | Path, run_dir: str | Path, *, restart: bool = False,
          device: str | None = None, stream: TextIO | None = None) -> TrainSummary:
    """Train ``config.model`` on a prepared directory into ``run_dir``.

    ``run_dir`` with checkpoints is resumed (its config must match, see
    :func:`nmt_cli.training.resume.check_same_run`) unless ``restart`` clears it first.
    Under ``torchrun`` each process calls this; rank 0 alone writes files and logs.
    """
    context = init_distributed(device)
    directory = RunDirectory(run_dir)
    try:
        directory.check()
        data = PreparedData(prepared_dir)
        data.verify()
        with directory.session(writer=context.is_main):
            if restart and context.is_main:
                directory.clear()
            context.barrier()
            trainer = Trainer(config, data, directory, context, directory.resume_point(), stream)
            summary = trainer.run()
            # DDP's reducer holds the process group and gradient buckets whose Python objects
            # the gloo threads would have to free (taking the GIL) when the group's destructor
            # joins them: free them here, while those threads can still run, not in a
            # destructor that joins them with the GIL held (a hang at exit, 1 run in ~20).
            del trainer
            gc.collect()
            # rank 0 still writes the last checkpoint and the plot; no rank tears the group down
            # (and exits) while another is still connected to it. Not on the error path: a rank
            # that raised would leave the others waiting here for ever.
            context.barrier()
        return summary
    finally:
        context.close()


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


class Trainer:
    """One training session of a run directory (fresh, or resumed from ``resume_from``).

    Building it creates no file; :meth:`run` opens the logs and writes as it goes.
    """

    def __init__(self, config: Config, data: PreparedData, run_dir: RunDirectory, context: DistributedContext,
                 resume_from: Path | None = None, stream: TextIO | None = None):
        self.config, self.cfg, self.context, self.data = config, config.train, context, data
        self.run_dir, self.resumed_from, self.stream = run_dir, resume_from, stream
        keep_freed_memory()
        if self.cfg.num_threads > 0:
            torch.set_num_threads(self.cfg.num_threads)
        self.train_split = data.split("train")
        check_validation_split(config, data)
        self.early_stopping = EarlyStopping(self.cfg)
        seed_everything(self.cfg.seed)
        tokenizer = data.tokenizer
        self.model = build_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
        check_fits_model(data, [name for name in ("train", "valid") if name in data.split_names], self.model)
        self.precision = Precision(self.cfg.precision, context.device, self.cfg.fp16_init_scale, config.model.arch)
        checkpoint = initial = None
        if resume_from is not None:
            checkpoint = load_resumable(resume_from, config, tokenizer, run_dir.path, data.path)
            load_weights(self.model, checkpoint.weights, source=str(resume_from))
        elif self.cfg.init_from:
            initial = load_initial(self.cfg.init_from, config, tokenizer, data.path)
            load_weights(self.model, initial.weights, source=str(initial.path))
        self.model.to(context.device)
        self.updater = Updater(self.model, self.cfg, self.precision, self.early_stopping.mode)
        if checkpoint is not None:
            self.state = restore_training(checkpoint, self.updater, context)
        else:
            started = start_from_initial(initial, self.updater, self.cfg.init_keep) if initial is not None else None
            self.state = TrainingState(init_from=started)
        self.objective = build_objective(config, ObjectiveContext(context.device, data))
        self.module, self._ddp = wrap_model(self.model, context, self.cfg.compile)
        self.packed_weights = pack_training_layers(self.model, context.device, self.cfg.compile)
        self.epoch_batches = epoch_batches(data, self.train_split, self.cfg.max_tokens, self.cfg.seed,
                                           self.cfg.batch_window)
        self.stream_of_batches = BatchStream(self.epoch_batches, self.cfg.seed, context.rank, context.world_size,
                                             epoch=self.state.position["epoch"], index=self.state.position["batch"])
        self.keeper = CheckpointKeeper(run_dir.path, self.early_stopping.metric, self.early_stopping.mode,
                                       keep_last=max(self.cfg.keep_last, self.cfg.average_last),
                                       keep_best=self.cfg.keep_best)
        self.interval = IntervalMeter(context, self.objective.terms, self.state.interval)
        self._last_saved = self.state.step if checkpoint is not None else -1
        self._stop_request = StopRequest()
        self._session_start = time.perf_counter()
        self.report: SessionReport | None = None

    # ---- the loop ------------------------------------------------------------------
    def run(self) -> TrainSummary:
        self._open_log()
        stop = None
        self.model.train()
        with self._stop_request.listening(), self._packed_layers():
            while (stop := self._budget_spent()) is None:
                interrupted, out_of_time, applied = self._update()
                if applied:  # an update skipped for fp16 overflow is not a step
                    self.state.step += 1
                    stop = self._after_step()
                if stop is None and (interrupted or out_of_time):
                    stop = "interrupted" if interrupted else "max_minutes"
                if stop is not None:
                    break
            return self._finish(stop)

    @contextlib.contextmanager
    def _packed_layers(self):
        """The layers multiplied through oneDNN (training/packed_layers.py) get F.linear back when the run ends."""
        try:
            yield
        finally:
            if self.packed_weights is not None:
                self.packed_weights.release()

    def _after_step(self) -> str | None:
        """Log, validate and save as the step number asks; ``early_stop`` when patience ran out."""
        step, stop = self.state.step, None
        if step % self.cfg.log_every == 0:
            self._log_progress()
        if self.cfg.valid_every > 0 and step % self.cfg.valid_every == 0:
            if self._validate():
                stop = "early_stop"
            self._save()
        elif self.cfg.save_every > 0 and step % self.cfg.save_every == 0:
            self._save()
        return stop

    def _budget_spent(self) -> str | None:
        """Why to stop before the next update (steps or epochs used up), else None."""
        if self.cfg.max_steps > 0 and self.state.step >= self.cfg.max_steps:
            return "max_steps"
        if self.cfg.max_epochs > 0 and self.stream_of_batches.epoch > self.cfg.max_epochs:
            return "max_epochs"
        return None

    def _elapsed(self) -> float:
        return self.state.elapsed_before + time.perf_counter() - self._session_start

    def _update(self) -> tuple[bool, bool, bool]:
        """One update; returns whether any process was interrupted / ran out of time, and
        whether the optimizer step was applied (False: fp16 gradients overflowed)."""
        batches = [collate(self.train_split, next(self.stream_of_batches)) for _ in range(self.cfg.update_freq)]
        out_of_time = self.cfg.max_minutes > 0 and self._elapsed() >= self.cfg.max_minutes * 60
        tokens, sentences, interrupted, timed_out = self.context.sum_ints([
            sum(batch.num_tokens for batch in batches),
            sum(batch.src.size(0) for batch in batches),
            int(self._stop_request.requested),
            int(out_of_time),
        ])
        # gradients are summed over processes (sum_gradients_hook): the update's sum/tokens (or sum/sentences)
        scale = 1.0 / (sentences if self.cfg.loss_normalization == "sentences" else tokens)
        for index, batch in enumerate(batches):
            batch = batch.to(self.context.device)
            with self._gradient_sync(index == len(batches) - 1):
                with self.precision.autocast():
                    terms = self.objective(self.module, self.model, batch)
                self.updater.backward(terms.loss * scale)
            self.interval.add_batch(terms.loss, terms.nll, terms.logged)
        applied = self.updater.step()
        if self.packed_weights is not None:  # the step changed the weights their reorders were made of
            self.packed_weights.clear()
        self.interval.add_update(tokens, applied)
        return interrupted > 0, timed_out > 0, applied

    def _gradient_sync(self, last_batch: bool) -> contextlib.AbstractContextManager:
        """DDP all-reduces gradients on the last batch of an update only."""
        if self._ddp is None or last_batch:
            return contextlib.nullcontext()
        return self._ddp.no_sync()

    # ---- logging, validation, checkpoints -----------------------------------------------
    def _open_log(self) -> None:
        """Open the logs (rank 0 writes them), record the settings and say what runs."""
        log = RunLog(self.run_dir.path, enabled=self.context.is_main, stream=self.stream,
                     resume_step=self.state.step)
        self.report = SessionReport(log, self.config, self.objective.terms)
        if self.context.is_main:
            self.run_dir.write_config(self.config)
        self.report.started(self.data, len(self.train_split),
                            self.epoch_batches.batches_per_epoch(self.stream_of_batches.epoch),
                            self.model.num_parameters(), self.context, self.precision, self.state,
                            self.resumed_from)

    def _log_progress(self) -> None:
        self.report.interval(self.interval.take(), self.state.step, self.stream_of_batches.epoch,
                             self.updater.learning_rate, self._elapsed(), self.precision.scaler)

    def _validate(self) -> bool:
        """Validate (on rank 0, shared with all ranks); True when patience is exhausted."""
        with self.interval.paused():
            result = validate_on_main(self.model, self.data, self.config, self.context, self.precision,
                                      self.state.step)
            improved = self.early_stopping.record(self.state, result)
            self.updater.after_validation(result[self.early_stopping.metric])
            self.report.validation(result, self.state, improved)
            if self.context.is_main:
                self.keeper.write_best(self.state.validations)
        return self.early_stopping.exhausted(self.state)

    def _save(self) -> None:
        """Checkpoint the step on rank 0 (random states gathered from every rank), then prune."""
        with self.interval.paused():
            rng_states = self.context.gather_objects(capture_rng_state())
            optimizer_state, schedule_state = self.updater.state()
            state = self.state.to_checkpoint(self._elapsed(), self.stream_of_batches.position, self.interval.state(),
                                             self.context.world_size, schedule_state, rng_states, self.data.path)
            if self.context.is_main:
                save_checkpoint(self.keeper.path(self.state.step), self.model.state_dict(), self.config,
                                self.data.tokenizer, state, optimizer_state)
                self.keeper.prune(self.state.validations)
            self._last_saved = self.state.step

    def _finish(self, stop: str) -> TrainSummary:
        """Log the last interval, validate and save the final step, average, plot, summarise."""
        step = self.state.step
        if self.interval.updates > self.interval.skipped:  # a step since the last line
            self._log_progress()
        if stop != "interrupted" and self.cfg.valid_every > 0 and self.state.last_validated != step and step > 0:
            self._validate()
        if self._last_saved != step and step > 0:
            self._save()
        averaged = None
        if self.context.is_main:
            if stop != "interrupted" and self.cfg.average_last > 1:
                averaged = write_average(list_checkpoints(self.run_dir.path)[-self.cfg.average_last:],
                                         self.keeper.directory / f"average-last{self.cfg.average_last}")
            if step > 0:
                plot_learning_curve(self.run_dir.path)
        self.report.finished(stop, step, self.stream_of_batches.epoch, self._elapsed(), self.state.best)
        self.report.log.close()
        checkpoints = list_checkpoints(self.run_dir.path)
        summary = TrainSummary(
            run_dir=self.run_dir.path,
            step=step,
            epoch=self.stream_of_batches.epoch,
            stop_reason=stop,
            best=self.state.best,
            last_checkpoint=checkpoints[-1] if checkpoints else None,
            averaged_checkpoint=averaged,
            target_tokens_per_second=self.report.tokens_per_second,
            train_seconds=self.report.seconds,
            parameters=self.model.num_parameters(),
            peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # Linux: KiB
            init_from=self.state.init_from,
        )
        if self.context.is_main:
            atomic_write_json(self.run_dir.path / "summary.json", summary.to_json())
        return summary
