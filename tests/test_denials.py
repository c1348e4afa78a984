"""Every denial rule of SPEC.md: the rule, the container, and the exact message (rule + fix)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kube import (
    A10G_TS,
    PROFILES,
    T4_MPS,
    admit,
    container,
    make_policy,
    pod,
    shared,
    workload,
)
from webhook import mutating, policies



def lab(*classes: dict[str, Any], **spec: Any) -> policies.Policy:
    return make_policy(list(classes) or [T4_MPS, A10G_TS], profiles=PROFILES,
                       default_profile="medium", name="lab", **spec)


CASES = [
    pytest.param(
        pod(shared(2)), lab(), "multi-replica", "main",
        'container "main": invalid multi-replica request: nvidia.com/gpu.shared: 2. More'
        " replicas of a shared GPU give no more GPU time (each process gets an equal share),"
        " and here: t4-mps fails such requests after scheduling (failRequestsGreaterThanOne:"
        " the pod would die with UnexpectedAdmissionError); a10g-ts has one GPU per node, so"
        " every replica is the same GPU. Ask for nvidia.com/gpu.shared: 1.",
        id="multi-replica",
    ),
    pytest.param(
        pod(shared(3)),
        lab({**A10G_TS, "gpusPerNode": 2}), "multi-replica", "main",
        'container "main": invalid multi-replica request: nvidia.com/gpu.shared: 3. More'
        " replicas of a shared GPU give no more GPU time (each process gets an equal share),"
        " and here: a10g-ts has 2 GPUs per node, so 3 replicas repeat a GPU. Ask for"
        " nvidia.com/gpu.shared: 1.",
        id="multi-replica-more-than-gpus-per-node",
    ),
    pytest.param(
        pod(container(limits={"nvidia.com/gpu.shared": 1},
                      requests={"nvidia.com/gpu.shared": 2})),
        lab(), "requests-limits-mismatch", "main",
        'container "main": requests and limits disagree: nvidia.com/gpu.shared requests 2,'
        " limits 1; they must be equal. Set both to 1, or set only limits.",
        id="requests-and-limits-disagree",
    ),
    pytest.param(
        pod(container(requests={"nvidia.com/gpu.shared": "1"})),
        lab(), "requests-limits-mismatch", "main",
        'container "main": requests and limits disagree: requests nvidia.com/gpu.shared: 1'
        " with no limit, and an extended resource is asked for in limits. Set limits"
        " nvidia.com/gpu.shared: 1 (requests may then be left out).",
        id="requests-without-limits",
    ),
    pytest.param(
        pod(shared("500m")), lab(), "invalid-quantity", "main",
        "container \"main\": invalid quantity: nvidia.com/gpu.shared: '500m' is not a whole"
        " number of devices. Ask for nvidia.com/gpu.shared: 1.",
        id="fractional-quantity",
    ),
    pytest.param(
        pod(shared(name="infer"), container("train", limits={"nvidia.com/gpu": 1})),
        lab(), "exclusive-with-shared", None,
        'exclusive and shared GPUs in one pod: container "train" asks for nvidia.com/gpu,'
        ' container "infer" for nvidia.com/gpu.shared; one pod lands on one kind of node. Ask'
        " for nvidia.com/gpu.shared only, or run the exclusive GPU in a pod of its own (policy"
        ' "lab", rule denyExclusiveWithShared).',
        id="exclusive-and-shared",
    ),
    pytest.param(
        pod(runtimeClassName="runc"), lab(), "runtime-class", None,
        'runtime class: runtimeClassName "runc" is not the one policy "lab" uses for shared'
        ' GPUs ("nvidia"). Remove runtimeClassName (the webhook sets it) or set it to "nvidia".',
        id="other-runtime-class",
    ),
    pytest.param(
        pod(annotations={"gpu-share.io/profile": "xl"}), lab(), "unknown-profile", None,
        'unknown profile: "xl" (annotation gpu-share.io/profile); policy "lab" offers: medium,'
        ' small. Use one of them, or remove the annotation for the default "medium".',
        id="unknown-profile",
    ),
    pytest.param(
        pod(shared(env=[{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "60"}])),
        lab(T4_MPS), "mps-above-ceiling", None,
        'container "main": MPS limit above the ceiling: CUDA_MPS_* set in the pod exceed the'
        ' MPS ceiling of every node class it may use (t4-mps: 60% > 25% ("main"'
        " CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=60)), and MPS can only lower the daemon's limit"
        " (100/replicas %, memory/replicas MiB). Remove them or set them at most to the"
        " ceiling.",
        id="user-threads-above-ceiling",
    ),
    pytest.param(
        pod(shared(env=[{"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=8G"}])),
        lab(T4_MPS), "mps-above-ceiling", None,
        'container "main": MPS limit above the ceiling: CUDA_MPS_* set in the pod exceed the'
        ' MPS ceiling of every node class it may use (t4-mps: 8192 MiB > 3840 MiB ("main"'
        " CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G)), and MPS can only lower the daemon's limit"
        " (100/replicas %, memory/replicas MiB). Remove them or set them at most to the"
        " ceiling.",
        id="user-memory-above-ceiling",
    ),
    pytest.param(
        pod(shared(securityContext={"privileged": True})), lab(), "privileged", "main",
        'container "main": privileged container in a pod that uses a shared GPU: a privileged'
        " container sees every GPU of the node. Remove securityContext.privileged (policy"
        ' "lab", rule denyPrivileged).',
        id="privileged",
    ),
    pytest.param(
        pod(shared(), container("exporter", env=[{"name": "NVIDIA_VISIBLE_DEVICES",
                                                  "value": "all"}])),
        lab(), "visible-devices-without-gpu", "exporter",
        'container "exporter": NVIDIA_VISIBLE_DEVICES without a GPU: NVIDIA_VISIBLE_DEVICES=all'
        " on a container that asks for no GPU exposes GPUs outside the device plugin's"
        " allocation. Remove it, or ask for nvidia.com/gpu.shared: 1 if the container needs a"
        ' GPU (policy "lab", rule denyVisibleDevicesWithoutGpu).',
        id="visible-devices-without-gpu",
    ),
    pytest.param(
        pod(container("escape", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1"}])),
        lab(), "visible-devices-without-gpu", "escape",
        'container "escape": NVIDIA_VISIBLE_DEVICES without a GPU: NVIDIA_VISIBLE_DEVICES=0,1'
        " on a container that asks for no GPU exposes GPUs outside the device plugin's"
        " allocation. Remove it, or ask for nvidia.com/gpu.shared: 1 if the container needs a"
        ' GPU (policy "lab", rule denyVisibleDevicesWithoutGpu).',
        id="visible-devices-in-a-pod-without-shared-gpu",
    ),
    pytest.param(
        pod(nodeSelector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}), lab(),
        "node-selection", None,
        "node selection matches no allowed class: the pod's nodeSelector"
        " nvidia.com/gpu.product=Tesla-T4-SHARED matches no node class of policy \"lab\" that"
        " serves nvidia.com/gpu.shared: t4-mps [nvidia.com/gpu.sharing-strategy=mps,"
        " nvidia.com/gpu.product=Tesla-T4, nvidia.com/gpu.replicas=4]; a10g-ts"
        " [nvidia.com/gpu.sharing-strategy=time-slicing, nvidia.com/gpu.product=NVIDIA-A10G,"
        " nvidia.com/gpu.replicas=4]. Remove or change that selector (nodes that advertise"
        " nvidia.com/gpu.shared are renamed: their product label has no -SHARED suffix).",
        id="node-selection",
    ),
    pytest.param(
        pod(shared(name="a"), shared(name="b", resource="nvidia.com/mig-1g.10gb.shared")),
        lab(T4_MPS, {"name": "mig", "resource": "nvidia.com/mig-1g.10gb", "product": "A100-MIG",
                     "strategy": "time-slicing", "replicas": 2},
            sharedResources=["nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb.shared"]),
        "several-shared-resources", None,
        "several shared resources: the pod asks for nvidia.com/gpu.shared,"
        " nvidia.com/mig-1g.10gb.shared, and a node class serves one. Ask for one of them in"
        " every container.",
        id="several-shared-resources",
    ),
]


@pytest.mark.parametrize(("obj", "policy", "rule", "container_name", "message"), CASES)
def test_a_pod_that_breaks_a_rule_is_refused_with_the_rule_and_the_fix(
    obj: dict[str, Any], policy: policies.Policy, rule: str, container_name: str | None,
    message: str,
) -> None:
    decision, result = admit(obj, policy)
    assert result is None
    assert [(v.rule, v.container) for v in decision.violations] == [(rule, container_name)]
    assert decision.message == message


@pytest.mark.parametrize("kind", sorted(mutating.TEMPLATE_PATHS))
@pytest.mark.parametrize(("obj", "policy", "rule", "container_name", "message"), CASES)
def test_a_workload_whose_pods_would_break_a_rule_is_refused_the_same_way(
    kind: str, obj: dict[str, Any], policy: policies.Policy, rule: str,
    container_name: str | None, message: str,
) -> None:
    decision = mutating.review(workload(kind, obj), policy=policy, mutate=False)
    assert [(v.rule, v.container) for v in decision.violations] == [(rule, container_name)]
    assert decision.message == message
    assert decision.patch == []


def test_a_profile_of_another_policy_is_not_allowed_here() -> None:
    other = {**PROFILES, "large": {"activeThreadPercentage": 50}}
    team = make_policy([T4_MPS], name="team", profiles=PROFILES, default_profile="medium")
    premium = make_policy([{**T4_MPS, "replicas": 2}], name="premium", profiles=other)
    loaded = policies.build_set([team, premium])
    decision = mutating.review(pod(annotations={"gpu-share.io/profile": "large"}),
                               policy=loaded.policies["team"])
    assert decision.message == (
        'profile not allowed: "large" (annotation gpu-share.io/profile) is not one policy'
        ' "team" allows; it offers: medium, small. Use one of them, or remove the annotation'
        ' for the default "medium".'
    )


def test_a_profile_annotation_under_a_policy_without_profiles_is_refused() -> None:
    policy = make_policy([A10G_TS], name="ts")
    decision = mutating.review(pod(annotations={"gpu-share.io/profile": "small"}), policy=policy)
    assert decision.message == (
        'unknown profile: "small" (annotation gpu-share.io/profile), and policy "ts" defines no'
        " MPS profiles. Remove the annotation."
    )


def test_a_pod_breaking_several_rules_hears_of_each() -> None:
    p = pod(shared(2, securityContext={"privileged": True}), runtimeClassName="runc")
    decision, _ = admit(p, lab())
    assert [v.rule for v in decision.violations] == ["runtime-class", "privileged", "multi-replica"]


@pytest.mark.parametrize(
    ("rules", "obj"),
    [
        pytest.param({"denyPrivileged": False}, pod(shared(securityContext={"privileged": True})),
                     id="privileged-allowed"),
        pytest.param({"denyVisibleDevicesWithoutGpu": False},
                     pod(shared(), container("x", env=[{"name": "NVIDIA_VISIBLE_DEVICES",
                                                         "value": "all"}])),
                     id="visible-devices-allowed"),
        pytest.param({"denyExclusiveWithShared": False},
                     pod(shared(), container("x", limits={"nvidia.com/gpu": 1})),
                     id="mixing-allowed"),
    ],
)
def test_a_switched_off_rule_lets_the_pod_through(rules: dict[str, Any], obj: dict[str, Any]) -> None:
    decision, result = admit(obj, lab(rules=rules))
    assert decision.allowed, decision.message
    assert result is not None


@pytest.mark.parametrize(
    ("obj", "warning"),
    [
        pytest.param(pod(shared(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}])),
                     'container "main" sets NVIDIA_VISIBLE_DEVICES; the device plugin, not the'
                     " variable, decides which GPU it gets", id="visible-devices-on-gpu-container"),
        pytest.param(pod(shared(env=[{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                                      "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}])),
                     'container "main": CUDA_MPS_ACTIVE_THREAD_PERCENTAGE cannot be read, so is'
                     " not checked", id="mps-from-value-from"),
        pytest.param(pod(shared(env=[{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "20"}]),
                         annotations={"gpu-share.io/profile": "small"}),
                     'container "main": CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20 is above profile'
                     ' "small" (10%)', id="user-value-above-profile-below-ceiling"),
    ],
)
def test_what_a_user_should_know_but_is_not_refused_is_a_warning(
    obj: dict[str, Any], warning: str
) -> None:
    decision, result = admit(obj, lab(T4_MPS))
    assert result is not None
    assert warning in decision.warnings
    assert all(len(w) <= 120 and not w.lower().startswith("warning") for w in decision.warnings)


def test_an_excluded_class_is_reported_as_a_warning() -> None:
    decision, result = admit(pod(annotations={"gpu-share.io/profile": "big"}), make_policy(
        [T4_MPS, {**T4_MPS, "name": "l4-mps", "product": "NVIDIA-L4", "replicas": 2,
                  "memoryMiB": 23034}],
        profiles={"big": {"activeThreadPercentage": 50}}, name="lab"))
    assert result is not None
    assert decision.audit["classes"] == "l4-mps"
    assert decision.warnings == [
        "kept off node classes whose MPS ceiling is too low: t4-mps: 50% > 25% (profile \"big\")"
    ]
