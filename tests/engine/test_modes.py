"""Policy modes: `enforce` refuses; `warn` admits, telling the user (warnings) and the audit
log; `dry-run` admits unchanged, telling only metrics and logs. Per-rule overrides. Through
the core and through both HTTP endpoints."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.support import kube
from tests.support import server_helpers as h
from tests.support.kube import T4_MPS, admit, container, make_policy, pod, review, shared
from webhook.policy import names, policies
from webhook.server import app as server
from webhook.server import logs

PRIVILEGED = pod(shared(securityContext={"privileged": True}), container("log"))
CLEAN = pod(shared(), container("log"))


def lab(mode: str = "enforce", **rule_modes: str) -> policies.Policy:
    extra: dict[str, Any] = {"mode": mode}
    if rule_modes:
        extra["ruleModes"] = rule_modes
    return make_policy([T4_MPS], profiles={"p": {"activeThreadPercentage": 25}}, name="lab",
                       **extra)


def test_enforce_refuses() -> None:
    decision, result = admit(PRIVILEGED, lab("enforce"))
    assert result is None
    assert decision.rules == ["privileged"]
    assert decision.would_refuse == []


def test_warn_admits_with_a_warning_and_an_audit_annotation_and_still_mutates() -> None:
    decision, result = admit(PRIVILEGED, lab("warn"))
    assert result is not None
    assert decision.allowed
    assert [(m, v.rule) for m, v in decision.would_refuse] == [("warn", "privileged")]
    assert decision.warnings[0].startswith(
        'would be refused (rule privileged): container "main": privileged container')
    # Whole, with its fix (within the 256 characters the API server keeps of a warning).
    assert decision.warnings[0].endswith("Remove spec.containers[0].securityContext.privileged")
    assert len(decision.warnings[0]) <= 256
    assert decision.audit["would-refuse"] == "privileged"
    assert decision.audit["would-refuse-reasons"].endswith("(rule privileged)")
    assert result["spec"]["runtimeClassName"] == "nvidia"
    assert kube.env_of(result, "log") == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_dry_run_admits_unchanged_and_silent() -> None:
    decision = review(PRIVILEGED, lab("dry-run"))
    assert decision.allowed
    assert [(m, v.rule) for m, v in decision.would_refuse] == [("dry-run", "privileged")]
    assert decision.patch == []
    assert decision.warnings == []
    assert decision.audit == {}
    clean = review(CLEAN, lab("dry-run"))
    assert (clean.patch, clean.warnings, clean.audit, clean.would_refuse) == ([], [], {}, [])


@pytest.mark.parametrize(
    ("policy", "obj", "refused", "would_refuse"),
    [
        pytest.param(lab("enforce", privileged="warn"), pod(
            shared(2, securityContext={"privileged": True})), ["multi-replica"],
            [("warn", "privileged")], id="enforce-but-one-rule-warns"),
        pytest.param(lab("dry-run", **{"device-variables": "enforce"}), pod(
            container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                      securityContext={"privileged": True})), ["device-variables"],
            [("dry-run", "privileged")], id="dry-run-but-one-rule-enforced"),
        pytest.param(lab("warn", privileged="dry-run"), PRIVILEGED, [],
                     [("dry-run", "privileged")], id="warn-but-one-rule-dry-run"),
    ],
)
def test_a_rule_may_be_applied_otherwise_than_its_policy(
    policy: policies.Policy, obj: dict[str, Any], refused: list[str],
    would_refuse: list[tuple[str, str]],
) -> None:
    decision = review(obj, policy)
    assert decision.rules == refused
    assert [(m, v.rule) for m, v in decision.would_refuse] == would_refuse


def test_in_dry_run_a_rule_switched_to_enforce_still_patches_alone() -> None:
    decision, result = admit(CLEAN, lab("dry-run", **{"visible-devices": "enforce"}))
    assert result is not None
    assert decision.mutations == ["visible-devices"]
    assert result["metadata"]["annotations"] == {
        "gpu-share.io/policy": "lab", "gpu-share.io/mutations": "visible-devices"}


def test_a_malformed_object_is_refused_in_every_mode() -> None:
    bad = pod(container())
    bad["spec"]["containers"][0]["env"] = 5
    for mode in names.MODES:
        assert review(bad, lab(mode)).rules == ["malformed-object"]


@pytest.mark.parametrize(
    ("rule_modes", "problem"),
    [
        pytest.param({"privilege": "warn"}, "ruleModes.privilege.[key]: 'privilege' is not one"
                     " of the names allowed here; did you mean privileged?",
                     id="a-typo"),
        pytest.param({"malformed-object": "dry-run"},
                     "ruleModes.malformed-object: always enforced", id="always-enforced"),
        pytest.param({"privileged": "audit"}, "ruleModes.privileged: Input should be",
                     id="not-a-mode"),
    ],
)
def test_a_policy_with_a_bad_rule_mode_is_refused_with_the_field(
    rule_modes: dict[str, str], problem: str
) -> None:
    text = json.dumps({"apiVersion": policies.API_VERSION, "kind": policies.KIND,
                       "metadata": {"name": "x"}, "spec": {"nodeClasses": [T4_MPS],
                                                          "ruleModes": rule_modes}})
    _, problems = policies.parse_documents(text, "x.yaml")
    assert any(p.startswith(f"x.yaml: spec.{problem}") for p in problems), problems


# --------------------------------------------------------------------------- HTTP


def _policy_text(mode: str) -> str:
    return (kube.REPO / "policies" / "default.yaml").read_text().replace(
        "  sharedResources:", f"  mode: {mode}\n  sharedResources:", 1)


@pytest.fixture(params=names.MODES)
def mode_app(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, web.Application]:
    settings = h.settings(tmp_path)
    (settings.policies_dir / "default.yaml").write_text(_policy_text(request.param))
    return request.param, server.create_app(settings)


async def test_each_mode_through_both_endpoints(
    aiohttp_server: Any, aiohttp_client: Any, mode_app: tuple[str, web.Application]
) -> None:
    mode, app = mode_app
    client = await h.start(aiohttp_server, aiohttp_client, app)
    current = kube.as_served(PRIVILEGED)
    answers = {}
    for endpoint in ("mutate", "validate"):
        uid = f"uid-{endpoint}"
        response = await h.post_review(client, f"/{endpoint}/default", h.review_body(current, uid))
        answer = h.response_of(await response.json(), uid)
        answers[endpoint] = answer
        if not answer["allowed"]:
            break
        if "patch" in answer:
            current = kube.apply(current, json.loads(base64.b64decode(answer["patch"])))
    mutated = answers["mutate"]
    if mode == "enforce":
        assert not mutated["allowed"]
        assert "(rule privileged)" in mutated["status"]["message"]
        return
    assert answers["validate"]["allowed"]
    if mode == "warn":
        assert "patch" in mutated
        assert any(w.startswith("would be refused (rule privileged)")
                   for w in mutated["warnings"])
        assert mutated["auditAnnotations"]["would-refuse"] == "privileged"
        assert answers["validate"]["auditAnnotations"]["would-refuse"] == "privileged"
    else:
        assert mutated == {"uid": "uid-mutate", "allowed": True}
        assert answers["validate"] == {"uid": "uid-validate", "allowed": True}


async def test_would_be_refusals_are_counted_by_policy_rule_and_mode_and_logged(
    aiohttp_server: Any, aiohttp_client: Any, tmp_path: Path
) -> None:
    settings = h.settings(tmp_path)
    (settings.policies_dir / "default.yaml").write_text(_policy_text("warn"))
    stream = io.BytesIO()
    review_log = logs.JsonLines(stream)
    app = server.create_app(settings, review_log=review_log)
    client = await h.start(aiohttp_server, aiohttp_client, app)
    body = h.review_body(PRIVILEGED, "uid-w")
    assert (await h.post_review(client, "/mutate/default", body)).status == 200
    body = h.review_body(pod(shared(2)), "uid-e")
    assert (await h.post_review(client, "/mutate/default", body)).status == 200
    probes = await aiohttp_client(server.create_probe_app(app))
    text = await (await probes.get("/metrics")).text()
    counted = "gpu_share_webhook_rule_violations_total"
    assert h.metric(text, counted, policy="default", rule="privileged", mode="warn") == 1
    assert h.metric(text, counted, policy="default", rule="multi-replica", mode="warn") == 1
    review_log.flush()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["would_refuse"] == ["privileged:warn"]
    assert lines[0]["decision"] == "allowed"
