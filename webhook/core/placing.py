"""Placement: the node classes a shared-GPU pod may land on, and what pins it there.

Three rules narrow the classes of the pod's resource, in order, each refusing when none is
left: `node-selection` (the pod's own nodeSelector and required affinity, judged against the
labels gpu-feature-discovery puts on each class), `multi-replica` (a container asking for k
> 1 replicas keeps the pod off classes that fail such requests or have fewer than k GPUs per
node) and `mps-limits` (the MPS limits each container will run with must fit the class's
ceiling). The patches then pin the pod to what is left (plus, for k > 1, nodes with at least
k GPUs), add the tolerations, and the profile's MPS limits.

Every patch value is a new object: nothing here hands out a part of the policy.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, NamedTuple

from webhook import names
from webhook.core import selecting
from webhook.core.pods import escape
from webhook.policies import NodeClass, Policy

if TYPE_CHECKING:
    from webhook.core.rules import Review

NO_CONSTRAINTS: selecting.Constraints = selecting.NO_CONSTRAINTS


class Limit(NamedTuple):
    """One MPS limit a container will run with, and where it comes from."""

    container: str
    variable: str  # names.MPS_THREADS or names.MPS_MEMORY
    value: float  # percent, or MiB per device
    source: str  # for messages: the profile, or the container's own variable
    user_set: bool


# --------------------------------------------------------------------------- node selection


def select(r: Review) -> None:
    """`node-selection`: the classes the pod's own constraints admit."""
    resource = r.resource
    if resource is None:
        return
    candidates = r.policy.classes_by_resource.get(resource, ())
    constraints = selecting.read(r.pod.node_selector, r.pod.required_terms)
    r.constraints = constraints
    if constraints.empty:
        r.classes = candidates
        return
    admitted = tuple(c for c in candidates if selecting.admits(constraints, c))
    if admitted:
        r.classes = admitted
        return
    r.deny(
        "node-selection",
        "node selection matches no allowed class: the pod's"
        f" {selecting.describe(constraints, candidates)} matches no node class of policy"
        f' "{r.policy.name}" that serves {resource}: '
        + "; ".join(selecting.describe_class(c) for c in candidates)
        + ". Remove or change that selector"
        + _product_hint(constraints, candidates),
    )


def _product_hint(constraints: selecting.Constraints, classes: tuple[NodeClass, ...]) -> str:
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


# --------------------------------------------------------------------------- replicas


def replicas(r: Review) -> None:
    """`multi-replica`: every container asking for k > 1 replicas is judged, and the classes
    that would fail or repeat a GPU are left out."""
    resource, candidates = r.resource, r.classes
    if resource is None or candidates is None:
        return
    failed = False
    for c in r.pod.containers:
        k = c.shared.get(resource, 0)
        if k <= 1:
            continue
        refusing = [cls for cls in candidates if _refuses(cls, k)]
        if len(refusing) == len(candidates):
            reasons = "; ".join(_refusal(cls, k) for cls in refusing)
            r.deny(
                "multi-replica",
                f'container "{c.name}": invalid multi-replica request: {resource}: {k}. More'
                " replicas of a shared GPU give no more GPU time (each process gets an equal"
                f" share), and here: {reasons}. Ask for {resource}: 1",
                c.name,
            )
            failed = True
            continue
        if refusing:
            r.warn(
                f'container "{c.name}" asks for {k} replicas: kept off '
                + ", ".join(cls.name for cls in refusing)
            )
            candidates = tuple(cls for cls in candidates if cls not in refusing)
    r.classes = None if failed else candidates


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


# --------------------------------------------------------------------------- MPS limits


