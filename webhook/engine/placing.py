"""Placement: the node classes a shared-GPU pod may land on, and what pins it there.

`place` narrows the classes of the pod's resource in three steps, each stopping (with the
reason, as a `Finding` of its rule) when none is left: the pod's own nodeSelector and
required affinity, judged against the labels gpu-feature-discovery puts on each class
(`node-selection`); a container asking for k > 1 replicas keeps the pod off classes that
fail such requests or have fewer than k GPUs per node (`multi-replica`); the MPS limits each
container will run with must fit the class's ceiling (`mps-limits`). It runs once per
review, before the rules (`facts.gather`), which only report what it found.

The patches' values are built here too: the node selection that pins the pod to the classes
left (plus, for k > 1, nodes with at least k GPUs), the tolerations, and the profile's MPS
limits. Every patch value is a new object: nothing here hands out a part of the policy.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from webhook.engine import selection, view
from webhook.engine.decision import FIELD, ErrorType, Marker, Violation
from webhook.policy import names
from webhook.policy.policies import NodeClass, Policy, Profile

# `names` the loops below read, as Final constants the compiled core reads directly.
_MPS_THREADS: Final = names.MPS_THREADS
_MPS_MEMORY: Final = names.MPS_MEMORY


class Finding:
    """What a rule is to report about a pod, found before the rules run: a violation, or a
    warning for the user. (A native class of the compiled core, as `Placement`.)"""

    __slots__ = ("rule", "violation", "warning")

    def __init__(
        self, rule: str, violation: Violation | None = None, warning: str | None = None
    ) -> None:
        self.rule: Final = rule
        self.violation: Final = violation
        self.warning: Final = warning

    def __repr__(self) -> str:
        return f"Finding({self.rule!r}, {self.violation!r}, {self.warning!r})"


class Placement:
    """Where a pod that asks for a shared resource may land, and what was found on the way.
    (A native class of the compiled core, as `facts.Facts`.)"""

    __slots__ = ("classes", "constraints", "findings", "pinned_to", "replicas", "resource")

    def __init__(
        self,
        resource: str,
        constraints: selection.Constraints,
        classes: tuple[NodeClass, ...] | None,
        findings: tuple[Finding, ...],
        replicas: tuple[int, ...],
        *,
        pinned_to: tuple[NodeClass, ...] | None,
    ) -> None:
        self.resource: Final = resource
        self.constraints: Final = constraints
        # How many replicas of the resource each container asks for (0: none).
        self.replicas: Final = replicas
        # The classes left after every step; None when a step left none (or could not judge).
        self.classes: Final = classes
        self.findings: Final = findings
        # Where the pod is pinned: the classes left by the last step that left any. A step
        # that left none refuses the pod, unless its rule is relaxed (warn, dry-run): the pod
        # is then admitted, and must still stay on the policy's classes. None only where the
        # pod's own selection admits no class of the policy (node-selection refuses it).
        self.pinned_to: Final = pinned_to


class Limit:
    """One MPS limit a container will run with, and where it comes from. A native class of
    the compiled core, as `Placement`."""

    __slots__ = ("container", "source", "user_set", "value", "variable")

    def __init__(
        self, container: str, variable: str, value: float, source: str, user_set: bool
    ) -> None:
        self.container: Final = container
        self.variable: Final = variable  # names.MPS_THREADS or names.MPS_MEMORY
        self.value: Final = value  # percent, or MiB per device
        self.source: Final = source  # for messages: the profile, or the container's own variable
        self.user_set: Final = user_set


def place(
    pod: view.Pod,
    policy: Policy,
    replicas: tuple[int, ...],
    resource: str,
    profile: Profile | None,
) -> Placement:
    """The classes `pod` may land on (see the module); `replicas`: how many replicas of
    `resource` each of its containers asks for."""
    findings: list[Finding] = []
    constraints = selection.read(pod)
    classes = pinned_to = _select(pod, policy, resource, constraints, findings)
    classes = _replicas(pod, replicas, resource, classes, findings)
    pinned_to = classes or pinned_to
    classes = _mps_limits(
        pod, replicas, resource, profile, policy, candidates=classes, findings=findings
    )
    pinned_to = classes or pinned_to
    return Placement(
        resource, constraints, classes, tuple(findings), replicas, pinned_to=pinned_to
    )


def _deny(
    findings: list[Finding],
    pod: view.Pod,
    rule: str,
    field: str,
    *words: str | Marker,
    container: str | None = None,
) -> None:
    findings.append(
        Finding(rule, Violation(rule, ErrorType.INVALID, field, words, container, pod.place))
    )


# --------------------------------------------------------------------------- node selection


def _select(
    pod: view.Pod,
    policy: Policy,
    resource: str,
    constraints: selection.Constraints,
    findings: list[Finding],
) -> tuple[NodeClass, ...] | None:
    """`node-selection`: the classes the pod's own constraints admit."""
    candidates = policy.classes_by_resource.get(resource, ())
    if constraints.empty:
        return candidates
    admitted = tuple(c for c in candidates if selection.admits(constraints, c))
    if admitted:
        return admitted
    field = (
        "spec.nodeSelector"
        if view.required_terms(pod.spec) is None
        else "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    )
    _deny(
        findings,
        pod,
        "node-selection",
        field,
        "node selection matches no allowed class: the pod's"
        f" {selection.describe(constraints, candidates)} matches no node class of policy"
        f' "{policy.name}" that serves {resource}: '
        + "; ".join(selection.describe_class(c) for c in candidates)
        + ". Remove or change that selector"
        + _product_hint(constraints, candidates),
    )
    return None


def _product_hint(constraints: selection.Constraints, classes: tuple[NodeClass, ...]) -> str:
    """Name the -SHARED mix-up (a product label written with the suffix the plugin adds to
    renamed replicas), the commonest cause of this denial."""
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


def _replicas(
    pod: view.Pod,
    replicas: Sequence[int],
    resource: str,
    candidates: tuple[NodeClass, ...] | None,
    findings: list[Finding],
) -> tuple[NodeClass, ...] | None:
    """`multi-replica`: every container asking for k > 1 replicas is judged, and the classes
    that would fail or repeat a GPU are left out."""
    if candidates is None:
        return None
    failed = False
    for i, c in enumerate(pod.containers):
        k = replicas[i]
        if k <= 1:
            continue
        refusing = [cls for cls in candidates if _refuses(cls, k)]
        if len(refusing) == len(candidates):
            reasons = "; ".join(_refusal(cls, k) for cls in refusing)
            _deny(
                findings,
                pod,
                "multi-replica",
                f"{c.field}.resources.limits[{resource}]",
                f'container "{c.name}": invalid multi-replica request: {resource}: {k}. More'
                " replicas of a shared GPU give no more GPU time (each process gets an equal"
                f" share), and here: {reasons}. Ask for {resource}: 1",
                container=c.name,
            )
            failed = True
            continue
        if refusing:
            findings.append(
                Finding(
                    "multi-replica",
                    warning=f'container "{c.name}" asks for {k} replicas: kept off '
                    + ", ".join(cls.name for cls in refusing),
                )
            )
            candidates = tuple(cls for cls in candidates if cls not in refusing)
    return None if failed else candidates


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


def devices(replicas: int, classes: Sequence[NodeClass]) -> int:
    """The devices by ordinal a container asking for `replicas` can see on a node of one of
    `classes`: no more than such a node has (a count of trillions, admitted where its rule is
    relaxed, still names a handful)."""
    # (A loop: the builtin max with a default is a generic call in the compiled core.)
    most: int | None = None
    for c in classes:
        if most is None or c.gpus_per_node > most:
            most = c.gpus_per_node
    return min(replicas, 1 if most is None else most, MAX_DEVICES)


# More GPUs than any node has: the ordinals a limit may need to name stop here.
MAX_DEVICES = 64


def _ordinals(raw: str) -> set[int]:
    """The device ordinals a readable memory limit names (not its UUIDs)."""
    return {int(entry.split("=", 1)[0]) for entry in raw.split(",") if entry[:1].isdigit()}


_PARSERS = {names.MPS_THREADS: parse_threads, names.MPS_MEMORY: parse_memory}
_FORMS = {
    names.MPS_THREADS: "a whole number from 1 to 100",
    names.MPS_MEMORY: "a comma-separated list of <device ordinal or UUID>=<size with unit K,"
    " M, G or T>, such as 0=4096M",
}


def _mps_limits(
    pod: view.Pod,
    replicas: Sequence[int],
    resource: str,
    profile: Profile | None,
    policy: Policy,
    *,
    candidates: tuple[NodeClass, ...] | None,
    findings: list[Finding],
) -> tuple[NodeClass, ...] | None:
    """`mps-limits`: the MPS values a container sets must parse and fit (under the pod's
    profile too, where the policy makes profiles ceilings); the classes whose ceiling the
    pod's limits (its own, else the profile's) exceed are left out."""
    limits: list[Limit] = []
    unreadable = False
    threads = profile.active_thread_percentage if profile else None
    memory = profile.pinned_memory_mib if profile else None
    for i, c in enumerate(pod.containers):
        if not replicas[i]:
            continue
        for variable, from_profile in ((_MPS_THREADS, threads), (_MPS_MEMORY, memory)):
            defined = c.variable(variable)
            if defined is None:
                if from_profile is not None and profile is not None:
                    limits.append(
                        Limit(c.name, variable, from_profile, f'profile "{profile.name}"', False)
                    )
                continue
            position, var = defined[0], view.env_value(defined[1])
            value = None if var is None else _PARSERS[variable](var)
            if value is None:
                unreadable = True
                if var is None:
                    problem = "comes from valueFrom, which cannot be read at admission"
                elif "$(" in var:
                    problem = "refers to another variable, which cannot be read at admission"
                else:
                    problem = f'"{shown_value(var)}" is not {_FORMS[variable]}'
                _deny(
                    findings,
                    pod,
                    "mps-limits",
                    f"{c.field}.env[{position}]",
                    f'container "{c.name}": {variable} (',
                    FIELD,
                    f") {problem}; MPS limits are checked against the node's ceiling before the"
                    " pod runs. Set a plain value, or remove it for the profile's",
                    container=c.name,
                )
                continue
            if (
                variable == _MPS_MEMORY
                and policy.profiles_are_ceilings
                and from_profile is not None
                and profile is not None
                and var is not None
            ):
                # A device the list does not name runs with the daemon's own limit, the
                # class's ceiling: where profiles are ceilings, each must be named.
                named = _ordinals(var)
                seen = devices(replicas[i], policy.classes_by_resource.get(resource, ()))
                unnamed = [n for n in range(seen) if n not in named]
                if unnamed:
                    _deny(
                        findings,
                        pod,
                        "mps-limits",
                        f"{c.field}.env[{position}]",
                        f'container "{c.name}": MPS limit above the profile:'
                        f" {variable}={shown_value(var)} (",
                        FIELD,
                        f") does not limit device {', '.join(map(str, unnamed))} of the"
                        f" {seen} it gets (by ordinal: 0 is its first), which then has"
                        f' the class\'s ceiling; policy "{policy.name}" makes profile'
                        f' "{profile.name}" ({from_profile}M per device) a ceiling. Name each'
                        " device, or remove it (the webhook sets the profile's)",
                        container=c.name,
                    )
                    limits.append(
                        Limit(c.name, variable, from_profile, f'profile "{profile.name}"', False)
                    )
                    continue
            over_profile = from_profile is not None and value > from_profile
            if not (over_profile and policy.profiles_are_ceilings):
                limits.append(
                    Limit(c.name, variable, value, f'"{c.name}" {variable}={var}', True)
                )
            if over_profile and from_profile is not None and profile is not None:
                figure = f"{from_profile:g}{_UNIT_SUFFIX[variable]}"
                if policy.profiles_are_ceilings:
                    most = str(from_profile) if variable == _MPS_THREADS else (
                        f"{from_profile}M per device"
                    )
                    _deny(
                        findings,
                        pod,
                        "mps-limits",
                        f"{c.field}.env[{position}]",
                        f'container "{c.name}": MPS limit above the profile: {variable}=',
                        f"{shown_value(var or '')} (",
                        FIELD,
                        f') is above profile "{profile.name}" ({figure}), and policy'
                        f' "{policy.name}" makes profiles ceilings. Remove it (the webhook sets'
                        f" the profile's), set it at most to {most}, or ask for a larger"
                        f" profile with the annotation {names.ANNOTATION_PROFILE}",
                        container=c.name,
                    )
                    # Refused once: the placement goes on with the profile's value, so a
                    # relaxed rule admits the pod pinned where the profile fits.
                    limits.append(
                        Limit(c.name, variable, from_profile, f'profile "{profile.name}"', False)
                    )
                    continue
                findings.append(
                    Finding(
                        "mps-limits",
                        warning=f'container "{c.name}": {variable}={var} is above profile'
                        f' "{profile.name}" ({figure})',
                    )
                )
    if candidates is None or unreadable:
        # A value that cannot be read cannot be held against the ceilings; refused in
        # enforce mode, a relaxed rule still has the pod pinned to the classes left.
        return candidates
    fitting, excluded, offenders = _fit(candidates, tuple(limits))
    if fitting:
        if excluded:
            findings.append(
                Finding(
                    "mps-limits",
                    warning="kept off node classes whose MPS ceiling is too low: "
                    + "; ".join(excluded),
                )
            )
        return fitting
    if offenders:
        who = ", ".join(f'container "{n}"' for n in offenders)
        _deny(
            findings,
            pod,
            "mps-limits",
            "spec.containers",
            f"{who}: MPS limit above the ceiling: CUDA_MPS_* set in the pod exceed the MPS"
            f" ceiling of every node class it may use ({'; '.join(excluded)}), and MPS can only"
            " lower the daemon's limit (100/replicas %, memory/replicas MiB). Remove them or"
            " set them at most to the ceiling",
            container=offenders[0] if len(offenders) == 1 else None,
        )
    else:
        name = profile.name if profile else "?"
        _deny(
            findings,
            pod,
            "mps-limits",
            f"metadata.annotations[{names.ANNOTATION_PROFILE}]",
            f'profile too large: "{name}" is above the MPS ceiling of every node class the pod'
            f" may use ({'; '.join(excluded)}). Choose a smaller profile with the annotation"
            f" {names.ANNOTATION_PROFILE}",
        )
    return None


def shown_value(value: str) -> str:
    """A variable's value in a message, cut short."""
    return value if len(value) <= 40 else value[:32] + "..."


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
    ceiling = cls.thread_ceiling if limit.variable == _MPS_THREADS else cls.memory_ceiling_mib
    if ceiling is None or limit.value <= ceiling:
        return None
    unit = _UNIT_SUFFIX[limit.variable]
    return f"{limit.value:g}{unit} > {ceiling}{unit} ({limit.source})"


# --------------------------------------------------------------------------- patches


def pin(pod: view.Pod, placement: Placement) -> list[dict[str, Any]]:
    """The `node-selection` patch: pin the pod to the classes left, and for k > 1 replicas to
    nodes with at least k GPUs."""
    classes = placement.pinned_to
    if not classes:
        return []
    extra = _count(placement)
    return selection.plan(pod, placement.constraints, classes, extra=extra)


def _count(placement: Placement) -> selection.Extra:
    """For k > 1 replicas, nodes with at least k GPUs; none where the classes pinned to have
    fewer (multi-replica refused them all, in a relaxed mode: the pod stays on them)."""
    classes = placement.pinned_to or ()
    # (A loop: the builtin max with a default is a generic call in the compiled core.)
    largest = 0
    for replicas in placement.replicas:
        largest = max(largest, replicas)
    if not classes or largest <= 1 or any(c.gpus_per_node < largest for c in classes):
        return None
    return selection.min_gpus(classes[0].resource, largest)


def pin_words(placement: Placement) -> str:
    """The classes a pod is pinned to, and for k > 1 replicas the GPUs per node, in words."""
    classes = placement.pinned_to or ()
    text = "; ".join(selection.describe_class(c) for c in classes)
    extra = _count(placement)
    if extra is not None:
        text += f"; and {extra[0]} > {extra[2][0]}"
    return text


def tolerations(pod: view.Pod, policy: Policy, resource: str) -> list[dict[str, Any]]:
    """The `tolerations` patch's values: the policy's, and the resource's own taint where it
    says so, each only when no toleration of the pod already covers it."""
    existing = (pod.spec.tolerations if pod.spec is not None else None) or ()
    added: list[dict[str, Any]] = []
    for wanted in _wanted_dicts(policy, resource):
        if not any(covers(e, wanted) for e in existing):
            added.append(wanted.copy())
    return added


@functools.lru_cache(maxsize=256)
def _wanted_dicts(policy: Policy, resource: str) -> tuple[dict[str, Any], ...]:
    """`wanted_tolerations` as dicts, to compare and copy (never to hand out: the patch takes
    copies)."""
    return tuple(dict(items) for items in wanted_tolerations(policy, resource))


def toleration_words(t: Mapping[str, Any]) -> str:
    """A toleration the `tolerations` patch adds, in its words: `key Operator [value]
    effect`."""
    parts = [str(t.get("key") or "(every key)"), str(t.get("operator") or "Equal")]
    if t.get("value"):
        parts.append(str(t["value"]))
    parts.append(str(t.get("effect") or "(every effect)"))
    return " ".join(parts)


@functools.lru_cache(maxsize=256)
def wanted_tolerations(policy: Policy, resource: str) -> tuple[tuple[tuple[str, Any], ...], ...]:
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


def covers(have: dict[str, Any], want: dict[str, Any]) -> bool:
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


def mps_env(profile: Profile, c: view.Slot, devices: int) -> list[dict[str, str]]:
    """The `mps-limits` patch's variables for a container with `devices` replicas: the
    profile's values it does not set itself."""
    new: list[dict[str, str]] = []
    if profile.active_thread_percentage is not None and c.variable(_MPS_THREADS) is None:
        new.append({"name": _MPS_THREADS, "value": str(profile.active_thread_percentage)})
    if profile.pinned_memory_mib is not None and c.variable(_MPS_MEMORY) is None:
        new.append(
            {"name": _MPS_MEMORY, "value": _memory_limit(profile.pinned_memory_mib, devices)}
        )
    return new


@functools.lru_cache(maxsize=256)
def _memory_limit(mib: int, devices: int) -> str:
    """`0=3840M,1=3840M`: one entry per device the container gets, by the ordinal CUDA sees."""
    return ",".join(f"{i}={mib}M" for i in range(devices))
