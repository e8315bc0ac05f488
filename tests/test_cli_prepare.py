"""`nmt prepare` through Click: report, options, and one-line errors with exit status 1."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

import nmt_cli.cli.prepare  # noqa: F401  (registers the command)
from nmt_cli.cli import cli
from tests.conftest import REPO

SMALL = ["--set", "data.synthetic_train_size=300", "--set", "data.synthetic_valid_size=20",
         "--set", "data.synthetic_test_size=20", "--set", "data.vocab_size=200"]


def invoke(*args):
    return CliRunner().invoke(cli, ["prepare", *args])


def test_prepare_synthetic_reports_and_reuses(tmp_path):
    result = invoke(*SMALL, "--out", str(tmp_path / "p"), "--quiet")
    assert result.exit_code == 0, result.output
    assert "prepared" in result.stdout and "train        300 pairs" in result.stdout
    assert "vocab bpe joint 200" in result.stdout and "pairs/s" in result.stdout
    again = invoke(*SMALL, "--out", str(tmp_path / "p"), "--quiet")
    assert again.exit_code == 0 and again.stdout.startswith("reused")


def test_config_file_and_skip_invalid(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.de").write_bytes(b"".join(b"Satz %d ist gut .\n" % i for i in range(50)) + b"kaputt \xff\n")
    (corpus / "train.en").write_bytes(b"".join(b"Sentence %d is good .\n" % i for i in range(51)))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"data:\n  source: files\n  path: {corpus}\n  valid_split: ''\n  test_split: ''\n"
                      "  vocab_size: 60\n")
    failed = invoke("--config", str(recipe), "--out", str(tmp_path / "out"), "--quiet")
    assert failed.exit_code == 1
    assert failed.stderr.strip().count("\n") == 0
    assert f"{corpus / 'train.de'}:51: not valid UTF-8" in failed.stderr
    skipped = invoke("--config", str(recipe), "--out", str(tmp_path / "out"), "--on-invalid", "skip", "--quiet")
    assert skipped.exit_code == 0, skipped.output
    assert "50 pairs (read 51; dropped: invalid_utf8 1" in skipped.stdout


def test_mismatched_and_missing_files_fail_with_one_line(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.de").write_text("a\nb\n")
    (corpus / "train.en").write_text("a\n")
    common = ["--set", "data.source=files", "--set", f"data.path={corpus}", "--out", str(tmp_path / "o"), "-q"]
    mismatched = invoke(*common, "--set", "data.valid_split=", "--set", "data.test_split=")
    assert mismatched.exit_code == 1
    assert "train.de:2: train.en ends at line 1 but train.de goes on" in mismatched.stderr
    missing = invoke(*common)
    assert missing.exit_code == 1 and "validation.de: file not found" in missing.stderr
    (corpus / "train.en").write_text("")
    empty = invoke(*common)
    assert empty.exit_code == 1 and "train.en: empty file" in empty.stderr


def test_unknown_key_and_bad_choice(tmp_path):
    unknown = invoke("--set", "data.vocab=5", "--out", str(tmp_path / "o"))
    assert unknown.exit_code == 1 and "unknown config key 'data.vocab'" in unknown.stderr
    assert "vocab_size" in unknown.stderr and "Traceback" not in unknown.output
    bad = invoke("--on-invalid", "ignore", "--out", str(tmp_path / "o"))
    assert bad.exit_code == 2 and "'ignore' is not one of 'error', 'skip'" in bad.stderr


@pytest.mark.slow  # nmt in a subprocess
def test_module_entry_point_runs_prepare(tmp_path):
    process = subprocess.run(
        [sys.executable, "-m", "nmt_cli", "prepare", *SMALL, "--out", str(tmp_path / "p")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert process.returncode == 0, process.stderr
    assert "prepared" in process.stdout and "read train (train): 300 pairs" in process.stderr