# Units CUDA_MPS_PINNED_DEVICE_MEM_LIMIT takes, in MiB: NVIDIA's examples use "1G" and
# "512MB"; the device plugin writes "<n>M". A value without a unit is refused: what CUDA
# makes of it is not documented.
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
_MEMORY_ENTRY = re.compile(
    r"(?P<device>[0-9]{1,3}|(?:GPU|MIG)-[0-9A-Fa-f-]{1,64})="
    r"(?P<size>[0-9]{1,12}(?:\.[0-9]{1,6})?)(?P<unit>[KMGT]B?)"
)
_THREADS = re.compile(r"[0-9]{1,3}")
# Longer values are refused before any parsing: no real limit list comes near.
_MAX_MEMORY_VALUE = 1024
_UNIT_SUFFIX = {names.MPS_THREADS: "%", names.MPS_MEMORY: " MiB"}


def parse_threads(raw: str) -> float | None:
    """An active thread percentage: a whole number from 1 to 100; None otherwise."""
    if not _THREADS.fullmatch(raw):
        return None
    value = int(raw)
    return float(value) if 1 <= value <= 100 else None


def parse_memory(raw: str) -> float | None:
    """The largest per-device limit, in MiB, of `0=4096M,1=2G`; None when unreadable."""
    if not raw or len(raw) > _MAX_MEMORY_VALUE:
        return None
    largest = 0.0
    for entry in raw.split(","):
        m = _MEMORY_ENTRY.fullmatch(entry)
        if m is None:
            return None
        largest = max(largest, float(m["size"]) * _UNITS[m["unit"]])
    return largest


_PARSERS = {names.MPS_THREADS: parse_threads, names.MPS_MEMORY: parse_memory}
_FORMS = {
    names.MPS_THREADS: "a whole number from 1 to 100",
    names.MPS_MEMORY: "a comma-separated list of <device ordinal or UUID>=<size with unit K,"
    " M, G or T>, such as 0=4096M",
}


def mps_limits(r: Review) -> None:
    """`mps-limits`: the MPS values a container sets must parse and fit; the classes whose
    ceiling the pod's limits (its own, else the profile's) exceed are left out."""
    resource = r.resource
    if resource is None:
        return
    profile = r.profile
    limits: list[Limit] = []
    unreadable = False
    threads = profile.active_thread_percentage if profile else None
    memory = profile.pinned_memory_mib if profile else None
    for c in r.pod.containers:
        if resource not in c.shared:
            continue
        for variable, from_profile in ((names.MPS_THREADS, threads), (names.MPS_MEMORY, memory)):
            var = c.variables.get(variable)
            if var is None:
                if from_profile is not None and profile is not None:
                    limits.append(
                        Limit(c.name, variable, from_profile, f'profile "{profile.name}"', False)
                    )
                continue
            where = f"{c.field}.env[{var.position}]"
            value = None if var.value is None else _PARSERS[variable](var.value)
            if value is None:
                unreadable = True
                if var.value is None:
                    problem = "comes from valueFrom, which cannot be read at admission"
                elif "$(" in var.value:
                    problem = "refers to another variable, which cannot be read at admission"
                else:
                    shown = var.value if len(var.value) <= 40 else var.value[:32] + "..."
                    problem = f'"{shown}" is not {_FORMS[variable]}'
                r.deny(
                    "mps-limits",
                    f'container "{c.name}": {variable} ({where}) {problem}; MPS limits are'
                    " checked against the node's ceiling before the pod runs. Set a plain"
                    " value, or remove it for the profile's",
                    c.name,
                )
                continue
            limits.append(
                Limit(c.name, variable, value, f'"{c.name}" {variable}={var.value}', True)
            )
            if from_profile is not None and profile is not None and value > from_profile:
                r.warn(
                    f'container "{c.name}": {variable}={var.value} is above profile'
                    f' "{profile.name}" ({from_profile:g}{_UNIT_SUFFIX[variable]})'
                )
    candidates = r.classes
    if candidates is None or unreadable:
        r.classes = None
        return
    fitting, excluded, offenders = _fit(candidates, tuple(limits))
    if fitting:
        if excluded:
            r.warn("kept off node classes whose MPS ceiling is too low: " + "; ".join(excluded))
        r.classes = fitting
        return
    r.classes = None
    if offenders:
        who = ", ".join(f'container "{n}"' for n in offenders)
        r.deny(
            "mps-limits",
            f"{who}: MPS limit above the ceiling: CUDA_MPS_* set in the pod exceed the MPS"
            f" ceiling of every node class it may use ({'; '.join(excluded)}), and MPS can only"
            " lower the daemon's limit (100/replicas %, memory/replicas MiB). Remove them or"
            " set them at most to the ceiling",
            offenders[0] if len(offenders) == 1 else None,
        )
    else:
        name = profile.name if profile else "?"
        r.deny(
            "mps-limits",
            f'profile too large: "{name}" is above the MPS ceiling of every node class the pod'
            f" may use ({'; '.join(excluded)}). Choose a smaller profile with the annotation"
            f" {names.ANNOTATION_PROFILE}",
        )


