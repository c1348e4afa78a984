"""The node-selection truth table: how classes are labelled, several classes, the user's own
selection kept when compatible and refused when no allowed class can satisfy it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kube import admit, make_policy, pod

T4_MPS = {"name": "t4-mps", "product": "Tesla-T4", "strategy": "mps", "replicas": 4,
          "memoryMiB": 15360}
A10G_MPS = {"name": "a10g-mps", "product": "NVIDIA-A10G", "strategy": "mps", "replicas": 4,
            "memoryMiB": 23028}
A10G_TS = {"name": "a10g-ts", "product": "NVIDIA-A10G", "strategy": "time-slicing",
           "replicas": 4, "memoryMiB": 23028}
T4_TS_PLAIN = {"name": "t4-ts", "product": "Tesla-T4", "strategy": "time-slicing",
               "replicas": 4, "memoryMiB": 15360, "renamed": False}
L4_MPS_PLAIN = {"name": "l4-mps", "product": "NVIDIA-L4", "strategy": "mps", "replicas": 2,
                "memoryMiB": 23034, "renamed": False}

STRATEGY = "nvidia.com/gpu.sharing-strategy"
PRODUCT = "nvidia.com/gpu.product"
REPLICAS = "nvidia.com/gpu.replicas"


def expr(key: str, *values: str, op: str = "In") -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


def required(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}


def policy_for(classes: list[dict[str, Any]]) -> Any:
    plain = any(c.get("renamed") is False for c in classes)
    return make_policy(
        classes,
        sharedResources=["nvidia.com/gpu" if plain else "nvidia.com/gpu.shared"],
        profiles={"slice": {"activeThreadPercentage": 10}},
    )


def shared_pod(classes: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    plain = any(c.get("renamed") is False for c in classes)
    resource = "nvidia.com/gpu" if plain else "nvidia.com/gpu.shared"
    return pod({"name": "main", "image": "cuda", "resources": {"limits": {resource: "1"}}},
               **spec)


MPS_TERM = [expr(STRATEGY, "mps"), expr(REPLICAS, "4"), expr(PRODUCT, "Tesla-T4")]
TS_TERM = [expr(STRATEGY, "time-slicing"), expr(REPLICAS, "4"), expr(PRODUCT, "NVIDIA-A10G")]


def prefer_t4() -> dict[str, Any]:
    """A preference of the user's, which the webhook keeps as it is (a new one each time, so
    that the case's input and its expectation share nothing)."""
    return {"weight": 1, "preference": {"matchExpressions": [expr(PRODUCT, "Tesla-T4")]}}


