"""The cluster side of certificates: the webhook configurations' caBundle, and the TLS Secret.

One of the two modules that talk to the Kubernetes API (`cluster`, the audit's, is the
other; `kubeclient` holds what they share); the server itself makes no API call. Everything
here is synchronous (the official client is) and meant for the `certs`
command, which a bootstrap Job runs once per install or upgrade.

Objects are read as raw JSON rather than through the client's models: a JSON Patch names
fields as the API server spells them (`clientConfig/caBundle`), and a model would drop any
field newer than the client.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
from cryptography import x509
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from webhook.errors import CertificateError
from webhook.server import certificates
from webhook.tools import kubeclient

logger = logging.getLogger(__name__)

SECRET_TYPE = "kubernetes.io/tls"
JSON_PATCH = "application/json-patch+json"
# (connect, read) in seconds: a bootstrap Job must fail with a message, not hang.
REQUEST_TIMEOUT = (10, 30)
# A guarded patch fails (HTTP 422) when someone edits the configuration between our read
# and our write; reading again and recomputing settles it.
PATCH_ATTEMPTS = 3
LABELS = {"app.kubernetes.io/managed-by": "gpu-share-webhook"}
# cert-manager renews a Secret carrying this; writing over it would start a tug of war.
CERT_MANAGER_ANNOTATION = "cert-manager.io/certificate-name"

_STATUS_WORDS = {
    401: "unauthorized",
    403: "access denied",
    404: "not found",
    409: "conflict",
    422: "refused",
}


class _ApiRefused(CertificateError):
    """The API server answered a request with an error status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class _WebhookKind:
    kind: str
    method: str  # how AdmissionregistrationV1Api names its calls: read_<method>, patch_<method>


MUTATING = _WebhookKind("MutatingWebhookConfiguration", "mutating_webhook_configuration")
VALIDATING = _WebhookKind("ValidatingWebhookConfiguration", "validating_webhook_configuration")


@dataclass(frozen=True)
class Installed:
    """What `install_ca_bundle` did to one webhook configuration."""

    kind: str
    name: str
    updated: int  # webhook entries whose caBundle was written
    entries: int

    def __str__(self) -> str:
        where = f"{self.kind} {self.name}"
        if not self.updated:
            return f"{where}: caBundle already in all {self.entries} webhooks"
        return f"{where}: caBundle written to {self.updated} of {self.entries} webhooks"


# --- connecting ------------------------------------------------------------------------


def connect(kubeconfig: str | None = None) -> Any:
    """A `kubernetes.client.ApiClient` (`kubeclient.connect`): from `kubeconfig` if given,
    else the pod's service account, else the default kubeconfig (`$KUBECONFIG` or
    `~/.kube/config`).

    Use it in a `with` block: closing it closes its connections.
    """
    try:
        return kubeclient.connect(kubeconfig)
    except kubeclient.ConfigurationError as exc:
        raise CertificateError(str(exc)) from exc


# --- the CA bundle of the webhook configurations ---------------------------------------


def install_ca_bundle(
    api_client: Any, ca_pem: bytes, *, mutating: str | None, validating: str | None
) -> list[Installed]:
    """Put `ca_pem` into `clientConfig.caBundle` of every webhook of the named configurations.

    One JSON Patch per configuration, one `test` of the webhook's name plus one `replace` or
    `add` per entry that needs it, so that an entry moved by a concurrent edit is never
    written into; no PATCH at all when every entry already has the bundle. A None name
    skips that configuration.
    """
    if not ca_pem.strip() or not _is_pem_certificates(ca_pem):
        raise CertificateError("the CA bundle is not PEM certificates")
    value = base64.b64encode(ca_pem).decode("ascii")
    api = client.AdmissionregistrationV1Api(api_client)
    return [
        _install(api, kind, name, value)
        for kind, name in ((MUTATING, mutating), (VALIDATING, validating))
        if name
    ]


def ca_bundle_patch(configuration: Mapping[str, Any], ca_bundle: str) -> list[dict[str, Any]]:
    """The JSON Patch that gives every webhook of `configuration` `ca_bundle` (base64)."""
    patch: list[dict[str, Any]] = []
    for index, webhook in enumerate(configuration.get("webhooks") or []):
        client_config = webhook.get("clientConfig")
        if not isinstance(client_config, dict):
            raise CertificateError(f"webhook {webhook.get('name')!r} has no clientConfig")
        if client_config.get("caBundle") == ca_bundle:
            continue
        path = f"/webhooks/{index}"
        patch.append({"op": "test", "path": f"{path}/name", "value": webhook.get("name")})
        patch.append(
            {
                "op": "replace" if "caBundle" in client_config else "add",
                "path": f"{path}/clientConfig/caBundle",
                "value": ca_bundle,
            }
        )
    return patch


