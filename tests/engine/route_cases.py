"""The route table: every way a user who wants more GPU than their share could try it, and what
must come of each request: refused by a rule, fixed (the stored object hides the GPUs), or let
through with a warning.

tests/engine/test_escape_routes.py sends each case through the three doors (the core, HTTPS,
the rendered configurations); tests/support/corpus.py counts its objects among every object
we know. LAB_POLICY and LIMITS_POLICY are the policies its namespaces may name besides the
shipped ones (files of a policies directory, as an admin writes them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.kube import (
    container,
    pod,
    shared,
    workload,
)

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
    # 5: paths as the node resolves them (in namespaces that enforce Pod Security
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
