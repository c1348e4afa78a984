"""Playing the API server against the real admission server, over real TLS.

The API server trusts exactly the webhook configuration's caBundle, finds the Service name
`<svc>.<ns>.svc` among the serving certificate's SANs, talks HTTP/1.1 with keep-alive and
adds `?timeout=<N>s`. The client here does the same; the certificates come from
`webhook.server.certificates` and the review bodies from real pods (`kube.admission_review`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import functools
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.support import apiserver, kube, real_world
from webhook.server import certificates, configuration, states
from webhook.server.serving import Running

SERVICE = "gpu-share-webhook"
NAMESPACE = "gpu-share-system"
# What the API server calls the webhook by, and checks the certificate against.
HOST = certificates.service_host(service=SERVICE, namespace=NAMESPACE)
TIMEOUT = "timeout=10s"
JSON = {"Content-Type": "application/json"}
REAL_PODS = "13-pre6g-test-gpu-shared-4pods.yaml"  # in real_world.real_world()


# --------------------------------------------------------------------------- certificates


def make_ca() -> certificates.Authority:
    return certificates.make_ca()


def write_pair(directory: Path, ca: certificates.Authority) -> bytes:
    """A serving certificate from `ca` written to `directory` as a Secret holds it; its PEM."""
    pair = certificates.make_serving_certificate(ca, service=SERVICE, namespace=NAMESPACE)
    certificates.write_bundle(
        directory,
        certificates.Bundle(ca_pem=ca.cert_pem, cert_pem=pair.cert_pem, key_pem=pair.key_pem),
    )
    return pair.cert_pem


def mount_like_kubelet(directory: Path, version: str, files: Mapping[str, bytes]) -> None:
    """Put `files` in `directory` the way the kubelet updates a mounted Secret or ConfigMap.

    The files live in a `..<version>` directory, `..data` points at it, and each visible
    name is a symlink through `..data`. A new version is written beside the old one and
    `..data` is swapped by one rename: readers see the old set or the new, never a mix.
    """
    versioned = directory / f"..{version}"
    versioned.mkdir(parents=True)
    for name, data in files.items():
        (versioned / name).write_bytes(data)
    swap = directory / "..data_tmp"
    swap.symlink_to(versioned.name)
    swap.replace(directory / "..data")
    for name in files:
        visible = directory / name
        if not visible.is_symlink():
            visible.symlink_to(Path("..data") / name)


def client_context(ca_file: Path, client: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    """Trusts exactly `ca_file` (the caBundle) and checks the host name against the SANs;
    presents the certificate and key files `client` when given."""
    context = ssl.create_default_context(cafile=str(ca_file))
    assert context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    if client is not None:
        context.load_cert_chain(str(client[0]), str(client[1]))
    return context


def fingerprint(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def fingerprint_of_pem(pem: bytes) -> str:
    return fingerprint(ssl.PEM_cert_to_DER_cert(pem.decode()))


class Connection:
    """One TLS connection spoken to by hand: to see the handshake, or to send half a request."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @property
    def peer_fingerprint(self) -> str:
        """The certificate the server presented in the handshake."""
        ssl_object = self.writer.get_extra_info("ssl_object")
        return fingerprint(ssl_object.getpeercert(binary_form=True))

    async def send_head(self, path: str, length: int) -> None:
        await self.send(_head(path, length))

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def response(self) -> tuple[int, dict[str, str], bytes]:
        """Status, headers (lower-case names) and body of the next response."""
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return status, headers, body

    async def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        # In one write, as the API server's client sends a review of a few KB.
        await self.send(_head(path, len(body)) + body)
        return await self.response()


