"""Every object we know, in one place: the published manifests, the examples, and the objects
of the rule table (tests/engine/rule_cases.py) and the route table (tests/engine/route_cases.py).

The tests that want "every pod we know" (the compiled core, the caches, the order of the rule
table, the pod view) take `objects()` and `pods()`. Generated cases, hypothesis' strategies,
are tests/support/strategies.py's.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from tests.engine.route_cases import ROUTE_CASES
from tests.engine.rule_cases import RULE_CASES
from tests.support import kube, real_world


def manifests() -> list[Path]:
    """The published manifests, then the examples."""
    return real_world.real_world_manifests() + sorted((kube.REPO / "examples").rglob("*.yaml"))


@functools.cache
def _objects() -> tuple[dict[str, Any], ...]:
    found: list[dict[str, Any]] = []
    for path in manifests():
        found += [d for d in kube.load_yaml_all(path.read_text()) if isinstance(d, dict)]
    found += [case.values[0] for case in RULE_CASES]
    found += [case.obj for case in ROUTE_CASES.values()]
    return tuple(found)


def objects() -> list[dict[str, Any]]:
    """Every object of the manifests and the tables (a copy: change it freely)."""
    return copy.deepcopy(list(_objects()))


def pods() -> list[dict[str, Any]]:
    """Every pod spec of `objects()` as a Pod, as the API server hands it to webhooks:
    served (quantities as strings), with the service account token volume."""
    out = []
    for obj in objects():
        for template in kube.templates_of(obj):
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": copy.deepcopy(template.get("metadata") or {"name": "p"}),
                   "spec": copy.deepcopy(template["spec"])}
            out.append(with_service_account(kube.as_served(pod)))
    return out


def with_service_account(obj: dict[str, Any], token: str = "abcde") -> dict[str, Any]:
    """`obj` with the volume and mounts the ServiceAccount admission plugin adds."""
    out = copy.deepcopy(obj)
    spec = out.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
        spec.setdefault("volumes", []).append(
            {"name": f"kube-api-access-{token}", "projected": {"sources": []}})
        for c in spec["containers"]:
            if isinstance(c, dict):
                c.setdefault("volumeMounts", []).append(
                    {"name": f"kube-api-access-{token}",
                     "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    return out
