"""The view of a pod (webhook/core/view.py) is closed: immutable values all the way down,
holding every field a rule reads; and it is its own key: two pods that differ in any field
of the view never have equal views (nor equal hashes), whatever field a new rule adds to it,
and two pods that differ only where no rule reads have equal views and one decision.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from tests.support import corpus, kube
from webhook.engine import view
from webhook.engine.decision import OBJECT, Place

# Every kind of value the view is made of. A class added to the view must be added here (a
# test below fails otherwise), and so gets its fields varied.
VIEW_CLASSES = (view.Pod, view.Container, view.EnvVar, view.Mount, view.Volume,
                view.Problem, Place)


def _rich() -> dict[str, Any]:
    """A pod whose view has every field set, and every kind of value at least once."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"gpu-share.io/profile": "small"}},
        "spec": {
            "runtimeClassName": "nvidia",
            "hostPID": True,
            "hostIPC": False,
            "nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 30, "value": ""}],
            "resourceClaims": [{"name": "c"}],
            "volumes": [{"name": "dev", "hostPath": {"path": "/dev/shm"}}],
            "initContainers": [{"name": "init", "env": 3}],  # a malformed field: a problem
            "containers": [{
                "name": "main",
                "resources": {"limits": {"nvidia.com/gpu.shared": "1"},
                              "requests": {"nvidia.com/gpu.shared": "1"}},
                "env": [{"name": "A", "value": "1"}],
                "envFrom": [{"configMapRef": {"name": "m"}}],
                "securityContext": {"privileged": True, "capabilities": {"add": ["NET_ADMIN"]}},
                "volumeMounts": [{"name": "dev", "mountPath": "/dev/shm"}],
            }],
        },
    }


def _view(obj: dict[str, Any], place: Place = OBJECT) -> view.Pod:
    return view.read(view.Template(obj, place))


class Field(NamedTuple):
    owner: type  # the class whose field it is
    name: str
    path: tuple[Any, ...]  # field names and tuple indices from the Pod down to it


def _fields(value: Any, path: tuple[Any, ...] = ()) -> Iterator[Field]:
    """Every field of every named tuple in `value`, with its path."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        for name in value._fields:
            yield Field(type(value), name, (*path, name))
            yield from _fields(getattr(value, name), (*path, name))
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            yield from _fields(item, (*path, i))


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step] if isinstance(step, int) else getattr(value, step)
    return value


def _set(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """`value` with the field at `path` replaced by `new` (every other field as it was)."""
    if not path:
        return new
    step, rest = path[0], path[1:]
    if isinstance(step, int):
        items = list(value)
        items[step] = _set(items[step], rest, new)
        return tuple(items)
    return value._replace(**{step: _set(getattr(value, step), rest, new)})


def _other(value: Any) -> Any:
    """A value of the same kind that is not equal to `value`."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "-x"
    if value is None:
        return "x"
    if isinstance(value, view.Json):
        return view.Json([value.value, value.value])
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return value._replace(**{value._fields[0]: _other(value[0])})
    if isinstance(value, tuple):
        return value[:-1] if value else ("x",)
    raise AssertionError(f"no other value for {value!r}")


def test_every_field_of_every_class_of_the_view_is_reached_by_the_rich_pod() -> None:
    base = _view(_rich(), Place("/spec/template", "spec.template", ""))
    reached = {(f.owner, f.name) for f in _fields(base)}
    for cls in VIEW_CLASSES:
        for name in cls._fields:
            assert (cls, name) in reached, f"{cls.__name__}.{name}"
    # And the view holds no other kind of named tuple than these.
    assert {f.owner for f in _fields(base)} == set(VIEW_CLASSES)


def test_two_pods_that_differ_in_any_one_field_of_the_view_get_different_keys() -> None:
    base = _view(_rich(), Place("/spec/template", "spec.template", ""))
    again = _view(_rich(), Place("/spec/template", "spec.template", ""))
    assert again == base
    assert hash(again) == hash(base)
    varied = 0
    for f in _fields(base):
        other = _set(base, f.path, _other(_get(base, f.path)))
        assert other != base, f.path
        assert len({other, base}) == 2, f.path  # by hash too
        varied += 1
    assert varied > 50


