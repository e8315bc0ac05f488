"""``nmt distill``: the n-best choice, the filter, the student presets, the tokenizer check, and the
pipeline itself: line-exact translation, a kill and a rerun that resumes it, a rerun that retrains nothing."""

from __future__ import annotations

import io
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from nmt_cli.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from nmt_cli.cli import cli
from nmt_cli.config import Config
from nmt_cli.data.prepare import prepare
from nmt_cli.data.prepared import PreparedData
from nmt_cli.decoding.translator import Translator
from nmt_cli.distill import (DistillOptions, closest_by_chrf, distill, export_skip_reason, student_config,
                             worst_share)
from nmt_cli.errors import NmtError
from nmt_cli.export import read_export_record
from nmt_cli.models import build_model
from nmt_cli.resumable import CHUNKS
from nmt_cli.textio import read_lines
from tests.interrupting import recording

REPO = Path(__file__).resolve().parents[1]

#: a student small enough to train a few steps in a test
SMALL_STUDENT = {
    "model.d_model": 32, "model.heads": 2, "model.ffn_dim": 64, "model.encoder_layers": 1, "model.decoder_layers": 1,
    "model.positions": "learned", "model.max_positions": 128, "train.max_steps": 4, "train.max_tokens": 2000,
    "train.valid_every": 2, "train.log_every": 2, "train.valid_bleu": False, "train.early_stop_metric": "loss",
    "train.num_threads": 1, "decode.beam_size": 2}


def test_the_closest_hypothesis_by_chrf_is_kept_and_a_tie_keeps_the_better_ranked():
    reference = "the small cat sat on the mat"
    assert closest_by_chrf(["a dog ran in the park", "the big dog sat on a mat", reference], reference) == 2
    assert closest_by_chrf(["the cat", "the small cat sat on the mat today", "a small dog"], reference) == 1
    assert closest_by_chrf(["the cat", "the cat", "dog"], "the cat") == 0
    assert closest_by_chrf(["dog", "the cat", "the cat"], "the cat") == 1


def blocks_of(scores, size=3):
    """A reader of ``scores`` in blocks, as the filter reads the scores file."""
    scores = np.asarray(scores, dtype=np.float64)
    return lambda: (scores[start:start + size] for start in range(0, len(scores), size))


def dropped_by(scores, share, size=3):
    """The filter's choice on ``scores`` read ``size`` at a time: which lines it keeps, and the best score dropped."""
    rule = worst_share(blocks_of(scores, size), share)
    keep = np.concatenate(list(rule.keep(blocks_of(scores, size)())))
    return keep, rule.cutoff


def test_the_filter_drops_exactly_the_worst_share_and_every_empty_translation():
    scores = -0.1 * np.arange(20)  # line n scores -0.1 n: the last lines are the worst
    keep, threshold = dropped_by(scores, 0.1)
    assert keep.tolist() == [True] * 18 + [False] * 2 and threshold == pytest.approx(-1.8)
    nan = math.nan  # an empty translation: always dropped, not counted in the share
    keep, threshold = dropped_by([-1.0, nan, -3.0, -2.0, -3.0], 0.5)  # 4 scored: 2 dropped, earlier first
    assert keep.tolist() == [True, False, False, True, False] and threshold == -3.0
    keep, threshold = dropped_by([-1.0, nan, -2.0], 0.0)
    assert keep.tolist() == [True, False, True] and threshold is None
    assert dropped_by(np.full(100, -0.5), 0.07)[0].sum() == 93  # floor(0.07 * 100), not one short of it


