"""The training loop: token-budget batches, accumulation, clipping, validation, checkpoints.

``train(config, prepared_dir, run_dir)`` is the whole of ``nmt train``. It resumes
``run_dir`` from its newest checkpoint when there is one, and a resumed run repeats the
uninterrupted run exactly: the checkpoint holds the weights, the optimizer and scheduler
state, every random generator and the position in the batch stream.

One optimizer step ("update") takes ``train.update_freq`` batches on each process. Its
loss is the sum of the smoothed token losses divided by the number of target tokens
in the whole update (all batches, all processes), so the gradient does not depend on
how the tokens were split into batches or processes.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import random
import resource
import shutil
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
from nmt_cli.checkpoint import (list_checkpoints, load_checkpoint, load_optimizer_state, load_weights, save_checkpoint,
                                write_average)
from nmt_cli.config import Config, TrainConfig
from nmt_cli.data.prepared import PreparedData
from nmt_cli.errors import ConfigError, NmtError
from nmt_cli.fileio import atomic_write_json, atomic_write_text
from nmt_cli.models import build_model
from nmt_cli.precision import Precision
from nmt_cli.training.batching import BatchStream, collate, make_batches
from nmt_cli.training.checkpointing import CheckpointKeeper, is_better
from nmt_cli.training.curves import plot_learning_curve
from nmt_cli.training.distributed import DistributedContext, init_distributed, sum_gradients_hook
from nmt_cli.training.loss import label_smoothed_cross_entropy
from nmt_cli.training.meter import IntervalMeter
from nmt_cli.progress import format_duration
from nmt_cli.training.progress import RunLog, format_metric, progress_line
from nmt_cli.training.resume import capture_rng_state, check_same_run, restore_rng_state
from nmt_cli.training.schedule import LearningRateSchedule, build_optimizer
from nmt_cli.training.validation import validation_bleu, validation_loss

__all__ = ["TrainSummary", "Trainer", "train"]

#: files of a run directory that ``--restart`` removes
RUN_OUTPUTS = ("checkpoints", "metrics.jsonl", "train.log", "learning_curve.png", "tensorboard")


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
        }


def train(config: Config, prepared_dir: str | Path, run_dir: str | Path, *, restart: bool = False,
          device: str | None = None, stream: TextIO | None = None) -> TrainSummary:
    """Train ``config.model`` on a prepared directory into ``run_dir``.

    ``run_dir`` with checkpoints is resumed (its config must match, see
    :func:`nmt_cli.training.resume.check_same_run`) unless ``restart`` clears it first.
    Under ``torchrun`` each process calls this; rank 0 alone writes files and logs.
    """
    context = init_distributed(device)
    try:
        summary = Trainer(config, prepared_dir, run_dir, context, restart=restart, stream=stream).run()
        # rank 0 still writes the last checkpoint and the plot; no rank tears the group down
        # (and exits) while another is still connected to it. Not on the error path: a rank
        # that raised would leave the others waiting here for ever.
        context.barrier()
        return summary
    finally:
        context.close()


def validation_metric(cfg: TrainConfig) -> tuple[str, str]:
    """The metric that picks the best checkpoint, stops early and drives ``plateau``: (name, mode)."""
    if cfg.early_stop_metric == "bleu":
        if not cfg.valid_bleu:
            raise ConfigError("train.early_stop_metric=bleu needs train.valid_bleu=true (or use loss)")
        return "bleu", "max"
    return "loss", "min"


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


class Trainer:
    """One training session of a run directory (fresh or resumed)."""

    def __init__(self, config: Config, prepared_dir: str | Path, run_dir: str | Path,
                 context: DistributedContext, restart: bool = False, stream: TextIO | None = None):
        self.config, self.cfg, self.context = config, config.train, context
        self.device = context.device
        keep_freed_memory()
        self.run_dir = Path(run_dir)
        self.metric, self.mode = validation_metric(self.cfg)
        if self.cfg.update_freq < 1:
            raise ConfigError(f"train.update_freq must be at least 1, got {self.cfg.update_freq}")
        if self.cfg.num_threads > 0:
            torch.set_num_threads(self.cfg.num_threads)
        self.prepared_dir = Path(prepared_dir)
        self.data = PreparedData(self.prepared_dir)
        self.tokenizer = self.data.tokenizer
        self.train_split = self.data.split("train")
        resume_from = self._prepare_run_dir(restart)

        seed_everything(self.cfg.seed)
        self.model = build_model(config.model, self.tokenizer.src_vocab_size, self.tokenizer.tgt_vocab_size,
                                 self.tokenizer.joint)
        self.precision = Precision(self.cfg.precision, self.device, self.cfg.fp16_init_scale)
        # training state; replaced by the checkpoint's when resuming
        self.step = 0
        self.validations: list[dict[str, Any]] = []
        self.best: dict[str, Any] | None = None
        self.bad_validations = 0
        self.elapsed_before = 0.0
        position, interval = {"epoch": 1, "batch": 0}, None
        state = self._load_weights(resume_from) if resume_from is not None else None
        self.model.to(self.device)
        self.optimizer = build_optimizer(self.model.parameters(), self.cfg)
        self.schedule = LearningRateSchedule(self.optimizer, self.cfg, self.mode)
        if state is not None:
            position, interval = self._restore(resume_from, state)
        self.train_module = self._wrap_model()

        self.batches = make_batches(self.train_split.src.lengths, self.train_split.tgt.lengths, self.cfg.max_tokens)
        self.stream = BatchStream(self.batches, self.cfg.seed, context.rank, context.world_size,
                                  epoch=position["epoch"], index=position["batch"])
        self.keeper = CheckpointKeeper(self.run_dir, self.metric, self.mode,
                                       keep_last=max(self.cfg.keep_last, self.cfg.average_last),
                                       keep_best=self.cfg.keep_best)
        self.log = RunLog(self.run_dir, enabled=context.is_main, stream=stream, resume_step=self.step)
        if context.is_main:
            atomic_write_text(self.run_dir / "config.yaml", config.to_yaml())
        self.resumed_from = resume_from
        self._last_saved = self.step if resume_from is not None else -1
        self._last_validated = self.validations[-1]["step"] if self.validations else -1
        self._interrupted = False
        self._session_start = time.perf_counter()
        self.interval = IntervalMeter(context, interval)
        self._session_tokens = 0
        self._session_seconds = 0.0

    # ---- setup ---------------------------------------------------------------------
    def _prepare_run_dir(self, restart: bool) -> Path | None:
        """The checkpoint to resume from (None: fresh); ``restart`` clears earlier outputs."""
        if restart and self.context.is_main:
            for name in RUN_OUTPUTS:
                path = self.run_dir / name
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.exists():
                    path.unlink()
        self.context.barrier()
        existing = list_checkpoints(self.run_dir)
        return existing[-1] if existing else None

    def _load_weights(self, path: Path) -> dict[str, Any]:
        checkpoint = load_checkpoint(path)
        check_same_run(checkpoint.config, self.config, str(self.run_dir))
        if checkpoint.tokenizer.model_files() != self.tokenizer.model_files():
            raise NmtError(f"{self.run_dir}: was trained with another SentencePiece model than "
                           f"{self.prepared_dir}; use --restart or a new --out directory")
        load_weights(self.model, checkpoint.weights, source=str(path))
        return checkpoint.state

    def _restore(self, path: Path, state: dict[str, Any]) -> tuple[dict[str, int], dict[str, Any]]:
        """Optimizer, scheduler, counters and random generators from checkpoint ``path``."""
        saved = load_optimizer_state(path)
        if saved is None:
            raise NmtError(f"{path}: no optimizer state, cannot resume training from it")
        self.optimizer.load_state_dict(saved["optimizer"])
        if self.precision.scaler is not None and saved.get("grad_scaler"):
            self.precision.scaler.load_state_dict(saved["grad_scaler"])
        self.schedule.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        self.validations = list(state["validations"])
        self.best = state["best"]
        self.bad_validations = int(state["bad_validations"])
        self.elapsed_before = float(state["elapsed_seconds"])
        position = dict(state["data_position"])
        if state["world_size"] != self.context.world_size:  # same epoch, proportional place in it
            position["batch"] = position["batch"] * state["world_size"] // self.context.world_size
        rng = state["rng"]
        restore_rng_state(rng[self.context.rank] if len(rng) == self.context.world_size else rng[0])
        return position, state["interval"]

    def _wrap_model(self) -> torch.nn.Module:
        module: torch.nn.Module = self.model
        if self.context.active:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            # the only buffers, sinusoidal position tables, are the same function everywhere and grow
            # on the rank that meets a longer sentence: never sync them in forward (torch >= 2.13 names
            # this forward_sync_buffers and deprecates broadcast_buffers)
            options = inspect.signature(DistributedDataParallel).parameters
            no_sync = "forward_sync_buffers" if "forward_sync_buffers" in options else "broadcast_buffers"
            module = DistributedDataParallel(module, device_ids=device_ids, **{no_sync: False})
            module.register_comm_hook(None, sum_gradients_hook)
        self._ddp = module if self.context.active else None
        if self.cfg.compile:
            module = torch.compile(module)
        return module

    # ---- the loop ------------------------------------------------------------------
    def run(self) -> TrainSummary:
        self._announce()
        stop = None
        self.model.train()
        with self._stop_on_signals():
            while (stop := self._budget_spent()) is None:
                interrupted, out_of_time, applied = self._update()
                if applied:  # an update skipped for fp16 overflow is not a step
                    self.step += 1
                    if self.step % max(self.cfg.log_every, 1) == 0:
                        self._log_progress()
                    if self.cfg.valid_every > 0 and self.step % self.cfg.valid_every == 0:
                        if self._validate():
                            stop = "early_stop"
                        self._save()
                    elif self.cfg.save_every > 0 and self.step % self.cfg.save_every == 0:
                        self._save()
                if stop is None and (interrupted or out_of_time):
                    stop = "interrupted" if interrupted else "max_minutes"
                if stop is not None:
                    break
            return self._finish(stop)

    def _budget_spent(self) -> str | None:
        """Why to stop before the next update (steps or epochs used up), else None."""
        if self.cfg.max_steps > 0 and self.step >= self.cfg.max_steps:
            return "max_steps"
        if self.cfg.max_epochs > 0 and self.stream.epoch > self.cfg.max_epochs:
            return "max_epochs"
        return None

    def _elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self._session_start

    def _update(self) -> tuple[bool, bool, bool]:
        """One update; returns whether any process was interrupted / ran out of time, and
        whether the optimizer step was applied (False: fp16 gradients overflowed)."""
        batches = [collate(self.train_split, next(self.stream)) for _ in range(self.cfg.update_freq)]
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
            batch = batch.to(self.device)
            with self._gradient_sync(index == len(batches) - 1):
                with self.precision.autocast():
                    features, _ = self.train_module(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask,
                                                    features_only=True)
                    loss_sum, nll_sum = label_smoothed_cross_entropy(
                        features, self.model.output_layer(), batch.tgt_out, batch.tgt_mask, self.cfg.label_smoothing
                    )
                self._backward(loss_sum * scale)
            self.interval.add_batch(loss_sum, nll_sum)
        applied = self._optimizer_step()
        self.interval.add_update(tokens, applied)
        return interrupted > 0, timed_out > 0, applied

    def _gradient_sync(self, last_batch: bool) -> contextlib.AbstractContextManager:
        """DDP all-reduces gradients on the last batch of an update only."""
        if self._ddp is None or last_batch:
            return contextlib.nullcontext()
        return self._ddp.no_sync()

    def _backward(self, loss: torch.Tensor) -> None:
        scaler = self.precision.scaler
        (scaler.scale(loss) if scaler is not None else loss).backward()

    def _optimizer_step(self) -> bool:
        """Clip and step; False when the fp16 loss scaler found inf/NaN gradients and skipped it.

        A skipped update leaves the weights, the optimizer and the learning-rate schedule as
        they were (as fairseq does), and the scaler halves the loss scale. Its batches are
        consumed, so a run that overflows at the same place after a resume skips it again.
        """
        scaler = self.precision.scaler
        if scaler is not None:
            scaler.unscale_(self.optimizer)  # clip the true gradients
        if self.cfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        applied = True
        if scaler is None:
            self.optimizer.step()
        else:
            scale = scaler.get_scale()
            scaler.step(self.optimizer)
            scaler.update()
            applied = scaler.get_scale() >= scale  # update() lowers the scale only after an overflow
        self.optimizer.zero_grad(set_to_none=True)
        if applied:
            self.schedule.after_update()
        return applied

    # ---- logging, validation, checkpoints -----------------------------------------------
    def _announce(self) -> None:
        params = self.model.num_parameters()
        where = f"resuming from {self.resumed_from.name}" if self.resumed_from else "fresh start"
        self.log.line(
            f"{self.config.model.arch}: {params:,} parameters | {len(self.train_split):,} training pairs in "
            f"{len(self.batches):,} batches of <= {self.cfg.max_tokens} tokens | device {self.device} "
            f"x {self.context.world_size} | {self.precision.name} | {where}"
        )
        if self.precision.name == "fp16" and self.device.type == "cpu":
            self.log.line("note: fp16 on a CPU tests loss scaling; it trained 20x slower than fp32 on an AMD EPYC "
                          "(bf16 or fp32 to train)")

    def _log_progress(self) -> None:
        """Print and record the loss, learning rate and throughput since the last line."""
        totals = self.interval.take()
        tokens = max(totals["tokens"], 1)
        record = {
            "kind": "train",
            "step": self.step,
            "epoch": self.stream.epoch,
            "loss": totals["loss_sum"] / tokens,
            "ppl": math.exp(min(totals["nll_sum"] / tokens, 100.0)),
            "lr": self.optimizer.param_groups[0]["lr"],
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
            remaining.append((self.cfg.max_steps - self.step) * seconds_per_update)
        if self.cfg.max_minutes > 0:
            remaining.append(self.cfg.max_minutes * 60 - self._elapsed())
        return max(min(remaining), 0.0) if remaining else None

    def _validate(self) -> bool:
        """Validate (on rank 0, shared with all ranks); True when patience is exhausted."""
        with self.interval.paused():
            values = [math.nan, math.nan, math.nan]
            if self.context.is_main:
                self.model.eval()
                loss, ppl = validation_loss(self.model, self.data.split("valid"), self.cfg.max_tokens,
                                            self.device, self.precision)
                bleu = validation_bleu(self.model, self.data, self.config, self.device) if self.cfg.valid_bleu else math.nan
                self.model.train()
                values = [loss, ppl, bleu]
            loss, ppl, bleu = self.context.broadcast_floats(values)
            result = {"step": self.step, "loss": loss, "ppl": ppl, "bleu": None if math.isnan(bleu) else bleu}
            self.validations.append(result)
            self._last_validated = self.step
            value = result[self.metric]
            improved = is_better(value, self.best["value"] if self.best else None, self.mode)
            if improved:
                self.best = {"step": self.step, "metric": self.metric, "value": value}
                self.bad_validations = 0
            else:
                self.bad_validations += 1
            self.schedule.after_validation(value)
            self.log.record({"kind": "valid", **result})
            shown = " | ".join(format_metric(name, result[name]) for name in ("loss", "ppl", "bleu")
                               if result[name] is not None)
            self.log.line(f"valid step {self.step} | {shown} | {self._best_text()}"
                          + ("" if improved else f" ({self.bad_validations} without improvement)"))
            if self.context.is_main:
                self.keeper.write_best(self.validations)
        return self.cfg.patience > 0 and self.bad_validations >= self.cfg.patience

    def _best_text(self) -> str:
        """``best bleu 27.31 at step 4000``."""
        return f"best {format_metric(self.best['metric'], self.best['value'])} at step {self.best['step']}"

    def _save(self) -> None:
        """Checkpoint the step on rank 0 (random states gathered from every rank), then prune."""
        with self.interval.paused():
            rng_states = self.context.gather_objects(capture_rng_state())
            state = {
                "step": self.step,
                "epoch": self.stream.epoch,
                "data_position": self.stream.position,
                "world_size": self.context.world_size,
                "scheduler": self.schedule.state_dict(),
                "rng": rng_states,
                "validations": self.validations,
                "best": self.best,
                "bad_validations": self.bad_validations,
                "elapsed_seconds": self._elapsed(),
                "interval": self.interval.state(),
                "prepared": str(self.prepared_dir),
            }
            optimizer_state = {
                "optimizer": self.optimizer.state_dict(),
                "grad_scaler": self.precision.scaler.state_dict() if self.precision.scaler is not None else None,
            }
            if self.context.is_main:
                save_checkpoint(self.keeper.path(self.step), self.model.state_dict(), self.config, self.tokenizer, state,
                                optimizer_state)
                self.keeper.prune(self.validations)
            self._last_saved = self.step

    def _finish(self, stop: str) -> TrainSummary:
        """Log the last interval, validate and save the final step, average, plot."""
        if self.interval.updates > self.interval.skipped:  # a step since the last line
            self._log_progress()
        if stop != "interrupted" and self.cfg.valid_every > 0 and self._last_validated != self.step and self.step > 0:
            self._validate()
        if self._last_saved != self.step and self.step > 0:
            self._save()
        averaged = None
        if self.context.is_main:
            if stop != "interrupted" and self.cfg.average_last > 1:
                averaged = write_average(list_checkpoints(self.run_dir)[-self.cfg.average_last:],
                                         self.run_dir / "checkpoints" / f"average-last{self.cfg.average_last}")
            if self.step > 0:
                plot_learning_curve(self.run_dir)
        speed = self._session_tokens / self._session_seconds if self._session_seconds else 0.0
        best = f" | {self._best_text()}" if self.best else ""
        self.log.line(f"stopped ({stop}) at step {self.step}, epoch {self.stream.epoch} | "
                      f"{speed:,.0f} target tok/s | elapsed {format_duration(self._elapsed())}{best}")
        self.log.close()
        checkpoints = list_checkpoints(self.run_dir)
        summary = TrainSummary(
            run_dir=self.run_dir,
            step=self.step,
            epoch=self.stream.epoch,
            stop_reason=stop,
            best=self.best,
            last_checkpoint=checkpoints[-1] if checkpoints else None,
            averaged_checkpoint=averaged,
            target_tokens_per_second=speed,
            train_seconds=self._session_seconds,
            parameters=self.model.num_parameters(),
            peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # Linux: KiB
        )
        if self.context.is_main:
            atomic_write_json(self.run_dir / "summary.json", summary.to_json())
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
