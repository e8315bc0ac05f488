"""`bench/align_quality.py --quick`: our side always runs; eflomal's rows when it is installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from peers.install import availability  # noqa: E402

from nmt_cli.bootstrap import REFINE_FRACTION


def _aer(cell: str) -> float:
    """The AER of a cell, ``0.1234`` or ``0.1234 [0.1200, 0.1300]`` (mean or median and the range)."""
    return float(cell.split(" ")[0])


#: the end-to-end run: a few steps and one seed. Each seed adds a bootstrap and two nmt align runs per
#: row, so how rows pair the seeds' models and report their mean and range is tested on fakes
#: (test_each_seed_bootstraps_its_own_models_and_a_row_holds_every_seeds_system and the tests after it).
#: No quality bound: at steps the suite can afford (12 or 100) the tiny models have not learned to
#: align, plain attention is near chance and the guided pairs link nothing, whatever the seed.
QUICK_STEPS, QUICK_SEEDS = 12, 1


@pytest.mark.slow
def test_quick_bench_prints_a_row_per_system(tmp_path):
    report_path = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "align_quality.py"), "--quick", "--work", str(tmp_path),
         "--json", str(report_path), "--threads", "1", "--steps", str(QUICK_STEPS), "--device", "cpu",
         "--seeds", str(QUICK_SEEDS), "--eflomal-runs", "2"],
        # one bootstrap, Mask-Align's two models and 53 nmt align runs: about 480 s (325 s of CPU) on 2
        # cores of an AMD EPYC that other work kept at a load average of 1-4 (2 seeds took 725 s, 500 s of
        # CPU, at 3-4); 850 s at 11-13
        capture_output=True, text=True, timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    check_quick_report(tmp_path, json.loads(report_path.read_text(encoding="utf-8")), done.stdout,
                       QUICK_STEPS, QUICK_SEEDS)


def _runs(seeds: int) -> str:
    return f"{seeds} seed" + ("s" if seeds != 1 else "")


def check_quick_report(tmp_path: Path, report: dict, stdout: str, steps: int, seeds: int) -> None:
    """What the quick bench (``--quick --work tmp_path --threads 1 --steps STEPS --seeds SEEDS
    --eflomal-runs 2``) must have written and reported; apart so that a run made by hand can be checked."""
    rows = {(row[0], row[1], row[2]): dict(zip(report["columns"], row)) for row in report["rows"]}
    # the protocol: every row is scored on the test pairs; tuned ones name the dev pairs they were picked on
    scored = [row for row in rows.values() if row["AER"] != "-"]  # not an aligner that is not installed
    assert {row["pairs"] for row in scored} <= {"test 1-30", "test 1-30 (picked on dev 1-30)"}
    assert all(row["pairs"] == "test 1-30 (picked on dev 1-30)" for (_, _, setting), row in rows.items()
               if setting.startswith("tuned: "))
    ours = rows[("synthetic", "nmt-cli plain attention", "default reading (last layer, heads averaged)")]
    assert 0.0 <= _aer(ours["AER"]) <= 1.0 and float(ours["time s"]) > 0 and ours["runs"] == _runs(seeds)
    if seeds > 1:
        low, high = (float(value) for value in ours["AER"].split("[")[1].rstrip("]").split(", "))
        assert low <= _aer(ours["AER"]) <= high  # the mean over the seeds and their range
    on_unaligned, wrong = map(int, ours["wrong links on unaligned words"].split(" ")[0].split("/"))
    assert 0 <= on_unaligned <= wrong
    both = rows[("synthetic", "nmt-cli plain attention", "both directions, grow-diag-final-and (nmt align's defaults)")]
    assert 0.0 <= _aer(both["AER"]) <= 1.0
    agreed = rows[("synthetic", "nmt-cli plain attention",
                   "both directions with --agree-heads, grow-diag-final-and (nmt align's default symmetrization)")]
    assert 0.0 <= _aer(agreed["AER"]) <= 1.0 and agreed["BLEU test2016 (greedy)"] == "-"
    assert any(setting.startswith("tuned: both directions with --agree-heads, --symmetrize ")
               for (_, _, setting) in rows)
    booted = "nmt-cli bootstrap (no external aligner)"
    for round_number in (1, 2):
        alone = rows[("synthetic", booted, f"round {round_number}: default reading (supervised head)")]
        assert 0.0 <= _aer(alone["AER"]) <= 1.0 and float(alone["time s"]) > 0
        # each round's tuned row is its own (the two readings may well be the same options)
        assert any(setting.startswith(f"tuned: round {round_number}: --layer ") for (_, _, setting) in rows)
    first_pair = rows[("synthetic", booted, "round 1: both directions, average > 0.4 (default readings)")]
    booted_pair = rows[("synthetic", booted, "round 2: both directions, average > 0.4 "
                                             "(default readings; the aligner the command names)")]
    # times add up each row's own stages plus its alignment, whose few seconds vary more than a tiny
    # model's training: rows are not compared by time here, only checked to be counted
    assert float(booted_pair["time s"]) > 0 and booted_pair["BLEU test2016 (greedy)"] == "-"
    assert 0.0 <= _aer(first_pair["AER"]) <= 1.0 and booted_pair["runs"] == _runs(seeds)
    assert any(system == booted and setting.startswith("tuned: round 2: both directions, --symmetrize ")
               for (_, system, setting) in rows)
    masked = rows[("synthetic", "nmt-cli Mask-Align (no external aligner)",
                   "both directions, grow-diag-final-and (nmt align's defaults)")]
    assert 0.0 <= _aer(masked["AER"]) <= 1.0 and masked["BLEU test2016 (greedy)"] == "-" and masked["runs"] == "1 seed"
    assert (tmp_path / "align_quality" / "quick" / "synthetic" / "mask-align-reverse" / "run").is_dir()
    symmetrized = [row for (corpus, system, setting), row in rows.items()
                   if setting.startswith("tuned: both directions, --symmetrize ")]
    assert {row["system"] for row in symmetrized} >= {"nmt-cli plain attention",
                                                      "nmt-cli Mask-Align (no external aligner)"}
    heuristics = ("intersection", "grow-diag", "grow-diag-final", "grow-diag-final-and")
    for _, _, setting in rows:
        if "both directions, --symmetrize " in setting:
            picked = setting.split("both directions, --symmetrize ")[1].split(" (picked")[0]
            assert picked in heuristics or picked == "average --average-threshold 0.4", setting
    work = tmp_path / "align_quality" / "quick" / "synthetic"
    tried = [json.loads(path.read_text(encoding="utf-8"))
             for path in sorted((work / "scores").glob("*/tuning/symmetrize-*/settings.json"))]
    averaged = [settings for settings in tried if settings["symmetrization"] == "average"]
    # every both-directions system tries the four heuristics and the average at the default threshold
    assert len(tried) == 5 * len(averaged) and averaged
    assert all(settings["average_threshold"] == 0.4 for settings in averaged)
    # the dev pairs are aligned with a row's default reading only where its tuning did not: the rows of one
    # direction (plain, each bootstrap round, Mask-Align); a both-directions default is one of its tunings
    assert len(list((work / "scores").glob("*/dev-default"))) == 4
    seed_folders = ["bootstrap"] + [f"bootstrap-seed{seed}" for seed in range(2, seeds + 1)]
    for seed, seed_folder in enumerate(seed_folders, start=1):
        stages = json.loads((work / seed_folder / "bootstrap.json").read_text(encoding="utf-8"))["stages"]
        assert list(stages) == ["forward", "reverse", "links", "guided", "guided-reverse", "links-2", "guided-2",
                                "guided-reverse-2"]
        assert f"\n  seed: {seed}\n" in (work / seed_folder / "reverse" / "run" / "config.yaml").read_text(
            encoding="utf-8")
    refine_steps = max(1, round(steps * REFINE_FRACTION))  # a later round's steps
    assert f"max_steps: {refine_steps}\n" in (work / "bootstrap" / "guided-2" / "run" / "config.yaml").read_text(
        encoding="utf-8")
    assert (work / "bootstrap" / "reverse" / "run").is_dir() and (work / "bootstrap" / "links" / "train.align").is_file()
    intervals = [note for note in report["notes"]
                 if note.startswith("synthetic: the reading without an external aligner with the lowest AER on dev")]
    if availability("eflomal")[0]:  # the headline comparison needs eflomal's rows
        assert len(intervals) == 1 and "95% interval of AER(ours) - AER(eflomal): [" in intervals[0]
    else:
        assert intervals == []
    blind = tmp_path / "align_quality" / "quick" / "align_blind"
    headline = ["plain-attention", "bootstrap"] + (["eflomal", "guided-eflomal"] if availability("eflomal")[0] else [])
    for name in headline:
        lines = (blind / f"{name}.align").read_text(encoding="utf-8").splitlines()
        assert len(lines) == 30 and all(all("-" in link for link in line.split()) for line in lines)
    readme = (blind / "README.md").read_text(encoding="utf-8")
    assert f"{steps:,} training steps" in readme and "saw the blind sentences in" in readme
    assert f"--seeds {seeds}" in readme and "--work" not in readme and "--json" not in readme
    usable, label = availability("eflomal")
    if usable:
        for reading in ("forward", "reverse", "grow-diag-final"):
            assert 0.0 <= _aer(rows[("synthetic", label, reading)]["AER"]) <= 1.0
            assert rows[("synthetic", label, reading)]["runs"] == "2 runs"
        assert any(setting.startswith("best symmetrized: ") and setting.endswith(" (picked on dev 1-30)")
                   for (_, system, setting) in rows if system == label)
        guided = rows[("synthetic", "nmt-cli guided by eflomal", "default reading (supervised head)")]
        assert guided["AER / eflomal's best symmetrized"].endswith("x")
        both_guided = rows[("synthetic", "nmt-cli guided by eflomal",
                            "both directions, average > 0.4 (nmt align's defaults)")]
        assert 0.0 <= _aer(both_guided["AER"]) <= 1.0 and float(both_guided["time s"]) > 0
        assert (work / "eflomal-links" / "train.align").is_file()
        assert (work / "guided-eflomal-reverse" / "run").is_dir()
        spread = next(note for note in report["notes"] if note.startswith("synthetic: eflomal's AER"))
        assert "over its 2 run(s), lowest-highest: forward dev 1-30 " in spread
        aligned = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(
            (work / "scores").glob("*/default/seed*/settings.json"))]
        members = [(len(s.get("ensemble", [])), len(s.get("reverse_ensemble", []))) for s in aligned]
        ensembles = [(setting, row) for (_, system, setting), row in rows.items()
                     if system == "nmt-cli guided by eflomal" and setting.startswith("ensemble of ")]
        if seeds > 1:  # the guided pairs of every seed align as one ensemble
            (ensemble_label, ensemble), = ensembles
            assert ensemble_label == (f"ensemble of {seeds} seeds per direction, both directions, average > 0.4 "
                                      "(nmt align's defaults)")
            assert 0.0 <= _aer(ensemble["AER"]) <= 1.0 and ensemble["runs"] == f"ensemble of {seeds} seeds"
            assert any(setting.startswith(f"tuned: ensemble of {seeds} seeds per direction, both directions, "
                                          "--symmetrize ") for (_, _, setting) in rows)
            seed2 = work / "guided-eflomal-reverse-seed2" / "run" / "config.yaml"
            assert "\n  seed: 2\n" in seed2.read_text(encoding="utf-8")
            assert members.count((seeds, seeds)) == 1  # the ensemble row's models, both directions
        else:
            assert ensembles == [] and set(members) <= {(0, 0)}
    else:
        assert ("synthetic", "eflomal", label) in rows
        assert not (work / "guided-eflomal-seed2").exists()
    assert "| synthetic | nmt-cli plain attention |" in stdout
    assert any(f"training steps: synthetic {steps:,}; 1 thread(s) per step; this run aligns and translates on device "
               "cpu and trains there the models it trains" in note for note in report["notes"])
    assert report["variant"] == f"{steps:,} training steps"  # not --quick's 10: a section of its own in BENCHMARKS.md
    trained = next(note for note in report["notes"] if note.startswith("where each model trained"))
    assert ("cpu x 1: " + ", ".join(f"synthetic/{folder}/{stage}/run" for stage in ("forward", "reverse")
                                    for folder in seed_folders)) in trained
    assert f"max_steps: {steps}\n" in (work / "bootstrap" / "reverse" / "run" / "config.yaml").read_text(
        encoding="utf-8")


def test_corpora_are_whole_names():
    from alignment_bench.corpora import corpus_names

    assert corpus_names("multi30k+tatoeba") == ["multi30k+tatoeba"]
    assert corpus_names("multi30k, synthetic") == ["multi30k", "synthetic"]
    with pytest.raises(SystemExit, match="unknown corpus 'multi30'"):
        corpus_names("multi30")


def test_steps_must_be_positive(capsys):
    from align_quality import main

    with pytest.raises(SystemExit):
        main(["--quick", "--steps", "0"])
    assert "--steps must be at least 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--quick", "--seeds", "0"])
    assert "--seeds must be at least 1, got 0" in capsys.readouterr().err


def test_systems_are_checked_names():
    from alignment_bench.systems import system_names

    assert system_names("guided, mask-align") == ("guided", "mask-align")
    with pytest.raises(SystemExit, match="unknown system 'plain'"):
        system_names("guided,plain")


def _pair_sets(tmp_path: Path, dev_gold: list[str], test_gold: list[str]):
    """A corpus of blind, dev and test pairs written under ``tmp_path`` (sentences of 3 words each)."""
    from alignment_bench.corpora import BenchCorpus, PairSet

    sets = {}
    start = 0
    for name, gold in (("blind", None), ("dev", dev_gold), ("test", test_gold)):
        size = len(gold) if gold is not None else 2
        (tmp_path / f"{name}.de").write_text("a b c\n" * size, encoding="utf-8")
        (tmp_path / f"{name}.en").write_text("x y z\n" * size, encoding="utf-8")
        if gold is not None:
            (tmp_path / f"{name}.gold").write_text("".join(line + "\n" for line in gold), encoding="utf-8")
        sets[name] = PairSet(tmp_path / f"{name}.de", tmp_path / f"{name}.en",
                             tmp_path / f"{name}.gold" if gold is not None else None, f"{name} pairs", start, size)
        start += size
    return BenchCorpus("multi30k", tmp_path, sets["dev"], sets["test"], sets["blind"], "test pairs")


def test_reuse_models_keeps_a_finished_eflomal_run_of_the_same_text(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from alignment_bench import eflomal
    from alignment_bench.settings import QUICK, Settings

    runs = []

    def fake_eflomal(command, log, settings, stdout=None):  # [tool, -s, de, -t, en, -f, forward, -r, reverse, ...]
        runs.append(command)
        Path(command[6]).write_text("0-0\n")
        Path(command[8]).write_text("0-0\n")
        return SimpleNamespace(seconds=12.5)

    monkeypatch.setattr(eflomal, "run_step", fake_eflomal)
    for side in ("de", "en"):
        (tmp_path / f"train.{side}").write_text("a b\n")
    corpus = SimpleNamespace(text=lambda split, side: tmp_path / f"{split}.{side}")
    reuse = Settings(tmp_path, QUICK, threads=1, reuse=True, eflomal_runs=1, systems=(), seeds=1)
    fresh = Settings(tmp_path, QUICK, threads=1, reuse=False, eflomal_runs=1, systems=(), seeds=1)
    out = tmp_path / "eflomal"
    assert eflomal._run(corpus, reuse, Path("eflomal-align"), out, 0)[2] == 12.5 and len(runs) == 1
    assert eflomal._run(corpus, reuse, Path("eflomal-align"), out, 0)[2] == 12.5 and len(runs) == 1  # kept
    eflomal._run(corpus, fresh, Path("eflomal-align"), out, 0)  # without --reuse-models: run again
    (tmp_path / "train.en").write_text("a b c\n")
    eflomal._run(corpus, reuse, Path("eflomal-align"), out, 0)  # another training text: run again
    assert len(runs) == 3


def test_the_eflomal_note_gives_each_readings_lowest_and_highest_aer_over_its_runs(tmp_path):
    from alignment_bench.eflomal import EflomalReading
    from alignment_bench.table import eflomal_spread

    corpus = _pair_sets(tmp_path, ["0-0 1-1 2-2"], ["0-0 1-1 2-2"])
    blind = [set(), set()]
    perfect, half = {(0, 0), (1, 1), (2, 2)}, {(0, 0)}
    results = {"forward": EflomalReading([blind + [perfect, half], blind + [half, perfect]], [18.0, 18.0]),
               "intersection": EflomalReading([blind + [perfect, perfect]] * 3, [18.0] * 3)}
    assert eflomal_spread(corpus, results) == (
        "multi30k: eflomal's AER over its 2 run(s), lowest-highest: forward dev pairs 0.0000-0.5000, "
        "test pairs 0.0000-0.5000; intersection dev pairs 0.0000-0.0000, test pairs 0.0000-0.0000")


def test_eflomals_best_symmetrization_is_picked_on_the_dev_pairs(tmp_path):
    """intersection is best on the test pairs, grow-diag-final on the dev pairs: dev decides."""
    from alignment_bench.eflomal import EflomalReading
    from alignment_bench.table import best_symmetrized

    corpus = _pair_sets(tmp_path, ["0-0 1-1 2-2"], ["0-0 1-1 2-2"])
    blind = [set(), set()]
    perfect, half = {(0, 0), (1, 1), (2, 2)}, {(0, 0)}
    results = {"intersection": EflomalReading([blind + [half, perfect]] * 3, [1.0] * 3),
               "grow-diag-final": EflomalReading([blind + [perfect, half]] * 3, [1.0] * 3),
               "grow-diag-final-and": EflomalReading([blind + [half, half]] * 3, [1.0] * 3)}
    assert best_symmetrized(results, corpus.dev) == "grow-diag-final"
    assert best_symmetrized(results, corpus.test) == "intersection"
    # the median run on dev (AER 0.5, 0 and 0.2), and the counts summed over the runs
    runs = EflomalReading([blind + [half, perfect], blind + [perfect, half], blind + [{(0, 0), (1, 1)}, half]], [1.0] * 3)
    assert runs.median_run(corpus.dev) == 2
    assert results["intersection"].counts(corpus.test).tolist() == [[9, 9, 9, 9]]


def test_sentence_counts_add_up_to_the_corpus_score():
    from alignment_bench.intervals import aer_of, sentence_counts

    from nmt_cli.alignment import score_alignments
    from nmt_cli.pharaoh import parse_links

    gold = [parse_links("0-0 1p1 2-2"), parse_links("0-1 1-0 5-5")]  # 5-5 is out of range
    links = [{(0, 0), (1, 1), (2, 1)}, {(0, 1)}]
    lengths = [(3, 3), (2, 2)]
    counts = sentence_counts(gold, links, lengths)
    whole = score_alignments(gold, links, lengths)
    assert counts.sum(axis=0).tolist() == [whole.predicted, whole.sure, whole.predicted_sure, whole.predicted_possible]
    assert aer_of(counts) == pytest.approx(whole.aer)


def test_the_bootstrap_interval_of_identical_systems_is_around_zero():
    import numpy as np

    from alignment_bench.intervals import paired_bootstrap

    rng = np.random.default_rng(0)
    predicted = rng.integers(5, 20, size=25)
    sure = rng.integers(5, 20, size=25)
    right = np.minimum(predicted, sure) // 2
    counts = np.stack([predicted, sure, right, right], axis=1)
    interval = paired_bootstrap(counts, counts.copy())
    assert interval.difference == 0.0 and interval.low == 0.0 and interval.high == 0.0
    assert "it includes 0: on these pairs neither can be said to align better" in interval.claim("ours", "eflomal")
    # two systems better on different sentences, equal overall: an interval on both sides of 0
    other = counts.copy()
    other[:12, 2:] += 2
    counts[12:24, 2:] += 2
    interval = paired_bootstrap(counts, other)
    assert interval.low < 0 < interval.high and interval.level == 0.95 and interval.samples == 10_000


def test_the_bootstrap_interval_of_a_dominated_system_excludes_zero():
    import numpy as np

    from alignment_bench.intervals import aer_of, paired_bootstrap

    better = np.array([[10, 10, 9, 9]] * 25)
    worse = np.array([[10, 10, 6, 7]] * 20 + [[10, 10, 9, 9]] * 5)
    interval = paired_bootstrap(worse, better)
    assert interval.difference == pytest.approx(aer_of(worse) - aer_of(better)) and interval.low > 0
    assert interval.claim("ours", "eflomal").endswith("it excludes 0: eflomal aligns these pairs better than ours")
    assert paired_bootstrap(better, worse).claim("ours", "eflomal").endswith(
        "it excludes 0: ours aligns these pairs better than eflomal")
    again = paired_bootstrap(worse, better)
    assert (again.low, again.high) == (interval.low, interval.high)  # a fixed seed: the same interval every run
    with pytest.raises(ValueError, match="differ in shape"):
        paired_bootstrap(worse[:24], better)


class _Recorder:
    """Stands in for the bench's aligning and tuning: records which pairs each step was handed."""

    def __init__(self):
        self.scored, self.tuned = [], []

    def aligned(self, system, pairs, *args, **kwargs):
        import numpy as np

        from alignment_bench.scoring import Aligned

        from nmt_cli.alignment import score_alignments
        from nmt_cli.pharaoh import parse_links

        self.scored.append(pairs.label)
        score = score_alignments([parse_links("0-0")], [{(0, 0)}])
        return Aligned(score, np.array([[1, 1, 1, 1]] * pairs.size), 1.0)


