"""The rules: one small named unit each, in one table (`RULES`).

A rule says what it looks at (its scope, and the switch that turns it off), the violations
it returns (its `check`) and the patch operations it contributes (its `patch`). Its name is
what the refusal, the metric label, the audit annotation, the `gpu-share.io/mutations`
record and docs/security.md all use.

`reviewing.run` runs every check over every container (init, sidecar, ephemeral) and
reports every violation in one denial; only an object with none is patched. Checks read
the object as sent; a patch only adds what a check would accept, so the patched object
passes them too (validation on the defaulted object, as controller-runtime does it).

Adding a rule next year is: a function or two here, one `Rule(...)` row in `RULES`, one row
in its test table, one line in docs/security.md.
"""

from __future__ import annotations

import enum
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webhook import names
from webhook.core import placing, pods, quantities
from webhook.core.decisions import MALFORMED, MAX_WARNING, Violation
from webhook.policies import (
    POLICY_NOT_LOADED,
    UNKNOWN_POLICY,
    NodeClass,
    Policy,
    Profile,
    RulesSpec,
)


class Scope(enum.Enum):
    """Which pods a rule looks at."""

    # Every pod that reaches the webhook in an opted-in namespace.
    EVERY_POD = "every pod"
    # Pods with a container that asks for a GPU (shared or not).
    GPU_POD = "pods that use a GPU"
    # Pods with a container that asks for one of the policy's shared resources.
    SHARED_POD = "pods that use a shared GPU"


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    scope: Scope
    # What it refuses or adds, in one line (docs/security.md lists the same).
    summary: str
    check: Callable[[Review], None] | None = None
    patch: Callable[[Review], None] | None = None
    # The field of a policy's `spec.rules` that turns the rule off (None: always on).
    switch: str | None = None
    # Looks at the pod as a whole (placement, volumes, host namespaces): not run again when
    # an update only adds ephemeral containers.
    pod_level: bool = False
    # Does not depend on the policy: also applied where the namespace's policy is not in
    # force (an unknown name, a file that does not load).
    always: bool = False
    # Its patch must be in place when a Pod reaches the validating webhook: a pod without
    # it could reach more GPU than the policy grants.
    required: bool = False


# The Python attribute of each switch (`denyPrivileged` -> `deny_privileged`).
_SWITCH_ATTRIBUTES = {f.alias: name for name, f in RulesSpec.model_fields.items() if f.alias}


