"""What the largest hostile reviews cost a real `serve` in memory: one fresh server per shape.

    python bench/hostile_memory.py [--senders 3] [--shape NAME ...]

Each shape is one review of up to 7 MiB (the body limit), built to cost as much memory as its
kind of content can: many small items where the webhook decodes them, as many as a review
reads (`codec.MAX_VALUES`; `view.MAX_GENERIC_VALUES` where the object or the body is read
generically). For each, `python -m webhook serve`
starts in a directory of its own with the allocator setting of the image (GLIBC_TUNABLES, as
the Dockerfile sets it); --senders connections from as many loopback addresses send the same
body at once (the bytes in flight let two 7 MiB reviews in, one per review thread; a third
waits). A row: the body's bytes and JSON values, the answers (HTTP status, allowed or the
rule that refused, the reason of a 400), the slowest answer, the slowest `/healthz` asked
every 0.2 s meanwhile, and the server's peak resident memory (VmHWM) against the
Deployment's 384 MiB limit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import ssl
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import soak  # noqa: E402

from tests.support import server_helpers as h  # noqa: E402
from webhook.engine import view  # noqa: E402
from webhook.server import codec  # noqa: E402

# (Read where they are defined; the same figures for a checkout from before they were.)
MAX_VALUES = getattr(codec, "MAX_VALUES", 1_000_000)
GENERIC = getattr(view, "MAX_GENERIC_VALUES", 250_000)

BODY = 7 * 1024 * 1024 - 4096
LIMIT_MIB = 384
IMAGE_ALLOCATOR = "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=262144"
_NOT_COUNTED = bytes(c for c in range(256) if c not in b",:{[")
GPU = b'{"name":"c%d","image":"i","resources":{"limits":{"nvidia.com/gpu.shared":"1"}}}'
TERM = b'{"matchExpressions":[{"key":"k%d","operator":"In","values":["a"]}]}'
JOB = (b'{"name":"j%d","template":{"spec":{"template":{"spec":{"containers":[{"name":"c",'
       b'"resources":{"limits":{"nvidia.com/gpu.shared":"2"}}}]}}}}}')


def values(body: bytes) -> int:
    return len(body.translate(None, _NOT_COUNTED))


def review(obj: dict[str, object], group: str = "", version: str = "v1") -> dict[str, object]:
    kind = {"group": group, "version": version, "kind": obj["kind"]}
    resource = {"group": group, "version": version, "resource": str(obj["kind"]).lower() + "s"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "UID", "kind": kind, "resource": resource, "requestKind": kind,
        "requestResource": resource, "name": "big", "namespace": "team-a", "operation": "CREATE",
        "userInfo": {"username": "alice"}, "object": obj, "oldObject": None, "dryRun": False}}


def pod(**spec: object) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "big", "namespace": "team-a", "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "main", "image": "i", "resources": {
                "limits": {"nvidia.com/gpu.shared": "1"}}}], **spec}}


def filled(doc: dict[str, object], item: Callable[[int], bytes], brackets: bytes = b"[]",
           *, cap: int | None = MAX_VALUES) -> bytes:
    """`doc` with its one "FILL" string replaced by as many `item`s as fit in BODY bytes (and
    in `cap` values, if one is given)."""
    head, tail = json.dumps(doc, separators=(",", ":")).encode().split(b'"FILL"')
    n = BODY // len(item(0))
    while True:
        body = head + brackets[:1] + b",".join(item(i) for i in range(n)) + brackets[1:] + tail
        if len(body) <= BODY and (cap is None or values(body) <= cap):
            return body
        n = int(n * 0.98)


# name -> (endpoint, what it is, the body with "UID" for its uid)
SHAPES: dict[str, tuple[str, str, Callable[[], bytes]]] = {
    "gpu-containers": ("mutate", "a Pod of GPU containers (each gets its patch)", lambda: filled(
        review(pod(containers="FILL")), lambda i: GPU % i)),
    "terms": ("mutate", "a Pod of required node selector terms (each pinned per class group)",
              lambda: filled(review(pod(affinity={"nodeAffinity": {
                  "requiredDuringSchedulingIgnoredDuringExecution": {
                      "nodeSelectorTerms": "FILL"}}})), lambda i: TERM % i)),
    "templates": ("validate", "a JobSet of pod templates (each reviewed)", lambda: filled(
        review({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": "big"}, "spec": {"replicatedJobs": "FILL"}},
               "jobset.x-k8s.io", "v1alpha2"), lambda i: JOB % i, cap=GENERIC)),
    "empty-containers": ("mutate", "a Pod of empty containers (a typed struct each)",
                         lambda: filled(review(pod(containers="FILL")), lambda i: b"{}")),
    "node-selector": ("mutate", "a nodeSelector of many labels (typed strings)", lambda: filled(
        review(pod(nodeSelector="FILL")), lambda i: b'"k%d":"v"' % i, b"{}")),
    "tolerations": ("mutate", "tolerations (each read by the rules)", lambda: filled(
        review(pod(tolerations="FILL")), lambda i: b"{}")),
    "any-json-field": ("mutate", "labels that are objects (a field any JSON may fill)",
                       lambda: filled(review(pod() | {"metadata": {"name": "big", "labels": {
                           "a": "FILL"}}}), lambda i: b'{"k%d":1}' % i)),
    "malformed-object": ("mutate", "a malformed Pod and a field no rule reads (read generically)",
                         lambda: filled(review(pod(x="FILL") | {"metadata": {
                             "name": "big", "annotations": {"a": 1}}}),
                             lambda i: b'{"k%d":1}' % i, cap=GENERIC)),
    "malformed-envelope": ("mutate", "a uid that is no string (the envelope read generically)",
                           lambda: filled(review(pod()) | {"x": "FILL"}, lambda i: b"[[]]",
                                          cap=GENERIC)
                           .replace(b'"uid":"UID"', b'"uid":7')),
    "long-name": ("mutate", "a 5 MB container name and 25 variables each refused (each names it)",
                  lambda: json.dumps(review(pod(containers=[{
                      "name": "a" * (5 << 20) + "\U0001f600", "image": "i",
                      "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": f"all{i}"}
                              for i in range(25)]}])), separators=(",", ":")).encode()),
    "past-the-values": ("mutate", "empty lists in a field no rule reads, past the values bound",
                        lambda: filled(review(pod(x="FILL")), lambda i: b"[[]]", cap=None)),
}


def peak_mib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) // 1024  # type: ignore[union-attr]


async def send(port: int, ca: Path, source: str, path: str, body: bytes) -> tuple[str, float]:
    context = ssl.create_default_context(cafile=str(ca))
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname=h.HOST, local_addr=(source, 0))
    writer.write(f"POST /{path}?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    answer = await reader.read()
    writer.close()
    seconds = time.perf_counter() - started
    head, _, text = answer.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1].decode() if head else "none"
    if status != "200":
        return f"{status} {text.decode(errors='replace').strip()[:60]}", seconds
    response = json.loads(text)["response"]
    if response["allowed"]:
        return "200 allowed", seconds
    return f"200 {re.findall(r'rule ([a-z-]+)', response['status']['message'])[-1]}", seconds


async def run(name: str, senders: int) -> list[str]:
    endpoint, what, make = SHAPES[name]
    body = make()
    with tempfile.TemporaryDirectory(prefix="hostile-memory-") as tmp:
        ca = soak.start_directory(Path(tmp))
        server = h.Process(Path(tmp), "--drain-seconds=0", env={"GLIBC_TUNABLES": IMAGE_ALLOCATOR})
        try:
            await server.ready()
            start_mib = peak_mib(server.popen.pid)
            probes: list[float] = []
            done = asyncio.Event()

            async def probe() -> None:
                while not done.is_set():
                    seconds, good = await soak.probe_healthz(server.metrics_port, 5.0)
                    probes.append(seconds if good else float("inf"))
                    await asyncio.sleep(0.2)

            prober = asyncio.create_task(probe())
            answers = await asyncio.gather(*(
                send(server.port, ca, f"127.0.0.{101 + i}", endpoint,
                     body.replace(b'"UID"', f'"{uuid.uuid4()}"'.encode(), 1))
                for i in range(senders)))
            await asyncio.sleep(1.0)
            done.set()
            await prober
            peak = peak_mib(server.popen.pid)
        finally:
            server.stop()
    outcomes = sorted({a for a, _ in answers})
    return [name, what, f"{len(body) / 2**20:.1f}", f"{values(body):,}", "; ".join(outcomes),
            f"{max(s for _, s in answers):.2f}", f"{max(probes):.3f}", f"{start_mib}",
            f"{peak}", "yes" if peak < LIMIT_MIB else "**NO**"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--senders", type=int, default=3)
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES))
    args = parser.parse_args()
    print("| shape | what | MiB | JSON values | answers | slowest s | slowest /healthz s"
          f" | MiB at start | peak MiB | under {LIMIT_MIB} |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---|")
    for name in args.shape or SHAPES:
        print("| " + " | ".join(asyncio.run(run(name, args.senders))) + " |", flush=True)


if __name__ == "__main__":
    main()
