"""`gpu-share-webhook explain namespace NAME`: which webhook entry and which policy a
namespace's labels reach, and why.

The labels come from `-l KEY=VALUE` (repeatable) and from `-f FILE`, a `kubectl get namespace
NAME -o json` or a dump that holds it (`-l` wins); the API server's own name label
(`kubernetes.io/metadata.name: NAME`) is added as it adds it to every namespace. Unlike
`mutate`, nothing is assumed: a namespace without the opt-in label has not opted in.

The answer is the API server's: every entry of the configurations `render` makes for the
policies is matched against the labels by its `namespaceSelector` (matchLabels and
matchExpressions, as Kubernetes evaluates them), and the policy is the one the server applies
at the path of the entry that matched (`policies.PolicySet.governing`), so the unknown-policy
catch-all and the `/baseline` paths of namespaces that enforce Pod Security are told apart as
the server tells them.

Exit 0: the namespace is governed by a policy in force (its pods are reviewed by it);
1: it is not (it has not opted in, the configurations leave it out, or its policy label names
a policy that does not exist, so its GPU pods are refused); 2: bad input or usage.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from webhook.engine import namespaces, reviewing
from webhook.errors import InputError, PolicyError
from webhook.policy import kinds, names, policies
from webhook.tools import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_policies_argument,
    add_webhook_namespace_argument,
    checking,
    from_env,
    help_text,
    manifests,
    namespace_name,
    policies_directory,
    rendering,
)

# Not GPU_SHARE_WEBHOOK_OUTPUT: `mutate -o` and `render -o` have other formats.
OUTPUT_OPTION = "explain-output"
OUTPUTS = ("text", "json")

# The one value of the opt-in label the configurations select (`In ["true"]`).
OPT_IN_VALUE = "true"
# A label value as Kubernetes takes it (at most 63 characters).
_LABEL_VALUE = re.compile(names.LABEL_VALUE)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="which webhook entry and policy a namespace's labels reach, and why",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = parser.add_subparsers(dest="subject", metavar="SUBJECT")
    ns = what.add_parser(
        "namespace",
        help="which webhook entry and policy a namespace reaches",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ns.add_argument("name", metavar="NAME", type=namespace_name(), help="the namespace's name")
    ns.add_argument(
        "--label",
        "-l",
        action="append",
        metavar="K=V",
        help="a label of the namespace, repeatable (wins over the file's)",
    )
    ns.add_argument(
        "-f",
        "--filename",
        metavar="FILE",
        help="the namespace as JSON or YAML (`kubectl get namespace NAME -o json`) or a dump"
        " that holds it; - for standard input",
    )
    add_policies_argument(ns, "directory of policy files")
    add_webhook_namespace_argument(ns)
    ns.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default=from_env(OUTPUT_OPTION, "text"),
        help=help_text("text (a few lines) or json (for scripts)", OUTPUT_OPTION),
    )
    ns.set_defaults(func=run)
    parser.set_defaults(func=_no_subject(parser))


def _no_subject(parser: argparse.ArgumentParser) -> Any:
    def run(args: argparse.Namespace) -> int:
        print(f"{parser.prog}: error: say what to explain: namespace NAME", file=sys.stderr)
        return EXIT_USAGE

    return run


# --------------------------------------------------------------------------- the answer


@dataclass
class Explanation:
    """What `explain namespace` found; `governed` is the exit code's question."""

    namespace: str
    labels: dict[str, str]
    opted_in: bool
    governed: bool
    reason: str
    # The entries of each configuration that select the namespace (none or one each).
    mutating_entry: str | None = None
    validating_entry: str | None = None
    path: str | None = None
    policy: str | None = None
    policy_source: str | None = None
    # Where the policy name came from: the label, or its absence (the default).
    policy_from_label: bool = False
    pod_security: bool = False
    classes: list[dict[str, Any]] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)
    default_profile: str | None = None
    # What the policy's limits say, each in a line (none: none is set).
    limits: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    # What the server does with what each entry sends (`reviewing.route`): (endpoint,
    # resource, operation, in words), in the entries' order.
    reviews: list[tuple[str, str, str, str]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "labels": self.labels,
            "optedIn": self.opted_in,
            "governed": self.governed,
            "reason": self.reason,
            "entries": {"mutating": self.mutating_entry, "validating": self.validating_entry},
            "path": self.path,
            "policy": self.policy,
            "policySource": self.policy_source,
            "policyFromLabel": self.policy_from_label,
            "podSecurityEnforced": self.pod_security,
            "classes": self.classes,
            "profiles": self.profiles,
            "defaultProfile": self.default_profile,
            "limits": self.limits,
            "hints": self.hints,
            "reviews": [
                {"endpoint": e, "resource": r, "operation": o, "review": w}
                for e, r, o, w in self.reviews
            ],
        }


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector as the API server evaluates a namespaceSelector: every matchLabels
    pair and every matchExpressions requirement holds; an absent or empty one selects all."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(rendering.selector_holds(e, labels) for e in selector.get("matchExpressions") or ())