@functools.lru_cache(maxsize=1024)
def _fit(
    candidates: tuple[NodeClass, ...], limits: tuple[Limit, ...]
) -> tuple[tuple[NodeClass, ...], tuple[str, ...], tuple[str, ...]]:
    """The classes whose MPS ceilings `limits` fit; for the others, why not; and the
    containers whose own values are above a ceiling. Cached: it depends on these alone, and
    the pods of one workload bring the same few."""
    fitting: list[NodeClass] = []
    excluded: list[str] = []
    offenders: list[str] = []
    for cls in candidates:
        over = [(lim, text) for lim in limits if (text := _over_ceiling(lim, cls))]
        if not over:
            fitting.append(cls)
            continue
        excluded.append(f"{cls.name}: " + ", ".join(text for _, text in over))
        for lim, _ in over:
            if lim.user_set and lim.container not in offenders:
                offenders.append(lim.container)
    return tuple(fitting), tuple(excluded), tuple(offenders)


def _over_ceiling(limit: Limit, cls: NodeClass) -> str | None:
    """ "value > ceiling" when `limit` is above `cls`'s MPS ceiling."""
    ceiling = cls.thread_ceiling if limit.variable == names.MPS_THREADS else cls.memory_ceiling_mib
    if ceiling is None or limit.value <= ceiling:
        return None
    unit = _UNIT_SUFFIX[limit.variable]
    return f"{limit.value:g}{unit} > {ceiling}{unit} ({limit.source})"


# --------------------------------------------------------------------------- patches


def pin(r: Review) -> None:
    """The `node-selection` patch: pin the pod to the classes left, and for k > 1 replicas to
    nodes with at least k GPUs."""
    classes, resource = r.classes, r.resource
    if not classes or resource is None:
        return
    largest = max(c.shared.get(resource, 0) for c in r.pod.containers)
    extra = selecting.min_gpus(classes[0].resource, largest) if largest > 1 else None
    for op in selecting.plan(
        r.pod.spec, r.constraints, classes, path=f"{r.pod.template.pointer}/spec", extra=extra
    ):
        r.add("node-selection", op)


def tolerate(r: Review) -> None:
    """The `tolerations` patch: the policy's, and the resource's own taint where it says so,
    each only when no toleration of the pod already covers it."""
    if not r.classes or r.resource is None:
        return
    existing = r.pod.tolerations or []
    added: list[dict[str, Any]] = []
    for items in _wanted_tolerations(r.policy, r.resource):
        tol = dict(items)
        if any(covers(e, tol) for e in existing):
            continue
        added.append(tol)
    if not added:
        return
    base = f"{r.pod.template.pointer}/spec/tolerations"
    if r.pod.tolerations is not None:
        for t in added:
            r.add("tolerations", {"op": "add", "path": f"{base}/-", "value": t})
    else:
        r.add("tolerations", {"op": "add", "path": base, "value": added})


