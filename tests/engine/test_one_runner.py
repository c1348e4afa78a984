"""Pods and claims run through one runner (`reviewing.run_rules`): one mode path
(`rules.Pass.relax`), one finding type, problems in the order of the rules, and every
addition said in its rule's words where it is made (`decision.Addition`)."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from tests.support import kube
from webhook.engine import claims, reviewing, rules
from webhook.engine.decision import Decision
from webhook.policy import kinds, names, policies

CLAIM = "resource.k8s.io/v1"


def _policy(name: str, **changes: Any) -> policies.Policy:
    policy = kube.shipped().governing(name)
    return dataclasses.replace(policy, **changes) if changes else policy


@pytest.fixture(scope="module")
def adding() -> policies.Policy:
    """Shipped `dra`, with the MPS configuration added to full-GPU requests."""
    text = (kube.REPO / "policies" / "dra.yaml").read_text()
    doc = yaml.safe_load(text)
    doc["metadata"]["name"] = "dra-adding"
    for cls in doc["spec"]["dra"]["deviceClasses"]:
        if cls["name"] == "gpu.nvidia.com":
            cls["addMpsConfig"] = True
    return kube.load_policy_text(yaml.safe_dump(doc))


def _claim(*requests: dict[str, Any], config: list[Any] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if config is not None:
        devices["config"] = config
    return {"apiVersion": CLAIM, "kind": names.CLAIM_KIND, "metadata": {"name": "c"},
            "spec": {"devices": devices}}


def _request(name: str, cls: str = "gpu.nvidia.com", **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": cls, **exactly}}


def test_a_claims_findings_are_the_findings_the_table_reports() -> None:
    """`claims.gather` finds; each finding is a rule's violation, of a rule of the claim
    table."""
    obj = _claim(_request("a", allocationMode="All"), _request("b", "vfio.gpu.nvidia.com"))
    known = claims.gather(obj, _policy("dra"))
    claim_rules = {r.name for r in rules.RULES if r.scope is rules.Scope.CLAIM or r.claims}
    assert [f.rule for f in known.findings] == ["dra-all-devices", "dra-class-not-allowed"]
    assert all(f.violation is not None and f.violation.rule == f.rule for f in known.findings)
    assert {f.rule for f in known.findings} <= claim_rules


def test_a_claims_problems_come_in_the_order_of_the_rules_as_a_pods_do() -> None:
    """The request judged first (`a`, allocation mode All) is told after the one judged
    second (`b`, a closed class): dra-class-not-allowed comes before dra-all-devices in
    the table."""
    obj = _claim(_request("a", allocationMode="All"), _request("b", "vfio.gpu.nvidia.com"))
    decision = reviewing.review_object(obj, policy=_policy("dra"))
    assert [v.rule for v in decision.violations] == ["dra-class-not-allowed", "dra-all-devices"]
    ranks = [rules.RANK[v.rule] for v in decision.violations]
    assert ranks == sorted(ranks)


@pytest.mark.parametrize("mode", [names.WARN, names.DRY_RUN])
def test_a_claim_is_refused_by_the_policys_mode_as_a_pod_is(mode: str) -> None:
    """A claim of a GPU class under a policy without a dra section (rule resource-claims):
    enforced, refused; in warn mode, told and admitted; in dry-run, admitted silently: the
    mode path of every rule (`Pass.relax`)."""
    obj = _claim(_request("gpu"))
    refused = reviewing.review_object(obj, policy=_policy("default"))
    assert refused.rules == ["resource-claims"]
    relaxed = reviewing.review_object(obj, policy=_policy("default", mode=mode))
    assert relaxed.allowed
    assert [(m, v.rule) for m, v in relaxed.would_refuse] == [(mode, "resource-claims")]
    told = [w for w in relaxed.warnings if "rule resource-claims" in w]
    assert bool(told) is (mode == names.WARN)


def test_the_mps_patch_of_a_claim_is_said_in_its_rules_words(adding: policies.Policy) -> None:
    obj = _claim(_request("gpu"), _request("more"))
    decision = reviewing.review_object(obj, policy=adding)
    assert decision.mutations == ["dra-mps-limits"]
    said = [(a.rule, a.topic, a.text) for a in decision.additions]
    mps = "GpuConfig, sharing MPS, defaultActiveThreadPercentage=25,"
    assert said == [
        ("dra-mps-limits", 'config of request "gpu"',
         f"{mps} defaultPinnedDeviceMemoryLimit=3840Mi"),
        ("dra-mps-limits", 'config of request "more"',
         f"{mps} defaultPinnedDeviceMemoryLimit=3840Mi"),
    ]
    # One operation adds the list; each entry is said.
    assert len(decision.patch) == 1
    assert len(decision.patch[0]["value"]) == 2


def test_validating_a_claim_requires_what_the_patch_adds(adding: policies.Policy) -> None:
    decision = reviewing.review_object(
        _claim(_request("gpu")), policy=adding, mutate=False, require=True
    )
    assert [(v.rule, v.type.value) for v in decision.violations] == [
        ("dra-mps-limits", "FieldValueRequired")
    ]
    assert "no MPS configuration" in decision.message


def test_a_claim_with_no_room_for_the_mps_configuration_is_refused(
    adding: policies.Policy,
) -> None:
    others = [{"opaque": {"driver": "nic.example.com", "parameters": {}}}] * names.DRA_MAX_CONFIGS
    decision = reviewing.review_object(_claim(_request("gpu"), config=others), policy=adding)
    assert decision.rules == ["dra-mps-limits"]
    assert "no room for the MPS configuration" in decision.message


def _every_addition_is_said(decision: Decision) -> None:
    assert bool(decision.additions) == bool(decision.patch)
    # The record of what was added (rule `annotations`) is said with the rules it records.
    recorded = {rules.ANNOTATIONS} if decision.patch else set()
    assert {a.rule for a in decision.additions} == set(decision.mutations) | recorded
    assert all(a.topic and a.text for a in decision.additions)


def test_every_rule_that_patches_says_what_it_adds() -> None:
    """A shared-GPU pod with a container that asks for none: runtime class, tolerations,
    node selection, MPS limits, driver capabilities, the GPUs hidden, the record; each rule
    that made an operation says what it adds."""
    obj = kube.pod(kube.shared(1), kube.container("log"))
    decision = reviewing.review_object(obj, policy=_policy("default"))
    _every_addition_is_said(decision)
    said = {a.rule: (a.topic, a.text) for a in decision.additions}
    assert said["runtime-class"] == ("runtimeClassName", "nvidia")
    assert said["visible-devices"] == (
        'env of container "log"', f"{names.VISIBLE_DEVICES}={names.HIDE}"
    )
    assert said[rules.ANNOTATIONS][0] == "annotations"
    assert set(said) == {*decision.mutations, rules.ANNOTATIONS}


def test_a_rule_in_dry_run_adds_nothing_and_says_nothing() -> None:
    obj = kube.pod(kube.shared(1), kube.container("log"))
    policy = _policy("default", rule_modes=MappingProxyType({"visible-devices": names.DRY_RUN}))
    decision = reviewing.review_object(obj, policy=policy)
    _every_addition_is_said(decision)
    assert "visible-devices" not in {a.rule for a in decision.additions}


def test_the_templates_of_a_workload_say_which_template_gets_what() -> None:
    """A kind of several templates: each addition's place starts with its template's label."""
    obj = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "r"},
        "spec": {
            "headGroupSpec": {"template": kube.pod(kube.shared(1))},
            "workerGroupSpecs": [{"template": kube.pod(kube.shared(1))}],
        },
    }
    by_name = kinds.kinds_by_name(kinds.all_kinds())
    decision = reviewing.review_object(obj, policy=_policy("default"), kinds=by_name)
    _every_addition_is_said(decision)
    assert decision.additions
    assert all(a.topic.startswith("RayCluster spec.") for a in decision.additions)


def test_the_server_sends_the_patch_alone_and_a_preview_says_what_it_adds() -> None:
    """`admit` for the server makes no words (its answer is the patch); with `preview` (the
    offline commands) the same patch comes with them."""
    obj = kube.pod(kube.shared(1), kube.container("log"))
    request = {"policy": _policy("default"), "endpoint": "mutate", "group": "", "kind": "Pod",
               "operation": "CREATE"}
    served = reviewing.admit(obj, **request)
    previewed = reviewing.admit(obj, **request, preview=True)
    assert served.patch == previewed.patch
    assert served.additions == []
    _every_addition_is_said(previewed)
