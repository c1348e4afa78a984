"""What `gpu-share-webhook policy check` finds in a directory of policies, and in a node dump.

Every problem of every file in one round: a file that does not load does not stop the others,
a document whose fields are wrong is still judged by the validators pydantic did not run
(`policies.unreached_problems`), and two files that declare one name clash whether or not they
load. Then, of the policies that load, what can never happen although the server loads it
(warnings), and, with a node dump, the taints that keep a class's pods off its nodes.

Two levels, as the command prints them: an *error* is something the server refuses (the file
does not load) or a class that can place no pod on the nodes given: exit 1. A *warning* is
something the server loads and an admin should know of: exit 0. A file that cannot be read is
bad input (exit 2), after everything else has been said. Besides, *notes* (exit 0, each said
once for the whole directory) name what the policies rely on that no file can show: the DRA
driver's feature gates.

A `dra` section is judged class by class as if the class were open: `allowed` decides whether
namespaces may use it, the rest what they get once they may (`discover` writes classes closed,
ready to open).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.engine import placing, rules
from webhook.errors import InputError, PolicyError
from webhook.policy import documents, names, policies
from webhook.tools import discovering


@dataclass(frozen=True, slots=True)
class DirectoryReport:
    """A directory of policy files, checked."""

    # The policies the server would put in force (`policies.assemble`).
    loaded: policies.PolicySet
    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    # Files that cannot be read: bad input.
    unreadable: tuple[str, ...]
    # What the policies that load rely on beyond any file (`policy_notes`), each once.
    notes: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        """Whether every policy of the directory loaded (so the set covers all of them)."""
        return not self.errors and not self.unreadable


def check_directory(directory: Path) -> DirectoryReport:
    """Every problem of every policy file of `directory` (a directory), and the warnings of
    the policies that load. PolicyError when `directory` is no directory."""
    if not directory.is_dir():
        raise PolicyError([f"{directory}: not a directory of policy files"])
    files = policies.policy_files(directory)
    if not files:
        return DirectoryReport(
            policies.PolicySet({}), (f"{directory}: holds no *.yaml policy file",), (), ()
        )
    errors: list[str] = []
    unreadable: list[str] = []
    loads: list[policies.FileLoad] = []
    for file in files:
        try:
            data = documents.read_bytes(file)
        except InputError as exc:
            unreadable.append(str(exc))
            continue
        load = policies.FileLoad.of_bytes(data, str(file))
        loads.append(load)
        errors.extend(load.problems)
    # What the server would put in force, as it would (a file that clashes is out whole).
    loaded, problems = policies.assemble(loads)
    # A name declared twice is an error wherever it is, even in a file that does not load
    # (`assemble` says so only of the files that do): else it shows only once that file is
    # fixed.
    first: dict[str, policies.FileLoad] = {}
    for load in loads:
        for name in [p.name for p in load.policies] if load.policies else load.names:
            earlier = first.setdefault(name, load)
            if earlier is load:
                continue
            if earlier.problems and not load.problems:
                # In force now (the server serves it while the other does not load).
                errors.append(
                    f"{load.source}: metadata.name: policy {name!r} is also declared in"
                    f" {earlier.source}, which does not load; once it does, this file is out"
                    " of force"
                )
            else:
                errors.append(
                    f"{load.source}: metadata.name: policy {name!r} is already defined in"
                    f" {earlier.source}"
                )
    errors.extend(p for p in problems if p not in errors)
    warnings = [w for name in loaded.names for w in policy_warnings(loaded.policies[name])]
    notes = policy_notes([loaded.policies[name] for name in loaded.names])
    return DirectoryReport(loaded, tuple(errors), tuple(warnings), tuple(unreadable), tuple(notes))


# --------------------------------------------------------------------------- loads, never matches


def policy_warnings(policy: policies.Policy) -> list[str]:
    """What a policy the server loads says that can never happen, each as
    `<file>: <field path>: <reason and what to do>`."""
    out: list[str] = []
    where = policy.source
    mps = [c for c in policy.classes if c.mps]
    # Profiles also size the requests of DRA classes the webhook adds an MPS configuration
    # to.
    dra_mps = policy.dra is not None and any(c.add_mps for c in policy.dra.classes.values())
    if policy.profiles and not mps and not dra_mps:
        either = "" if policy.dra is None else " (nor does the webhook size a DRA class with them)"
        out.append(
            f"{where}: spec.profiles: no node class is mps{either}, so no profile limits anything"
            " (time-slicing nodes ignore CUDA_MPS_*); remove them, or add the MPS class they"
            " are meant for"
        )
    if policy.profiles:
        default = policy.profiles.get(policy.default_profile or "")
        for c in mps:
            ceiling = _ceiling(c)
            if not any(_fits(p, c) for p in policy.profiles.values()):
                out.append(
                    f"{where}: spec.nodeClasses[{c.index}]: class {c.name} takes no pod that"
                    f" uses a profile: every profile is above its MPS ceiling ({ceiling});"
                    " add a profile within it, or remove the class"
                )
            elif default is not None and not _fits(default, c):
                out.append(
                    f"{where}: spec.defaultProfile: {default.name} is above the MPS ceiling of"
                    f" class {c.name} ({ceiling}): pods that name no profile never land there"
                )
    seen: dict[tuple[tuple[str, str], ...], policies.NodeClass] = {}
    for c in policy.classes:
        other = seen.setdefault(c.selector, c)
        if other is not c:
            out.append(
                f"{where}: spec.nodeClasses[{c.index}]: class {c.name} selects the nodes class"
                f" {other.name} selects (the same {_labels(c)}); the webhook cannot tell them"
                " apart: merge them into one"
            )
    out.extend(mps_gpu_warnings(policy))
    out.extend(dra_warnings(policy))
    return out


# --------------------------------------------------------------------------- MPS on several GPUs


def mps_gpu_warnings(policy: policies.Policy) -> list[str]:
    """An MPS class that says more than one GPU per node: its clients are not kept to their
    replica's GPU (`discovering.MPS_NOT_CONFINED`)."""
    return [
        f"{policy.source}: spec.nodeClasses[{c.index}]: class {c.name} shares"
        f" {c.gpus_per_node} GPUs per node by MPS: {discovering.MPS_NOT_CONFINED}; where"
        " tenants must stay apart, give MPS nodes one GPU"
        for c in policy.classes
        if c.mps and c.gpus_per_node > 1
    ]


