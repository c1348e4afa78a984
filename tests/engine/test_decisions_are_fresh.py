"""Nothing a review returns aliases state that another review reads: the compiled policy is
immutable, and a caller that changes a decision it got (its patch values, warnings, audit
annotations) changes no later decision."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from tests.support.kube import PROFILES, T4_MPS, container, make_policy, pod, review, shared
from webhook.policy import policies

LAB = make_policy(
    [T4_MPS, {"name": "a100", "product": "NVIDIA-A100", "strategy": "time-slicing",
              "replicas": 2, "gpusPerNode": 8}],
    profiles=PROFILES, default_profile="medium", name="lab",
)
PODS = [
    pytest.param(pod(shared(), container("log")), id="several-classes-and-a-sidecar"),
    pytest.param(pod(shared(2)), id="two-replicas-count-pin"),
    pytest.param(pod(shared(), nodeSelector={"nvidia.com/gpu.product": "Tesla-T4"}),
                 id="one-class-node-selector"),
    pytest.param(pod(shared(envFrom=[{"configMapRef": {"name": "c"}}])), id="warning-and-audit"),
    pytest.param(pod(container()), id="no-gpu"),
]


def _vandalise(value: Any) -> None:
    """Change every list and dict reachable from `value`, in place."""
    if isinstance(value, dict):
        for v in list(value.values()):
            _vandalise(v)
        value["vandalised"] = True
    elif isinstance(value, list):
        for v in list(value):
            _vandalise(v)
        value.append("vandalised")


@pytest.mark.parametrize("obj", PODS)
def test_changing_a_decision_changes_no_later_one(obj: dict[str, Any]) -> None:
    fresh = review(copy.deepcopy(obj), LAB)
    expected = copy.deepcopy((fresh.patch, fresh.warnings, fresh.audit, fresh.mutations))
    first = review(copy.deepcopy(obj), LAB)
    _vandalise(first.patch)
    _vandalise(first.warnings)
    first.audit["vandalised"] = "yes"
    first.mutations.append("vandalised")
    second = review(copy.deepcopy(obj), LAB)
    assert (second.patch, second.warnings, second.audit, second.mutations) == expected


@pytest.mark.parametrize("obj", PODS)
def test_a_review_leaves_the_policy_and_the_object_as_they_were(obj: dict[str, Any]) -> None:
    before = repr(LAB)
    sent = copy.deepcopy(obj)
    decision = review(sent, LAB)
    _vandalise(decision.patch)
    assert repr(LAB) == before
    assert sent == obj


def test_a_compiled_policy_cannot_be_changed() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        LAB.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        LAB.profiles["huge"] = LAB.profiles["medium"]  # type: ignore[index]
    with pytest.raises(TypeError):
        LAB.classes[0].known_labels["nvidia.com/gpu.count"] = "8"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        LAB.classes[0].replicas = 1  # type: ignore[misc]
    assert isinstance(LAB.tolerations, tuple)
    assert isinstance(policies.build_set([LAB]).policies, type(LAB.profiles))
