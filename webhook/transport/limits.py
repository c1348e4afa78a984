"""What bounds a connection and a request, and the listener that enforces it.

Any pod of the cluster can reach the admission port (the API server's addresses are not
known in advance, so the NetworkPolicy cannot narrow it), so every resource a connection
can hold is bounded:

- a TLS handshake, and then a request's line and headers, must arrive within
  `header_timeout` of the connection being made or of the request's first byte (slowloris);
- a request body within `body_timeout` of its headers (enforced by the handler, `admission`);
- an idle keep-alive connection is closed after `idle_timeout`: longer than the API server
  keeps one idle (Go's default, 90 s), so that the client closes idle connections, not the
  server (a server closing one races with a request being sent on it);
- at most `max_connections` are open: a new one beyond that replaces the connection idle for
  longest, and when none is idle it is answered 503 and closed;
- at most `max_inflight_bytes` of review bodies are being received or reviewed at once:
  beyond that a request is answered 429 at once, before its body is read (`inflight`).

aiohttp has no header or first-request timeout, so each connection's protocol (aiohttp's
`RequestHandler`) is wrapped in a `_Guarded` proxy that sees every byte arrive, and one
sweep a second looks at all connections. The proxy reads three of the handler's private
attributes (`_request_count`, `_request_in_progress`, `_messages`); `check_handler()` fails
at start-up when an aiohttp release renames them, and the tests exercise every path.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp.web_protocol import RequestHandler

logger = logging.getLogger(__name__)

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of connections and requests; each has a `serve` flag."""

    # The API server sends its request as soon as it has connected; 10 s is generous even
    # across a loaded network, and a slowloris connection lives no longer than that.
    header_timeout: float = 10.0
    # A 7 MiB review arrives in well under a second inside a cluster.
    body_timeout: float = 10.0
    # See the module docstring: above the API server's own 90 s.
    idle_timeout: float = 120.0
    # An idle TLS connection costs ~30-45 KB here (see docs/robustness.md): 4,096 of them
    # stay far below the Deployment's memory limit; each API server keeps a few dozen.
    max_connections: int = 4096
    # A review can carry two objects (object and oldObject on UPDATE) of up to ~3 MB each,
    # the API server's own request limit: 7 MiB admits every legitimate review.
    max_body_bytes: int = 7 * MIB
    # A review's parsed objects and copies take several times its bytes, and every byte of
    # a large one costs CPU: 8 MiB in flight is one review at the body limit at a time.
    # Objects that etcd stores are at most 1.5 MiB (its default --max-request-bytes), so an
    # UPDATE of the largest storable pod (object and oldObject) leaves room for another.
    # Reviews of up to 256 KiB each have a reserve beyond it
    # (inflight.SMALL_REVIEWS_RESERVE_BYTES).
    # Counted as bytes arrive, so announcing a large body and not sending it holds nothing.
    # Measured (docs/robustness.md): with 16 MiB, 2,000 idle connections and 40 clients
    # sending 7 MiB reviews took a replica to 427 MB; with 8 MiB, 350 MB.
    max_inflight_bytes: int = 8 * MIB

    def problems(self) -> list[str]:
        """What is wrong with these values, as `serve` flags would say it."""
        found = []
        for name in ("header_timeout", "body_timeout", "idle_timeout"):
            if getattr(self, name) <= 0:
                found.append(f"--{name.replace('_', '-')} must be positive")
        if self.max_connections < 1:
            found.append("--max-connections must be at least 1")
        if self.max_body_bytes < 1024:
            found.append("--max-body-bytes must be at least 1024")
        if self.max_inflight_bytes < self.max_body_bytes:
            found.append("--max-inflight-bytes must be at least --max-body-bytes")
        return found


# The answer to a connection over the limit when no idle one can make room. Written before
# the request is read: HTTP/1.1 clients take a response that arrives early, and the
# connection is closed right after, so nothing else is read from it.
_REFUSAL_TEXT = b"too many connections to this replica; try another or wait\n"
_TOO_MANY_CONNECTIONS = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: " + str(len(_REFUSAL_TEXT)).encode() + b"\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n"
    b"\r\n" + _REFUSAL_TEXT
)

