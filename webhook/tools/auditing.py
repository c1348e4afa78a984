"""The audit: what the webhook would refuse or change among the objects of a cluster dump.

`audit(objects, policies=..., kinds=...)` takes what `kubectl get pods,deployments,...,
resourceclaims,resourceclaimtemplates -A -o json` and `kubectl get namespaces -o json` print
and judges every Pod, every workload (the built-in kinds and `kinds`) and every
ResourceClaim and ResourceClaimTemplate (`resource.k8s.io/v1`) as the webhook would if it
were created now:

- Which namespaces the webhook sees, and under which policy, is decided by the namespace
  selectors of the configurations `rendering.render` makes for the same policies, evaluated
  on each Namespace's labels: the audit and the cluster cannot disagree. Namespaces that are
  not opted in, kube-system and the webhook's own are never reviewed; objects whose Namespace
  is not among the objects are not judged (their labels are unknown, and guessing them would
  make a report nobody can trust).
- Each object is reviewed with its policy as if it enforced every rule: the audit answers
  "what would enforce refuse or change?". Each refusal carries the mode the policy applies
  its rule in today (warn and dry-run admit it today), each change whether its rule is in
  dry-run today (and so adds nothing yet).
  A Pod is judged as the mutating webhook judges it at CREATE; a workload's templates as
  its new pods will be (which also holds what the validating webhook refuses: its checks
  are the same); a claim or claim template as the mutating webhook judges it at CREATE
  (`claims.gather`: its requests against the policy's `dra` section, the MPS configuration
  of its profile added). Claims made before the namespace opted in are what this finds.
  Claims of another `resource.k8s.io` version are not judged (counted as ignored): the
  webhook is sent v1 only, and reads its shape.
- Objects of one controller (a Deployment, its ReplicaSets and their Pods; a CronJob or a
  JobSet, its Jobs and their Pods; found through `ownerReferences`) that get the same verdict
  are one `Entry`, so a 300-replica Deployment is one line; so are bare Pods with the same
  verdict. Every object is still reviewed: an old ReplicaSet or a Pod that differs from its
  template gets an entry of its own. A claim kube-controller-manager made from a template
  for a pod (owned by the Pod, annotation `resource.kubernetes.io/pod-claim-name`) follows
  its owner reference like a pod does: the claims of a Deployment's pods with one verdict
  are one entry of that Deployment; bare claims (and templates) with one verdict are one
  entry, as bare pods are. A claim's own name is left out when verdicts are compared.
- A namespace's Pod Security level (label `pod-security.kubernetes.io/enforce`) travels in its
  webhook path as in the cluster: one that enforces baseline or restricted is judged under
  `<policy>/baseline`, where rule host-access leaves its checks to Pod Security. Each judged
  namespace says whether host-access applies there (`NamespaceReport.host_access`), and
  `Report.without_pod_security` lists the opted-in namespaces that do not leave it to Pod
  Security, with what it would refuse.

Pure: no I/O. The command (`commands/audit.py`) reads the files and prints the report.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from webhook.engine import claims, hints, namespaces, reviewing, rules, view
from webhook.engine.decision import MALFORMED, Addition, Decision, Violation, Words, shown
from webhook.policy import hostpaths, names
from webhook.policy import kinds as workload_kinds
from webhook.policy.policies import Policy, PolicySet
from webhook.tools import rendering

# What the webhook would do to an object.
REFUSED, CHANGED, UNTOUCHED = "refused", "changed", "untouched"
VERDICTS = (REFUSED, CHANGED, UNTOUCHED)

# How the webhook meets a namespace.
JUDGED = "judged"
NOT_OPTED_IN = "not-opted-in"
EXCLUDED = "excluded"
NOT_IN_FILES = "not-in-files"
STATUSES = (JUDGED, NOT_OPTED_IN, EXCLUDED, NOT_IN_FILES)

NAMESPACE_KIND = "Namespace"
POD_KIND = "Pod"
CLAIM_KINDS = (names.CLAIM_TEMPLATE_KIND, names.CLAIM_KIND)
# The only version of claims the webhook is sent (`matchPolicy: Equivalent` converts the
# others first), and the only shape `claims.gather` reads: v1beta1's requests are flat.
CLAIM_API_VERSION = f"{names.DRA_GROUP}/{names.DRA_VERSION}"
# Set by kube-controller-manager on a claim it makes from a ResourceClaimTemplate for a pod
# (which is its controller owner): the name of the pod's entry in spec.resourceClaims
# (kubernetes.io/docs/reference/labels-annotations-taints/#resource-kubernetes-io-pod-claim-name).
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
# Kinds whose objects without a controller are grouped by verdict (bare pods, bare claims):
# nothing else is made from them, so one line per verdict says all.
_LEAF_KINDS = (POD_KIND, *CLAIM_KINDS)
# The controllers' own order, so a report lists a Deployment before its ReplicaSets.
_KIND_ORDER = {
    k: i
    for i, k in enumerate(
        (
            "CronJob",
            "Deployment",
            "StatefulSet",
            "DaemonSet",
            "Job",
            "ReplicaSet",
            "ReplicationController",
        )
    )
}
# The rule that applies Pod Security baseline's host-access checks where the namespace does not
# enforce baseline or restricted.
HOST_ACCESS = rules.HOST_ACCESS.name
# Whether it judges the pods of a judged namespace (`NamespaceReport.host_access`): it does; it
# is switched off in the namespace's policy; the namespace's webhook path leaves it to Pod
# Security (the namespace enforces baseline or restricted, and the policy trusts the label).
APPLIES, OFF, POD_SECURITY = "applies", "off", "left-to-pod-security"
HOST_ACCESS_STATES = (APPLIES, OFF, POD_SECURITY)


@dataclass(frozen=True, slots=True)
class Ref:
    """An object as a report names it."""

    kind: str
    name: str
    api_version: str
    # metadata.uid when the object has one (the API's objects do); not compared: two refs
    # are the same object by kind and name, as a report names them.
    uid: str = field(default="", compare=False)

    @property
    def text(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A rule that refuses the object when enforced, and how the policy applies it today."""

    violation: Violation
    mode: str  # names.ENFORCE, WARN or DRY_RUN

    @property
    def rule(self) -> str:
        return self.violation.rule

    @property
    def message(self) -> str:
        """Names the container, ends with the fix."""
        return self.violation.message

    @property
    def container(self) -> str | None:
        return self.violation.container

    @property
    def key(self) -> tuple[Any, ...]:
        """What compares refusals across an owner's objects: every field of the violation but
        where its pod stands in the object (a template's fields are read as its pods')."""
        v = self.violation
        return (v.rule, v.type, v.field, v.words, v.container, self.mode)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the webhook would do to one object. `key` compares verdicts across an owner's
    objects: the same rules on the same containers, the same additions, whatever the
    object's kind (a template's field paths are read as its pods')."""

    status: str
    refusals: tuple[Refusal, ...] = ()
    # The rules that would change the object, each with the mode the policy applies it in
    # today (in dry-run it adds nothing yet), and what they would add, one line per place.
    mutations: tuple[tuple[str, str], ...] = ()
    adds: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    key: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    # Why an untouched object is left as it is (`hints.unchanged`), in a few words.
    unchanged: str = ""
    # What each rule of `mutations` adds, by rule: (rule, its lines of `adds`).
    rule_adds: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), compare=False)


