"""Atomic writes: whole files or nothing, with the permissions a plain open() would give."""

from __future__ import annotations

import os
import stat

import pytest

from nmt_cli.fileio import atomic_directory, atomic_open, atomic_write_json, atomic_write_text


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
