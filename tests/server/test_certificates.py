"""Certificates: what the API server needs from them, files on disk, TLS, and hot reload."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import ssl
import stat
import warnings
from datetime import UTC, datetime, timedelta
from ipaddress import ip_address
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.certs_helpers import (
    HOST,
    NAMESPACE,
    SERVICE,
    client_context,
    echo,
    echo_server,
    fingerprint_of_connection,
    fingerprint_of_pem,
    served_fingerprint,
    tls_connection,
)
from webhook.errors import CertificateError
from webhook.server import certificates, reload

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def make(directory: Path, **options: object) -> certificates.Files:
    bundle = certificates.make_bundle(service=SERVICE, namespace=NAMESPACE, **options)  # type: ignore[arg-type]
    return certificates.write_bundle(directory, bundle)


def leaf(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificates(pem)[0]


@pytest.fixture
def files(tmp_path: Path) -> certificates.Files:
    return make(tmp_path / "certs")


# --- what the API server needs ---------------------------------------------------------


def test_serving_certificate_names_the_service_in_every_form_and_the_loopback() -> None:
    bundle = certificates.make_bundle(
        service=SERVICE, namespace=NAMESPACE, extra_sans=["webhook.example.com", "10.0.0.7"]
    )
    sans = leaf(bundle.cert_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert sans.value.get_values_for_type(x509.DNSName) == [
        "gpu-share-webhook",
        "gpu-share-webhook.gpu-share-system",
        "gpu-share-webhook.gpu-share-system.svc",
        "gpu-share-webhook.gpu-share-system.svc.cluster.local",
        "localhost",
        "webhook.example.com",
    ]
    assert sans.value.get_values_for_type(x509.IPAddress) == [
        ip_address("127.0.0.1"),
        ip_address("::1"),
        ip_address("10.0.0.7"),
    ]


def test_serving_certificate_is_for_server_auth_and_not_a_ca() -> None:
    certificate = leaf(certificates.make_bundle(service=SERVICE, namespace=NAMESPACE).cert_pem)
    extensions = certificate.extensions
    assert extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH]
    )
    constraints = extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical
    assert not constraints.value.ca
    usage = extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature
    assert not usage.key_cert_sign
    assert certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == HOST
    assert isinstance(certificate.public_key(), ec.EllipticCurvePublicKey)
    assert certificate.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]


def test_ca_is_a_critical_ca_that_signs_certificates_and_identifies_its_key() -> None:
    ca = certificates.make_ca(now=NOW)
    extensions = ca.certificate.extensions
    constraints = extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value.ca
    assert extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert extensions.get_extension_for_class(
        x509.SubjectKeyIdentifier
    ).value == x509.SubjectKeyIdentifier.from_public_key(ca.key.public_key())
    assert ca.certificate.not_valid_after_utc == NOW + timedelta(days=certificates.CA_DAYS)


def test_serving_certificate_points_at_its_ca_and_verifies_against_it() -> None:
    ca = certificates.make_ca(now=NOW)
    pair = certificates.make_serving_certificate(ca, service=SERVICE, namespace=NAMESPACE, now=NOW)
    pair.certificate.verify_directly_issued_by(ca.certificate)
    authority = pair.certificate.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier)
    subject = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    assert authority.value.key_identifier == subject.value.digest


def test_validity_is_backdated_for_clock_skew_and_configurable() -> None:
    ca = certificates.make_ca(now=NOW)
    pair = certificates.make_serving_certificate(
        ca, service=SERVICE, namespace=NAMESPACE, days=30, now=NOW
    )
    assert pair.certificate.not_valid_before_utc == NOW - certificates.CLOCK_SKEW
    assert pair.certificate.not_valid_before_utc < NOW
    assert pair.not_after == NOW + timedelta(days=30)
    default = certificates.make_serving_certificate(
        ca, service=SERVICE, namespace=NAMESPACE, now=NOW
    )
    assert default.not_after == NOW + timedelta(days=365)


def test_serving_certificate_never_outlives_its_ca() -> None:
    ca = certificates.make_ca(days=10, now=NOW)
    pair = certificates.make_serving_certificate(
        ca, service=SERVICE, namespace=NAMESPACE, days=365, now=NOW
    )
    assert pair.not_after == ca.certificate.not_valid_after_utc


def test_a_common_name_too_long_for_x509_falls_back_to_the_service_name() -> None:
    namespace = "n" * 63
    pair = certificates.make_serving_certificate(
        certificates.make_ca(), service=SERVICE, namespace=namespace
    )
    names = pair.certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert names[0].value == SERVICE
    sans = pair.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert f"{SERVICE}.{namespace}.svc" in sans.value.get_values_for_type(x509.DNSName)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"service": "Bad_Name"}, "service name 'Bad_Name'"),
        ({"service": "1webhook"}, "service name '1webhook'"),
        ({"namespace": "x" * 64}, "namespace"),
        ({"extra_sans": ["not a name"]}, "extra SAN 'not a name'"),
        ({"extra_sans": ["a..b"]}, "extra SAN 'a..b'"),
        ({"days": 0}, "at least one day"),
    ],
)
def test_names_kubernetes_would_refuse_are_errors(options: dict[str, object], words: str) -> None:
    arguments: dict[str, object] = {"service": SERVICE, "namespace": NAMESPACE, **options}
    with pytest.raises(CertificateError, match=words):
        certificates.make_bundle(**arguments)  # type: ignore[arg-type]


def test_wildcards_and_upper_case_extra_names_are_accepted_as_dns_names() -> None:
    names = certificates.subject_alt_names(
        service=SERVICE, namespace=NAMESPACE, extra_sans=["*.Example.COM", "localhost"]
    )
    dns = [name.value for name in names if isinstance(name, x509.DNSName)]
    assert dns.count("localhost") == 1
    assert "*.example.com" in dns


# --- TLS -------------------------------------------------------------------------------


async def test_api_server_style_client_trusts_the_serving_certificate_by_service_name(
    files: certificates.Files,
) -> None:
    context = certificates.server_ssl_context(files.cert, files.key)
    async with echo_server(context) as port:
        fingerprint = await served_fingerprint(port, client_context(files.ca), HOST)
    assert fingerprint == fingerprint_of_pem(files.cert.read_bytes())


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1", f"{SERVICE}.{NAMESPACE}"])
async def test_local_names_are_trusted_too(files: certificates.Files, name: str) -> None:
    context = certificates.server_ssl_context(files.cert, files.key)
    async with echo_server(context) as port:
        await served_fingerprint(port, client_context(files.ca), name)


async def test_a_name_outside_the_sans_is_refused(files: certificates.Files) -> None:
    context = certificates.server_ssl_context(files.cert, files.key)
    async with echo_server(context) as port:
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
            await served_fingerprint(port, client_context(files.ca), "other.gpu-share-system.svc")


async def test_a_client_that_trusts_another_ca_is_refused(
    files: certificates.Files, tmp_path: Path
) -> None:
    other = make(tmp_path / "other")
    context = certificates.server_ssl_context(files.cert, files.key)
    async with echo_server(context) as port:
        with pytest.raises(ssl.SSLCertVerificationError):
            await served_fingerprint(port, client_context(other.ca), HOST)


def tls11_client(cafile: Path) -> ssl.SSLContext:
    # An old client on purpose; Python warns about building one.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.load_verify_locations(cafile)
    return context


async def test_tls_1_1_clients_are_refused(files: certificates.Files) -> None:
    context = certificates.server_ssl_context(files.cert, files.key)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    # Lower OpenSSL's security level so that only the version floor can refuse TLS 1.1.
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    async with echo_server(context) as port:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await served_fingerprint(port, tls11_client(files.ca))


async def test_the_tls_1_1_client_itself_works_where_tls_1_1_is_allowed(
    files: certificates.Files,
) -> None:
    """The control for the test above: the refusal is the server's, not the client's."""
    context = certificates.server_ssl_context(files.cert, files.key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    async with echo_server(context) as port:
        await served_fingerprint(port, tls11_client(files.ca))



# TLS 1.2 suites a client may ask for that the server must refuse, with the key type of
# the certificate they need: ECDHE with CBC (the first four, which Python's default list
# has), the SHA-1 CBC ones of TLS 1.0, and suites without ECDHE (plain RSA key exchange,
# AEAD or not).
# Finite-field DHE is left out: a Python server has no DH parameters, so it never spoke it.
REFUSED_TLS12 = {
    "ECDHE-ECDSA-AES128-SHA256": "ecdsa",
    "ECDHE-ECDSA-AES256-SHA384": "ecdsa",
    "ECDHE-RSA-AES128-SHA256": "rsa",
    "ECDHE-RSA-AES256-SHA384": "rsa",
    "ECDHE-ECDSA-AES128-SHA": "ecdsa",
    "ECDHE-RSA-AES256-SHA": "rsa",
    "AES128-GCM-SHA256": "rsa",
    "AES256-SHA256": "rsa",
}
TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}


@pytest.fixture
def pairs(files: certificates.Files, tmp_path: Path) -> dict[str, certificates.Files]:
    """A serving pair per key type: ours (ECDSA) and an RSA one, as a site might bring."""
    return {"ecdsa": files, "rsa": rsa_pair(tmp_path / "rsa")}


def rsa_pair(directory: Path) -> certificates.Files:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(datetime.now(UTC) - timedelta(minutes=5))
        .not_valid_after(datetime.now(UTC) + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(HOST)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir()
    found = certificates.Files.at(directory)
    found.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    found.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return found


def suite_client(version: ssl.TLSVersion, ciphers: str | None = None) -> ssl.SSLContext:
    """A client limited to one TLS version (and, for TLS 1.2, to `ciphers`); it does not
    check the certificate: these tests are about what the server agrees to speak."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = context.maximum_version = version
    if ciphers is not None:
        # Security level 0, so that only the server can be what refuses a suite.
        context.set_ciphers(f"{ciphers}:@SECLEVEL=0")
    return context


