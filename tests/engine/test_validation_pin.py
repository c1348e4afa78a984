"""The validating webhook requires the pin: a pod asking for a policy's shared resource is
admitted only when every required node-selection term keeps it on that policy's classes.

A pod the mutating webhook pinned passes (tests/support/kube.py `admit` checks that for every
manifest of the corpus). A later mutating webhook may drop or widen the node selection ours
added (the API server reinvokes ours once, then the other has the last word): such a pod
could land on another policy's class (fewer replicas, a larger MPS share) or, where shared
GPUs are not renamed, on a node that gives it a whole GPU. Each case goes through three
doors: the core, both HTTPS endpoints of the real application, and the rendered
configurations in the API server's chain with the other webhook after ours.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from aiohttp.test_utils import TestClient

from tests.engine.route_cases import LAB_POLICY
from tests.support import apiserver, kube
from tests.support import deploy_helpers as dh
from tests.support import server_helpers as h
from webhook.engine import reviewing
from webhook.policy import names, policies
from webhook.server import app as server
from webhook.tools import rendering

Rewrite = Callable[[dict[str, Any]], dict[str, Any]]
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _unpin(obj: dict[str, Any]) -> dict[str, Any]:
    """What a placement webhook that owns scheduling does: drops both kinds of selection."""
    obj["spec"].pop("nodeSelector", None)
    obj["spec"].pop("affinity", None)
    return obj


def _select(**labels: str) -> Rewrite:
    """Replaces the pod's node selection with `labels` as a nodeSelector."""

    def rewrite(obj: dict[str, Any]) -> dict[str, Any]:
        _unpin(obj)
        obj["spec"]["nodeSelector"] = dict(labels)
        return obj

    return rewrite


def _affinity(*terms: dict[str, list[str]]) -> Rewrite:
    """Replaces the pod's node selection with required terms, each {key: values} with In."""

    def rewrite(obj: dict[str, Any]) -> dict[str, Any]:
        _unpin(obj)
        obj["spec"]["affinity"] = {"nodeAffinity": {_REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": k, "operator": "In", "values": v}
                                  for k, v in term.items()]}
            for term in terms]}}}
        return obj

    return rewrite


def _zone(obj: dict[str, Any]) -> dict[str, Any]:
    """Adds a zone to the selection, leaving ours as it is: still pinned."""
    obj["spec"].setdefault("nodeSelector", {})["topology.kubernetes.io/zone"] = "a"
    return obj


def _drop_count(obj: dict[str, Any]) -> dict[str, Any]:
    """Keeps the classes, drops the at-least-k-GPUs requirement of a k-replica pod."""
    for term in obj["spec"]["affinity"]["nodeAffinity"][_REQUIRED]["nodeSelectorTerms"]:
        term["matchExpressions"] = [e for e in term["matchExpressions"]
                                    if not e["key"].endswith(".count")]
    return obj


T4 = "nvidia.com/gpu.product"
STRATEGY = "nvidia.com/gpu.sharing-strategy"
REPLICAS = "nvidia.com/gpu.replicas"


class Case(NamedTuple):
    policy: str  # the namespace's policy label ("default": none)
    pod: dict[str, Any]
    rewrite: Rewrite
    refused: bool


CASES: dict[str, Case] = {
    "the pin dropped": Case("default", kube.pod(), _unpin, True),
    "the product kept, the strategy and replicas dropped": Case(
        "default", kube.pod(), _select(**{T4: "Tesla-T4"}), True),
    "another sharing strategy of the same product": Case(
        "default", kube.pod(), _select(**{T4: "Tesla-T4", STRATEGY: "time-slicing",
                                          REPLICAS: "4"}), True),
    "a term that pins, and one that does not": Case(
        "default", kube.pod(),
        _affinity({STRATEGY: ["mps"], REPLICAS: ["4"], T4: ["Tesla-T4"]}, {T4: ["Tesla-T4"]}),
        True),
    "not renamed: the pin dropped": Case(
        "not-renamed", kube.pod(kube.shared(resource="nvidia.com/gpu")), _unpin, True),
    "not renamed: the -SHARED product dropped": Case(
        "not-renamed", kube.pod(kube.shared(resource="nvidia.com/gpu")),
        _select(**{STRATEGY: "time-slicing", REPLICAS: "4"}), True),
    "k replicas: the GPUs-per-node requirement dropped": Case(
        "lab", kube.pod(kube.shared(2)), _drop_count, True),
    "narrowed to one of the policy's classes": Case(
        "default", kube.pod(), _select(**{T4: "Tesla-T4", STRATEGY: "mps", REPLICAS: "4"}),
        False),
    "a zone added beside the pin": Case("default", kube.pod(), _zone, False),
    "a pod that asks for no GPU is not pinned": Case(
        "default", kube.pod(kube.container("cpu")), _unpin, False),
}


