"""Throughput and latency of `POST /mutate` against a bare aiohttp TLS server.

    python bench/server.py [--seconds 20] [--connections 32] [--workers 1 2]

In one run, for each worker count: a bare aiohttp server that reads the body and returns a
canned AdmissionReview of the same size as the webhook's answer, then `gpu-share-webhook
serve` itself (JSON review log on, to a file, as in a pod), both over TLS with keep-alive,
driven by wrk (one thread, --connections connections) for --seconds each after a short
warm-up; and a third server, the bare one that also parses each review with orjson: the
floor for any Python webhook, which must read the request to answer it. Prints reviews/s,
p50 and p99 for each and its share of the bare server's throughput. The difference is what
the webhook costs on top of HTTP and TLS: the review itself, metrics and the log line.

Needs wrk (C, so the load generator is not the bottleneck a Python client would be on a
small machine): `apt-get install -y wrk` on Debian/Ubuntu, `brew install wrk` on macOS.
Numbers are only comparable within one run: wrk and the servers share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from webhook import certificates

REPO = Path(__file__).resolve().parent.parent
SERVICE = "gpu-share-webhook"
NAMESPACE = "gpu-share-system"
HOST = f"{SERVICE}.{NAMESPACE}.svc"
PATH = "/mutate?timeout=10s"
BARE = "bare aiohttp"
BARE_PARSE = "bare + JSON parse"

# The first pod of a real manifest (shared/real-world/13-pre6g-test-gpu-shared-4pods.yaml),
# as the API server sends it: defaulted fields are left out, which makes no difference here.
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "gpu-shared-test-1", "namespace": "team-a"},
    "spec": {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": "icclz1"},
        "containers": [
            {
                "name": "cuda",
                "image": "nvidia/cuda:12.2.0-base-ubuntu22.04",
                "command": ["bash", "-lc", "nvidia-smi && sleep 300"],
                "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
            }
        ],
    },
}

LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local file = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.body = file:read("*a")
file:close()
"""


