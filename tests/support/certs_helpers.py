"""Helpers for the certificate tests: a stand-in Kubernetes API server, and TLS client/server.

`FakeKubernetes` plays the few API endpoints the `certs` code uses, over real HTTP, so the
official client is exercised as it is in a cluster: GET/PATCH of webhook configurations
(the JSON Patch really applied, a failed `test` answered 422 as the API server does) and
GET/POST/PUT of Secrets (with resourceVersion conflicts). It records every request.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import hashlib
import json
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
from aiohttp import web

SERVICE = "gpu-share-webhook"
NAMESPACE = "gpu-share-system"
HOST = f"{SERVICE}.{NAMESPACE}.svc"

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
MUTATING_PATH = f"{ADMISSION}/mutatingwebhookconfigurations"
VALIDATING_PATH = f"{ADMISSION}/validatingwebhookconfigurations"


def secrets_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/secrets"


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    content_type: str
    body: Any


@dataclass
class FakeKubernetes:
    """The API server, as far as the certificate code is concerned."""

    url: str = ""  # set once it listens
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    forbidden: set[tuple[str, str]] = field(default_factory=set)  # (method, path) -> 403
    # Called with the object's path before a PATCH applies: a concurrent writer.
    before_patch: Callable[[str], None] | None = None
    _version: int = 0

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        for resource in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            app.router.add_get(f"{ADMISSION}/{resource}/{{name}}", self._get)
            app.router.add_patch(f"{ADMISSION}/{resource}/{{name}}", self._patch)
        app.router.add_get("/api/v1/namespaces/{namespace}/secrets/{name}", self._get)
        app.router.add_put("/api/v1/namespaces/{namespace}/secrets/{name}", self._put)
        app.router.add_post("/api/v1/namespaces/{namespace}/secrets", self._post)
        return app

    # --- seeding and looking --------------------------------------------------------

    def add_webhook_configuration(self, collection: str, name: str, webhooks: list[Any]) -> str:
        kind = "Mutating" if collection == MUTATING_PATH else "Validating"
        path = f"{collection}/{name}"
        self._store(
            path,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": f"{kind}WebhookConfiguration",
                "metadata": {"name": name},
                "webhooks": webhooks,
            },
        )
        return path

    def add_secret(
        self,
        namespace: str,
        name: str,
        files: dict[str, bytes],
        *,
        type_: str = "kubernetes.io/tls",
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> str:
        path = f"{secrets_path(namespace)}/{name}"
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if labels:
            metadata["labels"] = labels
        if annotations:
            metadata["annotations"] = annotations
        data = {key: base64.b64encode(value).decode() for key, value in files.items()}
        self._store(
            path,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": metadata,
                "type": type_,
                "data": data,
            },
        )
        return path

    def secret_files(self, namespace: str, name: str) -> dict[str, bytes]:
        data = self.objects[f"{secrets_path(namespace)}/{name}"]["data"]
        return {key: base64.b64decode(value) for key, value in data.items()}

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method != "GET"]

    # --- the API --------------------------------------------------------------------

    @web.middleware
    async def _record(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.requests.append(Recorded(request.method, request.path, request.content_type, body))
        if (request.method, request.path) in self.forbidden:
            resource = request.path.split("/")[-2]
            return _status(
                403,
                "Forbidden",
                f'{resource} "{request.match_info.get("name", "")}" is forbidden: User '
                f'"system:serviceaccount:{NAMESPACE}:certs" cannot {request.method.lower()}'
                f' resource "{resource}"',
            )
        response: web.StreamResponse = await handler(request)
        return response

    async def _get(self, request: web.Request) -> web.Response:
        found = self.objects.get(request.path)
        if found is None:
            return _not_found(request)
        return web.json_response(found)

    async def _patch(self, request: web.Request) -> web.Response:
        if request.content_type != "application/json-patch+json":
            return _status(415, "UnsupportedMediaType", request.content_type)
        if request.path not in self.objects:
            return _not_found(request)
        if self.before_patch is not None:
            self.before_patch(request.path)
        try:
            patched = jsonpatch.apply_patch(self.objects[request.path], await request.json())
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            return _status(422, "Invalid", str(exc))
        return web.json_response(self._store(request.path, patched))

    async def _post(self, request: web.Request) -> web.Response:
        body = await request.json()
        name = body["metadata"]["name"]
        path = f"{request.path}/{name}"
        if path in self.objects:
            return _status(409, "AlreadyExists", f'secrets "{name}" already exists')
        return web.json_response(self._store(path, body), status=201)

    async def _put(self, request: web.Request) -> web.Response:
        current = self.objects.get(request.path)
        if current is None:
            return _not_found(request)
        body = await request.json()
        wanted = body["metadata"].get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            return _status(409, "Conflict", "the object has been modified")
        if body.get("type") != current.get("type"):
            return _status(422, "Invalid", "type: Invalid value: field is immutable")
        return web.json_response(self._store(request.path, body))

    def _store(self, path: str, document: dict[str, Any]) -> dict[str, Any]:
        self._version += 1
        stored = copy.deepcopy(document)
        stored["metadata"]["resourceVersion"] = str(self._version)
        self.objects[path] = stored
        return stored


def _not_found(request: web.Request) -> web.Response:
    resource = request.path.split("/")[-2]
    return _status(404, "NotFound", f'{resource} "{request.match_info["name"]}" not found')


def _status(code: int, reason: str, message: str) -> web.Response:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(status, status=code)


def webhook(name: str, *, ca_bundle: str | None = None) -> dict[str, Any]:
    """One webhook entry as the API server returns it."""
    client_config: dict[str, Any] = {
        "service": {"namespace": NAMESPACE, "name": SERVICE, "path": "/mutate", "port": 443}
    }
    if ca_bundle is not None:
        client_config["caBundle"] = ca_bundle
    return {
        "name": name,
        "clientConfig": client_config,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
    }


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig whose only cluster is `server`."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "certs", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "certs"}}],
        "current-context": "fake",
    }
    path.write_text(json.dumps(config))
    return path


# --- TLS ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def echo_server(context: ssl.SSLContext) -> AsyncIterator[int]:
    """A TLS line-echo server on 127.0.0.1; yields its port."""
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            while line := await reader.readline():
                writer.write(line)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
            handlers.discard(task)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()
        for task in list(handlers):
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


def client_context(*cafiles: Path) -> ssl.SSLContext:
    """A client that trusts exactly the CAs in `cafiles`, as the API server trusts caBundle."""
    context = ssl.create_default_context(cafile=str(cafiles[0]))
    for cafile in cafiles[1:]:
        context.load_verify_locations(cafile=str(cafile))
    return context


@contextlib.asynccontextmanager
async def tls_connection(
    port: int, context: ssl.SSLContext, server_hostname: str = HOST
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname=server_hostname
    )
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: bytes) -> bytes:
    writer.write(line)
    await writer.drain()
    return await reader.readline()


async def served_fingerprint(
    port: int, context: ssl.SSLContext, server_hostname: str = HOST
) -> str:
    """Handshake, exchange a line, and return the SHA-256 of the certificate presented."""
    async with tls_connection(port, context, server_hostname) as (reader, writer):
        assert await echo(reader, writer, b"ping\n") == b"ping\n"
        return fingerprint_of_connection(writer)


def fingerprint_of_connection(writer: asyncio.StreamWriter) -> str:
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return hashlib.sha256(der).hexdigest()


def fingerprint_of_pem(pem: bytes) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem.decode())).hexdigest()