def mps_node_warnings(cls: policies.NodeClass, nodes: Sequence[discovering.Node]) -> list[str]:
    """The nodes of a dump an MPS class matches that have more than one GPU of its resource
    (said of the class itself, by `mps_gpu_warnings`, when its gpusPerNode is above 1)."""
    if not cls.mps or cls.gpus_per_node > 1:
        return []
    label = f"{cls.resource}.count"
    several = [
        f"{n.name}={n.labels[label]}"
        for n in nodes
        if n.labels.get(label, "").isdigit() and int(n.labels[label]) > 1
    ]
    if not several:
        return []
    shown = ", ".join(several[:5]) + (f" and {len(several) - 5} more" if len(several) > 5 else "")
    return [
        f"MPS on nodes with more than one GPU ({label} {shown}): {discovering.MPS_NOT_CONFINED};"
        " where tenants must stay apart, give MPS nodes one GPU"
    ]


# --------------------------------------------------------------------------- dra

MPS = "MPS"
TIME_SLICING = "TimeSlicing"
MPS_RULE = rules.DRA_MPS_LIMITS.name
# The configuration kind NVIDIA's driver applies to the devices of each of its classes (it
# refuses another on the node: "cannot apply GpuConfig to device ... of type mig"); vGPU's is
# not documented.
_NVIDIA_KINDS = {
    names.DRA_GPU_CLASS: "GpuConfig",
    names.DRA_MIG_CLASS: "MigDeviceConfig",
    names.DRA_VFIO_CLASS: "VfioDeviceConfig",
}
# How many characters a name may differ by (changed, added or dropped) from one of NVIDIA's to
# be taken for a misspelling of it: more would take a site's own class, such as
# a100.gpu.nvidia.com (three added), for one.
MISSPELT = 2


