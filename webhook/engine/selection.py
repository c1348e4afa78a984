"""Node selection: which node classes a pod's own constraints allow, and what to add.

A pod's required node constraints are its `nodeSelector` AND (any of its required node
affinity terms). We judge them against the labels gpu-feature-discovery puts on each class
(`NodeClass.known_labels`); a requirement on a label we know nothing about (hostname, zone...)
might hold on such a node, so it never excludes a class.

When the constraints do not already pin the pod to allowed classes, we add the class labels:
a `nodeSelector` for one class; for several, required node affinity terms with `In`
(label selectors cannot match a suffix, so products are listed). Existing affinity terms are
ANDed with ours, never replaced by a wider choice; a second pass finds the pod pinned and
adds nothing.
"""

from __future__ import annotations

import copy
import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine import structs, view
from webhook.engine.decision import added_value
from webhook.policy.policies import NodeClass

# A requirement: (key, operator, values). nodeSelector entries become (key, "In", (value,)).
Requirement = tuple[str, str, tuple[str, ...]]

_AFFINITY = "affinity"
_NODE_AFFINITY = "nodeAffinity"
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_TERMS = "nodeSelectorTerms"
# Bound on the combinations a pinning check enumerates; beyond it we add our terms anyway.
_MAX_COMBINATIONS = 256


@dataclass(frozen=True, slots=True)
class Constraints:
    """A pod's required node constraints, read defensively from its spec."""

    node_selector: Mapping[str, str]
    # The required terms (None: the pod has none), and each as a conjunction of
    # requirements (nodeSelector included); None for a term that can match no node.
    terms: Sequence[structs.Term] | None
    conjunctions: tuple[tuple[Requirement, ...] | None, ...]

    @property
    def empty(self) -> bool:
        return not self.node_selector and self.terms is None


NO_CONSTRAINTS: Constraints = Constraints({}, None, ((),))


def read(pod: view.Pod) -> Constraints:
    """A pod's constraints from its nodeSelector and required node selector terms (what
    the reader left of a term of another shape reads as matching no node)."""
    spec = pod.spec
    node_selector = dict((spec.nodeSelector if spec is not None else None) or ())
    terms = view.required_terms(spec)
    if not node_selector and terms is None:
        return NO_CONSTRAINTS
    base = tuple((k, "In", (v,)) for k, v in node_selector.items())
    if terms is None:
        return Constraints(node_selector, None, (base,))
    conjunctions: list[tuple[Requirement, ...] | None] = []
    for term in terms:
        reqs = _term_requirements(term)
        conjunctions.append(None if reqs is None else base + reqs)
    return Constraints(node_selector, terms, tuple(conjunctions))


def _term_requirements(term: structs.Term) -> tuple[Requirement, ...] | None:
    exprs = term.matchExpressions
    # An empty term matches no node (Kubernetes' rule); matchFields we cannot judge.
    if not exprs and not term.matchFields:
        return None
    reqs: list[Requirement] = []
    for expr in exprs or ():
        key, op = expr.key, expr.operator
        if key is None or op is None:
            continue
        reqs.append((key, op, tuple(expr.values or ())))
    return tuple(reqs)


def _holds(req: Requirement, labels: Mapping[str, str]) -> bool:
    key, op, values = req
    value = labels.get(key)
    if value is None:
        # A label we do not know for this class: a node of the class may carry it.
        return True
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return True
    if op == "DoesNotExist":
        return False
    if op in ("Gt", "Lt") and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return True


def admits(constraints: Constraints, cls: NodeClass) -> bool:
    labels = cls.known_labels
    for conj in constraints.conjunctions:
        if conj is not None and all(_holds(r, labels) for r in conj):
            return True
    return False


def _finite_values(conj: Sequence[Requirement], key: str) -> set[str] | None:
    allowed: set[str] | None = None
    for k, op, values in conj:
        if k == key and op == "In":
            allowed = set(values) if allowed is None else allowed & set(values)
    return allowed


# A requirement the pod's node must meet besides being of an allowed class: at least k GPUs
# (`R.count Gt k-1`) for a container that asks for k > 1 replicas, so that the device
# plugin can give each replica a different physical GPU.
Extra = Requirement | None