@dataclass(slots=True)
class Entry:
    """One line of a report: an object, and the objects of the same owner with its verdict."""

    subject: Ref
    verdict: Verdict
    # The topmost controller in the files when the subject is not that one itself, or the
    # controller its objects' ownerReferences name when that one is not in the files.
    owner: Ref | None = None
    members: list[Ref] = field(default_factory=list)
    # Something an admin should know about the subject ("0 replicas", an owner not dumped).
    note: str = ""

    @property
    def count(self) -> int:
        return 1 + len(self.members)


@dataclass(slots=True)
class NamespaceReport:
    name: str
    status: str
    # Why the webhook does or does not see the namespace, or how its labels pick its
    # policy, in words.
    reason: str
    # The policy its labels pick (None when the webhook does not see it), whether a policy
    # of that name is in force, and how it applies its rules.
    policy: str | None = None
    in_force: bool = False
    mode: str | None = None
    rule_modes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    objects: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    entries: list[Entry] = field(default_factory=list)
    # Whether a Namespace object says so (False: only objects in it were found).
    in_files: bool = True
    # The value of its label pod-security.kubernetes.io/enforce (None: no such label, the
    # cluster's default level, `privileged` unless the API server is configured otherwise).
    pod_security: str | None = None
    # For a judged namespace: whether rule host-access judges its pods (one of
    # HOST_ACCESS_STATES; None for the others), and why, in words.
    host_access: str | None = None
    host_access_reason: str = ""
    # Whether its labels opt it in (an excluded namespace may carry them too), the policy
    # they name then (`policy` is only set where the webhook reviews it), and the Namespace
    # object's metadata.uid when it has one.
    opted_in: bool = False
    labelled_policy: str | None = None
    uid: str = ""

    @property
    def pod_security_label(self) -> str:
        """Its Pod Security enforce label, in words."""
        label = names.POD_SECURITY_ENFORCE_LABEL
        return f"no {label} label" if self.pod_security is None else f"{label}={self.pod_security}"

    @property
    def pod_security_enforced(self) -> bool:
        """Whether its label says Pod Security enforces baseline or restricted."""
        return hostpaths.pod_security_enforced(self.pod_security)

    @property
    def without_pod_security(self) -> bool:
        """A judged namespace where the webhook does not leave host access to Pod Security:
        it does not enforce baseline or restricted, or its policy does not trust the label."""
        if self.status != JUDGED:
            return False
        return self.host_access == APPLIES or (
            self.host_access == OFF and not self.pod_security_enforced
        )

    def host_access_entries(self) -> list[Entry]:
        """Its entries that rule host-access refuses, each with only that rule's refusals."""
        out = []
        for e in self.entries:
            found = tuple(f for f in e.verdict.refusals if f.rule == HOST_ACCESS)
            if found:
                verdict = Verdict(REFUSED, found, key=(REFUSED, tuple(f.key for f in found)))
                out.append(dataclasses.replace(e, verdict=verdict))
        return out

    @property
    def host_access_refused(self) -> int:
        """How many of its objects rule host-access refuses."""
        return sum(e.count for e in self.host_access_entries())