def _fake_row(tmp_path: Path, name: str, setting: str, reverse: bool, seeds: int = 2, stage: str = ""):
    from alignment_bench.systems import NmtSystem

    return [NmtSystem(name, setting, tmp_path / f"run{seed}", 1.0, reverse=tmp_path / "rev" if reverse else None,
                      translates=False, stage=stage) for seed in range(1, seeds + 1)]


def test_every_tuned_choice_of_the_bench_reads_the_dev_pairs_only(tmp_path, monkeypatch):
    from alignment_bench import table
    from alignment_bench.settings import QUICK, Settings
    from common import Report

    corpus = _pair_sets(tmp_path, ["0-0"] * 3, ["0-0"] * 4)
    recorder = _Recorder()
    rows = [_fake_row(tmp_path, "nmt-cli plain attention", "default reading", False),
            _fake_row(tmp_path, "nmt-cli bootstrap (no external aligner)", "both directions", True)]

    def tuned_reading(system, pairs, out, settings):
        recorder.tuned.append(pairs.label)
        return ("--layer", "0"), 0.5, 1.0

    def tuned_symmetrization(system, pairs, out, settings):
        recorder.tuned.append(pairs.label)
        return "intersection", (), 0.25, 1.0, {"intersection": 0.25, "grow-diag": 0.75}

    monkeypatch.setattr(table, "nmt_systems", lambda *args: rows)
    monkeypatch.setattr(table, "align_and_score", recorder.aligned)
    monkeypatch.setattr(table, "tuned_reading", tuned_reading)
    monkeypatch.setattr(table, "tuned_symmetrization", tuned_symmetrization)
    monkeypatch.setattr(table, "_combined", lambda out: "intersection")
    settings = Settings(tmp_path, QUICK, threads=1, reuse=False, eflomal_runs=1, systems=(), seeds=2)
    report = Report("align_quality", "t", table.COLUMNS)
    _, candidates = table.nmt_rows(report, corpus, settings, table.EflomalResult(None, 0.0), None)
    assert recorder.tuned == ["dev pairs", "dev pairs"]  # each tuner is handed the dev pairs alone
    # every row's figures are the test pairs' (both seeds, default and tuned); the dev ones go to the choice.
    # The both-directions row's tuning picked its default (intersection, as its settings say): its tuned
    # row is the default's alignments of the test pairs, not the same nmt align runs made again
    assert recorder.scored.count("test pairs") == 2 * 2 + 2 and set(recorder.scored) == {"test pairs", "dev pairs"}
    assert report.rows[3][5:9] == report.rows[2][5:9]  # AER, precision, recall, wrong links
    assert [row[3] for row in report.rows] == ["test pairs", "test pairs (picked on dev pairs)"] * 2
    assert [row[4] for row in report.rows] == ["2 seeds"] * 4
    # the both-directions row's default (intersection, as its settings say) was among the symmetrizations
    # tuned: its dev AER is the tuning's, not a second alignment of the dev pairs; the other row aligns them
    assert recorder.scored.count("dev pairs") == 1
    assert [candidate.dev_aer for candidate in candidates] == [0.0, 0.5, 0.25, 0.25]