def _expect(case: Case, allowed: bool, message: str) -> None:
    if case.refused:
        assert not allowed, "admitted unpinned"
        assert "(rule node-selection)" in message, message
    else:
        assert allowed, message


@pytest.fixture(scope="module")
def loaded() -> policies.PolicySet:
    shipped = kube.shipped()
    return policies.build_set([*shipped.policies.values(), kube.load_policy_text(LAB_POLICY)])


def _path(case: Case) -> str:
    return case.policy


@pytest.mark.parametrize("name", list(CASES))
def test_the_core_refuses_a_pod_a_later_webhook_unpinned(
    name: str, loaded: policies.PolicySet
) -> None:
    case = CASES[name]
    policy = loaded.governing(_path(case))
    request: dict[str, Any] = {"group": "", "kind": "Pod", "operation": "CREATE"}
    obj = kube.as_served(case.pod)
    mutated = reviewing.admit(obj, policy=policy, endpoint="mutate", **request)
    assert mutated.allowed, mutated.message
    stored = case.rewrite(kube.apply(obj, mutated.patch))
    validated = reviewing.admit(stored, policy=policy, endpoint="validate", **request)
    _expect(case, validated.allowed, validated.message)


def test_the_refusal_names_the_resource_the_classes_and_the_fix(
    loaded: policies.PolicySet,
) -> None:
    policy = loaded.governing("default")
    obj = kube.as_served(kube.pod())
    mutated = reviewing.admit(obj, policy=policy, endpoint="mutate", group="", kind="Pod",
                              operation="CREATE")
    stored = _unpin(kube.apply(obj, mutated.patch))
    message = reviewing.admit(stored, policy=policy, endpoint="validate", group="", kind="Pod",
                              operation="CREATE").message
    assert message.startswith("node selection: the pod asks for nvidia.com/gpu.shared"), message
    for name in ("t4-mps", "a10g-time-slicing", f"{STRATEGY}=mps", "Create the pod again"):
        assert name in message, message


# --------------------------------------------------------------------------- door 2: HTTPS


@pytest.mark.slow  # a TLS server and two reviews per case
@pytest.mark.parametrize("name", list(CASES))
async def test_both_endpoints_refuse_a_pod_a_later_webhook_unpinned(
    name: str, aiohttp_server: Any, aiohttp_client: Any, tmp_path: Path
) -> None:
    case = CASES[name]
    settings = h.settings(tmp_path)
    (settings.policies_dir / "lab.yaml").write_text(LAB_POLICY)
    client: TestClient[Any, Any] = await h.start(
        aiohttp_server, aiohttp_client, server.create_app(settings))
    current = kube.as_served(case.pod)
    answers = []
    for endpoint in ("mutate", "validate"):
        uid = f"{endpoint}-pin"
        body = kube.admission_review(current, operation="CREATE", uid=uid)
        response = await h.post_review(client, f"/{endpoint}/{case.policy}",
                                       json.dumps(body).encode())
        assert response.status == 200, await response.text()
        answer = h.response_of(await response.json(), uid)
        answers.append(answer)
        if endpoint == "mutate":
            assert answer["allowed"], answer
            patch = json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []
            current = case.rewrite(kube.apply(current, patch))
    validated = answers[-1]
    _expect(case, validated["allowed"], validated.get("status", {}).get("message", ""))


# --------------------------------------------------------------------------- door 3: the chain


def _labels(case: Case) -> dict[str, str]:
    labels = dh.namespace_labels("team-a", **{names.ENABLED_LABEL: "true"})
    if case.policy != names.DEFAULT_POLICY:
        labels[names.POLICY_LABEL] = case.policy
    return labels


