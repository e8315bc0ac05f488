"""Validation during training: per-token loss, perplexity and greedy-decoding BLEU."""

from __future__ import annotations

import dataclasses
import math

import sacrebleu
import torch

from nmt_cli.config import Config
from nmt_cli.data.binarized import ParallelSplit
from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding import generate
from nmt_cli.models.base import Seq2SeqModel
from nmt_cli.precision import Precision
from nmt_cli.training.batching import collate, make_batches
from nmt_cli.training.loss import label_smoothed_cross_entropy

__all__ = ["validation_loss", "validation_bleu"]


@torch.no_grad()
def validation_loss(model: Seq2SeqModel, split: ParallelSplit, max_tokens: int, device: torch.device,
                    precision: Precision) -> tuple[float, float]:
    """Mean negative log-likelihood per target token (EOS included) and perplexity ``exp(NLL)``.

    No label smoothing here, so the numbers compare across runs and toolkits.
    """
    nll_total = torch.zeros((), dtype=torch.float64, device=device)
    tokens = 0
    for indices in make_batches(split.src.lengths, split.tgt.lengths, max_tokens):
        batch = collate(split, indices).to(device)
        with precision.autocast():
            features, _ = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask, features_only=True)
            _, nll = label_smoothed_cross_entropy(features, model.output_layer(), batch.tgt_out, batch.tgt_mask,
                                                  smoothing=0.0)
        nll_total += nll
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
