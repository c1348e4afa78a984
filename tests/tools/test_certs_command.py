"""`gpu-share-webhook certs`, end to end through `cli.main`, locally and against a stand-in API.

The cluster runs are the bootstrap Job's command line, pointed at the stand-in through a
kubeconfig; the client runs in a worker thread while the stand-in answers on the test loop.
"""

from __future__ import annotations

import asyncio
import base64
import stat
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests.support.certs_helpers import (
    HOST,
    MUTATING_PATH,
    NAMESPACE,
    SERVICE,
    VALIDATING_PATH,
    FakeKubernetes,
    client_context,
    echo_server,
    served_fingerprint,
    webhook,
    write_kubeconfig,
)
from webhook import cli
from webhook.server import certificates

SECRET = "gpu-share-webhook-tls"
WEBHOOKS = "gpu-share-webhook"


def contents(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def ca_bundle_of(kube: FakeKubernetes, path: str) -> set[bytes]:
    return {
        base64.b64decode(entry["clientConfig"]["caBundle"])
        for entry in kube.objects[path]["webhooks"]
    }


# --- locally ---------------------------------------------------------------------------


def test_certs_writes_the_three_files_and_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "certs"
    assert cli.main(["certs", "--dir", str(directory)]) == 0
    out = capsys.readouterr().out
    assert f"made a new CA and serving certificate for {HOST}" in out
    assert f"wrote {directory / 'ca.crt'}, {directory / 'tls.crt'}, {directory / 'tls.key'}" in out
    assert sorted(contents(directory)) == ["ca.crt", "tls.crt", "tls.key"]
    assert stat.S_IMODE((directory / "tls.key").stat().st_mode) == 0o600
    bundle = certificates.read_bundle(directory)
    assert bundle is not None
    assert certificates.why_not_reusable(bundle, service=SERVICE, namespace=NAMESPACE) is None


def test_running_it_again_keeps_the_pair_and_force_replaces_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "certs"
    assert cli.main(["certs", "--dir", str(directory)]) == 0
    first = contents(directory)
    capsys.readouterr()

    assert cli.main(["certs", "--dir", str(directory)]) == 0
    assert contents(directory) == first
    assert "keeping the certificate" in capsys.readouterr().out

    assert cli.main(["certs", "--dir", str(directory), "--force"]) == 0
    forced = contents(directory)
    assert forced["tls.crt"] != first["tls.crt"]
    # The outgoing CA stays trusted next to the new one.
    assert forced["ca.crt"].endswith(first["ca.crt"])


def test_other_names_and_validity_come_from_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "certs"
    argv = ["certs", "--dir", str(directory), "--service", "hook", "--namespace", "gpu"]
    argv += ["--extra-san", "hook.example.com", "--extra-san", "10.1.2.3", "--days", "90"]
    assert cli.main(argv) == 0
    certificate = x509.load_pem_x509_certificate((directory / "tls.crt").read_bytes())
    sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "hook.gpu.svc" in sans.get_values_for_type(x509.DNSName)
    assert "hook.example.com" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)][-1] == "10.1.2.3"
    left = certificate.not_valid_after_utc - datetime.now(UTC)
    assert timedelta(days=89) < left <= timedelta(days=90)


def test_every_option_has_an_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "from-env"
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_CERT_DIR", str(directory))
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_SERVICE", "envhook")
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_EXTRA_SAN", "a.example.com, b.example.com")
    monkeypatch.setenv("GPU_SHARE_WEBHOOK_DAYS", "30")
    assert cli.main(["certs"]) == 0
    certificate = x509.load_pem_x509_certificate((directory / "tls.crt").read_bytes())
    sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = sans.get_values_for_type(x509.DNSName)
    assert {"envhook.gpu-share-system.svc", "a.example.com", "b.example.com"} <= set(names)


