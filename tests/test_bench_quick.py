"""The bench scripts in ``--quick`` mode, so they cannot rot.

Our side always runs (tiny Multi30k slice, a few steps). Peer runs take a minute or more
each on 2 cores, so they are opt-in (``NMT_BENCH_PEERS=1``) and skipped, with the reason,
when the peer is not installed (``python bench/peers/install.py``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

from peers.install import availability  # noqa: E402  (bench/ is not a package)

from nmt_cli.models.packed import can_pack  # noqa: E402
from nmt_cli.precision import cpu_has_native_bf16  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, multi30k: Path) -> Path:
    """One scratch folder per module, so the prepared Multi30k slice is built once."""
    return tmp_path_factory.mktemp("bench")


def run_bench(script: str, work: Path, *options: str) -> dict:
    """Run ``bench/<script>.py --quick`` and return its JSON report."""
    report = work / f"{script}.json"
    done = subprocess.run([sys.executable, str(BENCH / f"{script}.py"), "--quick", "--work", str(work),
                           "--json", str(report), *options], capture_output=True, text=True, cwd=REPO,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert any(f"| {first} |" in done.stdout for first in ("toolkit", "system", "shape", "layout", "heads x d_k",
                                                           "precision", "teacher"))  # the table is printed
    return json.loads(report.read_text())


def rows_by(report: dict, column: str) -> dict[str, dict[str, str]]:
    index = report["columns"].index(column)
    return {row[index]: dict(zip(report["columns"], row)) for row in report["rows"]}


def figure(cell: str) -> float:
    return float(cell.replace(",", ""))


def half_unit(cell: str) -> float:
    """Half a unit of the last printed digit of a figure: how far rounding may have moved it."""
    return 0.5 * 10.0 ** -len(cell.partition(".")[2])


def test_train_speed_quick_reports_our_throughput_and_memory(work: Path) -> None:
    report = run_bench("train_speed", work, "--peers", "none", "--models", "tiny")
    assert report["script"] == "train_speed" and report["quick"] is True
    assert report["variant"] == "models tiny"  # a subset: a section of its own, beside the full table
    ours = rows_by(report, "toolkit")["nmt-cli"]
    assert figure(ours["tgt tok/s"]) > 0
    assert 0 < figure(ours["tgt tok/update"]) <= figure(ours["max tokens"])  # target tokens within the padded budget
    assert 50 < figure(ours["peak RSS MB"]) < 4000
    assert 500_000 < figure(ours["parameters"]) < 3_000_000  # the ~1M-parameter tiny Transformer
    assert ours["nmt-cli / toolkit"] == "-"  # no peer measured in this run, so no ratio
    achieved, share = ours["matmul GFLOP/s (of peak)"].rstrip("%)").split(" (")
    assert figure(achieved) > 0 and 0 < figure(share) <= 100
    (flops_note,) = [note for note in report["notes"] if "MFLOP of matrix products per target token" in note]
    assert "fp32 matmul peak" in flops_note


def test_train_levers_quick_times_every_lever_against_the_shipped_update(work: Path) -> None:
    report = run_bench("train_levers", work, "--repeats", "2")
    assert report["script"] == "train_levers" and report["variant"] == ""
    rows = rows_by(report, "lever")
    shipped = rows["as shipped"]
    assert shipped["against as shipped"] == "1.00x" and shipped["worth taking"] == "shipped"
    assert {"model layers: OpenBLAS", "loss blocks of 2^20 logits"} <= set(rows)
    assert "torch.compile" not in rows  # its warm-up takes minutes: not in --quick
    assert "large layers: MKL" not in rows  # the tiny Transformer has no layer that training packs
    assert "large layers: oneDNN" not in rows  # nor one it would pack on another CPU
    assert len([name for name in rows if name.startswith("loss products: ")]) == int(can_pack(torch.device("cpu")))
    shipped_rate = figure(shipped["tgt tok/s (range)"].split(" (")[0])
    for name, row in rows.items():
        rate, spread = row["tgt tok/s (range)"].rstrip(")").split(" (")
        low, high = (figure(cell) for cell in spread.split("-"))
        assert 0 < low <= figure(rate) <= high
        assert figure(row["first pass s"]) > 0
        if name != "as shipped":  # the ratio of the medians, then the interval of the two rounds' ratios
            ratio, interval = row["against as shipped"].split(" (")
            assert figure(ratio.rstrip("x")) == pytest.approx(figure(rate) / shipped_rate, abs=0.01)
            assert interval.endswith("x, 50%)")  # two rounds: their whole range, at 1 - 2^(1-2)
            assert row["worth taking"] in ("yes: faster", "no: slower", "no: within noise")


def test_train_profile_quick_splits_an_update_into_parts_that_add_up(work: Path) -> None:
    report = run_bench("train_profile", work, "--models", "tiny", "--threads", "1")
    assert report["script"] == "train_profile" and report["variant"] == "1 thread, models tiny"
    rows = [dict(zip(report["columns"], row)) for row in report["rows"]]
    parts = [row for row in rows if row["share"] and row["part"] != "whole update"
             and not row["part"].startswith(("ceiling", "target"))]
    names = {row["part"] for row in parts}
    assert {"matrix products (mm, addmm, bmm)", "Python and dispatch (wall time outside every operator)"} <= names
    assert any(name.startswith("attention") for name in names) and any(name.startswith("loss") for name in names)
    # the parts share out the profiled update: their shares add up to the whole of it
    assert abs(sum(figure(row["share"].rstrip("%")) for row in parts) - 100) <= len(parts)
    products = next(row for row in parts if row["part"].startswith("matrix products"))
    assert figure(products["ms / update"]) > 0
    whole = next(row for row in rows if row["part"] == "whole update")
    assert "tgt tok/s" in whole["note"] and figure(whole["ms / update"]) > 0
    (rate,) = [row for row in rows if row["part"] == "products in training: rate reached"]
    assert "% of peak" in rate["note"]
    # the products apart: the output layer's (the loss's) and the rest share out the products' time and FLOPs
    output_layer, model_layers = (next(row for row in rows if row["part"].startswith(f"products in training: {name}"))
                                  for name in ("the output layer's", "the model's layers"))
    assert figure(output_layer["ms / update"]) > 0 and figure(model_layers["ms / update"]) > 0
    assert figure(output_layer["ms / update"]) + figure(model_layers["ms / update"]) == pytest.approx(
        figure(products["ms / update"]), abs=0.15)
    gflop = [float(row["note"].split(" GFLOP (")[0]) for row in (output_layer, model_layers)]
    ceiling = next(row for row in rows if row["part"].startswith("ceiling: products at the peak"))
    assert sum(gflop) == pytest.approx(float(ceiling["note"].split(" GFLOP per update")[0]), rel=0.01)
    assert "GFLOP/s in training; alone at their own shapes' rates" in output_layer["note"]
    # the products timed call by call in training and alone, like for like
    (call_by_call,) = [row for row in rows if row["part"] == "products in training, call by call"]
    assert figure(call_by_call["ms / update"]) > 0
    alone = float(call_by_call["note"].split("median of 5): ")[1].split(" ms")[0])
    assert alone > 0 and "in training they take" in call_by_call["note"]
    # issue 57's 70% target: the update it allows, and what that leaves beside the products
    (target,) = [row for row in rows if row["part"] == "target: products at 70% of peak over the whole update"]
    at_peak = figure(next(row for row in rows if row["part"].startswith("ceiling: products at the peak"))["ms / update"])
    assert figure(target["ms / update"]) == pytest.approx(at_peak / 0.7, rel=0.01, abs=0.1)
    assert "out of reach at these shapes" in target["note"] or "for everything else, which takes" in target["note"]


def test_translate_speed_quick_reports_equal_work_rows(work: Path) -> None:
    report = run_bench("translate_speed", work, "--peers", "none", "--ours", "transformer,shipped,int8,ctranslate2",
                       "--beams", "5", "--batches", "32,64")
    table = [dict(zip(report["columns"], row)) for row in report["rows"]]
    names = {"nmt-cli Transformer", "nmt-cli Transformer int8", "CTranslate2 float32, 2 inter x 1 intra",
             "CTranslate2 float32, 1 inter x 2 intra", "CTranslate2 int8, 1 inter x 1 intra",
             "nmt-cli Transformer, shipped defaults"}
    for batch in ("32", "64"):  # every system at each batch size, compared with CTranslate2 at the same one
        rows = {row["system"]: row for row in table if row["batch"] == batch}
        assert names <= set(rows)
        # each weight type against CTranslate2 at the same type; the shipped defaults do other work: no ratio
        assert rows["CTranslate2 float32, 2 inter x 1 intra"]["vs CT2 (same weights)"] == "1.00x"
        assert rows["CTranslate2 int8, 2 inter x 1 intra"]["vs CT2 (same weights)"] == "1.00x"
        assert rows["nmt-cli Transformer, shipped defaults"]["vs CT2 (same weights)"] == "-"
        # the CTranslate2 rows decode our own exported Transformer: the float32 outputs are ours
        assert rows["CTranslate2 float32, 2 inter x 1 intra"]["output pieces"] == rows["nmt-cli Transformer"]["output pieces"]
    # the same model and rule give the same outputs in batches of any size
    ours = {row["batch"]: row["output pieces"] for row in table if row["system"] == "nmt-cli Transformer"}
    assert ours["32"] == ours["64"]
    for row in (row for row in table if row["system"] != "nmt-cli Transformer, shipped defaults"):
        tokens_per_second, sentences_per_second = figure(row["out tok/s"]), figure(row["sent/s"])
        assert tokens_per_second > 0
        # 100 test sentences, each output at most 16 pieces: tokens/s <= 16 x sentences/s, up to the
        # rounding of the printed figures (half a unit of their last digit)
        assert tokens_per_second - half_unit(row["out tok/s"]) <= 16 * (sentences_per_second
                                                                       + half_unit(row["sent/s"]))
        assert 0 < figure(row["output pieces"]) <= 1600
        assert 0 <= figure(row["at limit"].rstrip("%")) <= 100 and figure(row["BLEU"]) >= 0


def test_engine_ratio_quick_compares_engines_on_forced_equal_work(work: Path) -> None:
    report = run_bench("engine_ratio", work)
    rows = {row[1]: dict(zip(report["columns"], row)) for row in report["rows"]}
    assert set(rows) == {"torch fp32", "torch int8", "CTranslate2 float32", "CTranslate2 int8"}
    assert all(figure(row["out tok/s (CPU time)"]) > 0 for row in rows.values())
    # each engine against CTranslate2 at its own weight type
    assert rows["CTranslate2 float32"]["vs CTranslate2, same weights"] == "1.00x"
    assert rows["CTranslate2 int8"]["vs CTranslate2, same weights"] == "1.00x"
    for torch_row, base in (("torch fp32", "CTranslate2 float32"), ("torch int8", "CTranslate2 int8")):
        ratio = figure(rows[torch_row]["sent/s (CPU time)"]) / figure(rows[base]["sent/s (CPU time)"])
        assert figure(rows[torch_row]["vs CTranslate2, same weights"].rstrip("x")) == pytest.approx(ratio, rel=0.1)


def test_shortlist_speed_quick_compares_each_engine_with_and_without_its_shortlist(work: Path) -> None:
    report = run_bench("shortlist_speed", work)
    rows = {(row[1], row[2]): dict(zip(report["columns"], row)) for row in report["rows"]}
    engines = {"torch fp32", "torch int8", "CTranslate2 int8"}
    assert {beam for beam, _ in rows} == {"1", "5"} and {name.split(" + ")[0] for _, name in rows} == engines
    for (beam, name), row in rows.items():
        assert figure(row["out tok/s (CPU time)"]) > 0
        if " + " in name:  # each shortlisted row against its engine without
            base = figure(rows[(beam, name.split(" + ")[0])]["out tok/s (CPU time)"])
            ratio = figure(row["out tok/s (CPU time)"]) / base
            assert figure(row["vs the same engine without"].rstrip("x")) == pytest.approx(ratio, rel=0.1)
    assert any("load average when measured" in note for note in report["notes"])


def test_distill_quality_quick_puts_every_student_row_beside_its_teacher(work: Path) -> None:
    # --stages-only: the teacher, the distillation and the export, no timed rows and no report
    json_path = work / "distill_quality-stages.json"
    done = subprocess.run([sys.executable, str(BENCH / "distill_quality.py"), "--quick", "--stages-only", "--work",
                           str(work), "--json", str(json_path)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    root = work / "distill_quality-quick" / "multi30k"
    assert "multi30k: stages done under" in done.stdout and not json_path.exists()
    assert not (root / "translations").exists()  # nothing timed or scored
    loads = json.loads((root / "stage_loads.json").read_text())
    assert set(loads) == {"teacher", "distill", "teacher export", "distill linear"}
    assert all(len(runs) == 1 and len(runs[0]) == 2 for runs in loads.values())
    teacher_marker = (root / "teacher.json").stat().st_mtime_ns
    report = run_bench("distill_quality", work)
    # the second run reuses every stage: the teacher is not trained again, no stage runs again
    assert (root / "teacher.json").stat().st_mtime_ns == teacher_marker
    assert json.loads((root / "stage_loads.json").read_text())["teacher"] == loads["teacher"]
    rows = [dict(zip(report["columns"], row)) for row in report["rows"]]
    assert all(row["teacher"] == "multi30k" for row in rows)
    teacher = {row["engine"]: row for row in rows if row["model"] == "teacher"}
    assert set(teacher) == {"torch float32", "CTranslate2 int8"} and {row["beam"] for row in teacher.values()} == {"5"}
    assert {row["shortlist"] for row in teacher.values()} == {"no"}
    students = {(row["engine"], row["shortlist"]): row for row in rows if row["model"] == "student"}
    assert set(students) == {("torch float32", "no"), ("torch int8", "no"), ("torch int8", "yes"),
                             ("CTranslate2 int8", "no"), ("CTranslate2 int8", "vocabulary map (batch scope)")}
    assert {row["beam"] for row in students.values()} == {"1"}  # --quick: the student greedy only
    # the linear-decoder student of the same corpus: torch rows only (CTranslate2 runs softmax Transformers)
    linear = {(row["engine"], row["shortlist"]): row for row in rows if row["model"] == "student, linear decoder"}
    assert set(linear) == {("torch float32", "no"), ("torch int8", "no"), ("torch int8", "yes")}
    linear_record = json.loads((root / "distill-linear" / "distill.json").read_text())
    assert {name: "reused_from" in stage for name, stage in linear_record["stages"].items()} == {
        "translate": True, "filter": True, "shortlist": True, "prepare": False, "train": False, "average": False,
        "export": False}
    base = figure(teacher["torch float32"]["out tok/s"])
    for row in rows:
        assert figure(row["out tok/s"]) > 0 and figure(row["sent/s"]) > 0
        assert 0 <= figure(row["BLEU"]) <= 100 and 0 <= figure(row["chrF"]) <= 100
        assert 0 <= figure(row["dev BLEU"]) <= 100 and 0 <= figure(row["at limit"].rstrip("%")) <= 100
        if row is not teacher["torch float32"]:  # by output tokens/s, the sentence rate's ratio in brackets
            assert figure(row["vs teacher torch fp32"].split("x")[0]) == pytest.approx(
                figure(row["out tok/s"]) / base, rel=0.05, abs=0.01)
    # the int8 export is smaller than the float32 checkpoint it came from, for the teacher and the student
    assert figure(teacher["CTranslate2 int8"]["size MB"]) < figure(teacher["torch float32"]["size MB"])
    student_sizes = [figure(students[key]["size MB"]) for key in (("CTranslate2 int8", "no"), ("torch float32", "no"))]
    assert student_sizes[0] < student_sizes[1]
    notes = "\n".join(report["notes"])
    assert "multi30k: teacher = recipes/multi30k-transformer.yaml's averaged model" in notes
    teacher_note = next(note for note in report["notes"] if note.startswith("multi30k: teacher = "))
    assert all(f"{stage} " in teacher_note.split("nmt distill's stages: ")[1] for stage in (
        "translate", "filter", "shortlist", "prepare", "train", "average", "export"))
    # the best setting is chosen on dev, or the note says none came within the budget
    assert "fastest setting within 1.0 BLEU of the teacher on dev" in notes or "no student setting came" in notes
    assert "multi30k: 1-minute load average at the start and end of the stages' runs: teacher " in notes
    assert "multi30k: student, linear decoder against the softmax student, on test: torch float32 beam 1: BLEU" in notes


def test_soft_npz_memory_quick_shows_the_blocks_memory_bounded_and_the_per_pair_index_growing(work: Path) -> None:
    report = run_bench("soft_npz_memory", work)
    rows = [dict(zip(report["columns"], row)) for row in report["rows"]]
    blocks = [row for row in rows if row["layout"].startswith("blocks")]
    entries = [row for row in rows if row["layout"].startswith("4 entries")]
    # six entries a block of 2,000 pairs against four a pair, and the settings
    assert [figure(row["zip entries"]) for row in blocks] == [6 * figure(row["pairs"]) / 2000 + 1 for row in blocks]
    assert [figure(row["zip entries"]) for row in entries] == [4 * figure(row["pairs"]) + 1 for row in entries]
    # four times the pairs: the blocks' peak stays that of a block, the per-pair index grows with them
    assert figure(blocks[1]["peak memory (MiB)"]) <= 1.2 * figure(blocks[0]["peak memory (MiB)"])
    assert figure(entries[1]["peak memory (MiB)"]) >= 2 * figure(entries[0]["peak memory (MiB)"])
    assert any("Load average" in note for note in report["notes"])


def test_attention_kernels_quick_times_both_kernels_and_says_which_one_attention_takes(work: Path) -> None:
    from nmt_cli.models.attention.multihead import EXPLICIT_MAX_KEYS

    report = run_bench("attention_kernels", work)
    rows = [dict(zip(report["columns"], row)) for row in report["rows"]]
    assert {(row["heads x d_k"], row["keys (L)"], row["attention"]) for row in rows} == {
        (heads, length, kind) for heads in ("4 x 32 (tiny)", "8 x 64 (base)") for length in ("16", "128")
        for kind in ("masked", "causal")}
    for row in rows:
        fused, explicit = figure(row["fused ms"]), figure(row["explicit ms"])
        assert fused > 0 and explicit > 0
        assert abs(figure(row["explicit / fused"]) - explicit / fused) <= 0.005 + 0.01 * explicit / fused
        expected = "explicit" if int(row["keys (L)"]) <= EXPLICIT_MAX_KEYS else "fused"
        assert row["SoftmaxAttention takes"].split()[0] == expected
        if explicit != fused:  # printed figures that tie may hide which one was faster
            slower = (explicit < fused) != (expected == "explicit")
            assert row["SoftmaxAttention takes"].endswith("(the slower here)") == slower
    assert any(f"EXPLICIT_MAX_KEYS = {EXPLICIT_MAX_KEYS}" in note for note in report["notes"])


def test_bf16_qualitys_held_out_test_pairs_the_two_precisions_sentence_by_sentence() -> None:
    from bf16_quality import held_out_test

    references = [f"a small dog number {n} runs across the green grass" for n in range(60)]
    scores = re.compile(r"fp32 ([0-9.]+) .*bf16 ([0-9.]+) .*difference ([-+0-9.]+), p = ([0-9.]+)$")
    one_word_less = [line.replace(" green", "") if n == 3 else line for n, line in enumerate(references)]
    fp32, bf16, difference, p_value = map(float, scores.search(held_out_test(1, references, one_word_less,
                                                                              references)).groups())
    assert fp32 == 100.0 and bf16 < 100.0 and difference == round(bf16 - fp32, 2) and p_value > 0.05
    halves = [" ".join(line.split()[:4]) for line in references]  # bf16 loses the second half of every sentence
    fp32, bf16, _, p_value = map(float, scores.search(held_out_test(2, references, halves, references)).groups())
    assert bf16 < 50 and p_value < 0.01
    assert held_out_test(3, references, list(references), references) == (
        "seed 3: the same translations from both precisions (BLEU 100.00)")  # no p-value for no difference


def test_bf16_quality_quick_compares_the_precisions_on_the_same_batches_and_decides_by_validation(work: Path) -> None:
    from nmt_cli.precision import cpu_has_native_bf16

    report = run_bench("bf16_quality", work, "--seeds", "1")
    if not cpu_has_native_bf16():  # nothing to compare: the script says why and trains nothing
        assert report["rows"] == [] and any("no bf16 units" in note for note in report["notes"])
        return
    rows = rows_by(report, "precision")
    assert set(rows) == {"fp32", "bf16"}
    assert rows["fp32"]["tgt tok/update"] == rows["bf16"]["tgt tok/update"]  # one seed, the same batches
    curves = {}
    for precision, row in rows.items():
        assert row["seed"] == "1" and row["updates"] == "4"
        curves[precision] = dict(point.split(": ") for point in row["validation BLEU by update"].split(", "))
        assert list(curves[precision]) == ["2", "4"]  # validated at every --valid-every, the last update included
        assert 0 <= figure(row["test2016 BLEU (beam 5)"]) <= 100 and 0 < figure(row["chrF"]) <= 100
        assert figure(row["tgt tok/s"]) > 0
    (decision,) = [note for note in report["notes"] if note.startswith("Decision (dev)")]
    fp32, bf16 = (float(re.search(rf"{name} (-?[0-9.]+)", decision).group(1)) for name in ("fp32", "bf16"))
    assert (fp32, bf16) == (float(curves["fp32"]["4"]), float(curves["bf16"]["4"]))  # the last update's validation
    assert ("bf16 reaches fp32." if bf16 >= fp32 - 0.3 else "bf16 falls short.") in decision
    for precision, row in rows.items():
        assert f"{precision} {row['validation loss']}" in decision.split("Mean validation loss")[1]
    (held_out,) = [note for note in report["notes"] if note.startswith("Held out")]
    paired = held_out.split("Paired bootstrap within each seed")[1]
    for precision, row in rows.items():  # each seed's test scores, tested against each other
        assert f"{precision} {row['test2016 BLEU (beam 5)']} (+/- " in paired
    assert re.search(r"seed 1: .*, p = [01]\.[0-9]{3}\.$", paired)
    (picture_note,) = [note for note in report["notes"] if note.startswith("Picture")]
    picture = Path(re.search(r"`(.+)`", picture_note).group(1))
    assert picture == work / "bf16_quality-quick" / "bf16_quality.png" and picture.read_bytes().startswith(b"\x89PNG")
    again = run_bench("bf16_quality", work, "--seeds", "1")  # finished runs and scores reused
    assert again["rows"] == report["rows"]
    assert any(note.startswith("trained by an earlier run under --work and reused") for note in again["notes"])


def test_decode_profile_quick_splits_the_decode_into_parts_and_states_the_ceiling(work: Path) -> None:
    report = run_bench("decode_profile", work)
    rows = {row[1]: dict(zip(report["columns"], row)) for row in report["rows"] if row[0] == "tiny"}
    parts = [row for name, row in rows.items() if not name.startswith(("whole", "ceiling", "CTranslate2", "kernel"))]
    whole = figure(rows["whole decode"]["seconds"])
    timed = float(re.search(r"with the timers: ([0-9.]+) s", rows["whole decode"]["note"]).group(1))
    assert len(parts) == 9 and whole > 0
    # the parts take the timed decode apart: they add up to its wall time (to the rounding of each)
    assert abs(sum(figure(row["seconds"]) for row in parts) - timed) <= 0.0005 * len(parts) + 0.001
    ceiling = rows["ceiling: Linear FLOPs at the packed product's best rate, nothing else"]
    assert 0 < figure(ceiling["seconds"]) < whole
    assert any(name.startswith("kernel:") and "packed (oneDNN)" in row["note"] for name, row in rows.items())
    real = {row[1]: dict(zip(report["columns"], row)) for row in report["rows"] if row[0] == "trained tiny, real text"}
    parts_names = {name for name, row in rows.items() if row in parts}
    real_parts = [row for name, row in real.items() if name in parts_names]
    timed = float(re.search(r"with the timers: ([0-9.]+) s", real["whole decode"]["note"]).group(1))
    assert len(real_parts) == 9
    assert abs(sum(figure(row["seconds"]) for row in real_parts) - timed) <= 0.0005 * len(real_parts) + 0.001
    steps, held = re.match(r"([0-9,]+) steps holding ([0-9]+) of 160 rows", real["decoder steps"]["note"]).groups()
    assert figure(steps) > 0 and 0 < figure(held) <= 160
    assert 0 < figure(real["every step at the cost of a one-sentence step"]["seconds"])
    # CTranslate2 decodes our own model at float32 under the same rule: the same outputs
    pieces = re.search(r"([0-9,]+) pieces", real["whole decode"]["note"]).group(1)
    assert re.search(r"([0-9,]+) pieces", real["CTranslate2 float32, same model and rule"]["note"]).group(1) == pieces
    for sentences in (64, 128):  # both engines again with larger batches, side by side
        larger = real[f"the same decode in batches of {sentences} sentences"]
        assert figure(larger["seconds"]) > 0
        assert float(re.search(r"torch at ([0-9.]+)x$", larger["note"]).group(1)) > 0
    # every decode shows what its output is worth beside its speed (one figure per engine)
    decodes = ["whole decode", "CTranslate2 float32, same model and rule",
               "the same decode in batches of 64 sentences", "the same decode in batches of 128 sentences"]
    for name in decodes:
        worth = re.findall(r"BLEU ([0-9.]+), ([0-9.]+)% at the limit", real[name]["note"])
        assert len(worth) == (2 if name.startswith("the same decode") else 1), name
        assert all(0 <= float(bleu) <= 100 and 0 <= float(share) <= 100 for bleu, share in worth)


def test_serve_load_quick_answers_every_sentence_and_refuses_the_overload_cleanly(work: Path) -> None:
    pytest.importorskip("uvicorn", reason="nmt serve needs the serve extra (pip install 'nmt-cli[serve]')")
    report = run_bench("serve_load", work)
    rows = [dict(zip(report["columns"], row)) for row in report["rows"]]
    assert [(row["system"], row["clients"]) for row in rows[:4]] == [
        ("batching on", "1"), ("batching on", "4"), ("batching off", "1"), ("batching off", "4")]
    overload = rows[4]
    assert overload["system"] == "batching on, 2x capacity" and len(rows) == 5
    for row in rows:
        assert figure(row["sent/s"]) > 0 and 0 < figure(row["p50 ms"]) <= figure(row["p99 ms"])
        assert (row["errors"], row["dropped"]) == ("0", "0"), row
        assert row["= nmt translate"].endswith("/12") and figure(row["server peak RSS MB"]) > 50
    assert [row["503s"] for row in rows[:4]] == ["0"] * 4  # up to capacity nothing is refused
    assert figure(overload["503s"]) > 0
    (note,) = [note for note in report["notes"] if note.startswith("2x capacity")]
    assert f"{overload['503s']} 503s, {overload['503s']} of them clean" in note
    assert "server exit status after SIGTERM: batching on 0, off 0" in report["notes"]


def test_a_peer_names_what_differs_from_the_model_it_is_compared_with() -> None:
    """The training table states what a peer's model cannot match (issue 52): OpenNMT-py's
    additive-attention RNN is not our Bahdanau decoder, its Transformer is pre-norm only."""
    from dataclasses import replace

    from peers import opennmt
    from peers.arch import TINY_RNN, TINY_TRANSFORMER

    (rnn,) = opennmt.deviations(TINY_RNN)
    assert "s_{t-1}" in rnn and "maxout" in rnn and "input feeding" in rnn
    assert opennmt.deviations(TINY_TRANSFORMER) == ["OpenNMT-py's Transformer is pre-norm only"]
    assert opennmt.deviations(replace(TINY_TRANSFORMER, post_norm=False)) == []


def test_the_peer_runners_take_each_recipes_optimizer_and_schedule(tmp_path: Path) -> None:
    """OpenNMT-py's defaults (plain SGD at a constant rate) reach onmt_train as they are, its
    Transformer recipe as noam; fairseq's runner refuses what it does not pass on."""
    from dataclasses import replace

    from peers import fairseq, opennmt
    from peers.arch import TINY_RNN, TINY_TRANSFORMER, TrainSpec

    constant = opennmt._schedule_options(TINY_RNN, TrainSpec(optimizer="sgd", schedule="constant", lr=1.0))
    assert constant["decay_method"] == "none" and constant["learning_rate"] == 1.0
    assert constant["start_decay_steps"] > 10**6  # its step decay never starts
    noam = opennmt._schedule_options(TINY_TRANSFORMER, TrainSpec(lr=2 * (128 * 8000) ** -0.5, warmup=8000))
    assert noam == {"decay_method": "noam", "learning_rate": pytest.approx(2.0), "warmup_steps": 8000}
    with pytest.raises(ValueError, match="adam with inverse_sqrt only, not sgd with constant"):
        fairseq.train(None, TINY_RNN, replace(TrainSpec(), optimizer="sgd", schedule="constant"), tmp_path, 2)
    with pytest.raises(ValueError, match="loss_normalization tokens only, not sents"):
        fairseq.train(None, TINY_TRANSFORMER, TrainSpec(loss_normalization="sents"), tmp_path, 2)
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_the_loss_is_divided_by_what_each_recipe_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenNMT-py divides by sentences unless told otherwise; its documented Transformer settings
    say target tokens, as nmt-cli and fairseq do, so the runner passes the recipe's choice on."""
    from peers import opennmt, ours
    from peers.arch import TINY_TRANSFORMER, TrainSpec
    from peers.corpus import PieceCorpus

    corpus = PieceCorpus(tmp_path / "pieces")
    corpus.path.mkdir()
    (corpus.path / "vocab.pieces").write_text("▁a\n▁b\n", encoding="utf-8")

    monkeypatch.setattr(opennmt, "run_measured", _refuse_to_run)  # the config is written; nothing runs

    def written_config(train_spec: TrainSpec) -> dict:
        with pytest.raises(_NotRun):
            opennmt.train(corpus, TINY_TRANSFORMER, train_spec, tmp_path / "run", 2)
        return yaml.safe_load((tmp_path / "run" / "train.yaml").read_text(encoding="utf-8"))

    assert written_config(TrainSpec())["normalization"] == "tokens"
    assert written_config(TrainSpec(loss_normalization="sents"))["normalization"] == "sents"
    with pytest.raises(ValueError, match="by its target tokens, not by sents"):
        ours.train_section(TrainSpec(loss_normalization="sents"))


