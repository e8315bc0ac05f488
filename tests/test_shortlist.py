"""The lexical shortlist: built from word links, read and checked, used per sentence by the torch
engine, written as CTranslate2's vocabulary map, and a resumable stage of ``nmt distill``."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import torch
from click.testing import CliRunner

from nmt_cli.alignment.api import Aligner
from nmt_cli.alignment.corpus import link_chunks
from nmt_cli.checkpoint import load_checkpoint
from nmt_cli.cli import cli
from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding import Translator, load_translator
from nmt_cli.decoding.request import Request
from nmt_cli.errors import NmtError
from nmt_cli.shortlist import (FIXED_CANDIDATES, HEADER, Shortlist, ShortlistCounts, build_shortlist_from_counts,
                               read_shortlist, tokenizer_identity, write_shortlist)
from nmt_cli.shortlist_build import align_in_chunks, shortlist_from_links
from tests.test_alignment_stream import recording_align
from nmt_cli.specials import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from nmt_cli.textio import read_lines

TEST_SENTENCES = 200


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model_and_data(trained_transformer) -> tuple[Path, PreparedData, list[str]]:
    run, data = trained_transformer
    prepared = PreparedData(data)
    return run, prepared, read_lines(prepared.text_path("test", "src"))[:TEST_SENTENCES]


@pytest.fixture(scope="module")
def gold_shortlist(model_and_data) -> Shortlist:
    """Marian's 50 50 from the synthetic corpus's gold word links."""
    _, data, _ = model_and_data
    return shortlist_from_links(data.text_path("train", "src"), data.text_path("train", "tgt"),
                                data.gold_alignment_path("train"), data.tokenizer)


@pytest.fixture(scope="module")
def small_shortlist(model_and_data) -> Shortlist:
    """A shortlist that cuts hard (k 10, 20 frequent): most full-vocabulary outputs fall outside it."""
    _, data, _ = model_and_data
    return shortlist_from_links(data.text_path("train", "src"), data.text_path("train", "tgt"),
                                data.gold_alignment_path("train"), data.tokenizer, k=10, frequent=20)


def _every_piece(data: PreparedData, keep=lambda piece: True) -> Shortlist:
    vocab = data.tokenizer.tgt_vocab_size
    return Shortlist(tokenizer_identity(data.tokenizer), data.tokenizer.src_vocab_size, vocab, 0,
                     tuple(piece for piece in range(vocab) if keep(piece)), {})


def _translator(run: Path, shortlist=None, **decode) -> Translator:
    overrides = {f"decode.{key}": value for key, value in {"workers": 1, **decode}.items()}
    return load_translator(run, engine="torch", device="cpu", overrides=overrides, shortlist=shortlist)


# ---- building, the file --------------------------------------------------------------------------------


def test_the_lists_rank_by_lexical_probability_and_the_frequent_pieces_by_count():
    counts = ShortlistCounts(source_vocab=10, target_vocab=12)
    links = np.array([[0, 0], [1, 1], [1, 2]])
    counts.add([5, 6], [7, 8, 9], links)  # 5-7, 6-8, 6-9
    counts.add([5, 6], [7, 9, 9], links)  # 5-7, and 6-9 twice (each linked position counts)
    counts.add([5], [4, 11], np.array([[0, 1]]))  # 5-11
    built = build_shortlist_from_counts(counts, "sha256:x", k=2, frequent=3)
    # p(7 | 5) = 2/3 > p(11 | 5) = 1/3; p(9 | 6) = 3/4 > p(8 | 6) = 1/4
    assert built.translations == {5: (7, 11), 6: (9, 8)}
    assert built.frequent == (9, 7, 4)  # counts 4, 2, then the tie of 4, 8, 11 (1 each) by id
    assert (built.built_from["pairs"], built.built_from["links"]) == (3, 7)
    assert built.candidates([6, 6]).tolist() == sorted({*FIXED_CANDIDATES, 9, 7, 4, 8})
    assert built.candidates([0], forced=[10]).tolist() == sorted({*FIXED_CANDIDATES, 9, 7, 4, 10})


def test_counts_merged_in_several_flushes_equal_counts_merged_once(monkeypatch):
    rng = np.random.default_rng(0)
    sentences = [(rng.integers(0, 50, 8), rng.integers(0, 60, 9), rng.integers(0, 8, (6, 2))) for _ in range(300)]
    once, flushed = ShortlistCounts(50, 60), ShortlistCounts(50, 60)
    flushed.FLUSH_PAIRS = 7
    for sentence in sentences:
        once.add(*sentence)
        flushed.add(*sentence)
    for a, b in zip(once.link_counts(), flushed.link_counts()):
        assert np.array_equal(a, b)


def test_a_shortlist_file_reads_back_as_written(gold_shortlist, tmp_path):
    path = write_shortlist(tmp_path / "shortlist.txt", gold_shortlist)
    again = read_shortlist(path)
    assert again.path == path and again.fingerprint == gold_shortlist.fingerprint
    assert dataclasses.replace(again, path=None) == gold_shortlist
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == HEADER and lines[2].startswith("*\t") and len(gold_shortlist.frequent) == 50
    assert max(len(ids) for ids in gold_shortlist.translations.values()) <= 50


@pytest.mark.parametrize(("content", "line", "problem"), [
    ("", 1, "not an nmt-cli shortlist of this version"),
    ("nmt-cli shortlist 2\n{{}}\n", 1, "not an nmt-cli shortlist of this version"),
    ("{header}\n{{\n", 2, "the header is not JSON"),
    ("{header}\n{json}\n*\t4 5\n7\t300 1\n", 4, "target id 300 is outside the target vocabulary (300 pieces)"),
    ("{header}\n{json}\n*\t4 5\n7\t8\n7\t9\n", 5, "source piece 7 listed twice"),
    ("{header}\n{json}\n*\t4 x\n", 3, "target ids must be integers"),
    ("{header}\n{json}\n*\t4\n8 9\n", 4, "expected <source id or *><TAB><target ids>"),
    ("{header}\n{json}\n7\t1 2 3 4\n*\t4\n", 3, "4 target pieces, more than k = 3"),
])
def test_a_bad_shortlist_file_is_one_line_naming_file_and_line(tiny_trained_run, tiny_prepared, tmp_path, content,
                                                               line, problem):
    run, data = tiny_trained_run, PreparedData(tiny_prepared)
    sources = read_lines(data.text_path("test", "src"))
    header = ('{"tokenizer": "%s", "source_vocab": 300, "target_vocab": 300, "k": 3}'
              % tokenizer_identity(data.tokenizer))
    path = tmp_path / "bad.txt"
    path.write_text(content.format(header=HEADER, json=header), encoding="utf-8")
    (tmp_path / "in.txt").write_text(sources[0] + "\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["translate", "--checkpoint", str(run), "--input", str(tmp_path / "in.txt"),
                                      "--shortlist", str(path), "--device", "cpu"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    (error,) = result.output.splitlines()[-1:]
    assert error.startswith(f"error: {path}:{line}: {problem}"), result.output
    assert len([text for text in result.output.splitlines() if text.startswith("error")]) == 1


def test_a_shortlist_of_another_tokenizer_is_a_one_line_error(tiny_trained_run, tiny_prepared, tmp_path):
    other = dataclasses.replace(_every_piece(PreparedData(tiny_prepared)), tokenizer="sha256:" + "0" * 64)
    path = write_shortlist(tmp_path / "other.txt", other)
    with pytest.raises(NmtError, match=r"other.txt: built with another SentencePiece model than .*; build the "):
        _translator(tiny_trained_run, path)
    pytest.importorskip("ctranslate2")
    from nmt_cli.export import export_ctranslate2

    with pytest.raises(NmtError, match=r"other.txt: built with another SentencePiece model"):
        export_ctranslate2(tiny_trained_run, tmp_path / "export", shortlist=path)


# ---- the torch engine ----------------------------------------------------------------------------------


@pytest.mark.slow  # the 800-step trained_transformer
@pytest.mark.parametrize("decode", [{"beam_size": 1}, {"beam_size": 4, "nbest": 3}], ids=["greedy", "beam-nbest"])
def test_a_shortlist_of_every_target_piece_gives_the_output_of_none(model_and_data, decode):
    run, data, sources = model_and_data
    plain = _translator(run, **decode).translate(sources)
    listed = _translator(run, _every_piece(data), **decode).translate(sources)
    assert [[(entry.tokens, entry.score) for entry in hyp.nbest] for hyp in listed] == \
        [[(entry.tokens, entry.score) for entry in hyp.nbest] for hyp in plain]


@pytest.mark.slow  # the 800-step trained_transformer
@pytest.mark.parametrize("quantize", [None, "int8"])
def test_a_shortlist_without_only_pad_restricts_the_projection_and_changes_nothing(model_and_data, quantize):
    """Every piece but PAD: the projection runs on the gathered rows (packed float32, or int8
    dequantized), and greedy search finds what the full output layer finds."""
    run, data, sources = model_and_data
    plain = load_translator(run, engine="torch", device="cpu", quantize=quantize,
                            overrides={"decode.beam_size": 1}).translate(sources)
    listed = load_translator(run, engine="torch", device="cpu", quantize=quantize, overrides={"decode.beam_size": 1},
                             shortlist=_every_piece(data, lambda piece: piece != PAD_ID)).translate(sources)
    # float32: the same products to rounding; int8: the same int8 rows, scales and products
    assert [hyp.tokens for hyp in listed] == [hyp.tokens for hyp in plain]


@pytest.mark.slow  # the 800-step trained_transformer
def test_shortlisted_greedy_output_is_the_full_one_where_that_is_among_the_candidates(model_and_data,
                                                                                      small_shortlist):
    run, data, sources = model_and_data
    plain = _translator(run, beam_size=1).translate(sources)
    listed = _translator(run, small_shortlist, beam_size=1).translate(sources)
    inside = [set(hyp.tokens) <= set(small_shortlist.candidates(data.tokenizer.encode_src(source)).tolist())
              for source, hyp in zip(sources, plain)]
    assert 20 <= sum(inside) < len(sources)  # the test compares some of each
    for source_inside, a, b in zip(inside, plain, listed):
        if source_inside:
            assert b.tokens == a.tokens
    # every shortlisted output keeps to its own sentence's candidates
    for source, hyp in zip(sources, listed):
        assert set(hyp.tokens) <= set(small_shortlist.candidates(data.tokenizer.encode_src(source)).tolist())


@pytest.mark.parametrize("decode", [{"beam_size": 1}, {"beam_size": 4}, {"beam_size": 3, "nbest": 3}],
                         ids=["greedy", "beam", "nbest"])
@pytest.mark.slow  # the 800-step trained_transformer
def test_a_sentence_translates_the_same_alone_and_in_any_batch(model_and_data, small_shortlist, decode):
    """mozilla/translations#977: the candidates are the sentence's own, not its batch's."""
    run, _, sources = model_and_data
    translator = _translator(run, small_shortlist, **decode)
    batched = translator.translate(sources[:60])
    reversed_batch = translator.translate(sources[:60][::-1])[::-1]
    for number, source in enumerate(sources[:60]):
        (alone,) = translator.translate([source])
        for other in (batched[number], reversed_batch[number]):
            assert [entry.tokens for entry in other.nbest] == [entry.tokens for entry in alone.nbest]
            assert other.score == pytest.approx(alone.score, abs=1e-4)