def dra_warnings(policy: policies.Policy) -> list[str]:
    """What a policy's dra section says that can never work, each as
    `<file>: <field path>: <reason and what to do>`."""
    dra = policy.dra
    if dra is None:
        return []
    out: list[str] = []
    default = policy.profiles.get(policy.default_profile or "")
    for i, c in enumerate(dra.classes.values()):
        at = f"{policy.source}: spec.dra.deviceClasses[{i}]"
        out.extend(_names(c, at, dra))
        ceilings = c.max_thread_percentage is not None or c.max_pinned_memory_mib is not None
        if MPS not in c.sharing:
            if ceilings:
                out.append(
                    f"{at}.mps: class {c.name} does not allow MPS (sharing:"
                    f" [{', '.join(c.sharing)}]), so its MPS ceilings limit nothing; add MPS to"
                    " sharing, or remove them"
                )
            continue
        if not ceilings and not policy.profiles:
            out.append(
                f"{at}.sharing: class {c.name} allows MPS with no ceiling, and the policy has"
                " no profile: an MPS configuration may set any limits or none, and a request"
                " with none gets none; set mps.maxActiveThreadPercentage and"
                " mps.maxPinnedMemoryMiB, or add profiles"
            )
        if c.capacity:
            out.append(
                f"{at}.capacity: class {c.name} allows MPS and caps consumable capacity"
                f" ({', '.join(n for n, _, _ in c.capacity)}): where NVIDIA's driver shares"
                " GPUs by capacity (its ConsumableShares feature gate), it refuses MPS claims on"
                ' the node ("MPS sharing is not supported when consumable shares is enabled");'
                " allow one or the other"
            )
        if c.add_mps:
            out.extend(_profiles_above(policy, c, at, default))
    return out


def _names(c: policies.DraClass, at: str, dra: policies.DraPolicy) -> list[str]:
    """A class or driver name that looks like a misspelling of NVIDIA's, and a driver or
    configuration kind NVIDIA's driver does not take for the devices of its own class."""
    out = []
    meant = misspelling(c.name, names.DRA_NVIDIA_CLASSES)
    if meant is not None:
        fate = f"; {meant} is not listed, so closed" if meant not in dra.classes else ""
        out.append(
            f"{at}.name: {c.name} is no class of NVIDIA's GPU DRA driver; did you mean"
            f" {meant}? (this entry governs only a class of its own name{fate})"
        )
    if c.driver != names.DRA_DRIVER:
        meant = misspelling(c.driver, [names.DRA_DRIVER])
        if meant is not None:
            out.append(
                f"{at}.driver: {c.driver} is not NVIDIA's driver; did you mean {meant}?"
                " (configurations for another driver are not the ones NVIDIA's reads)"
            )
        elif c.name in _NVIDIA_KINDS:
            out.append(
                f"{at}.driver: {c.name} is a class of NVIDIA's driver, {names.DRA_DRIVER}, which"
                f" reads no configuration for {c.driver}; remove driver"
            )
    kind = _NVIDIA_KINDS.get(c.name)
    if kind is not None and c.config_kind != kind:
        out.append(
            f"{at}.configKind: NVIDIA's driver applies {kind} to the devices of {c.name} and"
            f" refuses a {c.config_kind} on the node; remove configKind"
        )
    return out


def _profiles_above(
    policy: policies.Policy, c: policies.DraClass, at: str, default: policies.Profile | None
) -> list[str]:
    """The profiles above an MPS class's ceilings: where one of them applies, the webhook
    refuses a request of the class with no MPS configuration, as the configuration it would
    add does not fit."""
    above = [p for p in policy.profiles.values() if not _fits_dra(p, c)]
    if not above:
        return []
    ceiling = _dra_ceiling(c)
    fix = f"(rule {MPS_RULE}); raise the ceiling, or lower the profile"
    if len(above) == len(policy.profiles):
        return [
            f"{at}.mps: every profile is above the MPS ceiling of class {c.name} ({ceiling}):"
            " the webhook refuses every request of it that has no MPS configuration of its"
            f" own {fix}s"
        ]
    out = []
    if default is not None and default in above:
        out.append(
            f"{policy.source}: spec.defaultProfile: {default.name} is above the MPS ceiling of"
            f" DRA class {c.name} ({ceiling}): in claims that name no profile, the webhook"
            f" refuses the requests of it that have no MPS configuration {fix}"
        )
    others = [p.name for p in above if p is not default]
    if others:
        many = len(others) > 1
        out.append(
            f"{at}.mps: profile{'s' if many else ''} {', '.join(others)}"
            f" {'are' if many else 'is'} above the MPS ceiling of class {c.name} ({ceiling}):"
            f" in claims that name {'them' if many else 'it'}, the webhook refuses the"
            f" requests of it that have no MPS configuration {fix}{'s' if many else ''}"
        )
    return out


