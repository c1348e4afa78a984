"""The cluster side: what exactly goes to the API server, against a stand-in over real HTTP.

The official client runs in a worker thread (it is synchronous) while the stand-in answers
on the test's event loop.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
import pytest

from tests.support.certs_helpers import (
    MUTATING_PATH,
    NAMESPACE,
    SERVICE,
    VALIDATING_PATH,
    FakeKubernetes,
    secrets_path,
    webhook,
    write_kubeconfig,
)
from webhook.errors import CertificateError
from webhook.server import certificates
from webhook.tools import cabundle

_T = TypeVar("_T")
SECRET = "gpu-share-webhook-tls"
NAME = "gpu-share-webhook"


@pytest.fixture
async def kube(aiohttp_server: Any) -> FakeKubernetes:
    fake = FakeKubernetes()
    server = await aiohttp_server(fake.app())
    fake.url = f"http://{server.host}:{server.port}"
    return fake


@pytest.fixture
def api(kube: FakeKubernetes) -> Iterator[Any]:
    configuration = kubernetes.client.Configuration(host=kube.url)
    with kubernetes.client.ApiClient(configuration) as client:
        yield client


@pytest.fixture(scope="module")
def bundle() -> certificates.Bundle:
    return certificates.make_bundle(service=SERVICE, namespace=NAMESPACE)


async def call(function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    return await asyncio.to_thread(functools.partial(function, *args, **kwargs))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --- caBundle --------------------------------------------------------------------------


async def test_every_webhook_gets_the_bundle_through_one_guarded_json_patch(
    kube: FakeKubernetes, api: Any, bundle: certificates.Bundle
) -> None:
    path = kube.add_webhook_configuration(
        MUTATING_PATH,
        NAME,
        [webhook("a.gpu-share.io", ca_bundle="b2xk"), webhook("b.gpu-share.io")],
    )
    installed = await call(
        cabundle.install_ca_bundle, api, bundle.ca_pem, mutating=NAME, validating=None
    )

    assert [(r.method, r.path) for r in kube.requests] == [("GET", path), ("PATCH", path)]
    patch = kube.requests[1]
    assert patch.content_type == "application/json-patch+json"
    value = b64(bundle.ca_pem)
    assert patch.body == [
        {"op": "test", "path": "/webhooks/0/name", "value": "a.gpu-share.io"},
        {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": value},
        {"op": "test", "path": "/webhooks/1/name", "value": "b.gpu-share.io"},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": value},
    ]
    stored = kube.objects[path]["webhooks"]
    assert [entry["clientConfig"]["caBundle"] for entry in stored] == [value, value]
    assert base64.b64decode(stored[0]["clientConfig"]["caBundle"]) == bundle.ca_pem
    assert installed == [cabundle.Installed("MutatingWebhookConfiguration", NAME, 2, 2)]


async def test_both_configurations_are_patched(
    kube: FakeKubernetes, api: Any, bundle: certificates.Bundle
) -> None:
    mutating = kube.add_webhook_configuration(MUTATING_PATH, NAME, [webhook("m.gpu-share.io")])
    validating = kube.add_webhook_configuration(
        VALIDATING_PATH, "checks", [webhook("v1.gpu-share.io"), webhook("v2.gpu-share.io")]
    )
    installed = await call(
        cabundle.install_ca_bundle, api, bundle.ca_pem, mutating=NAME, validating="checks"
    )
    assert [(r.method, r.path) for r in kube.requests] == [
        ("GET", mutating),
        ("PATCH", mutating),
        ("GET", validating),
        ("PATCH", validating),
    ]
    assert [str(result) for result in installed] == [
        f"MutatingWebhookConfiguration {NAME}: caBundle written to 1 of 1 webhooks",
        "ValidatingWebhookConfiguration checks: caBundle written to 2 of 2 webhooks",
    ]


async def test_nothing_is_patched_when_every_webhook_already_has_the_bundle(
    kube: FakeKubernetes, api: Any, bundle: certificates.Bundle
) -> None:
    value = b64(bundle.ca_pem)
    path = kube.add_webhook_configuration(
        VALIDATING_PATH, NAME, [webhook("a", ca_bundle=value), webhook("b", ca_bundle=value)]
    )
    installed = await call(
        cabundle.install_ca_bundle, api, bundle.ca_pem, mutating=None, validating=NAME
    )
    assert [(r.method, r.path) for r in kube.requests] == [("GET", path)]
    assert installed == [cabundle.Installed("ValidatingWebhookConfiguration", NAME, 0, 2)]
    assert "already in all 2 webhooks" in str(installed[0])


async def test_only_the_entries_without_the_bundle_are_written(
    kube: FakeKubernetes, api: Any, bundle: certificates.Bundle
) -> None:
    value = b64(bundle.ca_pem)
    kube.add_webhook_configuration(
        MUTATING_PATH, NAME, [webhook("a", ca_bundle=value), webhook("b", ca_bundle="")]
    )
    await call(cabundle.install_ca_bundle, api, bundle.ca_pem, mutating=NAME, validating=None)
    assert kube.writes()[0].body == [
        {"op": "test", "path": "/webhooks/1/name", "value": "b"},
        {"op": "replace", "path": "/webhooks/1/clientConfig/caBundle", "value": value},
    ]


async def test_a_concurrent_edit_is_never_written_into_and_the_patch_is_recomputed(
    kube: FakeKubernetes, api: Any, bundle: certificates.Bundle
) -> None:
    path = kube.add_webhook_configuration(MUTATING_PATH, NAME, [webhook("a"), webhook("b")])

    def someone_inserts_a_webhook_first(target: str) -> None:
        kube.before_patch = None
        kube.objects[target]["webhooks"].insert(0, webhook("inserted"))

    kube.before_patch = someone_inserts_a_webhook_first
    installed = await call(
        cabundle.install_ca_bundle, api, bundle.ca_pem, mutating=NAME, validating=None
    )
    assert [r.method for r in kube.requests] == ["GET", "PATCH", "GET", "PATCH"]
    assert kube.requests[3].body[0] == {
        "op": "test",
        "path": "/webhooks/0/name",
        "value": "inserted",
    }
    names = [entry["name"] for entry in kube.objects[path]["webhooks"]]
    assert names == ["inserted", "a", "b"]
    bundles = [entry["clientConfig"]["caBundle"] for entry in kube.objects[path]["webhooks"]]
    assert bundles == [b64(bundle.ca_pem)] * 3
    assert installed[0].updated == 3


async def test_a_configuration_that_keeps_changing_is_an_error_after_a_few_tries(
    kube: FakeKubernetes, api: Any, bundle: certificates.Bundle
) -> None:
    kube.add_webhook_configuration(MUTATING_PATH, NAME, [webhook("a")])

    def rename(target: str) -> None:
        kube.objects[target]["webhooks"][0]["name"] += "x"

    kube.before_patch = rename
    with pytest.raises(CertificateError, match=f"cannot patch MutatingWebhookConfiguration {NAME}"):
        await call(cabundle.install_ca_bundle, api, bundle.ca_pem, mutating=NAME, validating=None)
    assert [r.method for r in kube.requests].count("PATCH") == cabundle.PATCH_ATTEMPTS


async def test_a_missing_configuration_is_one_clear_line(
    kube: FakeKubernetes, api: Any, bundle: certificates.Bundle
) -> None:
    with pytest.raises(CertificateError) as caught:
        await call(cabundle.install_ca_bundle, api, bundle.ca_pem, mutating=NAME, validating=None)
    message = str(caught.value)
    assert message == (
        f"cannot read MutatingWebhookConfiguration {NAME}: not found:"
        f' mutatingwebhookconfigurations "{NAME}" not found'
    )


async def test_access_denied_is_one_clear_line(
    kube: FakeKubernetes, api: Any, bundle: certificates.Bundle
) -> None:
    path = kube.add_webhook_configuration(MUTATING_PATH, NAME, [webhook("a")])
    kube.forbidden.add(("PATCH", path))
    with pytest.raises(CertificateError) as caught:
        await call(cabundle.install_ca_bundle, api, bundle.ca_pem, mutating=NAME, validating=None)
    message = str(caught.value)
    assert message.startswith(f"cannot patch MutatingWebhookConfiguration {NAME}: access denied:")
    assert "cannot patch resource" in message
    assert "\n" not in message


async def test_something_that_is_not_a_ca_is_never_sent(kube: FakeKubernetes, api: Any) -> None:
    with pytest.raises(CertificateError, match="not PEM certificates"):
        await call(cabundle.install_ca_bundle, api, b"hello", mutating=NAME, validating=None)
    assert kube.requests == []


def test_the_patch_of_a_configuration_without_webhooks_is_empty() -> None:
    assert cabundle.ca_bundle_patch({"webhooks": None}, "Y2E=") == []
    assert cabundle.ca_bundle_patch({}, "Y2E=") == []


# --- the Secret ------------------------------------------------------------------------


async def store(api: Any, bundle: certificates.Bundle) -> str:
    """`store_secret` of `bundle` into the test Secret, off the event loop."""
    outcome: str = await call(
        cabundle.store_secret,
        api,
        namespace=NAMESPACE,
        name=SECRET,
        ca_pem=bundle.ca_pem,
        cert_pem=bundle.cert_pem,
        key_pem=bundle.key_pem,
    )
    return outcome


async def test_a_new_secret_is_created_as_kubernetes_io_tls(
    kube: FakeKubernetes, api: Any, bundle: certificates.Bundle
) -> None:
    outcome = await store(api, bundle)
    assert outcome == "created"
    [request] = kube.requests
    assert (request.method, request.path) == ("POST", secrets_path(NAMESPACE))
    assert request.body["type"] == "kubernetes.io/tls"
    assert request.body["metadata"]["name"] == SECRET
    assert request.body["data"] == {
        "ca.crt": b64(bundle.ca_pem),
        "tls.crt": b64(bundle.cert_pem),
        "tls.key": b64(bundle.key_pem),
    }


async def test_an_existing_secret_is_replaced_keeping_its_metadata_and_guarded_by_its_version(
    kube: FakeKubernetes, api: Any, bundle: certificates.Bundle
) -> None:
    path = kube.add_secret(
        NAMESPACE,
        SECRET,
        {"tls.crt": b"old", "tls.key": b"old"},
        labels={"team": "gpu"},
        annotations={"note": "kept"},
    )
    version = kube.objects[path]["metadata"]["resourceVersion"]
    outcome = await store(api, bundle)
    assert outcome == "replaced"
    assert [r.method for r in kube.requests] == ["POST", "GET", "PUT"]
    put = kube.requests[2]
    assert put.path == path
    assert put.body["metadata"]["resourceVersion"] == version
    assert put.body["metadata"]["labels"] == {
        "team": "gpu",
        "app.kubernetes.io/managed-by": "gpu-share-webhook",
    }
    assert put.body["metadata"]["annotations"] == {"note": "kept"}
    assert kube.secret_files(NAMESPACE, SECRET) == {
        "ca.crt": bundle.ca_pem,
        "tls.crt": bundle.cert_pem,
        "tls.key": bundle.key_pem,
    }


@pytest.mark.parametrize(
    ("existing", "words"),
    [
        ({"type_": "Opaque"}, "exists with type Opaque"),
        (
            {"annotations": {"cert-manager.io/certificate-name": "webhook-cert"}},
            "managed by cert-manager (Certificate webhook-cert)",
        ),
    ],
)
async def test_a_secret_that_is_not_ours_to_replace_is_left_alone(
    kube: FakeKubernetes,
    api: Any,
    bundle: certificates.Bundle,
    existing: dict[str, Any],
    words: str,
) -> None:
    kube.add_secret(NAMESPACE, SECRET, {"tls.crt": b"theirs"}, **existing)
    with pytest.raises(CertificateError, match=re.escape(words)):
        await store(api, bundle)
    assert [r.method for r in kube.requests] == ["POST", "GET"]
    assert kube.secret_files(NAMESPACE, SECRET) == {"tls.crt": b"theirs"}


async def test_reading_a_secret_gives_its_three_files(
    kube: FakeKubernetes, api: Any, bundle: certificates.Bundle
) -> None:
    kube.add_secret(
        NAMESPACE,
        SECRET,
        {"ca.crt": bundle.ca_pem, "tls.crt": bundle.cert_pem, "tls.key": bundle.key_pem},
    )
    assert await call(cabundle.read_secret, api, namespace=NAMESPACE, name=SECRET) == bundle


async def test_reading_a_secret_without_ca_crt_reads_it_as_empty(
    kube: FakeKubernetes, api: Any, bundle: certificates.Bundle
) -> None:
    kube.add_secret(NAMESPACE, SECRET, {"tls.crt": bundle.cert_pem, "tls.key": bundle.key_pem})
    read = await call(cabundle.read_secret, api, namespace=NAMESPACE, name=SECRET)
    assert read == certificates.Bundle(b"", bundle.cert_pem, bundle.key_pem)


async def test_a_missing_secret_reads_as_none_and_a_forbidden_one_is_an_error(
    kube: FakeKubernetes, api: Any
) -> None:
    assert await call(cabundle.read_secret, api, namespace=NAMESPACE, name=SECRET) is None
    kube.forbidden.add(("GET", f"{secrets_path(NAMESPACE)}/{SECRET}"))
    with pytest.raises(CertificateError, match=f"cannot read Secret {NAMESPACE}/{SECRET}: access"):
        await call(cabundle.read_secret, api, namespace=NAMESPACE, name=SECRET)


# --- connecting ------------------------------------------------------------------------


async def test_a_kubeconfig_is_used_as_given(
    kube: FakeKubernetes, tmp_path: Path, bundle: certificates.Bundle
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", kube.url)
    kube.add_secret(
        NAMESPACE,
        SECRET,
        {"ca.crt": bundle.ca_pem, "tls.crt": bundle.cert_pem, "tls.key": bundle.key_pem},
    )

    def read() -> certificates.Bundle | None:
        with cabundle.connect(str(kubeconfig)) as api:
            return cabundle.read_secret(api, namespace=NAMESPACE, name=SECRET)

    assert await asyncio.to_thread(read) == bundle


@pytest.mark.parametrize(
    ("content", "words"), [(None, "no such kubeconfig file"), ("a: [", "no usable Kubernetes")]
)
def test_an_unusable_kubeconfig_is_one_clear_line(
    tmp_path: Path, content: str | None, words: str
) -> None:
    path = tmp_path / "config"
    if content is not None:
        path.write_text(content)
    with pytest.raises(CertificateError, match=words) as caught:
        cabundle.connect(str(path))
    assert "\n" not in str(caught.value)


@pytest.fixture
def closed_port() -> Iterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        yield probe.getsockname()[1]


def test_an_api_server_that_does_not_answer_is_one_clear_line(
    closed_port: int, bundle: certificates.Bundle
) -> None:
    configuration = kubernetes.client.Configuration(host=f"http://127.0.0.1:{closed_port}")
    configuration.retries = 0
    with (
        kubernetes.client.ApiClient(configuration) as api,
        pytest.raises(CertificateError, match="the Kubernetes API did not answer") as caught,
    ):
        cabundle.install_ca_bundle(api, bundle.ca_pem, mutating=NAME, validating=None)
    assert "\n" not in str(caught.value)
