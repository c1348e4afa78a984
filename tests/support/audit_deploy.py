"""The background audit's objects as the Helm chart renders them (audit.enabled), for the
tests that hold them to what `gpu-share-webhook audit --cluster` does: its ClusterRole's
rules feed a stand-in API's authorization (tests/support/deploy_helpers.py `granting_rules`), so the
command is run on exactly the rights the chart grants.

Rendered by Helm's own engine (helm-python-sdk), with the release and namespace deploy/
uses (`gpu-share-webhook` in gpu-share-system), once per set of values; and as
deploy/optional/audit, the kustomize component, adds them to an install (`kustomized`).
"""

from __future__ import annotations

import copy
import functools
import json
import tempfile
from pathlib import Path
from typing import Any

import helm_python

from tests.support import deploy_helpers as dh

CHART = dh.REPO / "charts" / "gpu-share-webhook"
# `helm install gpu-share-webhook ... -n gpu-share-system` makes the names deploy/ uses.
RELEASE = "gpu-share-webhook"
NAMESPACE = "gpu-share-system"
# What the audit's objects are named and labelled.
NAME = f"{RELEASE}-audit"
COMPONENT = "audit"
COMPONENT_LABEL = "app.kubernetes.io/component"
# The report APIs of the value audit.reports.
REPORTS = ("policyreport", "openreports")
# The kustomize component, and its part for the openreports API.
AUDIT = dh.DEPLOY / "optional" / "audit"
OPENREPORTS = AUDIT / "openreports"


@functools.cache
def _render(values_json: str, release: str, namespace: str) -> tuple[dict[str, Any], ...]:
    with helm_python.Chart.load(CHART) as chart:
        manifests = chart.render(json.loads(values_json), name=release, namespace=namespace)
    return tuple(
        doc
        for path in sorted(manifests)
        if path.endswith((".yaml", ".yml"))
        for doc in dh.load_all(manifests[path])
        if doc
    )


def _rendered(
    values: dict[str, Any] | None, release: str, namespace: str
) -> tuple[dict[str, Any], ...]:
    """The render of these values, shared: not to be changed."""
    return _render(json.dumps(values or {}, sort_keys=True), release, namespace)


def render(
    values: dict[str, Any] | None = None, *, release: str = RELEASE, namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    """Every object the chart renders with these values (a copy the caller may change)."""
    return copy.deepcopy(list(_rendered(values, release, namespace)))


def audit_values(reports: str = "policyreport", **more: Any) -> dict[str, Any]:
    """The values that turn the audit on with `reports` (and more of `audit:`)."""
    return {"audit": {"enabled": True, "reports": reports, **more}}


def audit_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects of the audit among a render's (labelled component=audit)."""
    return [o for o in objects if o["metadata"].get("labels", {}).get(COMPONENT_LABEL) == COMPONENT]


def audit_cluster_role_rules(reports: str = "policyreport") -> list[dict[str, Any]]:
    """The rules of the audit's ClusterRole as the chart renders it with audit.reports =
    `reports` (policyreport or openreports) and every other value at its default."""
    if reports not in REPORTS:
        raise ValueError(f"reports: one of {REPORTS}, not {reports!r}")
    # A copy of the rules alone: a copy of the whole render is most of a call's time.
    role = dh.find(_rendered(audit_values(reports), RELEASE, NAMESPACE), "ClusterRole", NAME)
    return copy.deepcopy(list(role["rules"]))


# Every audit value away from its default.
CUSTOM: dict[str, Any] = {
    "audit": {
        "enabled": True,
        "schedule": "@daily",
        "timeZone": "Europe/Berlin",
        "reports": "openreports",
        "pageSize": 100,
        "concurrencyPolicy": "Replace",
        "startingDeadlineSeconds": 120,
        "activeDeadlineSeconds": 600,
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": 86400,
        "successfulJobsHistoryLimit": 3,
        "failedJobsHistoryLimit": 1,
        "resources": {
            "requests": {"cpu": "200m", "memory": "512Mi"},
            "limits": {"cpu": "1", "memory": "2Gi"},
        },
        "nodeSelector": {"node-role.kubernetes.io/infra": ""},
        "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
        "priorityClassName": "low",
        "podAnnotations": {"sidecar.istio.io/inject": "false"},
        "podLabels": {"team": "platform"},
        "extraArgs": ["--some-option=1"],
    },
    "image": {
        "repository": "registry.example.com/gpu-share-webhook",
        "digest": "sha256:" + "ab" * 32,
    },
    "imagePullSecrets": [{"name": "registry"}],
    # The server's own placement is not the audit's.
    "nodeSelector": {"gpu": "false"},
    "priorityClassName": "system-cluster-critical",
}


_BUILDS: dict[tuple[str, bool], list[dict[str, Any]]] = {}


def kustomized(overlay: str, *, openreports: bool = False) -> list[dict[str, Any]]:
    """The install `overlay` with the audit component (and openreports/), built once (a copy
    the caller may change)."""
    key = (overlay, openreports)
    if key not in _BUILDS:
        with tempfile.TemporaryDirectory() as tmp:
            components = (AUDIT, OPENREPORTS) if openreports else (AUDIT,)
            _BUILDS[key] = dh.kustomize(dh.site(Path(tmp) / overlay, overlay, *components))
    return json.loads(json.dumps(_BUILDS[key]))
