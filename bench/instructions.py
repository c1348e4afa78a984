"""CPU instructions per admission request, counted by valgrind's callgrind: a measure of the
server's own work that the machine's noise barely moves.

    python bench/instructions.py [--requests 2000] [--connections 8] [--containers 1]
                                 [--stream mixed|replicas] [--pods 5000]
                                 [--serve-python PYTHON ...]
                                 [--no-bare] [--breakdown] [--keep DIR]

On a shared machine req/s drifts by a third within minutes (bench/server.py measures ratios
in rounds for that reason). Instructions hardly do: runs of the same binary and inputs agree
within about half a percent whatever else the machine does. Each server process runs under
`valgrind --tool=callgrind` with counting off; once it answers, a warm-up of
--requests/4 reviews is sent, counting is turned on (`callgrind_control -i on`), exactly
--requests reviews are sent over --connections keep-alive TLS connections (tests/
server_helpers.py's, each request in one write as the API server sends it; each answer
checked), and counting is turned off. Rows: bench/server.py's bare aiohttp server (canned
answer, same TLS and loop), the same parsing each body with orjson, and `gpu-share-webhook
serve` (review log on, to a file) for each --serve-python interpreter, all on uvloop; with
--breakdown,
before each serve row, the same server answering a canned review without looking at the
body (bench/server_breakdown.py's stand-in), without and with its review line: the server's
own machinery per request is that row less bare aiohttp's, the review line the next less it,
the review the serve row less that. The reviews are bench/core.py's pod with
--containers containers, over and over, or with --stream one of bench/server.py's streams
in turn from its first review (mixed: --pods distinct pods, so that with more pods than
requests no review is seen twice; replicas: the pods of ten Deployments), each answer
checked against our core's answer to it in process.

Counted: every user-space instruction of the server process (Python, aiohttp, uvloop,
OpenSSL, orjson) between the two switches, divided by --requests. Not counted: the kernel
(the same system calls for every row but the review log's writes, one per ~20 lines) and
time lost to cache misses, so instructions are a proxy for time, not a replacement: read
the rows as "how much work", and bench/server.py as "how fast on this machine today".
Needs valgrind (Debian: apt-get install -y valgrind). Takes about a minute a row.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import server as bench  # noqa: E402  bench/server.py: bodies, servers, process helpers
from server import Body  # noqa: E402

from tests.support import server_helpers as h  # noqa: E402  the TLS connection the tests speak over
from webhook.policy import policies  # noqa: E402
from webhook.server import codec  # noqa: E402


def log_says(pattern: str) -> Callable[[subprocess.Popen[bytes], Path], object]:
    """Waits until a server's log has `pattern` (start-up under valgrind is slow)."""
    return lambda process, log: bench.wait_log(pattern, [process], log, seconds=600)


