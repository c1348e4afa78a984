"""What one review costs in process, in CPU instructions (valgrind's callgrind), per part:
decoding the request, deciding, encoding the answer; and the bytes it allocates per body byte.

    python bench/review_cost.py [--pods 400] [--policy default] [--checkout DIR | --python PY]

Instructions, not seconds: a count barely moves with what else the machine does, so one run
says how much work a review is, and two checkouts can be compared on a busy machine. Each
row runs bench/server.py's mixed stream (distinct pods, as the API server sends the first pod
of as many Deployments) through the checkout's codec under `valgrind --tool=callgrind` with
counting off, turns counting on for exactly the part measured (`callgrind_control`), and
divides by the number of reviews: `decode` is `codec.parse`, `review` the whole exchange
(`codec.review`: decode, decide, encode), `decide` and `encode` what review adds beyond the
parts before it. A first pass over the same bodies warms the caches of compiled patterns and
policies: what is measured is a review of a pod the process has not seen, in a process that
has reviewed others. Needs valgrind (Debian: apt-get install -y valgrind).

`--memory` instead measures allocations (tracemalloc's peak while one body is reviewed) for
bodies from 4 KB to 7 MB whose bulk is a field no rule reads, and for a pod of many
containers: bytes allocated per body byte.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

PARTS = ("loop", "decode", "view", "facts", "rules", "decide", "review")


# Each part as the table shows it: what it adds to the parts above it.
_WORDS = {
    "decode": "decode the request (codec.parse)",
    "view": "the view (view.templates, view.pod)",
    "facts": "the facts (facts.gather)",
    "rules": "checks, patches, record (reviewing.run beyond the facts)",
    "decide": "the rest of the decision (routing, hints, warnings: codec.decide)",
    "review": "encode the answer (codec.review)",
}


def _child(args: argparse.Namespace) -> None:
    """Runs inside valgrind: the reviews, with instrumentation on around the part measured."""
    if args.checkout is not None:
        sys.path.insert(0, str(args.checkout))
    policies, codec = _modules()
    from webhook.engine import facts, reviewing, view  # noqa: PLC0415

    loaded = policies.load_directory(args.policies)
    warm, bodies = pickle.loads(args.bodies.read_bytes())

    def review(body: bytes) -> None:
        codec.review(body, policies=loaded, policy_name=args.policy, endpoint="mutate")

    policy = loaded.governing(args.policy)

    def view_of(body: bytes) -> None:
        found, _ = view.templates(codec.parse(body).object)
        for template in found:
            view.pod(template)

    def facts_of(body: bytes) -> None:
        found, _ = view.templates(codec.parse(body).object)
        for template in found:
            facts.gather(view.pod(template), policy)

    def rules_of(body: bytes) -> None:
        found, _ = view.templates(codec.parse(body).object)
        for template in found:
            reviewing.run(view.pod(template), policy, mutate=True)

    def decide(body: bytes) -> None:
        request = codec.parse(body)
        codec.decide(request, policies=loaded, policy_name=args.policy, endpoint="mutate")

    run = {
        "loop": lambda body: None,
        "decode": codec.parse,
        "view": view_of,
        "facts": facts_of,
        "rules": rules_of,
        "decide": decide,
        "review": review,
    }[args.part]
    for body in warm:
        review(body)
    control(True)
    for body in bodies:
        run(body)
    control(False)


def _modules() -> tuple[Any, Any]:
    """The policy loader and the codec, in either layout (before and after webhook/ was
    split into layers), so that two checkouts compare."""
    try:
        from webhook.policy import policies  # noqa: PLC0415
        from webhook.server import codec  # noqa: PLC0415
    except ImportError:
        from webhook import policies  # type: ignore[no-redef]  # noqa: PLC0415
        from webhook import reviews as codec  # type: ignore[no-redef]  # noqa: PLC0415
    return policies, codec


def control(on: bool) -> None:
    subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
        check=True,
        capture_output=True,
    )


def count(args: argparse.Namespace, part: str, work: Path) -> int:
    """Instructions of `part` over the reviews of `args.bodies`."""
    out = work / f"callgrind.{part}"
    measured = ["--checkout", str(args.checkout)] if args.checkout is not None else []
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            str(args.python or sys.executable),
            __file__,
            "--child",
            part,
            *measured,
            "--bodies",
            str(args.bodies),
            "--policies",
            str(args.policies),
            "--policy",
            args.policy,
        ],
        check=True,
        capture_output=True,
    )
    text = out.read_text(errors="replace")
    # ("summary:" is what was counted before the last zeroing; "totals:" what counts here.)
    found = re.search(r"^totals: (\d+)", text, re.M)
    assert found, "no totals in callgrind's output"
    return int(found.group(1))


def memory(args: argparse.Namespace) -> None:
    """Bytes allocated per body byte (tracemalloc's peak), for large bodies."""
    if args.checkout is not None:
        sys.path.insert(0, str(args.checkout))
    import tracemalloc  # noqa: PLC0415

    import orjson  # noqa: PLC0415

    policies, codec = _modules()
    loaded = policies.load_directory(args.policies)
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu.shared": 1}}}

    def body(pod: dict[str, object]) -> bytes:
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "operation": "CREATE", "namespace": "team-a", "object": pod},
        }
        return orjson.dumps(review)

    def pod(extra: object = None, containers: int = 1) -> dict[str, object]:
        meta: dict[str, object] = {"name": "p", "namespace": "team-a"}
        if extra is not None:
            meta["annotations"] = {"note": extra}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": {"containers": [dict(container, name=f"c{i}")
                                        for i in range(containers)]}}

    cases = [(f"a skipped field of {n:,} bytes", body(pod() | {"status": {"x": "y" * n}}))
             for n in (4_000, 400_000, 7_000_000)]
    cases.append(("2,000 containers", body(pod(containers=2000))))
    print("| body | bytes | peak allocated | per body byte |")
    print("|---|---:|---:|---:|")
    for name, data in cases:
        tracemalloc.start()
        codec.review(data, policies=loaded, policy_name="default", endpoint="mutate")
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"| {name} | {len(data):,} | {peak:,} | {peak / len(data):.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=400, help="distinct reviews measured")
    parser.add_argument("--policy", default="default", help="the policy path reviewed under")
    measured = parser.add_mutually_exclusive_group()
    measured.add_argument("--checkout", type=Path, help="a checkout's source (default: this one)")
    measured.add_argument("--python", type=Path,
                          help="an interpreter whose installed webhook is measured (a wheel)")
    parser.add_argument("--policies", type=Path, default=REPO / "policies",
                        help="the policy directory")
    parser.add_argument("--memory", action="store_true", help="allocations instead")
    parser.add_argument("--child", choices=PARTS, dest="part", help=argparse.SUPPRESS)
    parser.add_argument("--bodies", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.checkout is None and args.python is None:
        args.checkout = REPO
    if args.checkout is not None:
        args.checkout = args.checkout.resolve()
    if args.part:
        _child(args)
        return 0
    if args.memory:
        if args.python is not None:
            parser.error("--memory measures a checkout's source")
        memory(args)
        return 0
    if shutil.which("valgrind") is None:
        print("needs valgrind (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    # The mixed stream of bench/server.py, made here: the process measured imports nothing
    # but the webhook it measures.
    sys.path.insert(0, str(REPO / "bench"))
    import server as bench  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        args.bodies = Path(tmp) / "bodies.pickle"
        warm = bench.stream_bodies(args.pods, None, 12)
        args.bodies.write_bytes(pickle.dumps((warm, bench.stream_bodies(args.pods, None, 11))))
        totals = {p: count(args, p, Path(tmp)) for p in PARTS}
    per = {p: (totals[p] - totals["loop"]) / args.pods for p in PARTS if p != "loop"}
    print(f"{args.checkout or args.python}: {args.pods} distinct pods of the mixed stream,"
          f" policy {args.policy}")
    print("| part | instructions per review |")
    print("|---|---:|")
    before = 0.0
    for part, words in _WORDS.items():
        print(f"| {words} | {per[part] - before:,.0f} |")
        before = per[part]
    print(f"| **review (all)** | **{per['review']:,.0f}** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