async def negotiated(port: int, client: ssl.SSLContext) -> tuple[str, str, object, bool]:
    """Handshake, exchange a line; (suite, version, compression, session has a ticket)."""
    async with tls_connection(port, client) as (reader, writer):
        assert await echo(reader, writer, b"ping\n") == b"ping\n"
        tls = writer.get_extra_info("ssl_object")
        return tls.cipher()[0], tls.version(), tls.compression(), tls.session.has_ticket


def test_tls_1_2_offers_only_ecdhe_with_aead_and_tls_1_3_only_aead(
    files: certificates.Files,
) -> None:
    context = certificates.server_ssl_context(files.cert, files.key)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.maximum_version in (ssl.TLSVersion.MAXIMUM_SUPPORTED, ssl.TLSVersion.TLSv1_3)
    offered = context.get_ciphers()
    tls12 = [c for c in offered if c["protocol"] == "TLSv1.2"]
    assert [c["name"] for c in tls12] == list(certificates.TLS12_CIPHERS)
    assert all(c["aead"] and c["kea"] == "kx-ecdhe" for c in tls12)
    assert {c["name"] for c in offered if c["protocol"] == "TLSv1.3"} == TLS13_SUITES
    assert {c["protocol"] for c in offered} == {"TLSv1.2", "TLSv1.3"}
    for option in (ssl.OP_NO_COMPRESSION, ssl.OP_NO_RENEGOTIATION, ssl.OP_NO_TICKET):
        assert context.options & option
    assert context.num_tickets == 0


