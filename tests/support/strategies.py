"""Generated cases the tests share: hypothesis strategies of pods valid as the API server would
take them (odd but valid ones included), the policies they are judged under, and the settings of
the property tests that draw them.

tests/engine/test_properties.py, the answer cache's tests (test_answers.py),
tests/support/fuzzing.py and bench/same_answers.py draw from here; tests/engine/test_rule_order.py
judges the corpus under LAB too. The cases written out rather than drawn are the tables
beside the tests that judge them (tests/engine/rule_cases.py, route_cases.py) and
tests/support/corpus.py's manifests.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Hashable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.support.kube import make_policy, shipped

# The strategies a composite draws from, each made once for its arguments: hypothesis makes,
# checks and looks up a strategy built inside a draw at every draw, which was most of the
# cost of generating. Equal arguments give the strategy they always gave, so the same examples.
booleans = st.booleans()


def made_once(make: Callable[..., st.SearchStrategy[Any]]) -> Callable[..., Any]:
    """`make` (a strategy's function, or a composite) giving one strategy per arguments;
    arguments that cannot be a key (a list of dicts) make a strategy each time."""
    made: dict[Hashable, st.SearchStrategy[Any]] = {}

    def once(*args: Any, **kwargs: Any) -> st.SearchStrategy[Any]:
        key = (args, tuple(sorted(kwargs.items())))
        try:
            return made[key]
        except TypeError:
            return make(*args, **kwargs)
        except KeyError:
            made[key] = make(*args, **kwargs)
            return made[key]

    return once


integers = made_once(st.integers)
lists = made_once(st.lists)
_sampled_from = made_once(st.sampled_from)


def sampled_from(values: Any) -> st.SearchStrategy[Any]:
    """st.sampled_from, made once per values (a list is taken as the tuple of its items)."""
    return _sampled_from(tuple(values) if isinstance(values, list) else values)

SHIPPED = shipped()
# Besides the shipped policies, generated pods are judged under this one: MPS and
# time-slicing classes, a MIG resource shared, profiles with a default.
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


@made_once
@st.composite
def resources(draw: st.DrawFn, shared: frozenset[str]) -> dict[str, Any] | None:
    if draw(booleans):
        return None
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    for res in draw(lists(sampled_from(GPU_RESOURCES), max_size=2, unique=True)):
        n = draw(counts)
        limits[res] = n
        # Only a shared resource may come with disagreeing requests: that is the webhook's
        # denial to give; for any other the pod is invalid before the webhook sees it.
        how = draw(sampled_from(
            ["limits", "both", "both", "requests-differ"] if res in shared else ["limits", "both"]))
        if how == "both":
            requests[res] = n
        elif how == "requests-differ":
            requests[res] = draw(counts)
    if draw(booleans):
        limits["cpu"] = draw(sampled_from(["500m", "1", 2]))
        requests["memory"] = draw(sampled_from(["1Gi", "256Mi"]))
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


@made_once
@st.composite
def env_var(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(sampled_from(sorted(ENV_VALUES)))
    if draw(integers(0, 9)) == 0:
        return {"name": name, "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}
    return {"name": name, "value": draw(ENV_VALUES[name])}


@made_once
@st.composite
def container(draw: st.DrawFn, name: str, shared: frozenset[str]) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    res = draw(resources(shared))
    if res is not None:
        c["resources"] = res
    if draw(booleans):
        c["env"] = draw(st.lists(env_var(), max_size=3))
    if draw(integers(0, 7)) == 0:
        c["securityContext"] = {"privileged": draw(booleans)}
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


@made_once
@st.composite
def expression(draw: st.DrawFn) -> dict[str, Any]:
    key = draw(sampled_from(sorted(LABELS)))
    op = draw(sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    if op in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": op}
    if op in ("Gt", "Lt"):
        return {"key": key, "operator": op, "values": [draw(sampled_from(["3", "20000"]))]}
    values = draw(lists(sampled_from(LABELS[key]), min_size=1, max_size=3, unique=True))
    return {"key": key, "operator": op, "values": values}


@made_once
@st.composite
def affinity(draw: st.DrawFn) -> dict[str, Any]:
    node: dict[str, Any] = {}
    if draw(booleans):
        terms = draw(st.lists(st.lists(expression(), min_size=1, max_size=3), min_size=1,
                              max_size=3))
        node["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}
    if draw(booleans):
        node["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 10, "preference": {"matchExpressions": [draw(expression())]}}]
    out: dict[str, Any] = {"nodeAffinity": node} if node else {}
    if draw(integers(0, 4)) == 0:
        out["podAntiAffinity"] = {}
    return out


@st.composite
def pods(draw: st.DrawFn, shared: frozenset[str]) -> dict[str, Any]:
    """Pods valid as the API server would take them, given which resources are shared."""
    all_names = draw(lists(names, min_size=1, max_size=7, unique=True))
    split = draw(integers(0, len(all_names) - 1))
    init_names, main_names = all_names[:split], all_names[split:]
    spec: dict[str, Any] = {"containers": [draw(container(n, shared)) for n in main_names]}
    if init_names:
        spec["initContainers"] = [draw(container(n, shared)) for n in init_names]
    if draw(booleans):
        spec["tolerations"] = draw(lists(sampled_from(TOLERATIONS), max_size=3))
    if draw(booleans):
        keys = draw(lists(sampled_from(sorted(LABELS)), max_size=3, unique=True))
        spec["nodeSelector"] = {k: draw(sampled_from(LABELS[k])) for k in keys}
    if draw(booleans):
        spec["affinity"] = draw(affinity())
    runtime = draw(sampled_from([None, None, "nvidia", "runc"]))
    if runtime is not None:
        spec["runtimeClassName"] = runtime
    metadata: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    annotations = {}
    if draw(booleans):
        annotations["gpu-share.io/profile"] = draw(
            st.sampled_from(["small", "medium", "large", "half", "quarter", "nope"]))
    if draw(integers(0, 5)) == 0:
        annotations["gpu-share.io/policy"] = "someone-else"
    if draw(integers(0, 5)) == 0:
        annotations["gpu-share.io/mutations"] = "tolerations"
    if annotations or draw(booleans):
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


# The settings of the property tests over `policy_and_pod`.
PROPERTY_SETTINGS = settings(max_examples=150, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


# A policy of POLICIES and a pod drawn for its shared resources.
policy_and_pod = st.sampled_from(POLICIES).flatmap(
    lambda p: st.tuples(st.just(p), pods(p.shared_resources)))
