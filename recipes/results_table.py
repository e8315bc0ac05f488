"""Rebuild the results table in recipes/README.md from ``results/<name>/summary.json``.

    python recipes/results_table.py [--results results] [--readme recipes/README.md]

The table sits between the ``<!-- results:begin -->`` and ``<!-- results:end -->``
markers and is never typed by hand: each row comes from a finished ``make recipe``
run, with the sacreBLEU signature and the like-for-like (lowercased, 13a) BLEU next to
the recipe's expected score. A run under ``results/`` replaces its recipe's row; the
rows of recipes not run in this checkout (``results/`` is not versioned) are kept as
the script wrote them before, so one new run never erases the others.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

RECIPES = Path(__file__).resolve().parent
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
SIGNATURES = "sacreBLEU signature: "
COLUMNS = [
    ("recipe", "recipe"),
    ("bleu", "sacreBLEU"),
    ("bleu_lc_tok", "BLEU lc+13a"),
    ("chrf", "chrF"),
    ("params", "parameters"),
    ("prepare_train_minutes", "prepare+train min"),
    ("steps", "steps"),
    ("peak_rss_mb", "peak RSS MB"),
    ("aer", "AER"),
    ("expected", "expected (source in the recipe)"),
]
HEADER = "| " + " | ".join(title for _, title in COLUMNS) + " |"


def read_rows(results: Path) -> list[dict]:
    """The ``summary.json`` row of every finished run under ``results/``, by recipe name.

    The expected score is the recipe file's current statement (it may have been restated
    from a measured run since), falling back to what the run recorded.
    """
    rows = []
    for path in sorted(results.glob("*/summary.json")):
        row = json.loads(path.read_text(encoding="utf-8"))
        recipe_file = RECIPES / f"{row.get('recipe')}.yaml"
        if recipe_file.is_file():
            recipe = yaml.safe_load(recipe_file.read_text(encoding="utf-8")).get("recipe", {})
            row["expected"] = recipe.get("expected_score", row.get("expected", ""))
        rows.append(row)
    return rows


NUMBER_FORMATS = {"params": "{:,}", "steps": "{:,}", "aer": "{:.3f}", "peak_rss_mb": "{:,.0f}"}


def _cell(key: str, value) -> str:
    """One table cell: thousands separated, AER to three places, a missing value as ``-``."""
    if value is None or value == "":
        return "-"
    if key in NUMBER_FORMATS and isinstance(value, (int, float)):
        return NUMBER_FORMATS[key].format(value)
    return str(value)


def _row_line(row: dict) -> str:
    """One rendered table row; a run with ``--set`` overrides is labelled with them."""
    cells = [_cell(key, row.get(key)) for key, _ in COLUMNS]
    if row.get("overrides"):
        cells[0] += " (" + ", ".join(f"`{item}`" for item in row["overrides"]) + ")"
    return "| " + " | ".join(cells) + " |"


def _render(lines: list[str], signatures: set[str]) -> str:
    """Header, the given row lines, then the sacreBLEU signatures they were scored with."""
    if not lines:
        return "_No finished recipe runs in results/ yet._"
    signature_line = SIGNATURES + "; ".join(f"`{s}`" for s in sorted(signatures))
    return "\n".join([HEADER, "|" + "---|" * len(COLUMNS), *lines, "", signature_line])


def table(rows: list[dict]) -> str:
    """Markdown table of result rows (missing values as ``-``), then the sacreBLEU signatures.

    ``run_recipe.py`` writes each run's ``summary.md`` with this too, so the one-row
    summary and the README table never disagree on a cell.
    """
    return _render([_row_line(row) for row in rows], {row["signature"] for row in rows if row.get("signature")})


def rendered_rows(rendered: str) -> dict[str, str]:
    """The row lines of a table this script wrote, by recipe name (the first word of the first cell)."""
    lines = rendered.splitlines()
    return {line[2:].split(" ", 1)[0]: line for line in lines if line.startswith("| ") and line != HEADER}


def updated_table(previous: str, rows: list[dict]) -> str:
    """``previous`` (a table this script wrote) with each of ``rows`` replacing its recipe's row.

    Rows are ordered by recipe name; the signatures line keeps the earlier rows' signatures.
    """
    kept = rendered_rows(previous)
    signatures = {
        sig.strip("` ") for line in previous.splitlines() if line.startswith(SIGNATURES)
        for sig in line[len(SIGNATURES):].split(";") if sig.strip("` ")
    }
    kept.update({row["recipe"]: _row_line(row) for row in rows})
    signatures |= {row["signature"] for row in rows if row.get("signature")}
    return _render([kept[name] for name in sorted(kept)], signatures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results", type=Path)
    parser.add_argument("--readme", default=RECIPES / "README.md", type=Path)
    args = parser.parse_args()
    text = args.readme.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    previous, _, tail = rest.partition(END)
    rows = read_rows(args.results)
    rendered = updated_table(previous.strip("\n"), rows)
    args.readme.write_text(f"{head}{BEGIN}\n{rendered}\n{END}{tail}", encoding="utf-8")
    print(rendered)
    kept = sorted(set(rendered_rows(previous)) - {row["recipe"] for row in rows})
    if kept:
        print(f"kept from {args.readme} (no run under {args.results}/): {', '.join(kept)}")


if __name__ == "__main__":
    main()