def _fits_dra(profile: policies.Profile, c: policies.DraClass) -> bool:
    """Whether `profile` is within a class's MPS ceilings (a value it leaves out is the
    ceiling's, as the webhook fills it in)."""
    threads, memory = profile.active_thread_percentage, profile.pinned_memory_mib
    ceiling = c.max_thread_percentage
    if threads is not None and ceiling is not None and threads > ceiling:
        return False
    return memory is None or c.max_pinned_memory_mib is None or memory <= c.max_pinned_memory_mib


def _dra_ceiling(c: policies.DraClass) -> str:
    parts = []
    if c.max_thread_percentage is not None:
        parts.append(f"{c.max_thread_percentage}%")
    if c.max_pinned_memory_mib is not None:
        parts.append(f"{c.max_pinned_memory_mib} MiB")
    return " / ".join(parts)


def misspelling(name: str, known: Collection[str]) -> str | None:
    """The one of `known` that `name`, none of them, is a misspelling of: the closest, at
    most `MISSPELT` characters changed, added or dropped as difflib aligns them (its ratio
    alone would take t4.gpu.nvidia.com, a name a site may give its own class, for
    gpu.nvidia.com)."""
    if name in known:
        return None
    found: tuple[int, str] | None = None
    for candidate in known:
        matcher = difflib.SequenceMatcher(None, name, candidate, autojunk=False)
        edits = sum(
            max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"
        )
        if edits <= MISSPELT and (found is None or edits < found[0]):
            found = (edits, candidate)
    return found[1] if found else None


def policy_notes(loaded: Sequence[policies.Policy]) -> list[str]:
    """What the policies' dra sections rely on that no file shows, each said once: the
    feature gate of NVIDIA's driver each sharing strategy they allow needs."""
    out = []
    for strategy, gate, otherwise in (
        (
            MPS,
            "MPSSupport",
            "without it, MPS claims fail on the node, those the webhook gives a profile's MPS"
            " configuration too",
        ),
        (
            TIME_SLICING,
            "TimeSlicingSettings",
            "without it, a claim that configures time-slicing fails on the node (one with no"
            " sharing configuration still gets the driver's default time-slicing)",
        ),
    ):
        using = []
        for p in loaded:
            classes = [
                c.name for c in (p.dra.classes.values() if p.dra else ()) if strategy in c.sharing
            ]
            if classes:
                using.append(f"policy {p.name}: {', '.join(classes)}")
        if using:
            out.append(
                f"{strategy} is allowed on DRA classes ({'; '.join(using)}): NVIDIA's DRA"
                f" driver takes it only with its {gate} feature gate on (alpha, off by"
                f" default); {otherwise}"
            )
    return out


def _ceiling(c: policies.NodeClass) -> str:
    return f"{c.thread_ceiling}% / {c.memory_ceiling_mib or 0} MiB"


def _fits(profile: policies.Profile, c: policies.NodeClass) -> bool:
    threads, memory = profile.active_thread_percentage, profile.pinned_memory_mib
    if threads is not None and c.thread_ceiling is not None and threads > c.thread_ceiling:
        return False
    return memory is None or c.memory_ceiling_mib is None or memory <= c.memory_ceiling_mib


def _labels(c: policies.NodeClass) -> str:
    return ", ".join(f"{k}={v}" for k, v in c.selector)


# --------------------------------------------------------------------------- taints


def class_tolerations(policy: policies.Policy, cls: policies.NodeClass) -> list[dict[str, Any]]:
    """The tolerations a pod of `cls` gets from the webhook (`placing.wanted_tolerations`)."""
    return [dict(t) for t in placing.wanted_tolerations(policy, cls.advertised)]


# One taint matcher for `policy check` and `discover` (it reads the nodes' taints).
tolerates = discovering.tolerates
untolerated = discovering.untolerated
Untolerated = discovering.Untolerated


# --------------------------------------------------------------------------- device classes
# `policy check --device-classes FILE`: the DeviceClasses of a cluster that can hand out
# NVIDIA's GPUs but that no policy governs. The webhook knows a GPU class by its name (the
# rendered conditions list them): a class of the admin's own that selects GPUs is sent no
# claim, so its claims are never reviewed.


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """A DeviceClass as the check reads it: its name, the CEL expressions of its selectors,
    and the drivers its own configurations are for."""

    name: str
    expressions: tuple[str, ...]
    drivers: tuple[str, ...]


