"""What the user is told as warnings, and how much: a refusal the policy only warns of keeps
its fix; no warning is longer than the API server keeps whole (256 characters); an answer's
warnings stay within its share of the 4,096 the API server keeps of a request's.

The limits are k8s.io/apiserver's (its warning recorder cuts a warning past 256 characters
once a request's warnings pass 4,096, and drops the rest); plain warnings are held to the 120
Kubernetes asks for where possible.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.engine.rule_cases import RULE_CASES
from tests.support import apiserver, dra_objects, kube
from tests.support import deploy_helpers as dh
from tests.support.kube import container, pod, shared
from webhook.engine import decision, reviewing
from webhook.engine.decision import MAX_LONG_WARNING, MAX_WARNING, MAX_WARNINGS_TOTAL
from webhook.policy import policies
from webhook.server import codec
from webhook.tools import rendering

# The API server's bounds (k8s.io/apiserver, its warning recorder).
API_SERVER_ITEM = 256
API_SERVER_TOTAL = 4096
PREFIX = re.compile(r"^would be refused \(rule ([a-z-]+)\): ")


def _fix(message: str) -> str:
    """A refusal's fix: its last sentence (a message ends with it)."""
    return re.split(r"\. (?=[A-Z])", message)[-1]


def _warned(policy: policies.Policy) -> policies.Policy:
    return dataclasses.replace(policy, mode="warn")


def test_the_bounds_are_within_what_the_api_server_keeps() -> None:
    assert MAX_WARNING <= 120
    assert MAX_LONG_WARNING <= API_SERVER_ITEM
    # Two answers (mutating, validating) of one request stay within the total.
    assert 2 * MAX_WARNINGS_TOTAL <= API_SERVER_TOTAL


@pytest.mark.parametrize(("obj", "policy", "found", "message"), RULE_CASES)
def test_a_refusal_in_warn_mode_is_told_with_its_start_and_its_fix(
    obj: dict[str, Any], policy: policies.Policy, found: Any, message: str
) -> None:
    refused = reviewing.review_object(obj, policy=policy)
    assert refused.violations
    warn = _warned(policy)
    warned = reviewing.review_object(obj, policy=warn)
    told = [w for w in warned.warnings if PREFIX.match(w)]
    # (malformed-object is always enforced.)
    for v in [v for v in refused.violations if warn.mode_of(v.rule) == "warn"]:
        start = f"would be refused (rule {v.rule}): {v.message[:40]}"
        ours = [w for w in told if w.startswith(start)]
        assert ours, f"{v.rule}: not told: {told}"
        assert any(w.endswith(_fix(v.message)) for w in ours), (v.message, ours)
    assert all(len(w) <= MAX_LONG_WARNING for w in warned.warnings)


@pytest.mark.parametrize(
    ("example", "fix"),
    [
        ("multi-replica.yaml", "Ask for nvidia.com/gpu.shared: 1"),
        ("node-selection.yaml", "Remove or change that selector (nodes that advertise"
         " nvidia.com/gpu.shared are renamed: their product label has no -SHARED suffix)"),
        ("visible-devices-none.yaml", "Remove it (or set it to void), or ask for"
         " nvidia.com/gpu.shared: 1 if the container needs a GPU"),
        ("host-machinery.yaml", "Remove it"),
        ("capabilities.yaml", "Remove them from spec.containers[0].securityContext"
         ".capabilities.add"),
    ],
)
def test_the_fix_of_a_long_refusal_ends_its_warning(
    example: str, fix: str, shipped_policies: policies.PolicySet
) -> None:
    """The examples' refusals are 300 to 600 characters; the fix is what a user acts on."""
    path = kube.REPO / "examples" / "denied" / example
    obj = dh.load_yaml(path)[0]
    policy = shipped_policies.governing("default")
    message = reviewing.review_object(obj, policy=policy).message
    assert len(message) > MAX_LONG_WARNING
    warnings = reviewing.review_object(obj, policy=_warned(policy)).warnings
    assert warnings[0].startswith("would be refused (rule ")
    assert warnings[0].endswith(fix)
    assert " ... " in warnings[0]
    assert len(warnings[0]) <= MAX_LONG_WARNING


@pytest.mark.parametrize("name", dra_objects.NAMES)
def test_a_claims_refusal_in_warn_mode_keeps_its_fix(
    name: str, shipped_policies: policies.PolicySet
) -> None:
    claim = dra_objects.obj(name)
    policy = shipped_policies.governing("dra")
    refused = reviewing.review_object(claim, policy=policy, mutate=False, require=True)
    warned = reviewing.review_object(claim, policy=_warned(policy), mutate=False, require=True)
    for v in refused.violations:
        assert any(
            w.startswith(f"would be refused (rule {v.rule}): ") and w.endswith(_fix(v.message))
            for w in warned.warnings
        ), (v.message, warned.warnings)
    assert all(len(w) <= MAX_LONG_WARNING for w in warned.warnings)


def test_a_message_without_sentences_keeps_its_start_and_its_end() -> None:
    text = "x" * 200 + " and then " + "y" * 200
    kept = decision.keep_ends(text, 200)
    assert len(kept) <= 200
    assert kept.startswith("x" * 60)
    assert kept.endswith("y" * 90)


def test_a_fix_too_long_for_the_room_is_cut_at_its_end_not_the_start() -> None:
    text = "What is wrong, at length. " + "Fix " + "z" * 400
    kept = decision.keep_ends(text, 200)
    assert len(kept) <= 200
    assert kept.startswith("What is wrong")
    assert "Fix zzz" in kept
    assert kept.endswith("...")