class Review:
    """One pass of the rules over one pod: what they found, and what they add."""

    __slots__ = (
        "_env_lists",
        "audit",
        "classes",
        "constraints",
        "gpu",
        "judged",
        "mutate",
        "ops",
        "pod",
        "policy",
        "profile",
        "requested",
        "require",
        "resource",
        "resource_problems",
        "violations",
        "warnings",
        "would_refuse",
    )

    def __init__(self, pod: pods.Pod, policy: Policy, *, mutate: bool, require: bool) -> None:
        self.pod = pod
        self.policy = policy
        # Build the patch (mutating endpoint, CLI); or check that the required parts of it
        # are there (validating a Pod); or neither (validating a workload's template).
        self.mutate = mutate
        self.require = require
        self.violations: list[Violation] = []
        # Violations of rules the policy does not enforce: (mode, violation).
        self.would_refuse: list[tuple[str, Violation]] = []
        self.warnings: list[str] = []
        self.audit: dict[str, str] = {}
        self.ops: list[tuple[str, dict[str, Any]]] = []
        self._env_lists: set[str] = set()
        self.resource_problems: list[tuple[str, pods.Container, str]] = []
        self.gpu = False
        # The shared resources the pod asks for, sorted.
        self.requested: list[str] = []
        self.profile: Profile | None = None
        # The classes the pod may land on; None once placement has failed or cannot start.
        self.classes: tuple[NodeClass, ...] | None = None
        self.constraints = placing.NO_CONSTRAINTS
        # The containers the rules judge (all, but on an ephemeral-containers update).
        self.judged = [c for c in pod.containers if c.judged]
        _classify(self)
        # The one shared resource the pod asks for (None: none, or several).
        self.resource = self.requested[0] if len(self.requested) == 1 else None


    def deny(self, rule: str, message: str, container: str | None = None) -> None:
        self.violations.append(Violation(rule, message, container))

    def warn(self, text: str) -> None:
        if len(text) > MAX_WARNING:
            text = text[: MAX_WARNING - 3] + "..."
        if text not in self.warnings:
            self.warnings.append(text)

    def add(self, rule: str, op: dict[str, Any]) -> None:
        self.ops.append((rule, op))

    def relax(self) -> None:
        """Move the violations of rules the policy does not enforce to `would_refuse`."""
        policy = self.policy
        if policy.mode == names.ENFORCE and not policy.rule_modes:
            return
        kept = []
        for v in self.violations:
            mode = policy.mode_of(v.rule)
            if mode == names.ENFORCE:
                kept.append(v)
            else:
                self.would_refuse.append((mode, v))
        self.violations = kept

    def add_env(self, rule: str, c: pods.Container, new: list[dict[str, str]], what: str) -> None:
        """Add variables to a container's env (appending where the list exists). Validating a
        Pod, they must be there already: each missing one is a violation of `rule`."""
        if self.require:
            shown = ", ".join(f"{v['name']}={v['value']}" for v in new)
            self.deny(
                rule,
                f'container "{c.name}": missing {shown} ({what}), which the mutating webhook'
                " adds: it did not run, or a later change took it away. Create the pod again,"
                " or set it as shown",
                c.name,
            )
            return
        base = f"{c.pointer}/env"
        if c.has_env_list or base in self._env_lists:
            for v in new:
                self.add(rule, {"op": "add", "path": f"{base}/-", "value": v})
        else:
            self._env_lists.add(base)
            self.add(rule, {"op": "add", "path": base, "value": new})