def _install(api: Any, kind: _WebhookKind, name: str, ca_bundle: str) -> Installed:
    what = f"{kind.kind} {name}"
    read = getattr(api, f"read_{kind.method}")
    patch = getattr(api, f"patch_{kind.method}")
    for attempt in range(1, PATCH_ATTEMPTS + 1):
        document = _request("read", what, lambda: read(name, **_RAW))
        operations = ca_bundle_patch(document, ca_bundle)
        entries = len(document.get("webhooks") or [])
        if not operations:
            return Installed(kind.kind, name, 0, entries)
        try:
            _request(
                "patch",
                what,
                functools.partial(patch, name, operations, _content_type=JSON_PATCH, **_RAW),
            )
        except _ApiRefused as exc:
            if exc.status != 422 or attempt == PATCH_ATTEMPTS:
                raise
            logger.info("%s changed while it was being patched; reading it again", what)
            continue
        return Installed(kind.kind, name, len(operations) // 2, entries)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _is_pem_certificates(pem: bytes) -> bool:
    try:
        x509.load_pem_x509_certificates(pem)
    except ValueError:
        return False
    return True


# --- the Secret ------------------------------------------------------------------------


def read_secret(api_client: Any, *, namespace: str, name: str) -> certificates.Bundle | None:
    """The bundle in the TLS Secret (absent keys read as b""), or None if there is no Secret."""
    api = client.CoreV1Api(api_client)
    what = f"Secret {namespace}/{name}"
    try:
        document = _request(
            "read", what, lambda: api.read_namespaced_secret(name, namespace, **_RAW)
        )
    except _ApiRefused as exc:
        if exc.status == 404:
            return None
        raise
    data = document.get("data") or {}
    return certificates.Bundle(
        ca_pem=_decode(data, certificates.CA_FILE, what),
        cert_pem=_decode(data, certificates.CERT_FILE, what),
        key_pem=_decode(data, certificates.KEY_FILE, what),
    )


def store_secret(
    api_client: Any,
    *,
    namespace: str,
    name: str,
    ca_pem: bytes,
    cert_pem: bytes,
    key_pem: bytes,
) -> str:
    """Create the `kubernetes.io/tls` Secret, or replace its contents; "created" or "replaced".

    A replacement keeps the Secret's labels and annotations and is conditional on the
    version read, so a concurrent writer makes it fail rather than be overwritten. A Secret
    of another type, or one cert-manager manages, is left alone (CertificateError).
    """
    api = client.CoreV1Api(api_client)
    what = f"Secret {namespace}/{name}"
    data = {
        certificates.CA_FILE: ca_pem,
        certificates.CERT_FILE: cert_pem,
        certificates.KEY_FILE: key_pem,
    }
    body = _secret(namespace, name, data, labels=LABELS, annotations=None, resource_version=None)
    try:
        _request("create", what, lambda: api.create_namespaced_secret(namespace, body, **_RAW))
    except _ApiRefused as exc:
        if exc.status != 409:
            raise
    else:
        return "created"
    current = _request("read", what, lambda: api.read_namespaced_secret(name, namespace, **_RAW))
    _require_replaceable(current, what)
    metadata = current.get("metadata") or {}
    body = _secret(
        namespace,
        name,
        data,
        labels={**(metadata.get("labels") or {}), **LABELS},
        annotations=metadata.get("annotations"),
        resource_version=metadata.get("resourceVersion"),
    )
    _request("replace", what, lambda: api.replace_namespaced_secret(name, namespace, body, **_RAW))
    return "replaced"


def _secret(
    namespace: str,
    name: str,
    data: Mapping[str, bytes],
    *,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None,
    resource_version: str | None,
) -> Any:
    return client.V1Secret(
        api_version="v1",
        kind="Secret",
        metadata=client.V1ObjectMeta(
            name=name,
            namespace=namespace,
            labels=dict(labels),
            annotations=dict(annotations) if annotations else None,
            resource_version=resource_version,
        ),
        type=SECRET_TYPE,
        data={key: base64.b64encode(value).decode("ascii") for key, value in data.items()},
    )


def _require_replaceable(secret: Mapping[str, Any], what: str) -> None:
    kind = secret.get("type") or "Opaque"
    if kind != SECRET_TYPE:
        # The type of a Secret cannot be changed in place.
        raise CertificateError(
            f"{what} exists with type {kind}, not {SECRET_TYPE}; delete it or use another name"
        )
    certificate = ((secret.get("metadata") or {}).get("annotations") or {}).get(
        CERT_MANAGER_ANNOTATION
    )
    if certificate:
        raise CertificateError(
            f"{what} is managed by cert-manager (Certificate {certificate}); not replacing it"
        )


def _decode(data: Mapping[str, Any], key: str, what: str) -> bytes:
    value = data.get(key)
    if not value:
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise CertificateError(f"{what}: {key} is not base64") from None


# --- requests --------------------------------------------------------------------------

# Every call: the raw response (see the module docstring) and a bounded wait.
_RAW: dict[str, Any] = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT}


def _request(verb: str, what: str, call: Callable[[], Any]) -> dict[str, Any]:
    """Run one API call made with `_RAW` and return its JSON body; errors in one line."""
    try:
        response = call()
    except ApiException as exc:
        status = int(exc.status or 0)
        raise _ApiRefused(f"cannot {verb} {what}: {_explain(exc, status)}", status) from None
    except urllib3.exceptions.HTTPError as exc:
        raise CertificateError(
            f"cannot {verb} {what}: the Kubernetes API did not answer ({kubeclient.line(exc)})"
        ) from None
    try:
        body = response.data
    finally:
        response.release_conn()
    try:
        document = json.loads(body) if body else {}
    except ValueError:
        raise CertificateError(f"cannot {verb} {what}: the answer is not JSON") from None
    if not isinstance(document, dict):
        raise CertificateError(f"cannot {verb} {what}: the answer is not a JSON object")
    return document


def _explain(exc: ApiException, status: int) -> str:
    if status == 0:  # the client's way of saying the connection (TLS) failed
        return kubeclient.line(exc.reason or "connection failed")
    message = kubeclient.status_message(exc.body) or str(exc.reason or "")
    word = _STATUS_WORDS.get(status, f"HTTP {status}")
    return f"{word}: {message}" if message else word
