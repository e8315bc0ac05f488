"""Validation during training: per-token loss, perplexity, greedy-decoding BLEU and, when the
validation split has word links, the alignment error rate of the model's default
reading; and which validation is the best (:class:`EarlyStopping`)."""

from __future__ import annotations

import dataclasses
import math

import sacrebleu
import torch

from nmt_cli.alignment.api import model_alignment_score
from nmt_cli.config import Config, TrainConfig
from nmt_cli.data.binarized import ParallelSplit
from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding import generate
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.pharaoh import read_alignments
from nmt_cli.precision import Precision
from nmt_cli.textio import read_lines
from nmt_cli.training.batching import collate, make_batches
from nmt_cli.errors import NmtError
from nmt_cli.training.distributed import DistributedContext
from nmt_cli.training.objectives.cross_entropy import CrossEntropyObjective
from nmt_cli.training.state import TrainingState

__all__ = ["validation_loss", "validation_bleu", "validation_aer", "validate", "validate_on_main",
           "check_validation_split", "EarlyStopping"]

#: how each metric ranks validations: higher or lower is better
METRIC_MODES = {"bleu": "max", "loss": "min", "aer": "min"}


@torch.no_grad()
def validation_loss(model: Seq2SeqModel, split: ParallelSplit, max_tokens: int, device: torch.device,
                    precision: Precision) -> tuple[float, float]:
    """Mean negative log-likelihood per target token (EOS included) and perplexity ``exp(NLL)``.

    No label smoothing here, so the numbers compare across runs and toolkits.
    """
    nll_total = torch.zeros((), dtype=torch.float64, device=device)
    tokens = 0
    unsmoothed = CrossEntropyObjective(label_smoothing=0.0)
    for indices in make_batches(split.src.lengths, split.tgt.lengths, max_tokens):
        batch = collate(split, indices).to(device)
        with precision.autocast():
            nll_total += unsmoothed(model, model, batch).nll
        tokens += batch.num_tokens
    loss = float(nll_total) / max(tokens, 1)
    return loss, math.exp(min(loss, 100.0))


@torch.no_grad()
def validation_bleu(model: Seq2SeqModel, data: PreparedData, config: Config, device: torch.device) -> float:
    """sacreBLEU of greedy translations of the validation split against its cleaned reference text.

    Hypotheses are detokenised with the run's SentencePiece model; at most
    ``train.valid_max_sentences`` sentences (0 = all) are decoded.
    """
    split = data.split("valid")
    count = len(split)
    if config.train.valid_max_sentences > 0:
        count = min(count, config.train.valid_max_sentences)
    sources = [split.src[i].tolist() for i in range(count)]
    with open(data.text_path("valid", "tgt"), encoding="utf-8") as handle:
        references = [line.rstrip("\n") for _, line in zip(range(count), handle)]
    greedy = dataclasses.replace(config.decode, beam_size=1, nbest=1, sampling="none")
    hypotheses = generate(model, sources, greedy, device)
    texts = [data.tokenizer.decode_tgt(hypothesis.tokens) for hypothesis in hypotheses]
    return sacrebleu.corpus_bleu(texts, [references]).score


@torch.no_grad()
def validation_aer(model: Seq2SeqModel, data: PreparedData, config: Config, precision: Precision) -> float | None:
    """AER of the validation split's word links (``valid.align``, taken as gold) against the
    model's alignments as ``nmt align`` reads them by default; None without links."""
    gold_path = data.gold_alignment_path("valid")
    if gold_path is None:
        return None
    sources, targets = (read_lines(data.text_path("valid", side)) for side in ("src", "tgt"))
    with precision.autocast():
        score = model_alignment_score(model, data.tokenizer, config, sources, targets, read_alignments(gold_path))
    return score.aer


def validate(model: Seq2SeqModel, data: PreparedData, config: Config, device: torch.device,
             precision: Precision) -> dict[str, float | None]:
    """``loss`` and ``ppl`` of the validation split, its greedy ``bleu`` (None unless
    ``train.valid_bleu``) and ``aer`` (None unless it has word links). The model is left
    in evaluation mode."""
    model.eval()
    loss, ppl = validation_loss(model, data.split("valid"), config.train.max_tokens, device, precision)
    bleu = validation_bleu(model, data, config, device) if config.train.valid_bleu else None
    return {"loss": loss, "ppl": ppl, "bleu": bleu, "aer": validation_aer(model, data, config, precision)}


def validate_on_main(model: Seq2SeqModel, data: PreparedData, config: Config, context: DistributedContext,
                     precision: Precision, step: int) -> dict[str, float | None]:
    """:func:`validate` on rank 0, shared with every rank: ``{"step", "loss", "ppl", "bleu"}``
    and ``aer`` when the validation split has word links. The model is left in training mode."""
    names = ("loss", "ppl", "bleu", "aer")
    values = [math.nan] * len(names)
    if context.is_main:
        result = validate(model, data, config, context.device, precision)
        model.train()
        values = [math.nan if result[name] is None else result[name] for name in names]
    loss, ppl, bleu, aer = context.broadcast_floats(values)
    shared = {"step": step, "loss": loss, "ppl": ppl, "bleu": None if math.isnan(bleu) else bleu}
    if not math.isnan(aer):
        shared["aer"] = aer
    return shared


def check_validation_split(config: Config, data: PreparedData) -> None:
    """Before training: choosing the best checkpoint by AER needs the validation split's word
    links, and validating needs a validation split."""
    if config.train.early_stop_metric == "aer" and (
            "valid" not in data.split_names or data.gold_alignment_path("valid") is None):
        raise NmtError(f"{data.path}: train.early_stop_metric=aer needs word links for the validation split "
                       "(data.alignment_path with its <valid split>.align)")
    if config.train.valid_every > 0 and "valid" not in data.split_names:
        raise NmtError(f"{data.path}: has no validation split to validate on every {config.train.valid_every} "
                       "steps; prepare one (data.valid_split) or set train.valid_every=0")


class EarlyStopping:
    """Which validation is the best (``train.early_stop_metric``) and when ``train.patience``
    validations without improvement end the run."""

    def __init__(self, cfg: TrainConfig):
        self.metric, self.mode = cfg.early_stop_metric, METRIC_MODES[cfg.early_stop_metric]
        self.patience = cfg.patience

    def is_better(self, value: float, best: float | None) -> bool:
        """Strict improvement of ``value`` over ``best``."""
        if best is None:
            return True
        return value > best if self.mode == "max" else value < best

    def record(self, state: TrainingState, result: dict) -> bool:
        """Add ``result`` (``{"step", "loss", "ppl", "bleu", "aer"}``) to ``state``; True when it is the new best."""
        state.validations.append(result)
        value = result[self.metric]
        improved = self.is_better(value, state.best["value"] if state.best else None)
        if improved:
            state.best = {"step": result["step"], "metric": self.metric, "value": value}
            state.bad_validations = 0
        else:
            state.bad_validations += 1
        return improved

    def exhausted(self, state: TrainingState) -> bool:
        return self.patience > 0 and state.bad_validations >= self.patience