def test_the_headline_reading_is_the_one_best_on_dev_not_on_test(tmp_path):
    import numpy as np

    from alignment_bench.table import Candidate, EflomalResult, Scored, headline_interval

    from nmt_cli.alignment import score_alignments
    from nmt_cli.pharaoh import parse_links

    corpus = _pair_sets(tmp_path, ["0-0"], ["0-0"] * 3)
    gold = [parse_links("0-0")]

    def scored(right: int) -> Scored:
        counts = np.array([[1, 1, right, right]] * 3)
        return Scored([score_alignments(gold * 3, [{(0, 0)} if right else {(1, 1)}] * 3)], counts, "mean")

    eflomal = EflomalResult(None, 1.0, "intersection", scored(1))
    on_dev = Candidate("nmt-cli bootstrap (no external aligner)", "round 2: both directions", 0.1, scored(0))
    on_test = Candidate("nmt-cli plain attention", "tuned: --layer 0", 0.3, scored(1))
    note = headline_interval(corpus, eflomal, [on_test, on_dev])
    assert "is nmt-cli bootstrap (no external aligner), round 2: both directions (0.1000 there)" in note
    assert "its AER is 1.0000 against eflomal intersection's 0.0000" in note
    assert "it excludes 0: eflomal aligns these pairs better than ours" in note


