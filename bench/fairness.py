"""One source flooding the admission port, another reviewing: does the flood take the server
from the other source?

    python bench/fairness.py [--seconds 20] [--flood-senders 40] [--handshakes 2000]
                             [--connections 4] [--handshake-concurrency N]
                             [--flood-processes 1] [--server-arg=--flag=value ...]

Runs `python -m webhook serve` as bench/soak.py does (its own CA, the repository's policies,
free loopback ports, one worker; --server-arg passes flags as they are), listening on
127.0.0.1. On loopback every address of 127/8 is this machine, so the clients bind their
sockets to different ones and the server sees different sources:

- 127.0.0.2, "the API server": ordinary reviews, closed loop, on --connections keep-alive TLS
  connections, each review a pod asking for one `nvidia.com/gpu.shared` (soak.py's POD) with
  its own uid, pod name and environment value;
- 127.0.0.1, "the flood": --flood-senders connections each sending 7 MiB reviews (just under
  the body limit, as soak.py's large ones; each with its own uid and pod name; streamed as
  the socket takes it, so an early 429 stops the upload) one after another, opened again at
  once when the server closes them (after a 429, say), a tenth of a second after it refused
  one (closed it before its handshake); and in the last phase also --handshakes connections
  that complete a TLS handshake and then stay silent, all opened at once when the
  measurement starts (as a pool reconnects after a restart; --handshake-concurrency 64 opens
  them as soak.py's pool does), each opened again whenever the server closes it (its header
  timeout, 10 s) or a second after it refused or failed it;
- 127.0.0.3, "the kubelet": GET /healthz on the plain metrics port every 0.2 s, a fresh
  connection each time, the next one at the first tick after the last answered; a probe that
  takes 1 s or more, or is not answered 200, is a miss.

Three phases, each measured for --seconds: "unloaded" (the ordinary client alone), "flood"
(and the senders, started 3 s before the measurement), "flood+handshakes" (and the
handshakes, starting with the measurement). The ordinary client, the flood and the
handshakes each run in a process of their own (uvloop when installed), so the flood's TLS
work does not take the ordinary client's interpreter; this process only probes /healthz.
Each process reports the CPU seconds it used during the measurement and the seconds it was
ready to run but waited for a CPU (/proc/<pid>/task/*/schedstat); the server's are read from
/proc too, so the table shows who ran out of CPU, and how much the machine's other work took
from whom. Mid-measurement `ss` lists the server's established admission connections by
peer address: the proof that the server sees two sources.

The attackers share the server's CPUs here, as they would not in a cluster, so each of their
connection attempts costs them as little as it can without changing what the server sees
(sockets of their own, TLS over memory buffers, a refused attempt's ClientHello sent again;
see "the attackers' TLS" below); the CPU table gives their attempts with their CPU seconds,
and the ordinary reviews per CPU second of the server's, which the machine's other work
does not change as it changes reviews/s.

Targets (exit 1 when one is missed): under flood the ordinary client keeps at least half its
unloaded reviews/s with p99 under 1 s; no ordinary review fails; every /healthz answers in
under 1 s, in every phase. The server's error lines, if it logged any, are printed at the
end (a flood's answer other than 200 or 429 is counted under "flood other").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import multiprocessing
import os
import select
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

try:
    import uvloop
except ImportError:  # not on every platform: the clients run on asyncio's loop
    uvloop = None  # type: ignore[assignment]

import soak  # noqa: E402  bench/soak.py: the pod, the request, the exchange
from soak import bump, percentile, probe_healthz  # noqa: E402

from tests.support import fuzzing  # noqa: E402
from tests.support import server_helpers as h  # noqa: E402

API_SERVER = "127.0.0.2"
FLOOD = "127.0.0.1"
KUBELET = "127.0.0.3"
SERVER_HOST = "127.0.0.1"

PROBE_EVERY = 0.2
PROBE_MISS = 1.0  # the kubelet's default timeoutSeconds
MEMORY_LIMIT_MIB = 384  # the Deployment's memory limit (deploy/, the chart)
PROBE_TIMEOUT = 5.0  # how long a probe is waited for, to know how slow a slow one was
REVIEW_TIMEOUT = soak.REVIEW_TIMEOUT_SECONDS
LARGE_TIMEOUT = 3 * REVIEW_TIMEOUT
FLOOD_LEAD = 3.0  # seconds the senders run before the measurement starts
SETTLE = 2.0  # seconds between phases, for the server to finish what the last one left
CLIENT_ERRORS = (OSError, EOFError, ssl.SSLError, TimeoutError, ValueError, IndexError)
PHASES = ("unloaded", "flood", "flood+handshakes")
FAULTS = ("error", "critical")  # server log lines printed at the end
PAD_MARK = "@@pad@@"  # where a large review's padding goes
UPLOAD_CHUNK = 256 * 1024  # a large review is sent in pieces of this, as the socket takes them


@dataclass(frozen=True)
class Target:
    """Where the clients connect, and what they trust."""

    port: int
    ca_file: str


@dataclass(frozen=True)
class Window:
    """When a phase's measurement runs, on the machine's monotonic clock (the same in every
    process)."""

    start: float
    end: float


# --------------------------------------------------------------------------- the clients


def context_of(target: Target) -> ssl.SSLContext:
    return h.client_context(Path(target.ca_file))


async def connect(
    target: Target, context: ssl.SSLContext, source: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TLS connection from `source`, checked as the API server checks it."""
    return await asyncio.wait_for(
        asyncio.open_connection(
            SERVER_HOST,
            target.port,
            ssl=context,
            server_hostname=h.HOST,
            local_addr=(source, 0),
            limit=1 << 20,
        ),
        REVIEW_TIMEOUT,
    )


