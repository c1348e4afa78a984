"""The admission core: what to change in a pod that asks for a shared GPU, and what to refuse.

Pure: a dict and a compiled policy in, a `Decision` out. No I/O, no clock, no HTTP.

The server, the CLI and the tests all call `review(obj, policy=...)`. For a Pod it returns the
denial or the JSON Patch; for the pod template of a workload (Deployment, ReplicaSet,
StatefulSet, DaemonSet, Job, CronJob) the same rules, with the patch it would give the pods
(`mutate=False` for the validating webhook, which only refuses).

The patch is built while the rules run, as operations against the object exactly as received
(additions to lists are appends, `/env/-`, `/tolerations/-`), rather than by diffing a
re-serialised copy: diffing costs more than the whole review budget (bench/core.py), and
building ops directly never produces the false `remove`s of a lossy round trip. The tests apply
every patch with jsonpatch and validate the result as a Pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook import quantities, selecting
from webhook.decisions import Decision
from webhook.policies import NodeClass, Policy, Profile

ANNOTATION_POLICY = "gpu-share.io/policy"
ANNOTATION_PROFILE = "gpu-share.io/profile"
ANNOTATION_MUTATIONS = "gpu-share.io/mutations"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
MPS_THREADS = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_MEMORY = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
# Values with which NVIDIA_VISIBLE_DEVICES exposes no GPU to the container.
HIDDEN_DEVICES = frozenset({"void", "none", ""})
GPU_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")

# Where each kind keeps its pod template.
TEMPLATE_PATHS: Mapping[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


def review(obj: Mapping[str, Any], *, policy: Policy, mutate: bool = True) -> Decision:
    """Review a Pod, or the pod template of a workload; other kinds pass untouched."""
    found = _locate(obj)
    if found is None:
        return Decision()
    template, path = found
    return review_template(template, policy=policy, path=path, mutate=mutate)


def template_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod (template) inside `obj`: the object itself for a Pod."""
    found = _locate(obj)
    return found[0] if found is not None else None


def _locate(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], str] | None:
    """The pod (template) the rules apply to and its JSON Pointer in `obj`; None for kinds
    without one, and for mirror pods: the kubelet's copies of static pods, which the API
    server lets nobody change (the webhook configurations keep them out too)."""
    kind = obj.get("kind")
    if kind == "Pod":
        meta = obj.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        if isinstance(annotations, dict) and MIRROR_ANNOTATION in annotations:
            return None
        return obj, ""
    steps = TEMPLATE_PATHS.get(kind) if isinstance(kind, str) else None
    if steps is None:
        return None
    node: Any = obj
    for step in steps:
        node = node.get(step) if isinstance(node, dict) else None
    return (node, "/" + "/".join(steps)) if isinstance(node, dict) else None


@dataclass(slots=True)
class _Container:
    group: str  # "containers" or "initContainers"
    index: int
    name: str
    raw: Mapping[str, Any]
    shared: dict[str, int] = field(default_factory=dict)
    exclusive: list[str] = field(default_factory=list)
    # Last definition of each variable (the one that wins), by name.
    env: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def gpu(self) -> bool:
        return bool(self.shared or self.exclusive)

    @property
    def path(self) -> str:
        return f"/{self.group}/{self.index}"


@dataclass(slots=True)
class _Pod:
    """One pod (or pod template) under review, read once."""

    spec: Mapping[str, Any]
    meta: Mapping[str, Any]
    has_meta: bool
    annotations: Mapping[str, Any]
    containers: list[_Container]
    # Containers that ask for a shared GPU.
    users: list[_Container]
    # JSON Pointer of the pod in the reviewed object ("" for a Pod).
    path: str
    policy: Policy
    constraints: selecting.Constraints