@pytest.mark.parametrize("seed", range(6))
def test_the_streaming_filter_drops_what_sorting_every_score_drops(seed):
    """The cutoff found pass by pass on blocks is the one a stable sort of all the scores gives,
    ties (many: scores rounded to two decimals), zeros of both signs and NaN included."""
    rng = np.random.default_rng(seed)
    scores = np.round(-rng.gamma(2.0, 0.5, size=500), 2)
    scores[rng.choice(500, 40, replace=False)] = math.nan
    scores[rng.choice(500, 5, replace=False)] = rng.choice([0.0, -0.0, 1e-300, -5e-324, 3.5], 5)
    share = [0.05, 0.3, 0.5, 0.99, 0.0, 1 / 3][seed]
    scored = np.flatnonzero(~np.isnan(scores))
    dropped = scored[np.argsort(scores[scored], kind="stable")[:math.floor(share * len(scored) + 1e-9)]]
    expected = ~np.isnan(scores)
    expected[dropped] = False
    for size in (1, 7, 1000):
        keep, threshold = dropped_by(scores, share, size)
        assert keep.tolist() == expected.tolist()
        assert threshold == (float(scores[dropped].max()) if len(dropped) else None)


def test_the_filter_holds_a_block_of_scores_and_reads_them_a_bounded_number_of_times():
    reads, sizes = [], []

    def spied(scores, size):
        def blocks():
            reads.append(1)
            for start in range(0, len(scores), size):
                sizes.append(len(scores[start:start + size]))
                yield scores[start:start + size]
        return blocks

    scores = -np.random.default_rng(0).random(10_000)
    rule = worst_share(spied(scores, 64), 0.05)
    assert rule.dropped == 500 and len(reads) == 4 and max(sizes) == 64  # 64 / 16 bits a pass, the count in the first


class TrainingText:
    """What the filter reads of a prepared directory: its languages, splits and training source."""

    src_lang, tgt_lang, split_names = "de", "en", ["train"]

    def __init__(self, folder):
        self.folder = folder

    def text_path(self, split, side):
        return self.folder / f"{split}.{side}"


def test_the_filter_stage_reads_its_scores_a_block_at_a_time(tmp_path, monkeypatch):
    import nmt_cli.distill as distill_module

    rng = np.random.default_rng(3)
    scores = np.round(-rng.random(50), 1)
    scores[[4, 17]] = math.nan
    data = TrainingText(tmp_path)
    data.text_path("train", "src").write_text("".join(f"source {n}\n" for n in range(50)), encoding="utf-8")
    (tmp_path / "translate").mkdir()
    (tmp_path / "translate" / "train.en").write_text("".join(f"target {n}\n" for n in range(50)), encoding="utf-8")
    (tmp_path / "translate" / "train.scores").write_text(
        "".join(("" if math.isnan(score) else repr(float(score))) + "\n" for score in scores), encoding="utf-8")
    blocks, score_blocks = [], distill_module._score_blocks

    def spied(path, block_lines):
        for block in score_blocks(path, block_lines):
            blocks.append(len(block))
            yield block

    monkeypatch.setattr(distill_module, "_score_blocks", spied)
    _, details = distill_module._filter(data, tmp_path, 0.2, 8, None)
    assert max(blocks) == 8 and sum(blocks) == 5 * 50  # 4 passes to find the cutoff, 1 to keep the lines
    keep, threshold = dropped_by(scores, 0.2)
    assert details == {"pairs": 50, "empty": 2, "dropped": 9, "kept": int(keep.sum()), "drop_share": 0.2,
                       "threshold": threshold}
    kept = [n for n in range(50) if keep[n]]
    assert read_lines(tmp_path / "filter" / "train.de") == [f"source {n}" for n in kept]
    assert read_lines(tmp_path / "filter" / "train.en") == [f"target {n}" for n in kept]


