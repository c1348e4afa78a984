"""Near misses: what a user wrote that looks like something the webhook reads, but is not.

A typo in a name the webhook reads changes nothing the API server checks: an extended
resource may have any name, an annotation any key. So `nvidia.com/gpu-shared: 1` is admitted
and waits in Pending for a node that offers it, and `gpu-share.io/profle: small` is ignored
and the pod runs with the default profile, each with nothing said. Each is told here, as a
warning (kubectl prints it at `kubectl apply`; `mutate` on stderr), never a refusal: the
pod is exactly what was written, and nothing in it reaches more GPU than the policy grants.

- `resource_warnings(pod, policy)`: a resource name in a container's limits or requests that
  starts like an NVIDIA GPU resource (`nvidia.com/gpu`, `nvidia.com/mig-`), or is close to one
  the policy knows, but is none the device plugin advertises: not `nvidia.com/gpu`, not a MIG
  profile (`nvidia.com/mig-1g.5gb`), not a shared resource of the policy (an unknown
  `.shared` one is refused by rule `resource-not-allowed`).
- `annotation_warnings(pod, policy)`: an annotation key under `gpu-share.io/` that the webhook
  does not read, or a key close to one it reads (`gpu-share.io/Profile`,
  `gpushare.io/profile`).
- `workload_warnings(obj, templates)`: `gpu-share.io/profile` on a workload's own metadata,
  which its pods never see (they get their template's annotations).

`unchanged(pod, policy)` says in one line why a review left a pod as it was (for `mutate`).
The checks cost a pass over the names the pod has; the fuzzy match runs only on a name that
passed a cheap filter.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from webhook import names
from webhook.core import pods
from webhook.policies import Policy

# The annotations the webhook reads or writes on a pod.
KNOWN_ANNOTATIONS = (names.ANNOTATION_PROFILE, names.ANNOTATION_POLICY, names.ANNOTATION_MUTATIONS)
_KNOWN_SET = frozenset(KNOWN_ANNOTATIONS)
_KNOWN_NAMES = tuple(k.removeprefix(names.DOMAIN + "/") for k in KNOWN_ANNOTATIONS)
# The namespace's labels (the policy label's key is also the pod annotation the webhook writes).
NAMESPACE_LABELS = frozenset({names.ENABLED_LABEL})
_DOMAIN_PREFIX = names.DOMAIN + "/"
# The exclusive GPU resource of the device plugin, and its MIG devices: `mig-<g>g.<m>gb`,
# with a suffix for the profiles with media extensions or graphics (`+me`, `+gfx`) and a
# compute-instance part on some (`mig-1c.2g.10gb`).
GPU = "nvidia.com/gpu"
_MIG = re.compile(r"nvidia\.com/mig-(\d+c\.)?\d+g\.\d+gb([.+-][a-z]+)*")
_MIG_PREFIX = "nvidia.com/mig-"
_MIG_EXAMPLE = "nvidia.com/mig-1g.5gb"
# Names that are none of this, met in most pods: passed over without a search.
_PLAIN_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_PLAIN_LABELS = frozenset(
    {
        "app",
        "pod-template-hash",
        "controller-revision-hash",
        "job-name",
        "batch.kubernetes.io/job-name",
        "batch.kubernetes.io/controller-uid",
        "controller-uid",
        "app.kubernetes.io/name",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/component",
        "app.kubernetes.io/part-of",
        "app.kubernetes.io/version",
        "app.kubernetes.io/managed-by",
        "statefulset.kubernetes.io/pod-name",
        "apps.kubernetes.io/pod-index",
        "version",
        "release",
        "component",
        "tier",
        "team",
    }
)
# What a name must have in it, in any case, to be looked at further.
_SUSPECT_RESOURCE = re.compile("gpu|nvidia", re.IGNORECASE)
_SUSPECT_KEY = re.compile("share|profile|gpu", re.IGNORECASE)
# How close a name must be to a known one to be taken for a typo of it (difflib's ratio).
_CLOSE = 0.8


class Budget:
    """What one review may spend on near misses, whatever the object holds: fuzzy matches
    (`looks`; each a few microseconds) and warnings (`lines`). A pod with 50,000 annotation
    keys like `gpu-share.io/p1` costs a pass over them and `LOOKS` matches, not 50,000 (which
    took a minute), and gives `LINES` warnings and one that says there are more."""

    __slots__ = ("lines", "looks", "more")

    def __init__(self, looks: int = 0, lines: int = 0) -> None:
        self.looks: int = looks or LOOKS
        self.lines: int = lines or LINES
        self.more: bool = False

    @property
    def spent(self) -> bool:
        """Nothing more can be told: the warnings are all sent, or the matches all made (a
        name that passed the cheap filter could no longer be judged)."""
        return self.more or self.looks <= 0

    def put(self, out: list[str], line: str) -> None:
        """Add `line` to `out` unless it is there or the budget of warnings is spent."""
        if line in out:
            return
        if self.lines > 0:
            self.lines -= 1
            out.append(line)
        elif not self.more:
            self.more = True
            out.append(MORE)


# A review's budget: fuzzy matches, and warnings (kubectl prints each on its own line).
LOOKS = 64
LINES = 6
MORE = "more names look like gpu-share's but are not; the first are above"


def _close(word: str, candidates: Sequence[str], cutoff: float, budget: Budget) -> str | None:
    """The candidate `word` is closest to (difflib's ratio at least `cutoff`), within the
    budget. A word much longer than every candidate cannot be that close (the ratio is at
    most twice the shorter length over the sum), so it costs nothing."""
    longest = max(len(c) for c in candidates)
    if len(word) * cutoff > (2 - cutoff) * longest or budget.looks <= 0:
        return None
    budget.looks -= 1
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=cutoff)
    return close[0] if close else None


def resource_warnings(pod: pods.Pod, policy: Policy, budget: Budget) -> list[str]:
    """Warnings for resource names that look like an NVIDIA GPU resource but are none."""
    out: list[str] = []
    shared = policy.shared_resources
    for c in pod.containers:
        if not c.judged:
            continue
        for part in (c.limits.value, c.requests.value):
            if type(part) is not dict:
                continue
            for name in part:
                # Cheap first: most names (cpu, memory, the policy's own, other vendors'
                # devices) are none of this.
                if (
                    type(name) is not str
                    or name in _PLAIN_RESOURCES
                    or name == GPU
                    or name in shared
                    or _SUSPECT_RESOURCE.search(name) is None
                ):
                    continue
                if budget.spent:
                    return out
                meant = _meant_resource(name, policy, budget)
                if meant is not None:
                    budget.put(out, f'{meant} (container "{echo(c.name)}")')
    return out


def _known_resource(name: str, policy: Policy) -> bool:
    return (
        name == GPU
        or name in policy.shared_resources
        # An unknown `.shared` one is refused by rule resource-not-allowed.
        or (name.startswith(names.GPU_RESOURCE_PREFIXES) and name.endswith(names.SHARED_SUFFIX))
        or _MIG.fullmatch(name) is not None
    )


def _meant_resource(name: str, policy: Policy, budget: Budget) -> str | None:
    """None when `name` is no near miss; else its warning, the advice first (a warning is cut
    at 120 characters). Whether some node offers the name is not known here: a device plugin
    can be configured to advertise other names, and such a pod is admitted unchanged."""
    lower = name.lower()
    if "gpu" not in lower and "nvidia" not in lower:
        return None
    if _known_resource(name, policy):
        return None
    candidates = sorted({GPU, *policy.shared_resources})
    shown = echo(name)
    if lower != name and _known_resource(lower, policy):
        return f"did you mean {lower}? Resource names are case-sensitive: {shown}"
    if not lower.startswith(names.GPU_RESOURCE_PREFIXES):
        close = _close(lower, candidates, _CLOSE, budget)
        if close is None:
            return None
        return f"did you mean {close}? {shown} is no NVIDIA GPU resource"
    if lower.startswith(_MIG_PREFIX):
        return f"MIG devices are named like {_MIG_EXAMPLE}: {shown} is not"
    close = _close(lower, candidates, 0.6, budget)
    if close is not None:
        return f"did you mean {close}? {shown} is no NVIDIA GPU resource"
    return f"{shown} is no NVIDIA GPU resource; the shared one here is {policy.preferred_resource}"


def annotation_warnings(pod: pods.Pod, policy: Policy, budget: Budget) -> list[str]:
    """Warnings for annotation keys that look like one the webhook reads but are not, a
    namespace label written as a pod annotation, and a policy annotation the webhook will
    overwrite (the namespace's label picks the policy). The advice comes first and what is
    echoed of the object is cut short (`_echo`): a warning is cut at 120 characters."""
    out: list[str] = []
    for key, value in pod.annotations:
        if key in _KNOWN_SET or _SUSPECT_KEY.search(key) is None:
            if key == names.ANNOTATION_POLICY and isinstance(value, str) and value != policy.name:
                budget.put(
                    out,
                    f'the namespace\'s label picks the policy (here "{policy.name}"): annotation'
                    f" {key}={echo(value)} is not read",
                )
            continue
        if budget.spent:
            return out
        shown = echo(key)
        if key.lower() in NAMESPACE_LABELS:
            budget.put(
                out, f"{shown} is a namespace label, not a pod annotation: label the namespace"
            )
            continue
        meant = _meant_annotation(key, budget)
        if meant == names.ANNOTATION_PROFILE:
            budget.put(
                out,
                f"annotation {shown} is ignored: did you mean {meant}?"
                + _profile_effect(pod, policy),
            )
        elif meant == names.ANNOTATION_POLICY:
            budget.put(
                out,
                f"annotation {shown} is ignored: the namespace's label {names.POLICY_LABEL} picks"
                " the policy",
            )
        elif meant == _UNKNOWN_OURS:
            budget.put(
                out,
                f"annotation {shown} is ignored: the one gpu-share reads on a pod is"
                f" {names.ANNOTATION_PROFILE}",
            )
    return out


def label_warnings(
    node: Mapping[str, Any], pod: pods.Pod, policy: Policy, budget: Budget
) -> list[str]:
    """Warnings for the pod's labels (`node` is the pod spec's object) that are one of the
    webhook's annotations, or a namespace label, set in the wrong place."""
    meta = node.get("metadata")
    labels = meta.get("labels") if type(meta) is dict else None
    if type(labels) is not dict:
        return []
    out: list[str] = []
    for key in labels:
        if type(key) is not str or key in _PLAIN_LABELS or _SUSPECT_KEY.search(key) is None:
            continue
        if budget.spent:
            return out
        shown = echo(key)
        if key.lower() in NAMESPACE_LABELS:
            budget.put(
                out, f"label {shown} belongs on the namespace, not the pod: label the namespace"
            )
            continue
        meant = key if key == names.ANNOTATION_PROFILE else _meant_annotation(key, budget)
        if meant == names.ANNOTATION_PROFILE:
            budget.put(
                out,
                f"set {meant} as an annotation: label {shown} is not read"
                + _profile_effect(pod, policy),
            )
    return out


# What `_meant_annotation` says of a key under gpu-share.io/ that is close to none it reads.
_UNKNOWN_OURS = "(unknown)"


def _meant_annotation(key: str, budget: Budget) -> str | None:
    """The annotation of ours `key` is a misspelling of; `_UNKNOWN_OURS` for another key under
    `gpu-share.io/` (told, with no guess at what was meant: `gpu-share.io/exempt` is no
    misspelling of anything); None when it looks like none."""
    if key in _KNOWN_SET:
        return None
    lower = key.lower()
    if lower in _KNOWN_SET:
        return lower
    ours = key.startswith(_DOMAIN_PREFIX)
    if not ours and "share" not in lower and "profile" not in lower and "gpu" not in lower:
        return None
    if ours:
        # Under our domain the names alone are compared: the shared prefix would make any
        # gpu-share.io/ key look like one of ours.
        name = _close(lower.removeprefix(_DOMAIN_PREFIX), _KNOWN_NAMES, 0.75, budget)
        return _DOMAIN_PREFIX + name if name is not None else _UNKNOWN_OURS
    return _close(lower, KNOWN_ANNOTATIONS, _CLOSE, budget)


def _profile_effect(pod: pods.Pod, policy: Policy) -> str:
    """What profile the pod gets instead, where one applies: a pod that asks for a shared
    GPU of the policy and names none."""
    if pods.annotation(pod, names.ANNOTATION_PROFILE) is not None or not policy.default_profile:
        return ""
    shared = policy.shared_resources
    for c in pod.containers:
        for part in (c.limits.value, c.requests.value):
            if type(part) is dict and any(name in shared for name in part):
                return f' (default profile "{policy.default_profile}" applies)'
    return ""


# How much of a name of the object a warning echoes (the advice comes first, and a warning
# is cut at 120 characters).
_ECHO = 48


def echo(name: str) -> str:
    """`name` as a warning echoes it: at most `_ECHO` characters."""
    return name if len(name) <= _ECHO else name[: _ECHO - 3] + "..."


def workload_warnings(
    obj: Mapping[str, Any], found: list[pods.Template], budget: Budget
) -> list[str]:
    """`gpu-share.io/profile` (or a near miss of it) in a workload's own metadata, or in the
    metadata of a level between it and its pod template (a CronJob's `jobTemplate`): its pods
    never see it, they get their template's annotations."""
    kind = obj.get("kind")
    if kind == "Pod" or not found:
        return []
    out: list[str] = []
    for t in found:
        if _template_annotation(t.node, names.ANNOTATION_PROFILE) is not None:
            continue

        for where, node in _levels(obj, t.place.field):
            meta = node.get("metadata")
            own = meta.get("annotations") if isinstance(meta, Mapping) else None
            if not isinstance(own, Mapping):
                continue
            for key in own:
                if not isinstance(key, str):
                    continue
                if budget.spent:
                    return out
                meant = key if key == names.ANNOTATION_PROFILE else _meant_annotation(key, budget)
                if meant != names.ANNOTATION_PROFILE:
                    continue
                place = f"the {kind}'s metadata" if not where else f"{where}.metadata"
                what = "move it" if key == names.ANNOTATION_PROFILE else f"set {meant}"
                budget.put(
                    out,
                    f"{what} to the pod template's annotations: {echo(key)} in {place} is ignored",
                )
    return out


_STEP = re.compile(r"([^.\[]+)|\[(\d+)\]")


def _levels(obj: Mapping[str, Any], field: str) -> list[tuple[str, Mapping[str, Any]]]:
    """The objects on the way from `obj` to its template at `field` ("spec.jobTemplate.spec.
    template"), the template itself left out, each with its field path ("" for `obj`)."""
    out: list[tuple[str, Mapping[str, Any]]] = [("", obj)]
    node: Any = obj
    path = ""
    steps = [m.group(1) or int(m.group(2)) for m in _STEP.finditer(field)]
    for step in steps[:-1]:
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                break
            node = node[step]
            path = f"{path}[{step}]"
        else:
            if not isinstance(node, Mapping):
                break
            node = node.get(step)
            path = f"{path}.{step}" if path else step
        if isinstance(node, Mapping) and path.split(".")[-1] != "spec":
            out.append((path, node))
    return out


def _template_annotation(node: Mapping[str, Any], key: str) -> Any:
    meta = node.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations.get(key) if isinstance(annotations, Mapping) else None


def unchanged(pod: pods.Pod, policy: Policy) -> str:
    """Why a review that refused nothing left `pod` as it was, in a few words."""
    wanted: list[str] = []
    for c in pod.containers:
        for part in (c.limits.value, c.requests.value):
            for name in part if isinstance(part, Mapping) else ():
                if (
                    isinstance(name, str)
                    and name.startswith(names.GPU_RESOURCE_PREFIXES)
                    and name not in wanted
                ):
                    wanted.append(name)
    shared = sorted(policy.shared_resources)
    shares = f"it shares {', '.join(shared)}" if shared else "it shares no GPU"
    if policy.mode == names.DRY_RUN:
        return f'policy "{policy.name}" is in dry-run mode: it changes nothing'
    if any(name in policy.shared_resources for name in wanted):
        return "it is already as the webhook leaves it"
    if not wanted and policy.rules.void_visible_devices_without_gpu:
        return "it asks for no GPU, and its containers already hide the GPUs"
    budget = Budget()
    missed = [name for name in wanted if _meant_resource(name, policy, budget) is not None]
    if missed:
        return (
            f"it asks for {', '.join(missed)}, which looks like a misspelt GPU resource (see"
            " the warning)"
        )
    if wanted:
        return (
            f"it asks for {', '.join(wanted)}, no shared GPU of policy"
            f' "{policy.name}" ({shares}): an exclusive GPU, which the webhook leaves as it is'
        )
    return f'it asks for no GPU, and policy "{policy.name}" changes only pods that do ({shares})'
