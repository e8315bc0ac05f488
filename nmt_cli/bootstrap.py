"""Word alignments without an external aligner: bootstrapped guided alignment.

``nmt align bootstrap --config CFG --out DIR`` runs, from one translation config:

1. ``forward`` and ``reverse``: ``nmt prepare`` + ``nmt train`` of the config in both
   directions (the reverse one swaps ``data.src_lang`` and ``data.tgt_lang``);
2. ``links``: both models align the cleaned training text by forced decoding, each read
   with the heads and shift on which the two directions' links agree most
   (:func:`~nmt_cli.alignment.agreement.agreed_readings`, on the first pairs; no gold
   links involved), and the two link sets are symmetrized with grow-diag-final
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
   average``), which aligns better than either direction alone;
5. ``links-2``, ``guided-2`` and ``guided-reverse-2`` (``rounds`` = 2, the default): that
   pair aligns the same text again, and each guided model goes on training for
   ``refine_steps`` more steps (its optimizer and learning-rate schedule kept: continued
   training, :func:`refined_config`) with those better links as its guide. Round ``k``
   does the same from round ``k - 1``; the last round's pair is the aligner.

This is the bootstrapping of Zenkel et al. 2020 (guided alignment training on the
symmetrized alignments of the model's own attention) with a translation model's
attention as the first alignments, repeated as iterative self-training. Every stage
resumes: a rerun reuses prepared data, finished runs and written links, so an interrupted
bootstrap goes on where it stopped (a stage's training stopped by Ctrl-C or SIGTERM saves
its step and stops the whole command).
``DIR/bootstrap.json`` records each stage's inputs, outputs, settings and cost
(:mod:`nmt_cli.stages`, the record every pipeline of stages keeps) and the aligner.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence, TextIO

from nmt_cli.alignment.agreement import AGREEMENT_SAMPLE, agreeing_aligner
from nmt_cli.alignment.api import Aligner, AlignOptions
from nmt_cli.alignment.corpus import align_links_into, link_chunks
from nmt_cli.checkpoint import list_checkpoints, load_checkpoint_config, load_checkpoint_state
from nmt_cli.config import Config
from nmt_cli.data.prepare import prepare
from nmt_cli.data.prepared import PreparedData
from nmt_cli.errors import NmtError
from nmt_cli.pharaoh import write_reversed_alignments
from nmt_cli.stages import PipelineRecord, Stage, run_finished, training_seconds
from nmt_cli.textio import iter_parallel
from nmt_cli.training import train
from nmt_cli.training.resume import check_same_run

__all__ = ["ALIGNER_SYMMETRIZATION", "DEFAULT_GUIDE_WEIGHT", "DEFAULT_ROUNDS", "RECORD", "REFINE_FRACTION",
           "BootstrapLayout", "aligner_command", "bootstrap", "default_refine_steps", "links_symmetrization",
           "refined_config", "reverse_config"]

#: the alignment loss weight of Garg et al. 2019, when the config leaves train.alignment_weight at 0
DEFAULT_GUIDE_WEIGHT = 0.05
#: training pairs aligned (and kept, so that an interrupted links stage resumes) at a time
ALIGN_CHUNK = 5000
#: how the two guided stages are combined into the bootstrap's aligner
ALIGNER_SYMMETRIZATION = "average"
#: the most agreeing pairs of first-stage readings bootstrap.json lists
CANDIDATES_RECORDED = 10
#: guided rounds: the first on the plain models' links, each later one on the previous pair's
DEFAULT_ROUNDS = 2
#: a later round's training steps, as a share of the config's train.max_steps
REFINE_FRACTION = 0.2
#: the bootstrap's record of its stages (:class:`~nmt_cli.stages.PipelineRecord`), in its directory
RECORD = "bootstrap.json"


def links_symmetrization(config: Config) -> str:
    """grow-diag-final, or grow-diag-final-and when the guided stage learns a null position.

    grow-diag-final keeps every link of the forward argmax reading, which links every target
    word, so a null would have no unaligned word to learn from; grow-diag-final-and adds
    those links only for words that neither direction has linked yet.
    """
    return "grow-diag-final-and" if config.model.alignment_null else "grow-diag-final"


@dataclass(frozen=True)
class BootstrapLayout:
    """Where each stage writes under the bootstrap directory, and each stage as declared there."""

    root: Path

    def prepared(self, stage: str) -> Path:
        return self.root / stage / "prepared"

    def run(self, stage: str) -> Path:
        return self.root / stage / "run"

    @staticmethod
    def links_name(round_number: int) -> str:
        return "links" if round_number == 1 else f"links-{round_number}"

    @staticmethod
    def guided(round_number: int) -> tuple[str, str]:
        """The names of round ``round_number``'s forward and reverse guided stages."""
        suffix = "" if round_number == 1 else f"-{round_number}"
        return f"guided{suffix}", f"guided-reverse{suffix}"

    def links(self, round_number: int) -> Path:
        return self.root / self.links_name(round_number)

    def reverse_links(self, round_number: int) -> Path:
        return self.root / f"{self.links_name(round_number)}-reverse"

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def training_stage(self, name: str, *inputs: Path | str) -> Stage:
        """A stage that prepares data and trains a model from ``inputs`` (paths, or the config's data)."""
        reads = tuple(self.relative(path) if isinstance(path, Path) else path for path in inputs)
        return Stage(name, reads, (self.relative(self.prepared(name)), self.relative(self.run(name))))

    def guided_stage(self, name: str, links: Path, start: str | None) -> Stage:
        """A guided stage: it learns the links in the folder ``links``, continuing the run of
        the stage ``start`` (and its pieces) when given."""
        continued = () if start is None else (self.run(start), self.prepared(start))
        return self.training_stage(name, links, *continued)

    def links_stage(self, round_number: int, aligner: tuple[str, str]) -> Stage:
        """Round ``round_number``'s links: the pair of stages ``aligner`` aligns the forward stage's text."""
        reads = (self.prepared("forward"), self.run(aligner[0]), self.run(aligner[1]))
        return Stage(self.links_name(round_number), tuple(map(self.relative, reads)),
                     (self.relative(self.links(round_number) / "train.align"),))


