"""The admission server's HTTP contract, over TLS, as the API server uses it."""

from __future__ import annotations

import gzip
import io
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.support import server_helpers as h
from webhook.policy import names
from webhook.server import admission, codec, configuration, logs, states
from webhook.server import app as server
from webhook.server.limits import Limits

Client = TestClient[Any, Any]
MAX_BODY_BYTES = Limits().max_body_bytes


@pytest.fixture
def settings(tmp_path: Path) -> configuration.Settings:
    return h.settings(tmp_path)


@pytest.fixture
def app(settings: configuration.Settings) -> web.Application:
    return server.create_app(settings)


@pytest.fixture
async def client(aiohttp_server: Any, aiohttp_client: Any, app: web.Application) -> Client:
    return await h.start(aiohttp_server, aiohttp_client, app)


async def answer(client: Client, path: str, obj: dict[str, Any], uid: str) -> dict[str, Any]:
    response = await h.post_review(client, path, h.review_body(obj, uid))
    assert response.status == 200, await response.text()
    assert response.content_type == "application/json"
    return h.response_of(await response.json(), uid)


# --------------------------------------------------------------------------- reviews


async def test_real_pods_are_patched_over_one_keep_alive_connection_into_valid_pods(
    aiohttp_server: Any, aiohttp_client: Any, app: web.Application
) -> None:
    trace, opened = h.counting_connections()
    client = await h.start(aiohttp_server, aiohttp_client, app, trace=trace)
    for number, pod in enumerate(h.real_pods()):
        uid = f"00000000-0000-0000-0000-00000000000{number}"
        response = await h.post_review(client, "/mutate", h.review_body(pod, uid))
        assert response.version == aiohttp.HttpVersion11
        assert response.headers.get("Connection", "keep-alive").lower() != "close"
        result = h.response_of(await response.json(), uid)
        assert result["allowed"] is True
        pod_after = h.patched(pod, result)
        assert pod_after["spec"]["runtimeClassName"] == "nvidia"
        assert pod_after["metadata"]["annotations"]["gpu-share.io/policy"] == "default"
    assert len(opened) == 1, "every review should reuse the first connection"


async def test_the_named_policy_path_and_the_bare_path_agree_for_default(client: Client) -> None:
    pod = h.real_pods()[0]
    bare = await answer(client, "/mutate", pod, "uid-bare")
    named = await answer(client, "/mutate/default", pod, "uid-named")
    assert bare["patch"] == named["patch"]


async def test_a_multi_replica_request_is_denied_with_status_and_reason(client: Client) -> None:
    result = await answer(client, "/mutate", h.shared_pod(2), "uid-two")
    assert result["allowed"] is False
    assert result["status"]["code"] == 403
    assert "invalid multi-replica request" in result["status"]["message"]
    assert "patch" not in result


async def test_the_validating_endpoint_judges_without_patching(client: Client) -> None:
    mutated = await answer(client, "/mutate", h.real_pods()[0], "uid-m1")
    stored = h.patched(h.real_pods()[0], mutated)
    allowed = await answer(client, "/validate", stored, "uid-v1")
    assert allowed["allowed"] is True
    assert "patch" not in allowed
    denied = await answer(client, "/validate/default", h.shared_pod(2), "uid-v2")
    assert denied["allowed"] is False


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ("gold", 'policy "gold" does not exist'),
        (names.UNKNOWN_POLICY_PATH, "names a policy that does not exist"),
    ],
)
async def test_an_unknown_policy_path_is_denied_with_a_message_that_says_so(
    client: Client, policy: str, says: str
) -> None:
    result = await answer(client, f"/mutate/{policy}", h.real_pods()[0], "uid-unknown")
    assert result["allowed"] is False
    assert says in result["status"]["message"]
    assert "default" in result["status"]["message"]  # it lists the policies there are


def _host_network_pod() -> dict[str, Any]:
    pod = h.real_pods()[0]
    pod["spec"]["hostNetwork"] = True
    return pod


