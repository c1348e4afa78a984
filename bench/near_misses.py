"""What telling near misses costs a review, on ordinary pods and on objects built to make it
expensive: each body reviewed as the server reviews it (`codec.review`, mutate), with the
near-miss checks and with them switched off, in one run.

    python bench/near_misses.py [--rounds 5]

Prints, per body: its size, the best time of a review with the checks and without, their
ratio, and the warnings sent. The hostile bodies are what a user could send through the API
server (up to its ~3 MB request limit): tens of thousands of annotation keys, labels or
resource names that pass the cheap filter (`gpu-share.io/p1`, `nvidia.com/gpux1`), and one
huge key. Before the budget (`hints.Budget`) the worst of them took a minute; each now
costs a pass over its names and at most `hints.LOOKS` fuzzy matches.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.append(str(REPO))

from webhook.engine import hints  # noqa: E402
from webhook.policy import policies  # noqa: E402
from webhook.server import codec  # noqa: E402


def _body(obj: dict[str, Any], kind: str = "Pod", resource: str = "pods") -> bytes:
    request = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "operation": "CREATE",
        "namespace": "team-a",
        "object": obj,
        "userInfo": {"username": "bench"},
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def _pod(
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    limits: dict[str, Any] | None = None,
    containers: int = 1,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "labels": labels or {"app": "train"}}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [
                {
                    "name": f"c{i}",
                    "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "resources": {
                        "limits": limits or {"nvidia.com/gpu.shared": 1, "cpu": "1"},
                    },
                }
                for i in range(containers)
            ]
        },
    }


BODIES = {
    "ordinary pod": _body(_pod()),
    "one near miss": _body(_pod(annotations={"gpu-share.io/profle": "small"})),
    "50,000 gpu-share.io/ annotations": _body(
        _pod(annotations={f"gpu-share.io/p{i}": "v" for i in range(50_000)})
    ),
    "10,000 300-char annotations": _body(
        _pod(annotations={f"gpu-share.io/{'x' * 280}{i}": "v" for i in range(10_000)})
    ),
    "50,000 gpushare labels": _body(_pod(labels={f"gpushare/p{i}": "v" for i in range(50_000)})),
    "20,000 nvidia.com/gpu* names": _body(
        _pod(limits={f"nvidia.com/gpux{i}": 1 for i in range(20_000)})
    ),
    "20,000 containers, nvidia.com/gpus": _body(
        _pod(limits={"nvidia.com/gpus": 1}, containers=20_000)
    ),
    "one 2 MB annotation key": _body(_pod(annotations={"gpu-share.io/profle" * 100_000: "v"})),
    "namespace, 50,000 gpu-share.io/ labels": _body(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": "team-a",
                "labels": {f"gpu-share.io/l{i}": "v" for i in range(50_000)},
            },
        },
        kind="Namespace",
        resource="namespaces",
    ),
}


def _best(body: bytes, endpoint: str, loaded: policies.PolicySet, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        codec.review(body, policies=loaded, policy_name="default", endpoint=endpoint)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not hints.__file__.endswith(".py"):
        # Calls between the compiled modules go straight to the compiled functions: replacing
        # the module's attributes would switch nothing off, and "without" would equal "with".
        print(
            "bench/near_misses.py needs the pure-Python core: run it from an editable"
            " install (pip install -e .)",
            file=sys.stderr,
        )
        return 2
    loaded = policies.load_directory(REPO / "policies")
    real = {
        name: getattr(hints, name)
        for name in (
            "resource_warnings",
            "annotation_warnings",
            "label_warnings",
            "workload_warnings",
        )
    }
    real_namespace = codec.namespaces.label_warnings
    print(f"{'body':40} {'MB':>6} {'with ms':>9} {'without ms':>11} {'ratio':>6} {'warnings':>9}")
    for name, body in BODIES.items():
        endpoint = "validate" if "namespace" in name else "mutate"
        with_checks = _best(body, endpoint, loaded, args.rounds)
        out = codec.review(body, policies=loaded, policy_name="default", endpoint=endpoint)
        warned = len(json.loads(out.body)["response"].get("warnings") or [])
        for attr in real:
            setattr(hints, attr, lambda *_a, **_k: [])
        codec.namespaces.label_warnings = lambda *_a, **_k: []  # type: ignore[assignment]
        try:
            without = _best(body, endpoint, loaded, args.rounds)
        finally:
            for attr, function in real.items():
                setattr(hints, attr, function)
            codec.namespaces.label_warnings = real_namespace  # type: ignore[assignment]
        print(
            f"{name:40} {len(body) / 1e6:6.2f} {with_checks * 1e3:9.2f} {without * 1e3:11.2f}"
            f" {with_checks / without:6.2f} {warned:9d}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
