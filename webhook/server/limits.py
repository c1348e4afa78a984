"""What bounds a connection and a request, and the listener that enforces it.

Any pod of the cluster can reach the admission port (the API server's addresses are not
known in advance, so the NetworkPolicy cannot narrow it), so every resource a connection
can hold is bounded, in total and per source address (the API server's calls come from a
few addresses; a flood from one pod comes from one):

- at most `max_connections` are open, and `max_connections_per_source` from one address: a
  new one beyond either replaces the connection idle for longest (of its own address, or of
  the address holding the most), and when none is idle it is closed at once, before its TLS
  handshake (which is what a flood would make the server spend its time on);
- at most `max_handshakes` TLS handshakes run at once, `max_handshakes_per_source` for one
  address; the others wait their turn, the addresses taking turns, so that 2,000 connections
  opened at once by one address neither hold up the event loop (probes included) nor make
  the API server's next connection wait behind them;
- the TLS handshake, queue included, and then a request's line and headers, must arrive
  within `header_timeout` of the connection being made or of the request's first byte
  (slowloris, at either stage); a handshake that does not, or fails, is counted by reason;
- with a client CA (`serve --client-ca-file`), a connection whose client certificate is
  missing, not signed by that CA or not of an accepted name is closed after the handshake,
  before any byte of a request is read;
- a request body within `body_timeout` of its headers (enforced by the handler, `admission`);
- an idle keep-alive connection is closed after `idle_timeout`: longer than the API server
  keeps one idle (Go's default, 90 s), so that the client closes idle connections, not the
  server (a server closing one races with a request being sent on it);
- review bodies being received or reviewed are bounded in bytes, in total and per address,
  and one address's large reviews in the share of a core they take (`inflight`).

aiohttp has no header or first-request timeout, so each connection's protocol (aiohttp's
`RequestHandler`) is wrapped in a `_Guarded` proxy that sees every byte arrive, and one
sweep a second looks at all connections. The proxy reads three of the handler's private
attributes (`_request_count`, `_request_in_progress`, `_messages`); `check_handler()` fails
at start-up when an aiohttp release renames them, and the tests exercise every path.

The listener accepts plain TCP and starts TLS itself (`loop.start_tls`), so that it decides
when each handshake runs, with which context (the one in force then: a new serving
certificate or client CA takes effect for the next handshake), and hears how it ended.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp.web_protocol import RequestHandler

from webhook.server import logs

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
    # An API server opens a connection per concurrent call beyond the 25 it keeps idle (its
    # webhook client's MaxIdleConnsPerHost): at its default --max-requests-inflight and
    # --max-mutating-requests-inflight (400 + 200) that is at most ~600 from one address.
    max_connections_per_source: int = 1024
    # A TLS 1.3 handshake costs this server about a millisecond of CPU; 64 at once are some
    # tens of milliseconds of the event loop's time in one turn, whatever arrives. A handshake
    # that never comes holds its slot for --header-timeout: 16 addresses are needed to hold
    # them all.
    max_handshakes: int = 64
    max_handshakes_per_source: int = 4
    # Handshakes begun per second for one address; a burst of twice as many passes at once.
    # The API server reuses its connections and opens new ones only beyond the idle ones it
    # keeps; a client that reconnects as fast as it can is held to a few % of a core.
    handshakes_per_second_per_source: float = 50.0
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
    # What one address may hold of it, large and small reviews together: whatever one
    # address holds, the others keep at least the reserve of small reviews.
    max_inflight_bytes_per_source: int = 8 * MIB
    # The share of one core that the reviews of bodies over 16 KiB from one address
    # may take, on average (`inflight.LargeShares`): beyond it, that address's large reviews
    # are answered 429 before their body is read, until its use has come down.
    large_review_share: float = 0.2

    def problems(self) -> list[str]:
        """What is wrong with these values, as `serve` flags would say it."""
        found = []
        for name in ("header_timeout", "body_timeout", "idle_timeout"):
            if getattr(self, name) <= 0:
                found.append(f"--{name.replace('_', '-')} must be positive")
        for name in (
            "max_connections",
            "max_connections_per_source",
            "max_handshakes",
            "max_handshakes_per_source",
        ):
            if getattr(self, name) < 1:
                found.append(f"--{name.replace('_', '-')} must be at least 1")
        if self.max_body_bytes < 1024:
            found.append("--max-body-bytes must be at least 1024")
        if self.max_inflight_bytes < self.max_body_bytes:
            found.append("--max-inflight-bytes must be at least --max-body-bytes")
        if self.max_inflight_bytes_per_source < self.max_body_bytes:
            found.append("--max-inflight-bytes-per-source must be at least --max-body-bytes")
        if self.handshakes_per_second_per_source < 1:
            found.append("--handshakes-per-second-per-source must be at least 1")
        if not 0 < self.large_review_share <= 1:
            found.append("--large-review-share must be above 0 and at most 1")
        return found


# Handshakes one address may begin at once, in seconds of its rate
# (--handshakes-per-second-per-source).
HANDSHAKE_BURST = 2.0

# How long a closing TLS connection waits for the client's close_notify, reading and
# discarding whatever else the client still sends (asyncio's and uvloop's default: 30 s).
# A connection refused mid-body (408, 413, 429) is closed while its client is still sending
# the body: for 30 s it would keep its TLS state and buffers and cost the decryption of every
# byte still sent. Measured with 7 MiB reviews refused 429 while 2,000 idle connections were
# open: ~950 such connections were alive at once, 150 MB of TLS buffers among them. Inside a
# cluster a client that is reading answers within milliseconds.
TLS_SHUTDOWN_SECONDS = 2.0

# Why a connection was closed or turned away (the `reason` label of
# gpu_share_webhook_connections_closed_total).
HEADER = "header"
IDLE = "idle"
EVICTED = "evicted"
REFUSED = "refused"
SOURCE_REFUSED = "source-refused"
TLS_TIMEOUT = "tls-timeout"
TLS_FAILED = "tls-failed"
CLIENT_CERTIFICATE = "client-certificate"
CLOSE_REASONS = (
    HEADER,
    IDLE,
    EVICTED,
    REFUSED,
    SOURCE_REFUSED,
    TLS_TIMEOUT,
    TLS_FAILED,
    CLIENT_CERTIFICATE,
)

# What a client may send between the end of its handshake and the connection being handed
# to aiohttp (a TLS 1.3 client sends its request with its Finished message): a read or two.
_EARLY_BYTES = 1 * MIB
# A handshake in progress for longer than this may be closed to make room at
# --max-connections (the API server's take milliseconds).
_SLOW_HANDSHAKE_SECONDS = 1.0

# What a client may send before its handshake starts: its ClientHello (a few hundred bytes
# to a few KB): one TLS record, at most 16 KiB and its 5-byte header. What a connection
# waiting for its turn is offered to read into, so that no more is kept for it (uvloop reads
# once before the pause holds: 64 KiB each, thousands of connections, would be hundreds of MB).
_HELLO_BYTES = 16 * 1024 + 5
_HELLO_BUFFER = memoryview(bytearray(_HELLO_BYTES + 1))

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
# again (tests/server/test_memory.py holds it there).
READ_BUFFER_BYTES = 64 * 1024
_READ_BUFFER = memoryview(bytearray(READ_BUFFER_BYTES))


# The stages of a connection.
_WAITING = 0  # accepted, waiting its turn for a TLS handshake
_HANDSHAKE = 1  # its TLS handshake is running
_OPEN = 2  # handed to aiohttp
_CLOSED = 3

# The reasons OpenSSL gives (ssl.SSLError.reason) when a client's certificate is missing or
# does not verify; anything else failing a handshake is `TLS_FAILED`.
_CLIENT_CERTIFICATE_REASONS = frozenset(
    {
        "CERTIFICATE_VERIFY_FAILED",
        "PEER_DID_NOT_RETURN_A_CERTIFICATE",
        "NO_CERTIFICATE_RETURNED",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "CERTIFICATE_REQUIRED",
    }
)


class _Guarded(asyncio.BufferedProtocol):
    """One connection: first the plain TCP one waiting for its handshake, then aiohttp's
    handler behind TLS, and what the sweep needs to judge it."""

    __slots__ = (
        "_connections",
        "_early",
        "_fed",
        "_handler_factory",
        "_hello",
        "_inner",
        "_raw",
        "_transport",
        "handshake_started",
        "last_active",
        "opened",
        "partial_since",
        "phase",
        "requests_seen",
        "source",
        "task",
    )

    def __init__(
        self, connections: Connections, handler_factory: Callable[[], RequestHandler]
    ) -> None:
        self._connections = connections
        self._handler_factory = handler_factory
        self._inner: RequestHandler | None = None
        # The TCP transport, and (once open) the one aiohttp writes to: the TLS one.
        self._raw: asyncio.Transport | None = None
        self._transport: asyncio.Transport | None = None
        # What arrived between the end of the handshake and the handler being made.
        self._early: bytearray | None = None
        # What arrived before the TLS layer had the transport (see `_feed`), and whether it
        # has it now.
        self._hello: bytearray | None = None
        self._fed = False
        self.opened = self.last_active = self.handshake_started = time.monotonic()
        # When the first byte of a request that has not been fully read yet arrived.
        self.partial_since: float | None = None
        self.requests_seen = 0
        self.phase = _WAITING
        self.source: _Source | None = None
        self.task: asyncio.Task[None] | None = None

    # -- asyncio.BufferedProtocol, of the TCP transport and then of the TLS one

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Only the TCP transport calls this: `start_tls` does not (see `_handshake`).
        raw: asyncio.Transport = transport  # type: ignore[assignment]
        self._raw = raw
        connections = self._connections
        if not connections.admit(self, _address(raw)):
            self.phase = _CLOSED
            raw.abort()  # nothing to say and nothing to wait for: no handshake
            return
        if connections.tls is None:
            self._open(raw)
            return
        # Nothing more is read until its turn comes. (uvloop starts reading once this
        # returns, whatever it asks: what arrives then is kept, see `buffer_updated`.)
        raw.pause_reading()
        connections.queue(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        # Before the TLS layer has the transport, what is read is kept: at most a record.
        return _READ_BUFFER if self._fed or self.phase == _OPEN else _HELLO_BUFFER

    def buffer_updated(self, nbytes: int) -> None:
        phase = self.phase
        if phase == _OPEN:
            self._received(_READ_BUFFER[:nbytes].tobytes())
            return
        raw = self._raw
        if phase == _WAITING or (phase == _HANDSHAKE and not self._fed):
            # Bytes of the handshake, from the TCP transport before the TLS layer has it:
            # kept for it (`_feed`), and nothing more read until then.
            hello = self._hello = self._hello or bytearray()
            hello += _HELLO_BUFFER[:nbytes]
            if raw is not None:
                if len(hello) > _HELLO_BYTES:
                    if phase == _WAITING:  # else the handshake's failure counts it
                        self._connections.count(TLS_FAILED)
                    raw.abort()
                elif phase == _WAITING:
                    raw.pause_reading()
        elif phase == _HANDSHAKE:
            # The TLS layer hands on a request sent with the client's Finished message as
            # soon as the handshake ends, before `_handshake` has made the handler.
            early = self._early = self._early or bytearray()
            early += _READ_BUFFER[:nbytes]
            if len(early) > _EARLY_BYTES and raw is not None:
                raw.abort()

    def _received(self, data: bytes) -> None:
        inner = self._inner
        assert inner is not None
        inner.data_received(data)
        now = time.monotonic()
        self.last_active = now
        count = inner._request_count
        if count != self.requests_seen:
            self.requests_seen = count
            self.partial_since = None
        elif self.partial_since is None and not self.busy:
            self.partial_since = now

    def eof_received(self) -> bool | None:
        if self.phase == _OPEN and self._inner is not None:
            return self._inner.eof_received()  # type: ignore[func-returns-value]
        return None

    def connection_lost(self, exc: BaseException | None) -> None:
        # From the TCP transport while waiting, from the TLS one after (also after a failed
        # handshake, where the TLS layer calls it without `connection_made` before).
        phase, self.phase = self.phase, _CLOSED
        self._connections.forget(self)
        if self._transport is not None:
            self._connections.by_transport.pop(self._transport, None)
        if phase == _OPEN and self._inner is not None:
            self._inner.connection_lost(exc)
        # The transports hold the connection's TLS state and buffers (tens to hundreds of
        # KB). aiohttp's objects of a connection refer to each other in cycles, which only
        # the collector frees: without this, each closed connection's TLS memory would wait
        # for it too (see Connections.collect).
        self._transport = self._raw = None
        self._early = self._hello = None

    def pause_writing(self) -> None:
        if self.phase == _OPEN and self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self.phase == _OPEN and self._inner is not None:
            self._inner.resume_writing()

    # -- the stages

    def start_handshake(self, context: ssl.SSLContext, timeout: float) -> None:
        self.phase = _HANDSHAKE
        self.handshake_started = time.monotonic()
        self.task = asyncio.get_running_loop().create_task(self._handshake(context, timeout))

    async def _handshake(self, context: ssl.SSLContext, timeout: float) -> None:
        connections = self._connections
        raw = self._raw
        started = time.monotonic()
        tls: asyncio.Transport | None = None
        try:
            if raw is None or raw.is_closing():
                return
            loop = asyncio.get_running_loop()
            # Runs once `start_tls` has given the transport to its TLS protocol and before
            # that protocol starts (both `start_tls` of asyncio and of uvloop do the first
            # before they return to the loop, and schedule the second).
            loop.call_soon(self._feed)
            try:
                tls = await loop.start_tls(
                    raw,
                    self,
                    context,
                    server_side=True,
                    ssl_handshake_timeout=timeout,
                    ssl_shutdown_timeout=TLS_SHUTDOWN_SECONDS,
                )
            except (OSError, EOFError, ValueError) as exc:
                connections.handshake_failed(self, exc, time.monotonic() - started >= timeout)
                return
            if tls is None or self.phase != _HANDSHAKE:
                # Closed while the handshake ended (by the client, or a drain).
                if tls is not None:
                    tls.abort()
                return
            if connections.check_peer is not None:
                refusal = connections.check_peer(tls.get_extra_info("ssl_object"))
                if refusal is not None:
                    connections.client_refused(self, refusal)
                    tls.abort()
                    return
            self._open(tls)
        finally:
            self.task = None
            if self.phase != _OPEN:
                # After a timeout the TLS layer tells no one the connection is gone.
                self.phase = _CLOSED
                connections.forget(self)
            connections.handshake_ended(self)

    def _feed(self) -> None:
        """Hand what arrived before the handshake to the TLS protocol that now reads the
        transport, as the transport itself would (`get_buffer`, `buffer_updated`): before its
        `connection_made`, it only keeps the bytes, and starts from them."""
        self._fed = True
        hello, self._hello = self._hello, None
        raw = self._raw
        if not hello or raw is None or raw.is_closing():
            return
        protocol: Any = raw.get_protocol()
        if protocol is self or not hasattr(protocol, "buffer_updated"):
            # `start_tls` failed before it took the transport: it says so itself. (uvloop's
            # TLS protocol is a buffered one without being an asyncio.BufferedProtocol.)
            return
        view = memoryview(hello)
        while view:
            buffer = protocol.get_buffer(len(view))
            size = min(len(buffer), len(view))
            buffer[:size] = view[:size]
            protocol.buffer_updated(size)
            view = view[size:]

    def _open(self, transport: asyncio.Transport) -> None:
        self.phase = _OPEN
        self._transport = transport
        connections = self._connections
        connections.by_transport[transport] = self
        if self.source is not None and self in self.source.open:
            self.source.established[self] = None
        inner = self._inner = self._handler_factory()
        inner.connection_made(transport)
        early, self._early = self._early, None
        if early:
            self._received(bytes(early))

    # -- what the sweep asks

    @property
    def busy(self) -> bool:
        """A request is queued or being answered (its body is then the handler's to time)."""
        inner = self._inner
        return inner is not None and bool(inner._request_in_progress or inner._messages)

    @property
    def idle(self) -> bool:
        """Open, and between requests: what may be closed to make room."""
        return self.phase == _OPEN and not self.busy

    def stop_reading(self) -> None:
        """Read (and decrypt) nothing more from the client: its answer is written and the
        connection closes; what it still sends is left in the socket until then.

        Pausing the TCP transport is not enough behind TLS: the TLS protocol resumes it
        when its own buffer drains. So the transport is given to `_Refused`, which reads
        nothing and passes on the rest; the TLS protocol still writes the answer and its
        close_notify, waits `TLS_SHUTDOWN_SECONDS` for the client's (which it never reads),
        and aborts."""
        raw = self._raw
        if raw is None or raw.is_closing():
            return
        reader = raw.get_protocol()
        if not isinstance(reader, _Refused):
            raw.set_protocol(_Refused(reader))
        raw.pause_reading()

    def abort(self) -> None:
        raw = self._raw
        if raw is not None:
            raw.abort()

    def close(self) -> None:
        transport = self._transport if self.phase == _OPEN else self._raw
        if transport is not None and not transport.is_closing():
            transport.close()

    def overdue(self, now: float, limits: Limits) -> str | None:
        """Why this connection is to be closed now, if it is."""
        phase = self.phase
        if phase == _WAITING:
            return TLS_TIMEOUT if now - self.opened > limits.header_timeout else None
        if phase != _OPEN:
            return None  # a handshake has its own timeout (`start_handshake`)
        if self.busy:
            self.last_active = now
            self.partial_since = None
            return None
        if self.partial_since is not None and now - self.partial_since > limits.header_timeout:
            return HEADER
        if self.requests_seen == 0 and now - self.opened > limits.header_timeout:
            return HEADER
        if now - self.last_active > limits.idle_timeout:
            return IDLE
        return None


# Where `_Refused` lets the bytes it is given fall, if it is given any.
_DISCARDED = memoryview(bytearray(16 * 1024))


class _Refused(asyncio.BufferedProtocol):
    """What reads a TCP transport once its request is refused: nothing. Everything else it
    passes to the protocol that read it before (the TLS one, or `_Guarded` without TLS)."""

    __slots__ = ("_before",)

    def __init__(self, before: Any) -> None:
        self._before = before

    def get_buffer(self, sizehint: int) -> memoryview:
        return _DISCARDED

    def buffer_updated(self, nbytes: int) -> None:
        pass

    def eof_received(self) -> bool | None:
        return None  # close

    def connection_lost(self, exc: BaseException | None) -> None:
        self._before.connection_lost(exc)

    def pause_writing(self) -> None:
        self._before.pause_writing()

    def resume_writing(self) -> None:
        self._before.resume_writing()


def _address(transport: asyncio.BaseTransport) -> str:
    """The source address of a connection, as the server sees it (after any NAT)."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return str(peer) if peer else "unknown"


class _Source:
    """The connections of one source address."""

    __slots__ = (
        "address",
        "established",
        "handshaking",
        "open",
        "queued",
        "tokens",
        "tokens_at",
        "waiting",
    )

    def __init__(self, address: str, tokens: float) -> None:
        self.address = address
        # Handshakes it may begin now, as of `tokens_at` (a token bucket).
        self.tokens = tokens
        self.tokens_at = time.monotonic()
        # Insertion order is age order. `open` holds every stage; `established` those handed
        # to aiohttp, the only ones that can be idle (the oldest idle one is found first,
        # without looking through a flood of connections waiting for their handshake).
        self.open: dict[_Guarded, None] = {}
        self.established: dict[_Guarded, None] = {}
        self.waiting: deque[_Guarded] = deque()
        self.handshaking = 0
        # In `Connections._turns`.
        self.queued = False

    @property
    def empty(self) -> bool:
        return not self.open and not self.handshaking and not self.waiting

    def tokens_now(self, now: float, rate: float) -> float:
        """The handshakes it may begin at `now`, at `rate` a second, up to its burst."""
        return min(HANDSHAKE_BURST * rate, self.tokens + (now - self.tokens_at) * rate)


class Connections:
    """The open connections of one listener, their limits, the turns of their handshakes
    and the sweep that times them out.

    `tls` gives the context for the next handshake (None: plain HTTP); `check_peer` judges a
    finished handshake's client certificate (None when the server asks for none) and says
    why it is refused; `owed` says how long an address that took more than its share of a
    core must wait before it may begin a handshake (its connections wait their turn
    meanwhile, reading nothing). `factory(handler_factory)` is the protocol factory for
    `loop.create_server`; `run()` is the sweep, a task for as long as the listener is open.
    """

    SWEEP_SECONDS = 1.0
    COLLECT_AFTER_CLOSED = 256
    # At most one log line about refused client certificates this often.
    CLIENT_LOG_SECONDS = 10.0

    def __init__(
        self,
        limits: Limits,
        *,
        tls: Callable[[], ssl.SSLContext] | None = None,
        check_peer: Callable[[Any], str | None] | None = None,
        owed: Callable[[str], float] | None = None,
        on_closed: Callable[[str], object] | None = None,
    ) -> None:
        self.limits = limits
        self.tls = tls
        self.check_peer = check_peer
        # Seconds until an address is back within its share of a core (`inflight.LargeShares`):
        # until then it begins no handshake.
        self.owed = owed
        # Insertion order is age order.
        self._open: dict[_Guarded, None] = {}
        self._sources: dict[str, _Source] = {}
        # The addresses with connections waiting for a handshake, in turn order.
        self._turns: deque[_Source] = deque()
        # The connections handed to aiohttp, by the transport aiohttp writes to (a request's
        # `transport`), for `stop_reading`.
        self.by_transport: dict[asyncio.BaseTransport, _Guarded] = {}
        self.handshaking = 0
        # The timer that looks at the turns again once an address may begin a handshake.
        self._refill: asyncio.TimerHandle | None = None
        self._on_closed = on_closed
        self._client_log = logs.EveryFew(logger, self.CLIENT_LOG_SECONDS)
        # Connections closed since the last collection (see `collect`).
        self._lost = 0

    def __len__(self) -> int:
        return len(self._open)

    @property
    def sources(self) -> int:
        """Source addresses with a connection now."""
        return len(self._sources)

    def factory(self, handler_factory: Callable[[], RequestHandler]) -> Callable[[], _Guarded]:
        def make() -> _Guarded:
            return _Guarded(self, handler_factory)

        return make

    def admit(self, connection: _Guarded, address: str) -> bool:
        limits = self.limits
        source = self._sources.get(address)
        if source is None:
            source = self._sources[address] = _Source(
                address, HANDSHAKE_BURST * limits.handshakes_per_second_per_source
            )
        if len(source.open) >= limits.max_connections_per_source:
            victim = next((c for c in source.established if c.idle), None)
            if victim is None:
                self.count(SOURCE_REFUSED)
                self._release(source)
                return False
            self._drop(victim, EVICTED)
        if len(self._open) >= limits.max_connections:
            victim = self._oldest_idle_of_largest()
            if victim is None:
                self.count(REFUSED)
                self._release(source)
                return False
            self._drop(victim, EVICTED)
        connection.source = source
        self._open[connection] = None
        source.open[connection] = None
        return True

    def _oldest_idle_of_largest(self) -> _Guarded | None:
        """What makes room at --max-connections: of the address holding the most, the
        oldest connection still waiting for its handshake (it has sent nothing that was
        read), else one whose handshake has taken over a second, else its oldest idle one;
        else the same of the next address."""
        now = time.monotonic()
        for source in sorted(self._sources.values(), key=lambda s: len(s.open), reverse=True):
            victim = next(
                (c for c in source.waiting if c.phase == _WAITING and c in source.open), None
            )
            if victim is None:
                # A handshake that has taken a second is not the API server's.
                victim = next(
                    (
                        c
                        for c in source.open
                        if c.phase == _HANDSHAKE
                        and now - c.handshake_started > _SLOW_HANDSHAKE_SECONDS
                    ),
                    None,
                )
            if victim is None:
                victim = next((c for c in source.established if c.idle), None)
            if victim is not None:
                return victim
        return None

    def queue(self, connection: _Guarded) -> None:
        """Wait for a handshake: now, if the limits allow, else when it is its turn."""
        source = connection.source
        assert source is not None
        source.waiting.append(connection)
        if not source.queued:
            source.queued = True
            self._turns.append(source)
        self._start_handshakes()

    def _start_handshakes(self) -> None:
        limits, turns = self.limits, self._turns
        if self.tls is None:
            return
        rate = limits.handshakes_per_second_per_source
        now = time.monotonic()
        # When the first address held back by its rate may begin one again.
        refill: float | None = None
        while turns and self.handshaking < limits.max_handshakes:
            for _ in range(len(turns)):
                source = turns.popleft()
                connection = _next_waiting(source)
                if connection is None:
                    source.queued = False
                    self._release(source)
                    continue
                source.tokens = source.tokens_now(now, rate)
                source.tokens_at = now
                owed = self.owed(source.address) if self.owed is not None else 0.0
                if (
                    source.handshaking >= limits.max_handshakes_per_source
                    or source.tokens < 1
                    or owed > 0
                ):
                    if source.tokens < 1 or owed > 0:
                        wait = max((1 - source.tokens) / rate, owed)
                        refill = wait if refill is None else min(refill, wait)
                    source.waiting.appendleft(connection)
                    turns.append(source)
                    continue
                source.tokens -= 1
                if source.waiting:
                    turns.append(source)  # its next one after the other addresses' turns
                else:
                    source.queued = False
                source.handshaking += 1
                self.handshaking += 1
                waited = time.monotonic() - connection.opened
                # At least a moment: one whose time is up is the sweep's to close.
                timeout = max(limits.header_timeout - waited, 0.05)
                connection.start_handshake(self.tls(), timeout)
                break
            else:
                break  # every address with connections waiting is at its own limit
        if refill is not None:
            loop = asyncio.get_running_loop()
            timer = self._refill
            if timer is None or loop.time() + refill < timer.when():
                if timer is not None:
                    timer.cancel()
                self._refill = loop.call_later(refill, self._refilled)

    def _refilled(self) -> None:
        self._refill = None
        self._start_handshakes()

    def handshake_failed(self, connection: _Guarded, exc: BaseException, timed_out: bool) -> None:
        if connection not in self._open:
            return  # closed by the server to make room, and counted then
        if timed_out and isinstance(exc, ConnectionAbortedError | TimeoutError):
            self.count(TLS_TIMEOUT)
            return
        reason = getattr(exc, "reason", None)
        if self.check_peer is not None and (
            isinstance(exc, ssl.SSLCertVerificationError) or reason in _CLIENT_CERTIFICATE_REASONS
        ):
            detail = getattr(exc, "verify_message", None) or reason or str(exc)
            self.client_refused(connection, str(detail))
            return
        logger.debug("a TLS handshake from %s failed: %r", _address_of(connection), exc)
        self.count(TLS_FAILED)

    def client_refused(self, connection: _Guarded, why: str) -> None:
        self.count(CLIENT_CERTIFICATE)
        self._client_log.log(
            logging.WARNING,
            "refused a connection from %s: client certificate: %s",
            _address_of(connection),
            why,
        )

    def handshake_ended(self, connection: _Guarded) -> None:
        source = connection.source
        self.handshaking -= 1
        if source is not None:
            source.handshaking -= 1
            self._release(source)
        self._start_handshakes()

    def forget(self, connection: _Guarded) -> None:
        if connection in self._open:
            del self._open[connection]
            self._lost += 1
        source = connection.source
        if source is not None:
            source.open.pop(connection, None)
            source.established.pop(connection, None)
            self._release(source)

    def _release(self, source: _Source, now: float | None = None) -> None:
        """Forget an address once nothing of it is left, its handshake rate included (an
        address that closes all its connections does not get a fresh burst by it)."""
        if source.empty and not source.queued and self._sources.get(source.address) is source:
            now = time.monotonic() if now is None else now
            rate = self.limits.handshakes_per_second_per_source
            if source.tokens_now(now, rate) >= HANDSHAKE_BURST * rate:
                del self._sources[source.address]

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
        for source in [s for s in self._sources.values() if s.empty]:
            self._release(source, now)

    def stop_reading(self, transport: asyncio.BaseTransport | None) -> None:
        """For a request refused before its body was read (413, 429): read nothing
        more from its connection. Its answer still goes out and the connection closes (after
        the TLS layer's wait for the client's close_notify, `TLS_SHUTDOWN_SECONDS`); what the
        client goes on sending is never received, so refusing a 7 MiB upload costs neither
        its decryption nor its copies."""
        connection = self.by_transport.get(transport) if transport is not None else None
        if connection is not None:
            connection.stop_reading()

    def close_idle(self) -> None:
        """Close every connection not in the middle of a request (for a drain)."""
        if self._refill is not None:
            self._refill.cancel()
            self._refill = None
        for connection in list(self._open):
            if not connection.busy:
                connection.close()

    def abort_all(self) -> None:
        """Drop every connection still open, at once (the last step of a shutdown: what is
        left then is closing, waiting for a handshake, or refused and lingering)."""
        if self._refill is not None:
            self._refill.cancel()
            self._refill = None
        for connection in list(self._open):
            connection.abort()

    def _drop(self, connection: _Guarded, why: str) -> None:
        self._open.pop(connection, None)
        source = connection.source
        if source is not None:
            source.open.pop(connection, None)
            source.established.pop(connection, None)
        connection.close()
        self.count(why)

    def count(self, why: str) -> None:
        """Count a connection closed for `why` (the `reason` of connections_closed_total)."""
        if self._on_closed is not None:
            try:
                self._on_closed(why)
            except Exception:  # pragma: no cover - counting must not stop the sweep
                logger.exception("counting a closed connection failed")


def _next_waiting(source: _Source) -> _Guarded | None:
    """The oldest connection of `source` still waiting (closed ones are dropped on the way)."""
    waiting = source.waiting
    while waiting:
        connection = waiting.popleft()
        if connection.phase == _WAITING and connection in source.open:
            return connection
    return None


def _address_of(connection: _Guarded) -> str:
    return connection.source.address if connection.source is not None else "unknown"


async def listen(
    handler_factory: Callable[[], RequestHandler],
    connections: Connections,
    *,
    host: str | None,
    port: int,
    reuse_port: bool = False,
    backlog: int = 512,
) -> asyncio.Server:
    """Listen on `host:port` with every connection guarded by `connections` (which starts
    TLS on each when it has a `tls` context)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        connections.factory(handler_factory),
        host,
        port,
        backlog=backlog,
        reuse_port=reuse_port or None,
    )