def min_gpus(resource: str, k: int) -> Extra:
    """The requirement for a container asking for `k` replicas of GPUs of `resource` (the
    device plugin's resource before renaming); None when k <= 1."""
    if k <= 1:
        return None
    return (f"{resource}.count", "Gt", (str(k - 1),))


def _implies(conj: Sequence[Requirement], extra: Extra) -> bool:
    """Whether every node satisfying `conj` satisfies `extra` (a Gt requirement)."""
    if extra is None:
        return True
    key, _, (bound_text,) = extra
    bound = int(bound_text)
    for k, op, values in conj:
        if k != key:
            continue
        try:
            numbers = [int(v) for v in values]
        except ValueError:
            continue
        if op == "Gt" and len(numbers) == 1 and numbers[0] >= bound:
            return True
        if op == "In" and numbers and min(numbers) > bound:
            return True
    return False


@functools.lru_cache(maxsize=256)
def _shapes(classes: tuple[NodeClass, ...]) -> dict[tuple[str, ...], frozenset[tuple[str, ...]]]:
    """The classes' selector values by selector keys (classes of one resource share keys)."""
    shapes: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    for c in classes:
        keys = tuple(k for k, _ in c.selector)
        shapes.setdefault(keys, set()).add(tuple(v for _, v in c.selector))
    return {k: frozenset(v) for k, v in shapes.items()}


def _pins(conj: Sequence[Requirement], classes: tuple[NodeClass, ...], extra: Extra) -> bool:
    """True when every node that satisfies `conj` belongs to one of `classes` (and meets
    `extra`)."""
    # Keys first: a conjunction that does not constrain every selector key to listed
    # values (the common case: hostname, zone) pins nothing.
    if not any(op == "In" for _, op, _ in conj) or not _implies(conj, extra):
        return False
    for keys, allowed_tuples in _shapes(classes).items():
        sets = [_finite_values(conj, k) for k in keys]
        if any(s is None for s in sets):
            continue
        finite = [sorted(s) for s in sets if s is not None]
        size = 1
        for s in finite:
            size *= len(s)
        if size > _MAX_COMBINATIONS:
            continue
        if all(combo in allowed_tuples for combo in itertools.product(*finite)):
            return True
    return False


def pinned(constraints: Constraints, classes: tuple[NodeClass, ...], extra: Extra = None) -> bool:
    """The pod can only land on `classes` (and nodes meeting `extra`): every satisfiable
    conjunction pins it."""
    if constraints.empty:
        return False
    conjs = [c for c in constraints.conjunctions if c is not None]
    if not conjs:
        return False
    return all(_pins(c, classes, extra) for c in conjs)


# A group of classes that differ only in product: its match expressions (key, values) and
# its classes. Immutable: patches are built from it afresh for every review.
Group = tuple[tuple[tuple[str, tuple[str, ...]], ...], tuple[NodeClass, ...]]


@functools.lru_cache(maxsize=1024)
def groups(classes: tuple[NodeClass, ...]) -> tuple[Group, ...]:
    """Classes grouped by all selector labels but the product, with each group's match
    expressions (the fixed labels, then the product `In` the group's products). Cached: the
    same few class sets recur in every review, and the result cannot be changed."""
    by_shape: dict[tuple[tuple[str, str], ...], list[NodeClass]] = {}
    for c in classes:
        fixed = tuple((k, v) for k, v in c.selector if k != c.product_label)
        by_shape.setdefault((*fixed, ("", c.product_label)), []).append(c)
    out: list[Group] = []
    for shape, members in by_shape.items():
        exprs: list[tuple[str, tuple[str, ...]]] = [(k, (v,)) for k, v in shape if k]
        products: list[str] = []
        for c in members:
            product = dict(c.selector)[c.product_label]
            if product not in products:
                products.append(product)
        exprs.append((members[0].product_label, tuple(products)))
        out.append((tuple(exprs), tuple(members)))
    return tuple(out)


