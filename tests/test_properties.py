"""Invariants over generated pods, odd but valid ones included: the core never raises; every
patch applies to the object as sent; the result is a valid Pod for two Kubernetes versions and
for the client's model; a second pass (reinvocation) wants nothing more."""

from __future__ import annotations

import json
import string
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kube import (
    WORKLOAD_KINDS,
    admission_review,
    admit,
    in_template,
    make_policy,
    shipped,
    templates_of,
    workload,
)
from webhook import policies, reviews
from webhook.core import reviewing
from webhook.errors import BadReview

SHIPPED = shipped()
LAB = make_policy(
    [
        {"name": "t4-mps", "product": "Tesla-T4", "strategy": "mps", "replicas": 4,
         "memoryMiB": 15360},
        {"name": "l4-mps", "product": "NVIDIA-L4", "strategy": "mps", "replicas": 2,
         "memoryMiB": 23034},
        {"name": "a10g-ts", "product": "NVIDIA-A10G", "strategy": "time-slicing", "replicas": 4},
        {"name": "a100-ts", "product": "NVIDIA-A100-SXM4-80GB", "strategy": "time-slicing",
         "replicas": 2, "gpusPerNode": 8, "memoryMiB": 81920},
        {"name": "mig", "resource": "nvidia.com/mig-1g.10gb", "product": "A100-MIG-1g.10gb",
         "strategy": "time-slicing", "replicas": 2},
    ],
    name="lab",
    sharedResources=["nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb.shared"],
    profiles={"small": {"activeThreadPercentage": 10, "pinnedMemoryMiB": 1536},
              "medium": {"activeThreadPercentage": 25, "pinnedMemoryMiB": 3840},
              "large": {"activeThreadPercentage": 50}},
    default_profile="medium",
)
POLICIES = [SHIPPED.policies["default"], SHIPPED.policies["not-renamed"], LAB]

names = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=8).map(
    lambda s: "c" + s)
counts = st.one_of(st.integers(0, 3), st.sampled_from(["0", "1", "2", "3"]))
GPU_RESOURCES = ["nvidia.com/gpu.shared", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb.shared",
                 "nvidia.com/mig-1g.10gb"]


@st.composite
def resources(draw: st.DrawFn, shared: frozenset[str]) -> dict[str, Any] | None:
    if draw(st.booleans()):
        return None
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    for res in draw(st.lists(st.sampled_from(GPU_RESOURCES), max_size=2, unique=True)):
        n = draw(counts)
        limits[res] = n
        # Only a shared resource may come with disagreeing requests: that is the webhook's
        # denial to give; for any other the pod is invalid before the webhook sees it.
        how = draw(st.sampled_from(
            ["limits", "both", "both", "requests-differ"] if res in shared else ["limits", "both"]))
        if how == "both":
            requests[res] = n
        elif how == "requests-differ":
            requests[res] = draw(counts)
    if draw(st.booleans()):
        limits["cpu"] = draw(st.sampled_from(["500m", "1", 2]))
        requests["memory"] = draw(st.sampled_from(["1Gi", "256Mi"]))
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


ENV_VALUES = {
    "NVIDIA_VISIBLE_DEVICES": st.sampled_from(["void", "none", "all", "0", "GPU-1234", ""]),
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": st.sampled_from(["5", "25", "60", "100", "x", "0"]),
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": st.sampled_from(["0=1G", "0=3840M", "0=20G", "4096",
                                                         "0=1G,1=2G"]),
    "HF_HOME": st.just("/cache"),
}


