"""The bounds of the admission server: fixed values, and the budget of review bytes in flight.

Any pod of the cluster can reach the admission port (the API server's addresses are not
known in advance, so a NetworkPolicy cannot narrow it), so every resource a client can hold
is bounded, in total and per source address (the API server's calls come from a few
addresses; a flood from one pod comes from one). The values are fixed, not flags: each is
chosen against what the API server does (below) and documented in docs/operations.md.
`Limits` exists so that tests can shrink them.

Where each is enforced: the connection caps, the handshake caps and the header timeout by the
listener (`connections`); the idle timeout by aiohttp (`keepalive_timeout`); the body cap, the
body timeout and the bytes in flight by the handler (`admission`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of connections and requests (docs/operations.md, "Limits")."""

    # The TLS handshake (its wait for a turn included), and then each request's line and
    # headers, from the connection or from the request's first byte. The API server sends
    # its request as soon as it has connected: 10 s is generous across a loaded network.
    header_timeout: float = 10.0
    # A request's body, from its headers: a 7 MiB review arrives in well under a second
    # inside a cluster.
    body_timeout: float = 10.0
    # An idle keep-alive connection: longer than the API server keeps one idle (Go's 90 s),
    # so that the client closes idle connections, not the server (a server closing one races
    # with a request being sent on it).
    idle_timeout: float = 120.0
    # Open admission connections, and from one source address. An API server opens one per
    # call in flight beyond the 25 idle ones its webhook client keeps: at its default
    # --max-requests-inflight and --max-mutating-requests-inflight (400 + 200), ~600. An
    # idle TLS connection costs ~50 KB here (docs/robustness.md). A connection beyond either
    # is closed at once, before its TLS handshake.
    max_connections: int = 4096
    max_connections_per_source: int = 1024
    # TLS handshakes running at once, and for one address (a handshake costs this server
    # about a millisecond of CPU; one that never comes holds its slot for the header
    # timeout: it takes 16 addresses to hold them all). The others wait their turn.
    max_handshakes: int = 64
    max_handshakes_per_source: int = 4
    # A review body: two objects (object and oldObject) of the API server's ~3 MB request
    # limit. 413 beyond.
    max_body_bytes: int = 7 * MIB
    # Bodies over `inline_bytes` are large: read against the budget below, and reviewed on
    # a thread. A typical pod is a few KB, reviewed on the event loop in well under a
    # millisecond; a body of 16 KiB at most takes a millisecond or two.
    inline_bytes: int = 16 * KIB
    # Bytes of large bodies being received or reviewed at once, in total and for one
    # address; a request waits for room up to half the API server's time for the review,
    # then gets 429. Small bodies are not counted: each connection holds at most what
    # aiohttp reads ahead (64 KiB), and they are reviewed one at a time on the event loop.
    max_inflight_bytes: int = 16 * MIB
    max_inflight_bytes_per_source: int = 8 * MIB
    # The share of the server's time one address's large reviews may take, on average
    # (receiving a body and reviewing it: ~40 ms and more at 7 MiB); a second of them passes
    # at once. Beyond it that address's next large review waits, or gets 429 when the wait
    # is longer than half the API server's time for the review. Other addresses and small
    # reviews are not held back.
    large_share: float = 0.2


# How long a closing TLS connection waits for the client's close_notify, reading and
# discarding what the client still sends (asyncio's and uvloop's default: 30 s). A request
# refused mid-upload (408, 413, 429) closes while its client is still sending: for 30 s it
# would keep its TLS state and cost the decryption of every byte still sent.
TLS_SHUTDOWN_SECONDS = 2.0


class Budget:
    """Bytes of large review bodies being received or reviewed: at most `total`, and at most
    `per_source` for one source address. `take` waits for room (first come, first served
    among those that fit); `give` hands the bytes back.

    And the time each address's large reviews took (`charge`), paid back at `share` seconds
    a second: `wait` says how long an address that owes more than `burst` seconds waits
    before its next large review."""

    __slots__ = ("_owed", "_waiters", "burst", "by_source", "held", "per_source", "share", "total")

    # Addresses remembered before those that owe nothing are forgotten.
    REMEMBERED = 1024

    def __init__(
        self, total: int, per_source: int, *, share: float = 1.0, burst: float = 1.0
    ) -> None:
        self.total = total
        self.per_source = per_source
        self.share = share
        self.burst = burst
        self.held = 0
        self.by_source: dict[str, int] = {}
        self._waiters: deque[tuple[str, int, asyncio.Future[None]]] = deque()
        # Per address: seconds owed, as of a time.monotonic().
        self._owed: dict[str, tuple[float, float]] = {}

    def _owed_now(self, source: str, now: float) -> float:
        owed, at = self._owed.get(source, (0.0, now))
        return max(0.0, owed - (now - at) * self.share)

    def wait(self, source: str) -> float:
        """Seconds until `source` may start a large review (0: now)."""
        over = self._owed_now(source, time.monotonic()) - self.burst
        return over / self.share if over > 0 else 0.0

    def charge(self, source: str, seconds: float) -> None:
        """Add the seconds a large review of `source` took to what it owes."""
        now = time.monotonic()
        owed = self._owed
        if len(owed) >= self.REMEMBERED:
            for address in [a for a in owed if self._owed_now(a, now) == 0.0]:
                del owed[address]
        owed[source] = (self._owed_now(source, now) + seconds, now)

    def _fits(self, source: str, size: int) -> bool:
        return (
            self.held + size <= self.total
            and self.by_source.get(source, 0) + size <= self.per_source
        )

    def _add(self, source: str, size: int) -> None:
        self.held += size
        self.by_source[source] = self.by_source.get(source, 0) + size

    @property
    def waiting(self) -> int:
        """Requests waiting for room now."""
        return len(self._waiters)

    def source_full(self, source: str, size: int) -> bool:
        """Whether `source`'s own bound, not the total, keeps `size` more bytes out."""
        return self.by_source.get(source, 0) + size > self.per_source

    async def take(self, source: str, size: int) -> None:
        """Hold `size` bytes for `source`, once they fit (cancel the wait to give up)."""
        if self._fits(source, size) and not any(
            w[0] == source and not w[2].done() for w in self._waiters
        ):
            self._add(source, size)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (source, size, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give(source, size)  # room came just as the wait ended: pass it on
            else:
                self._waiters.remove(entry)
                self._wake()  # the later ones of its address it held back may fit now
            raise

    def give(self, source: str, size: int) -> None:
        """Give back `size` bytes of `source`; the waiters that fit now go, in turn."""
        self.held -= size
        left = self.by_source.get(source, 0) - size
        if left > 0:
            self.by_source[source] = left
        else:
            self.by_source.pop(source, None)
        self._wake()

    def _wake(self) -> None:
        """The waiters that fit now go, in turn. An address's requests go in the order they
        came: one that does not fit yet holds back the later ones of its address, not those
        of others."""
        passed: set[str] = set()
        for entry in list(self._waiters):
            waiting_source, waiting_size, waiter = entry
            if waiter.done():
                # A wait given up (its timeout cancelled it) whose task has not resumed yet:
                # that task takes its entry out, and it holds no later one back.
                continue
            if waiting_source in passed:
                continue
            if self._fits(waiting_source, waiting_size):
                self._waiters.remove(entry)
                self._add(waiting_source, waiting_size)
                waiter.set_result(None)
            else:
                passed.add(waiting_source)