@dataclass(slots=True)
class Report:
    namespaces: list[NamespaceReport]
    # Objects of kinds the webhook never reviews (Services, ConfigMaps, ...), by kind.
    ignored: Counter[str] = field(default_factory=Counter)
    # Claims and claim templates of another resource.k8s.io version than v1, by apiVersion
    # (among `ignored` too): the webhook is sent v1 only.
    other_claim_versions: Counter[str] = field(default_factory=Counter)
    # Objects found more than once (the last one counts).
    duplicates: int = 0
    # Objects with a shape no Kubernetes object has: (namespace, object, the first
    # violation of rule `malformed-object`, which names the field).
    malformed: list[tuple[str, Ref, Violation]] = field(default_factory=list)
    # Whether any Namespace object was among the objects.
    namespaces_found: bool = False

    def total(self, what: str) -> int:
        """Objects with verdict `what` over every namespace; "objects": all of them;
        NOT_IN_FILES: those of namespaces whose Namespace object is missing."""
        if what == "objects":
            return sum(ns.objects for ns in self.namespaces)
        if what == NOT_IN_FILES:
            return sum(ns.objects for ns in self.namespaces if ns.status == NOT_IN_FILES)
        return sum(ns.counts[what] for ns in self.namespaces)

    @property
    def refused(self) -> int:
        return self.total(REFUSED)

    @property
    def without_pod_security(self) -> list[NamespaceReport]:
        """The opted-in namespaces that do not leave Pod Security baseline's host-access checks
        to Pod Security (see `NamespaceReport.without_pod_security`)."""
        return [ns for ns in self.namespaces if ns.without_pod_security]


# --------------------------------------------------------------------------- routing


def _with_name(name: str, labels: Mapping[str, str]) -> Mapping[str, str]:
    # The API server sets this label on every namespace (1.22+); a hand-written dump may not.
    if names.NAME_LABEL in labels:
        return labels
    return {**labels, names.NAME_LABEL: name}


def selected_path(where: rendering.Routes, name: str, labels: Mapping[str, str]) -> str | None:
    """The webhook path the API server would send the namespace's objects to, as the rendered
    configurations route them: its policy's, with `/baseline` when the namespace enforces Pod
    Security baseline or restricted; None when no entry selects it."""
    return where.selected_path(_with_name(name, labels))


# --------------------------------------------------------------------------- the audit


@dataclass(slots=True)
class _Object:
    """One reviewable object of the dump and what the audit finds out about it."""

    obj: Mapping[str, Any]
    ref: Ref
    namespace: str
    uid: str | None
    owner: Ref | None  # its controller's
    owner_uid: str | None
    verdict: Verdict | None = None
    depth: int = 0  # how many controllers in the files are above it