def review_body(pod: dict[str, Any]) -> bytes:
    resource = {"group": "", "version": "v1", "resource": "pods"}
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    request = {
        "uid": str(uuid.uuid4()),
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": pod["metadata"]["name"],
        "namespace": pod["metadata"].get("namespace", "team-a"),
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": pod,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(review).encode()


@dataclass
class Result:
    name: str
    workers: int
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors: int


# --------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(count: int, processes: list[subprocess.Popen[bytes]], log: Path) -> None:
    """Until `count` bare servers said they listen (on one port, so connecting tells not)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                raise SystemExit(f"server exited with {process.returncode}:\n{log.read_text()}")
        if log.read_text().count("listening") >= count:
            return
        time.sleep(0.1)
    raise SystemExit(f"bare servers not listening after 60 s:\n{log.read_text()}")


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


def post(port: int, body: bytes, ca_file: Path) -> bytes:
    """One review over TLS, checked as the API server would (CA and name)."""
    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), 5) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        head = (
            f"POST {PATH} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        tls.sendall(head.encode() + body)
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    header, _, answer = data.partition(b"\r\n\r\n")
    status = header.split(b" ", 2)[1]
    if status != b"200":
        raise SystemExit(f"review answered {status.decode()}: {answer[:300]!r}")
    return answer


def check_answer(answer: bytes, body: bytes) -> None:
    review = json.loads(answer)
    response = review["response"]
    if response["uid"] != json.loads(body)["request"]["uid"] or not response.get("patch"):
        raise SystemExit(f"unexpected answer: {answer[:300]!r}")


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
    return Result("", 0, float(rate.group(1)), latency("50"), latency("99"), errors)


# --------------------------------------------------------------------------- the bare server


def bare_server(port: int, cert_dir: Path, response_file: Path, *, parse: bool) -> None:
    """An aiohttp TLS server with the same TLS settings answering every POST with one body;
    with `parse`, it also parses the review with orjson (and does nothing with it): the
    least any Python webhook does, since it has to read the request's uid and object."""
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
        print("listening", flush=True)  # what `wait_listening` waits for
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await runner.cleanup()

    asyncio.run(main())


# --------------------------------------------------------------------------- the run


def measure(
    name: str,
    workers: int,
    port: int,
    *,
    args: argparse.Namespace,
    body_file: Path,
    script: Path,
) -> Result:
    if args.warmup > 0:
        wrk(port, args.warmup, args.connections, body_file, script)
    result = wrk(port, args.seconds, args.connections, body_file, script)
    result.name, result.workers = name, workers
    print(
        f"  {name} ({workers} worker{'s' if workers > 1 else ''}):"
        f" {result.requests_per_second:,.0f}/s",
        file=sys.stderr,
    )
    return result


@dataclass
class Workspace:
    """What every measurement needs: certificates, the review body, wrk's script."""

    directory: Path
    cert_dir: Path
    ca_file: Path
    body: bytes
    body_file: Path
    script: Path
    # The servers' environment, without settings of the caller's own.
    env: dict[str, str]


@contextlib.contextmanager
def workspace(prefix: str) -> Iterator[Workspace]:
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        cert_dir = directory / "certs"
        certificates.write_bundle(
            cert_dir, certificates.make_bundle(service=SERVICE, namespace=NAMESPACE)
        )
        body = review_body(POD)
        body_file = directory / "review.json"
        body_file.write_bytes(body)
        script = directory / "post.lua"
        script.write_text(LUA)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_SHARE_WEBHOOK_")}
        yield Workspace(
            directory, cert_dir, cert_dir / certificates.CA_FILE, body, body_file, script, env
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def serve_command(port: int, metrics_port: int, cert_dir: Path, *, workers: int = 1) -> list[str]:
    """`gpu-share-webhook serve` as measured: loopback, review log on, no drain."""
    return [
        sys.executable,
        "-m",
        "webhook",
        "serve",
        "--host=127.0.0.1",
        f"--port={port}",
        f"--metrics-port={metrics_port}",
        f"--cert-dir={cert_dir}",
        f"--policies={REPO / 'policies'}",
        f"--workers={workers}",
        "--drain-seconds=0",
        "--log-level=info",
    ]


def measure_bare(
    name: str,
    ws: Workspace,
    answer: bytes,
    *,
    workers: int,
    parse: bool,
    args: argparse.Namespace,
) -> Result:
    """The bare server (`workers` processes on one port) answering with `answer`."""
    response_file = ws.directory / "response.json"
    response_file.write_bytes(answer)
    port = free_port()
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        f"--bare-port={port}",
        f"--bare-cert-dir={ws.cert_dir}",
        f"--bare-response={response_file}",
        *(["--bare-parse"] if parse else []),
    ]
    log = ws.directory / f"bare-{workers}-{int(parse)}.log"
    with contextlib.ExitStack() as stack:
        processes = [stack.enter_context(running(command, log, ws.env)) for _ in range(workers)]
        wait_listening(workers, processes, log)
        if len(post(port, ws.body, ws.ca_file)) != len(answer):
            raise SystemExit("the bare server's answer differs in size")
        return measure(name, workers, port, args=args, body_file=ws.body_file, script=ws.script)


def run(args: argparse.Namespace) -> list[Result]:
    results: list[Result] = []
    with workspace("gpu-share-webhook-bench-") as ws:
        for workers in args.workers:
            port, metrics_port = free_port(), free_port()
            serve = serve_command(port, metrics_port, ws.cert_dir, workers=workers)
            log = ws.directory / f"serve-{workers}.log"
            with running(serve, log, ws.env) as process:
                wait_ready(metrics_port, process, log)
                answer = post(port, ws.body, ws.ca_file)
                check_answer(answer, ws.body)
                webhook = measure(
                    "gpu-share-webhook",
                    workers,
                    port,
                    args=args,
                    body_file=ws.body_file,
                    script=ws.script,
                )
                check_answer(post(port, ws.body, ws.ca_file), ws.body)
            results += [
                measure_bare(BARE, ws, answer, workers=workers, parse=False, args=args),
                measure_bare(BARE_PARSE, ws, answer, workers=workers, parse=True, args=args),
                webhook,
            ]
    return results


def table(results: list[Result], args: argparse.Namespace) -> str:
    lines = [
        f"POST {PATH}, TLS, keep-alive, wrk -t1 -c{args.connections}, {args.seconds:g} s each,"
        f" {os.cpu_count()} CPUs",
        "",
        f"{'server':<20} {'workers':>7} {'reviews/s':>10} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'errors':>7} {'vs bare':>8}",
    ]
    bare = {r.workers: r for r in results if r.name == BARE}
    for r in results:
        ratio = r.requests_per_second / bare[r.workers].requests_per_second
        lines.append(
            f"{r.name:<20} {r.workers:>7} {r.requests_per_second:>10,.0f} {r.p50_ms:>8.2f}"
            f" {r.p99_ms:>8.2f} {r.errors:>7} {ratio:>8.2f}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="per measurement")
    parser.add_argument("--warmup", type=float, default=2.0, help="before each measurement")
    parser.add_argument("--connections", type=int, default=32, help="concurrent connections")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="worker counts to compare"
    )
    # The bare server runs as a process of its own, started by this script.
    parser.add_argument("--bare-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bare-cert-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--bare-response", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--bare-parse", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_port:
        bare_server(args.bare_port, args.bare_cert_dir, args.bare_response, parse=args.bare_parse)
        return 0
    if shutil.which("wrk") is None:
        print(
            "bench/server.py needs wrk: apt-get install -y wrk (Debian/Ubuntu),"
            " brew install wrk (macOS)",
            file=sys.stderr,
        )
        return 2
    print(table(run(args), args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
