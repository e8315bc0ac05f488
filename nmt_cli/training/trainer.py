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
carries (:mod:`~nmt_cli.training.state`), what it minimises (:mod:`~nmt_cli.training.objective`),
the optimizer step (:mod:`~nmt_cli.training.updater`), validation and early stopping
(:mod:`~nmt_cli.training.validation`), checkpoints kept (:mod:`~nmt_cli.training.checkpointing`),
the run directory (:mod:`~nmt_cli.training.run_dir`) and what a person sees
(:mod:`~nmt_cli.training.progress`).
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import math
import random
import resource
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, TextIO

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from nmt_cli.allocator import keep_freed_memory
from nmt_cli.checkpoint import (OPTIMIZER, STATE, Checkpoint, list_checkpoints, load_optimizer_state, load_weights,
                                reading_checkpoint_file, save_checkpoint, write_average)
from nmt_cli.config import Config
from nmt_cli.data.binarized import ParallelSplit
from nmt_cli.data.prepared import PreparedData
from nmt_cli.errors import NmtError
from nmt_cli.fileio import atomic_write_json
from nmt_cli.models import build_model
from nmt_cli.precision import Precision
from nmt_cli.progress import format_duration
from nmt_cli.training.batching import BatchStream, FixedBatches, WeightedBatches, check_fits_model, collate
from nmt_cli.training.checkpointing import CheckpointKeeper, load_initial, load_resumable
from nmt_cli.training.curves import plot_learning_curve
from nmt_cli.training.distributed import DistributedContext, init_distributed, sum_gradients_hook
from nmt_cli.training.meter import IntervalMeter
from nmt_cli.training.objective import build_objective
from nmt_cli.training.progress import RunLog, format_metric, progress_line
from nmt_cli.training.resume import capture_rng_state, restore_rng_state
from nmt_cli.training.run_dir import RunDirectory
from nmt_cli.training.state import TrainingState
from nmt_cli.training.updater import Updater
from nmt_cli.training.validation import EarlyStopping, validate

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