def audit(
    objects: Iterable[Mapping[str, Any]],
    *,
    policies: PolicySet,
    kinds: Sequence[workload_kinds.Kind] = workload_kinds.BUILTIN_KINDS,
    webhook_namespace: str = names.DEFAULT_NAMESPACE,
    where: rendering.Routes | None = None,
    excluded: Collection[str] = (),
) -> Report:
    """Judge every Pod and workload of `objects` per namespace (see the module docstring).

    `kinds` are the workload kinds the webhook reviews (the built-in ones and those of the
    WorkloadKinds file). `where`: the routes of `rendering.routes(policies, ...)` when the
    caller has them already. `excluded`: namespaces the install's configurations leave out
    besides kube-system and the webhook's own (the chart's webhook.excludedNamespaces).
    ValueError for a `webhook_namespace` that is not a namespace name.
    """
    by_kind = workload_kinds.kinds_by_name(kinds)
    if where is None:
        where = rendering.routes(policies, webhook_namespace=webhook_namespace)
    report = Report(namespaces=[])
    labels_of: dict[str, dict[str, str]] = {}
    uids: dict[str, str] = {}
    found: dict[tuple[str, str, str, str], _Object] = {}
    for obj in objects:
        kind = obj.get("kind")
        group = view.group_of(obj.get("apiVersion"))
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        if kind == NAMESPACE_KIND and group == "":
            name = meta.get("name")
            if isinstance(name, str) and name:
                if name in labels_of:
                    report.duplicates += 1
                labels_of[name] = _labels(meta.get("labels"))
                uid = meta.get("uid")
                uids[name] = uid if isinstance(uid, str) else ""
                report.namespaces_found = True
            continue
        if isinstance(kind, str) and claims.is_claim(group, kind):
            api_version = obj.get("apiVersion")
            if api_version != CLAIM_API_VERSION:
                report.ignored[f"{kind} ({api_version})"] += 1
                report.other_claim_versions[str(api_version)] += 1
                continue
        elif not isinstance(kind, str) or not (
            (kind == POD_KIND and group == "") or (group, kind) in by_kind
        ):
            report.ignored[str(kind) if kind else "(no kind)"] += 1
            continue
        item = _read(obj, kind, meta)
        # Without a name (a hand-written generateName object) it is nobody's duplicate.
        unique = item.ref.name if meta.get("name") else f"#{len(found)}"
        identity = (group, kind, item.namespace, unique)
        if identity in found:
            report.duplicates += 1  # the last one counts
        found[identity] = item

    same: dict[Any, Any] = {}
    in_namespace: dict[str, list[_Object]] = {}
    for item in found.values():
        in_namespace.setdefault(item.namespace, []).append(item)
    governing: dict[str, tuple[Policy, Policy]] = {}
    for name in sorted(set(labels_of) | set(in_namespace)):
        items = in_namespace.get(name, [])
        labels = labels_of.get(name)
        path = selected_path(where, name, labels) if labels is not None else None
        if labels is not None and name in excluded:
            path = None
            ns = NamespaceReport(
                name,
                EXCLUDED,
                f"never reviewed ({name} is left out by the install: --exclude-namespace)",
                pod_security=labels.get(names.POD_SECURITY_ENFORCE_LABEL),
            )
        else:
            ns = _meet(name, labels, path, where, policies)
        ns.objects = len(items)
        ns.opted_in = labels is not None and namespaces.opted_in(labels)
        ns.labelled_policy = namespaces.policy_name(labels) if labels is not None else None
        ns.uid = uids.get(name, "")
        report.namespaces.append(ns)
        if ns.status != JUDGED or labels is None:
            if ns.status != NOT_IN_FILES:
                ns.counts[UNTOUCHED] = len(items)
            continue
        if path is None:  # _meet judged it: it has a path
            continue
        if path not in governing:
            real = policies.governing(path)
            governing[path] = (real, _enforcing(real))
        real, enforcing = governing[path]
        _host_access(ns, real)
        for item in items:
            problem = _judge(item, real=real, enforcing=enforcing, kinds=by_kind, same=same)
            if problem is not None:
                report.malformed.append((name, item.ref, problem))
                continue
            assert item.verdict is not None
            ns.counts[item.verdict.status] += 1
        ns.entries = _entries([i for i in items if i.verdict is not None])
    return report


def _labels(raw: object) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): str(v) for k, v in raw.items() if v is not None}


