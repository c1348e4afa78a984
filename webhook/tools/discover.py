"""`gpu-share-webhook discover -f NODES [--slices SLICES] [--name NAME | --pool NAME=SELECTOR...]`:
a policy whose classes describe the shared GPU nodes of a node dump, and whose dra section lists
the GPUs of a ResourceSlice dump; with --pool, one such policy per pool of nodes.

NODES is the output of `kubectl get nodes -o json` (or `-o yaml`, or a List of Nodes; `-` for
stdin): no cluster access. The policy has one class per kind of shared GPU found (resource,
product, strategy, renamed or not, replicas), with memory and GPUs per node from the labels,
MPS profiles that fit every MPS class, and comments naming the nodes each class matches.
Nodes whose labels disagree are left out and listed, never guessed; GPU nodes that share no
GPU are listed too.

SLICES is the output of `kubectl get resourceslices -o json` (read as NODES is; one file, or
`-`, may serve both options). With it, the policy has a dra section: one entry per NVIDIA
device class whose devices the slices publish (gpu.nvidia.com for GPUs, mig.nvidia.com for
MIG devices, vfio.gpu.nvidia.com, vgpu.gpu.nvidia.com), closed (`allowed: false`: the slices
say what exists, not which namespaces may use it), one device per request, no sharing
configuration, and comments naming the products, counts and nodes; other drivers' devices
are named in a comment and not governed.

When no node shares a GPU through the device plugin but the slices hold GPUs of NVIDIA's DRA
driver, the policy governs DRA alone: no nodeClasses, and none of the device plugin's fields
(sharedResources, runtimeClassName, tolerations, profiles), which the webhook applies only to
pods that ask for a node class's shared resource.

--pool NAME=SELECTOR (repeatable; SELECTOR a label selector as `kubectl get -l` takes it,
such as `team=a,gpu-pool in (a100,h100)`) prints one policy per pool, named NAME, each a YAML
document: the pool's nodes alone decide its classes. Its GPUs given whole (replicas 1) are its
exclusiveGpus section, allowed up to the most one of its nodes has; a pool without such GPUs
allows none, since a pod of its namespaces would get them on another pool's nodes. A pool
whose GPUs are all whole has no nodeClasses. GPU nodes in no pool are named (stderr, and a
comment); a node in two pools is an error.

Every policy lists the driver capabilities a GPU container may have: compute and utility.

Exit 0: the policies were printed (problems also on stderr); 1: neither a shared GPU node nor
(with --slices) a device of NVIDIA's DRA driver was found, or a pool has nothing to describe;
2: bad input or usage (a node in two pools too).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from webhook.engine import decision
from webhook.errors import InputError
from webhook.policy import names, policies
from webhook.tools import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    OPTIONAL_TEXT,
    InvalidValue,
    discovering,
    dns_label,
    env_name,
    from_env,
    help_text,
    manifests,
)
from webhook.tools.policy import NODES_OPTION

# Not GPU_SHARE_WEBHOOK_NAME: that one names the rendered webhook configurations.
NAME_OPTION = "policy-name"
# The ResourceSlice dump.
SLICES_OPTION = "slices"
_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
# Names a comment lists before "and N more".
MAX_LISTED = 20
WIDTH = 100
_POLICY_NAME = dns_label("a policy name")


@dataclass(frozen=True, slots=True)
class Pool:
    """A pool of `--pool NAME=SELECTOR`: the policy's name, and the nodes' selector."""

    name: str
    selector: discovering.Selector
    # As given, for the messages.
    text: str


def _pool(raw: str) -> Pool:
    name, sep, selector = raw.partition("=")
    if not sep:
        raise InvalidValue(raw, "NAME=SELECTOR, a policy name and a label selector (team=a)")
    try:
        _POLICY_NAME.parse(name)
    except ValueError:
        raise InvalidValue(raw, f"NAME=SELECTOR, NAME {_POLICY_NAME.expected}") from None
    try:
        parsed = discovering.parse_selector(selector)
    except ValueError as exc:
        raise InvalidValue(raw, f"NAME=SELECTOR, SELECTOR a label selector: {exc}") from None
    return Pool(name, parsed, selector.strip())


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
        type=OPTIONAL_TEXT,
        default=from_env(NODES_OPTION, None),
        help=help_text(
            "required: `kubectl get nodes -o json` output (JSON or YAML), or - for stdin",
            NODES_OPTION,
            "none",
        ),
    )
    parser.add_argument(
        "--slices",
        metavar="SLICES",
        type=OPTIONAL_TEXT,
        default=from_env(SLICES_OPTION, None),
        help=help_text(
            "`kubectl get resourceslices -o json` output (JSON or YAML), or - for stdin: adds"
            " a dra section for the GPUs of NVIDIA's DRA driver",
            SLICES_OPTION,
            "none",
        ),
    )
    parser.add_argument(
        "--name",
        type=_POLICY_NAME,
        default=from_env(NAME_OPTION, None),
        help=help_text(
            "metadata.name of the policy (not with --pool)", NAME_OPTION, policies.DEFAULT_POLICY
        ),
    )
    parser.add_argument(
        "--pool",
        dest="pools",
        metavar="NAME=SELECTOR",
        action="append",
        type=_pool,
        default=[],
        help="one policy per pool instead of one for every node, repeatable: NAME names the"
        " policy, SELECTOR (a label selector, as kubectl -l takes it: team=a,gpu-pool in"
        " (a100,h100)) the pool's nodes, which alone decide its classes and whole GPUs",
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
    pools: list[Pool] = args.pools
    if pools and args.name:
        print(
            f"error: --name (or {env_name(NAME_OPTION)}) names the one policy; with --pool each"
            " pool's NAME names its policy",
            file=sys.stderr,
        )
        return EXIT_USAGE
    twice = sorted({p.name for p in pools if [q.name for q in pools].count(p.name) > 1})
    if twice:
        print(f"error: --pool: {', '.join(twice)} named twice (one policy each)", file=sys.stderr)
        return EXIT_USAGE
    # Every file is read before anything is judged: bad input is exit 2 whatever the rest says.
    read = _Reader()
    try:
        objects, source = read(args.filename)
        node_objects = objects
        if args.slices:
            # Each option reads its own kind; a file may hold both (`kubectl get
            # nodes,resourceslices -o json`), and the other kind is not "ignored".
            node_objects = [o for o in objects if o.get("kind") != discovering.SLICE_KIND]
        nodes, others = _read_nodes(node_objects, source)
        slices: discovering.SliceSurvey | None = None
        slices_source = ""
        if args.slices:
            slice_objects, slices_source = read(args.slices)
            kept = [o for o in slice_objects if o.get("kind") != "Node"]
            read_slices, slice_others = _read_slices(kept, slices_source)
            slices = discovering.survey_slices(read_slices, others=slice_others)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    found = discovering.survey(nodes, others=others)
    if others:
        unread = sum(1 for o in objects if o.get("kind") == discovering.SLICE_KIND)
        hint = (
            f" ({unread} ResourceSlices among them: give the file to --slices as well for a dra"
            " section)"
            if unread and not args.slices
            else ""
        )
        print(
            f"warning: {source}: ignored {others} objects that are not Nodes{hint}",
            file=sys.stderr,
        )
    for problem in found.problems:
        print(f"warning: left out: {problem}", file=sys.stderr)
    if slices is not None:
        for line in _slice_warnings(slices, slices_source):
            print(f"warning: {line}", file=sys.stderr)
    if pools:
        return _run_pools(pools, found, source=source, slices=slices, slices_source=slices_source)
    classes = discovering.node_classes(found)
    if not classes and (slices is None or not discovering.dra_classes(slices)):
        message = f"error: {source}: {_no_shared(found)}"
        if slices is not None:
            message += f". {slices_source}: {_no_nvidia(slices)}"
        print(message, file=sys.stderr)
        return EXIT_FAILED
    for line in _class_warnings(classes):
        print(f"warning: {line}", file=sys.stderr)
    sys.stdout.write(
        render(
            found,
            classes,
            name=args.name or policies.DEFAULT_POLICY,
            source=source,
            slices=slices,
            slices_source=slices_source,
        )
    )
    return EXIT_OK


@dataclass(frozen=True, slots=True)
class PoolView:
    """What a pool's policy says of the pool beyond its nodes' survey."""

    pool: Pool
    # The whole GPUs of its nodes (its exclusiveGpus section).
    whole: discovering.WholeGpus
    # Class name -> the nodes outside the pool its selector matches.
    elsewhere: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _run_pools(
    pools: Sequence[Pool],
    found: discovering.Survey,
    *,
    source: str,
    slices: discovering.SliceSurvey | None,
    slices_source: str,
) -> int:
    """One policy per pool, or the reason a pool has none (exit 1) or a node is in two (2)."""
    assigned = discovering.assign_pools([(p.name, p.selector) for p in pools], found.nodes)
    if assigned.overlaps:
        both = "; ".join(
            f"{_printable(node)} ({', '.join(names_)})" for node, names_ in assigned.overlaps
        )
        print(
            f"error: {source}: nodes in more than one pool (a node's GPUs belong to one"
            f" policy; make the selectors exclusive): {both}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    gpu_nodes = set(found.gpu_nodes) | set(slices.nodes if slices is not None else ())
    stray = [n for n in assigned.outside if n in gpu_nodes]
    if stray:
        print(
            f"warning: GPU nodes in no pool (no policy describes them): {_named(stray)}",
            file=sys.stderr,
        )
    if slices is not None:
        loose = sum(1 for _, d in slices.devices if d.node is None)
        if loose:
            print(
                f"warning: {slices_source}: {_plural(loose, 'device')} of no one node, so of no"
                " pool: no policy describes them",
                file=sys.stderr,
            )
    by_name = {n.name: n for n in found.nodes}
    documents: list[str] = []
    failures: list[str] = []
    warnings: list[str] = []
    for pool in pools:
        members = assigned.members[pool.name]
        what = f"pool {pool.name} ({_printable(pool.text)})"
        if not members:
            failures.append(f"{what} selects no node")
            continue
        pool_found = discovering.survey([by_name[n] for n in members])
        pool_slices = discovering.slices_on(slices, members) if slices is not None else None
        classes = discovering.node_classes(pool_found)
        whole = discovering.whole_gpus(pool_found, {c.advertised for c in classes})
        dra = discovering.dra_classes(pool_slices) if pool_slices is not None else ()
        if not classes and not whole.per_node and not dra:
            failures.append(f"{what}: {_no_shared(pool_found, pool=True)}")
            continue
        view = PoolView(pool, whole, discovering.matched_elsewhere(classes, members, found.nodes))
        warnings += _pool_warnings(view, classes)
        documents.append(
            render(
                pool_found,
                classes,
                name=pool.name,
                source=source,
                slices=pool_slices,
                slices_source=slices_source,
                pool=view,
            )
        )
    if failures:
        for failure in failures:
            print(f"error: {source}: {failure}", file=sys.stderr)
        return EXIT_FAILED
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    head = _comment(
        f"One policy per pool, by `gpu-share-webhook discover --pool` from {source}: "
        + "; ".join(
            f"{p.name} ({_printable(p.text)}): {_count(assigned.members[p.name])}" for p in pools
        )
        + ". Each document below is the policy of the namespaces labelled"
        ' gpu-share.io/policy: <pool> (docs/policies.md, "One policy per team").'
    )
    if stray:
        head += _comment(f"GPU nodes in no pool (no policy below describes them): {_named(stray)}")
    head.append("#")
    sys.stdout.write("\n".join(head) + "\n" + "---\n".join(documents))
    return EXIT_OK


def _class_warnings(
    classes: Sequence[discovering.DiscoveredClass], policy: str | None = None
) -> list[str]:
    """What discover tells on stderr of its classes: MPS on nodes with several GPUs."""
    where = f"policy {policy} " if policy else ""
    return [
        f"{where}class {c.name}: MPS on nodes with more than one GPU ({_gpu_counts(c)}):"
        f" {discovering.MPS_NOT_CONFINED}"
        for c in classes
        if c.mps_not_confined
    ]


def _pool_warnings(view: PoolView, classes: Sequence[discovering.DiscoveredClass]) -> list[str]:
    name = view.pool.name
    out = _class_warnings(classes, name)
    for cls, nodes in view.elsewhere.items():
        out.append(
            f"policy {name} class {cls} also matches nodes outside pool {name}: {_named(nodes)}"
            " (the webhook pins pods by GPU labels, not by pool, so they may land there)"
        )
    if view.whole.shadowed:
        out.append(f"policy {name}: {_shadowed(view.whole)}")
    return out


class _Reader:
    """Reads each file once: `-f -` and `--slices -` share standard input, and one file may
    serve both options."""

    def __init__(self) -> None:
        self._read: dict[str, tuple[list[dict[str, Any]], str]] = {}

    def __call__(self, path: str) -> tuple[list[dict[str, Any]], str]:
        if path not in self._read:
            text, source = manifests.read_text(path)
            self._read[path] = (manifests.parse(text, source), source)
        return self._read[path]


def _read_nodes(objects: list[dict[str, Any]], source: str) -> tuple[list[discovering.Node], int]:
    try:
        return discovering.read_nodes(objects)
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None


def _read_slices(objects: list[dict[str, Any]], source: str) -> tuple[list[discovering.Slice], int]:
    try:
        return discovering.read_slices(objects)
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None


def _slice_warnings(found: discovering.SliceSurvey, source: str) -> list[str]:
    out = []
    if found.others:
        what = (
            "object that is not a ResourceSlice"
            if found.others == 1
            else "objects that are not ResourceSlices"
        )
        out.append(f"{source}: ignored {found.others} {what}")
    for pool in found.incomplete:
        out.append(
            f"{source}: pool {_printable(pool.name)} of driver {_printable(pool.driver)} has"
            f" {pool.seen} of its {pool.expected}"
            f" ResourceSlices of generation {pool.generation} in the dump (the driver is"
            " publishing it): its devices may be short; discover again once it is done"
        )
    return out


def _no_shared(found: discovering.Survey, *, pool: bool = False) -> str:
    """Why no policy describes the nodes of `found`: none shares a GPU (in a pool, none gives
    one whole either)."""
    if pool:
        parts = [f"no node with a shared or whole GPU among its {_count(found.nodes)}"]
    else:
        parts = [f"no shared GPU node among {_count(found.nodes)}"]
    if found.unshared_nodes:
        what = "with GPUs neither shared nor whole" if pool else "sharing no GPU"
        parts.append(f"{what}: {_listing(found.unshared_nodes)}")
    if found.left_out:
        parts.append(f"left out (labels disagree, above): {_listing(found.left_out)}")
    if found.unlabelled:
        parts.append(f"without gpu-feature-discovery labels: {_listing(found.unlabelled)}")
    if len(parts) == 1:
        parts.append("no node has gpu-feature-discovery labels")
    return "; ".join(parts)


def _no_nvidia(found: discovering.SliceSurvey) -> str:
    """Why a slice dump gives no dra section to a cluster where no node shares a GPU."""
    others = discovering.other_devices(found)
    held = (
        " (it holds " + "; ".join(_other(o) for o in others) + ")"
        if others
        else " (it holds no device)"
    )
    return (
        f"no GPU of NVIDIA's DRA driver ({names.DRA_DRIVER}) that one of its device classes"
        f" selects{held}. Nothing for a policy to describe: its nodeClasses describe the GPUs"
        " the device plugin shares, its dra section those of NVIDIA's DRA driver, and there"
        " are neither"
    )


def _count(items: Sequence[object]) -> str:
    return f"{len(items)} node{'s' if len(items) != 1 else ''}"


def _named(nodes: Sequence[str]) -> str:
    return _listing([_printable(n) for n in nodes])


def _gpu_counts(cls: discovering.DiscoveredClass) -> str:
    return _listing([f"{_printable(n)}: {c}" for n, c in cls.multi_gpu])


def _shadowed(whole: discovering.WholeGpus) -> str:
    shown = ", ".join(f"{_printable(n)} ({r})" for n, r in whole.shadowed[:MAX_LISTED])
    if len(whole.shadowed) > MAX_LISTED:
        shown += f" and {len(whole.shadowed) - MAX_LISTED} more"
    return (
        f"whole GPUs on {shown} are asked for by a name this policy shares (its classes are"
        " not renamed): its pods are pinned to the classes and never get them. Rename the"
        " shared GPUs (renameByDefault: true), or put those nodes in a pool of their own"
    )


# --------------------------------------------------------------------------- output


def render(
    found: discovering.Survey,
    classes: Sequence[discovering.DiscoveredClass],
    *,
    name: str,
    source: str,
    slices: discovering.SliceSurvey | None = None,
    slices_source: str = "",
    pool: PoolView | None = None,
) -> str:
    """The policy as YAML, with comments saying where each part comes from; with `slices`,
    its dra section; with `pool`, the policy of a pool's nodes (`found`), with their whole GPUs
    as its exclusiveGpus section. Without `classes` (the slices' GPUs, or whole ones, are the
    only ones), a policy without node classes."""
    dra = discovering.dra_classes(slices) if slices is not None else None
    whole = pool.whole if pool is not None else None
    doc = discovering.policy_document(
        classes,
        name=name,
        dra=discovering.dra_section(dra) if dra is not None else None,
        exclusive=whole.spec() if whole is not None else None,
    )
    spec = doc["spec"]
    nodes_file = source if source != "<stdin>" else "nodes.json"
    out: list[str] = []
    gpus = ""
    if slices is not None and dra is not None:
        gpus = (
            f", and from {slices_source}: {_plural(len(slices.current), 'ResourceSlice')},"
            f" {_plural(sum(c.devices for c in dra), 'device')} of NVIDIA's GPU DRA driver"
            f" in {_plural(len(dra), 'device class', 'device classes')}"
        )
    shared = (
        f"{len(found.shared_nodes)} with shared GPUs, in"
        f" {_plural(len(classes), 'class', 'classes')}"
        if classes
        else "none with GPUs the device plugin shares"
    )
    if whole is not None and whole.per_node:
        shared += f", {len(whole.per_node)} with whole GPUs"
    origin = source if pool is None else f"{source}, pool {name} ({_printable(pool.pool.text)})"
    out += _comment(
        f"Generated by `gpu-share-webhook discover` from {origin}: {_count(found.nodes)},"
        f" {shared}{gpus}."
    )
    if classes:
        out += _comment(
            "The labels of gpu-feature-discovery give product, strategy, renaming, replicas,"
            " memory and GPUs per node; what they cannot tell is left at its default, and the"
            " comments below say so. Review it, save it in a directory of your site's policies"
            " (site/policies/, not the shipped examples of policies/) and check it against the"
            " nodes:"
        )
    elif whole is not None and whole.per_node:
        also = " (and through dynamic resource allocation)" if dra else ""
        out += _comment(
            "No node of this pool shares a GPU through the device plugin, so this policy has no"
            f" nodeClasses: its namespaces get whole GPUs{also}, governed by exclusiveGpus. The"
            " labels give how many each node has; what they cannot tell is left at its"
            " default, and the comments below say so. Review it, save it in a directory of your"
            " site's policies (site/policies/, not the shipped examples of policies/) and check"
            " it against the nodes:"
        )
    else:
        out += _comment(
            "No node shares a GPU through the device plugin, so this policy has no nodeClasses:"
            " its namespaces get GPUs through dynamic resource allocation alone. The slices"
            " give the devices, products, memory and nodes; what they cannot tell (which"
            " namespaces may use them, the driver's feature gates) is left closed, and the"
            " comments below say so. Review it, save it in a directory of your site's policies"
            " (site/policies/, not the shipped examples of policies/) and check it against the"
            " nodes (no node class to match, but a shared GPU node appearing later fails it):"
        )
    out.append(f"#   gpu-share-webhook policy check site/policies/ --nodes {nodes_file}")
    if found.problems:
        out.append("#")
        out += _comment(
            "Left out: labels that disagree (fix the node or its device plugin config, then"
            " discover again):"
        )
        out += [f"#   {_safe(str(p))}" for p in found.problems]
    # The nodes whose GPUs the dra section describes are neither "sharing no GPU" nor short of
    # gpu-feature-discovery labels: NVIDIA's DRA driver publishes their GPUs, and the device
    # plugin does not run beside it. Nor are those whose GPUs exclusiveGpus describes.
    on_dra = {n for c in dra or () for n in c.nodes}
    described = on_dra | set(whole.nodes if whole is not None else ())
    unshared = [n for n in found.unshared_nodes if n not in described]
    unlabelled = [n for n in found.unlabelled if n not in on_dra]
    if unshared:
        out.append("#")
        what = (
            "GPU nodes that share no GPU (this policy does not describe them): "
            if whole is None
            else "GPU nodes whose GPUs are neither shared nor whole (replicas 0, an invalid MIG"
            " configuration; this policy does not describe them): "
        )
        out += _comment(what + _listing(unshared))
    partly = found.unshared_on_sharing_nodes
    if partly and whole is None:
        out += _comment(
            "Not shared on nodes that share other GPUs: "
            + ", ".join(f"{u.node}: {u.resource}" for u in partly)
        )
    if unlabelled:
        out += _comment(
            "GPU nodes without gpu-feature-discovery labels (is it running there?): "
            + _listing(unlabelled)
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
    if classes:
        out += _device_plugin_lines(classes, spec, pool.elsewhere if pool is not None else {})
    elif dra is None:
        out += _comment(
            "No nodeClasses, sharedResources, runtimeClassName, tolerations or profiles: they"
            " are the device plugin's sharing, which no node of this pool has. The webhook sets"
            " the runtime class and the tolerations only on pods that ask for a shared resource"
            " of a node class (a request for nvidia.com/gpu.shared is refused here).",
            indent=2,
        )
    else:
        out += _comment(
            "No nodeClasses, sharedResources, runtimeClassName, tolerations or profiles: they"
            " are the device plugin's. The webhook sets the runtime class and the tolerations"
            " only on pods that ask for a shared resource of a node class (a request for"
            " nvidia.com/gpu.shared is refused here); pods with claims get their GPUs from the"
            " driver's CDI edits and tolerate the GPU nodes' taints themselves (NVIDIA's"
            " examples give them nvidia.com/gpu Exists NoSchedule). Profiles size the MPS"
            " configuration of claims, and no class below allows MPS: add them with it"
            " (docs/dra.md).",
            indent=2,
        )
    if whole is not None:
        out += _exclusive_lines(whole, found.nodes)
    out += _comment(
        "The driver features a GPU container may have (NVIDIA_DRIVER_CAPABILITIES): compute"
        " and utility, what CUDA and nvidia-smi need and what the runtime gives where the"
        " variable is unset. The webhook sets them where a container sets none (its image may"
        " ask for graphics or all); more is refused.",
        indent=2,
    )
    out.append(
        "  driverCapabilities: [" + ", ".join(map(_scalar, spec["driverCapabilities"])) + "]"
    )
    if slices is not None and dra is not None:
        out += _dra_lines(
            slices,
            dra,
            source=slices_source,
            profiles=bool(spec.get("profiles")),
            nodes=found.nodes,
        )
    out += _comment(
        "rules: the safety switches keep their safe defaults (docs/policies.md).", indent=2
    )
    return "\n".join(out) + "\n"


def _device_plugin_lines(
    classes: Sequence[discovering.DiscoveredClass],
    spec: dict[str, Any],
    elsewhere: Mapping[str, tuple[str, ...]],
) -> list[str]:
    """The fields of the device plugin's sharing: resources, runtime class, tolerations,
    node classes (with the nodes outside its pool each matches, `elsewhere`), profiles."""
    out: list[str] = []
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
        out += _class_lines(cls, elsewhere.get(cls.name, ()))
    out += _profile_lines(classes, spec)
    return out


def _class_lines(cls: discovering.DiscoveredClass, elsewhere: Sequence[str] = ()) -> list[str]:
    out: list[str] = []
    out += _comment(f"Matches {_count(cls.nodes)}: {_listing(cls.nodes)}", indent=4)
    if cls.also_matches:
        out += _comment(
            "Its selector also matches nodes left out above (their labels disagree): "
            + _listing(cls.also_matches),
            indent=4,
        )
    if elsewhere:
        out += _comment(
            f"Its selector also matches nodes outside the pool: {_named(elsewhere)}. The"
            " webhook pins pods by these GPU labels, not by pool, so pods of this policy may"
            " land there too.",
            indent=4,
        )
    if cls.mps_not_confined:
        out += _comment(
            f"MPS on nodes with more than one GPU ({_gpu_counts(cls)}):"
            f" {discovering.MPS_NOT_CONFINED}. Where tenants must stay apart, give MPS nodes"
            " one GPU.",
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


def _exclusive_lines(whole: discovering.WholeGpus, nodes: Sequence[discovering.Node]) -> list[str]:
    """The exclusiveGpus section of a pool's policy, and what it comes from."""
    out: list[str] = []
    if not whole.per_node:
        out += _comment(
            "No node of this pool gives a GPU whole, so none is allowed: a pod of this"
            " policy's namespaces that asks for one (nvidia.com/gpu where the shared GPUs are"
            " renamed, a MIG device, a passthrough resource) would get it on another pool's"
            " nodes. Set allowed: true, and maxPerPod, to let it.",
            indent=2,
        )
    else:
        counts = _listing(
            [f"{_printable(n)}: {'count unknown' if c is None else c}" for n, c in whole.per_node]
        )
        out += _comment(
            f"Whole GPUs (replicas 1: {', '.join(whole.resources)}) on"
            f" {_count(whole.per_node)}: {counts}.",
            indent=2,
        )
        if whole.most_per_node is not None:
            out += _comment(
                "maxPerPod is the most one node has: a pod that asks for more is never"
                " scheduled. Lower it to bound what one pod holds; a ResourceQuota bounds what"
                ' the namespace holds (docs/policies.md, "One policy per team").',
                indent=2,
            )
        else:
            out += _comment(
                f"maxPerPod is left out (any number): a count label is missing on"
                f" {_named(whole.uncounted)}; set it by hand.",
                indent=2,
            )
        tainted = discovering.untolerated([], [n for n in nodes if n.name in whole.nodes])
        if tainted.taints:
            listed = "; ".join(f"{_printable(t)} on {_named(ns)}" for t, ns in tainted.taints)
            out += _comment(
                f"Taints of these nodes: {listed}. The webhook adds tolerations only to pods of"
                " node classes: pods that ask for whole GPUs tolerate them themselves, or the"
                " scheduler keeps them off.",
                indent=2,
            )
    if whole.shadowed:
        out += _comment(_shadowed(whole) + ".", indent=2)
    out.append("  exclusiveGpus:")
    out += [f"    {k}: {_scalar(v)}" for k, v in whole.spec().items()]
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


