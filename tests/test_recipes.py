"""``make recipes-check``: every recipe runs every stage on a tiny slice, through the nmt CLI.

Hub datasets named by recipes (``wmt/wmt14``, ``bbaaaa/iwslt14-de-en``) are replaced by
local copies in the hub's own layout (a README with ``configs`` and parquet files with a
``translation`` column), loaded by the same ``load_dataset(path, config)`` call.
Multi30k recipes read ``../shared/data/multi30k`` (or ``$NMT_SHARED_DATA/multi30k``) and skip when it is absent.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import yaml

from nmt_cli.data.synthetic import generate

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted(p.stem for p in (REPO / "recipes").glob("*.yaml"))
HUB_DATASETS = {
    "wmt/wmt14": {"de-en": ("de", "en"), "fr-en": ("fr", "en")},
    "bbaaaa/iwslt14-de-en": {"de-en": ("de", "en")},
}
SPLITS = {"train": slice(0, 300), "validation": slice(300, 330), "test": slice(330, 342)}


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Local copies of the hub datasets, ``<root>/<dataset id>/<config>/<split>-00000-of-00001.parquet``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("hub")
    pairs = list(itertools.islice(generate(11), 342))
    for dataset, configs in HUB_DATASETS.items():
        folder = root / dataset
        lines = ["---", "configs:"]
        for config, (first, second) in configs.items():
            (folder / config).mkdir(parents=True)
            lines.append(f"- config_name: {config}\n  data_files:")
            for split, rows in SPLITS.items():
                lines.append(f"  - split: {split}\n    path: {config}/{split}-*")
                table = pa.table({"translation": [{first: p.german, second: p.english} for p in pairs[rows]]})
                pq.write_table(table, folder / config / f"{split}-00000-of-00001.parquet")
        (folder / "README.md").write_text("\n".join(lines + ["---", ""]), encoding="utf-8")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("name", RECIPES)
def test_recipe_runs_every_stage(name: str, hub_root: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    recipe = yaml.safe_load((REPO / "recipes" / f"{name}.yaml").read_text(encoding="utf-8"))
    if recipe["data"].get("source") == "files":
        request.getfixturevalue("shared_data")  # skips with the reason when ../shared is absent
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "hf-cache")}  # a split that is not streamed is downloaded there
    result = subprocess.run(
        [sys.executable, str(REPO / "recipes" / "run_recipe.py"), name, "--check",
         "--out", str(tmp_path), "--hub-root", str(hub_root)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    out = tmp_path / name
    log = (out / "stages.log").read_text(encoding="utf-8") if (out / "stages.log").is_file() else ""
    assert result.returncode == 0, f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}\n{log[-3000:]}"

    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["signature"].startswith("nrefs:1|")
    assert summary["params"] > 0 and summary["steps"] == 3
    manifest = json.loads((out / "data" / "manifest.json").read_text(encoding="utf-8"))
    source = (out / "data" / f"test.{manifest['src_lang']}").read_text(encoding="utf-8").splitlines()
    references = (out / "data" / f"test.{manifest['tgt_lang']}").read_text(encoding="utf-8").splitlines()
    hypotheses = (out / f"test.hyp.{manifest['tgt_lang']}").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == len(source) == len(references) > 0
    # three steps translate badly: the check is that the reported BLEU (to one decimal) is the BLEU of the
    # written outputs
    assert summary["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score, abs=0.05)
    assert (out / "run" / "config.yaml").is_file() and (out / "run" / "learning_curve.png").is_file()
    assert sorted((out / "align").glob("*.png")) or sorted((out / "align").glob("heatmaps/*.png"))
    summary_md = (out / "summary.md").read_text(encoding="utf-8")
    assert summary_md.startswith("| recipe |") and "None" not in summary_md  # missing cells read "-"


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
def test_every_recipe_is_a_make_target() -> None:
    """``make NAME`` runs the recipe, like ``make recipe NAME=NAME`` (dry run: nothing is executed)."""
    for name in RECIPES:
        command = ["make", "-n", "--no-print-directory", "-C", str(REPO), name, "VENV=/nonexistent"]
        shown = subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()
        assert shown[-1].endswith(f"recipes/run_recipe.py {name}"), shown


def recipe_script(name: str):
    """``recipes/<name>.py``, a script beside the recipes, imported as a module (with the
    recipes folder on the path, for the scripts it imports)."""
    sys.path.insert(0, str(REPO / "recipes"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def test_recipes_read_nmt_shared_data_when_it_is_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The data tests skip by ``$NMT_SHARED_DATA``; the recipes they run must then read the same copy."""
    run_recipe = recipe_script("run_recipe")
    raw = yaml.safe_load((REPO / "recipes" / "general-deen-transformer.yaml").read_text(encoding="utf-8"))
    monkeypatch.delenv("NMT_SHARED_DATA", raising=False)
    assert run_recipe.with_shared_data(raw) == raw
    monkeypatch.setenv("NMT_SHARED_DATA", f"{tmp_path}/data/")
    resolved = run_recipe.with_shared_data(raw)
    assert resolved["data"]["path"] == f"{tmp_path}/data/tatoeba-deen"
    assert resolved["data"]["corpora"][0]["path"] == f"{tmp_path}/data/multi30k"
    assert "../shared" not in yaml.safe_dump(resolved) and resolved["model"] == raw["model"]
    assert run_recipe.with_shared_data("../shared/database") == "../shared/database"  # a prefix of a name is not the folder