def test_the_student_presets_have_the_documented_shapes(tiny_prepared, tmp_path):
    data = PreparedData(tiny_prepared)
    teacher = Config().with_overrides({"train.alignment_weight": 0.05, "train.keep_last": 1})
    for preset, width, ffn in (("tiny", 256, 1536), ("base", 512, 2048)):
        config = student_config(teacher, data, tmp_path, DistillOptions(student=preset, average_last=3))
        model = config.model
        assert (model.arch, model.encoder_layers, model.decoder_layers, model.d_model, model.ffn_dim, model.heads) == \
            ("transformer", 6, 2, width, ffn, 8)
        # a preset learns plain distilled text: no guide from the teacher, and the checkpoints to average kept
        assert config.train.alignment_weight == 0 and config.train.keep_last == 3 and config.train.average_last == 0
        assert (config.data.source, config.data.path, config.data.test_split) == ("files", str(tmp_path), "test")
        built = build_model(model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size, True)
        assert len(built.encoder.layers) == 6 and len(built.decoder.layers) == 2
        assert built.encoder.layers[0].ffn.linear1.weight.shape == (ffn, width)
    linear = student_config(teacher, data, tmp_path, DistillOptions(student="tiny", student_decoder="linear"))
    assert (linear.model.arch, linear.model.linear_sites, linear.model.d_model) == \
        ("linear_transformer", ("decoder_self",), 256)
    # CTranslate2 runs softmax Transformers: the linear student's export stage is skipped, saying why
    assert export_skip_reason(config) is None
    assert export_skip_reason(linear) == \
        "CTranslate2 runs softmax Transformers alone, not this linear_transformer student"
    path = tmp_path / "student.yaml"
    path.write_text(Config().with_overrides(SMALL_STUDENT).to_yaml(), encoding="utf-8")
    from_file = student_config(teacher, data, tmp_path, DistillOptions(student=str(path), overrides={
        "train.max_steps": 7}))
    assert (from_file.model.d_model, from_file.train.max_steps, from_file.data.tgt_lang) == (32, 7, data.tgt_lang)
    with pytest.raises(NmtError, match="--student small: neither a preset"):
        student_config(teacher, data, tmp_path, DistillOptions(student="small"))


