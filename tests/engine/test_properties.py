"""Invariants over generated pods (tests/support/strategies.py), odd but valid ones included: the
core never raises; every patch applies to the object as sent; the result is a valid Pod for two
Kubernetes versions and for the client's model; a second pass (reinvocation) wants nothing
more."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import strategies
from tests.support.kube import (
    WORKLOAD_KINDS,
    admission_review,
    admit,
    in_template,
    shipped,
    templates_of,
    workload,
)
from webhook.engine import reviewing
from webhook.errors import BadReview
from webhook.policy import policies
from webhook.server import codec

# Slow: hypothesis, 150 to 300 examples a test.
pytestmark = pytest.mark.slow

SHIPPED = shipped()


@strategies.PROPERTY_SETTINGS
@given(case=strategies.policy_and_pod)
def test_every_pod_is_admitted_validly_and_idempotently_or_refused_with_a_reason(
    case: tuple[policies.Policy, dict[str, Any]],
) -> None:
    policy, pod = case
    decision, result = admit(pod, policy)
    if decision.allowed:
        assert result is not None
    else:
        assert decision.message
        assert decision.patch == []
        assert all(v.rule for v in decision.violations)


@strategies.PROPERTY_SETTINGS
@given(case=strategies.policy_and_pod, kind=st.sampled_from(WORKLOAD_KINDS))
def test_a_workload_is_refused_exactly_when_its_pods_would_be(
    case: tuple[policies.Policy, dict[str, Any]], kind: str
) -> None:
    policy, pod = case
    pod_decision = reviewing.review_object(pod, policy=policy, mutate=False)
    obj = workload(kind, pod)
    decision, result = admit(obj, policy)
    assert [(v.rule, v.container, v.message) for v in decision.violations] == [
        (v.rule, v.container, in_template(v.message, kind)) for v in pod_decision.violations]
    if result is not None:
        # Allowed: its template comes out as its pods do (`mutate -f` shows it so).
        sent = templates_of(obj)[0]
        _, pod_result = admit({"apiVersion": "v1", "kind": "Pod", "metadata": sent["metadata"],
                               "spec": sent["spec"]}, policy)
        assert pod_result is not None
        template = templates_of(result)[0]
        assert template["spec"] == pod_result["spec"]
        assert (template.get("metadata") or {}).get("annotations") == (
            pod_result.get("metadata") or {}).get("annotations")


@strategies.PROPERTY_SETTINGS
@given(case=strategies.policy_and_pod)
def test_the_validating_pass_accepts_what_the_mutating_pass_produced(
    case: tuple[policies.Policy, dict[str, Any]],
) -> None:
    policy, pod = case
    _, result = admit(pod, policy)
    if result is not None:
        assert reviewing.review_object(result, policy=policy, mutate=False, require=True).allowed


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=12,
)
POD_KEYS = ["spec", "metadata", "containers", "initContainers", "resources", "limits", "requests",
            "env", "tolerations", "nodeSelector", "affinity", "annotations", "runtimeClassName",
            "securityContext", "nvidia.com/gpu.shared", "name", "value", "nodeAffinity"]


@st.composite
def mangled(draw: st.DrawFn) -> dict[str, Any]:
    """A pod with arbitrary JSON grafted anywhere: what a buggy client might send."""
    pod = draw(strategies.pods(frozenset(strategies.GPU_RESOURCES)))

    def graft(node: Any, depth: int) -> Any:
        if depth > 5 or not draw(st.booleans()):
            return node
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node) + POD_KEYS))
            replace = draw(st.booleans())
            node[key] = draw(json_values) if replace else graft(node.get(key), depth + 1)
        elif isinstance(node, list) and node:
            i = draw(st.integers(0, len(node) - 1))
            node[i] = graft(node[i], depth + 1)
        else:
            return draw(json_values)
        return node

    return graft(pod, 0)  # type: ignore[no-any-return]


@settings(max_examples=300, deadline=None)
@given(obj=mangled(), policy=st.sampled_from(strategies.POLICIES))
def test_the_core_never_raises_whatever_the_object(obj: Any, policy: policies.Policy) -> None:
    decision = reviewing.review_object(obj, policy=policy)
    assert isinstance(decision.allowed, bool)


@settings(max_examples=300, deadline=None)
@given(obj=mangled() | json_values, endpoint=st.sampled_from(["mutate", "validate"]))
def test_the_codec_answers_or_refuses_the_body_but_never_raises_anything_else(
    obj: Any, endpoint: codec.Endpoint
) -> None:
    review = admission_review({"apiVersion": "v1", "kind": "Pod", "metadata": {}})
    review["request"]["object"] = obj
    for body in (json.dumps(review).encode(), json.dumps(obj).encode()):
        try:
            outcome = codec.review(body, policies=SHIPPED, policy_name="default",
                                     endpoint=endpoint)
        except BadReview:
            continue
        answer = json.loads(outcome.body)
        assert answer["response"]["uid"] == review["request"]["uid"]
