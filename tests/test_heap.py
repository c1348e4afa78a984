"""The allocator settings `serve` makes at start-up (webhook/transport/heap.py).

What they are for is measured, not asserted here: `python bench/soak.py` (docs/robustness.md).
"""

from __future__ import annotations

import ctypes.util
import platform

import pytest

from webhook.transport import heap


@pytest.mark.parametrize(
    ("environ", "chose"),
    [
        ({}, False),
        ({"MALLOC_ARENA_MAX": "2"}, False),
        ({"MALLOC_MMAP_THRESHOLD_": "131072"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, False),
    ],
)
def test_what_the_operator_set_is_kept(environ: dict[str, str], chose: bool) -> None:
    assert heap.operator_chose(environ) is chose
    if chose:
        assert heap.fix_mmap_threshold(environ) == "mmap threshold: as the environment sets it"


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not ctypes.util.find_library("c"),
    reason="the threshold is glibc's",
)
def test_on_glibc_the_threshold_is_fixed() -> None:
    assert heap.fix_mmap_threshold({}) == "mmap threshold: fixed at 256 KiB"
    assert heap.can_trim()
    heap.trim()
