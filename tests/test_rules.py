"""The table of rules (webhook/core/rules.py): each rule refuses what it says, naming the
container, the rule and the fix; every violation of a pod is reported at once; workloads are
refused the same way; every switch turns its rule off; every rule of the table has a row here.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.kube import (
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
from webhook import policies
from webhook.core import rules

MIG_10GB = {"name": "mig", "resource": "nvidia.com/mig-1g.10gb", "product": "A100-MIG",
            "strategy": "time-slicing", "replicas": 2}


def lab(*classes: dict[str, Any], **spec: Any) -> policies.Policy:
    return make_policy(list(classes) or [T4_MPS, A10G_TS], profiles=PROFILES,
                       default_profile="medium", name="lab", **spec)


def env(name: str, value: str | None = None, **extra: Any) -> dict[str, Any]:
    var: dict[str, Any] = {"name": name, **extra}
    if value is not None:
        var["value"] = value
    return var


FROM_CONFIG_MAP = {"configMapKeyRef": {"name": "c", "key": "k"}}

# (object, policy, [(rule, container)], message): each message exact, the rule's name last.
CASES = [
    pytest.param(
        pod(shared(2)), lab(), [("multi-replica", "main")],
        'container "main": invalid multi-replica request: nvidia.com/gpu.shared: 2. More'
        " replicas of a shared GPU give no more GPU time (each process gets an equal share),"
        " and here: t4-mps fails such requests after scheduling (failRequestsGreaterThanOne:"
        " the pod would die with UnexpectedAdmissionError); a10g-ts has one GPU per node, so"
        " every replica is the same GPU. Ask for nvidia.com/gpu.shared: 1 (rule multi-replica)",
        id="multi-replica",
    ),
    pytest.param(
        pod(shared(3)), lab({**A10G_TS, "gpusPerNode": 2}), [("multi-replica", "main")],
        'container "main": invalid multi-replica request: nvidia.com/gpu.shared: 3. More'
        " replicas of a shared GPU give no more GPU time (each process gets an equal share),"
        " and here: a10g-ts has 2 GPUs per node, so 3 replicas repeat a GPU. Ask for"
        " nvidia.com/gpu.shared: 1 (rule multi-replica)",
        id="multi-replica-more-than-gpus-per-node",
    ),
    pytest.param(
        pod(container(limits={"nvidia.com/gpu.shared": 1},
                      requests={"nvidia.com/gpu.shared": 2})),
        lab(), [("requests-limits-mismatch", "main")],
        'container "main": requests and limits disagree: nvidia.com/gpu.shared requests 2,'
        " limits 1; they must be equal. Set both to 1, or set only limits"
        " (rule requests-limits-mismatch)",
        id="requests-and-limits-disagree",
    ),
    pytest.param(
        pod(container(requests={"nvidia.com/gpu.shared": "1"})),
        lab(), [("requests-limits-mismatch", "main")],
        'container "main": requests and limits disagree: requests nvidia.com/gpu.shared: 1'
        " with no limit, and an extended resource is asked for in limits. Set limits"
        " nvidia.com/gpu.shared: 1 (requests may then be left out)"
        " (rule requests-limits-mismatch)",
        id="requests-without-limits",
    ),
    pytest.param(
        pod(shared("500m")), lab(), [("invalid-quantity", "main")],
        'container "main": invalid quantity: spec.containers[0].resources.limits'
        '[nvidia.com/gpu.shared]: "500m" is not a whole number. A GPU is asked for in whole'
        " devices: set the quantity to a whole number such as 1 (rule invalid-quantity)",
        id="fractional-quantity",
    ),
    pytest.param(
        pod(shared("1e999999")), lab(), [("invalid-quantity", "main")],
        'container "main": invalid quantity: spec.containers[0].resources.limits'
        '[nvidia.com/gpu.shared]: "1e999999" is out of range (quantities are at most'
        " 2^63-1). A GPU is asked for in whole devices: set the quantity to a whole number"
        " such as 1 (rule invalid-quantity)",
        id="huge-exponent",
    ),
    pytest.param(
        pod(container(limits={"nvidia.com/gpu": "\u2469"})), lab(),
        [("invalid-quantity", "main")],
        'container "main": invalid quantity: spec.containers[0].resources.limits'
        '[nvidia.com/gpu]: "\u2469" is not a quantity (the API server\'s grammar: a number,'
        " optional sign, optional suffix such as 1, 500m, 2Gi, 1e3). A GPU is asked for in"
        " whole devices: set the quantity to a whole number such as 1 (rule invalid-quantity)",
        id="circled-digit-on-an-exclusive-gpu",
    ),
    pytest.param(
        pod(shared(name="infer"), container("train", limits={"nvidia.com/gpu": 1})),
        lab(), [("exclusive-with-shared", None)],
        'exclusive and shared GPUs in one pod: container "train" asks for nvidia.com/gpu,'
        ' container "infer" for nvidia.com/gpu.shared; one pod lands on one kind of node. Ask'
        " for nvidia.com/gpu.shared only, or run the exclusive GPU in a pod of its own"
        " (rule exclusive-with-shared)",
        id="exclusive-and-shared",
    ),
    pytest.param(
        pod(shared(name="a"), shared(name="b", resource="nvidia.com/mig-1g.10gb.shared")),
        lab(T4_MPS, MIG_10GB,
            sharedResources=["nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb.shared"]),
        [("several-shared-resources", None)],
        "several shared resources: the pod asks for nvidia.com/gpu.shared,"
        " nvidia.com/mig-1g.10gb.shared, and a node class serves one. Ask for one of them in"
        " every container (rule several-shared-resources)",
        id="several-shared-resources",
    ),
    pytest.param(
        pod(shared(resource="nvidia.com/mig-2g.20gb.shared")), lab(),
        [("resource-not-allowed", "main")],
        'container "main": resource not allowed: nvidia.com/mig-2g.20gb.shared is not a shared'
        ' GPU policy "lab" allows (it allows: nvidia.com/gpu.shared). Ask for one of those, or'
        " ask the cluster admin for a policy that shares it (rule resource-not-allowed)",
        id="mig-shared-resource-not-in-the-policy-is-not-called-exclusive",
    ),
    pytest.param(
        pod(runtimeClassName="runc"), lab(), [("runtime-class", None)],
        'runtime class: runtimeClassName "runc" is not the one policy "lab" uses for shared'
        ' GPUs ("nvidia"). Remove runtimeClassName (the webhook sets it) or set it to "nvidia"'
        " (rule runtime-class)",
        id="other-runtime-class",
    ),
    pytest.param(
        pod(annotations={"gpu-share.io/profile": "xl"}), lab(), [("profile", None)],
        'unknown profile: "xl" (annotation gpu-share.io/profile); policy "lab" offers: medium,'
        ' small. Use one of them, or remove the annotation for the default "medium"'
        " (rule profile)",
        id="unknown-profile",
    ),
    pytest.param(
        pod(shared(env=[env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "60")])),
        lab(T4_MPS), [("mps-limits", "main")],
        'container "main": MPS limit above the ceiling: CUDA_MPS_* set in the pod exceed the'
        ' MPS ceiling of every node class it may use (t4-mps: 60% > 25% ("main"'
        " CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=60)), and MPS can only lower the daemon's limit"
        " (100/replicas %, memory/replicas MiB). Remove them or set them at most to the"
        " ceiling (rule mps-limits)",
        id="user-threads-above-ceiling",
    ),
    pytest.param(
        pod(shared(env=[env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=8G")])),
        lab(T4_MPS), [("mps-limits", "main")],
        'container "main": MPS limit above the ceiling: CUDA_MPS_* set in the pod exceed the'
        ' MPS ceiling of every node class it may use (t4-mps: 8192 MiB > 3840 MiB ("main"'
        " CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G)), and MPS can only lower the daemon's limit"
        " (100/replicas %, memory/replicas MiB). Remove them or set them at most to the"
        " ceiling (rule mps-limits)",
        id="user-memory-above-ceiling",
    ),
    pytest.param(
        pod(shared(env=[env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "200")])),
        lab(T4_MPS), [("mps-limits", "main")],
        'container "main": CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (spec.containers[0].env[0])'
        ' "200" is not a whole number from 1 to 100; MPS limits are checked against the'
        " node's ceiling before the pod runs. Set a plain value, or remove it for the"
        " profile's (rule mps-limits)",
        id="user-threads-not-a-percentage",
    ),
    pytest.param(
        pod(shared(env=[env("CUDA_MPS_PIPE_DIRECTORY", "/tmp/mine")])),
        lab(T4_MPS), [("mps-directories", "main")],
        'container "main": CUDA_MPS_PIPE_DIRECTORY (spec.containers[0].env[0]) is set by the'
        " device plugin for a container with an MPS replica; a value of the pod's can detach"
        " the process from the MPS daemon and its limits. Remove it (rule mps-directories)",
        id="mps-pipe-directory",
    ),
    pytest.param(
        pod(shared(securityContext={"privileged": True})), lab(), [("privileged", "main")],
        'container "main": privileged container: it sees every device of the node, GPUs'
        " included, whatever it asked for. Remove"
        " spec.containers[0].securityContext.privileged (rule privileged)",
        id="privileged",
    ),
    pytest.param(
        pod(container("debug", securityContext={"privileged": True})), lab(),
        [("privileged", "debug")],
        'container "debug": privileged container: it sees every device of the node, GPUs'
        " included, whatever it asked for. Remove"
        " spec.containers[0].securityContext.privileged (rule privileged)",
        id="privileged-in-a-pod-that-asks-for-no-gpu",
    ),
    pytest.param(
        pod(shared(securityContext={"capabilities": {"add": ["NET_ADMIN", "sys_admin"]}})),
        lab(), [("capabilities", "main")],
        'container "main": added capabilities SYS_ADMIN in a pod that uses a GPU: with them a'
        " container can reach devices and processes beyond its GPU. Remove them from"
        " spec.containers[0].securityContext.capabilities.add (rule capabilities)",
        id="capabilities-any-case",
    ),
    pytest.param(
        pod(shared(), hostPID=True, hostIPC=True), lab(),
        [("host-namespaces", None), ("host-namespaces", None)],
        "2 problems: (1) host namespace: spec.hostPID in a pod that uses a GPU lets its"
        " containers see and signal every process of the node, the GPU processes of other pods"
        " and the MPS daemon included. Remove hostPID (rule host-namespaces); (2) host"
        " namespace: spec.hostIPC in a pod that uses a GPU lets its containers reach the"
        " shared memory of the node's other processes, the MPS daemon's included. Remove"
        " hostIPC (rule host-namespaces)",
        id="host-pid-and-ipc",
    ),
    pytest.param(
        pod(shared(volumeMounts=[{"name": "dev", "mountPath": "/host/dev"}]),
            volumes=[{"name": "dev", "hostPath": {"path": "//dev/./"}}]),
        lab(), [("host-path", None)],
        'volume "dev" (spec.volumes[0]): hostPath "//dev/./" (mounted by main) exposes the'
        " node's devices, the NVIDIA driver's files or the MPS daemon's control pipes (with"
        " which any pod can change other pods' GPU limits). Remove it (rule host-path)",
        id="host-path-dev-written-oddly",
    ),
    pytest.param(
        pod(shared(), container("sidecar", volumeMounts=[
            {"name": "null", "mountPath": "/var/run/nvidia-container-devices/all"}]),
            volumes=[{"name": "null", "hostPath": {"path": "/dev/null"}}]),
        lab(), [("device-list-mount", "sidecar")],
        'container "sidecar":'
        ' volume "null" mounted at "/var/run/nvidia-container-devices/all"'
        " (spec.containers[1].volumeMounts[0]): the NVIDIA runtime reads mounts under"
        " /var/run/nvidia-container-devices as a list of GPUs to give the container. Mount it"
        " elsewhere (rule device-list-mount)",
        id="device-list-mount-in-a-gpu-pod",
    ),
    pytest.param(
        pod(shared(), annotations={"cdi.k8s.io/extra": "nvidia.com/gpu=all"}), lab(),
        [("cdi-annotations", None)],
        "CDI annotation: metadata.annotations[cdi.k8s.io/extra] asks the container runtime for"
        " devices by name, outside the device plugin's allocation (runtimes that pass such pod"
        " annotations through inject them). Remove it, and ask for nvidia.com/gpu.shared"
        " (rule cdi-annotations)",
        id="cdi-annotation",
    ),
    pytest.param(
        pod(container(resources={"claims": [{"name": "gpu"}]}),
            resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "a100"}]),
        lab(), [("resource-claims", None)],
        "resource claims: spec.resourceClaims can give the pod devices, GPUs included, that"
        ' policy "lab" does not govern. Remove them, or ask for nvidia.com/gpu.shared'
        " (rule resource-claims)",
        id="resource-claims",
    ),
    pytest.param(
        pod(shared(), container("exporter", env=[env("NVIDIA_VISIBLE_DEVICES", "all")])),
        lab(), [("device-variables", "exporter")],
        'container "exporter": device variable: NVIDIA_VISIBLE_DEVICES="all"'
        " (spec.containers[1].env[0]) is not one that hides GPUs; on a container that asks for"
        " no GPU it exposes GPUs outside the device plugin's allocation. Remove it (or set it"
        " to void), or ask for nvidia.com/gpu.shared: 1 if the container needs a GPU"
        " (rule device-variables)",
        id="device-variable-on-a-sidecar",
    ),
    pytest.param(
        pod(shared(env=[env("NVIDIA_VISIBLE_DEVICES", "0,1,2,3")])), lab(),
        [("device-variables", "main")],
        'container "main": device variable: NVIDIA_VISIBLE_DEVICES="0,1,2,3"'
        " (spec.containers[0].env[0]) is not one that hides GPUs; the device plugin sets it for"
        " a container that asks for a GPU, and a value of the pod's can widen what the NVIDIA"
        " runtime gives it. Remove it (rule device-variables)",
        id="device-variable-on-the-gpu-container",
    ),
    pytest.param(
        pod(container("escape", env=[env("NVIDIA_VISIBLE_DEVICES", valueFrom=FROM_CONFIG_MAP)])),
        lab(), [("device-variables", "escape")],
        'container "escape": device variable: NVIDIA_VISIBLE_DEVICES from valueFrom'
        " (spec.containers[0].env[0]) cannot be read at admission; on a container that asks"
        " for no GPU it exposes GPUs outside the device plugin's allocation. Remove it (or set"
        " it to void), or ask for nvidia.com/gpu.shared: 1 if the container needs a GPU"
        " (rule device-variables)",
        id="device-variable-from-value-from",
    ),
    pytest.param(
        pod(shared(env=[env("NVIDIA_GDS", "enabled"), env("CUDA_MPS_LOG_DIRECTORY", "/x")])),
        lab(), [("device-variables", "main"), ("mps-directories", "main")],
        '2 problems: (1) container "main": device variable: NVIDIA_GDS="enabled"'
        " (spec.containers[0].env[0]) is not one that hides GPUs; the device plugin sets it for"
        " a container that asks for a GPU, and a value of the pod's can widen what the NVIDIA"
        " runtime gives it. Remove it (rule device-variables); (2) container \"main\":"
        " CUDA_MPS_LOG_DIRECTORY (spec.containers[0].env[1]) is set by the device plugin for a"
        " container with an MPS replica; a value of the pod's can detach the process from the"
        " MPS daemon and its limits. Remove it (rule mps-directories)",
        id="other-device-variable-and-mps-log-directory",
    ),
    pytest.param(
        pod(nodeSelector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}), lab(),
        [("node-selection", None)],
        "node selection matches no allowed class: the pod's nodeSelector"
        " nvidia.com/gpu.product=Tesla-T4-SHARED matches no node class of policy \"lab\" that"
        " serves nvidia.com/gpu.shared: t4-mps [nvidia.com/gpu.sharing-strategy=mps,"
        " nvidia.com/gpu.product=Tesla-T4, nvidia.com/gpu.replicas=4]; a10g-ts"
        " [nvidia.com/gpu.sharing-strategy=time-slicing, nvidia.com/gpu.product=NVIDIA-A10G,"
        " nvidia.com/gpu.replicas=4]. Remove or change that selector (nodes that advertise"
        " nvidia.com/gpu.shared are renamed: their product label has no -SHARED suffix)"
        " (rule node-selection)",
        id="node-selection",
    ),
    pytest.param(
        pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": 5}]}}}),
        lab(), [("malformed-object", None)],
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions: must be a list, not a number: no Kubernetes"
        " object has this shape. Fix the field (the API server would refuse it too)"
        " (rule malformed-object)",
        id="malformed-affinity",
    ),
]


def _rules(decision: Any) -> list[tuple[str, str | None]]:
    return [(v.rule, v.container) for v in decision.violations]


@pytest.mark.parametrize(("obj", "policy", "found", "message"), CASES)
def test_a_pod_that_breaks_a_rule_is_refused_with_the_rule_and_the_fix(
    obj: dict[str, Any], policy: policies.Policy, found: list[tuple[str, str | None]],
    message: str,
) -> None:
    decision, result = admit(obj, policy)
    assert result is None
    assert _rules(decision) == found
    assert decision.message == message


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
@pytest.mark.parametrize(("obj", "policy", "found", "message"), CASES)
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


# rule -> (the switch in a policy's spec.rules, a pod that breaks the rule)
SWITCHES = {
    "exclusive-with-shared": ("denyExclusiveWithShared",
                              pod(shared(), container("x", limits={"nvidia.com/gpu": 1}))),
    "device-variables": ("denyDeviceVariables",
                         pod(shared(), container("x", env=[env("NVIDIA_VISIBLE_DEVICES", "all")]))),
    "mps-directories": ("denyMpsDirectories",
                        pod(shared(env=[env("CUDA_MPS_PIPE_DIRECTORY", "/x")]))),
    "privileged": ("denyPrivileged", pod(shared(securityContext={"privileged": True}))),
    "capabilities": ("denyAddedCapabilities",
                     pod(shared(securityContext={"capabilities": {"add": ["ALL"]}}))),
    "host-namespaces": ("denyHostNamespaces", pod(shared(), hostPID=True)),
    "host-path": ("denyDeviceHostPaths",
                  pod(shared(), volumes=[{"name": "d", "hostPath": {"path": "/dev"}}])),
    "device-list-mount": ("denyDeviceListMounts", pod(container(volumeMounts=[
        {"name": "v", "mountPath": "/var/run/nvidia-container-devicesX"}]))),
    "cdi-annotations": ("denyCdiAnnotations",
                        pod(shared(), annotations={"cdi.k8s.io/x": "nvidia.com/gpu=0"})),
    "resource-claims": ("denyResourceClaims", pod(shared(), resourceClaims=[{"name": "c"}])),
}


@pytest.mark.parametrize("rule", sorted(SWITCHES))
def test_every_switch_turns_its_rule_off_and_only_its_rule(rule: str) -> None:
    switch, obj = SWITCHES[rule]
    assert next(r.switch for r in rules.RULES if r.name == rule) == switch
    assert [v.rule for v in admit(obj, lab())[0].violations] == [rule]
    decision, result = admit(obj, lab(rules={switch: False}))
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
    switches = {f.alias for f in policies.RulesSpec.model_fields.values()}
    assert switches == {s for s, _ in SWITCHES.values()} | {
        "denyEnvFromOnGpuContainers", "voidVisibleDevicesWithoutGpu"}
    checked = {r.name for r in rules.RULES if r.check is not None or r.found}
    refused = {rule for case in CASES for rule, _ in case.values[2]}
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
        pytest.param("none", True, id="none"),
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
        ("/var/lib/models", False), ("/run/containerd", False), ("/models", False),
        ("/mnt/dev", False),
    ],
)
def test_host_paths_that_give_devices_or_hold_them(path: str, exposes: bool) -> None:
    assert rules.exposes_devices(path) is exposes