def _selecting(configuration: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    """The first entry of a configuration whose namespaceSelector selects `labels` (the
    rendered selectors are disjoint: there is at most one); {} when none does."""
    for entry in configuration["webhooks"]:
        if entry["name"] == rendering.NAMESPACE_ENTRY:
            continue  # it sends Namespace objects, not pods
        if selector_matches(entry.get("namespaceSelector"), labels):
            return dict(entry)
    return {}


def _entry_path(entry: Mapping[str, Any]) -> str:
    # "/validate/<name>" or "/validate/<name>/baseline": the policy path after the endpoint.
    return str(entry["clientConfig"]["service"]["path"]).split("/", 2)[2]


def _class(node_class: policies.NodeClass) -> dict[str, Any]:
    return {
        "name": node_class.name,
        "resource": node_class.advertised,
        "product": node_class.product,
        "strategy": node_class.strategy,
        "replicas": node_class.replicas,
        "gpusPerNode": node_class.gpus_per_node,
        "memoryMiB": node_class.memory_mib,
    }


def _reviews(
    endpoint: reviewing.Endpoint, entry: Mapping[str, Any], workload_kinds: Sequence[kinds.Kind]
) -> list[tuple[str, str, str, str]]:
    """What the server does with each resource and operation `entry` sends it: the routing
    of `reviewing.admit` (`reviewing.route`), asked as a request of that kind would ask it."""
    by_resource = {(k.group, k.resource): k.kind for k in workload_kinds}
    by_resource |= {
        ("", "pods"): "Pod",
        ("", "bindings"): "Binding",
        (names.DRA_GROUP, names.CLAIM_RESOURCES[0]): names.CLAIM_KIND,
        (names.DRA_GROUP, names.CLAIM_RESOURCES[1]): names.CLAIM_TEMPLATE_KIND,
    }
    out: list[tuple[str, str, str, str]] = []
    for rule in entry.get("rules") or ():
        for group in rule.get("apiGroups") or ():
            for resource in rule.get("resources") or ():
                base, _, sub_resource = str(resource).partition("/")
                kind = by_resource.get((group, base), "")
                if (group, base, sub_resource) == ("", "pods", reviewing.BINDING):
                    kind = "Binding"  # (the API server sends the Binding it is given)
                for operation in rule.get("operations") or ():
                    way = reviewing.route(
                        group,
                        kind,
                        operation,
                        sub_resource,
                        endpoint=endpoint,
                        kinds=kinds.kinds_by_name(workload_kinds),
                    )
                    out.append((endpoint, str(resource), str(operation), way.value))
    return out


def _near_misses(labels: Mapping[str, str], loaded: policies.PolicySet) -> list[str]:
    """What the labels may have meant: those of `namespaces.label_near_misses` (an opt-in
    value that looks like yes, a key close to one of the webhook's), an opt-in value the API
    server would not even take, and a policy name close to one that exists."""
    hints = namespaces.label_near_misses(labels)
    value = labels.get(names.ENABLED_LABEL)
    if value is not None and (
        not _LABEL_VALUE.fullmatch(value) or len(value) > names.MAX_LABEL_LENGTH
    ):
        hints.append(
            f"{names.ENABLED_LABEL}={value!r} is not a valid label value: the API server"
            f' refuses it; write {names.ENABLED_LABEL}: "{OPT_IN_VALUE}" (quoted in YAML)'
        )
    policy = labels.get(names.POLICY_LABEL)
    if policy and policy not in loaded.names:
        close = difflib.get_close_matches(policy.strip().lower(), loaded.names, n=1, cutoff=0.6)
        if close:
            hints.append(f"{names.POLICY_LABEL}={policy!r}: did you mean {close[0]!r}?")
    return hints


def explain(
    namespace: str,
    labels: Mapping[str, str],
    loaded: policies.PolicySet,
    configurations: Sequence[Mapping[str, Any]],
    *,
    webhook_namespace: str,
    workload_kinds: Sequence[kinds.Kind] = kinds.BUILTIN_KINDS,
) -> Explanation:
    """What the API server and the server do with the pods of `namespace` (whose `labels`
    include its name label) under the rendered `configurations` of `loaded` (and what the
    server does with each thing they send it: `reviews`)."""
    by_kind = {c["kind"]: c for c in configurations}
    mutating = _selecting(by_kind[rendering.MUTATING_KIND], labels)
    validating = _selecting(by_kind[rendering.VALIDATING_KIND], labels)
    found = Explanation(
        namespace=namespace,
        labels=dict(labels),
        opted_in=namespaces.opted_in(labels),
        governed=False,
        reason="",
        mutating_entry=mutating.get("name"),
        validating_entry=validating.get("name"),
        hints=_near_misses(labels, loaded),
    )
    entry = validating or mutating
    if not entry:
        if namespace == names.SYSTEM_NAMESPACE:
            found.reason = f"{names.SYSTEM_NAMESPACE} is never sent to the webhook"
        elif namespace == webhook_namespace:
            found.reason = (
                "the webhook's own namespace is never sent to it (see --webhook-namespace)"
            )
        elif not found.opted_in:
            found.reason = (
                f"not opted in: no label {names.ENABLED_LABEL}={OPT_IN_VALUE}, so its pods are"
                " never changed or refused"
            )
        else:
            found.reason = "no entry of the webhook configurations selects it"
        return found
    found.path = _entry_path(entry)
    found.reviews = _reviews("mutate", mutating, workload_kinds) + _reviews(
        "validate", validating, workload_kinds
    )
    wanted = labels.get(names.POLICY_LABEL) or names.DEFAULT_POLICY
    name, _ = policies.split_path(found.path)
    # A policy whose file does not load has no entry of its own here (the configurations are
    # rendered from the policies in force); the server's answer names the file.
    policy = loaded.governing(
        wanted if name == names.UNKNOWN_POLICY_PATH and wanted in loaded.broken else found.path
    )
    found.pod_security = policy.pod_security
    found.policy_from_label = bool(labels.get(names.POLICY_LABEL))
    if policy.unavailable is not None:
        # The server's own words: an unknown name, or a file that does not load.
        found.reason = policy.unavailable[1]
        return found
    found.governed = True
    found.policy = policy.name
    found.policy_source = policy.source
    found.classes = [_class(c) for c in policy.classes]
    found.profiles = list(policy.profiles)
    found.default_profile = policy.default_profile
    found.limits = limits(policy)
    if found.policy_from_label:
        why = f"its label {names.POLICY_LABEL}={labels[names.POLICY_LABEL]}"
    elif names.POLICY_LABEL in labels:
        why = f"its label {names.POLICY_LABEL} is empty, which means the default policy"
    else:
        why = f"no {names.POLICY_LABEL} label, so the default policy"
    found.reason = f"governed by policy {policy.name!r} ({why})"
    return found


def limits(policy: policies.Policy) -> list[str]:
    """The limits a policy sets beyond its classes, in words (none for one that sets none)."""
    out = []
    if policy.profiles_are_ceilings:
        out.append("profiles are ceilings: CUDA_MPS_* above the pod's profile are refused")
    exclusive = policy.exclusive_gpus
    if not exclusive.allowed:
        out.append("whole GPUs: none (only shared ones)")
    elif exclusive.max_per_pod is not None:
        out.append(f"whole GPUs: at most {exclusive.max_per_pod} per pod")
    if exclusive.passthrough:
        out.append(f"GPUs also: {', '.join(exclusive.passthrough)}")
    if policy.driver_capabilities is not None:
        out.append(f"driver capabilities: {','.join(policy.driver_capabilities)}")
    return out


# --------------------------------------------------------------------------- input


def _file_labels(path: str, namespace: str) -> dict[str, str]:
    """The labels of the Namespace `namespace` in the file; InputError when it is not there
    or its labels are not a map of strings."""
    text, source = manifests.read_text(path)
    objects = manifests.parse(text, source)
    for obj in objects:
        meta = obj.get("metadata")
        if obj.get("kind") != "Namespace" or not isinstance(meta, dict):
            continue
        if meta.get("name") != namespace:
            continue
        raw = meta.get("labels") or {}
        if not isinstance(raw, dict):
            raise InputError(f"{source}: Namespace/{namespace}: metadata.labels is not a map")
        labels: dict[str, str] = {}
        for key, value in raw.items():
            if not isinstance(value, str):
                shown = "a YAML boolean" if isinstance(value, bool) else "not a string"
                raise InputError(
                    f"{source}: Namespace/{namespace}: label {key}: {value!r} is {shown}"
                    ' (the API server takes strings only: quote it, e.g. "true")'
                )
            labels[str(key)] = value
        return labels
    found = sorted(
        str(o["metadata"].get("name"))
        for o in objects
        if o.get("kind") == "Namespace" and isinstance(o.get("metadata"), dict)
    )
    others = f" (it holds {', '.join(found)})" if found else " (it holds no Namespace)"
    raise InputError(f"{source}: no Namespace named {namespace}{others}")


def _labels(args: argparse.Namespace) -> dict[str, str]:
    labels = _file_labels(args.filename, args.name) if args.filename else {}
    for pair in args.label or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--label {pair!r}: expected KEY=VALUE")
        labels[key] = value
    # The API server sets it on every namespace (1.22+), whatever a manifest says.
    labels[names.NAME_LABEL] = args.name
    return labels


def run(args: argparse.Namespace) -> int:
    try:
        labels = _labels(args)
        # As the server has them: a file that does not load takes out only its own policies.
        checked = checking.check_directory(policies_directory(args.policies)[0])
        if checked.unreadable:
            raise PolicyError(list(checked.unreadable))
        loaded = checked.loaded
        for problem in checked.errors:
            print(f"warning: not in force: {problem}", file=sys.stderr)
        all_kinds = kinds.all_kinds()
        try:
            configurations = rendering.render(
                loaded,
                service=names.DEFAULT_SERVICE,
                namespace=args.webhook_namespace,
                name=names.DEFAULT_WEBHOOK_NAME,
                kinds=all_kinds,
            )
        except ValueError as exc:
            raise InputError(f"--webhook-namespace: {exc}") from None
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PolicyError as exc:
        more = f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else ""
        print(
            f"error: policies: {exc.problems[0]}{more}: run `gpu-share-webhook policy check`",
            file=sys.stderr,
        )
        return EXIT_USAGE
    found = explain(
        args.name,
        labels,
        loaded,
        configurations,
        webhook_namespace=args.webhook_namespace,
        workload_kinds=all_kinds,
    )
    if args.output == "json":
        sys.stdout.write(orjson.dumps(found.as_json(), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        sys.stdout.write(_text(found))
    return EXIT_OK if found.governed else EXIT_FAILED


def _text(found: Explanation) -> str:
    lines = [f"namespace {found.namespace}: {found.reason}"]
    if found.path is not None:
        lines.append(
            f"  entries: {found.mutating_entry} (mutating), {found.validating_entry}"
            f" (validating): /mutate/{found.path}, /validate/{found.path}"
        )
        lines.append(
            "  pod security: enforces baseline or restricted: host access is left to it"
            if found.pod_security
            else "  pod security: enforces neither baseline nor restricted: the webhook checks"
            " host access itself"
        )
        # One line per endpoint and way (`reviewing.Route`): the resources it takes that way.
        ways: dict[tuple[str, str], dict[str, list[str]]] = {}
        for endpoint, resource, operation, words in found.reviews:
            ways.setdefault((endpoint, words), {}).setdefault(resource, []).append(operation)
        for (endpoint, words), taken in ways.items():
            what = ", ".join(f"{r} {'/'.join(ops)}" for r, ops in taken.items())
            lines.append(f"  /{endpoint}: {what}: {words}")
    if found.governed:
        lines.append(f"  policy file: {found.policy_source}")
        for c in found.classes:
            memory = f", {c['memoryMiB']} MiB" if c["memoryMiB"] else ""
            lines.append(
                f"  class {c['name']}: {c['resource']} on {c['product']}, {c['strategy']},"
                f" {c['replicas']} replicas per GPU, {c['gpusPerNode']} GPU(s) per node{memory}"
            )
        if found.profiles:
            default = f" (default {found.default_profile})" if found.default_profile else ""
            lines.append(f"  profiles: {', '.join(found.profiles)}{default}")
        lines += [f"  limit: {line}" for line in found.limits]
    lines += [f"  hint: {hint}" for hint in found.hints]
    return "\n".join(lines) + "\n"
