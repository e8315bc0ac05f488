"""Domain adaptation end to end through the ``nmt`` command line, or the table of its results.

    python recipes/run_adaptation.py NAME [--out results] [--check]   # NAME: recipes/adaptation/NAME.yaml
    python recipes/run_adaptation.py --table [--results results]       # the table in recipes/README.md

A run compares three models on the domain's test set, each translated with beam search
and scored with sacreBLEU:

1. **general**: the general recipe's model (``adaptation.general``, run first by
   ``run_recipe.py`` unless ``results/<general>/`` holds it), unadapted;
2. **fine-tuned**: the general model trained further on the in-domain text (``nmt prepare
   --tokenizer-from`` the general model, ``nmt train --init-from`` it, the ``finetune``
   overrides);
3. **in-domain only**: the general recipe's architecture trained from scratch on the
   in-domain text with its own SentencePiece model (the ``scratch`` overrides).

It writes ``results/<name>/``: the in-domain data (``data/``, ``data-own/``), the runs
(``finetune/``, ``scratch/``), translations, scores and ``adaptation.json`` with the
rows and the minutes of every stage (prepare plus training, by the tools' own clocks). ``--check`` runs the same stages on a tiny slice
(the general recipe too) so the pipeline cannot rot.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import yaml

from run_recipe import CHECK_OVERRIDES, RECIPES, nmt, recipe_path, run as run_recipe, stage_minutes

ADAPTATIONS = RECIPES / "adaptation"
BEGIN, END = "<!-- adaptation:begin -->", "<!-- adaptation:end -->"
#: ``--check`` settings for the in-domain stages: a few pairs and steps
CHECK_STAGE = {"data.max_train_pairs": 200, "data.max_eval_pairs": 12, "train.max_steps": 3, "train.max_minutes": 0,
               "train.valid_every": 0, "train.save_every": 3, "train.average_last": 0, "train.max_tokens": 1024,
               "train.warmup_steps": 2, "data.vocab_size": 300}


def sets(overrides: dict) -> list[str]:
    return [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]


def general_model(name: str, out_root: Path, check: bool) -> tuple[Path, float]:
    """The general recipe's model (its averaged checkpoint when it averages) and the minutes
    its prepare and training took; runs the recipe when ``out_root/<name>`` lacks it."""
    out = out_root / name
    if check or not (out / "summary.json").is_file():
        run_recipe(name, out_root, check, [], None)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    checkpoint = out / "averaged" if (out / "averaged").is_dir() else out / "run"
    return checkpoint, summary["prepare_train_minutes"]


def translate_and_score(checkpoint: Path, data: Path, out: Path, label: str, log: Path) -> dict:
    """Beam-search the in-domain test set with ``checkpoint``; its sacreBLEU BLEU and chrF."""
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    source, reference = data / f"test.{manifest['src_lang']}", data / f"test.{manifest['tgt_lang']}"
    hypotheses = out / f"test.{label}.{manifest['tgt_lang']}"
    nmt("translate", "--checkpoint", str(checkpoint), "--input", str(source), "--output", str(hypotheses), log=log)
    scores = out / f"score.{label}.json"
    nmt("evaluate", "--hyp", str(hypotheses), "--ref", str(reference), "--metrics", "bleu,chrf", "--json",
        log=log, stdout=scores)
    entries = {entry["name"].split()[0]: entry for entry in json.loads(scores.read_text())["scores"]}
    return {"bleu": round(entries["BLEU"]["score"], 1), "chrf": round(entries["chrF2"]["score"], 1),
            "signature": entries["BLEU"]["signature"]}


def trained(run_dir: Path) -> Path:
    """A run's averaged checkpoint when it averaged, else its newest checkpoint."""
    averaged = sorted((run_dir / "checkpoints").glob("average-last*"))
    return averaged[0] if averaged else run_dir