ADMITTED = [
    pytest.param([T4_MPS], {}, {STRATEGY: "mps", PRODUCT: "Tesla-T4", REPLICAS: "4"}, None,
                 id="renamed-mps-one-class-nodeSelector-plain-product"),
    pytest.param([A10G_TS], {},
                 {STRATEGY: "time-slicing", PRODUCT: "NVIDIA-A10G", REPLICAS: "4"}, None,
                 id="renamed-time-slicing-one-class"),
    pytest.param([T4_TS_PLAIN], {},
                 {STRATEGY: "time-slicing", PRODUCT: "Tesla-T4-SHARED", REPLICAS: "4"}, None,
                 id="not-renamed-time-slicing-SHARED-product"),
    pytest.param([L4_MPS_PLAIN], {},
                 {STRATEGY: "mps", PRODUCT: "NVIDIA-L4-SHARED", REPLICAS: "2"}, None,
                 id="not-renamed-mps-SHARED-product"),
    pytest.param([T4_MPS, A10G_MPS], {}, None,
                 required([expr(STRATEGY, "mps"), expr(REPLICAS, "4"),
                           expr(PRODUCT, "Tesla-T4", "NVIDIA-A10G")]),
                 id="several-classes-one-term-product-In"),
    pytest.param([T4_MPS, A10G_TS], {}, None, required(MPS_TERM, TS_TERM),
                 id="mps-and-time-slicing-one-term-each"),
    pytest.param([T4_TS_PLAIN, L4_MPS_PLAIN], {}, None,
                 required([expr(STRATEGY, "time-slicing"), expr(REPLICAS, "4"),
                           expr(PRODUCT, "Tesla-T4-SHARED")],
                          [expr(STRATEGY, "mps"), expr(REPLICAS, "2"),
                           expr(PRODUCT, "NVIDIA-L4-SHARED")]),
                 id="not-renamed-several-classes"),
    pytest.param([T4_MPS], {"nodeSelector": {"kubernetes.io/hostname": "gpu-1"}},
                 {"kubernetes.io/hostname": "gpu-1", STRATEGY: "mps", PRODUCT: "Tesla-T4",
                  REPLICAS: "4"}, None, id="user-nodeSelector-kept"),
    pytest.param([T4_MPS, A10G_TS], {"nodeSelector": {PRODUCT: "Tesla-T4"}},
                 {PRODUCT: "Tesla-T4", STRATEGY: "mps", REPLICAS: "4"}, None,
                 id="user-product-narrows-to-one-class"),
    pytest.param([T4_MPS, A10G_TS], {"nodeSelector": {"nvidia.com/mps.capable": "true"}},
                 {"nvidia.com/mps.capable": "true", STRATEGY: "mps", PRODUCT: "Tesla-T4",
                  REPLICAS: "4"}, None, id="user-mps-capable-narrows-to-mps"),
    pytest.param([T4_MPS, A10G_TS], {"nodeSelector": {"nvidia.com/gpu.present": "true"}},
                 {"nvidia.com/gpu.present": "true"}, required(MPS_TERM, TS_TERM),
                 id="user-gpu-present-compatible-with-all"),
    pytest.param([T4_MPS, A10G_TS],
                 {"affinity": required([expr("topology.kubernetes.io/zone", "a")])}, None,
                 required([expr("topology.kubernetes.io/zone", "a"), *MPS_TERM],
                          [expr("topology.kubernetes.io/zone", "a"), *TS_TERM]),
                 id="user-required-term-ANDed-with-each-class-group"),
    pytest.param([T4_MPS, A10G_TS],
                 {"affinity": required([expr(PRODUCT, "NVIDIA-A10G")])},
                 {STRATEGY: "time-slicing", PRODUCT: "NVIDIA-A10G", REPLICAS: "4"},
                 required([expr(PRODUCT, "NVIDIA-A10G")]),
                 id="user-required-product-narrows-to-one-class"),
    pytest.param([T4_MPS, A10G_TS],
                 {"affinity": required([expr(PRODUCT, "Tesla-T4", op="NotIn")])},
                 {STRATEGY: "time-slicing", PRODUCT: "NVIDIA-A10G", REPLICAS: "4"},
                 required([expr(PRODUCT, "Tesla-T4", op="NotIn")]), id="user-NotIn-narrows"),
    pytest.param([T4_MPS, A10G_TS],
                 {"affinity": required([expr("nvidia.com/gpu.memory", "20000", op="Gt")])},
                 {STRATEGY: "time-slicing", PRODUCT: "NVIDIA-A10G", REPLICAS: "4"},
                 required([expr("nvidia.com/gpu.memory", "20000", op="Gt")]),
                 id="user-Gt-on-memory-narrows"),
    pytest.param([T4_MPS, A10G_TS],
                 {"affinity": required([expr(PRODUCT, "Tesla-T4")],
                                       [expr("kubernetes.io/hostname", "gpu-9")])},
                 None,
                 # A product alone does not pin a class: strategy and replicas are added.
                 required([expr(PRODUCT, "Tesla-T4"), expr(STRATEGY, "mps"), expr(REPLICAS, "4")],
                          [expr("kubernetes.io/hostname", "gpu-9"), *MPS_TERM],
                          [expr("kubernetes.io/hostname", "gpu-9"), *TS_TERM]),
                 id="each-term-narrowed-to-the-groups-it-admits"),
    pytest.param([T4_MPS, A10G_TS],
                 {"affinity": required(MPS_TERM, [expr("kubernetes.io/hostname", "gpu-9")])},
                 None,
                 required(MPS_TERM,
                          [expr("kubernetes.io/hostname", "gpu-9"), *MPS_TERM],
                          [expr("kubernetes.io/hostname", "gpu-9"), *TS_TERM]),
                 id="pinned-term-kept-open-term-narrowed"),
    pytest.param([T4_MPS, A10G_TS],
                 {"affinity": {"nodeAffinity": {
                     "preferredDuringSchedulingIgnoredDuringExecution": [prefer_t4()]}}},
                 None,
                 {"nodeAffinity": {
                     "preferredDuringSchedulingIgnoredDuringExecution": [prefer_t4()],
                     **required(MPS_TERM, TS_TERM)["nodeAffinity"]}},
                 id="preferred-kept-required-added"),
    pytest.param([T4_MPS, A10G_TS],
                 {"affinity": {"podAntiAffinity": {}}}, None,
                 {"podAntiAffinity": {}, **required(MPS_TERM, TS_TERM)},
                 id="other-affinity-kept"),
    pytest.param([T4_MPS], {"nodeSelector": {STRATEGY: "mps", PRODUCT: "Tesla-T4", REPLICAS: "4"}},
                 {STRATEGY: "mps", PRODUCT: "Tesla-T4", REPLICAS: "4"}, None,
                 id="already-pinned-nothing-added"),
    pytest.param([T4_MPS, A10G_TS], {"affinity": required(MPS_TERM)}, None, required(MPS_TERM),
                 id="already-pinned-by-affinity-nothing-added"),
]


