"""Hot reload: certificates and policies change under a running server, which keeps answering."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from cryptography.hazmat.primitives import serialization

from tests.support import server_helpers as h
from webhook.server import app as server
from webhook.server import certificates, states

Client = TestClient[Any, Any]


async def metrics_text(aiohttp_client: Any, app: web.Application) -> str:
    probes = await aiohttp_client(server.create_probe_app(app))
    response = await probes.get("/metrics")
    text: str = await response.text()
    await probes.close()
    return text


# --------------------------------------------------------------------------- certificates


async def test_a_rotated_certificate_is_served_to_new_handshakes_with_no_failed_request(
    tmp_path: Path, aiohttp_server: Any, aiohttp_client: Any
) -> None:
    # A mounted Secret: the kubelet swaps `..data` to a new version directory.
    ca = h.make_ca()
    cert_dir = tmp_path / "certs"
    old_cert = h.write_pair(tmp_path / "v1", ca)
    h.mount_like_kubelet(cert_dir, "v1", _files(tmp_path / "v1"))
    app = server.create_app(h.settings(tmp_path, cert_dir=cert_dir))
    kept_alive = await h.start(aiohttp_server, aiohttp_client, app)
    port = kept_alive.server.port
    assert port is not None
    answered: list[str] = []
    presented: list[str] = []
    rotated = asyncio.Event()
    new_cert = b""

    def new_served() -> bool:
        return bool(presented) and presented[-1] == h.fingerprint_of_pem(new_cert)

    # Read before the loops start (a missing corpus skips the test here, not in a task).
    pod = h.real_pods()[0]

    # Both loops are bounded: they stop a while after the rotation, or after 400 requests.
    async def keep_alive_sender() -> None:
        after = 0
        for number in range(400):
            uid = f"kept-{number}"
            body = h.review_body(pod, uid)
            async with await h.post_review(kept_alive, "/mutate", body) as response:
                assert response.status == 200
                h.response_of(await response.json(), uid)
            answered.append(uid)
            after += rotated.is_set()
            if after >= 30 and new_served():
                return
            await asyncio.sleep(0.005)

    async def new_connection_sender() -> None:
        after = 0
        for number in range(400):
            uid = f"fresh-{number}"
            async with h.connect(port, cert_dir / certificates.CA_FILE) as connection:
                presented.append(connection.peer_fingerprint)
                status, _, body = await connection.post(
                    "/mutate", h.review_body(pod, uid)
                )
            assert status == 200
            h.response_of(json.loads(body), uid)
            answered.append(uid)
            after += rotated.is_set()
            if after >= 30 and new_served():
                return

    senders = [
        asyncio.create_task(keep_alive_sender()),
        asyncio.create_task(new_connection_sender()),
    ]
    await h.eventually(_answered_some(answered, 10), what="requests before the rotation")
    new_cert = h.write_pair(tmp_path / "v2", ca)
    h.mount_like_kubelet(cert_dir, "v2", _files(tmp_path / "v2"))
    rotated.set()
    await asyncio.gather(*senders)

    assert presented[0] == h.fingerprint_of_pem(old_cert)
    assert presented[-1] == h.fingerprint_of_pem(new_cert)
    # Once the new pair is served, no handshake gets the old one again.
    first_new = presented.index(h.fingerprint_of_pem(new_cert))
    assert set(presented[first_new:]) == {h.fingerprint_of_pem(new_cert)}
    assert len(answered) == len(set(answered))
    text = await metrics_text(aiohttp_client, app)
    assert h.metric(text, "gpu_share_webhook_certificate_reloads_total") == 1
    assert h.metric(text, "gpu_share_webhook_certificate_reload_errors_total") == 0


async def test_a_certificate_that_cannot_be_served_is_refused_and_the_old_one_stays(
    tmp_path: Path, aiohttp_server: Any, aiohttp_client: Any
) -> None:
    settings = h.settings(tmp_path)
    app = server.create_app(settings)
    client = await h.start(aiohttp_server, aiohttp_client, app)
    served = app[states.STATE].certificates.certificate
    # A key that belongs to another certificate.
    other = certificates.make_serving_certificate(
        h.make_ca(), service=h.SERVICE, namespace=h.NAMESPACE
    )
    (settings.cert_dir / certificates.KEY_FILE).write_bytes(other.key_pem)

    async def refused() -> bool:
        text = await metrics_text(aiohttp_client, app)
        return h.metric(text, "gpu_share_webhook_certificate_reload_errors_total") == 1

    await h.eventually(refused, what="the mismatched key refused")
    assert app[states.STATE].certificates.certificate == served
    assert client.server.port is not None
    async with h.connect(client.server.port, settings.cert_dir / certificates.CA_FILE) as c:
        assert c.peer_fingerprint == h.fingerprint(served.public_bytes(serialization.Encoding.DER))
        status, _, body = await c.post("/mutate", h.review_body(h.real_pods()[0], "uid-after"))
    assert status == 200
    h.response_of(json.loads(body), "uid-after")


# --------------------------------------------------------------------------- policies


async def runtime_class(client: Client, policy: str, uid: str) -> str | None:
    pod = h.real_pods()[0]
    response = await h.post_review(client, f"/mutate/{policy}", h.review_body(pod, uid))
    result = h.response_of(await response.json(), uid)
    assert result["allowed"], result
    value: str | None = h.patched(pod, result)["spec"].get("runtimeClassName")
    return value


async def test_a_good_policy_change_takes_effect_without_a_restart(
    tmp_path: Path, aiohttp_server: Any, aiohttp_client: Any
) -> None:
    # A mounted ConfigMap, updated as the kubelet does it.
    policies_dir, files = h.mounted_policies(tmp_path)
    app = server.create_app(h.settings(tmp_path, policies_dir=policies_dir))
    client = await h.start(aiohttp_server, aiohttp_client, app)
    assert await runtime_class(client, "default", "uid-before") == "nvidia"

    changed = dict(files)
    changed["default.yaml"] = files["default.yaml"].replace(
        b"runtimeClassName: nvidia", b"runtimeClassName: nvidia-cdi"
    )
    assert changed["default.yaml"] != files["default.yaml"]
    h.mount_like_kubelet(policies_dir, "v2", changed)

    async def applied() -> bool:
        return await runtime_class(client, "default", "uid-after") == "nvidia-cdi"

    await h.eventually(applied, what="the changed policy in force")
    text = await metrics_text(aiohttp_client, app)
    assert h.metric(text, "gpu_share_webhook_policy_reloads_total") == 1
    assert h.metric(text, "gpu_share_webhook_policy_reload_errors_total") == 0


@pytest.mark.slow  # waits out five reload intervals, then two reloads
async def test_a_broken_policy_file_is_refused_logged_counted_and_its_last_good_version_answers(
    tmp_path: Path,
    aiohttp_server: Any,
    aiohttp_client: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = h.settings(tmp_path)
    app = server.create_app(settings)
    client = await h.start(aiohttp_server, aiohttp_client, app)
    default = settings.policies_dir / "default.yaml"
    good = default.read_text()
    assert "replicas: 4" in good

    with caplog.at_level(logging.ERROR, logger="webhook"):
        default.write_text(
            good.replace("runtimeClassName: nvidia", "runtimeClassName: nvidia-cdi").replace(
                "replicas: 4", "replicas: 1", 1
            )
        )

        async def refused() -> bool:
            text = await metrics_text(aiohttp_client, app)
            return h.metric(text, "gpu_share_webhook_policy_reload_errors_total") == 1

        await h.eventually(refused, what="the broken policy refused")
    # Named: the file, the field, the reason.
    problems = [
        r.msg["problem"] for r in caplog.records if isinstance(r.msg, dict) and "problem" in r.msg
    ]
    assert any(
        p.startswith(f"{default}: spec.nodeClasses[0].replicas: ") and "at least 2" in p
        for p in problems
    ), problems
    assert await runtime_class(client, "default", "uid-old-policy") == "nvidia"

    # The same broken file is not reported again on every look.
    await asyncio.sleep(5 * settings.reload_interval)
    text = await metrics_text(aiohttp_client, app)
    assert h.metric(text, "gpu_share_webhook_policy_reload_errors_total") == 1

    default.write_text(good.replace("runtimeClassName: nvidia", "runtimeClassName: nvidia-cdi"))

    async def fixed() -> bool:
        return await runtime_class(client, "default", "uid-fixed") == "nvidia-cdi"

    await h.eventually(fixed, what="the fixed policy in force")


# --------------------------------------------------------------------------- helpers


def _files(directory: Path) -> dict[str, bytes]:
    names = (certificates.CA_FILE, certificates.CERT_FILE, certificates.KEY_FILE)
    return {name: (directory / name).read_bytes() for name in names}


def _answered_some(answered: list[str], count: int) -> Any:
    async def check() -> bool:
        return len(answered) >= count

    return check