# How long a closing TLS connection waits for the client's close_notify, reading and
# discarding whatever else the client still sends (asyncio's and uvloop's default: 30 s).
# A connection refused mid-body (408, 413, 429) is closed while its client is still sending
# the body: for 30 s it would keep its TLS state and buffers and cost the decryption of every
# byte still sent. Measured with 7 MiB reviews refused 429 while 2,000 idle connections were
# open: ~950 such connections were alive at once, 150 MB of TLS buffers among them. Inside a
# cluster a client that is reading answers within milliseconds.
TLS_SHUTDOWN_SECONDS = 2.0

_HANDLER_ATTRIBUTES = ("_request_count", "_request_in_progress", "_messages")


def check_handler() -> None:
    """Fail at start-up, not under attack, when aiohttp no longer has what `_Guarded` reads."""
    slots = {s for cls in RequestHandler.__mro__ for s in getattr(cls, "__slots__", ())}
    missing = [a for a in _HANDLER_ATTRIBUTES if a not in slots]
    if missing:
        raise RuntimeError(
            f"this aiohttp's RequestHandler lacks {', '.join(missing)}: the connection limits"
            " cannot be enforced; install an aiohttp release within pyproject.toml's range"
        )


# Where every connection's bytes are read into, before they are copied for aiohttp (whose
# handler takes `bytes`). One block for all connections: the event loop calls `get_buffer`
# and then `buffer_updated` for one connection before it reads from another, and the bytes
# are copied out before anything else can run. Offering a buffer (asyncio.BufferedProtocol)
# spares the TLS layer making one per read: uvloop's, asked for bytes, makes a 256 KiB object
# for every read, which with the mmap threshold `memory.tune` fixes is a mapping of its own
# each time (three system calls and fresh pages for every request, measured). 64 KiB (four
# TLS records) keeps each copy below that threshold, in the heap's reused pages.
# Tied to `memory.MMAP_THRESHOLD`: this must stay below it, or every read is a mapping
# again (tests/test_memory.py holds it there).
READ_BUFFER_BYTES = 64 * 1024
_READ_BUFFER = memoryview(bytearray(READ_BUFFER_BYTES))


