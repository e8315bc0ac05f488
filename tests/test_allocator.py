"""The glibc allocator settings apply once and report whether they took effect."""

from __future__ import annotations

import ctypes.util
import platform

from nmt_cli.allocator import keep_freed_memory


def test_keep_freed_memory_takes_effect_on_glibc_and_is_idempotent():
    applied = keep_freed_memory()
    glibc = platform.libc_ver()[0] == "glibc" and ctypes.util.find_library("c") is not None
    assert applied is glibc
    assert keep_freed_memory() is applied
