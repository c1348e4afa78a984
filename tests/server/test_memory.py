"""The memory settings `serve` makes at start-up, and the heap's trimming (transport/memory.py).

What the settings are for is measured, not asserted here: `python bench/soak.py`
(docs/robustness.md). What is asserted is that each one takes effect in glibc as the
docstring says: each probe runs in a fresh interpreter (the settings are the process's, and
the test process keeps its own), asks `memory.tune` for them, then allocates through libc and
reads glibc's own accounts (`mallinfo2` for mapped blocks, `malloc_info` for arenas).
"""

from __future__ import annotations

import ctypes.util
import gc
import json
import os
import platform
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.kube import REPO
from webhook.server import limits, memory

GLIBC = platform.libc_ver()[0] == "glibc" and ctypes.util.find_library("c") is not None
glibc_only = pytest.mark.skipif(not GLIBC, reason="the settings are glibc's")

KIB = 1024
MIB = 1024 * KIB

# Run in a fresh interpreter: tune (or not), then measure what glibc does.
PROBE = textwrap.dedent(
    """
    import asyncio, asyncio.sslproto, ctypes, ctypes.util, json, re, sys, tempfile, threading

    from webhook.server import memory

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.fopen.restype = ctypes.c_void_p
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    libc.mallinfo2.restype = Mallinfo2

    def mapped(size):
        # Whether a block of `size` gets a mapping of its own (glibc counts those: hblks).
        # glibc asks the threshold only when the heap has no free space for the block, so
        # the free space is given back first: what start-up left there depends on the run
        # (with or without bytecode files to read, say).
        libc.malloc_trim(0)
        before = libc.mallinfo2().hblks
        block = libc.malloc(size)
        after = libc.mallinfo2().hblks
        libc.free(block)
        return after > before

    def arenas(threads):
        # Arenas in use while `threads` threads have each allocated (and are still alive).
        ready, done = threading.Barrier(threads + 1), threading.Event()
        def allocate():
            libc.free(libc.malloc(1000))
            ready.wait()
            done.wait()
        running = [threading.Thread(target=allocate) for _ in range(threads)]
        for thread in running:
            thread.start()
        ready.wait()
        with tempfile.NamedTemporaryFile(suffix=".xml") as out:
            stream = libc.fopen(out.name.encode(), b"w")
            libc.malloc_info(0, stream)
            libc.fclose(stream)
            xml = open(out.name).read()
        done.set()
        for thread in running:
            thread.join()
        return len(re.findall(r'<heap nr="', xml))

    async def main():
        # Before `serve` tunes, start-up has come and gone (a policy file, say): a moving
        # threshold stands at 1 MiB by then.
        libc.free(libc.malloc(1024 * 1024))
        said = memory.tune(asyncio.get_running_loop()) if sys.argv[1] == "tune" else None
        # A 7 MiB review comes and goes: a moving threshold rises to 7 MiB here.
        libc.free(libc.malloc(7 * 1024 * 1024))
        return {
            "said": said,
            "mapped": {size: mapped(size * 1024) for size in (200, 300, 1024)},
            "arenas": arenas(4),
            "tls_buffer": asyncio.sslproto.SSLProtocol.max_size,
        }

    runner = asyncio.run
    if sys.argv[2] == "uvloop":
        import uvloop
        runner = uvloop.run
    print(json.dumps(runner(main())))
    """
)