def _shown(value: object) -> str:
    """A value for a message: quoted, and cut short (messages are bounded, inputs are not)."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > 40:
        text = f"{text[:32]}... ({len(text)} characters)"
    return f'"{text}"'


def _is_gpu_resource(name: object, policy: Policy) -> bool:
    return isinstance(name, str) and (
        name.startswith(names.GPU_RESOURCE_PREFIXES) or name in policy.shared_resources
    )


def _classify(r: Review) -> None:
    """Each container's GPU resources: shared replicas, exclusive, not allowed; quantity and
    requests/limits problems are kept for their rules."""
    policy = r.policy
    shared_names = policy.shared_resources
    requested: set[str] = set()
    for c in r.pod.containers:
        limits, requests = c.limits, c.requests
        if not limits and not requests:
            continue
        wanted = [k for k in limits if _is_gpu_resource(k, policy)]
        if requests:
            wanted += [k for k in requests if k not in limits and _is_gpu_resource(k, policy)]
        for name in wanted:
            counts: dict[str, int] = {}
            bad = False
            for part, values in (("limits", limits), ("requests", requests)):
                if name not in values:
                    continue
                try:
                    counts[part] = quantities.count(values[name])
                except quantities.QuantityError as exc:
                    bad = True
                    r.resource_problems.append(
                        (
                            "invalid-quantity",
                            c,
                            f"{c.field}.resources.{part}[{name}]: {_shown(values[name])} {exc}",
                        )
                    )
            shared = name in shared_names
            if bad:
                # Counted as one replica so that the other rules still say what they see.
                counts = {"limits": 1}
            elif shared and "requests" in counts and "limits" not in counts:
                r.resource_problems.append(
                    (
                        "requests-limits-mismatch",
                        c,
                        f"requests {name}: {requests[name]} with no limit, and an extended"
                        f" resource is asked for in limits. Set limits {name}: {requests[name]}"
                        " (requests may then be left out)",
                    )
                )
            elif shared and "requests" in counts and counts["requests"] != counts["limits"]:
                r.resource_problems.append(
                    (
                        "requests-limits-mismatch",
                        c,
                        f"{name} requests {requests[name]}, limits {limits[name]}; they must be"
                        f" equal. Set both to {limits[name]}, or set only limits",
                    )
                )
            count = counts.get("limits", counts.get("requests", 0))
            if not count:
                continue
            r.gpu = True
            if shared:
                c.shared[name] = count
                requested.add(name)
            elif name.endswith(names.SHARED_SUFFIX):
                r.resource_problems.append(("resource-not-allowed", c, name))
            else:
                c.exclusive.append(name)
    r.requested = sorted(requested)


# --------------------------------------------------------------------------- shape, resources


def malformed(problem: str) -> Violation:
    """The violation for a shape problem (`pods` finds them)."""
    return Violation(
        MALFORMED,
        f"{problem}: no Kubernetes object has this shape. Fix the field (the API server would"
        " refuse it too)",
    )


def check_malformed(r: Review) -> None:
    if r.pod.problems:
        r.violations.extend(malformed(problem) for problem in r.pod.problems)


def _resource_check(rule: str) -> Callable[[Review], None]:
    def check(r: Review) -> None:
        for found, c, detail in r.resource_problems:
            if found != rule:
                continue
            if rule == "invalid-quantity":
                r.deny(
                    rule,
                    f'container "{c.name}": invalid quantity: {detail}. A GPU is asked for in'
                    " whole devices: set the quantity to a whole number such as 1",
                    c.name,
                )
            elif rule == "requests-limits-mismatch":
                r.deny(
                    rule, f'container "{c.name}": requests and limits disagree: {detail}', c.name
                )
            else:
                allowed = ", ".join(sorted(r.policy.shared_resources)) or "none"
                r.deny(
                    rule,
                    f'container "{c.name}": resource not allowed: {detail} is not a shared GPU'
                    f' policy "{r.policy.name}" allows (it allows: {allowed}). Ask for one of'
                    " those, or ask the cluster admin for a policy that shares it",
                    c.name,
                )

    check.__name__ = f"check_{rule.replace('-', '_')}"
    return check


def check_exclusive_with_shared(r: Review) -> None:
    exclusive = [c for c in r.pod.containers if c.exclusive]
    if not exclusive:
        return
    users = [c for c in r.pod.containers if c.shared]
    ex = ", ".join(f'"{c.name}" asks for {", ".join(c.exclusive)}' for c in exclusive)
    sh = ", ".join(f'"{c.name}" for {", ".join(c.shared)}' for c in users)
    r.deny(
        "exclusive-with-shared",
        f"exclusive and shared GPUs in one pod: container {ex}, container {sh}; one pod lands"
        f" on one kind of node. Ask for {', '.join(r.requested)} only, or run the exclusive"
        " GPU in a pod of its own",
    )


def check_several_shared_resources(r: Review) -> None:
    if len(r.requested) > 1:
        r.deny(
            "several-shared-resources",
            f"several shared resources: the pod asks for {', '.join(r.requested)}, and a node"
            " class serves one. Ask for one of them in every container",
        )


def check_runtime_class(r: Review) -> None:
    wanted = r.policy.runtime_class_name
    if r.pod.runtime_class not in (None, "", wanted):
        r.deny(
            "runtime-class",
            f'runtime class: runtimeClassName "{r.pod.runtime_class}" is not the one policy'
            f' "{r.policy.name}" uses for shared GPUs ("{wanted}"). Remove runtimeClassName'
            f' (the webhook sets it) or set it to "{wanted}"',
        )


def patch_runtime_class(r: Review) -> None:
    if r.classes and not r.pod.runtime_class:
        r.add(
            "runtime-class",
            {
                "op": "add",
                "path": f"{r.pod.template.pointer}/spec/runtimeClassName",
                "value": r.policy.runtime_class_name,
            },
        )


def check_profile(r: Review) -> None:
    policy = r.policy
    wanted = r.pod.annotations.get(names.ANNOTATION_PROFILE)
    if wanted is None:
        r.profile = policy.profiles[policy.default_profile] if policy.default_profile else None
        return
    name = str(wanted)
    found = policy.profiles.get(name)
    if found is not None:
        r.profile = found
        return
    offered = ", ".join(sorted(policy.profiles))
    shown = _shown(name)
    if not offered:
        r.deny(
            "profile",
            f"unknown profile: {shown} (annotation {names.ANNOTATION_PROFILE}), and policy"
            f' "{policy.name}" defines no MPS profiles. Remove the annotation',
        )
    elif name in policy.foreign_profiles:
        r.deny(
            "profile",
            f"profile not allowed: {shown} (annotation {names.ANNOTATION_PROFILE}) is not one"
            f' policy "{policy.name}" allows; it offers: {offered}. Use one of them, or remove'
            f' the annotation for the default "{policy.default_profile}"',
        )
    else:
        r.deny(
            "profile",
            f"unknown profile: {shown} (annotation {names.ANNOTATION_PROFILE}); policy"
            f' "{policy.name}" offers: {offered}. Use one of them, or remove the annotation'
            f' for the default "{policy.default_profile}"',
        )


# --------------------------------------------------------------------------- environment


def _reference(value: str) -> bool:
    """Whether the kubelet would expand a `$(VAR)` reference in `value`: what it ends up as
    cannot be known at admission."""
    return "$(" in value


def check_device_variables(r: Review) -> None:
    """Route 1: a value for NVIDIA_VISIBLE_DEVICES (and the toolkit's other device variables)
    that does not only hide devices, on any container."""
    for c in r.judged:
        for var in c.env:
            if var.name not in names.DEVICE_VARIABLES:
                continue
            where = f"{c.field}.env[{var.position}]"
            if var.value is None:
                problem = f"{var.name} from valueFrom ({where}) cannot be read at admission"
            elif _reference(var.value):
                problem = (
                    f"{var.name}={_shown(var.value)} ({where}) refers to another variable,"
                    " which cannot be read at admission"
                )
            elif var.value in names.HIDING_VALUES:
                continue
            else:
                problem = f"{var.name}={_shown(var.value)} ({where}) is not one that hides GPUs"
            whose = (
                "the device plugin sets it for a container that asks for a GPU, and a value of"
                " the pod's can widen what the NVIDIA runtime gives it"
                if c.gpu
                else "on a container that asks for no GPU it exposes GPUs outside the device"
                " plugin's allocation"
            )
            fix = (
                "Remove it"
                if c.gpu
                else f"Remove it (or set it to void), or ask for {_preferred(r.policy)}: 1 if"
                " the container needs a GPU"
            )
            r.deny(
                "device-variables",
                f'container "{c.name}": device variable: {problem}; {whose}. {fix}',
                c.name,
            )


def _preferred(policy: Policy) -> str:
    return min(policy.shared_resources) if policy.shared_resources else "nvidia.com/gpu.shared"


def check_env_from(r: Review) -> None:
    """Route 1: envFrom on a container that uses a GPU can set the device and MPS variables
    from a ConfigMap or Secret, which admission cannot read."""
    offenders = [c for c in r.judged if c.gpu and c.env_from]
    if not offenders:
        return
    if r.policy.rules.deny_env_from_on_gpu_containers:
        for c in offenders:
            r.deny(
                "env-from",
                f'container "{c.name}": envFrom on a container that uses a GPU: a ConfigMap'
                " or Secret can set NVIDIA_VISIBLE_DEVICES or CUDA_MPS_* there, which cannot"
                " be checked at admission. Set the variables the container needs with env",
                c.name,
            )
        return
    listed = ",".join(c.name for c in offenders)
    r.audit["env-from"] = listed
    for c in offenders:
        r.warn(
            f'container "{c.name}" uses envFrom: NVIDIA_* or CUDA_MPS_* set there are not checked'
        )


def check_mps_directories(r: Review) -> None:
    """Route 4: the MPS daemon's directories are the device plugin's to set."""
    for c in r.judged:
        if c.exclusive and not c.shared:
            # A whole GPU of its own: the pod may run its own MPS daemon on it.
            continue
        for var in c.env:
            if var.name in names.MPS_DIRECTORIES:
                r.deny(
                    "mps-directories",
                    f'container "{c.name}": {var.name} ({c.field}.env[{var.position}]) is set by'
                    " the device plugin for a container with an MPS replica; a value of the"
                    " pod's can detach the process from the MPS daemon and its limits. Remove"
                    " it",
                    c.name,
                )


# --------------------------------------------------------------------------- host access


def check_privileged(r: Review) -> None:
    for c in r.judged:
        if c.privileged:
            r.deny(
                "privileged",
                f'container "{c.name}": privileged container: it sees every device of the'
                " node, GPUs included, whatever it asked for. Remove"
                f" {c.field}.securityContext.privileged",
                c.name,
            )


_WIDE_CAPABILITIES = frozenset({"SYS_ADMIN", "ALL"})


def _capability(name: str) -> str:
    # Container runtimes take capabilities with or without the CAP_ prefix, in any case.
    upper = name.strip().upper()
    return upper[4:] if upper.startswith("CAP_") else upper


def check_capabilities(r: Review) -> None:
    for c in r.judged:
        if not c.capabilities:
            continue
        wide = sorted({_capability(a) for a in c.capabilities} & _WIDE_CAPABILITIES)
        if wide:
            r.deny(
                "capabilities",
                f'container "{c.name}": added capabilities {", ".join(wide)} in a pod that'
                " uses a GPU: with them a container can reach devices and processes beyond"
                f" its GPU. Remove them from {c.field}.securityContext.capabilities.add",
                c.name,
            )


def check_host_namespaces(r: Review) -> None:
    pod = r.pod
    for flag, on, what in (
        (
            "hostPID",
            pod.host_pid,
            "see and signal every process of the node, the GPU"
            " processes of other pods and the MPS daemon included",
        ),
        (
            "hostIPC",
            pod.host_ipc,
            "reach the shared memory of the node's other processes, the MPS daemon's included",
        ),
    ):
        if on:
            r.deny(
                "host-namespaces",
                f"host namespace: {pod.at('spec.' + flag)} in a pod that uses a GPU lets its"
                f" containers {what}. Remove {flag}",
            )


def _clean(path: str) -> str:
    """A path as the kernel resolves it, without the host's symlinks: `//dev/./` -> `/dev`."""
    cleaned = posixpath.normpath(re.sub(r"/+", "/", path)) if path else path
    return "/" + cleaned.lstrip("/") if cleaned.startswith("/") else cleaned


def exposes_devices(path: str) -> bool:
    """Whether a hostPath gives GPU device nodes, the driver's or the MPS daemon's files:
    one of the device paths, a path under one, or a directory that holds one."""
    p = _clean(path)
    if p == "/":
        return True
    holder = p.rstrip("/") + "/"
    return any(p.startswith(root) or root.startswith(holder) for root in names.DEVICE_HOST_PATHS)


def check_host_path(r: Review) -> None:
    pod = r.pod
    for v in pod.volumes:
        if v.host_path is not None and exposes_devices(v.host_path):
            mounted = sorted(
                {c.name for c in pod.containers for m in c.mounts if m.volume == v.name}
            )
            by = f" (mounted by {', '.join(mounted)})" if mounted else ""
            r.deny(
                "host-path",
                f'volume "{v.name}" ({pod.at(f"spec.volumes[{v.position}]")}): hostPath'
                f" {_shown(v.host_path)}{by} exposes the node's devices, the NVIDIA driver's"
                " files or the MPS daemon's control pipes (with which any pod can change other"
                " pods' GPU limits). Remove it",
            )


def check_device_list_mount(r: Review) -> None:
    root = names.DEVICE_LIST_ROOT
    # Cleaning a path drops segments, never joins them: a path whose cleaned form starts with
    # the root holds its last segment as written.
    marker = root.rsplit("/", 1)[1]
    for c in r.judged:
        for m in c.mounts:
            # The runtime matches the cleaned destination by plain string prefix.
            if marker in m.path and _clean(m.path).startswith(root):
                r.deny(
                    "device-list-mount",
                    f'container "{c.name}": volume "{m.volume}" mounted at {_shown(m.path)}'
                    f" ({c.field}.volumeMounts[{m.position}]): the NVIDIA runtime reads mounts"
                    f" under {root} as a list of GPUs to give the container. Mount it"
                    " elsewhere",
                    c.name,
                )


def check_cdi_annotations(r: Review) -> None:
    """CDI device requests in the pod's own annotations: runtimes configured to pass
    `cdi.k8s.io/*` pod annotations through (the kata and confidential-computing GPU runtime
    classes do) inject the devices they name."""
    for key in r.pod.annotations:
        if isinstance(key, str) and key.startswith(names.CDI_ANNOTATION_PREFIXES):
            r.deny(
                "cdi-annotations",
                f"CDI annotation: {r.pod.at('metadata.annotations')}[{key}] asks the container"
                " runtime for devices by name, outside the device plugin's allocation (runtimes"
                " that pass such pod annotations through inject them). Remove it, and ask for"
                f" {_preferred(r.policy)}",
            )


def check_resource_claims(r: Review) -> None:
    if r.pod.resource_claims:
        r.deny(
            "resource-claims",
            f"resource claims: {r.pod.at('spec.resourceClaims')} can give the pod devices, GPUs"
            f' included, that policy "{r.policy.name}" does not govern. Remove them, or ask for'
            f" {_preferred(r.policy)}",
        )


def _unavailable(name: str) -> Callable[[Review], None]:
    """A GPU pod in a namespace whose policy is not in force (`Policy.unavailable`) is
    refused, saying why; the rules that do not depend on the policy still apply."""

    def check(r: Review) -> None:
        if r.policy.unavailable is not None and r.policy.unavailable[0] == name:
            r.deny(name, r.policy.unavailable[1])

    check.__name__ = f"check_{name.replace('-', '_')}"
    return check


# --------------------------------------------------------------------------- placement


def check_node_selection(r: Review) -> None:
    placing.select(r)


def check_multi_replica(r: Review) -> None:
    placing.replicas(r)


def check_mps_limits(r: Review) -> None:
    placing.mps_limits(r)


def patch_tolerations(r: Review) -> None:
    placing.tolerate(r)


def patch_node_selection(r: Review) -> None:
    placing.pin(r)


def patch_mps_limits(r: Review) -> None:
    placing.add_mps_limits(r)


def patch_visible_devices(r: Review) -> None:
    """Route 2: containers that ask for no GPU see none, whatever their image sets."""
    if not (r.policy.rules.void_visible_devices_without_gpu or r.gpu):
        return
    for c in r.judged:
        if not c.gpu and c.var(names.VISIBLE_DEVICES) is None:
            r.add_env(
                "visible-devices",
                c,
                [{"name": names.VISIBLE_DEVICES, "value": names.HIDE}],
                "it hides the GPUs from a container that asks for none",
            )


# --------------------------------------------------------------------------- the table

E, G, S = Scope.EVERY_POD, Scope.GPU_POD, Scope.SHARED_POD

# In order: shape and resources first (the others read what they find), refusals, then the
# placement rules, each narrowing the classes the one before left; patches run in this order
# too (SPEC.md's: runtime class, tolerations, node selection, MPS limits, void).
# fmt: off
RULES: tuple[Rule, ...] = (
    Rule(MALFORMED, E, "a field of a type no Kubernetes object has",
         check_malformed, always=True),
    Rule(UNKNOWN_POLICY, G, "a GPU pod in a namespace whose policy label names no policy",
         _unavailable(UNKNOWN_POLICY), always=True),
    Rule(POLICY_NOT_LOADED, G, "a GPU pod in a namespace whose policy file does not load",
         _unavailable(POLICY_NOT_LOADED), always=True),
    Rule("invalid-quantity", E, "a GPU quantity that is not a whole number of devices",
         _resource_check("invalid-quantity"), always=True),
    Rule("requests-limits-mismatch", E, "requests of a shared resource that differ from limits",
         _resource_check("requests-limits-mismatch")),
    Rule("resource-not-allowed", E, "a shared GPU resource the policy does not list",
         _resource_check("resource-not-allowed")),
    Rule("exclusive-with-shared", S, "an exclusive GPU next to a shared one",
         check_exclusive_with_shared, switch="denyExclusiveWithShared", pod_level=True),
    Rule("several-shared-resources", S, "two shared resources in one pod",
         check_several_shared_resources, pod_level=True),
    Rule("runtime-class", S, "another runtime class; adds the policy's when absent",
         check_runtime_class, patch_runtime_class, pod_level=True),
    Rule("tolerations", S, "adds the tolerations for the GPU taints",
         None, patch_tolerations, pod_level=True),
    Rule("profile", S, "an MPS profile the policy does not offer",
         check_profile, pod_level=True),
    Rule("device-variables", E, "NVIDIA_VISIBLE_DEVICES (or another device variable) with a"
         " value that does not only hide GPUs",
         check_device_variables, switch="denyDeviceVariables", always=True),
    Rule("env-from", G, "envFrom on a container that uses a GPU (a warning unless switched to"
         " refuse)", check_env_from),
    Rule("mps-directories", E, "CUDA_MPS_PIPE_DIRECTORY or CUDA_MPS_LOG_DIRECTORY set by the pod",
         check_mps_directories, switch="denyMpsDirectories", always=True),
    Rule("privileged", E, "a privileged container",
         check_privileged, switch="denyPrivileged", always=True),
    Rule("capabilities", G, "added capabilities SYS_ADMIN or ALL",
         check_capabilities, switch="denyAddedCapabilities"),
    Rule("host-namespaces", G, "hostPID or hostIPC",
         check_host_namespaces, switch="denyHostNamespaces", pod_level=True),
    Rule("host-path", E, "a hostPath of /dev/nvidia*, /run/nvidia*, /var/run/nvidia* or what"
         " holds them",
         check_host_path, switch="denyDeviceHostPaths", pod_level=True, always=True),
    Rule("device-list-mount", E, f"a volume mounted at or under {names.DEVICE_LIST_ROOT}",
         check_device_list_mount, switch="denyDeviceListMounts", always=True),
    Rule("cdi-annotations", E, "pod annotations that request CDI devices",
         check_cdi_annotations, switch="denyCdiAnnotations", pod_level=True, always=True),
    Rule("resource-claims", E, "dynamic resource allocation claims",
         check_resource_claims, switch="denyResourceClaims", pod_level=True, always=True),
    Rule("node-selection", S, "a node selection no allowed class satisfies; pins the pod to"
         " the allowed classes", check_node_selection, patch_node_selection, pod_level=True),
    Rule("multi-replica", S, "more than one replica where the device plugin would fail it or"
         " repeat a GPU", check_multi_replica, pod_level=True),
    Rule("mps-limits", S, "CUDA_MPS_* values that do not parse or exceed the ceiling; adds the"
         " profile's", check_mps_limits, patch_mps_limits, pod_level=True, required=True),
    Rule("visible-devices", E, "adds NVIDIA_VISIBLE_DEVICES=void to containers that ask for no"
         " GPU", None, patch_visible_devices, always=True, required=True),
)
# fmt: on

RULE_NAMES = frozenset(r.name for r in RULES)


def switched_on(rule: Rule, policy: Policy) -> bool:
    return rule.switch is None or bool(getattr(policy.rules, _SWITCH_ATTRIBUTES[rule.switch]))