def _sweep_on_fake_models(tmp_path, monkeypatch, seeds: int, guided, choices=None):
    """align_dev_sweep.sweep on ``_pair_sets`` with fake bench models (the bootstrap's plain pair and two
    rounds, and the rows of ``guided``; None: asking for a guided model fails the test), every alignment
    recorded: (the report, the recorder, how many times the bootstrap's models were asked for)."""
    import align_dev_sweep
    from alignment_bench.settings import QUICK, Settings
    from common import Report

    corpus = _pair_sets(tmp_path, ["0-0"] * 3, ["0-0"] * 4)
    recorder = _Recorder()
    plain = [_fake_row(tmp_path, "plain", "both directions", True),
             _fake_row(tmp_path, "plain", "both directions with --agree-heads", True)]
    booted = [_fake_row(tmp_path, "boot", "both directions", True, stage=f"round {number}") for number in (1, 2)]
    bootstraps = []

    def bootstrap_systems(corpus, settings):
        bootstraps.append(corpus)
        return plain, booted

    def guided_model(*args, **kwargs):
        if guided is None:
            raise AssertionError("these choices need no guided model")
        return guided

    monkeypatch.setattr(align_dev_sweep, "bootstrap_systems", bootstrap_systems)
    monkeypatch.setattr(align_dev_sweep, "guided_systems", guided_model)
    monkeypatch.setattr(align_dev_sweep, "guide_links", lambda corpus, settings: guided_model() and tmp_path)
    monkeypatch.setattr(align_dev_sweep, "align_and_score", recorder.aligned)
    settings = Settings(tmp_path, QUICK, threads=1, reuse=True, eflomal_runs=1, systems=(), seeds=seeds)
    report = Report("align_dev_sweep", "t", align_dev_sweep.COLUMNS)
    align_dev_sweep.sweep(report, corpus, settings, *([choices] if choices else []))
    return report, recorder, len(bootstraps)