def _expressions(group: Group, extra: Extra) -> list[dict[str, Any]]:
    """A group's match expressions as new objects (and `extra`'s, when there is one)."""
    exprs: list[dict[str, Any]] = [
        {"key": k, "operator": "In", "values": list(values)} for k, values in group[0]
    ]
    if extra is not None:
        exprs.append({"key": extra[0], "operator": extra[1], "values": list(extra[2])})
    return exprs


@functools.lru_cache(maxsize=1024)
def _terms(classes: tuple[NodeClass, ...], extra: Extra) -> tuple[tuple[dict[str, Any], ...], ...]:
    """The match expressions of the terms for a pod without terms of its own, term by term.
    Cached: never handed out, only copied (`_fresh_terms`)."""
    return tuple(tuple(_expressions(g, extra)) for g in groups(classes))


def _fresh_terms(classes: tuple[NodeClass, ...], extra: Extra) -> list[dict[str, Any]]:
    """The terms for a pod without terms of its own, as new objects: copies of the cached
    expressions, each list of values copied too (in the compiled core a copy of a small
    dict costs a fraction of building it)."""
    fresh: list[dict[str, Any]] = []
    for term in _terms(classes, extra):
        exprs: list[dict[str, Any]] = []
        for e in term:
            copied = e.copy()
            copied["values"] = list(e["values"])
            exprs.append(copied)
        fresh.append({"matchExpressions": exprs})
    return fresh


class TooManyTerms(Exception):
    """Pinning the pod would give it more required node selector terms than a review takes
    (`view.MAX_ITEMS`): its terms as sent, and after."""

    def __init__(self, sent: int, pinned: int) -> None:
        super().__init__(sent, pinned)
        self.sent = sent
        self.pinned = pinned


def plan(
    pod: view.Pod,
    constraints: Constraints,
    classes: tuple[NodeClass, ...],
    *,
    extra: Extra = None,
) -> list[dict[str, Any]]:
    """JSON Patch ops that pin the pod to `classes` (and nodes that meet `extra`); none when
    it is pinned already. `classes` are the allowed classes the pod's constraints admit,
    never empty. Every value is a new object. Raises TooManyTerms."""
    if pinned(constraints, classes, extra):
        return []
    path = f"{pod.place.pointer}/spec"
    if len(classes) == 1 and extra is None:
        return _pin_with_node_selector(pod, classes[0], path)
    if constraints.terms is None:
        return _add_required_terms(pod, _fresh_terms(classes, extra), path)
    grouped = groups(classes)
    # The terms as sent, which the patch copies; each that does not pin yet becomes one per
    # group of classes it can match (counted first: the copies are what costs).
    raw_terms = _sent_terms(pod)
    chosen: list[tuple[Any, list[Group] | None]] = []
    count = 0
    for raw, conj in zip(raw_terms, constraints.conjunctions, strict=True):
        if conj is None or _pins(conj, classes, extra):
            # A term that matches no node stays one; keeping it keeps the user's intent
            # visible. A term that pins already needs nothing.
            chosen.append((raw, None))
            count += 1
            continue
        groups_of = [
            g for g in grouped if any(all(_holds(r, c.known_labels) for r in conj) for c in g[1])
        ]
        chosen.append((raw, groups_of))
        count += len(groups_of)
    if count > view.MAX_ITEMS:
        raise TooManyTerms(len(raw_terms), count)
    new_terms: list[Any] = []
    for raw, matching in chosen:
        if matching is None:
            new_terms.append(copy.deepcopy(raw))
            continue
        for group in matching:
            term = copy.deepcopy(raw)
            existing = list(term.get("matchExpressions") or [])
            term["matchExpressions"] = existing + [
                e for e in _expressions(group, extra) if e not in existing
            ]
            new_terms.append(term)
    return [
        {
            "op": "replace",
            "path": f"{path}/{_AFFINITY}/{_NODE_AFFINITY}/{_REQUIRED}/{_TERMS}",
            "value": new_terms,
        }
    ]