@pytest.fixture(scope="module")
def results_table():
    return recipe_script("results_table")


def test_results_table_names_overrides(tmp_path: Path, results_table) -> None:
    """A shortened run (``--set train.max_minutes=60``) is labelled in the table, never passed off as the recipe."""
    rows = {"full": [], "short": ["train.max_minutes=60"]}
    for name, overrides in rows.items():
        (tmp_path / name).mkdir()
        row = {"recipe": name, "overrides": overrides, "bleu": 30.0, "params": 1234567, "signature": "nrefs:1|x"}
        (tmp_path / name / "summary.json").write_text(json.dumps(row), encoding="utf-8")
    lines = results_table.table(results_table.read_rows(tmp_path)).splitlines()
    assert lines[2].startswith("| full | 30.0 |") and "1,234,567" in lines[2]
    assert lines[3].startswith("| short (`train.max_minutes=60`) | 30.0 |")
    assert lines[-1] == "sacreBLEU signature: `nrefs:1|x`"


def test_results_table_formats_numbers_for_reading(results_table) -> None:
    row = {"recipe": "r", "bleu": 30.0, "steps": 12345, "peak_rss_mb": 1563.94, "aer": 0.1, "chrf": None}
    cells = results_table.table([row]).splitlines()[2].split(" | ")
    titles = [title for _, title in results_table.COLUMNS]
    by_title = dict(zip(titles, cells))
    assert (by_title["steps"], by_title["peak RSS MB"], by_title["AER"]) == ("12,345", "1,564", "0.100")
    assert by_title["chrF"] == by_title["parameters"] == "-"


def test_results_table_states_the_recipes_current_expectation(tmp_path: Path, results_table) -> None:
    """A recipe whose expected score was restated after its run shows the restated one."""
    name = "multi30k-rnn-bahdanau"
    (tmp_path / name).mkdir()
    row = {"recipe": name, "overrides": [], "bleu": 40.0, "expected": "an old guess", "signature": "nrefs:1|x"}
    (tmp_path / name / "summary.json").write_text(json.dumps(row), encoding="utf-8")
    current = yaml.safe_load((REPO / "recipes" / f"{name}.yaml").read_text(encoding="utf-8"))["recipe"]
    [read] = results_table.read_rows(tmp_path)
    assert read["expected"] == current["expected_score"] != "an old guess"