class _NotRun(Exception):
    pass


def _refuse_to_run(*args, **kwargs):
    raise _NotRun


@pytest.mark.parametrize(("peer", "model"), [("opennmt", "rnn"), ("fairseq", "tiny")])  # the quick models each peer matches
def test_peer_training_runner_quick(work: Path, peer: str, model: str) -> None:
    installed, why = availability(peer)
    if not installed:
        pytest.skip(f"{peer}: {why}")
    if os.environ.get("NMT_BENCH_PEERS") != "1":
        pytest.skip(f"{peer} is installed; peer runs are opt-in (NMT_BENCH_PEERS=1), about a minute each")
    report = run_bench("train_speed", work, "--peers", peer, "--models", model)
    rows = rows_by(report, "toolkit")
    (label,) = [name for name in rows if name != "nmt-cli"]
    assert figure(rows[label]["tgt tok/s"]) > 0, rows[label]
    assert 0 < figure(rows[label]["tgt tok/update"]) <= figure(rows[label]["max tokens"])
    assert rows[label]["nmt-cli / toolkit"].endswith("x") and rows["nmt-cli"]["nmt-cli / toolkit"] == "see peer row"


def time_to_quality_rows(report: dict) -> dict[tuple[str, str], list[dict[str, str]]]:
    """Rows by (toolkit, architecture), each list in budget order."""
    rows: dict[tuple[str, str], list[dict[str, str]]] = {}
    for row in report["rows"]:
        cells = dict(zip(report["columns"], row))
        rows.setdefault((cells["toolkit"], cells["architecture"]), []).append(cells)
    return rows


