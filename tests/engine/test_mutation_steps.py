"""The six mutation steps (README.md, "What it does"), one table per step, on the exact
patch operations."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kube import (
    A10G_TS,
    PROFILES,
    T4_MPS,
    admit,
    container,
    env_of,
    make_policy,
    pod,
    review,
    shared,
)

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SHARED_TOLERATION = {"key": "nvidia.com/gpu.shared", "operator": "Exists", "effect": "NoSchedule"}


def mps_policy(**spec: Any) -> Any:
    return make_policy([T4_MPS], profiles=PROFILES, default_profile="medium", **spec)


def ops_at(patch: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [op for op in patch if op["path"].startswith(prefix)]


# --------------------------------------------------------------------------- 1. runtime class

@pytest.mark.parametrize(
    ("spec", "policy_spec", "expected"),
    [
        pytest.param({}, {}, [{"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"}],
                     id="absent-is-added"),
        pytest.param({"runtimeClassName": "nvidia"}, {}, [], id="present-is-kept"),
        pytest.param({}, {"runtimeClassName": "nvidia-cdi"},
                     [{"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia-cdi"}],
                     id="policy-names-the-class"),
        pytest.param({"runtimeClassName": ""}, {},
                     [{"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"}],
                     id="empty-counts-as-absent"),
    ],
)
def test_runtime_class_is_set_when_absent(spec: dict[str, Any], policy_spec: dict[str, Any],
                                          expected: list[dict[str, Any]]) -> None:
    decision, _ = admit(pod(**spec), mps_policy(**policy_spec))
    assert ops_at(decision.patch, "/spec/runtimeClassName") == expected


# --------------------------------------------------------------------------- 2. tolerations

@pytest.mark.parametrize(
    ("existing", "policy_spec", "expected"),
    [
        pytest.param(None, {}, [{"op": "add", "path": "/spec/tolerations",
                                 "value": [GPU_TOLERATION, SHARED_TOLERATION]}],
                     id="none-both-added-as-a-list"),
        pytest.param([GPU_TOLERATION], {},
                     [{"op": "add", "path": "/spec/tolerations/-", "value": SHARED_TOLERATION}],
                     id="equal-one-not-repeated-other-appended"),
        pytest.param([{"operator": "Exists"}], {}, [], id="tolerate-everything-covers-both"),
        pytest.param([{"key": "nvidia.com/gpu", "operator": "Exists"},
                      {"key": "nvidia.com/gpu.shared", "operator": "Exists"}], {}, [],
                     id="any-effect-covers-noschedule"),
        pytest.param([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                       "effect": "NoSchedule"}], {},
                     [{"op": "add", "path": "/spec/tolerations/-", "value": GPU_TOLERATION},
                      {"op": "add", "path": "/spec/tolerations/-", "value": SHARED_TOLERATION}],
                     id="equal-value-does-not-cover-exists"),
        pytest.param([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], {},
                     [{"op": "add", "path": "/spec/tolerations/-", "value": GPU_TOLERATION},
                      {"op": "add", "path": "/spec/tolerations/-", "value": SHARED_TOLERATION}],
                     id="other-effect-does-not-cover"),
        pytest.param(None, {"tolerateResourceTaint": False},
                     [{"op": "add", "path": "/spec/tolerations", "value": [GPU_TOLERATION]}],
                     id="resource-taint-switched-off"),
        pytest.param(None, {"tolerations": [{"key": "gpu-node", "operator": "Equal",
                                             "value": "shared", "effect": "NoSchedule"}]},
                     [{"op": "add", "path": "/spec/tolerations",
                       "value": [{"key": "gpu-node", "operator": "Equal", "value": "shared",
                                  "effect": "NoSchedule"}, SHARED_TOLERATION]}],
                     id="policy-tolerations"),
    ],
)
def test_tolerations_are_added_only_when_not_already_tolerated(
    existing: list[dict[str, Any]] | None, policy_spec: dict[str, Any],
    expected: list[dict[str, Any]],
) -> None:
    spec = {} if existing is None else {"tolerations": existing}
    decision, result = admit(pod(**spec), mps_policy(**policy_spec))
    assert ops_at(decision.patch, "/spec/tolerations") == expected
    assert result is not None


def test_tolerations_keep_what_earlier_admission_plugins_added() -> None:
    # DefaultTolerationSeconds runs before webhooks: its entries stay, ours go after them.
    earlier = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 300}]
    _, result = admit(pod(tolerations=earlier), mps_policy())
    assert result is not None
    assert result["spec"]["tolerations"] == [*earlier, GPU_TOLERATION, SHARED_TOLERATION]


# --------------------------------------------------------------------------- 4. MPS limits

def test_mps_limits_go_on_every_container_that_uses_the_shared_gpu() -> None:
    p = pod(shared(name="a"), shared(name="b"), container("sidecar"),
            init=[shared(name="warmup")])
    _, result = admit(p, mps_policy())
    assert result is not None
    limits = {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=3840M",
    }
    assert env_of(result, "a") == limits
    assert env_of(result, "b") == limits
    assert env_of(result, "warmup", "initContainers") == limits
    assert env_of(result, "sidecar") == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_mps_limits_are_appended_to_an_existing_env_list() -> None:
    p = pod(shared(env=[{"name": "HF_HOME", "value": "/cache"}]))
    decision, result = admit(p, mps_policy())
    assert ops_at(decision.patch, "/spec/containers/0/env") == [
        {"op": "add", "path": "/spec/containers/0/env/-",
         "value": {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "25"}},
        {"op": "add", "path": "/spec/containers/0/env/-",
         "value": {"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=3840M"}},
    ]
    assert result is not None


def test_a_lower_value_set_by_the_user_is_kept() -> None:
    p = pod(shared(env=[{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "5"}]))
    _, result = admit(p, mps_policy())
    assert result is not None
    assert env_of(result) == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "5",
                              "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=3840M"}


def test_the_profile_annotation_picks_the_size() -> None:
    p = pod(annotations={"gpu-share.io/profile": "small"})
    _, result = admit(p, mps_policy())
    assert result is not None
    assert env_of(result) == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "10",
                              "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1536M"}


def test_a_profile_may_set_one_limit_only() -> None:
    policy = make_policy([T4_MPS], profiles={"threads": {"activeThreadPercentage": 20}})
    _, result = admit(pod(), policy)
    assert result is not None
    assert env_of(result) == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "20"}


def test_memory_limit_names_every_device_a_multi_gpu_container_gets() -> None:
    big = {**T4_MPS, "gpusPerNode": 4, "failRequestsGreaterThanOne": False}
    policy = make_policy([big], profiles=PROFILES, default_profile="medium")
    _, result = admit(pod(shared(2)), policy)
    assert result is not None
    assert env_of(result)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=3840M,1=3840M"


def test_no_mps_limits_when_the_pod_can_only_land_on_time_slicing_nodes() -> None:
    policy = make_policy([A10G_TS], profiles=PROFILES, default_profile="medium")
    decision, result = admit(pod(), policy)
    assert result is not None
    assert env_of(result) == {}
    assert "mps-limits" not in decision.audit["mutations"]


# --------------------------------------------------------------------------- 5. void devices

@pytest.mark.parametrize(
    ("sidecar", "rules", "expected_env"),
    [
        pytest.param(container("log"), {}, {"NVIDIA_VISIBLE_DEVICES": "void"}, id="added"),
        pytest.param(container("log", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]),
                     {}, {"NVIDIA_VISIBLE_DEVICES": "void"}, id="void-is-kept"),
        pytest.param(container("log", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": ""}]),
                     {}, {"NVIDIA_VISIBLE_DEVICES": ""}, id="empty-is-kept"),
        pytest.param(container("log"), {"voidVisibleDevicesWithoutGpu": False},
                     {"NVIDIA_VISIBLE_DEVICES": "void"},
                     id="switched-to-gpu-pods-only-still-in-a-gpu-pod"),
    ],
)
def test_containers_that_ask_for_no_gpu_see_none(
    sidecar: dict[str, Any], rules: dict[str, Any], expected_env: dict[str, str]
) -> None:
    _, result = admit(pod(shared(), sidecar), mps_policy(rules=rules))
    assert result is not None
    assert env_of(result, "log") == expected_env


def test_init_containers_that_ask_for_no_gpu_see_none() -> None:
    _, result = admit(pod(shared(), init=[container("fetch")]), mps_policy())
    assert result is not None
    assert env_of(result, "fetch", "initContainers") == {"NVIDIA_VISIBLE_DEVICES": "void"}


# --------------------------------------------------------------------------- 6. annotations

def test_annotations_record_policy_profile_and_what_was_done() -> None:
    decision, result = admit(pod(), mps_policy())
    assert result is not None
    assert result["metadata"]["annotations"] == {
        "gpu-share.io/policy": "test",
        "gpu-share.io/profile": "medium",
        "gpu-share.io/mutations": "mps-limits,node-selection,runtime-class,tolerations",
    }
    assert decision.audit == {
        "policy": "test", "profile": "medium", "classes": "t4-mps",
        "mutations": "runtime-class,tolerations,node-selection,mps-limits",
    }
    assert decision.warnings == []


def test_annotations_are_added_key_by_key_to_existing_ones() -> None:
    decision, _ = admit(pod(annotations={"team": "vision"}), mps_policy())
    assert ops_at(decision.patch, "/metadata") == [
        {"op": "add", "path": "/metadata/annotations/gpu-share.io~1policy", "value": "test"},
        {"op": "add", "path": "/metadata/annotations/gpu-share.io~1profile", "value": "medium"},
        {"op": "add", "path": "/metadata/annotations/gpu-share.io~1mutations",
         "value": "mps-limits,node-selection,runtime-class,tolerations"},
    ]


def test_a_policy_annotation_set_by_the_user_is_corrected() -> None:
    _, result = admit(pod(annotations={"gpu-share.io/policy": "premium"}), mps_policy())
    assert result is not None
    assert result["metadata"]["annotations"]["gpu-share.io/policy"] == "test"


def test_a_reinvocation_after_another_webhook_added_a_container_records_both_passes() -> None:
    policy = mps_policy()
    _, first = admit(pod(), policy)
    assert first is not None
    first["spec"]["containers"].append(container("istio-proxy"))
    decision, second = admit(first, policy)
    assert second is not None
    assert decision.patch == [
        {"op": "add", "path": "/spec/containers/1/env",
         "value": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]},
        {"op": "add", "path": "/metadata/annotations/gpu-share.io~1mutations",
         "value": "mps-limits,node-selection,runtime-class,tolerations,visible-devices"},
    ]


@pytest.mark.parametrize(
    ("obj", "rules", "voided"),
    [
        pytest.param(pod(container()), {}, ["main"], id="pod-without-gpu"),
        pytest.param(pod(container(limits={"nvidia.com/gpu.shared": 0})), {}, ["main"],
                     id="zero-shared-is-none"),
        pytest.param(pod(container(limits={"nvidia.com/gpu": 1}), container("log")), {},
                     ["log"], id="exclusive-gpu-pod-sidecar"),
        pytest.param(pod(container(), container("b")), {"voidVisibleDevicesWithoutGpu": False},
                     [], id="switched-to-gpu-pods-only"),
        pytest.param(pod(container(limits={"nvidia.com/gpu": 1}), container("log")),
                     {"voidVisibleDevicesWithoutGpu": False}, ["log"],
                     id="switched-to-gpu-pods-only-exclusive-gpu-pod"),
    ],
)
def test_every_pod_of_the_namespace_hides_gpus_from_containers_that_ask_for_none(
    obj: dict[str, Any], rules: dict[str, Any], voided: list[str]
) -> None:
    decision, result = admit(obj, mps_policy(rules=rules))
    assert result is not None
    hidden = [c["name"] for c in result["spec"]["containers"]
              if env_of(result, c["name"]).get("NVIDIA_VISIBLE_DEVICES") == "void"]
    assert hidden == voided
    if voided:
        assert decision.mutations == ["visible-devices"]
        assert result["metadata"]["annotations"] == {
            "gpu-share.io/policy": "test", "gpu-share.io/mutations": "visible-devices"}
    else:
        assert decision.patch == []


# --------------------------------------------------------------------------- what is untouched

@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(pod(container(limits={"nvidia.com/gpu": 1})), id="exclusive-gpu"),
        pytest.param({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                      "spec": {"ports": [{"port": 80}]}}, id="other-kind"),
        pytest.param({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}},
                     id="pod-without-spec"),
        pytest.param(pod(shared(2), annotations={"kubernetes.io/config.mirror": "abc"}),
                     id="mirror-pod"),
        pytest.param(pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}])),
                     id="only-gpu-setting-is-void"),
    ],
)
def test_objects_with_nothing_to_change_pass_untouched(obj: dict[str, Any]) -> None:
    decision = review(obj, mps_policy())
    assert decision.allowed
    assert decision.patch == []
    assert decision.warnings == []
