"""Seconds, peak memory and requests of `gpu-share-webhook audit --cluster`, against the
stand-in of the Kubernetes API (tests/support/kube_api.py) serving the dumps of bench/audit.py.

    python bench/audit_cluster.py [--sizes 1000 10000] [--page-sizes 100 500 1000]
                                  [--repeat 1] [--managed-fields] [--validate]

For each size, a dump as bench/audit.py writes it (distinct objects: every pod, workload and
namespace its own name and uid) is served by the stand-in in another process (a core of its
own, as far as two cores go: the stand-in parses, pages and encodes in Python, and its CPU
seconds are shown apart). Then, each a fresh `python -m webhook audit` process (wall and CPU
seconds, and its peak RSS: getrusage of the child, through bench/audit.py's launcher):

- `-f DUMP -o json`: the same objects from the file, for comparison;
- `--cluster -o json` at each page size: the list requests it made (all kinds, and the pods'
  alone) as the stand-in logged them;
- `--cluster -o policyreport --write-reports`, twice: the first creates every report, the
  second must write nothing (its timestamps carried over, every report left as it is): the
  stand-in's PATCH and DELETE requests are counted, and a second run that writes any stops
  the bench.

And a baseline, the program without objects: `--cluster -o json` against a stand-in holding
the Namespaces only, and `-f` of the Namespaces alone; for memory per pod: (peak RSS -
baseline) / pods, and the slope between the two largest sizes.

The stand-in serves each object as it is stored, with its `status`, and without
`metadata.managedFields` unless `--managed-fields` (the stand-in then owns every field as one
manager: fewer bytes than a real API server's per-container entries, more than none); the
audit drops both as each page is read. `--validate` makes the stand-in check every written
report against the report CRDs' schemas (tests/support/report_schemas.py; its CPU seconds grow).
The stand-in is the tests' own (it reads JSON bodies with `json` and takes bodies of up to
the API server's 3 MiB, as the bench once had to make it).

Compare rows of one run: the machines are shared; the first and last lines print the load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

REPO = Path(__file__).resolve().parent.parent
# The installed package when there is one, else this checkout; tests/ is this checkout's.
sys.path.append(str(REPO))
sys.path.append(str(REPO / "bench"))

import audit  # noqa: E402  bench/audit.py: the dumps and the command runs

from tests.support import kube_api, report_schemas  # noqa: E402
from webhook.policy import kinds  # noqa: E402

# The report API the write runs use (the chart's default).
OUTPUT = "policyreport"
# A manager that owns every field of the seeded objects (--managed-fields).
SEEDER = "kube-controller-manager"


# --------------------------------------------------------------------------- the stand-in


def seeded(
    dump: Path, *, namespaces_only: bool, managed_fields: bool, validate: bool
) -> tuple[Any, list[tuple[str, str]]]:
    """The stand-in holding the dump's objects (or its Namespaces only), every kind of the
    shipped WorkloadKinds file and both report APIs served; and its pods (namespace, name)."""
    kube = kube_api.KubeAPI(validate=report_schemas.validate if validate else None)
    for kind in kinds.load():
        kube.serve_crd(kind.group, kind.versions[0], kind.resource, kind.kind)
    for served in (
        kube_api.POLICY_REPORTS,
        kube_api.CLUSTER_POLICY_REPORTS,
        kube_api.REPORTS,
        kube_api.CLUSTER_REPORTS,
    ):
        kube.serve(served)
    items = orjson.loads(dump.read_bytes())["items"]
    manager = SEEDER if managed_fields else None
    pods = []
    while items:
        obj = items.pop()
        if not namespaces_only or obj["kind"] == "Namespace":
            kube.add(obj, manager=manager)
            if obj["kind"] == "Pod":
                pods.append((obj["metadata"]["namespace"], obj["metadata"]["name"]))
    return kube, pods


def stats(kube: Any) -> dict[str, Any]:
    """What the stand-in saw since the last reset, and its CPU seconds and RSS so far."""
    log = list(kube.log)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    lists = [r for r in log if r.method == "GET" and "limit" in r.query]
    return {
        "lists": len(lists),
        "pod_lists": sum(r.path == "/api/v1/pods" for r in lists),
        "kinds": len({r.path for r in lists}),
        "writes": dict(Counter(f"{r.method} {r.status}" for r in log if r.method != "GET")),
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss": usage.ru_maxrss / 1024,
    }


def served_bytes(kube: Any, pods: Sequence[tuple[str, str]]) -> dict[str, float]:
    """Mean bytes of a Pod as a list serves it (compact JSON, as the API server's), and
    without its status and managedFields (what the audit keeps of it), over up to 200 of
    `pods` (namespace, name)."""
    sample = [kube.object("v1", "Pod", name, ns) for ns, name in pods[:: max(1, len(pods) // 200)]]
    served = [len(orjson.dumps(p)) for p in sample]
    for p in sample:
        p.pop("status", None)
        p["metadata"].pop("managedFields", None)
    kept = [len(orjson.dumps(p)) for p in sample]
    return {
        "pod_bytes": statistics.mean(served) if served else 0.0,
        "pod_kept": statistics.mean(kept) if kept else 0.0,
    }


async def serve(args: argparse.Namespace) -> None:
    """The stand-in's process: seed, serve on a free port, write the kubeconfig, then answer
    `stats`, `reset` and `quit` lines on standard input with JSON lines."""
    start = time.perf_counter()
    kube, pods = seeded(
        Path(args.serve),
        namespaces_only=args.namespaces_only,
        managed_fields=args.managed_fields,
        validate=args.validate,
    )
    seeding = time.perf_counter() - start
    app = kube.app()
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    kube.url = f"http://{host}:{port}"
    kube_api.write_kubeconfig(Path(args.kubeconfig), kube)
    loop = asyncio.get_running_loop()

    def say(value: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(value) + "\n")
        sys.stdout.flush()

    say({"ready": kube.url, "seed_s": seeding, **served_bytes(kube, pods), **stats(kube)})
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if line in ("", "quit"):
            break
        if line == "reset":
            kube.log.clear()
            say({})
        elif line == "stats":
            say(stats(kube))
    await runner.cleanup()


class StandIn:
    """The stand-in in a process of its own (`--serve`), driven over its stdin/stdout."""

    def __init__(self, dump: Path, kubeconfig: Path, args: argparse.Namespace, *, only_ns: bool):
        argv = [sys.executable, __file__, "--serve", str(dump), "--kubeconfig", str(kubeconfig)]
        argv += ["--namespaces-only"] if only_ns else []
        argv += ["--managed-fields"] if args.managed_fields else []
        argv += ["--validate"] if args.validate else []
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
        )
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        out = self.process.stdout
        assert out is not None
        line = out.readline()
        if not line:
            raise SystemExit(f"the stand-in exited {self.process.wait()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, what: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(what + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
        self.process.wait(timeout=60)


@contextlib.contextmanager
def standing(
    dump: Path, tmp: Path, args: argparse.Namespace, *, only_ns: bool = False
) -> Iterator[tuple[StandIn, Path]]:
    kubeconfig = tmp / ("kubeconfig-ns" if only_ns else "kubeconfig")
    stand_in = StandIn(dump, kubeconfig, args, only_ns=only_ns)
    try:
        yield stand_in, kubeconfig
    finally:
        stand_in.close()


# --------------------------------------------------------------------------- measuring


def measured(stand_in: StandIn, *argv: str, codes: Sequence[int] = (0, 1)) -> dict[str, Any]:
    """One command run against the stand-in: the command's figures and the stand-in's
    requests and CPU seconds for it."""
    stand_in.ask("reset")
    before = stand_in.ask("stats")
    run = audit.run_audit(*argv, codes=codes)
    after = stand_in.ask("stats")
    return {
        "seconds": run.seconds,
        "cpu": run.cpu,
        "rss": run.rss,
        "code": run.code,
        "out": run.out,
        "err": run.err,
        "server_cpu": after["cpu"] - before["cpu"],
        "lists": after["lists"],
        "pod_lists": after["pod_lists"],
        "writes": after["writes"],
    }


def median_of(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out = dict(runs[-1])
    for key in ("seconds", "cpu", "rss", "server_cpu"):
        if key in out:
            out[key] = statistics.median(r[key] for r in runs)
    return out


def cluster_args(kubeconfig: Path, *more: str) -> list[str]:
    return ["--cluster", "--kubeconfig", str(kubeconfig), *more]


def row(label: str, pods: int, m: dict[str, Any], base: dict[str, Any] | None = None) -> str:
    lists = f"{m['lists']} ({m['pod_lists']})" if "lists" in m else "-"
    writes = sum(m.get("writes", {}).values()) if "writes" in m else "-"
    ratio = f"{m['seconds'] / base['seconds']:.2f}" if base else "-"
    rss_ratio = f"{m['rss'] / base['rss']:.2f}" if base else "-"
    server = f"{m['server_cpu']:.2f}" if "server_cpu" in m else "-"
    return (
        f"{pods:>8,}  {label:<36}{m['seconds']:>7.2f}{m['cpu']:>7.2f}{m['rss']:>9.0f}"
        f"{ratio:>7}{rss_ratio:>8}{server:>10}{lists:>14}{writes!s:>8}"
    )


HEADER = (
    f"{'pods':>8}  {'run':<36}{'s':>7}{'cpu s':>7}{'RSS MiB':>9}{'s/-f':>7}{'RSS/-f':>8}"
    f"{'server s':>10}{'lists (pods)':>14}{'writes':>8}"
)


def bench_size(n: int, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Every run of one size; prints its rows as they come."""
    dump = tmp / f"cluster-{n}.json"
    with dump.open("w", encoding="utf-8") as out:
        pods, objects = audit.generate(n, out, as_yaml=False)
    result: dict[str, Any] = {"pods": pods, "objects": objects}
    from_file = median_of(
        [
            vars(r)
            for r in (audit.run_audit("-f", str(dump), "-o", "json") for _ in range(args.repeat))
        ]
    )
    result["file"] = from_file
    print(row(f"-f DUMP -o json ({objects:,} obj)", pods, from_file))
    with standing(dump, tmp, args) as (stand_in, kubeconfig):
        ready = stand_in.ready
        result["stand_in"] = ready
        print(
            f"{'':>10}(stand-in: seeded in {ready['seed_s']:.1f} s, {ready['rss']:.0f} MiB,"
            f" a Pod served as {ready['pod_bytes'] / 1024:.1f} KiB of JSON,"
            f" {ready['pod_kept'] / 1024:.1f} KiB kept)"
        )
        for page in args.page_sizes:
            runs = [
                measured(
                    stand_in, *cluster_args(kubeconfig, "-o", "json", "--page-size", str(page))
                )
                for _ in range(args.repeat)
            ]
            m = median_of(runs)
            if json.loads(m["out"])["totals"] != json.loads(from_file["out"])["totals"]:
                raise SystemExit(f"--cluster at page size {page}: totals differ from -f's")
            result[f"page {page}"] = m
            print(row(f"--cluster -o json, page {page}", pods, m, from_file))
        write = cluster_args(kubeconfig, "-o", OUTPUT, "--write-reports")
        first = measured(stand_in, *write, codes=(0,))
        result["write 1"] = first
        print(row(f"--write-reports, 1st ({OUTPUT})", pods, first, from_file))
        second = measured(stand_in, *write, codes=(0,))
        result["write 2"] = second
        print(row("--write-reports, 2nd (no change)", pods, second, from_file))
        if second["writes"]:
            raise SystemExit(f"the second --write-reports wrote: {second['writes']}")
        created = first["writes"].get("PATCH 201", 0)
        summary = second["out"].decode().splitlines()[0]
        print(f"{'':>10}(1st: {created} reports created; 2nd: {summary})")
    return result


def baseline(dump: Path, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The program without objects: `--cluster -o json` against the Namespaces alone, and
    `-f` of the Namespaces alone (which exits 2: nothing to audit, after its imports and
    reading)."""
    with standing(dump, tmp, args, only_ns=True) as (stand_in, kubeconfig):
        runs = [
            measured(stand_in, *cluster_args(kubeconfig, "-o", "json")) for _ in range(args.repeat)
        ]
    namespaces = tmp / "namespaces.json"
    with namespaces.open("w", encoding="utf-8") as out:
        written = audit.Dump(out, as_yaml=False)
        audit.add_namespaces(written)
        written.close()
    files = [vars(audit.run_audit("-f", str(namespaces), codes=(2,))) for _ in range(args.repeat)]
    return {"cluster": median_of(runs), "file": median_of(files)}


def print_memory(results: Sequence[dict[str, Any]], base: dict[str, Any], page: int) -> None:
    """Peak RSS above the program's, per pod: -f, --cluster -o json, and the second
    --write-reports (the CronJob's steady state: it holds the reports it read back too)."""
    cluster_base, file_base = base["cluster"]["rss"], base["file"]["rss"]
    columns = [
        ("-f", "file", file_base),
        ("--cluster", f"page {page}", cluster_base),
        ("write 2nd", "write 2", cluster_base),
    ]
    print()
    print(
        f"memory: peak RSS, and KiB per pod above the program's own (-f: {file_base:.0f} MiB,"
        f" --cluster: {cluster_base:.0f} MiB); --cluster at page {page}"
    )
    head = f"{'pods':>8}{'objects':>9}{'Pod KiB':>9}{'kept KiB':>10}"
    head += "".join(f"{label + ' MiB':>15}{'KiB/pod':>9}" for label, _, _ in columns)
    print(head)
    for r in results:
        line = f"{r['pods']:>8,}{r['objects']:>9,}"
        line += (
            f"{r['stand_in']['pod_bytes'] / 1024:>9.1f}{r['stand_in']['pod_kept'] / 1024:>10.1f}"
        )
        for _, key, floor in columns:
            rss = r[key]["rss"]
            line += f"{rss:>15.0f}{(rss - floor) * 1024 / r['pods']:>9.1f}"
        print(line)
    if len(results) >= 2:
        a, b = results[-2], results[-1]
        slopes = ", ".join(
            f"{label} {(b[key]['rss'] - a[key]['rss']) * 1024 / (b['pods'] - a['pods']):.1f}"
            for label, key, _ in columns
        )
        print(f"slope between {a['pods']:,} and {b['pods']:,} pods, KiB/pod: {slopes}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[1000, 10000], help="pods in each dump"
    )
    parser.add_argument(
        "--page-sizes",
        type=int,
        nargs="+",
        default=[100, 500, 1000],
        help="--page-size of each run",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each read, the median kept (default 1)"
    )
    parser.add_argument(
        "--managed-fields", action="store_true", help="serve objects with metadata.managedFields"
    )
    parser.add_argument(
        "--validate", action="store_true", help="the stand-in checks reports against the CRDs"
    )
    parser.add_argument("--serve", metavar="DUMP", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--namespaces-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args))
        return 0
    print(audit.load())
    print(HEADER)
    results = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for n in args.sizes:
            results.append(bench_size(n, tmp, args))
        base = baseline(tmp / f"cluster-{args.sizes[0]}.json", tmp, args)
    page = 500 if 500 in args.page_sizes else args.page_sizes[0]
    print_memory(results, base, page)
    print(audit.load())
    return 0


if __name__ == "__main__":
    sys.exit(main())
