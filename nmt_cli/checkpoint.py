"""The checkpoint format; the only module that knows it.

A checkpoint is a directory, written under a temporary name and renamed into place,
so a kill at any moment leaves the previous checkpoint whole::

    step-00001000/
        model.safetensors   weights (tied tensors stored once, aliases listed in state.json)
        optimizer.pt        optimizer and grad-scaler state, loaded with weights_only=True
        state.json          config, step, epoch, scheduler, RNG states, data position, metrics, ...
        spm.model           the SentencePiece model(s) the weights were trained with

Loading never unpickles arbitrary objects: weights come from safetensors, everything
else from JSON, and the optimizer file through ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import torch
from safetensors.torch import load_file, save

from nmt_cli import __version__
from nmt_cli.config import Config
from nmt_cli.errors import ConfigError, NmtError
from nmt_cli.fileio import atomic_directory
from nmt_cli.models import Seq2SeqModel, build_model
from nmt_cli.tokenization import Tokenizer

FORMAT_VERSION = 2  # 2: RNN models scale their embeddings (format 1 checkpoints load unscaled)
STEP_DIR = re.compile(r"^step-(\d+)$")
WEIGHTS = "model.safetensors"
OPTIMIZER = "optimizer.pt"
STATE = "state.json"
TOKENIZER_FILES = ("spm.model", "spm.src.model", "spm.tgt.model")
#: every file a checkpoint directory holds (a directory holding anything else is not replaced)
CHECKPOINT_FILES = frozenset({WEIGHTS, OPTIMIZER, STATE, *TOKENIZER_FILES})


@dataclass
class Checkpoint:
    """A loaded checkpoint: settings, weights and tokenizer; no model built yet."""

    path: Path
    config: Config
    weights: dict[str, torch.Tensor]
    state: dict[str, Any]
    tokenizer: Tokenizer

    @property
    def step(self) -> int:
        return int(self.state.get("step", 0))

    def build_model(self, device: str | torch.device = "cpu") -> Seq2SeqModel:
        """Instantiate the architecture and load the weights; mismatches fail with one line."""
        model = build_model(
            self.config.model,
            self.tokenizer.src_vocab_size,
            self.tokenizer.tgt_vocab_size,
            self.tokenizer.joint,
        )
        load_weights(model, self.weights, source=str(self.path))
        return model.to(device).eval()


def checkpoint_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def _split_tied(state_dict: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Keep one name per shared storage (safetensors refuses shared tensors)."""
    unique: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}
    for name, tensor in state_dict.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
            unique[name] = tensor.detach().contiguous().cpu()
    return unique, aliases


