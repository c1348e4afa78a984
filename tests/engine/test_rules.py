"""The table of rules (webhook/engine/rules.py): each rule refuses what it says, naming the
container, the rule and the fix; every violation of a pod is reported at once; workloads are
refused the same way; every switch turns its rule off; every rule of the table has a row in
RULE_CASES (tests/engine/rule_cases.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.engine.rule_cases import RULE_CASES, env, lab
from tests.support.kube import (
    A10G_TS,
    PROFILES,
    T4_MPS,
    WORKLOAD_KINDS,
    admit,
    container,
    in_template,
    make_policy,
    pod,
    review,
    shared,
    workload,
)
from webhook.engine import rules
from webhook.policy import hostpaths, policies

# The table, RULE_CASES, is tests/engine/rule_cases.py's (other tests judge its objects too):
# rows of (object, policy, [(rule, container)], message), each message exact, the rule's name
# last.


def _rules(decision: Any) -> list[tuple[str, str | None]]:
    return [(v.rule, v.container) for v in decision.violations]


@pytest.mark.parametrize(("obj", "policy", "found", "message"), RULE_CASES)
def test_a_pod_that_breaks_a_rule_is_refused_with_the_rule_and_the_fix(
    obj: dict[str, Any], policy: policies.Policy, found: list[tuple[str, str | None]],
    message: str,
) -> None:
    decision, result = admit(obj, policy)
    assert result is None
    assert _rules(decision) == found
    assert decision.message == message


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
@pytest.mark.parametrize(("obj", "policy", "found", "message"), RULE_CASES)
def test_a_workload_whose_pods_would_break_a_rule_is_refused_the_same_way(
    kind: str, obj: dict[str, Any], policy: policies.Policy,
    found: list[tuple[str, str | None]], message: str,
) -> None:
    w = workload(kind, obj)
    decision = review(w, policy, mutate=False)
    assert _rules(decision) == found
    # The same words, each field named where it is in the workload.
    assert decision.message == in_template(message, kind)
    assert decision.patch == []


def test_a_pod_breaking_rules_in_several_containers_hears_of_every_one() -> None:
    p = pod(
        shared(2, name="a", securityContext={"privileged": True}),
        shared(3, name="b", env=[env("CUDA_MPS_PIPE_DIRECTORY", "/x")]),
        container("c", env=[env("NVIDIA_VISIBLE_DEVICES", "VOID")]),
        init=[container("i", securityContext={"privileged": True})],
        runtimeClassName="runc",
    )
    decision, _ = admit(p, lab())
    assert _rules(decision) == [
        ("runtime-class", None),
        ("device-variables", "c"),
        ("mps-directories", "b"),
        ("privileged", "i"),
        ("privileged", "a"),
        ("multi-replica", "a"),
        ("multi-replica", "b"),
    ]
    assert decision.message.startswith("7 problems: (1) runtime class:")
    for name in "abci":
        assert f'container "{name}"' in decision.message


def test_a_profile_of_another_policy_is_not_allowed_here() -> None:
    other = {**PROFILES, "large": {"activeThreadPercentage": 50}}
    team = make_policy([T4_MPS], name="team", profiles=PROFILES, default_profile="medium")
    premium = make_policy([{**T4_MPS, "replicas": 2}], name="premium", profiles=other)
    loaded = policies.build_set([team, premium])
    decision = review(pod(annotations={"gpu-share.io/profile": "large"}), loaded.policies["team"])
    assert decision.message == (
        'profile not allowed: "large" (annotation gpu-share.io/profile) is not one policy'
        ' "team" allows; it offers: medium, small. Use one of them, or remove the annotation'
        ' for the default "medium" (rule profile)'
    )


def test_a_profile_annotation_under_a_policy_without_profiles_is_refused() -> None:
    policy = make_policy([A10G_TS], name="ts")
    decision = review(pod(annotations={"gpu-share.io/profile": "small"}), policy)
    assert decision.message == (
        'unknown profile: "small" (annotation gpu-share.io/profile), and policy "ts" defines no'
        " MPS profiles. Remove the annotation (rule profile)"
    )


# rule -> a pod that breaks the rule (the switch that turns it off: the rule's row)
SWITCHES = {
    "exclusive-with-shared": pod(shared(), container("x", limits={"nvidia.com/gpu": 1})),
    "device-variables": pod(shared(), container("x", env=[env("NVIDIA_VISIBLE_DEVICES", "all")])),
    "mps-directories": pod(shared(env=[env("CUDA_MPS_PIPE_DIRECTORY", "/x")])),
    "privileged": pod(shared(securityContext={"privileged": True})),
    "capabilities": pod(shared(securityContext={"capabilities": {"add": ["ALL"]}})),
    "host-namespaces": pod(shared(), hostPID=True),
    "host-path": pod(shared(), volumes=[{"name": "d", "hostPath": {"path": "/dev"}}]),
    "device-list-mount": pod(container(volumeMounts=[
        {"name": "v", "mountPath": "/var/run/nvidia-container-devicesX"}])),
    "cdi-annotations": pod(shared(), annotations={"cdi.k8s.io/x": "nvidia.com/gpu=0"}),
    "resource-claims": pod(shared(), resourceClaims=[{"name": "c"}]),
    "host-access": pod(container(), hostNetwork=True),
}


def _under_pod_security(policy: policies.Policy, rule: str) -> policies.Policy:
    """The policy as it governs a namespace that enforces Pod Security baseline, where
    host-access leaves the GPU rules' cases to Pod Security (except its own row's)."""
    return policy if rule == "host-access" else dataclasses.replace(policy, pod_security=True)


@pytest.mark.parametrize("rule", sorted(SWITCHES))
def test_every_switch_turns_its_rule_off_and_only_its_rule(rule: str) -> None:
    obj = SWITCHES[rule]
    switch = next(r.switch for r in rules.RULES if r.name == rule)
    assert switch is not None
    assert [v.rule for v in admit(obj, _under_pod_security(lab(), rule))[0].violations] == [rule]
    decision, result = admit(obj, _under_pod_security(lab(rules={switch: False}), rule))
    assert decision.allowed, decision.message
    assert result is not None


def test_the_env_from_switch_turns_the_warning_into_a_refusal() -> None:
    obj = pod(shared(envFrom=[{"configMapRef": {"name": "c"}}]))
    assert admit(obj, lab())[0].allowed
    decision, _ = admit(obj, lab(rules={"denyEnvFromOnGpuContainers": True}))
    assert decision.message == (
        'container "main": envFrom on a container that uses a GPU: a ConfigMap or Secret can set'
        " NVIDIA_VISIBLE_DEVICES or CUDA_MPS_* there, which cannot be checked at admission. Set"
        " the variables the container needs with env (rule env-from)"
    )


def test_every_switch_has_a_row_and_every_check_a_case() -> None:
    assert {r.name for r in rules.RULES if r.switch} == set(SWITCHES)
    checked = {r.name for r in rules.RULES if r.check is not None or r.found}
    refused = {rule for case in RULE_CASES for rule, _ in case.values[2]}
    # env-from refuses only when switched on; the policy stand-ins have their own tests.
    assert checked - refused == {"env-from", "unknown-policy", "policy-not-loaded"}


def test_env_from_on_a_gpu_container_is_a_warning_and_an_audit_annotation_by_default() -> None:
    p = pod(shared(envFrom=[{"configMapRef": {"name": "settings"}}]),
            container("log", envFrom=[{"secretRef": {"name": "s"}}]))
    decision, result = admit(p, lab())
    assert result is not None
    assert decision.audit["env-from"] == "main"
    assert decision.warnings == [
        'container "main" uses envFrom: NVIDIA_* or CUDA_MPS_* set there are not checked'
    ]


@pytest.mark.parametrize(
    ("value", "hides"),
    [
        pytest.param("void", True, id="void"),
        # Issue 19: `none` still gets the driver and the control device nodes.
        pytest.param("none", False, id="none"),
        pytest.param("", True, id="empty"),
        pytest.param(None, True, id="no-value"),
        # The runtime compares exactly: these are device lists, and ALL selects every GPU.
        pytest.param("VOID", False, id="VOID"),
        pytest.param("None", False, id="None"),
        pytest.param(" void", False, id="leading-space"),
        pytest.param("ALL", False, id="ALL"),
        pytest.param("all", False, id="all"),
        pytest.param("GPU-8c9e1f1a", False, id="uuid"),
        pytest.param("$(HIDE)", False, id="reference"),
    ],
)
def test_only_the_values_that_hide_gpus_exactly_are_allowed(value: str | None, hides: bool) -> None:
    decision, _ = admit(pod(container(env=[env("NVIDIA_VISIBLE_DEVICES", value)])), lab())
    assert decision.allowed is hides, decision.message


@pytest.mark.parametrize(
    ("path", "exposes"),
    [
        ("/dev", True), ("/dev/", True), ("/dev/nvidia0", True), ("/dev/nvidia-uvm", True),
        ("//dev", True), ("/dev/../dev/nvidiactl", True), ("/", True), ("/run", True),
        ("/var", True), ("/var/run", True), ("/run/nvidia", True),
        ("/run/nvidia-persistenced/socket", True), ("/var/run/nvidia/mps", True),
        ("/run/nvidia/driver", True), ("/dev/char/195:0", True), ("/dev/dri", True),
        ("/dev/nvidia-caps", True), ("/dev/null", False), ("/dev/shm", False),
        ("/devices", False), ("/home/nvidia/.cache", False),
        ("/var/lib/models", False), ("/models", False), ("/mnt/dev", False),
        # Issue 19: links the node follows, and the classes beyond device nodes.
        ("/proc/self/root/run/nvidia/mps", True), ("/proc/1/root", True),
        ("/proc/1/cwd/run/nvidia", True), ("/proc/thread-self/root", True), ("/proc", True),
        ("/proc/sys/kernel", True), ("/dev/fd/3/run", True), ("/dev/stdin", True),
        ("/var/lib/kubelet/device-plugins", True), ("/var/lib/kubelet/pod-resources", True),
        ("/var/lib/kubelet", True), ("/var/lib", True), ("/var/lib/kubelet-models", False),
        ("/etc/cdi", True), ("/var/run/cdi", True), ("/run/cdi/nvidia.yaml", True),
        ("/etc", True), ("/etc/localtime", False), ("/etc/ssl/certs", False),
        ("/run/containerd", True), ("/var/run/containerd/containerd.sock", True),
        ("/var/run/docker.sock", True), ("/var/lib/containerd", True),
        ("/run/crio/crio.sock", True), ("/sys", True), ("/sys/bus/pci/devices", True),
        ("/sys/fs/cgroup", True), ("/lib/modules", True), ("/usr/lib/modules/6.8", True),
        ("/usr/local/nvidia", True), ("/usr/local", True), ("/usr/local/share", True),
        ("/usr/local/share/man", False),
        ("/usr/bin/nvidia-smi", True), ("/bin/nvidia-smi", True), ("/usr/bin/python3", False),
        ("/etc/nvidia-container-runtime/config.toml", True),
        ("/home/kubernetes/bin/nvidia", True), ("/home/kubernetes", True),
        ("/dev/vfio/12", True), ("/dev/mem", True), ("/models/../proc/1/root", True),
        ("models", True), ("./data", True),
        ("/etc/kubernetes/manifests", True), ("/usr/lib/x86_64-linux-gnu", True),
        ("/lib/x86_64-linux-gnu/libcuda.so.1", True), ("/usr/lib64/libnvidia-ml.so", True),
        ("/usr/lib/x86_64-linux-gnu/libssl.so.3", False), ("/usr/share/zoneinfo", False),
    ],
)
def test_host_paths_that_hand_out_gpus_or_hold_them(path: str, exposes: bool) -> None:
    assert bool(hostpaths.classes_of(path)) is exposes


@pytest.mark.parametrize(
    ("path", "destination"),
    [
        ("/var/run/x", "/var/run/x"), ("var/run/x", "/var/run/x"), ("./var/run/x", "/var/run/x"),
        ("../var/run/x", "/var/run/x"), ("a/../../var//run/./x/", "/var/run/x"),
        ("//var/run/x", "/var/run/x"), (".", "/"),
    ],
)
def test_mount_paths_are_made_absolute_as_the_kubelet_does(path: str, destination: str) -> None:
    assert hostpaths.mount_destination(path) == destination