def read_device_classes(objects: Iterable[Mapping[str, Any]]) -> tuple[list[DeviceClass], int]:
    """The DeviceClasses (of any version of resource.k8s.io) among `objects`, and how many
    objects were not DeviceClasses. InputError for one of the wrong shape (naming it and the
    field), for a name given twice, or for none."""
    found: list[DeviceClass] = []
    others = 0
    seen: set[str] = set()
    for number, obj in enumerate(objects, 1):
        api = obj.get("apiVersion")
        if obj.get("kind") != "DeviceClass" or not str(api).startswith(f"{names.DRA_GROUP}/"):
            others += 1
            continue
        cls = _read_device_class(obj, number)
        if cls.name in seen:
            raise InputError(f"DeviceClass/{cls.name}: appears twice in the dump")
        seen.add(cls.name)
        found.append(cls)
    if not found:
        raise InputError(
            "holds no DeviceClass object (expected the output of"
            " `kubectl get deviceclasses -o json`)"
        )
    return found, others


def _read_device_class(obj: Mapping[str, Any], number: int) -> DeviceClass:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise InputError(f"object {number}, a DeviceClass: metadata.name is missing")
    what = f"DeviceClass/{name}"
    spec = obj.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise InputError(f"{what}: spec is not an object")
    expressions: list[str] = []
    for i, selector in enumerate(_list(spec, "selectors", what)):
        cel = selector.get("cel") if isinstance(selector, dict) else None
        expression = cel.get("expression") if isinstance(cel, dict) else None
        if not isinstance(expression, str):
            raise InputError(f"{what}: spec.selectors[{i}].cel.expression is not a string")
        expressions.append(expression)
    drivers: list[str] = []
    for i, config in enumerate(_list(spec, "config", what)):
        opaque = config.get("opaque") if isinstance(config, dict) else None
        if opaque is None:
            continue
        driver = opaque.get("driver") if isinstance(opaque, dict) else None
        if not isinstance(driver, str):
            raise InputError(f"{what}: spec.config[{i}].opaque.driver is not a string")
        drivers.append(driver)
    return DeviceClass(name, tuple(expressions), tuple(drivers))


def _list(spec: Mapping[str, Any], key: str, what: str) -> list[Any]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"{what}: spec.{key} is not a list")
    return value


def gpu_drivers(loaded: policies.PolicySet) -> frozenset[str]:
    """The DRA drivers whose devices are GPUs: NVIDIA's, and every driver a policy's dra
    section names for a class."""
    listed = {c.driver for p in loaded.policies.values() if p.dra for c in p.dra.classes.values()}
    return frozenset({names.DRA_DRIVER, *listed})


def selects_gpus(cls: DeviceClass, drivers: Collection[str]) -> str | None:
    """Why `cls` can hand out GPUs of `drivers`, in a few words; None when it cannot tell.
    A selector that names such a driver as a string (`device.driver == "gpu.nvidia.com"`,
    `device.attributes["gpu.nvidia.com"]`), a configuration for one, or no selector at all
    (the class matches every device of every driver)."""
    for driver in sorted(drivers):
        quoted = re.compile(r"([\"'])" + re.escape(driver) + r"\1")
        if any(quoted.search(e) for e in cls.expressions):
            return f"its selectors name {driver}"
    for driver in cls.drivers:
        if driver in drivers:
            return f"it carries a configuration for {driver}"
    if not cls.expressions:
        return "it has no selector, so it matches every device of every driver"
    return None


def device_class_warnings(
    loaded: policies.PolicySet, classes: Sequence[DeviceClass], *, source: str
) -> tuple[list[str], int]:
    """A warning for each class of `classes` that selects GPUs and that no policy governs
    (none lists it, and it is none of NVIDIA's), and how many select GPUs in all."""
    governed = set(loaded.gpu_classes)
    drivers = gpu_drivers(loaded)
    out: list[str] = []
    selecting = 0
    for cls in classes:
        why = selects_gpus(cls, drivers)
        if why is None:
            continue
        selecting += 1
        if cls.name in governed:
            continue
        out.append(
            f"{source}: DeviceClass {cls.name} can hand out GPUs ({why}), and no policy's dra"
            " section lists it: the webhook is sent none of its claims, so they are never"
            " reviewed. List it in a policy's dra.deviceClasses (it stays closed unless"
            " allowed: true), then render the webhook configurations again"
        )
    return out, selecting