# --------------------------------------------------------------------------- the dra section

# What a class's devices are called in the comments, by their `type`.
_DEVICES = {
    "gpu": ("GPU", "GPUs"),
    "mig": ("MIG device", "MIG devices"),
    "vfio": ("VFIO passthrough GPU", "VFIO passthrough GPUs"),
    "vgpu": ("vGPU", "vGPUs"),
}


def _dra_lines(
    found: discovering.SliceSurvey,
    classes: Sequence[discovering.DraFoundClass],
    *,
    source: str,
    profiles: bool,
    nodes: Sequence[discovering.Node] = (),
) -> list[str]:
    """The dra section: NVIDIA's classes with devices, closed, and what the slices say (and
    the taints of `nodes`, the node dump, that pods with claims must tolerate)."""
    out: list[str] = []
    stale = (
        f" ({_plural(found.stale, 'ResourceSlice')} of older pool generations left out: the"
        " driver replaced them)"
        if found.stale
        else ""
    )
    devices = len(found.devices)
    out += _comment(
        f"Dynamic resource allocation, from {source}:"
        f" {_plural(len(found.current), 'ResourceSlice')}{stale},"
        f" {_plural(devices, 'device')} on {_count(found.nodes)}. With a dra section,"
        " pods of the namespaces of this policy may name ResourceClaims, and the webhook"
        " reviews every claim and claim template there (docs/dra.md).",
        indent=2,
    )
    out += _comment(
        f"NVIDIA's device classes ({', '.join(names.DRA_NVIDIA_CLASSES)}) are governed whether"
        " listed or not, and closed unless listed with allowed: true. The slices say what"
        " devices exist, not which namespaces may use them, so discover opens none: set"
        " allowed: true on the classes the namespaces of this policy may claim.",
        indent=2,
    )
    others = discovering.other_devices(found)
    if others:
        out += _comment(
            "Not governed (requests of their classes pass, as a NIC's do): "
            + "; ".join(_other(o) for o in others)
            + ".",
            indent=2,
        )
    out += _claim_taint_lines(classes, nodes)
    out.append("  dra:")
    if not classes:
        out += _comment(
            f"No device of NVIDIA's GPU DRA driver ({names.DRA_DRIVER}) in the slices: its"
            " classes stay closed, and pods with claims of other drivers are admitted.",
            indent=4,
        )
        out.append("    deviceClasses: []")
        return out
    out.append("    deviceClasses:")
    for cls in classes:
        out += _dra_class_lines(cls, profiles=profiles)
    absent = [n for n in names.DRA_NVIDIA_CLASSES if n not in {c.name for c in classes}]
    if absent:
        out += _comment(
            f"Not listed, so closed (no such devices in the slices): {', '.join(absent)}.",
            indent=6,
        )
    return out