def run(name: str, out_root: Path, check: bool) -> Path:
    spec = yaml.safe_load((ADAPTATIONS / f"{name}.yaml").read_text(encoding="utf-8"))
    info = spec["adaptation"]
    out = out_root / info["name"]
    if check and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "stages.log"
    general_checkpoint, general_minutes = general_model(info["general"], out_root, check)
    # the general recipe's model and decoding, with the in-domain data: one config for every stage
    config = yaml.safe_load(recipe_path(info["general"]).read_text(encoding="utf-8"))
    config = {**{key: config[key] for key in ("model", "train", "decode") if key in config}, "data": spec["data"]}
    config_path = out / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    check_sets = sets({**CHECK_OVERRIDES, **CHECK_STAGE}) if check else []
    minutes = {"general": general_minutes}

    nmt("prepare", "--config", str(config_path), "--out", str(out / "data"), "--tokenizer-from",
        str(general_checkpoint), *check_sets, log=log)
    nmt("train", "--config", str(config_path), *sets(spec["finetune"]), *check_sets, "--init-from",
        str(general_checkpoint), "--data", str(out / "data"), "--out", str(out / "finetune"), log=log)
    minutes["fine-tuned"] = stage_minutes(out / "data", out / "finetune")

    nmt("prepare", "--config", str(config_path), *sets(spec["scratch"]), *check_sets, "--out", str(out / "data-own"),
        log=log)
    nmt("train", "--config", str(config_path), *sets(spec["scratch"]), *check_sets, "--data", str(out / "data-own"),
        "--out", str(out / "scratch"), log=log)
    minutes["in-domain only"] = stage_minutes(out / "data-own", out / "scratch")

    rows = []
    for label, checkpoint, data in (("general", general_checkpoint, out / "data"),
                                    ("fine-tuned", trained(out / "finetune"), out / "data"),
                                    ("in-domain only", trained(out / "scratch"), out / "data-own")):
        scores = translate_and_score(checkpoint, data, out, label.replace(" ", "-"), log)
        rows.append({"model": label, **scores, "minutes": minutes[label]})
    record = {"name": info["name"], "general": info["general"], "check": check, "rows": rows,
              "test": spec["data"]["test_split"]}
    (out / "adaptation.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(render([record]))
    return out


def render(records: list[dict]) -> str:
    """The domain-adaptation table: a row per model of every run, then the BLEU signatures."""
    lines = ["| domain (test set) | model | sacreBLEU | chrF | prepare+train min (2 cores) |", "|---|---|---|---|---|"]
    for record in records:
        for row in record["rows"]:
            lines.append(f"| {record['name']} ({record['test']}) | {row['model']} | {row['bleu']} | {row['chrf']} "
                         f"| {row['minutes']} |")
    signatures = sorted({row["signature"] for record in records for row in record["rows"]})
    return "\n".join(lines + ["", "sacreBLEU signature: " + "; ".join(f"`{s}`" for s in signatures)])


def write_table(results: Path, readme: Path) -> None:
    """Replace the table between the markers of ``readme`` with the finished (non-check) runs."""
    records = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(results.glob("*/adaptation.json"))]
    records = [record for record in records if not record["check"]]
    if not records:
        sys.exit(f"error: no finished adaptation run under {results}/")
    text = readme.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    readme.write_text(f"{head}{BEGIN}\n{render(records)}\n{END}{tail}", encoding="utf-8")
    print(render(records))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", nargs="?", help="adaptation recipe (recipes/adaptation/<name>.yaml)")
    parser.add_argument("--out", default="results", type=Path, help="results root (default: results)")
    parser.add_argument("--check", action="store_true", help="tiny slice, a few steps")
    parser.add_argument("--table", action="store_true", help="write the table of finished runs into recipes/README.md")
    parser.add_argument("--readme", default=RECIPES / "README.md", type=Path)
    args = parser.parse_args()
    if args.table:
        write_table(args.out, args.readme)
    elif args.name:
        run(args.name, args.out, args.check)
    else:
        parser.error("name an adaptation recipe, or --table")


if __name__ == "__main__":
    main()
