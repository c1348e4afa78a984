"""MPS ceilings: 100/replicas % and memory/replicas MiB per class; a profile or a user value
above a class's ceiling keeps the pod off that class, above every class it is refused; the
values are written as CUDA reads them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kube import admit, env_of, make_policy, pod, shared

T4 = {"name": "t4", "product": "Tesla-T4", "strategy": "mps", "replicas": 4, "memoryMiB": 15360}
L4 = {"name": "l4", "product": "NVIDIA-L4", "strategy": "mps", "replicas": 2, "memoryMiB": 23034}
T4_3 = {"name": "t4-3", "product": "Tesla-T4", "strategy": "mps", "replicas": 3,
        "memoryMiB": 15360}


@pytest.mark.parametrize(
    ("threads", "memory", "admitted"),
    [
        pytest.param(25, 3840, "t4,l4", id="at-the-t4-ceiling-both"),
        pytest.param(26, 3840, "l4", id="threads-above-t4"),
        pytest.param(25, 3841, "l4", id="memory-above-t4"),
        pytest.param(50, 11517, "l4", id="at-the-l4-ceiling"),
    ],
)
def test_a_profile_above_a_class_ceiling_excludes_that_class(
    threads: int, memory: int, admitted: str
) -> None:
    policy = make_policy([T4, L4], profiles={"p": {"activeThreadPercentage": threads,
                                                   "pinnedMemoryMiB": memory}})
    decision, result = admit(pod(), policy)
    assert result is not None
    assert decision.audit["classes"] == admitted
    assert env_of(result) == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(threads),
                              "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={memory}M"}


def test_ceilings_use_integer_division_as_the_mps_daemon_does() -> None:
    ok = make_policy([T4_3], profiles={"p": {"activeThreadPercentage": 33,
                                             "pinnedMemoryMiB": 5120}})
    assert admit(pod(), ok)[0].allowed
    policy = make_policy([T4_3, L4], profiles={"p": {"activeThreadPercentage": 34}})
    assert admit(pod(), policy)[0].audit["classes"] == "l4"


def test_a_profile_above_every_class_the_pod_may_use_is_refused() -> None:
    policy = make_policy([T4, L4], name="lab", profiles={"half": {"activeThreadPercentage": 50}})
    decision, result = admit(pod(nodeSelector={"nvidia.com/gpu.product": "Tesla-T4"}), policy)
    assert result is None
    assert decision.message == (
        'profile too large: "half" is above the MPS ceiling of every node class the pod may use'
        ' (t4: 50% > 25% (profile "half")). Choose a smaller profile with the annotation'
        " gpu-share.io/profile (rule mps-limits)"
    )


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        pytest.param("0=3840M", True, id="at-ceiling"),
        pytest.param("0=3841M", False, id="above"),
        pytest.param("0=3840MB", True, id="MB"),
        pytest.param("0=3G", True, id="G"),
        pytest.param("0=4G", False, id="G-above"),
        pytest.param("0=1G,1=4G", False, id="largest-counts"),
        pytest.param("GPU-6f1c2d3e=2G", True, id="uuid"),
    ],
)
def test_user_memory_limits_are_read_as_cuda_reads_them(value: str, allowed: bool) -> None:
    policy = make_policy([T4], profiles={"p": {"pinnedMemoryMiB": 1024}})
    p = pod(shared(env=[{"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": value}]))
    decision, result = admit(p, policy)
    assert decision.allowed is allowed, decision.message
    if allowed:
        assert result is not None
        assert env_of(result)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == value


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        pytest.param("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "4096", '"4096" is not', id="no-unit"),
        pytest.param("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=16000", '"0=16000" is not',
                     id="no-unit-with-device"),
        pytest.param("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=15Gi", '"0=15Gi" is not',
                     id="kubernetes-unit"),
        pytest.param("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=", '"0=" is not', id="no-size"),
        pytest.param("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "=4G", '"=4G" is not', id="no-device"),
        pytest.param("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "", '"" is not', id="empty"),
        pytest.param("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G," * 300, "is not",
                     id="very-long"),
        pytest.param("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "200", '"200" is not a whole number'
                     " from 1 to 100", id="threads-above-100"),
        pytest.param("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "0", '"0" is not', id="threads-zero"),
        pytest.param("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "abc", '"abc" is not', id="threads-text"),
        pytest.param("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "12.5", '"12.5" is not',
                     id="threads-decimal"),
        pytest.param("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "\u0662\u0665", "is not",
                     id="threads-arabic-indic-digits"),
        pytest.param("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "$(OTHER)", "refers to another"
                     " variable", id="threads-reference"),
    ],
)
def test_an_unreadable_user_limit_is_refused_not_skipped(
    variable: str, value: str, problem: str
) -> None:
    policy = make_policy([T4], profiles={"p": {"pinnedMemoryMiB": 1024}})
    p = pod(shared(env=[{"name": variable, "value": value}]))
    decision, result = admit(p, policy)
    assert result is None
    [violation] = decision.violations
    assert (violation.rule, violation.container) == ("mps-limits", "main")
    assert violation.message.startswith(f'container "main": {variable} (spec.containers[0].env[0])')
    assert problem in violation.message
    assert len(violation.message) < 400


def test_a_user_limit_from_value_from_is_refused() -> None:
    policy = make_policy([T4], profiles={"p": {"pinnedMemoryMiB": 1024}})
    var = {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
           "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}
    decision, _ = admit(pod(shared(env=[var])), policy)
    assert decision.message == (
        'container "main": CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (spec.containers[0].env[0]) comes'
        " from valueFrom, which cannot be read at admission; MPS limits are checked against the"
        " node's ceiling before the pod runs. Set a plain value, or remove it for the profile's"
        " (rule mps-limits)"
    )


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        pytest.param({"activeThreadPercentage": 7, "pinnedMemoryMiB": 2048},
                     {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "7",
                      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2048M"}, id="both"),
        pytest.param({"pinnedMemoryMiB": 100}, {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=100M"},
                     id="memory-only"),
    ],
)
def test_values_are_formatted_as_cuda_reads_them(
    profile: dict[str, Any], expected: dict[str, str]
) -> None:
    _, result = admit(pod(), make_policy([T4], profiles={"p": profile}))
    assert result is not None
    assert env_of(result) == expected