def pin_words(op: Mapping[str, Any]) -> tuple[str, str]:
    """What an operation `plan` made adds, in rule node-selection's words: (topic, text),
    as `Pass.add` takes them."""
    path, value = str(op["path"]), op["value"]
    if "/nodeSelector" in path:
        if path.endswith("/nodeSelector"):
            pairs = value.items() if isinstance(value, dict) else ()
            return "nodeSelector", ", ".join(f"{k}={v}" for k, v in pairs)
        key = path.rsplit("/", 1)[1].replace("~1", "/").replace("~0", "~")
        return "nodeSelector", f"{key}={value}"
    terms = _term_words(value)
    topic = "required node affinity" + (" (terms rewritten)" if op["op"] == "replace" else "")
    if len(terms) > 1:
        return topic, " or ".join(f"({t})" for t in terms)
    return topic, terms[0] if terms else added_value(value)


def _term_words(value: Any) -> list[str]:
    """Node selector terms anywhere in `value`, each as `key Op values & ...`."""
    out: list[str] = []
    if isinstance(value, dict):
        exprs = value.get("matchExpressions")
        if isinstance(exprs, list):
            out.append(" & ".join(_expression_words(e) for e in exprs if isinstance(e, dict)))
            return out
        for v in value.values():
            out += _term_words(v)
    elif isinstance(value, list):
        for v in value:
            out += _term_words(v)
    return out


def _expression_words(e: Mapping[str, Any]) -> str:
    values = ",".join(map(str, e.get("values") or []))
    return f"{e.get('key')} {e.get('operator')} {values}".rstrip()


def _sent_terms(pod: view.Pod) -> list[Any]:
    """The pod's required node selector terms as it was sent (a term of another shape
    too, as it is)."""
    node = pod.found.generic()
    for step in ("spec", _AFFINITY, _NODE_AFFINITY, _REQUIRED, _TERMS):
        node = node.get(step) if isinstance(node, dict) else None
    return node if isinstance(node, list) else []


def _pin_with_node_selector(pod: view.Pod, cls: NodeClass, path: str) -> list[dict[str, Any]]:
    selector = pod.spec.nodeSelector if pod.spec is not None else None
    if selector is None:
        return [{"op": "add", "path": f"{path}/nodeSelector", "value": dict(cls.selector)}]
    current = dict(selector)
    return [
        {"op": "add", "path": f"{path}/nodeSelector/{view.escape(k)}", "value": v}
        for k, v in cls.selector
        if current.get(k) != v
    ]


def _add_required_terms(
    pod: view.Pod, terms: list[dict[str, Any]], path: str
) -> list[dict[str, Any]]:
    required = {_TERMS: terms}
    depth = view.affinity_depth(pod.spec)
    if depth == 0:
        return [
            {
                "op": "add",
                "path": f"{path}/{_AFFINITY}",
                "value": {_NODE_AFFINITY: {_REQUIRED: required}},
            }
        ]
    if depth == 1:
        return [
            {
                "op": "add",
                "path": f"{path}/{_AFFINITY}/{_NODE_AFFINITY}",
                "value": {_REQUIRED: required},
            }
        ]
    return [
        {"op": "add", "path": f"{path}/{_AFFINITY}/{_NODE_AFFINITY}/{_REQUIRED}", "value": required}
    ]


def describe(constraints: Constraints, classes: Sequence[NodeClass]) -> str:
    """The user's requirements on labels the classes carry, for a denial message."""
    known = {k for c in classes for k in c.known_labels}
    parts: list[str] = []
    for k, v in constraints.node_selector.items():
        if k in known:
            parts.append(f"nodeSelector {k}={v}")
    seen: set[Requirement] = set()
    for conj in constraints.conjunctions:
        for req in conj or ():
            k, op, values = req
            if (
                k in known
                and req not in seen
                and (k, "In", values)
                not in {(kk, "In", (vv,)) for kk, vv in constraints.node_selector.items()}
            ):
                seen.add(req)
                parts.append(f"affinity {k} {op} ({', '.join(values)})")
    return ", ".join(parts) or "node affinity"


def describe_class(cls: NodeClass) -> str:
    return f"{cls.name} [" + ", ".join(f"{k}={v}" for k, v in cls.selector) + "]"