def _config_data(config: Config) -> str:
    """The training text a config names, as a first stage's input."""
    return f"data: {config.data.source}" + (f" {config.data.path}" if config.data.path else "")


def reverse_config(config: Config) -> Config:
    """The same settings for the opposite direction."""
    return config.with_overrides({"data.src_lang": config.data.tgt_lang, "data.tgt_lang": config.data.src_lang})


def guided_config(config: Config, links: Path, split_names: Sequence[str]) -> Config:
    """The config trained on the bootstrap links: the forward stage's cleaned text (splits
    ``split_names``) with ``links/train.align``, and guided alignment on (its objective chosen by
    the weight, whatever objective the plain stage trained with)."""
    weight = config.train.alignment_weight or DEFAULT_GUIDE_WEIGHT
    splits = {f"data.{name}_split": name if name in split_names else "" for name in ("train", "valid", "test")}
    return config.with_overrides({"data.source": "files", "data.path": str(links), "data.alignment_path": str(links),
                                  "data.streaming": False,
                                  **splits, "data.max_train_pairs": 0, "data.max_eval_pairs": 0,
                                  "train.alignment_weight": weight, "train.objective": "auto"})


def default_refine_steps(config: Config) -> int:
    """A later round's steps when not given: :data:`REFINE_FRACTION` of ``train.max_steps``."""
    if config.train.max_steps <= 0:
        raise NmtError("bootstrap: a config without train.max_steps needs the steps of its later rounds given "
                       "(--refine-steps, or --rounds 1)")
    return max(1, round(config.train.max_steps * REFINE_FRACTION))


def refined_config(config: Config, start: Path, steps: int) -> Config:
    """``config`` (a guided one) continued from the run ``start`` for ``steps`` more steps, its
    optimizer and learning-rate schedule kept, so that a later round starts from what the
    previous one learned (translation and links) and goes on at the learning rate it had reached."""
    return config.with_overrides({"train.init_from": str(start), "train.init_keep": ["optimizer", "schedule"],
                                  "train.max_steps": steps, "train.max_epochs": 0, "train.max_minutes": 0.0})


