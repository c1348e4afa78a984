"""`gpu-share-webhook policy check [DIR] [--nodes FILE] [--device-classes FILE]`: validate
policy files, and match them against the nodes and the DeviceClasses of a cluster dump.

Every problem of every file in one run (webhook/tools/checking.py), warnings for what the server
loads but can never happen (a dra section's too), and notes, once each, for the DRA driver's
feature gates the policies' sharing needs. With `--nodes` (the output of `kubectl get nodes
-o json`; no cluster access), every class of every policy that loads is matched against the nodes by
the labels the webhook pins, and the check fails when a class matches no node, when taints
its pods do not tolerate keep them off every node it matches, or when a shared GPU node (as
`gpu-share-webhook discover` reads the labels) matches no class. With `--device-classes` (the
output of `kubectl get deviceclasses -o json`), a warning names each DeviceClass that can hand
out GPUs but that no policy's dra section governs (`checking.device_class_warnings`). Exit 0:
all good, or warnings only; 1: a policy does not load or does not fit the nodes (each problem
on stderr); 2: the node file, the DeviceClass file or a policy file cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from webhook.errors import InputError
from webhook.policy import policies
from webhook.tools import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    OPTIONAL_TEXT,
    checking,
    discovering,
    from_env,
    help_text,
    manifests,
    policies_directory,
)

# The node dump, for this command and `discover -f` alike.
NODES_OPTION = "nodes"
# The DeviceClasses of a cluster (`kubectl get deviceclasses -o json`).
DEVICE_CLASSES_OPTION = "device-classes"
# Node names a line lists before "and N more".
MAX_LISTED = 5


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("policy", help="work with policy files")
    sub = parser.add_subparsers(dest="policy_command", metavar="ACTION", required=True)
    check = sub.add_parser(
        "check",
        help="validate the policies in a directory (and match them against nodes)",
        description=(
            "Validate every policy in DIR; print every problem of every file as file: field:"
            " reason, and warnings for what can never happen. With --nodes, also say how many"
            " nodes each class matches, and fail when a class matches none, when taints its"
            " pods do not tolerate keep them off all of them, or when a shared GPU node matches"
            " no class."
        ),
    )
    check.add_argument(
        "directory",
        nargs="?",
        metavar="DIR",
        type=OPTIONAL_TEXT,
        default=from_env("policies", None),
        help=help_text(
            "directory of policy files",
            "policies",
            "./policies if it exists, else the policies shipped with the package",
        ),
    )
    check.add_argument(
        "--nodes",
        metavar="FILE",
        type=OPTIONAL_TEXT,
        default=from_env(NODES_OPTION, None),
        help=help_text(
            "`kubectl get nodes -o json` output (JSON or YAML), or - for stdin",
            NODES_OPTION,
            "none",
        ),
    )
    check.add_argument(
        "--device-classes",
        metavar="FILE",
        type=OPTIONAL_TEXT,
        default=from_env(DEVICE_CLASSES_OPTION, None),
        help=help_text(
            "`kubectl get deviceclasses -o json` output (JSON or YAML), or - for stdin: warn of"
            " each class that can hand out NVIDIA GPUs but that no policy governs",
            DEVICE_CLASSES_OPTION,
            "none",
        ),
    )
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    directory, _ = policies_directory(args.directory)
    nodes: list[discovering.Node] | None = None
    source, others = "", 0
    if args.nodes:
        # The node file first: bad input is a usage error whatever the policies say.
        try:
            text, source = manifests.read_text(args.nodes)
            nodes, others = discovering.read_nodes(manifests.parse(text, source))
        except InputError as exc:
            message = str(exc)
            if source and not message.startswith(source):
                message = f"{source}: {message}"
            print(f"error: {message}", file=sys.stderr)
            return EXIT_USAGE
    device_classes: list[checking.DeviceClass] | None = None
    classes_source, not_classes = "", 0
    if args.device_classes:
        try:
            text, classes_source = manifests.read_text(args.device_classes)
            objects = manifests.parse(text, classes_source)
            device_classes, not_classes = checking.read_device_classes(objects)
        except InputError as exc:
            message = str(exc)
            if classes_source and not message.startswith(classes_source):
                message = f"{classes_source}: {message}"
            print(f"error: {message}", file=sys.stderr)
            return EXIT_USAGE
    if not directory.is_dir():
        # Bad usage, as `serve` says it, not a check that failed.
        print(f"error: {directory}: not a directory of policy files", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = checking.check_directory(directory)
    except OSError as exc:
        print(f"error: {directory}: cannot be read: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    # Every problem of every file, then what the policies that load say to the nodes: all in
    # one round, so that fixing one problem never uncovers another kind.
    for problem in report.errors:
        print(f"error: {problem}", file=sys.stderr)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    for name in report.loaded.names:
        p = report.loaded.policies[name]
        # A policy without classes has a dra or an exclusiveGpus section.
        classes = ", ".join(c.name for c in p.classes) or (
            "none (DRA only)" if p.dra is not None else "none (whole GPUs only)"
        )
        print(f"ok: policy {name} ({p.source}): classes {classes}{_dra_summary(p)}")
    failed = bool(report.errors)
    if report.errors:
        count = len(report.errors)
        print(f"{directory}: {count} problem{'s' if count != 1 else ''}", file=sys.stderr)
    if nodes is not None:
        if others:
            print(
                f"warning: {source}: ignored {others} objects that are not Nodes", file=sys.stderr
            )
        found = discovering.survey(nodes, others=others)
        if check_nodes(report, found, source=source) != EXIT_OK:
            failed = True
    if device_classes is not None:
        check_device_classes(report, device_classes, source=classes_source, others=not_classes)
    for line in report.unreadable:
        print(f"error: {line}", file=sys.stderr)
    if report.unreadable:
        return EXIT_USAGE
    return EXIT_FAILED if failed else EXIT_OK


def check_device_classes(
    report: checking.DirectoryReport,
    classes: list[checking.DeviceClass],
    *,
    source: str,
    others: int,
) -> None:
    """Warn of each DeviceClass that can hand out GPUs and that no policy governs (warnings
    only: the policies are not wrong, the cluster has a class they do not know)."""
    if others:
        print(
            f"warning: {source}: ignored {others} objects that are not DeviceClasses",
            file=sys.stderr,
        )
    count = f"{len(classes)} DeviceClass{'es' if len(classes) != 1 else ''}"
    if not report.complete:
        print(
            f"warning: {source}: which DeviceClasses no policy governs is not judged while a"
            " policy file does not load (it may list them)",
            file=sys.stderr,
        )
        return
    warnings, selecting = checking.device_class_warnings(report.loaded, classes, source=source)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    governed = selecting - len(warnings)
    tail = f", {len(warnings)} not (see the warnings)" if warnings else ""
    print(f"ok: {source}: {count}, {selecting} that can hand out GPUs: {governed} governed{tail}")


def check_nodes(report: checking.DirectoryReport, found: discovering.Survey, *, source: str) -> int:
    """Print how many nodes each class matches; EXIT_FAILED when a class matches none, when
    taints its pods do not tolerate keep them off every node it matches, or when a shared GPU
    node matches no class (judged only when every policy loaded: one that did not may be the
    one whose class it is)."""
    loaded = report.loaded
    failures = 0
    by_name = {n.name: n for n in found.nodes}
    matched: set[tuple[str, str]] = set()
    for name in loaded.names:
        policy = loaded.policies[name]
        for cls in policy.classes:
            hits = sorted(discovering.matching(cls.selector, found.nodes))
            where = f"policy {name} class {cls.name}"
            if not hits:
                print(
                    f"error: {where} matches no node in {source} ({_pinned(cls)})",
                    file=sys.stderr,
                )
                failures += 1
                continue
            print(f"ok: {where} matches {_count(hits)}: {_listing(hits)}")
            matched.update((n, cls.resource) for n in hits)
            hit_nodes = [by_name[n] for n in hits]
            for warning in [
                *_disagreements(cls, hit_nodes),
                *checking.mps_node_warnings(cls, hit_nodes),
            ]:
                print(f"warning: {where}: {warning}", file=sys.stderr)
            blocked = checking.untolerated(checking.class_tolerations(policy, cls), hit_nodes)
            if blocked.nodes:
                failures += _report_taints(where, blocked, len(hits))
    if report.complete:
        for gpu in found.shared:
            if (gpu.node, gpu.resource) not in matched:
                print(
                    f"error: node {gpu.node}: {gpu.describe()} matches no class of any policy"
                    " (`gpu-share-webhook discover` prints one)",
                    file=sys.stderr,
                )
                failures += 1
    elif found.shared:
        print(
            f"warning: {source}: whether every shared GPU node matches a class is not judged"
            " while a policy file does not load",
            file=sys.stderr,
        )
    for problem in found.problems:
        print(f"warning: labels disagree, not judged: {problem}", file=sys.stderr)
    summary = (
        f"{source}: {_count(found.nodes)}, {len(found.shared_nodes)} with shared GPUs"
        f" ({len(found.left_out)} left out: labels disagree)"
        if found.left_out
        else f"{source}: {_count(found.nodes)}, {len(found.shared_nodes)} with shared GPUs"
    )
    if failures:
        print(f"{summary}: {failures} problem{'s' if failures != 1 else ''}", file=sys.stderr)
        return EXIT_FAILED
    if report.complete:
        print(f"ok: {summary}: every class matches a node, every shared GPU node a class")
    else:
        print(f"ok: {summary}: every class of the policies that load matches a node")
    return EXIT_OK


def _report_taints(where: str, blocked: checking.Untolerated, matched: int) -> int:
    """Print the taints that keep a class's pods off its nodes: a warning while some node is
    left, else an error (1: the problems counted)."""
    taints = "; ".join(f"{t} on {_listing(list(ns))}" for t, ns in blocked.taints)
    fix = (
        "add a toleration for it to the policy's spec.tolerations, or remove the taint"
        " (pods that do not tolerate it themselves cannot land there)"
    )
    if len(blocked.nodes) == matched:
        print(
            f"error: {where}: its pods can land on none of its {_count(blocked.nodes)}: the"
            f" policy's tolerations do not tolerate {taints}; {fix}",
            file=sys.stderr,
        )
        return 1
    print(
        f"warning: {where}: its pods cannot land on {_listing(list(blocked.nodes))}: the"
        f" policy's tolerations do not tolerate {taints}; {fix}",
        file=sys.stderr,
    )
    return 0


def _disagreements(cls: policies.NodeClass, nodes: list[discovering.Node]) -> list[str]:
    """What the class says beyond its selector that the nodes it matches contradict."""
    out: list[str] = []
    memory_label, count_label = f"{cls.resource}.memory", f"{cls.resource}.count"
    if cls.memory_mib is not None:
        less = [
            f"{n.name}={n.labels[memory_label]}"
            for n in nodes
            if n.labels.get(memory_label, "").isdigit()
            and int(n.labels[memory_label]) < cls.memory_mib
        ]
        if less:
            out.append(
                f"memoryMiB {cls.memory_mib} is more than {memory_label} on {_listing(less)}"
                " (the MPS ceilings would be above what those GPUs have)"
            )
    fewer = [
        f"{n.name}={n.labels[count_label]}"
        for n in nodes
        if n.labels.get(count_label, "").isdigit()
        and int(n.labels[count_label]) < cls.gpus_per_node
    ]
    if fewer:
        out.append(
            f"gpusPerNode {cls.gpus_per_node} is more than {count_label} on {_listing(fewer)}"
            " (a request for several replicas is pinned to nodes with enough GPUs)"
        )
    return out


def _dra_summary(policy: policies.Policy) -> str:
    """What the ok line says of a policy's dra section: the GPU classes it opens and those
    it keeps closed (NVIDIA's among them, listed or not)."""
    if policy.dra is None:
        return ""
    allowed = policy.dra.allowed
    closed = [c for c in policy.gpu_classes if c not in allowed]
    return (
        f"; DRA classes allowed: {', '.join(allowed) or 'none'};"
        f" closed: {', '.join(closed) or 'none'}"
    )


def _pinned(cls: policies.NodeClass) -> str:
    return ", ".join(f"{k}={v}" for k, v in cls.selector)


def _count(items: Any) -> str:
    return f"{len(items)} node{'s' if len(items) != 1 else ''}"


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    if len(names) > MAX_LISTED:
        shown += f" and {len(names) - MAX_LISTED} more"
    return shown