def test_time_to_quality_quick_scores_the_checkpoint_of_each_budget_and_draws_the_curve(work: Path) -> None:
    report = run_bench("time_to_quality", work, "--peers", "none")
    assert report["script"] == "time_to_quality" and report["quick"] is True
    # nmt-cli trains at train.precision's default: bf16 on a CPU with bf16 units, which is a variant of its own
    assert report["variant"] == ("nmt-cli in bf16" if cpu_has_native_bf16() else "")
    (ours,) = time_to_quality_rows(report).values()
    assert [row["budget (min)"] for row in ours] == ["0.5", "1"]
    assert all(row["toolkit"] == "nmt-cli" and row["architecture"] == "post-norm" for row in ours)
    updates = [figure(row["updates"]) for row in ours]
    assert 0 < updates[0] < updates[1]  # a longer budget, a later checkpoint
    assert 0 < figure(ours[0]["tgt tokens"]) < figure(ours[1]["tgt tokens"])
    for row in ours:
        assert 0 <= figure(row["BLEU"]) <= 100 and 0 < figure(row["chrF"]) <= 100
        assert 0 <= figure(row["at limit"].rstrip("%")) <= 100
        assert 0 < figure(row["checkpoint dated (min)"]) <= figure(row["budget (min)"])
    (curve,) = [note for note in report["notes"] if note.startswith("learning curve")]
    picture = Path(re.search(r"\]\((.+)\)$", curve).group(1))
    assert picture == work / "time_to_quality.png" and picture.read_bytes().startswith(b"\x89PNG")
    assert any(note.startswith("nmt-cli post-norm settings, its defaults") for note in report["notes"])
    again = run_bench("time_to_quality", work, "--peers", "none")  # resumed: the finished run and scores reused
    assert again["rows"] == report["rows"]