@pytest.mark.parametrize("suite", certificates.TLS12_CIPHERS)
async def test_each_offered_tls_1_2_suite_is_agreed(
    pairs: dict[str, certificates.Files], suite: str
) -> None:
    pair = pairs["rsa" if "-RSA-" in suite else "ecdsa"]
    context = certificates.server_ssl_context(pair.cert, pair.key)
    async with echo_server(context) as port:
        got = await negotiated(port, suite_client(ssl.TLSVersion.TLSv1_2, suite))
    assert got == (suite, "TLSv1.2", None, False)


@pytest.mark.parametrize("suite", list(REFUSED_TLS12))
async def test_tls_1_2_suites_without_ecdhe_or_aead_are_refused(
    pairs: dict[str, certificates.Files], suite: str
) -> None:
    pair = pairs[REFUSED_TLS12[suite]]
    context = certificates.server_ssl_context(pair.cert, pair.key)
    async with echo_server(context) as port:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await negotiated(port, suite_client(ssl.TLSVersion.TLSv1_2, suite))


@pytest.mark.parametrize("suite", list(REFUSED_TLS12))
async def test_the_refused_suites_clients_work_where_the_server_allows_them(
    pairs: dict[str, certificates.Files], suite: str
) -> None:
    """The control for the test above: the refusal is the server's, not the client's."""
    pair = pairs[REFUSED_TLS12[suite]]
    context = certificates.server_ssl_context(pair.cert, pair.key)
    context.set_ciphers("ALL:@SECLEVEL=0")
    async with echo_server(context) as port:
        got = await negotiated(port, suite_client(ssl.TLSVersion.TLSv1_2, suite))
    assert got[:2] == (suite, "TLSv1.2")


