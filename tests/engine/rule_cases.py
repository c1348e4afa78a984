"""The rule table: for each rule, objects it refuses under a policy, the rules and containers
named, and the refusal word for word (the rule's name last, its fix before it).

tests/engine/test_rules.py judges the table; tests/engine/test_warnings.py holds its messages to
what the API server keeps; tests/support/corpus.py counts its objects among every object
we know. `lab` is the table's policy and `env` its variables, which other tests of policies
use too.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kube import (
    A10G_TS,
    PROFILES,
    T4_MPS,
    container,
    make_policy,
    pod,
    shared,
)
from webhook.policy import policies

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
    # Values of another type in fields the rules read as strings: the reader keeps them as
    # their text (the compiled core checks a value's type where it reads it).
    pytest.param(
        pod(shared(), affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": [1]}]}]}}}),
        lab(), [("malformed-object", None), ("node-selection", None)],
        "2 problems: (1) spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].values[0]: must be a string, not a number: no"
        " Kubernetes object has this shape. Fix the field (the API server would refuse it too)"
        " (rule malformed-object); (2) node selection matches no allowed class: the pod's"
        " affinity nvidia.com/gpu.product In (1) matches no node class of policy \"lab\" that"
        " serves nvidia.com/gpu.shared: t4-mps [nvidia.com/gpu.sharing-strategy=mps,"
        " nvidia.com/gpu.product=Tesla-T4, nvidia.com/gpu.replicas=4]; a10g-ts"
        " [nvidia.com/gpu.sharing-strategy=time-slicing, nvidia.com/gpu.product=NVIDIA-A10G,"
        " nvidia.com/gpu.replicas=4]. Remove or change that selector (rule node-selection)",
        id="malformed-affinity-values",
    ),
    pytest.param(
        pod(shared(), annotations={"gpu-share.io/profile": []}),  # type: ignore[dict-item]
        lab(), [("malformed-object", None), ("profile", None)],
        "2 problems: (1) metadata.annotations.gpu-share.io/profile: must be a string, not a list:"
        " no Kubernetes object has this shape. Fix the field (the API server would refuse it"
        " too) (rule malformed-object); (2) unknown profile: \"[]\" (annotation"
        " gpu-share.io/profile); policy \"lab\" offers: medium, small. Use one of them, or"
        " remove the annotation for the default \"medium\" (rule profile)",
        id="malformed-profile",
    ),
    pytest.param(
        pod(*(shared(name=f"c{i}") for i in range(1000)), init=[container("setup")]),
        lab(), [("object-too-large", None)],
        "spec.containers: 1,001 containers (init, regular and ephemeral together);"
        " gpu-share-webhook reviews at most 1,000 in one object, a bound on the time and memory"
        " of a review that no workload comes near. Spread the containers over several pods"
        " (rule object-too-large)",
        id="too-many-containers",
    ),
    pytest.param(
        pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                    "values": [f"node-{i}"]}]}
                                  for i in range(1001)]}}}),
        lab(), [("object-too-large", None)],
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms: 1,001 required node selector terms; gpu-share-webhook reviews at"
        " most 1,000 in one object, a bound on the time and memory of a review that no workload"
        " comes near. Write the selection in fewer terms (rule object-too-large)",
        id="too-many-terms",
    ),
]