def test_help_shows_options_with_their_environment_variables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli.main(["certs", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option, variable in [
        ("--dir", "GPU_SHARE_WEBHOOK_CERT_DIR"),
        ("--service", "GPU_SHARE_WEBHOOK_SERVICE"),
        ("--namespace", "GPU_SHARE_WEBHOOK_NAMESPACE"),
        ("--extra-san", "GPU_SHARE_WEBHOOK_EXTRA_SAN"),
        ("--days", "GPU_SHARE_WEBHOOK_DAYS"),
        ("--force", "GPU_SHARE_WEBHOOK_FORCE"),
        ("--secret", "GPU_SHARE_WEBHOOK_SECRET"),
        ("--inject-ca", "GPU_SHARE_WEBHOOK_INJECT_CA"),
        ("--mutating-webhook", "GPU_SHARE_WEBHOOK_MUTATING_WEBHOOK"),
        ("--validating-webhook", "GPU_SHARE_WEBHOOK_VALIDATING_WEBHOOK"),
        ("--kubeconfig", "GPU_SHARE_WEBHOOK_KUBECONFIG"),
    ]:
        assert option in text
        assert variable in text


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (["--extra-san", "not a name"], "argument --extra-san: invalid value 'not a name'"),
        (["--service", "Web_Hook"], "argument --service: invalid value 'Web_Hook'"),
        (["--days", "0"], "--days: invalid value '0': expected a whole number, at least 1"),
        (["--secret", "Bad/Name"], "argument --secret: invalid value 'Bad/Name'"),
        (
            ["--inject-ca", "--mutating-webhook", "", "--validating-webhook", ""],
            "--inject-ca needs --mutating-webhook or --validating-webhook",
        ),
        (
            ["--inject-ca", "--kubeconfig", "/nonexistent"],
            "/nonexistent: no such kubeconfig file",
        ),
        (["--secret", "webhook-tls", "--kubeconfig", "/nonexistent"], "no such kubeconfig file"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], words: str
) -> None:
    directory = tmp_path / "certs"
    try:
        code = cli.main(["certs", "--dir", str(directory), *arguments])
    except SystemExit as exc:  # an option argparse refuses
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err == f"gpu-share-webhook certs: {err.split(': ', 1)[1]}"
    assert words in err
    assert err.count("\n") == 1
    assert not directory.exists()


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(["certs", "--days", "many"])
    assert caught.value.code == 2
    assert capsys.readouterr().err == (
        "gpu-share-webhook certs: error: argument --days: invalid value 'many':"
        " expected a whole number, at least 1\n"
    )


def test_a_directory_that_cannot_be_written_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["certs", "--dir", str(blocker / "certs")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-share-webhook certs: {blocker / 'certs'}")
    assert "Not a directory" in err
    assert err.count("\n") == 1


# --- in the cluster --------------------------------------------------------------------


@pytest.fixture
async def kube(aiohttp_server: Any, tmp_path: Path) -> FakeKubernetes:
    fake = FakeKubernetes()
    server = await aiohttp_server(fake.app())
    fake.url = f"http://{server.host}:{server.port}"
    fake.add_webhook_configuration(
        MUTATING_PATH, WEBHOOKS, [webhook("default.mutate.gpu-share.io"), webhook("x.gpu-share.io")]
    )
    fake.add_webhook_configuration(
        VALIDATING_PATH, WEBHOOKS, [webhook("default.validate.gpu-share.io")]
    )
    return fake


async def job(kube: FakeKubernetes, tmp_path: Path, directory: Path, *extra: str) -> int:
    """The bootstrap Job's command line, pointed at the stand-in."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube.url)
    argv: Sequence[str] = [
        "certs",
        "--dir",
        str(directory),
        "--secret",
        SECRET,
        "--inject-ca",
        "--kubeconfig",
        str(kubeconfig),
        *extra,
    ]
    return await asyncio.to_thread(cli.main, argv)


async def test_the_job_command_makes_stores_and_injects_in_one_go(
    kube: FakeKubernetes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "job"
    assert await job(kube, tmp_path, directory) == 0

    files = contents(directory)
    assert kube.secret_files(NAMESPACE, SECRET) == files
    mutating = f"{MUTATING_PATH}/{WEBHOOKS}"
    validating = f"{VALIDATING_PATH}/{WEBHOOKS}"
    assert ca_bundle_of(kube, mutating) == {files["ca.crt"]}
    assert ca_bundle_of(kube, validating) == {files["ca.crt"]}
    assert [(r.method, r.path) for r in kube.writes()] == [
        ("POST", f"/api/v1/namespaces/{NAMESPACE}/secrets"),
        ("PATCH", mutating),
        ("PATCH", validating),
    ]
    assert all(
        r.content_type == "application/json-patch+json"
        for r in kube.writes()
        if r.method == "PATCH"
    )
    out = capsys.readouterr().out
    assert f"Secret {NAMESPACE}/{SECRET}: created" in out
    assert f"MutatingWebhookConfiguration {WEBHOOKS}: caBundle written to 2 of 2 webhooks" in out

    # What the API server would do with it: trust the served certificate by Service name.
    (tmp_path / "bundle.pem").write_bytes(ca_bundle_of(kube, mutating).pop())
    context = certificates.server_ssl_context(directory / "tls.crt", directory / "tls.key")
    async with echo_server(context) as port:
        await served_fingerprint(port, client_context(tmp_path / "bundle.pem"), HOST)


async def test_running_the_job_again_writes_nothing(
    kube: FakeKubernetes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await job(kube, tmp_path, tmp_path / "first") == 0
    stored = kube.secret_files(NAMESPACE, SECRET)
    kube.requests.clear()
    capsys.readouterr()

    # A new Job pod: an empty directory, the Secret and caBundles already in place.
    fresh = tmp_path / "second"
    assert await job(kube, tmp_path, fresh) == 0
    assert kube.writes() == []
    assert kube.secret_files(NAMESPACE, SECRET) == stored
    assert contents(fresh) == stored
    out = capsys.readouterr().out
    assert f"keeping the certificate in Secret {NAMESPACE}/{SECRET}" in out
    assert "caBundle already in all 2 webhooks" in out


async def test_a_ca_bundle_reset_by_kubectl_apply_is_put_back(
    kube: FakeKubernetes, tmp_path: Path
) -> None:
    assert await job(kube, tmp_path, tmp_path / "first") == 0
    mutating = f"{MUTATING_PATH}/{WEBHOOKS}"
    del kube.objects[mutating]["webhooks"][1]["clientConfig"]["caBundle"]
    kube.requests.clear()

    assert await job(kube, tmp_path, tmp_path / "second") == 0
    [patch] = kube.writes()
    assert patch.path == mutating
    assert [op["op"] for op in patch.body] == ["test", "add"]
    assert patch.body[1]["path"] == "/webhooks/1/clientConfig/caBundle"


async def test_an_expiring_pair_is_rotated_and_the_old_ca_stays_trusted_meanwhile(
    kube: FakeKubernetes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = certificates.make_bundle(
        service=SERVICE, namespace=NAMESPACE, now=datetime.now(UTC) - timedelta(days=340)
    )
    kube.add_secret(
        NAMESPACE, SECRET, {"ca.crt": old.ca_pem, "tls.crt": old.cert_pem, "tls.key": old.key_pem}
    )
    directory = tmp_path / "job"
    assert await job(kube, tmp_path, directory) == 0

    stored = kube.secret_files(NAMESPACE, SECRET)
    assert stored["tls.crt"] != old.cert_pem
    assert [r.method for r in kube.writes()] == ["POST", "PUT", "PATCH", "PATCH"]
    bundle = ca_bundle_of(kube, f"{MUTATING_PATH}/{WEBHOOKS}").pop()
    assert bundle == stored["ca.crt"]
    assert bundle.endswith(old.ca_pem)
    assert "less than 30 days left" in capsys.readouterr().out

    # Servers still presenting the old certificate stay trusted until they reload.
    (tmp_path / "bundle.pem").write_bytes(bundle)
    (tmp_path / "old").mkdir()
    old_files = certificates.write_bundle(tmp_path / "old", old)
    for cert, key in (
        (old_files.cert, old_files.key),
        (directory / "tls.crt", directory / "tls.key"),
    ):
        async with echo_server(certificates.server_ssl_context(cert, key)) as port:
            await served_fingerprint(port, client_context(tmp_path / "bundle.pem"), HOST)


async def test_a_missing_webhook_configuration_exits_1_with_one_line(
    kube: FakeKubernetes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await job(kube, tmp_path, tmp_path / "job", "--validating-webhook", "absent")
    assert code == 1
    err = capsys.readouterr().err
    assert err == (
        "gpu-share-webhook certs: cannot read ValidatingWebhookConfiguration absent:"
        ' not found: validatingwebhookconfigurations "absent" not found\n'
    )


async def test_access_denied_exits_1_with_one_line(
    kube: FakeKubernetes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kube.forbidden.add(("POST", f"/api/v1/namespaces/{NAMESPACE}/secrets"))
    assert await job(kube, tmp_path, tmp_path / "job") == 1
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-share-webhook certs: cannot create Secret {NAMESPACE}/{SECRET}:")
    assert "access denied" in err
    assert err.count("\n") == 1
    assert not any(r.method == "PATCH" for r in kube.requests)


async def test_inject_ca_alone_uses_the_local_ca_and_skips_an_empty_name(
    kube: FakeKubernetes, tmp_path: Path
) -> None:
    directory = tmp_path / "certs"
    assert cli.main(["certs", "--dir", str(directory)]) == 0
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube.url)
    argv = ["certs", "--dir", str(directory), "--inject-ca", "--validating-webhook", ""]
    argv += ["--kubeconfig", str(kubeconfig)]
    assert await asyncio.to_thread(cli.main, argv) == 0
    assert [(r.method, r.path) for r in kube.writes()] == [("PATCH", f"{MUTATING_PATH}/{WEBHOOKS}")]
    assert ca_bundle_of(kube, f"{MUTATING_PATH}/{WEBHOOKS}") == {
        (directory / "ca.crt").read_bytes()
    }
