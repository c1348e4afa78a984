"""The view (webhook/engine/view.py): the typed decode and the reader build the same view.

A review decodes the object's bytes straight into the view's structs; where a field has a
type no Kubernetes object has, the reader reads the object's generic form again, naming every
such field. So the two must agree: where the typed decode succeeds, the reader finds nothing
wrong and builds equal structs (the typed decode is at least as strict); where it fails,
the reader names the problems and the rest reads as it would have. Checked here on every pod
of the corpus, and on each of them with every value changed, in turn, to values of every
JSON type.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import msgspec
import orjson
import pytest

from tests.support import corpus, kube
from webhook.engine import view
from webhook.engine.decision import OBJECT
from webhook.policy import kinds


def _rich() -> dict[str, Any]:
    """A pod that sets every field the view holds."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"gpu-share.io/profile": "small"},
                     "labels": {"app": "x"}},
        "spec": {
            "runtimeClassName": "nvidia",
            "hostPID": True,
            "hostIPC": False,
            "hostNetwork": False,
            "nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 30}],
            "resourceClaims": [{"name": "c"}],
            "volumes": [{"name": "dev", "hostPath": {"path": "/dev/shm"}}],
            "initContainers": [{"name": "init", "restartPolicy": "Always"}],
            "containers": [{
                "name": "main",
                "resources": {"limits": {"nvidia.com/gpu.shared": "1"},
                              "requests": {"nvidia.com/gpu.shared": "1"},
                              "claims": [{"name": "c"}]},
                "env": [{"name": "A", "value": "1"},
                        {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                "envFrom": [{"configMapRef": {"name": "m"}}],
                "securityContext": {"privileged": True, "capabilities": {"add": ["NET_ADMIN"]}},
                "volumeMounts": [{"name": "dev", "mountPath": "/dev/shm", "readOnly": True}],
            }],
        },
    }


def _both(obj: dict[str, Any]) -> tuple[Any, Any]:
    """What the typed decode of the bytes and the reader of the generic form make of a pod:
    (template, problems) each."""
    found, problems = view.templates(orjson.dumps(obj))
    assert not problems
    typed = (found[0].template, found[0].problems) if found else None
    template, read = view.read_generic(obj)
    return typed, (template, read)


def test_the_rich_pod_sets_every_field_of_every_struct() -> None:
    found, _ = view.templates(orjson.dumps(_rich()))
    unset: list[str] = []

    def visit(value: Any, path: str) -> None:
        for name in getattr(value, "__struct_fields__", ()):
            field = getattr(value, name)
            if field is None:
                unset.append(f"{path}.{name}")
            visit(field, f"{path}.{name}")
        if isinstance(value, list):
            for i, item in enumerate(value):
                visit(item, f"{path}[{i}]")

    visit(found[0].template, "")
    # What a rich pod still leaves out: one container of each kind sets the fields of one,
    # a variable sets a value or takes one from valueFrom, a term has expressions only.
    assert unset == [
        ".metadata.generateName", ".metadata.namespace",
        ".spec.initContainers[0].resources", ".spec.initContainers[0].env",
        ".spec.initContainers[0].envFrom", ".spec.initContainers[0].securityContext",
        ".spec.initContainers[0].volumeMounts", ".spec.containers[0].env[0].valueFrom",
        ".spec.containers[0].env[1].value", ".spec.containers[0].restartPolicy",
        ".spec.ephemeralContainers",
        ".spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchFields",
    ]


def test_the_typed_decode_and_the_reader_build_the_same_view_of_the_corpus() -> None:
    for obj in [_rich(), *corpus.pods()]:
        typed, (template, problems) = _both(kube.as_served(obj))
        assert typed == (template, tuple(problems)), obj["metadata"]


# Values of every JSON type, some equal under Python's equality (1, 1.0, True).
OTHER_VALUES = (1, 1.5, True, "1", "", None, [], {}, [1], {"a": 1})


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value in `value`, objects and lists included."""
    if path:
        yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))


def _replaced(obj: Any, path: tuple[Any, ...], new: Any) -> Any:
    out = copy.deepcopy(obj)
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = new
    return out


@pytest.mark.parametrize("index", range(4))
def test_where_the_typed_decode_takes_a_pod_the_reader_finds_nothing_and_reads_it_alike(
    index: int,
) -> None:
    """Every value of a pod changed, in turn, to values of every JSON type: the typed decode
    takes it only where the reader finds no problem and builds equal structs; where it does
    not, the review reads it again, and says what is wrong."""
    obj = [_rich(), *corpus.pods()[:3]][index]
    taken = refused = 0
    for path in _leaves(obj):
        if path[0] in ("apiVersion", "kind"):
            continue
        for new in OTHER_VALUES:
            changed = _replaced(obj, path, new)
            found, _ = view.templates(orjson.dumps(changed))
            template, problems = view.read_generic(changed)
            # Every value the reader keeps is of its field's type (the compiled core checks
            # the type where it reads a value: one of another type would be an internal error).
            assert msgspec.convert(msgspec.to_builtins(template), view.Template) == template, (
                path, new)
            if not found:  # a mirror pod, or no longer a Pod
                continue
            if found[0].problems:
                refused += 1
                assert found[0].problems == tuple(problems), (path, new)
                assert found[0].template == template, (path, new)
            else:
                taken += 1
                assert problems == [], (path, new, problems)
                assert found[0].template == template, (path, new)
    assert taken > 50
    assert refused > 50


@pytest.mark.parametrize(
    ("change", "problems"),
    [
        ({"env": 3}, ["spec.containers[0].env: a list, not a number"]),
        ({"env": [3, {"name": "A", "value": 1}]},
         ["spec.containers[0].env[0]: an object, not a number",
          "spec.containers[0].env[1].value: a string, not a number"]),
        ({"securityContext": {"privileged": "yes"}},
         ["spec.containers[0].securityContext.privileged: a boolean, not a string"]),
        ({"volumeMounts": [{"name": "v", "mountPath": 5}]},
         ["spec.containers[0].volumeMounts[0].mountPath: a string, not a number"]),
        ({"resources": {"limits": []}},
         ["spec.containers[0].resources.limits: an object, not a list"]),
    ],
)
def test_a_field_of_another_type_is_a_problem_and_the_rest_is_read(
    change: dict[str, Any], problems: list[str]
) -> None:
    obj = kube.pod(kube.shared())
    obj["spec"]["containers"][0].update(change)
    found, _ = view.templates(orjson.dumps(obj))
    said = [f"{p.field}: {p.expected}, not {p.found}" for p in found[0].problems]
    assert said == problems
    # The rest is read: the container's name and its shared GPU.
    c = found[0].template.spec.containers[0]  # type: ignore[union-attr]
    assert c.name == "main"


def test_pods_that_differ_only_where_no_rule_reads_have_one_view_and_one_decision() -> None:
    policy = kube.shipped().policies["default"]
    for obj in corpus.pods():
        other = copy.deepcopy(obj)
        other["metadata"]["uid"] = "x"
        for c in other["spec"].get("containers") or []:
            c["image"] = "other:1"
            c["command"] = ["sleep", "1"]
            c["ports"] = [{"containerPort": 9}]
        a_found, _ = view.templates(orjson.dumps(obj))
        b_found, _ = view.templates(orjson.dumps(other))
        assert a_found[0].template == b_found[0].template
        a, b = kube.review(obj, policy), kube.review(other, policy)
        assert (a.violations, a.patch, a.warnings, a.audit) == (
            b.violations, b.patch, b.warnings, b.audit)


def test_a_place_is_kept_for_a_pod() -> None:
    found, _ = view.templates(orjson.dumps(_rich()))
    assert found[0].place == OBJECT


@pytest.mark.parametrize("item", [None, 0, "x"], ids=["null", "number", "string"])
def test_the_reading_stops_at_a_thousand_problems_and_says_so(item: object) -> None:
    # A list of a million nulls in a body under 7 MiB must not cost a million problems (a
    # gigabyte); the pod is refused at the first anyway.
    spec: dict[str, Any] = {"containers": [item] * 200_000}
    template, problems = view.read_generic({"metadata": {"name": "p"}, "spec": spec})
    assert len(problems) == view.MAX_PROBLEMS + 1
    assert problems[0].field == "spec.containers[0]"
    assert problems[-1] == view.TOO_MANY
    assert template == view.Template()


def test_a_workload_walk_stops_at_a_thousand_problems_and_says_so() -> None:
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "j"}, "spec": {"replicatedJobs": [0] * 200_000}}
    found, problems = view.templates(jobset, kinds.kinds_by_name(kinds.all_kinds()))
    assert found == []
    assert len(problems) == view.MAX_PROBLEMS + 1
    assert problems[0] == view.Problem("spec.replicatedJobs[0]", "an object", "a number")
    assert problems[-1] == view.TOO_MANY
