"""The alignment bench's training runs: one config per model, ``nmt prepare`` + ``nmt train``
(kept with ``--reuse-models`` when nothing that decides the model changed), and ``nmt
align bootstrap``; each run's cost as the library's stage reader gives it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from alignment_bench.corpora import BenchCorpus
from alignment_bench.settings import Settings
from alignment_bench.steps import run_step
from common import nmt_command

from nmt_cli.bootstrap import RECORD
from nmt_cli.config import Config, load_config
from nmt_cli.fileio import atomic_write_text
from nmt_cli.stages import PipelineRecord, run_finished, training_seconds

#: settings that decide how fast a model decodes, never what it learns or outputs: a run
#: whose config differs from the new one only in these is kept by ``--reuse-models``
SPEED_ONLY = (("decode", "max_tokens"),)
TRAINED_ON = re.compile(r"\| device (\S+ x \d+) \|")


def model_config(corpus: BenchCorpus, settings: Settings, **data: object) -> Config:
    """The config of every nmt-cli model of ``corpus`` (``data``: more ``data.*`` keys)."""
    scale = settings.scale
    steps = scale.steps[corpus.name]
    return Config.from_dict({
        "data": {"source": "files", "path": str(corpus.raw), "src_lang": "de", "tgt_lang": "en",
                 "valid_split": "valid", "vocab_size": scale.vocab_size, "max_length_ratio": 0, **data},
        "model": scale.model,
        "train": {"max_steps": steps, "max_tokens": scale.max_tokens, "lr": 0.002, "precision": scale.precision,
                  "warmup_steps": max(steps // 8, 1), "valid_every": steps, "valid_bleu": False,
                  "early_stop_metric": "loss", "num_threads": settings.threads,
                  "log_every": max(steps // 20, 1), "keep_last": 1, "label_smoothing": 0.1},
        "decode": {"beam_size": 1},
    })


def _same_models(stored: Config, wanted: Config) -> bool:
    """Whether ``stored`` trains the models ``wanted`` would, speed-only settings aside."""
    return stored.with_overrides(
        {f"{section}.{key}": getattr(getattr(wanted, section), key) for section, key in SPEED_ONLY}) == wanted


def models_kept(settings: Settings, config_path: Path, config: Config) -> bool:
    """With ``--reuse-models``: whether the models built from ``config_path`` can stay (the
    same settings as now, read as a config: a key added since, at its default, changes
    nothing, nor does a :data:`SPEED_ONLY` one); the new settings are written there either way."""
    same = settings.reuse and config_path.is_file() and _same_models(load_config(config_path), config)
    config_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(config_path, config.to_yaml())
    return same


def train_model(settings: Settings, base: Path, config: Config) -> float:
    """``nmt prepare`` + ``nmt train`` into ``base``; returns their seconds as recorded
    (:func:`nmt_cli.stages.training_seconds`). A kept run that has made all its steps is not
    resumed: its train.log keeps naming only the sessions that trained it (:func:`training_devices`)."""
    config_path = base / "config.yaml"
    kept = models_kept(settings, config_path, config)
    run_step(nmt_command("prepare", "--config", config_path, "--out", base / "prepared", "--quiet"),
             base / "prepare.log", settings)
    if not (kept and run_finished(base / "run", config.train.max_steps)):
        run_step(nmt_command("train", "--config", config_path, "--data", base / "prepared", "--out", base / "run",
                             "--device", settings.device, *([] if kept else ["--restart"])),
                 base / "train.log", settings)
    return training_seconds(base / "prepared", base / "run")


def training_devices(runs: list[Path], work: Path) -> str:
    """Where each run trained, from the sessions its train.log names (``nmt train``'s first
    line each time it starts): ``cuda:0 x 1: a/run, b/run; cpu x 1: c/run``."""
    by_device: dict[str, list[str]] = {}
    for run in dict.fromkeys(runs):  # one entry per run, in the order of the rows
        log = run / "train.log"
        found = TRAINED_ON.findall(log.read_text(encoding="utf-8")) if log.is_file() else []
        devices = ", then ".join(dict.fromkeys(found)) or "not recorded"
        by_device.setdefault(devices, []).append(str(run.relative_to(work)))
    return "; ".join(f"{device}: {', '.join(names)}" for device, names in by_device.items())


def bootstrap_record(corpus: BenchCorpus, settings: Settings, seed: int = 1) -> PipelineRecord:
    """``nmt align bootstrap`` (forward, reverse, links, guided, in ``settings.rounds`` rounds) of
    ``corpus`` with ``train.seed`` ``seed``, the null in its guided stages; its record of every stage and its cost."""
    folder = settings.folders(corpus.name).bootstrap(seed)
    config_path, log = folder.with_suffix(".yaml"), folder.with_suffix(".log")
    config = model_config(corpus, settings).with_overrides({"model.alignment_null": True,  # its guided stages'
                                                            "train.seed": seed})
    if not models_kept(settings, config_path, config) and folder.exists():
        shutil.rmtree(folder)
    run_step(nmt_command("align", "bootstrap", "--config", config_path, "--out", folder, "--rounds", settings.rounds,
                         "--device", settings.device, "--quiet"), log, settings)
    return PipelineRecord(folder / RECORD)