def test_time_to_quality_quick_trains_the_rnn_in_a_section_of_its_own(work: Path) -> None:
    report = run_bench("time_to_quality", work, "--peers", "none", "--models", "rnn")
    assert report["variant"] == "models rnn"  # the RNN trains in float32 whatever the CPU
    (ours,) = time_to_quality_rows(report).values()
    assert [(row["toolkit"], row["architecture"], row["budget (min)"]) for row in ours] == [
        ("nmt-cli", "Bahdanau RNN", "0.5"), ("nmt-cli", "Bahdanau RNN", "1")]
    reached = [row for row in ours if row["updates"] != "no checkpoint yet"]
    assert reached and all(0 <= figure(row["BLEU"]) <= 100 and figure(row["updates"]) > 0 for row in reached)
    assert any(note.startswith("nmt-cli Bahdanau RNN settings, its recipe recipes/multi30k-rnn-bahdanau.yaml")
               for note in report["notes"])
    assert any(note.startswith("every toolkit: Bahdanau RNN (LSTM), embedding 256") for note in report["notes"])
    assert not any(note.startswith("updates by the end of the largest budget") for note in report["notes"])


@pytest.mark.parametrize("peer", ["fairseq", "opennmt"])
def test_time_to_quality_quick_with_a_peer(work: Path, peer: str) -> None:
    installed, why = availability(peer)
    if not installed:
        pytest.skip(f"{peer}: {why}")
    if os.environ.get("NMT_BENCH_PEERS") != "1":
        pytest.skip(f"{peer} is installed; peer runs are opt-in (NMT_BENCH_PEERS=1), a few minutes each")
    report = run_bench("time_to_quality", work, "--peers", peer)
    rows = time_to_quality_rows(report)
    architecture = "post-norm" if peer == "fairseq" else "pre-norm"
    (label,) = [toolkit for toolkit, _ in rows if toolkit != "nmt-cli"]
    assert set(rows) == {("nmt-cli", architecture), (label, architecture)}
    for toolkit_rows in rows.values():
        assert [row["budget (min)"] for row in toolkit_rows] == ["0.5", "1"]
        reached = [row for row in toolkit_rows if row["updates"] != "no checkpoint yet"]
        assert reached, toolkit_rows  # at least the largest budget has a checkpoint
        assert all(0 <= figure(row["BLEU"]) <= 100 and figure(row["updates"]) > 0 for row in reached)
    assert any(note.startswith(f"time to {label}'s 1-minute BLEU") for note in report["notes"])