def _containers(spec: Mapping[str, Any]) -> list[_Container]:
    out: list[_Container] = []
    for group in ("initContainers", "containers"):
        items = spec.get(group)
        if not isinstance(items, list):
            continue
        for i, raw in enumerate(items):
            if not isinstance(raw, dict):
                continue
            name = raw.get("name")
            c = _Container(group, i, name if isinstance(name, str) else f"{group}[{i}]", raw)
            env = raw.get("env")
            if isinstance(env, list):
                for var in env:
                    if isinstance(var, dict):
                        vname = var.get("name")
                        if isinstance(vname, str):
                            c.env[vname] = var
            out.append(c)
    return out


def _scan_resources(c: _Container, policy: Policy, d: Decision) -> None:
    resources = c.raw.get("resources")
    if not isinstance(resources, dict):
        return
    limits = resources.get("limits")
    requests = resources.get("requests")
    limits = limits if isinstance(limits, dict) else {}
    requests = requests if isinstance(requests, dict) else {}
    shared_names = policy.shared_resources
    names = [
        k
        for k in limits
        if isinstance(k, str) and (k in shared_names or k.startswith(GPU_PREFIXES))
    ]
    names += [
        k
        for k in requests
        if isinstance(k, str)
        and k not in limits
        and (k in shared_names or k.startswith(GPU_PREFIXES))
    ]
    for name in names:
        shared = name in shared_names
        in_limits = name in limits
        in_requests = name in requests
        limit = quantities.count(limits[name]) if in_limits else None
        request = quantities.count(requests[name]) if in_requests else None
        if shared and ((in_limits and limit is None) or (in_requests and request is None)):
            bad = limits[name] if in_limits and limit is None else requests[name]
            d.deny(
                "invalid-quantity",
                f'container "{c.name}": invalid quantity: {name}: {bad!r} is not a whole'
                f" number of devices. Ask for {name}: 1.",
                c.name,
            )
            c.shared[name] = 1
            continue
        if shared and in_requests and not in_limits:
            d.deny(
                "requests-limits-mismatch",
                f'container "{c.name}": requests and limits disagree: requests {name}:'
                f" {requests[name]} with no limit, and an extended resource is asked for in"
                f" limits. Set limits {name}: {requests[name]} (requests may then be left"
                " out).",
                c.name,
            )
            if request:
                c.shared[name] = request
            continue
        if shared and in_requests and request != limit:
            d.deny(
                "requests-limits-mismatch",
                f'container "{c.name}": requests and limits disagree: {name} requests'
                f" {requests[name]}, limits {limits[name]}; they must be equal. Set both to"
                f" {limits[name]}, or set only limits.",
                c.name,
            )
        count = limit if in_limits else request
        if not count:
            continue
        if shared:
            c.shared[name] = count
        else:
            c.exclusive.append(name)


def _env_value(var: Mapping[str, Any]) -> str | None:
    """A variable's literal value; None when it comes from valueFrom."""
    if "valueFrom" in var and var.get("valueFrom") is not None:
        return None
    value = var.get("value")
    return "" if value is None else str(value)