def _read(obj: Mapping[str, Any], kind: str, meta: Mapping[str, Any]) -> _Object:
    name = meta.get("name") or meta.get("generateName") or "(unnamed)"
    namespace = meta.get("namespace")
    uid = meta.get("uid")
    owner = owner_uid = None
    refs = meta.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            owner = Ref(str(ref.get("kind")), str(ref.get("name")), str(ref.get("apiVersion")))
            ref_uid = ref.get("uid")
            owner_uid = ref_uid if isinstance(ref_uid, str) and ref_uid else None
            break
    return _Object(
        obj=obj,
        ref=Ref(
            kind,
            str(name),
            str(obj.get("apiVersion") or ""),
            uid if isinstance(uid, str) else "",
        ),
        namespace=namespace if isinstance(namespace, str) else "",
        uid=uid if isinstance(uid, str) and uid else None,
        owner=owner,
        owner_uid=owner_uid,
    )


def _meet(
    name: str,
    labels: Mapping[str, str] | None,
    path: str | None,
    where: rendering.Routes,
    policies: PolicySet,
) -> NamespaceReport:
    """How the webhook meets a namespace: not at all (and why), or under which policy (the
    entry at `path`, which `where` gave for its labels)."""
    if labels is None:
        shown = name or "(no namespace)"
        return NamespaceReport(
            name,
            NOT_IN_FILES,
            f"no Namespace object for {shown} in the files: its labels, and so its policy,"
            " are unknown",
            in_files=False,
        )
    level = labels.get(names.POD_SECURITY_ENFORCE_LABEL)
    if path is None:
        unsent = where.why_not_sent(_with_name(name, labels))
        return NamespaceReport(
            name, EXCLUDED if unsent.left_out else NOT_OPTED_IN, str(unsent), pod_security=level
        )
    wanted = namespaces.policy_name(labels) or names.DEFAULT_POLICY
    label = labels.get(names.POLICY_LABEL)
    how = f"label {names.POLICY_LABEL}={label}" if label else f"no {names.POLICY_LABEL} label"
    how += "".join(f"; {line}" for line in namespaces.label_near_misses(labels))
    policy = policies.get(path)
    if policy is None:
        known = ", ".join(policies.names) or "none"
        return NamespaceReport(
            name,
            JUDGED,
            f'{how}, but no policy is named "{wanted}" (policies: {known}): pods that ask for'
            " a GPU are refused",
            policy=wanted,
            mode=names.ENFORCE,
            pod_security=level,
        )
    return NamespaceReport(
        name,
        JUDGED,
        how,
        policy=policy.name,
        in_force=True,
        mode=policy.mode,
        rule_modes=policy.rule_modes,
        pod_security=level,
    )


def _host_access(ns: NamespaceReport, policy: Policy) -> None:
    """Whether rule host-access judges the pods of a judged namespace under `policy` (the
    policy at its webhook path), and why."""
    level = ns.pod_security_label
    if policy.pod_security:
        ns.host_access = POD_SECURITY
        ns.host_access_reason = (
            f"Pod Security {ns.pod_security} enforced ({level}): {HOST_ACCESS} leaves its"
            " checks to it"
        )
        return
    named = f'policy "{policy.name}"' if ns.in_force else "the catch-all entry"
    if not rules.switched_on(rules.HOST_ACCESS, policy):
        ns.host_access = OFF
        ns.host_access_reason = (
            f"Pod Security baseline not enforced ({level}), and {HOST_ACCESS} is off in {named}"
            f" (rules.{rules.HOST_ACCESS.switch}: false)"
        )
        return
    ns.host_access = APPLIES
    if ns.pod_security_enforced:
        ns.host_access_reason = (
            f"Pod Security {ns.pod_security} enforced ({level}), but {named} does not trust"
            f" the label (hostAccess.trustPodSecurity: false): {HOST_ACCESS} applies"
        )
    else:
        ns.host_access_reason = (
            f"Pod Security baseline not enforced ({level}): {HOST_ACCESS} applies"
        )


def _enforcing(policy: Policy) -> Policy:
    """`policy` applying every rule in enforce mode (the question the audit answers)."""
    if policy.mode == names.ENFORCE and not policy.rule_modes:
        return policy
    return dataclasses.replace(policy, mode=names.ENFORCE, rule_modes=MappingProxyType({}))


