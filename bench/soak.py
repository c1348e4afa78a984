"""Abuse and soak: a real `gpu-share-webhook serve` under steady review load while idle, slow,
short and very large requests pile up on it.

    python bench/soak.py [--minutes 2] [--rate 200] [--idle 2000] [--slowloris 100]
                         [--partial 100] [--large 3] [--every 10] [--steady-source 127.0.0.2]
                         [--server-arg=--flag=value ...] [--server-env K=V ...]

Runs `python -m webhook serve` on free loopback ports in a directory of its own (its own CA,
the repository's policies: the way tests/support/server_helpers.py runs it; --server-arg passes
flags such as --header-timeout or --max-connections as they are; --server-env K=V sets a
variable in its environment only, e.g. MALLOC_ARENA_MAX=8 to undo the two arenas `serve` sets
itself), then for
--minutes, all at once, over TLS checked as the API server checks it:

- steady load, from --steady-source (127.0.0.2: the API server's address is not the
  abusers', whose connections all come from 127.0.0.1; the server bounds each address
  apart): --rate reviews/s of one pod asking for a shared GPU, open loop (each sent at
  its scheduled time on one of --steady-connections keep-alive connections, its latency
  counted from that time, so a stalled server shows as latency, not as a slower sender);
- --idle connections that send one review and then stay open and silent, as a client's
  pool of keep-alive connections does;
- --slowloris connections that send a request's head one byte every --drip seconds;
- --partial connections whose request announces --partial-bytes of body and sends 1 KiB;
- --large connections that each send a 7 MiB review (just under the limit), one after
  another.

A connection of the last four kinds that the server closes is opened again (after a second),
so the pressure stays. The file descriptor limit is raised (RLIMIT_NOFILE, up to the hard
limit) for this process and the server, which inherits it.

Every --every seconds a row: seconds, the server's RSS (VmRSS), its peak RSS so far
(VmHWM: no sampling misses it) and open file descriptors (/proc/<pid>/fd), steady reviews
answered (200 and allowed, with the request's uid) and failed in the window, their p50 and
p99, the slowest /healthz of the window (asked every second; "MISSED" when one took 1 s or
more), the idle, slowloris and partial connections open, large reviews answered, and how many
connections the server closed in the window. At the end a summary line. Exit 1 when
a steady review failed or /healthz missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import ssl
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support import fuzzing  # noqa: E402
from tests.support import server_helpers as h  # noqa: E402
from webhook.server import certificates  # noqa: E402

# What the API server waits for an answer by default.
REVIEW_TIMEOUT_SECONDS = 10.0
HEALTHZ_TIMEOUT_SECONDS = 1.0
# How many connections are being opened at once (TLS handshakes) while the pools fill.
OPENING = 64
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "soak", "namespace": "team-a"},
    "spec": {
        "containers": [
            {
                "name": "cuda",
                "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
            }
        ]
    },
}
UID = "00000000-0000-0000-0000-000000000000"
# The address the abusive connections come from; the steady load comes from --steady-source
# (the API server's address is not the attackers'; the server bounds each address apart).
ABUSE_SOURCE = "127.0.0.1"
PATH = f"/mutate?{fuzzing.QUERY}"


def review_body(pod: dict[str, Any], pad: int = 0) -> bytes:
    """A CREATE review of `pod`, its uid the placeholder UID; `pad`: bytes of annotation."""
    if pad:
        pod = {**pod, "metadata": {**pod["metadata"], "annotations": {"pad": "x" * pad}}}
    doc = fuzzing.review_doc(pod, kind=("", "v1", "Pod"), operation="CREATE", uid=UID)
    return fuzzing.encode(doc)


def head(length: int, content_type: str = fuzzing.JSON) -> bytes:
    return (
        f"POST {PATH} HTTP/1.1\r\nHost: {h.HOST}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


# --------------------------------------------------------------------------- counting


@dataclass
class Window:
    """What happened since the last row."""

    ok: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    healthz_worst: float = 0.0
    healthz_missed: int = 0
    closed: dict[str, int] = field(default_factory=dict)
    large_ok: int = 0
    large_other: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)


@dataclass
class Totals:
    ok: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    healthz_missed: int = 0
    closed: dict[str, int] = field(default_factory=dict)
    large_ok: int = 0
    large_other: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    rss: list[float] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    peak: float = 0.0


def bump(counts: dict[str, int], key: str, n: int = 1) -> None:
    counts[key] = counts.get(key, 0) + n


class Soak:
    """The connections of every kind, and what they saw."""

    def __init__(self, server: h.Process, context: ssl.SSLContext, args: argparse.Namespace):
        self.server = server
        self.context = context
        self.args = args
        self.window = Window()
        self.totals = Totals()
        self.open = {"idle": 0, "slowloris": 0, "partial": 0, "large": 0}
        self.opening = asyncio.Semaphore(OPENING)
        self.steady_body = review_body(POD)
        # Just under the limit: reviewed, not refused as too large.
        pad = fuzzing.MAX_BODY_BYTES - 4096 - len(self.steady_body)
        self.large_body = review_body(POD, pad=pad)
        self.stop = asyncio.Event()

    async def connect(
        self, source: str = ABUSE_SOURCE
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        # The abusers open at most OPENING at once; the steady load does not wait for them.
        async with self.opening if source == ABUSE_SOURCE else contextlib.nullcontext():
            return await asyncio.wait_for(
                asyncio.open_connection(
                    "127.0.0.1",
                    self.server.port,
                    ssl=self.context,
                    server_hostname=h.HOST,
                    limit=1 << 20,
                    local_addr=(source, 0),
                ),
                REVIEW_TIMEOUT_SECONDS,
            )

    # -- steady load

    async def steady(self, slots: asyncio.Queue[float]) -> None:
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        while not self.stop.is_set():
            scheduled = await slots.get()
            if scheduled == float("inf"):  # the end
                break
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            uid = str(uuid.uuid4()).encode()
            body = self.steady_body.replace(UID.encode(), uid)
            try:
                if connection is None:
                    connection = await self.connect(self.args.steady_source)
                async with asyncio.timeout(REVIEW_TIMEOUT_SECONDS):
                    status, headers, answer = await exchange(*connection, head(len(body)) + body)
                if headers.get("connection", "").lower() == "close":
                    close(connection)
                    connection = None
                good = status == 200 and b'"allowed":true' in answer and uid in answer
                why = "" if good else f"{status} {answer[:80]!r}"
            except (OSError, EOFError, ssl.SSLError, TimeoutError, ValueError) as exc:
                why = f"{type(exc).__name__}"
                if connection is not None:
                    close(connection)
                connection = None
            seconds = time.perf_counter() - scheduled
            if why:
                self.window.failed += 1
                bump(self.window.failures, why)
            else:
                self.window.ok += 1
                self.window.latencies.append(seconds)
        if connection is not None:
            close(connection)

    async def schedule(self, slots: asyncio.Queue[float], until: float) -> None:
        """Put a send time on `slots` every 1/--rate s until `until`."""
        interval = 1.0 / self.args.rate
        start = time.perf_counter()
        n = 0
        while (at := start + n * interval) < until:
            await slots.put(at)
            n += 1
            ahead = at - time.perf_counter() - 0.05
            if ahead > 0:
                await asyncio.sleep(ahead)

    # -- abuse, each kind in a loop that reopens what the server closes

    async def keep(self, kind: str, one: Callable[[], Awaitable[None]]) -> None:
        while not self.stop.is_set():
            try:
                await one()
            except (OSError, EOFError, ssl.SSLError, TimeoutError, ValueError) as exc:
                bump(self.window.closed, f"{kind} {type(exc).__name__}")
            if not self.stop.is_set():
                await asyncio.sleep(1.0)

    async def until_closed(self, kind: str, reader: asyncio.StreamReader) -> bytes:
        """Read whatever the server sends until it closes. Counted as closed by the server,
        under `kind` and the status of what it answered, if anything."""
        data = b""
        with contextlib.suppress(OSError, ssl.SSLError):
            while chunk := await reader.read(65536):
                data += chunk
        status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else ""
        bump(self.window.closed, f"{kind} {status}".strip())
        return data

    async def idle(self) -> None:
        reader, writer = await self.connect()
        self.open["idle"] += 1
        try:
            await exchange(reader, writer, head(len(self.steady_body)) + self.steady_body)
            await self.wait_or_stop(self.until_closed("idle", reader))
        finally:
            self.open["idle"] -= 1
            writer.close()

    async def slowloris(self) -> None:
        reader, writer = await self.connect()
        self.open["slowloris"] += 1
        try:

            async def drip() -> None:
                data = head(1000) + b"x" * 1000
                for i in range(len(data)):
                    writer.write(data[i : i + 1])
                    await writer.drain()
                    await asyncio.sleep(self.args.drip)

            dripping = asyncio.ensure_future(drip())
            try:
                await self.wait_or_stop(self.until_closed("slowloris", reader))
            finally:
                dripping.cancel()
                with contextlib.suppress(BaseException):
                    await dripping
        finally:
            self.open["slowloris"] -= 1
            writer.close()

    async def partial(self) -> None:
        reader, writer = await self.connect()
        self.open["partial"] += 1
        try:
            writer.write(head(self.args.partial_bytes) + self.steady_body[:1024])
            await writer.drain()
            await self.wait_or_stop(self.until_closed("partial", reader))
        finally:
            self.open["partial"] -= 1
            writer.close()

    async def large(self) -> None:
        reader, writer = await self.connect()
        self.open["large"] += 1
        try:
            while not self.stop.is_set():
                body = self.large_body
                async with asyncio.timeout(REVIEW_TIMEOUT_SECONDS * 3):
                    status, headers, answer = await exchange(
                        reader, writer, head(len(body)) + body
                    )
                if status == 200 and b'"allowed":true' in answer:
                    self.window.large_ok += 1
                else:
                    bump(self.window.large_other, str(status))
                if headers.get("connection", "").lower() == "close":
                    return
        finally:
            self.open["large"] -= 1
            writer.close()

    async def wait_or_stop(self, work: Awaitable[bytes]) -> bytes:
        task = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(self.stop.wait())
        await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        return b""

    # -- watching

    async def healthz(self) -> None:
        while not self.stop.is_set():
            seconds, good = await probe_healthz(self.server.metrics_port, HEALTHZ_TIMEOUT_SECONDS)
            if not good:
                self.window.healthz_missed += 1
            self.window.healthz_worst = max(self.window.healthz_worst, seconds)
            await asyncio.sleep(max(0.0, 1.0 - seconds))


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, dict[str, str], bytes]:
    """Send `request`, read the answer (status, headers in lower case, body)."""
    writer.write(request)
    sending = asyncio.ensure_future(writer.drain())
    try:
        status_line = await reader.readline()
        if not status_line:
            raise EOFError("closed before an answer")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    finally:
        if not sending.done():
            sending.cancel()
        with contextlib.suppress(BaseException):
            await sending
    return status, headers, body


def close(connection: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    connection[1].close()


# --------------------------------------------------------------------------- the server


def status_of(pid: int) -> tuple[float, float, int]:
    """The server's RSS now and its highest RSS so far (VmHWM, which no sampling misses), in
    MB, summed over it and its worker processes (`serve --workers`: the peaks of each, an
    upper bound of theirs together); and its own open file descriptors."""
    rss = peak = 0.0
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for each in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    peak += int(line.split()[1]) / 1024
    try:
        fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    except OSError:
        fds = -1
    return rss, peak, fds


def start_directory(directory: Path) -> Path:
    """Certificates and policies for `serve` in `directory` (as tests/support/server_helpers.py
    makes them); the CA file to trust."""
    h.write_pair(directory / "certs", h.make_ca())
    h.copy_policies(directory / "policies")
    return directory / "certs" / certificates.CA_FILE


async def probe_healthz(
    port: int, timeout: float, *, source: str | None = None
) -> tuple[float, bool]:
    """One GET /healthz on a fresh connection to 127.0.0.1:`port` (from the loopback address
    `source`, as a kubelet does): the seconds it took, and whether it was a 200 in time."""
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=(source, 0) if source else None
            )
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = await reader.read()
            writer.close()
        good = answer.startswith(b"HTTP/1.1 200")
    except (OSError, TimeoutError):
        good = False
    return time.perf_counter() - started, good


def percentile(values: list[float], percent: float) -> float:
    """In milliseconds; 0 without values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * percent / 100))] * 1000


