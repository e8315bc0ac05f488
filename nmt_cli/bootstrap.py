"""Word alignments without an external aligner: bootstrapped guided alignment.

``nmt align bootstrap --config CFG --out DIR`` runs, from one translation config:

1. ``forward`` and ``reverse``: ``nmt prepare`` + ``nmt train`` of the config in both
   directions (the reverse one swaps ``data.src_lang`` and ``data.tgt_lang``);
2. ``links``: both models align the cleaned training text by forced decoding, each read
   with the heads and shift on which the two directions' links agree most
   (:func:`~nmt_cli.alignment.agreement.agreed_readings`, on the first pairs; no gold
   links involved), and the two link sets are symmetrised with grow-diag-final
   (grow-diag-final-and with a null position: :func:`links_symmetrization`);
3. ``guided``: a third model with the config's settings learns translation and those
   links together (guided alignment, Garg et al. 2019; ``train.alignment_weight``,
   0.05 when the config leaves it at 0), and a null position for the words they leave
   unaligned when the config asks for one (``model.alignment_null``; the first stages,
   which have no links to learn it from, train without);
4. ``guided-reverse``: the same in the opposite direction, on the same links reversed
   (``links-reverse/``). The aligner is the pair, each read by its supervised head and
   combined by the mean of their word weights (:func:`aligner_command`: ``nmt align
   --checkpoint DIR/guided/run --reverse-checkpoint DIR/guided-reverse/run --symmetrize
   average``), which aligns better than either direction alone.

This is the bootstrapping of Zenkel et al. 2020 (guided alignment training on the
symmetrised alignments of the model's own attention) with a translation model's
attention as the first alignments. Every stage resumes: a rerun reuses prepared data,
finished runs and written links, so an interrupted bootstrap goes on where it stopped (a
stage's training stopped by Ctrl-C or SIGTERM saves its step and stops the whole command).
``DIR/bootstrap.json`` records each stage's settings and wall time.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, TextIO

from nmt_cli.alignment.agreement import agreeing_aligner
from nmt_cli.alignment.api import AlignOptions
from nmt_cli.checkpoint import list_checkpoints, load_checkpoint_config, load_checkpoint_state
from nmt_cli.config import Config
from nmt_cli.data.prepare import prepare
from nmt_cli.data.prepared import PreparedData
from nmt_cli.fileio import atomic_open, atomic_write_json
from nmt_cli.pharaoh import format_links, write_reversed_alignments
from nmt_cli.textio import read_lines
from nmt_cli.training import train
from nmt_cli.training.resume import check_same_run

__all__ = ["ALIGNER_SYMMETRIZATION", "DEFAULT_GUIDE_WEIGHT", "aligner_command", "bootstrap", "links_symmetrization"]

#: the alignment loss weight of Garg et al. 2019, when the config leaves train.alignment_weight at 0
DEFAULT_GUIDE_WEIGHT = 0.05
ALIGN_CHUNK = 5000
#: how the two guided stages are combined into the bootstrap's aligner
ALIGNER_SYMMETRIZATION = "average"
#: the most agreeing pairs of first-stage readings bootstrap.json lists
CANDIDATES_RECORDED = 10


def links_symmetrization(config: Config) -> str:
    """grow-diag-final, or grow-diag-final-and when the guided stage learns a null position.

    grow-diag-final keeps every link of the forward argmax reading, which links every target
    word, so a null would have no unaligned word to learn from; grow-diag-final-and adds
    those links only for words that neither direction has linked yet.
    """
    return "grow-diag-final-and" if config.model.alignment_null else "grow-diag-final"


@dataclass(frozen=True)
class Stages:
    """Where each stage writes under the bootstrap directory."""

    root: Path

    def prepared(self, stage: str) -> Path:
        return self.root / stage / "prepared"

    def run(self, stage: str) -> Path:
        return self.root / stage / "run"

    @property
    def links(self) -> Path:
        return self.root / "links"

    @property
    def reverse_links(self) -> Path:
        return self.root / "links-reverse"


def reverse_config(config: Config) -> Config:
    """The same settings for the opposite direction."""
    return config.with_overrides({"data.src_lang": config.data.tgt_lang, "data.tgt_lang": config.data.src_lang})


def guided_config(config: Config, links: Path, split_names: Sequence[str]) -> Config:
    """The config trained on the bootstrap links: the forward stage's cleaned text (splits
    ``split_names``) with ``links/train.align``, and guided alignment on."""
    weight = config.train.alignment_weight or DEFAULT_GUIDE_WEIGHT
    splits = {f"data.{name}_split": name if name in split_names else "" for name in ("train", "valid", "test")}
    return config.with_overrides({"data.source": "files", "data.path": str(links), "data.alignment_path": str(links),
                                  **splits, "data.max_train_pairs": 0, "data.max_eval_pairs": 0,
                                  "train.alignment_weight": weight})


def bootstrap(config: Config, out_dir: str | os.PathLike, device: str = "cpu", progress: bool = True,
              stream: TextIO | None = None) -> dict:
    """Run (or resume) every stage into ``out_dir``; returns the record of ``bootstrap.json``.

    A stage's ``seconds`` are its own cost, whatever the reruns: data preparation plus the
    training run's elapsed time (both as recorded by them), or the alignment of the links.
    """
    stages = Stages(Path(out_dir).expanduser().resolve())
    stages.root.mkdir(parents=True, exist_ok=True)
    record_path = stages.root / "bootstrap.json"
    record = json.loads(record_path.read_text(encoding="utf-8")) if record_path.is_file() else {"stages": {}}

    def save(name: str, details: dict) -> None:
        record["stages"][name] = details
        atomic_write_json(record_path, record)

    plain = config.with_overrides({"model.alignment_null": False})  # a null is learned from links: the guided stage's
    for name, stage_config in (("forward", plain), ("reverse", reverse_config(plain))):
        save(name, _prepare_and_train(stage_config, stages, name, device, progress, stream))
    if "links" not in record["stages"] or not (stages.links / "train.align").is_file():
        save("links", _write_links(stages, device, stream, links_symmetrization(config)))
    split_names = PreparedData(stages.prepared("forward")).split_names
    save("guided", _prepare_and_train(guided_config(config, stages.links, split_names), stages, "guided", device,
                                      progress, stream))
    if "guided-reverse" not in record["stages"]:  # once trained, its links stay what it learned
        _write_reverse_links(stages)
    reverse_guided = reverse_config(guided_config(config, stages.reverse_links, split_names))
    save("guided-reverse", _prepare_and_train(reverse_guided, stages, "guided-reverse", device, progress, stream))
    record["aligner"] = str(stages.run("guided"))
    record["reverse_aligner"] = str(stages.run("guided-reverse"))
    atomic_write_json(record_path, record)
    return record


def aligner_command(record: dict) -> str:
    """The ``nmt align`` options of a finished bootstrap's aligner (its two guided stages)."""
    return (f"--checkpoint {record['aligner']} --reverse-checkpoint {record['reverse_aligner']} "
            f"--symmetrize {ALIGNER_SYMMETRIZATION}")