@pytest.mark.parametrize("key_type", ["ecdsa", "rsa"])
async def test_tls_1_3_is_agreed_with_an_aead_suite_and_no_ticket(
    pairs: dict[str, certificates.Files], key_type: str
) -> None:
    pair = pairs[key_type]
    context = certificates.server_ssl_context(pair.cert, pair.key)
    async with echo_server(context) as port:
        suite, version, compression, ticket = await negotiated(
            port, suite_client(ssl.TLSVersion.TLSv1_3)
        )
    assert version == "TLSv1.3"
    assert suite in TLS13_SUITES
    assert (compression, ticket) == (None, False)


async def test_a_client_offering_every_suite_gets_the_servers_first_choice(
    files: certificates.Files,
) -> None:
    context = certificates.server_ssl_context(files.cert, files.key)
    client = suite_client(ssl.TLSVersion.TLSv1_2, "ALL")
    async with echo_server(context) as port:
        suite, version, _, _ = await negotiated(port, client)
    assert (suite, version) == (certificates.TLS12_CIPHERS[0], "TLSv1.2")

# --- files -----------------------------------------------------------------------------


def test_ensure_local_certs_creates_the_files_once(tmp_path: Path) -> None:
    directory = tmp_path / "new" / "certs"
    assert certificates.ensure_local_certs(directory, service=SERVICE, namespace=NAMESPACE)
    written = {name: (directory / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key")}
    assert not certificates.ensure_local_certs(directory, service=SERVICE, namespace=NAMESPACE)
    assert {name: (directory / name).read_bytes() for name in written} == written


def test_ensure_local_certs_leaves_an_existing_pair_with_other_names_alone(
    files: certificates.Files,
) -> None:
    before = files.cert.read_bytes()
    assert not certificates.ensure_local_certs(
        files.directory, service="another", namespace="elsewhere"
    )
    assert files.cert.read_bytes() == before


def test_ensure_local_certs_refuses_half_a_pair(files: certificates.Files) -> None:
    files.key.unlink()
    with pytest.raises(CertificateError, match=r"tls\.crt exists but .*tls\.key does not"):
        certificates.ensure_local_certs(files.directory, service=SERVICE, namespace=NAMESPACE)
    assert files.cert.exists()


def test_ensure_local_certs_refuses_a_pair_that_cannot_be_served(
    files: certificates.Files,
) -> None:
    files.cert.write_text("not a certificate\n")
    with pytest.raises(CertificateError, match=r"tls\.crt: not a PEM certificate"):
        certificates.ensure_local_certs(files.directory, service=SERVICE, namespace=NAMESPACE)


def test_key_file_is_private_and_no_temporary_files_are_left(tmp_path: Path) -> None:
    old_umask = os.umask(0)
    try:
        files = make(tmp_path / "certs")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(files.cert.stat().st_mode) == 0o644
    assert sorted(path.name for path in files.directory.iterdir()) == [
        "ca.crt",
        "tls.crt",
        "tls.key",
    ]


def test_writing_replaces_files_rather_than_rewriting_them(files: certificates.Files) -> None:
    """A reader holding the old file keeps reading the old, whole content."""
    with files.cert.open("rb") as held:
        make(files.directory)
        assert held.read() != files.cert.read_bytes()


def test_writing_into_an_unwritable_place_is_one_clear_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CertificateError, match=r"cannot create") as caught:
        make(blocker / "certs")
    assert "\n" not in str(caught.value)


def test_read_bundle_reads_what_was_written_and_none_for_an_empty_directory(
    files: certificates.Files, tmp_path: Path
) -> None:
    bundle = certificates.read_bundle(files.directory)
    assert bundle is not None
    assert bundle.cert_pem == files.cert.read_bytes()
    assert certificates.read_bundle(tmp_path / "nothing") is None


# --- loading a pair --------------------------------------------------------------------


def other_key_pem() -> bytes:
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda f: f.cert.unlink(), r"tls\.crt: no such file"),
        (lambda f: f.cert.write_bytes(b""), r"tls\.crt: empty"),
        (lambda f: f.cert.write_bytes(f.cert.read_bytes()[:300]), r"tls\.crt: not a PEM cert"),
        (lambda f: f.key.write_bytes(b"garbage\n"), r"tls\.key: not a PEM private key"),
        (lambda f: f.key.write_bytes(other_key_pem()), r"tls\.key: the key does not match"),
        (
            lambda f: f.key.write_bytes(
                ec.generate_private_key(ec.SECP256R1()).private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.BestAvailableEncryption(b"secret"),
                )
            ),
            r"tls\.key: the private key is encrypted",
        ),
    ],
    ids=["missing", "empty", "truncated", "garbage-key", "other-key", "encrypted-key"],
)
def test_a_pair_that_cannot_be_served_is_one_line_naming_the_file(
    files: certificates.Files, damage: object, words: str
) -> None:
    damage(files)  # type: ignore[operator]
    with pytest.raises(CertificateError, match=words) as caught:
        certificates.server_ssl_context(files.cert, files.key)
    assert "\n" not in str(caught.value)
    assert str(files.directory) in str(caught.value)


