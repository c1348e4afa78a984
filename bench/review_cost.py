"""What one review costs in process, in CPU instructions (valgrind's callgrind), per part:
decoding the request, deciding, encoding the answer; and the bytes it allocates per body byte.

    python bench/review_cost.py [--pods 400] [--policy default] [--checkout DIR]

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
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

PARTS = ("loop", "decode", "review")


def _child(args: argparse.Namespace) -> None:
    """Runs inside valgrind: the reviews, with counting on around the part measured."""
    sys.path[:0] = [str(args.checkout), str(REPO / "bench")]
    import server as bench  # noqa: PLC0415

    policies, codec = _modules()
    loaded = policies.load_directory(args.checkout / "policies")
    bodies = bench.stream_bodies(args.pods, None, 11)
    warm = bench.stream_bodies(args.pods, None, 12)

    def review(body: bytes) -> None:
        codec.review(body, policies=loaded, policy_name=args.policy, endpoint="mutate")

    run = {"loop": lambda body: None, "decode": codec.parse, "review": review}[args.part]
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


def count(checkout: Path, part: str, pods: int, policy: str, work: Path) -> int:
    """Instructions of `part` over `pods` reviews."""
    out = work / f"callgrind.{part}"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--child",
            part,
            "--checkout",
            str(checkout),
            "--pods",
            str(pods),
            "--policy",
            policy,
        ],
        check=True,
        capture_output=True,
    )
    text = out.read_text(errors="replace")
    # ("summary:" is what was counted before the last zeroing; "totals:" what counts here.)
    found = re.search(r"^totals: (\d+)", text, re.M)
    assert found, "no totals in callgrind's output"
    return int(found.group(1))


def memory(checkout: Path) -> None:
    """Bytes allocated per body byte (tracemalloc's peak), for large bodies."""
    sys.path.insert(0, str(checkout))
    import tracemalloc  # noqa: PLC0415

    import orjson  # noqa: PLC0415

    policies, codec = _modules()
    loaded = policies.load_directory(checkout / "policies")
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
    parser.add_argument("--checkout", type=Path, default=REPO, help="the checkout measured")
    parser.add_argument("--memory", action="store_true", help="allocations instead")
    parser.add_argument("--child", choices=PARTS, dest="part", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.checkout = args.checkout.resolve()
    if args.part:
        _child(args)
        return 0
    if args.memory:
        memory(args.checkout)
        return 0
    if shutil.which("valgrind") is None:
        print("needs valgrind (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        totals = {p: count(args.checkout, p, args.pods, args.policy, Path(tmp)) for p in PARTS}
    per = {p: (totals[p] - totals["loop"]) / args.pods for p in PARTS if p != "loop"}
    print(f"{args.checkout}: {args.pods} distinct pods of the mixed stream, policy {args.policy}")
    print("| part | instructions per review |")
    print("|---|---:|")
    print(f"| decode (codec.parse) | {per['decode']:,.0f} |")
    print(f"| decide and encode | {per['review'] - per['decode']:,.0f} |")
    print(f"| review (all) | {per['review']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
