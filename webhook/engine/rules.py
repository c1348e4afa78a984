"""The rules: one small named unit each, in one table (`RULES`).

A rule is its check and patch and one `Rule(...)` row, which holds everything said about it:
what it looks at (its scope, and the switch that turns it off), what reports class it as
(`Concern`), the line the docs' rule tables show (hack/rule-docs.py writes them), what it
refuses or warns of (its `check`) and the patch operations it contributes (its `patch`). Its
name is what the refusal, the metric label, the audit annotation, the `gpu-share.io/mutations`
record and the docs all use.

Both read the pod's view (`view.Pod`) and what was worked out of it before any rule runs
(`facts.Facts`: GPU usage, the shared resource, the profile, the placement); a check only
reports (`Pass.deny`, `Pass.warn`, `Pass.note`), a patch only adds (`Pass.add`,
`Pass.add_env`), and neither can change what another reads. `Pass` puts what they report
and add in the order of `names.RULES`, whatever the order they ran in, so the order of the
table changes no answer (a test runs it shuffled).

`reviewing.run_rules` runs every check over every container (init, sidecar, ephemeral) and
reports every violation in one denial; only an object with none is patched. A patch only
adds what a check would accept, so the patched object passes them too (validation on the
defaulted object, as controller-runtime does it).

Adding a rule: CONTRIBUTING.md.
"""

from __future__ import annotations

import bisect
import enum
import operator
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

from webhook.engine import claims, facts, placing, selection, view
from webhook.engine.decision import (
    FIELD,
    MALFORMED,
    OBJECT,
    Addition,
    ErrorType,
    Marker,
    Place,
    Violation,
    added_value,
    short_warning,
    shown,
)
from webhook.engine.placing import Finding
from webhook.policy import hostpaths, names, policies
from webhook.policy.policies import Policy, RulesSpec

# `names` the loops below read, as Final constants the compiled core reads directly.
_ENFORCE: Final = names.ENFORCE
_DEVICE_VARIABLES: Final = names.DEVICE_VARIABLES
_HIDING_VALUES: Final = names.HIDING_VALUES
_DRIVER_CAPABILITIES: Final = names.DRIVER_CAPABILITIES
_MPS_DIRECTORIES: Final = names.MPS_DIRECTORIES
_CDI_ANNOTATION_PREFIXES: Final = names.CDI_ANNOTATION_PREFIXES
_VISIBLE_DEVICES: Final = names.VISIBLE_DEVICES
_HIDE: Final = names.HIDE


class Scope(enum.Enum):
    """Which pods a rule looks at (the value: as the docs' rule tables say it)."""

    # Every pod that reaches the webhook in an opted-in namespace.
    EVERY_POD = "every pod"
    # Pods with a container that asks for a GPU (shared or not).
    GPU_POD = "GPU pods"
    # Pods with a container that asks for one of the policy's shared resources.
    SHARED_POD = "shared-GPU pods"
    # ResourceClaims and ResourceClaimTemplates (`claims`), under a policy with a `dra`
    # section: no pod table holds these rules.
    CLAIM = "claims"


class Concern(enum.Enum):
    """What a rule guards, which gives the severity and category of the audit's results of it."""

    # Keeps a container from more GPU than its policy grants, or from the node's GPUs and
    # their sharing machinery.
    ISOLATION = ("high", "GPU isolation")
    # Decides whether a pod runs where and as it should (a pod that would fail on its node,
    # or land on the wrong one).
    SCHEDULING = ("medium", "GPU scheduling")

    @property
    def severity(self) -> str:
        return self.value[0]

    @property
    def category(self) -> str:
        return self.value[1]


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    scope: Scope
    concern: Concern
    # What it refuses or adds, in one line of Markdown: what the docs' rule tables show.
    summary: str
    check: Callable[[Pass[Any]], None] | None = None
    patch: Callable[[Pass[Any]], None] | None = None
    # What it refuses or warns of is found by `facts.gather` (its Findings), and reported as
    # found: it has no check of its own.
    found: bool = False
    # The field of a policy's `spec.rules` that turns the rule off (None: always on).
    switch: str | None = None
    # A field of `spec.rules` that changes what the rule does without turning it off.
    changed_by: str | None = None
    # Looks at the pod as a whole (placement, volumes, host namespaces): not run again when
    # an update only adds ephemeral containers.
    pod_level: bool = False
    # Does not depend on the policy: also applied where the namespace's policy is not in
    # force (an unknown name, a file that does not load).
    always: bool = False
    # Its patch must be in place when a Pod reaches the validating webhook: a pod without
    # it could reach more GPU than the policy grants.
    required: bool = False
    # Left to Pod Security where the namespace enforces baseline or restricted (its webhook
    # path says so: `Policy.pod_security`).
    pod_security: bool = False
    # Also refuses ResourceClaims and claim templates (`claims`), beside the pods of its
    # scope.
    claims: bool = False

    @property
    def severity(self) -> str:
        return self.concern.severity

    @property
    def category(self) -> str:
        return self.concern.category


# The Python attribute of each switch (`denyPrivileged` -> `deny_privileged`).
_SWITCH_ATTRIBUTES: Final = {f.alias: name for name, f in RulesSpec.model_fields.items() if f.alias}
# Where each rule's reports and additions stand in a decision: the order of `names.RULES`
# (the record of what the webhook did, `annotations`, comes last).
RANK: Final = {name: i for i, name in enumerate(names.RULES)}
ANNOTATIONS: Final = "annotations"
_LAST: Final = len(RANK)


_Ranked = TypeVar("_Ranked", bound=tuple[Any, ...])


class EnvAddition:
    """Variables a patch adds to a container's env (made into operations at the end, when it
    is known which addition to a container without an env list comes first, and so adds
    the list). A native class of the compiled core, as `view.Slot`."""

    __slots__ = ("has_list", "pointer", "variables")

    def __init__(self, pointer: str, has_list: bool, variables: list[dict[str, str]]) -> None:
        self.pointer: Final = pointer  # the container's env: "/spec/containers/0/env"
        self.has_list: Final = has_list  # whether the container has an env list
        self.variables: Final = variables


class Known(Protocol):
    """What a pass reads of the object before any rule runs: a pod's `facts.Facts`, a
    claim's `claims.ClaimFacts`."""

    @property
    def findings(self) -> tuple[Finding, ...]: ...

    @property
    def place(self) -> Place: ...


F = TypeVar("F", bound=Known)


