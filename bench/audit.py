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
  the peak resident memory of that process (getrusage of the child, started by a small
  launcher: see `_LAUNCHER`);
- `read s` and `judge s`: the two parts apart, in another process: reading the file into
  objects, and `auditing.audit` over them.

Then, per dump and per `-o` (`--outputs`, default text, json and policyreport), the same
command with that output, `--repeat` times in turn (text, json, policyreport, text, ...; the
median of each): seconds (wall and CPU), peak RSS, both against text's, and the size of
what it prints; for the report outputs also how many reports (`parts`: the reports past
the first of a namespace, `gpu-share-webhook-2`, ...; a namespace's results are split past
about 1 MB), how many results, and the largest report as the API server would store it
(compact JSON; etcd refuses requests over 1.5 MiB by default).

Target: 10,000 pods in a few seconds. Compare rows of one run: the machines are shared.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
# The installed package when there is one, else this checkout.
sys.path.append(str(REPO))
sys.path.append(str(REPO / "bench"))

from core import container  # noqa: E402  bench/core.py: a defaulted container

from webhook.policy import kinds, policies  # noqa: E402
from webhook.tools import audit as command  # noqa: E402
from webhook.tools import auditing  # noqa: E402

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


def add_namespaces(dump: Dump) -> None:
    """The Namespace objects, first in every dump (alone: the program without objects)."""
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


def generate(pods_wanted: int, out: io.TextIOBase, *, as_yaml: bool) -> tuple[int, int]:
    """Write a dump of `pods_wanted` pods (a few more for the smallest sizes); returns
    (pods, objects)."""
    dump = Dump(out, as_yaml=as_yaml)
    add_namespaces(dump)
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


@dataclass(frozen=True)
class Run:
    """One `python -m webhook audit` process: wall and CPU seconds, peak RSS in MiB, exit
    code, and what it printed."""

    seconds: float
    cpu: float
    rss: float
    code: int
    out: bytes
    err: bytes


# Starts the command and reports its exit code, peak RSS (KiB on Linux, bytes on macOS),
# CPU seconds and wall seconds into the file argv[1]. The command is not started by this
# bench's process itself: Linux carries a process's memory high-water mark across exec
# (fs/exec.c exec_mmap: setmax_mm_hiwater_rss of the old mm), so a child forked from a bench
# that once held 300 MiB reports at least 300 MiB, whatever it used. This launcher (isolated,
# no site: under 10 MiB) is the parent instead.
_LAUNCHER = """
import os, sys, time
start = time.perf_counter()
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - start
with open(sys.argv[1], "w") as out:
    out.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}"
              f" {usage.ru_utime + usage.ru_stime} {seconds}")
"""


def run_audit(*args: str, env: dict[str, str] | None = None, codes: Sequence[int] = (0, 1)) -> Run:
    """`python -m webhook audit ARGS --policies policies/` in a fresh process (what a user
    waits for: interpreter start, imports, reading, judging, printing), from this checkout.
    An exit code outside `codes` stops the bench with its standard error."""
    argv = [sys.executable, "-m", "webhook", "audit", *args, "--policies", str(POLICIES)]
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile("r") as figures,
    ):
        subprocess.run(
            [sys.executable, "-I", "-S", "-c", _LAUNCHER, figures.name, *argv],
            stdout=out,
            stderr=err,
            cwd=REPO,
            env=env,
            check=True,
        )
        code_text, maxrss, cpu, seconds = figures.read().split()
        out.seek(0)
        err.seek(0)
        printed, errors = out.read(), err.read()
    code = int(code_text)
    if code not in codes:
        raise SystemExit(f"audit {' '.join(args)} exited {code}: {errors.decode()}")
    rss = int(maxrss) / (1024 * 1024 if sys.platform == "darwin" else 1024)
    return Run(float(seconds), float(cpu), rss, code, printed, errors)


def run_command(path: Path) -> tuple[float, float, int]:
    """`python -m webhook audit -f path` in a fresh process: wall seconds, its peak RSS in
    MiB, its exit code."""
    run = run_audit("-f", str(path))
    return run.seconds, run.rss, run.code