def test_the_dev_sweep_reads_the_dev_pairs_only(tmp_path, monkeypatch):
    guided = [_fake_row(tmp_path, "guided", "default reading (supervised head)", False),
              _fake_row(tmp_path, "guided", "both directions", True)]
    report, recorder, bootstraps = _sweep_on_fake_models(tmp_path, monkeypatch, 2, guided)
    assert set(recorder.scored) == {"dev pairs"}
    assert bootstraps == 1  # three choices read the bootstrap's models; nmt align bootstrap runs once
    choices = [row[1] for row in report.rows]
    # two plain readings x 5 candidates, two guided pairs x 11, two rounds, shift true/false x 2 readings
    assert len(choices) == 2 * 5 + 2 * 11 + 2 + 2 * 2
    assert sum(row[7] == "yes" for row in report.rows) == 2 + 2 + 1 + 2  # each table marks its default
    assert all(": keep " in note for note in report.notes), report.notes  # all tie: keep every default


def test_the_dev_sweep_makes_only_the_choices_asked_for_and_names_them_in_its_variant(tmp_path, monkeypatch):
    import align_dev_sweep

    report, _, _ = _sweep_on_fake_models(tmp_path, monkeypatch, 1, None, ("plain", "rounds"))
    assert {row[1] for row in report.rows} == {"plain pair: symmetrization", "bootstrap --rounds"}
    assert align_dev_sweep.sweep_variant(None, tuple(align_dev_sweep.CHOICES)) == ""
    assert align_dev_sweep.sweep_variant(10000, ("plain", "rounds")) == "10,000 training steps, choices plain, rounds"
    with pytest.raises(SystemExit):
        align_dev_sweep.main(["--choices", "plain,threshold"])


