"""CPU instructions per admission request, counted by valgrind's callgrind: a measure of the
server's own work that the machine's noise barely moves.

    python bench/instructions.py [--requests 2000] [--connections 8] [--containers 1]
                                 [--serve-python PYTHON ...] [--no-bare]

On a shared machine req/s drifts by a third within minutes (bench/server.py measures ratios
in rounds for that reason). Instructions hardly do: runs of the same binary and inputs agree
within about half a percent whatever else the machine does. Each server process runs under
`valgrind --tool=callgrind` with counting off; once it answers, a warm-up of
--requests/4 reviews is sent, counting is turned on (`callgrind_control -i on`), exactly
--requests reviews are sent over --connections keep-alive TLS connections (tests/
server_helpers.py's, each request in one write as the API server sends it; each answer
checked), and counting is turned off. Rows: bench/server.py's bare aiohttp server (canned
answer, same TLS and loop), the same parsing each body with orjson, and `gpu-share-webhook
serve` (review log on, to a file) for each --serve-python interpreter, all on uvloop.

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
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import server as bench  # noqa: E402  bench/server.py: bodies, servers, process helpers
from server import Body  # noqa: E402

from tests import server_helpers as h  # noqa: E402  the TLS connection the tests speak over


def log_says(pattern: str) -> Callable[[subprocess.Popen[bytes], Path], object]:
    """Waits until a server's log has `pattern` (start-up under valgrind is slow)."""
    return lambda process, log: bench.wait_log(pattern, [process], log, seconds=600)


async def exchange(
    port: int, body: Body, ca_file: Path, args: argparse.Namespace, between: Callable[[], None]
) -> None:
    """Open --connections keep-alive TLS connections, send a warm-up of --requests/4 reviews,
    call `between`, then send --requests reviews and call it again. Every answer must be
    `body.expected`. The handshakes happen before the first call: they are not counted."""
    async with contextlib.AsyncExitStack() as stack:
        connections = [
            await stack.enter_async_context(h.connect(port, ca_file))
            for _ in range(args.connections)
        ]

        async def one(connection: h.Connection, count: int) -> None:
            for _ in range(count):
                status, _, answer = await connection.post("/mutate", body.data)
                if status != 200:
                    raise SystemExit(f"answered {status}: {answer[:300]!r}")
                if answer != body.expected:
                    bench.check_answer("the server", answer, body.expected)

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
    body: Body,
    args: argparse.Namespace,
) -> float:
    """Instructions per request of the server `command` runs, once `ready` returns."""
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

        asyncio.run(exchange(port, body, ws.ca_file, args, switch))
        seconds = times[1] - times[0]
        process.send_signal(signal.SIGTERM)
        process.wait(120)
    total = counted(out_file)
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
    parser.add_argument("--serve-python", action="append", help="measure this one's serve")
    parser.add_argument("--no-bare", action="store_true", help="only the serve rows")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"bench/instructions.py needs {tool}: apt-get install -y valgrind")
            return 2
    rows: list[tuple[str, float]] = []
    with bench.workspace("gpu-share-webhook-instructions-", (args.containers,)) as ws:
        body = ws.bodies[args.containers]
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
                value = measure(name, command, ready=ready, port=port, ws=ws, body=body, args=args)
                rows.append((name, value))
        for python in args.serve_python or [sys.executable]:
            build = bench.build_of(python)[0]
            port, metrics_port = bench.free_port(), bench.free_port()
            command = bench.serve_command(
                port, metrics_port, ws.cert_dir, event_loop="uvloop", python=python
            )
            name = f"{bench.SERVE}, {build}"
            ready = log_says('"event_loop"')
            value = measure(name, command, ready=ready, port=port, ws=ws, body=body, args=args)
            rows.append((name, value))
    base = rows[0][1]
    print(
        f"Instructions per POST /mutate (callgrind, uvloop, TLS keep-alive,"
        f" {args.connections} connections, {args.requests} requests after a warm-up),"
        f" {bench.containers_label(args.containers)} review, {time.strftime('%Y-%m-%d')}"
    )
    print()
    print(f"| server | instructions/request | vs {rows[0][0]} |")
    print("|---|---:|---:|")
    for name, value in rows:
        print(f"| {name} | {value:,.0f} | {value / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