@pytest.mark.slow  # the 800-step trained_transformer
def test_an_ensemble_and_a_constraint_keep_to_the_shortlist_plus_what_is_forced(model_and_data):
    run, data, sources = model_and_data
    # the tightest shortlist: no lists, no frequent pieces, only UNK, BOS and EOS
    empty = Shortlist(tokenizer_identity(data.tokenizer), data.tokenizer.src_vocab_size,
                      data.tokenizer.tgt_vocab_size, 0, (), {})
    translator = load_translator([run, run], engine="torch", device="cpu", shortlist=empty,
                                 overrides={"decode.beam_size": 2, "decode.workers": 1})
    phrase = read_lines(data.text_path("test", "tgt"))[0].split()[0]
    request = Request.from_text(data.tokenizer, sources[0], constraints=[phrase])
    constrained, plain = translator.translate([request, sources[1]])
    assert constrained.constraints_met == [True]
    pieces = set(data.tokenizer.encode_tgt(phrase))
    assert set(constrained.tokens) <= pieces | {UNK_ID, BOS_ID, EOS_ID} and set(plain.tokens) <= {UNK_ID, BOS_ID}
    assert "shortlist:0+0@" in translator.signature()


def test_on_a_tiny_model_every_piece_changes_nothing_and_a_batch_changes_nothing(tiny_trained_run, tiny_prepared):
    """The quick version of the checks above: the tiny model with the gold links' shortlist."""
    data = PreparedData(tiny_prepared)
    sources = read_lines(data.text_path("train", "src"))[:40]
    listed = shortlist_from_links(data.text_path("train", "src"), data.text_path("train", "tgt"),
                                  data.gold_alignment_path("train"), data.tokenizer, k=5, frequent=10)
    for beam in (1, 2):
        plain = _translator(tiny_trained_run, beam_size=beam).translate(sources)
        every = _translator(tiny_trained_run, _every_piece(data), beam_size=beam).translate(sources)
        assert [(hyp.tokens, hyp.score) for hyp in every] == [(hyp.tokens, hyp.score) for hyp in plain]
        translator = _translator(tiny_trained_run, listed, beam_size=beam)
        batched = translator.translate(sources)
        assert [hyp.tokens for hyp in batched] == [translator.translate([source])[0].tokens for source in sources]
        assert [hyp.tokens for hyp in batched] != [hyp.tokens for hyp in plain]  # it did cut


