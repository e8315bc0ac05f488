"""Run a recipe end to end through the ``nmt`` command line, or list the recipes.

    python recipes/run_recipe.py --list
    python recipes/run_recipe.py NAME [--out results] [--check] [--set section.key=value ...]

A run is ``nmt prepare -> nmt train -> nmt average -> nmt translate -> nmt evaluate ->
nmt align`` and writes ``results/<NAME>/``: the prepared data, the training run (resolved
config, logs, learning-curve PNG, checkpoints), test translations, the sacreBLEU
signature and scores, alignment heatmaps and a one-row markdown summary.

``--check`` runs the same stages on a tiny slice for a few steps so a recipe cannot rot
(used by ``make recipes-check`` and the test suite). What it changes is listed in
:data:`CHECK_OVERRIDES` and :data:`CHECK_SHRINK`; hub datasets are replaced by a local
slice in the hub's layout with ``--hub-root``.

Only the ``nmt`` CLI is used here, never the package's Python internals.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

import results_table  # beside this script: the same row format as recipes/README.md

RECIPES = Path(__file__).resolve().parent
REPO = RECIPES.parent

#: settings every ``--check`` run overrides: tiny data, a few steps, small vocabulary
CHECK_OVERRIDES = {
    "data.max_train_pairs": 300,
    "data.max_eval_pairs": 12,
    "data.synthetic_train_size": 300,
    "data.synthetic_valid_size": 12,
    "data.synthetic_test_size": 12,
    "data.vocab_size": 300,
    "data.spm_input_sentence_size": 10000,
    "train.max_steps": 3,
    "train.max_epochs": 0,
    "train.max_minutes": 0,
    "train.valid_every": 3,
    "train.log_every": 1,
    "train.max_tokens": 1024,
    "train.warmup_steps": 2,
    "train.valid_max_sentences": 6,
    "train.keep_last": 2,
    "decode.max_len_a": 1.0,
    "decode.max_len_b": 5,
}

#: where the recipes name their local corpora: a path relative to the checkout, which they run from
RECIPE_SHARED_DATA = "../shared/data"

#: GPU-sized recipes keep their layout but shrink widths and depths in ``--check`` so the
#: whole check stays within CI's time on 2 CPU cores (documented in recipes/README.md)
CHECK_SHRINK = {
    "model.d_model": 64,
    "model.ffn_dim": 128,
    "model.heads": 4,
    "model.encoder_layers": 2,
    "model.decoder_layers": 2,
    "model.embed_dim": 64,
    "model.hidden_size": 64,
    "model.rnn_layers": 2,
}


def recipe_path(name: str) -> Path:
    path = RECIPES / f"{name}.yaml"
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in RECIPES.glob("*.yaml")))
        sys.exit(f"error: unknown recipe {name!r}; available: {names}")
    return path


def with_shared_data(settings):
    """``settings`` (a recipe's YAML, loaded) with every path under ``../shared/data`` moved to
    ``$NMT_SHARED_DATA`` when that is set: a checkout away from ``../shared`` then runs the recipes
    on the same copy of the data that its tests and benches read."""
    root = os.environ.get("NMT_SHARED_DATA")
    if not root:
        return settings
    if isinstance(settings, dict):
        return {key: with_shared_data(value) for key, value in settings.items()}
    if isinstance(settings, list):
        return [with_shared_data(value) for value in settings]
    if isinstance(settings, str) and (settings == RECIPE_SHARED_DATA or settings.startswith(RECIPE_SHARED_DATA + "/")):
        return root.rstrip("/") + settings[len(RECIPE_SHARED_DATA):]
    return settings


def list_recipes() -> None:
    rows = []
    for path in sorted(RECIPES.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        info, data = raw.get("recipe", {}), raw.get("data", {})
        source = data.get("source", "synthetic")
        where = "built-in synthetic" if source == "synthetic" else f"{source}: {data.get('path', '')}"
        rows.append((path.stem, info.get("description", ""), where, info.get("hardware", ""),
                     info.get("expected_time", ""), info.get("expected_score", "")))
    for name, description, where, hardware, duration, score in rows:
        print(f"{name}\n    {description}\n    data: {where} | hardware: {hardware} | time: {duration}\n"
              f"    expected: {score}")


def nmt(*args: str, log: Path, stdout: Path | None = None) -> None:
    """Run one ``nmt`` command, echoing it, appending its stderr to ``log``."""
    command = [sys.executable, "-m", "nmt_cli", *args]
    print("$ nmt " + " ".join(args), flush=True)
    with open(log, "a", encoding="utf-8") as err:
        out = open(stdout, "w", encoding="utf-8") if stdout else None
        try:
            result = subprocess.run(command, stdout=out, stderr=err if stdout else None, cwd=os.getcwd())
        finally:
            if out:
                out.close()
    if result.returncode != 0:
        sys.exit(f"error: `nmt {args[0]}` failed with exit code {result.returncode} (see {log})")


def run(name: str, out_root: Path, check: bool, extra: list[str], hub_root: str | None) -> Path:
    config = recipe_path(name)
    raw = yaml.safe_load(config.read_text(encoding="utf-8"))
    out = out_root / name
    if check and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    resolved = with_shared_data(raw)
    if resolved != raw:  # the stages read a copy of the recipe that names $NMT_SHARED_DATA
        config = out / "recipe.yaml"
        config.write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
    log = out / "stages.log"
    overrides: dict[str, object] = {}
    if check:
        overrides.update(CHECK_OVERRIDES)
        if "GPU" in raw.get("recipe", {}).get("hardware", ""):
            overrides.update(CHECK_SHRINK)
        if raw.get("data", {}).get("source") == "hf" and hub_root:
            overrides["data.path"] = str(Path(hub_root) / raw["data"]["path"])
    sets = [f"{k}={v}" for k, v in overrides.items()] + extra
    set_args = [arg for item in sets for arg in ("--set", item)]
    data, run_dir = out / "data", out / "run"
    nmt("prepare", "--config", str(config), *set_args, "--out", str(data), log=log)
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    src_lang, tgt_lang = manifest["src_lang"], manifest["tgt_lang"]
    nmt("train", "--config", str(config), *set_args, "--data", str(data), "--out", str(run_dir), log=log)
    average_last = int(raw.get("train", {}).get("average_last", 0) or 0)
    checkpoint = run_dir
    if average_last > 1:
        checkpoint = out / "averaged"
        nmt("average", "--last", str(average_last), "--out", str(checkpoint), str(run_dir), log=log)
    hyp = out / f"test.hyp.{tgt_lang}"
    decode_args = [arg for item in sets if item.startswith("decode.") for arg in ("--set", item)]
    nmt("translate", "--checkpoint", str(checkpoint), *decode_args, "--input", str(data / f"test.{src_lang}"),
        "--output", str(hyp), log=log)
    ref = data / f"test.{tgt_lang}"
    nmt("evaluate", "--hyp", str(hyp), "--ref", str(ref), log=log, stdout=out / "score.txt")
    nmt("evaluate", "--hyp", str(hyp), "--ref", str(ref), "--json", log=log, stdout=out / "score.json")
    nmt("evaluate", "--hyp", str(hyp), "--ref", str(ref), "--json", "--lowercase", "--tokenize", "13a",
        log=log, stdout=out / "score_lc_tok.json")
    align_args = ["--checkpoint", str(checkpoint), "--src", str(data / f"test.{src_lang}"),
                  "--tgt", str(ref), "--out", str(out / "align"), "--heatmaps", "5"]
    nmt("align", *align_args, log=log)
    gold = data / "test.align"
    if gold.is_file():
        nmt("align", "score", "--gold", str(gold), "--hyp", str(out / "align" / "alignments.align"), "--json",
            log=log, stdout=out / "aer.json")
    write_summary(name, out, raw, stage_minutes(data, run_dir), extra)
    show_samples(data / f"test.{src_lang}", ref, hyp)
    print(open(out / "summary.md", encoding="utf-8").read())
    heatmaps = sorted((out / "align").glob("heatmaps/*.png"))
    if heatmaps:
        print(f"alignment heatmaps: {heatmaps[0].parent}/ ({len(heatmaps)} files, e.g. {heatmaps[0].name})")
    return out


def show_samples(source: Path, reference: Path, hypothesis: Path, count: int = 3) -> None:
    """Print the first test sentences with their reference and our translation."""
    rows = zip(*(path.read_text(encoding="utf-8").splitlines()[:count] for path in (source, reference, hypothesis)))
    for number, (src, ref, hyp) in enumerate(rows, 1):
        print(f"[{number}] source:    {src}\n    reference: {ref}\n    ours:      {hyp}")
    print()


def stage_minutes(data: Path, run_dir: Path) -> float:
    """Minutes of ``nmt prepare`` (its manifest's clock) plus training (the run's own clock,
    which spans the sessions of a resumed run and leaves out the time between them)."""
    prepared = json.loads((data / "manifest.json").read_text(encoding="utf-8"))["elapsed_seconds"]
    records = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    trained = max(json.loads(line).get("elapsed", 0.0) for line in records if line.strip())
    return round((prepared + trained) / 60, 1)


def write_summary(name: str, out: Path, raw: dict, minutes: float, overrides: list[str]) -> None:
    """Write the run's one-row summary; ``overrides`` (the ``--set`` items) are kept so a
    shortened run is never mistaken for the recipe as written."""
    score = json.loads((out / "score.json").read_text(encoding="utf-8"))
    like = json.loads((out / "score_lc_tok.json").read_text(encoding="utf-8"))
    state = json.loads((out / "run" / "summary.json").read_text(encoding="utf-8")) \
        if (out / "run" / "summary.json").is_file() else {}
    aer = json.loads((out / "aer.json").read_text(encoding="utf-8")) if (out / "aer.json").is_file() else {}
    row = {
        "recipe": name,
        "overrides": overrides,
        "bleu": _rounded(_metric(score, "BLEU"), 1),
        "bleu_lc_tok": _rounded(_metric(like, "BLEU"), 1),
        "chrf": _rounded(_metric(score, "chrF"), 1),
        "signature": _signature(score, "BLEU"),
        "params": state.get("parameters"),
        "prepare_train_minutes": minutes,
        "steps": state.get("step"),
        "peak_rss_mb": state.get("peak_rss_mb"),
        "aer": _rounded(aer.get("aer"), 3),
        "expected": raw.get("recipe", {}).get("expected_score", ""),
    }
    (out / "summary.json").write_text(json.dumps(row, indent=2) + "\n", encoding="utf-8")
    (out / "summary.md").write_text(results_table.table([row]) + "\n", encoding="utf-8")


def _rounded(value, digits: int):
    return None if value is None else round(float(value), digits)


def _metric(scores: dict | list, metric: str):
    for entry in scores if isinstance(scores, list) else scores.get("scores", []):
        if entry.get("name", "").startswith(metric):
            return entry.get("score")
    return None


def _signature(scores: dict | list, metric: str) -> str:
    for entry in scores if isinstance(scores, list) else scores.get("scores", []):
        if entry.get("name", "").startswith(metric):
            return entry.get("signature", "")
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", nargs="?", help="recipe name (file recipes/<name>.yaml)")
    parser.add_argument("--list", action="store_true", help="list the recipes")
    parser.add_argument("--out", default="results", help="results root (default: results)")
    parser.add_argument("--check", action="store_true", help="tiny slice, a few steps")
    parser.add_argument("--hub-root", default=None,
                        help="folder holding local copies of hub datasets in the hub layout (<root>/<id>/...)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = parser.parse_args()
    if args.list or not args.name:
        list_recipes()
        return
    run(args.name, Path(args.out), args.check, args.sets, args.hub_root)


if __name__ == "__main__":
    main()
