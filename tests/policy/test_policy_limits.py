"""The limits an admin can write in a policy: profiles as ceilings, exclusive GPUs (allowed,
how many per pod, which resources are GPUs) and driver capabilities. Each defaults to what
the webhook did before it existed, so a policy file that leaves it out is judged as before.
The refusals' exact words are rows of tests/engine/rule_cases.py and tests/engine/route_cases.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.engine.rule_cases import env, lab
from tests.support.kube import T4_MPS, admit, container, env_of, pod, review, shared, workload
from webhook import cli
from webhook.engine import facts, rules, structs, view

CAPS = "NVIDIA_DRIVER_CAPABILITIES"


# --------------------------------------------------------------------------- the defaults


@pytest.mark.parametrize(
    "obj",
    [
        pod(shared(env=[env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=3G")]),
            annotations={"gpu-share.io/profile": "small"}),
        pod(container(limits={"nvidia.com/gpu": 8})),
        pod(shared(env=[env(CAPS, "all")])),
        pod(container(limits={"nvidia.com/GA102GL_A10": 4})),
    ],
    ids=["mps-above-the-profile", "eight-whole-gpus", "all-capabilities", "passthrough"],
)
def test_a_policy_that_sets_no_limit_decides_as_before(obj: dict[str, Any]) -> None:
    decision, result = admit(obj, lab(T4_MPS))
    assert decision.allowed, decision.message
    assert result is not None
    assert not any(CAPS in str(op) for op in decision.patch), decision.patch


# --------------------------------------------------------------------------- profiles


def test_above_the_profile_is_a_warning_unless_profiles_are_ceilings() -> None:
    obj = pod(shared(env=[env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "20")]),
              annotations={"gpu-share.io/profile": "small"})
    decision, _ = admit(obj, lab(T4_MPS))
    assert decision.allowed
    assert any("is above profile" in w for w in decision.warnings), decision.warnings
    refused, _ = admit(obj, lab(T4_MPS, profilesAreCeilings=True))
    assert [v.rule for v in refused.violations] == ["mps-limits"]


def test_at_the_profile_passes_where_profiles_are_ceilings() -> None:
    obj = pod(shared(env=[env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "10"),
                          env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1536M")]),
              annotations={"gpu-share.io/profile": "small"})
    decision, _ = admit(obj, lab(T4_MPS, profilesAreCeilings=True))
    assert decision.allowed, decision.message


def test_a_relaxed_profile_ceiling_still_pins_the_pod() -> None:
    """In warn mode the pod is admitted, pinned where its profile fits: the refusal does not
    stop the placement."""
    obj = pod(shared(env=[env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=8G")]))
    policy = lab(T4_MPS, profilesAreCeilings=True, ruleModes={"mps-limits": "warn"})
    decision, result = admit(obj, policy)
    assert decision.allowed
    assert any("would be refused (rule mps-limits)" in w for w in decision.warnings)
    assert result is not None
    assert result["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "Tesla-T4"


# --------------------------------------------------------------------------- exclusive GPUs


def _usage(count: int, group: str = "containers", *, sidecar: bool = False) -> Any:
    container = structs.Container(restartPolicy="Always" if sidecar else None)
    c = view.Slot(group, 0, "c", container, True)
    return c, facts.Usage((), ("nvidia.com/gpu",) if count else (), count)


@pytest.mark.parametrize(
    ("containers", "held"),
    [
        ([_usage(2), _usage(3)], 5),
        # An init container gives its GPUs back before the others start.
        ([_usage(4, "initContainers"), _usage(1)], 4),
        ([_usage(1, "initContainers"), _usage(3)], 3),
        # A sidecar keeps its GPUs beside the containers and the init containers after it.
        ([_usage(1, "initContainers", sidecar=True), _usage(2, "initContainers"), _usage(2)], 3),
        ([_usage(1, "initContainers", sidecar=True), _usage(3, "initContainers"), _usage(1)], 4),
        ([_usage(0)], 0),
    ],
    ids=["containers-add-up", "init-peak", "containers-peak", "sidecar-with-containers",
         "sidecar-with-a-later-init", "none"],
)
def test_exclusive_gpus_are_counted_as_the_scheduler_counts_a_pod(
    containers: list[Any], held: int
) -> None:
    assert rules.held_at_once(tuple(containers)) == held


def test_at_most_the_count_passes() -> None:
    obj = pod(container("a", limits={"nvidia.com/gpu": 2}),
              init=[container("setup", limits={"nvidia.com/gpu": 2})])
    decision, _ = admit(obj, lab(exclusiveGpus={"maxPerPod": 2}))
    assert decision.allowed, decision.message


def test_a_passthrough_resource_is_a_gpu_for_every_gpu_pod_rule() -> None:
    """Counted as a GPU, its pod gets the GPU pods' rules: here, added capabilities (Pod
    Security's host-access checks, which judge every pod, switched off)."""
    obj = pod(container(limits={"nvidia.com/GA102GL_A10": 1},
                        securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}))
    assert admit(obj, lab(rules={"denyHostAccess": False}))[0].allowed
    policy = lab(exclusiveGpus={"passthroughResources": ["nvidia.com/GA102GL_*"]},
                 rules={"denyHostAccess": False})
    assert [v.rule for v in admit(obj, policy)[0].violations] == ["capabilities"]


