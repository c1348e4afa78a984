"""The cases the tests share, in one place: every published manifest, every example, the
rule table (`RULE_CASES`) and the route table (`ROUTE_CASES`).

Test modules take them from here, never from each other's modules: tests/engine/test_rules.py and
tests/engine/test_escape_routes.py judge the two tables; the tests that want "every pod we know"
(the compiled core, the caches, the order of the rule table, the pod view) take `objects()` and
`pods()`. Generated cases, hypothesis' strategies, are tests/support/strategies.py's.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import kube
from tests.support.kube import (
    A10G_TS,
    PROFILES,
    T4_MPS,
    container,
    make_policy,
    pod,
    shared,
    workload,
)
from webhook.policy import policies


def manifests() -> list[Path]:
    """The published manifests, then the examples."""
    return kube.real_world_manifests() + sorted((kube.REPO / "examples").rglob("*.yaml"))


@functools.cache
def _objects() -> tuple[dict[str, Any], ...]:
    found: list[dict[str, Any]] = []
    for path in manifests():
        found += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    found += [case.values[0] for case in RULE_CASES]
    found += [case.obj for case in ROUTE_CASES.values()]
    return tuple(found)


def objects() -> list[dict[str, Any]]:
    """Every object of the manifests and the tables (a copy: change it freely)."""
    return copy.deepcopy(list(_objects()))


def pods() -> list[dict[str, Any]]:
    """Every pod spec of `objects()` as a Pod, as the API server hands it to webhooks:
    served (quantities as strings), with the service account token volume."""
    out = []
    for obj in objects():
        for template in kube.templates_of(obj):
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": copy.deepcopy(template.get("metadata") or {"name": "p"}),
                   "spec": copy.deepcopy(template["spec"])}
            out.append(with_service_account(kube.as_served(pod)))
    return out


def with_service_account(obj: dict[str, Any], token: str = "abcde") -> dict[str, Any]:
    """`obj` with the volume and mounts the ServiceAccount admission plugin adds."""
    out = copy.deepcopy(obj)
    spec = out.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
        spec.setdefault("volumes", []).append(
            {"name": f"kube-api-access-{token}", "projected": {"sources": []}})
        for c in spec["containers"]:
            if isinstance(c, dict):
                c.setdefault("volumeMounts", []).append(
                    {"name": f"kube-api-access-{token}",
                     "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    return out


# --------------------------------------------------------------------------- the rule table
# tests/engine/test_rules.py: each rule refuses what it says, naming the container, the rule and
# the fix.

MIG_10GB = {"name": "mig", "resource": "nvidia.com/mig-1g.10gb", "product": "A100-MIG",
            "strategy": "time-slicing", "replicas": 2}


def lab(*classes: dict[str, Any], **spec: Any) -> policies.Policy:
    """The rule table's policy "lab": `classes` (T4 MPS and A10G time-slicing unless
    given) with the kube.PROFILES, "medium" by default."""
    return make_policy(list(classes) or [T4_MPS, A10G_TS], profiles=PROFILES,
                       default_profile="medium", name="lab", **spec)


def env(name: str, value: str | None = None, **extra: Any) -> dict[str, Any]:
    """One environment variable; no `value` leaves the key out."""
    var: dict[str, Any] = {"name": name, **extra}
    if value is not None:
        var["value"] = value
    return var


FROM_CONFIG_MAP = {"configMapKeyRef": {"name": "c", "key": "k"}}

# (object, policy, [(rule, container)], message): each message exact, the rule's name last.
RULE_CASES = [
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
        pod(shared(env=[env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=8G")])),
        lab(T4_MPS, profilesAreCeilings=True), [("mps-limits", "main")],
        'container "main": MPS limit above the profile: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G'
        ' (spec.containers[0].env[0]) is above profile "medium" (3840 MiB), and policy "lab"'
        " makes profiles ceilings. Remove it (the webhook sets the profile's), set it at most"
        " to 3840M per device, or ask for a larger profile with the annotation"
        " gpu-share.io/profile (rule mps-limits)",
        id="user-memory-above-the-profile-where-profiles-are-ceilings",
    ),
    pytest.param(
        pod(shared(env=[env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "20")]),
            annotations={"gpu-share.io/profile": "small"}),
        lab(T4_MPS, profilesAreCeilings=True), [("mps-limits", "main")],
        'container "main": MPS limit above the profile: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20'
        ' (spec.containers[0].env[0]) is above profile "small" (10%), and policy "lab" makes'
        " profiles ceilings. Remove it (the webhook sets the profile's), set it at most to 10,"
        " or ask for a larger profile with the annotation gpu-share.io/profile"
        " (rule mps-limits)",
        id="user-threads-above-the-profile-where-profiles-are-ceilings",
    ),
    pytest.param(
        pod(shared(env=[env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "7=1K")])),
        lab(T4_MPS, profilesAreCeilings=True), [("mps-limits", "main")],
        'container "main": MPS limit above the profile: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=7=1K'
        " (spec.containers[0].env[0]) does not limit device 0 of the 1 it gets (by ordinal: 0"
        " is its first), which then has the class's ceiling; policy \"lab\" makes profile"
        ' "medium" (3840M per device) a ceiling. Name each device, or remove it (the webhook'
        " sets the profile's) (rule mps-limits)",
        id="memory-limit-of-another-device-where-profiles-are-ceilings",
    ),
    pytest.param(
        pod(container(limits={"nvidia.com/gpu": 8})), lab(exclusiveGpus={"allowed": False}),
        [("exclusive-gpus", "main")],
        'container "main": exclusive GPU: it asks for nvidia.com/gpu (whole GPUs), and policy'
        ' "lab" gives its namespaces no whole GPUs. Ask for nvidia.com/gpu.shared: 1 instead'
        " (rule exclusive-gpus)",
        id="exclusive-gpu-where-the-policy-allows-none",
    ),
    pytest.param(
        pod(container(limits={"nvidia.com/GA102GL_A10": 1})),
        lab(exclusiveGpus={"allowed": False, "passthroughResources": ["nvidia.com/GA102GL_*"]}),
        [("exclusive-gpus", "main")],
        'container "main": exclusive GPU: it asks for nvidia.com/GA102GL_A10 (whole GPUs), and'
        ' policy "lab" gives its namespaces no whole GPUs. Ask for nvidia.com/gpu.shared: 1'
        " instead (rule exclusive-gpus)",
        id="passthrough-gpu-where-the-policy-allows-none",
    ),
    pytest.param(
        pod(container("a", limits={"nvidia.com/gpu": 4}),
            container("b", limits={"nvidia.com/mig-1g.10gb": 1}),
            init=[container("setup", limits={"nvidia.com/gpu": 2}),
                  container("proxy", limits={"nvidia.com/gpu": 1}, restartPolicy="Always")]),
        lab(exclusiveGpus={"maxPerPod": 5}), [("exclusive-gpus", None)],
        'too many exclusive GPUs: the pod holds 6 whole GPUs at once ("setup" 2, "proxy" 1,'
        ' "a" 4, "b" 1), and policy "lab" allows at most 5 per pod. Ask for 5 or fewer'
        " (rule exclusive-gpus)",
        id="more-exclusive-gpus-than-the-policy-allows-per-pod",
    ),
    pytest.param(
        pod(shared(env=[env("NVIDIA_DRIVER_CAPABILITIES", "all")])),
        lab(driverCapabilities=["compute", "utility"]), [("driver-capabilities", "main")],
        'container "main": driver capabilities: NVIDIA_DRIVER_CAPABILITIES'
        ' (spec.containers[0].env[0]) "all" gives compat32, display, graphics, ngx, video;'
        ' policy "lab" allows compute,utility. Set it to a part of that list, or remove it'
        " (the webhook sets the policy's) (rule driver-capabilities)",
        id="driver-capabilities-beyond-the-policy",
    ),
    pytest.param(
        pod(container(limits={"nvidia.com/gpu": 1},
                      env=[env("NVIDIA_DRIVER_CAPABILITIES", valueFrom=FROM_CONFIG_MAP)])),
        lab(driverCapabilities=["compute", "utility"]), [("driver-capabilities", "main")],
        'container "main": driver capabilities: NVIDIA_DRIVER_CAPABILITIES'
        " (spec.containers[0].env[0]) comes from valueFrom, which cannot be read at admission;"
        ' policy "lab" allows compute,utility. Set it to a part of that list, or remove it'
        " (the webhook sets the policy's) (rule driver-capabilities)",
        id="driver-capabilities-from-value-from",
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
        'container "main": added capabilities "NET_ADMIN", "sys_admin" in a pod that uses a'
        " GPU: outside Pod Security baseline's set, they reach devices, processes and the"
        " driver beyond the container's GPU (SYS_ADMIN makes it privileged to the NVIDIA"
        " toolkit, SYS_PTRACE reaches other pods' GPU processes). Remove them from"
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
        'volume "dev" (spec.volumes[0]): hostPath "//dev/./" (mounted by main) is, or holds,'
        " device nodes as the node resolves it: a GPU's device nodes (or, /dev/char, a link to"
        " every device node by number; /dev/mem and /dev/port, physical memory and GPU"
        " registers). Remove it (rule host-path)",
        id="host-path-dev-written-oddly",
    ),
    pytest.param(
        pod(shared(), container("sidecar", volumeMounts=[
            {"name": "null", "mountPath": "/var/run/nvidia-container-devices/all"}]),
            volumes=[{"name": "null", "hostPath": {"path": "/dev/null"}}]),
        lab(), [("device-list-mount", "sidecar"), ("host-access", None)],
        '2 problems: (1) container "sidecar":'
        ' volume "null" mounted at "/var/run/nvidia-container-devices/all"'
        " (spec.containers[1].volumeMounts[0]): the NVIDIA runtime reads mounts under"
        " /var/run/nvidia-container-devices (where the kubelet puts a relative path too) as a"
        " list of GPUs to give the container. Mount it elsewhere (rule device-list-mount); (2)"
        ' volume "null" (spec.volumes[0]): hostPath "/dev/null" (mounted by sidecar) is not'
        ' under a path policy "lab" allows (allowedHostPaths: none) (Pod Security baseline'
        " refuses it; this namespace does not enforce baseline, so the webhook does). Use a"
        " PersistentVolumeClaim, or ask the cluster admin to allow the path (rule host-access)",
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
        ' policy "lab" does not govern (it has no dra section). Remove them, or ask for'
        " nvidia.com/gpu.shared"
        " (rule resource-claims)",
        id="resource-claims",
    ),
    pytest.param(
        pod(shared(resources={"limits": {"nvidia.com/gpu.shared": 1},
                              "claims": [{"name": "gpu"}]}),
            resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "a100"}]),
        lab(dra={"deviceClasses": [{"name": "gpu.nvidia.com", "allowed": True}]}),
        [("shared-with-claims", None)],
        "shared GPU and resource claims in one pod: it asks for nvidia.com/gpu.shared (the"
        ' device plugin\'s) and names the claims "gpu" (spec.resourceClaims); the webhook pins'
        " it to the device plugin's nodes, where the claims' devices may never be found. Get"
        " the GPU through one of them: remove the shared resource and ask for it with a"
        " claim, or remove the claims (rule shared-with-claims)",
        id="shared-gpu-and-claims",
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


# --------------------------------------------------------------------------- the route table
# tests/engine/test_escape_routes.py: every escape route of SPEC.md. A case is a request a user who
# wants more than their share could send, and what must come of it: refused by a rule,
# fixed (the stored object hides the GPUs), or let through with a warning.

CUDA = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

# The policy of the route table's namespace labelled `gpu-share.io/policy: lab` (a file of
# the policies directory, as an admin writes it).
LAB_POLICY = """\
apiVersion: gpu-share.io/v1alpha1
kind: SharingPolicy
metadata: {name: lab}
spec:
  sharedResources: [nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb.shared]
  nodeClasses:
    - {name: a10g-ts, product: NVIDIA-A10G, strategy: time-slicing, replicas: 4,
       gpusPerNode: 1, failRequestsGreaterThanOne: false}
    - {name: a100-ts, product: NVIDIA-A100-SXM4-80GB, strategy: time-slicing, replicas: 2,
       gpusPerNode: 8}
    - {name: mig-10gb, resource: nvidia.com/mig-1g.10gb, product: A100-SXM4-80GB-MIG-1g.10gb,
       strategy: time-slicing, replicas: 2}
  hostAccess:
    allowedHostPaths:
      - {pathPrefix: /srv/models}
      - {pathPrefix: /srv/scratch, readOnly: false}