class Pass(Generic[F]):
    """One pass of the rules over one object (a pod, a claim): what the checks report and
    the patches add.

    Everything is kept in the order of its rule's rank (`_put`), and handed out in that
    order (`violations`, `warnings`, `audit`, `operations`), so that the order the rules ran
    in does not show.
    """

    __slots__ = (
        "_additions",
        "_audit",
        "_violations",
        "_warnings",
        "_would_refuse",
        "facts",
        "in_words",
        "place",
        "policy",
        "require",
    )

    def __init__(
        self, known: F, policy: Policy, *, require: bool, in_words: bool = False
    ) -> None:
        # What the rules read (Final: no rule may change it for another; see `facts`).
        self.facts: Final = known
        self.place: Final = known.place
        self.policy: Final = policy
        # Validating: the parts of the patch that guard the policy must be in place already
        # (`add_env` refuses where they are not).
        self.require: Final = require
        # Whether the patches say what they add (`additions`): the offline commands ask;
        # the server sends the patch alone, and its reviews skip the words.
        self.in_words: Final = in_words
        self._violations: list[tuple[int, Violation]] = []
        # Violations of rules the policy does not enforce: (mode, violation).
        self._would_refuse: list[tuple[str, Violation]] = []
        self._warnings: list[tuple[int, str]] = []
        self._audit: list[tuple[int, Mapping[str, str]]] = []
        # What patches add: each an operation, or variables for a container's env; with
        # its words (`Addition`).
        self._additions: list[
            tuple[int, str, dict[str, Any] | EnvAddition | None, str, str]
        ] = []

    # -- what checks report

    def deny(
        self,
        rule: str,
        type: ErrorType,
        field: str,
        *words: str | Marker,
        container: str | None = None,
    ) -> None:
        """Refuse the pod by `rule`: `field` (relative to the pod) is at fault, `words` say
        what and the fix (`FIELD` where the field's path is shown)."""
        self.refuse(Violation(rule, type, field, words, container, self.place))

    def refuse(self, violation: Violation) -> None:
        _put(self._violations, (RANK[violation.rule], violation))

    def report(self, rules: frozenset[str]) -> None:
        """Report what `facts.gather` found for `rules` (those whose violations and warnings
        it finds, `Rule.found`)."""
        for found in self.facts.findings:
            if found.rule not in rules:
                continue
            if found.violation is not None:
                self.refuse(found.violation)
            if found.warning is not None:
                self.warn(found.rule, found.warning)

    def warn(self, rule: str, text: str) -> None:
        text = short_warning(text)
        _put(self._warnings, (RANK.get(rule, _LAST), text))

    def note(self, rule: str, annotations: Mapping[str, str]) -> None:
        """Audit annotations."""
        _put(self._audit, (RANK.get(rule, _LAST), annotations))

    @property
    def refused(self) -> bool:
        """Whether a rule the policy enforces refuses the pod (so far)."""
        return bool(self._violations)

    @property
    def would_refuse(self) -> list[tuple[str, Violation]]:
        """The violations of rules the policy does not enforce, each with its mode."""
        return list(self._would_refuse)

    @property
    def violations(self) -> list[Violation]:
        return [v for _, v in self._violations]

    @property
    def warnings(self) -> list[str]:
        out: list[str] = []
        for _, text in self._warnings:
            if text not in out:
                out.append(text)
        return out

    @property
    def audit(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for _, noted in self._audit:
            out.update(noted)
        return out

    def relax(self) -> None:
        """Move the violations of rules the policy does not enforce to `would_refuse`, in
        the order of the rules."""
        policy = self.policy
        if not self._violations or (policy.mode == _ENFORCE and not policy.rule_modes):
            return
        kept = []
        for rank, v in self._violations:
            mode = policy.mode_of(v.rule)
            if mode == _ENFORCE:
                kept.append((rank, v))
            else:
                self._would_refuse.append((mode, v))
        self._violations = kept

    # -- what patches add

    def add(self, rule: str, op: dict[str, Any], topic: str = "", text: str = "") -> None:
        """Add `op` to the patch; `topic` and `text` say what it adds, and where, in the
        rule's words (`Addition`; made where `in_words`)."""
        _put(self._additions, (RANK[rule], rule, op, topic, text))

    def add_env(self, rule: str, c: view.Slot, new: list[dict[str, str]], what: str) -> None:
        """Add variables to a container's env (appending where the list exists). Validating a
        Pod, they must be there already: each missing one is a violation of `rule`."""
        if self.require:
            shown = ", ".join(f"{v['name']}={v['value']}" for v in new)
            self.deny(
                rule,
                ErrorType.REQUIRED,
                f"{c.field}.env",
                f'container "{c.name}": missing {shown} ({what}), which the mutating webhook'
                " adds: it did not run, or a later change took it away. Create the pod again,"
                " or set it as shown",
                container=c.name,
            )
            return
        pointer = f"{self.place.pointer}/spec/{c.group}/{c.position}/env"
        # Where the container has no env list, which addition comes first, and so adds the
        # list, is known at the end.
        has_list = c.c.env is not None
        topic = text = ""
        if self.in_words:
            topic = f'env of {_CONTAINER_WORDS.get(c.group, c.group)} "{c.name}"'
            text = ", ".join(f"{v['name']}={v['value']}" for v in new)
        _put(
            self._additions,
            (RANK[rule], rule, EnvAddition(pointer, has_list, new), topic, text),
        )

    def operations(self) -> list[tuple[str, dict[str, Any]]]:
        """The patch operations added, in the order of the rules, each with its rule. The
        first addition to a container without an env list adds the list; the others append."""
        ops: list[tuple[str, dict[str, Any]]] = []
        made: set[str] = set()
        for _, rule, added, _, _ in self._additions:
            if added is None:
                continue
            if not isinstance(added, EnvAddition):
                ops.append((rule, added))
            elif added.has_list or added.pointer in made:
                for v in added.variables:
                    ops.append((rule, {"op": "add", "path": f"{added.pointer}/-", "value": v}))
            else:
                made.add(added.pointer)
                ops.append((rule, {"op": "add", "path": added.pointer, "value": added.variables}))
        return ops


    def say(self, rule: str, topic: str, text: str) -> None:
        """Words of an addition made by an operation `add` was given already (one operation
        that adds a list of things said one by one)."""
        _put(self._additions, (RANK[rule], rule, None, topic, text))

    def additions(self) -> list[Addition]:
        """What the patch adds, in the rules' words, in the order of the rules."""
        return [Addition(rule, topic, text) for _, rule, _, topic, text in self._additions]


# The pass of the pod rules' checks and patches.
PodPass = Pass[facts.Facts]

_CONTAINER_WORDS: Final = {
    "containers": "container",
    "initContainers": "init container",
    "ephemeralContainers": "ephemeral container",
}
_RANK_OF: Final = operator.itemgetter(0)


def _put(items: list[_Ranked], entry: _Ranked) -> None:
    """Add `entry` (led by its rule's rank) to `items`, which are in the order of the rules
    (after the entries of the same rule): at the end when the rules run in that order, as
    they do but in the tests that shuffle the table."""
    if items and entry[0] < items[-1][0]:
        bisect.insort_right(items, entry, key=_RANK_OF)
    else:
        items.append(entry)


# --------------------------------------------------------------------------- shape, resources


def malformed(problem: view.Problem, place: Place) -> Violation:
    """The violation for a shape problem (`pods` finds them)."""
    return Violation(
        MALFORMED,
        ErrorType.TYPE_INVALID,
        problem.field,
        (
            FIELD,
            f": must be {problem.expected}, not {problem.found}: no Kubernetes object has this"
            " shape. Fix the field (the API server would refuse it too)",
        ),
        None,
        place,
    )


_TERMS_PATH: Final = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
_FEWER_TERMS: Final = "Write the selection in fewer terms"


def too_large(found: list[view.Found], length: int | None = None) -> Violation | None:
    """The refusal of an object (of at most `length` bytes of JSON, if known) that holds more
    than `view.MAX_ITEMS` pod specs, containers or required node selector terms, or more
    than `view.MAX_ENTRIES` entries: judged before any rule reads it."""
    most = view.MAX_ITEMS
    size = view.size(found, length)
    one = len(found) == 1
    for count, what, field, fix in (
        (size.pod_specs, "pod templates", "", "Split the object"),
        (
            size.containers,
            "containers (init, regular and ephemeral together)",
            "spec.containers",
            "Spread the containers over several pods",
        ),
        (
            size.terms,
            "required node selector terms",
            f"{_TERMS_PATH}.nodeSelectorTerms",
            _FEWER_TERMS,
        ),
    ):
        if count <= most:
            continue
        if not field:
            return _too_many("", f"more than {most:,} {what}", fix, OBJECT)
        if one:
            return _too_many(field, f"{count:,} {what}", fix, found[0].place)
        return _too_many(
            "", f"{count:,} {what} in its {size.pod_specs:,} pod templates", fix, OBJECT
        )
    if size.entries > view.MAX_ENTRIES:
        return _too_many(
            "",
            f"{size.entries:,} entries in the lists and maps the webhook reads (containers"
            " and their env, mounts, resources and capabilities, volumes, claims,"
            " tolerations, node selection, annotations, labels)",
            "Make the object smaller",
            OBJECT,
            view.MAX_ENTRIES,
        )
    return None


def _too_many(
    field: str, held: str, fix: str, place: Place, most: int = view.MAX_ITEMS
) -> Violation:
    return Violation(
        TOO_LARGE.name,
        ErrorType.TOO_MANY,
        field,
        (
            FIELD,
            f": {held}; gpu-share-webhook reviews at most {most:,} in one object, a bound on"
            f" the time and memory of a review that no workload comes near. {fix}",
        ),
        None,
        place,
    )


def too_large_to_read(values: int) -> Violation:
    """The refusal of an object read without its typed view that holds more than
    `view.MAX_GENERIC_VALUES` JSON values."""
    return _too_many(
        "",
        f"{values:,} JSON values (objects, lists, their members and items) in an object read"
        " without the webhook's typed view (a kind of another project, a claim, or an object"
        " with a field of another type than Kubernetes gives it)",
        "Fix the field, or make the object smaller",
        OBJECT,
        view.MAX_GENERIC_VALUES,
    )


def check_malformed(r: PodPass) -> None:
    for problem in r.facts.pod.problems:
        r.refuse(malformed(problem, r.facts.pod.place))


def check_exclusive_with_shared(r: PodPass) -> None:
    exclusive = [(c, u) for c, u in r.facts.containers if u.exclusive]
    if not exclusive:
        return
    users = [(c, u) for c, u in r.facts.containers if u.shared]
    ex = ", ".join(f'"{c.name}" asks for {", ".join(u.exclusive)}' for c, u in exclusive)
    sh = ", ".join(f'"{c.name}" for {", ".join(u.shared_names)}' for c, u in users)
    r.deny(
        "exclusive-with-shared",
        ErrorType.FORBIDDEN,
        "spec.containers",
        f"exclusive and shared GPUs in one pod: container {ex}, container {sh}; one pod lands"
        f" on one kind of node. Ask for {', '.join(r.facts.requested)} only, or run the"
        " exclusive GPU in a pod of its own",
    )


def held_at_once(pairs: tuple[tuple[view.Slot, facts.Usage], ...]) -> int:
    """The exclusive GPUs a pod holds at most at one time, as the scheduler counts a pod's
    requests: init containers run one by one before the others (with the sidecars started
    before them) and give their devices back; sidecars keep theirs beside the containers."""
    sidecars = init_peak = regular = 0
    for c, used in pairs:
        if c.group == "containers":
            regular += used.exclusive_count
        elif c.group == "initContainers":
            if c.c.restartPolicy == "Always":
                sidecars += used.exclusive_count
                init_peak = max(init_peak, sidecars)
            else:
                init_peak = max(init_peak, used.exclusive_count + sidecars)
    return max(regular + sidecars, init_peak)


def check_exclusive_gpus(r: PodPass) -> None:
    """Whole GPUs (not a shared replica): allowed by the policy or not, and how many."""
    users = [(c, u) for c, u in r.facts.containers if u.exclusive]
    if not users:
        return
    policy = r.policy
    limits = policy.exclusive_gpus
    if not limits.allowed:
        ask = (
            f"Ask for {policy.preferred_resource}: 1 instead"
            if policy.shared_resources
            else "Ask the cluster admin for a policy that gives them"
        )
        for c, used in users:
            r.deny(
                "exclusive-gpus",
                ErrorType.FORBIDDEN,
                f"{c.field}.resources",
                f'container "{c.name}": exclusive GPU: it asks for {", ".join(used.exclusive)}'
                f' (whole GPUs), and policy "{policy.name}" gives its namespaces no whole'
                f" GPUs. {ask}",
                container=c.name,
            )
        return
    most = limits.max_per_pod
    if most is None:
        return
    held = held_at_once(r.facts.containers)
    if held > most:
        each = ", ".join(f'"{c.name}" {u.exclusive_count}' for c, u in users)
        r.deny(
            "exclusive-gpus",
            ErrorType.FORBIDDEN,
            "spec.containers",
            f"too many exclusive GPUs: the pod holds {held} whole GPUs at once ({each}), and"
            f' policy "{policy.name}" allows at most {most} per pod. Ask for {most} or fewer',
        )


def check_several_shared_resources(r: PodPass) -> None:
    if len(r.facts.requested) > 1:
        r.deny(
            "several-shared-resources",
            ErrorType.FORBIDDEN,
            "spec.containers",
            f"several shared resources: the pod asks for {', '.join(r.facts.requested)}, and a"
            " node class serves one. Ask for one of them in every container",
        )


def check_runtime_class(r: PodPass) -> None:
    wanted = r.policy.runtime_class_name
    runtime_class = r.facts.pod.spec.runtimeClassName if r.facts.pod.spec is not None else None
    if runtime_class not in (None, "", wanted):
        r.deny(
            "runtime-class",
            ErrorType.NOT_SUPPORTED,
            "spec.runtimeClassName",
            f'runtime class: runtimeClassName "{runtime_class}" is not the one policy'
            f' "{r.policy.name}" uses for shared GPUs ("{wanted}"). Remove runtimeClassName'
            f' (the webhook sets it) or set it to "{wanted}"',
        )


def patch_runtime_class(r: PodPass) -> None:
    pod = r.facts.pod
    if r.facts.classes and not (pod.spec is not None and pod.spec.runtimeClassName):
        name = r.policy.runtime_class_name
        r.add(
            "runtime-class",
            {"op": "add", "path": f"{pod.place.pointer}/spec/runtimeClassName", "value": name},
            "runtimeClassName",
            added_value(name),
        )


# --------------------------------------------------------------------------- environment


def _reference(value: str) -> bool:
    """Whether the kubelet would expand a `$(VAR)` reference in `value`: what it ends up as
    cannot be known at admission."""
    return "$(" in value


def check_device_variables(r: PodPass) -> None:
    """Route 1: a value for NVIDIA_VISIBLE_DEVICES (and the toolkit's other device variables)
    that does not only hide devices, on any container."""
    for c, used in r.facts.judged:
        for position, name in enumerate(c.env_names):
            if name not in _DEVICE_VARIABLES:
                continue
            var = c.env[position]
            value = view.env_value(var)
            if value is None:
                what, after = f"{var.name} from valueFrom (", ") cannot be read at admission"
            elif _reference(value):
                what = f"{var.name}={shown(value)} ("
                after = ") refers to another variable, which cannot be read at admission"
            elif value in _HIDING_VALUES:
                continue
            elif value == "none":
                what = f"{var.name}={shown(value)} ("
                after = (
                    ") does not hide everything: the NVIDIA runtime still gives the container"
                    " the driver and the GPU control device nodes (only void hides them)"
                )
            else:
                what, after = f"{var.name}={shown(value)} (", ") is not one that hides GPUs"
            if used.gpu:
                whose = (
                    "the device plugin sets it for a container that asks for a GPU, and a"
                    " value of the pod's can widen what the NVIDIA runtime gives it"
                )
                fix = "Remove it"
            elif c.uses_claims:
                whose = (
                    "a container's resource claims give it its devices, and a value of the"
                    " pod's can add GPUs outside them"
                )
                fix = "Remove it"
            else:
                whose = (
                    "on a container that asks for no GPU it exposes GPUs outside the device"
                    " plugin's allocation"
                )
                fix = (
                    "Remove it (or set it to void), or ask for"
                    f" {r.policy.preferred_resource}: 1 if the container needs a GPU"
                )
            r.deny(
                "device-variables",
                ErrorType.FORBIDDEN,
                f"{c.field}.env[{position}]",
                f'container "{c.name}": device variable: {what}',
                FIELD,
                f"{after}; {whose}. {fix}",
                container=c.name,
            )


def capabilities_of(value: str) -> frozenset[str]:
    """The driver capabilities a value of NVIDIA_DRIVER_CAPABILITIES gives, as the toolkit
    reads it: comma-separated, `all` every one, nothing (or only commas) compute and
    utility. Names the toolkit does not know stay in, to be refused."""
    found = {part.strip() for part in value.split(",")} - {""}
    if not found:
        return frozenset(names.DRIVER_CAPABILITIES_UNSET)
    if names.ALL_CAPABILITIES in found:
        found = (found - {names.ALL_CAPABILITIES}) | set(_KNOWN_CAPABILITIES)
    return frozenset(found)


_KNOWN_CAPABILITIES = typing.get_args(policies.DriverCapability)
# A value of NVIDIA_DRIVER_CAPABILITIES longer than this is refused unsplit: every capability
# the toolkit knows, each written many times over, fits in it.
_CAPABILITIES_VALUE: Final = 1024


def check_driver_capabilities(r: PodPass) -> None:
    """A GPU container's NVIDIA_DRIVER_CAPABILITIES within the policy's list: `graphics` and
    `display` mount device nodes of their own, beyond what the device plugin gave. A
    container that uses a resource claim counts as one (its claim may hold GPUs)."""
    allowed = r.policy.driver_capabilities
    if allowed is None:
        return
    listed = ",".join(allowed)
    for c, used in r.facts.judged:
        if not (used.gpu or c.uses_claims):
            continue
        for position, name in enumerate(c.env_names):
            if name != _DRIVER_CAPABILITIES:
                continue
            var = c.env[position]
            value = view.env_value(var)
            if value is None:
                problem = "comes from valueFrom, which cannot be read at admission"
            elif _reference(value):
                problem = "refers to another variable, which cannot be read at admission"
            elif len(value) > _CAPABILITIES_VALUE:
                problem = f"{shown(value)} is longer than any list of what the toolkit knows"
            else:
                beyond = sorted(capabilities_of(value) - set(allowed))
                if not beyond:
                    continue
                more = f" and {len(beyond) - 8:,} more" if len(beyond) > 8 else ""
                problem = f"{shown(value)} gives {', '.join(map(added_value, beyond[:8]))}{more}"
            r.deny(
                "driver-capabilities",
                ErrorType.FORBIDDEN,
                f"{c.field}.env[{position}]",
                f'container "{c.name}": driver capabilities: {var.name} (',
                FIELD,
                f') {problem}; policy "{r.policy.name}" allows {listed}. Set it to a part of'
                " that list, or remove it (the webhook sets the policy's)",
                container=c.name,
            )


def patch_driver_capabilities(r: PodPass) -> None:
    """The policy's capabilities on every GPU container that sets none: the image's own
    value would hold there, which admission cannot see."""
    allowed = r.policy.driver_capabilities
    if allowed is None:
        return
    value = ",".join(allowed)
    for c, used in r.facts.judged:
        if (used.gpu or c.uses_claims) and (c.variable(_DRIVER_CAPABILITIES) is None):
            r.add_env(
                "driver-capabilities",
                c,
                [{"name": _DRIVER_CAPABILITIES, "value": value}],
                f'the driver capabilities policy "{r.policy.name}" allows',
            )


def check_env_from(r: PodPass) -> None:
    """Route 1: envFrom on a container that uses a GPU can set the device and MPS variables
    from a ConfigMap or Secret, which admission cannot read."""
    offenders = [c for c, used in r.facts.judged if (used.gpu or c.uses_claims) and c.c.envFrom]
    if not offenders:
        return
    if r.policy.rules.deny_env_from_on_gpu_containers:
        for c in offenders:
            r.deny(
                "env-from",
                ErrorType.FORBIDDEN,
                f"{c.field}.envFrom",
                f'container "{c.name}": envFrom on a container that uses a GPU: a ConfigMap'
                " or Secret can set NVIDIA_VISIBLE_DEVICES or CUDA_MPS_* there, which cannot"
                " be checked at admission. Set the variables the container needs with env",
                container=c.name,
            )
        return
    r.note("env-from", {"env-from": ",".join(c.name for c in offenders)})
    for c in offenders:
        r.warn(
            "env-from",
            f'container "{c.name}" uses envFrom: NVIDIA_* or CUDA_MPS_* set there are not checked',
        )


def check_mps_directories(r: PodPass) -> None:
    """Route 4: the MPS daemon's directories are the device plugin's to set."""
    for c, used in r.facts.judged:
        if used.exclusive and not used.shared:
            # A whole GPU of its own: the pod may run its own MPS daemon on it.
            continue
        for position, name in enumerate(c.env_names):
            if name in _MPS_DIRECTORIES:
                r.deny(
                    "mps-directories",
                    ErrorType.FORBIDDEN,
                    f"{c.field}.env[{position}]",
                    f'container "{c.name}": {name} (',
                    FIELD,
                    ") is set by the device plugin for a container with an MPS replica; a value"
                    " of the pod's can detach the process from the MPS daemon and its limits."
                    " Remove it",
                    container=c.name,
                )


# --------------------------------------------------------------------------- host access


def check_privileged(r: PodPass) -> None:
    for c, _ in r.facts.judged:
        if c.privileged:
            r.deny(
                "privileged",
                ErrorType.FORBIDDEN,
                f"{c.field}.securityContext.privileged",
                f'container "{c.name}": privileged container: it sees every device of the'
                " node, GPUs included, whatever it asked for. Remove ",
                FIELD,
                container=c.name,
            )


# The capabilities Pod Security baseline lets a container add (the Pod Security Standards;
# pod-security-admission, check_capabilities_baseline.go): the runtime's default set. In a pod
# that uses a GPU any other is refused: SYS_ADMIN makes a container privileged to the NVIDIA
# toolkit, SYS_PTRACE reaches other processes' GPUs, SYS_RAWIO and SYS_MODULE the hardware and
# the driver.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)


def _capability(name: str) -> str:
    # Container runtimes take capabilities with or without the CAP_ prefix, in any case
    # (containerd and CRI-O add "CAP_" to the upper-cased name).
    upper = name.strip().upper()
    return upper[4:] if upper.startswith("CAP_") else upper


def beyond_baseline(c: view.Slot) -> list[str]:
    """The capabilities a container adds beyond Pod Security baseline's set, as written."""
    return [a for a in view.capabilities(c.c) if _capability(a) not in BASELINE_CAPABILITIES]


def check_capabilities(r: PodPass) -> None:
    for c, _ in r.facts.judged:
        wide = beyond_baseline(c)
        if wide:
            r.deny(
                "capabilities",
                ErrorType.FORBIDDEN,
                f"{c.field}.securityContext.capabilities.add",
                f'container "{c.name}": added capabilities {", ".join(map(shown, wide))} in a'
                " pod that uses a GPU: outside Pod Security baseline's set, they reach devices,"
                " processes and the driver beyond the container's GPU (SYS_ADMIN makes it"
                " privileged to the NVIDIA toolkit, SYS_PTRACE reaches other pods' GPU"
                " processes). Remove them from ",
                FIELD,
                container=c.name,
            )


def _flag(pod: view.Pod, name: str) -> bool:
    """A boolean of the pod spec (hostPID, hostIPC, hostNetwork)."""
    return pod.spec is not None and bool(getattr(pod.spec, name))


def check_host_namespaces(r: PodPass) -> None:
    pod = r.facts.pod
    for flag, on, what in (
        (
            "hostPID",
            _flag(pod, "hostPID"),
            "see and signal every process of the node, the GPU"
            " processes of other pods and the MPS daemon included",
        ),
        (
            "hostIPC",
            _flag(pod, "hostIPC"),
            "reach the shared memory of the node's other processes, the MPS daemon's included",
        ),
    ):
        if on:
            r.deny(
                "host-namespaces",
                ErrorType.FORBIDDEN,
                f"spec.{flag}",
                "host namespace: ",
                FIELD,
                f" in a pod that uses a GPU lets its containers {what}. Remove {flag}",
            )


def host_path_classes(path: str, policy: Policy) -> list[str]:
    """The classes of host paths that hand out GPUs a hostPath reaches (`hostpaths`), the
    policy's own denied paths included."""
    return hostpaths.classes_of(path, policy.denied_host_paths)


def _mounters(pod: view.Pod) -> dict[str, list[str]]:
    """The containers that mount each volume, by volume name, sorted: read once per pod (a
    lookup per volume would be volumes x mounts, which a pod of thousands of each makes
    seconds)."""
    found: dict[str, set[str]] = {}
    for c in pod.containers:
        for _, m in view.mounts(c.c):
            found.setdefault(m.name or "", set()).add(c.name)
    return {volume: sorted(names) for volume, names in found.items()}


def _mounted_by(mounters: dict[str, list[str]], volume: str) -> str:
    mounted = mounters.get(volume)
    return f" (mounted by {', '.join(mounted)})" if mounted else ""


def check_host_path(r: PodPass) -> None:
    pod = r.facts.pod
    if pod.ephemeral_update:
        _check_host_path_mounts(r)
        return
    mounters: dict[str, list[str]] | None = None
    for v in view.host_path_volumes(pod):
        if v.host_path is None:
            continue
        reached = host_path_classes(v.host_path, r.policy)
        if not reached:
            continue
        if mounters is None:
            mounters = _mounters(pod)
        more = ", and more (docs/security.md lists them)" if len(reached) > 1 else ""
        what = (
            "is relative: the runtime resolves it against its working directory, which"
            " Kubernetes does not define. Write the absolute path"
            if reached == [hostpaths.RELATIVE]
            else f"is, or holds, {', '.join(reached)} as the node resolves it:"
            f" {hostpaths.reason(reached[0])}{more}. Remove it"
        )
        r.deny(
            "host-path",
            ErrorType.FORBIDDEN,
            f"spec.volumes[{v.position}]",
            f'volume "{v.name}" (',
            FIELD,
            f"): hostPath {shown(v.host_path, keep='end')}{_mounted_by(mounters, v.name)} {what}",
        )


def _check_host_path_mounts(r: PodPass) -> None:
    """An ephemeral-containers update: the pod's volumes were judged when it was created, but
    it may have been admitted before the namespace opted in or while the rule was not
    enforced. A container the update adds may not mount such a volume."""
    pod = r.facts.pod
    reaching = {
        v.name: v
        for v in view.host_path_volumes(pod)
        if v.host_path is not None and host_path_classes(v.host_path, r.policy)
    }
    if not reaching:
        return
    for c, _ in r.facts.judged:
        for position, m in view.mounts(c.c):
            v = reaching.get(m.name or "")
            if v is None:
                continue
            r.deny(
                "host-path",
                ErrorType.FORBIDDEN,
                f"{c.field}.volumeMounts[{position}]",
                f'container "{c.name}": volume "{v.name}" (hostPath'
                f" {shown(v.host_path or '', keep='end')}"
                ") reaches host paths that hand out GPUs, as the node resolves it. Mount"
                " another volume (",
                FIELD,
                ")",
                container=c.name,
            )


# Cleaning a path drops segments, never joins them: a path whose cleaned form starts with
# the device list's root holds its last segment as written.
_DEVICE_LIST_MARKER: Final = names.DEVICE_LIST_ROOT.rsplit("/", 1)[1]


def check_device_list_mount(r: PodPass) -> None:
    root = names.DEVICE_LIST_ROOT
    marker = _DEVICE_LIST_MARKER
    for c, _ in r.facts.judged:
        for position, m in view.mounts(c.c):
            path = m.mountPath or ""
            # The runtime matches the destination, made absolute by the kubelet and cleaned,
            # by plain string prefix (`hostpaths.mount_destination`).
            if marker in path and hostpaths.mount_destination(path).startswith(root):
                r.deny(
                    "device-list-mount",
                    ErrorType.FORBIDDEN,
                    f"{c.field}.volumeMounts[{position}]",
                    f'container "{c.name}": volume "{m.name or ""}" mounted at'
                    f" {shown(path, keep='end')} (",
                    FIELD,
                    f"): the NVIDIA runtime reads mounts under {root} (where the kubelet puts"
                    " a relative path too) as a list of GPUs to give the container. Mount it"
                    " elsewhere",
                    container=c.name,
                )


def allowed_host_path(path: str, policy: Policy) -> tuple[str, bool] | None:
    """The entry of the policy's `allowedHostPaths` that lets pods mount `path` (absolute,
    compared cleaned, by whole segments), or None. Under a writable entry only the entry
    itself may be mounted: below it a pod may have left a symbolic link to anywhere."""
    if not path.startswith("/"):
        return None
    p = hostpaths.clean(path)
    for entry, read_only in policy.allowed_host_paths:
        if not read_only and p.startswith(entry + "/"):
            return None
    for entry, read_only in policy.allowed_host_paths:
        if p == entry or p.startswith(entry + "/") or entry == "/":
            return entry, read_only
    return None


_NOT_ENFORCED = (
    " (Pod Security baseline refuses it; this namespace does not enforce baseline, so the"
    " webhook does)"
)


def check_host_access(r: PodPass) -> None:
    """Pod Security baseline's host-access checks, in a namespace that does not enforce
    baseline or restricted (`Policy.pod_security` is false there): privileged containers,
    host namespaces, hostPath volumes beyond the policy's `allowedHostPaths`, capabilities
    beyond baseline's set. What a GPU rule in force already refuses for this pod is left to
    it, so that nothing is refused twice."""
    pod, policy, gpu = r.facts.pod, r.policy, r.facts.gpu

    def covered(rule: str, in_gpu_pods: bool = False) -> bool:
        return switched_on(_BY_NAME[rule], policy) and (gpu or not in_gpu_pods)

    for c, _ in r.facts.judged:
        if c.privileged and not covered("privileged"):
            r.deny(
                "host-access",
                ErrorType.FORBIDDEN,
                f"{c.field}.securityContext.privileged",
                f'container "{c.name}": privileged container: it sees every device of the'
                f" node, GPUs included{_NOT_ENFORCED}. Remove ",
                FIELD,
                container=c.name,
            )
        wide = beyond_baseline(c)
        if wide and not covered("capabilities", in_gpu_pods=True):
            r.deny(
                "host-access",
                ErrorType.FORBIDDEN,
                f"{c.field}.securityContext.capabilities.add",
                f'container "{c.name}": added capabilities {", ".join(map(shown, wide))}:'
                " beyond Pod Security baseline's set they reach other processes (SYS_PTRACE),"
                f" devices and the kernel{_NOT_ENFORCED}. Remove them from ",
                FIELD,
                container=c.name,
            )
    # A mount of an allowed read-only host path must be read-only, in every container the
    # update adds too: `kubectl debug` may mount the pod's volumes, and a writable mount lets
    # it leave a link there for the next pod's hostPath to follow.
    volumes = _host_volumes(pod, policy, covered("host-path"))
    read_only = {v.name: (v, a[0]) for v, a in volumes if a is not None and a[1]}
    if read_only:
        for c, _ in r.facts.judged:
            for position, m in view.mounts(c.c):
                if m.readOnly or (m.name or "") not in read_only:
                    continue
                v, entry = read_only[m.name or ""]
                r.deny(
                    "host-access",
                    ErrorType.FORBIDDEN,
                    f"{c.field}.volumeMounts[{position}].readOnly",
                    f'container "{c.name}": hostPath volume "{v.name}"'
                    f" ({shown(v.host_path or '', keep='end')})"
                    f' is mounted writable; policy "{policy.name}" allows {entry} read-only'
                    f"{_NOT_ENFORCED}. Set ",
                    FIELD,
                    ": true",
                    container=c.name,
                )
    if pod.ephemeral_update:
        # The pod's namespaces and volumes were judged when it was created, if the namespace
        # had opted in then: a container the update adds may not mount a hostPath volume no
        # entry of allowedHostPaths allows.
        outside = {v.name: v for v, allowed in volumes if allowed is None}
        for c, _ in r.facts.judged if outside else ():
            for position, m in view.mounts(c.c):
                unallowed = outside.get(m.name or "")
                if unallowed is None:
                    continue
                listed = ", ".join(e for e, _ in policy.allowed_host_paths) or "none"
                r.deny(
                    "host-access",
                    ErrorType.FORBIDDEN,
                    f"{c.field}.volumeMounts[{position}]",
                    f'container "{c.name}": hostPath volume "{unallowed.name}"'
                    f" ({shown(unallowed.host_path or '', keep='end')}) is not under a path policy"
                    f' "{policy.name}" allows (allowedHostPaths: {listed}){_NOT_ENFORCED}.'
                    " Mount another volume (",
                    FIELD,
                    ")",
                    container=c.name,
                )
        return
    for flag, on, what in (
        (
            "hostPID",
            _flag(pod, "hostPID") and not covered("host-namespaces", in_gpu_pods=True),
            "shares the node's processes with the pod: a container that may trace (SYS_PTRACE,"
            " or on nodes whose ptrace_scope is 0) reaches other pods' GPU processes and, through"
            " /proc/<pid>/root, the MPS daemon's pipes",
        ),
        (
            "hostIPC",
            _flag(pod, "hostIPC") and not covered("host-namespaces", in_gpu_pods=True),
            "shares the node's shared memory with the pod, the MPS daemon's included",
        ),
        (
            "hostNetwork",
            _flag(pod, "hostNetwork"),
            "shares the node's network with the pod: the node's local services (the kubelet,"
            " the GPU Operator's) answer it as the node",
        ),
    ):
        if on:
            r.deny(
                "host-access",
                ErrorType.FORBIDDEN,
                f"spec.{flag}",
                "host namespace: ",
                FIELD,
                f" {what}{_NOT_ENFORCED}. Remove {flag}",
            )
    mounters: dict[str, list[str]] | None = None
    for v, allowed in volumes:
        if allowed is None:
            if mounters is None:
                mounters = _mounters(pod)
            listed = ", ".join(e for e, _ in policy.allowed_host_paths) or "none"
            r.deny(
                "host-access",
                ErrorType.FORBIDDEN,
                f"spec.volumes[{v.position}]",
                f'volume "{v.name}" (',
                FIELD,
                f"): hostPath {shown(v.host_path, keep='end')}{_mounted_by(mounters, v.name)}"
                " is not under a path"
                f' policy "{policy.name}" allows (allowedHostPaths: {listed}){_NOT_ENFORCED}.'
                " Use a PersistentVolumeClaim, or ask the cluster admin to allow the path",
            )


def _host_volumes(
    pod: view.Pod, policy: Policy, host_path_on: bool
) -> list[tuple[view.VolumeEntry, tuple[str, bool] | None]]:
    """The pod's hostPath volumes host-access judges (not those `host-path` refuses, when it
    is on), each with the entry of allowedHostPaths that allows it (None: none does)."""
    return [
        (v, allowed_host_path(v.host_path, policy))
        for v in view.host_path_volumes(pod)
        if v.host_path is not None and not (host_path_on and host_path_classes(v.host_path, policy))
    ]


def check_cdi_annotations(r: PodPass) -> None:
    """CDI device requests in the pod's own annotations: runtimes configured to pass
    `cdi.k8s.io/*` pod annotations through (the kata and confidential-computing GPU runtime
    classes do) inject the devices they name."""
    for key in view.annotations_of(r.facts.pod):
        if isinstance(key, str) and key.startswith(_CDI_ANNOTATION_PREFIXES):
            r.deny(
                "cdi-annotations",
                ErrorType.FORBIDDEN,
                f"metadata.annotations[{key}]",
                "CDI annotation: ",
                FIELD,
                " asks the container runtime for devices by name, outside the device plugin's"
                " allocation (runtimes that pass such pod annotations through inject them)."
                f" Remove it, and ask for {r.policy.preferred_resource}",
            )


def check_resource_claims(r: PodPass) -> None:
    """Claims in a pod whose policy has no `dra` section: nothing governs what they hold.
    Where it has one, the claims the pod names were reviewed when they were created
    (`claims`), in the pod's own namespace, the only one it can name them from."""
    claims = r.facts.pod.spec.resourceClaims if r.facts.pod.spec is not None else None
    if claims and r.policy.dra is None and r.policy.unavailable is None:
        r.deny(
            "resource-claims",
            ErrorType.FORBIDDEN,
            "spec.resourceClaims",
            "resource claims: ",
            FIELD,
            f' can give the pod devices, GPUs included, that policy "{r.policy.name}" does not'
            f" govern (it has no dra section). Remove them, or ask for"
            f" {r.policy.preferred_resource}",
        )


def check_shared_with_claims(r: PodPass) -> None:
    """A pod that asks for a device plugin's shared GPU is pinned to the device plugin's
    nodes; a resource claim of the same pod may hold GPUs only DRA's nodes have, and the pod
    would never be scheduled. Pods name claims only in their own namespace, whose policy
    reviewed them (`claims`); where it has no dra section, resource-claims refuses them."""
    claimed = r.facts.pod.spec.resourceClaims if r.facts.pod.spec is not None else None
    if not claimed or r.policy.dra is None:
        return
    claims = ", ".join(shown(name) for name in view.names_of(claimed))
    r.deny(
        "shared-with-claims",
        ErrorType.FORBIDDEN,
        "spec.resourceClaims",
        f"shared GPU and resource claims in one pod: it asks for"
        f" {', '.join(r.facts.requested)} (the device plugin's) and names the claims {claims}"
        " (",
        FIELD,
        "); the webhook pins it to the device plugin's nodes, where the claims' devices may"
        " never be found. Get the GPU through one of them: remove the shared resource and ask"
        " for it with a claim, or remove the claims",
    )


def _unavailable(name: str) -> Callable[[PodPass], None]:
    """A GPU pod in a namespace whose policy is not in force (`Policy.unavailable`) is
    refused, saying why; the rules that do not depend on the policy still apply."""

    def check(r: PodPass) -> None:
        if r.policy.unavailable is not None and r.policy.unavailable[0] == name:
            r.deny(name, ErrorType.FORBIDDEN, "metadata.namespace", r.policy.unavailable[1])

    check.__name__ = f"check_{name.replace('-', '_')}"
    return check


# --------------------------------------------------------------------------- placement


def patch_tolerations(r: PodPass) -> None:
    placement = r.facts.placement
    if not r.facts.classes or placement is None:
        return
    resource = placement.resource
    added = placing.tolerations(r.facts.pod, r.policy, resource)
    if not added:
        return
    base = f"{r.facts.pod.place.pointer}/spec/tolerations"
    if r.facts.pod.spec is not None and r.facts.pod.spec.tolerations is not None:
        for t in added:
            op = {"op": "add", "path": f"{base}/-", "value": t}
            said = placing.toleration_words(t) if r.in_words else ""
            r.add("tolerations", op, "tolerations", said)
    else:
        said = ", ".join(placing.toleration_words(t) for t in added) if r.in_words else ""
        r.add("tolerations", {"op": "add", "path": base, "value": added}, "tolerations", said)


def patch_node_selection(r: PodPass) -> None:
    """Pin the pod to the classes left. Validating a Pod, it must be pinned already: a later
    mutating webhook may have dropped or widened the pin, and an unpinned pod can land on
    another policy's class (a larger MPS share) or, where shared GPUs are not renamed, on a
    node that gives it a whole GPU."""
    known = r.facts
    placement = known.placement
    if placement is None or placement.pinned_to is None:
        return
    try:
        ops = placing.pin(r.facts.pod, placement)
    except selection.TooManyTerms as exc:
        r.refuse(
            _too_many(
                f"{_TERMS_PATH}.nodeSelectorTerms",
                f"{exc.sent:,} required node selector terms, which pinning to the classes left"
                f" would make {exc.pinned:,} (each term once per group of classes it can"
                " match)",
                _FEWER_TERMS,
                r.place,
            )
        )
        return
    if not ops:
        return
    if r.require:
        r.deny(
            "node-selection",
            ErrorType.REQUIRED,
            "spec.affinity.nodeAffinity"
            if view.required_terms(r.facts.pod.spec) is not None
            else "spec.nodeSelector",
            f"node selection: the pod asks for {placement.resource}, and its required node"
            " selection (",
            FIELD,
            f') does not keep it on the node classes of policy "{r.policy.name}"'
            f" ({placing.pin_words(placement)}), where the mutating webhook pins it: it did not"
            " run, or a later change removed or widened the pin. Create the pod again, or"
            " require those labels",
        )
        return
    for op in ops:
        if r.in_words:
            r.add("node-selection", op, *selection.pin_words(op))
        else:
            r.add("node-selection", op)


def patch_mps_limits(r: PodPass) -> None:
    """The profile's values on every container that uses the shared GPU and does not set
    them, where the pod may land on an MPS class."""
    known = r.facts
    profile, resource, classes = known.profile, known.resource, known.classes
    if profile is None or resource is None or not classes or not any(c.mps for c in classes):
        return
    for c, used in known.judged:
        replicas = used.replicas(resource)
        if not replicas:
            continue
        new = placing.mps_env(profile, c, placing.devices(replicas, classes))
        if new:
            r.add_env("mps-limits", c, new, f'the MPS limits of profile "{profile.name}"')


def patch_visible_devices(r: PodPass) -> None:
    """Route 2: containers that ask for no GPU see none, whatever their image sets."""
    if not (r.policy.rules.void_visible_devices_without_gpu or r.facts.gpu):
        return
    for c, used in r.facts.judged:
        if not used.gpu and c.variable(_VISIBLE_DEVICES) is None:
            r.add_env(
                "visible-devices",
                c,
                [{"name": _VISIBLE_DEVICES, "value": _HIDE}],
                "it hides the GPUs from a container that asks for none",
            )


# --------------------------------------------------------------------------- the table

E, G, S, C = Scope.EVERY_POD, Scope.GPU_POD, Scope.SHARED_POD, Scope.CLAIM
ISOLATION, SCHEDULING = Concern.ISOLATION, Concern.SCHEDULING


def _code(items: Iterable[str], last: str = ", ") -> str:
    """`a`, `b` and `c` (with `last` " and "): names in a summary, in Markdown."""
    quoted = [f"`{item}`" for item in items]
    return last.join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)


