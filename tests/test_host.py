"""``nmt_cli.host``: the fields of ``/proc/cpuinfo``, read one way by the library and the bench."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt_cli import host

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu avx2 avx512f
vendor_id_extra\t: not this one

processor\t: 1
vendor_id\t: GenuineIntel
"""


@pytest.fixture
def fake_cpuinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO, encoding="utf-8")
    monkeypatch.setattr(host, "CPUINFO", path)
    return path


def test_a_field_is_the_value_of_the_first_line_of_that_name(fake_cpuinfo: Path) -> None:
    assert host.cpuinfo_field("vendor_id") == "AuthenticAMD"  # the first processor's, not the second's
    assert host.cpuinfo_field("model name") == "AMD EPYC 9R14"
    assert host.cpuinfo_field("flags") == "fpu avx2 avx512f"
    assert host.cpuinfo_field("vendor") is None  # a name, not a prefix
    assert host.cpuinfo_field("Features") is None


def test_without_the_file_every_field_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "CPUINFO", tmp_path / "absent")
    assert host.cpuinfo_field("vendor_id") is None