def test_results_table_update_replaces_only_the_recipes_run_here(tmp_path: Path, results_table) -> None:
    """results/ is not versioned: a new run replaces its own row, the other recipes' rows stay as written."""
    earlier = [
        {"recipe": "a-recipe", "bleu": 20.0, "signature": "nrefs:1|old"},
        {"recipe": "b-recipe", "overrides": ["train.max_minutes=60"], "bleu": 30.0, "signature": "nrefs:1|old"},
    ]
    previous = results_table.table(earlier)
    new_run = {"recipe": "b-recipe", "overrides": [], "bleu": 31.5, "signature": "nrefs:1|new"}
    rows = results_table.rendered_rows(results_table.updated_table(previous, [new_run]))
    assert list(rows) == ["a-recipe", "b-recipe"]
    assert rows["a-recipe"] == results_table.rendered_rows(previous)["a-recipe"]
    assert rows["b-recipe"].startswith("| b-recipe | 31.5 |")  # the 60-minute row is gone
    updated = results_table.updated_table(previous, [new_run]).splitlines()
    assert updated[-1] == "sacreBLEU signature: `nrefs:1|new`; `nrefs:1|old`"


def test_results_table_script_keeps_rows_of_recipes_not_run_here(tmp_path: Path, results_table) -> None:
    readme = tmp_path / "README.md"
    previous = results_table.table([{"recipe": "kept", "bleu": 12.0, "signature": "s"}])
    readme.write_text(f"intro\n{results_table.BEGIN}\n{previous}\n{results_table.END}\nafter\n", encoding="utf-8")
    (tmp_path / "results" / "fresh").mkdir(parents=True)
    row = {"recipe": "fresh", "bleu": 40.0, "signature": "s"}
    (tmp_path / "results" / "fresh" / "summary.json").write_text(json.dumps(row), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(REPO / "recipes" / "results_table.py"), "--results", str(tmp_path / "results"),
         "--readme", str(readme)], capture_output=True, text=True, check=True,
    )
    assert "kept from" in done.stdout and done.stdout.rstrip().endswith(": kept")
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("intro\n") and text.endswith(f"{results_table.END}\nafter\n")
    assert list(results_table.rendered_rows(text.split(results_table.BEGIN)[1])) == ["fresh", "kept"]


@pytest.fixture(scope="module")
def run_adaptation():
    return recipe_script("run_adaptation")


def adaptation_record(name: str, test: str, rows: list[tuple[str, float]], signature: str) -> dict:
    return {"name": name, "test": test, "general": "g", "check": False,
            "rows": [{"model": model, "bleu": bleu, "chrf": 30.0, "minutes": 9.5, "signature": signature}
                     for model, bleu in rows]}


def test_adaptation_table_replaces_rerun_models_and_keeps_the_others(tmp_path: Path, run_adaptation) -> None:
    """A domain rerun with --models general,fine-tuned keeps its in-domain-only row from the README;
    a domain with no row yet is added; rows come domain by domain in the models' order."""
    earlier = adaptation_record("adapt-ted", "tst2013", [("general", 5.1), ("fine-tuned", 12.9),
                                                         ("in-domain only", 5.2)], "nrefs:1|old")
    block = run_adaptation.render(run_adaptation.record_lines([earlier]), {"nrefs:1|old"})
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{run_adaptation.BEGIN}\n{block}\n{run_adaptation.END}\nafter\n", encoding="utf-8")
    for record in (adaptation_record("adapt-ted", "tst2013", [("general", 6.0), ("fine-tuned", 14.0)], "nrefs:1|new"),
                   adaptation_record("adapt-news", "newstest2014", [("fine-tuned", 20.0), ("general", 18.0),
                                                                    ("in-domain only", 3.0)], "nrefs:1|new")):
        (tmp_path / "results" / record["name"]).mkdir(parents=True)
        (tmp_path / "results" / record["name"] / "adaptation.json").write_text(json.dumps(record), encoding="utf-8")
    run_adaptation.write_table(tmp_path / "results", readme)
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("intro\n") and text.endswith(f"{run_adaptation.END}\nafter\n")
    rows, found = run_adaptation.rendered(text.split(run_adaptation.BEGIN)[1])
    assert [(domain, model, line.split("|")[3].strip()) for (domain, model), line in rows.items()] == [
        ("adapt-news (newstest2014)", "general", "18.0"), ("adapt-news (newstest2014)", "fine-tuned", "20.0"),
        ("adapt-news (newstest2014)", "in-domain only", "3.0"), ("adapt-ted (tst2013)", "general", "6.0"),
        ("adapt-ted (tst2013)", "fine-tuned", "14.0"), ("adapt-ted (tst2013)", "in-domain only", "5.2")]
    assert found == {"nrefs:1|old", "nrefs:1|new"}  # the kept row was scored under the old signature