def close(writer: asyncio.StreamWriter | None) -> None:
    if writer is not None:
        with contextlib.suppress(Exception):
            writer.close()


async def sleep_until(moment: float) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


def ordinary_body(worker: int, n: int) -> tuple[bytes, bytes]:
    """A review of soak.py's pod, made distinct (name, environment) from every other; its uid."""
    uid = str(uuid.uuid4())
    container = {**soak.POD["spec"]["containers"][0], "env": [{"name": "REQUEST", "value": uid}]}
    pod = {
        **soak.POD,
        "metadata": {**soak.POD["metadata"], "name": f"fair-{worker}-{n}"},
        "spec": {"containers": [container]},
    }
    doc = fuzzing.review_doc(pod, kind=("", "v1", "Pod"), operation="CREATE", uid=uid)
    return fuzzing.encode(doc), uid.encode()


@dataclass(frozen=True)
class Large:
    """A review as soak.py's large ones, in three parts: before the padding (with marks for
    the uid and the pod name), the padding, after it."""

    before: bytes
    pad: bytes
    after: bytes

    @classmethod
    def make(cls) -> Large:
        small = soak.review_body(soak.POD)
        pod = {
            **soak.POD,
            "metadata": {
                **soak.POD["metadata"], "name": "{name}", "annotations": {"pad": PAD_MARK}
            },
        }  # fmt: skip
        doc = fuzzing.review_doc(pod, kind=("", "v1", "Pod"), operation="CREATE", uid="{uid}")
        before, _, after = fuzzing.encode(doc).partition(PAD_MARK.encode())
        return cls(before, b"x" * (fuzzing.MAX_BODY_BYTES - 4096 - len(small)), after)

    def chunks(self, n: int) -> tuple[int, list[bytes | memoryview]]:
        """The `n`th, with a uid and pod name of its own: its length, and its bytes in
        UPLOAD_CHUNK pieces (views of the padding, not copies)."""
        uid = str(uuid.uuid4()).encode()
        before = self.before.replace(b"{uid}", uid).replace(b"{name}", b"flood-%d" % n)
        pad = memoryview(self.pad)
        pieces = [pad[i : i + UPLOAD_CHUNK] for i in range(0, len(pad), UPLOAD_CHUNK)]
        return len(before) + len(pad) + len(self.after), [before, *pieces, self.after]


@dataclass
class Ordinary:
    ok: int = 0
    failed: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    reconnects: int = 0


async def ordinary(target: Target, window: Window, connections: int) -> dict[str, Any]:
    """Closed loop from API_SERVER: reviews started in the window and answered are counted
    (the last ones are waited for); reviews/s are those answered by its end."""
    context = context_of(target)
    result = Ordinary()
    answered_in_window = [0]

    async def one(worker: int) -> None:
        writer: asyncio.StreamWriter | None = None
        reader: asyncio.StreamReader | None = None
        with contextlib.suppress(*CLIENT_ERRORS):
            reader, writer = await connect(target, context, API_SERVER)
        await sleep_until(window.start)
        n = 0
        while time.monotonic() < window.end:
            n += 1
            body, uid = ordinary_body(worker, n)
            started = time.monotonic()
            try:
                if writer is None or reader is None:
                    result.reconnects += 1
                    reader, writer = await connect(target, context, API_SERVER)
                async with asyncio.timeout(REVIEW_TIMEOUT):
                    status, headers, answer = await soak.exchange(
                        reader, writer, soak.head(len(body)) + body
                    )
                if headers.get("connection", "").lower() == "close":
                    close(writer)
                    reader = writer = None
                good = status == 200 and b'"allowed":true' in answer and uid in answer
                why = "" if good else f"{status} {answer[:60]!r}"
            except CLIENT_ERRORS as exc:
                why = type(exc).__name__
                close(writer)
                reader = writer = None
            finished = time.monotonic()
            if why:
                result.failed += 1
                bump(result.failures, why)
                await asyncio.sleep(0.05)
            else:
                result.ok += 1
                result.latencies.append(finished - started)
                if finished <= window.end:
                    answered_in_window[0] += 1
        close(writer)

    await asyncio.gather(*(one(worker) for worker in range(connections)))
    return {
        "ok": result.ok,
        "answered_in_window": answered_in_window[0],
        "failed": result.failed,
        "failures": result.failures,
        "latencies": result.latencies,
        "reconnects": result.reconnects,
    }