def review_template(
    template: Mapping[str, Any], *, policy: Policy, path: str, mutate: bool = True
) -> Decision:
    """The rules for one pod (or pod template) at JSON Pointer `path` in the reviewed object."""
    d = Decision()
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return d
    raw_meta = template.get("metadata")
    has_meta = isinstance(raw_meta, dict)
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    containers = _containers(spec)
    for c in containers:
        _scan_resources(c, policy, d)
    users = [c for c in containers if c.shared]
    rules = policy.rules
    # NVIDIA_VISIBLE_DEVICES: an escape from allocation on a container that asks for no GPU;
    # refused in every opted-in pod, not only in those that ask for a shared GPU.
    for c in containers:
        var = c.env.get(VISIBLE_DEVICES)
        if var is None:
            continue
        value = _env_value(var)
        if value is not None and value.strip().lower() in HIDDEN_DEVICES:
            continue
        if c.gpu:
            d.warn(
                f'container "{c.name}" sets {VISIBLE_DEVICES}; the device plugin,'
                " not the variable, decides which GPU it gets"
            )
        elif rules.deny_visible_devices_without_gpu:
            shown = "from valueFrom" if value is None else f"={value}"
            d.deny(
                "visible-devices-without-gpu",
                f'container "{c.name}": {VISIBLE_DEVICES} without a GPU:'
                f" {VISIBLE_DEVICES}{shown} on a container that asks for no GPU exposes"
                " GPUs outside the device plugin's allocation. Remove it, or ask for"
                f" {_preferred_resource(policy)}: 1 if the container needs a GPU (policy"
                f' "{policy.name}", rule denyVisibleDevicesWithoutGpu).',
                c.name,
            )
    if not users:
        return d
    annotations = meta.get("annotations")
    pod = _Pod(
        spec=spec,
        meta=meta,
        has_meta=has_meta,
        annotations=annotations if isinstance(annotations, dict) else {},
        containers=containers,
        users=users,
        path=path,
        policy=policy,
        constraints=selecting.read(spec),
    )
    _shared_rules(d, pod, mutate=mutate)
    return d


def _preferred_resource(policy: Policy) -> str:
    return min(policy.shared_resources)


def _shared_rules(d: Decision, pod: _Pod, *, mutate: bool) -> None:
    policy, spec, containers, users = pod.policy, pod.spec, pod.containers, pod.users
    rules = policy.rules
    requested = sorted({r for c in users for r in c.shared})
    if rules.deny_exclusive_with_shared:
        exclusive = [c for c in containers if c.exclusive]
        if exclusive:
            ex = ", ".join(f'"{c.name}" asks for {", ".join(c.exclusive)}' for c in exclusive)
            sh = ", ".join(f'"{c.name}" for {", ".join(c.shared)}' for c in users)
            d.deny(
                "exclusive-with-shared",
                f"exclusive and shared GPUs in one pod: container {ex}, container {sh}; one pod"
                f" lands on one kind of node. Ask for {', '.join(requested)} only, or run the"
                " exclusive GPU in a pod of its own (policy"
                f' "{policy.name}", rule denyExclusiveWithShared).',
            )
    runtime_class = spec.get("runtimeClassName")
    if runtime_class not in (None, "", policy.runtime_class_name):
        d.deny(
            "runtime-class",
            f'runtime class: runtimeClassName "{runtime_class}" is not the one policy'
            f' "{policy.name}" uses for shared GPUs ("{policy.runtime_class_name}"). Remove'
            f' runtimeClassName (the webhook sets it) or set it to "{policy.runtime_class_name}".',
        )
    if rules.deny_privileged:
        for c in containers:
            sc = c.raw.get("securityContext")
            if isinstance(sc, dict) and sc.get("privileged") is True:
                d.deny(
                    "privileged",
                    f'container "{c.name}": privileged container in a pod that uses a shared'
                    " GPU: a privileged container sees every GPU of the node. Remove"
                    f' securityContext.privileged (policy "{policy.name}", rule'
                    " denyPrivileged).",
                    c.name,
                )
    profile = _profile(d, pod.annotations, policy)
    if len(requested) > 1:
        d.deny(
            "several-shared-resources",
            f"several shared resources: the pod asks for {', '.join(requested)}, and a node"
            " class serves one. Ask for one of them in every container.",
        )
        return
    resource = requested[0]
    classes = _allowed_classes(d, pod, resource, profile)
    if d.violations or not classes:
        return
    if mutate:
        _mutate(d, pod, classes, resource, profile)


