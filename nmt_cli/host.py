"""The machine's CPU as ``/proc/cpuinfo`` describes it; torch-free, so that the bench harness
(which keeps torch out of its shared module) and the library read it the same way."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CPUINFO", "cpuinfo_field"]

CPUINFO = Path("/proc/cpuinfo")


def cpuinfo_field(name: str) -> str | None:
    """The value of the first ``/proc/cpuinfo`` line named ``name`` (``vendor_id``, ``model name``,
    ``flags``), stripped; None where there is no such line or no such file (another OS)."""
    try:
        with CPUINFO.open(encoding="utf-8", errors="replace") as info:
            for line in info:
                key, colon, value = line.partition(":")
                if colon and key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None