# ---- CTranslate2: the vocabulary map -------------------------------------------------------------------


@pytest.mark.slow  # the 800-step trained_transformer
@pytest.mark.parametrize("beam", [1, 4])
def test_the_export_with_its_vocabulary_map_translates_as_the_torch_shortlist(model_and_data, gold_shortlist,
                                                                              vmap_exports, tmp_path, beam):
    from nmt_cli.export import read_export_record

    run, _, sources = model_and_data
    exported = vmap_exports[("float32", "gold")]
    assert read_export_record(exported).shortlist["fingerprint"] == gold_shortlist.fingerprint
    vmap = (exported / "vmap.txt").read_text(encoding="utf-8").splitlines()
    assert vmap[0].startswith("\t") and len(vmap) == 1 + len(gold_shortlist.translations)
    torch_outputs = _translator(run, gold_shortlist, beam_size=beam).translate(sources)
    # each sentence over its own candidates, as the torch engine (batch scope: the tests below)
    ct2 = _ct2(exported, "sentence", beam)
    assert "shortlist:50+50@" in ct2.signature()
    ct2_outputs = ct2.translate(sources)
    same = sum(a.tokens == b.tokens for a, b in zip(torch_outputs, ct2_outputs))
    assert same >= 0.99 * len(sources)
    # without the map it translates as the full torch model; alone or batched, the same
    full = load_translator(exported, device="cpu", shortlist=False, overrides={"decode.beam_size": beam})
    assert "shortlist" not in full.signature()
    assert [hyp.tokens for hyp in ct2.translate(sources[:20])] == \
        [ct2.translate([source])[0].tokens for source in sources[:20]]
    with pytest.raises(NmtError, match="has the vocabulary map of .*, not .*other.txt; export it with"):
        other = write_shortlist(tmp_path / "other.txt", dataclasses.replace(gold_shortlist, k=3, translations={}))
        load_translator(exported, device="cpu", shortlist=other)