COLUMNS = (
    "s", "RSS MB", "peak MB", "fds", "ok", "failed", "p50 ms", "p99 ms", "healthz ms", "idle",
    "slowloris", "partial", "large ok", "closed by server",
)  # fmt: skip


def row(soak: Soak, elapsed: float) -> str:
    """The window as a table row; the window is added to the totals and started anew."""
    window, totals = soak.window, soak.totals
    soak.window = Window()
    rss, peak, fds = status_of(soak.server.popen.pid)
    totals.rss.append(rss)
    totals.peak = peak
    totals.fds.append(fds)
    totals.ok += window.ok
    totals.failed += window.failed
    totals.latencies += window.latencies
    totals.healthz_missed += window.healthz_missed
    totals.large_ok += window.large_ok
    for source, target in (
        (window.closed, totals.closed),
        (window.large_other, totals.large_other),
        (window.failures, totals.failures),
    ):
        for key, n in source.items():
            bump(target, key, n)
    healthz = f"{window.healthz_worst * 1000:.0f}"
    if window.healthz_missed:
        healthz = f"MISSED {window.healthz_missed}"
    closed = ", ".join(f"{k} {n}" for k, n in sorted(window.closed.items())) or "-"
    cells = [
        f"{elapsed:.0f}", f"{rss:.0f}", f"{peak:.0f}", str(fds), str(window.ok), str(window.failed),
        f"{percentile(window.latencies, 50):.1f}", f"{percentile(window.latencies, 99):.1f}",
        healthz, str(soak.open["idle"]), str(soak.open["slowloris"]), str(soak.open["partial"]),
        str(window.large_ok), closed,
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def summary(soak: Soak, seconds: float) -> str:
    t = soak.totals
    closed = ", ".join(f"{k} {n}" for k, n in sorted(t.closed.items())) or "none"
    failures = ", ".join(f"{k} {n}" for k, n in sorted(t.failures.items())) or "none"
    large_other = ", ".join(f"{k} {n}" for k, n in sorted(t.large_other.items())) or "none"
    return (
        f"{seconds:.0f} s: steady reviews {t.ok:,} ok, {t.failed:,} failed ({failures});"
        f" p50 {percentile(t.latencies, 50):.1f} ms, p99 {percentile(t.latencies, 99):.1f} ms,"
        f" max {percentile(t.latencies, 100):.0f} ms; /healthz missed {t.healthz_missed};"
        f" server RSS {t.rss[0]:.0f} -> max {max(t.rss):.0f} -> {t.rss[-1]:.0f} MB"
        f" (peak {t.peak:.0f} MB),"
        f" fds max {max(t.fds)}; large reviews {t.large_ok} allowed, other {large_other};"
        f" closed by the server: {closed}"
    )


# --------------------------------------------------------------------------- the run


def raise_fd_limit(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def soak_run(args: argparse.Namespace, server: h.Process, ca_file: Path) -> int:
    await server.ready()
    soak = Soak(server, h.client_context(ca_file), args)
    rss, _, fds = status_of(server.popen.pid)
    print(f"server ready: RSS {rss:.0f} MB, {fds} file descriptors", flush=True)
    print(
        "| " + " | ".join(COLUMNS) + " |\n|" + "---:|" * (len(COLUMNS) - 1) + "---|",
        flush=True,
    )
    started = time.perf_counter()
    until = started + args.minutes * 60
    slots: asyncio.Queue[float] = asyncio.Queue()
    tasks = [asyncio.create_task(soak.schedule(slots, until))]
    tasks += [asyncio.create_task(soak.steady(slots)) for _ in range(args.steady_connections)]
    tasks.append(asyncio.create_task(soak.healthz()))
    for kind, count in (
        ("large", args.large),
        ("slowloris", args.slowloris),
        ("partial", args.partial),
        ("idle", args.idle),
    ):
        one = getattr(soak, kind)
        tasks += [asyncio.create_task(soak.keep(kind, one)) for _ in range(count)]
    next_row = started + args.every
    last_row = started
    while (now := time.perf_counter()) < until:
        await asyncio.sleep(min(next_row, until) - now)
        if time.perf_counter() >= next_row:
            last_row = time.perf_counter()
            print(row(soak, last_row - started), flush=True)
            next_row += args.every
    seconds = time.perf_counter() - started
    if time.perf_counter() - last_row > 1.0:
        print(row(soak, seconds), flush=True)
    soak.stop.set()
    # The steady senders wait for send times: tell them there are no more.
    for _ in range(args.steady_connections):
        slots.put_nowait(float("inf"))
    _, pending = await asyncio.wait(tasks, timeout=REVIEW_TIMEOUT_SECONDS)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    print()
    print(summary(soak, seconds), flush=True)
    alive = server.popen.poll() is None
    if not alive:
        print(f"the server exited: {server.popen.returncode}", flush=True)
    failed = soak.totals.failed or soak.totals.healthz_missed or not alive
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--rate", type=float, default=200.0, help="steady reviews a second")
    parser.add_argument("--steady-connections", type=int, default=4)
    parser.add_argument(
        "--steady-source",
        default="127.0.0.2",
        help="loopback address the steady load comes from (127.0.0.1: the abusers' own)",
    )
    parser.add_argument("--idle", type=int, default=2000, help="idle keep-alive connections")
    parser.add_argument("--slowloris", type=int, default=100, help="connections dripping a head")
    parser.add_argument("--drip", type=float, default=5.0, help="seconds between their bytes")
    parser.add_argument("--partial", type=int, default=100, help="connections with short bodies")
    parser.add_argument("--partial-bytes", type=int, default=1024 * 1024,
                        help="body length they announce (they send 1 KiB)")  # fmt: skip
    parser.add_argument("--large", type=int, default=3, help="concurrent 7 MiB reviews")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between rows")
    parser.add_argument(
        "--server-arg", action="append", default=[], metavar="ARG",
        help="one more argument for `serve`, as it is (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--server-env", action="append", default=[], metavar="K=V",
        help="a variable for the server's environment only (repeatable)",
    )  # fmt: skip
    args = parser.parse_args()
    server_env = {}
    for item in args.server_env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--server-env wants K=V, not {item!r}")
        server_env[key] = value
    wanted = args.idle + args.slowloris + args.partial + args.large + args.steady_connections
    limit = raise_fd_limit(2 * wanted + 1024)
    command = "python bench/soak.py " + " ".join(sys.argv[1:])
    print(f"`{command}`: file descriptor limit {limit}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu-share-webhook-soak-") as name:
        directory = Path(name)
        ca_file = start_directory(directory)
        with h.serving(
            directory, "--drain-seconds=0", *args.server_arg, env=server_env
        ) as server:
            return asyncio.run(soak_run(args, server, ca_file))


if __name__ == "__main__":
    sys.exit(main())
