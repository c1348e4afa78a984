"""`gpu-share-webhook mutate`: run the admission core offline on the objects in a file.

Pods come out as the webhook admits them. For workloads (Deployment, ReplicaSet,
StatefulSet, DaemonSet, Job, CronJob) the webhook itself never changes the object, only
refuses it; here their pod template comes out as the pods it creates will be admitted, so a
user sees what will run. ResourceClaims and ResourceClaimTemplates (`resource.k8s.io/v1`)
come out as the mutating webhook leaves them: judged against the policy's `dra` section,
with the MPS configuration of their profile added to each GPU request that has none.

Whether an object reaches the webhook at all is decided as in the cluster: by the namespace
selectors of the configurations `render` makes for the same policies, evaluated on the
namespace's labels (`--namespace-label`, and its name from `--namespace` or the object's
own). An object they never send (a namespace that has not opted in, kube-system, the
webhook's own namespace) comes out unchanged, and a line on stderr says why.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import orjson

from webhook.engine import claims, hints, namespaces, reviewing, view
from webhook.engine.decision import MALFORMED, Decision, printable
from webhook.errors import InputError, PolicyError
from webhook.policy import kinds, names, policies
from webhook.tools import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_policies_argument,
    add_webhook_namespace_argument,
    add_workload_kinds_argument,
    auditing,
    dump_yaml,
    from_env,
    help_text,
    manifests,
    namespace_name,
    policies_directory,
    rendering,
)

EXIT_ALLOWED = EXIT_OK
EXIT_DENIED = EXIT_FAILED
EXIT_BAD_INPUT = EXIT_USAGE

OUTPUTS = ("yaml", "json", "patch")
# Not GPU_SHARE_WEBHOOK_OUTPUT: `render -o` has other formats.
OUTPUT_OPTION = "mutate-output"
# Not GPU_SHARE_WEBHOOK_NAMESPACE: that one names the webhook's own namespace.
OBJECT_NAMESPACE_OPTION = "object-namespace"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "mutate",
        help="show what the webhook does to the objects in a file",
        description=(
            "Run the admission core on every object in FILE (YAML or JSON, several documents)"
            " and print the result. Exit 0: all allowed; 1: something was refused (reasons on"
            " stderr); 2: bad input or usage. Workloads are shown with their pod template as"
            " its pods will be admitted (the webhook itself only validates workloads);"
            " ResourceClaims and ResourceClaimTemplates (resource.k8s.io/v1) as the webhook"
            " leaves them (the MPS configuration of their profile added)."
            " Objects in a namespace the webhook configurations leave out (not opted in,"
            " kube-system, the webhook's own) are not reviewed: they come out unchanged, with"
            " a line on stderr saying why."
        ),
    )
    parser.add_argument(
        "-f", "--filename", required=True, metavar="FILE", help="file, or - for stdin"
    )
    parser.add_argument(
        "--namespace",
        "-n",
        metavar="NS",
        type=namespace_name(empty=True),
        default=from_env(OBJECT_NAMESPACE_OPTION, ""),
        help=help_text(
            "namespace the objects are created in",
            OBJECT_NAMESPACE_OPTION,
            "each object's metadata.namespace",
        ),
    )
    parser.add_argument(
        "--namespace-label",
        "-l",
        action="append",
        metavar="K=V",
        help="a label of the namespace, repeatable, added to the opt-in label"
        " gpu-share.io/enabled=true that the namespace has unless -l gives that label"
        " another value or a misspelling of it (-l gpu-share.io/policy=NAME picks a policy;"
        " -l gpu-share.io/enabled=false: a namespace that has not opted in)",
    )
    add_webhook_namespace_argument(parser)
    add_policies_argument(parser, "directory of policy files")
    add_workload_kinds_argument(parser)
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default=from_env(OUTPUT_OPTION, "yaml"),
        help=help_text(
            "yaml or json: the objects as admitted; patch: each object's JSON Patch, one"
            " JSON array per line",
            OUTPUT_OPTION,
        ),
    )
    parser.set_defaults(func=run)


def _labels(args: argparse.Namespace) -> dict[str, str]:
    """The namespace's labels: the opt-in, and those given, which win (its name is added per
    object, `_namespace_labels`). Given ones are added, not put in the opt-in's place: `-l
    gpu-share.io/policy=gold` alone is a namespace that opted in with that policy."""
    given: dict[str, str] = {}
    for pair in args.namespace_label or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--namespace-label {pair!r}: expected KEY=VALUE")
        given[key] = value
    if namespaces.ENABLED_LABEL not in given and any(
        namespaces.meant_label(key) == namespaces.ENABLED_LABEL for key in given
    ):
        # A misspelt opt-in (`-l gpu-share.io/enable=true`) stands where the opt-in would:
        # the namespace is judged as the cluster would judge it, not opted in.
        return given
    return {namespaces.ENABLED_LABEL: "true", **given}


def _namespace_labels(
    labels: dict[str, str], obj: dict[str, Any], namespace: str
) -> dict[str, str]:
    """The labels of the namespace `obj` is created in: `labels`, and the name label the API
    server sets on every namespace, from --namespace, else the object's metadata.namespace
    (a name label given with --namespace-label wins)."""
    if not namespace:
        meta = obj.get("metadata")
        own = meta.get("namespace") if isinstance(meta, dict) else None
        namespace = own if isinstance(own, str) else ""
    if not namespace or namespaces.NAME_LABEL in labels:
        return labels
    return {**labels, namespaces.NAME_LABEL: namespace}


def _routes(loaded: policies.PolicySet, *, webhook_namespace: str) -> rendering.Routes:
    try:
        return rendering.routes(loaded, webhook_namespace=webhook_namespace)
    except ValueError as exc:
        raise InputError(f"--webhook-namespace: {exc}") from None


def decide(
    obj: dict[str, Any],
    *,
    labels: dict[str, str],
    loaded: policies.PolicySet,
    workload_kinds: kinds.Kinds = kinds.BUILTIN,
) -> Decision:
    """What the webhook decides for `obj` in a namespace with `labels`, once the API server
    sends it (`rendering.Routes.not_sent` says whether it does)."""
    path = namespaces.labelled_path(labels)
    if path is None:
        return Decision()
    return reviewing.as_created(obj, policy=loaded.governing(path), kinds=workload_kinds)


def _unchanged(found: list[view.Found], policy: policies.Policy) -> str:
    """Why an allowed object (its pod specs `found`) comes out as it went in, in a few words."""
    return "; ".join(dict.fromkeys(hints.unchanged(view.pod(t), policy) for t in found))


def run(args: argparse.Namespace) -> int:
    try:
        labels = _labels(args)
        text, source = manifests.read_text(args.filename)
        objects = manifests.parse(text, source)
        loaded = policies.load_directory(policies_directory(args.policies)[0])
        all_kinds = kinds.all_kinds(Path(args.workload_kinds) if args.workload_kinds else None)
        workload_kinds = kinds.kinds_by_name(all_kinds)
        where = _routes(loaded, webhook_namespace=args.webhook_namespace)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except PolicyError as exc:
        print(f"error: policies: {exc.problems[0]}", file=sys.stderr)
        if len(exc.problems) > 1:
            print(
                f"  (and {len(exc.problems) - 1} more: run `gpu-share-webhook policy check`)",
                file=sys.stderr,
            )
        return EXIT_BAD_INPUT
    results: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    denied = malformed = False
    reviewed = False  # whether a line told of one object: else one line says why none is
    # Where the namespace has not opted in, each object's "not reviewed" line tells them.
    for line in namespaces.label_near_misses(labels) if namespaces.opted_in(labels) else ():
        _say(f"Warning: namespace: {line}")
    for obj in objects:
        what = manifests.describe(obj)
        claim = claims.is_claim(view.group_of(obj.get("apiVersion")), str(obj.get("kind")))
        if claim and obj.get("apiVersion") != auditing.CLAIM_API_VERSION:
            # The API server converts it to v1 before the webhook sees it; its own fields
            # (v1beta1's requests are flat) are not what the review reads.
            _say(
                f"not reviewed: {what}: the webhook is sent claims as"
                f" {auditing.CLAIM_API_VERSION} (the API server converts"
                f" {obj.get('apiVersion')}); write it as {auditing.CLAIM_API_VERSION} to see"
                " what the webhook does; left unchanged"
            )
            reviewed = True
            results.append((obj, []))
            continue
        seen = _namespace_labels(labels, obj, args.namespace)
        unsent = where.not_sent(seen)
        if unsent is not None:
            name = seen.get(namespaces.NAME_LABEL)
            which = f"namespace {name}" if name else "the namespace"
            _say(f"not reviewed: {what}: {which}: {unsent}; left unchanged")
            reviewed = True
            results.append((obj, []))
            continue
        decision = decide(obj, labels=seen, loaded=loaded, workload_kinds=workload_kinds)
        for warning in decision.warnings:
            _say(f"Warning: {what}: {warning}")
        if decision.malformed:
            # Bad input, not a refusal: one line naming the first field that is wrong.
            first = next(v for v in decision.violations if v.rule == MALFORMED)
            _say(f"error: {what}: {first.message.split(': no Kubernetes')[0]}")
            malformed = True
            continue
        if not decision.allowed:
            denied = True
            for v in decision.violations:
                _say(f"denied: {what}: {v.text}")
            continue
        found = view.templates(view.Source(obj), workload_kinds)[0] if not decision.patch else []
        if found or (claim and not decision.patch):
            reviewed = True
            # Sent, so opted in: its labels name a path (`where.not_sent` above).
            policy = loaded.governing(namespaces.labelled_path(seen) or names.DEFAULT_POLICY)
            why = claims.unchanged(obj, policy) if claim else _unchanged(found, policy)
            _say(f"no change: {what}: {why}")
        elif decision.patch:
            reviewed = True
        # The decision is this review's own: the object is copied, the patch used as it is.
        patched = jsonpatch.apply_patch(copy.deepcopy(obj), decision.patch, in_place=True)
        results.append((patched, decision.patch))
    _print(results, args.output)
    if objects and not reviewed and not denied and not malformed:
        print(
            f"no change: {source}: no pod, and no workload kind whose pod template the webhook"
            " reviews",
            file=sys.stderr,
        )
    if malformed:
        return EXIT_BAD_INPUT
    return EXIT_DENIED if denied else EXIT_ALLOWED


def _say(line: str) -> None:
    """A line on stderr, printable: it echoes names of the objects, which may hold terminal
    escapes (`decisions.printable`)."""
    print(printable(line), file=sys.stderr)


def _print(results: list[tuple[dict[str, Any], list[dict[str, Any]]]], output: str) -> None:
    if output == "patch":
        for _, patch in results:
            sys.stdout.write(orjson.dumps(patch).decode() + "\n")
        return
    objects = [obj for obj, _ in results]
    if output == "json":
        doc: Any = (
            objects[0]
            if len(objects) == 1
            else {"apiVersion": "v1", "kind": "List", "items": objects}
        )
        if objects:
            sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if objects:
        sys.stdout.write(dump_yaml(objects, explicit_start=False, width=1000))
