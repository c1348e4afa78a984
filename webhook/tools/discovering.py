"""Discovering the shared GPU nodes of a node dump, and the policy classes that describe them.

Pure: Node objects in (dicts, as `kubectl get nodes -o json` prints them), data out; no I/O.
`gpu-share-webhook discover` prints a policy from `survey` and `node_classes`, and
`gpu-share-webhook policy check --nodes` matches policies against the same survey, so both
agree on what a shared GPU node is.

What gpu-feature-discovery (GFD) labels, per GPU resource R of a node (`nvidia.com/gpu`, and
`nvidia.com/mig-<profile>` under the mixed MIG strategy), and what we read from it:

    R.sharing-strategy  none | time-slicing | mps      shared: time-slicing or mps ...
    R.replicas          1 unshared, 0 disabled, N       ... with N >= 2 replicas
    R.product           <product>[-SHARED]              -SHARED only when shared and NOT renamed
    R.count             physical GPUs (MIG devices)     gpusPerNode
    R.memory            MiB of one GPU                  memoryMiB (MPS ceilings)

A renamed resource is advertised as `R.shared` in the node's status (capacity, allocatable);
one that is not keeps the name R. Labels and status that disagree (a -SHARED product on a
node that advertises R.shared, a strategy without replicas, MPS on a MIG device...) are
reported with the node and the labels, and the node is left out: we never guess.

`discover --slices` also reads a ResourceSlice dump (`kubectl get resourceslices -o json`):
the devices of NVIDIA's GPU DRA driver, by the device class that selects them, become the
policy's `dra` section (`read_slices`, `survey_slices`, `dra_classes`; see "ResourceSlices"
below).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from webhook.errors import InputError
from webhook.policy import names, policies, quantities

GFD_ATTRIBUTES = ("product", "replicas", "sharing-strategy", "count", "memory")
# `nvidia.com/gpu.product`, `nvidia.com/mig-1g.10gb.sharing-strategy`, ... -> (R, attribute).
_RESOURCE_LABEL = re.compile(
    r"^(nvidia\.com/(?:gpu|mig-[0-9a-z][0-9a-z.+-]*?))\.("
    + "|".join(re.escape(a) for a in GFD_ATTRIBUTES)
    + r")$"
)
# What the device plugin advertises in the node's status: R, or R.shared when renamed.
_ADVERTISED = re.compile(r"^(nvidia\.com/(?:gpu|mig-[0-9a-z][0-9a-z.+-]*?))(\.shared)?$")
_LABEL_VALUE = re.compile(names.LABEL_VALUE)


def _label_value(text: str) -> bool:
    """A non-empty label value (at most 63 characters)."""
    return bool(text) and len(text) <= names.MAX_LABEL_LENGTH and bool(_LABEL_VALUE.fullmatch(text))


SHARING_STRATEGIES = ("mps", "time-slicing")
# Why MPS on a node with several GPUs does not keep tenants apart.
MPS_NOT_CONFINED = (
    "the device plugin starts each MPS control daemon without CUDA_VISIBLE_DEVICES, so a"
    " client there is not confined to its replica's GPU"
)
NO_SHARING = "none"
MPS_CAPABLE_LABEL = "nvidia.com/mps.capable"
# Set by the GPU Operator (not GFD) on nodes with an NVIDIA PCI device.
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
MIG_PRODUCT_MARK = "-MIG-"
MIG_INVALID_SUFFIX = "-MIG-INVALID"
# Taints Kubernetes itself manages (not-ready, unschedulable, pressure...): not a GPU site's.
_SYSTEM_TAINT_PREFIX = "node.kubernetes.io/"
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


# --------------------------------------------------------------------------- reading nodes


@dataclass(frozen=True, slots=True)
class Node:
    """A Node of the dump: what discovery reads of it."""

    name: str
    labels: Mapping[str, str]
    # Resource names of status.capacity and status.allocatable with a quantity that is not 0
    # (kubelet keeps a resource the plugin no longer advertises at 0).
    advertised: frozenset[str]
    # Whether the dump has the node's status at all (hand-made objects may not).
    has_status: bool
    # NoSchedule and NoExecute taints: (key, value, effect).
    taints: tuple[tuple[str, str, str], ...]


def read_nodes(objects: Iterable[Mapping[str, Any]]) -> tuple[list[Node], int]:
    """The Nodes among `objects` (a NodeList's items too), and how many objects were not
    Nodes. InputError for a Node of the wrong shape (naming it and the field), for a name
    given twice, or for no Node."""
    nodes: list[Node] = []
    others = 0
    seen: set[str] = set()
    flat: list[Mapping[str, Any]] = []
    for obj in objects:
        # What the API itself answers (client-go, curl), whose items carry no kind; kubectl
        # prints a List of Nodes instead.
        items = obj.get("items") if obj.get("kind") == "NodeList" else None
        if isinstance(items, list):
            flat.extend({"kind": "Node", **i} for i in items if isinstance(i, dict))
        else:
            flat.append(obj)
    for number, obj in enumerate(flat, 1):
        if obj.get("kind") != "Node":
            others += 1
            continue
        node = _read_node(obj, number)
        if node.name in seen:
            raise InputError(f"Node/{node.name}: appears twice in the dump")
        seen.add(node.name)
        nodes.append(node)
    if not nodes:
        raise InputError(
            "holds no Node object (expected the output of `kubectl get nodes -o json`)"
        )
    return nodes, others


def _read_node(obj: Mapping[str, Any], number: int) -> Node:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(f"object {number}, a Node: metadata.name is missing")
    what = f"Node/{name}"
    labels = _string_map(meta.get("labels"), f"{what}: metadata.labels")
    status = obj.get("status")
    if status is None:
        status = {}
    if not isinstance(status, dict):
        raise InputError(f"{what}: status is not a mapping")
    advertised: set[str] = set()
    has_status = False
    for part in ("capacity", "allocatable"):
        values = status.get(part)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise InputError(f"{what}: status.{part} is not a mapping")
        has_status = True
        for key, quantity in values.items():
            if str(quantity).strip() not in ("0", ""):
                advertised.add(str(key))
    spec = obj.get("spec")
    raw_taints = spec.get("taints") if isinstance(spec, dict) else None
    if raw_taints is not None and not isinstance(raw_taints, list):
        raise InputError(f"{what}: spec.taints is not a list")
    taints: list[tuple[str, str, str]] = []
    for i, taint in enumerate(raw_taints or []):
        if not isinstance(taint, dict) or not isinstance(taint.get("key"), str):
            raise InputError(f"{what}: spec.taints[{i}] is not a taint")
        effect = taint.get("effect")
        if effect in _BLOCKING_EFFECTS:
            taints.append((taint["key"], str(taint.get("value") or ""), str(effect)))
    return Node(
        name=name,
        labels=MappingProxyType(labels),
        advertised=frozenset(advertised),
        has_status=has_status,
        taints=tuple(taints),
    )


def _string_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where} is not a mapping")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise InputError(f"{where}.{key}: {item!r} is not a string (label values are)")
    return dict(value)


# --------------------------------------------------------------------------- the survey

# What a node class pins: (resource, product without -SHARED, strategy, renamed, replicas).
ClassKey = tuple[str, str, str, bool, int]


@dataclass(frozen=True, slots=True)
class SharedGpu:
    """One shared GPU resource of one node, as its labels describe it."""

    node: str
    resource: str
    product: str  # without -SHARED
    strategy: str
    renamed: bool
    replicas: int
    memory_mib: int | None
    count: int

    @property
    def key(self) -> ClassKey:
        """What a node class pins (selector labels): nodes with one key share one class."""
        return (self.resource, self.product, self.strategy, self.renamed, self.replicas)

    @property
    def advertised(self) -> str:
        return policies.advertised_resource(self.resource, self.renamed)

    def describe(self) -> str:
        renamed = "renamed" if self.renamed else "not renamed"
        return (
            f"{self.advertised} ({self.product}, {self.strategy}, {self.replicas} replicas,"
            f" {renamed})"
        )


@dataclass(frozen=True, slots=True)
class Unshared:
    """A GPU resource of a node that is not shared, and the labels that say so."""

    node: str
    resource: str
    reason: str
    # Usable as an exclusive GPU (replicas 1), not disabled (replicas 0, MIG parents).
    exclusive: bool = False
    # How many the node has (`R.count`), where it says a whole number of at least 1.
    count: int | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    """Labels of a node that disagree; the node is left out."""

    node: str
    message: str

    def __str__(self) -> str:
        return f"node {self.node}: {self.message}"


@dataclass(frozen=True, slots=True)
class Survey:
    """What a node dump says about shared GPUs."""

    nodes: tuple[Node, ...]
    # Every shared resource of every node that is not left out.
    shared: tuple[SharedGpu, ...]
    # Unshared GPU resources of nodes that are not left out.
    unshared: tuple[Unshared, ...]
    problems: tuple[Problem, ...]
    # GPU nodes without GFD labels (gpu.present, or an NVIDIA resource in the status only).
    unlabelled: tuple[str, ...]
    # Objects of the dump that are not Nodes.
    others: int = 0

    @property
    def left_out(self) -> tuple[str, ...]:
        return tuple(sorted({p.node for p in self.problems}))

    @property
    def shared_nodes(self) -> tuple[str, ...]:
        return tuple(sorted({s.node for s in self.shared}))

    @property
    def unshared_nodes(self) -> tuple[str, ...]:
        """GPU nodes, not left out, that share none of their GPUs."""
        sharing = set(self.shared_nodes)
        return tuple(sorted({u.node for u in self.unshared} - sharing))

    @property
    def gpu_nodes(self) -> tuple[str, ...]:
        """Every node with a GPU label or resource: shared, unshared, left out, unlabelled."""
        return tuple(
            sorted(
                {*self.shared_nodes, *(u.node for u in self.unshared), *self.left_out}
                | set(self.unlabelled)
            )
        )

    @property
    def unshared_on_sharing_nodes(self) -> tuple[Unshared, ...]:
        """Resources left exclusive (replicas 1) on nodes that share others (mixed MIG)."""
        sharing = set(self.shared_nodes)
        return tuple(u for u in self.unshared if u.node in sharing and u.exclusive)


def survey(nodes: Sequence[Node], *, others: int = 0) -> Survey:
    shared: list[SharedGpu] = []
    unshared: list[Unshared] = []
    problems: list[Problem] = []
    unlabelled: list[str] = []
    for node in nodes:
        found, idle, trouble = _survey_node(node)
        if trouble:
            problems.extend(Problem(node.name, t) for t in trouble)
            continue
        if (
            not found
            and not idle
            and (node.labels.get(GPU_PRESENT_LABEL) == "true" or _advertised_gpus(node))
        ):
            unlabelled.append(node.name)
        shared.extend(found)
        unshared.extend(idle)
    return Survey(
        nodes=tuple(nodes),
        shared=tuple(shared),
        unshared=tuple(unshared),
        problems=tuple(problems),
        unlabelled=tuple(unlabelled),
        others=others,
    )


def _advertised_gpus(node: Node) -> set[tuple[str, bool]]:
    """(R, renamed) for each NVIDIA GPU resource the node's status advertises."""
    out = set()
    for name in node.advertised:
        m = _ADVERTISED.match(name)
        if m:
            out.add((m.group(1), m.group(2) is not None))
    return out


def _resources(node: Node) -> dict[str, dict[str, str]]:
    """The GFD labels of each GPU resource of the node: {R: {attribute: value}}."""
    out: dict[str, dict[str, str]] = {}
    for key, value in node.labels.items():
        m = _RESOURCE_LABEL.match(key)
        if m:
            out.setdefault(m.group(1), {})[m.group(2)] = value
    return out


def _whole(value: str) -> int | None:
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else None


def _survey_node(node: Node) -> tuple[list[SharedGpu], list[Unshared], list[str]]:
    found: list[SharedGpu] = []
    idle: list[Unshared] = []
    trouble: list[str] = []
    resources = _resources(node)
    advertised = _advertised_gpus(node)
    for r, renamed in sorted(advertised):
        if renamed and r not in resources:
            trouble.append(
                f"advertises {r}{policies.SHARED_SUFFIX} but has no {r}.* labels"
                " (is gpu-feature-discovery running on it?)"
            )
    for r, attrs in sorted(resources.items()):
        outcome = _judge(node, r, attrs, advertised)
        if isinstance(outcome, SharedGpu):
            found.append(outcome)
        elif isinstance(outcome, Unshared):
            idle.append(outcome)
        else:
            trouble.extend(outcome)
    strategies = sorted({s.strategy for s in found})
    if len(strategies) > 1:
        trouble.append(
            "shares with both "
            + " and ".join(strategies)
            + " (the device plugin applies one strategy per node): "
            + ", ".join(f"{s.resource}.sharing-strategy={s.strategy}" for s in found)
        )
    return found, idle, trouble


def _judge(
    node: Node, r: str, attrs: Mapping[str, str], advertised: set[tuple[str, bool]]
) -> SharedGpu | Unshared | list[str]:
    """One resource of a node: shared (as what), unshared (why), or the labels that disagree."""
    strategy = attrs.get("sharing-strategy")
    raw_replicas = attrs.get("replicas")
    product = attrs.get("product")
    replicas = _whole(raw_replicas) if raw_replicas is not None else None
    if raw_replicas is not None and replicas is None:
        return [f"{r}.replicas={raw_replicas} is not a whole number"]
    if strategy is not None and strategy not in (NO_SHARING, *SHARING_STRATEGIES):
        return [f"{r}.sharing-strategy={strategy} is not none, time-slicing or mps"]
    if strategy in SHARING_STRATEGIES:
        if replicas is None:
            return [f"{r}.sharing-strategy={strategy} but {r}.replicas is missing"]
        if replicas < 2:
            return [
                f"{r}.sharing-strategy={strategy} but {r}.replicas={replicas}"
                " (sharing needs at least 2)"
            ]
        return _judge_shared(node, r, attrs, advertised, strategy=str(strategy), replicas=replicas)
    # Not shared by the strategy label (none, or missing): the other labels must agree.
    if replicas is not None and replicas >= 2:
        said = f"={strategy}" if strategy is not None else " is missing"
        return [f"{r}.replicas={replicas} but {r}.sharing-strategy{said}"]
    shown = raw_replicas if raw_replicas is not None else "(missing)"
    trouble = []
    if product is not None and product.endswith(policies.PRODUCT_SHARED_SUFFIX):
        trouble.append(f"{r}.product={product} says shared, but {r}.replicas={shown}")
    if (r, True) in advertised:
        trouble.append(
            f"{r}.replicas={shown} says not shared, but the node advertises"
            f" {r}{policies.SHARED_SUFFIX}"
        )
    if trouble:
        return trouble
    if product is not None and product.endswith(MIG_INVALID_SUFFIX):
        return Unshared(node.name, r, f"{r}.product={product}: an invalid MIG configuration")
    if replicas is None:
        return Unshared(node.name, r, f"no {r}.replicas label")
    # replicas 0: sharing disabled, as on the MIG-enabled GPUs of a mixed MIG node.
    count = _whole(attrs.get("count", ""))
    return Unshared(
        node.name,
        r,
        f"{r}.replicas={replicas}",
        exclusive=replicas == 1,
        count=count if count else None,
    )


def _judge_shared(
    node: Node,
    r: str,
    attrs: Mapping[str, str],
    advertised: set[tuple[str, bool]],
    *,
    strategy: str,
    replicas: int,
) -> SharedGpu | list[str]:
    """A resource shared by its strategy and replicas labels: as what, or what disagrees."""
    product = attrs.get("product")
    if not product:
        return [f"{r}.sharing-strategy={strategy} but {r}.product is missing"]
    trouble: list[str] = []
    # -SHARED only when shared and not renamed (GFD's getProductName).
    renamed = not product.endswith(policies.PRODUCT_SHARED_SUFFIX)
    base = product if renamed else product.removesuffix(policies.PRODUCT_SHARED_SUFFIX)
    if not _label_value(base) or not _label_value(product):
        trouble.append(f"{r}.product={product} is not a label value")
    if node.has_status:
        trouble.extend(_advertising_disagrees(r, product, renamed, advertised))
    raw_count = attrs.get("count")
    count = _whole(raw_count) if raw_count is not None else None
    if raw_count is None:
        trouble.append(f"{r}.count is missing")
    elif count is None or count < 1:
        trouble.append(f"{r}.count={raw_count} is not a number of GPUs")
    raw_memory = attrs.get("memory")
    memory = _whole(raw_memory) if raw_memory is not None else None
    if raw_memory is not None and (memory is None or memory < 1):
        trouble.append(f"{r}.memory={raw_memory} is not a size in MiB")
    capable = node.labels.get(MPS_CAPABLE_LABEL)
    if strategy == "mps":
        if r != "nvidia.com/gpu" or MIG_PRODUCT_MARK in product:
            trouble.append(
                f"{r}.sharing-strategy=mps on a MIG device ({r}.product={product}), which the"
                " device plugin refuses"
            )
        if raw_memory is None:
            trouble.append(f"{r}.memory is missing (MPS ceilings are computed from it)")
        if replicas > policies.MPS_MAX_REPLICAS:
            trouble.append(
                f"{r}.replicas={replicas} is more than MPS allows ({policies.MPS_MAX_REPLICAS})"
            )
        if capable is not None and capable != "true":
            trouble.append(f"{r}.sharing-strategy=mps but {MPS_CAPABLE_LABEL}={capable}")
    elif capable == "true":
        trouble.append(f"{r}.sharing-strategy={strategy} but {MPS_CAPABLE_LABEL}=true")
    if trouble or count is None:
        return trouble
    return SharedGpu(
        node=node.name,
        resource=r,
        product=base,
        strategy=strategy,
        renamed=renamed,
        replicas=replicas,
        memory_mib=memory,
        count=count,
    )


def _advertising_disagrees(
    r: str, product: str, renamed: bool, advertised: set[tuple[str, bool]]
) -> list[str]:
    """What the node's status says against the product label about renaming."""
    shared_name = f"{r}{policies.SHARED_SUFFIX}"
    has_shared, has_plain = (r, True) in advertised, (r, False) in advertised
    if not renamed:
        if has_shared:
            return [
                f"{r}.product={product} means not renamed, but the node advertises"
                f" {shared_name} (renamed)"
            ]
        if not has_plain:
            return [f"{r}.product={product} means not renamed, but the node does not advertise {r}"]
        return []
    if has_shared and has_plain:
        return [
            f"{r}.product={product} (no -SHARED) means renamed, but the node advertises both"
            f" {r} and {shared_name}"
        ]
    if has_plain:
        return [
            f"{r}.product={product} (no -SHARED) means renamed, but the node advertises {r},"
            f" not {shared_name}"
        ]
    if not has_shared:
        return [
            f"{r}.product={product} (no -SHARED) means renamed, but the node does not advertise"
            f" {shared_name} (renamed to another name with `rename:`? policies know"
            f" {shared_name} only)"
        ]
    return []


# --------------------------------------------------------------------------- node classes


@dataclass(frozen=True, slots=True)
class DiscoveredClass:
    """A node class for the shared GPUs of one kind, and the nodes it was made from."""

    name: str
    resource: str
    product: str
    strategy: str
    renamed: bool
    replicas: int
    # The smallest among its nodes (the safe choice: see the comments `discover` prints).
    memory_mib: int | None
    gpus_per_node: int
    nodes: tuple[str, ...]
    # Distinct values among its nodes, when they differ.
    memories: tuple[int, ...]
    counts: tuple[int, ...]
    # Left-out nodes its selector matches as well (their labels disagree elsewhere).
    also_matches: tuple[str, ...]
    # Taints of its nodes the policy's tolerations do not cover: (taint, nodes).
    untolerated: tuple[tuple[str, tuple[str, ...]], ...]
    # Its nodes with more than one GPU (of its resource), and how many each has.
    multi_gpu: tuple[tuple[str, int], ...] = ()

    @property
    def mps_not_confined(self) -> bool:
        """Whether MPS shares GPUs of a node with several (`MPS_NOT_CONFINED`)."""
        return self.strategy == "mps" and bool(self.multi_gpu)

    @property
    def advertised(self) -> str:
        return policies.advertised_resource(self.resource, self.renamed)

    def spec(self) -> dict[str, Any]:
        """The class as a policy file writes it (failRequestsGreaterThanOne left out: the
        labels do not say it, so the device plugin's default applies)."""
        out: dict[str, Any] = {"name": self.name}
        if self.resource != "nvidia.com/gpu":
            out["resource"] = self.resource
        out.update(
            product=self.product,
            strategy=self.strategy,
            renamed=self.renamed,
            replicas=self.replicas,
        )
        if self.memory_mib is not None:
            out["memoryMiB"] = self.memory_mib
        out["gpusPerNode"] = self.gpus_per_node
        return out

    def compiled(self) -> policies.NodeClass:
        """The class as the webhook compiles it (its selector, ceilings)."""
        return policies.compile_node_class(policies.NodeClassSpec.model_validate(self.spec()), 0)


def matches(pinned: Iterable[tuple[str, str]], labels: Mapping[str, str]) -> bool:
    """Whether a node with `labels` carries every label of a class's selector."""
    return all(labels.get(k) == v for k, v in pinned)


def matching(pinned: Sequence[tuple[str, str]], nodes: Iterable[Node]) -> list[str]:
    """The names of the nodes a class's selector matches."""
    return [n.name for n in nodes if matches(pinned, n.labels)]


def node_classes(found: Survey) -> tuple[DiscoveredClass, ...]:
    """One class per kind of shared GPU in the survey, named uniquely after product and
    strategy, in a stable order."""
    groups: dict[ClassKey, list[SharedGpu]] = {}
    for s in found.shared:
        groups.setdefault(s.key, []).append(s)
    keys = sorted(groups, key=lambda k: (k[1].lower(), k[2], k[0], not k[3], k[4]))
    class_names = _names(keys)
    by_name = {n.name: n for n in found.nodes}
    left_out = [by_name[n] for n in found.left_out]
    out = []
    for key in keys:
        members = groups[key]
        resource, product, strategy, renamed, replicas = key
        memories = sorted({m.memory_mib for m in members if m.memory_mib is not None})
        counts = sorted({m.count for m in members})
        cls = DiscoveredClass(
            name=class_names[key],
            resource=resource,
            product=product,
            strategy=strategy,
            renamed=renamed,
            replicas=replicas,
            # A node without the memory label leaves a time-slicing class without one.
            memory_mib=(
                memories[0] if memories and all(m.memory_mib is not None for m in members) else None
            ),
            gpus_per_node=counts[0],
            nodes=tuple(sorted(m.node for m in members)),
            memories=tuple(memories) if len(memories) > 1 else (),
            counts=tuple(counts) if len(counts) > 1 else (),
            also_matches=(),
            untolerated=_untolerated(
                [by_name[m.node] for m in members],
                policies.advertised_resource(resource, renamed),
            ),
            multi_gpu=tuple(sorted((m.node, m.count) for m in members if m.count > 1)),
        )
        # The selector as the webhook compiles it, so that what we list is what it pins.
        pinned = cls.compiled().selector
        out.append(dataclasses.replace(cls, also_matches=tuple(matching(pinned, left_out))))
    return tuple(out)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _names(keys: Sequence[ClassKey]) -> dict[ClassKey, str]:
    """DNS labels from product and strategy (`tesla-t4-mps`); where two classes would share
    one, what tells them apart is added (replicas, not renamed), then a number."""
    base = {k: _slug(f"{k[1]}-{k[2]}") or "gpu" for k in keys}
    chosen: dict[ClassKey, str] = {}
    for k in keys:
        rivals = [o for o in keys if base[o] == base[k]]
        name = base[k]
        if len(rivals) > 1:
            if len({o[4] for o in rivals}) > 1:
                name += f"-{k[4]}x"
            if len({o[3] for o in rivals}) > 1 and not k[3]:
                name += "-not-renamed"
        chosen[k] = name
    taken: set[str] = set()
    for k in keys:
        name, number = chosen[k], 1
        candidate = _fit(name, "")
        while candidate in taken:
            number += 1
            candidate = _fit(name, f"-{number}")
        taken.add(candidate)
        chosen[k] = candidate
    return chosen


def _fit(name: str, suffix: str) -> str:
    """`name` + `suffix` cut to a DNS label's 63 characters."""
    return name[: 63 - len(suffix)].rstrip("-") + suffix


def _untolerated(nodes: Sequence[Node], advertised: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Taints of `nodes` that the generated policy's tolerations do not cover: the default
    (`nvidia.com/gpu` Exists NoSchedule) and the resource's own (Exists NoSchedule)."""
    generated = [
        {"key": key, "operator": "Exists", "effect": "NoSchedule"}
        for key in ("nvidia.com/gpu", advertised)
    ]
    return untolerated(generated, nodes).taints


def tolerates(toleration: Mapping[str, Any], key: str, value: str, effect: str) -> bool:
    """Whether `toleration` tolerates the taint key=value:effect, as the scheduler and the
    taint manager decide it: an empty effect matches every effect; an empty key (with
    operator Exists) every key and value; Exists any value of its key; Equal (the default)
    only the same value, an absent one being empty."""
    tol_effect = toleration.get("effect") or ""
    if tol_effect and tol_effect != effect:
        return False
    tol_key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not tol_key:
        return operator == "Exists"
    if tol_key != key:
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == value


@dataclass(frozen=True, slots=True)
class Untolerated:
    """The nodes of a class whose taints its pods do not tolerate."""

    # Each taint (as `key=value:effect`) and the nodes that carry it.
    taints: tuple[tuple[str, tuple[str, ...]], ...]
    nodes: tuple[str, ...]


def untolerated(tolerations: Sequence[Mapping[str, Any]], nodes: Sequence[Node]) -> Untolerated:
    """The NoSchedule and NoExecute taints of `nodes` that none of `tolerations` tolerates
    (those Kubernetes puts on for a node's state aside)."""
    found: dict[str, list[str]] = {}
    blocked: set[str] = set()
    for node in nodes:
        for key, value, effect in node.taints:
            if key.startswith(_SYSTEM_TAINT_PREFIX):
                continue
            if any(tolerates(t, key, value, effect) for t in tolerations):
                continue
            text = f"{key}={value}:{effect}" if value else f"{key}:{effect}"
            found.setdefault(text, []).append(node.name)
            blocked.add(node.name)
    return Untolerated(
        tuple((t, tuple(sorted(ns))) for t, ns in sorted(found.items())),
        tuple(sorted(blocked)),
    )


# --------------------------------------------------------------------------- profiles


def mps_profiles(classes: Sequence[DiscoveredClass]) -> dict[str, dict[str, int]]:
    """MPS size profiles that fit every MPS class's ceiling (100/replicas %, memory/replicas
    MiB): `medium` is the smallest ceiling, `small` about half of it. None without MPS."""
    mps = [c for c in classes if c.strategy == "mps"]
    if not mps:
        return {}
    threads = min(100 // c.replicas for c in mps)
    memory = min((c.memory_mib or 0) // c.replicas for c in mps)
    medium: dict[str, int] = {"activeThreadPercentage": threads}
    small: dict[str, int] = {"activeThreadPercentage": max(1, threads // 2)}
    if memory >= 1:
        medium["pinnedMemoryMiB"] = memory
        small["pinnedMemoryMiB"] = max(1, memory // 2)
    if small == medium:
        return {"medium": medium}
    return {"small": small, "medium": medium}


DEFAULT_PROFILE = "medium"


def policy_document(
    classes: Sequence[DiscoveredClass],
    *,
    name: str,
    dra: Mapping[str, Any] | None = None,
    exclusive: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The SharingPolicy for `classes` as plain data (no comments), with `dra` as its dra
    section when given (`dra_section`) and `exclusive` as its exclusiveGpus section
    (`WholeGpus.spec`).

    Without classes (a cluster or pool whose GPUs come through DRA alone, or are given whole:
    `dra` or `exclusive` is then required), the policy has no field of the device plugin's
    sharing: no nodeClasses, sharedResources, runtimeClassName, tolerations or profiles. The
    webhook sets the runtime class and the tolerations only on pods that ask for a shared
    resource of a node class, and a profile only sizes MPS, which no class discover writes
    allows. Every policy lists the driver capabilities a GPU container may have."""
    spec: dict[str, Any] = {"mode": names.ENFORCE}
    if classes:
        spec.update(
            sharedResources=sorted({c.advertised for c in classes}),
            runtimeClassName=names.DEFAULT_RUNTIME_CLASS,
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            nodeClasses=[c.spec() for c in classes],
        )
    elif dra is None and exclusive is None:
        raise ValueError("a policy without node classes needs a dra or an exclusiveGpus section")
    profiles = mps_profiles(classes)
    if profiles:
        spec["profiles"] = profiles
        spec["defaultProfile"] = DEFAULT_PROFILE
    if exclusive is not None:
        spec["exclusiveGpus"] = dict(exclusive)
    spec["driverCapabilities"] = list(DRIVER_CAPABILITIES)
    if dra is not None:
        spec["dra"] = dict(dra)
    return {
        "apiVersion": policies.API_VERSION,
        "kind": policies.KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


# What CUDA and nvidia-smi need, and what the NVIDIA runtime gives where the variable is unset.
DRIVER_CAPABILITIES = names.DRIVER_CAPABILITIES_UNSET


# --------------------------------------------------------------------------- label selectors
#
# `discover --pool` names a pool of nodes by a label selector, read as kubectl reads `-l`:
# requirements joined by commas, each `key` (the label exists), `!key` (it does not),
# `key=value` or `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key>n`,
# `key<n`. `!=` and `notin` also hold on a node without the label; `>` and `<` need a label
# that is a whole number. A value may be empty (`key=`, `key in (a,)`); no requirement at
# all selects every node.

_SELECTOR_TOKEN = re.compile(r"\s*(?:(==|!=|[=!(),<>])|([^\s=!(),<>]+))")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN = re.compile(names.DNS1123_SUBDOMAIN)
_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")
# Operators after the key: exact ones take one value, set ones a list in parentheses.
_EXACT = {"=": "=", "==": "=", "!=": "!=", ">": ">", "<": "<"}
_SETS = ("in", "notin")
EXISTS, NOT_EXISTS = "exists", "!"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement of a label selector."""

    key: str
    # exists, !, =, !=, in, notin, >, <
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        op = self.operator
        if op == EXISTS:
            return value is not None
        if op == NOT_EXISTS:
            return value is None
        if op in ("=", "in"):
            return value is not None and value in self.values
        if op in ("!=", "notin"):
            return value is None or value not in self.values
        if value is None or not _INTEGER.fullmatch(value):
            return False
        limit = int(self.values[0])
        return int(value) > limit if op == ">" else int(value) < limit

    def __str__(self) -> str:
        if self.operator == EXISTS:
            return self.key
        if self.operator == NOT_EXISTS:
            return f"!{self.key}"
        if self.operator in _SETS:
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        return f"{self.key}{self.operator}{self.values[0]}"


@dataclass(frozen=True, slots=True)
class Selector:
    """A label selector: every requirement holds."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(map(str, self.requirements))


def parse_selector(text: str) -> Selector:
    """`text` as kubectl reads a label selector; ValueError saying what is wrong, and where."""
    tokens = _selector_tokens(text)
    requirements: list[Requirement] = []
    at = 0
    while at < len(tokens):
        requirement, at = _requirement(tokens, at)
        requirements.append(requirement)
        if at == len(tokens):
            break
        if tokens[at] != ",":
            raise ValueError(
                f"{_said(tokens[at])} after {requirement}, where ',' or the end belongs"
            )
        at += 1
        if at == len(tokens):
            raise ValueError("a ',' with no requirement after it")
    return Selector(tuple(requirements))


def _selector_tokens(text: str) -> list[str]:
    """Operators and words; a word is kept with a leading space mark (`' '+word`) so that no
    word is taken for an operator."""
    tokens: list[str] = []
    at = 0
    while at < len(text):
        m = _SELECTOR_TOKEN.match(text, at)
        if m is None:  # blanks at the end
            break
        tokens.append(m.group(1) if m.group(1) else " " + m.group(2))
        at = m.end()
    return tokens


def _word(token: str | None) -> str | None:
    return token[1:] if token is not None and token.startswith(" ") else None


def _said(token: str) -> str:
    return repr(_word(token) or token)


def _requirement(tokens: Sequence[str], at: int) -> tuple[Requirement, int]:
    absent = tokens[at] == "!"
    if absent:
        at += 1
    key = _word(tokens[at] if at < len(tokens) else None)
    if key is None:
        found = _said(tokens[at]) if at < len(tokens) else "the end"
        raise ValueError(f"{found} where a label key belongs")
    _check_key(key)
    at += 1
    following = tokens[at] if at < len(tokens) else ","
    if absent or following == ",":
        return Requirement(key, NOT_EXISTS if absent else EXISTS), at
    if following in _EXACT:
        op = _EXACT[following]
        at += 1
        nxt = tokens[at] if at < len(tokens) else ","
        value = "" if nxt == "," else _word(nxt)
        if value is None:
            raise ValueError(f"{_said(nxt)} after {key}{following}, where a value belongs")
        if nxt != ",":
            at += 1
        _check_value(key, value)
        if op in (">", "<") and not _INTEGER.fullmatch(value):
            raise ValueError(f"{key}{op}{value}: {op} compares with a whole number")
        return Requirement(key, op, (value,)), at
    word = _word(following)
    if word is None or word not in _SETS:
        raise ValueError(
            f"{_said(following)} after {key}, where an operator belongs"
            " (=, ==, !=, in, notin, >, <), or ',' or the end"
        )
    op = word
    at += 1
    if at >= len(tokens) or tokens[at] != "(":
        raise ValueError(f"{key} {op} needs its values in parentheses, as in {key} {op} (x,y)")
    values: list[str] = []
    current: str | None = None
    at += 1
    while True:
        token = tokens[at] if at < len(tokens) else None
        if token is None:
            raise ValueError(f"no ')' closes the values after {key} {op} (")
        at += 1
        if token in (",", ")"):
            values.append(current or "")
            current = None
            if token == ")":
                break
            continue
        item = _word(token)
        if item is None or current is not None:
            raise ValueError(
                f"{_said(token)} among the values after {key} {op} (: values are separated by ','"
            )
        current = item
    for value in values:
        _check_value(key, value)
    return Requirement(key, op, tuple(sorted(set(values)))), at


def _check_key(key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if (
        (slash and (not prefix or len(prefix) > names.MAX_SUBDOMAIN_LENGTH))
        or (prefix and not _SUBDOMAIN.fullmatch(prefix))
        or len(name) > names.MAX_LABEL_LENGTH
        or not _LABEL_NAME.fullmatch(name)
    ):
        raise ValueError(
            f"{key!r} is not a label key ([prefix/]name: a DNS subdomain, '/', then at most 63"
            " letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
        )


def _check_value(key: str, value: str) -> None:
    if not _label_value(value) and value != "":
        raise ValueError(
            f"{value!r} (of {key}) is not a label value (at most 63 letters, digits, '-', '_'"
            " or '.', starting and ending with a letter or digit)"
        )


# --------------------------------------------------------------------------- pools
#
# `discover --pool NAME=SELECTOR` writes one policy per pool: the nodes the selector matches
# alone decide its classes and whole GPUs. A node belongs to one pool at most (its GPUs to one
# policy); the GPU nodes of no pool are described by no policy.


@dataclass(frozen=True, slots=True)
class Pools:
    """Which nodes of a dump each pool holds."""

    # Pool name -> its nodes, in the order the pools were given.
    members: Mapping[str, tuple[str, ...]]
    # Nodes that two pools or more select, with those pools.
    overlaps: tuple[tuple[str, tuple[str, ...]], ...]
    # Nodes no pool selects.
    outside: tuple[str, ...]


def assign_pools(pools: Sequence[tuple[str, Selector]], nodes: Iterable[Node]) -> Pools:
    members: dict[str, list[str]] = {name: [] for name, _ in pools}
    overlaps: list[tuple[str, tuple[str, ...]]] = []
    outside: list[str] = []
    for node in sorted(nodes, key=lambda n: n.name):
        holding = [name for name, selector in pools if selector.matches(node.labels)]
        if len(holding) > 1:
            overlaps.append((node.name, tuple(holding)))
        elif not holding:
            outside.append(node.name)
        for name in holding:
            members[name].append(node.name)
    return Pools(
        MappingProxyType({k: tuple(v) for k, v in members.items()}),
        tuple(overlaps),
        tuple(outside),
    )


def matched_elsewhere(
    classes: Sequence[DiscoveredClass], members: Collection[str], nodes: Iterable[Node]
) -> dict[str, tuple[str, ...]]:
    """For each class of a pool, the nodes outside the pool its selector matches: the webhook
    pins a class's pods by GPU labels, not by pool, so they may land there too."""
    everyone = list(nodes)
    out = {}
    for cls in classes:
        hits = [n for n in matching(cls.compiled().selector, everyone) if n not in members]
        if hits:
            out[cls.name] = tuple(sorted(hits))
    return out


@dataclass(frozen=True, slots=True)
class WholeGpus:
    """The GPUs the nodes of a survey give whole (replicas 1), which a pool's policy governs
    with its exclusiveGpus section."""

    # Each node with whole GPUs and how many it has, all its whole GPU resources together
    # (None: a count label is missing).
    per_node: tuple[tuple[str, int | None], ...]
    resources: tuple[str, ...]
    # Whole GPUs asked for by a name the policy shares (a class that is not renamed shares
    # nvidia.com/gpu): its pods are pinned to the class, never to these. (node, resource).
    shadowed: tuple[tuple[str, str], ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.per_node)

    @property
    def most_per_node(self) -> int | None:
        """The most whole GPUs one node has: more than that, a pod waits forever."""
        counts = [c for _, c in self.per_node]
        if not counts or None in counts:
            return None
        return max(c for c in counts if c is not None)

    @property
    def uncounted(self) -> tuple[str, ...]:
        return tuple(n for n, c in self.per_node if c is None)

    def spec(self) -> dict[str, Any]:
        """The exclusiveGpus section: allowed up to the most one node has; none on the
        pool's nodes, not allowed (a pod would get them on another pool's nodes)."""
        if not self.per_node:
            return {"allowed": False}
        out: dict[str, Any] = {"allowed": True}
        if self.most_per_node is not None:
            out["maxPerPod"] = self.most_per_node
        return out


def whole_gpus(found: Survey, shared: Collection[str]) -> WholeGpus:
    """The whole GPUs of the nodes of `found` (not left out), but those requested by a name in
    `shared`, the resources the policy's classes advertise."""
    per_node: dict[str, int | None] = {}
    resources: set[str] = set()
    shadowed: list[tuple[str, str]] = []
    for u in found.unshared:
        if not u.exclusive:
            continue
        if u.resource in shared:
            shadowed.append((u.node, u.resource))
            continue
        resources.add(u.resource)
        before = per_node.get(u.node, 0)
        per_node[u.node] = None if before is None or u.count is None else before + u.count
    return WholeGpus(
        tuple(sorted(per_node.items())), tuple(sorted(resources)), tuple(sorted(shadowed))
    )


def slices_on(found: SliceSurvey, nodes: Collection[str]) -> SliceSurvey:
    """The devices in force of a slice dump that are on `nodes` (a pool's), as a survey of
    their own: slices keep only those devices, and those left with none are dropped."""
    kept = []
    for s in found.current:
        devices = tuple(d for d in s.devices if d.node in nodes)
        if devices:
            kept.append(dataclasses.replace(s, devices=devices))
    return SliceSurvey(tuple(kept), tuple(kept), ())


# --------------------------------------------------------------------------- ResourceSlices
#
# A ResourceSlice (resource.k8s.io/v1) publishes devices of one driver in one pool; a pool may
# span several slices, and only those of its highest `pool.generation` count: the older ones
# are what the driver is replacing (the `ResourcePool.generation` API doc). NVIDIA's GPU DRA
# driver (`gpu.nvidia.com`) publishes one pool per node, each device with the attribute
# `type` (gpu, mig, vfio; vgpu behind its VGPUSupport gate) its device classes select on,
# `productName`, a MIG device's `profile`, and the capacity `memory` (a VFIO device's
# `addressableMemory`): the driver's reference, "ResourceSlice device attributes".

SLICE_KIND = "ResourceSlice"
# v1beta2 devices have v1's shape (v1beta1 nests them under `basic`, and no cluster this
# webhook reviews claims on, 1.34 or later, serves it by default).
SLICE_API_VERSIONS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2")
# The DeviceClass NVIDIA's chart installs for each device `type` (its CEL selects on it).
NVIDIA_DEVICE_CLASSES: Mapping[str, str] = MappingProxyType(
    {
        "gpu": names.DRA_GPU_CLASS,
        "mig": names.DRA_MIG_CLASS,
        "vfio": names.DRA_VFIO_CLASS,
        "vgpu": "vgpu.gpu.nvidia.com",
    }
)
# NVIDIA's attributes are bare keys in a slice; the domain-qualified form names them too.
_NVIDIA_DOMAIN = names.DRA_DRIVER + "/"
_MIB = 1024 * 1024
SLICES_EXPECTED = "expected the output of `kubectl get resourceslices -o json`"


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """A device of a ResourceSlice: what discovery reads of it."""

    name: str
    # The slice's nodeName, or the device's own (a pool with per-device node selection);
    # None for a pool of several nodes.
    node: str | None
    # NVIDIA's attributes (None where the device has none).
    type: str | None
    product: str | None
    profile: str | None
    # The capacity `memory` (a VFIO device's `addressableMemory`), in whole MiB.
    memory_mib: int | None
    # `allowMultipleAllocations`: claims share it by its capacity (consumable capacity).
    multiple: bool


@dataclass(frozen=True, slots=True)
class Slice:
    """A ResourceSlice of the dump: what discovery reads of it."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node: str | None
    devices: tuple[SliceDevice, ...]


def read_slices(objects: Iterable[Mapping[str, Any]]) -> tuple[list[Slice], int]:
    """The ResourceSlices among `objects`, and how many objects were not ResourceSlices.
    InputError for a slice of the wrong shape (naming it and the field), for a name given
    twice, or for no slice."""
    slices: list[Slice] = []
    others = 0
    seen: set[str] = set()
    for number, obj in enumerate(objects, 1):
        if obj.get("kind") != SLICE_KIND:
            others += 1
            continue
        read = _read_slice(obj, number)
        if read.name in seen:
            raise InputError(f"{SLICE_KIND}/{read.name}: appears twice in the dump")
        seen.add(read.name)
        slices.append(read)
    if not slices:
        raise InputError(f"holds no {SLICE_KIND} object ({SLICES_EXPECTED})")
    return slices, others


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _wrong(where: str, value: Any, expected: str) -> InputError:
    if value is None:
        return InputError(f"{where} is missing")
    return InputError(f"{where}: {_shown(value)} is not {expected}")


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _wrong(where, value, "a name")
    return value


def _optional_text(value: Any, where: str) -> str | None:
    return None if value is None else _text(value, where)


def _count(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _wrong(where, value, f"a whole number of at least {minimum}")
    return value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    """A mapping (none: empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where} is not a mapping")
    return value


def _read_slice(obj: Mapping[str, Any], number: int) -> Slice:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise InputError(f"object {number}, a {SLICE_KIND}: metadata.name is missing")
    what = f"{SLICE_KIND}/{name}"
    version = obj.get("apiVersion")
    if version not in SLICE_API_VERSIONS:
        said = "apiVersion is missing" if version is None else f"apiVersion {_shown(version)}"
        raise InputError(
            f"{what}: {said}: discover reads {SLICE_API_VERSIONS[0]}, which Kubernetes 1.34"
            " and later serve (`kubectl get resourceslices -o json` there)"
        )
    if obj.get("spec") is None:
        raise InputError(f"{what}: spec is missing")
    spec = _object(obj.get("spec"), f"{what}: spec")
    driver = _text(spec.get("driver"), f"{what}: spec.driver")
    if spec.get("pool") is None:
        raise InputError(f"{what}: spec.pool is missing")
    pool = _object(spec.get("pool"), f"{what}: spec.pool")
    node = _optional_text(spec.get("nodeName"), f"{what}: spec.nodeName")
    raw = spec.get("devices")
    if raw is not None and not isinstance(raw, list):
        raise InputError(f"{what}: spec.devices is not a list")
    nvidia = driver == names.DRA_DRIVER
    return Slice(
        name=name,
        driver=driver,
        pool=_text(pool.get("name"), f"{what}: spec.pool.name"),
        generation=_count(pool.get("generation"), f"{what}: spec.pool.generation", 0),
        slice_count=_count(
            pool.get("resourceSliceCount"), f"{what}: spec.pool.resourceSliceCount", 1
        ),
        node=node,
        devices=tuple(
            _read_device(d, f"{what}: spec.devices[{i}]", node, nvidia)
            for i, d in enumerate(raw or [])
        ),
    )


def _read_device(raw: Any, where: str, node: str | None, nvidia: bool) -> SliceDevice:
    if not isinstance(raw, dict):
        raise InputError(f"{where} is not a mapping")
    name = _text(raw.get("name"), f"{where}.name")
    own_node = _optional_text(raw.get("nodeName"), f"{where}.nodeName")
    attributes = _object(raw.get("attributes"), f"{where}.attributes")
    for key, value in attributes.items():
        # Exactly one of string, int, bool, version (newer API versions add list forms).
        if not isinstance(value, dict) or len(value) != 1:
            raise InputError(
                f"{where}.attributes.{key}: not an attribute (a mapping with one of string,"
                " int, bool or version)"
            )
    capacity = _object(raw.get("capacity"), f"{where}.capacity")
    amounts: dict[str, int] = {}
    for key, value in capacity.items():
        if not isinstance(value, dict) or "value" not in value:
            raise InputError(f"{where}.capacity.{key}: not a capacity (a mapping with value)")
        try:
            amount = quantities.parse(value["value"])
        except quantities.QuantityError as exc:
            raise InputError(
                f"{where}.capacity.{key}.value: {_shown(value['value'])} {exc}"
            ) from None
        amounts[str(key)] = int(amount // _MIB)
    multiple = raw.get("allowMultipleAllocations", False)
    if not isinstance(multiple, bool):
        raise _wrong(f"{where}.allowMultipleAllocations", multiple, "true or false")

    def attribute(key: str) -> str | None:
        if not nvidia:
            return None
        found = attributes.get(key, attributes.get(_NVIDIA_DOMAIN + key))
        if found is None:
            return None
        # Another form (an int) is no attribute NVIDIA's driver writes: as if absent.
        text = found.get("string")
        return text if isinstance(text, str) else None

    kind = attribute("type")
    memory = amounts.get("addressableMemory" if kind == "vfio" else "memory")
    return SliceDevice(
        name=name,
        node=own_node or node,
        type=kind,
        product=attribute("productName"),
        profile=attribute("profile"),
        memory_mib=memory if nvidia else None,
        multiple=multiple,
    )


@dataclass(frozen=True, slots=True)
class Pool:
    """A pool of the dump at its highest generation: how many slices it has, of how many."""

    driver: str
    name: str
    generation: int
    expected: int
    seen: int


@dataclass(frozen=True, slots=True)
class SliceSurvey:
    """What a ResourceSlice dump says about devices."""

    slices: tuple[Slice, ...]
    # The slices of each pool's highest generation: the ones in force.
    current: tuple[Slice, ...]
    # Pools with fewer slices of that generation than they announce (being published).
    incomplete: tuple[Pool, ...]
    # Objects of the dump that are not ResourceSlices.
    others: int = 0

    @property
    def stale(self) -> int:
        """Slices of an older generation of their pool, left out."""
        return len(self.slices) - len(self.current)

    @property
    def devices(self) -> tuple[tuple[Slice, SliceDevice], ...]:
        return tuple((s, d) for s in self.current for d in s.devices)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes the devices in force are on."""
        return tuple(sorted({d.node for _, d in self.devices if d.node}))


def survey_slices(slices: Sequence[Slice], *, others: int = 0) -> SliceSurvey:
    highest: dict[tuple[str, str], int] = {}
    for s in slices:
        key = (s.driver, s.pool)
        highest[key] = max(highest.get(key, s.generation), s.generation)
    current = [s for s in slices if s.generation == highest[(s.driver, s.pool)]]
    pools: dict[tuple[str, str], list[Slice]] = {}
    for s in current:
        pools.setdefault((s.driver, s.pool), []).append(s)
    incomplete = []
    for (driver, pool), members in sorted(pools.items()):
        # Slices of one generation announce one count; the largest is the safe reading.
        expected = max(m.slice_count for m in members)
        if len(members) < expected:
            incomplete.append(Pool(driver, pool, members[0].generation, expected, len(members)))
    return SliceSurvey(tuple(slices), tuple(current), tuple(incomplete), others)


@dataclass(frozen=True, slots=True)
class Product:
    """The devices of one product (and MIG profile) in a class."""

    name: str
    count: int
    nodes: tuple[str, ...]
    # Distinct memory sizes among them, in MiB.
    memories: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DraFoundClass:
    """An NVIDIA device class with devices in the slices, and what they are."""

    name: str
    # The devices' `type` attribute.
    type: str
    devices: int
    nodes: tuple[str, ...]
    products: tuple[Product, ...]
    # The smallest memory among its devices (None: a device publishes none).
    memory_mib: int | None
    # The most of its devices one node (or pool, where devices have no node) has.
    most_per_node: int
    # Devices published with allowMultipleAllocations (the driver's ConsumableShares).
    multiple: int

    def spec(self) -> dict[str, Any]:
        """The class as discover writes it: closed (the slices say what exists, not which
        namespaces may use it), one device per request, no sharing configuration (what no
        driver feature gate is needed for: see `discover`'s comments)."""
        return {"name": self.name, "allowed": False, "maxDevicesPerRequest": 1, "sharing": []}


@dataclass(frozen=True, slots=True)
class OtherDevices:
    """Devices no NVIDIA class selects: another driver's, or NVIDIA's of another type."""

    driver: str
    # NVIDIA's `type` attribute where the driver is NVIDIA's (None: no such attribute).
    type: str | None
    count: int
    nodes: tuple[str, ...]


def _product_name(d: SliceDevice) -> str:
    name = d.product or "no productName"
    return f"{name} MIG {d.profile}" if d.type == "mig" and d.profile else name


def dra_classes(found: SliceSurvey) -> tuple[DraFoundClass, ...]:
    """One class per NVIDIA device type with devices in force, in NVIDIA_DEVICE_CLASSES'
    order."""
    by_type: dict[str, list[tuple[Slice, SliceDevice]]] = {}
    for s, d in found.devices:
        if s.driver == names.DRA_DRIVER and d.type is not None and d.type in NVIDIA_DEVICE_CLASSES:
            by_type.setdefault(d.type, []).append((s, d))
    out = []
    for kind, class_name in NVIDIA_DEVICE_CLASSES.items():
        members = by_type.get(kind)
        if not members:
            continue
        products: dict[str, list[SliceDevice]] = {}
        places: dict[str, int] = {}
        for s, d in members:
            products.setdefault(_product_name(d), []).append(d)
            place = d.node or f"pool {s.pool}"
            places[place] = places.get(place, 0) + 1
        memories = [d.memory_mib for _, d in members]
        out.append(
            DraFoundClass(
                name=class_name,
                type=kind,
                devices=len(members),
                nodes=tuple(sorted({d.node for _, d in members if d.node})),
                products=tuple(
                    Product(
                        name=p,
                        count=len(ds),
                        nodes=tuple(sorted({d.node for d in ds if d.node})),
                        memories=tuple(
                            sorted({d.memory_mib for d in ds if d.memory_mib is not None})
                        ),
                    )
                    for p, ds in sorted(products.items())
                ),
                memory_mib=None if None in memories else min(m for m in memories if m is not None),
                most_per_node=max(places.values()),
                multiple=sum(1 for _, d in members if d.multiple),
            )
        )
    return tuple(out)


def other_devices(found: SliceSurvey) -> tuple[OtherDevices, ...]:
    """The devices in force that no NVIDIA class selects, by driver (and NVIDIA type)."""
    groups: dict[tuple[str, str | None], list[SliceDevice]] = {}
    for s, d in found.devices:
        if s.driver == names.DRA_DRIVER and d.type in NVIDIA_DEVICE_CLASSES:
            continue
        groups.setdefault((s.driver, d.type), []).append(d)
    return tuple(
        OtherDevices(driver, kind, len(ds), tuple(sorted({d.node for d in ds if d.node})))
        for (driver, kind), ds in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1] or ""))
    )


def dra_section(classes: Sequence[DraFoundClass]) -> dict[str, Any]:
    """The policy's dra section for `classes` as plain data."""
    return {"deviceClasses": [c.spec() for c in classes]}