# --------------------------------------------------------------------------- the attackers' TLS
#
# The attackers share the server's CPUs here (the module docstring says why that matters):
# a connection is a non-blocking socket of its own with TLS over memory buffers (no asyncio
# transport or stream), and a refused attempt sends the same ClientHello again (`Hello`).

# A connect that the server's full accept queue leaves unanswered gives up after its SYN and
# two retries (7 s, on the kernel's timer: none of ours per attempt); it is tried again a
# second later.
SYN_RETRIES = 2
READ_BYTES = 64 * 1024


def attack_context() -> ssl.SSLContext:
    """An attacker's TLS: the ordinary client's protocol versions and ciphers, and no check
    of the server's certificate (the server's work is the same; the check is client CPU)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class Hello:
    """A TLS client's first flight, made once: its key share is most of what an attempt
    costs a client (~0.2 ms). It is sent on each new connection until a server answers it:
    a connection closed at accept, before its handshake, has read none of it."""

    __slots__ = ("data", "incoming", "outgoing", "tls")

    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname=h.HOST)
        with contextlib.suppress(ssl.SSLWantReadError):
            self.tls.do_handshake()
        self.data = self.outgoing.read()


def _wake(future: asyncio.Future[None], stop: Callable[[int], object], fd: int) -> None:
    # Stops watching at once: with over 1,024 sockets ready libuv polls again before the
    # waiting task runs, and a socket still watched would call this again each time.
    stop(fd)
    if not future.done():
        future.set_result(None)


class Refused(Exception):
    """The server closed the connection before it answered the ClientHello."""


class Raw:
    """A flood connection: a socket of its own, woken by the event loop's reader and writer
    callbacks, with TLS over memory buffers."""

    __slots__ = ("buffered", "fd", "hello", "loop", "sock")

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, hello: Hello):
        self.loop = loop
        self.sock = sock
        self.fd = sock.fileno()
        self.hello = hello
        self.buffered = b""

    @classmethod
    async def open(cls, target: Target, source: str, hello: Hello) -> Raw:
        """Connect from `source`, send `hello`, finish the handshake. Raises Refused when
        the server closes the connection first (`hello` is then unused), OSError or
        ssl.SSLError when connecting or the handshake fails."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw = cls(loop, sock, hello)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_SYNCNT, SYN_RETRIES)
            sock.bind((source, 0))
            if sock.connect_ex((SERVER_HOST, target.port)) != 0:  # in progress
                await raw.ready(writable=True)
                error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if error:
                    raise OSError(error, os.strerror(error))
            try:
                sock.send(hello.data)  # a few hundred bytes: an empty socket takes them
                data = await raw.receive()
            except ConnectionError:
                data = b""
            if not data:
                raise Refused
            tls = hello.tls
            while True:
                hello.incoming.write(data)
                try:
                    tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    await raw.flush()
                    data = await raw.receive()
                    if not data:
                        raise ConnectionResetError("closed in the handshake") from None
            await raw.flush()
        except BaseException:
            sock.close()
            raise
        return raw

    async def ready(self, *, writable: bool) -> None:
        """Until the socket is writable, or readable."""
        loop = self.loop
        start, stop = (
            (loop.add_writer, loop.remove_writer)
            if writable
            else (loop.add_reader, loop.remove_reader)
        )
        future = loop.create_future()
        start(self.fd, _wake, future, stop, self.fd)
        try:
            await future
        except BaseException:
            stop(self.fd)  # cancelled before it was
            raise

    async def receive(self) -> bytes:
        """Bytes from the socket, as they come (b"": closed)."""
        while True:
            try:
                return self.sock.recv(READ_BYTES)
            except BlockingIOError:
                await self.ready(writable=False)

    async def flush(self) -> None:
        """Send what TLS has for the socket, as the socket takes it."""
        view = memoryview(self.hello.outgoing.read())
        while view:
            try:
                view = view[self.sock.send(view) :]
            except BlockingIOError:
                await self.ready(writable=True)

    async def send(self, data: bytes | memoryview) -> None:
        self.hello.tls.write(data)
        await self.flush()

    async def read(self) -> bytes:
        """Decrypted bytes, as they come (b"": closed)."""
        tls = self.hello.tls
        while True:
            try:
                return tls.read(READ_BYTES)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                return b""
            data = await self.receive()
            if not data:
                return b""
            self.hello.incoming.write(data)

    async def answer(self) -> tuple[int, dict[str, str]]:
        """An HTTP answer's status and headers (lower case); its body is read and dropped."""
        data = self.buffered
        while (end := data.find(b"\r\n\r\n")) < 0:
            more = await self.read()
            if not more:
                raise EOFError("closed before an answer")
            data += more
        lines = data[:end].decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        need = end + 4 + int(headers.get("content-length", "0"))
        while len(data) < need:
            more = await self.read()
            if not more:
                raise EOFError("closed in an answer")
            data += more
        self.buffered = data[need:]
        return int(lines[0].split()[1]), headers

    def close(self) -> None:
        self.sock.close()


