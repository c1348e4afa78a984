"""Reviews per second of the admission core, in process: AdmissionReview bytes in, response
bytes out (parse, decide, patch, encode), on one core.

    python bench/core.py [--seconds 3] [--policy default]

Prints a table for a one-container pod (with a shared GPU, and without: a pod that asks for
none only gets NVIDIA_VISIBLE_DEVICES=void, and must cost less), a five-container pod with
init containers and a fifty-container pod, each as a fresh review to mutate, plus the cost
per container (which should stay flat: cost grows linearly with containers), and the same
review answered from the answer cache (`codec.Answers`: a later pod of the same Deployment,
not parsed). Compare rows of one run: these machines are shared, so absolute figures move
from run to run.

It measures the installed package when there is one: a wheel install (`pip install .`) runs
the core compiled with mypyc (hatch_build.py), an editable install the pure-Python source.
The first line says which.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The installed package when there is one (a wheel install is compiled with mypyc, see
# hatch_build.py), else this checkout.
sys.path.append(str(REPO))

from webhook.engine import reviewing  # noqa: E402
from webhook.policy import policies  # noqa: E402
from webhook.server import codec  # noqa: E402

BUILD = "compiled (mypyc)" if not reviewing.__file__.endswith(".py") else "pure Python"


def container(
    name: str, *, gpu: bool | str = False, count: int = 1, **extra: Any
) -> dict[str, Any]:
    """A container as the API server returns it (defaulted); `gpu`: True for one
    `nvidia.com/gpu.shared`, or the GPU resource to ask `count` of."""
    c: dict[str, Any] = {
        "name": name,
        "image": "nvcr.io/nvidia/tritonserver:24.08-py3",
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8000, "protocol": "TCP"}],
        "env": [{"name": "MODEL_REPOSITORY", "value": "/models"}],
        "resources": {
            "limits": {"cpu": "2", "memory": "8Gi"},
            "requests": {"cpu": "1", "memory": "4Gi"},
        },
        "volumeMounts": [
            {
                "name": "kube-api-access-x7k2p",
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": True,
            }
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if gpu:
        resource = "nvidia.com/gpu.shared" if gpu is True else str(gpu)
        c["resources"]["limits"][resource] = str(count)
        c["resources"]["requests"][resource] = str(count)
    c.update(extra)
    return c


def default_tolerations() -> list[dict[str, Any]]:
    """The tolerations the DefaultTolerationSeconds admission plugin adds to every pod
    before webhooks see it (a new list each time)."""
    return [
        {
            "key": f"node.kubernetes.io/{taint}",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        }
        for taint in ("not-ready", "unreachable")
    ]


def pod(containers: int, init: int = 0, *, gpu: bool = True) -> dict[str, Any]:
    """A pod as the API server hands it to webhooks: defaulted, with its service account
    volume and default tolerations; every other container asks for the shared GPU (none
    when not `gpu`: such a pod of an opted-in namespace only gets NVIDIA_VISIBLE_DEVICES=void)."""
    spec: dict[str, Any] = {
        "containers": [container(f"c{i}", gpu=gpu and i % 2 == 0) for i in range(containers)],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "securityContext": {},
        "tolerations": default_tolerations(),
        "volumes": [
            {
                "name": "kube-api-access-x7k2p",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}
                    ]
                },
            }
        ],
    }
    if init:
        spec["initContainers"] = [container(f"init{i}", gpu=i == 0) for i in range(init)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "triton-7d9f8c-",
            "namespace": "team-a",
            "labels": {"app": "triton", "pod-template-hash": "7d9f8c"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "triton-7d9f8c",
                    "uid": "0e6e8f0a-1111-2222-3333-444455556666",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def review_body(
    obj: dict[str, Any],
    *,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
    namespace: str = "team-a",
) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": namespace,
                "operation": "CREATE",
                "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                "object": obj,
                "oldObject": None,
                "dryRun": False,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            },
        },
        # As the API server writes it (Go's encoding/json): no spaces.
        separators=(",", ":"),
    ).encode()


def measure(
    body: bytes,
    loaded: policies.PolicySet,
    policy: str,
    seconds: float,
    answers: codec.Answers | None = None,
) -> tuple[float, int]:
    """Reviews per second over about `seconds`, in batches, best batch of the run; with
    `answers`, of the body answered from that cache (as a Deployment's later pods are)."""

    def once() -> bytes:
        return codec.review(
            body, policies=loaded, policy_name=policy, endpoint="mutate", answers=answers
        ).body

    out = once()
    assert b'"patch"' in out, out[:200]
    batch = 200
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(batch):
            once()
        rate = batch / (time.perf_counter() - start)
        best = max(best, rate)
    return best, len(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per row (default 3)")
    parser.add_argument("--policy", default="default")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core, as targeted
    loaded = policies.load_directory(REPO / "policies")
    rows = [
        ("1 container", pod(1), 1),
        ("1 container, no GPU", pod(1, gpu=False), 1),
        ("5 containers + 2 init", pod(5, init=2), 7),
        ("50 containers", pod(50), 50),
    ]
    print(f"core: {BUILD} ({Path(reviewing.__file__).parent})")
    print(
        f"{'pod':<24}{'request bytes':>14}{'reviews/s':>12}{'us/review':>11}{'us/container':>14}"
        f"{'answered us':>13}"
    )
    for label, obj, n in rows:
        body = review_body(copy.deepcopy(obj))
        rate, _ = measure(body, loaded, args.policy, args.seconds)
        answered, _ = measure(body, loaded, args.policy, args.seconds, codec.Answers(16))
        us = 1e6 / rate
        print(
            f"{label:<24}{len(body):>14}{rate:>12,.0f}{us:>11.1f}{us / n:>14.1f}"
            f"{1e6 / answered:>13.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