"""

# The limits an admin can write (their defaults keep them off), with route 2 off: the
# webhook configurations must send the pods these refuse on their own.
LIMITS_POLICY = """\
apiVersion: gpu-share.io/v1alpha1
kind: SharingPolicy
metadata: {name: limits}
spec:
  nodeClasses:
    - {name: a100-mps, product: NVIDIA-A100-SXM4-80GB, strategy: mps, replicas: 4,
       memoryMiB: 81920, gpusPerNode: 8}
  profiles:
    small: {activeThreadPercentage: 10, pinnedMemoryMiB: 10240}
  defaultProfile: small
  profilesAreCeilings: true
  exclusiveGpus: {maxPerPod: 2, passthroughResources: [nvidia.com/GA102GL_*]}
  driverCapabilities: [compute, utility]
  rules: {voidVisibleDevicesWithoutGpu: false}
"""
# The policies the route table's namespaces may name besides the shipped ones.
SITE_POLICIES = {"lab": LAB_POLICY, "limits": LIMITS_POLICY}


def _env(**values: Any) -> list[dict[str, Any]]:
    """Variables from keyword arguments: a string is a value, a dict a valueFrom."""
    out = []
    for k, v in values.items():
        out.append({"name": k, "valueFrom": v} if isinstance(v, dict) else {"name": k, "value": v})
    return out


def _debug(**extra: Any) -> dict[str, Any]:
    """An ephemeral container as `kubectl debug -it POD --image=CUDA ...` adds it."""
    c = {"name": "debugger-x7k2p", "image": CUDA, "stdin": True, "tty": True,
         "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}
    c.update(extra)
    return c


def _running() -> dict[str, Any]:
    """A pod as it runs after admission: a shared GPU, its limits and void on the sidecar."""
    p = pod(
        shared(env=_env(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25",
                        CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=3840M")),
        container("log", env=_env(NVIDIA_VISIBLE_DEVICES="void")),
        runtimeClassName="nvidia",
        tolerations=[GPU_TOLERATION],
    )
    p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.sharing-strategy", "operator": "In", "values": ["mps"]},
            {"key": "nvidia.com/gpu.replicas", "operator": "In", "values": ["4"]},
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-T4"]}]}]}}}
    return p


def _debugged(**extra: Any) -> dict[str, Any]:
    p = _running()
    p["spec"]["ephemeralContainers"] = [_debug(**extra)]
    return p


# --------------------------------------------------------------------------- expectations


@dataclass(frozen=True)
class Refused:
    rule: str
    container: str | None = None


@dataclass(frozen=True)
class Fixed:
    """Allowed, and the stored object passes `check`."""

    check: Callable[[dict[str, Any]], bool]
    what: str


@dataclass(frozen=True)
class Warned:
    """Allowed with a warning containing `text`."""

    text: str


def _hidden(group: str, name: str) -> Callable[[dict[str, Any]], bool]:
    def check(obj: dict[str, Any]) -> bool:
        for c in obj["spec"].get(group) or []:
            if c["name"] == name:
                env = {e["name"]: e.get("value") for e in c.get("env") or []}
                return env.get("NVIDIA_VISIBLE_DEVICES") == "void"
        return False

    return check


def _pinned_to_two_gpus(obj: dict[str, Any]) -> bool:
    terms = obj["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return all(
        {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["1"]}
        in t["matchExpressions"]
        and {"key": "nvidia.com/gpu.product", "operator": "In",
             "values": ["NVIDIA-A100-SXM4-80GB"]} in t["matchExpressions"]
        for t in terms
    )


@dataclass(frozen=True)
class RouteCase:
    route: int
    obj: dict[str, Any]
    expect: Refused | Fixed | Warned
    policy: str | None = None  # the namespace's gpu-share.io/policy label (None: absent)
    operation: str = "CREATE"
    sub_resource: str = ""
    old: dict[str, Any] | None = field(default=None)
    # The namespace's pod-security.kubernetes.io/enforce label (None: absent).
    pod_security: str | None = None


def _host_path(path: str, mount: str = "/host", *, gpu: bool = False,
               **mount_extra: Any) -> dict[str, Any]:
    """A pod that mounts the host's `path` at `mount` (a shared GPU or none)."""
    mounts = [{"name": "h", "mountPath": mount, **mount_extra}]
    c = shared(volumeMounts=mounts) if gpu else container(
        "ctl", image="busybox:1.36", volumeMounts=mounts)
    return pod(c, volumes=[{"name": "h", "hostPath": {"path": path}}])


