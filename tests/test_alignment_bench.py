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


@pytest.mark.slow
def test_quick_bench_prints_a_row_per_system(tmp_path):
    report_path = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "align_quality.py"), "--quick", "--work", str(tmp_path),
         "--json", str(report_path), "--threads", "1", "--steps", "12", "--device", "cpu", "--seeds", "2"],
        capture_output=True, text=True, timeout=900,  # about 300 s on 2 idle cores of an AVX2-only CPU
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(report_path.read_text(encoding="utf-8"))
    rows = {(row[0], row[1], row[2]): dict(zip(report["columns"], row)) for row in report["rows"]}
    ours = rows[("synthetic", "nmt-cli plain attention", "default reading (last layer, heads averaged)")]
    assert 0.0 <= float(ours["AER"]) <= 1.0 and float(ours["time s"]) > 0
    on_unaligned, wrong = map(int, ours["wrong links on unaligned words"].split(" ")[0].split("/"))
    assert 0 <= on_unaligned <= wrong
    both = rows[("synthetic", "nmt-cli plain attention", "both directions, grow-diag-final-and (nmt align's defaults)")]
    assert 0.0 <= float(both["AER"]) <= 1.0
    agreed = rows[("synthetic", "nmt-cli plain attention",
                   "both directions with --agree-heads, grow-diag-final-and (nmt align's default symmetrization)")]
    assert 0.0 <= float(agreed["AER"]) <= 1.0 and agreed["BLEU test2016 (greedy)"] == "-"
    assert any(setting.startswith("tuned: both directions with --agree-heads, --symmetrize ")
               for (_, _, setting) in rows)
    booted = "nmt-cli bootstrap (no external aligner)"
    for round_number in (1, 2):
        alone = rows[("synthetic", booted, f"round {round_number}: default reading (supervised head)")]
        assert 0.0 <= float(alone["AER"]) <= 1.0 and float(alone["time s"]) > 0
        # each round's tuned row is its own (the two readings may well be the same options)
        assert any(setting.startswith(f"tuned: round {round_number}: --layer ") for (_, _, setting) in rows)
    first_pair = rows[("synthetic", booted, "round 1: both directions, average > 0.4 (default readings)")]
    booted_pair = rows[("synthetic", booted, "round 2: both directions, average > 0.4 "
                                             "(default readings; the aligner the command names)")]
    # times add up each row's own stages plus its alignment, whose few seconds vary more than a tiny
    # model's training: rows are not compared by time here, only checked to be counted
    assert float(booted_pair["time s"]) > 0 and booted_pair["BLEU test2016 (greedy)"] == "-"
    assert 0.0 <= float(first_pair["AER"]) <= 1.0
    assert any(system == booted and setting.startswith("tuned: round 2: both directions, --symmetrize ")
               for (_, system, setting) in rows)
    masked = rows[("synthetic", "nmt-cli Mask-Align (no external aligner)",
                   "both directions, grow-diag-final-and (nmt align's defaults)")]
    assert 0.0 <= float(masked["AER"]) <= 1.0 and masked["BLEU test2016 (greedy)"] == "-"
    assert (tmp_path / "align_quality" / "quick" / "synthetic" / "mask-align-reverse" / "run").is_dir()
    symmetrized = [row for (corpus, system, setting), row in rows.items()
                   if setting.startswith("tuned: both directions, --symmetrize ")]
    assert {row["system"] for row in symmetrized} >= {"nmt-cli plain attention",
                                                      "nmt-cli Mask-Align (no external aligner)"}
    heuristics = ("intersection", "grow-diag", "grow-diag-final", "grow-diag-final-and")
    for (corpus, system, setting), row in rows.items():
        if "both directions, --symmetrize " in setting:
            picked = setting.split("both directions, --symmetrize ")[1].split(" (picked")[0]
            assert picked in heuristics or picked == "average --average-threshold 0.4", setting
    tried = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(
        (tmp_path / "align_quality" / "quick" / "synthetic" / "scores").glob("*/symmetrize-*/settings.json"))]
    averaged = [settings for settings in tried if settings["symmetrization"] == "average"]
    # every both-directions system tries the four heuristics and the average at the default threshold
    assert len(tried) == 5 * len(averaged) and averaged
    assert all(settings["average_threshold"] == 0.4 for settings in averaged)
    tuned = [row for (corpus, system, setting), row in rows.items() if setting.startswith("tuned: --layer")]
    assert tuned and all(row["pairs"] == "test 1-30" for row in tuned)
    work = tmp_path / "align_quality" / "quick" / "synthetic"
    stages = json.loads((work / "bootstrap" / "bootstrap.json").read_text(encoding="utf-8"))["stages"]
    assert list(stages) == ["forward", "reverse", "links", "guided", "guided-reverse", "links-2", "guided-2",
                            "guided-reverse-2"]
    assert "max_steps: 2\n" in (work / "bootstrap" / "guided-2" / "run" / "config.yaml").read_text(encoding="utf-8")
    assert (work / "bootstrap" / "reverse" / "run").is_dir() and (work / "bootstrap" / "links" / "train.align").is_file()
    usable, label = availability("eflomal")
    if usable:
        for reading in ("forward", "reverse", "grow-diag-final"):
            assert 0.0 <= float(rows[("synthetic", label, reading)]["AER"]) <= 1.0
        guided = rows[("synthetic", "nmt-cli guided by eflomal", "default reading (supervised head)")]
        assert guided["AER / eflomal's best symmetrized"].endswith("x")
        both_guided = rows[("synthetic", "nmt-cli guided by eflomal",
                            "both directions, average > 0.4 (nmt align's defaults)")]
        assert 0.0 <= float(both_guided["AER"]) <= 1.0 and float(both_guided["time s"]) > 0
        assert (work / "eflomal-links" / "train.align").is_file()
        assert (work / "guided-eflomal-reverse" / "run").is_dir()
        ensemble = rows[("synthetic", "nmt-cli guided by eflomal",
                         "ensemble of 2 seeds per direction, both directions, average > 0.4 (nmt align's defaults)")]
        assert 0.0 <= float(ensemble["AER"]) <= 1.0 and float(ensemble["time s"]) > 0
        assert "train.seed 1-2" in " ".join(report["notes"])
        spread = next(note for note in report["notes"] if note.startswith("synthetic: eflomal's AER"))
        forward_aer = rows[("synthetic", label, "forward")]["AER"]
        assert f"over its 1 run(s), lowest-highest: forward {forward_aer}-{forward_aer}, " in spread
        assert any(setting.startswith("tuned: ensemble of 2 seeds per direction, both directions, --symmetrize ")
                   for (_, _, setting) in rows)
        seed2 = work / "guided-eflomal-reverse-seed2" / "run" / "config.yaml"
        assert "\n  seed: 2\n" in seed2.read_text(encoding="utf-8")
        aligned = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(
            (work / "scores").glob("*/default/settings.json"))]
        members = [(len(s.get("ensemble", [])), len(s.get("reverse_ensemble", []))) for s in aligned]
        assert members.count((2, 2)) == 1  # the ensemble row's models, both directions
    else:
        assert ("synthetic", "eflomal", label) in rows
        assert not (work / "guided-eflomal-seed2").exists()
    assert "| synthetic | nmt-cli plain attention |" in done.stdout
    assert any("training steps: synthetic 12; 1 thread(s) per step; this run trains, aligns and translates on "
               "device cpu" in note for note in report["notes"])
    assert report["variant"] == "12 training steps"  # not --quick's 10: a section of its own in BENCHMARKS.md
    trained = next(note for note in report["notes"] if note.startswith("where each model trained"))
    assert "cpu x 1: synthetic/bootstrap/forward/run, synthetic/bootstrap/reverse/run" in trained
    assert "max_steps: 12" in (work / "bootstrap" / "reverse" / "run" / "config.yaml").read_text(encoding="utf-8")


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


