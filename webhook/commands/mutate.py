"""`gpu-share-webhook mutate`: run the admission core offline on the objects in a file.

Pods come out as the webhook admits them. For workloads (Deployment, ReplicaSet,
StatefulSet, DaemonSet, Job, CronJob) the webhook itself never changes the object, only
refuses it; here their pod template comes out as the pods it creates will be admitted, so a
user sees what will run.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import yaml

from webhook import documents, kinds, namespaces, policies
from webhook.commands import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_policies_argument,
    add_workload_kinds_argument,
    env_default,
    policies_directory,
)
from webhook.core import pods, reviewing
from webhook.core.decisions import MALFORMED, Decision
from webhook.errors import InputError, PolicyError

EXIT_ALLOWED = EXIT_OK
EXIT_DENIED = EXIT_FAILED
EXIT_BAD_INPUT = EXIT_USAGE


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "mutate",
        help="show what the webhook does to the objects in a file",
        description=(
            "Run the admission core on every object in FILE (YAML or JSON, several documents)"
            " and print the result. Exit 0: all allowed; 1: something was refused (reasons on"
            " stderr); 2: bad input or usage. Workloads are shown with their pod template as"
            " its pods will be admitted (the webhook itself only validates workloads)."
        ),
    )
    parser.add_argument(
        "-f", "--filename", required=True, metavar="FILE", help="file, or - for stdin"
    )
    parser.add_argument(
        "--namespace",
        "-n",
        # Not GPU_SHARE_WEBHOOK_NAMESPACE: that one names the webhook's own namespace.
        default=env_default("object-namespace", ""),
        help="namespace of the objects (env GPU_SHARE_WEBHOOK_OBJECT_NAMESPACE)",
    )
    parser.add_argument(
        "--namespace-label",
        "-l",
        action="append",
        metavar="K=V",
        help="a label of the namespace, repeatable (default: gpu-share.io/enabled=true, the"
        " opt-in; add gpu-share.io/policy=NAME to pick a policy)",
    )
    add_policies_argument(parser, "directory of policy files")
    add_workload_kinds_argument(parser)
    parser.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json", "patch"),
        default=env_default("output", "yaml"),
        help="yaml or json: the objects as admitted; patch: each object's JSON Patch, one"
        " JSON array per line (env GPU_SHARE_WEBHOOK_OUTPUT; default yaml)",
    )
    parser.set_defaults(func=run)


def _labels(args: argparse.Namespace) -> dict[str, str]:
    given = args.namespace_label
    pairs = given if given is not None else [f"{namespaces.ENABLED_LABEL}=true"]
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--namespace-label {pair!r}: expected KEY=VALUE")
        labels[key] = value
    if args.namespace:
        labels.setdefault(namespaces.NAME_LABEL, args.namespace)
    return labels


def decide(
    obj: dict[str, Any],
    *,
    labels: dict[str, str],
    loaded: policies.PolicySet,
    workload_kinds: pods.Kinds = pods.BUILTIN,
) -> Decision:
    """What the webhook decides for `obj` in a namespace with `labels`."""
    name = namespaces.policy_name(labels)
    if name is None:
        return Decision()
    return reviewing.review(obj, policy=loaded.governing(name), mutate=True, kinds=workload_kinds)


def run(args: argparse.Namespace) -> int:
    try:
        labels = _labels(args)
        text, source = documents.read_text(args.filename)
        objects = documents.parse(text, source)
        loaded = policies.load_directory(policies_directory(args.policies)[0])
        workload_kinds = pods.kinds_by_name(
            kinds.all_kinds(Path(args.workload_kinds) if args.workload_kinds else None)
        )
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
    for obj in objects:
        what = documents.describe(obj)
        decision = decide(obj, labels=labels, loaded=loaded, workload_kinds=workload_kinds)
        for warning in decision.warnings:
            print(f"Warning: {what}: {warning}", file=sys.stderr)
        if decision.malformed:
            # Bad input, not a refusal: one line naming the first field that is wrong.
            first = next(v for v in decision.violations if v.rule == MALFORMED)
            print(f"error: {what}: {first.message.split(': no Kubernetes')[0]}", file=sys.stderr)
            malformed = True
            continue
        if not decision.allowed:
            denied = True
            for v in decision.violations:
                print(f"denied: {what}: {v.text}", file=sys.stderr)
            continue
        # The decision is this review's own: the object is copied, the patch used as it is.
        patched = jsonpatch.apply_patch(copy.deepcopy(obj), decision.patch, in_place=True)
        results.append((patched, decision.patch))
    _print(results, args.output)
    if malformed:
        return EXIT_BAD_INPUT
    return EXIT_DENIED if denied else EXIT_ALLOWED


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
        sys.stdout.write(
            yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False, width=1000)
        )
