"""Client certificates on the admission port (`serve --client-ca-file`, `--client-names`).

The server runs as `serve` runs it (`serving.running`: the listener, which starts TLS on
each connection with the context in force, and both applications); the clients are Python's
TLS with or without a client certificate made by `certificates.make_client_certificate`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.support import server_helpers as h
from webhook.server import certificates, serving


class Authorities:
    """Two client CAs and certificates they signed, as files under `directory`."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.directory = directory
        self.first = certificates.make_ca()
        self.second = certificates.make_ca()
        self.ca_file = directory / "client-ca.crt"
        self.ca_file.write_bytes(self.first.cert_pem)

    def client(
        self, ca: certificates.Authority, name: str, *, dns_names: tuple[str, ...] = ()
    ) -> tuple[Path, Path]:
        pair = certificates.make_client_certificate(ca, common_name=name, dns_names=dns_names)
        number = len(list(self.directory.glob("client-*.crt")))
        cert = self.directory / f"client-{number}.crt"
        key = self.directory / f"client-{number}.key"
        cert.write_bytes(pair.cert_pem)
        key.write_bytes(pair.key_pem)
        return cert, key

    def trust(self, *cas: certificates.Authority) -> None:
        """Replace the CA file as a kubelet does (a new file renamed over the old one)."""
        temporary = self.ca_file.with_name(".client-ca.new")
        temporary.write_bytes(b"".join(ca.cert_pem for ca in cas))
        os.replace(temporary, self.ca_file)


@pytest.fixture
def authorities(tmp_path: Path) -> Authorities:
    return Authorities(tmp_path / "clients")


@pytest.fixture
async def server(tmp_path: Path, authorities: Authorities) -> AsyncIterator[serving.Running]:
    settings = h.settings(
        tmp_path,
        host="127.0.0.1",
        port=0,
        metrics_port=0,
        client_ca_file=authorities.ca_file,
        client_names=("kube-apiserver", "apiserver.example.com"),
        reload_interval=0.05,
    )
    async with serving.running(settings) as running:
        yield running


def refused_count(text: str) -> float:
    return h.metric(text, "gpu_share_webhook_connections_closed_total", reason="client-certificate")


async def review_status(
    running: serving.Running, client: tuple[Path, Path] | None, uid: str = "uid-1"
) -> int:
    """The status of one review over a new connection; 0 when the connection is refused
    (the handshake fails, or the server closes it before answering)."""
    try:
        async with h.connect(running.port, h.ca_of(running), client=client) as connection:
            status, _, _ = await asyncio.wait_for(
                connection.post("/mutate", h.review_body(h.shared_pod(), uid)), 5
            )
            return status
    except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, EOFError, IndexError):
        # IndexError: no status line, the connection closed (TLS 1.3 ends the handshake on
        # the client side before the server has judged its certificate).
        return 0


async def test_a_certificate_of_the_ca_with_an_accepted_name_is_served(
    server: serving.Running, authorities: Authorities
) -> None:
    by_name = authorities.client(authorities.first, "kube-apiserver")
    by_san = authorities.client(
        authorities.first, "someone", dns_names=("other.example.com", "apiserver.example.com")
    )
    assert await review_status(server, by_name) == 200
    assert await review_status(server, by_san) == 200
    assert refused_count(await h.scrape(server)) == 0