def probe(*, tune: bool, loop: str = "asyncio", **env: str) -> dict[str, Any]:
    """What glibc does in a fresh interpreter, tuned or not, with `env` added to a clean
    environment (no glibc knobs of the test runner's)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, "tune" if tune else "leave", loop],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    result["mapped"] = {int(size): was for size, was in result["mapped"].items()}
    return result


@glibc_only
def test_untuned_glibc_moves_the_threshold_and_makes_an_arena_per_thread() -> None:
    # The control: what tune is there to change, and that the probe can see it.
    untuned = probe(tune=False)
    assert untuned["mapped"] == {200: False, 300: False, 1024: False}
    assert untuned["arenas"] == 5  # the main thread's and one per thread
    assert untuned["tls_buffer"] == 256 * KIB


@glibc_only
def test_tune_fixes_the_threshold_limits_the_arenas_and_shrinks_asyncio_tls_buffers() -> None:
    tuned = probe(tune=True)
    # Below the threshold from the heap, at and above it mapped: after a 7 MiB block too.
    assert tuned["mapped"] == {200: False, 300: True, 1024: True}
    assert tuned["arenas"] == memory.ARENA_MAX
    assert tuned["tls_buffer"] == memory.ASYNCIO_TLS_BUFFER_BYTES
    assert tuned["said"] == (
        "mmap threshold: fixed at 256 KiB; malloc arenas: at most 2;"
        " asyncio TLS read buffer: 16.5 KiB"
    )


@glibc_only
def test_on_uvloop_asyncio_tls_is_left_alone() -> None:
    tuned = probe(tune=True, loop="uvloop")
    assert tuned["tls_buffer"] == 256 * KIB
    assert tuned["said"] == "mmap threshold: fixed at 256 KiB; malloc arenas: at most 2"


@glibc_only
@pytest.mark.parametrize(
    "env",
    [
        {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_ARENA_MAX": "3"},
        {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072:glibc.malloc.arena_max=3"},
    ],
    ids=["variables", "tunables"],
)
def test_what_the_operator_set_is_kept(env: dict[str, str]) -> None:
    tuned = probe(tune=True, **env)
    # The operator's 128 KiB, fixed (glibc stops moving a threshold it was given).
    assert tuned["mapped"] == {200: True, 300: True, 1024: True}
    assert tuned["arenas"] == 3
    assert tuned["said"].startswith(
        "mmap threshold: as the environment sets it; malloc arenas: as the environment sets it;"
    )


@glibc_only
def test_an_unrelated_glibc_setting_does_not_stop_tune() -> None:
    tuned = probe(tune=True, GLIBC_TUNABLES="glibc.malloc.tcache_count=0")
    assert tuned["mapped"] == {200: False, 300: True, 1024: True}
    assert tuned["arenas"] == memory.ARENA_MAX


def test_the_shared_read_buffer_stays_below_the_mmap_threshold() -> None:
    # Else every read's copy is a mapping of its own again (limits.READ_BUFFER_BYTES).
    assert limits.READ_BUFFER_BYTES < memory.MMAP_THRESHOLD


# --------------------------------------------------------------------------- trimming


class Recording(Executor):
    """An executor that runs nothing and keeps what it was given."""

    def __init__(self) -> None:
        self.submitted: list[Callable[[], object]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted.append(fn)
        done: Future[Any] = Future()
        done.set_result(None)
        return done


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


trimming = pytest.mark.skipif(not memory.Trimmer().can_trim, reason="malloc_trim is glibc's")


@trimming
def test_a_burst_of_large_reviews_trims_at_most_once_a_second() -> None:
    clock = Clock(100.0)
    trimmer = memory.Trimmer(clock=clock)
    executor = Recording()
    for now in (100.0, 100.5, 100.999):
        clock.now = now
        trimmer.after_large_review(executor)
    assert executor.submitted == [memory.trim]
    clock.now = 100.0 + memory.TRIM_EVERY_SECONDS
    trimmer.after_large_review(executor)
    assert executor.submitted == [memory.trim, memory.trim]


@trimming
def test_without_review_threads_nothing_is_trimmed_and_the_next_trim_is_not_put_off() -> None:
    clock = Clock(100.0)
    trimmer = memory.Trimmer(clock=clock)
    trimmer.after_large_review(None)
    assert trimmer.last is None
    executor = Recording()
    trimmer.after_large_review(executor)
    assert executor.submitted == [memory.trim]


@trimming
def test_a_trim_after_shutdown_is_dropped_and_a_trim_runs() -> None:
    executor = ThreadPoolExecutor(1)
    executor.shutdown()
    memory.Trimmer().after_large_review(executor)  # no RuntimeError
    memory.trim()


def test_a_trim_frees_what_only_the_collector_frees() -> None:
    # A body held in a reference cycle (as a future, its exception and a frame can hold one)
    # is freed by the trim that follows large reviews, not whenever the collector runs.
    class Node:
        pass

    body = Node()
    cycle = Node()
    cycle.self = cycle  # type: ignore[attr-defined]
    cycle.body = body  # type: ignore[attr-defined]
    alive = weakref.ref(body)
    del body, cycle
    gc.disable()
    try:
        assert alive() is not None
        memory.trim()
        assert alive() is None
    finally:
        gc.enable()