def test_the_eflomal_note_gives_each_readings_lowest_and_highest_aer_over_its_runs(tmp_path):
    from alignment_bench.corpora import BenchCorpus, GoldSet
    from alignment_bench.eflomal import EflomalReading
    from alignment_bench.table import eflomal_spread

    test = GoldSet(tmp_path / "t.de", tmp_path / "t.en", tmp_path / "t.gold", "1-50")
    corpus = BenchCorpus("multi30k", tmp_path, test, test, test, None)
    results = {"forward": EflomalReading([], 18.0, [0.2, 0.19, 0.21]),
               "intersection": EflomalReading([], 18.0, [0.1874, 0.1967, 0.1803])}
    assert eflomal_spread(corpus, results) == ("multi30k: eflomal's AER on pairs 1-50 over its 3 run(s), "
                                                "lowest-highest: forward 0.1900-0.2100, intersection 0.1803-0.1967")


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

    settings = Settings(tmp_path, QUICK, threads=1, reuse=True, repeats=1, systems=())
    stored = Config().with_overrides({"decode.max_tokens": 6000, "train.max_steps": 12})
    wanted = Config().with_overrides({"decode.max_tokens": 0, "train.max_steps": 12})
    path = tmp_path / "config.yaml"
    path.write_text(stored.to_yaml(), encoding="utf-8")
    assert models_kept(settings, path, wanted)  # a batch budget changes no model and no output
    assert "max_tokens: 0" in path.read_text(encoding="utf-8")  # the new settings are written
    assert not models_kept(settings, path, wanted.with_overrides({"train.max_steps": 13}))
    assert not models_kept(settings, path, wanted.with_overrides({"decode.beam_size": 4}))
    assert not models_kept(Settings(tmp_path, QUICK, 1, reuse=False, repeats=1, systems=()), path, wanted)


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
    settings = Settings(tmp_path, QUICK, threads=1, reuse=True, repeats=1, systems=())
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
