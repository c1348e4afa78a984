"""Seconds and peak memory of `gpu-share-webhook audit` over generated cluster dumps.

    python bench/audit.py [--sizes 1000 10000] [--yaml]

For each size, writes a dump as `kubectl get pods,deployments,statefulsets,daemonsets,jobs,
cronjobs,replicasets,jobsets -A -o json` and `kubectl get namespaces -o json` print it (one
`kind: List`; pods as the API server returns them: defaulted, scheduled, with status) for a
cluster of twelve namespaces: seven opted in under the default policy, one under
`not-renamed`, one whose policy label names no policy, one not opted in, and kube-system and
the webhook's own namespace (both labelled as opted in, neither reviewed). In each:
Deployments (each with its current ReplicaSet and an old one of 0 replicas), a StatefulSet, a
DaemonSet, a CronJob with its Jobs, a JobSet with its Jobs, and bare pods; shared-GPU and CPU
pods, some that would be refused. Replica counts scale with the size; bare pods make up the
rest.

Then, per dump:
- `command s` and `peak RSS`: `python -m webhook audit -f DUMP` as a user runs it (a fresh
  process: interpreter start, imports, reading, judging, printing), wall-clock seconds and
  the peak resident memory of that process (getrusage of the child);
- `read s` and `judge s`: the two parts apart, in another process: reading the file into
  objects, and `auditing.audit` over them.

Target: 10,000 pods in a few seconds. Compare rows of one run: the machines are shared.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
# The installed package when there is one, else this checkout.
sys.path.append(str(REPO))
sys.path.append(str(REPO / "bench"))

from core import container  # noqa: E402  bench/core.py: a defaulted container

from webhook import auditing, kinds, policies  # noqa: E402
from webhook.commands import audit as command  # noqa: E402

POLICIES = REPO / "policies"
OPTED_IN = {"gpu-share.io/enabled": "true"}
# (namespace, labels, the GPU resource its pods ask for)
NAMESPACES: list[tuple[str, dict[str, str], str]] = [
    *((f"team-{i:02d}", OPTED_IN, "nvidia.com/gpu.shared") for i in range(7)),
    ("ml-legacy", {**OPTED_IN, "gpu-share.io/policy": "not-renamed"}, "nvidia.com/gpu"),
    ("ml-typo", {**OPTED_IN, "gpu-share.io/policy": "large"}, "nvidia.com/gpu.shared"),
    ("batch", {}, "nvidia.com/gpu"),
    ("kube-system", OPTED_IN, "nvidia.com/gpu"),
    ("gpu-share-system", OPTED_IN, "nvidia.com/gpu"),
]
_YAML_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def pod_spec(*containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": list(containers),
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "securityContext": {},
        "tolerations": [
            {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
        ],
        "volumes": [
            {
                "name": "kube-api-access",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            }
        ],
    }
    spec.update(extra)
    return spec


def apps(resource_name: str) -> list[tuple[str, str, int, dict[str, Any]]]:
    """(kind, name, pods, pod spec) of one namespace at scale 1: most change, some are
    refused (two replicas of a shared GPU, NVIDIA_VISIBLE_DEVICES=all, privileged)."""
    batch = {"restartPolicy": "Never"}
    return [
        (
            "Deployment",
            "inference",
            120,
            pod_spec(container("server", gpu=resource_name), container("log")),
        ),
        ("Deployment", "web", 150, pod_spec(container("web"))),
        ("Deployment", "trainer", 12, pod_spec(container("train", gpu=resource_name, count=2))),
        (
            "Deployment",
            "leaky",
            8,
            pod_spec(container("tool", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
        ),
        ("StatefulSet", "db", 3, pod_spec(container("db"))),
        ("DaemonSet", "node-agent", 40, pod_spec(container("agent"))),
        ("CronJob", "nightly", 2, pod_spec(container("batch", gpu=resource_name), **batch)),
        ("JobSet", "sweep", 4, pod_spec(container("worker", gpu=resource_name), **batch)),
        (
            "Pod",
            "debug",
            1,
            pod_spec(container("shell", gpu=resource_name, securityContext={"privileged": True})),
        ),
    ]


class Dump:
    """Writes one List item by item, so that the generator holds one object at a time."""

    def __init__(self, out: io.TextIOBase, *, as_yaml: bool) -> None:
        self.out = out
        self.as_yaml = as_yaml
        self.first = True
        self.pods = 0
        self.objects = 0
        self.serial = 0
        out.write(
            "apiVersion: v1\nkind: List\nitems:\n"
            if as_yaml
            else '{"apiVersion": "v1", "kind": "List", "items": [\n'
        )

    def add(self, obj: dict[str, Any]) -> None:
        self.objects += 1
        self.pods += obj["kind"] == "Pod"
        if self.as_yaml:
            text = yaml.dump(obj, Dumper=_YAML_DUMPER, sort_keys=False)
            self.out.write("- " + text.replace("\n", "\n  ").rstrip() + "\n")
        else:
            self.out.write(("" if self.first else ",\n") + json.dumps(obj))
        self.first = False

    def close(self) -> None:
        if not self.as_yaml:
            self.out.write("\n]}\n")

    def uid(self) -> str:
        self.serial += 1
        return f"00000000-0000-4000-8000-{self.serial:012d}"


def meta(dump: Dump, name: str, ns: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "uid": dump.uid(),
        "resourceVersion": "4711",
        "creationTimestamp": "2026-11-01T10:00:00Z",
        "labels": {"app": name.split("-", maxsplit=1)[0]},
    }
    if owner is not None:
        m["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return m


def pod(
    dump: Dump, name: str, ns: str, spec: dict[str, Any], owner: dict[str, Any] | None
) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    spec["nodeName"] = f"gpu-node-{dump.serial % 97:03d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(dump, name, ns, owner),
        "spec": spec,
        "status": {
            "phase": "Running",
            "hostIP": "10.0.3.17",
            "podIP": "10.244.3.41",
            "qosClass": "Burstable",
            "startTime": "2026-11-01T10:00:05Z",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2026-11-01T10:00:09Z"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "image": c["image"],
                    "imageID": "nvcr.io/nvidia/tritonserver@sha256:" + "a" * 64,
                    "containerID": "containerd://" + "b" * 64,
                    "state": {"running": {"startedAt": "2026-11-01T10:00:08Z"}},
                }
                for c in spec["containers"]
            ],
        },
    }


def template(spec: dict[str, Any], app: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": app}}, "spec": spec}


def generate(pods_wanted: int, out: io.TextIOBase, *, as_yaml: bool) -> tuple[int, int]:
    """Write a dump of `pods_wanted` pods (a few more for the smallest sizes); returns
    (pods, objects)."""
    dump = Dump(out, as_yaml=as_yaml)
    for ns, labels, _ in NAMESPACES:
        dump.add(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": ns,
                    "uid": dump.uid(),
                    "labels": {"kubernetes.io/metadata.name": ns, **labels},
                },
            }
        )
    at_scale_1 = sum(n for _, _, n, _ in apps("x")) * len(NAMESPACES)
    scale = pods_wanted / at_scale_1
    for ns, _, resource_name in NAMESPACES:
        for kind, name, base, spec in apps(resource_name):
            for obj in workload(
                dump, kind, name, ns, replicas=max(1, int(base * scale)), spec=spec
            ):
                dump.add(obj)
    # Bare pods make up the number asked for.
    i = 0
    while dump.pods < pods_wanted:
        ns, _, resource_name = NAMESPACES[i % len(NAMESPACES)]
        dump.add(
            pod(dump, f"notebook-{i}", ns, pod_spec(container("lab", gpu=resource_name)), None)
        )
        i += 1
    dump.close()
    return dump.pods, dump.objects


def workload(
    dump: Dump, kind: str, name: str, ns: str, *, replicas: int, spec: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """The object of `kind` and what its controllers made of it: `replicas` pods."""
    if kind == "Pod":
        yield pod(dump, name, ns, spec, None)
        return
    if kind in ("CronJob", "JobSet"):
        if kind == "CronJob":
            top = {
                "apiVersion": "batch/v1",
                "kind": kind,
                "metadata": meta(dump, name, ns),
                "spec": {
                    "schedule": "0 3 * * *",
                    "jobTemplate": {"spec": {"template": template(spec, name)}},
                },
            }
        else:
            top = {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": kind,
                "metadata": meta(dump, name, ns),
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "workers",
                            "replicas": replicas,
                            "template": {"spec": {"template": template(spec, name)}},
                        }
                    ]
                },
            }
        yield top
        for j in range(replicas):
            job = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": meta(dump, f"{name}-2911{j}", ns, top),
                "spec": {"template": template(spec, name)},
            }
            yield job
            yield pod(dump, f"{name}-2911{j}-x7k2p", ns, spec, job)
        return
    top = {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": meta(dump, name, ns),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template(spec, name),
        },
    }
    if kind == "DaemonSet":
        del top["spec"]["replicas"]
    yield top
    owner = top
    if kind == "Deployment":
        # The current ReplicaSet and an old one (revision history): another image tag.
        old_spec = copy.deepcopy(spec)
        for c in old_spec["containers"]:
            c["image"] = c["image"].replace("24.08", "24.05")
        yield {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": meta(dump, f"{name}-5d4f8b", ns, top),
            "spec": {"replicas": 0, "template": template(old_spec, name)},
        }
        owner = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": meta(dump, f"{name}-7c9d6f", ns, top),
            "spec": {"replicas": replicas, "template": template(spec, name)},
        }
        yield owner
    for p in range(replicas):
        yield pod(dump, f"{name}-7c9d6f-{p:05d}", ns, spec, owner)


# --------------------------------------------------------------------------- measuring


def run_command(path: Path) -> tuple[float, float, int]:
    """`python -m webhook audit -f path` in a fresh process: wall seconds, its peak RSS in
    MiB, its exit code."""
    argv = [sys.executable, "-m", "webhook", "audit", "-f", str(path), "--policies", str(POLICIES)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err, cwd=REPO)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode not in (0, 1):
            err.seek(0)
            raise SystemExit(f"audit exited {child.returncode}: {err.read().decode()}")
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    rss = usage.ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)
    return seconds, rss, child.returncode


def measure_parts(path: str) -> dict[str, float]:
    """In this process: reading the file, and judging its objects, apart."""
    start = time.perf_counter()
    objects: list[dict[str, Any]] = command.read_objects(path)
    read = time.perf_counter() - start
    loaded = policies.load_directory(POLICIES)
    every_kind = kinds.all_kinds()
    start = time.perf_counter()
    report = auditing.audit(objects, policies=loaded, kinds=every_kind)
    judge = time.perf_counter() - start
    return {"objects": len(objects), "refused": report.refused, "read": read, "judge": judge}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1000, 10000],
        help="pods in each dump (default 1000 10000)",
    )
    parser.add_argument(
        "--yaml", action="store_true", help="also the largest dump as YAML (much slower to read)"
    )
    parser.add_argument("--parts", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.parts:
        print(json.dumps(measure_parts(args.parts)))
        return 0
    rows = [(n, False) for n in args.sizes]
    if args.yaml:
        rows.append((max(args.sizes), True))
    print(
        f"{'dump':<6}{'pods':>8}{'objects':>9}{'MiB':>7}{'read s':>8}{'judge s':>9}"
        f"{'command s':>11}{'peak RSS MiB':>14}{'exit':>6}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for n, as_yaml in rows:
            path = Path(tmp) / f"cluster-{n}.{'yaml' if as_yaml else 'json'}"
            with path.open("w", encoding="utf-8") as out:
                pods, objects = generate(n, out, as_yaml=as_yaml)  # type: ignore[arg-type]
            parts = subprocess.run(
                [sys.executable, __file__, "--parts", str(path)],
                capture_output=True,
                text=True,
                check=True,
            )
            m = json.loads(parts.stdout)
            seconds, rss, code = run_command(path)
            size = path.stat().st_size / 2**20
            print(
                f"{'yaml' if as_yaml else 'json':<6}{pods:>8,}{objects:>9,}{size:>7.1f}"
                f"{m['read']:>8.2f}{m['judge']:>9.2f}{seconds:>11.2f}{rss:>14.0f}{code:>6}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