async def upload(raw: Raw, large: Large, n: int) -> tuple[int, dict[str, str]]:
    """Send a large review a piece at a time as the socket takes it, as an HTTP client streams
    a body, and read the answer meanwhile: a server that answers before the body is in (a
    429) stops the upload. The status and headers; a connection whose upload was cut short
    cannot be used again ("connection: close")."""
    length, chunks = large.chunks(n)

    async def send() -> None:
        await raw.send(soak.head(length))
        for chunk in chunks:
            await raw.send(chunk)

    sending = asyncio.create_task(send())
    try:
        status, headers = await raw.answer()
    finally:
        cut = not sending.done()
        sending.cancel()
        with contextlib.suppress(BaseException):
            await sending
    if cut:  # the stream stops mid-record: the connection cannot be used again
        headers = {**headers, "connection": "close"}
    return status, headers


async def flood(target: Target, window: Window, senders: int, first: int) -> dict[str, Any]:
    """7 MiB reviews from FLOOD, back to back on each of `senders` connections, opened again
    as soon as the server closes one (a tenth of a second after one it refused or that
    failed). Answers and refusals in the window are counted, and the connections tried."""
    context = attack_context()
    large = Large.make()
    answers: dict[str, int] = {}
    tried = [0]

    def count(key: str) -> None:
        if window.start <= time.monotonic() <= window.end:
            bump(answers, key)

    async def sender(index: int) -> None:
        raw: Raw | None = None
        hello: Hello | None = None
        n = 0
        while time.monotonic() < window.end:
            n += 1
            try:
                if raw is None:
                    hello = hello or Hello(context)
                    if window.start <= time.monotonic() <= window.end:
                        tried[0] += 1
                    raw = await Raw.open(target, FLOOD, hello)
                    hello = None
                async with asyncio.timeout(LARGE_TIMEOUT):
                    status, headers = await upload(raw, large, index * 10**6 + n)
                count(str(status))
                if headers.get("connection", "").lower() == "close":
                    raw.close()
                    raw = None
            except Refused:
                count("refused")
                await asyncio.sleep(0.1)  # a refused connect must not spin
            except CLIENT_ERRORS as exc:
                count(type(exc).__name__)
                if raw is not None:
                    raw.close()
                raw = hello = None
                await asyncio.sleep(0.1)
        if raw is not None:
            raw.close()

    tasks = [asyncio.create_task(sender(first + i)) for i in range(senders)]
    await stop_at(window.end, tasks)
    return {"answers": answers, "tried": tried[0]}


CONNECTING, SENT, HANDSHAKE, HELD = range(4)
RETRY_TICK = 0.05  # how often the connections due again are opened


class _Silent:
    """One of the silent connections: its socket, its ClientHello and TLS state, and what it
    waits for (CONNECTING, SENT: the server's answer, HANDSHAKE: the rest of it, HELD)."""

    __slots__ = ("hello", "sock", "state")

    def __init__(self, sock: socket.socket, hello: Hello) -> None:
        self.sock = sock
        self.hello = hello
        self.state = CONNECTING


