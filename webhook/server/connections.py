"""The admission listener: who may connect, their TLS handshakes, and the header timeout.

`Listener.start(host, port)` listens on a plain socket and accepts connections itself
(`loop.sock_accept`), so that it sees each one before any byte of it is read:

- at most `max_connections` are open, `max_connections_per_source` from one address; one
  beyond either is closed at once, before its TLS handshake (what a flood would make the
  server spend its time on), and counted (`refused`, `source-refused`). At the total, a
  newcomer first makes room by closing the oldest connection still waiting for its
  handshake's turn, or in a handshake for over `SLOW_HANDSHAKE_SECONDS` (`refused` too): a
  few addresses of silent connections cannot keep the API server's new ones out;
- an address whose large reviews took more than their share of the server's time lately
  (`limits.Budget.wait`) opens no new connection until it is back within it
  (`source-refused`): the time its handshakes would take comes out of the same share;
- at most `max_handshakes` TLS handshakes run at once, `max_handshakes_per_source` for one
  address; the others wait their turn. TLS starts with `loop.connect_accepted_socket(ssl=)`,
  with the context in force at that moment (a new serving certificate or client CA takes
  effect for the next handshake); its outcome is counted: `tls-timeout` (no handshake within
  the header timeout, its wait included), `tls-failed`, `client-certificate`;
- with a client CA, a certificate of a name that is not accepted is refused after the
  handshake, before any byte of a request is read;
- each request's line and headers must arrive within the header timeout of the connection
  or of the request's first byte (`header`): aiohttp has no such timeout, so each
  connection's protocol is `Connection`, which hands every byte to aiohttp's handler and
  watches the bytes for the end of each request's head.

`Connection` is the one adapter between asyncio and aiohttp here. It uses public interfaces
only: aiohttp's `web.Server` is the documented protocol factory for `loop.create_server`
(each call makes a `RequestHandler`, an `asyncio.Protocol`), and `Connection` passes it the
calls an asyncio transport makes. It adds what it needs on the way: the header timeout
(from the bytes, as an HTTP/1.1 client sends them: a head ends at an empty line and its
Content-Length says how many body bytes follow) and one read buffer shared by all
connections (asyncio.BufferedProtocol: uvloop's TLS reads into it, instead of making a
256 KiB object for every read). tests/server/test_connections.py fails when aiohttp's handler
stops being such a protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from webhook.server import logs
from webhook.server.limits import TLS_SHUTDOWN_SECONDS, Limits
from webhook.server.metrics import (
    CLIENT_CERTIFICATE,
    HEADER,
    REFUSED,
    SOURCE_REFUSED,
    TLS_FAILED,
    TLS_TIMEOUT,
)

logger = logging.getLogger(__name__)

# The reasons OpenSSL gives (ssl.SSLError.reason) for a client certificate that is missing or
# does not verify; any other failed handshake is TLS_FAILED.
_CLIENT_CERTIFICATE_REASONS = frozenset(
    {
        "CERTIFICATE_VERIFY_FAILED",
        "PEER_DID_NOT_RETURN_A_CERTIFICATE",
        "NO_CERTIFICATE_RETURNED",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "CERTIFICATE_REQUIRED",
    }
)

# Where every connection's bytes are read into before they are copied for aiohttp: the
# event loop calls `get_buffer` and then `buffer_updated` for one connection before it reads
# from another, and the bytes are copied out at once. Four TLS records.
READ_BUFFER_BYTES = 64 * 1024
_READ_BUFFER = memoryview(bytearray(READ_BUFFER_BYTES))

# The end of a request's head, and the header that says how long its body is.
_HEAD_END = b"\r\n\r\n"
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length[ \t]*:[ \t]*(\d{1,12})[ \t]*\r", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding[ \t]*:[^\r]*chunked", re.IGNORECASE)
# A head longer than this is no API server's: the connection is closed. aiohttp's own bounds
# (8190 bytes a line, 128 headers) refuse most of what is longer first.
MAX_HEAD_BYTES = 64 * 1024
# At most one log line about refused client certificates this often.
CLIENT_LOG_SECONDS = 10.0
# A connection in its TLS handshake for longer than this may be closed to make room for a
# newcomer at the total cap (an API server's handshake takes milliseconds).
SLOW_HANDSHAKE_SECONDS = 1.0
# How often the listener looks for overdue heads (a quarter of a shorter header timeout): a
# head's timeout is kept within a second.
SWEEP_SECONDS = 1.0
# Connections taken from the accept queue in one go, before the loop's other work gets a turn.
ACCEPT_BATCH = 64


class _Source:
    """The connections of one source address."""

    __slots__ = ("handshakes", "open")

    def __init__(self, handshakes: int) -> None:
        self.open = 0
        self.handshakes = asyncio.Semaphore(handshakes)


class Listener:
    """Accepts admission connections, bounds them, starts TLS and hands each to aiohttp.

    `handlers` is aiohttp's `web.Server` (`AppRunner.server`); `tls` gives the context for
    the next handshake (None: plain HTTP, for tests); `check_client` says why a finished
    handshake's client certificate is refused (None: every certificate the context accepts
    is); `count` counts a connection closed or turned away, by reason.
    """

    def __init__(
        self,
        handlers: web.Server,
        limits: Limits,
        *,
        tls: Callable[[], ssl.SSLContext] | None,
        check_client: Callable[[Any], str | None] | None = None,
        count: Callable[[str], object] = lambda _reason: None,
        over_share: Callable[[str], bool] = lambda _address: False,
    ) -> None:
        self.handlers = handlers
        self.limits = limits
        self.tls = tls
        self.check_client = check_client
        self.count = count
        self.over_share = over_share
        self.open: set[Connection] = set()
        self._sources: dict[str, _Source] = {}
        self._handshakes = asyncio.Semaphore(limits.max_handshakes)
        # The connections before and in their handshake, oldest first: when each began its
        # handshake (None: waiting for its turn).
        self._opening: dict[asyncio.Task[bool], float | None] = {}
        self._socket: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._sweeping: asyncio.Task[None] | None = None
        self._client_log = logs.EveryFew(logger, CLIENT_LOG_SECONDS)

    def __len__(self) -> int:
        """Connections open now, in a handshake or past it."""
        return len(self.open) + len(self._opening)

    @property
    def sources(self) -> int:
        """Source addresses with a connection now."""
        return len(self._sources)

    async def start(self, host: str, port: int, *, backlog: int = 512) -> int:
        """Listen on `host:port` and accept until `close`; the port listened on."""
        loop = asyncio.get_running_loop()
        info = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = info[0]
        listening = socket.socket(family, kind, proto)
        try:
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listening.bind(address)
            listening.listen(backlog)
            listening.setblocking(False)
        except BaseException:
            listening.close()
            raise
        self._socket = listening
        self._accepting = asyncio.create_task(self._accept(listening))
        self._sweeping = asyncio.create_task(self._sweep())
        return int(listening.getsockname()[1])

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(listening)
            except OSError as exc:  # out of descriptors, say: look again in a moment
                logger.warning("accepting a connection failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            self._take(loop, sock, peer)
            # Then what else waits in the queue, without a wait each (a future, a reader
            # added and removed): a flood's connections are mostly closed at once.
            for _ in range(ACCEPT_BATCH):
                try:
                    sock, peer = listening.accept()
                except OSError:  # none left (BlockingIOError), or out of descriptors
                    break
                sock.setblocking(False)
                self._take(loop, sock, peer)

    def _take(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, peer: Any) -> None:
        """An accepted connection: closed at once when its address or the server is at its
        cap, else started (`_open`)."""
        limits = self.limits
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        source = self._sources.get(address)
        if (
            source is not None and source.open >= limits.max_connections_per_source
        ) or self.over_share(address):
            self.count(SOURCE_REFUSED)
            sock.close()
            return
        if len(self) >= limits.max_connections and not self._make_room(loop.time()):
            self.count(REFUSED)
            sock.close()
            return
        if source is None:
            source = self._sources[address] = _Source(limits.max_handshakes_per_source)
        source.open += 1
        task = asyncio.create_task(self._open(sock, address, source))
        self._opening[task] = None
        task.add_done_callback(functools.partial(self._opened, sock, address))

    async def _open(self, sock: socket.socket, address: str, source: _Source) -> bool:
        """Start TLS on an accepted socket (in turn) and hand it to a `Connection`; whether
        it was (if not, `_opened` closes the socket)."""
        loop = asyncio.get_running_loop()
        timeout = self.limits.header_timeout
        started = loop.time()
        try:
            # Its address's turn first: waiting for it holds none of the others'.
            async with asyncio.timeout(timeout), source.handshakes, self._handshakes:
                task = asyncio.current_task()
                if task in self._opening:
                    self._opening[task] = loop.time()
                await loop.connect_accepted_socket(
                    lambda: Connection(self, address),
                    sock,
                    ssl=self.tls() if self.tls is not None else None,
                    ssl_handshake_timeout=max(timeout - (loop.time() - started), 0.01)
                    if self.tls is not None
                    else None,
                    ssl_shutdown_timeout=TLS_SHUTDOWN_SECONDS if self.tls is not None else None,
                )
                return True
        except (TimeoutError, ConnectionAbortedError):
            self.count(TLS_TIMEOUT)
        except ssl.SSLError as exc:
            if self.check_client is not None and (
                isinstance(exc, ssl.SSLCertVerificationError)
                or exc.reason in _CLIENT_CERTIFICATE_REASONS
            ):
                self.client_refused(address, getattr(exc, "verify_message", None) or exc.reason)
            else:
                self.count(TLS_FAILED)
        except (OSError, EOFError):
            self.count(TLS_FAILED)
        return False

    def _opened(self, sock: socket.socket, address: str, task: asyncio.Task[bool]) -> None:
        """A connection's handshake is over: made, failed, or cancelled (perhaps before it
        began: then its coroutine never ran)."""
        self._opening.pop(task, None)
        if task.cancelled() or task.exception() is not None or not task.result():
            sock.close()
            self.forget(address)

    def _make_room(self, now: float) -> bool:
        """Close the oldest connection waiting for its handshake's turn, or in a handshake
        for over SLOW_HANDSHAKE_SECONDS; whether there was one."""
        for task, since in self._opening.items():
            if since is None or now - since > SLOW_HANDSHAKE_SECONDS:
                del self._opening[task]
                task.cancel()  # its socket is closed and its address forgotten as it ends
                self.count(REFUSED)
                return True
        return False

    async def _sweep(self) -> None:
        """Once a second: close the connections whose request head is overdue."""
        timeout = self.limits.header_timeout
        every = min(SWEEP_SECONDS, timeout / 4)
        while True:
            await asyncio.sleep(every)
            now = time.monotonic()
            for connection in list(self.open):
                since = connection.head_since
                if since is not None and now - since > timeout:
                    self.count(HEADER)
                    connection.abort()

    def client_refused(self, address: str, why: object) -> None:
        self.count(CLIENT_CERTIFICATE)
        self._client_log.log(
            logging.WARNING,
            "refused a connection from %s: client certificate: %s",
            address,
            why,
        )

    def forget(self, address: str) -> None:
        """One connection of `address` is gone."""
        source = self._sources.get(address)
        if source is None:
            return
        source.open -= 1
        if source.open <= 0:
            del self._sources[address]

    async def close(self) -> None:
        """Stop accepting, and drop the connections still in their handshake."""
        for running in (self._accepting, self._sweeping):
            if running is not None:
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
        self._accepting = self._sweeping = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        opening = list(self._opening)
        for task in opening:
            task.cancel()
        await asyncio.gather(*opening, return_exceptions=True)

    def abort_all(self) -> None:
        """Drop every connection still open (the last step of a shutdown)."""
        for connection in list(self.open):
            connection.abort()


class Connection(asyncio.BufferedProtocol):
    """One admission connection past its handshake: aiohttp's handler behind it, and the
    header timeout in front of it (see the module docstring)."""

    __slots__ = (
        "_body_left",
        "_head",
        "_listener",
        "address",
        "handler",
        "head_since",
        "transport",
    )

    def __init__(self, listener: Listener, address: str) -> None:
        self._listener = listener
        self.address = address
        self.handler: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        # When the head being awaited began (the connection, or a request's first byte;
        # None: none is awaited), the part of it that has arrived, and the body bytes of the
        # current request still to come (-1: a chunked body, no longer followed). The
        # listener's sweep closes a connection whose head is overdue.
        self.head_since: float | None = None
        self._head = b""
        self._body_left = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tls: asyncio.Transport = transport  # type: ignore[assignment]
        listener = self._listener
        if listener.check_client is not None:
            refusal = listener.check_client(tls.get_extra_info("ssl_object"))
            if refusal is not None:
                listener.client_refused(self.address, refusal)
                tls.abort()
                return
        self.transport = tls
        self.head_since = time.monotonic()
        listener.open.add(self)
        self.handler = handler = listener.handlers()
        handler.connection_made(tls)

    def get_buffer(self, sizehint: int) -> memoryview:
        return _READ_BUFFER

    def buffer_updated(self, nbytes: int) -> None:
        data = _READ_BUFFER[:nbytes].tobytes()
        self._watch(data)
        handler = self.handler
        if handler is not None:
            handler.data_received(data)

    def _watch(self, data: bytes) -> None:
        """Follow the requests in `data`: a head's first byte starts its clock, its end
        stops it, and the body after it is counted out by its Content-Length."""
        at, size = 0, len(data)
        if self._body_left < 0:
            return
        while at < size:
            if self._body_left:
                step = min(self._body_left, size - at)
                self._body_left -= step
                at += step
                continue
            head = self._head
            if self.head_since is None:  # the first byte of a request
                self.head_since = time.monotonic()
            if head:
                # A head over several reads: look again where its end could start.
                joined = head + data[at:]
                end = joined.find(_HEAD_END, max(0, len(head) - 3))
                if end < 0:
                    self._keep_head(joined)
                    return
                block, at = joined[:end], at + end + 4 - len(head)
                self._head = b""
            else:
                end = data.find(_HEAD_END, at)
                if end < 0:
                    self._keep_head(data[at:])
                    return
                block, at = data[at:end], end + 4
            self.head_since = None
            if _CHUNKED.search(block) is not None:
                # A body in chunks (the API server never sends one): where it ends is
                # aiohttp's to find; this connection's later heads are not timed (its body
                # and idle timeouts still hold).
                self._body_left = -1
                return
            length = _CONTENT_LENGTH.search(block + b"\r")
            self._body_left = int(length.group(1)) if length is not None else 0

    def _keep_head(self, head: bytes) -> None:
        if len(head) > MAX_HEAD_BYTES and self.transport is not None:
            self._listener.count(HEADER)
            self.transport.abort()
            return
        self._head = head

    def eof_received(self) -> bool | None:
        handler = self.handler
        return handler.eof_received() if handler is not None else None

    def connection_lost(self, exc: BaseException | None) -> None:
        listener = self._listener
        if self.transport is not None:
            listener.open.discard(self)
            self.transport = None
        self.head_since = None
        listener.forget(self.address)
        handler, self.handler = self.handler, None
        if handler is not None:
            handler.connection_lost(exc)  # type: ignore[arg-type]

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