@functools.lru_cache(maxsize=256)
def _wanted_tolerations(policy: Policy, resource: str) -> tuple[tuple[tuple[str, Any], ...], ...]:
    """The policy's tolerations and, where it says so, the one for the resource's own taint,
    none covered by another; as items, each made into a new dict for the patch."""
    wanted = list(policy.tolerations)
    if policy.tolerate_resource_taint:
        wanted.append((("key", resource), ("operator", "Exists"), ("effect", "NoSchedule")))
    unique: list[tuple[tuple[str, Any], ...]] = []
    for tol in wanted:
        if not any(covers(dict(u), dict(tol)) for u in unique):
            unique.append(tol)
    return tuple(unique)


def covers(have: Any, want: Any) -> bool:
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
        if have_secs is not None and (
            want_secs is None or not isinstance(have_secs, int) or have_secs < want_secs
        ):
            return False
    return True


def add_mps_limits(r: Review) -> None:
    """The `mps-limits` patch: the profile's values on every container that uses the shared
    GPU and does not set them, where the pod may land on an MPS class."""
    profile, resource, classes = r.profile, r.resource, r.classes
    if profile is None or resource is None or not classes or not any(c.mps for c in classes):
        return
    for c in r.pod.containers:
        devices = c.shared.get(resource, 0)
        if not devices or not c.judged:
            continue
        new: list[dict[str, str]] = []
        if profile.active_thread_percentage is not None and c.var(names.MPS_THREADS) is None:
            new.append({"name": names.MPS_THREADS, "value": str(profile.active_thread_percentage)})
        if profile.pinned_memory_mib is not None and c.var(names.MPS_MEMORY) is None:
            value = _memory_limit(profile.pinned_memory_mib, devices)
            new.append({"name": names.MPS_MEMORY, "value": value})
        if new:
            r.add_env("mps-limits", c, new, f'the MPS limits of profile "{profile.name}"')


@functools.lru_cache(maxsize=256)
def _memory_limit(mib: int, devices: int) -> str:
    """`0=3840M,1=3840M`: one entry per device the container gets, by the ordinal CUDA sees."""
    return ",".join(f"{i}={mib}M" for i in range(devices))


def record(r: Review) -> None:
    """The annotations of a pod the webhook changed: which policy and profile govern it, and
    the rules that changed it (merged with what an earlier pass recorded)."""
    pod = r.pod
    shared = r.classes is not None and r.resource is not None
    if not r.ops and (not shared or r.policy.mode == names.DRY_RUN):
        return
    steps: list[str] = []
    for rule, _ in r.ops:
        if rule not in steps:
            steps.append(rule)
    annotations = pod.annotations
    wanted: dict[str, str] = {}
    if annotations.get(names.ANNOTATION_POLICY) != r.policy.name:
        wanted[names.ANNOTATION_POLICY] = r.policy.name
    # The profile governs the pod once its limits are applied (not in dry-run).
    profiled = (
        shared and r.profile is not None and r.policy.mode_of("mps-limits") != names.DRY_RUN
    )
    if profiled and r.profile is not None and names.ANNOTATION_PROFILE not in annotations:
        wanted[names.ANNOTATION_PROFILE] = r.profile.name
    if steps:
        before = annotations.get(names.ANNOTATION_MUTATIONS)
        done = set(str(before).split(",")) if before else set()
        done.discard("")
        merged = ",".join(sorted(done.union(steps)))
        if merged != before:
            wanted[names.ANNOTATION_MUTATIONS] = merged
    if shared:
        r.audit["policy"] = r.policy.name
        if r.profile is not None:
            r.audit["profile"] = r.profile.name
        r.audit["classes"] = ",".join(c.name for c in r.classes or ())
    if steps:
        r.audit["mutations"] = ",".join(steps)
    if not wanted:
        return
    base = pod.template.pointer
    if pod.meta is None:
        r.add(
            "annotations",
            {"op": "add", "path": f"{base}/metadata", "value": {"annotations": wanted}},
        )
    elif not pod.has_annotations:
        r.add("annotations", {"op": "add", "path": f"{base}/metadata/annotations", "value": wanted})
    else:
        for k, v in wanted.items():
            r.add(
                "annotations",
                {"op": "add", "path": f"{base}/metadata/annotations/{escape(k)}", "value": v},
            )