class _Guarded(asyncio.BufferedProtocol):
    """One connection: aiohttp's handler, and what the sweep needs to judge it."""

    __slots__ = (
        "_connections",
        "_inner",
        "_transport",
        "admitted",
        "last_active",
        "opened",
        "partial_since",
        "requests_seen",
    )

    def __init__(self, connections: Connections, inner: RequestHandler) -> None:
        self._connections = connections
        self._inner = inner
        self._transport: asyncio.Transport | None = None
        self.opened = self.last_active = time.monotonic()
        # When the first byte of a request that has not been fully read yet arrived.
        self.partial_since: float | None = None
        self.requests_seen = 0
        self.admitted = False

    # -- asyncio.BufferedProtocol; what arrives is passed on to aiohttp as bytes

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        if not self._connections.admit(self):
            transport.write(_TOO_MANY_CONNECTIONS)  # type: ignore[attr-defined]
            transport.close()
            return
        self.admitted = True
        self._inner.connection_made(transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return _READ_BUFFER

    def buffer_updated(self, nbytes: int) -> None:
        if not self.admitted:
            return
        inner = self._inner
        inner.data_received(_READ_BUFFER[:nbytes].tobytes())
        now = time.monotonic()
        self.last_active = now
        count = inner._request_count
        if count != self.requests_seen:
            self.requests_seen = count
            self.partial_since = None
        elif self.partial_since is None and not self.busy:
            self.partial_since = now

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()  # type: ignore[func-returns-value]

    def connection_lost(self, exc: BaseException | None) -> None:
        self._connections.forget(self)
        if self.admitted:
            self._inner.connection_lost(exc)
        # The transport holds the connection's TLS state and buffers (tens to hundreds of KB).
        # aiohttp's objects of a connection refer to each other in cycles, which only the
        # collector frees: without this, each closed connection's TLS memory would wait for
        # it too (see Connections.collect).
        self._transport = None

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    # -- what the sweep asks

    @property
    def busy(self) -> bool:
        """A request is queued or being answered (its body is then the handler's to time)."""
        inner = self._inner
        return bool(inner._request_in_progress or inner._messages)

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def overdue(self, now: float, limits: Limits) -> str | None:
        """Why this connection is to be closed now, if it is."""
        if self.busy:
            self.last_active = now
            self.partial_since = None
            return None
        if self.partial_since is not None and now - self.partial_since > limits.header_timeout:
            return "header"
        if self.requests_seen == 0 and now - self.opened > limits.header_timeout:
            return "header"
        if now - self.last_active > limits.idle_timeout:
            return "idle"
        return None


class Connections:
    """The open connections of one listener, their limit and the sweep that times them out.

    `factory(handler_factory)` is the protocol factory for `loop.create_server`; `run()` is
    the sweep, a task for as long as the listener is open.
    """

    SWEEP_SECONDS = 1.0
    COLLECT_AFTER_CLOSED = 256

    def __init__(
        self,
        limits: Limits,
        *,
        on_closed: Callable[[str], object] | None = None,
    ) -> None:
        self.limits = limits
        # Insertion order is age order: the oldest idle one is found first.
        self._open: dict[_Guarded, None] = {}
        self._on_closed = on_closed
        # Connections closed since the last collection (see `collect`).
        self._lost = 0

    def __len__(self) -> int:
        return len(self._open)

    def factory(self, handler_factory: Callable[[], RequestHandler]) -> Callable[[], _Guarded]:
        def make() -> _Guarded:
            return _Guarded(self, handler_factory())

        return make

    def admit(self, connection: _Guarded) -> bool:
        if len(self._open) >= self.limits.max_connections:
            oldest_idle = next((c for c in self._open if not c.busy), None)
            if oldest_idle is None:
                self._closed("refused")
                return False
            self._drop(oldest_idle, "evicted")
        self._open[connection] = None
        return True

    def forget(self, connection: _Guarded) -> None:
        self._open.pop(connection, None)
        self._lost += 1

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.SWEEP_SECONDS)
            try:
                self.sweep()
                self.collect()
            except Exception:  # pragma: no cover - a sweep must never stop sweeping
                logger.exception("timing out connections failed; will look again")

    def collect(self) -> float | None:
        """A full garbage collection once `COLLECT_AFTER_CLOSED` connections have closed;
        its duration in seconds, or None when none was due.

        The objects of a closed connection (aiohttp's handler, its request, their futures)
        refer to each other, so only the collector frees them, and Python's own schedule
        leaves them for long: a full collection waits until the objects that survived
        earlier ones have grown by a quarter. Connections opened and closed by the thousand
        (clients refused 429 and retrying, slowloris ones timed out) then pile up. Measured with
        2,000 idle connections while 7 MiB reviews were refused and retried: ~950 closed
        connections alive at once, and the replica's peak memory 563 MB; with this and
        `_Guarded.connection_lost` dropping the transport, 413 MB (16 MiB then in flight)."""
        if self._lost < self.COLLECT_AFTER_CLOSED:
            return None
        self._lost = 0
        started = time.perf_counter()
        gc.collect()
        seconds = time.perf_counter() - started
        # It holds up the event loop: say so where it is long enough to matter.
        level = logging.INFO if seconds >= 0.02 else logging.DEBUG
        logger.log(level, "collected the objects of closed connections in %.1f ms", seconds * 1000)
        return seconds

    def sweep(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        limits = self.limits
        for connection in list(self._open):
            why = connection.overdue(now, limits)
            if why is not None:
                self._drop(connection, why)

    def close_idle(self) -> None:
        """Close every connection not in the middle of a request (for a drain)."""
        for connection in list(self._open):
            if not connection.busy:
                connection.close()

    def _drop(self, connection: _Guarded, why: str) -> None:
        self._open.pop(connection, None)
        connection.close()
        self._closed(why)

    def _closed(self, why: str) -> None:
        if self._on_closed is not None:
            try:
                self._on_closed(why)
            except Exception:  # pragma: no cover - counting must not stop the sweep
                logger.exception("counting a closed connection failed")


async def listen(
    handler_factory: Callable[[], RequestHandler],
    connections: Connections,
    *,
    host: str | None,
    port: int,
    ssl_context: ssl.SSLContext | None,
    reuse_port: bool = False,
    backlog: int = 512,
) -> asyncio.Server:
    """Listen on `host:port` with every connection guarded by `connections`; the TLS
    handshake must finish within the header timeout."""
    loop = asyncio.get_running_loop()
    options: dict[str, Any] = {}
    if ssl_context is not None:
        options["ssl_handshake_timeout"] = connections.limits.header_timeout
        options["ssl_shutdown_timeout"] = TLS_SHUTDOWN_SECONDS
    return await loop.create_server(
        connections.factory(handler_factory),
        host,
        port,
        ssl=ssl_context,
        backlog=backlog,
        reuse_port=reuse_port or None,
        **options,
    )