def test_a_teacher_with_another_tokenizer_is_a_one_line_error(tiny_prepared, tmp_path):
    """The teacher: an untrained checkpoint of a corpus with other pieces than the data given."""
    other = Config().with_overrides({
        "data.source": "synthetic", "data.synthetic_train_size": 100, "data.synthetic_valid_size": 0,
        "data.synthetic_test_size": 0, "data.vocab_size": 120, **SMALL_STUDENT})
    prepare(other, tmp_path / "other", progress=False)
    tokenizer = PreparedData(tmp_path / "other").tokenizer
    model = build_model(other.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
    save_checkpoint(tmp_path / "teacher", model.state_dict(), other, tokenizer, {"step": 0})
    result = CliRunner().invoke(cli, ["distill", "--teacher", str(tmp_path / "teacher"), "--data", str(tiny_prepared),
                                      "--out", str(tmp_path / "out"), "--quiet"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.splitlines() == [(
        f"error: {tmp_path / 'teacher'}: its SentencePiece model is not the one {tiny_prepared} was prepared with; "
        "distill the prepared data the teacher was trained on")]
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def distill_data(tiny_prepared, tmp_path_factory) -> Path:
    """The tiny corpus's first 120 training pairs, one of them far longer than the teacher takes
    (its translation is an empty line), prepared with the teacher's pieces."""
    data = PreparedData(tiny_prepared)
    folder = tmp_path_factory.mktemp("distill-text")
    for side, lang in (("src", data.src_lang), ("tgt", data.tgt_lang)):
        lines = read_lines(data.text_path("train", side))
        lines = lines[:60] + [" ".join(lines[:60])] + lines[60:119]
        (folder / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        for split in ("valid", "test"):
            (folder / f"{split}.{lang}").write_text(data.text_path(split, side).read_text(encoding="utf-8"),
                                                    encoding="utf-8")
    config = data.config.with_overrides({"data.source": "files", "data.path": str(folder), "data.max_length": 0,
                                         "data.max_length_ratio": 0, "data.valid_split": "valid"})
    out = tmp_path_factory.mktemp("distill-data") / "prepared"
    prepare(config, out, progress=False, tokenizer_from=tiny_prepared)
    return out


def _student_file(tmp_path: Path) -> Path:
    path = tmp_path / "student.yaml"
    path.write_text(Config().with_overrides(SMALL_STUDENT).to_yaml(), encoding="utf-8")
    return path


def _distill_process(teacher: Path, data: Path, out: Path, student: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "nmt_cli", "distill", "--teacher", teacher, "--data", data, "--out", out,
               "--student", student, "--average-last", "2", "--chunk-lines", "10", "--workers", "1", "--device",
               "cpu", "--quiet"]
    return subprocess.Popen(list(map(str, command)), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.slow  # the pipeline twice, one of them in a process killed mid-translation
def test_a_killed_distillation_resumes_line_exact_and_a_finished_one_retrains_nothing(
        tiny_trained_run, distill_data, tmp_path, monkeypatch):
    import nmt_cli.distill as distill_module

    student = _student_file(tmp_path)
    options = DistillOptions(student=str(student), average_last=2, chunk_lines=10)
    data = PreparedData(distill_data)
    # uninterrupted, in this process
    reference = distill([tiny_trained_run], distill_data, tmp_path / "whole", options, device="cpu", workers=1,
                        progress=False, stream=io.StringIO())
    assert list(reference["stages"]) == ["translate", "filter", "shortlist", "prepare", "train", "average", "export"]
    whole = tmp_path / "whole"
    sources = read_lines(data.text_path("train", "src"))
    translations = read_lines(whole / "translate" / f"train.{data.tgt_lang}")
    scores = read_lines(whole / "translate" / "train.scores")
    # line-exact: line N is the translation of source line N; the overlong line 61 is an empty line
    assert len(sources) == len(translations) == len(scores) == 120 and not (whole / "translate" / CHUNKS).exists()
    assert translations[60] == "" and scores[60] == "" and all(translations[:60] + translations[61:])
    translated = reference["stages"]["translate"]
    assert (translated["too_long"], translated["empty"], sum(translated["kept_rank"])) == (1, 1, 120)
    # the filter drops the empty line and floor(5% of the 119 scored) = 5 worst, keeping the order
    filtered = reference["stages"]["filter"]
    assert (filtered["empty"], filtered["dropped"], filtered["kept"]) == (1, 5, 114)
    keep, _ = dropped_by([float(score) if score else math.nan for score in scores], 0.05)
    kept_sources = [line for line, kept in zip(sources, keep) if kept]
    assert read_lines(whole / "filter" / f"train.{data.src_lang}") == kept_sources
    worst = sorted(float(score) for score in scores if score)[:5]
    assert filtered["threshold"] == worst[-1]
    # the student is prepared with the teacher's pieces, trained, averaged and exported as int8
    prepared = PreparedData(whole / "prepared")
    assert prepared.tokenizer.model_files() == load_checkpoint(tiny_trained_run).tokenizer.model_files()
    assert prepared.manifest["splits"]["train"]["kept"] == 114 and prepared.split_names == ["train", "valid", "test"]
    assert load_checkpoint(whole / "student" / "average").state["averaged"] == [
        str(path) for path in list_checkpoints(whole / "student" / "run")[-2:]]
    assert read_export_record(whole / "export").quantization == "int8"
    # the shortlist of the kept pairs, by the teacher's alignments, is the export's vocabulary map
    shortlisted = reference["stages"]["shortlist"]
    assert (shortlisted["pairs"], shortlisted["k"], shortlisted["frequent"]) == (114, 50, 50)
    assert read_export_record(whole / "export").shortlist["fingerprint"] == shortlisted["fingerprint"]
    assert reference["shortlist"] == str(whole / "shortlist" / "shortlist.txt")
    assert reference["student"] == str(whole / "student" / "average")

    # killed (SIGKILL) mid-translation, then resumed: the finished chunks are not translated again
    process = _distill_process(tiny_trained_run, distill_data, tmp_path / "killed", student)
    chunks = tmp_path / "killed" / "translate" / CHUNKS
    deadline = time.monotonic() + 120
    while len(list(chunks.glob("*.json"))) < 3 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    done = len(list(chunks.glob("*.json")))
    assert 3 <= done < 12 and not (tmp_path / "killed" / "translate" / "train.scores").exists()
    translated_again = []
    real_loader = distill_module.load_translator

    def counting_loader(*args, **kwargs):
        translator = real_loader(*args, **kwargs)
        translate = translator.translate
        translator.translate = lambda sentences, *rest: translated_again.append(len(sentences)) or translate(
            sentences, *rest)
        return translator

    monkeypatch.setattr(distill_module, "load_translator", counting_loader)
    resumed = distill([tiny_trained_run], distill_data, tmp_path / "killed", options, device="cpu", workers=1,
                      progress=False, stream=io.StringIO())
    assert sum(translated_again) == 120 - 10 * done
    for name in ("translate/train.en", "translate/train.scores", "filter/train.de", "filter/train.en"):
        assert (tmp_path / "killed" / name).read_text(encoding="utf-8") == (whole / name).read_text(encoding="utf-8")
    assert {key: value for key, value in resumed["stages"]["filter"].items() if key != "seconds"} == \
        {key: value for key, value in reference["stages"]["filter"].items() if key != "seconds"}
    assert not chunks.exists()  # once the stage is recorded, with what the killed writer left of its chunk

    # a rerun of a finished distillation retrains nothing and rewrites nothing
    run = tmp_path / "killed" / "student" / "run"
    written = {path: path.stat().st_mtime_ns for path in [*run.rglob("*"), *(tmp_path / "killed").glob("*/*")]}
    again = distill([tiny_trained_run], distill_data, tmp_path / "killed", options, device="cpu", workers=1,
                    progress=False, stream=io.StringIO())
    assert again["stages"] == resumed["stages"] and sum(translated_again) == 120 - 10 * done
    assert {path: path.stat().st_mtime_ns for path in written} == written

    # a record written before a config key existed resumes: the key counts as its default
    record = json.loads((tmp_path / "killed" / "distill.json").read_text(encoding="utf-8"))
    del record["settings"]["student_config"]["data"]["spm_seed"]
    del record["settings"]["corpus_from"]  # and one written before --corpus-from
    (tmp_path / "killed" / "distill.json").write_text(json.dumps(record), encoding="utf-8")
    assert distill([tiny_trained_run], distill_data, tmp_path / "killed", options, device="cpu", workers=1,
                   progress=False)["stages"] == resumed["stages"]

    # other settings are refused, naming the first that differs
    with pytest.raises(NmtError, match=r"killed: was distilled with drop_share 0.05, not 0.1; rerun with the same"):
        distill([tiny_trained_run], distill_data, tmp_path / "killed", DistillOptions(
            student=str(student), average_last=2, chunk_lines=10, drop_share=0.1), device="cpu", workers=1)
    with pytest.raises(NmtError, match=r"with student_config.train.max_steps 4, not 5"):
        distill([tiny_trained_run], distill_data, tmp_path / "killed", DistillOptions(
            student=str(student), average_last=2, chunk_lines=10, overrides={"train.max_steps": 5}), device="cpu",
            workers=1)


UNPATCHED_TRANSLATE = Translator.translate  # the translator's own method, whatever a test has patched in since


@pytest.mark.parametrize("mid_chunk", [False, True], ids=["at-a-chunk-boundary", "mid-chunk"])
def test_an_interrupted_translation_resumes_at_its_first_unfinished_chunk_to_the_same_bytes(
        tiny_trained_run, distill_data, tmp_path, monkeypatch, mid_chunk):
    import nmt_cli.distill as distill_module

    data, teachers, options = PreparedData(distill_data), [str(tiny_trained_run)], DistillOptions(chunk_lines=50)
    translated = [f"train.{data.tgt_lang}", "train.scores"]
    _, whole = distill_module._translate(teachers, data, tmp_path / "whole", 2, options, "cpu", 1, None)
    calls = []
    monkeypatch.setattr(Translator, "translate", recording(UNPATCHED_TRANSLATE, calls, stop_at=2, mid_chunk=mid_chunk))
    folder = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        distill_module._translate(teachers, data, folder, 2, options, "cpu", 1, None)
    assert sorted(path.name for path in folder.iterdir()) == [CHUNKS]  # neither file half-written
    assert len(list((folder / CHUNKS).iterdir())) == 2  # the first chunk and its seconds: nothing of the second
    calls.clear()
    monkeypatch.setattr(Translator, "translate", recording(UNPATCHED_TRANSLATE, calls))
    stream = io.StringIO()
    seconds, resumed = distill_module._translate(teachers, data, folder, 2, options, "cpu", 1, stream)
    sources = read_lines(data.text_path("train", "src"))
    assert calls == [sources[50:100], sources[100:]]  # the second and third chunks only
    assert "distill translate (50 lines translated before): 70 sentences" in stream.getvalue()
    for name in translated:
        assert (folder / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    assert {key: value for key, value in resumed.items() if key != "sentences_per_second"} == \
        {key: value for key, value in whole.items() if key != "sentences_per_second"}
    assert seconds > 0 and resumed["chunks"] == 3


def test_a_translated_chunk_is_not_reused_for_another_input_or_teacher(tiny_trained_run, distill_data, tmp_path,
                                                                     monkeypatch):
    import nmt_cli.distill as distill_module

    data, teachers, options = PreparedData(distill_data), [str(tiny_trained_run)], DistillOptions(chunk_lines=50)
    folder = tmp_path / "translate"
    distill_module._translate(teachers, data, folder, 2, options, "cpu", 1, None)
    other = distill_module._translation_chunks(folder, {"teachers": teachers, "beam": 3, "keep": "closest",
                                                        "device": "cpu"})
    pair = (read_lines(data.text_path("train", "src"))[0], read_lines(data.text_path("train", "tgt"))[0])
    assert other.key([pair]) != other.key([(pair[0] + " x", pair[1])])  # another input, another chunk
    keys = {distill_module._translation_chunks(folder, {"teachers": teachers, "beam": beam, "keep": "closest",
                                                        "device": "cpu"}).key([pair]) for beam in (2, 3)}
    assert len(keys) == 2  # other settings, another chunk
    # kept chunks of a run whose beam differed are not taken: every chunk is translated again
    calls = []
    monkeypatch.setattr(Translator, "translate", recording(UNPATCHED_TRANSLATE, calls))
    distill_module._translate(teachers, data, folder, 3, options, "cpu", 1, None)
    assert [len(chunk) for chunk in calls] == [50, 50, 20]


def test_a_teacher_overwritten_in_place_translates_every_chunk_again(tiny_trained_run, distill_data, tmp_path,
                                                                     monkeypatch):
    """The chunks are keyed by the teacher's weights, not only its path: a checkpoint retrained or
    replaced under the same path must not hand back its predecessor's translations."""
    import shutil

    from safetensors.torch import load_file, save_file

    import nmt_cli.distill as distill_module
    from nmt_cli.checkpoint import WEIGHTS, resolve_checkpoint

    teacher = tmp_path / "teacher"
    shutil.copytree(resolve_checkpoint(tiny_trained_run), teacher)
    data, options, folder = PreparedData(distill_data), DistillOptions(chunk_lines=50), tmp_path / "translate"
    distill_module._translate([str(teacher)], data, folder, 2, options, "cpu", 1, None)
    calls = []
    monkeypatch.setattr(Translator, "translate", recording(UNPATCHED_TRANSLATE, calls))
    distill_module._translate([str(teacher)], data, folder, 2, options, "cpu", 1, None)
    assert calls == []  # the same teacher: every chunk kept
    weights = load_file(teacher / WEIGHTS)
    name = next(iter(weights))
    weights[name] = weights[name] * 0.5
    save_file(weights, teacher / WEIGHTS)
    distill_module._translate([str(teacher)], data, folder, 2, options, "cpu", 1, None)
    assert [len(chunk) for chunk in calls] == [50, 50, 20]  # new weights under the old path: all translated again


def test_nmt_distill_needs_a_teacher_and_data_or_check(tmp_path):
    result = CliRunner().invoke(cli, ["distill", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "nmt distill needs --teacher and --data (or --check)" in result.output
    result = CliRunner().invoke(cli, ["distill", "--check", "--data", str(tmp_path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "--check trains its own teacher" in result.output
    result = CliRunner().invoke(cli, ["distill", "--check", "--corpus-from", str(tmp_path), "--out",
                                      str(tmp_path / "out")])
    assert result.exit_code == 2 and "leave out --corpus-from" in result.output


@pytest.mark.slow  # two distillations, one of them with its whole corpus
def test_a_second_student_takes_the_corpus_of_a_finished_distillation_without_translating_it(
        tiny_trained_run, distill_data, tmp_path, monkeypatch):
    import nmt_cli.distill as distill_module

    student = _student_file(tmp_path)
    options = DistillOptions(student=str(student), average_last=2, chunk_lines=40)
    first = distill([tiny_trained_run], distill_data, tmp_path / "first", options, device="cpu", workers=1,
                    progress=False)

    def never(*args, **kwargs):
        raise AssertionError("the corpus stages ran again")

    monkeypatch.setattr(distill_module, "_translate", never)
    monkeypatch.setattr(distill_module, "_filter", never)
    monkeypatch.setattr(distill_module, "_shortlist", never)
    linear = DistillOptions(student=str(student), student_decoder="linear", average_last=2, chunk_lines=40)
    second = distill([tiny_trained_run], distill_data, tmp_path / "second", linear, device="cpu", workers=1,
                     progress=False, corpus_from=tmp_path / "first")
    assert list(second["stages"]) == list(first["stages"])
    for name in ("translate", "filter", "shortlist"):
        stage = second["stages"][name]
        assert stage["seconds"] == 0.0 and stage["reused_from"] == str(tmp_path / "first")
        assert stage["seconds_there"] == first["stages"][name]["seconds"]
        assert stage["outputs"] == [str(tmp_path / "first" / output) for output in first["stages"][name]["outputs"]]
    assert not (tmp_path / "second" / "translate").exists() and not (tmp_path / "second" / "filter").exists()
    # the same pairs, prepared here, train a student of another decoder; the shortlist is the first's
    assert (read_lines(PreparedData(tmp_path / "second" / "prepared").text_path("train", "tgt"))
            == read_lines(PreparedData(tmp_path / "first" / "prepared").text_path("train", "tgt")))
    assert second["stages"]["train"]["arch"] == "linear_transformer"
    assert "softmax Transformers alone" in second["stages"]["export"]["skipped"]  # the linear decoder is why
    assert second["shortlist"] == first["shortlist"] and second["export"] is None
    # a rerun runs nothing again and keeps the record
    for stage in ("_prepare", "_train", "_average", "_export"):
        monkeypatch.setattr(distill_module, stage, never)
    assert distill([tiny_trained_run], distill_data, tmp_path / "second", linear, device="cpu", workers=1,
                   progress=False, corpus_from=tmp_path / "first")["stages"] == second["stages"]
    # a rerun without --corpus-from is refused, naming it
    with pytest.raises(NmtError, match=r"second: was distilled with corpus_from '.*first', not None"):
        distill([tiny_trained_run], distill_data, tmp_path / "second", linear, device="cpu", workers=1)

    # a corpus made with other corpus settings, a folder that is no distillation, an unfinished one
    other = DistillOptions(student=str(student), average_last=2, chunk_lines=40, drop_share=0.1)
    with pytest.raises(NmtError, match=r"first: its corpus was distilled with drop_share 0.05, not 0.1$"):
        distill([tiny_trained_run], distill_data, tmp_path / "third", other, device="cpu",
                corpus_from=tmp_path / "first")
    with pytest.raises(NmtError, match=r"no distill.json with settings there"):
        distill([tiny_trained_run], distill_data, tmp_path / "third", options, device="cpu", corpus_from=tmp_path)
    with pytest.raises(NmtError, match=r"second: its corpus came from .*first; name that directory"):
        distill([tiny_trained_run], distill_data, tmp_path / "third", linear, device="cpu",
                corpus_from=tmp_path / "second")
    record = json.loads((tmp_path / "first" / "distill.json").read_text(encoding="utf-8"))
    record["stages"]["filter"]["finished"] = False
    (tmp_path / "first" / "distill.json").write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(NmtError, match=r"its filter stage has not finished"):
        distill([tiny_trained_run], distill_data, tmp_path / "third", options, device="cpu",
                corpus_from=tmp_path / "first")
    with pytest.raises(NmtError, match=r"is the --out directory itself"):
        distill([tiny_trained_run], distill_data, tmp_path / "first", options, device="cpu",
                corpus_from=tmp_path / "first")
