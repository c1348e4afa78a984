"""`gpu-share-webhook audit`: what the webhook would refuse or change in a cluster as it
stands, per namespace: from files (`-f`, no cluster access) or from the cluster itself
(`--cluster`), printed for people, as JSON, or as policy reports, which `--write-reports`
writes into the cluster.

Make the files with

    kubectl get namespaces -o json > namespaces.json
    kubectl get -A -o json > workloads.json \\
        pods,deployments,statefulsets,daemonsets,jobs,cronjobs,replicasets,replicationcontrollers,resourceclaims,resourceclaimtemplates

(JSON or YAML, `kind: List`, the API's own lists such as PodList, or single objects, JSON
ones also one after another; several files, `-` for standard input; add the kinds of the
WorkloadKinds file, e.g. jobsets, to the second command; on a cluster before
Kubernetes 1.34, which serves no resource.k8s.io/v1, leave out the claims). `--cluster`
lists the same kinds through the API instead (paged; the kubeconfig, or the pod's service
account in a CronJob), with list rights only. Each namespace's
labels pick its policy exactly as the rendered webhook configurations do: kube-system, the
webhook's own namespace and namespaces that have not opted in are never reviewed. Every Pod
is judged as the webhook would judge it if it were created now, every workload as the pods
it makes, every ResourceClaim and ResourceClaimTemplate against the policy's dra section;
objects of one controller with the same verdict are one entry. A refusal is what
the policy refuses in enforce mode, with the mode its rule is in today (warn or dry-run
admit it today).

`-o policyreport` prints wgpolicyk8s.io/v1alpha2 PolicyReports (one per reviewed namespace
with objects) and a ClusterPolicyReport (one result per opted-in Namespace), `-o
openreports` the same as openreports.io/v1alpha1 Reports and a ClusterReport, as one v1
List; with `--cluster --write-reports` they are written instead (server-side apply;
unchanged ones are left alone, those of earlier runs that this one does not make are
deleted).

Exit 0: nothing would be refused (or, with --write-reports, the reports were written);
1: something would be refused, whatever mode its rule is in today; 2: bad input or usage;
3: the Kubernetes API could not be read or written (one line on standard error each).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from webhook.engine.decision import printable
from webhook.errors import InputError, PolicyError
from webhook.policy import kinds, names, policies
from webhook.tools import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    FLAG,
    OPTIONAL_TEXT,
    TEXT,
    Append,
    add_policies_argument,
    add_webhook_namespace_argument,
    add_workload_kinds_argument,
    auditing,
    env_name,
    from_env,
    help_text,
    manifests,
    namespace_name,
    policies_directory,
    rendering,
    reporting,
    separated,
    whole_number,
)

if TYPE_CHECKING:
    from webhook.tools import cluster

# Not GPU_SHARE_WEBHOOK_OUTPUT: `mutate -o` reads that one, with other formats.
FILES_OPTION = "audit-files"
OUTPUT_OPTION = "audit-output"
SHOW_OPTION = "audit-show"
OUTPUTS = ("text", "json", *reporting.APIS)
CLUSTER_OPTION = "audit-cluster"
WRITE_OPTION = "audit-write-reports"
PAGE_SIZE_OPTION = "audit-page-size"
DEFAULT_PAGE_SIZE = 500  # objects per list request with --cluster
CONTEXT_OPTION = "audit-context"
KUBECONFIG_OPTION = "kubeconfig"
EXCLUDE_OPTION = "audit-exclude-namespaces"
# The Kubernetes API could not be read or written (`--cluster`).
EXIT_CLUSTER = 3
# What the report lists (counts always cover every object).
SHOWS = ("refused", "changed", "all")
REPORT_KIND = "AuditReport"
REPORT_API_VERSION = "gpu-share.io/v1alpha1"

_LISTED = {
    "refused": (auditing.REFUSED,),
    "changed": (auditing.REFUSED, auditing.CHANGED),
    "all": auditing.VERDICTS,
}
_TODAY = {names.WARN: "warn today", names.DRY_RUN: "dry-run today"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="what the webhook would refuse or change among the objects of a cluster (a dump, or"
        " the cluster itself), as text, JSON or policy reports",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-f",
        "--filename",
        action=Append,
        metavar="FILE",
        default=from_env(FILES_OPTION, [], separated(os.pathsep, TEXT)),
        help=help_text(
            "a dump: JSON or YAML, - for standard input; repeatable, and the Namespaces must"
            " be in one of them",
            FILES_OPTION,
            "none",
            separator=os.pathsep,
        ),
    )
    add_policies_argument(parser, "directory of policy files")
    add_workload_kinds_argument(parser)
    add_webhook_namespace_argument(parser)
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default=from_env(OUTPUT_OPTION, "text"),
        help=help_text(
            "text (a report per namespace and a summary table), json, policyreport"
            " (wgpolicyk8s.io/v1alpha2 reports) or openreports (openreports.io/v1alpha1)",
            OUTPUT_OPTION,
        ),
    )
    parser.add_argument(
        "--show",
        choices=SHOWS,
        default=from_env(SHOW_OPTION, "changed"),
        help=help_text(
            "the objects listed: refused; changed (refused and changed); all (untouched too)."
            " Objects with warnings (near misses) are listed whatever it says."
            " Counts always cover every object",
            SHOW_OPTION,
        ),
    )
    parser.add_argument(
        "--exclude-namespace",
        action=Append,
        metavar="NAME",
        dest="exclude_namespaces",
        type=namespace_name(),
        default=from_env(EXCLUDE_OPTION, [], separated(",", namespace_name())),
        help=help_text(
            "a namespace the webhook configurations leave out besides kube-system and the"
            " webhook's own (the chart's webhook.excludedNamespaces); repeatable",
            EXCLUDE_OPTION,
            "none",
            separator=",",
        ),
    )
    parser.add_argument(
        "--cluster",
        action=argparse.BooleanOptionalAction,
        default=from_env(CLUSTER_OPTION, False, FLAG),
        help=help_text(
            "read the objects from the Kubernetes API (list rights on the audited kinds)"
            " instead of -f files",
            CLUSTER_OPTION,
        ),
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        type=OPTIONAL_TEXT,
        default=from_env(KUBECONFIG_OPTION, None),
        help=help_text(
            "kubeconfig for --cluster",
            KUBECONFIG_OPTION,
            "the pod's service account, else $KUBECONFIG or ~/.kube/config",
        ),
    )
    parser.add_argument(
        "--context",
        metavar="NAME",
        type=OPTIONAL_TEXT,
        default=from_env(CONTEXT_OPTION, None),
        help=help_text("the kubeconfig's context for --cluster", CONTEXT_OPTION, "its current one"),
    )
    parser.add_argument(
        "--page-size",
        metavar="N",
        type=whole_number(1, 10_000),
        default=from_env(PAGE_SIZE_OPTION, DEFAULT_PAGE_SIZE),
        help=help_text("objects per list request with --cluster", PAGE_SIZE_OPTION),
    )
    parser.add_argument(
        "--write-reports",
        action=argparse.BooleanOptionalAction,
        default=from_env(WRITE_OPTION, False, FLAG),
        help=help_text(
            "with --cluster and -o policyreport or openreports: write the reports into the"
            " cluster (server-side apply) and delete those of earlier runs it no longer"
            " makes, instead of printing them",
            WRITE_OPTION,
        ),
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # A run reads a cluster's worth of small objects and keeps them to its end, making few
    # cycles: the cyclic collector's passes over them cost some 45% of a large run's CPU
    # (bench/audit_cluster.py: 10.5 s against 5.8 s at 50,000 pods, the same peak memory)
    # and free nothing. Reference counting still frees everything else.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run(args)
    finally:
        if was_enabled:
            gc.enable()


def _run(args: argparse.Namespace) -> int:
    files: list[str] = args.filename
    problem = _usage_problem(
        files, cluster=args.cluster, write=args.write_reports, output=args.output
    )
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    sources = files if not args.cluster else ["the cluster"]
    try:
        loaded = policies.load_directory(policies_directory(args.policies)[0])
        workload_kinds = kinds.all_kinds(Path(args.workload_kinds) if args.workload_kinds else None)
        if not args.cluster:
            objects = read_objects(*files)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PolicyError as exc:
        _error(exc.problems[0], len(exc.problems) - 1, "more: run `gpu-share-webhook policy check`")
        return EXIT_USAGE
    try:
        where = rendering.routes(loaded, webhook_namespace=args.webhook_namespace)
    except ValueError as exc:
        print(f"error: --webhook-namespace: {exc}", file=sys.stderr)
        return EXIT_USAGE
    api_client = None
    previous: list[cluster.Existing] = []
    if args.cluster:
        # The Kubernetes client takes half a second to import: only --cluster needs it.
        from webhook.tools import cluster  # noqa: PLC0415

        try:
            api_client = cluster.connect(args.kubeconfig, args.context)
            excluded = frozenset(args.exclude_namespaces)
            found = cluster.read(
                api_client,
                cluster.resources(workload_kinds),
                page_size=args.page_size,
                reviewed=lambda found: _reviewed(found, where, excluded),
            )
            _notes(found)
            if args.write_reports:
                previous = cluster.existing_reports(
                    api_client, reporting.APIS[args.output], page_size=args.page_size
                )
        except cluster.ClusterError as exc:
            _close(api_client)
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_CLUSTER
        objects = found.objects
    report = auditing.audit(
        objects,
        policies=loaded,
        kinds=workload_kinds,
        where=where,
        excluded=frozenset(args.exclude_namespaces),
    )
    if args.cluster:
        try:
            return _cluster_output(args, report, api_client, previous)
        finally:
            _close(api_client)
    if not report.namespaces_found:
        print(
            f"error: no Namespace object in {', '.join(files)}: the audit reads each"
            " namespace's labels; add the output of `kubectl get namespaces -o json`",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if not report.total("objects"):
        # An empty dump (a `kubectl get` that failed in CI, say) must not pass as "nothing
        # would be refused".
        print(
            f"error: no pod or workload in {', '.join(files)}, and no claim: nothing to audit;"
            " add the output of `kubectl get -A -o json pods,deployments,statefulsets,"
            "daemonsets,jobs,cronjobs,replicasets,replicationcontrollers,resourceclaims,"
            "resourceclaimtemplates`",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if report.malformed:
        ns, ref, violation = report.malformed[0]
        _error(
            f"{ns}/{ref.text}: {violation.message}",
            len(report.malformed) - 1,
            "more malformed objects",
        )
        return EXIT_USAGE
    _warn(report)
    return _print(args, report, sources)


def _print(args: argparse.Namespace, report: auditing.Report, sources: Sequence[str]) -> int:
    listed = _LISTED[args.show]
    if args.output in reporting.APIS:
        items = reporting.build(report, reporting.APIS[args.output], now=_now())
        doc = reporting.as_list(items)
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif args.output == "json":
        doc = as_json(
            report, files=sources, listed=listed, webhook_namespace=args.webhook_namespace
        )
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(as_text(report, listed=listed))
    return EXIT_FAILED if report.refused else EXIT_OK


def _cluster_output(
    args: argparse.Namespace,
    report: auditing.Report,
    api_client: Any,
    previous: list[cluster.Existing],
) -> int:
    """What `--cluster` prints or writes: a cluster has Namespaces, and may have nothing to
    audit (not an error there, unlike an empty dump: the reports say so)."""
    if report.malformed:
        # The API server would not hold such an object; tell, and judge the others.
        for ns, ref, violation in report.malformed[:10]:
            print(f"warning: {ns}/{ref.text} not judged: {violation.message}", file=sys.stderr)
    _warn(report, cluster_read=True)
    if not args.write_reports:
        return _print(args, report, ["the cluster"])
    api = reporting.APIS[args.output]
    kept = {k: v for old in previous for k, v in old.stamps.items()}
    items = reporting.iter_reports(report, api, now=_now(), kept=kept)
    from webhook.tools import cluster  # noqa: PLC0415 - as above

    try:
        done = cluster.write_reports(api_client, api, items, previous)
    except cluster.ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CLUSTER
    sys.stdout.write(_written_text(api, done, report))
    if done.failed:
        _error(done.failed[0], len(done.failed) - 1, "more reports not written or deleted")
        return EXIT_CLUSTER
    return EXIT_OK


def _written_text(api: reporting.ReportApi, done: cluster.Written, report: auditing.Report) -> str:
    kinds_written = f"{api.kind} and {api.cluster_kind} ({api.api_version})"
    lines = [
        f"{kinds_written}: {len(done.created)} created, {len(done.updated)} updated,"
        f" {len(done.unchanged)} unchanged, {len(done.deleted)} deleted",
    ]
    if done.skipped:
        lines[0] += f", {len(done.skipped)} skipped"
    if done.failed:
        lines[0] += f", {len(done.failed)} failed"
    for title, listed in (
        ("created", done.created),
        ("updated", done.updated),
        ("deleted", done.deleted),
        ("skipped", done.skipped),
    ):
        if listed:
            more = f" and {len(listed) - 20} more" if len(listed) > 20 else ""
            lines.append(f"  {title}: {', '.join(listed[:20])}{more}")
    refused = report.refused
    lines.append(
        f"Audited {_objects(report.total('objects'))}: {refused:,} would be refused"
        f", {report.total(auditing.CHANGED):,} changed."
    )
    return "\n".join(printable(line) for line in lines) + "\n"


def _error(first: str, more: int, what_more: str) -> None:
    """The first of several problems, on one line of standard error, and how many more."""
    print(f"error: {first}" + (f" (and {more} {what_more})" if more else ""), file=sys.stderr)


def _now() -> int:
    """Seconds since the epoch: the timestamp of results that are new."""
    return int(time.time())


def _reviewed(
    namespaces: Sequence[Mapping[str, Any]], where: rendering.Routes, excluded: frozenset[str]
) -> set[str]:
    """The names of the namespaces the webhook reviews, among these Namespace objects."""
    out = set()
    for ns in namespaces:
        meta = ns.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        name, labels = meta.get("name"), meta.get("labels")
        if not isinstance(name, str) or name in excluded:
            continue
        labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
        if auditing.selected_path(where, name, labels) is not None:
            out.add(name)
    return out


def _notes(found: cluster.Read) -> None:
    """What was read, and what the cluster did not give to judge: kinds it does not serve,
    finished pods."""
    objects = sum(n for n, _ in found.counts.values())
    requests = sum(calls for _, calls in found.counts.values())
    print(
        f"note: read {_objects(objects)} of {len(found.counts)} kinds in {requests:,}"
        f" list request{'s' if requests != 1 else ''}",
        file=sys.stderr,
    )
    for note in found.notes:
        print(f"note: {note}", file=sys.stderr)
    if found.finished:
        print(
            f"note: {found.finished:,} finished pod{'s' if found.finished != 1 else ''}"
            " (phase Succeeded or Failed) not audited: they run nothing and hold no GPU",
            file=sys.stderr,
        )


def _close(api_client: Any) -> None:
    if api_client is not None:
        api_client.close()


def _usage_problem(files: Sequence[str], *, cluster: bool, write: bool, output: str) -> str:
    if cluster and files:
        return "--cluster reads the cluster: leave out -f"
    if write and not cluster:
        return "--write-reports needs --cluster (it writes the reports into that cluster)"
    if write and output not in reporting.APIS:
        return "--write-reports needs -o policyreport or -o openreports (the reports' API)"
    if cluster:
        return ""
    if not files:
        return (
            f"audit needs -f FILE (or {env_name(FILES_OPTION)}): the output of `kubectl get"
            " namespaces -o json` and of `kubectl get pods,deployments,... -A -o json`;"
            " or --cluster"
        )
    if list(files).count("-") > 1:
        return "-f -: standard input can be read only once"
    return ""


# --------------------------------------------------------------------------- input


def read_objects(*paths: str) -> list[dict[str, Any]]:
    """The objects of the dump files (`manifests.read`): the step bench/audit.py times."""
    return manifests.read(paths)


def _warn(report: auditing.Report, *, cluster_read: bool = False) -> None:
    unknown = [ns for ns in report.namespaces if ns.status == auditing.NOT_IN_FILES]
    if unknown:
        count = sum(ns.objects for ns in unknown)
        shown = ", ".join(ns.name or "(no namespace)" for ns in unknown[:10])
        more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        fix = (
            "their namespace was made after the Namespaces were listed; the next run judges them"
            if cluster_read
            else "add them to the files"
        )
        print(
            f"warning: {_objects(count)} not judged: no Namespace object for {shown}{more}"
            f" (their labels pick the policy); {fix}",
            file=sys.stderr,
        )
    if report.other_claim_versions:
        count = sum(report.other_claim_versions.values())
        print(
            f"warning: {_objects(count)} of"
            f" {', '.join(sorted(report.other_claim_versions))} not judged: the webhook is sent"
            f" claims as {auditing.CLAIM_API_VERSION} only (Kubernetes 1.34+); counted as"
            " ignored",
            file=sys.stderr,
        )
    if report.duplicates:
        print(
            f"warning: {_objects(report.duplicates)} found more than once; the last one counts",
            file=sys.stderr,
        )


# --------------------------------------------------------------------------- text


def as_text(report: auditing.Report, *, listed: Sequence[str]) -> str:
    """The report for people: each namespace, then a summary table and the verdict."""
    out: list[str] = []
    for ns in report.namespaces:
        if ns.status == auditing.JUDGED:
            out += _namespace_text(ns, listed)
        elif ns.status == auditing.NOT_IN_FILES:
            out += [
                f"namespace {ns.name or '(no namespace)'}: {ns.reason}",
                f"  not judged: {_objects(ns.objects)}",
                "",
            ]
        elif ns.objects:  # an empty namespace the webhook never sees: nothing to say
            out += [f"namespace {ns.name}: {ns.reason}; {_objects(ns.objects)} untouched", ""]
    out += _without_pod_security_text(report)
    out += _table(report)
    out.append("")
    ignored = sum(report.ignored.values())
    if ignored:
        kinds_seen = ", ".join(k for k, _ in report.ignored.most_common(5))
        out.append(
            f"Ignored: {_objects(ignored)} of kinds the webhook never reviews"
            f" ({kinds_seen}{', ...' if len(report.ignored) > 5 else ''})."
        )
    warned = sum(e.count for ns in report.namespaces for e in ns.entries if e.verdict.warnings)
    if warned:
        out.append(
            f"Warnings: {_objects(warned)} (listed above with !): near misses, and what"
            " `kubectl apply` would print."
        )
    refused = report.refused
    if refused:
        relaxed = sum(
            e.count
            for ns in report.namespaces
            for e in ns.entries
            if e.verdict.status == auditing.REFUSED
            and all(f.mode != names.ENFORCE for f in e.verdict.refusals)
        )
        today = (
            f"; {relaxed:,} of them only by rules in warn or dry-run mode today" if relaxed else ""
        )
        out.append(f"Would be refused: {_objects(refused)}{today}. Fix them before enforcing.")
    else:
        out.append("Nothing would be refused.")
    # Each line printable: they echo names and values of the objects in the dump, which
    # may hold terminal escapes (`decisions.printable`).
    return "\n".join(printable(line) for line in out) + "\n"


def _namespace_text(ns: auditing.NamespaceReport, listed: Sequence[str]) -> list[str]:
    if ns.in_force:
        mode = f"mode {ns.mode}"
        if ns.rule_modes:
            mode += " (" + ", ".join(f"{r}: {m}" for r, m in sorted(ns.rule_modes.items())) + ")"
        head = f'namespace {ns.name}: policy "{ns.policy}" ({ns.reason}), {mode}'
    else:
        head = f"namespace {ns.name}: {ns.reason}"
    out = [head, f"  {ns.host_access_reason}"]
    if not ns.objects:
        out.append("  no pods, workloads or claims")
    for verdict in auditing.VERDICTS:
        count = ns.counts[verdict]
        if not count:
            continue
        title = {
            auditing.REFUSED: "would be refused",
            auditing.CHANGED: "would be changed",
            auditing.UNTOUCHED: "untouched",
        }[verdict]
        if verdict not in listed:
            wider = "changed" if verdict == auditing.CHANGED else "all"
            out.append(f"  {title}: {_objects(count)} (--show {wider} lists them)")
            # ...but those with warnings (near misses: a typo that leaves a pod untouched)
            # are listed whatever --show says.
            for entry in ns.entries:
                if entry.verdict.status == verdict and entry.verdict.warnings:
                    out += _entry_text(entry)
            continue
        out.append(f"  {title}: {_objects(count)}")
        for entry in ns.entries:
            if entry.verdict.status == verdict:
                out += _entry_text(entry)
    out.append("")
    return out


def _entry_text(entry: auditing.Entry) -> list[str]:
    v = entry.verdict
    line = f"    {_who(entry)}"
    if entry.note:
        line += f" ({entry.note})"
    if v.mutations:
        line += ": " + _mutations(v.mutations)
    elif v.unchanged:
        line += f": {v.unchanged}"
    out = [line]
    for f in v.refusals:
        today = f" ({_TODAY[f.mode]})" if f.mode in _TODAY else ""
        out.append(f"      - {f.rule}{today}: {f.message}")
    adds = [add for add in v.adds if not add.startswith("annotations: ")] or list(v.adds)
    out += [f"      + {add}" for add in adds]
    out += [f"      ! {w}" for w in v.warnings]
    return out


# The heading of the section that lists them.
WITHOUT_POD_SECURITY = (
    f"Opted-in namespaces without Pod Security baseline: {auditing.HOST_ACCESS} applies"
)


def _without_pod_security_text(report: auditing.Report) -> list[str]:
    """The opted-in namespaces that do not enforce Pod Security baseline or restricted (or
    whose policy does not trust the label), each with what rule host-access would refuse."""
    if not any(ns.status == auditing.JUDGED for ns in report.namespaces):
        return []
    listed = report.without_pod_security
    if not listed:
        return [
            "Every opted-in namespace enforces Pod Security baseline or restricted:"
            f" {auditing.HOST_ACCESS} leaves its checks to it.",
            "",
        ]
    out = [WITHOUT_POD_SECURITY]
    for ns in listed:
        line = f"  {ns.name} ({ns.pod_security_label})"
        if ns.host_access == auditing.OFF:
            out.append(f"{line}: {ns.host_access_reason}")
            continue
        if ns.pod_security_enforced:  # a label the policy does not trust
            line += ", not trusted (hostAccess.trustPodSecurity: false)"
        entries = ns.host_access_entries()
        if not entries:
            out.append(f"{line}: {auditing.HOST_ACCESS} would refuse nothing there")
            continue
        refused = _objects(ns.host_access_refused)
        out.append(f"{line}: {auditing.HOST_ACCESS} would refuse {refused}")
        for entry in entries:
            out += _entry_text(entry)
    out.append("")
    return out


def _mutations(mutations: Sequence[tuple[str, str]]) -> str:
    """`runtime-class, visible-devices`; a rule in dry-run today adds nothing yet."""
    later = " (dry-run today: not added yet)"
    if all(mode == names.DRY_RUN for _, mode in mutations):
        return ", ".join(rule for rule, _ in mutations) + later
    return ", ".join(rule + (later if mode == names.DRY_RUN else "") for rule, mode in mutations)


def _who(entry: auditing.Entry) -> str:
    """`Deployment/web with ReplicaSet/web-7c9 and 300 pods`, `Pod/web-x and 2 more pods of
    Deployment/web`, `Pod/a, Pod/b and Pod/c`, `ResourceClaim/web-x-gpu-4k2p9 and 2 more
    claims of Deployment/web`."""
    of = f" of {entry.owner.text}" if entry.owner else ""
    kind = entry.subject.kind
    if kind in (auditing.POD_KIND, *auditing.CLAIM_KINDS) and all(
        m.kind == kind for m in entry.members
    ):
        named = [entry.subject.text, *(m.text for m in entry.members)]
        if len(named) <= _NAMED:
            return _and(named) + of
        return f"{entry.subject.text} and {len(entry.members):,} more {_plural(kind)}{of}"
    counts = Counter(m.kind for m in entry.members)
    parts = []
    for kind, n in sorted(counts.items(), key=lambda kn: auditing.kind_rank(kn[0])):
        if n == 1:
            parts.append(next(m.text for m in entry.members if m.kind == kind))
        else:
            parts.append(f"{n:,} {_plural(kind)}")
    if not parts:
        return entry.subject.text + of
    return f"{entry.subject.text}{of} with {_and(parts)}"


def _and(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


# The pods of an entry are named up to this many; beyond, counted.
_NAMED = 3


_PLURALS = {
    auditing.POD_KIND: "pods",
    names.CLAIM_KIND: "claims",
    names.CLAIM_TEMPLATE_KIND: "claim templates",
}


def _plural(kind: str) -> str:
    return _PLURALS.get(kind, kind + "s")


def _objects(n: int) -> str:
    return f"{n:,} object{'s' if n != 1 else ''}"


def _table(report: auditing.Report) -> list[str]:
    header = ("NAMESPACE", "POLICY", "MODE", "OBJECTS", "REFUSED", "CHANGED", "UNTOUCHED")
    rows: list[tuple[str, ...]] = []
    for ns in report.namespaces:
        if ns.status != auditing.JUDGED and not ns.objects:
            continue
        if ns.status == auditing.JUDGED:
            policy = str(ns.policy) if ns.in_force else f"{ns.policy} (no such policy)"
            counts = tuple(f"{ns.counts[v]:,}" for v in auditing.VERDICTS)
            rows.append((ns.name, policy, str(ns.mode), f"{ns.objects:,}", *counts))
            continue
        policy = {
            auditing.NOT_OPTED_IN: "(not opted in)",
            auditing.EXCLUDED: "(never reviewed)",
            auditing.NOT_IN_FILES: "(not in files)",
        }[ns.status]
        untouched = f"{ns.counts[auditing.UNTOUCHED]:,}" if ns.in_files else "-"
        rows.append((ns.name or "(none)", policy, "-", f"{ns.objects:,}", "-", "-", untouched))
    totals = tuple(f"{report.total(v):,}" for v in auditing.VERDICTS)
    rows.append(("TOTAL", "", "", f"{report.total('objects'):,}", *totals))
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [
            cell.ljust(w) if i < 3 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return ["Summary", line(header), *(line(r) for r in rows)]


# --------------------------------------------------------------------------- json


def as_json(
    report: auditing.Report,
    *,
    files: Sequence[str],
    listed: Sequence[str],
    webhook_namespace: str,
) -> dict[str, Any]:
    """The report for machines: a stable structure (docs/audit.md describes it)."""
    return {
        "apiVersion": REPORT_API_VERSION,
        "kind": REPORT_KIND,
        "files": list(files),
        "webhookNamespace": webhook_namespace,
        "totals": {
            "objects": report.total("objects"),
            "refused": report.total(auditing.REFUSED),
            "changed": report.total(auditing.CHANGED),
            "untouched": report.total(auditing.UNTOUCHED),
            "notJudged": report.total(auditing.NOT_IN_FILES),
            "ignored": sum(report.ignored.values()),
            "duplicates": report.duplicates,
        },
        "namespaces": [_namespace_json(ns, listed) for ns in report.namespaces],
        "withoutPodSecurityBaseline": [
            {
                "namespace": ns.name,
                "podSecurity": ns.pod_security,
                "policy": ns.policy,
                "hostAccess": ns.host_access,
                "reason": ns.host_access_reason,
                "refused": ns.host_access_refused,
                "objects": [_entry_json(e) for e in ns.host_access_entries()],
            }
            for ns in report.without_pod_security
        ],
    }


def _namespace_json(ns: auditing.NamespaceReport, listed: Sequence[str]) -> dict[str, Any]:
    return {
        "name": ns.name,
        "status": ns.status,
        "reason": ns.reason,
        "policy": ns.policy,
        "policyInForce": ns.in_force,
        "mode": ns.mode,
        "ruleModes": dict(ns.rule_modes),
        "podSecurity": {
            "enforce": ns.pod_security,
            "baselineEnforced": ns.pod_security_enforced,
        },
        "hostAccess": ns.host_access,
        "counts": {
            "objects": ns.objects,
            "refused": ns.counts[auditing.REFUSED],
            "changed": ns.counts[auditing.CHANGED],
            "untouched": ns.counts[auditing.UNTOUCHED],
            "notJudged": ns.objects if ns.status == auditing.NOT_IN_FILES else 0,
        },
        "objects": [
            _entry_json(e) for e in ns.entries if e.verdict.status in listed or e.verdict.warnings
        ],
    }


def _entry_json(entry: auditing.Entry) -> dict[str, Any]:
    v = entry.verdict
    return {
        "verdict": v.status,
        "kind": entry.subject.kind,
        "apiVersion": entry.subject.api_version,
        "name": entry.subject.name,
        "owner": _ref_json(entry.owner) if entry.owner else None,
        "note": entry.note or None,
        "count": entry.count,
        "members": [_ref_json(m) for m in entry.members],
        "violations": [
            {
                "rule": f.rule,
                "container": f.container,
                "field": f.violation.place.at(f.violation.field),
                "type": f.violation.type.value,
                "mode": f.mode,
                "message": f.message,
            }
            for f in v.refusals
        ],
        "mutations": [{"rule": rule, "mode": mode} for rule, mode in v.mutations],
        "adds": list(v.adds),
        "warnings": list(v.warnings),
        "unchanged": v.unchanged,
    }


def _ref_json(ref: auditing.Ref) -> dict[str, str]:
    return {"kind": ref.kind, "name": ref.name}