@pytest.mark.parametrize("name", list(CASES))
async def test_the_rendered_chain_with_a_later_webhook_refuses_the_unpinned_pod(
    name: str, loaded: policies.PolicySet
) -> None:
    case = CASES[name]
    configurations = rendering.render(loaded, service="gpu-share-webhook",
                                      namespace="gpu-share-system", name="gpu-share-webhook")
    later = apiserver.Webhook("zz-placement.example.com", case.rewrite)
    cluster = apiserver.ApiServer(configurations, apiserver.in_process(loaded), later=[later])
    outcome = await cluster.admit(copy.deepcopy(case.pod), labels=_labels(case))
    mutating = [c for c in outcome.calls if c.configuration == rendering.MUTATING_KIND]
    if case.refused:
        # Ours was reinvoked after the other's change and pinned again; the other had the
        # last word; the validating entry saw what is stored.
        assert len(mutating) == 2, outcome.entries
    _expect(case, outcome.allowed, outcome.message)


async def test_without_the_later_webhook_the_chain_admits_every_case(
    loaded: policies.PolicySet,
) -> None:
    """The refusals above come from the other webhook's change, not from the pods."""
    configurations = rendering.render(loaded, service="gpu-share-webhook",
                                      namespace="gpu-share-system", name="gpu-share-webhook")
    cluster = apiserver.ApiServer(configurations, apiserver.in_process(loaded))
    for name, case in CASES.items():
        outcome = await cluster.admit(copy.deepcopy(case.pod), labels=_labels(case))
        assert outcome.allowed, (name, outcome.message)


# --------------------------------------------------------------------------- relaxed rules

_MPS_ONLY = {"name": "t4-mps", "product": "Tesla-T4", "strategy": "mps", "replicas": 4,
             "memoryMiB": 15360}
_SMALL = {"small": {"activeThreadPercentage": 10, "pinnedMemoryMiB": 1536}}
RELAXED: dict[str, tuple[dict[str, Any], str | None, dict[str, Any]]] = {
    # No class takes 8 replicas: multi-replica would refuse; in dry-run the pod is admitted.
    "multi-replica in dry-run, not renamed": (
        kube.pod(kube.shared(8, resource="nvidia.com/gpu")),
        "not-renamed", {"ruleModes": {"multi-replica": "dry-run"}}),
    "mps-limits in warn, above every ceiling": (
        kube.pod(kube.shared(env=[{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                                   "value": "100"}])),
        None, {"nodeClasses": [_MPS_ONLY], "profiles": _SMALL, "defaultProfile": "small",
               "ruleModes": {"mps-limits": "warn"}}),
    "several-shared-resources in warn": (
        kube.pod(kube.shared(), kube.shared(resource="nvidia.com/mig-1g.10gb.shared",
                                            name="b")),
        "lab", {"ruleModes": {"several-shared-resources": "warn"}}),
    "the whole policy in warn, node-selection enforced": (
        kube.pod(kube.shared(8, resource="nvidia.com/gpu")),
        "not-renamed", {"mode": "warn", "ruleModes": {"node-selection": "enforce"}}),
}


def _relaxed(base: str | None, change: dict[str, Any]) -> policies.Policy:
    """`base` (a shipped policy, or the lab's) with `change` to its spec; or a policy of
    `change` alone."""
    if base is None:
        return kube.make_policy(change.pop("nodeClasses"), name="relaxed", **change)
    text = LAB_POLICY if base == "lab" else (kube.REPO / "policies" / f"{base}.yaml").read_text()
    doc = next(d for d in yaml.safe_load_all(text) if d["metadata"]["name"] == base)
    doc["spec"].update(change)
    return kube.load_policy_text(yaml.safe_dump(doc))


@pytest.mark.parametrize("name", list(RELAXED))
def test_a_pod_a_relaxed_rule_admits_is_still_pinned(name: str) -> None:
    """A rule in warn or dry-run that leaves no class admits the pod: pinned to the classes
    the step before left, never to none; and the validating webhook requires that pin."""
    obj, base, change = RELAXED[name]
    policy = _relaxed(base, dict(change))
    decision, stored = kube.admit(obj, policy)
    assert decision.allowed, decision.message
    assert stored is not None
    assert stored["spec"].get("nodeSelector") or stored["spec"].get("affinity"), stored["spec"]
    validated = reviewing.review_object(_unpin(stored), policy=policy, mutate=False, require=True)
    assert "(rule node-selection)" in validated.message, validated.message