async def handshakes(
    target: Target, window: Window, count: int, concurrency: int
) -> dict[str, Any]:
    """`count` connections from FLOOD that complete a TLS handshake and stay silent, opened
    again whenever the server closes one, or a second after it refused or failed one;
    `concurrency` handshakes under way at a time.

    Each socket is registered once in an epoll of this function's (edge-triggered), whose
    readiness the event loop reports: an attempt costs its system calls and a few lines,
    not a task, future or timer. The ClientHellos are made before the window."""
    loop = asyncio.get_running_loop()
    context = attack_context()
    spare = [Hello(context) for _ in range(count)]
    poll = select.epoll()
    live: dict[int, _Silent] = {}
    due: deque[tuple[float, Hello | None]] = deque()  # a second after now: in time order
    waiting: deque[Hello | None] = deque()  # beyond `concurrency`
    opening = [0]
    stats = {"tried": 0, "completed": 0, "closed_by_server": 0, "held_most": 0}
    held = [0]
    failed: dict[str, int] = {}
    address = (SERVER_HOST, target.port)
    watched = select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP | select.EPOLLET

    def open_one(hello: Hello | None) -> None:
        if opening[0] >= concurrency:
            waiting.append(hello)
            return
        stats["tried"] += 1
        opening[0] += 1
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        conn = live[sock.fileno()] = _Silent(sock, hello or Hello(context))
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_SYNCNT, SYN_RETRIES)
            sock.bind((FLOOD, 0))
            poll.register(sock, watched)
            error = sock.connect_ex(address)
        except OSError as exc:
            error = exc.errno or errno.EIO
        if error == 0:
            connected(conn)
        elif error != errno.EINPROGRESS:
            end(conn, errno.errorcode.get(error, str(error)))

    def connected(conn: _Silent) -> None:
        conn.state = SENT
        if send(conn, conn.hello.data):
            receive(conn)

    def send(conn: _Silent, data: bytes) -> bool:
        """A few hundred bytes, which an empty socket takes; whether they went."""
        try:
            if data:
                conn.sock.send(data)
            return True
        except OSError as exc:
            end(conn, "refused" if conn.state == SENT else type(exc).__name__)
            return False

    def receive(conn: _Silent) -> None:
        sock = conn.sock
        while True:
            try:
                data = sock.recv(READ_BYTES)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                end(conn, "refused" if conn.state == SENT else "ConnectionResetError")
                return
            if conn.state == HELD:
                continue
            conn.state = HANDSHAKE  # the server answered: this ClientHello is spent
            hello = conn.hello
            hello.incoming.write(data)
            try:
                hello.tls.do_handshake()
            except ssl.SSLWantReadError:
                if not send(conn, hello.outgoing.read()):
                    return
                continue
            except ssl.SSLError as exc:
                end(conn, type(exc).__name__)
                return
            if not send(conn, hello.outgoing.read()):
                return
            conn.state = HELD
            stats["completed"] += 1
            held[0] += 1
            stats["held_most"] = max(stats["held_most"], held[0])
            turn_over()

    def turn_over() -> None:
        opening[0] -= 1
        if waiting:
            open_one(waiting.popleft())

    def end(conn: _Silent, why: str) -> None:
        """The connection is over: a held one is opened again at once; a refused one a
        second later with the same ClientHello, a failed one with a new one."""
        del live[conn.sock.fileno()]
        conn.sock.close()  # and out of the epoll
        if conn.state == HELD:
            held[0] -= 1
            stats["closed_by_server"] += 1
            open_one(None)
            return
        bump(failed, why)
        turn_over()
        due.append((time.monotonic() + 1.0, conn.hello if why == "refused" else None))

    def events() -> None:
        for fd, mask in poll.poll(0):
            conn = live.get(fd)
            if conn is None:
                continue
            if conn.state == CONNECTING:
                error = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if error:
                    end(conn, errno.errorcode.get(error, str(error)))
                elif mask & select.EPOLLOUT:
                    connected(conn)
            else:
                receive(conn)

    await sleep_until(window.start)
    loop.add_reader(poll.fileno(), events)
    try:
        for hello in spare:
            open_one(hello)
        while time.monotonic() < window.end:
            await asyncio.sleep(RETRY_TICK)
            now = time.monotonic()
            while due and due[0][0] <= now:
                open_one(due.popleft()[1])
    finally:
        loop.remove_reader(poll.fileno())
        for conn in live.values():
            conn.sock.close()
        poll.close()
    return {**stats, "failed": failed}


async def stop_at(moment: float, tasks: list[asyncio.Task[None]]) -> None:
    await sleep_until(moment)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def child(role: str, pipe: Connection, target: Target, options: dict[str, Any]) -> None:
    """A client process: says it is ready, is told the window, runs, sends what it saw and
    the CPU seconds it used in the window."""
    soak.raise_fd_limit(options.pop("fd_limit"))
    pipe.send("ready")
    window: Window = pipe.recv()
    work = ROLES[role]

    async def measured() -> dict[str, Any]:
        cpu: list[float] = []
        waited: list[float] = []

        async def clock() -> None:
            for moment in (window.start, window.end):
                await sleep_until(moment)
                cpu.append(time.process_time())
                waited.append(run_queue_seconds(os.getpid()))

        clocking = asyncio.create_task(clock())
        result = await work(target, window, **options)
        await clocking
        result["cpu"] = cpu[1] - cpu[0]
        result["waited"] = waited[1] - waited[0]
        return result

    result = run(measured())
    pipe.send(result)
    pipe.close()