def _head(path: str, length: int) -> bytes:
    return (
        f"POST {path}?{TIMEOUT} HTTP/1.1\r\nHost: {HOST}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


@contextlib.asynccontextmanager
async def connect(
    port: int,
    ca: Path,
    *,
    source: str | None = None,
    client: tuple[Path, Path] | None = None,
) -> AsyncIterator[Connection]:
    """A TLS connection to 127.0.0.1:`port` checked as the API server checks it; from the
    loopback address `source` (127.0.0.2, ...) when given, presenting the client certificate
    and key files `client` when given."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1",
        port,
        ssl=client_context(ca, client),
        server_hostname=HOST,
        local_addr=(source, 0) if source else None,
    )
    try:
        yield Connection(reader, writer)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


# --------------------------------------------------------------------------- reviews


def real_pods() -> list[dict[str, Any]]:
    """The pods of a real manifest (four pods asking for `nvidia.com/gpu.shared: 1`): a
    copy the caller may change."""
    return copy.deepcopy(list(_real_pods()))


@functools.cache  # read once per run: most server tests send one of them
def _real_pods() -> tuple[dict[str, Any], ...]:
    text = (real_world.real_world() / REAL_PODS).read_text()
    pods = [doc for doc in kube.load_yaml_all(text) if doc]
    assert len(pods) == 4
    return tuple(pods)


def shared_pod(count: int = 1, name: str = "gpu-shared-test") -> dict[str, Any]:
    pod = real_pods()[0]
    pod["metadata"]["name"] = name
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.shared"] = count
    return pod


def review_body(obj: Mapping[str, Any], uid: str, **options: Any) -> bytes:
    return json.dumps(kube.admission_review(obj, uid=uid, **options)).encode()


def response_of(review: Mapping[str, Any], uid: str) -> dict[str, Any]:
    """The AdmissionResponse, after the checks the API server makes of every answer."""
    return apiserver.answer(review, uid)


def patched(obj: Mapping[str, Any], response: Mapping[str, Any]) -> dict[str, Any]:
    """What the API server stores: the patch applied to the object as sent, validated."""
    patch = json.loads(base64.b64decode(response["patch"]))
    result = kube.apply(kube.as_served(obj), patch)
    kube.check_valid(result)
    return result


# --------------------------------------------------------------------------- the server


def copy_policies(directory: Path) -> Path:
    """The shipped policies, copied where a test may change them."""
    shutil.copytree(kube.REPO / "policies", directory)
    return directory


def mounted_policies(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """The shipped policies mounted in `tmp_path` as the kubelet mounts a ConfigMap (version
    v1, see `mount_like_kubelet`): the directory, and the files to change for a v2."""
    shipped = copy_policies(tmp_path / "shipped")
    files = {p.name: p.read_bytes() for p in shipped.glob("*.yaml")}
    policies_dir = tmp_path / "mounted"
    mount_like_kubelet(policies_dir, "v1", files)
    return policies_dir, files


def settings(tmp_path: Path, **overrides: Any) -> configuration.Settings:
    """Settings for a server on its own certificates and a copy of the shipped policies."""
    cert_dir = tmp_path / "certs"
    if not (cert_dir / certificates.CERT_FILE).exists():
        write_pair(cert_dir, make_ca())
    policies_dir = tmp_path / "policies"
    if not policies_dir.exists():
        copy_policies(policies_dir)
    values: dict[str, Any] = {
        "policies_dir": policies_dir,
        "cert_dir": cert_dir,
        "service": SERVICE,
        "namespace": NAMESPACE,
        "reload_interval": 0.1,
    }
    values.update(overrides)
    return configuration.Settings(**values)


def ca_of(running: Running) -> Path:
    """The CA a running server's certificate comes from (what a caBundle holds)."""
    return running.state.settings.cert_dir / certificates.CA_FILE


async def scrape(running: Running) -> str:
    """A running server's /metrics text, from its plain port."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{running.metrics_port}/metrics") as response,
    ):
        return await response.text()


def ca_file(app: web.Application) -> Path:
    """The CA the app's certificate comes from: what a webhook configuration's caBundle holds."""
    return app[states.STATE].settings.cert_dir / certificates.CA_FILE


async def start(
    aiohttp_server: Any,
    aiohttp_client: Any,
    app: web.Application,
    *,
    force_close: bool = False,
    trace: aiohttp.TraceConfig | None = None,
) -> TestClient[Any, Any]:
    """`app` served over TLS and a client that checks it as the API server would.

    `force_close`: a new connection (and handshake) for every request.
    """
    test_server: TestServer = await aiohttp_server(app, ssl=app[states.STATE].ssl_context)
    connector = aiohttp.TCPConnector(ssl=client_context(ca_file(app)), force_close=force_close)
    result: TestClient[Any, Any] = await aiohttp_client(
        test_server, connector=connector, trace_configs=[trace] if trace else None
    )
    return result


async def post_review(
    client: TestClient[Any, Any], path: str, body: Any, **kwargs: Any
) -> aiohttp.ClientResponse:
    """POST as the API server does: JSON, HTTP/1.1, `?timeout=10s`, the Service's name."""
    separator = "&" if "?" in path else "?"
    headers = kwargs.pop("headers", JSON)
    # aiohttp warns about large bytes bodies (they are sent from the event loop's thread).
    data = io.BytesIO(body) if isinstance(body, bytes) and len(body) > 1 << 20 else body
    return await client.post(
        f"{path}{separator}{TIMEOUT}",
        data=data,
        headers=headers,
        server_hostname=HOST,
        **kwargs,
    )


def api_server_send(client: TestClient[Any, Any]) -> apiserver.Send:
    """For `apiserver.ApiServer`: entries answered by the real application over TLS
    (`client`, from `start`), each request posted as the API server posts it."""

    async def send(path: str, body: bytes) -> dict[str, Any]:
        response = await post_review(client, path, body)
        assert response.status == 200, await response.text()
        return await response.json()  # type: ignore[no-any-return]

    return send


def counting_connections() -> tuple[aiohttp.TraceConfig, list[int]]:
    """A trace that counts the connections (TLS handshakes) a client opens."""
    opened: list[int] = []
    trace = aiohttp.TraceConfig()

    async def on_created(*_args: Any) -> None:
        opened.append(1)

    trace.on_connection_create_end.append(on_created)
    return trace, opened


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`, from /metrics text."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        series, _, value = line.rpartition(" ")
        sample, _, rest = series.partition("{")
        if sample != name:
            continue
        found = dict(part.split("=", 1) for part in rest.rstrip("}").split(",") if "=" in part)
        if all(found.get(k) == f'"{v}"' for k, v in labels.items()):
            total += float(value)
    return total


async def eventually(check: Any, *, seconds: float = 10.0, what: str = "") -> Any:
    """Await `check()` until it returns something truthy; fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.05)


# --------------------------------------------------------------------------- a real process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Process:
    """`python -m webhook serve` in a directory of its own, its log in a file."""

    def __init__(self, cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> None:
        self.cwd = cwd
        self.port = free_port()
        self.metrics_port = free_port()
        self.log_file = cwd / "serve.log"
        environment = {
            k: v for k, v in os.environ.items() if not k.startswith("GPU_SHARE_WEBHOOK_")
        }
        environment.pop("PROMETHEUS_MULTIPROC_DIR", None)
        environment.update(env or {})
        command = [sys.executable, "-m", "webhook", "serve", "--host", "127.0.0.1"]
        if "GPU_SHARE_WEBHOOK_PORT" not in environment:
            command += ["--port", str(self.port)]
        else:
            self.port = int(environment["GPU_SHARE_WEBHOOK_PORT"])
        if "GPU_SHARE_WEBHOOK_METRICS_PORT" not in environment:
            command += ["--metrics-port", str(self.metrics_port)]
        else:
            self.metrics_port = int(environment["GPU_SHARE_WEBHOOK_METRICS_PORT"])
        with self.log_file.open("wb") as log:
            self.popen = subprocess.Popen(
                [*command, *args], cwd=cwd, env=environment, stdout=log, stderr=log
            )

    @property
    def log(self) -> str:
        return self.log_file.read_text()

    def log_lines(self) -> list[dict[str, Any]]:
        lines = []
        for line in self.log.splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                lines.append(json.loads(line))
        return lines

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def probe_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.metrics_port}{path}"

    async def ready(self, seconds: float = 30.0) -> None:
        """Wait until /readyz says so (the certificates exist by then)."""
        await self._readyz_gives((200,), seconds, "serve ready")

    async def answering(self, seconds: float = 30.0) -> None:
        """Wait until /readyz answers, ready or not (a replica kept out of the Service)."""
        await self._readyz_gives((200, 503), seconds, "serve answering /readyz")

    async def _readyz_gives(self, statuses: tuple[int, ...], seconds: float, what: str) -> None:
        async with aiohttp.ClientSession() as session:

            async def check() -> bool:
                assert self.popen.poll() is None, f"serve exited:\n{self.log}"
                try:
                    async with session.get(self.probe_url("/readyz")) as response:
                        return response.status in statuses
                except aiohttp.ClientConnectionError:
                    return False

            await eventually(check, seconds=seconds, what=what)

    def terminate(self) -> None:
        self.popen.send_signal(signal.SIGTERM)

    def wait(self, seconds: float = 30.0) -> int:
        return self.popen.wait(seconds)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()


@contextlib.contextmanager
def serving(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> Iterator[Process]:
    process = Process(cwd, *args, env=env)
    try:
        yield process
    finally:
        process.stop()


@contextlib.asynccontextmanager
async def session_trusting(ca_file: Path) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(ssl=client_context(ca_file))
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session