# --- judging an existing bundle --------------------------------------------------------


def test_a_fitting_bundle_is_reusable() -> None:
    bundle = certificates.make_bundle(service=SERVICE, namespace=NAMESPACE, now=NOW)
    assert (
        certificates.why_not_reusable(bundle, service=SERVICE, namespace=NAMESPACE, now=NOW) is None
    )


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"namespace": "elsewhere"}, "names differ"),
        ({"extra_sans": ["more.example.com"]}, "names differ"),
        ({"now": NOW + timedelta(days=340)}, "less than 30 days left"),
        ({"now": NOW - timedelta(days=1)}, "not valid before"),
    ],
)
def test_a_bundle_that_no_longer_fits_is_not_reusable(
    change: dict[str, object], words: str
) -> None:
    bundle = certificates.make_bundle(service=SERVICE, namespace=NAMESPACE, now=NOW)
    arguments: dict[str, object] = {
        "service": SERVICE,
        "namespace": NAMESPACE,
        "now": NOW,
        **change,
    }
    problem = certificates.why_not_reusable(bundle, **arguments)  # type: ignore[arg-type]
    assert problem is not None
    assert words in problem


def test_a_bundle_whose_ca_did_not_sign_it_or_whose_key_differs_is_not_reusable() -> None:
    bundle = certificates.make_bundle(service=SERVICE, namespace=NAMESPACE)
    other = certificates.make_bundle(service=SERVICE, namespace=NAMESPACE)
    wrong_ca = certificates.Bundle(other.ca_pem, bundle.cert_pem, bundle.key_pem)
    wrong_key = certificates.Bundle(bundle.ca_pem, bundle.cert_pem, other.key_pem)
    empty = certificates.Bundle(b"", b"", b"")
    for broken, words in (
        (wrong_ca, "not signed by"),
        (wrong_key, "does not match"),
        (empty, "empty"),
    ):
        problem = certificates.why_not_reusable(broken, service=SERVICE, namespace=NAMESPACE)
        assert problem is not None
        assert words in problem


def test_the_outgoing_ca_is_kept_while_its_certificate_is_valid() -> None:
    old = certificates.make_bundle(service=SERVICE, namespace=NAMESPACE, now=NOW)
    kept = certificates.outgoing_ca(old, now=NOW + timedelta(days=300))
    assert kept == old.ca_pem
    new = certificates.make_bundle(service=SERVICE, namespace=NAMESPACE, also_trust=kept, now=NOW)
    assert len(x509.load_pem_x509_certificates(new.ca_pem)) == 2
    assert certificates.outgoing_ca(old, now=NOW + timedelta(days=400)) == b""
    assert certificates.outgoing_ca(None) == b""
    assert certificates.outgoing_ca(certificates.Bundle(b"", b"junk", b"")) == b""