def bootstrap(config: Config, out_dir: str | os.PathLike, device: str = "cpu", progress: bool = True,
              stream: TextIO | None = None, rounds: int = DEFAULT_ROUNDS, refine_steps: int | None = None) -> dict:
    """Run (or resume) every stage into ``out_dir``; returns the record of ``bootstrap.json``.

    ``rounds``: guided rounds (1 stops after ``guided-reverse``); each later one trains
    ``refine_steps`` steps per direction (default :func:`default_refine_steps`).
    A stage's ``seconds`` are its own cost, whatever the reruns: data preparation plus the
    training run's elapsed time (both as recorded by them), or the alignment of the links.
    """
    if rounds < 1:
        raise NmtError(f"bootstrap: rounds must be at least 1, not {rounds}")
    steps = (refine_steps or default_refine_steps(config)) if rounds > 1 else 0
    layout = BootstrapLayout(Path(out_dir).expanduser().resolve())
    layout.root.mkdir(parents=True, exist_ok=True)
    record = PipelineRecord(layout.root / RECORD)

    def train_stage(stage: Stage, stage_config: Config, tokenizer_from: Path | None = None) -> None:
        details = _prepare_and_train(stage_config, layout, stage.name, device, progress, stream, tokenizer_from)
        record.finish(stage, training_seconds(layout.prepared(stage.name), layout.run(stage.name)), details)

    def write_links(stage: Stage, write: Callable[[], dict]) -> None:
        if not record.finished(stage):
            started = time.perf_counter()
            details = write()
            record.finish(stage, time.perf_counter() - started, details)

    plain = config.with_overrides({"model.alignment_null": False})  # a null is learned from links: the guided stage's
    for name, stage_config in (("forward", plain), ("reverse", reverse_config(plain))):
        train_stage(layout.training_stage(name, _config_data(stage_config)), stage_config)
    split_names = PreparedData(layout.prepared("forward")).split_names
    write_links(layout.links_stage(1, ("forward", "reverse")),
                lambda: _write_first_links(layout, device, stream, links_symmetrization(config)))
    previous: tuple[str, str] | None = None
    for round_number in range(1, rounds + 1):
        if round_number > 1:
            write_links(layout.links_stage(round_number, previous),
                        lambda: _write_pair_links(layout, round_number, previous, device, stream))
        names = layout.guided(round_number)
        directions = ((names[0], layout.links(round_number), False),
                      (names[1], layout.reverse_links(round_number), True))
        starts = [None if previous is None else previous[turn] for _, _, turn in directions]  # the runs continued
        stages = [layout.guided_stage(name, links, start) for (name, links, _), start in zip(directions, starts)]
        if not record.finished(stages[1]):  # once trained, its links stay what it learned
            _write_reverse_links(layout, round_number)
        for stage, (_, links, turn), start in zip(stages, directions, starts):
            stage_config = guided_config(config, links, split_names)
            stage_config = reverse_config(stage_config) if turn else stage_config
            if start is not None:
                stage_config = refined_config(stage_config, layout.run(start), steps)
            train_stage(stage, stage_config, tokenizer_from=None if start is None else layout.prepared(start))
        previous = names
    record.save_results(aligner=str(layout.run(previous[0])), reverse_aligner=str(layout.run(previous[1])))
    return record.to_json()


def aligner_command(record: dict) -> str:
    """The ``nmt align`` options of a finished bootstrap's aligner (its two guided stages)."""
    return (f"--checkpoint {record['aligner']} --reverse-checkpoint {record['reverse_aligner']} "
            f"--symmetrize {ALIGNER_SYMMETRIZATION}")


def _write_reverse_links(layout: BootstrapLayout, round_number: int) -> None:
    """``links-reverse/`` (of the round): the same text as ``links/`` (linked) and its links
    turned around (``i-j`` as ``j-i``)."""
    folder, links = layout.reverse_links(round_number), layout.links(round_number)
    _link_text(links, folder)
    write_reversed_alignments(links / "train.align", folder / "train.align")


def _link_text(source: Path, folder: Path) -> None:
    """``folder`` gets symbolic links to ``source``'s text files (every file but ``train.align``
    and hidden ones, such as the chunks of an alignment)."""
    folder.mkdir(parents=True, exist_ok=True)
    for text in source.iterdir():
        if text.name != "train.align" and not text.name.startswith(".") and not (folder / text.name).exists():
            (folder / text.name).symlink_to(text.resolve())