@st.composite
def env_var(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(ENV_VALUES)))
    if draw(st.integers(0, 9)) == 0:
        return {"name": name, "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}
    return {"name": name, "value": draw(ENV_VALUES[name])}


@st.composite
def container(draw: st.DrawFn, name: str, shared: frozenset[str]) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    res = draw(resources(shared))
    if res is not None:
        c["resources"] = res
    if draw(st.booleans()):
        c["env"] = draw(st.lists(env_var(), max_size=3))
    if draw(st.integers(0, 7)) == 0:
        c["securityContext"] = {"privileged": draw(st.booleans())}
    return c


TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu.shared", "operator": "Exists"},
    {"operator": "Exists"},
    {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
]
LABELS = {
    "nvidia.com/gpu.product": ["Tesla-T4", "Tesla-T4-SHARED", "NVIDIA-L4-SHARED", "NVIDIA-A10G",
                               "H100"],
    "nvidia.com/gpu.sharing-strategy": ["mps", "time-slicing", "none"],
    "nvidia.com/gpu.replicas": ["2", "4"],
    "nvidia.com/mps.capable": ["true", "false"],
    "nvidia.com/gpu.memory": ["15360", "81920"],
    "kubernetes.io/hostname": ["gpu-1", "gpu-2"],
    "topology.kubernetes.io/zone": ["a", "b"],
}


@st.composite
def expression(draw: st.DrawFn) -> dict[str, Any]:
    key = draw(st.sampled_from(sorted(LABELS)))
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    if op in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": op}
    if op in ("Gt", "Lt"):
        return {"key": key, "operator": op, "values": [draw(st.sampled_from(["3", "20000"]))]}
    values = draw(st.lists(st.sampled_from(LABELS[key]), min_size=1, max_size=3, unique=True))
    return {"key": key, "operator": op, "values": values}


@st.composite
def affinity(draw: st.DrawFn) -> dict[str, Any]:
    node: dict[str, Any] = {}
    if draw(st.booleans()):
        terms = draw(st.lists(st.lists(expression(), min_size=1, max_size=3), min_size=1,
                              max_size=3))
        node["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}
    if draw(st.booleans()):
        node["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 10, "preference": {"matchExpressions": [draw(expression())]}}]
    out: dict[str, Any] = {"nodeAffinity": node} if node else {}
    if draw(st.integers(0, 4)) == 0:
        out["podAntiAffinity"] = {}
    return out


@st.composite
def pods(draw: st.DrawFn, shared: frozenset[str]) -> dict[str, Any]:
    """Pods valid as the API server would take them, given which resources are shared."""
    all_names = draw(st.lists(names, min_size=1, max_size=7, unique=True))
    split = draw(st.integers(0, len(all_names) - 1))
    init_names, main_names = all_names[:split], all_names[split:]
    spec: dict[str, Any] = {"containers": [draw(container(n, shared)) for n in main_names]}
    if init_names:
        spec["initContainers"] = [draw(container(n, shared)) for n in init_names]
    if draw(st.booleans()):
        spec["tolerations"] = draw(st.lists(st.sampled_from(TOLERATIONS), max_size=3))
    if draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(sorted(LABELS)), max_size=3, unique=True))
        spec["nodeSelector"] = {k: draw(st.sampled_from(LABELS[k])) for k in keys}
    if draw(st.booleans()):
        spec["affinity"] = draw(affinity())
    runtime = draw(st.sampled_from([None, None, "nvidia", "runc"]))
    if runtime is not None:
        spec["runtimeClassName"] = runtime
    metadata: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    annotations = {}
    if draw(st.booleans()):
        annotations["gpu-share.io/profile"] = draw(
            st.sampled_from(["small", "medium", "large", "half", "quarter", "nope"]))
    if draw(st.integers(0, 5)) == 0:
        annotations["gpu-share.io/policy"] = "someone-else"
    if draw(st.integers(0, 5)) == 0:
        annotations["gpu-share.io/mutations"] = "tolerations"
    if annotations or draw(st.booleans()):
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


PROPERTY_SETTINGS = settings(max_examples=150, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


policy_and_pod = st.sampled_from(POLICIES).flatmap(
    lambda p: st.tuples(st.just(p), pods(p.shared_resources)))


@PROPERTY_SETTINGS
@given(case=policy_and_pod)
def test_every_pod_is_admitted_validly_and_idempotently_or_refused_with_a_reason(
    case: tuple[policies.Policy, dict[str, Any]],
) -> None:
    policy, pod = case
    decision, result = admit(pod, policy)
    if decision.allowed:
        assert result is not None
    else:
        assert decision.message
        assert decision.patch == []
        assert all(v.rule for v in decision.violations)


@PROPERTY_SETTINGS
@given(case=policy_and_pod, kind=st.sampled_from(WORKLOAD_KINDS))
def test_a_workload_is_refused_exactly_when_its_pods_would_be(
    case: tuple[policies.Policy, dict[str, Any]], kind: str
) -> None:
    policy, pod = case
    pod_decision = reviewing.review(pod, policy=policy, mutate=False)
    obj = workload(kind, pod)
    decision, result = admit(obj, policy)
    assert [(v.rule, v.container, v.message) for v in decision.violations] == [
        (v.rule, v.container, in_template(v.message, kind)) for v in pod_decision.violations]
    if result is not None:
        # Allowed: its template comes out as its pods do (`mutate -f` shows it so).
        sent = templates_of(obj)[0]
        _, pod_result = admit({"apiVersion": "v1", "kind": "Pod", "metadata": sent["metadata"],
                               "spec": sent["spec"]}, policy)
        assert pod_result is not None
        template = templates_of(result)[0]
        assert template["spec"] == pod_result["spec"]
        assert (template.get("metadata") or {}).get("annotations") == (
            pod_result.get("metadata") or {}).get("annotations")


@PROPERTY_SETTINGS
@given(case=policy_and_pod)
def test_the_validating_pass_accepts_what_the_mutating_pass_produced(
    case: tuple[policies.Policy, dict[str, Any]],
) -> None:
    policy, pod = case
    _, result = admit(pod, policy)
    if result is not None:
        assert reviewing.review(result, policy=policy, mutate=False, require=True).allowed


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=12,
)
POD_KEYS = ["spec", "metadata", "containers", "initContainers", "resources", "limits", "requests",
            "env", "tolerations", "nodeSelector", "affinity", "annotations", "runtimeClassName",
            "securityContext", "nvidia.com/gpu.shared", "name", "value", "nodeAffinity"]


@st.composite
def mangled(draw: st.DrawFn) -> dict[str, Any]:
    """A pod with arbitrary JSON grafted anywhere: what a buggy client might send."""
    pod = draw(pods(frozenset(GPU_RESOURCES)))

    def graft(node: Any, depth: int) -> Any:
        if depth > 5 or not draw(st.booleans()):
            return node
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node) + POD_KEYS))
            replace = draw(st.booleans())
            node[key] = draw(json_values) if replace else graft(node.get(key), depth + 1)
        elif isinstance(node, list) and node:
            i = draw(st.integers(0, len(node) - 1))
            node[i] = graft(node[i], depth + 1)
        else:
            return draw(json_values)
        return node

    return graft(pod, 0)  # type: ignore[no-any-return]


@settings(max_examples=300, deadline=None)
@given(obj=mangled(), policy=st.sampled_from(POLICIES))
def test_the_core_never_raises_whatever_the_object(obj: Any, policy: policies.Policy) -> None:
    decision = reviewing.review(obj, policy=policy)
    assert isinstance(decision.allowed, bool)


@settings(max_examples=300, deadline=None)
@given(obj=mangled() | json_values, endpoint=st.sampled_from(["mutate", "validate"]))
def test_the_codec_answers_or_refuses_the_body_but_never_raises_anything_else(
    obj: Any, endpoint: reviews.Endpoint
) -> None:
    review = admission_review({"apiVersion": "v1", "kind": "Pod", "metadata": {}})
    review["request"]["object"] = obj
    for body in (json.dumps(review).encode(), json.dumps(obj).encode()):
        try:
            outcome = reviews.review(body, policies=SHIPPED, policy_name="default",
                                     endpoint=endpoint)
        except BadReview:
            continue
        answer = json.loads(outcome.body)
        assert answer["response"]["uid"] == review["request"]["uid"]