def _write_reverse_links(stages: Stages) -> None:
    """``links-reverse/``: the same text as ``links/`` (linked) and its links turned around (``i-j`` as ``j-i``)."""
    folder = stages.reverse_links
    folder.mkdir(parents=True, exist_ok=True)
    for text in stages.links.iterdir():
        if text.name != "train.align" and not (folder / text.name).exists():
            (folder / text.name).symlink_to(text.resolve())
    write_reversed_alignments(stages.links / "train.align", folder / "train.align")


def _prepare_and_train(config: Config, stages: Stages, name: str, device: str, progress: bool,
                       stream: TextIO | None) -> dict:
    """Prepare and train one stage; a run that has made all its steps with these settings is
    kept as it is (not resumed: its train.log names only the sessions that trained it)."""
    manifest = prepare(config, stages.prepared(name), progress=progress)
    run = stages.run(name)
    if _finished(run, config):
        stop_reason = "max_steps"
    else:
        summary = train(config, stages.prepared(name), run, device=device, stream=stream)
        if summary.stop_reason == "interrupted":  # Ctrl-C / SIGTERM stops the whole bootstrap, not just this stage
            raise KeyboardInterrupt(f"bootstrap stage {name} interrupted at step {summary.step}")
        stop_reason = summary.stop_reason
    state = load_checkpoint_state(run)
    return {"step": state["step"], "stop_reason": stop_reason,
            "seconds": round(manifest["elapsed_seconds"] + state["elapsed_seconds"], 1)}


def _finished(run: Path, config: Config) -> bool:
    """Whether ``run`` has made ``config``'s training steps; a run trained with other settings
    is refused as ``nmt train`` refuses to resume it."""
    if not list_checkpoints(run):
        return False
    saved = load_checkpoint_config(run)
    check_same_run(saved, config, str(run))
    return 0 < config.train.max_steps <= load_checkpoint_state(run)["step"]


def _write_links(stages: Stages, device: str, stream: TextIO | None, symmetrization: str) -> dict:
    """Align the forward stage's cleaned training text both ways; links/ gets that text and
    ``train.align`` (and the other splits' text, without links)."""
    started = time.perf_counter()
    target = stages.links / "train.align"
    data = PreparedData(stages.prepared("forward"))
    stages.links.mkdir(parents=True, exist_ok=True)
    for split in data.split_names:
        for side, lang in (("src", data.src_lang), ("tgt", data.tgt_lang)):
            link = stages.links / f"{split}.{lang}"
            if not link.exists():
                link.symlink_to(data.text_path(split, side))
    src_lines, tgt_lines = read_lines(data.text_path("train", "src")), read_lines(data.text_path("train", "tgt"))
    aligner, choices = agreeing_aligner(AlignOptions(symmetrization=symmetrization), stages.run("forward"),
                                        stages.run("reverse"), src_lines, tgt_lines, device)
    best = choices[0]
    if stream is not None:
        print(f"bootstrap: first-stage readings {best.describe()}", file=stream, flush=True)
    links = 0
    with atomic_open(target) as handle:
        for start in range(0, len(src_lines), ALIGN_CHUNK):
            chunk = slice(start, start + ALIGN_CHUNK)
            for sentence in aligner.align(src_lines[chunk], tgt_lines[chunk]):
                handle.write(format_links(sentence.links) + "\n")
                links += len(sentence.links)
    return {"reading": best.forward.describe(), "reverse_reading": best.reverse.describe(),
            "symmetrization": symmetrization, "agreement": round(best.agreement, 4),
            "candidates": [choice.describe() for choice in choices[:CANDIDATES_RECORDED]], "links": links,
            "pairs": len(src_lines),
            "seconds": round(time.perf_counter() - started, 1)}