# --- hot reload ------------------------------------------------------------------------


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def poll(watch: reload.CertificateWatch, interval: float) -> None:
    """What the server's watcher task does: check every `interval` seconds."""
    while True:
        await asyncio.sleep(interval)
        watch.check()


async def test_rotation_under_load_drops_no_connection_and_serves_the_new_certificate(
    files: certificates.Files, tmp_path: Path
) -> None:
    context = certificates.server_ssl_context(files.cert, files.key)
    reloaded: list[x509.Certificate] = []
    errors: list[CertificateError] = []
    reloader = reload.CertificateWatch(
        context, files.cert, files.key, on_reload=reloaded.append, on_error=errors.append
    )
    old = fingerprint_of_pem(files.cert.read_bytes())
    new_bundle = certificates.make_bundle(service=SERVICE, namespace=NAMESPACE)
    new = fingerprint_of_pem(new_bundle.cert_pem)
    (tmp_path / "trust.pem").write_bytes(files.ca.read_bytes() + new_bundle.ca_pem)
    client = client_context(tmp_path / "trust.pem")

    seen: list[str] = []
    failures: list[BaseException] = []
    task = asyncio.create_task(poll(reloader, 0.005))
    async with echo_server(context) as port, tls_connection(port, client) as (reader, writer):
        # A connection opened before the rotation must carry on after it.
        assert await echo(reader, writer, b"before\n") == b"before\n"
        for attempt in range(400):
            # A writer that replaces the key, then the certificate a while later: in
            # between, the files do not match and the reloader must keep the old pair.
            if attempt == 20:
                replace_file(files.key, new_bundle.key_pem)
            if attempt == 40:
                replace_file(files.cert, new_bundle.cert_pem)
            try:
                seen.append(await served_fingerprint(port, client))
            except (ssl.SSLError, ConnectionError) as exc:
                failures.append(exc)
            if seen[-20:] == [new] * 20:
                break
            await asyncio.sleep(0.001)
        assert await echo(reader, writer, b"after\n") == b"after\n"
        assert fingerprint_of_connection(writer) == old
    await stop(task)

    assert failures == []
    assert seen[0] == old
    assert seen[-1] == new
    switch = seen.index(new)
    # Never before the certificate is written (attempt 40); from that attempt on it may be.
    assert switch >= 40
    assert set(seen[:switch]) == {old}
    assert set(seen[switch:]) == {new}
    assert [fingerprint_of_pem(c.public_bytes(serialization.Encoding.PEM)) for c in reloaded] == [
        new
    ]
    assert reloader.not_after == leaf(new_bundle.cert_pem).not_valid_after_utc
    assert len(errors) == 1
    assert "does not match" in str(errors[0])


def replace_file(path: Path, content: bytes) -> None:
    temporary = path.with_name(f".{path.name}.new")
    temporary.write_bytes(content)
    os.replace(temporary, path)


def kubelet_volume(directory: Path, bundle: certificates.Bundle, stamp: str) -> None:
    """Lay out `directory` as the kubelet mounts a Secret, or swap in a new version.

    tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>/; an update writes a new timestamped
    directory, renames a new `..data_tmp` link over `..data`, and removes the old directory.
    """
    directory.mkdir(exist_ok=True)
    version = directory / f"..{stamp}"
    version.mkdir()
    for name, content in (
        ("ca.crt", bundle.ca_pem),
        ("tls.crt", bundle.cert_pem),
        ("tls.key", bundle.key_pem),
    ):
        (version / name).write_bytes(content)
    data = directory / "..data"
    previous = data.resolve() if data.is_symlink() else None
    (directory / "..data_tmp").symlink_to(version.name)
    os.replace(directory / "..data_tmp", data)
    for name in ("ca.crt", "tls.crt", "tls.key"):
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")
    if previous is not None:
        shutil.rmtree(previous)