def test_plain_warnings_stay_short(shipped_policies: policies.PolicySet) -> None:
    """A near miss or a placement note is cut at 120, as before: only a refusal's warning
    is longer."""
    name = "a-container-whose-name-is-long-enough-to-push-the-warning-past-its-cut-xx"
    obj = pod(container(name, limits={"nvidia.com/gpu-shared": 1}))
    warnings = reviewing.review_object(obj, policy=shipped_policies.governing("default")).warnings
    assert warnings
    assert all(len(w) <= MAX_WARNING for w in warnings)


def _many_refusals() -> dict[str, Any]:
    """A pod of 40 containers, each refused by several rules (each message 200 to 400
    characters)."""
    return pod(*(
        shared(2, name=f"c{i}", securityContext={"privileged": True},
               env=[{"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/tmp/mps"}])
        for i in range(40)
    ))


def test_an_answer_never_exceeds_its_share_of_the_warnings(
    shipped_policies: policies.PolicySet,
) -> None:
    policy = _warned(shipped_policies.governing("default"))
    decision = reviewing.review_object(_many_refusals(), policy=policy)
    assert decision.allowed
    assert len(decision.would_refuse) >= 120
    warnings = decision.warnings
    assert all(len(w) <= MAX_LONG_WARNING for w in warnings)
    assert sum(map(len, warnings)) <= MAX_WARNINGS_TOTAL
    assert re.fullmatch(r"and \d+ more warnings like these", warnings[-1])
    # Every refusal is in the audit annotation, whatever the warnings leave out.
    assert set(decision.audit["would-refuse"].split(",")) == {
        "multi-replica", "mps-directories", "privileged"}
    # One of each rule is told first: what is left out is more of the same.
    assert {PREFIX.match(w).group(1) for w in warnings[:3]} == {  # type: ignore[union-attr]
        "multi-replica", "mps-directories", "privileged"}


async def test_the_user_is_told_no_more_than_the_api_server_keeps(
    shipped_policies: policies.PolicySet, tmp_path: Path
) -> None:
    """Through the rendered configurations: the warnings of both configurations' answers,
    as the API server gathers them (each text once), stay within its total, and each within
    its 256."""
    directory = tmp_path / "policies"
    directory.mkdir()
    for source in dh.POLICIES.glob("*.yaml"):
        text = source.read_text(encoding="utf-8")
        if "kind: SharingPolicy" in text:
            text = text.replace("\nspec:\n", "\nspec:\n  mode: warn\n", 1)
        (directory / source.name).write_text(text, encoding="utf-8")
    loaded = policies.load_directory(directory)
    configurations = rendering.render(
        loaded, service="gpu-share-webhook", namespace="gpu-share-system",
        name="gpu-share-webhook",
    )
    cluster = apiserver.ApiServer(configurations, apiserver.in_process(loaded))
    outcome = await cluster.admit(
        _many_refusals(),
        labels={"kubernetes.io/metadata.name": "team-a", "gpu-share.io/enabled": "true"},
    )
    assert outcome.allowed
    told = list(dict.fromkeys(outcome.warnings))
    assert any(w.endswith("Ask for nvidia.com/gpu.shared: 1") for w in told)
    assert all(len(w) <= API_SERVER_ITEM for w in told)
    assert sum(map(len, told)) <= API_SERVER_TOTAL


def test_the_answer_sends_the_warnings_as_decided(shipped_policies: policies.PolicySet) -> None:
    """The codec sends them as they are: no further cut."""
    obj = kube.as_served(_many_refusals())
    body = json.dumps(kube.admission_review(obj, uid="u")).encode()
    outcome = codec.review(
        body, policies=dataclasses.replace(
            shipped_policies,
            policies={**shipped_policies.policies,
                      "default": _warned(shipped_policies.governing("default"))},
        ),
        policy_name="default", endpoint="mutate",
    )
    sent = json.loads(outcome.body)["response"]["warnings"]
    decided = reviewing.review_object(obj, policy=_warned(shipped_policies.governing("default")))
    assert sent == decided.warnings


def test_a_refusal_is_told_before_the_plain_warnings(shipped_policies: policies.PolicySet) -> None:
    """What will be refused once the policy enforces comes first: the budget of warnings
    leaves out near misses before it leaves out a refusal."""
    obj = pod(
        shared(name="main", securityContext={"privileged": True}),
        annotations={"gpu-share.io/profle": "small"},
    )
    policy = shipped_policies.governing("default")
    plain = reviewing.review_object(obj, policy=policy)
    assert plain.rules == ["privileged"]
    warnings = reviewing.review_object(obj, policy=_warned(policy)).warnings
    assert len(warnings) >= 2
    assert warnings[0].startswith("would be refused (rule privileged): ")
    assert all(not PREFIX.match(w) for w in warnings[1:])


def test_the_figures_docs_policies_md_gives_are_the_shipped_ones() -> None:
    """docs/policies.md, "Modes", says how long a warning is and how many an answer sends."""
    text = (kube.REPO / "docs" / "policies.md").read_text(encoding="utf-8")
    section = " ".join(text.split("\n## Modes\n", 1)[1].split("\n## ", 1)[0].split())
    assert f"at most {MAX_LONG_WARNING} characters" in section
    assert (
        f"at most {decision.MAX_WARNINGS} warnings and {MAX_WARNINGS_TOTAL:,} characters"
        in section
    )
    assert f"Other warnings are at most {MAX_WARNING} characters" in section
    assert "its last sentence (the fix)" in section
