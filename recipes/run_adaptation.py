"""Domain adaptation end to end through the ``nmt`` command line, or the table of its results.

    python recipes/run_adaptation.py NAME [--out results] [--check] [--models M,...]   # recipes/adaptation/NAME.yaml
    python recipes/run_adaptation.py --table [--out results]                            # the table in recipes/README.md

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
(the general recipe too) so the pipeline cannot rot. ``--models`` runs only some of the three
(the in-domain-only model does not depend on the general one, so a changed general recipe
need not retrain it).

``--table`` rewrites the table in recipes/README.md: a row measured under ``results/``
replaces the row of the same domain and model, and the rows of models not run in this
checkout (``results/`` is not versioned) are kept as written before, as in ``results_table.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import yaml

from run_recipe import CHECK_OVERRIDES, RECIPES, nmt, recipe_path, run as run_recipe, stage_minutes, with_shared_data

ADAPTATIONS = RECIPES / "adaptation"
BEGIN, END = "<!-- adaptation:begin -->", "<!-- adaptation:end -->"
#: the compared models, in table order
MODELS = ("general", "fine-tuned", "in-domain only")
HEADER = ["| domain (test set) | model | sacreBLEU | chrF | prepare+train min (2 cores) |", "|---|---|---|---|---|"]
SIGNATURES = "sacreBLEU signature: "
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


def run(name: str, out_root: Path, check: bool, models: tuple[str, ...] = MODELS) -> Path:
    """Train and score ``models`` (of ``MODELS``) for the adaptation recipe ``name``."""
    spec = with_shared_data(yaml.safe_load((ADAPTATIONS / f"{name}.yaml").read_text(encoding="utf-8")))
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
    checkpoints = {"general": (general_checkpoint, out / "data")}

    if "general" in models or "fine-tuned" in models:
        nmt("prepare", "--config", str(config_path), "--out", str(out / "data"), "--tokenizer-from",
            str(general_checkpoint), *check_sets, log=log)
    if "fine-tuned" in models:
        nmt("train", "--config", str(config_path), *sets(spec["finetune"]), *check_sets, "--init-from",
            str(general_checkpoint), "--data", str(out / "data"), "--out", str(out / "finetune"), log=log)
        minutes["fine-tuned"] = stage_minutes(out / "data", out / "finetune")
        checkpoints["fine-tuned"] = (trained(out / "finetune"), out / "data")
    if "in-domain only" in models:
        nmt("prepare", "--config", str(config_path), *sets(spec["scratch"]), *check_sets, "--out",
            str(out / "data-own"), log=log)
        nmt("train", "--config", str(config_path), *sets(spec["scratch"]), *check_sets, "--data",
            str(out / "data-own"), "--out", str(out / "scratch"), log=log)
        minutes["in-domain only"] = stage_minutes(out / "data-own", out / "scratch")
        checkpoints["in-domain only"] = (trained(out / "scratch"), out / "data-own")

    rows = []
    for label in (model for model in MODELS if model in models):
        checkpoint, data = checkpoints[label]
        scores = translate_and_score(checkpoint, data, out, label.replace(" ", "-"), log)
        rows.append({"model": label, **scores, "minutes": minutes[label]})
    record = {"name": info["name"], "general": info["general"], "check": check, "rows": rows,
              "test": spec["data"]["test_split"]}
    (out / "adaptation.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(render(record_lines([record]), signatures([record])))
    return out


def record_lines(records: list[dict]) -> dict[tuple[str, str], str]:
    """The table row of every model of ``records``, by (domain cell, model)."""
    lines = {}
    for record in records:
        domain = f"{record['name']} ({record['test']})"
        for row in record["rows"]:
            cells = (domain, row["model"], row["bleu"], row["chrf"], row["minutes"])
            lines[domain, row["model"]] = "| " + " | ".join(map(str, cells)) + " |"
    return lines


def signatures(records: list[dict]) -> set[str]:
    """The sacreBLEU signatures the rows of ``records`` were scored with."""
    return {row["signature"] for record in records for row in record["rows"]}


def rendered(block: str) -> tuple[dict[tuple[str, str], str], set[str]]:
    """The rows (by domain cell and model) and the sacreBLEU signatures of a table ``render`` wrote."""
    lines, found = {}, set()
    for line in map(str.strip, block.splitlines()):
        if line.startswith(SIGNATURES):
            found = {item.strip(" `") for item in line[len(SIGNATURES):].split(";") if item.strip()}
        elif line.startswith("| ") and line != HEADER[0]:
            domain, model = (cell.strip() for cell in line.strip("|").split("|")[:2])
            lines[domain, model] = line
    return lines, found


def render(lines: dict[tuple[str, str], str], signature_set: set[str]) -> str:
    """The domain-adaptation table: a row per domain and model (models in ``MODELS`` order),
    then the BLEU signatures."""
    order = sorted(lines, key=lambda key: (key[0], MODELS.index(key[1]) if key[1] in MODELS else len(MODELS)))
    signature_line = SIGNATURES + "; ".join(f"`{signature}`" for signature in sorted(signature_set))
    return "\n".join(HEADER + [lines[key] for key in order] + ["", signature_line])


def write_table(results: Path, readme: Path) -> None:
    """Rewrite the table between the markers of ``readme``: the finished (non-check) runs'
    rows replace those of the same domain and model; the other rows are kept."""
    records = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(results.glob("*/adaptation.json"))]
    records = [record for record in records if not record["check"]]
    if not records:
        sys.exit(f"error: no finished adaptation run under {results}/")
    text = readme.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    block, _, tail = rest.partition(END)
    kept, kept_signatures = rendered(block)
    fresh = record_lines(records)
    kept = {key: line for key, line in kept.items() if key not in fresh}
    table = render({**kept, **fresh}, signatures(records) | (kept_signatures if kept else set()))
    readme.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}", encoding="utf-8")
    print(table)
    for domain, model in sorted(kept):
        print(f"kept from {readme}: {domain} {model}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", nargs="?", help="adaptation recipe (recipes/adaptation/<name>.yaml)")
    parser.add_argument("--out", default="results", type=Path, help="results root (default: results)")
    parser.add_argument("--check", action="store_true", help="tiny slice, a few steps")
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"models to train and score, comma-separated (default: {','.join(MODELS)})")
    parser.add_argument("--table", action="store_true", help="write the table of finished runs into recipes/README.md")
    parser.add_argument("--readme", default=RECIPES / "README.md", type=Path)
    args = parser.parse_args()
    if args.table:
        write_table(args.out, args.readme)
    elif args.name:
        models = tuple(model.strip() for model in args.models.split(",") if model.strip())
        unknown = [model for model in models if model not in MODELS]
        if unknown or not models:
            parser.error(f"--models: {', '.join(unknown) or 'none given'}; choose from {', '.join(MODELS)}")
        run(args.name, args.out, args.check, models)
    else:
        parser.error("name an adaptation recipe, or --table")


if __name__ == "__main__":
    main()