def _profile(d: Decision, annotations: Mapping[str, Any], policy: Policy) -> Profile | None:
    wanted = annotations.get(ANNOTATION_PROFILE)
    if wanted is None:
        return policy.profiles[policy.default_profile] if policy.default_profile else None
    name = str(wanted)
    found = policy.profiles.get(name)
    if found is not None:
        return found
    offered = ", ".join(sorted(policy.profiles))
    if not offered:
        d.deny(
            "unknown-profile",
            f'unknown profile: "{name}" (annotation {ANNOTATION_PROFILE}), and policy'
            f' "{policy.name}" defines no MPS profiles. Remove the annotation.',
        )
    elif name in policy.foreign_profiles:
        d.deny(
            "profile-not-allowed",
            f'profile not allowed: "{name}" (annotation {ANNOTATION_PROFILE}) is not one'
            f' policy "{policy.name}" allows; it offers: {offered}. Use one of them, or remove'
            f' the annotation for the default "{policy.default_profile}".',
        )
    else:
        d.deny(
            "unknown-profile",
            f'unknown profile: "{name}" (annotation {ANNOTATION_PROFILE}); policy'
            f' "{policy.name}" offers: {offered}. Use one of them, or remove the annotation'
            f' for the default "{policy.default_profile}".',
        )
    return None


@dataclass(frozen=True, slots=True)
class _Limit:
    """One MPS limit a container will run with, and where it comes from."""

    container: str
    variable: str  # MPS_THREADS or MPS_MEMORY
    value: float  # percent, or MiB per device
    source: str  # for messages: the profile, or the container's own variable
    user_set: bool


def _parse_threads(raw: str) -> float | None:
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if 0 < value <= 100 else None


# MiB per unit; CUDA reads sizes like 4096M or 4G (a bare number is not a size it documents).
_UNITS = {
    "K": 1 / 1024,
    "KB": 1 / 1024,
    "M": 1.0,
    "MB": 1.0,
    "G": 1024.0,
    "GB": 1024.0,
    "T": 1024.0**2,
    "TB": 1024.0**2,
}


def _parse_memory(raw: str) -> float | None:
    """The largest per-device limit, in MiB, of `0=4096M,1=2G`; None when unreadable."""
    entries = [e.strip() for e in raw.split(",") if e.strip()]
    if not entries:
        return None
    largest = 0.0
    for entry in entries:
        device, sep, size = entry.partition("=")
        size = size.strip().upper()
        number = size.rstrip("KMGTB")
        scale = _UNITS.get(size[len(number) :])
        if not sep or not device.strip() or scale is None:
            return None
        try:
            largest = max(largest, float(number) * scale)
        except ValueError:
            return None
    return largest


_PARSERS = {MPS_THREADS: _parse_threads, MPS_MEMORY: _parse_memory}
_UNIT_SUFFIX = {MPS_THREADS: "%", MPS_MEMORY: " MiB"}


def _limits(d: Decision, users: list[_Container], profile: Profile | None) -> list[_Limit]:
    """The MPS limits each container will run with: its own values where it sets them (CUDA
    reads those), else the profile's."""
    out: list[_Limit] = []
    for c in users:
        for variable, from_profile in (
            (MPS_THREADS, profile.active_thread_percentage if profile else None),
            (MPS_MEMORY, profile.pinned_memory_mib if profile else None),
        ):
            var = c.env.get(variable)
            if var is None:
                if from_profile is not None and profile is not None:
                    source = f'profile "{profile.name}"'
                    out.append(_Limit(c.name, variable, from_profile, source, False))
                continue
            raw = _env_value(var)
            value = None if raw is None else _PARSERS[variable](raw)
            if value is None:
                d.warn(f'container "{c.name}": {variable} cannot be read, so is not checked')
                continue
            out.append(_Limit(c.name, variable, value, f'"{c.name}" {variable}={raw}', True))
            if from_profile is not None and profile is not None and value > from_profile:
                d.warn(
                    f'container "{c.name}": {variable}={raw} is above profile'
                    f' "{profile.name}" ({from_profile:g}{_UNIT_SUFFIX[variable]})'
                )
    return out