def test_adaptation_runs_only_the_models_asked_for(tmp_path: Path, run_adaptation, monkeypatch) -> None:
    """--models general,fine-tuned prepares with the general tokenizer and fine-tunes, but never
    prepares or trains the in-domain-only model; the record holds the rows run."""
    commands = []
    monkeypatch.setattr(run_adaptation, "nmt", lambda *args, log, stdout=None: commands.append(args[0]))
    monkeypatch.setattr(run_adaptation, "general_model", lambda name, out, check: (tmp_path / "general", 80.0))
    monkeypatch.setattr(run_adaptation, "stage_minutes", lambda data, run_dir: 12.5)
    monkeypatch.setattr(run_adaptation, "translate_and_score",
                        lambda checkpoint, data, out, label, log: {"bleu": 1.0, "chrf": 2.0, "signature": "s",
                                                                   "data": data.name})
    out = run_adaptation.run("ted", tmp_path, False, ("fine-tuned", "general"))
    assert commands == ["prepare", "train"]
    record = json.loads((out / "adaptation.json").read_text(encoding="utf-8"))
    assert [(row["model"], row["minutes"], row["data"]) for row in record["rows"]] == [
        ("general", 80.0, "data"), ("fine-tuned", 12.5, "data")]
    commands.clear()
    record = json.loads((run_adaptation.run("ted", tmp_path, False, ("in-domain only",)) / "adaptation.json")
                        .read_text(encoding="utf-8"))
    assert commands == ["prepare", "train"] and [row["data"] for row in record["rows"]] == ["data-own"]


def test_adaptation_refuses_an_unknown_model(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(REPO / "recipes" / "run_adaptation.py"), "ted", "--models",
                             "general,tuned", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--models: tuned; choose from general, fine-tuned, in-domain only" in result.stderr
    assert not any(tmp_path.iterdir())  # refused before any stage ran


@pytest.mark.slow
def test_domain_adaptation_runs_every_stage(tmp_path: Path, shared_data: Path) -> None:
    """``run_adaptation.py ted --check``: the general recipe, then fine-tuning and the in-domain-only model."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(REPO / "recipes" / "run_adaptation.py"), "ted", "--check",
                             "--out", str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-2000:]}"
    record = json.loads((tmp_path / "adapt-ted" / "adaptation.json").read_text(encoding="utf-8"))
    assert [row["model"] for row in record["rows"]] == ["general", "fine-tuned", "in-domain only"]
    assert all(0.0 <= row["bleu"] <= 100.0 and row["signature"].startswith("nrefs:1|") for row in record["rows"])
    general = json.loads((tmp_path / "general-deen-transformer" / "data" / "manifest.json").read_text())
    in_domain = json.loads((tmp_path / "adapt-ted" / "data" / "manifest.json").read_text())
    assert in_domain["tokenizer"]["from"]  # fine-tuning data is encoded with the general model's pieces
    assert [c["name"] for c in general["splits"]["train"]["corpora"]] == ["main", "multi30k"]
    state = json.loads(next((tmp_path / "adapt-ted" / "finetune" / "checkpoints").glob("step-*/state.json"))
                       .read_text())
    assert state["init_from"]["checkpoint"].startswith(str(tmp_path / "general-deen-transformer"))
    assert "| adapt-ted (tst2013) | fine-tuned |" in result.stdout
