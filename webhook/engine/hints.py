"""Near misses: what a user wrote that looks like something the webhook reads, but is not.

A typo in a name the webhook reads changes nothing the API server checks: an extended
resource may have any name, an annotation any key. So `nvidia.com/gpu-shared: 1` is admitted
and waits in Pending for a node that offers it, and `gpu-share.io/profle: small` is ignored
and the pod runs with the default profile, each with nothing said. Each is told here, as a
warning (kubectl prints it at `kubectl apply`; `mutate` on stderr), never a refusal: the
pod is exactly what was written, and nothing in it reaches more GPU than the policy grants.

- `resource_warnings`: a resource name that starts like an NVIDIA GPU resource
  (`nvidia.com/gpu`, `nvidia.com/mig-`) in any case, or is close to one the policy knows,
  but is none the device plugin advertises by default: not `nvidia.com/gpu`, not a MIG
  profile (`nvidia.com/mig-1g.5gb`), not a shared resource of the policy (an unknown
  `.shared` one is refused by rule `resource-not-allowed`).
- `annotation_warnings`, `label_warnings`: a key close to an annotation the webhook reads,
  another key under `gpu-share.io/`, the opt-in on a pod, a pod's own policy annotation.
- `workload_warnings`: `gpu-share.io/profile` on a workload's own metadata, or a CronJob's
  `jobTemplate`, which its pods never see.

`meant` is the one matcher (namespace labels use it too, `namespaces.label_near_misses`):
a key that differs only in case; under `gpu-share.io/` the names alone compared; else the
whole key. Every warning gives the advice first and echoes at most `ECHO` characters of the
object (a warning is cut at 120). What a review spends is bounded by a `Budget`, whatever
the object holds: a pass over its names, at most `LOOKS` fuzzy matches and `LINES` warnings.

`unchanged` says in one line why a review left a pod as it was (`mutate`, `audit`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from webhook.engine import view
from webhook.policy import names
from webhook.policy.policies import Policy

# `names` the loops below read, as Final constants the compiled core reads directly.
_ANNOTATION_POLICY: Final = names.ANNOTATION_POLICY

# The annotations the webhook reads or writes on a pod.
KNOWN_ANNOTATIONS = (names.ANNOTATION_PROFILE, names.ANNOTATION_POLICY, names.ANNOTATION_MUTATIONS)
_KNOWN_SET: Final = frozenset(KNOWN_ANNOTATIONS)
DOMAIN_PREFIX = names.DOMAIN + "/"
# What `meant` says of a key under gpu-share.io/ that is close to none it is given.
UNKNOWN = "(unknown)"
# The exclusive GPU resource of the device plugin, and its MIG devices: `mig-<g>g.<m>gb`,
# with a suffix for the profiles with media extensions or graphics (`+me`, `+gfx`) and a
# compute-instance part on some (`mig-1c.2g.10gb`).
GPU: Final = "nvidia.com/gpu"
_MIG = re.compile(r"nvidia\.com/mig-(\d+c\.)?\d+g\.\d+gb([.+-][a-z]+)*")
_MIG_PREFIX = "nvidia.com/mig-"
_MIG_EXAMPLE = "nvidia.com/mig-1g.5gb"
# Names that are none of this, met in most pods: passed over without a search.
_PLAIN_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage"})
_PLAIN_LABELS: Final = frozenset(
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
_SUSPECT_RESOURCE: Final = re.compile("gpu|nvidia", re.IGNORECASE)
SUSPECT_KEY: Final = re.compile("share|profile|gpu", re.IGNORECASE)
# The same words for an ASCII name (most), found without the expressions: a search that
# ignores case costs several times a lower-cased copy and three substring tests.
_RESOURCE_WORDS: Final = ("gpu", "nvidia")
_KEY_WORDS: Final = ("share", "profile", "gpu")


def _suspect(name: str, words: tuple[str, ...], pattern: re.Pattern[str]) -> bool:
    """Whether `name` holds one of `words` in any case (`pattern` is their search; a name
    that is not ASCII is searched with it, which also matches letters such as U+017F)."""
    if name.isascii():
        lower = name.lower()
        return any(word in lower for word in words)
    return pattern.search(name) is not None
# How close a key must be to a known one to be taken for a typo of it (difflib's ratio): the
# whole key, and the name alone under our domain.
_CLOSE = 0.8
_CLOSE_NAME = 0.75
# What a review spends at most: fuzzy matches, and warnings (then one saying there are
# more; kubectl prints each on a line of its own).
LOOKS = 64
LINES = 6
MORE = "more names look like gpu-share's but are not; the first are above"
# How much of a name of the object a warning echoes.
ECHO = 48


class Budget:
    """What one review may spend on near misses, whatever the object holds (see the module).
    A pod with 50,000 annotation keys like `gpu-share.io/p1` costs a pass over them and
    `LOOKS` matches, not 50,000 (which took a minute)."""

    __slots__ = ("lines", "looks", "more")

    def __init__(self) -> None:
        self.looks: int = LOOKS
        self.lines: int = LINES
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


def echo(name: str) -> str:
    """`name` as a warning echoes it: at most `ECHO` characters."""
    return name if len(name) <= ECHO else name[: ECHO - 3] + "..."


def close(word: str, candidates: Sequence[str], cutoff: float, budget: Budget) -> str | None:
    """The candidate `word` is closest to (difflib's ratio at least `cutoff`), within the
    budget. A word much longer than every candidate cannot be that close (the ratio is at
    most twice the shorter length over the sum): no match is made for it."""
    if budget.looks <= 0:
        return None
    # Counted even when the length settles it: thousands of long keys that echo alike (so
    # that no warning is added for them) must still spend the budget.
    budget.looks -= 1
    longest = max(len(c) for c in candidates)
    if len(word) * cutoff > (2 - cutoff) * longest:
        return None
    found = difflib.get_close_matches(word, candidates, n=1, cutoff=cutoff)
    return found[0] if found else None


def meant(key: str, known: Sequence[str], budget: Budget) -> str | None:
    """The one of `known` (keys under `gpu-share.io/`) that `key`, none of them, is a
    misspelling of; `UNKNOWN` for another key under `gpu-share.io/` (told with no guess:
    `gpu-share.io/team` is no misspelling of anything); None when it looks like none."""
    lower = key.lower()
    if lower in known:
        return lower
    if lower.startswith(DOMAIN_PREFIX):
        # The names alone: the shared prefix would make any key of ours look like another.
        found = close(
            lower.removeprefix(DOMAIN_PREFIX),
            [k.removeprefix(DOMAIN_PREFIX) for k in known],
            _CLOSE_NAME,
            budget,
        )
        return DOMAIN_PREFIX + found if found is not None else UNKNOWN
    return close(lower, known, _CLOSE, budget)


def resource_warnings(pod: view.Pod, policy: Policy, budget: Budget) -> list[str]:
    """Warnings for resource names that look like an NVIDIA GPU resource but are none."""
    out: list[str] = []
    shared = policy.shared_resources
    for c in pod.containers:
        if not c.judged:
            continue
        for part in (c.limits, c.requests):
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
                    or not _suspect(name, _RESOURCE_WORDS, _SUSPECT_RESOURCE)
                ):
                    continue
                if budget.spent:
                    return out
                said = _meant_resource(name, policy, budget)
                if said is not None:
                    budget.put(out, f'{said} (container "{echo(c.name)}")')
    return out


def _known_resource(name: str, policy: Policy) -> bool:
    """A name the device plugin advertises by default, or the policy shares; or an unknown
    `.shared` one, which rule resource-not-allowed refuses (so it is told there)."""
    return _advertised(name, policy) or (
        name.startswith(names.GPU_RESOURCE_PREFIXES) and name.endswith(names.SHARED_SUFFIX)
    )


def _advertised(name: str, policy: Policy) -> bool:
    return name == GPU or name in policy.shared_resources or _MIG.fullmatch(name) is not None


def _meant_resource(name: str, policy: Policy, budget: Budget) -> str | None:
    """None when `name` is no near miss; else its warning, the advice first. Whether some
    node offers the name is not known here: a device plugin can be configured to advertise
    other names, and such a pod is admitted unchanged."""
    if _known_resource(name, policy):
        return None
    lower = name.lower()
    shown = echo(name)
    if lower != name and _advertised(lower, policy):
        return f"did you mean {lower}? Resource names are case-sensitive: {shown}"
    candidates = sorted({GPU, *policy.shared_resources})
    if not lower.startswith(names.GPU_RESOURCE_PREFIXES):
        found = close(lower, candidates, _CLOSE, budget)
        if found is None:
            return None
        return f"did you mean {found}? {shown} is no NVIDIA GPU resource"
    if lower.startswith(_MIG_PREFIX):
        return f"MIG devices are named like {_MIG_EXAMPLE}: {shown} is not"
    found = close(lower, candidates, 0.6, budget)
    if found is not None:
        return f"did you mean {found}? {shown} is no NVIDIA GPU resource"
    return f"the shared GPU here is {policy.preferred_resource}. {shown} is no NVIDIA GPU resource"


def annotation_warnings(pod: view.Pod, policy: Policy, budget: Budget) -> list[str]:
    """Warnings for annotation keys that look like one the webhook reads but are not, a
    namespace label written on a pod, and a policy annotation the webhook will overwrite
    (the namespace's label picks the policy)."""
    out: list[str] = []
    for key, value in view.annotations_of(pod).items():
        if key in _KNOWN_SET or not _suspect(key, _KEY_WORDS, SUSPECT_KEY):
            if key == _ANNOTATION_POLICY and isinstance(value, str) and value != policy.name:
                budget.put(
                    out,
                    f'the namespace\'s label picks the policy (here "{policy.name}").'
                    f" Annotation {key}={echo(value)} is ignored",
                )
            continue
        if budget.spent:
            return out
        _tell(out, key, pod, policy, budget, label=False)
    return out


def label_warnings(pod: view.Pod, policy: Policy, budget: Budget) -> list[str]:
    """Warnings for the pod's labels that are one of the webhook's annotations, or a
    namespace label, set in the wrong place."""
    labels = pod.meta.labels if pod.meta is not None else None
    if type(labels) is not dict:
        return []
    out: list[str] = []
    for key in labels:
        if (
            type(key) is not str
            or key in _PLAIN_LABELS
            or not _suspect(key, _KEY_WORDS, SUSPECT_KEY)
        ):
            continue
        if budget.spent:
            return out
        _tell(out, key, pod, policy, budget, label=True)
    return out


def _tell(
    out: list[str], key: str, pod: view.Pod, policy: Policy, budget: Budget, *, label: bool
) -> None:
    """The warning for `key`, a pod's annotation (or `label`), if it is a near miss."""
    what = "label" if label else "annotation"
    shown = echo(key)
    if key.lower() == names.ENABLED_LABEL:
        budget.put(out, f"label the namespace: {what} {shown} on a pod is ignored")
        return
    found = key if key == names.ANNOTATION_PROFILE else meant(key, KNOWN_ANNOTATIONS, budget)
    if found == names.ANNOTATION_PROFILE:
        advice = "set it as an annotation." if label else f"did you mean {found}?"
        effect = _profile_effect(pod, policy)
        budget.put(out, f"{advice} {what.capitalize()} {shown} is ignored{effect}")
    elif found == _ANNOTATION_POLICY:
        budget.put(
            out,
            f"the namespace's label {names.POLICY_LABEL} picks the policy. {what.capitalize()}"
            f" {shown} is ignored",
        )
    elif found == UNKNOWN and not label:
        budget.put(
            out, f"the annotation a pod sets is {names.ANNOTATION_PROFILE}. {shown} is ignored"
        )


def _profile_effect(pod: view.Pod, policy: Policy) -> str:
    """What profile the pod gets instead, where one applies: a pod that asks for a shared
    GPU of the policy and names none."""
    if view.annotation(pod, names.ANNOTATION_PROFILE) is not None or not policy.default_profile:
        return ""
    shared = policy.shared_resources
    for c in pod.containers:
        for part in (c.limits, c.requests):
            if type(part) is dict and any(name in shared for name in part):
                return f' (default profile "{policy.default_profile}" applies)'
    return ""


def workload_warnings(
    obj: Mapping[str, Any], found: list[view.Found], budget: Budget
) -> list[str]:
    """`gpu-share.io/profile` (or a near miss of it) in a workload's own metadata, or in the
    metadata of a level between it and a pod template (a CronJob's `jobTemplate`): its pods
    never see it, they get their template's annotations. Each level is read once."""
    kind = obj.get("kind")
    if kind == "Pod" or not found:
        return []
    out: list[str] = []
    seen: set[str] = set()
    for t in found:
        meta = t.template.metadata
        if meta is not None and (meta.annotations or {}).get(names.ANNOTATION_PROFILE) is not None:
            continue
        for where, node in _levels(obj, t.place.field):
            if where in seen:
                continue
            seen.add(where)
            # (Another name than `meta` above: the compiled core types a name once.)
            level = node.get("metadata")
            own = level.get("annotations") if type(level) is dict else None
            if type(own) is not dict:
                continue
            for key in own:
                if type(key) is not str or SUSPECT_KEY.search(key) is None:
                    continue
                if budget.spent:
                    return out
                if key == names.ANNOTATION_PROFILE:
                    what = "move it"
                elif meant(key, KNOWN_ANNOTATIONS, budget) == names.ANNOTATION_PROFILE:
                    what = f"set {names.ANNOTATION_PROFILE}"
                else:
                    continue
                place = f"the {kind}'s metadata" if not where else f"{where}.metadata"
                budget.put(
                    out,
                    f"{what} to the pod template's annotations. {echo(key)} in {place} is ignored",
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


def unchanged(pod: view.Pod, policy: Policy) -> str:
    """Why a review that refused nothing left `pod` as it was, in a few words (`mutate`
    and `audit` say it; the server never does)."""
    wanted: list[str] = []
    for c in pod.containers:
        for part in (c.limits, c.requests):
            for name in part if type(part) is dict else ():
                if (
                    type(name) is str
                    and name not in wanted
                    and (
                        name.startswith(names.GPU_RESOURCE_PREFIXES)
                        or _SUSPECT_RESOURCE.search(name) is not None
                    )
                ):
                    wanted.append(name)
    shared = sorted(policy.shared_resources)
    shares = f"it shares {', '.join(shared)}" if shared else "it shares no GPU"
    if policy.mode == names.DRY_RUN:
        return f'policy "{policy.name}" is in dry-run mode: it changes nothing'
    if any(name in policy.shared_resources for name in wanted):
        return "it is already as the webhook leaves it"
    budget = Budget()
    missed = [name for name in wanted if _meant_resource(name, policy, budget) is not None]
    if missed:
        return (
            f"it asks for {', '.join(missed)}, which looks like a misspelt GPU resource (see"
            " the warning)"
        )
    exclusive = [name for name in wanted if name.startswith(names.GPU_RESOURCE_PREFIXES)]
    if exclusive:
        return (
            f"it asks for {', '.join(exclusive)}, no shared GPU of policy"
            f' "{policy.name}" ({shares}): an exclusive GPU, which the webhook leaves as it is'
        )
    if policy.rules.void_visible_devices_without_gpu:
        return "it asks for no GPU, and its containers already hide the GPUs"
    return f'it asks for no GPU, and policy "{policy.name}" changes only pods that do ({shares})'
