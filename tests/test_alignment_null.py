"""The learned null position (``model.alignment_null``): in the model, in the guided
objective, and in every reading of the attention."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from nmt_cli.alignment.api import AlignOptions, Aligner, default_symmetrization, model_alignment_score
from nmt_cli.alignment.extract import forced_attention
from nmt_cli.alignment.reader import AttentionReading, HeadSelection, combine_alignments, default_null, read_alignment
from nmt_cli.alignment.sweep import DirectionReading, sweep
from nmt_cli.checkpoint import save_checkpoint
from nmt_cli.cli import cli
from nmt_cli.cli import align as _align_command  # noqa: F401  (registers `nmt align`)
from nmt_cli.config import Config
from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding import Translator
from nmt_cli.errors import ConfigError, NmtError
from nmt_cli.models import build_model
from nmt_cli.pharaoh import GoldAlignment, format_links
from nmt_cli.training.batching import collate
from nmt_cli.training.objectives import ObjectiveContext, build_objective
from nmt_cli.training.objectives.guided_alignment import alignment_cross_entropy, null_cross_entropy
from nmt_cli.translation import hypothesis_alignment
from tests.test_guided_alignment import GUIDED, TINY
from tests.test_transformer import batch, build, decode_all

B = "\u2581"
NULL = {**GUIDED, "model.alignment_null": True}


# ---- config ------------------------------------------------------------------------------------


def test_only_the_encoder_decoder_transformers_take_a_null_position():
    for arch in ("transformer", "linear_transformer"):
        assert Config().with_overrides({"model.arch": arch, "model.alignment_null": True}).model.alignment_null
    with pytest.raises(ConfigError, match="model.alignment_null': a rnn_bahdanau model has no null position"):
        Config().with_overrides({"model.arch": "rnn_bahdanau", "model.alignment_null": True})
    with pytest.raises(ConfigError, match="a mask_align model has its own null"):
        Config().with_overrides({"model.arch": "mask_align", "model.alignment_null": True})
    # read only where the guided head learned it
    assert default_null(Config().with_overrides(NULL))
    assert not default_null(Config().with_overrides({**TINY, "model.alignment_null": True}))
    assert not default_null(Config().with_overrides(GUIDED)) and not default_null(None)


# ---- the model ---------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["transformer", "linear_transformer"])
def test_the_null_is_one_more_memory_position_after_the_padding(arch):
    variant = {"arch": arch, "linear_sites": ("decoder_self", "cross")} if arch != "transformer" else {"arch": arch}
    model = build(variant, alignment_null=True)
    src, src_mask, tgt, tgt_mask = batch([7, 4, 5], [6, 6, 6])
    logits, attention = model(src, src_mask, tgt, tgt_mask, need_attention=True)
    assert attention.shape == (3, model.attention_layers, model.attention_heads, 6, 8)  # 7 source columns + null
    # every row is a distribution over the real source and the null, which always gets weight
    torch.testing.assert_close(attention.sum(-1), torch.ones_like(attention.sum(-1)))
    assert bool((attention[..., -1] > 0).all())
    padding = torch.cat([~src_mask, torch.zeros(3, 1, dtype=torch.bool)], dim=1)  # (B, S + 1)
    assert torch.all(attention.masked_select(padding[:, None, None, None, :]) == 0.0)
    # incremental decoding reads the same memory
    step_logits, step_attention = decode_all(model, src, src_mask, tgt)
    torch.testing.assert_close(step_logits, logits)
    torch.testing.assert_close(step_attention, attention)
    # a sentence alone reads as in the padded batch: same logits, same source and null weights
    alone_logits, alone = model(src[1:2, :4], src_mask[1:2, :4], tgt[1:2], tgt_mask[1:2], need_attention=True)
    torch.testing.assert_close(alone_logits[0], logits[1])
    torch.testing.assert_close(alone[0, ..., :4], attention[1, ..., :4])
    torch.testing.assert_close(alone[0, ..., -1], attention[1, ..., -1])
    # the null is a parameter of its own, and it changes the translation
    assert model.null_position.shape == (model.null_position.numel(),)
    with torch.no_grad():
        model.null_position.add_(1.0)
    assert (model(src, src_mask, tgt, tgt_mask)[0] - logits).abs().amax() > 1e-6


# ---- the objective -----------------------------------------------------------------------------


def test_unaligned_pieces_of_linked_sentences_learn_the_null():
    # (B=3, T=3 rows, S + 1 = 3 columns, the last the null); target pieces: 2, 2 and 1 (+ EOS)
    attention = torch.tensor([[[0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.1, 0.1, 0.8]],
                              [[0.5, 0.25, 0.25], [0.4, 0.4, 0.2], [0.3, 0.3, 0.4]],
                              [[0.7, 0.2, 0.1], [0.5, 0.1, 0.4], [0.0, 0.0, 0.0]]])
    tgt_mask = torch.tensor([[True, True, True], [True, True, True], [True, True, False]])
    # sentence 0: piece 0 linked, piece 1 not; sentence 1: both linked; sentence 2: no links at all
    links = torch.tensor([[0, 0, 0], [1, 0, 1], [1, 1, 0]])
    assert null_cross_entropy(attention, links, tgt_mask).item() == pytest.approx(-math.log(0.6))
    # shifted: piece t is read at row t + 1
    assert null_cross_entropy(attention, links, tgt_mask, shift=1).item() == pytest.approx(-math.log(0.8))
    # without links nothing is unaligned
    assert null_cross_entropy(attention, links[:0], tgt_mask).item() == 0


def test_the_guided_objective_adds_the_null_term(tiny_prepared):
    data = PreparedData(tiny_prepared)
    config = Config().with_overrides(NULL)
    torch.manual_seed(0)
    model = build_model(config.model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size, True).eval()
    batch_ = collate(data.split("train"), np.arange(6))
    keep = ~((batch_.links[:, 0] == 0) & (batch_.links[:, 1] == 2))  # the synthetic links leave no piece
    batch_ = dataclasses.replace(batch_, links=batch_.links[keep], link_weights=batch_.link_weights[keep])  # unaligned
    terms = build_objective(config, ObjectiveContext(torch.device("cpu"), data))(model, model, batch_)
    _, attention = model(batch_.src, batch_.src_mask, batch_.tgt_in, batch_.tgt_mask, need_attention=True)
    head = attention[:, 0, 1]  # model.alignment_layer 0, model.alignment_head 1
    expected = (alignment_cross_entropy(head, batch_.links, batch_.link_weights, 1)
                + null_cross_entropy(head, batch_.links, batch_.tgt_mask, 1))
    torch.testing.assert_close(terms.logged["align_loss"], expected)
    null = null_cross_entropy(head, batch_.links, batch_.tgt_mask, 1)
    torch.testing.assert_close(null, -head[0, 3, -1].log())  # piece 2 of sentence 0, read at row 3


# ---- reading -----------------------------------------------------------------------------------


def test_a_word_is_unaligned_where_the_null_outweighs_its_best_source_word():
    src, tgt = [f"{B}das", f"{B}Ha", "us"], [f"{B}the", f"{B}house", f"{B}of"]
    attention = np.array([[0.7, 0.1, 0.1, 0.1],  # "the" -> das
                          [0.1, 0.3, 0.3, 0.3],  # "house" -> Haus (0.6 over its two pieces), null 0.3
                          [0.3, 0.1, 0.1, 0.5]])  # "of": the null (0.5) beats das (0.3)
    with_null = read_alignment(src, tgt, attention, AttentionReading(HeadSelection(), null=True))
    assert with_null.links == [(0, 0), (1, 1)]
    # the soft matrix is over source words alone, as without a null
    np.testing.assert_allclose(with_null.matrix, [[7 / 9, 2 / 9], [1 / 7, 6 / 7], [0.6, 0.4]])
    without = read_alignment(src, tgt, attention[:, :3], AttentionReading(HeadSelection()))
    np.testing.assert_allclose(without.matrix, with_null.matrix)
    assert without.links == [(0, 0), (0, 2), (1, 1)]
    # a threshold applies to the weights with the null's share among them
    threshold = read_alignment(src, tgt, attention, AttentionReading(HeadSelection(), "threshold", 0.35, null=True))
    assert threshold.links == [(0, 0), (1, 1)]
    # the weights links are read from keep the null's share out: "the" 0.7/0.1 of 1, "house"
    # 0.1/0.6 with 0.3 on the null, "of" 0.3/0.2 with 0.5 on it
    np.testing.assert_allclose(with_null.null_share, [0.1, 0.3, 0.5])
    np.testing.assert_allclose(with_null.link_weights(), [[0.7, 0.2], [0.1, 0.6], [0.3, 0.2]])
    assert without.null_share is None and without.link_weights() is without.matrix


def test_an_ensemble_reads_the_mean_of_its_models_link_weights():
    src, tgt = [f"{B}das", f"{B}Haus"], [f"{B}the", f"{B}house"]
    with_null = read_alignment(src, tgt, np.array([[0.5, 0.1, 0.4], [0.1, 0.3, 0.6]]),
                               AttentionReading(HeadSelection(), null=True))
    assert with_null.links == [(0, 0)]  # "house": the null (0.6) beats Haus (0.3)
    plain = read_alignment(src, tgt, np.array([[0.9, 0.1], [0.2, 0.8]]), AttentionReading(HeadSelection()))
    both = combine_alignments([with_null, plain], AttentionReading(HeadSelection()))
    # means: "the" 0.7/0.1, null 0.2; "house" 0.15/0.55, null 0.3 -> Haus now beats the null
    np.testing.assert_allclose(both.link_weights(), [[0.7, 0.1], [0.15, 0.55]])
    np.testing.assert_allclose(both.null_share, [0.2, 0.3])
    np.testing.assert_allclose(both.matrix, [[7 / 8, 1 / 8], [0.15 / 0.7, 0.55 / 0.7]])
    assert both.links == [(0, 0), (1, 1)]
    assert combine_alignments([plain, plain], AttentionReading(HeadSelection())).null_share is None
    assert combine_alignments([plain], AttentionReading(HeadSelection())) is plain
    other = read_alignment([f"{B}das", f"{B}Ha", f"{B}us"], tgt, np.ones((2, 3)) / 3, AttentionReading(HeadSelection()))
    with pytest.raises(NmtError, match="read a pair as different words"):
        combine_alignments([plain, other], AttentionReading(HeadSelection()))


@pytest.fixture(scope="module")
def null_checkpoint(tiny_prepared, tmp_path_factory):
    """A guided model with a null position whose vector is made large, so that the null wins
    some words and not others (seeded), and its prepared data."""
    data = PreparedData(tiny_prepared)
    config = Config().with_overrides(NULL)
    torch.manual_seed(0)
    model = build_model(config.model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size, True)
    with torch.no_grad():
        model.null_position.mul_(30)
    path = save_checkpoint(tmp_path_factory.mktemp("null") / "run", model.state_dict(), config, data.tokenizer,
                           {"step": 1})
    return path, data, config


def _expected(model, pair_ids, selection=HeadSelection(0, (1,))):
    """The guided head's weights with the null column last, by forced decoding; its source
    columns are the weights read without it."""
    (weights,) = forced_attention(model, [pair_ids], True, selection=selection, null=True)
    (plain,) = forced_attention(model, [pair_ids], True, selection=selection)
    np.testing.assert_array_equal(weights[:, :-1], plain)
    return weights


def test_a_model_without_a_null_position_has_none_to_read(tiny_prepared):
    data = PreparedData(tiny_prepared)
    model = build_model(Config().with_overrides(GUIDED).model, data.tokenizer.src_vocab_size,
                        data.tokenizer.tgt_vocab_size, True)
    with pytest.raises(NmtError, match="the model has no null position to read"):
        forced_attention(model, [([5, 6, 7], [8, 9])], True, null=True)


def test_every_command_reads_the_null(null_checkpoint, tmp_path):
    run, data, config = null_checkpoint
    selection = HeadSelection(0, (1,))
    reading = AttentionReading(selection, null=True)
    sources = data.text_path("valid", "src").read_text(encoding="utf-8").splitlines()[:8]
    targets = data.text_path("valid", "tgt").read_text(encoding="utf-8").splitlines()[:8]
    # nmt align
    aligner = Aligner(run)
    assert aligner.settings["null"] is True
    pairs = aligner.forward.encode(sources, targets)
    aligned = aligner.align(sources, targets)
    expected = [pair.read(_expected(aligner.forward.model, (pair.src_ids, pair.tgt_ids)), reading) for pair in pairs]
    assert [a.links for a in aligned] == [e.links for e in expected]
    without = [pair.read(attention[:, :-1], AttentionReading(selection))
               for pair, attention in zip(pairs, aligner.forward.attention(pairs, True, selection))]
    unaligned = sum(len(w.links) - len(e.links) for w, e in zip(without, expected))
    assert 0 < unaligned < sum(len(w.links) for w in without) / 2  # the null wins some words, not most
    for a, e in zip(aligned, expected):
        np.testing.assert_allclose(a.matrix, e.matrix, atol=1e-6)
    # the command writes them and says how it read them
    src_path, tgt_path, out = tmp_path / "src.txt", tmp_path / "tgt.txt", tmp_path / "out"
    src_path.write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    tgt_path.write_text("".join(line + "\n" for line in targets), encoding="utf-8")
    result = CliRunner().invoke(cli, ["align", "--checkpoint", str(run), "--src", str(src_path), "--tgt",
                                      str(tgt_path), "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0 and "(layer=0 heads=1, shift=on, null, argmax)" in result.stderr
    written = (out / "alignments.align").read_text(encoding="utf-8").splitlines()
    assert written == [format_links(e.links) for e in expected]
    # the validation AER scores the same links
    gold = [GoldAlignment(sure=frozenset(e.links), possible=frozenset(e.links)) for e in expected]
    assert model_alignment_score(aligner.forward.model, data.tokenizer, config, sources, targets, gold).aer == 0
    # nmt align sweep reads every selection with the null too
    best = sweep(aligner.forward, sources, targets, gold)
    assert any(r.reading == DirectionReading(selection, True) and r.score.aer == 0 for r in best)
    # nmt translate --alignments
    translator = Translator.from_checkpoint(run, device="cpu", overrides={"decode.beam_size": 1})
    (hypothesis,) = translator.translate(sources[:1], with_attention=True)
    assert hypothesis.attention.shape[-1] == len(data.tokenizer.encode_src(sources[0]))  # search: source only
    src_ids = data.tokenizer.encode_src(sources[0])
    read = read_alignment(data.tokenizer.src_pieces(src_ids), data.tokenizer.tgt_pieces(hypothesis.tokens),
                          _expected(translator.model, (src_ids, list(hypothesis.tokens))), reading)
    by_default = hypothesis_alignment(sources[0], hypothesis, translator, AttentionReading())
    assert by_default.links == read.links
    np.testing.assert_allclose(by_default.matrix, read.matrix, atol=1e-6)


def test_two_directions_read_with_their_nulls_are_averaged_by_default(null_checkpoint, tmp_path):
    run, data, _ = null_checkpoint
    sources = data.text_path("valid", "src").read_text(encoding="utf-8").splitlines()[:8]
    targets = data.text_path("valid", "tgt").read_text(encoding="utf-8").splitlines()[:8]
    by_default = Aligner(run, reverse_checkpoint=run)  # the vocabulary is joint: the model reads either way
    assert by_default.symmetrization == "average"
    assert by_default.settings["symmetrization"] == "average" and by_default.settings["average_threshold"] == 0.4
    low = AlignOptions(average_threshold=0.1)  # this random model's weights rarely reach 0.4 in both directions
    averaged = Aligner(run, dataclasses.replace(low, symmetrization="average"), reverse_checkpoint=run)
    links = [a.links for a in Aligner(run, low, reverse_checkpoint=run).align(sources, targets)]
    assert links == [a.links for a in averaged.align(sources, targets)] and any(links)
    told = Aligner(run, AlignOptions(symmetrization="grow-diag-final-and"), reverse_checkpoint=run)
    assert told.symmetrization == "grow-diag-final-and"  # a named one is kept
    # a model without a null on either side: grow-diag-final-and, as for plain attention
    null, plain = AttentionReading(HeadSelection(0, (1,)), null=True), AttentionReading(HeadSelection())
    assert default_symmetrization([null, null, null]) == "average"
    assert default_symmetrization([null, plain]) == "grow-diag-final-and"
    assert default_symmetrization([]) == "grow-diag-final-and"
    src_path, tgt_path = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src_path.write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    tgt_path.write_text("".join(line + "\n" for line in targets), encoding="utf-8")
    result = CliRunner().invoke(cli, ["align", "--checkpoint", str(run), "--reverse-checkpoint", str(run), "--src",
                                      str(src_path), "--tgt", str(tgt_path), "--out", str(tmp_path / "out")],
                                catch_exceptions=False)
    assert result.exit_code == 0 and "argmax, average > 0.4) ->" in result.stderr
