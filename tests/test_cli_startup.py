"""Commands that never run a model must not import torch (seconds of start-up per call); ``nmt --help``,
``--version`` and shell completion import no command module at all."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nmt_cli import __version__
from nmt_cli.cli import COMMAND_HELP, COMMAND_MODULES, cli

SCRIPT = """
import sys
from nmt_cli.cli import main
try:
    main({args!r})
except SystemExit as exit:
    assert exit.code in (0, None), exit.code
print("torch" in sys.modules)
"""


def _imports_torch(args: list[str]) -> bool:
    result = subprocess.run([sys.executable, "-c", SCRIPT.format(args=args)], capture_output=True, text=True,
                            check=True)
    return result.stdout.strip().splitlines()[-1] == "True"


def test_scoring_text_files_and_help_do_not_import_torch(tmp_path):
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a small test\n", encoding="utf-8")
    assert not _imports_torch(["evaluate", "--hyp", str(hyp), "--ref", str(hyp), "--metrics", "bleu"])
    assert not _imports_torch(["prepare", "--help"])
    assert not _imports_torch(["translate", "--help"])
    assert _imports_torch(["align", "--help"])  # the probe does see torch when a command loads it


# ---- nmt --help, --version and shell completion: no command module, no torch -------------------------

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "numpy", "sentencepiece", "sacrebleu", "yaml")

PROBE = """
import sys
from nmt_cli.cli import main
try:
    main({args!r})
except SystemExit as exit:
    assert exit.code in (0, None), exit.code
print("\\nloaded:", ",".join(sorted(name for name in {heavy!r} if name in sys.modules)))
"""


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, COLUMNS="80", **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return env


def _probe(args: list[str], **env: str) -> tuple[str, set[str], float]:
    """(stdout, heavy modules it imported, CPU seconds it took) of ``nmt ARGS`` in a fresh Python."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run([sys.executable, "-c", PROBE.format(args=args, heavy=HEAVY)], capture_output=True,
                            text=True, check=True, env=_env(**env), cwd=REPO)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    output, _, loaded = result.stdout.rpartition("\nloaded:")
    return output, set(filter(None, loaded.strip().split(","))), cpu


@pytest.mark.parametrize("args, env", [
    (["--help"], {}),
    (["--version"], {}),
    ([], {"_NMT_COMPLETE": "bash_complete", "COMP_WORDS": "nmt ", "COMP_CWORD": "1"}),
    ([], {"_NMT_COMPLETE": "zsh_complete", "COMP_WORDS": "nmt tr", "COMP_CWORD": "1"}),
    ([], {"_NMT_COMPLETE": "bash_source"}),
], ids=["help", "version", "complete-commands", "complete-zsh", "completion-script"])
def test_help_version_and_completion_are_quick(args, env):
    """They import no command module and nothing heavy: about 0.15 s of CPU on a loaded 2-core machine
    (torch alone takes seconds). CPU time, not wall time, so a busy machine does not fail the test."""
    output, loaded, cpu = _probe(args, **env)
    assert output.strip()
    assert not loaded, f"nmt {' '.join(args) or env} imported {sorted(loaded)}"
    assert cpu < 1.0, f"nmt {' '.join(args) or env} took {cpu:.2f} s of CPU; expected well under 0.3 s"


def test_version_is_the_package_version():
    output, _, _ = _probe(["--version"])
    assert output.strip() == f"nmt, version {__version__}"
    declared = re.search(r'^version = "(.*)"$', (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    assert declared and declared.group(1) == __version__


def test_command_names_complete_with_their_summaries():
    output, _, _ = _probe([], _NMT_COMPLETE="bash_complete", COMP_WORDS="nmt tr", COMP_CWORD="1")
    assert output.split() == ["plain,train", "plain,translate"]
    output, _, _ = _probe([], _NMT_COMPLETE="zsh_complete", COMP_WORDS="nmt ev", COMP_CWORD="1")
    assert output.split("\n")[:3] == ["plain", "evaluate", "Score translations with sacreBLEU (BLEU,..."]


def test_the_summary_table_is_each_commands_own_docstring():
    """COMMAND_HELP is what ``nmt --help`` lists without loading the commands: it must say what each
    command's docstring says (the first paragraph, as Click's short help takes it)."""
    assert set(COMMAND_HELP) == set(COMMAND_MODULES)
    for name, module in COMMAND_MODULES.items():
        importlib.import_module(f"nmt_cli.cli.{module}")
        command = cli.commands[name]
        first_paragraph = " ".join(inspect.cleandoc(command.help).split("\n\n")[0].split())
        assert COMMAND_HELP[name] == first_paragraph, f"update COMMAND_HELP[{name!r}] in nmt_cli/cli/__init__.py"


def test_help_lists_the_same_summaries_as_the_loaded_commands():
    lazy, _, _ = _probe(["--help"])
    for module in set(COMMAND_MODULES.values()):
        importlib.import_module(f"nmt_cli.cli.{module}")
    loaded = CliRunner().invoke(cli, ["--help"], prog_name="nmt", terminal_width=78)  # Click: 80 columns less 2
    assert loaded.exit_code == 0
    assert lazy.strip() == loaded.output.strip()