def save_checkpoint(
    directory: str | os.PathLike,
    weights: Mapping[str, torch.Tensor],
    config: Config,
    tokenizer: Tokenizer,
    state: dict[str, Any],
    optimizer_state: dict[str, Any] | None = None,
    inputs: Sequence[str | os.PathLike] = (),
) -> Path:
    """Write a complete checkpoint directory atomically and return its path.

    ``weights`` is a state dict (``model.state_dict()``); tensors sharing storage are
    stored once. ``state`` must be JSON-serialisable; it should hold at least ``step``.
    An existing directory is replaced only if it holds checkpoint files alone, and never
    when it is (or contains) one of ``inputs``.
    """
    directory = Path(directory)
    unique, aliases = _split_tied(weights)
    record = {
        "format": FORMAT_VERSION,
        "nmt_cli_version": __version__,
        "config": config.to_dict(),
        "tied_weights": aliases,
        "tokenizer_files": sorted(tokenizer.model_files()),
        **state,
    }
    with atomic_directory(directory, owned=CHECKPOINT_FILES.__contains__, inputs=inputs) as tmp:
        # through Python file objects: a failed write then raises the OSError saying why
        (tmp / WEIGHTS).write_bytes(save(unique))
        if optimizer_state is not None:
            with open(tmp / OPTIMIZER, "wb") as handle:
                torch.save(optimizer_state, handle)
        for name, data in tokenizer.model_files().items():
            (tmp / name).write_bytes(data)
        (tmp / STATE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return directory


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Complete ``step-*`` checkpoints under ``run_dir`` (or ``run_dir/checkpoints``), oldest first."""
    run_dir = Path(run_dir)
    base = run_dir / "checkpoints" if (run_dir / "checkpoints").is_dir() else run_dir
    found = []
    if base.is_dir():
        for child in base.iterdir():
            match = STEP_DIR.match(child.name)
            if match and (child / STATE).is_file() and (child / WEIGHTS).is_file():
                found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint directory, or a run directory (-> its newest checkpoint)."""
    path = Path(path)
    if (path / STATE).is_file():
        return path
    if path.is_file() and path.name in (STATE, WEIGHTS):
        return path.parent
    candidates = list_checkpoints(path)
    if candidates:
        return candidates[-1]
    if not path.exists():
        raise NmtError(f"{path}: checkpoint not found")
    raise NmtError(f"{path}: no checkpoint here (expected {STATE} and {WEIGHTS}, or step-* directories)")


def weights_digest(path: str | os.PathLike) -> str:
    """The sha256 of a checkpoint's weights: what identifies its model wherever it lies (a
    checkpoint overwritten in place keeps its path, not its digest)."""
    digest = hashlib.sha256()
    with open(resolve_checkpoint(path) / WEIGHTS, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tokenizer_directory(path: str | os.PathLike) -> Path:
    """The directory holding the SentencePiece models of ``path``: a prepared directory or a
    checkpoint itself, a run directory's newest checkpoint."""
    path = Path(path)
    if any((path / name).is_file() for name in ("spm.model", "spm.src.model")):
        return path
    return resolve_checkpoint(path)


def _upgraded_config(state: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's config as the current code reads it.

    Format 1 predates embedding scaling in the RNN models: its RNN checkpoints were
    trained on unscaled embeddings, whatever ``model.scale_embeddings`` says.
    """
    config = state["config"]
    if state["format"] == 1 and str(config.get("model", {}).get("arch", "")).startswith("rnn_"):
        config = {**config, "model": {**config["model"], "scale_embeddings": False}}
    return config


@contextlib.contextmanager
def reading_checkpoint_file(path: str | os.PathLike) -> Iterator[None]:
    """Any failure to read or use ``path`` (a file of a checkpoint) becomes one line that
    names it and says it is not a valid checkpoint file."""
    try:
        yield
    except ConfigError as exc:
        raise NmtError("\n".join(f"{path}: not a valid checkpoint file ({problem})"
                                  for problem in str(exc).splitlines())) from None
    except NmtError:
        raise
    except pickle.UnpicklingError:
        raise NmtError(f"{path}: not a valid checkpoint file (it holds objects other than tensors and plain "
                       "data; refused without running them)") from None
    except Exception as exc:
        lines = str(exc).strip().splitlines()
        reason = f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
        raise NmtError(f"{path}: not a valid checkpoint file ({reason})") from None


def _read_state(path: Path) -> tuple[dict[str, Any], Config]:
    """``state.json`` of a resolved checkpoint directory and the config in it, checked."""
    with reading_checkpoint_file(path / STATE):
        state = json.loads((path / STATE).read_text(encoding="utf-8"))
        if not isinstance(state, dict) or not isinstance(state.get("config"), dict):
            raise ValueError("no config object")
        if state.get("format") not in (1, FORMAT_VERSION):
            raise ValueError(f"unsupported checkpoint format {state.get('format')!r}")
        return state, Config.from_dict(_upgraded_config(state))


def load_checkpoint_state(path: str | os.PathLike) -> dict[str, Any]:
    """The training state a checkpoint (or a run's newest one) recorded: ``step``,
    ``elapsed_seconds``, ``config`` ...; the weights are not read."""
    return _read_state(resolve_checkpoint(path))[0]


def load_checkpoint_config(path: str | os.PathLike) -> Config:
    """The config a checkpoint (or a run's newest one) was trained with; the weights are not read."""
    return _read_state(resolve_checkpoint(path))[1]


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint (weights on CPU) without executing any code from it."""
    path = resolve_checkpoint(path)
    state, config = _read_state(path)
    files = state.get("tokenizer_files") or []
    weights = _with_aliases(_read_weights(path), state, path)
    models = [path / name for name in (["spm.model"] if files == ["spm.model"] else ["spm.src.model", "spm.tgt.model"])]
    for model in models:  # one at a time, so that an error names the file
        with reading_checkpoint_file(model):
            tokenizer = Tokenizer.from_files(model)
    if len(models) > 1:
        tokenizer = Tokenizer.from_files(*models)
    return Checkpoint(path=path, config=config, weights=weights, state=state, tokenizer=tokenizer)


def load_optimizer_state(path: str | os.PathLike) -> dict[str, Any] | None:
    """Optimizer/scheduler state saved with a checkpoint (``None`` when absent)."""
    file = resolve_checkpoint(path) / OPTIMIZER
    if not file.is_file():
        return None
    with reading_checkpoint_file(file):
        saved = torch.load(file, map_location="cpu", weights_only=True)
        if not isinstance(saved, dict) or not isinstance(saved.get("optimizer"), dict):
            raise ValueError("no optimizer state in it")
    return saved


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], source: str) -> None:
    """``load_state_dict`` with one-line errors that say what does not match."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    if missing or unexpected:
        raise NmtError(
            f"{source}: weights do not match the model (missing: {', '.join(missing[:5]) or '-'}; "
            f"unexpected: {', '.join(unexpected[:5]) or '-'})"
        )
    for name, tensor in expected.items():
        if tuple(weights[name].shape) != tuple(tensor.shape):
            raise NmtError(
                f"{source}: {name} has shape {tuple(weights[name].shape)} in the checkpoint but the model "
                f"expects {tuple(tensor.shape)} (does the vocabulary match the model?)"
            )
    model.load_state_dict(weights)


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors stored in ``path/model.safetensors`` (tied aliases not yet restored)."""
    with reading_checkpoint_file(path / WEIGHTS):
        return load_file(str(path / WEIGHTS))


def _with_aliases(weights: dict[str, torch.Tensor], state: dict[str, Any], path: Path) -> dict[str, torch.Tensor]:
    """Give every tied name (stored once) its tensor back, as ``load_state_dict`` expects."""
    with reading_checkpoint_file(path / STATE):
        for alias, target in state.get("tied_weights", {}).items():
            weights[alias] = weights[target]
    return weights


def average_checkpoints(paths: Sequence[str | os.PathLike]) -> Checkpoint:
    """A checkpoint whose weights are the element-wise mean of those of ``paths``.

    Float tensors are averaged in float64 and stored in their own dtype; config,
    tokenizer, step and any integer tensors come from the last (newest) path, and
    ``state["averaged"]`` lists the inputs. It holds no optimizer: it is for translation.
    """
    paths = [resolve_checkpoint(p) for p in paths]
    if not paths:
        raise NmtError("no checkpoints to average")
    newest = load_checkpoint(paths[-1])
    stored = _read_weights(paths[-1])
    total = {name: tensor.double() for name, tensor in stored.items() if tensor.is_floating_point()}
    for path in paths[:-1]:
        for name, tensor in _read_weights(path).items():
            if name not in total:
                continue
            if tensor.shape != total[name].shape:
                raise NmtError(f"{path}: {name} has another shape than in {paths[-1]}; cannot average")
            total[name] += tensor.double()
    averaged = {name: (total[name] / len(paths)).to(tensor.dtype) if name in total else tensor
                for name, tensor in stored.items()}
    newest.weights = _with_aliases(averaged, newest.state, paths[-1])
    newest.state = {**newest.state, "averaged": [str(path) for path in paths]}
    return newest


def checkpoints_to_average(inputs: Sequence[str | os.PathLike], last: int | None = None) -> list[Path]:
    """Checkpoint directories named by ``inputs``: one run directory (its ``last`` newest
    checkpoints, all when ``last`` is None) or several checkpoint directories."""
    if not inputs:
        raise NmtError("nothing to average: name a run directory or checkpoint directories")
    if len(inputs) == 1 and list_checkpoints(inputs[0]):
        paths = list_checkpoints(inputs[0])
    else:
        paths = sorted({resolve_checkpoint(path) for path in inputs}, key=lambda p: (p.parent, p.name))
    if last is not None:
        if last < 1:
            raise NmtError(f"--last must be at least 1, got {last}")
        paths = paths[-last:]
    return paths


def write_average(paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike) -> Path:
    """Save :func:`average_checkpoints` of ``paths`` as a checkpoint at ``out_dir`` (never
    over a directory that holds the inputs or anything but a checkpoint)."""
    averaged = average_checkpoints(paths)
    state = {"step": averaged.step, "averaged": averaged.state["averaged"]}
    return save_checkpoint(out_dir, averaged.weights, averaged.config, averaged.tokenizer, state, inputs=paths)


def load_averaged(spec: str, path: str | os.PathLike) -> Checkpoint:
    """Load ``path`` with weights averaged over ``spec`` = ``last:N`` checkpoints of its run
    (the N newest up to ``path``)."""
    match = re.fullmatch(r"last:(\d+)", spec or "")
    if not match or int(match.group(1)) < 1:
        raise NmtError(f"bad --average {spec!r}: expected last:N with N >= 1")
    newest = resolve_checkpoint(path)
    run = [p for p in list_checkpoints(newest.parent) if p <= newest] or [newest]
    return average_checkpoints(run[-int(match.group(1)):])


__all__ = [
    "Checkpoint",
    "save_checkpoint",
    "load_checkpoint",
    "load_checkpoint_config",
    "load_optimizer_state",
    "reading_checkpoint_file",
    "load_weights",
    "list_checkpoints",
    "resolve_checkpoint",
    "average_checkpoints",
    "checkpoints_to_average",
    "load_averaged",
    "write_average",
    "checkpoint_dir_name",
    "tokenizer_directory",
    "weights_digest",
]