async def test_the_baseline_path_leaves_host_access_to_pod_security(client: Client) -> None:
    """`/<endpoint>/<policy>/baseline` is the policy's path for namespaces that enforce Pod
    Security baseline or restricted: rule host-access is left to Pod Security there."""
    pod = _host_network_pod()
    plain = await answer(client, "/mutate/default", pod, "uid-plain")
    assert plain["allowed"] is False
    assert "(rule host-access)" in plain["status"]["message"]
    under = await answer(client, "/mutate/default/baseline", pod, "uid-baseline")
    assert under["allowed"] is True
    stored = h.patched(pod, under)
    assert (await answer(client, "/validate/default/baseline", stored, "uid-v"))["allowed"]
    judged = await answer(client, "/validate/default", stored, "uid-v-plain")
    assert judged["allowed"] is False
    assert "(rule host-access)" in judged["status"]["message"]
    # The other rules still apply there.
    refused = await answer(client, "/mutate/default/baseline", h.shared_pod(2), "uid-two")
    assert refused["allowed"] is False
    assert "invalid multi-replica request" in refused["status"]["message"]
    unknown = await answer(client, "/mutate/gold/baseline", pod, "uid-gold")
    assert unknown["allowed"] is False
    assert 'policy "gold" does not exist' in unknown["status"]["message"]


@pytest.mark.parametrize(
    "path", ["/mutate/default/restricted", "/mutate/default/baseline/x", "/validate/a/b"]
)
async def test_any_other_second_segment_is_not_found(client: Client, path: str) -> None:
    response = await h.post_review(client, path, h.review_body(h.real_pods()[0], "uid-404"))
    assert response.status == 404


async def test_a_baseline_review_is_counted_and_logged_under_its_policy_name(
    aiohttp_client: Any, client: Client, app: web.Application, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="webhook.review"):
        await answer(client, "/mutate/default/baseline", h.real_pods()[1], "uid-level")
        await answer(client, "/mutate/default", h.real_pods()[1], "uid-no-level")
    lines = [
        json.loads(logs.JsonFormatter().format(r))
        for r in caplog.records
        if r.name == "webhook.review"
    ]
    assert [(line["uid"], line["policy"], line.get("pod_security")) for line in lines] == [
        ("uid-level", "default", True),
        ("uid-no-level", "default", None),
    ]
    probes = await aiohttp_client(server.create_probe_app(app))
    text = await (await probes.get("/metrics")).text()
    reviews_total = "gpu_share_webhook_reviews_total"
    # One series per policy: the level is no label value.
    assert h.metric(text, reviews_total, policy="default", decision="allowed") == 2
    assert "default/baseline" not in text


async def test_a_charset_parameter_on_the_content_type_is_accepted(client: Client) -> None:
    headers = {"Content-Type": "application/json; charset=utf-8"}
    body = h.review_body(h.real_pods()[0], "uid-charset")
    response = await h.post_review(client, "/mutate", body, headers=headers)
    assert response.status == 200
    h.response_of(await response.json(), "uid-charset")


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[]", "not an AdmissionReview"),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "expected"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "no request"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
            "no uid",
        ),
    ],
)
async def test_a_body_that_is_not_a_usable_review_is_a_400_with_a_one_line_reason(
    client: Client, body: bytes, reason: str
) -> None:
    response = await h.post_review(client, "/mutate", body)
    assert response.status == 400
    text = await response.text()
    assert reason in text
    assert text.count("\n") == 1
    assert text.endswith("\n")


@pytest.mark.parametrize("content_type", ["text/plain", "application/yaml", None])
async def test_a_body_that_is_not_json_by_its_content_type_is_a_415(
    client: Client, content_type: str | None
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    body = h.review_body(h.real_pods()[0], "uid-415")
    response = await h.post_review(client, "/mutate", body, headers=headers)
    assert response.status == 415
    assert "application/json" in await response.text()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "GZIP", "identity, gzip"])
async def test_a_compressed_body_is_a_415_and_never_inflated(
    client: Client, encoding: str
) -> None:
    """A 15 KB gzip body can hold a 4 MB pod of 55,000 containers: inflated, it would pass
    every bound counted on the wire. The API server never compresses what it sends."""
    pod = h.real_pods()[0]
    pod["spec"]["containers"] = pod["spec"]["containers"] * 20_000
    body = gzip.compress(h.review_body(pod, "uid-gzip"))
    assert len(body) < 16 * 1024
    response = await h.post_review(
        client, "/mutate", body, headers={**h.JSON, "Content-Encoding": encoding}
    )
    assert response.status == 415
    assert "must not be compressed" in await response.text()