async def test_the_kubelet_secret_volume_swap_is_picked_up(tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    first = certificates.make_bundle(service=SERVICE, namespace=NAMESPACE)
    kubelet_volume(volume, first, "2026_11_21_06_00_00.000000001")
    cert, key = volume / "tls.crt", volume / "tls.key"
    context = certificates.server_ssl_context(cert, key)
    reloader = reload.CertificateWatch(context, cert, key)
    assert not reloader.check()

    second = certificates.make_bundle(service=SERVICE, namespace=NAMESPACE)
    kubelet_volume(volume, second, "2026_11_21_07_00_00.000000002")
    assert reloader.check()
    assert reloader.certificate == leaf(second.cert_pem)
    async with echo_server(context) as port:
        assert await served_fingerprint(
            port, client_context(volume / "ca.crt")
        ) == fingerprint_of_pem(second.cert_pem)


def break_key(files: certificates.Files) -> None:
    files.key.write_bytes(other_key_pem())


def truncate_certificate(files: certificates.Files) -> None:
    files.cert.write_bytes(files.cert.read_bytes()[:200])


def scribble(files: certificates.Files) -> None:
    files.cert.write_bytes(b"\x00garbage\xff" * 50)


def remove_key(files: certificates.Files) -> None:
    files.key.unlink()


@pytest.mark.parametrize("damage", [break_key, truncate_certificate, scribble, remove_key])
async def test_a_broken_pair_is_refused_and_the_old_certificate_keeps_being_served(
    files: certificates.Files, damage: object
) -> None:
    context = certificates.server_ssl_context(files.cert, files.key)
    errors: list[CertificateError] = []
    reloader = reload.CertificateWatch(
        context, files.cert, files.key, on_error=errors.append
    )
    good = certificates.read_bundle(files.directory)
    assert good is not None
    served = fingerprint_of_pem(good.cert_pem)

    damage(files)  # type: ignore[operator]
    assert not reloader.check()
    assert not reloader.check()  # retried, reported once
    assert len(errors) == 1
    assert str(files.directory) in str(errors[0])
    assert reloader.certificate == leaf(good.cert_pem)
    async with echo_server(context) as port:
        assert await served_fingerprint(port, client_context(files.ca)) == served

    fixed = certificates.make_bundle(service=SERVICE, namespace=NAMESPACE)
    certificates.write_bundle(files.directory, fixed)
    assert reloader.check()
    async with echo_server(context) as port:
        assert await served_fingerprint(port, client_context(files.ca)) == fingerprint_of_pem(
            fixed.cert_pem
        )


def test_unchanged_or_merely_touched_files_do_not_reload(files: certificates.Files) -> None:
    context = certificates.server_ssl_context(files.cert, files.key)
    reloads: list[x509.Certificate] = []
    reloader = reload.CertificateWatch(
        context, files.cert, files.key, on_reload=reloads.append
    )
    assert not reloader.check()
    content = files.cert.read_bytes()
    files.cert.unlink()
    files.cert.write_bytes(content)  # a new inode and mtime, the same certificate
    assert not reloader.check()
    assert reloads == []


def test_a_failing_callback_does_not_undo_the_reload(files: certificates.Files) -> None:
    context = certificates.server_ssl_context(files.cert, files.key)

    def explode(_: object) -> None:
        raise RuntimeError("metrics are down")

    reloader = reload.CertificateWatch(context, files.cert, files.key, on_reload=explode)
    new = certificates.make_bundle(service=SERVICE, namespace=NAMESPACE)
    certificates.write_bundle(files.directory, new)
    assert reloader.check()
    assert reloader.certificate == leaf(new.cert_pem)


def test_expiry_is_exported_from_the_certificate_being_served(tmp_path: Path) -> None:
    files = make(tmp_path / "certs", days=10)
    reloader = reload.CertificateWatch(
        certificates.server_ssl_context(files.cert, files.key), files.cert, files.key
    )
    assert reloader.not_after == leaf(files.cert.read_bytes()).not_valid_after_utc
    now = reloader.not_after - timedelta(days=2)
    assert reloader.seconds_until_expiry(now) == pytest.approx(2 * 86400)