def test_a_verdict_changes_a_default_only_where_the_dev_interval_excludes_zero():
    import numpy as np

    from align_dev_sweep import verdict
    from alignment_bench.scoring import Aligned

    from nmt_cli.alignment import score_alignments
    from nmt_cli.pharaoh import parse_links

    def aligned(right: int, sentences: int = 25) -> list[Aligned]:
        gold = [parse_links("0-0 1-1")] * sentences
        links = [{(0, 0), (1, 1)} if right == 2 else {(0, 0), (1, 0)}] * sentences
        return [Aligned(score_alignments(gold, links), np.array([[2, 2, right, right]] * sentences), 1.0)]

    assert verdict("x", {"a": aligned(1), "b": aligned(2)}, "a").endswith(
        "dev supports changing the default to b")
    assert verdict("x", {"a": aligned(2), "b": aligned(1)}, "a") == "x: keep a: it has the lowest dev AER (0.0000)"
    close = aligned(1)
    close[0] = Aligned(close[0].score, np.array([[2, 2, 1, 1]] * 24 + [[2, 2, 2, 2]]), 1.0)
    mixed = [Aligned(score_alignments([parse_links("0-0 1-1")] * 25, [{(0, 0), (1, 1)}] + [{(0, 0)}] * 24),
                     np.array([[2, 2, 2, 2]] * 2 + [[2, 2, 1, 1]] * 22 + [[2, 2, 0, 0]]), 1.0)]
    text = verdict("x", {"a": close, "b": mixed}, "a")
    assert "includes 0" in text and text.endswith("dev does not support a change; keep a")