def _claim_taint_lines(
    classes: Sequence[discovering.DraFoundClass], nodes: Sequence[discovering.Node]
) -> list[str]:
    """The taints of the nodes with NVIDIA's DRA GPUs: the webhook tolerates none of them for
    pods with claims (its tolerations go to pods of node classes only)."""
    where = {n for c in classes for n in c.nodes}
    tainted = discovering.untolerated([], [n for n in nodes if n.name in where])
    if not tainted.taints:
        return []
    listed = "; ".join(
        f"{_printable(t)} on {_listing([_printable(n) for n in ns])}" for t, ns in tainted.taints
    )
    return _comment(
        f"Taints of the nodes with these GPUs: {listed}. The webhook adds no toleration to"
        " pods with claims (the policy's tolerations go to pods of its node classes): the"
        " pods tolerate them themselves, as NVIDIA's examples do (nvidia.com/gpu Exists"
        " NoSchedule), or the scheduler keeps them off.",
        indent=2,
    )


def _dra_class_lines(cls: discovering.DraFoundClass, *, profiles: bool) -> list[str]:
    one, many = _DEVICES[cls.type]
    products = "; ".join(
        f"{_printable(p.name)}: {p.count} on {_listing([_printable(n) for n in p.nodes])}"
        + (f", {_memories(p.memories)}" if p.memories else "")
        for p in cls.products
    )
    most = f", at most {cls.most_per_node} on one" if len(cls.nodes) > 1 else ""
    out = _comment(
        f"{_plural(cls.devices, one, many)} on {_count(cls.nodes)}{most}: {products}.", indent=6
    )
    out += _comment(
        "maxDevicesPerRequest: one device per request; raise it (at most"
        f" {min(cls.most_per_node, 32)}: no node has more) for claims that need several.",
        indent=6,
    )
    memory = (
        f"mps.maxPinnedMemoryMiB at most {cls.memory_mib} (the smallest {one}'s memory: a limit"
        " above it limits nothing)"
        if cls.memory_mib
        else "mps.maxPinnedMemoryMiB"
    )
    sized = (
        "; the policy's profiles then size the requests that write no configuration"
        if profiles
        else "; with profiles, they size the requests that write no configuration"
    )
    mps = (
        "MPS needs the driver's MPSSupport feature gate (alpha, off by default; the slices do not"
        f" say whether it is on): with it, add MPS to sharing with ceilings, {memory}{sized}."
    )
    if cls.type == "gpu":
        text = (
            "sharing: [] takes the requests with no sharing configuration: the pods that name"
            " one claim share its GPUs by the driver's default time-slicing. " + mps
        )
    elif cls.type == "mig":
        text = (
            "sharing: [] takes the requests with no sharing configuration (the driver does not"
            " time-slice MIG devices by configuration). " + mps
        )
    elif cls.type == "vfio":
        text = "VFIO passthrough gives a GPU whole to one virtual machine: no sharing."
    else:
        text = (
            "vGPUs need the driver's VGPUSupport feature gate (alpha); sharing: [] takes the"
            " requests with no sharing configuration."
        )
    out += _comment(text, indent=6)
    if cls.multiple:
        out += _comment(
            f"{_plural(cls.multiple, one, many)} published with allowMultipleAllocations (the"
            " driver's ConsumableShares): claims of any namespace may share one by its memory"
            " capacity. capacity: {memory: <quantity>} caps what one request takes (and makes"
            " every request name it); the driver then refuses MPS claims.",
            indent=6,
        )
    for i, (key, value) in enumerate(cls.spec().items()):
        lead = "      - " if i == 0 else "        "
        shown = "[" + ", ".join(map(_scalar, value)) + "]" if isinstance(value, list) else None
        out.append(f"{lead}{key}: {shown or _scalar(value)}")
    return out


def _other(o: discovering.OtherDevices) -> str:
    driver = _printable(o.driver)
    if o.driver == names.DRA_DRIVER:
        kind = f"type {_printable(o.type)}" if o.type else "no type attribute"
        driver = f"{driver} ({kind}, which no NVIDIA class selects)"
    where = f" on {_listing([_printable(n) for n in o.nodes])}" if o.nodes else ""
    return f"{driver}: {_plural(o.count, 'device')}{where}"


def _memories(values: Sequence[int]) -> str:
    if len(values) == 1:
        return f"{values[0]} MiB each"
    return f"{', '.join(map(str, values))} MiB"


def _plural(number: int, one: str, many: str | None = None) -> str:
    return f"{number} {one if number == 1 else (many or one + 's')}"


def _printable(text: str) -> str:
    # A name from the dump, as a comment shows it: no character that ends the line or
    # rewrites it in a terminal.
    return decision.printable(text)


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