def _device_list(mount: str) -> dict[str, Any]:
    """A pod without a GPU that mounts /dev/null at `mount` (volume-mounts nodes read the
    mounts under /var/run/nvidia-container-devices as the GPUs to give)."""
    return pod(container(volumeMounts=[{"name": "null", "mountPath": mount}]),
               volumes=[{"name": "null", "hostPath": {"path": "/dev/null"}}])


def _annotated(**annotations: str) -> dict[str, Any]:
    p = _running()
    p["metadata"]["annotations"] = {**(p["metadata"].get("annotations") or {}), **annotations}
    return p


def _model_pod(*debug: dict[str, Any]) -> dict[str, Any]:
    """A running pod of policy lab that mounts the allowed /srv/models read-only, and the
    ephemeral containers `debug` adds."""
    p = _host_path("/srv/models/llama", "/models", gpu=True, readOnly=True)
    p["spec"]["volumes"][0]["name"] = "models"
    p["spec"]["containers"][0]["volumeMounts"][0]["name"] = "models"
    p["spec"]["runtimeClassName"] = "nvidia"
    if debug:
        p["spec"]["ephemeralContainers"] = list(debug)
    return p


def _other_host_pod(*debug: dict[str, Any]) -> dict[str, Any]:
    """A running pod of policy lab with a hostPath volume of /opt/other, which no entry of
    its allowedHostPaths allows, mounted by no container; and the ephemeral containers
    `debug` adds."""
    p = _model_pod(*debug)
    p["spec"]["volumes"].append({"name": "other", "hostPath": {"path": "/opt/other"}})
    return p