def test_the_reversed_guide_swaps_every_link_of_every_line(tmp_path):
    from alignment_bench.eflomal import write_reversed_guide
    from alignment_bench.settings import CorpusFolders

    folders = CorpusFolders(tmp_path)
    folders.guide.mkdir()
    (folders.guide / "train.align").write_text("0-1 1-2 2-2\n\n3-0\n", encoding="utf-8")
    folder = write_reversed_guide(folders.guide, folders.reversed_guide)
    assert folder == tmp_path / "eflomal-links-reverse"
    assert (folder / "train.align").read_text(encoding="utf-8") == "1-0 2-1 2-2\n\n0-3\n"


def test_reuse_keeps_models_whose_config_differs_only_in_decoding_speed(tmp_path):
    from alignment_bench.settings import QUICK, Settings
    from alignment_bench.training import models_kept

    from nmt_cli.config import Config

    settings = Settings(tmp_path, QUICK, threads=1, reuse=True, eflomal_runs=1, systems=())
    stored = Config().with_overrides({"decode.max_tokens": 6000, "train.max_steps": 12})
    wanted = Config().with_overrides({"decode.max_tokens": 0, "train.max_steps": 12})
    path = tmp_path / "config.yaml"
    path.write_text(stored.to_yaml(), encoding="utf-8")
    assert models_kept(settings, path, wanted)  # a batch budget changes no model and no output
    assert "max_tokens: 0" in path.read_text(encoding="utf-8")  # the new settings are written
    assert not models_kept(settings, path, wanted.with_overrides({"train.max_steps": 13}))
    assert not models_kept(settings, path, wanted.with_overrides({"decode.beam_size": 4}))
    assert not models_kept(Settings(tmp_path, QUICK, 1, reuse=False, eflomal_runs=1, systems=()), path, wanted)


def _finished_run(base: Path, steps: int, made: int) -> None:
    """A kept run of ``steps`` training steps whose newest checkpoint is at step ``made``."""
    from nmt_cli.checkpoint import FORMAT_VERSION
    from nmt_cli.config import Config

    base.mkdir(parents=True)
    config = Config().with_overrides({"train.max_steps": steps})
    (base / "config.yaml").write_text(config.to_yaml(), encoding="utf-8")
    checkpoint = base / "run" / "checkpoints" / f"step-{made:08d}"
    checkpoint.mkdir(parents=True)
    state = {"format": FORMAT_VERSION, "config": config.to_dict(), "step": made, "elapsed_seconds": 5.0}
    (checkpoint / "state.json").write_text(json.dumps(state), encoding="utf-8")
    (checkpoint / "model.safetensors").write_bytes(b"")
    (base / "prepared").mkdir()
    (base / "prepared" / "manifest.json").write_text(json.dumps({"elapsed_seconds": 1.0}), encoding="utf-8")


def test_a_kept_finished_run_is_not_resumed(tmp_path, monkeypatch):
    """Resuming a finished run would add this machine's session to its train.log, which says where it trained."""
    from alignment_bench import training
    from alignment_bench.settings import QUICK, Settings
    from alignment_bench.training import train_model

    from nmt_cli.config import Config

    commands = []
    monkeypatch.setattr(training, "run_step", lambda command, *args, **kwargs: commands.append(command[3:]))
    settings = Settings(tmp_path, QUICK, threads=1, reuse=True, eflomal_runs=1, systems=())
    config = Config().with_overrides({"train.max_steps": 12})
    _finished_run(tmp_path / "done", steps=12, made=12)
    assert train_model(settings, tmp_path / "done", config) == 6.0
    assert [command[0] for command in commands] == ["prepare"]
    commands.clear()
    _finished_run(tmp_path / "half", steps=12, made=6)
    train_model(settings, tmp_path / "half", config)
    assert [command[0] for command in commands] == ["prepare", "train"] and "--restart" not in commands[1]
    commands.clear()
    train_model(settings, tmp_path / "done", config.with_overrides({"train.max_steps": 13}))
    assert commands[1][0] == "train" and commands[1][-1] == "--restart"  # another setting: trained again


def test_training_devices_come_from_each_runs_log(tmp_path):
    from alignment_bench.training import training_devices

    header = "transformer: 10 parameters | 5 training pairs in 1 batches of <= 64 tokens | device {} x 1 | bf16 | {}\n"
    runs = [tmp_path / name / "run" for name in ("gpu", "moved", "cpu", "old")]
    for run in runs:
        run.mkdir(parents=True)
    (runs[0] / "train.log").write_text(header.format("cuda:0", "fresh start") + "step 10/10\n", encoding="utf-8")
    (runs[1] / "train.log").write_text(header.format("cuda:0", "fresh start")
                                       + header.format("cpu", "resuming from step-00000005"), encoding="utf-8")
    (runs[2] / "train.log").write_text(header.format("cpu", "fresh start"), encoding="utf-8")
    assert training_devices(runs + [runs[0]], tmp_path) == (
        "cuda:0 x 1: gpu/run; cuda:0 x 1, then cpu x 1: moved/run; cpu x 1: cpu/run; not recorded: old/run")