def _over_ceiling(limit: _Limit, cls: NodeClass) -> str | None:
    """ "value > ceiling" when `limit` is above `cls`'s MPS ceiling."""
    ceiling = cls.thread_ceiling if limit.variable == MPS_THREADS else cls.memory_ceiling_mib
    if ceiling is None or limit.value <= ceiling:
        return None
    unit = _UNIT_SUFFIX[limit.variable]
    return f"{limit.value:g}{unit} > {ceiling}{unit} ({limit.source})"


def _allowed_classes(
    d: Decision, pod: _Pod, resource: str, profile: Profile | None
) -> list[NodeClass]:
    """The classes the pod may land on, narrowed step by step; a step that leaves none denies."""
    policy, users = pod.policy, pod.users
    candidates = list(policy.classes_by_resource.get(resource, ()))
    constraints = pod.constraints
    if not constraints.empty:
        admitted = [c for c in candidates if selecting.admits(constraints, c)]
        if not admitted:
            d.deny(
                "node-selection",
                "node selection matches no allowed class: the pod's"
                f" {selecting.describe(constraints, candidates)} matches no node class of"
                f' policy "{policy.name}" that serves {resource}: '
                + "; ".join(selecting.describe_class(c) for c in candidates)
                + ". Remove or change that selector"
                + _product_hint(constraints, candidates)
                + ".",
            )
            return []
        candidates = admitted
    # More than one replica of a shared GPU, per container.
    for c in users:
        k = c.shared[resource]
        if k <= 1:
            continue
        refusing = [cls for cls in candidates if _refuses(cls, k)]
        if len(refusing) == len(candidates):
            reasons = "; ".join(_refusal(cls, k) for cls in refusing)
            d.deny(
                "multi-replica",
                f'container "{c.name}": invalid multi-replica request: {resource}: {k}. More'
                " replicas of a shared GPU give no more GPU time (each process gets an equal"
                f" share), and here: {reasons}. Ask for {resource}: 1.",
                c.name,
            )
            return []
        if refusing:
            d.warn(
                f'container "{c.name}" asks for {k} replicas: kept off '
                + ", ".join(cls.name for cls in refusing)
            )
            candidates = [cls for cls in candidates if cls not in refusing]
    limits = _limits(d, users, profile)
    fitting: list[NodeClass] = []
    excluded: list[str] = []
    offenders: list[str] = []
    for cls in candidates:
        over = [(lim, text) for lim in limits if (text := _over_ceiling(lim, cls))]
        if not over:
            fitting.append(cls)
            continue
        excluded.append(f"{cls.name}: " + ", ".join(text for _, text in over))
        offenders += [
            lim.container for lim, _ in over if lim.user_set and lim.container not in offenders
        ]
    if not fitting:
        if offenders:
            names = ", ".join(f'container "{n}"' for n in offenders)
            d.deny(
                "mps-above-ceiling",
                f"{names}: MPS limit above the ceiling: CUDA_MPS_* set in the pod exceed the"
                f" MPS ceiling of every node class it may use ({'; '.join(excluded)}), and MPS"
                " can only lower the daemon's limit (100/replicas %, memory/replicas MiB)."
                " Remove them or set them at most to the ceiling.",
            )
        else:
            name = profile.name if profile else "?"
            d.deny(
                "profile-above-ceiling",
                f'profile too large: "{name}" is above the MPS ceiling of every node class the'
                f" pod may use ({'; '.join(excluded)}). Choose a smaller profile with the"
                f" annotation {ANNOTATION_PROFILE}.",
            )
        return []
    if excluded:
        d.warn("kept off node classes whose MPS ceiling is too low: " + "; ".join(excluded))
    return fitting


def _refuses(cls: NodeClass, k: int) -> bool:
    return cls.fail_requests_greater_than_one or k > cls.gpus_per_node


def _refusal(cls: NodeClass, k: int) -> str:
    if cls.fail_requests_greater_than_one:
        return (
            f"{cls.name} fails such requests after scheduling (failRequestsGreaterThanOne:"
            " the pod would die with UnexpectedAdmissionError)"
        )
    if cls.gpus_per_node == 1:
        return f"{cls.name} has one GPU per node, so every replica is the same GPU"
    return f"{cls.name} has {cls.gpus_per_node} GPUs per node, so {k} replicas repeat a GPU"


