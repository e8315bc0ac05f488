"""Commands that never run a model must not import torch (seconds of start-up per call)."""

from __future__ import annotations

import subprocess
import sys

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