@pytest.mark.parametrize(
    "who",
    ["no certificate", "another CA", "a name not accepted", "a server certificate"],
)
async def test_a_connection_without_an_acceptable_certificate_is_refused_before_a_request(
    server: serving.Running,
    authorities: Authorities,
    who: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client: tuple[Path, Path] | None
    if who == "no certificate":
        client = None
    elif who == "another CA":
        client = authorities.client(authorities.second, "kube-apiserver")
    elif who == "a name not accepted":
        client = authorities.client(authorities.first, "system:node:gpu-1")
    else:
        # Signed by the CA, the right name, but made for servers (extendedKeyUsage
        # serverAuth): not a client certificate.
        pair = certificates.make_serving_certificate(
            authorities.first, service="kube-apiserver", namespace="default"
        )
        client = (authorities.directory / "server.crt", authorities.directory / "server.key")
        client[0].write_bytes(pair.cert_pem)
        client[1].write_bytes(pair.key_pem)
    with caplog.at_level(logging.WARNING, logger="webhook.server.connections"):
        assert await review_status(server, client) == 0

        async def counted() -> bool:
            return refused_count(await h.scrape(server)) == 1

        await h.eventually(counted, what="the refused connection counted")
    # No request was read, so none was reviewed or refused as a request.
    text = await h.scrape(server)
    assert h.metric(text, "gpu_share_webhook_reviews_total") == 0
    (line,) = [r.getMessage() for r in caplog.records if "client certificate:" in r.getMessage()]
    assert "refused a connection from 127.0.0.1" in line
    if who == "a name not accepted":
        assert "system:node:gpu-1" in line
        assert "apiserver.example.com, kube-apiserver" in line


async def test_refusals_are_logged_at_a_bounded_rate(
    server: serving.Running, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="webhook.server.connections"):
        for number in range(20):
            assert await review_status(server, None, f"uid-{number}") == 0

        async def counted() -> bool:
            return refused_count(await h.scrape(server)) == 20

        await h.eventually(counted, what="20 refused connections counted")
    lines = [r for r in caplog.records if "client certificate:" in r.getMessage()]
    assert len(lines) == 1


async def test_the_probes_and_metrics_port_needs_no_client_certificate(
    server: serving.Running,
) -> None:
    async with aiohttp.ClientSession() as session:
        for path in ("/healthz", "/readyz", "/metrics"):
            async with session.get(f"http://127.0.0.1:{server.metrics_port}{path}") as response:
                assert response.status == 200, path


async def test_rotating_the_client_ca_under_load_fails_no_request(
    server: serving.Running, authorities: Authorities
) -> None:
    old = authorities.client(authorities.first, "kube-apiserver")
    new = authorities.client(authorities.second, "kube-apiserver")
    assert await review_status(server, new) == 0  # not trusted yet

    statuses: list[int] = []
    stop = asyncio.Event()
    # The certificate the "API server" presents; switched once both CAs are trusted.
    presenting = [old]

    async def load() -> None:
        number = 0
        while not stop.is_set():
            number += 1
            statuses.append(await review_status(server, presenting[0], f"uid-{number}"))

    async def accepted(client: tuple[Path, Path]) -> bool:
        return await review_status(server, client) == 200

    task = asyncio.create_task(load())
    await asyncio.sleep(0.3)
    authorities.trust(authorities.first, authorities.second)  # both, during the rotation
    await h.eventually(lambda: accepted(new), what="the new CA trusted")
    presenting[0] = new
    await asyncio.sleep(0.3)
    authorities.trust(authorities.second)  # the old one retired

    async def retired() -> bool:
        return await review_status(server, old) == 0

    await h.eventually(retired, what="the old CA no longer trusted")
    await asyncio.sleep(0.3)
    stop.set()
    await task
    assert len(statuses) >= 5  # reviews went on through the rotation
    assert set(statuses) == {200}, statuses


async def test_a_broken_client_ca_file_keeps_the_cas_in_force(
    server: serving.Running, authorities: Authorities
) -> None:
    client = authorities.client(authorities.first, "kube-apiserver")
    authorities.ca_file.write_bytes(b"-----BEGIN CERTIFICATE-----\nnot one\n")

    async def refused() -> bool:
        text = await h.scrape(server)
        return h.metric(text, "gpu_share_webhook_certificate_reload_errors_total") == 1

    await h.eventually(refused, what="the broken CA file refused")
    assert await review_status(server, client) == 200


async def test_a_serving_certificate_rotation_keeps_client_authentication(
    server: serving.Running, authorities: Authorities, tmp_path: Path
) -> None:
    # The context that requires client certificates is made anew for a new serving pair.
    client = authorities.client(authorities.first, "kube-apiserver")
    cert_dir = server.state.settings.cert_dir
    before = server.state.ssl_context
    h.write_pair(cert_dir, h.make_ca())

    async def swapped() -> bool:
        return server.state.ssl_context is not before

    await h.eventually(swapped, what="a new context for the new serving pair")
    assert await review_status(server, client) == 200
    assert await review_status(server, None) == 0


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "empty, expected a PEM certificate"),
        (b"garbage", "not a PEM certificate"),
        ("leaf", "is not a CA"),
    ],
)
async def test_a_client_ca_file_that_cannot_be_used_stops_the_server_before_it_listens(
    tmp_path: Path, content: bytes | str, words: str
) -> None:
    ca_file = tmp_path / "client-ca.crt"
    if content == "leaf":
        pair = certificates.make_client_certificate(
            certificates.make_ca(), common_name="kube-apiserver"
        )
        ca_file.write_bytes(pair.cert_pem)
    else:
        assert isinstance(content, bytes)
        ca_file.write_bytes(content)
    settings = h.settings(
        tmp_path, host="127.0.0.1", port=0, metrics_port=0, client_ca_file=ca_file
    )
    with pytest.raises(certificates.CertificateError, match=words):
        async with serving.running(settings):
            pytest.fail("listening with a client CA file that cannot be used")


# --- as `serve` runs (its own process, on uvloop where installed)


@pytest.mark.slow
async def test_serve_takes_the_client_ca_from_its_environment_and_refuses_others(
    tmp_path: Path, authorities: Authorities
) -> None:
    env = {
        "GPU_SHARE_WEBHOOK_CLIENT_CA_FILE": str(authorities.ca_file),
        "GPU_SHARE_WEBHOOK_CLIENT_NAMES": "kube-apiserver, apiserver.example.com",
        # No drain: its five seconds by default are another test's subject.
        "GPU_SHARE_WEBHOOK_DRAIN_SECONDS": "0",
    }
    accepted = authorities.client(authorities.first, "apiserver.example.com")
    other_name = authorities.client(authorities.first, "someone")
    with h.serving(tmp_path, env=env) as serve:
        await serve.ready()
        ca = tmp_path / "certs" / certificates.CA_FILE

        async def status(client: tuple[Path, Path] | None) -> int:
            try:
                async with h.connect(serve.port, ca, client=client) as connection:
                    code, _, _ = await asyncio.wait_for(
                        connection.post("/mutate", h.review_body(h.shared_pod(), "uid-p")), 5
                    )
                    return code
            except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, IndexError):
                # IndexError: no status line, the connection closed (TLS 1.3 ends the
                # handshake on the client side before the server has judged its certificate).
                return 0

        assert await status(accepted) == 200
        assert await status(other_name) == 0
        assert await status(None) == 0
        async with (
            aiohttp.ClientSession() as session,
            session.get(serve.probe_url("/metrics")) as response,
        ):
            text = await response.text()
        assert refused_count(text) == 2
        serve.terminate()
        assert serve.wait() == 0
    said = [line["message"] for line in serve.log_lines()]
    assert any(
        "client certificate: its names are someone, none of them accepted" in m for m in said
    )


@pytest.mark.slow
def test_serve_refuses_a_client_ca_file_that_cannot_be_used(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("not a certificate\n")
    with h.serving(tmp_path, "--client-ca-file", "ca.crt") as serve:
        assert serve.wait() == 2
    assert "ca.crt: not a PEM certificate, or a damaged one" in serve.log