def _with_mps_pipes(p: dict[str, Any]) -> dict[str, Any]:
    p["spec"]["volumes"] = [{"name": "pipes", "hostPath": {"path": "/run/nvidia/mps"}}]
    return p


def _with_scratch(p: dict[str, Any]) -> dict[str, Any]:
    p["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return p


def _deployment(spec_pod: dict[str, Any], replicas: int = 1) -> dict[str, Any]:
    w = workload("Deployment", spec_pod)
    w["spec"]["replicas"] = replicas
    return w


_BROKEN_TEMPLATE = pod(shared(env=_env(NVIDIA_VISIBLE_DEVICES="all")))

ROUTE_CASES = {
    # 1. Device-selection variables.
    "shared-gpu-container-visible-devices-all": RouteCase(
        1, pod(shared(env=_env(NVIDIA_VISIBLE_DEVICES="all"))),
        Refused("device-variables", "main")),
    "shared-gpu-container-visible-devices-list": RouteCase(
        1, pod(shared(env=_env(NVIDIA_VISIBLE_DEVICES="0,1,2,3"))),
        Refused("device-variables", "main")),
    "no-gpu-container-ALL-uppercase": RouteCase(
        1, pod(container(env=_env(NVIDIA_VISIBLE_DEVICES="ALL"))),
        Refused("device-variables", "main")),
    "visible-devices-from-value-from": RouteCase(
        1, pod(container(env=_env(NVIDIA_VISIBLE_DEVICES={"configMapKeyRef": {
            "name": "c", "key": "k"}}))), Refused("device-variables", "main")),
    "visible-devices-reference": RouteCase(
        1, pod(container(env=_env(OTHER="all", NVIDIA_VISIBLE_DEVICES="$(OTHER)"))),
        Refused("device-variables", "main")),
    "mig-config-devices": RouteCase(
        1, pod(container(env=_env(NVIDIA_MIG_CONFIG_DEVICES="all"))),
        Refused("device-variables", "main")),
    "imex-channels": RouteCase(
        1, pod(shared(env=_env(NVIDIA_IMEX_CHANNELS="0"))), Refused("device-variables", "main")),
    "env-from-on-a-gpu-container": RouteCase(
        1, pod(shared(envFrom=[{"configMapRef": {"name": "gpu-settings"}}])),
        Warned('container "main" uses envFrom')),
    "env-from-on-a-container-without-gpu": RouteCase(
        1, pod(container(envFrom=[{"configMapRef": {"name": "gpu-settings"}}])),
        Fixed(_hidden("containers", "main"), "void (env wins over envFrom)")),
    # 2. Pods that ask for no GPU.
    "cuda-image-no-gpu-tolerating-the-taint": RouteCase(
        2, pod(container(image=CUDA), tolerations=[GPU_TOLERATION]),
        Fixed(_hidden("containers", "main"), "void")),
    "shared-gpu-zero": RouteCase(
        2, pod(container(limits={"nvidia.com/gpu.shared": "0"})),
        Fixed(_hidden("containers", "main"), "void")),
    "init-container-without-gpu": RouteCase(
        2, pod(shared(), init=[container("fetch", image=CUDA)]),
        Fixed(_hidden("initContainers", "fetch"), "void on the init container")),
    # 3. Ephemeral containers (kubectl debug).
    "kubectl-debug-cuda-image": RouteCase(
        3, _debugged(), Fixed(_hidden("ephemeralContainers", "debugger-x7k2p"), "void"),
        operation="UPDATE", sub_resource="ephemeralcontainers", old=_running()),
    "kubectl-debug-env-all": RouteCase(
        3, _debugged(env=_env(NVIDIA_VISIBLE_DEVICES="all")),
        Refused("device-variables", "debugger-x7k2p"),
        operation="UPDATE", sub_resource="ephemeralcontainers", old=_running()),
    "kubectl-debug-sysadmin-profile": RouteCase(
        3, _debugged(securityContext={"privileged": True}),
        Refused("privileged", "debugger-x7k2p"),
        operation="UPDATE", sub_resource="ephemeralcontainers", old=_running()),
    "kubectl-debug-mps-pipe": RouteCase(
        3, _debugged(env=_env(CUDA_MPS_PIPE_DIRECTORY="/tmp/p")),
        Refused("mps-directories", "debugger-x7k2p"),
        operation="UPDATE", sub_resource="ephemeralcontainers", old=_running()),
    # 4. MPS limits.
    "mps-threads-200": RouteCase(
        4, pod(shared(env=_env(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="200"))),
        Refused("mps-limits", "main")),
    "mps-threads-abc": RouteCase(
        4, pod(shared(env=_env(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="abc"))),
        Refused("mps-limits", "main")),
    "mps-threads-value-from": RouteCase(
        4, pod(shared(env=_env(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={"secretKeyRef": {
            "name": "s", "key": "k"}}))), Refused("mps-limits", "main")),
    "mps-threads-reference": RouteCase(
        4, pod(shared(env=_env(X="90", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$(X)"))),
        Refused("mps-limits", "main")),
    "mps-memory-kubernetes-unit": RouteCase(
        4, pod(shared(env=_env(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=15Gi"))),
        Refused("mps-limits", "main")),
    "mps-memory-no-unit": RouteCase(
        4, pod(shared(env=_env(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=16000"))),
        Refused("mps-limits", "main")),
    "mps-pipe-directory": RouteCase(
        4, pod(shared(env=_env(CUDA_MPS_PIPE_DIRECTORY="/tmp/own"))),
        Refused("mps-directories", "main")),
    # 5. Host access.
    "privileged-shared-gpu-pod": RouteCase(
        5, pod(shared(securityContext={"privileged": True})), Refused("privileged", "main")),
    "privileged-pod-without-gpu": RouteCase(
        5, pod(container(securityContext={"privileged": True}), tolerations=[GPU_TOLERATION]),
        Refused("privileged", "main")),
    "sys-admin": RouteCase(
        5, pod(shared(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}})),
        Refused("capabilities", "main")),
    "all-capabilities-lower-case": RouteCase(
        5, pod(shared(securityContext={"capabilities": {"add": ["all"]}})),
        Refused("capabilities", "main")),
    "host-pid": RouteCase(5, pod(shared(), hostPID=True), Refused("host-namespaces")),
    "host-ipc": RouteCase(5, pod(shared(), hostIPC=True), Refused("host-namespaces")),
    "host-path-dev": RouteCase(
        5, pod(shared(volumeMounts=[{"name": "d", "mountPath": "/dev"}]),
               volumes=[{"name": "d", "hostPath": {"path": "/dev"}}]), Refused("host-path")),
    "host-path-mps-pipes": RouteCase(
        5, pod(shared(volumeMounts=[{"name": "m", "mountPath": "/mps"}]),
               volumes=[{"name": "m", "hostPath": {"path": "/run/nvidia/mps"}}]),
        Refused("host-path")),
    "mps-control-pipe-in-a-pod-without-gpu": RouteCase(
        5, pod(container("ctl", image="busybox:1.36",
                         volumeMounts=[{"name": "m", "mountPath": "/mps"}]),
               volumes=[{"name": "m", "hostPath": {"path": "/run/nvidia/mps"}}]),
        Refused("host-path")),
    "host-path-root": RouteCase(
        5, pod(shared(volumeMounts=[{"name": "r", "mountPath": "/host"}]),
               volumes=[{"name": "r", "hostPath": {"path": "/"}}]), Refused("host-path")),
    "device-list-mount-in-a-pod-without-gpu": RouteCase(
        5, pod(container(volumeMounts=[
            {"name": "null", "mountPath": "/var/run/nvidia-container-devices/all"}]),
            volumes=[{"name": "null", "hostPath": {"path": "/dev/null"}}]),
        Refused("device-list-mount", "main")),
    "device-list-mount-prefix": RouteCase(
        5, pod(container(volumeMounts=[
            {"name": "e", "mountPath": "/var/run/nvidia-container-devices0"}]),
            volumes=[{"name": "e", "emptyDir": {}}]), Refused("device-list-mount", "main")),
    "cdi-annotation": RouteCase(
        5, pod(container(), annotations={"cdi.k8s.io/debug": "nvidia.com/gpu=all"}),
        Refused("cdi-annotations")),
    "resource-claim": RouteCase(
        5, pod(container(resources={"claims": [{"name": "g"}]}),
               resourceClaims=[{"name": "g", "resourceClaimTemplateName": "full-gpu"}]),
        Refused("resource-claims")),
    # 5, issue 19: paths as the node resolves them (in namespaces that enforce Pod Security
    # baseline too: the webhook refuses them before Pod Security runs).
    "host-path-through-proc-self-root": RouteCase(
        5, _host_path("/proc/self/root/run/nvidia/mps", "/mps"), Refused("host-path"),
        pod_security="baseline"),
    "host-path-through-proc-1-root": RouteCase(
        5, _host_path("/proc/1/root/run/nvidia/mps", "/mps"), Refused("host-path"),
        pod_security="baseline"),
    "host-path-through-proc-1-cwd": RouteCase(
        5, _host_path("/proc/1/cwd/run/nvidia", gpu=True), Refused("host-path"),
        pod_security="restricted"),
    "relative-device-list-mount": RouteCase(
        5, _device_list("var/run/nvidia-container-devices/all"),
        Refused("device-list-mount", "main"), pod_security="baseline"),
    "dot-relative-device-list-mount": RouteCase(
        5, _device_list("./var/run/nvidia-container-devices/all"),
        Refused("device-list-mount", "main"), pod_security="baseline"),
    "dot-dot-relative-device-list-mount": RouteCase(
        5, _device_list("../var/run/nvidia-container-devices/0"),
        Refused("device-list-mount", "main")),
    "kubectl-debug-relative-device-list-mount": RouteCase(
        5, _with_scratch(_debugged(volumeMounts=[
            {"name": "scratch", "mountPath": "var/run/nvidia-container-devices/all"}])),
        Refused("device-list-mount", "debugger-x7k2p"), operation="UPDATE",
        sub_resource="ephemeralcontainers", old=_with_scratch(_running()),
        pod_security="baseline"),
    "device-plugin-sockets": RouteCase(
        5, _host_path("/var/lib/kubelet/device-plugins"), Refused("host-path"),
        pod_security="baseline"),
    "pod-resources-socket": RouteCase(
        5, _host_path("/var/lib/kubelet/pod-resources/kubelet.sock"), Refused("host-path")),
    "cdi-spec-directory": RouteCase(
        5, _host_path("/etc/cdi", gpu=True), Refused("host-path"), pod_security="baseline"),
    "cdi-spec-run-directory": RouteCase(
        5, _host_path("/var/run/cdi"), Refused("host-path")),
    "containerd-socket": RouteCase(
        5, _host_path("/run/containerd/containerd.sock"), Refused("host-path"),
        pod_security="baseline"),
    "docker-socket-through-var-run": RouteCase(
        5, _host_path("/var/run/docker.sock"), Refused("host-path")),
    "sysfs-pci-devices": RouteCase(
        5, _host_path("/sys/bus/pci/devices", gpu=True), Refused("host-path"),
        pod_security="baseline"),
    "dev-fd-link": RouteCase(
        5, _host_path("/dev/fd/3/run/nvidia/mps"), Refused("host-path")),
    # 5: the driver's files the toolkit mounts into GPU containers, and more runtimes' sockets.
    "video-decoder-library": RouteCase(
        5, _host_path("/lib/x86_64-linux-gnu/libnvcuvid.so.1", gpu=True), Refused("host-path"),
        pod_security="baseline"),
    "vulkan-icd-file": RouteCase(
        5, _host_path("/usr/share/vulkan/icd.d/nvidia_icd.json", gpu=True),
        Refused("host-path")),
    "cos-driver-directory": RouteCase(
        5, _host_path("/var/lib/nvidia"), Refused("host-path"), pod_security="baseline"),
    "podman-socket": RouteCase(
        5, _host_path("/var/run/podman/podman.sock"), Refused("host-path")),
    "buildkit-socket": RouteCase(
        5, _host_path("/run/buildkit/buildkitd.sock"), Refused("host-path"),
        pod_security="baseline"),
    "k0s-containerd-socket": RouteCase(
        5, _host_path("/run/k0s/containerd.sock"), Refused("host-path")),
    "kata-shim-sockets": RouteCase(
        5, _host_path("/run/vc/sbs"), Refused("host-path"), pod_security="baseline"),
    "sys-ptrace-in-a-gpu-pod": RouteCase(
        5, pod(shared(securityContext={"capabilities": {"add": ["SYS_PTRACE"]}})),
        Refused("capabilities", "main"), pod_security="baseline"),
    "sys-module-in-a-gpu-pod": RouteCase(
        5, pod(shared(securityContext={"capabilities": {"add": ["CAP_SYS_MODULE"]}})),
        Refused("capabilities", "main")),
    "sys-rawio-in-a-gpu-init-container": RouteCase(
        5, pod(shared(), init=[container("init", securityContext={
            "capabilities": {"add": ["sys_rawio"]}})]), Refused("capabilities", "init")),
    "visible-devices-none-without-gpu": RouteCase(
        1, pod(container(env=_env(NVIDIA_VISIBLE_DEVICES="none"))),
        Refused("device-variables", "main")),
    # 8. Later changes the runtime reads: a Pod update that adds or changes a CDI annotation.
    "cdi-annotation-added-by-an-update": RouteCase(
        8, _annotated(**{"cdi.k8s.io/extra": "nvidia.com/gpu=all"}), Refused("cdi-annotations"),
        operation="UPDATE", old=_running()),
    "nvidia-cdi-annotation-added-by-an-update": RouteCase(
        8, _annotated(**{"nvidia.cdi.k8s.io/x": "nvidia.com/gpu=0"}), Refused("cdi-annotations"),
        operation="UPDATE", old=_running(), pod_security="baseline"),
    "cdi-annotation-changed-by-an-update": RouteCase(
        8, _annotated(**{"cdi.k8s.io/extra": "nvidia.com/gpu=all"}), Refused("cdi-annotations"),
        operation="UPDATE", old=_annotated(**{"cdi.k8s.io/extra": "vendor.com/net=eth1"})),
    "cdi-annotation-added-by-a-status-update": RouteCase(
        8, _annotated(**{"cdi.k8s.io/extra": "nvidia.com/gpu=all"}), Refused("cdi-annotations"),
        operation="UPDATE", sub_resource="status", old=_running()),
    "dra-class-by-extended-resource-name": RouteCase(
        5, pod(container(limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1})),
        Refused("resource-claims", "main"), pod_security="baseline"),
    # A pod admitted before the namespace opted in (or while host-path was in warn mode).
    "kubectl-debug-mounts-the-mps-pipes-of-an-older-pod": RouteCase(
        5, _with_mps_pipes(_debugged(volumeMounts=[{"name": "pipes", "mountPath": "/mps"}])),
        Refused("host-path", "debugger-x7k2p"), operation="UPDATE",
        sub_resource="ephemeralcontainers", old=_with_mps_pipes(_running()),
        pod_security="baseline"),
    "kubectl-debug-writable-mount-of-a-read-only-host-path": RouteCase(
        9, _model_pod(_debug(volumeMounts=[{"name": "models", "mountPath": "/w"}])),
        Refused("host-access", "debugger-x7k2p"), policy="lab", operation="UPDATE",
        sub_resource="ephemeralcontainers", old=_model_pod()),
    # A pod admitted before the namespace opted in, with a hostPath no entry allows.
    "kubectl-debug-mounts-a-host-path-no-entry-allows": RouteCase(
        9, _other_host_pod(_debug(volumeMounts=[{"name": "other", "mountPath": "/o"}])),
        Refused("host-access", "debugger-x7k2p"), policy="lab", operation="UPDATE",
        sub_resource="ephemeralcontainers", old=_other_host_pod()),
    # 9. No dependence on Pod Security: baseline's host-access checks where the namespace
    # does not enforce it (no label, or `privileged`).
    "host-pid-in-a-pod-without-gpu": RouteCase(
        9, pod(container(securityContext={"capabilities": {"add": ["SYS_PTRACE"]}}),
               hostPID=True), Refused("host-access")),
    "host-network-in-a-gpu-pod": RouteCase(
        9, pod(shared(), hostNetwork=True), Refused("host-access"), pod_security="privileged"),
    "sys-ptrace-in-a-pod-without-gpu": RouteCase(
        9, pod(container(securityContext={"capabilities": {"add": ["SYS_PTRACE"]}})),
        Refused("host-access", "main")),
    "model-cache-not-allowed": RouteCase(
        9, _host_path("/home/nvidia/.cache/huggingface", "/root/.cache/huggingface", gpu=True),
        Refused("host-access")),
    "allowed-read-only-path-mounted-writable": RouteCase(
        9, _host_path("/srv/models/llama", "/models", gpu=True), Refused("host-access", "main"),
        policy="lab"),
    "below-a-writable-allowed-path": RouteCase(
        9, _host_path("/srv/scratch/link", "/data"), Refused("host-access"), policy="lab"),
    "allowed-read-only-path": RouteCase(
        9, _host_path("/srv/models/llama", "/models", gpu=True, readOnly=True),
        Fixed(lambda o: o["spec"]["volumes"][0]["hostPath"]["path"] == "/srv/models/llama",
              "the model cache mounted read-only"), policy="lab"),
    "allowed-writable-path-itself": RouteCase(
        9, _host_path("/srv/scratch", "/scratch"),
        Fixed(lambda o: o["spec"]["volumes"][0]["hostPath"]["path"] == "/srv/scratch",
              "the scratch directory itself"), policy="lab"),
    # 6. Updates: never refused when the templates stay as they were.
    "scale-a-deployment-of-an-unknown-policy": RouteCase(
        6, _deployment(_BROKEN_TEMPLATE, replicas=0), Warned("its new pods will be refused"),
        policy="typo", operation="UPDATE", old=_deployment(_BROKEN_TEMPLATE, replicas=3)),
    "remove-a-finalizer-during-deletion": RouteCase(
        6, workload("Job", _BROKEN_TEMPLATE), Warned("its new pods will be refused"),
        operation="UPDATE",
        old={**workload("Job", _BROKEN_TEMPLATE),
             "metadata": {"name": "w", "namespace": "team-a", "finalizers": ["x.io/keep"]}}),
    "an-update-that-breaks-the-template": RouteCase(
        6, _deployment(_BROKEN_TEMPLATE), Refused("device-variables", "main"),
        operation="UPDATE", old=_deployment(pod(shared()))),
    # 7. Names.
    "mig-shared-resource-not-in-the-policy": RouteCase(
        7, pod(shared(resource="nvidia.com/mig-3g.40gb.shared")),
        Refused("resource-not-allowed", "main")),
    "VOID-is-not-void": RouteCase(
        7, pod(container(env=_env(NVIDIA_VISIBLE_DEVICES="VOID"))),
        Refused("device-variables", "main")),
    # The limits a policy sets.
    "mps-memory-above-the-profile": RouteCase(
        0, pod(shared(env=_env(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=20G"))),
        Refused("mps-limits", "main"), policy="limits"),
    "mps-memory-limit-of-another-device": RouteCase(
        0, pod(shared(env=_env(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="7=1K"))),
        Refused("mps-limits", "main"), policy="limits"),
    "more-exclusive-gpus-than-the-policy-allows": RouteCase(
        0, pod(container(limits={"nvidia.com/gpu": 4})), Refused("exclusive-gpus"),
        policy="limits"),
    "passthrough-gpus-beyond-the-policy": RouteCase(
        0, pod(container(limits={"nvidia.com/GA102GL_A10": 3})), Refused("exclusive-gpus"),
        policy="limits"),
    "driver-capabilities-beyond-the-policy": RouteCase(
        0, pod(shared(env=_env(NVIDIA_DRIVER_CAPABILITIES="compute,utility,graphics"))),
        Refused("driver-capabilities", "main"), policy="limits"),
    "driver-capabilities-the-image-would-set": RouteCase(
        0, pod(container(limits={"nvidia.com/gpu": 1})),
        Fixed(lambda o: {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}
              in o["spec"]["containers"][0].get("env", []), "the policy's capabilities"),
        policy="limits"),
    "shared-gpu-and-a-gpu-claim": RouteCase(
        0, pod(shared(resources={"limits": {"nvidia.com/gpu.shared": 1},
                                 "claims": [{"name": "gpu"}]}),
               resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "a100"}]),
        Refused("shared-with-claims"), policy="dra"),
    # Two replicas where a one-GPU class allows it: pinned to nodes with two GPUs or more.
    "two-replicas-pinned-to-two-gpus": RouteCase(
        0, pod(shared(2)), Fixed(_pinned_to_two_gpus, "nodeAffinity count Gt 1"), policy="lab"),
}