def test_a_rows_cells_give_the_mean_over_seeds_or_the_median_over_runs_and_the_range():
    import numpy as np

    from alignment_bench.table import Scored

    from nmt_cli.alignment import score_alignments
    from nmt_cli.pharaoh import parse_links

    gold = [parse_links("0-0 1-1")]
    # AER 0.2 (an extra link on target word 2, which the gold leaves unaligned), 0.5 and 1
    scores = [score_alignments(gold, [links]) for links in ({(0, 0), (1, 1), (0, 2)}, {(0, 0), (0, 1)},
                                                            {(1, 0), (0, 1)})]
    counts = np.array([[2, 2, 1, 1]])
    assert [round(score.aer, 4) for score in scores] == [0.2, 0.5, 1.0]
    # the mean AER, precision and recall over the seeds; the wrong links summed, those on unaligned words apart
    assert Scored(scores[:2], counts, "mean").cells() == ["0.3500 [0.2000, 0.5000]", "0.5833", "0.7500", "1/2 (50%)"]
    assert Scored(scores, counts, "median").cells() == ["0.5000 [0.2000, 1.0000]", "0.5000", "0.5000", "1/4 (25%)"]
    assert Scored(scores[1:2], counts, "mean").cells()[0] == "0.5000"  # one run: no range


def _bench_corpus(tmp_path: Path):
    """The small corpus of :func:`_pair_sets` under the synthetic corpus's name (the scale's steps are keyed by it)."""
    from dataclasses import replace

    return replace(_pair_sets(tmp_path, ["0-0"] * 3, ["0-0"] * 4), name="synthetic")


def test_each_seed_bootstraps_its_own_models_and_a_row_holds_every_seeds_system(tmp_path, monkeypatch):
    from alignment_bench import training
    from alignment_bench.settings import QUICK, Settings
    from alignment_bench.systems import bootstrap_systems

    from nmt_cli.config import load_config

    commands = []

    def bootstrapped(command, log, settings, stdout=None):  # the record `nmt align bootstrap` leaves
        commands.append([str(part) for part in command[3:]])
        folder = Path(command[command.index("--out") + 1])
        folder.mkdir(parents=True)
        stages = ["forward", "reverse", "links", "guided", "guided-reverse", "links-2", "guided-2", "guided-reverse-2"]
        (folder / "bootstrap.json").write_text(json.dumps({"stages": {name: {"seconds": 1.0} for name in stages}}))

    monkeypatch.setattr(training, "run_step", bootstrapped)
    settings = Settings(tmp_path / "work", QUICK, threads=1, reuse=False, eflomal_runs=1, systems=(), seeds=2)
    plain, booted = bootstrap_systems(_bench_corpus(tmp_path), settings)
    work = tmp_path / "work" / "synthetic"
    assert [command[command.index("--out") + 1] for command in commands] == [
        str(work / "bootstrap"), str(work / "bootstrap-seed2")]
    assert all(command[command.index("--rounds") + 1] == "2" for command in commands)
    assert [load_config(work / f"bootstrap{suffix}.yaml").train.seed for suffix in ("", "-seed2")] == [1, 2]
    assert len(plain) == 3 and len(booted) == 2 * 2  # three plain readings; each round alone and as a pair
    for row in plain + booted:
        assert [system.label for system in row] == [row[0].label] * 2
        assert [system.checkpoint.parts[-3] for system in row] == ["bootstrap", "bootstrap-seed2"]
    assert [system.reverse for system in booted[3]] == [
        work / folder / "guided-reverse-2" / "run" for folder in ("bootstrap", "bootstrap-seed2")]
    assert booted[3][0].seconds == 8.0 and booted[1][0].seconds == 5.0  # every stage before the row's own


def test_the_guided_ensemble_row_aligns_with_every_seeds_pair(tmp_path, monkeypatch):
    from alignment_bench import systems
    from alignment_bench.settings import QUICK, Settings

    trained = {}

    def train_model(settings, base, config):
        trained[base.name] = config
        return 2.0

    monkeypatch.setattr(systems, "train_model", train_model)
    settings = Settings(tmp_path / "work", QUICK, threads=1, reuse=False, eflomal_runs=1, systems=(), seeds=2)
    guide = tmp_path / "work" / "synthetic" / "eflomal-links"
    guide.mkdir(parents=True)
    (guide / "train.align").write_text("0-1\n", encoding="utf-8")
    rows = systems.guided_systems(_bench_corpus(tmp_path), settings, guide, eflomal_seconds=10.0)
    assert {name: config.train.seed for name, config in trained.items()} == {
        "guided-eflomal": 1, "guided-eflomal-reverse": 1, "guided-eflomal-seed2": 2, "guided-eflomal-reverse-seed2": 2}
    assert trained["guided-eflomal-reverse-seed2"].data.alignment_path.endswith("eflomal-links-reverse")
    assert [len(row) for row in rows] == [2, 2, 1]  # each reading over the two seeds, then the ensemble
    (ensemble,) = rows[2]
    assert ensemble.seconds == 10.0 + 4 * 2.0
    options = [str(option) for option in ensemble.align_options(None)]
    work = tmp_path / "work" / "synthetic"
    assert options == ["--checkpoint", str(work / "guided-eflomal" / "run"),
                       "--checkpoint", str(work / "guided-eflomal-seed2" / "run"),
                       "--reverse-checkpoint", str(work / "guided-eflomal-reverse" / "run"),
                       "--reverse-checkpoint", str(work / "guided-eflomal-reverse-seed2" / "run")]