def test_the_node_selector_terms_are_compared_as_json_text() -> None:
    """`true` is not `1`, and keys in another order are another patch."""
    assert view.Json([{"a": 1}]) == view.Json([{"a": 1}])
    assert view.Json([{"a": True}]) != view.Json([{"a": 1}])
    assert view.Json({"a": 1, "b": 2}) != view.Json({"b": 2, "a": 1})
    assert hash(view.Json([{"a": 1}])) == hash(view.Json([{"a": 1}]))
    # A YAML file's integer beyond JSON's range is still compared (by its repr).
    assert view.Json([2**80]) == view.Json([2**80]) != view.Json([2**80 + 1])


def _mutable(value: Any, path: str = "") -> Iterator[str]:
    if isinstance(value, list | dict | set | bytearray):
        yield path
    elif isinstance(value, tuple):
        names = getattr(value, "_fields", range(len(value)))
        for name, item in zip(names, value, strict=True):
            yield from _mutable(item, f"{path}.{name}")


@pytest.mark.parametrize("obj", corpus.pods(), ids=lambda o: o["metadata"].get("name", "p"))
def test_the_view_of_every_pod_of_the_corpus_holds_nothing_that_can_be_changed(
    obj: dict[str, Any],
) -> None:
    view = _view(obj)
    assert list(_mutable(view)) == []
    hash(view)  # a key
    with pytest.raises(AttributeError):
        view.containers = ()  # type: ignore[misc]


def _unread(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` changed only in fields no rule reads: its name, labels, images, commands,
    ports, probes, an unknown field."""
    out = copy.deepcopy(obj)
    out["metadata"]["name"] = "another"
    out["metadata"]["labels"] = {"app": "other"}
    spec = out["spec"]
    spec["priority"] = 7
    for group in view.CONTAINER_GROUPS:
        for c in spec.get(group) or []:
            c["image"] = "registry.example/other:1"
            c["command"] = ["sleep", "1"]
            c["ports"] = [{"containerPort": 9}]
            c["readinessProbe"] = {"exec": {"command": ["true"]}}
    return out


def test_pods_that_differ_only_where_no_rule_reads_have_one_view_and_one_decision() -> None:
    policy = kube.shipped().policies["default"]
    for obj in corpus.pods():
        other = _unread(obj)
        assert _view(other) == _view(obj)
        a, b = kube.review(obj, policy), kube.review(other, policy)
        assert (a.violations, a.patch, a.warnings, a.audit) == (
            b.violations, b.patch, b.warnings, b.audit)


# Values of every JSON type, some equal under Python's equality (1, 1.0, True) but not to a
# rule (a quantity of `true` is refused, of `1` is not).
OTHER_VALUES = (1, 1.0, True, False, 0, "1", "", None, [], {}, [1], {"a": 1})


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value in `value` that is not an object or a list."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    else:
        yield path


def _replaced(obj: Any, path: tuple[Any, ...], new: Any) -> Any:
    out = copy.deepcopy(obj)
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = new
    return out


def _said(decision: Any) -> tuple[Any, ...]:
    return (decision.allowed, decision.message if decision.violations else "", decision.patch,
            decision.warnings, decision.audit)


def test_pods_with_equal_views_get_equal_decisions_whatever_the_json_types() -> None:
    """Every value of the pods changed, in turn, to values of every JSON type: where two pods
    have equal views, they have equal decisions (and every view can be hashed)."""
    policy = kube.shipped().policies["default"]
    seen: dict[view.Pod, tuple[Any, ...]] = {}
    pairs = 0
    for obj in [_rich(), *corpus.pods()[:12]]:
        for path in _leaves(obj):
            if path[0] in ("apiVersion", "kind"):
                continue
            for new in OTHER_VALUES:
                changed = _replaced(obj, path, new)
                view = _view(changed)
                said = _said(kube.review(changed, policy))
                if view in seen:
                    pairs += 1
                    assert seen[view] == said, (path, new)
                else:
                    seen[view] = said
    assert pairs > 100
