"""The user documentation cannot go stale: README.md and docs/*.md are checked here.

- every shell block a guide marks as runnable (```` ```bash runnable ````) runs, in order, in a
  temporary folder that has the checkout's ``recipes/`` and ``docs/`` (so the tiny example
  config ``docs/examples/tiny.yaml`` is there), with this Python's ``nmt`` first on PATH;
- ``docs/config.md`` is what ``python -m nmt_cli.config_reference`` writes from the config classes;
- relative links (files, and ``BENCHMARKS.md#section`` anchors) lead somewhere, BENCHMARKS.md's own too;
- the README stays short and quotes no figures (they are links to BENCHMARKS.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
BENCHMARKS = REPO / "BENCHMARKS.md"
GUIDES = ["installing", "training", "translating", "serving", "alignments", "reusing", "troubleshooting"]
PAGES = [README] + sorted(DOCS.glob("*.md"))
RUNNABLE = re.compile(r"^```bash runnable[^\n]*\n(.*?)^```", re.M | re.S)
BLOCK_TIMEOUT_S = 600  # one block on a busy 2-core machine; each takes seconds alone


def runnable_blocks(page: Path) -> list[str]:
    return RUNNABLE.findall(page.read_text(encoding="utf-8"))


def run_page(page: Path, workdir: Path) -> None:
    """Run the page's runnable blocks in order in ``workdir``, as a reader would from the checkout root."""
    for name in ("recipes", "docs"):
        if not (workdir / name).exists():
            (workdir / name).symlink_to(REPO / name, target_is_directory=True)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("NMT_DEBUG", None)
    for number, block in enumerate(runnable_blocks(page), 1):
        try:
            result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=workdir, env=env,
                                    capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{page.name}, runnable block {number} ran past {BLOCK_TIMEOUT_S} s:\n{block}\n"
                        f"{(exc.stdout or '')[-2000:]}{(exc.stderr or '')[-2000:]}")
        assert result.returncode == 0, (
            f"{page.name}, runnable block {number} exited {result.returncode}:\n{block}\n--- stdout\n"
            f"{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")


def test_every_guide_exists_and_has_runnable_blocks():
    for guide in GUIDES:
        page = DOCS / f"{guide}.md"
        assert page.is_file(), f"docs/{guide}.md is missing"
        assert runnable_blocks(page), f"docs/{guide}.md has no ```bash runnable block"
    for page in PAGES:  # a typo in the marker would leave a block unchecked
        for marker in re.findall(r"^```(bash[^\n]*)$", page.read_text(encoding="utf-8"), re.M):
            assert marker in ("bash", "bash runnable"), f"{page.name}: unknown block marker ```{marker}"


@pytest.mark.slow
@pytest.mark.parametrize("page", [README] + [DOCS / f"{guide}.md" for guide in GUIDES],
                         ids=["README"] + GUIDES)
def test_runnable_blocks_run(page, tmp_path):
    if not runnable_blocks(page):
        pytest.skip(f"{page.name} has no runnable blocks")
    run_page(page, tmp_path)


def test_config_reference_is_up_to_date():
    from nmt_cli.config_reference import markdown

    written = (DOCS / "config.md").read_text(encoding="utf-8")
    assert written == markdown(), (
        "docs/config.md is out of date with nmt_cli/config.py (or a registry's entries); regenerate it with "
        "`make config-doc` (python -m nmt_cli.config_reference docs/config.md) and commit it")


def test_config_reference_names_every_key():
    from nmt_cli.config import Config

    written = (DOCS / "config.md").read_text(encoding="utf-8")
    for section, values in Config().to_dict().items():
        for key in values:
            assert f"| `{section}.{key}` |" in written, f"docs/config.md lacks {section}.{key}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_relative_links_lead_somewhere():
    for page in [*PAGES, BENCHMARKS]:  # BENCHMARKS.md: its contents' and notes' links to its sections
        text = RUNNABLE.sub("", page.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), f"{page.name}: link to {target} leads nowhere"
            if anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), re.M)
                assert anchor in {_slug(h) for h in headings}, f"{page.name}: no section #{anchor} in {file.name}"


#: what a newcomer reads in five minutes: words of the README, link targets not counted
README_WORDS = 1150
#: a line longer than this is a list that grew in place: it belongs in BENCHMARKS.md's contents
README_LINE_CHARACTERS = 300


def test_readme_is_short_and_quotes_no_figures():
    text = README.read_text(encoding="utf-8")
    words = len(re.sub(r"\]\([^)]*\)", "]", text).split())
    assert words <= README_WORDS, f"README: {words} words, more than a five-minute read ({README_WORDS})"
    long = [number for number, line in enumerate(text.splitlines(), 1) if len(line) > README_LINE_CHARACTERS]
    assert not long, f"README: lines {long} are longer than {README_LINE_CHARACTERS} characters"
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"\]\([^)]*\)", "]", prose)  # link targets
    assert not re.findall(r"\b\d+\.\d+\b|\d+(?:\.\d+)?x\b|\d+ ?%", prose), \
        "README: figures belong in BENCHMARKS.md; link to its row instead"


def test_make_targets_the_docs_name():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for target in ("demo", "test", "test-fast", "config-doc"):
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"Makefile has no {target} target"
