"""Running the rules: an admission request (or an object) and a compiled policy in, a
`Decision` out.

`admit` is the one entry: the server, `mutate -f` and `audit` (with `preview`) call it, and
`route` is what it decides to look at by kind and sub-resource (`explain` tells it).
`review_object` finds the pod specs the object carries (a Pod's own; a workload's pod
templates) and `review_claim` takes a claim; both run the table (`run_rules`: findings,
checks, modes, patches) and assemble one decision: every violation (each naming its
container and rule), or the JSON Patch with what it adds in the rules' words. A workload's
template is reviewed as its pods will be (`mutate=False` for the validating webhook, which
only refuses); `mutate -f` shows the template as its pods will be admitted.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, NamedTuple, TypeVar

from webhook.engine import claims, facts, hints, record, rules, structs, view
from webhook.engine.decision import (
    MAX_LONG_WARNING,
    OBJECT,
    Addition,
    Decision,
    Violation,
    refusal_warning,
)
from webhook.policy import kinds, names
from webhook.policy.policies import Policy

# `names` the loops below read, as Final constants the compiled core reads directly.
_ENFORCE: Final = names.ENFORCE
_DRY_RUN: Final = names.DRY_RUN
_WARN: Final = names.WARN

Endpoint = Literal["mutate", "validate"]
# The subresource `kubectl debug` updates to add an ephemeral container.
EPHEMERAL_CONTAINERS = "ephemeralcontainers"
# Subresources through which a Pod's annotations change: a status update keeps the metadata
# it is sent with; a Binding's annotations are copied onto the pod.
STATUS = "status"
BINDING = "binding"


class Route(enum.Enum):
    """What the webhook does with a request, by its kind, sub-resource and operation (the
    value: in words, as `explain` tells it)."""

    # A Pod CREATE: the table (the mutating endpoint patches and refuses; the validating one
    # refuses, also where the parts of the patch that guard the policy are missing).
    POD = "the rules: patched at /mutate, refused at /validate"
    # `kubectl debug` (an update of pods/ephemeralcontainers): the containers it adds.
    EPHEMERAL = "the rules over the ephemeral containers it adds"
    # Another Pod update, a pods/status update: the CDI annotations it adds or changes.
    POD_UPDATE = "the CDI annotations it adds or changes"
    # A Binding (`pods/binding`, or the older `bindings`): its annotations become the pod's.
    BINDING = "the CDI annotations it copies onto the pod"
    # A ResourceClaim or template CREATE (its spec cannot change after).
    CLAIM = "the claim rules: its MPS configuration added at /mutate, refused at /validate"
    # A workload's pod templates, at the validating endpoint; or previewed as its pods will
    # be admitted (the offline commands).
    TEMPLATES = "its pod templates, refused at /validate as their pods would be"
    NONE = "passes"


def route(
    group: str,
    kind: str,
    operation: str,
    sub_resource: str = "",
    *,
    endpoint: Endpoint,
    kinds: kinds.Kinds = kinds.BUILTIN,
    preview: bool = False,
) -> Route:
    """What `admit` does with a request of `kind` (in `group`) and `sub_resource`, for
    `operation`, at `endpoint` (`preview`: see `admit`)."""
    if operation not in ("CREATE", "UPDATE"):
        return Route.NONE
    if kind == "Binding" and group == "":
        return Route.BINDING
    if claims.is_claim(group, kind):
        return Route.CLAIM if operation == "CREATE" and not sub_resource else Route.NONE
    if kind == "Pod" and group == "":
        if sub_resource == EPHEMERAL_CONTAINERS and operation == "UPDATE":
            return Route.EPHEMERAL
        if sub_resource == STATUS:
            return Route.POD_UPDATE if operation == "UPDATE" else Route.NONE
        if sub_resource:
            return Route.NONE
        # A pod's containers, resources and scheduling are immutable once created; its
        # annotations are not, and the kubelet sends them with every container start.
        return Route.POD_UPDATE if operation == "UPDATE" else Route.POD
    if sub_resource or (group, kind) not in kinds:
        return Route.NONE
    if endpoint == "mutate" and not preview:
        return Route.NONE
    return Route.TEMPLATES


def as_created(obj: view.Object, *, policy: Policy, kinds: kinds.Kinds = kinds.BUILTIN) -> Decision:
    """What the mutating webhook makes of `obj` when it is created, a workload's pod
    templates as its pods will be admitted: `admit` for the offline commands (`mutate -f`,
    `audit`)."""
    source = view.as_source(obj)
    group, kind = view.head(source)
    return admit(
        source,
        policy=policy,
        endpoint="mutate",
        group=group,
        kind=kind,
        operation="CREATE",
        kinds=kinds,
        preview=True,
    )


def admit(
    sent: view.Object | None,
    *,
    policy: Policy,
    endpoint: Endpoint,
    group: str,
    kind: str,
    operation: str,
    sub_resource: str = "",
    old: view.Object | None = None,
    kinds: kinds.Kinds = kinds.BUILTIN,
    preview: bool = False,
) -> Decision:
    """What the webhook at `/<endpoint>/<policy>` decides about one admission request (what
    it looks at: `route`); refused by rule object-too-large where an object to be read
    without its typed view is too large for it (`view.TooLarge`).

    Workloads (`kinds`): the validating endpoint refuses a template its pods would be
    refused for, except on an update that leaves every template as it was (scaling, labels,
    finalizers, status), which is never refused. `preview` (the offline commands, `mutate -f`
    and `audit`, at the mutating endpoint): a workload's templates are patched as its pods
    will be admitted, where the server leaves workloads to the validating endpoint.
    """
    way = route(
        group, kind, operation, sub_resource, endpoint=endpoint, kinds=kinds, preview=preview
    )
    if sent is None or way is Route.NONE:
        return Decision()
    try:
        return _admit(
            way,
            sent,
            policy=policy,
            endpoint=endpoint,
            operation=operation,
            old=old,
            kinds=kinds,
            preview=preview,
        )
    except view.TooLarge as exc:
        return _finish(Decision(violations=[rules.too_large_to_read(exc.values)]))


def _admit(
    way: Route,
    sent: view.Object,
    *,
    policy: Policy,
    endpoint: Endpoint,
    operation: str,
    old: view.Object | None,
    kinds: kinds.Kinds,
    preview: bool,
) -> Decision:
    obj = view.as_source(sent)
    if old is not None:
        old = view.as_source(old)
    mutate = endpoint == "mutate"
    if way is Route.BINDING:
        # Judged as a Pod update that adds its annotations.
        generic = obj.generic
        meta = generic.get("metadata") if isinstance(generic, dict) else None
        return annotations_update(
            view.Source({"apiVersion": "v1", "kind": "Pod", "metadata": meta}),
            None,
            policy=policy,
        )
    if way is Route.CLAIM:
        if preview and not claims.of_object(obj.generic):
            return Decision()  # (the offline commands say so of other versions)
        return review_claim(
            obj.generic, policy=policy, mutate=mutate, require=not mutate, in_words=preview
        )
    if way is Route.EPHEMERAL:
        before = old or view.Source({})
        return review_object(
            obj, policy=policy, mutate=mutate, require=not mutate, old=before, in_words=preview
        )
    if way is Route.POD_UPDATE:
        return annotations_update(obj, old, policy=policy)
    if way is Route.POD:
        return review_object(
            obj, policy=policy, mutate=mutate, require=not mutate, in_words=preview
        )
    decision = review_object(obj, policy=policy, mutate=mutate, kinds=kinds, in_words=preview)
    if (
        decision.violations
        and operation == "UPDATE"
        and old is not None
        and templates_equal(old, obj, kinds)
    ):
        # Admitted before these rules (or before this policy): tell, and let it through, so
        # that scaling and deleting existing workloads never hang on the webhook.
        kept = Decision(warnings=list(decision.warnings))
        kept.warn("the pod template breaks gpu-share rules; its new pods will be refused")
        return kept
    return decision


def annotations_update(
    obj: view.Source, old: view.Object | None, *, policy: Policy
) -> Decision:
    """A Pod update: the CDI annotations it adds or changes are judged by `cdi-annotations`
    (runtimes that pass pod annotations through read them at the next container start);
    nothing else of the pod is, and nothing is patched. One it keeps as it was (the pod was
    admitted with it, before the rule or the namespace's opt-in) is not refused again."""
    found, _ = view.templates(obj, kinds.BUILTIN)
    rule = rules.CDI_ANNOTATIONS
    if not found or not rules.switched_on(rule, policy):
        return Decision()
    before = _annotations_of(view.as_source(old).generic if old is not None else {})
    pod = view.pod(found[0])
    changed = {
        key: value
        for key, value in view.annotations_of(pod).items()
        if isinstance(key, str)
        and key.startswith(names.CDI_ANNOTATION_PREFIXES)
        and before.get(key) != value
    }
    if not changed:
        return Decision()
    only = pod.with_meta(structs.Meta(changed, pod.meta.labels if pod.meta else None))
    table = Table(frozenset(), (rule.check,) if rule.check is not None else (), (), ())
    r, _, _ = run_rules(facts.gather(only, policy), policy, table, mutate=False)
    decision = Decision(violations=r.violations, would_refuse=r.would_refuse)
    _tell(decision)
    return decision


def _annotations_of(obj: Any) -> Mapping[str, str]:
    """The annotations of an object before its update, a value that is not a string as its
    text (as the view reads the object after it)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict):
        return {}
    return {k: v if isinstance(v, str) else str(v) for k, v in annotations.items()}


def review_object(
    sent: view.Object,
    *,
    policy: Policy,
    mutate: bool = True,
    require: bool = False,
    old: view.Object | None = None,
    kinds: kinds.Kinds = kinds.BUILTIN,
    in_words: bool = True,
) -> Decision:
    """Run the rules over an object as it is: a Pod, the pod templates of a workload, or a
    claim (`review_claim`); other kinds pass untouched. `admit` says which way a request
    goes; the tests judge objects here directly.

    `mutate`: build the patch. `require`: validating a Pod, the parts of the patch that guard
    the policy (`Rule.required`) must be in place already. `old`: the Pod before an update
    of its ephemeral containers; only the ones it adds are judged. `in_words`: say what the
    patch adds (`Decision.additions`).
    """
    obj = view.as_source(sent)
    if claims.is_claim(*view.head(obj)) and claims.of_object(obj.generic):
        return review_claim(
            obj.generic, policy=policy, mutate=mutate, require=require, in_words=in_words
        )
    found, problems = view.templates(obj, kinds)
    too_large = rules.too_large(found, obj.length)
    decision = Decision(violations=[rules.malformed(p, OBJECT) for p in problems])
    if too_large is not None:
        # Judged alone: the rules' work and patch grow with what it bounds.
        decision.violations.append(too_large)
        return _finish(decision)
    added_to = view.old_ephemeral(view.as_source(old) if old is not None else None)
    views = [view.pod(template, added_to) for template in found]
    budget = hints.Budget()
    for pod in views:
        r, ops, additions = run(
            pod, policy, mutate=mutate, require=require, in_words=in_words
        )
        label = pod.place.label
        # Where a workload has several templates, an addition's words say which.
        _take(decision, r, ops, additions, label=label, where=label if len(views) > 1 else "")
        if not require:
            # Told once: a Pod's validating review sees what the mutating one told of.
            for w in (
                hints.resource_warnings(pod, policy, budget)
                + hints.annotation_warnings(pod, policy, budget)
                + hints.label_warnings(pod, policy, budget)
            ):
                # The place last: the advice first survives the cut at 120 characters.
                decision.warn(f"{w} (in {label})" if label else w)
    if found and found[0].place.pointer:
        # A workload's own metadata (and a CronJob's jobTemplate's) holds what its pods never
        # see.
        outline = obj.outline if obj.outline is not None else obj.generic
        for w in hints.workload_warnings(outline, found, budget):
            decision.warn(w)
    return _finish(decision)


def review_claim(
    obj: Mapping[str, Any], *, policy: Policy, mutate: bool, require: bool, in_words: bool = True
) -> Decision:
    """A ResourceClaim or ResourceClaimTemplate (`claims`), through the same runner as a pod:
    its rules' findings, the MPS patch, the modes; nothing recorded on it."""
    known = claims.gather(obj, policy)
    r, ops, additions = run_rules(
        known, policy, _claim_table(policy), mutate=mutate, require=require, in_words=in_words
    )
    decision = Decision()
    _take(decision, r, ops, additions, label="", where="")
    if not require:
        # Told once: the mutating review of the same claim told it.
        for w in known.hints:
            decision.warn(w)
    return _finish(decision)


def _take(
    decision: Decision,
    r: rules.Pass[Any],
    ops: Operations,
    additions: list[Addition],
    *,
    label: str,
    where: str,
) -> None:
    """Add what one pass found and added to `decision` (a workload's templates each have a
    pass; `label` says which in warnings, `where` in the additions' words)."""
    decision.violations += r.violations
    for w in r.warnings:
        decision.warn(f"{label}: {w}" if label else w)
    decision.would_refuse += r.would_refuse
    for rule, op in ops:
        decision.patch.append(op)
        if rule != rules.ANNOTATIONS and rule not in decision.mutations:
            decision.mutations.append(rule)
    for a in additions:
        decision.additions.append(a._replace(topic=f"{where}: {a.topic}") if where else a)
    for key, value in r.audit.items():
        # One value per key for the whole object: a workload's templates each add theirs
        # (rule env-from names containers of each).
        before = decision.audit.get(key)
        if before is None or before == value:
            decision.audit[key] = value
        elif len(before) < _AUDIT_VALUE and value not in before.split(","):
            # (At most _AUDIT_VALUE characters: thousands of templates cost no more.)
            decision.audit[key] = f"{before},{value}"


def _finish(decision: Decision) -> Decision:
    """A refused object is not patched; warn-mode refusals are told (`_tell`)."""
    if decision.violations:
        decision.patch = []
        decision.mutations = []
        decision.additions = []
    _tell(decision)
    return decision


# An audit annotation's value is kept this short (the audit log keeps it per request).
_AUDIT_VALUE = 2000


def _tell(decision: Decision) -> None:
    """Warn-mode refusals as warnings and an audit annotation; dry-run ones stay silent. A
    warning keeps the refusal's fix (`refusal_warning`); the annotation has it whole."""
    warned = [v for mode, v in decision.would_refuse if mode == _WARN]
    if not warned:
        return
    # Before any other warning, and one of each rule first: what the budget of warnings
    # leaves out of a large pod is then more of the same.
    first: dict[str, Violation] = {}
    for v in warned:
        first.setdefault(v.rule, v)
    ordered = [*first.values(), *(v for v in warned if first[v.rule] is not v)]
    decision.warn_first([refusal_warning(v) for v in ordered], MAX_LONG_WARNING)
    decision.audit["would-refuse"] = ",".join(dict.fromkeys(v.rule for v in warned))
    text = "; ".join(v.text for v in warned)
    decision.audit["would-refuse-reasons"] = (
        text if len(text) <= _AUDIT_VALUE else text[: _AUDIT_VALUE - 3] + "..."
    )


Operations = list[tuple[str, dict[str, Any]]]
F = TypeVar("F", bound=rules.Known)
Step = Callable[[rules.Pass[Any]], None]
Recorder = Callable[
    [rules.Pass[F], Operations], tuple[Operations, dict[str, str], Addition | None]
]


class Table(NamedTuple):
    """The rules that apply to a kind of object under a policy."""

    # The names of the rules whose findings are reported (`Rule.found`).
    found: frozenset[str]
    checks: tuple[Step, ...]
    patches: tuple[Step, ...]
    # The patches that must be in place when the object reaches the validating webhook.
    required: tuple[Step, ...]


def run(
    pod: view.Pod, policy: Policy, *, mutate: bool, require: bool = False, in_words: bool = False
) -> tuple[rules.PodPass, Operations, list[Addition]]:
    """The rules over one pod (`run_rules`), with what is known of it before they run
    (`facts.gather`) and the record of what they did (`record.record`)."""
    known = facts.gather(pod, policy)
    table = _table(policy, known.gpu, bool(known.requested), pod.ephemeral_update)
    return run_rules(
        known,
        policy,
        table,
        mutate=mutate,
        require=require,
        recorder=record.record,
        in_words=in_words,
    )


def run_rules(
    known: F,
    policy: Policy,
    table: Table,
    *,
    mutate: bool,
    require: bool = False,
    recorder: Recorder[F] | None = None,
    in_words: bool = False,
) -> tuple[rules.Pass[F], Operations, list[Addition]]:
    """The rules of `table` over one object (a pod, a claim): the pass (what they found,
    refused and warned of), the patch operations (each with its rule's name), and what they
    add in the rules' words (`Addition`).

    What was known of the object before any rule runs (`facts.gather`, `claims.gather`)
    comes in as `known`: its findings are reported for the rules of `table.found`; then every
    check; then, when nothing is refused, the patches; then (pods: `record.record`) the
    record of what they did. A rule the policy applies in warn or dry-run mode does not
    refuse (`Pass.relax`), and in dry-run mode it patches nothing. `in_words`: what the
    patches add is also said in their rules' words (the offline commands).
    """
    r = rules.Pass(known, policy, require=require, in_words=in_words)
    if known.findings:
        r.report(table.found)
    for check in table.checks:
        check(r)
    r.relax()
    if r.refused or not (mutate or require):
        return r, [], []
    for patch in table.patches if mutate else table.required:
        patch(r)
    r.relax()
    if not mutate or r.refused:
        return r, [], []
    ops = r.operations()
    additions = r.additions() if in_words else []
    if policy.mode != _ENFORCE or policy.rule_modes:
        ops = [(rule, op) for rule, op in ops if policy.mode_of(rule) != _DRY_RUN]
        additions = [a for a in additions if policy.mode_of(a.rule) != _DRY_RUN]
    if recorder is None:
        return r, ops, additions
    recorded, audit, words = recorder(r, ops)
    if audit:
        r.note(rules.ANNOTATIONS, audit)
    if words is not None:
        additions.append(words)
    return r, ops + recorded, additions


@functools.lru_cache(maxsize=1024)
def _table(policy: Policy, gpu: bool, shared: bool, ephemeral_update: bool) -> Table:
    """The rules that apply to a pod: worked out once per policy and kind of pod, not for
    every review (the policy cannot change)."""
    applying = [r for r in rules.RULES if _applies(r, policy, gpu, shared, ephemeral_update)]
    return Table(
        frozenset(rule.name for rule in applying if rule.found),
        tuple(rule.check for rule in applying if rule.check is not None),
        tuple(rule.patch for rule in applying if rule.patch is not None),
        tuple(rule.patch for rule in applying if rule.patch is not None and rule.required),
    )


@functools.lru_cache(maxsize=64)
def _claim_table(policy: Policy) -> Table:
    """The rules that judge claims: those of scope claims and those that also refuse claims
    (`Rule.claims`). Their findings come from `claims.gather` (their checks are the pods');
    the patches are the claims' own."""
    applying = [
        r
        for r in rules.RULES
        if (r.scope is rules.Scope.CLAIM or r.claims)
        and (policy.unavailable is None or r.always)
        and rules.switched_on(r, policy)
    ]
    own = [r for r in applying if r.scope is rules.Scope.CLAIM and r.patch is not None]
    return Table(
        frozenset(r.name for r in applying),
        (),
        tuple(r.patch for r in own if r.patch is not None),
        tuple(r.patch for r in own if r.patch is not None and r.required),
    )


def _applies(
    rule: rules.Rule, policy: Policy, gpu: bool, shared: bool, ephemeral_update: bool
) -> bool:
    if rule.scope is rules.Scope.CLAIM:
        return False
    if policy.unavailable is not None and not rule.always:
        return False
    if rule.pod_level and ephemeral_update:
        return False
    if rule.pod_security and policy.pod_security:
        return False
    if rule.scope is rules.Scope.GPU_POD and not gpu:
        return False
    if rule.scope is rules.Scope.SHARED_POD and not shared:
        return False
    return rules.switched_on(rule, policy)


def templates_equal(old: view.Object, new: view.Object, kinds: kinds.Kinds) -> bool:
    """Whether an update leaves every pod template of the object as it was (scaling, labels,
    finalizers, status), as sent: such an update is never refused."""
    old_found, _ = view.templates(old, kinds)
    new_found, _ = view.templates(new, kinds)
    return [t.generic() for t in old_found] == [t.generic() for t in new_found]