def test_a_not_renamed_policy_counts_its_shared_resource_as_shared() -> None:
    """Where `nvidia.com/gpu` is the shared resource, asking for it is no whole GPU."""
    not_renamed = {**T4_MPS, "renamed": False}
    policy = lab(not_renamed, sharedResources=["nvidia.com/gpu"],
                 exclusiveGpus={"allowed": False})
    decision, _ = admit(pod(shared(resource="nvidia.com/gpu")), policy)
    assert decision.allowed, decision.message


# --------------------------------------------------------------------------- capabilities


@pytest.mark.parametrize(
    ("value", "given"),
    [
        ("compute,utility", {"compute", "utility"}),
        (" compute , video", {"compute", "video"}),
        ("", {"compute", "utility"}),
        (",", {"compute", "utility"}),
        ("all", {"compute", "compat32", "graphics", "utility", "video", "display", "ngx"}),
        ("compute,warp", {"compute", "warp"}),
    ],
)
def test_a_capabilities_value_is_read_as_the_toolkit_reads_it(value: str, given: set[str]) -> None:
    assert rules.capabilities_of(value) == given


def test_the_policys_capabilities_are_set_on_gpu_containers_that_set_none() -> None:
    obj = pod(container(limits={"nvidia.com/gpu": 2}), container("side"),
              container("own", limits={"nvidia.com/gpu": 1}, env=[env(CAPS, "compute")]),
              init=[container("fetch", limits={"nvidia.com/gpu": 1})])
    policy = lab(driverCapabilities=["compute", "utility", "video"])
    decision, result = admit(obj, policy)
    assert decision.allowed, decision.message
    assert result is not None
    assert env_of(result, "main")[CAPS] == "compute,utility,video"
    assert env_of(result, "fetch", "initContainers")[CAPS] == "compute,utility,video"
    assert env_of(result, "own")[CAPS] == "compute"
    assert CAPS not in env_of(result, "side")
    assert "driver-capabilities" in result["metadata"]["annotations"]["gpu-share.io/mutations"]


def test_the_validating_webhook_requires_the_capabilities() -> None:
    policy = lab(driverCapabilities=["compute", "utility"])
    obj = pod(container(limits={"nvidia.com/gpu": 1}))
    decision = review(obj, policy, mutate=False, require=True)
    assert [v.rule for v in decision.violations] == ["driver-capabilities"]
    assert "missing NVIDIA_DRIVER_CAPABILITIES=compute,utility" in decision.message


def test_a_workload_template_is_refused_only_for_what_it_sets() -> None:
    policy = lab(driverCapabilities=["compute", "utility"])
    assert review(workload("Deployment", pod(shared())), policy, mutate=False).allowed
    bad = workload("Deployment", pod(shared(env=[env(CAPS, "graphics")])))
    assert [v.rule for v in review(bad, policy, mutate=False).violations] == [
        "driver-capabilities"]


# --------------------------------------------------------------------------- the policy file


def _check(tmp_path: Path, spec: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    (tmp_path / "p.yaml").write_text(
        "apiVersion: gpu-share.io/v1alpha1\nkind: SharingPolicy\nmetadata: {name: p}\n"
        f"spec:\n{spec}")
    code = cli.main(["policy", "check", str(tmp_path)])
    lines = [line.split(": ", 2)[-1] for line in capsys.readouterr().err.splitlines()
             if line.startswith("error: ")]
    assert (code == 0) == (lines == [])
    return lines


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("  exclusiveGpus: {maxPerPod: 8}\n", None),
        ("  nodeClasses: []\n", "at least one class is needed, unless the policy has a dra"),
        ("  exclusiveGpus: {passthroughResources: [example.com/gpu]}\n",
         "is not an NVIDIA resource name, * for any characters, such as nvidia.com/GA102GL_*"),
        ("  exclusiveGpus: {maxPerPod: 0}\n", "greater than or equal to 1"),
        ("  exclusiveGpus: {}\n  driverCapabilities: [compute, compute]\n",
         "a capability is listed twice"),
        ("  exclusiveGpus: {}\n  driverCapabilities: [all]\n", "Input should be 'compute'"),
        ("  exclusiveGpus: {}\n  driverCapabilities: []\n", "at least 1 item"),
    ],
    ids=["exclusive-only", "no-classes", "pattern-of-another-domain", "max-zero",
         "capability-twice", "all-is-no-capability", "no-capability"],
)
def test_the_limits_are_validated_with_the_field_and_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, problem: str | None
) -> None:
    problems = _check(tmp_path, spec, capsys)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1, problems
        assert problem in problems[0], problems


def test_a_replica_count_a_relaxed_rule_admits_names_no_more_devices_than_a_node_has() -> None:
    """2.8 trillion replicas, admitted where multi-replica is in warn mode: the MPS limit the
    webhook writes names the devices a node of the class has, not one per replica (that
    string would not fit in memory), and a profile ceiling checks as many."""
    obj = pod(shared(2_807_926_050_458))
    decision, result = admit(obj, lab(T4_MPS, ruleModes={"multi-replica": "warn"}))
    assert decision.allowed
    assert result is not None
    assert env_of(result)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=3840M"
    ceiling = lab(T4_MPS, profilesAreCeilings=True, ruleModes={"multi-replica": "warn"})
    limited = pod(shared(2_807_926_050_458, env=[env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "7=1K")]))
    assert "does not limit device 0 of the 1 it gets" in review(limited, ceiling).message
