"""`nmt align` and `nmt align score` end to end on tiny random-weight checkpoints."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from nmt_cli.alignment.api import AlignOptions, align_corpus
from nmt_cli.alignment.output import load_soft_npz
from nmt_cli.alignment.reader import AttentionReading, HeadSelection
from nmt_cli.alignment.sweep import candidate_selections
from nmt_cli.checkpoint import save_checkpoint
from nmt_cli.cli import cli
from nmt_cli.cli import align as _align_command  # noqa: F401  (registers `nmt align`)
from nmt_cli.config import Config, ModelConfig
from nmt_cli.models import build_model
from nmt_cli.pharaoh import read_alignments
from nmt_cli.tokenization import Tokenizer, train_sentencepiece

SRC = ["der kleine hund schläft", "die katze sieht den hund nicht", "ein mann liest"]
TGT = ["the small dog sleeps", "the cat does not see the dog", "a man reads"]


LOCAL_P = {"rnn_luong": {"local_attention": "local-p", "local_window": 1}}  # rows sum to < 1 by formula


def make_checkpoint(directory, arch: str):
    tokenizer = Tokenizer(train_sentencepiece((SRC + TGT) * 10, vocab_size=60))
    config = Config(model=ModelConfig(arch=arch, d_model=16, heads=2, ffn_dim=32, encoder_layers=1,
                                      decoder_layers=2, embed_dim=8, hidden_size=16, **LOCAL_P.get(arch, {})))
    torch.manual_seed(0)
    model = build_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
    return save_checkpoint(directory, model.state_dict(), config, tokenizer, {"step": 7})


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("align")
    (root / "src").write_text("\n".join(SRC) + "\n", encoding="utf-8")
    (root / "tgt").write_text("\n".join(TGT) + "\n", encoding="utf-8")
    (root / "gold").write_text("0-0 1-1 2-2 3-3\n0-0 1-1 2p2 3-4 4-6 5-3\n0-0 1-1 2-2 9-9\n", encoding="utf-8")
    return {
        "root": root,
        "forward": make_checkpoint(root / "fwd", "transformer"),
        "reverse": make_checkpoint(root / "rev", "rnn_bahdanau"),
    }


def run(*args, input=None):
    return CliRunner().invoke(cli, ["align", *map(str, args)], input=input, catch_exceptions=False)


def test_align_corpus_gives_word_matrices_whose_rows_sum_to_one(files):
    sentences = align_corpus(files["forward"], SRC, TGT, AlignOptions(reading=AttentionReading(HeadSelection(None, None))))
    for sentence, src, tgt in zip(sentences, SRC, TGT):
        assert sentence.src_words == src.split() and sentence.tgt_words == tgt.split()
        assert sentence.matrix.shape == (len(sentence.tgt_words), len(sentence.src_words))
        np.testing.assert_allclose(sentence.matrix.sum(axis=1), 1.0, atol=1e-6)
        assert sorted(j for _, j in sentence.links) == list(range(len(sentence.tgt_words)))  # argmax: one per word


def test_cli_align_writes_every_output_and_scores_gold(files, tmp_path):
    root = files["root"]
    result = run("--checkpoint", files["forward"], "--src", root / "src", "--tgt", root / "tgt", "--out", tmp_path,
                 "--heatmaps", 1, "--heatmap-lines", 3, "--gold", root / "gold")
    assert result.exit_code == 0, result.output
    assert "aligned 3 pairs (layer=-1 heads=all, shift=off, argmax)" in result.stderr
    assert "1 gold link(s) outside their sentence left out, first at line 3: 9-9" in result.stdout
    hard = read_alignments(tmp_path / "alignments.align")
    soft, settings = load_soft_npz(tmp_path / "soft.npz")
    assert [set(s.links) for s in soft] == [set(h.sure) for h in hard]
    assert settings["step"] == 7 and settings["shift"] is False
    as_json = json.loads((tmp_path / "soft.json").read_text(encoding="utf-8"))
    assert as_json["sentences"][1]["tgt_words"] == TGT[1].split()
    np.testing.assert_allclose(np.array(as_json["sentences"][1]["matrix"]), soft[1].matrix, atol=1e-4)
    heatmaps = sorted(p.name for p in (tmp_path / "heatmaps").iterdir())
    assert heatmaps == ["line-000001.png", "line-000003.png"]
    assert all((tmp_path / "heatmaps" / name).stat().st_size > 1000 for name in heatmaps)


def test_cli_align_reads_stdin_pairs_and_symmetrizes(files, tmp_path):
    pairs = "".join(f"{s} ||| {t}\n" for s, t in zip(SRC, TGT))
    common = ["--checkpoint", files["forward"], "--out"]
    run(*common, tmp_path / "fwd", input=pairs)
    result = run(*common, tmp_path / "both", "--reverse-checkpoint", files["reverse"], "--symmetrize", "intersection",
                 input=pairs)
    assert result.exit_code == 0, result.stderr
    forward = read_alignments(tmp_path / "fwd" / "alignments.align")
    both = read_alignments(tmp_path / "both" / "alignments.align")
    assert all(b.sure <= f.sure for f, b in zip(forward, both))  # an intersection keeps only shared links
    settings = json.loads((tmp_path / "both" / "settings.json").read_text(encoding="utf-8"))
    assert settings["symmetrization"] == "intersection"
    assert settings["shift"] is False  # no shift unless asked (see AlignOptions)
    assert run(*common, tmp_path / "shifted", "--shift", input=pairs).exit_code == 0
    assert json.loads((tmp_path / "shifted" / "settings.json").read_text(encoding="utf-8"))["shift"] is True
    result = run(*common, tmp_path / "bad", "--heads", 1, "--reverse-checkpoint", files["reverse"], input=pairs)
    assert result.exit_code == 1 and "--heads 1 is out of range: the model has 1 head(s)" in result.stderr


def test_cli_align_symmetrizes_by_the_average_of_both_directions(files, tmp_path):
    root = files["root"]
    common = ["--src", root / "src", "--tgt", root / "tgt", "--batch-size", 2]
    run("--checkpoint", files["forward"], "--out", tmp_path / "fwd", *common)
    run("--checkpoint", files["reverse"], "--out", tmp_path / "rev", "--src", root / "tgt", "--tgt", root / "src")
    forward, _ = load_soft_npz(tmp_path / "fwd" / "soft.npz")  # (T, S) each
    reverse, _ = load_soft_npz(tmp_path / "rev" / "soft.npz")  # (S, T) each
    result = run("--checkpoint", files["forward"], "--reverse-checkpoint", files["reverse"], "--out", tmp_path / "avg",
                 "--symmetrize", "average", "--average-threshold", 0.3, *common)
    assert result.exit_code == 0, result.output
    assert "argmax, average > 0.3)" in result.stderr
    averaged = read_alignments(tmp_path / "avg" / "alignments.align")
    for pair, f, r in zip(averaged, forward, reverse):
        mean = (f.matrix.T + r.matrix) / 2  # neither model has a null: its weights are its matrix
        assert pair.sure == {(int(i), int(j)) for i, j in zip(*np.nonzero(mean > 0.3))}
    assert sum(len(a.sure) for a in averaged) > 0
    settings = json.loads((tmp_path / "avg" / "settings.json").read_text(encoding="utf-8"))
    assert settings["symmetrization"] == "average" and settings["average_threshold"] == 0.3
    result = CliRunner().invoke(cli, ["align", "--checkpoint", str(files["forward"]), "--out", str(tmp_path / "x"),
                                      "--symmetrize", "average", "--average-threshold", "1"])
    assert result.exit_code == 2 and "1.0 is not in the range 0.0<=x<1.0" in result.output


def test_cli_align_with_an_ensemble_reads_the_mean_of_its_models(files, tmp_path):
    root = files["root"]
    common = ["--src", root / "src", "--tgt", root / "tgt", "--gold", root / "gold"]
    for name, model in (("one", files["forward"]), ("two", files["reverse"])):
        run("--checkpoint", model, "--out", tmp_path / name, *common)
    result = run("--checkpoint", files["forward"], "--checkpoint", files["reverse"], "--out", tmp_path / "both",
                 *common)
    assert result.exit_code == 0, result.output
    assert "aligned 3 pairs (2 models, layer=-1 heads=all" in result.stderr and result.stdout.startswith("AER ")
    one, _ = load_soft_npz(tmp_path / "one" / "soft.npz")
    two, _ = load_soft_npz(tmp_path / "two" / "soft.npz")
    both, settings = load_soft_npz(tmp_path / "both" / "soft.npz")
    for a, b, mean in zip(one, two, both):  # neither has a null: each row sums to one, and so does the mean
        np.testing.assert_allclose(mean.matrix, (a.matrix + b.matrix) / 2, atol=1e-6)
        assert sorted(mean.links) == sorted((int(np.argmax(row)), j) for j, row in enumerate(mean.matrix))
    assert [member["arch"] for member in settings["ensemble"]] == ["transformer", "rnn_bahdanau"]
    # the same model twice is that model
    run("--checkpoint", files["forward"], "--checkpoint", files["forward"], "--out", tmp_path / "twice", *common)
    twice, _ = load_soft_npz(tmp_path / "twice" / "soft.npz")
    assert all(t.links == o.links and np.allclose(t.matrix, o.matrix, atol=1e-6) for t, o in zip(twice, one))
    # both sides may be ensembles
    result = run("--checkpoint", files["forward"], "--checkpoint", files["reverse"], "--reverse-checkpoint",
                 files["reverse"], "--reverse-checkpoint", files["forward"], "--symmetrize", "average",
                 "--out", tmp_path / "four", *common)
    assert result.exit_code == 0 and "(2+2 models, " in result.stderr
    assert len(json.loads((tmp_path / "four" / "settings.json").read_text(encoding="utf-8"))["reverse_ensemble"]) == 2


def test_cli_align_threshold_method(files, tmp_path):
    root = files["root"]
    run("--checkpoint", files["forward"], "--src", root / "src", "--tgt", root / "tgt", "--out", tmp_path,
        "--method", "threshold", "--threshold", 0.0)
    hard = read_alignments(tmp_path / "alignments.align")
    assert [len(h.sure) for h in hard] == [len(s.split()) * len(t.split()) for s, t in zip(SRC, TGT)]


def test_cli_align_input_errors_are_one_line(files, tmp_path):
    root = files["root"]
    (tmp_path / "short").write_text("only one line\n", encoding="utf-8")
    result = run("--checkpoint", files["forward"], "--src", root / "src", "--tgt", tmp_path / "short",
                 "--out", tmp_path / "out")
    assert result.exit_code == 1
    expected = f"error: {tmp_path / 'short'}: has 1 lines but {root / 'src'} has 3; they must pair line by line"
    assert result.stderr.strip() == expected
    result = run("--checkpoint", files["forward"], "--out", tmp_path / "out", input="no separator\n")
    assert result.exit_code == 1 and "error: <stdin>:1: expected 'source ||| target'" in result.stderr
    result = run("--checkpoint", files["forward"], "--out", tmp_path / "out", "--layer", 5, input="a ||| b\n")
    assert result.exit_code == 1 and "out of range: the model has 2 decoder layer(s)" in result.stderr


def test_cli_score_prints_aer_and_json(files, tmp_path):
    root = files["root"]
    (tmp_path / "hyp").write_text("0-0 1-1 2-2 3-3\n0-0 1-1\n\n", encoding="utf-8")
    result = run("score", "--gold", root / "gold", "--hyp", tmp_path / "hyp", "--src", root / "src",
                 "--tgt", root / "tgt")
    assert result.exit_code == 0
    # A = 6 links, all sure; S = 5 + 3 (9-9 left out) + ... = 4 + 5 + 3 = 12; |A∩S| = |A∩P| = 6
    assert result.stdout.startswith(f"AER {1 - 12 / 18:.4f}  precision 1.0000  recall 0.5000")
    result = run("score", "--gold", root / "gold", "--hyp", tmp_path / "hyp", "--json")
    figures = json.loads(result.stdout)
    assert figures["sure"] == 13 and figures["out_of_range"] == 0  # without sentences 9-9 stays in
    (tmp_path / "short").write_text("0-0\n", encoding="utf-8")
    result = run("score", "--gold", root / "gold", "--hyp", tmp_path / "short")
    assert result.exit_code == 1
    expected = f"error: {tmp_path / 'short'}: has 1 lines but {root / 'gold'} has 3; they must pair line by line"
    assert result.stderr.strip() == expected


@pytest.mark.parametrize("arch", ["transformer", "linear_transformer", "rnn_bahdanau", "rnn_luong"])
def test_every_architecture_gives_distributions_over_source_words(arch, tmp_path):
    checkpoint = make_checkpoint(tmp_path / arch, arch)
    sentences = align_corpus(checkpoint, SRC, TGT, AlignOptions(reading=AttentionReading(HeadSelection(None, None))))
    for sentence in sentences:
        assert sentence.matrix.shape == (len(sentence.tgt_words), len(sentence.src_words))
        np.testing.assert_allclose(sentence.matrix.sum(axis=1), 1.0, atol=1e-6)


def test_candidate_selections_cover_heads_layers_and_everything():
    candidates = candidate_selections(layers=2, heads=3)
    assert len(candidates) == 2 * 3 + 2 + 1
    assert HeadSelection(1, (2,)) in candidates and HeadSelection(0, None) in candidates
    assert candidate_selections(layers=1, heads=1) == [HeadSelection(0, None), HeadSelection(None, None)]


def test_sweep_ranks_readings_and_its_best_options_reproduce_the_score(files, tmp_path):
    root = files["root"]
    gold = root / "sweep.gold"
    gold.write_text("0-0 1-1 2-2 3-3\n0-0 1-1 2-3 3-4 4-6 5-3\n0-0 1-1 2-2\n", encoding="utf-8")
    result = run("sweep", "--checkpoint", files["forward"], "--src", root / "src", "--tgt", root / "tgt",
                 "--gold", gold, "--json")
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 2 * (2 * 2 + 2 + 1)  # shift off/on x (4 single heads, 2 layer means, all)
    assert [row["aer"] for row in rows] == sorted(row["aer"] for row in rows)
    best = rows[0]
    aligned = run("--checkpoint", files["forward"], "--src", root / "src", "--tgt", root / "tgt",
                  "--out", tmp_path, "--gold", gold, *best["options"].split())
    assert aligned.stdout.startswith(f"AER {best['aer']:.4f}")
    table = run("sweep", "--checkpoint", files["forward"], "--src", root / "src", "--tgt", root / "tgt",
                "--gold", gold, "--top", 3)
    assert len(table.stdout.splitlines()) == 1 + 3 + 1
    assert table.stdout.splitlines()[-1].startswith(f"best: nmt align {best['options']}")
