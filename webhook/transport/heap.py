"""How the server's memory goes back to the system (glibc's malloc; elsewhere, nothing).

Two settings keep a replica's resident memory near what it really holds:

- `fix_mmap_threshold()`, once at start-up. glibc serves an allocation of at least the
  "mmap threshold" (128 KiB at first) with a mapping of its own, returned to the system when
  freed, and the rest from its heap. By default the threshold moves: each time a mapped
  block larger than it is freed, it rises to that size (up to 32 MiB). One 7 MiB review
  raises it to 7 MiB, and from then on the 256 KiB read buffer uvloop's TLS keeps for each
  connection comes from the heap, carved out of pages the large review left resident; those
  pages stay resident for as long as the connection is open, and no trim can return them.
  Measured with 2,000 idle connections while 7 MiB reviews arrive (bench/soak.py, one
  minute): 710-730 MB resident with the moving threshold, 200-360 MB with it fixed. Fixed
  at 256 KiB, each connection's buffer is a mapping of its own, resident only in the pages a read
  touches; large review buffers are mapped and unmapped as they come and go.
- `trim()`, after large reviews: returns the free pages inside the heap as well.

An operator who sets glibc's own knobs (`MALLOC_MMAP_THRESHOLD_`, or `GLIBC_TUNABLES` naming
`glibc.malloc.mmap_threshold`) keeps them: `fix_mmap_threshold()` then changes nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Mapping

# Allocations of this size or more get a mapping of their own. uvloop's TLS read buffer is
# 256 KiB exactly (its SSL_READ_MAX_SIZE); the copies of what is read
# (`limits.READ_BUFFER_BYTES`) stay below it.
MMAP_THRESHOLD = 256 * 1024
# mallopt's parameter number for the threshold (malloc.h).
_M_MMAP_THRESHOLD = -3

_LIBC_NAME = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_NAME) if _LIBC_NAME else None
_MALLOPT = getattr(_LIBC, "mallopt", None)
_MALLOC_TRIM = getattr(_LIBC, "malloc_trim", None)


def operator_chose(environ: Mapping[str, str]) -> bool:
    """Whether the environment already sets glibc's mmap threshold."""
    tunables = environ.get("GLIBC_TUNABLES", "")
    return "MALLOC_MMAP_THRESHOLD_" in environ or "glibc.malloc.mmap_threshold" in tunables


def fix_mmap_threshold(environ: Mapping[str, str] | None = None) -> str:
    """Fix glibc's mmap threshold at MMAP_THRESHOLD; say what was done, for the start-up log."""
    if operator_chose(os.environ if environ is None else environ):
        return "mmap threshold: as the environment sets it"
    if _MALLOPT is None:
        return "mmap threshold: not glibc, left as it is"
    if _MALLOPT(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1:
        return "mmap threshold: glibc refused the setting, left as it is"
    return f"mmap threshold: fixed at {MMAP_THRESHOLD // 1024} KiB"


def can_trim() -> bool:
    return _MALLOC_TRIM is not None


def trim() -> None:
    """Return the heap's free pages to the system (takes milliseconds on a large heap, and
    releases the GIL: call it on a thread)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