def _product_hint(constraints: selecting.Constraints, classes: list[NodeClass]) -> str:
    """Name the -SHARED mix-up DOMAIN.md warns about, the commonest cause of this denial."""
    for cls in classes:
        values = {
            v
            for conj in constraints.conjunctions
            for (k, _, vs) in conj or ()
            if k == cls.product_label
            for v in vs
        }
        if cls.renamed and any(v.endswith("-SHARED") for v in values):
            return (
                f" (nodes that advertise {cls.advertised} are renamed: their product label has"
                " no -SHARED suffix)"
            )
        if not cls.renamed and cls.product in values:
            return (
                f" (nodes that share {cls.resource} without renaming label the product"
                f" {cls.product}-SHARED)"
            )
    return ""


def _mutate(
    d: Decision, pod: _Pod, classes: list[NodeClass], resource: str, profile: Profile | None
) -> None:
    """The six mutation steps of SPEC.md, each adding only what is not there yet."""
    policy, spec, path, annotations = pod.policy, pod.spec, pod.path, pod.annotations
    ops = d.patch
    spec_path = f"{path}/spec"
    steps: list[str] = []
    # 1. Runtime class.
    if not spec.get("runtimeClassName"):
        ops.append(
            {
                "op": "add",
                "path": f"{spec_path}/runtimeClassName",
                "value": policy.runtime_class_name,
            }
        )
        steps.append("runtime-class")
    # 2. Tolerations, each only when no existing toleration already covers it.
    existing_raw = spec.get("tolerations")
    existing = (
        [t for t in existing_raw if isinstance(t, dict)] if isinstance(existing_raw, list) else []
    )
    added: list[dict[str, Any]] = []
    for tol in _wanted_tolerations(policy, resource):
        if tol in existing or tol in added:
            continue
        if not any(_covers(e, tol) for e in existing):
            added.append(dict(tol))
    if added:
        if isinstance(existing_raw, list):
            ops.extend(
                {"op": "add", "path": f"{spec_path}/tolerations/-", "value": t} for t in added
            )
        else:
            ops.append({"op": "add", "path": f"{spec_path}/tolerations", "value": added})
        steps.append("tolerations")
    # 3. Node selection.
    node_ops, step = selecting.plan(spec, pod.constraints, classes, policy=policy, path=spec_path)
    if step:
        ops.extend(node_ops)
        steps.append(step)
    # 4. MPS limits, where the pod may land on an MPS class.
    if profile is not None and any(c.mps for c in classes):
        env_added = False
        for c in pod.users:
            threads, memory = _mps_env(policy, profile, max(1, c.shared.get(resource, 1)))
            new = [var for var in (threads, memory) if var is not None and var["name"] not in c.env]
            if new:
                _append_env(ops, c, new, spec_path)
                env_added = True
        if env_added:
            steps.append("mps-limits")
    # 5. Containers that asked for no GPU see none.
    if policy.rules.void_visible_devices_without_gpu:
        voided = False
        for c in pod.containers:
            if not c.gpu and VISIBLE_DEVICES not in c.env:
                _append_env(ops, c, [{"name": VISIBLE_DEVICES, "value": "void"}], spec_path)
                voided = True
        if voided:
            steps.append("visible-devices")
    # 6. Annotations: which policy and profile govern the pod, and what was done.
    wanted_ann: dict[str, str] = {}
    if annotations.get(ANNOTATION_POLICY) != policy.name:
        wanted_ann[ANNOTATION_POLICY] = policy.name
    if profile is not None and ANNOTATION_PROFILE not in annotations:
        wanted_ann[ANNOTATION_PROFILE] = profile.name
    if steps:
        before = annotations.get(ANNOTATION_MUTATIONS)
        done = {s for s in str(before).split(",") if s} if before is not None else set()
        record = ",".join(sorted(done | set(steps)))
        if record != before:
            wanted_ann[ANNOTATION_MUTATIONS] = record
    if wanted_ann:
        if not pod.has_meta:
            ops.append(
                {"op": "add", "path": f"{path}/metadata", "value": {"annotations": wanted_ann}}
            )
        elif not isinstance(pod.meta.get("annotations"), dict):
            ops.append({"op": "add", "path": f"{path}/metadata/annotations", "value": wanted_ann})
        else:
            ops.extend(
                {
                    "op": "add",
                    "path": f"{path}/metadata/annotations/{selecting.escape(k)}",
                    "value": v,
                }
                for k, v in wanted_ann.items()
            )
    d.audit["policy"] = policy.name
    if profile is not None:
        d.audit["profile"] = profile.name
    d.audit["classes"] = ",".join([c.name for c in classes])
    if steps:
        d.audit["mutations"] = ",".join(steps)


