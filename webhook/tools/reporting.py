"""The audit as policy reports: what Policy Reporter, Kyverno's and Kubewarden's admins, and
`kubectl get polr` read.

`build(report, api, now=...)` turns an `auditing.Report` into report objects of one of two
APIs (`APIS`): `wgpolicyk8s.io/v1alpha2` PolicyReport and ClusterPolicyReport, or their
successor `openreports.io/v1alpha1` Report and ClusterReport. Both CRDs hold the same result
shape at the top of the object (no spec, no status); openreports adds a report-level
`source`.

- One namespaced report per namespace the webhook reviews that holds something to judge (a
  namespace with nothing gets none, and loses an earlier one), named `gpu-share-webhook`,
  its `scope` the Namespace. A namespace whose results exceed `REPORT_BYTES` (serialized) gets
  more reports, `gpu-share-webhook-2`, `-3`, ..., split between objects: etcd refuses
  requests over 1.5 MiB by default, and one report per namespace is what made Kyverno's and
  Kubewarden's reports too large before they moved to one report per resource.
- One cluster report, `gpu-share-webhook`, with one result per Namespace object whose labels
  opt it in: pass (its policy is in force), fail (rule `unknown-policy`: its label names no
  policy, so GPU pods there are refused), warn (rule `host-access`: nothing judges host
  access there), skip (the webhook never reviews it: kube-system, its own namespace).
- One result per object and rule: fail, a rule in enforce mode refuses it; warn, a rule in
  warn or dry-run mode today refuses it, or a Pod or ResourceClaim was created without what
  the webhook adds now, or a rule that adds it is in dry-run, or a warning (a near miss);
  pass, the object is admitted as it is, or the pods a workload makes get what the webhook
  adds. A change that is only the webhook's record annotations is rule `annotations`.
  Each result names exactly one object in `resources` (Policy Reporter reads
  `resources[0]`), and carries `source` (it reads `results[0].source` as the report's
  source). Text from the objects is made printable (`decisions.printable`), written without
  characters beyond the BMP, and cut at MESSAGE_CHARS (`_text`).
- Severities are high, medium and low only: the enum of the first wgpolicyk8s.io CRD
  (wg-policy-prototypes) has no critical or info; Kyverno's and openreports' have all five.
- A result's `timestamp` is kept from `previous` (the reports in the cluster) when the same
  result was there, so an unchanged cluster gives byte-identical reports and a second run
  writes nothing (server-side apply of an unchanged object is a no-op).

Pure: no I/O (`cluster.py` reads and writes, `commands/audit.py` prints).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.engine import rules
from webhook.engine.decision import Violation, printable, shown
from webhook.policy import names
from webhook.tools import auditing

# What makes two results the same finding (`_identity`: 16 bytes), and a result's timestamp
# (seconds, nanos): a run after the first holds one of each per result of its reports.
Identity = bytes
Stamp = tuple[int, int]

SOURCE = "gpu-share-webhook"
# The field manager of server-side apply, and the value of MANAGED_BY_LABEL on every report:
# what finds the reports this tool wrote (and only those) to update or delete them.
FIELD_MANAGER = SOURCE
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
REPORT_NAME = "gpu-share-webhook"
# The results of one report, serialized, stay under this; more go to the next report.
REPORT_BYTES = 1_000_000
# A message longer than this is cut (the rules' messages are bounded already; this bounds
# the sum of several).
MESSAGE_CHARS = 1024

PASS, FAIL, WARN, ERROR, SKIP = "pass", "fail", "warn", "error", "skip"
RESULTS = (PASS, FAIL, WARN, ERROR, SKIP)
# The severity of warnings; a rule's results have the severity and category of its row
# (`rules.Concern`: high or medium).
LOW = "low"

# The rule name of results that hold an object's warnings (near misses such as a misspelt
# profile annotation); not a rule of the webhook.
WARNINGS_RULE = "warnings"
WARNINGS_CATEGORY = "Warnings"
ADMITTED_CATEGORY = "GPU sharing"
OPT_IN_CATEGORY = "Opt-in"

_RULES = {r.name: r for r in rules.RULES}
# Objects that exist as admitted: what the webhook would add now, they lack.
_LIVE_KINDS = (auditing.POD_KIND, names.CLAIM_KIND)
# Objects nothing else is made from: bare ones of one verdict share an entry, not an owner.
_LEAF_KINDS = (auditing.POD_KIND, *auditing.CLAIM_KINDS)


def concern(rule: str) -> rules.Concern:
    """What `rule` guards, and so the severity and category of its results."""
    row = _RULES.get(rule)
    return row.concern if row is not None else rules.Concern.SCHEDULING


@dataclass(frozen=True, slots=True)
class ReportApi:
    """One of the two report APIs: the kinds and plurals of its CRDs."""

    output: str  # the `audit -o` value that picks it
    group: str
    version: str
    kind: str
    cluster_kind: str
    plural: str
    cluster_plural: str
    # openreports has a report-level `source`; wgpolicyk8s.io v1alpha2 has none.
    report_source: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


POLICY_REPORT = ReportApi(
    "policyreport",
    "wgpolicyk8s.io",
    "v1alpha2",
    "PolicyReport",
    "ClusterPolicyReport",
    "policyreports",
    "clusterpolicyreports",
    report_source=False,
)
OPEN_REPORTS = ReportApi(
    "openreports",
    "openreports.io",
    "v1alpha1",
    "Report",
    "ClusterReport",
    "reports",
    "clusterreports",
    report_source=True,
)
APIS = {api.output: api for api in (POLICY_REPORT, OPEN_REPORTS)}


def build(
    report: auditing.Report,
    api: ReportApi,
    *,
    now: int,
    previous: Iterable[Mapping[str, Any]] = (),
    kept: Mapping[Identity, Stamp] | None = None,
) -> list[dict[str, Any]]:
    """The reports of `report` (`iter_reports`), in a list."""
    return list(iter_reports(report, api, now=now, previous=previous, kept=kept))


def iter_reports(
    report: auditing.Report,
    api: ReportApi,
    *,
    now: int,
    previous: Iterable[Mapping[str, Any]] = (),
    kept: Mapping[Identity, Stamp] | None = None,
) -> Iterator[dict[str, Any]]:
    """The reports of `report`, one at a time (a writer need not hold them all: at 50,000
    pods with four results each they are some 200 MB of objects): the namespaced ones by
    namespace, then the cluster ones. `now`: the timestamp (seconds since the epoch) of
    results that are new; `previous`: the reports this tool wrote before, whose results'
    timestamps are kept where unchanged (or `kept`: those timestamps, `timestamps(previous)`)."""
    if kept is None:
        kept = timestamps(previous)
    for ns in report.namespaces:
        if ns.status != auditing.JUDGED or not ns.in_files:
            continue
        policy = ns.policy or names.DEFAULT_POLICY
        malformed = (
            [_malformed_result(ref, violation, ns.name, policy)]
            for where, ref, violation in report.malformed
            if where == ns.name
        )
        per_object = itertools.chain(_namespace_results(ns, policy), malformed)
        scope = _reference("v1", auditing.NAMESPACE_KIND, ns.name, None, ns.uid)
        yield from _reports(api, per_object, namespace=ns.name, scope=scope, now=now, kept=kept)
    cluster = ([r] for ns in report.namespaces if (r := _namespace_result(ns)))
    yield from _reports(api, cluster, namespace=None, scope=None, now=now, kept=kept)


# The fields this tool sets at the top of a report besides its metadata: what `digest`
# compares.
OWN_FIELDS = ("source", "scope", "summary", "results")


def digest(obj: Mapping[str, Any]) -> bytes:
    """What a report holds of OWN_FIELDS, in 32 bytes: two reports with the same digest
    apply alike (a report in the cluster is kept as its digest, not whole)."""
    own = {k: obj.get(k) for k in OWN_FIELDS}
    try:
        text = orjson.dumps(own, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # what whoever may write reports wrote: never ours
        return b""
    return hashlib.sha256(text).digest()


def is_report_name(name: str) -> bool:
    """Whether `name` is one `build` gives a report: REPORT_NAME, or a later part of it."""
    return _REPORT_NAME.fullmatch(name) is not None


_REPORT_NAME = re.compile(rf"{re.escape(REPORT_NAME)}(-[2-9]|-[1-9][0-9]+)?")


def as_list(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Reports as a `v1 List` (what `kubectl apply --server-side -f -` takes)."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": list(items)}


# --------------------------------------------------------------------------- results


def _namespace_results(ns: auditing.NamespaceReport, policy: str) -> Iterator[list[dict[str, Any]]]:
    """For each object of the namespace, its results."""
    for entry in ns.entries:
        head = entry.subject
        for ref in (head, *entry.members):
            yield _object_results(ref, head, entry, ns.name, policy)


def _object_results(
    ref: auditing.Ref, head: auditing.Ref, entry: auditing.Entry, namespace: str, policy: str
) -> list[dict[str, Any]]:
    v = entry.verdict
    resource = _reference(ref.api_version, ref.kind, ref.name, namespace, ref.uid)
    # What made the object (and makes it again): the entry's controller; bare pods of one
    # verdict share an entry, but not an owner.
    maker = entry.owner
    if maker is None and ref != head and head.kind not in _LEAF_KINDS:
        maker = head
    owner = maker.text if maker else ""
    # In a sentence, the name quoted (it is the tenant's: an owner reference may name
    # anything).
    owner_words = f"{maker.kind} {shown(maker.name)}" if maker else ""
    base = {"verdict": v.status, **({"owner": owner} if owner else {})}

    def result(outcome: str, message: str, rule: str = "", **props: str) -> dict[str, Any]:
        return _result(
            policy,
            rule=rule,
            outcome=outcome,
            message=_relabel(message, head, ref),
            resource=resource,
            properties={**base, **props},
        )

    out: list[dict[str, Any]] = []
    by_rule: dict[str, list[auditing.Refusal]] = {}
    for f in v.refusals:
        by_rule.setdefault(f.rule, []).append(f)
    for rule, found in by_rule.items():
        modes = list(dict.fromkeys(f.mode for f in found))
        enforced = names.ENFORCE in modes
        message = "; ".join(dict.fromkeys(f.message for f in found))
        if not enforced:
            message += (
                f" (rule {rule} is in {modes[0]} mode today: admitted now, refused once enforced)"
            )
        containers = ",".join(dict.fromkeys(f.container for f in found if f.container))
        props = {"mode": ",".join(modes), **({"containers": containers} if containers else {})}
        out.append(result(FAIL if enforced else WARN, message, rule, **props))
    if v.status == auditing.CHANGED:
        rule_adds = dict(v.rule_adds)
        # Only the webhook's record of what it did (the namespace's policy changed, say):
        # the change of rule `annotations`.
        changes = v.mutations or ((rules.ANNOTATIONS, names.ENFORCE),)
        for rule, mode in changes:
            adds = "; ".join(rule_adds.get(rule, ()) or (v.adds if not v.mutations else ()))
            adds = adds or (_RULES[rule].summary if rule in _RULES else rule)
            live = ref.kind in _LIVE_KINDS
            if mode == names.DRY_RUN:
                made = "it was" if live else "what this makes is"
                message = f"rule {rule} is in dry-run mode today: {made} created without {adds}"
                out.append(result(WARN, message, rule, mode=mode))
            elif live:
                if ref.kind != auditing.POD_KIND:
                    again = "a claim cannot change: make it again to get it"
                elif owner_words:
                    again = f"delete it, and {owner_words} makes it again with it"
                else:
                    again = "make it again to get it"
                message = f"created without what rule {rule} adds now ({adds}); {again}"
                out.append(result(WARN, message, rule, mode=mode))
            else:
                message = f"the webhook adds to what this makes: {adds}"
                out.append(result(PASS, message, rule, mode=mode))
    elif v.status == auditing.UNTOUCHED:
        why = f": {v.unchanged}" if v.unchanged else ""
        out.append(result(PASS, f"admitted as it is{why}"))
    if v.warnings:
        out.append(result(WARN, "; ".join(v.warnings), WARNINGS_RULE))
    return out


def _malformed_result(
    ref: auditing.Ref, violation: Violation, namespace: str, policy: str
) -> dict[str, Any]:
    """An object with a shape no Kubernetes object has (the API server would not have stored
    it; an object of a CRD's older version might): not judged, and said so."""
    return _result(
        policy,
        rule=violation.rule,
        outcome=ERROR,
        message=f"not judged: {violation.message}",
        resource=_reference(ref.api_version, ref.kind, ref.name, namespace, ref.uid),
        properties={"verdict": "not-judged"},
    )


def _namespace_result(ns: auditing.NamespaceReport) -> dict[str, Any] | None:
    """The cluster report's result on one Namespace: only those whose labels opt them in."""
    if not ns.opted_in or not ns.in_files:
        return None
    resource = _reference("v1", auditing.NAMESPACE_KIND, ns.name, None, ns.uid)
    policy = ns.policy or ns.labelled_policy or names.DEFAULT_POLICY
    if ns.status != auditing.JUDGED:
        return _result(
            policy,
            outcome=SKIP,
            message=f"opted in, but {ns.reason}",
            resource=resource,
            properties={"status": ns.status},
        )
    props = {
        "mode": str(ns.mode),
        "podSecurity": ns.pod_security or "",
        "hostAccess": ns.host_access or "",
    }
    if not ns.in_force:
        return _result(
            policy,
            rule=names.UNKNOWN_POLICY_RULE,
            outcome=FAIL,
            message=ns.reason,
            resource=resource,
            properties=props,
        )
    if ns.host_access == auditing.OFF and not ns.pod_security_enforced:
        message = (
            f"{ns.host_access_reason}: nothing judges host access (privileged, host"
            " namespaces, hostPath, capabilities) there beyond the GPU rules; enforce Pod"
            f" Security baseline or switch {rules.HOST_ACCESS.name} on"
        )
        return _result(
            policy,
            rule=rules.HOST_ACCESS.name,
            outcome=WARN,
            message=message,
            resource=resource,
            properties=props,
        )
    message = f"reviewed by policy {shown(policy)} in mode {ns.mode} ({ns.reason});"
    message += f" {ns.host_access_reason}"
    return _result(policy, outcome=PASS, message=message, resource=resource, properties=props)


def _result(
    policy: str,
    *,
    rule: str = "",
    outcome: str,
    message: str,
    resource: dict[str, str],
    properties: Mapping[str, str],
) -> dict[str, Any]:
    out: dict[str, Any] = {"source": SOURCE, "policy": policy}
    if rule:
        out["rule"] = rule
    if rule in (WARNINGS_RULE, rules.ANNOTATIONS):
        out["category"] = WARNINGS_CATEGORY if rule == WARNINGS_RULE else ADMITTED_CATEGORY
        if outcome != PASS:
            out["severity"] = LOW
    elif outcome in (FAIL, WARN, ERROR):
        guards = concern(rule)
        out["category"], out["severity"] = guards.category, guards.severity
    elif outcome == PASS and rule:
        out["category"] = concern(rule).category
    else:
        out["category"] = OPT_IN_CATEGORY if resource["kind"] == "Namespace" else ADMITTED_CATEGORY
    out["result"] = outcome
    out["scored"] = True
    out["message"] = _text(message)
    out["resources"] = [resource]
    out["properties"] = {k: _text(v) for k, v in properties.items() if v}
    return out


def _reference(
    api_version: str, kind: str, name: str, namespace: str | None, uid: str
) -> dict[str, str]:
    out = {"apiVersion": api_version, "kind": kind, "name": name}
    if namespace:
        out["namespace"] = namespace
    if uid:
        out["uid"] = uid
    return out


def _relabel(message: str, head: auditing.Ref, ref: auditing.Ref) -> str:
    """A claim's messages start with its own name (`claim "x-gpu-1" request ...`); the
    claims of one entry share the head's messages."""
    if ref is head or ref.kind not in auditing.CLAIM_KINDS:
        return message
    label = auditing.claim_words(head.kind, head.name)
    own = auditing.claim_words(ref.kind, ref.name)
    return own + message[len(label) :] if message.startswith(label) else message


def _text(text: str) -> str:
    """Text of an object in a result: printable (`decisions.printable`: no terminal escapes,
    bidi overrides or newlines from a tenant's values), no character beyond the BMP (written
    `\\U0001f680`: the client sends the report through json.dumps, which writes those as
    UTF-16 surrogate escapes that the API server's YAML reader refuses), and cut at
    MESSAGE_CHARS."""
    text = printable(text)
    if not text.isascii():
        text = "".join(c if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}" for c in text)
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


# --------------------------------------------------------------------------- reports


def _reports(
    api: ReportApi,
    per_object: Iterable[list[dict[str, Any]]],
    *,
    namespace: str | None,
    scope: dict[str, str] | None,
    now: int,
    kept: Mapping[Identity, Stamp],
) -> Iterator[dict[str, Any]]:
    """The reports of one namespace (or of the cluster: `namespace` None), each as soon as
    it is full, the results of one object never split between two."""
    part: list[dict[str, Any]] = []
    parts = size = 0
    for results in per_object:
        if not results:
            continue
        for r in results:
            seconds, nanos = kept.get(_identity(r)) or (now, 0)
            # Kept only if it could be a run's: after the epoch, not after now (whoever may
            # write reports could have dated a finding in the year 2100).
            if not 0 < seconds <= now:
                seconds, nanos = now, 0
            r["timestamp"] = {"seconds": seconds, "nanos": nanos}
        grow = sum(len(orjson.dumps(r)) + 1 for r in results)  # and a comma
        if part and size + grow > REPORT_BYTES:
            parts += 1
            yield _report(api, part, parts, namespace=namespace, scope=scope)
            part, size = [], 0
        part.extend(results)
        size += grow
    if part:
        yield _report(api, part, parts + 1, namespace=namespace, scope=scope)


def _report(
    api: ReportApi,
    results: list[dict[str, Any]],
    number: int,
    *,
    namespace: str | None,
    scope: dict[str, str] | None,
) -> dict[str, Any]:
    """Part `number` (1, 2, ...) of the reports of a namespace, or of the cluster."""
    meta: dict[str, Any] = {"name": REPORT_NAME if number == 1 else f"{REPORT_NAME}-{number}"}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = {MANAGED_BY_LABEL: FIELD_MANAGER}
    obj: dict[str, Any] = {
        "apiVersion": api.api_version,
        "kind": api.kind if namespace is not None else api.cluster_kind,
        "metadata": meta,
    }
    if api.report_source:
        obj["source"] = SOURCE
    if scope is not None:
        obj["scope"] = scope
    obj["summary"] = {k: sum(r["result"] == k for r in results) for k in RESULTS}
    obj["results"] = results
    return obj


def _identity(result: Mapping[str, Any]) -> Identity:
    """What makes two results the same finding: the object (its uid when it has one: a
    Pod made again under the same name is another object), the rule, the outcome and the
    message."""
    resources = result.get("resources")
    first = resources[0] if isinstance(resources, list) and resources else {}
    first = first if isinstance(first, dict) else {}

    def text(value: object) -> str | None:
        # Strings only: a report in the cluster is whatever whoever may write it wrote.
        return value if isinstance(value, str) else None

    found = (
        text(first.get("uid"))
        or (text(first.get("kind")), text(first.get("namespace")), text(first.get("name"))),
        text(result.get("policy")),
        text(result.get("rule")),
        text(result.get("result")),
        text(result.get("message")),
    )
    return hashlib.blake2b(orjson.dumps(found), digest_size=16).digest()


def timestamps(previous: Iterable[Mapping[str, Any]]) -> dict[Identity, Stamp]:
    """The timestamp of each result of `previous` (reports), by what makes it the same
    finding (`_identity`)."""
    kept: dict[Identity, Stamp] = {}
    for obj in previous:
        results = obj.get("results")
        for r in results if isinstance(results, list) else ():
            if not isinstance(r, dict):
                continue
            stamp = r.get("timestamp")
            if (
                isinstance(stamp, dict)
                and type(stamp.get("seconds")) is int  # not a bool
                and type(stamp.get("nanos")) is int
                and 0 <= stamp["nanos"] < 1_000_000_000
            ):
                kept[_identity(r)] = (stamp["seconds"], stamp["nanos"])
    return kept