def _judge(
    item: _Object,
    *,
    real: Policy,
    enforcing: Policy,
    kinds: workload_kinds.Kinds,
    same: dict[Any, Any],
) -> Violation | None:
    """Set `item.verdict`; or return the shape problem that keeps the object from a review.
    `same`: the audit's store of equal parts of verdicts, kept once (the pods of one
    controller are judged alike: their verdicts' descriptions need not be held per pod)."""
    obj = item.obj
    source = view.Source(obj)
    decision = reviewing.as_created(source, policy=enforcing, kinds=kinds)
    if decision.malformed:
        return next(v for v in decision.violations if v.rule == MALFORMED)
    if item.ref.kind in CLAIM_KINDS:
        item.verdict = _claim_verdict(obj, decision, real=real, enforcing=enforcing)
        return None
    found, _ = view.templates(source, kinds)
    # Warnings about one template of the kinds of other projects start with its label
    # (`JobSet spec.replicatedJobs[0]...: `), which its pods' do not have.
    label = found[0].place.label + ": " if len(found) == 1 and found[0].place.label else ""
    refusals = tuple(Refusal(v, real.mode_of(v.rule)) for v in decision.violations)
    # A refusal comes without a patch.
    adds = describe_additions(decision.additions)
    status = REFUSED if refusals else CHANGED if decision.patch else UNTOUCHED
    mutations = tuple((rule, real.mode_of(rule)) for rule in decision.mutations)
    warnings = tuple(decision.warnings)
    key = (
        status,
        tuple(f.key for f in refusals),
        mutations,
        adds,
        tuple(w.removeprefix(label) for w in warnings) if label else warnings,
    )
    why = ""
    if status == UNTOUCHED and found:
        why = "; ".join(dict.fromkeys(hints.unchanged(view.pod(t), enforcing) for t in found))
    rule_adds = tuple(
        (rule, describe_additions([a for a in decision.additions if a.rule == rule]))
        for rule, _ in mutations
    )
    item.verdict = Verdict(
        status,
        refusals,
        mutations,
        same.setdefault(adds, adds),
        warnings,
        same.setdefault((*key, why), (*key, why)),
        why,
        same.setdefault(rule_adds, rule_adds),
    )
    return None


def _claim_verdict(
    obj: Mapping[str, Any], decision: Decision, *, real: Policy, enforcing: Policy
) -> Verdict:
    """The verdict on a claim or claim template. Its key leaves out the object's own name,
    which each message starts with (`claim "pod1-gpu-7j2k4" request "gpu": ...`): the claims
    made for the pods of one controller differ in nothing else."""
    label = claim_label(obj)
    refusals = tuple(Refusal(v, real.mode_of(v.rule)) for v in decision.violations)
    adds = describe_additions(decision.additions)
    status = REFUSED if refusals else CHANGED if decision.patch else UNTOUCHED
    mutations = tuple((rule, real.mode_of(rule)) for rule in decision.mutations)
    warnings = tuple(decision.warnings)
    why = claims.unchanged(obj, enforcing) if status == UNTOUCHED else ""
    key = (
        status,
        tuple(_claim_refusal_key(f, label) for f in refusals),
        mutations,
        adds,
        tuple(w.removeprefix(label) for w in warnings),
        why,
        # Never one entry with a pod, nor a claim with a template.
        str(obj.get("kind")),
    )
    rule_adds = tuple((rule, adds) for rule, _ in mutations)
    return Verdict(status, refusals, mutations, adds, warnings, key, why, rule_adds)


def _claim_refusal_key(f: Refusal, label: str) -> tuple[Any, ...]:
    """`Refusal.key` with the claim's name left out of the words."""
    v = f.violation
    return (v.rule, v.type, v.field, _unnamed(v.words, label), v.container, f.mode)


def _unnamed(words: Words, label: str) -> Words:
    first = words[0] if words else None
    if isinstance(first, str) and first.startswith(label):
        return (first.removeprefix(label), *words[1:])
    return words


# --------------------------------------------------------------------------- grouping