@pytest.mark.parametrize(("classes", "spec", "node_selector", "affinity"), ADMITTED)
def test_node_selection_matches_how_the_classes_are_labelled(
    classes: list[dict[str, Any]], spec: dict[str, Any],
    node_selector: dict[str, str] | None, affinity: dict[str, Any] | None,
) -> None:
    decision, result = admit(shared_pod(classes, **spec), policy_for(classes))
    assert decision.allowed, decision.message
    assert result is not None
    assert result["spec"].get("nodeSelector") == node_selector
    assert result["spec"].get("affinity") == affinity


def test_a_pod_already_pinned_gets_no_node_selection_step() -> None:
    spec = {"nodeSelector": {STRATEGY: "mps", PRODUCT: "Tesla-T4", REPLICAS: "4"}}
    decision, _ = admit(shared_pod([T4_MPS], **spec), policy_for([T4_MPS]))
    assert "node" not in decision.audit["mutations"]


REFUSED = [
    pytest.param([T4_MPS, A10G_TS], {"nodeSelector": {PRODUCT: "Tesla-T4-SHARED"}},
                 "nodeSelector nvidia.com/gpu.product=Tesla-T4-SHARED",
                 "their product label has no -SHARED suffix", id="SHARED-product-on-renamed"),
    pytest.param([T4_TS_PLAIN], {"nodeSelector": {PRODUCT: "Tesla-T4"}},
                 "nodeSelector nvidia.com/gpu.product=Tesla-T4",
                 "without renaming label the product Tesla-T4-SHARED",
                 id="plain-product-on-not-renamed"),
    pytest.param([T4_MPS], {"nodeSelector": {STRATEGY: "time-slicing"}},
                 "nodeSelector nvidia.com/gpu.sharing-strategy=time-slicing", "",
                 id="other-strategy"),
    pytest.param([A10G_TS], {"nodeSelector": {"nvidia.com/mps.capable": "true"}},
                 "nodeSelector nvidia.com/mps.capable=true", "", id="mps-capable-on-time-slicing"),
    pytest.param([T4_MPS, A10G_TS],
                 {"affinity": required([expr(PRODUCT, op="DoesNotExist")])},
                 "affinity nvidia.com/gpu.product DoesNotExist ()", "", id="product-DoesNotExist"),
    pytest.param([T4_MPS, A10G_TS],
                 {"affinity": required([expr(PRODUCT, "H100", "B200")])},
                 "affinity nvidia.com/gpu.product In (H100, B200)", "", id="other-products"),
    pytest.param([T4_MPS], {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}},
                 "node affinity", "", id="empty-term-matches-nothing"),
]


@pytest.mark.parametrize(("classes", "spec", "described", "hint"), REFUSED)
def test_a_selection_no_allowed_class_can_satisfy_is_refused_with_the_reason(
    classes: list[dict[str, Any]], spec: dict[str, Any], described: str, hint: str
) -> None:
    decision, result = admit(shared_pod(classes, **spec), policy_for(classes))
    assert result is None
    assert [v.rule for v in decision.violations] == ["node-selection"]
    message = decision.message
    assert message.startswith(
        f"node selection matches no allowed class: the pod's {described} matches no node class"
    )
    assert hint in message
    for c in classes:
        assert c["name"] in message
