"""`gpu-share-webhook serve` as a real process: a fresh start, SIGTERM, several workers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import server_helpers as h
from tests.support.kube import REPO
from webhook import cli
from webhook.server import certificates

# Slow: every test starts `serve` (or another interpreter) and waits on it.
pytestmark = pytest.mark.slow


async def test_serve_in_a_fresh_directory_makes_certificates_says_where_and_answers(
    tmp_path: Path,
) -> None:
    # Settings from the environment this time, as a Deployment would give them.
    port, metrics_port = h.free_port(), h.free_port()
    env = {
        "GPU_SHARE_WEBHOOK_PORT": str(port),
        "GPU_SHARE_WEBHOOK_METRICS_PORT": str(metrics_port),
        "GPU_SHARE_WEBHOOK_DRAIN_SECONDS": "0.2",
    }
    with h.serving(tmp_path, env=env) as serve:
        ca = tmp_path / "certs" / certificates.CA_FILE
        await serve.ready()
        async with h.session_trusting(ca) as session:
            assert {p.name for p in (tmp_path / "certs").iterdir()} >= {
                "ca.crt",
                "tls.crt",
                "tls.key",
            }
            said = [line["message"] for line in serve.log_lines()]
            assert any(str(tmp_path / "certs") in m and "made a local CA" in m for m in said)
            assert any("shipped with the package" in m for m in said)
            # The bounds it runs with, and the loop, in its start-up line.
            (started,) = [
                line for line in serve.log_lines() if "serving admission reviews" in line["message"]
            ]
            assert started["limits"]["max_body_bytes"] == 7 * 1024 * 1024
            assert started["event_loop"] == "uvloop"
            pod = h.real_pods()[0]
            async with session.post(
                serve.url(f"/mutate?{h.TIMEOUT}"),
                data=h.review_body(pod, "uid-fresh"),
                headers=h.JSON,
                server_hostname=h.HOST,
            ) as response:
                assert response.status == 200
                result = h.response_of(await response.json(), "uid-fresh")
            assert result["allowed"] is True
            h.patched(pod, result)
        serve.terminate()
        assert serve.wait() == 0
    reviews = [line for line in serve.log_lines() if line.get("message") == "review"]
    assert [r["uid"] for r in reviews] == ["uid-fresh"]


async def test_sigterm_drains_answering_in_flight_and_new_requests_then_exits_0(
    tmp_path: Path,
) -> None:
    drain = 3.0
    with h.serving(tmp_path, "--drain-seconds", str(drain)) as serve:
        ca = tmp_path / "certs" / certificates.CA_FILE
        await serve.ready()
        async with h.session_trusting(ca) as session:
            body = h.review_body(h.real_pods()[0], "uid-in-flight")
            async with h.connect(serve.port, ca) as in_flight:
                # Half a request when SIGTERM comes: the rest follows during the drain.
                await in_flight.send_head("/mutate", len(body))
                await in_flight.send(body[: len(body) // 2])
                await asyncio.sleep(0.1)
                serve.terminate()

                async def not_ready() -> bool:
                    async with session.get(serve.probe_url("/readyz")) as response:
                        return response.status == 503

                await h.eventually(not_ready, seconds=drain, what="readiness false")
                # Arriving during the drain: answered, and told to reconnect elsewhere.
                async with h.connect(serve.port, ca) as late:
                    late_body = h.review_body(h.real_pods()[1], "uid-during-drain")
                    status, headers, answer = await late.post("/mutate", late_body)
                assert status == 200
                assert headers["connection"] == "close"
                h.response_of(json.loads(answer), "uid-during-drain")

                await in_flight.send(body[len(body) // 2 :])
                status, headers, answer = await in_flight.response()
            assert status == 200
            assert headers["connection"] == "close"
            assert h.response_of(json.loads(answer), "uid-in-flight")["allowed"] is True
        assert await asyncio.to_thread(serve.wait) == 0
    messages = [line["message"] for line in serve.log_lines()]
    assert any(m.startswith("shutting down") for m in messages)
    assert messages[-1] == "stopped"


async def _post(
    serve: h.Process, ca: Path, path: str, pod: dict[str, object], uid: str
) -> dict[str, Any]:
    async with h.connect(serve.port, ca) as connection:
        status, _, answer = await connection.post(path, h.review_body(pod, uid))
    assert status == 200
    return h.response_of(json.loads(answer), uid)


async def _readyz(serve: h.Process) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(serve.probe_url("/readyz")) as r:
        return r.status, await r.text()


async def test_a_broken_policy_file_at_start_does_not_stop_serve_and_its_namespaces_hear_why(
    tmp_path: Path,
) -> None:
    policies_dir = h.copy_policies(tmp_path / "policies")
    broken = policies_dir / "default.yaml"
    broken.write_text("apiVersion: gpu-share.io/v1alpha1\nkind: Nope\nmetadata: {name: default}\n")
    with h.serving(tmp_path, "--drain-seconds", "0.2") as serve:
        ca = tmp_path / "certs" / certificates.CA_FILE
        await serve.answering()
        # Not ready (the file never loaded here: a rollout that brings it stalls), and says
        # which file and why; it serves all the same, should a request reach it.
        status, text = await _readyz(serve)
        assert status == 503
        assert text.startswith("not ready: a policy file that never loaded here\n")
        assert "policy file default.yaml" in text
        assert "kind" in text
        assert "not in force" in text
        # The broken policy's namespaces: refused, naming the file and the error.
        refused = await _post(serve, ca, "/mutate", h.shared_pod(), "uid-broken")
        assert refused["allowed"] is False
        message = refused["status"]["message"]
        assert str(broken) in message
        assert "kind" in message
        # The good one answers as before.
        # The good one answers as before: a whole GPU, as not-renamed calls a shared one.
        pod = h.shared_pod()
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        limits["nvidia.com/gpu"] = limits.pop("nvidia.com/gpu.shared")
        good = await _post(serve, ca, "/mutate/not-renamed", pod, "uid-good")
        assert good["allowed"] is True
        assert h.patched(pod, good)["metadata"]["annotations"]["gpu-share.io/policy"] == (
            "not-renamed"
        )
        async with (
            aiohttp.ClientSession() as session,
            session.get(serve.probe_url("/metrics")) as response,
        ):
            metrics = await response.text()
        assert h.metric(metrics, "gpu_share_webhook_policy_files_not_loaded") == 1
        serve.terminate()
        assert await asyncio.to_thread(serve.wait) == 0
    logged = [line for line in serve.log_lines() if line.get("level") == "error"]
    assert any("default.yaml" in line["message"] and "kind" in line["problem"] for line in logged)


async def test_a_rollout_that_brings_a_bad_policy_stalls_while_the_old_replica_serves(
    tmp_path: Path,
) -> None:
    """The rollout mechanics, as the kubelet and the Deployment controller see them: the old
    replica's ConfigMap changes under it (Helm's fixed name), a new replica starts on the new
    one with an empty state directory, readiness polled on both. maxUnavailable 0: the new
    replica must turn ready before an old one goes, so the rollout stalls on it."""
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    for d in (old_dir, new_dir):
        d.mkdir()
    old_policies = h.copy_policies(old_dir / "policies")
    bad = (
        "apiVersion: gpu-share.io/v1alpha1\nkind: SharingPolicy\nmetadata: {name: default}\n"
        "spec: {nodeClasses: [{name: t4, product: Tesla-T4, stratgy: mps, replicas: 4}]}\n"
    )
    with h.serving(
        old_dir,
        "--state-dir",
        str(old_dir / "state"),
        "--drain-seconds",
        "0.2",
        "--policies",
        str(old_policies),
    ) as old:
        await old.ready()
        new_policies = h.copy_policies(new_dir / "policies")
        (new_policies / "default.yaml").write_text(bad)
        (old_policies / "default.yaml").write_text(bad)
        with h.serving(
            new_dir,
            "--state-dir",
            str(new_dir / "state"),
            "--drain-seconds",
            "0.2",
            "--policies",
            str(new_policies),
        ) as new:
            await new.answering()
            # Polled as the kubelet would, for a while: never ready; the old one always is.
            for _ in range(10):
                new_status, new_text = await _readyz(new)
                old_status, old_text = await _readyz(old)
                assert (new_status, old_status) == (503, 200), (new_text, old_text)
                await asyncio.sleep(0.3)
            assert "default.yaml" in new_text
            assert "strategy" in new_text

            async def old_serves_its_last_good_version() -> bool:
                status, text = await _readyz(old)
                assert status == 200, text
                return "last good version serves on" in text

            # Once it has seen the change (its next poll of the directory), still ready.
            await h.eventually(old_serves_its_last_good_version, what="the old replica's poll")
            assert (await _readyz(new))[0] == 503
            # Fixed: the new replica turns ready, and the rollout goes on.
            shipped = (REPO / "policies" / "default.yaml").read_bytes()
            (new_policies / "default.yaml").write_bytes(shipped)
            await new.ready()
            new.terminate()
            assert await asyncio.to_thread(new.wait) == 0
        old.terminate()
        assert await asyncio.to_thread(old.wait) == 0


async def test_a_restarted_server_finds_the_last_good_policy_in_its_state_directory(
    tmp_path: Path,
) -> None:
    policies_dir = h.copy_policies(tmp_path / "policies")
    state = tmp_path / "state"
    default = policies_dir / "default.yaml"
    with h.serving(tmp_path, "--state-dir", str(state), "--drain-seconds", "0.2") as serve:
        await serve.ready()
        serve.terminate()
        assert await asyncio.to_thread(serve.wait) == 0
    assert (state / "policies" / "default.yaml").read_bytes() == default.read_bytes()
    # A bad ConfigMap edit, then the container restarts.
    default.write_text("spec: [not, a, policy]\n")
    with h.serving(tmp_path, "--state-dir", str(state), "--drain-seconds", "0.2") as serve:
        ca = tmp_path / "certs" / certificates.CA_FILE
        await serve.ready()
        status, text = await _readyz(serve)
        assert status == 200
        assert "policy file default.yaml" in text
        assert "last good version serves on" in text
        pod = h.shared_pod()
        result = await _post(serve, ca, "/mutate", pod, "uid-last-good")
        assert result["allowed"] is True
        assert h.patched(pod, result)["spec"]["runtimeClassName"] == "nvidia"
        serve.terminate()
        assert await asyncio.to_thread(serve.wait) == 0
    # The broken file never replaced the good one kept.
    assert b"spec: [not" not in (state / "policies" / "default.yaml").read_bytes()


PROBE_REVIEW_STREAM = """
import gc, os
from webhook.tools import serve
from webhook.server import logs
stream = serve._review_stream()
print(type(stream).__name__, flush=True)
lines = logs.JsonLines(stream)
lines({"n": 1})  # no event loop: written through
os.write(2, b"between\\n")
del lines, stream
gc.collect()
os.write(2, b"descriptor 2 still open\\n")
"""


def test_review_lines_go_to_standard_error_itself() -> None:
    # Unbuffered as the image runs it (PYTHONUNBUFFERED=1): the lines go to descriptor 2 as
    # JsonLines writes them, and closing our file object leaves it open.
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE_REVIEW_STREAM],
        capture_output=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == "FileIO"
    written = done.stderr.decode().splitlines()
    assert len(written) == 3
    assert json.loads(written[0])["n"] == 1
    assert written[1:] == ["between", "descriptor 2 still open"]


# --------------------------------------------------------------------------- Ctrl-C, address


async def test_a_second_ctrl_c_stops_at_once_without_finishing_the_drain(tmp_path: Path) -> None:
    # A drain far longer than the test waits, and a request in flight that never ends: only
    # the second SIGINT can end the process in time.
    with h.serving(tmp_path, "--drain-seconds", "120") as serve:
        ca = tmp_path / "certs" / certificates.CA_FILE
        await serve.ready()
        body = h.review_body(h.real_pods()[0], "uid-in-flight")
        async with h.connect(serve.port, ca) as in_flight:
            await in_flight.send_head("/mutate", len(body))
            await in_flight.send(body[: len(body) // 2])
            await asyncio.sleep(0.1)
            serve.popen.send_signal(signal.SIGINT)

            async def draining() -> bool:
                return (await _readyz(serve))[0] == 503

            await h.eventually(draining, seconds=10, what="readiness false after Ctrl-C")
            assert serve.popen.poll() is None  # the first Ctrl-C drains
            started = time.monotonic()
            serve.popen.send_signal(signal.SIGINT)
            code = await asyncio.to_thread(serve.wait, 10)
            assert time.monotonic() - started < 5
            # The request in flight is cut off, not answered.
            assert await in_flight.reader.read() == b""
    assert code == 130
    said = [line for line in serve.log.splitlines() if "interrupted again" in line]
    assert len(said) == 1, serve.log
    assert "without finishing the drain" in said[0]


async def test_sigterm_after_ctrl_c_does_not_cut_the_drain_short(tmp_path: Path) -> None:
    with h.serving(tmp_path, "--drain-seconds", "1.5") as serve:
        await serve.ready()
        serve.popen.send_signal(signal.SIGINT)
        await h.eventually(
            lambda: _readyz_is(serve, 503), seconds=10, what="readiness false after Ctrl-C"
        )
        serve.terminate()
        assert await asyncio.to_thread(serve.wait) == 0
    assert "interrupted again" not in serve.log
    assert [line["message"] for line in serve.log_lines()][-1] == "stopped"


async def _readyz_is(serve: h.Process, status: int) -> bool:
    return (await _readyz(serve))[0] == status


async def test_serve_listens_on_this_machine_only_unless_told(tmp_path: Path) -> None:
    port, metrics_port = h.free_port(), h.free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPU_SHARE_WEBHOOK_")}
    log_file = tmp_path / "serve.log"
    with log_file.open("wb") as log:
        # No --host: the default.
        popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "webhook",
                "serve",
                "--port",
                str(port),
                "--metrics-port",
                str(metrics_port),
                "--drain-seconds",
                "0",
            ],
            cwd=tmp_path,
            env=environment,
            stdout=log,
            stderr=log,
        )
    try:

        async def started() -> bool:
            assert popen.poll() is None, log_file.read_text()
            return "serving admission reviews" in log_file.read_text()

        await h.eventually(started, seconds=30, what="serve started")
        assert f"on https://127.0.0.1:{port}" in log_file.read_text()
        # 127.0.0.2 is this machine too, but not the address listened on: 0.0.0.0 would
        # answer there (as it would on every other interface).
        for each in (port, metrics_port):
            socket.create_connection(("127.0.0.1", each), timeout=2).close()
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.2", each), timeout=2).close()
    finally:
        popen.send_signal(signal.SIGTERM)
        assert popen.wait(30) == 0


def test_a_variable_of_a_retired_option_is_named_in_a_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The bounds are fixed values now: a Deployment that still sets one is told so. (The
    # same port twice stops `serve` at its first check, after the warning.)
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_WORKERS", "2")
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_MAX_BODY_BYTES", "1024")
    assert cli.main(["serve", "--port", "9443", "--metrics-port", "9443"]) == 2
    err = capsys.readouterr().err
    assert "GPU_SHARE_WEBHOOK_WORKERS, GPU_SHARE_WEBHOOK_MAX_BODY_BYTES" in err
    assert "not read, these settings are fixed now" in err