_PART = re.compile(r"-[0-9]+$")


def report_sizes(printed: bytes) -> dict[str, int]:
    """Of `-o policyreport|openreports` output (one v1 List): reports, parts (reports past a
    namespace's first), results, and the largest report's bytes as compact JSON."""
    doc = json.loads(printed)
    items = doc["items"]
    return {
        "reports": len(items),
        "parts": sum(bool(_PART.search(i["metadata"]["name"])) for i in items),
        "results": sum(len(i.get("results") or ()) for i in items),
        "largest": max(
            (len(json.dumps(i, separators=(",", ":")).encode()) for i in items), default=0
        ),
    }


def measure_outputs(path: Path, outputs: Sequence[str], repeat: int) -> dict[str, dict[str, Any]]:
    """Each `-o` of `outputs` on the dump at `path`, `repeat` rounds in turn; the median
    seconds, CPU seconds and peak RSS of each, its printed bytes and report sizes."""
    runs: dict[str, list[Run]] = {o: [] for o in outputs}
    for _ in range(repeat):
        for output in outputs:
            runs[output].append(run_audit("-f", str(path), "-o", output))
    found: dict[str, dict[str, Any]] = {}
    for output, done in runs.items():
        last = done[-1]
        found[output] = {
            "seconds": statistics.median(r.seconds for r in done),
            "cpu": statistics.median(r.cpu for r in done),
            "rss": statistics.median(r.rss for r in done),
            "bytes": len(last.out),
            "code": last.code,
            **(report_sizes(last.out) if output in ("policyreport", "openreports") else {}),
        }
    return found


def print_outputs(rows: Sequence[tuple[int, dict[str, dict[str, Any]]]]) -> None:
    """The outputs table: one line per dump and output, ratios against text's."""
    print()
    print(
        f"{'pods':>8}  {'output':<13}{'s':>7}{'cpu s':>7}{'RSS MiB':>9}{'s/text':>8}"
        f"{'RSS/text':>9}{'out MiB':>9}{'reports':>9}{'parts':>7}{'results':>9}"
        f"{'largest KiB':>13}"
    )
    for pods, found in rows:
        base = found.get("text")
        for output, m in found.items():
            ratio_s = f"{m['seconds'] / base['seconds']:.2f}" if base else "-"
            ratio_rss = f"{m['rss'] / base['rss']:.2f}" if base else "-"
            reports = "reports" in m
            print(
                f"{pods:>8,}  {output:<13}{m['seconds']:>7.2f}{m['cpu']:>7.2f}{m['rss']:>9.0f}"
                f"{ratio_s:>8}{ratio_rss:>9}{m['bytes'] / 2**20:>9.1f}"
                f"{m['reports'] if reports else '-':>9}{m['parts'] if reports else '-':>7}"
                f"{format(m['results'], ',') if reports else '-':>9}"
                f"{format(m['largest'] / 1024, ',.0f') if reports else '-':>13}"
            )


def load() -> str:
    """The load averages (1, 5, 15 minutes) and the cores: how busy the machine was."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


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
    parser.add_argument(
        "--outputs",
        nargs="*",
        choices=("text", "json", "policyreport", "openreports"),
        default=["text", "json", "policyreport"],
        help="the -o of the outputs table (default text json policyreport; none: no table)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each output, the median kept (default 3)"
    )
    parser.add_argument("--parts", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.parts:
        print(json.dumps(measure_parts(args.parts)))
        return 0
    rows = [(n, False) for n in args.sizes]
    if args.yaml:
        rows.append((max(args.sizes), True))
    print(load())
    outputs: list[tuple[int, dict[str, dict[str, Any]]]] = []
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
            if args.outputs and not as_yaml:
                outputs.append((pods, measure_outputs(path, args.outputs, args.repeat)))
    if outputs:
        print_outputs(outputs)
    print(load())
    return 0


if __name__ == "__main__":
    sys.exit(main())
