"""`gpu-share-webhook discover -f NODES`: a policy whose classes describe the shared GPU nodes
of a node dump.

NODES is the output of `kubectl get nodes -o json` (or `-o yaml`, or a List of Nodes; `-` for
stdin): no cluster access. The policy has one class per kind of shared GPU found (resource,
product, strategy, renamed or not, replicas), with memory and GPUs per node from the labels,
MPS profiles that fit every MPS class, and comments naming the nodes each class matches.
Nodes whose labels disagree are left out and listed, never guessed; GPU nodes that share no
GPU are listed too. Exit 0: a policy was printed (problems also on stderr); 1: no shared GPU
node was found; 2: bad input or usage.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import yaml

from webhook import discovering, documents, policies
from webhook.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, env_default, env_name, help_text
from webhook.commands.policy import NODES_OPTION
from webhook.errors import InputError

# Not GPU_SHARE_WEBHOOK_NAME: that one names the rendered webhook configurations.
NAME_OPTION = "policy-name"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
# Names a comment lists before "and N more".
MAX_LISTED = 20
WIDTH = 100


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "discover",
        help="print a policy describing the shared GPU nodes of a node dump",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-f",
        "--filename",
        metavar="NODES",
        default=env_default(NODES_OPTION, "") or None,
        help=help_text(
            "required: `kubectl get nodes -o json` output (JSON or YAML), or - for stdin",
            NODES_OPTION,
            "none",
        ),
    )
    parser.add_argument(
        "--name",
        default=env_default(NAME_OPTION, policies.DEFAULT_POLICY),
        help=help_text("metadata.name of the policy", NAME_OPTION),
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.filename:
        print(
            f"error: discover needs -f NODES (or {env_name(NODES_OPTION)}): the output of"
            " `kubectl get nodes -o json`",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if not _DNS_LABEL.match(args.name):
        print(
            f"error: policy name {args.name!r} (--name or {env_name(NAME_OPTION)}) is not a DNS"
            " label: lower-case letters, digits and '-', at most 63",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        text, source = documents.read_text(args.filename)
        objects = documents.parse(text, source)
        nodes, others = _read_nodes(objects, source)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    found = discovering.survey(nodes, others=others)
    if others:
        print(f"warning: {source}: ignored {others} objects that are not Nodes", file=sys.stderr)
    for problem in found.problems:
        print(f"warning: left out: {problem}", file=sys.stderr)
    classes = discovering.node_classes(found)
    if not classes:
        print(f"error: {source}: {_no_shared(found)}", file=sys.stderr)
        return EXIT_FAILED
    sys.stdout.write(render(found, classes, name=args.name, source=source))
    return EXIT_OK


def _read_nodes(objects: list[dict[str, Any]], source: str) -> tuple[list[discovering.Node], int]:
    try:
        return discovering.read_nodes(objects)
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None


def _no_shared(found: discovering.Survey) -> str:
    parts = [f"no shared GPU node among {_count(found.nodes)}"]
    if found.unshared_nodes:
        parts.append(f"sharing no GPU: {_listing(found.unshared_nodes)}")
    if found.left_out:
        parts.append(f"left out (labels disagree, above): {_listing(found.left_out)}")
    if found.unlabelled:
        parts.append(f"without gpu-feature-discovery labels: {_listing(found.unlabelled)}")
    if len(parts) == 1:
        parts.append("no node has gpu-feature-discovery labels")
    return "; ".join(parts)


def _count(items: Sequence[object]) -> str:
    return f"{len(items)} node{'s' if len(items) != 1 else ''}"


# --------------------------------------------------------------------------- output


def render(
    found: discovering.Survey,
    classes: Sequence[discovering.DiscoveredClass],
    *,
    name: str,
    source: str,
) -> str:
    """The policy as YAML, with comments saying where each part comes from."""
    doc = discovering.policy_document(classes, name=name)
    spec = doc["spec"]
    nodes_file = source if source != "<stdin>" else "nodes.json"
    out: list[str] = []
    out += _comment(
        f"Generated by `gpu-share-webhook discover` from {source}: {_count(found.nodes)},"
        f" {len(found.shared_nodes)} with shared GPUs, in {len(classes)}"
        f" class{'es' if len(classes) != 1 else ''}."
    )
    out += _comment(
        "The labels of gpu-feature-discovery give product, strategy, renaming, replicas,"
        " memory and GPUs per node; what they cannot tell is left at its default, and the"
        " comments below say so. Review it, save it in policies/ and check it against the"
        " nodes:"
    )
    out.append(f"#   gpu-share-webhook policy check policies/ --nodes {nodes_file}")
    if found.problems:
        out.append("#")
        out += _comment(
            "Left out: labels that disagree (fix the node or its device plugin config, then"
            " discover again):"
        )
        out += [f"#   {_safe(str(p))}" for p in found.problems]
    if found.unshared_nodes:
        out.append("#")
        out += _comment(
            "GPU nodes that share no GPU (this policy does not describe them): "
            + _listing(found.unshared_nodes)
        )
    partly = found.unshared_on_sharing_nodes
    if partly:
        out += _comment(
            "Not shared on nodes that share other GPUs: "
            + ", ".join(f"{u.node}: {u.resource}" for u in partly)
        )
    if found.unlabelled:
        out += _comment(
            "GPU nodes without gpu-feature-discovery labels (is it running there?): "
            + _listing(found.unlabelled)
        )
    out += [
        f"apiVersion: {doc['apiVersion']}",
        f"kind: {doc['kind']}",
        "metadata:",
        f"  name: {_scalar(name)}",
        "spec:",
    ]
    out += _comment(
        "For a safe rollout start with dry-run (metrics and logs only), then warn, then"
        " enforce (docs/policies.md, Modes).",
        indent=2,
    )
    out.append(f"  mode: {_scalar(spec['mode'])}")
    plain = [r for r in spec["sharedResources"] if not r.endswith(policies.SHARED_SUFFIX)]
    if plain:
        out += _comment(
            f"{', '.join(plain)}: shared GPUs that are not renamed (renameByDefault: false) look"
            " like exclusive ones, so in namespaces of this policy every request for"
            f" {' or '.join(plain)} is a request for a shared replica.",
            indent=2,
        )
    out.append("  sharedResources:")
    out += [f"    - {_scalar(r)}" for r in spec["sharedResources"]]
    out += _comment(
        "The GPU Operator's RuntimeClass: the node labels do not say which one pods need.",
        indent=2,
    )
    out.append(f"  runtimeClassName: {_scalar(spec['runtimeClassName'])}")
    out += _comment(
        "GPU nodes are commonly tainted nvidia.com/gpu:NoSchedule; a taint named after the"
        " requested resource is tolerated too (tolerateResourceTaint, default true).",
        indent=2,
    )
    out.append("  tolerations:")
    out += [
        "    - {" + ", ".join(f"{k}: {_scalar(v)}" for k, v in t.items()) + "}"
        for t in spec["tolerations"]
    ]
    out += _comment(
        "failRequestsGreaterThanOne is not in the labels, so each class has the device"
        " plugin's default (true for mps, false for time-slicing); set it where the plugin's"
        " sharing config says otherwise.",
        indent=2,
    )
    out.append("  nodeClasses:")
    for cls in classes:
        out += _class_lines(cls)
    out += _profile_lines(classes, spec)
    out += _comment(
        "rules: the safety switches keep their safe defaults (docs/policies.md).", indent=2
    )
    return "\n".join(out) + "\n"


def _class_lines(cls: discovering.DiscoveredClass) -> list[str]:
    out: list[str] = []
    out += _comment(f"Matches {_count(cls.nodes)}: {_listing(cls.nodes)}", indent=4)
    if cls.also_matches:
        out += _comment(
            "Its selector also matches nodes left out above (their labels disagree): "
            + _listing(cls.also_matches),
            indent=4,
        )
    if cls.counts:
        out += _comment(
            f"GPUs per node differ ({', '.join(map(str, cls.counts))}): gpusPerNode is the"
            " smallest, so a pod asks for no more replicas than every node has GPUs. Raise it"
            " to let pods ask for more; they are then pinned to nodes with enough GPUs.",
            indent=4,
        )
    if cls.memories:
        out += _comment(
            f"GPU memory differs ({', '.join(map(str, cls.memories))} MiB): memoryMiB is the"
            " smallest, so the MPS limits fit every node.",
            indent=4,
        )
    for taint, tainted in cls.untolerated:
        out += _comment(
            f"Taint {taint} on {_listing(tainted)} is not tolerated: pods of this policy do not"
            " land there unless spec.tolerations covers it.",
            indent=4,
        )
    for i, (key, value) in enumerate(cls.spec().items()):
        lead = "    - " if i == 0 else "      "
        out.append(f"{lead}{key}: {_scalar(value)}")
    return out


def _profile_lines(
    classes: Sequence[discovering.DiscoveredClass], spec: dict[str, Any]
) -> list[str]:
    profiles: dict[str, dict[str, int]] = spec.get("profiles") or {}
    if not profiles:
        return _comment(
            "No MPS class, so no MPS profiles (they only apply on MPS nodes).", indent=2
        )
    mps = [c for c in classes if c.strategy == "mps"]
    ceilings = ", ".join(
        f"{c.name}: {100 // c.replicas}% / {(c.memory_mib or 0) // c.replicas} MiB" for c in mps
    )
    out = _comment(
        f"MPS sizes that fit every MPS class's ceiling ({ceilings}): medium is the smallest"
        " ceiling, what the MPS daemon gives each client there anyway; small is about half."
        " A pod picks one with the annotation gpu-share.io/profile.",
        indent=2,
    )
    out.append("  profiles:")
    for pname, values in profiles.items():
        inner = ", ".join(f"{k}: {v}" for k, v in values.items())
        out.append(f"    {pname}: {{{inner}}}")
    out.append(f"  defaultProfile: {_scalar(spec['defaultProfile'])}")
    return out


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    if len(names) > MAX_LISTED:
        shown += f" and {len(names) - MAX_LISTED} more"
    return shown


def _safe(text: str) -> str:
    # A comment ends at a line break: keep anything a dump carries on one line.
    return " ".join(text.split())


def _comment(text: str, *, indent: int = 0) -> list[str]:
    pad = " " * indent
    return textwrap.wrap(
        _safe(text),
        width=WIDTH,
        initial_indent=f"{pad}# ",
        subsequent_indent=f"{pad}# ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def _scalar(value: Any) -> str:
    """A YAML scalar that reads back as `value` (plain when it can be, else quoted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.match(text) and yaml.safe_load(text) == text:
        return text
    return json.dumps(text)