async def test_an_identity_encoding_is_read_as_it_is(client: Client) -> None:
    body = h.review_body(h.real_pods()[0], "uid-identity")
    response = await h.post_review(
        client, "/mutate", body, headers={**h.JSON, "Content-Encoding": "identity"}
    )
    assert response.status == 200
    assert h.response_of(await response.json(), "uid-identity")["allowed"] is True


def padded_review(size: int, uid: str) -> bytes:
    """A real review whose body is exactly `size` bytes (an annotation takes up the rest)."""
    pod = h.real_pods()[0]
    pod["metadata"]["annotations"] = {"example.com/padding": ""}
    body = h.review_body(pod, uid)
    pod["metadata"]["annotations"]["example.com/padding"] = "x" * (size - len(body))
    body = h.review_body(pod, uid)
    assert len(body) == size
    return body


async def test_a_body_of_exactly_7_mib_is_reviewed(client: Client) -> None:
    response = await h.post_review(
        client, "/mutate", padded_review(MAX_BODY_BYTES, "uid-7mib")
    )
    assert response.status == 200
    assert h.response_of(await response.json(), "uid-7mib")["allowed"] is True


async def test_a_body_over_7_mib_is_a_413(client: Client) -> None:
    body = padded_review(MAX_BODY_BYTES + 1, "uid-too-large")
    response = await h.post_review(client, "/mutate", body)
    assert response.status == 413
    assert "7 MiB" in await response.text()


async def test_a_chunked_body_over_7_mib_is_a_413(client: Client) -> None:
    body = padded_review(MAX_BODY_BYTES + 1024, "uid-chunked")

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1 << 20):
            yield body[start : start + (1 << 20)]

    response = await h.post_review(client, "/mutate", chunks())
    assert response.status == 413


async def test_the_admission_port_answers_nothing_but_post_reviews(client: Client) -> None:
    assert (await client.get("/mutate", server_hostname=h.HOST)).status == 405
    assert (await client.get("/metrics", server_hostname=h.HOST)).status == 404


# --------------------------------------------------------------------------- failures


def failing_review(body: bytes, **_kwargs: Any) -> codec.Outcome:
    raise RuntimeError("a bug in the review")


async def test_an_internal_error_is_still_an_admission_review_with_the_uid_and_logged(
    aiohttp_server: Any,
    aiohttp_client: Any,
    settings: configuration.Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = server.create_app(settings, review=failing_review)
    client = await h.start(aiohttp_server, aiohttp_client, app)
    with caplog.at_level(logging.INFO, logger="webhook"):
        result = await answer(client, "/mutate", h.real_pods()[0], "uid-internal")
    assert result["allowed"] is False
    assert result["status"]["code"] == 500
    assert "internal error" in result["status"]["message"]
    traced = [r for r in caplog.records if r.exc_info]
    assert len(traced) == 1
    assert "a bug in the review" in caplog.text
    # The reference in the answer is the one in the log line with the trace.
    reference = result["status"]["message"].split("internal error ")[1].split(",")[0]
    assert reference in traced[0].getMessage()


async def test_a_large_review_that_outlasts_the_timeout_is_answered_before_the_deadline(
    aiohttp_server: Any, aiohttp_client: Any, settings: configuration.Settings
) -> None:
    def slow_review(body: bytes, **kwargs: Any) -> codec.Outcome:
        time.sleep(1.5)
        return codec.review(body, **kwargs)

    app = server.create_app(settings, review=slow_review)
    client = await h.start(aiohttp_server, aiohttp_client, app)
    body = padded_review(settings.limits.inline_bytes + 1, "uid-slow")
    # The API server would give up after 1 s; the answer comes before that.
    response = await client.post(
        "/mutate?timeout=1s", data=body, headers=h.JSON, server_hostname=h.HOST
    )
    assert response.status == 200
    result = h.response_of(await response.json(), "uid-slow")
    assert result["allowed"] is False
    assert result["status"]["code"] == 500
    # The thread still reads the body: its bytes stay counted in flight until it is done,
    # so bodies cannot pile up beyond the bound behind busy threads.
    budget = app[states.STATE].budget
    assert budget.held == len(body)

    async def given_back() -> bool:
        return budget.held == 0

    await h.eventually(given_back, what="the bytes given back when the thread is done")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("1m0s", 60.0), ("1.5s", 1.5), ("500ms", 0.5), ("30", 30.0), ("x", None)],
)
def test_timeouts_are_read_as_the_api_server_writes_them(text: str, seconds: float | None) -> None:
    assert admission.parse_duration(text) == seconds