def check_word_links(config: Config, data: PreparedData, train_split: ParallelSplit) -> None:
    """Guided alignment needs piece links in the training split, and choosing the best
    checkpoint by AER needs word links for the validation split."""
    if config.train.alignment_weight > 0 and train_split.links is None:
        raise NmtError(f"{data.path}: train.alignment_weight > 0 needs word links for the training split; prepare "
                       "with data.alignment_path (a folder holding train.align), or again with --force when it was "
                       "prepared before nmt-cli stored links")
    if config.train.early_stop_metric == "aer" and (
            "valid" not in data.split_names or data.gold_alignment_path("valid") is None):
        raise NmtError(f"{data.path}: train.early_stop_metric=aer needs word links for the validation split "
                       "(data.alignment_path with its <valid split>.align)")


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
        check_word_links(config, data, self.train_split)
        if self.cfg.valid_every > 0 and "valid" not in data.split_names:
            raise NmtError(f"{data.path}: has no validation split to validate on every {self.cfg.valid_every} "
                           "steps; prepare one (data.valid_split) or set train.valid_every=0")
        self.early_stopping = EarlyStopping(self.cfg)
        seed_everything(self.cfg.seed)
        tokenizer = data.tokenizer
        self.model = build_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
        check_fits_model(data, [name for name in ("train", "valid") if name in data.split_names], self.model)
        self.precision = Precision(self.cfg.precision, context.device, self.cfg.fp16_init_scale)
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
            self.state = self._restore(checkpoint)
        else:
            self.state = TrainingState(init_from=self._start_from(initial) if initial is not None else None)
        self.objective = build_objective(config)
        self.module = self._wrap_model()
        self.epoch_batches = self._epoch_batches()
        self.stream_of_batches = BatchStream(self.epoch_batches, self.cfg.seed, context.rank, context.world_size,
                                             epoch=self.state.position["epoch"], index=self.state.position["batch"])
        self.keeper = CheckpointKeeper(run_dir.path, self.early_stopping.metric, self.early_stopping.mode,
                                       keep_last=max(self.cfg.keep_last, self.cfg.average_last),
                                       keep_best=self.cfg.keep_best)
        self.interval = IntervalMeter(context, self.state.interval)
        self._last_saved = self.state.step if checkpoint is not None else -1
        self._interrupted = False
        self._session_start = time.perf_counter()
        self._session_tokens, self._session_seconds = 0, 0.0
        self.log: RunLog | None = None

    # ---- setup ---------------------------------------------------------------------
    def _restore(self, checkpoint) -> TrainingState:
        """Optimizer, scheduler, counters and random generators of a checkpoint."""
        saved = load_optimizer_state(checkpoint.path)
        if saved is None:
            raise NmtError(f"{checkpoint.path}: no optimizer state, cannot resume training from it")
        with reading_checkpoint_file(checkpoint.path / STATE):  # a missing or bad field: one line naming it
            state = TrainingState.from_checkpoint(checkpoint.state, self.context.world_size)
            schedule_state, rng = checkpoint.state["scheduler"], checkpoint.state["rng"]
            restore_rng_state(rng[self.context.rank] if len(rng) == self.context.world_size else rng[0])
        with reading_checkpoint_file(checkpoint.path / OPTIMIZER):
            self.updater.restore(saved, schedule_state)
        return state

    def _start_from(self, initial: Checkpoint) -> dict[str, Any]:
        """Fine-tuning: keep the initial checkpoint's optimizer and/or schedule when asked."""
        kept = list(self.cfg.init_keep)
        if "optimizer" in kept:
            saved = load_optimizer_state(initial.path)
            if saved is None:
                raise NmtError(f"{initial.path}: has no optimizer state to keep (train.init_keep); "
                               "start with a fresh optimizer or use a training checkpoint")
            self.updater.restore_optimizer(saved)
        if "schedule" in kept:
            if "scheduler" not in initial.state:
                raise NmtError(f"{initial.path}: has no learning-rate schedule to keep (train.init_keep)")
            self.updater.schedule.load_state_dict(initial.state["scheduler"])
        return {"checkpoint": str(initial.path), "step": initial.step, "kept": kept}

    def _epoch_batches(self) -> FixedBatches | WeightedBatches:
        """The same batches every epoch, or a new weighted draw per epoch for a mixed split."""
        lengths = (self.train_split.src.lengths, self.train_split.tgt.lengths)
        mix = self.data.corpus_mix()
        if mix is None:
            return FixedBatches(*lengths, self.cfg.max_tokens)
        return WeightedBatches(*lengths, *mix, self.cfg.max_tokens, self.cfg.seed)

    def _wrap_model(self) -> torch.nn.Module:
        module: torch.nn.Module = self.model
        self._ddp = None
        if self.context.active:
            device = self.context.device
            device_ids = [device.index] if device.type == "cuda" else None
            # the only buffers, sinusoidal position tables, are the same function everywhere and grow
            # on the rank that meets a longer sentence: never sync them in forward (torch >= 2.13 names
            # this forward_sync_buffers and deprecates broadcast_buffers)
            options = inspect.signature(DistributedDataParallel).parameters
            no_sync = "forward_sync_buffers" if "forward_sync_buffers" in options else "broadcast_buffers"
            module = self._ddp = DistributedDataParallel(module, device_ids=device_ids, **{no_sync: False})
            module.register_comm_hook(None, sum_gradients_hook)
        if self.cfg.compile:
            module = torch.compile(module)
        return module

    # ---- the loop ------------------------------------------------------------------
    def run(self) -> TrainSummary:
        self._open_log()
        stop = None
        self.model.train()
        with self._stop_on_signals():
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
            int(self._interrupted),
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
            self.interval.add_batch(terms.loss, terms.nll, terms.alignment)
        applied = self.updater.step()
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
        self.log = RunLog(self.run_dir.path, enabled=self.context.is_main, stream=self.stream,
                          resume_step=self.state.step)
        if self.context.is_main:
            self.run_dir.write_config(self.config)
        params = self.model.num_parameters()
        batches = len(self.epoch_batches(self.stream_of_batches.epoch))
        corpora = self.data.manifest["splits"]["train"].get("corpora") or []
        mixed = "".join(f"{', ' if k else ' (mixed: '}{c['name']} {c['pairs']:,} x{c['weight']:g}"
                        for k, c in enumerate(corpora)) + (")" if corpora else "")
        where = f"resuming from {self.resumed_from.name}" if self.resumed_from else "fresh start"
        start = self.state.init_from
        if start is not None and not self.resumed_from:
            kept = " and ".join(start["kept"]) or "nothing else"
            where = f"fine-tuning from {start['checkpoint']} (step {start['step']}; kept {kept})"
        self.log.line(
            f"{self.config.model.arch}: {params:,} parameters | {len(self.train_split):,} training pairs{mixed} in "
            f"{batches:,} batches of <= {self.cfg.max_tokens} tokens | device {self.context.device} "
            f"x {self.context.world_size} | {self.precision.name} | {where}"
        )
        if self.precision.name == "fp16" and self.context.device.type == "cpu":
            self.log.line("note: fp16 on a CPU only tests loss scaling; it trains many times slower than fp32 "
                          "(bf16 or fp32 to train)")

    def _log_progress(self) -> None:
        """Print and record the loss, learning rate and throughput since the last line."""
        totals = self.interval.take()
        tokens = max(totals["tokens"], 1)
        record = {
            "kind": "train",
            "step": self.state.step,
            "epoch": self.stream_of_batches.epoch,
            "loss": totals["loss_sum"] / tokens,
            "ppl": math.exp(min(totals["nll_sum"] / tokens, 100.0)),
            **({"align_loss": totals["alignment_sum"] / tokens} if self.cfg.alignment_weight > 0 else {}),
            "lr": self.updater.learning_rate,
            "tokens_per_s": totals["tokens"] / totals["seconds"],
            "tokens_per_update": totals["tokens"] / max(totals["updates"], 1),
            "elapsed": self._elapsed(),
        }
        if self.precision.scaler is not None:
            record["skipped_updates"] = totals["skipped"]
            record["loss_scale"] = self.precision.scaler.get_scale()
        self.log.record(record)
        eta = self._eta(totals["seconds"] / max(totals["updates"], 1))
        self.log.line(progress_line(record, self.cfg.max_steps, eta))
        self._session_tokens += totals["tokens"]
        self._session_seconds += totals["seconds"]

    def _eta(self, seconds_per_update: float) -> float | None:
        remaining = []
        if self.cfg.max_steps > 0:
            remaining.append((self.cfg.max_steps - self.state.step) * seconds_per_update)
        if self.cfg.max_minutes > 0:
            remaining.append(self.cfg.max_minutes * 60 - self._elapsed())
        return max(min(remaining), 0.0) if remaining else None

    def _validate(self) -> bool:
        """Validate (on rank 0, shared with all ranks); True when patience is exhausted."""
        names = ("loss", "ppl", "bleu", "aer")
        with self.interval.paused():
            values = [math.nan] * len(names)
            if self.context.is_main:
                result = validate(self.model, self.data, self.config, self.context.device, self.precision)
                self.model.train()
                values = [math.nan if result[name] is None else result[name] for name in names]
            shared = self.context.broadcast_floats(values)
            loss, ppl, bleu, aer = shared
            result = {"step": self.state.step, "loss": loss, "ppl": ppl, "bleu": None if math.isnan(bleu) else bleu}
            if not math.isnan(aer):  # only when the validation split has word links
                result["aer"] = aer
            improved = self.early_stopping.record(self.state, result)
            self.updater.after_validation(result[self.early_stopping.metric])
            self.log.record({"kind": "valid", **result})
            shown = " | ".join(format_metric(name, result[name]) for name in names if result.get(name) is not None)
            self.log.line(f"valid step {self.state.step} | {shown} | {self._best_text()}"
                          + ("" if improved else f" ({self.state.bad_validations} without improvement)"))
            if self.context.is_main:
                self.keeper.write_best(self.state.validations)
        return self.early_stopping.exhausted(self.state)

    def _best_text(self) -> str:
        """``best bleu 27.31 at step 4000``."""
        best = self.state.best
        return f"best {format_metric(best['metric'], best['value'])} at step {best['step']}"

    def _save(self) -> None:
        """Checkpoint the step on rank 0 (random states gathered from every rank), then prune."""
        with self.interval.paused():
            rng_states = self.context.gather_objects(capture_rng_state())
            optimizer_state, schedule_state = self.updater.state()
            state = {
                **self.state.to_checkpoint(self._elapsed(), self.stream_of_batches.position, self.interval.state()),
                "world_size": self.context.world_size,
                "scheduler": schedule_state,
                "rng": rng_states,
                "prepared": str(self.data.path),
            }
            if self.context.is_main:
                save_checkpoint(self.keeper.path(self.state.step), self.model.state_dict(), self.config,
                                self.data.tokenizer, state, optimizer_state)
                self.keeper.prune(self.state.validations)
            self._last_saved = self.state.step

    def _finish(self, stop: str) -> TrainSummary:
        """Log the last interval, validate and save the final step, average, plot."""
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
        speed = self._session_tokens / self._session_seconds if self._session_seconds else 0.0
        best = f" | {self._best_text()}" if self.state.best else ""
        self.log.line(f"stopped ({stop}) at step {step}, epoch {self.stream_of_batches.epoch} | "
                      f"{speed:,.0f} target tok/s | elapsed {format_duration(self._elapsed())}{best}")
        self.log.close()
        checkpoints = list_checkpoints(self.run_dir.path)
        summary = TrainSummary(
            run_dir=self.run_dir.path,
            step=step,
            epoch=self.stream_of_batches.epoch,
            stop_reason=stop,
            best=self.state.best,
            last_checkpoint=checkpoints[-1] if checkpoints else None,
            averaged_checkpoint=averaged,
            target_tokens_per_second=speed,
            train_seconds=self._session_seconds,
            parameters=self.model.num_parameters(),
            peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # Linux: KiB
            init_from=self.state.init_from,
        )
        if self.context.is_main:
            atomic_write_json(self.run_dir.path / "summary.json", summary.to_json())
        return summary

    @contextlib.contextmanager
    def _stop_on_signals(self) -> Iterator[None]:
        """First Ctrl-C / SIGTERM: finish the update, save, stop. Second: abort at once."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def request_stop(signum: int, frame: Any) -> None:
            if self._interrupted:
                raise KeyboardInterrupt
            self._interrupted = True

        previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