def test_the_map_scope_sets_the_batches_and_sentence_scope_gives_the_output_alone(tiny_trained_run, tiny_prepared,
                                                                                tmp_path):
    """The quick version of the scope tests below: batch scope batches as without the map,
    sentence scope a sentence a batch, each sentence's output the one it has alone."""
    pytest.importorskip("ctranslate2")
    from nmt_cli.export import export_ctranslate2

    data = PreparedData(tiny_prepared)
    sources = read_lines(data.text_path("train", "src"))[:40]
    listed = shortlist_from_links(data.text_path("train", "src"), data.text_path("train", "tgt"),
                                  data.gold_alignment_path("train"), data.tokenizer, k=5, frequent=10)
    exported = export_ctranslate2(tiny_trained_run, tmp_path / "export", "float32", shortlist=listed)
    requests = [Request.from_text(data.tokenizer, source) for source in sources]
    full = load_translator(exported, device="cpu", shortlist=False)
    batch, sentence = _ct2(exported, "batch", 2), _ct2(exported, "sentence", 2)
    assert batch._batches(requests) == full._batches(requests) and len(full._batches(requests)) < len(sources)
    assert sorted(len(indices) for indices, _ in sentence._batches(requests)) == [1] * len(sources)
    assert [hyp.tokens for hyp in sentence.translate(sources)] == \
        [sentence.translate([source])[0].tokens for source in sources]
    # the CLI's --shortlist-scope is decode.shortlist_scope
    (tmp_path / "in.txt").write_text("\n".join(sources[:3]) + "\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["translate", "--checkpoint", str(exported), "--input", str(tmp_path / "in.txt"),
                                      "--shortlist-scope", "sentence", "--beam", "2", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "|vmap:sentence|" in result.stderr and len(result.stdout.splitlines()) == 3


@pytest.fixture(scope="module")
def vmap_exports(model_and_data, gold_shortlist, small_shortlist, tmp_path_factory) -> dict[tuple[str, str], Path]:
    """``(weights, shortlist) -> export``: float32 and int8, each with the gold (50 50) and the
    small (10 20) shortlist as its vocabulary map."""
    pytest.importorskip("ctranslate2")
    from nmt_cli.export import export_ctranslate2

    run, _, _ = model_and_data
    root = tmp_path_factory.mktemp("vmap-exports")
    return {(weights, name): export_ctranslate2(run, root / f"{weights}-{name}", weights, shortlist=listed)
            for weights in ("float32", "int8") for name, listed in (("gold", gold_shortlist),
                                                                    ("small", small_shortlist))}


def _ct2(exported: Path, scope: str, beam: int):
    return load_translator(exported, device="cpu", overrides={"decode.beam_size": beam, "decode.workers": 1,
                                                              "decode.shortlist_scope": scope})


#: the most of the 200 sentences whose batched output may differ from their output alone with the
#: map at batch scope (each batch decodes over its sentences' union of candidates), by shortlist and
#: beam: about twice what was measured on the session's model, float32 (gold 50 50: 4 greedy, 21 at
#: beam 4; small 10 20: 76 and 83). The small shortlist leaves out most of what the model would say,
#: so a batch's union changes many of its outputs; the gold one, a realistic cut, few.
BATCH_SCOPE_DIFFERENCES = {("gold", 1): 10, ("gold", 4): 40, ("small", 1): 110, ("small", 4): 110}


@pytest.mark.slow  # the 800-step trained_transformer
@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("name", ["gold", "small"])
def test_batch_scope_changes_few_outputs_and_sentence_scope_none(model_and_data, vmap_exports, beam, name,
                                                                  record_property):
    """mozilla/translations#977, counted: CTranslate2's map over a batch's union of candidates
    (``decode.shortlist_scope: batch``, the default) against each sentence alone (its own
    candidates); ``sentence`` scope gives every sentence its own candidates in any batch."""
    _, _, sources = model_and_data
    exported = vmap_exports[("float32", name)]
    counts = {}
    for scope in ("batch", "sentence"):
        translator = _ct2(exported, scope, beam)
        assert f"|vmap:{scope}|" in translator.signature()
        batched = translator.translate(sources)
        alone = [translator.translate([source])[0] for source in sources]
        counts[scope] = sum(a.tokens != b.tokens for a, b in zip(batched, alone))
    record_property("batch_scope_differences", counts["batch"])
    print(f"\n{name} shortlist, beam {beam}: {counts['batch']} of {len(sources)} outputs differ batched vs alone")
    assert counts["sentence"] == 0
    assert counts["batch"] <= BATCH_SCOPE_DIFFERENCES[(name, beam)]
    if name == "small":  # batch scope does take the union: the hard cut's outputs change
        assert counts["batch"] > 0


@pytest.mark.slow  # the 800-step trained_transformer
@pytest.mark.parametrize("beam", [1, 4])
def test_the_int8_export_with_its_map_agrees_with_the_torch_shortlist_as_int8_agrees_without(
        model_and_data, gold_shortlist, vmap_exports, beam, record_property):
    """int8 alone changes many outputs of this small model (on AVX2 without VNNI most:
    tests/test_ctranslate2_engine.py). The stated tolerance: with its map the int8 export's
    outputs equal the float32 outputs with the same candidates at most 5 points less often, and
    its BLEU is at most 1 point further from theirs, than without the map against the full
    float32 model: the map adds no disagreement of its own beyond that. The float32 outputs with
    the same candidates are the torch engine's shortlisted ones at sentence scope (which the
    float32 export with its map equals), and the float32 export's own at batch scope, whose
    union of a batch's candidates changes some outputs by itself (counted against each sentence
    alone in test_batch_scope_changes_few_outputs_and_sentence_scope_none): on an AMD EPYC with
    AVX-512 VNNI that union and int8 together took the beam-4 agreement with torch's shortlisted
    outputs 7.5 points below int8's without the map, int8 alone 4."""
    run, _, sources = model_and_data
    exported = vmap_exports[("int8", "gold")]
    torch_full = _translator(run, beam_size=beam).translate(sources)
    torch_listed = _translator(run, gold_shortlist, beam_size=beam).translate(sources)
    without = load_translator(exported, device="cpu", shortlist=False,
                              overrides={"decode.beam_size": beam, "decode.workers": 1}).translate(sources)
    agreement_without = _agreement(without, torch_full)
    bleu_gap_without = abs(_bleu(without, model_and_data) - _bleu(torch_full, model_and_data))
    for scope in ("batch", "sentence"):
        listed = _ct2(exported, scope, beam).translate(sources)
        float32_listed = torch_listed if scope == "sentence" else _ct2(
            vmap_exports[("float32", "gold")], scope, beam).translate(sources)
        agreement = _agreement(listed, float32_listed)
        record_property(f"int8_{scope}_agreement", agreement)
        print(f"\nbeam {beam}, int8 {scope} scope: {agreement:.3f} of outputs equal float32's with the same candidates; "
              f"without the map {agreement_without:.3f} equal torch's full ones")
        assert agreement >= agreement_without - 0.05
        assert abs(_bleu(listed, model_and_data) - _bleu(float32_listed, model_and_data)) <= bleu_gap_without + 1.0


def _agreement(first, second) -> float:
    return sum(a.tokens == b.tokens for a, b in zip(first, second)) / len(first)


def _bleu(hypotheses, model_and_data) -> float:
    _, data, sources = model_and_data
    references = read_lines(data.text_path("test", "tgt"))[:len(sources)]
    return sacrebleu.corpus_bleu([hyp.text for hyp in hypotheses], [references]).score


# ---- nmt shortlist and nmt distill's stage --------------------------------------------------------------


def test_nmt_shortlist_aligns_with_a_model(tiny_trained_run, tiny_prepared, tmp_path):
    data = PreparedData(tiny_prepared)
    src, tgt = data.text_path("train", "src"), data.text_path("train", "tgt")
    out = tmp_path / "shortlist.txt"
    (tmp_path / "notes.txt").write_text("mine\n", encoding="utf-8")
    args = ["shortlist", "--src", str(src), "--tgt", str(tgt), "--aligner", str(tiny_trained_run), "--out", str(out),
            "--k", "7", "--frequent", "9", "--device", "cpu", "--quiet"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    built = read_shortlist(out)
    assert (built.k, len(built.frequent), built.built_from["pairs"]) == (7, 9, 400)
    assert built.tokenizer == tokenizer_identity(load_checkpoint(tiny_trained_run).tokenizer)
    links = read_lines(f"{out}.align")
    assert len(links) == 400 and sum(bool(line) for line in links) > 390
    # the chunks went once the shortlist was written, and nothing else did
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt", "shortlist.txt", "shortlist.txt.align"]

    # neither links nor an aligner, or both: a usage error in one line
    result = CliRunner().invoke(cli, ["shortlist", "--src", str(src), "--tgt", str(tgt), "--tokenizer",
                                      str(tiny_prepared), "--out", str(out)])
    assert result.exit_code == 1 and result.output.splitlines()[-1].startswith("error: shortlist: give either")


@pytest.mark.parametrize("mid_chunk", [False, True], ids=["at-a-chunk-boundary", "mid-chunk"])
def test_an_interrupted_shortlist_alignment_resumes_to_the_same_bytes(tiny_trained_run, tiny_prepared, tmp_path,
                                                                      monkeypatch, mid_chunk):
    data = PreparedData(tiny_prepared)
    src, tgt = data.text_path("train", "src"), data.text_path("train", "tgt")
    whole = align_in_chunks([tiny_trained_run], src, tgt, tmp_path / "whole.align", chunk_lines=150)
    assert (whole["pairs"], whole["chunks"]) == (400, 3)
    calls = []
    monkeypatch.setattr(Aligner, "align", recording_align(calls, stop_at=2, mid_chunk=mid_chunk))
    with pytest.raises(KeyboardInterrupt):
        align_in_chunks([tiny_trained_run], src, tgt, tmp_path / "again.align", chunk_lines=150)
    chunks = link_chunks(tmp_path / "again.align").folder
    assert not (tmp_path / "again.align").exists() and len(list(chunks.glob("*.align"))) == 1
    assert len(list(chunks.iterdir())) == 2  # the chunk and its seconds: nothing of the one begun
    calls.clear()
    monkeypatch.setattr(Aligner, "align", recording_align(calls))
    again = align_in_chunks([tiny_trained_run], src, tgt, tmp_path / "again.align", chunk_lines=150)
    assert calls == [read_lines(src)[150:300], read_lines(src)[300:]]  # the first chunk was kept
    assert (tmp_path / "again.align").read_bytes() == (tmp_path / "whole.align").read_bytes()
    assert again["pairs"] == 400 and again["align_seconds"] > 0


def test_the_distill_shortlist_stage_is_recorded_and_resumes(tiny_trained_run, tiny_prepared, tmp_path, monkeypatch):
    """The stage after ``filter`` alone (the slow pipeline test in test_distill.py runs them all)."""
    import nmt_cli.distill as distill_module
    from nmt_cli.distill import DistillOptions
    from nmt_cli.stages import PipelineRecord, Stage

    data = PreparedData(tiny_prepared)
    root = tmp_path / "distill"
    (root / "filter").mkdir(parents=True)
    for side, lang in (("src", data.src_lang), ("tgt", data.tgt_lang)):
        (root / "filter" / f"train.{lang}").write_text(
            "\n".join(read_lines(data.text_path("train", side))[:90]) + "\n", encoding="utf-8")
    options = DistillOptions(chunk_lines=40, shortlist=(5, 8))
    seconds, details = distill_module._shortlist([str(tiny_trained_run)], data, root, options, "cpu", io.StringIO())
    built = read_shortlist(root / "shortlist" / "shortlist.txt")
    assert (details["k"], details["frequent"], details["pairs"]) == (5, 8, 90) and seconds > 0
    assert details["fingerprint"] == built.fingerprint and not (root / "shortlist" / "train.align.chunks").exists()
    record = PipelineRecord(root / "distill.json")
    stage = Stage("shortlist", (), ("shortlist/shortlist.txt",))
    record.finish(stage, seconds, details)
    assert PipelineRecord(root / "distill.json").finished(stage)
    # a lost output reruns the stage, to the same shortlist
    (root / "shortlist" / "shortlist.txt").unlink()
    assert not PipelineRecord(root / "distill.json").finished(stage)
    _, again = distill_module._shortlist([str(tiny_trained_run)], data, root, options, "cpu", None)
    assert again["fingerprint"] == details["fingerprint"]