def _prepare_and_train(config: Config, layout: BootstrapLayout, name: str, device: str, progress: bool,
                       stream: TextIO | None, tokenizer_from: Path | None = None) -> dict:
    """Prepare and train one stage; a run that has made all its steps with these settings is
    kept as it is (not resumed: its train.log names only the sessions that trained it).
    ``tokenizer_from``: the prepared directory of the run a later round continues (its pieces).
    Returns the stage's details: the step its run reached and why it stopped."""
    prepare(config, layout.prepared(name), progress=progress, tokenizer_from=tokenizer_from)
    run = layout.run(name)
    if _finished(run, config):
        stop_reason = "max_steps"
    else:
        summary = train(config, layout.prepared(name), run, device=device, stream=stream)
        if summary.stop_reason == "interrupted":  # Ctrl-C / SIGTERM stops the whole bootstrap, not just this stage
            raise KeyboardInterrupt(f"bootstrap stage {name} interrupted at step {summary.step}")
        stop_reason = summary.stop_reason
    return {"step": load_checkpoint_state(run)["step"], "stop_reason": stop_reason}


def _finished(run: Path, config: Config) -> bool:
    """Whether ``run`` has made ``config``'s training steps; a run trained with other settings
    is refused as ``nmt train`` refuses to resume it."""
    if list_checkpoints(run):
        check_same_run(load_checkpoint_config(run), config, str(run))
    return run_finished(run, config.train.max_steps)


def _write_first_links(layout: BootstrapLayout, device: str, stream: TextIO | None, symmetrization: str) -> dict:
    """Round 1's links: the plain forward and reverse models, each read as the two agree most,
    align the forward stage's cleaned training text; ``links/`` gets that text and ``train.align``."""
    data = PreparedData(layout.prepared("forward"))
    folder = layout.links(1)
    folder.mkdir(parents=True, exist_ok=True)
    for split in data.split_names:
        for side, lang in (("src", data.src_lang), ("tgt", data.tgt_lang)):
            link = folder / f"{split}.{lang}"
            if not link.exists():
                link.symlink_to(data.text_path(split, side))
    pairs = _training_pairs(data)
    sample = list(itertools.islice(pairs, AGREEMENT_SAMPLE))  # the readings are chosen on the first pairs
    aligner, choices = agreeing_aligner(AlignOptions(symmetrization=symmetrization), layout.run("forward"),
                                        layout.run("reverse"), [source for source, _ in sample],
                                        [target for _, target in sample], device)
    best = choices[0]
    if stream is not None:
        print(f"bootstrap: first-stage readings {best.describe()}", file=stream, flush=True)
    count, links = _align_into(aligner, itertools.chain(sample, pairs), folder / "train.align", stream,
                               total=data.manifest["splits"]["train"]["kept"])
    return {"reading": best.forward.describe(), "reverse_reading": best.reverse.describe(),
            "symmetrization": symmetrization, "agreement": round(best.agreement, 4),
            "candidates": [choice.describe() for choice in choices[:CANDIDATES_RECORDED]], "links": links,
            "pairs": count}


def _write_pair_links(layout: BootstrapLayout, round_number: int, previous: tuple[str, str], device: str,
                      stream: TextIO | None) -> dict:
    """A later round's links: the previous round's guided pair, read as the aligner it names
    (:data:`ALIGNER_SYMMETRIZATION`), aligns the same text as round 1's links."""
    first, folder = layout.links(1), layout.links(round_number)
    _link_text(first, folder)
    data = PreparedData(layout.prepared("forward"))
    aligner = Aligner(layout.run(previous[0]), AlignOptions(symmetrization=ALIGNER_SYMMETRIZATION), device,
                      layout.run(previous[1]))
    count, links = _align_into(aligner, _training_pairs(data), folder / "train.align", stream,
                               total=data.manifest["splits"]["train"]["kept"])
    return {"aligner": f"{previous[0]} + {previous[1]}, {ALIGNER_SYMMETRIZATION}", "links": links, "pairs": count}


def _training_pairs(data: PreparedData) -> Iterator[tuple[str, str]]:
    """The forward stage's cleaned training pairs, read lazily: the text every round aligns."""
    return iter_parallel(data.text_path("train", "src"), data.text_path("train", "tgt"))


def _align_into(aligner: Aligner, pairs: Iterable[tuple[str, str]], target: Path, stream: TextIO | None,
                total: int | None = None, chunk_lines: int = ALIGN_CHUNK) -> tuple[int, int]:
    """Align the pairs ``chunk_lines`` at a time into the Pharaoh file ``target`` (atomically,
    resumable: :func:`~nmt_cli.alignment.corpus.align_links_into`), with progress on
    ``stream`` (none without one); the numbers of pairs and links. The chunks go once
    ``target`` is written."""
    written = align_links_into(aligner, pairs, target, chunk_lines, total, f"bootstrap {target.parent.name}", stream)
    link_chunks(target).remove()
    return written.pairs, written.links