ROLES: dict[str, Callable[..., Coroutine[Any, Any, dict[str, Any]]]] = {
    "ordinary": ordinary,
    "flood": flood,
    "handshakes": handshakes,
}


def run(coroutine: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """On uvloop where it is installed, as `serve` runs (its TLS costs the client less)."""
    return uvloop.run(coroutine) if uvloop is not None else asyncio.run(coroutine)


# --------------------------------------------------------------------------- watching


async def probe(port: int, window: Window) -> list[tuple[float, bool]]:
    """/healthz from KUBELET on a fresh connection at each tick of PROBE_EVERY (the first tick
    after the last probe was answered): each probe's seconds, and whether it was a 200."""
    probes = []
    tick = window.start
    while tick < window.end:
        await sleep_until(tick)
        probes.append(await probe_healthz(port, PROBE_TIMEOUT, source=KUBELET))
        while tick <= time.monotonic():
            tick += PROBE_EVERY
    return probes


def with_children(pid: int) -> list[int]:
    """`pid` and its child processes (`serve --workers`)."""
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return pids


def run_queue_seconds(pid: int) -> float:
    """How long the threads of `pid` and its children have been ready to run but waiting for
    a CPU (/proc/<pid>/task/<tid>/schedstat, second field, ns): time taken by other processes
    on a full machine. Threads that have exited are not counted."""
    total = 0
    for each in with_children(pid):
        for task in Path(f"/proc/{each}/task").glob("*"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def cpu_seconds(pid: int) -> float:
    """User and system CPU of `pid` and its children (`serve --workers`), from /proc."""
    ticks = 0
    for each in with_children(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{each}/stat").read_text().rpartition(")")[2].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / os.sysconf("SC_CLK_TCK")


async def sources(port: int) -> dict[str, int]:
    """The server's established admission connections, by the client's address (ss)."""
    process = await asyncio.create_subprocess_exec(
        "ss", "-Htn", "state", "established", f"( sport = :{port} )",
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    out, _ = await process.communicate()
    counts: dict[str, int] = {}
    for line in out.decode().splitlines():
        peer = line.split()[-1].rpartition(":")[0]
        bump(counts, peer)
    return counts


# --------------------------------------------------------------------------- a phase


@dataclass
class Phase:
    name: str
    seconds: float
    ordinary: dict[str, Any]
    flood: dict[str, Any]
    handshakes: dict[str, Any]
    probes: list[tuple[float, bool]]
    server_cpu: float
    server_waited: float
    prober_cpu: float
    sources: dict[str, int]
    load: tuple[float, float, float]
    # The server's resident memory at the end of the phase, and its peak so far, in MiB.
    rss_mib: float = 0.0
    peak_mib: float = 0.0

    @property
    def rate(self) -> float:
        return float(self.ordinary["answered_in_window"]) / self.seconds

    @property
    def misses(self) -> int:
        return sum(1 for seconds, good in self.probes if not good or seconds >= PROBE_MISS)


def run_phase(name: str, args: argparse.Namespace, server: h.Process, target: Target) -> Phase:
    spawn = multiprocessing.get_context("spawn")
    fd_limit = 2 * (args.handshakes + args.flood_senders + args.connections) + 1024
    roles: list[tuple[str, dict[str, Any]]] = [("ordinary", {"connections": args.connections})]
    if name != "unloaded":
        per = -(-args.flood_senders // args.flood_processes)
        for first in range(0, args.flood_senders, per):
            senders = min(per, args.flood_senders - first)
            roles.append(("flood", {"senders": senders, "first": first}))
    if name == "flood+handshakes":
        roles.append(
            (
                "handshakes",
                {
                    "count": args.handshakes,
                    "concurrency": args.handshake_concurrency or args.handshakes,
                },
            )
        )
    pipes, processes = [], []
    for role, options in roles:
        ours, theirs = spawn.Pipe()
        process = spawn.Process(
            target=child, args=(role, theirs, target, {**options, "fd_limit": fd_limit})
        )
        process.start()
        pipes.append(ours)
        processes.append(process)
    for pipe in pipes:
        if pipe.recv() != "ready":
            raise RuntimeError("a client process did not start")
    lead = FLOOD_LEAD if name != "unloaded" else 1.0
    start = time.monotonic() + lead
    window = Window(start=start, end=start + args.seconds)
    for pipe in pipes:
        pipe.send(window)

    pid = server.popen.pid

    async def watch() -> tuple[list[tuple[float, bool]], list[float], dict[str, int]]:
        await sleep_until(window.start)
        before = [cpu_seconds(pid), run_queue_seconds(pid), time.process_time()]
        probing = asyncio.create_task(probe(server.metrics_port, window))
        await sleep_until(window.start + args.seconds / 2)
        seen = await sources(server.port)
        await sleep_until(window.end)
        after = [cpu_seconds(pid), run_queue_seconds(pid), time.process_time()]
        probes = await probing
        return probes, [a - b for a, b in zip(after, before, strict=True)], seen

    probes, (server_cpu, server_waited, prober_cpu), seen = asyncio.run(watch())
    load = os.getloadavg()
    rss_mib, peak_mib = memory_mib(server.popen.pid)
    results: dict[str, list[dict[str, Any]]] = {"ordinary": [], "flood": [], "handshakes": []}
    for (role, _), pipe, process in zip(roles, pipes, processes, strict=True):
        results[role].append(pipe.recv())
        process.join()
    return Phase(
        name=name,
        seconds=args.seconds,
        ordinary=results["ordinary"][0],
        flood=merge(results["flood"]),
        handshakes=merge(results["handshakes"]),
        probes=probes,
        server_cpu=server_cpu,
        server_waited=server_waited,
        prober_cpu=prober_cpu,
        sources=seen,
        load=load,
        rss_mib=rss_mib,
        peak_mib=peak_mib,
    )


def memory_mib(pid: int) -> tuple[float, float]:
    """A process's resident memory now and at its peak (VmRSS, VmHWM), in MiB."""
    found = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) / 1024
    return found.get("VmRSS", 0.0), found.get("VmHWM", 0.0)


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The results of processes of one role, added up (counts, and counts by key)."""
    total: dict[str, Any] = {
        "processes": len(parts),
        "cpu_each": [(p["cpu"], p["waited"]) for p in parts],
    }
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict):
                for k, n in value.items():
                    bump(total.setdefault(key, {}), k, n)
            elif isinstance(value, int | float):
                total[key] = total.get(key, 0) + value
    return total


# --------------------------------------------------------------------------- the table


def table(phases: list[Phase]) -> str:
    base = phases[0].rate
    lines = [
        "| phase | reviews/s | vs unloaded | p50 ms | p99 ms | failed | healthz probes"
        " | slowest healthz ms | misses | flood 200 | flood 429 | flood other | server CPU"
        " | server RSS MiB | peak MiB | load avg (1 min) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in phases:
        latencies = p.ordinary["latencies"]
        answers = p.flood.get("answers", {})
        other = sum(n for k, n in answers.items() if k not in ("200", "429"))
        flood = (
            (f"{answers.get('200', 0):,}", f"{answers.get('429', 0):,}", f"{other:,}")
            if p.name != "unloaded"
            else ("-", "-", "-")
        )
        slowest = max((s for s, _ in p.probes), default=0.0) * 1000
        cells = [
            p.name, f"{p.rate:,.0f}", f"{p.rate / base:.2f}" if base else "-",
            f"{percentile(latencies, 50):.1f}", f"{percentile(latencies, 99):.1f}",
            str(p.ordinary["failed"]), str(len(p.probes)), f"{slowest:.0f}", str(p.misses),
            *flood, f"{100 * p.server_cpu / p.seconds:.0f} %", f"{p.rss_mib:.0f}",
            f"{p.peak_mib:.0f}", f"{p.load[0]:.2f}",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_table(phases: list[Phase]) -> str:
    """Each process's CPU seconds in the window, and (after the slash) the seconds it was
    ready to run but waited for a CPU."""

    def used(each: list[tuple[float, float]]) -> str:
        return " + ".join(f"{cpu:.1f} / {waited:.1f}" for cpu, waited in each) or "-"

    lines = [
        "| phase | seconds | server | ordinary client | flood client | handshake client"
        " | prober | reviews per server CPU s | flood connections tried | handshakes tried /"
        " done / refused | server's connections by source (ss) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    base = efficiency(phases[0])
    for p in phases:
        hs = p.handshakes
        tried = "-"
        if hs.get("processes"):
            refused = hs.get("failed", {}).get("refused", 0)
            tried = f"{hs['tried']:,} / {hs['completed']:,} / {refused:,}"
        per_cpu = f"{efficiency(p):,.0f}" + (f" ({efficiency(p) / base:.2f})" if base else "")
        seen = ", ".join(f"{k} {n}" for k, n in sorted(p.sources.items())) or "none"
        cells = [
            p.name, f"{p.seconds:g}", used([(p.server_cpu, p.server_waited)]),
            used([(p.ordinary["cpu"], p.ordinary["waited"])]), used(p.flood["cpu_each"]),
            used(hs["cpu_each"]), f"{p.prober_cpu:.1f}", per_cpu,
            f"{p.flood['tried']:,}" if p.flood.get("processes") else "-", tried, seen,
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def efficiency(p: Phase) -> float:
    """Ordinary reviews answered in the window per CPU second the server used in it."""
    return float(p.ordinary["answered_in_window"]) / p.server_cpu if p.server_cpu else 0.0


def details(p: Phase) -> str:
    failures = ", ".join(f"{k} {n}" for k, n in sorted(p.ordinary["failures"].items()))
    answers = ", ".join(f"{k} {n}" for k, n in sorted(p.flood.get("answers", {}).items()))
    hs_failed = ", ".join(f"{k} {n}" for k, n in sorted(p.handshakes.get("failed", {}).items()))
    text = (
        f"{p.name}: ordinary {p.ordinary['answered_in_window']:,} answered in the window"
        f" ({p.ordinary['ok']:,} ok in all, max"
        f" {percentile(p.ordinary['latencies'], 100):.0f} ms, reconnects"
        f" {p.ordinary['reconnects']}), failed: {failures or 'none'}"
    )
    if p.flood.get("processes"):
        text += f"; flood answers: {answers or 'none'}, connections tried {p.flood['tried']:,}"
    if p.handshakes.get("processes"):
        text += (
            f"; handshakes tried {p.handshakes['tried']:,}, {p.handshakes['completed']:,} done"
            f" (at most {p.handshakes['held_most']:,} held at once), refused or failed:"
            f" {hs_failed or 'none'}, closed by the server {p.handshakes['closed_by_server']:,}"
        )
    return text + f"; load average {p.load[0]:.2f} {p.load[1]:.2f} {p.load[2]:.2f}"


def missed(phases: list[Phase]) -> list[str]:
    """The targets missed, in words."""
    base = phases[0].rate
    found = []
    for p in phases:
        if p.misses:
            found.append(f"{p.name}: {p.misses} /healthz probes over {PROBE_MISS:g} s or failed")
        if p.ordinary["failed"]:
            found.append(f"{p.name}: {p.ordinary['failed']} ordinary reviews failed")
        if p.peak_mib > MEMORY_LIMIT_MIB:
            found.append(f"{p.name}: peak memory {p.peak_mib:.0f} MiB, over {MEMORY_LIMIT_MIB}")
        if p.name == "unloaded":
            continue
        if p.rate < base / 2:
            found.append(f"{p.name}: {p.rate:,.0f} reviews/s, under half of {base:,.0f}")
        p99 = percentile(p.ordinary["latencies"], 99)
        if p99 >= 1000:
            found.append(f"{p.name}: p99 {p99:,.0f} ms, not under 1 s")
    return found


# --------------------------------------------------------------------------- the run


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="measured, per phase")
    parser.add_argument("--connections", type=int, default=4, help="the ordinary client's")
    parser.add_argument("--flood-senders", type=int, default=40, help="7 MiB senders")
    parser.add_argument("--flood-processes", type=int, default=1, help="processes they share")
    parser.add_argument("--handshakes", type=int, default=2000, help="silent TLS connections")
    parser.add_argument("--handshake-concurrency", type=int, default=0,
                        help="handshakes under way at a time (default: all of them)")  # fmt: skip
    parser.add_argument(
        "--server-arg", action="append", default=[], metavar="ARG",
        help="one more argument for `serve`, as it is (repeatable)",
    )  # fmt: skip
    args = parser.parse_args()
    limit = soak.raise_fd_limit(2 * (args.handshakes + args.flood_senders) + 1024)
    print(f"`{' '.join(['python bench/fairness.py', *sys.argv[1:]])}`", flush=True)
    print(
        f"load average at the start {' '.join(f'{x:.2f}' for x in os.getloadavg())};"
        f" {os.cpu_count()} CPUs; file descriptor limit {limit}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="gpu-share-webhook-fairness-") as name:
        directory = Path(name)
        ca_file = soak.start_directory(directory)
        with h.serving(directory, "--drain-seconds=0", *args.server_arg) as server:
            asyncio.run(server.ready())
            target = Target(port=server.port, ca_file=str(ca_file))
            phases: list[Phase] = []
            for phase in PHASES:
                if phases:
                    time.sleep(SETTLE)
                phases.append(run_phase(phase, args, server, target))
                print(details(phases[-1]), flush=True)
                if server.popen.poll() is not None:
                    print(f"the server exited: {server.popen.returncode}")
                    return 1
            errors = [line for line in server.log_lines() if line.get("level") in FAULTS]
    for line in errors[:5]:
        print(f"server log: {json.dumps(line)[:2000]}")
    if errors:
        print(f"the server logged {len(errors)} errors (the first five above)")
    print()
    print(table(phases))
    print()
    print("CPU seconds used in the window / seconds ready to run but waiting for a CPU:")
    print(cpu_table(phases))
    print()
    found = missed(phases)
    for line in found:
        print(f"MISSED: {line}")
    if not found:
        print("every target met")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