def _entries(items: list[_Object]) -> list[Entry]:
    """One entry per controller and verdict (see the module docstring), refused first."""
    by_uid = {item.uid: i for i, item in enumerate(items) if item.uid}
    by_name = {(item.ref.kind, item.ref.name): i for i, item in enumerate(items)}

    def owner_of(i: int) -> int | None:
        item = items[i]
        if item.owner is None:
            return None
        if item.owner_uid is not None and item.owner_uid in by_uid:
            return by_uid[item.owner_uid]
        j = by_name.get((item.owner.kind, item.owner.name))
        # A uid that differs is another object of that name (deleted and made again).
        if j is None or j == i or (item.owner_uid is not None and items[j].uid is not None):
            return None
        return j

    owners = [owner_of(i) for i in range(len(items))]
    # The topmost controller of each object: an index among `items`, or the Ref of a
    # controller that is not in the files (the pods of a ReplicaSet that was not dumped are
    # still one entry), or None for a pod that no controller owns (bare pods with one
    # verdict are one entry).
    roots: list[int | Ref | None] = []
    for i, item in enumerate(items):
        seen = {i}
        at = i
        while (up := owners[at]) is not None and up not in seen:
            seen.add(up)
            at = up
        item.depth = len(seen) - 1
        top = items[at].owner
        if top is not None and owners[at] is None:
            roots.append(top)
        elif at == i and top is None and item.ref.kind in _LEAF_KINDS:
            roots.append(None)
        else:
            roots.append(at)

    groups: dict[tuple[int | Ref | None, tuple[Any, ...]], list[int]] = {}
    for i, item in enumerate(items):
        assert item.verdict is not None
        groups.setdefault((roots[i], item.verdict.key), []).append(i)

    entries = []
    for (root, _), members in groups.items():
        members.sort(key=lambda i: _order(items[i]))
        head = items[members[0]]
        assert head.verdict is not None
        notes = [_note(head)]
        owner: Ref | None = None
        if isinstance(root, Ref):
            owner = root
            notes.append(f"{root.text} is not in the files")
        elif root is not None and root != members[0]:
            owner = items[root].ref
        entries.append(
            Entry(
                subject=head.ref,
                verdict=head.verdict,
                owner=owner,
                members=[items[i].ref for i in members[1:]],
                note="; ".join(n for n in notes if n),
            )
        )
    entries.sort(
        key=lambda e: (
            VERDICTS.index(e.verdict.status),
            (e.owner or e.subject).kind == POD_KIND,
            (e.owner or e.subject).text,
            e.owner is not None,
            kind_rank(e.subject.kind),
            e.subject.name,
        )
    )
    return entries


def kind_rank(kind: str) -> int:
    """Where objects of `kind` stand among an owner's: controllers first, then pods, then
    claim templates and claims (a pod's claims come after it)."""
    if kind in _LEAF_KINDS:
        return len(_KIND_ORDER) + 1 + _LEAF_KINDS.index(kind)
    return _KIND_ORDER.get(kind, len(_KIND_ORDER))


def _order(item: _Object) -> tuple[int, int, str]:
    return (item.depth, kind_rank(item.ref.kind), item.ref.name)


def _note(item: _Object) -> str:
    if item.ref.kind in ("ReplicaSet", "ReplicationController") and item.owner is not None:
        spec = item.obj.get("spec")
        if isinstance(spec, dict) and spec.get("replicas") == 0:
            return "0 replicas: an old revision, used again only by a rollback"
    if item.ref.kind == names.CLAIM_KIND and item.owner is not None:
        meta = item.obj.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        if isinstance(annotations, dict) and POD_CLAIM_NAME_ANNOTATION in annotations:
            # Its spec is the template's: a new pod's claim is made from the template again.
            return "made for its pod from a claim template, which decides the next pods' claims"
    return ""


# --------------------------------------------------------------------------- additions


def describe_additions(additions: Sequence[Addition]) -> tuple[str, ...]:
    """What a decision's patch adds, one line per place, in its rules' words
    (`decision.Addition`): `env of container "log": NVIDIA_VISIBLE_DEVICES=void`."""
    topics: dict[str, list[str]] = {}
    for a in additions:
        topics.setdefault(a.topic, []).append(a.text)
    return tuple(f"{topic}: {', '.join(items)}" for topic, items in topics.items())


# --------------------------------------------------------------------------- claims


def claim_label(obj: Mapping[str, Any]) -> str:
    """How `claims.gather` names a claim or template at the start of its messages."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name") or meta.get("generateName") or ""
    return claim_words(str(obj.get("kind")), name if isinstance(name, str) else "")


def claim_words(kind: str, name: str) -> str:
    """`claim "x"` or `claim template "x"`: how messages name a claim of that kind and name."""
    what = "claim template" if kind == names.CLAIM_TEMPLATE_KIND else "claim"
    return f"{what} {shown(name)}"