async def exchange(
    port: int,
    sent: Iterator[tuple[bytes, bytes]],
    ca_file: Path,
    args: argparse.Namespace,
    between: Callable[[], None],
) -> None:
    """Open --connections keep-alive TLS connections, send a warm-up of --requests/4 reviews,
    call `between`, then send --requests reviews and call it again: each review the next of
    `sent`, whose answer must be the one that comes with it. The handshakes happen before
    the first call: they are not counted."""
    async with contextlib.AsyncExitStack() as stack:
        connections = [
            await stack.enter_async_context(h.connect(port, ca_file))
            for _ in range(args.connections)
        ]

        async def one(connection: h.Connection, count: int) -> None:
            for _ in range(count):
                data, expected = next(sent)
                status, _, answer = await connection.post("/mutate", data)
                if status != 200:
                    raise SystemExit(f"answered {status}: {answer[:300]!r}")
                if answer != expected:
                    bench.check_answer("the server", answer, expected)

        async def spread(total: int) -> None:
            share, extra = divmod(total, len(connections))
            await asyncio.gather(
                *(one(c, share + (i < extra)) for i, c in enumerate(connections))
            )

        await spread(max(args.connections, args.requests // 4))
        between()
        await spread(args.requests)
        between()


def callgrind(pid: int, switch: str) -> None:
    subprocess.run(["callgrind_control", "-i", switch, str(pid)], check=True, capture_output=True)


def counted(out_file: Path) -> int:
    """The instructions (Ir) a callgrind output file totals."""
    text = out_file.read_text(errors="replace")
    # "summary:" is what was counted before the last zeroing; "totals:" is what counts here.
    match = re.search(r"^totals:\s+(\d+)", text, re.MULTILINE)
    if match is None:
        raise SystemExit(f"no totals in {out_file}")
    return int(match.group(1))


def measure(
    label: str,
    command: list[str],
    *,
    ready: Callable[[subprocess.Popen[bytes], Path], object],
    port: int,
    ws: bench.Workspace,
    sent: Iterator[tuple[bytes, bytes]],
    args: argparse.Namespace,
) -> float:
    """Instructions per request of the server `command` runs, once `ready` returns, sent
    the reviews of `sent` (each with the answer it must get)."""
    out_file = ws.directory / f"callgrind-{label.replace(' ', '-')}.out"
    log = ws.directory / f"callgrind-{label.replace(' ', '-')}.log"
    log.unlink(missing_ok=True)
    grind = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out_file}",
        *command,
    ]
    with bench.running(grind, log, ws.env) as process:
        ready(process, log)
        switches = iter(("on", "off"))
        times = []

        def switch() -> None:
            callgrind(process.pid, next(switches))
            times.append(time.monotonic())

        asyncio.run(exchange(port, sent, ws.ca_file, args, switch))
        seconds = times[1] - times[0]
        process.send_signal(signal.SIGTERM)
        process.wait(120)
    total = counted(out_file)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(out_file, args.keep / re.sub(r"\W+", "-", label).strip("-"))
    print(
        f"  {label}: {total / args.requests:,.0f} instructions/request"
        f" ({args.requests} in {seconds:.0f} s under valgrind)",
        file=sys.stderr,
    )
    return float(total / args.requests)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--containers", type=int, default=1, help="in the review's pod")
    parser.add_argument("--stream", choices=("mixed", "replicas"), help="instead of one body")
    parser.add_argument("--pods", type=int, default=5000, help="reviews of the stream")
    parser.add_argument("--serve-python", action="append", help="measure this one's serve")
    parser.add_argument("--no-bare", action="store_true", help="only the serve rows")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="and serve answering a canned review, without and with its review line"
        " (bench/server_breakdown.py's stand-ins, run by each --serve-python)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep callgrind's output files there, one a row (for callgrind_annotate)",
    )
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"bench/instructions.py needs {tool}: apt-get install -y valgrind")
            return 2
    rows: list[tuple[str, float]] = []
    replayed = () if args.stream else (args.containers,)
    streams = (args.stream,) if args.stream else ()
    with bench.workspace(
        "gpu-share-webhook-instructions-", replayed, streams, pods=args.pods
    ) as ws:
        body = ws.streams[args.stream] if args.stream else ws.bodies[args.containers]
        pairs = answered(body)
        response_file = ws.directory / "response.json"
        response_file.write_bytes(body.expected)
        if not args.no_bare:
            for name, parse in ((bench.BARE, False), (bench.BARE_PARSE, True)):
                port = bench.free_port()
                command = [
                    sys.executable,
                    str(REPO / "bench" / "server.py"),
                    f"--bare-port={port}",
                    f"--bare-cert-dir={ws.cert_dir}",
                    f"--bare-response={response_file}",
                    "--bare-loop=uvloop",
                    *(["--bare-parse"] if parse else []),
                ]
                ready = log_says("listening on")
                canned = itertools.cycle([(data, body.expected) for data, _ in pairs])
                value = measure(
                    name, command, ready=ready, port=port, ws=ws, sent=canned, args=args
                )
                rows.append((name, value))
        for python in map(bench.absolute, args.serve_python or [sys.executable]):
            build = bench.build_of(python)[0]
            for variant in ("canned", "logged") if args.breakdown else ():
                port, metrics_port = bench.free_port(), bench.free_port()
                command = [
                    python,
                    str(REPO / "bench" / "server_breakdown.py"),
                    f"--variant={variant}",
                    "--loop=uvloop",
                    f"--port={port}",
                    f"--metrics-port={metrics_port}",
                    f"--cert-dir={ws.cert_dir}",
                    f"--body={body.file}",
                ]
                words = "canned review" + (", review log" if variant == "logged" else "")
                name = f"{bench.SERVE}, {build}, {words}"
                canned = itertools.cycle([(data, body.expected) for data, _ in pairs])
                ready = log_says('"event_loop"')
                value = measure(
                    name, command, ready=ready, port=port, ws=ws, sent=canned, args=args
                )
                rows.append((name, value))
            port, metrics_port = bench.free_port(), bench.free_port()
            command = bench.serve_command(
                port, metrics_port, ws.cert_dir, event_loop="uvloop", python=python
            )
            name = f"{bench.SERVE}, {build}"
            ready = log_says('"event_loop"')
            sent = itertools.cycle(pairs)
            value = measure(name, command, ready=ready, port=port, ws=ws, sent=sent, args=args)
            rows.append((name, value))
    base = rows[0][1]
    print(
        f"Instructions per POST /mutate (callgrind, uvloop, TLS keep-alive,"
        f" {args.connections} connections, {args.requests} requests after a warm-up),"
        f" {body.label}, {time.strftime('%Y-%m-%d')}"
    )
    print()
    print(f"| server | instructions/request | vs {rows[0][0]} |")
    print("|---|---:|---:|")
    for name, value in rows:
        print(f"| {name} | {value:,.0f} | {value / base:.2f} |")
    return 0


def answered(body: Body) -> list[tuple[bytes, bytes]]:
    """The reviews to send, each with our core's answer to it in process: the body, or every
    review of a stream."""
    if not body.samples:
        return [(body.data, body.expected)]
    loaded = policies.load_directory(REPO / "policies")
    return [
        (data, codec.review(data, policies=loaded, policy_name="default", endpoint="mutate").body)
        for data in body.file.read_bytes().splitlines()
    ]


if __name__ == "__main__":
    sys.exit(main())