_CDI = _code((p + "*" if p.endswith("/") else p for p in names.CDI_ANNOTATION_PREFIXES), " or ")

# In the order of `names.RULES`, which is the order of what they report and add (for the
# patches: runtime class, tolerations, node selection, MPS limits, void); the order they run
# in changes nothing (see `Pass`).
# fmt: off
RULES: tuple[Rule, ...] = (
    Rule(MALFORMED, E, SCHEDULING,
         "a field of a type no Kubernetes object has (the API server never sends one)",
         check_malformed, always=True, claims=True),
    Rule(names.TOO_LARGE_RULE, E, SCHEDULING,
         f"an object larger than a review takes, which no workload comes near: more than"
         f" {view.MAX_ITEMS:,} pod templates, containers or required node selector terms (also"
         f" as pinning would make them), {view.MAX_ENTRIES:,} entries of the lists and maps"
         f" the rules read, or, read without the typed view, {view.MAX_GENERIC_VALUES:,} JSON"
         " values",
         always=True),
    Rule(names.UNKNOWN_POLICY_RULE, G, ISOLATION,
         f"a namespace whose `{names.POLICY_LABEL}` label names no policy",
         _unavailable(names.UNKNOWN_POLICY_RULE), always=True, claims=True),
    Rule(names.POLICY_NOT_LOADED_RULE, G, ISOLATION,
         "a namespace whose policy file does not load (the file and the error)",
         _unavailable(names.POLICY_NOT_LOADED_RULE), always=True, claims=True),
    Rule("invalid-quantity", E, SCHEDULING,
         "a GPU quantity that is not a whole number of devices (`500m`, `1e999999`)",
         found=True, always=True),
    Rule("requests-limits-mismatch", E, SCHEDULING,
         "requests of the shared resource that differ from its limits, or requests without"
         " limits",
         found=True),
    Rule("resource-not-allowed", E, ISOLATION,
         "a shared resource the policy does not list (`nvidia.com/mig-1g.10gb.shared`): \"not"
         " allowed\", never \"exclusive\"",
         found=True),
    Rule("exclusive-with-shared", S, SCHEDULING,
         "an exclusive GPU (`nvidia.com/gpu`, a MIG resource) next to a shared one",
         check_exclusive_with_shared, switch="denyExclusiveWithShared", pod_level=True),
    Rule("exclusive-gpus", G, ISOLATION,
         "a whole GPU (`nvidia.com/gpu`, MIG, `passthroughResources`) where"
         " `exclusiveGpus.allowed` is false, or more at once than `maxPerPod`",
         check_exclusive_gpus, pod_level=True),
    Rule("several-shared-resources", S, SCHEDULING,
         "two different shared resources in one pod",
         check_several_shared_resources, pod_level=True),
    Rule("shared-with-claims", S, SCHEDULING,
         "resource claims in a pod that asks for a shared resource, under a policy with a `dra`"
         " section: pinned to the device plugin's nodes, it would wait for DRA devices there"
         " forever",
         check_shared_with_claims, pod_level=True),
    Rule("runtime-class", S, SCHEDULING,
         "another `runtimeClassName`; **adds** the policy's when absent",
         check_runtime_class, patch_runtime_class, pod_level=True),
    Rule("tolerations", S, SCHEDULING,
         "**adds** the policy's tolerations (and, with `tolerateResourceTaint`, one for the"
         " resource's own taint), each only where not already tolerated",
         None, patch_tolerations, pod_level=True),
    Rule("profile", S, ISOLATION,
         f"a `{names.ANNOTATION_PROFILE}` the policy does not offer (\"unknown\" or \"not"
         " allowed\")",
         found=True, pod_level=True, claims=True),
    Rule("device-variables", E, ISOLATION,
         f"`{names.VISIBLE_DEVICES}` or another device variable"
         f" ({_code(names.DEVICE_VARIABLES[1:])}) set to anything but exactly `{names.HIDE}` or"
         " empty (`none` still gets the driver and the control device nodes), or from"
         " `valueFrom` or `$(VAR)`",
         check_device_variables, switch="denyDeviceVariables", always=True),
    Rule("env-from", G, ISOLATION,
         "`envFrom` on a container that uses a GPU: a warning and the audit annotation"
         " `env-from` by default, refused with the switch on",
         check_env_from, changed_by="denyEnvFromOnGpuContainers"),
    Rule("mps-directories", E, ISOLATION,
         f"{_code(names.MPS_DIRECTORIES, ' or ')} set by the pod (not on a container with an"
         " exclusive GPU only)",
         check_mps_directories, switch="denyMpsDirectories", always=True),
    Rule("privileged", E, ISOLATION,
         "a privileged container (init, sidecar and ephemeral too)",
         check_privileged, switch="denyPrivileged", always=True),
    Rule("capabilities", G, ISOLATION,
         "added capabilities outside Pod Security baseline's set (`SYS_ADMIN`, `SYS_PTRACE`,"
         " `SYS_MODULE`, `ALL`, ...; any case, with or without `CAP_`)",
         check_capabilities, switch="denyAddedCapabilities"),
    Rule("host-namespaces", G, ISOLATION,
         "`hostPID` or `hostIPC`",
         check_host_namespaces, switch="denyHostNamespaces", pod_level=True),
    Rule("host-path", E, ISOLATION,
         "a hostPath that is, is under or holds what hands out GPUs, as the node resolves it"
         " (cleaned, `/var/run` as `/run`, all of `/proc`): device nodes, MPS pipes, the driver"
         " and toolkit, the kubelet's state, CDI specs, container runtimes, `/sys`, the"
         " policy's `deniedHostPaths`; a relative hostPath",
         check_host_path, switch="denyDeviceHostPaths", always=True),
    Rule("device-list-mount", E, ISOLATION,
         f"a volume mounted at or under `{names.DEVICE_LIST_ROOT}`, a relative mount path made"
         " absolute as the kubelet does",
         check_device_list_mount, switch="denyDeviceListMounts", always=True),
    Rule("host-access", E, ISOLATION,
         "privileged containers, `hostPID`/`hostIPC`/`hostNetwork`, hostPath volumes outside"
         " `hostAccess.allowedHostPaths`, capabilities outside baseline's set — what a GPU"
         " rule above already refuses is not refused twice",
         check_host_access, switch="denyHostAccess", always=True, pod_security=True),
    Rule("cdi-annotations", E, ISOLATION,
         f"pod annotations {_CDI}; on a Pod or `pods/status` update and on a Binding (whose"
         " annotations are copied onto the pod), those it adds or changes",
         check_cdi_annotations, switch="denyCdiAnnotations", pod_level=True, always=True),
    Rule("resource-claims", E, ISOLATION,
         "`spec.resourceClaims` (dynamic resource allocation) where the policy has no `dra`"
         f" section, and `{names.DRA_EXTENDED_RESOURCE_PREFIX}*` extended resources; there,"
         " also the ResourceClaims and templates of GPU classes (a claim made now would serve"
         " the namespace's pods, unreviewed, once it moves to a policy with a `dra` section)",
         check_resource_claims, found=True, switch="denyResourceClaims", pod_level=True,
         always=True, claims=True),
    Rule("dra-class-not-allowed", C, ISOLATION,
         "a claim's request of a GPU device class the policy does not allow"),
    Rule("dra-all-devices", C, ISOLATION,
         "`allocationMode: All` (or an unknown mode) on a GPU class"),
    Rule("dra-admin-access", C, ISOLATION,
         "`adminAccess` on a GPU class"),
    Rule("dra-device-tolerations", C, ISOLATION,
         "`tolerations` of device taints on a GPU class (devices an admin took out of use)"),
    Rule("dra-too-many-devices", C, ISOLATION,
         "more devices in one request, or in one claim, than the class allows"
         " (`maxDevicesPerRequest`, `maxDevicesPerClaim`)"),
    Rule("dra-capacity", C, ISOLATION,
         "consumable capacity left out, not above zero, or above the class's ceiling"
         " (`capacity`)"),
    Rule("dra-config", C, SCHEDULING,
         "device configuration the GPU driver does not read (judged kind by kind), or of"
         " another kind of device"),
    Rule("dra-sharing", C, ISOLATION,
         "a sharing strategy the class does not allow (`sharing`)"),
    Rule("dra-mps-limits", C, ISOLATION,
         "MPS limits that do not parse or exceed the class's ceilings (`mps`); **adds** the"
         " profile's to a request with no configuration, where the class says so"
         " (`addMpsConfig`)",
         patch=claims.patch_mps_limits, required=True),
    Rule("dra-whole-device", C, ISOLATION,
         "a request that ends without a sharing configuration, so with the whole device, where"
         " the class says `allowWholeDevice: false`"),
    Rule("node-selection", S, SCHEDULING,
         "a node selection no allowed class satisfies; at validation, a Pod whose required node"
         " selection does not keep it on the classes left; **adds** the selection of the"
         " classes left",
         patch=patch_node_selection, found=True, pod_level=True, required=True),
    Rule("multi-replica", S, SCHEDULING,
         "k > 1 replicas where no class is left that takes them; **adds** the `.count` pin",
         found=True, pod_level=True),
    Rule("mps-limits", S, ISOLATION,
         f"`{names.MPS_PREFIX}*` that do not parse or exceed every ceiling (or, with"
         " `profilesAreCeilings`, the pod's profile), a profile above every ceiling; **adds**"
         " the profile's values",
         patch=patch_mps_limits, found=True, pod_level=True, required=True),
    Rule("driver-capabilities", G, ISOLATION,
         f"`{names.DRIVER_CAPABILITIES}` beyond `driverCapabilities` on a GPU container;"
         " **adds** the list where it sets none",
         check_driver_capabilities, patch_driver_capabilities, required=True),
    Rule("visible-devices", E, ISOLATION,
         f"**adds** `{names.VISIBLE_DEVICES}={names.HIDE}` to containers that ask for no GPU"
         " (in GPU pods only, with the switch off)",
         None, patch_visible_devices, changed_by="voidVisibleDevicesWithoutGpu", always=True,
         required=True),
)
# fmt: on


_BY_NAME: Final = {rule.name: rule for rule in RULES}
# The rows other modules name: a rule's name is written only here and in `names.RULES`.
HOST_ACCESS: Final = _BY_NAME["host-access"]
DRA_MPS_LIMITS: Final = _BY_NAME["dra-mps-limits"]
MPS_LIMITS: Final = _BY_NAME["mps-limits"]
CDI_ANNOTATIONS: Final = _BY_NAME["cdi-annotations"]
TOO_LARGE: Final = _BY_NAME[names.TOO_LARGE_RULE]


def switched_on(rule: Rule, policy: Policy) -> bool:
    return rule.switch is None or bool(getattr(policy.rules, _SWITCH_ATTRIBUTES[rule.switch]))
