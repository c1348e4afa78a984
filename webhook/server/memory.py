"""How the server keeps its resident memory near what it really holds, in one place.

`tune(loop)` is called once, by `serving.serve`, before anything listens; it makes three
settings and says what it did, for the start-up log:

- glibc's mmap threshold, fixed at MMAP_THRESHOLD. glibc serves an allocation of at least
  the "mmap threshold" (128 KiB at first) with a mapping of its own, returned to the system
  when freed, and the rest from its heap. By default the threshold moves: each time a mapped
  block larger than it is freed, it rises to that size (up to 32 MiB). One 7 MiB review
  raises it to 7 MiB, and from then on the 256 KiB read buffer uvloop's TLS keeps for each
  connection comes from the heap, carved out of pages the large review left resident; those
  pages stay resident for as long as the connection is open, and no trim can return them.
  Measured with 2,000 idle connections while 7 MiB reviews arrive (bench/soak.py, one
  minute): 710-730 MB resident with the moving threshold, 200-360 MB with it fixed. Fixed
  at 256 KiB, each connection's buffer is a mapping of its own, resident only in the pages a
  read touches; large review buffers are mapped and unmapped as they come and go.
- glibc's malloc arenas, at most ARENA_MAX. glibc makes an arena for each thread that
  allocates; large reviews run on two threads. Two arenas keep a burst of 7 MiB reviews from
  fragmenting memory across more, which trimming cannot give back (with two arenas the soak
  of docs/robustness.md ran ~5 % lower). This was the Deployment's `MALLOC_ARENA_MAX=2`; set
  here, `gpu-share-webhook serve` outside Kubernetes runs with the same.
- asyncio's TLS read buffer, on asyncio's own event loop only (uvloop has its own TLS).
  asyncio keeps a 256 KiB read buffer per connection, allocated when it is made: with a
  thousand idle connections that is 256 MB. ASYNCIO_TLS_BUFFER_BYTES holds the largest TLS
  record (16 KiB), so reads are no fewer for it.

An operator who sets glibc's own knobs keeps them: `MALLOC_MMAP_THRESHOLD_` or
`GLIBC_TUNABLES` naming `glibc.malloc.mmap_threshold` leaves the threshold alone, and
`MALLOC_ARENA_MAX` or `glibc.malloc.arena_max` the arenas.

`Trimmer`, one per server (`states.State.trimmer`): after large reviews, the free pages
inside the heap go back to the system too (`malloc_trim`), at most once a second.

`limits.READ_BUFFER_BYTES` is tied to MMAP_THRESHOLD: it stays below it, see there.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import ctypes
import ctypes.util
import gc
import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor

# Allocations of this size or more get a mapping of their own. uvloop's TLS read buffer is
# 256 KiB exactly (its SSL_READ_MAX_SIZE); the copies of what is read
# (`limits.READ_BUFFER_BYTES`) stay below it.
MMAP_THRESHOLD = 256 * 1024
ARENA_MAX = 2
ASYNCIO_TLS_BUFFER_BYTES = 16 * 1024 + 512
# After a large review, trims no more often than this: a trim of a large heap takes
# milliseconds, and a burst of large reviews needs only the last one.
TRIM_EVERY_SECONDS = 1.0

# mallopt's parameter numbers (malloc.h).
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

_LIBC_NAME = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_NAME) if _LIBC_NAME else None
_MALLOPT = getattr(_LIBC, "mallopt", None)
_MALLOC_TRIM = getattr(_LIBC, "malloc_trim", None)


def tune(loop: asyncio.AbstractEventLoop, environ: Mapping[str, str] | None = None) -> str:
    """Make this process's memory settings (the module docstring); what was done, in a line
    for the start-up log. Once per process, before the server listens."""
    environ = os.environ if environ is None else environ
    threshold_chosen = _chosen(environ, "MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold")
    arenas_chosen = _chosen(environ, "MALLOC_ARENA_MAX", "glibc.malloc.arena_max")
    done = [
        _mallopt(
            "mmap threshold",
            _M_MMAP_THRESHOLD,
            MMAP_THRESHOLD,
            f"fixed at {MMAP_THRESHOLD // 1024} KiB",
            operator_chose=threshold_chosen,
        ),
        _mallopt(
            "malloc arenas",
            _M_ARENA_MAX,
            ARENA_MAX,
            f"at most {ARENA_MAX}",
            operator_chose=arenas_chosen,
        ),
    ]
    if isinstance(loop, asyncio.BaseEventLoop):
        asyncio.sslproto.SSLProtocol.max_size = ASYNCIO_TLS_BUFFER_BYTES
        done.append(f"asyncio TLS read buffer: {ASYNCIO_TLS_BUFFER_BYTES / 1024:g} KiB")
    return "; ".join(done)


def _chosen(environ: Mapping[str, str], variable: str, tunable: str) -> bool:
    return variable in environ or tunable in environ.get("GLIBC_TUNABLES", "")


def _mallopt(what: str, parameter: int, value: int, fixed: str, *, operator_chose: bool) -> str:
    if operator_chose:
        return f"{what}: as the environment sets it"
    if _MALLOPT is None:
        return f"{what}: not glibc, left as it is"
    if _MALLOPT(parameter, value) != 1:
        return f"{what}: glibc refused the setting, left as it is"
    return f"{what}: {fixed}"


class Trimmer:
    """Returns the heap's free pages to the system after large reviews, on a thread (a trim
    of a large heap takes milliseconds, and releases the GIL), at most once every
    TRIM_EVERY_SECONDS. Where glibc is not the C library, does nothing."""

    __slots__ = ("_clock", "last")

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # When the last trim was asked for (on `clock`), if one was.
        self.last: float | None = None

    @property
    def can_trim(self) -> bool:
        return _MALLOC_TRIM is not None

    def after_large_review(self, executor: Executor | None) -> None:
        """Trim on `executor`, unless one was asked for within the last TRIM_EVERY_SECONDS."""
        if not self.can_trim or executor is None:
            return
        now = self._clock()
        if self.last is not None and now - self.last < TRIM_EVERY_SECONDS:
            return
        self.last = now
        # A review that finishes while the server shuts down finds the executor closed.
        with contextlib.suppress(RuntimeError):
            executor.submit(trim)


def trim() -> None:
    """Free what only the collector frees, then return the heap's free pages to the system.

    A large review's body can outlive its request in a reference cycle (a future, the
    exception it carries, that exception's traceback, a frame that holds the future and the
    body): Python's collector frees such cycles only when enough new objects have been
    made, which a server answering few, large reviews may not do for long. Measured with
    100 connections of one address sending 7 MiB bodies: ~20 bodies alive at once after
    their requests. The objects made at start-up are frozen (`serving.serve`), so a full
    collection here takes milliseconds."""
    gc.collect()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
