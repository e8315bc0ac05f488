"""Align a parallel corpus with a trained model: soft word matrices and hard links.

``Aligner(checkpoint, options)`` loads a model once (:mod:`nmt_cli.alignment.model`),
aligns batches of sentence pairs by forced decoding (:mod:`nmt_cli.alignment.extract`) and
reads word matrices and hard links from the attention (:mod:`nmt_cli.alignment.reader`). Given a model of the opposite direction it also aligns
target -> source and symmetrizes the two link sets (:mod:`nmt_cli.alignment.symmetrize`).

Word ``k`` of a sentence is its ``k``-th SentencePiece word (pieces from one ``"\u2581"``
marker to the next), i.e. its ``k``-th whitespace token: Pharaoh indices refer to the
whitespace tokens of the given text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence, Union

from nmt_cli.alignment.aer import AlignmentScore, score_alignments
from nmt_cli.alignment.extract import forced_attention
from nmt_cli.alignment.model import AlignmentModel, encode_pairs
from nmt_cli.alignment.reader import (AttentionReading, SentenceAlignment, combine_alignments, default_full_context,
                                     default_shift)
from nmt_cli.alignment.symmetrize import AVERAGE, AVERAGE_THRESHOLD, SYMMETRIZATIONS, average_links, symmetrize
from nmt_cli.config import Config
from nmt_cli.device import model_device
from nmt_cli.errors import NmtError
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.pharaoh import GoldAlignment
from nmt_cli.tokenization import Tokenizer

__all__ = ["SYMMETRIZATION_CHOICES", "AlignOptions", "Aligner", "align_corpus", "default_symmetrization",
           "model_alignment_score"]

#: how ``nmt align`` can combine two directions: the hard-link heuristics and the soft average
SYMMETRIZATION_CHOICES = SYMMETRIZATIONS + (AVERAGE,)


@dataclass(frozen=True)
class AlignOptions:
    """How attention becomes alignments: the reading (heads, hard-link rule), shift-att,
    the batch size of forced decoding and how two directions are symmetrized.

    ``symmetrization``: one of :data:`SYMMETRIZATION_CHOICES`, or None for the models'
    default (:func:`default_symmetrization`). The hard ones combine the two directions'
    links; ``average`` their soft weights, linking where the mean exceeds
    ``average_threshold`` (:func:`~nmt_cli.alignment.symmetrize.average_links`); the
    reading's hard-link rule then serves only a model read alone.

    ``shift`` (shift-att, Chen et al. 2020): None reads each model as it was trained to
    align (:func:`~nmt_cli.alignment.reader.default_shift`: on for a head guided at the
    input step, else off); ``nmt align sweep`` tells whether a model aligns better with it.

    ``reverse_reading`` and ``reverse_shift``: the target -> source models' own, where they
    differ from the source -> target ones' (None: the same as ``reading`` and ``shift``);
    :mod:`nmt_cli.alignment.agreement` chooses a pair of them without gold links.
    """

    reading: AttentionReading = field(default_factory=AttentionReading)
    shift: bool | None = None
    reverse_reading: AttentionReading | None = None
    reverse_shift: bool | None = None
    batch_size: int = 32
    symmetrization: str | None = None
    average_threshold: float = AVERAGE_THRESHOLD

    def __post_init__(self) -> None:
        if self.symmetrization is not None and self.symmetrization not in SYMMETRIZATION_CHOICES:
            raise NmtError(f"unknown symmetrization {self.symmetrization!r}; "
                           f"choose one of: {', '.join(SYMMETRIZATION_CHOICES)}")
        if not 0.0 <= self.average_threshold < 1.0:
            raise NmtError(f"the average threshold must be in [0, 1), not {self.average_threshold}")


def default_symmetrization(readings: Sequence[AttentionReading]) -> str:
    """How two directions combine unless told: ``average`` when every model is read with the
    null position of its guided head, else grow-diag-final-and.

    A guided head with a null gives each target word a distribution over the source words
    and the null that the word links trained, so the two directions' weights can be
    averaged and thresholded as they are (Nagata et al. 2020 average two directions' link
    probabilities so); the null share takes a word the model leaves unaligned out of the
    mean. Plain attention spreads its weight with no such calibration, and its argmax links
    are combined by a link heuristic as statistical aligners' are: grow-diag-final-and,
    which adds a link of one direction only for words neither has linked yet, has aligned
    the gold German of BENCHMARKS.md better than grow-diag-final in every reading measured
    (eflomal's included).
    """
    return AVERAGE if readings and all(reading.null for reading in readings) else "grow-diag-final-and"


#: a checkpoint (or a model already loaded from one), or several making an ensemble
Checkpoint = Union[str, os.PathLike, AlignmentModel]
Checkpoints = Union[Checkpoint, Sequence[Checkpoint]]


def _load_models(checkpoints: Checkpoints | None, device: str, batch_size: int) -> list[AlignmentModel]:
    """One checkpoint, or several (an ensemble), loaded; a model already loaded is kept as it is."""
    if checkpoints is None:
        return []
    listed = [checkpoints] if isinstance(checkpoints, (str, os.PathLike, AlignmentModel)) else list(checkpoints)
    return [item if isinstance(item, AlignmentModel) else AlignmentModel(item, device, batch_size) for item in listed]


class Aligner:
    """A model (and optionally its reverse-direction partner) ready to align sentence pairs.

    Each direction may be an ensemble: several checkpoints whose word link weights are
    averaged for every pair (:func:`~nmt_cli.alignment.reader.combine_alignments`).
    """

    def __init__(
        self,
        checkpoint: Checkpoints,
        options: AlignOptions = AlignOptions(),
        device: str = "cpu",
        reverse_checkpoint: Checkpoints | None = None,
    ):
        self.options = options
        self.forward_models = _load_models(checkpoint, device, options.batch_size)
        self.reverse_models = _load_models(reverse_checkpoint, device, options.batch_size)
        if not self.forward_models:
            raise NmtError("no checkpoint to align with")
        #: the reading and shift of each model, its defaults filled in (they may differ between models)
        self.readings, self.shifts = {}, {}
        reverse_reading = options.reading if options.reverse_reading is None else options.reverse_reading
        reverse_shift = options.shift if options.reverse_shift is None else options.reverse_shift
        for models, reading, shift in ((self.forward_models, options.reading, options.shift),
                                       (self.reverse_models, reverse_reading, reverse_shift)):
            for model in models:
                self.readings[model] = reading.for_model(model.config)
                self.shifts[model] = default_shift(model.config) if shift is None else shift
                model.check(self.readings[model].selection)
        #: how the two directions combine (when there is a reverse direction)
        self.symmetrization = options.symmetrization or default_symmetrization(list(self.readings.values()))

    @property
    def forward(self) -> AlignmentModel:
        """The (first) source -> target model."""
        return self.forward_models[0]

    @property
    def reverse(self) -> AlignmentModel | None:
        """The (first) target -> source model, if any."""
        return self.reverse_models[0] if self.reverse_models else None

    def _describe(self, model: AlignmentModel) -> dict:
        reading = self.readings[model]
        return {"checkpoint": str(model.path), "step": model.step, "arch": model.arch,
                "selection": reading.selection.describe(), "shift": self.shifts[model],
                "full_context": default_full_context(model.config), "null": reading.null}

    @property
    def settings(self) -> dict:
        """Everything that decides the output, recorded next to it: the first model of each
        direction under the usual keys, every model of an ensemble under ``ensemble``."""
        reading = self.readings[self.forward]
        record = {**self._describe(self.forward), "method": reading.method,
                  "threshold": reading.threshold if reading.method == "threshold" else None}
        if len(self.forward_models) > 1:
            record["ensemble"] = [self._describe(model) for model in self.forward_models]
        if self.reverse is not None:
            reverse = {f"reverse_{key}": value for key, value in self._describe(self.reverse).items()
                       if key not in ("step", "arch")}
            record.update(reverse, symmetrization=self.symmetrization)
            if len(self.reverse_models) > 1:
                record["reverse_ensemble"] = [self._describe(model) for model in self.reverse_models]
            if self.symmetrization == AVERAGE:
                record["average_threshold"] = self.options.average_threshold
        return record

    @property
    def deciding_settings(self) -> dict:
        """Everything that decides its alignments to the last digit: :attr:`settings`, the
        batch size and the device (padding and the device change the last digits of the
        weights); the key of the chunks a streamed alignment keeps."""
        return {**self.settings, "batch_size": self.options.batch_size,
                "device": str(model_device(self.forward.model))}

    def _one_model(self, model: AlignmentModel, src_lines: Sequence[str],
                   tgt_lines: Sequence[str]) -> list[SentenceAlignment]:
        pairs = model.encode(src_lines, tgt_lines)
        reading = self.readings[model]
        attentions = model.attention(pairs, self.shifts[model], reading.selection)  # (T, S) each
        return [pair.read(attention, reading) for pair, attention in zip(pairs, attentions)]

    def _one_direction(self, models: list[AlignmentModel], src_lines: Sequence[str],
                       tgt_lines: Sequence[str]) -> list[SentenceAlignment]:
        """Each pair's alignment by ``models`` (one model, or an ensemble read as the first is)."""
        members = [self._one_model(model, src_lines, tgt_lines) for model in models]
        reading, combined = self.readings[models[0]], []
        for number, pair in enumerate(zip(*members), start=1):
            try:
                combined.append(combine_alignments(pair, reading))
            except NmtError as exc:
                raise NmtError(f"pair {number}: {exc}") from None
        return combined

    def align(self, src_lines: Sequence[str], tgt_lines: Sequence[str]) -> list[SentenceAlignment]:
        """Align ``src_lines[k]`` with ``tgt_lines[k]`` for every ``k``."""
        sentences = self._one_direction(self.forward_models, src_lines, tgt_lines)
        if not self.reverse_models:
            return sentences
        backward = self._one_direction(self.reverse_models, tgt_lines, src_lines)
        for number, (sentence, reverse) in enumerate(zip(sentences, backward), start=1):
            if (len(reverse.src_words), len(reverse.tgt_words)) != (len(sentence.tgt_words), len(sentence.src_words)):
                raise NmtError(
                    f"pair {number}: the two models split it into different words ({len(sentence.src_words)}/"
                    f"{len(sentence.tgt_words)} vs {len(reverse.tgt_words)}/{len(reverse.src_words)})"
                )
            if self.symmetrization == AVERAGE:
                sentence.links = average_links(sentence.link_weights(), reverse.link_weights(),
                                               self.options.average_threshold)
                continue
            reverse_links = [(i, j) for j, i in reverse.links]  # (target, source) -> (source, target)
            sentence.links = symmetrize(
                sentence.links, reverse_links, self.symmetrization,
                len(sentence.src_words), len(sentence.tgt_words),
            )
        return sentences


def align_corpus(
    checkpoint: Checkpoints,
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    options: AlignOptions = AlignOptions(),
    device: str = "cpu",
    reverse_checkpoint: Checkpoints | None = None,
) -> list[SentenceAlignment]:
    """Load the model(s) and align every pair; see :class:`Aligner`."""
    return Aligner(checkpoint, options, device, reverse_checkpoint).align(src_lines, tgt_lines)


def model_alignment_score(model: Seq2SeqModel, tokenizer: Tokenizer, config: Config, src_lines: Sequence[str],
                          tgt_lines: Sequence[str], gold: Sequence[GoldAlignment],
                          batch_size: int = 32) -> AlignmentScore:
    """AER, precision and recall of a model in memory against gold links: the default
    reading of the model trained with ``config`` (forced decoding, argmax), as ``nmt
    align`` gives it. Validation during training reports this."""
    pairs = encode_pairs(tokenizer, src_lines, tgt_lines)
    reading = AttentionReading().for_model(config)
    attentions = forced_attention(model, [(pair.src_ids, pair.tgt_ids) for pair in pairs], default_shift(config),
                                  batch_size, reading.selection, default_full_context(config),
                                  reading.null)  # (T, S [+ 1]) each
    aligned = [pair.read(attention, reading) for pair, attention in zip(pairs, attentions)]
    lengths = [(len(sentence.src_words), len(sentence.tgt_words)) for sentence in aligned]
    return score_alignments(gold, [sentence.links for sentence in aligned], lengths)