def _mps_env(
    policy: Policy, profile: Profile, devices: int
) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """The profile's MPS variables for a container with `devices` replicas, as CUDA reads
    them. Memoised; the dicts go into patches only, which are serialised, never changed."""
    key = ("mps-env", profile.name, devices)
    cached = policy.memo.get(key)
    if cached is None:
        threads = memory = None
        if profile.active_thread_percentage is not None:
            threads = {"name": MPS_THREADS, "value": str(profile.active_thread_percentage)}
        if profile.pinned_memory_mib is not None:
            # One entry per device the container gets, by the ordinal CUDA sees.
            value = ",".join(f"{i}={profile.pinned_memory_mib}M" for i in range(devices))
            memory = {"name": MPS_MEMORY, "value": value}
        cached = policy.memo[key] = (threads, memory)
    return cached


def _wanted_tolerations(policy: Policy, resource: str) -> tuple[dict[str, Any], ...]:
    """The policy's tolerations and, where it says so, the one for the resource's own taint,
    without duplicates; memoised per resource."""
    key = ("tolerations", resource)
    cached = policy.memo.get(key)
    if cached is None:
        wanted = list(policy.tolerations)
        if policy.tolerate_resource_taint:
            wanted.append({"key": resource, "operator": "Exists", "effect": "NoSchedule"})
        unique: list[dict[str, Any]] = []
        for tol in wanted:
            if not any(_covers(u, tol) for u in unique):
                unique.append(tol)
        cached = policy.memo[key] = tuple(unique)
    return cached


def _append_env(
    ops: list[dict[str, Any]], c: _Container, new: list[dict[str, str]], spec_path: str
) -> None:
    base = f"{spec_path}{c.path}/env"
    if isinstance(c.raw.get("env"), list):
        ops.extend({"op": "add", "path": f"{base}/-", "value": v} for v in new)
    else:
        # Called at most once per container (MPS limits go to containers that use the shared
        # GPU, `void` to those that ask for none), so no later call appends to this list.
        ops.append({"op": "add", "path": base, "value": new})


def _covers(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Whether toleration `have` tolerates every taint that `want` tolerates."""
    have_key = have.get("key") or ""
    have_op = have.get("operator") or "Equal"
    if have_key:
        if have_key != want.get("key"):
            return False
    elif have_op != "Exists":
        return False
    if have_op != "Exists":
        if (want.get("operator") or "Equal") != "Equal":
            return False
        if (have.get("value") or "") != (want.get("value") or ""):
            return False
    have_effect = have.get("effect") or ""
    if have_effect and have_effect != want.get("effect"):
        return False
    if want.get("effect") == "NoExecute" or not want.get("effect"):
        have_secs = have.get("tolerationSeconds")
        want_secs = want.get("tolerationSeconds")
        if have_secs is not None and (want_secs is None or have_secs < want_secs):
            return False
    return True