# --------------------------------------------------------------------------- probes


async def test_probes_and_metrics_are_served_on_their_own_plain_http_app(
    aiohttp_client: Any, client: Client, app: web.Application
) -> None:
    await answer(client, "/mutate", h.real_pods()[0], "uid-counted")
    await answer(client, "/mutate", h.shared_pod(2), "uid-counted-2")
    await h.post_review(client, "/mutate", b"{}")
    probes = await aiohttp_client(server.create_probe_app(app))
    assert (await probes.get("/healthz")).status == 200
    assert (await probes.get("/readyz")).status == 200
    response = await probes.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    text = await response.text()
    reviews_total = "gpu_share_webhook_reviews_total"
    assert h.metric(text, reviews_total, policy="default", decision="allowed") == 1
    assert h.metric(text, reviews_total, decision="denied") == 1
    assert h.metric(text, reviews_total, decision="invalid") == 1
    assert h.metric(text, "gpu_share_webhook_review_duration_seconds_count") == 3
    assert h.metric(text, "gpu_share_webhook_reviews_in_flight") == 0
    assert h.metric(text, "gpu_share_webhook_certificate_expiry_seconds") > 300 * 86400


async def test_each_review_is_one_json_log_line_with_what_was_decided(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="webhook.review"):
        await answer(client, "/mutate", h.real_pods()[1], "uid-logged")
    records = [r for r in caplog.records if r.name == "webhook.review"]
    assert len(records) == 1
    line = json.loads(logs.JsonFormatter().format(records[0]))
    assert line["uid"] == "uid-logged"
    assert line["name"] == "gpu-shared-test-2"
    assert line["namespace"] == "team-a"
    assert line["kind"] == "Pod"
    assert line["operation"] == "CREATE"
    assert line["policy"] == "default"
    assert line["decision"] == "allowed"
    assert line["patch_operations"] > 0
    assert line["ms"] >= 0


async def test_readiness_turns_false_while_draining_and_answers_say_connection_close(
    aiohttp_client: Any, client: Client, app: web.Application
) -> None:
    probes = await aiohttp_client(server.create_probe_app(app))
    app[states.STATE].draining = True
    assert (await probes.get("/readyz")).status == 503
    assert (await probes.get("/healthz")).status == 200
    body = h.review_body(h.real_pods()[0], "uid-drain")
    response = await h.post_review(client, "/mutate", body)
    assert response.status == 200
    assert response.headers["Connection"].lower() == "close"


async def test_a_policy_file_that_does_not_load_takes_only_its_own_policies_out_of_force(
    tmp_path: Path, aiohttp_server: Any, aiohttp_client: Any
) -> None:
    settings = h.settings(tmp_path)
    broken = settings.policies_dir / "broken.yaml"
    broken.write_text("kind: SharingPolicy\nmetadata: {name: broken}\n")
    app = server.create_app(settings)
    assert app[states.STATE].policies.names == ["default", "dra", "not-renamed"]
    client = await h.start(aiohttp_server, aiohttp_client, app)
    refused = await answer(client, "/mutate/broken", h.shared_pod(), "uid-broken")
    assert refused["allowed"] is False
    assert str(broken) in refused["status"]["message"]
    assert "policy-not-loaded" in refused["status"]["message"]
    served = await answer(client, "/mutate", h.shared_pod(), "uid-default")
    assert served["allowed"] is True


async def test_serve_writes_review_lines_straight_out_in_the_log_format(
    aiohttp_server: Any, aiohttp_client: Any, settings: configuration.Settings
) -> None:
    stream = io.BytesIO()
    review_log = logs.JsonLines(stream)
    app = server.create_app(settings, review_log=review_log)
    client = await h.start(aiohttp_server, aiohttp_client, app)
    await answer(client, "/mutate", h.shared_pod(2, name="two"), "uid-direct")
    review_log.flush()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 1
    assert lines[0]["logger"] == "webhook.review"
    assert lines[0]["level"] == "info"
    assert lines[0]["time"].endswith("+00:00")
    assert lines[0]["uid"] == "uid-direct"
    assert lines[0]["name"] == "two"
    assert lines[0]["decision"] == "denied"
    assert lines[0]["rules"] == ["multi-replica"]
    assert lines[0]["patch_operations"] == 0
