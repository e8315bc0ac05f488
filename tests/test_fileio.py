"""Atomic writes: whole files or nothing, with the permissions a plain open() would give."""

from __future__ import annotations

import os
import stat

import pytest

from nmt_cli.errors import NmtError
from nmt_cli.fileio import atomic_directory, atomic_open, atomic_write_json, atomic_write_text, output_lock


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_failed_write_keeps_the_previous_file(tmp_path):
    target = tmp_path / "out.txt"
    atomic_write_text(target, "old\n")
    with pytest.raises(RuntimeError):
        with atomic_open(target) as handle:
            handle.write("half of the new")
            raise RuntimeError("killed")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no temporary left behind


def test_files_and_directories_get_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_json(tmp_path / "a.json", {"x": 1})
        with atomic_directory(tmp_path / "d") as tmp:
            (tmp / "inner").write_text("x")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a.json") == 0o644
    assert _mode(tmp_path / "d") == 0o755


def test_directory_replaced_only_when_complete(tmp_path):
    target = tmp_path / "ckpt"
    owned = {"weights"}.__contains__  # what this kind of output holds: it may replace such a directory
    with atomic_directory(target, owned) as tmp:
        (tmp / "weights").write_text("v1")
    with pytest.raises(KeyboardInterrupt):
        with atomic_directory(target, owned) as tmp:
            (tmp / "weights").write_text("v2 partial")
            raise KeyboardInterrupt
    assert (target / "weights").read_text() == "v1"
    with atomic_directory(target, owned) as tmp:
        (tmp / "weights").write_text("v2")
    assert (target / "weights").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_directory_with_other_files_or_the_inputs_is_never_replaced(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(NmtError, match="holds notes.txt"):
        with atomic_directory(target, {"weights"}.__contains__):
            pass
    source = tmp_path / "data" / "input.txt"
    source.parent.mkdir()
    source.write_text("x")
    with pytest.raises(NmtError, match="contains the input"):
        with atomic_directory(tmp_path / "data", inputs=[source]):
            pass
    assert (target / "notes.txt").read_text() == "mine" and source.read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "out"]


def test_a_second_writer_of_an_output_fails_naming_the_first(tmp_path):
    target = tmp_path / "out.txt"
    with output_lock(target):
        with pytest.raises(NmtError, match=f"in use by pid {os.getpid()}"):
            atomic_write_text(target, "second")
    atomic_write_text(target, "after")
    assert target.read_text() == "after"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_temporaries_of_a_writer_that_is_gone_are_removed(tmp_path):
    dead = 999_999_999  # above any pid Linux hands out (pid_max is at most 2**22)
    (tmp_path / f".out.txt.{dead}.abcd1234.tmp").write_text("half")
    (tmp_path / f".out.txt.{os.getpid()}.efgh5678.tmp").write_text("ours, still running")
    atomic_write_text(tmp_path / "out.txt", "whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".out.txt.{os.getpid()}.efgh5678.tmp", "out.txt"]


def test_a_symlink_keeps_pointing_at_its_target(tmp_path):
    (tmp_path / "real.txt").write_text("old")
    (tmp_path / "link.txt").symlink_to("real.txt")
    atomic_write_text(tmp_path / "link.txt", "new")
    assert os.readlink(tmp_path / "link.txt") == "real.txt" and (tmp_path / "real.txt").read_text() == "new"


def test_a_symlinked_directory_output_is_replaced_where_it_points(tmp_path):
    owned = {"weights"}.__contains__
    with atomic_directory(tmp_path / "elsewhere", owned) as tmp:
        (tmp / "weights").write_text("v1")
    (tmp_path / "out").symlink_to("elsewhere")
    with atomic_directory(tmp_path / "out", owned) as tmp:
        (tmp / "weights").write_text("v2")
    assert os.readlink(tmp_path / "out") == "elsewhere"
    assert (tmp_path / "elsewhere" / "weights").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "out"]
