"""Guided alignment: word links through prepare, collate and the loss; the head `nmt align`
reads by default; the validation AER; exact resume."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt_cli.alignment.aer import score_alignments
from nmt_cli.alignment.api import Aligner, AlignOptions, model_alignment_score
from nmt_cli.alignment.extract import forced_attention
from nmt_cli.alignment.reader import (AttentionReading, HeadSelection, default_full_context, default_selection,
                                      default_shift, read_alignment)
from nmt_cli.bootstrap import (aligner_command, bootstrap, default_refine_steps, links_symmetrization,
                               refined_config)
from nmt_cli.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from nmt_cli.config import Config
from nmt_cli.data.links import piece_links
from nmt_cli.data.prepare import prepare
from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding import Translator
from nmt_cli.errors import ConfigError, InputError, NmtError
from nmt_cli.models import build_model
from nmt_cli.pharaoh import GoldAlignment, format_links, read_alignments
from nmt_cli.training import train
from nmt_cli.training.batching import collate, collate_links
from nmt_cli.training.objectives import ObjectiveContext, build_objective
from nmt_cli.training.objectives.guided_alignment import GuidedAlignmentObjective, alignment_cross_entropy
from nmt_cli.training.progress import read_metrics
from nmt_cli.textio import read_lines
from nmt_cli.translation import hypothesis_alignment

B = "\u2581"

TINY = {
    "model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64, "model.encoder_layers": 1,
    "model.decoder_layers": 2, "model.dropout": 0.2, "train.max_tokens": 300, "train.num_threads": 1,
    "train.warmup_steps": 10, "train.lr": 3e-3, "train.log_every": 1, "train.valid_every": 0,
    "train.early_stop_metric": "loss", "train.valid_bleu": False,
}
GUIDED = {**TINY, "train.alignment_weight": 0.5, "model.alignment_layer": 0, "model.alignment_head": 1}


# ---- words -> pieces ----------------------------------------------------------------------


def test_a_word_link_links_every_piece_of_both_words():
    src = [f"{B}der", f"{B}klein", "e", f"{B}hund"]  # words: der | klein e | hund
    tgt = [f"{B}the", f"{B}sm", "all", f"{B}dog"]  # words: the | sm all | dog
    mapped = piece_links([(0, 0), (1, 1), (2, 2)], src, tgt)
    # (source piece, target piece), sorted by target piece
    assert mapped.tolist() == [[0, 0], [1, 1], [2, 1], [1, 2], [2, 2], [3, 3]]
    assert piece_links([], src, tgt).shape == (0, 2)


def _files_corpus(folder, pairs, links):
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid"):
        (folder / f"{split}.de").write_text("".join(de + "\n" for de, _ in pairs), encoding="utf-8")
        (folder / f"{split}.en").write_text("".join(en + "\n" for _, en in pairs), encoding="utf-8")
    (folder / "links").mkdir(exist_ok=True)
    (folder / "links" / "train.align").write_text("".join(line + "\n" for line in links), encoding="utf-8")
    return Config().with_overrides({
        "data.source": "files", "data.path": str(folder), "data.valid_split": "valid", "data.test_split": "",
        "data.vocab_size": 40, "data.alignment_path": str(folder / "links"), "data.max_length_ratio": 0,
    })


PAIRS = [("der kleine hund", "the small dog"), ("  ", "nothing"), ("ein mann liest", "a man reads")] * 8
LINKS = ["0-0 1-1 2-2", "", "0-0 1-1 2p2"] * 8


def test_prepare_keeps_the_links_of_the_pairs_cleaning_keeps(tmp_path):
    manifest = prepare(_files_corpus(tmp_path / "raw", PAIRS, LINKS), tmp_path / "prep", progress=False)
    data = PreparedData(tmp_path / "prep")
    train = manifest["splits"]["train"]
    assert train["kept"] == 16 and train["dropped"] == {"empty": 8}
    assert train["links"] == {"pairs_with_links": 16, "word_links": 48, "piece_links": train["links"]["piece_links"],
                              "unmatched_pairs": 0}
    assert "links" not in manifest["splits"]["valid"] and data.split("valid").links is None
    kept_links = data.gold_alignment_path("train").read_text().splitlines()
    assert kept_links == ["0-0 1-1 2-2", "0-0 1-1 2p2"] * 8  # the empty pair went with its line
    split = data.split("train")
    for index, line in enumerate(kept_links):
        src = data.tokenizer.src_pieces(split.src[index])
        tgt = data.tokenizer.tgt_pieces(split.tgt[index])
        expected = piece_links(read_alignments(data.gold_alignment_path("train"))[index].possible, src, tgt)
        np.testing.assert_array_equal(split.links_of(index), expected)
    assert manifest["inputs"]["train"]["train.align"]


def test_bad_link_files_name_the_file_and_line(tmp_path):
    with pytest.raises(InputError, match=r"train.align:3: link 0-3 is outside the pair \(3 source and 3 target"):
        prepare(_files_corpus(tmp_path / "a", PAIRS, ["0-0", "", "0-3"] + LINKS[3:]), tmp_path / "pa", progress=False)
    with pytest.raises(InputError, match=r"train.align:2: .*ends at line 1"):
        prepare(_files_corpus(tmp_path / "b", PAIRS, ["0-0"]), tmp_path / "pb", progress=False)
    with pytest.raises(InputError, match=r"train.align:25: has more lines than the split's 24 pairs"):
        prepare(_files_corpus(tmp_path / "c", PAIRS, LINKS + ["0-0"]), tmp_path / "pc", progress=False)
    with pytest.raises(InputError, match=r"bad alignment link 'x-1'"):
        prepare(_files_corpus(tmp_path / "d", PAIRS, ["x-1"] + LINKS[1:]), tmp_path / "pd", progress=False)


def test_config_checks_the_supervised_head_exists():
    with pytest.raises(ConfigError, match=r"model.alignment_layer': -2 is not a decoder layer .*\(1 attention"):
        Config().with_overrides({"train.alignment_weight": 0.05, "model.decoder_layers": 1})
    with pytest.raises(ConfigError, match=r"model.alignment_head': 8 is not a head"):
        Config().with_overrides({"train.alignment_weight": 0.05, "model.alignment_head": 8})
    with pytest.raises(ConfigError, match=r"data.alignment_path': the synthetic corpus"):
        Config().with_overrides({"data.alignment_path": "links"})
    assert Config().with_overrides({"model.decoder_layers": 1}).train.alignment_weight == 0  # off: not checked


# ---- batches and the loss -------------------------------------------------------------------


def test_collate_gives_each_linked_target_piece_a_distribution(tiny_prepared):
    split = PreparedData(tiny_prepared).split("train")
    indices = np.array([3, 0, 7])
    links, weights = collate_links(split, indices)
    for row, index in enumerate(indices):
        mine = links[links[:, 0] == row]
        np.testing.assert_array_equal(mine[:, [2, 1]].numpy(), split.links_of(index))
    totals = {}
    for (row, target, _), weight in zip(links.tolist(), weights.tolist()):
        totals[row, target] = totals.get((row, target), 0.0) + weight
    assert totals and all(math.isclose(total, 1.0, rel_tol=1e-6) for total in totals.values())
    batch = collate(split, indices)
    assert torch.equal(batch.links, links) and torch.equal(batch.link_weights, weights)
    assert int(batch.links[:, 1].max()) < batch.tgt_out.size(1) - 1  # never the EOS row


def test_the_alignment_loss_is_the_cross_entropy_of_the_link_distributions():
    attention = torch.tensor([[[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]],
                              [[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]]])  # (B=2, T=2, S=3)
    # sentence 0: target 0 -> source 0; target 1 -> sources 1 and 2; sentence 1: target 1 -> source 2
    links = torch.tensor([[0, 0, 0], [0, 1, 1], [0, 1, 2], [1, 1, 2]])
    weights = torch.tensor([1.0, 0.5, 0.5, 1.0])
    expected = -(math.log(0.7) + 0.5 * math.log(0.6) + 0.5 * math.log(0.3) + math.log(0.5))
    assert alignment_cross_entropy(attention, links, weights).item() == pytest.approx(expected, rel=1e-6)
    # shifted: target piece t is read one row later, where it is the decoder input
    first = links[:1]
    assert alignment_cross_entropy(attention, first, weights[:1], shift=1).item() == pytest.approx(-math.log(0.1))


@pytest.mark.parametrize("shift,full_context", [(False, False), (True, False), (True, True)])
def test_the_guided_objective_adds_the_weighted_loss_of_the_chosen_head(tiny_prepared, shift, full_context):
    data = PreparedData(tiny_prepared)
    config = Config().with_overrides({**GUIDED, "model.alignment_shift": shift,
                                      "model.alignment_full_context": full_context})
    model = build_model(config.model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size, True).eval()
    context = ObjectiveContext(torch.device("cpu"), data)
    objective = build_objective(config, context)
    assert isinstance(objective, GuidedAlignmentObjective)
    batch = collate(data.split("train"), np.arange(6))
    terms = objective(model, model, batch)
    plain = build_objective(Config().with_overrides(TINY), context)(model, model, batch)
    _, attention = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask, need_attention=True,
                         full_context_attention=full_context)
    alignment = alignment_cross_entropy(attention[:, 0, 1], batch.links, batch.link_weights, int(shift))
    torch.testing.assert_close(terms.nll, plain.nll)
    torch.testing.assert_close(terms.loss, plain.loss + 0.5 * alignment)
    torch.testing.assert_close(terms.logged, {"align_loss": alignment})


# ---- full-context alignment (Garg et al. 2019) ----------------------------------------------------


@pytest.mark.parametrize("arch", ["transformer", "linear_transformer"])
def test_full_context_attention_sees_the_whole_target_but_not_its_padding(arch):
    torch.manual_seed(0)
    config = Config().with_overrides({**TINY, "model.arch": arch, "model.dropout": 0.0})
    model = build_model(config.model, 40, 40, True).eval()
    src, tgt = torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 6))
    src_mask, tgt_mask = torch.ones_like(src, dtype=torch.bool), torch.ones_like(tgt, dtype=torch.bool)
    tgt_mask[1, 4:] = False  # sentence 1: 4 target positions and 2 of padding
    later_changed = tgt.clone()
    later_changed[:, 3] = (tgt[:, 3] - 3) % 36 + 4  # another token at position 3

    def run(tokens, mask, full_context, rows=slice(None)):
        return model(src[rows], src_mask[rows], tokens[rows], mask[rows], need_attention=True,
                     full_context_attention=full_context)

    logits, full = run(tgt, tgt_mask, True)
    causal_logits, causal = run(tgt, tgt_mask, False)
    torch.testing.assert_close(logits, causal_logits)  # the translation itself stays causal
    torch.testing.assert_close(full.sum(-1), torch.ones_like(full.sum(-1)))
    _, full_changed = run(later_changed, tgt_mask, True)
    _, causal_changed = run(later_changed, tgt_mask, False)
    # rows 0-2 come before position 3: causal attention cannot see the change, full context does
    torch.testing.assert_close(causal_changed[..., :3, :], causal[..., :3, :])
    assert (full_changed[..., :3, :] - full[..., :3, :]).abs().amax() > 1e-3
    # padding is masked out: sentence 1 alone, unpadded, reads exactly as in the batch
    _, alone = run(tgt[:, :4], tgt_mask[:, :4], True, rows=slice(1, 2))
    torch.testing.assert_close(alone[0], full[1, :, :, :4])


def test_full_context_is_refused_where_the_decoder_is_recurrent(tiny_prepared):
    with pytest.raises(ConfigError, match="model.alignment_full_context': a rnn_luong decoder reads the target"):
        Config().with_overrides({"model.arch": "rnn_luong", "train.alignment_weight": 0.05,
                                 "model.alignment_layer": 0, "model.alignment_full_context": True})
    config = Config().with_overrides({**TINY, "model.arch": "rnn_luong", "model.hidden_size": 16,
                                      "model.embed_dim": 16})
    model = build_model(config.model, 40, 40, True)
    tokens, mask = torch.randint(4, 40, (1, 3)), torch.ones(1, 3, dtype=torch.bool)
    with pytest.raises(NmtError, match="full-context attention needs a Transformer decoder"):
        model(tokens, mask, tokens, mask, need_attention=True, full_context_attention=True)


def test_guided_training_needs_links(tiny_prepared, tmp_path):
    stripped = tmp_path / "prepared"
    stripped.mkdir()
    for path in tiny_prepared.iterdir():
        if not path.name.startswith("train.links"):
            (stripped / path.name).symlink_to(path)
    with pytest.raises(NmtError, match="needs word links for the training split"):
        train(Config().with_overrides({**GUIDED, "train.max_steps": 1}), stripped, tmp_path / "run",
              stream=io.StringIO())


# ---- training: resume, validation AER ---------------------------------------------------------


def _train_losses(run_dir, key="loss"):
    return {r["step"]: r[key] for r in read_metrics(run_dir) if r["kind"] == "train"}


def test_guided_training_resumes_exactly(tiny_prepared, tmp_path):
    settings = {**GUIDED, "train.save_every": 4, "train.update_freq": 2}
    train(Config().with_overrides({**settings, "train.max_steps": 10}), tiny_prepared, tmp_path / "whole",
          stream=io.StringIO())
    train(Config().with_overrides({**settings, "train.max_steps": 4}), tiny_prepared, tmp_path / "split",
          stream=io.StringIO())
    train(Config().with_overrides({**settings, "train.max_steps": 10}), tiny_prepared, tmp_path / "split",
          stream=io.StringIO())
    whole, split = _train_losses(tmp_path / "whole"), _train_losses(tmp_path / "split")
    assert sorted(split) == list(range(1, 11))
    assert split == pytest.approx(whole, abs=1e-6)
    assert _train_losses(tmp_path / "split", "align_loss") == pytest.approx(
        _train_losses(tmp_path / "whole", "align_loss"), abs=1e-6)


def test_validation_aer_is_logged_and_is_what_nmt_align_scores(tiny_prepared, tmp_path):
    config = Config().with_overrides({**GUIDED, "train.max_steps": 6, "train.valid_every": 3,
                                      "train.early_stop_metric": "aer"})
    stream = io.StringIO()
    summary = train(config, tiny_prepared, tmp_path / "run", stream=stream)
    lines = [line for line in stream.getvalue().splitlines() if line.startswith("valid step")]
    assert len(lines) == 2 and all(" | aer 0." in line and "best aer" in line for line in lines)
    records = [r for r in read_metrics(tmp_path / "run") if r["kind"] == "valid"]
    assert [r["step"] for r in records] == [3, 6] and all(0 <= r["aer"] <= 1 for r in records)
    assert summary.best["metric"] == "aer" and summary.best["value"] == min(r["aer"] for r in records)
    # the AER of step 6 is that of the checkpoint as `nmt align` reads it by default
    data = PreparedData(tiny_prepared)
    sources = data.text_path("valid", "src").read_text(encoding="utf-8").splitlines()
    targets = data.text_path("valid", "tgt").read_text(encoding="utf-8").splitlines()
    gold = read_alignments(data.gold_alignment_path("valid"))
    aligned = Aligner(list_checkpoints(tmp_path / "run")[-1]).align(sources, targets)
    lengths = [(len(s.src_words), len(s.tgt_words)) for s in aligned]
    assert score_alignments(gold, [s.links for s in aligned], lengths).aer == pytest.approx(records[-1]["aer"])


def test_aer_as_the_best_metric_needs_validation_links(tmp_path):
    raw = tmp_path / "raw"
    config = _files_corpus(raw, PAIRS, LINKS)
    prepare(config, tmp_path / "prep", progress=False)
    with pytest.raises(NmtError, match="early_stop_metric=aer needs word links for the validation split"):
        train(config.with_overrides({**TINY, "train.early_stop_metric": "aer", "train.max_steps": 1}),
              tmp_path / "prep", tmp_path / "run", stream=io.StringIO())


# ---- the default reading -------------------------------------------------------------------------


def test_the_default_reading_is_the_supervised_head_of_a_guided_model(tiny_prepared, tmp_path):
    guided, plain = Config().with_overrides(GUIDED), Config().with_overrides(TINY)
    assert default_selection(guided) == HeadSelection(0, (1,))
    assert default_selection(plain) == HeadSelection(-1, None) == default_selection(None)
    assert HeadSelection.parse(None, None) is None and HeadSelection.parse("0", None) == HeadSelection(0, None)
    data = PreparedData(tiny_prepared)
    paths = {}
    for name, config in (("guided", guided), ("plain", plain)):
        torch.manual_seed(0)
        model = build_model(config.model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size, True)
        paths[name] = save_checkpoint(tmp_path / name, model.state_dict(), config, data.tokenizer, {"step": 1})
    aligner = Aligner(paths["guided"], reverse_checkpoint=paths["plain"])
    assert aligner.settings["selection"] == "layer=0 heads=1" and aligner.settings["shift"] is True
    assert aligner.settings["reverse_selection"] == "layer=-1 heads=all" and aligner.settings["reverse_shift"] is False
    assert default_shift(guided.with_overrides({"model.alignment_shift": False})) is False
    named = Aligner(paths["guided"], AlignOptions(reading=AttentionReading(HeadSelection(-1, None))))
    assert named.settings["selection"] == "layer=-1 heads=all"
    # nmt translate --alignments reads the same head, at the step where each word is the decoder
    # input: forced decoding of the translation; a model without guided alignment is read from
    # the search's own attention, as before
    source = data.text_path("valid", "src").read_text(encoding="utf-8").splitlines()[0]
    src_ids = data.tokenizer.encode_src(source)
    src_pieces = data.tokenizer.src_pieces(src_ids)
    for name, selection in (("guided", HeadSelection(0, (1,))), ("plain", HeadSelection(-1, None))):
        translator = Translator.from_checkpoint(paths[name], device="cpu", overrides={"decode.beam_size": 1})
        (hypothesis,) = translator.translate([source], with_attention=True)
        if name == "guided":
            (expected,) = forced_attention(translator.model, [(src_ids, hypothesis.tokens)], True,
                                           selection=selection)
        else:
            expected = selection.apply(hypothesis.attention)
        read = read_alignment(src_pieces, data.tokenizer.tgt_pieces(hypothesis.tokens), expected,
                              AttentionReading(selection))
        by_default = hypothesis_alignment(source, hypothesis, translator, AttentionReading())
        np.testing.assert_allclose(by_default.matrix, read.matrix, atol=1e-6)
        assert by_default.links == read.links


def test_a_full_context_head_is_read_in_the_full_context_pass_by_every_command(tiny_prepared, tmp_path):
    config = Config().with_overrides({**GUIDED, "model.alignment_full_context": True})
    assert default_full_context(config) and not default_full_context(Config().with_overrides(GUIDED))
    # no guided head: the attention was learned causally and is read so
    assert not default_full_context(Config().with_overrides({**TINY, "model.alignment_full_context": True}))
    data = PreparedData(tiny_prepared)
    torch.manual_seed(0)
    model = build_model(config.model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size, True)
    path = save_checkpoint(tmp_path / "full", model.state_dict(), config, data.tokenizer, {"step": 1})
    selection = HeadSelection(0, (1,))
    source = data.text_path("valid", "src").read_text(encoding="utf-8").splitlines()[0]
    target = data.text_path("valid", "tgt").read_text(encoding="utf-8").splitlines()[0]

    def expected(align_model, pair_ids):
        full, causal = (forced_attention(align_model, [pair_ids], True, selection=selection, full_context=full)[0]
                        for full in (True, False))
        assert np.abs(full - causal).max() > 1e-3  # the two passes differ, so the checks below tell them apart
        return full

    # nmt align
    aligner = Aligner(path)
    assert aligner.settings["full_context"] is True
    (pair,) = aligner.forward.encode([source], [target])
    (aligned,) = aligner.align([source], [target])
    read = pair.read(expected(aligner.forward.model, (pair.src_ids, pair.tgt_ids)), AttentionReading(selection))
    np.testing.assert_allclose(aligned.matrix, read.matrix, atol=1e-6)
    assert aligned.links == read.links
    # the validation AER scores the same links
    gold = [GoldAlignment(sure=frozenset(read.links), possible=frozenset(read.links))]
    assert model_alignment_score(aligner.forward.model, data.tokenizer, config, [source], [target], gold).aer == 0
    # nmt translate --alignments: forced decoding of the translation in the full-context pass
    translator = Translator.from_checkpoint(path, device="cpu", overrides={"decode.beam_size": 1})
    (hypothesis,) = translator.translate([source], with_attention=True)
    src_ids = data.tokenizer.encode_src(source)
    assert hypothesis.tokens
    read = read_alignment(data.tokenizer.src_pieces(src_ids), data.tokenizer.tgt_pieces(hypothesis.tokens),
                          expected(translator.model, (src_ids, list(hypothesis.tokens))), AttentionReading(selection))
    by_default = hypothesis_alignment(source, hypothesis, translator, AttentionReading())
    np.testing.assert_allclose(by_default.matrix, read.matrix, atol=1e-6)


# ---- bootstrapping: no external aligner ------------------------------------------------------------


@pytest.mark.slow  # the bootstrap trains several models
def test_bootstrap_trains_both_directions_links_and_a_guided_model(tmp_path):
    config = Config().with_overrides({
        **TINY, "data.synthetic_train_size": 300, "data.synthetic_valid_size": 20, "data.synthetic_test_size": 0,
        "data.vocab_size": 200, "train.max_steps": 4, "train.log_every": 2, "model.alignment_layer": -2,
        "model.alignment_null": True})
    record = bootstrap(config, tmp_path / "boot", device="cpu", progress=False, stream=io.StringIO())
    root = tmp_path / "boot"
    assert list(record["stages"]) == ["forward", "reverse", "links", "guided", "guided-reverse", "links-2", "guided-2",
                                      "guided-reverse-2"]
    reverse = load_checkpoint(root / "reverse" / "run").config
    assert (reverse.data.src_lang, reverse.data.tgt_lang) == ("en", "de")
    # the null is learned from links: only the guided stage has one
    forward_model = load_checkpoint(root / "forward" / "run").config.model
    assert not reverse.model.alignment_null and not forward_model.alignment_null
    links = read_alignments(root / "links" / "train.align")
    forward = PreparedData(root / "forward" / "prepared")
    assert len(links) == len(forward.split("train")) and sum(len(pair.sure) for pair in links) == \
        record["stages"]["links"]["links"]
    # with a null to learn, the links leave words unaligned: grow-diag-final-and, not grow-diag-final
    assert record["stages"]["links"]["symmetrization"] == "grow-diag-final-and"
    assert links_symmetrization(config.with_overrides({"model.alignment_null": False})) == "grow-diag-final"
    guided = load_checkpoint(root / "guided" / "run")
    assert guided.config.train.alignment_weight == 0.05 and guided.config.data.alignment_path == str(root / "links")
    assert PreparedData(root / "guided" / "prepared").split("train").links is not None
    assert guided.config.model.alignment_null and Aligner(root / "guided" / "run").settings["null"]
    assert Aligner(root / "guided" / "run").settings["selection"] == "layer=-2 heads=0"
    # the reverse guided stage learns the same links turned around, on the same text
    turned = read_alignments(root / "links-reverse" / "train.align")
    assert [pair.sure for pair in turned] == [{(j, i) for i, j in pair.sure} for pair in links]
    assert (root / "links-reverse" / "train.de").resolve() == (root / "links" / "train.de").resolve()
    backward = load_checkpoint(root / "guided-reverse" / "run").config
    assert (backward.data.src_lang, backward.data.tgt_lang) == ("en", "de")
    assert backward.data.alignment_path == str(root / "links-reverse") and backward.model.alignment_null
    pair = Aligner(root / "guided" / "run", AlignOptions(symmetrization="average"), "cpu",
                   root / "guided-reverse" / "run")
    assert pair.settings["reverse_selection"] == "layer=-2 heads=0" and pair.settings["reverse_null"]
    # round 2: that pair aligns the same text again, and each guided model goes on training on those links
    text = [read_lines(root / "links" / f"train.{lang}") for lang in ("de", "en")]
    assert [format_links(sentence.links) for sentence in pair.align(*text)] == \
        (root / "links-2" / "train.align").read_text(encoding="utf-8").splitlines()
    assert (root / "links-2" / "train.de").resolve() == (root / "links" / "train.de").resolve()
    for name, start, links in (("guided-2", "guided", "links-2"), ("guided-reverse-2", "guided-reverse",
                                                                    "links-2-reverse")):
        refined = load_checkpoint(root / name / "run")
        assert refined.config.data.alignment_path == str(root / links)
        assert refined.config.train.init_from == str(root / start / "run")
        assert refined.config.train.init_keep == ("optimizer", "schedule")
        assert refined.state["step"] == record["stages"][name]["step"] == default_refine_steps(config) == 1
        assert refined.state["init_from"]["step"] == 4
        # continued training: the schedule goes on from the first round's step
        assert refined.state["scheduler"]["last_epoch"] == load_checkpoint(root / start / "run").state[
            "scheduler"]["last_epoch"] + 1
    assert aligner_command(record) == (f"--checkpoint {root / 'guided-2' / 'run'} --reverse-checkpoint "
                                       f"{root / 'guided-reverse-2' / 'run'} --symmetrize average")
    # the links read each direction as the two agreed most, and say so
    chosen = record["stages"]["links"]
    assert chosen["candidates"][0] == f"forward {chosen['reading']}, reverse {chosen['reverse_reading']} " \
                                      f"(agreement {chosen['agreement']:.4f})"
    # a rerun resumes: nothing is trained or aligned again, and each stage keeps its cost; a
    # finished stage is not even resumed, so its train.log names only the session that trained it
    stages = ("forward", "reverse", "guided", "guided-reverse", "guided-2", "guided-reverse-2")
    logs = {name: (root / name / "run" / "train.log").read_text(encoding="utf-8") for name in stages}
    again = bootstrap(config, tmp_path / "boot", device="cpu", progress=False, stream=io.StringIO())
    assert again["stages"] == record["stages"]
    assert {name: (root / name / "run" / "train.log").read_text(encoding="utf-8") for name in stages} == logs
    # a stage trained with other settings is refused, as `nmt train` refuses to resume it
    with pytest.raises(NmtError, match="forward/run: was trained with train.lr=0.003"):
        bootstrap(config.with_overrides({"train.lr": 1e-3}), root, device="cpu", progress=False,
                  stream=io.StringIO())


@pytest.mark.slow  # the bootstrap trains several models
def test_an_interrupted_stage_stops_the_bootstrap_and_a_rerun_resumes_it(tmp_path, monkeypatch):
    import dataclasses

    import nmt_cli.bootstrap as bootstrap_module

    config = Config().with_overrides({
        **TINY, "data.synthetic_train_size": 100, "data.synthetic_valid_size": 10, "data.synthetic_test_size": 0,
        "data.vocab_size": 120, "train.max_steps": 2, "train.log_every": 1})

    def stopped_by_a_signal(*args, **kwargs):  # the trainer saw Ctrl-C / SIGTERM: it saved and returned
        return dataclasses.replace(train(*args, **kwargs), stop_reason="interrupted")

    monkeypatch.setattr(bootstrap_module, "train", stopped_by_a_signal)
    root = tmp_path / "boot"
    with pytest.raises(KeyboardInterrupt, match="stage forward interrupted"):
        bootstrap(config, root, device="cpu", progress=False, stream=io.StringIO(), rounds=1)
    assert list_checkpoints(root / "forward" / "run") and not (root / "reverse").exists()
    assert not (root / "bootstrap.json").exists()  # the stage is not recorded as done
    monkeypatch.setattr(bootstrap_module, "train", train)
    record = bootstrap(config, root, device="cpu", progress=False, stream=io.StringIO(), rounds=1)
    assert list(record["stages"]) == ["forward", "reverse", "links", "guided", "guided-reverse"]
    assert record["aligner"] == str(root / "guided" / "run")


def test_later_rounds_need_their_steps_when_the_config_has_no_step_limit():
    config = Config().with_overrides({**TINY, "train.max_steps": 0, "train.max_epochs": 1})
    with pytest.raises(NmtError, match="--refine-steps"):
        default_refine_steps(config)
    assert default_refine_steps(config.with_overrides({"train.max_steps": 10000})) == 2000
    start = Path("/runs/guided/run")
    refined = refined_config(config, start, 7)
    assert (refined.train.init_from, refined.train.init_keep) == (str(start), ("optimizer", "schedule"))
    assert (refined.train.max_steps, refined.train.max_epochs) == (7, 0)


@pytest.mark.slow  # the bootstrap trains several models
def test_nmt_align_bootstrap_runs_the_rounds_it_is_asked_for(tmp_path):
    from click.testing import CliRunner

    from nmt_cli.cli import cli

    config = Config().with_overrides({
        **TINY, "data.synthetic_train_size": 100, "data.synthetic_valid_size": 10, "data.synthetic_test_size": 0,
        "data.vocab_size": 120, "train.max_steps": 2, "model.alignment_null": True})
    path = tmp_path / "config.yaml"
    path.write_text(config.to_yaml(), encoding="utf-8")
    root = tmp_path / "boot"
    result = CliRunner().invoke(cli, ["align", "bootstrap", "--config", str(path), "--out", str(root), "--device",
                                      "cpu", "--rounds", "3", "--refine-steps", "3", "--quiet"])
    assert result.exit_code == 0, result.output
    assert load_checkpoint(root / "guided-3" / "run").state["step"] == 3
    assert load_checkpoint(root / "guided-reverse-3" / "run").config.train.init_from == str(
        root / "guided-reverse-2" / "run")
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == [
        "forward", "reverse", "links", "guided", "guided-reverse", "links-2", "guided-2", "guided-reverse-2",
        "links-3", "guided-3", "guided-reverse-3"]
    assert lines[-1] == f"aligner: nmt align --checkpoint {root / 'guided-3' / 'run'} --reverse-checkpoint " \
                        f"{root / 'guided-reverse-3' / 'run'} --symmetrize average"
    # a config that trains by epochs needs the later rounds' steps given: one line, no traceback
    path.write_text(config.with_overrides({"train.max_steps": 0, "train.max_epochs": 1}).to_yaml(), encoding="utf-8")
    result = CliRunner().invoke(cli, ["align", "bootstrap", "--config", str(path), "--out", str(tmp_path / "b2"),
                                      "--device", "cpu", "--quiet"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "needs the steps of its later rounds given (--refine-steps, or --rounds 1)" in result.output
    assert not (tmp_path / "b2").exists()  # refused before anything is created


@pytest.mark.slow
def test_guided_alignment_aligns_better_than_plain_attention(tiny_prepared, tmp_path):
    """The point of guided training: on the synthetic corpus, whose gold links guide it, the
    supervised head's validation AER is well below the plain model's default reading after the
    same updates (the margin is a stated bound, not a measurement)."""
    steps = {"train.max_steps": 150, "train.valid_every": 150, "train.early_stop_metric": "aer", "train.log_every": 50}
    aer = {}
    for name, settings in (("plain", TINY), ("guided", GUIDED)):
        train(Config().with_overrides({**settings, **steps}), tiny_prepared, tmp_path / name, stream=io.StringIO())
        (record,) = [r for r in read_metrics(tmp_path / name) if r["kind"] == "valid"]
        aer[name] = record["aer"]
    assert aer["guided"] < aer["plain"] - GUIDED_AER_MARGIN, aer


#: how far below the plain model's validation AER guided training must bring it after 150 updates
GUIDED_AER_MARGIN = 0.15