def test_run_all_renders_benchmarks_md_and_reuses_an_earlier_report(work: Path) -> None:
    """``make bench`` in miniature: prepare_scale --quick rendered, then re-rendered from its JSON."""
    out = work / "BENCHMARKS.md"
    command = [sys.executable, str(BENCH / "run_all.py"), "--quick", "--scripts", "prepare_scale",
               "--work", str(work), "--out", str(out)]
    first = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    page = out.read_text(encoding="utf-8")
    for heading in ("# Benchmarks", "## Versions", "Quick mode", "- commit: ", "- machine: ", "- regenerate: "):
        assert heading in page
    report = json.loads((work / "results" / "prepare_scale.json").read_text())
    rows = rows_by(report, "pairs")
    assert figure(rows["20,000"]["prepare peak RSS (MB)"]) > 0 and figure(rows["20,000"]["pairs/s"]) > 0
    assert figure(rows["20,000"]["train peak RSS (MB)"]) > 0 and figure(rows["20,000"]["train: s to 1st update"]) > 0
    again = subprocess.run([*command, "--reuse"], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "reusing" in again.stdout
    reused = out.read_text(encoding="utf-8")
    made = report["measured_at"]
    assert f"`bench/prepare_scale.py`, report of an earlier run, measured {made['utc']}:" in reused
    assert f"- machine: {made['machine']}; GPU: {made['gpu']}" in reused and made["vector_extensions"] in reused
    assert "Every figure is the median" not in page
    table = [line for line in page.splitlines() if line.startswith("| 20,000")]
    assert table and table == [line for line in reused.splitlines() if line.startswith("| 20,000")]
