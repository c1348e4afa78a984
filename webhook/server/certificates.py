"""Certificates: a CA and a serving certificate for the webhook's Service, on disk and in TLS.

The API server calls the webhook over HTTPS, checks the serving certificate against the
`caBundle` of the webhook configuration and matches it by the Service DNS name
`<svc>.<ns>.svc` (a SAN: the common name is ignored). This module makes such a pair
(ECDSA P-256), keeps it in the layout of a `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`,
plus `ca.crt`), builds the server's `ssl.SSLContext` from it and loads a pair into a live context
(`watching.CertificateWatch` does so when a mounted Secret is rotated).

Nothing here talks to the Kubernetes API: that is `cabundle`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import ssl
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificatePublicKeyTypes,
    PrivateKeyTypes,
    PublicKeyTypes,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.errors import CertificateError
from webhook.policy import names

logger = logging.getLogger(__name__)

# The key names of a kubernetes.io/tls Secret (what cert-manager writes too), plus ca.crt:
# a mounted Secret and a local directory look the same to the server.
CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"

CA_DAYS = 3650
SERVING_DAYS = 365
# A pair with less left than this is replaced rather than reused: a yearly certificate is
# then renewed by any run of `certs` in its last month, long before anything breaks.
MIN_DAYS_LEFT = 30
# The signer's clock and the API server's disagree a little; a certificate valid from "now"
# would be refused by a server whose clock is a minute behind.
CLOCK_SKEW = timedelta(minutes=5)
# For running the server on a workstation and calling it from there.
LOCAL_DNS_NAMES = ("localhost",)
LOCAL_IP_ADDRESSES = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))

_DNS1123_LABEL = re.compile(names.DNS1123_LABEL)
_DNS1035_LABEL = re.compile(names.DNS1035_LABEL)
# X.520 caps a common name at 64 characters; `<svc>.<ns>.svc` can be longer.
_MAX_COMMON_NAME = 64

PathLike = str | os.PathLike[str]
_T = TypeVar("_T")


@dataclass(frozen=True)
class Authority:
    """A CA that can sign: its certificate and its private key (held in memory only)."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class ServingPair:
    """A serving certificate as PEM (leaf first, then any intermediates) and its key."""

    cert_pem: bytes
    key_pem: bytes
    certificate: x509.Certificate  # the leaf, parsed

    @property
    def not_after(self) -> datetime:
        return self.certificate.not_valid_after_utc


@dataclass(frozen=True)
class Bundle:
    """The contents of `ca.crt`, `tls.crt` and `tls.key` (PEM; empty when absent).

    `ca_pem` may hold several CAs: during a rotation it also carries the CA of the
    certificate being replaced, so servers that still present it stay trusted.
    """

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @property
    def not_after(self) -> datetime:
        """When the serving certificate expires (UTC); CertificateError if it cannot be read."""
        return _parse_certificates(self.cert_pem, CERT_FILE)[0].not_valid_after_utc


@dataclass(frozen=True)
class Files:
    """The three files of a bundle in a directory."""

    directory: Path

    @classmethod
    def at(cls, directory: PathLike) -> Files:
        return cls(Path(directory))

    @property
    def ca(self) -> Path:
        return self.directory / CA_FILE

    @property
    def cert(self) -> Path:
        return self.directory / CERT_FILE

    @property
    def key(self) -> Path:
        return self.directory / KEY_FILE


# --- names -----------------------------------------------------------------------------


def subject_alt_names(
    *, service: str, namespace: str, extra_sans: Iterable[str] = ()
) -> list[x509.GeneralName]:
    """The SANs of the serving certificate for `service` in `namespace`.

    The Service's DNS names in every form a client may use, `localhost` and the loopback
    addresses, then `extra_sans` (each a DNS name, `*.` wildcards allowed, or an IP address).
    Raises CertificateError for a name Kubernetes or DNS would not accept.
    """
    _require_label(service, "service name", _DNS1035_LABEL)
    _require_label(namespace, "namespace", _DNS1123_LABEL)
    dns_names = [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        *LOCAL_DNS_NAMES,
    ]
    addresses: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = list(LOCAL_IP_ADDRESSES)
    for raw in extra_sans:
        value = raw.strip()
        try:
            addresses.append(ipaddress.ip_address(value))
        except ValueError:
            dns_names.append(_dns_name(value))
    return [
        *(x509.DNSName(name) for name in _unique(dns_names)),
        *(x509.IPAddress(address) for address in _unique(addresses)),
    ]


def service_host(*, service: str, namespace: str) -> str:
    """The name the API server calls the webhook by, and must find among the SANs."""
    return f"{service}.{namespace}.svc"


def _require_label(value: str, what: str, pattern: re.Pattern[str]) -> None:
    if len(value) > 63 or not pattern.fullmatch(value):
        raise CertificateError(
            f"{what} {value!r} is not a valid Kubernetes name "
            "(lower-case letters, digits and '-', at most 63 characters)"
        )


def _dns_name(value: str) -> str:
    name = value.lower()
    labels = name.removeprefix("*.").split(".")
    if (
        not name
        or len(name) > 253
        or not all(len(label) <= 63 and _DNS1123_LABEL.fullmatch(label) for label in labels)
    ):
        raise CertificateError(f"extra SAN {value!r} is neither a DNS name nor an IP address")
    return name


def _unique(items: Iterable[_T]) -> list[_T]:
    return list(dict.fromkeys(items))


# --- making ----------------------------------------------------------------------------


def make_ca(*, days: int = CA_DAYS, now: datetime | None = None) -> Authority:
    """A new self-signed CA (ECDSA P-256) valid for `days`."""
    _require_days(days)
    now = _utc(now)
    key = ec.generate_private_key(ec.SECP256R1())
    # A distinct name per CA: during a rotation two of them sit in one caBundle.
    name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"gpu-share-webhook CA {now:%Y-%m-%dT%H:%M:%SZ}")]
    )
    key_id = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_cert_sign=True), critical=True)
        .add_extension(key_id, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(key_id), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return Authority(certificate, key)


def make_serving_certificate(
    ca: Authority,
    *,
    service: str,
    namespace: str,
    extra_sans: Iterable[str] = (),
    days: int = SERVING_DAYS,
    now: datetime | None = None,
) -> ServingPair:
    """A serving certificate for the Service, signed by `ca`, valid for `days`.

    It never outlives its CA: a certificate valid longer than its issuer fails to verify.
    """
    names = subject_alt_names(service=service, namespace=namespace, extra_sans=extra_sans)
    common_name = service_host(service=service, namespace=namespace)
    if len(common_name) > _MAX_COMMON_NAME:
        common_name = service  # only informative: clients match the SANs
    return _sign_leaf(
        ca,
        common_name=common_name,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=names,
        days=days,
        now=now,
    )


def make_client_certificate(
    ca: Authority,
    *,
    common_name: str,
    dns_names: Iterable[str] = (),
    days: int = SERVING_DAYS,
    now: datetime | None = None,
) -> ServingPair:
    """A TLS client certificate (extendedKeyUsage clientAuth) for `common_name`, signed by
    `ca`: what the API server presents to a server started with --client-ca-file."""
    return _sign_leaf(
        ca,
        common_name=common_name,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        sans=[x509.DNSName(n) for n in dns_names],
        days=days,
        now=now,
    )


def _sign_leaf(
    ca: Authority,
    *,
    common_name: str,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName],
    days: int,
    now: datetime | None,
) -> ServingPair:
    """A leaf certificate for one TLS use (serverAuth or clientAuth) and a new ECDSA P-256
    key, signed by `ca`; it never outlives its CA (a certificate valid longer than its issuer
    fails to verify)."""
    _require_days(days)
    now = _utc(now)
    key = ec.generate_private_key(ec.SECP256R1())
    ca_key_id = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(min(now + timedelta(days=days), ca.certificate.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # ECDSA keys sign the handshake; key encipherment is an RSA notion.
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    certificate = (
        builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
        # Which CA signed it, when two CAs of one name are trusted during a rotation.
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_key_id.value),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    return ServingPair(
        cert_pem=certificate.public_bytes(serialization.Encoding.PEM),
        key_pem=_key_pem(key),
        certificate=certificate,
    )


def make_bundle(
    *,
    service: str,
    namespace: str,
    extra_sans: Iterable[str] = (),
    days: int = SERVING_DAYS,
    also_trust: bytes = b"",
    now: datetime | None = None,
) -> Bundle:
    """A new CA and a serving certificate signed by it.

    `also_trust` (PEM) is appended to the CA bundle: see `outgoing_ca`. The CA's key is
    dropped once the certificate is signed; the next renewal makes a new CA.
    """
    now = _utc(now)
    ca = make_ca(days=max(CA_DAYS, days), now=now)
    pair = make_serving_certificate(
        ca, service=service, namespace=namespace, extra_sans=extra_sans, days=days, now=now
    )
    return Bundle(ca_pem=ca.cert_pem + also_trust, cert_pem=pair.cert_pem, key_pem=pair.key_pem)


def _key_usage(*, digital_signature: bool = False, key_cert_sign: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=key_cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _require_days(days: int) -> None:
    if days < 1:
        raise CertificateError(f"validity must be at least one day, not {days}")


def _utc(now: datetime | None) -> datetime:
    return datetime.now(UTC) if now is None else now.astimezone(UTC)


# --- judging an existing bundle --------------------------------------------------------


def why_not_reusable(
    bundle: Bundle,
    *,
    service: str,
    namespace: str,
    extra_sans: Iterable[str] = (),
    min_days_left: int = MIN_DAYS_LEFT,
    now: datetime | None = None,
) -> str | None:
    """Why `bundle` should be replaced, or None when it can be kept as it is.

    Kept means: the key matches, the certificate is signed by a CA in `ca.crt`, it names
    exactly the SANs asked for, and both it and that CA have more than `min_days_left`.
    """
    now = _utc(now)
    try:
        leaf = _parse_certificates(bundle.cert_pem, CERT_FILE)[0]
        _require_match(_parse_key(bundle.key_pem, KEY_FILE), leaf, KEY_FILE, CERT_FILE)
    except CertificateError as exc:
        return str(exc)
    issuer = _issuer_of(leaf, _lenient_certificates(bundle.ca_pem))
    if issuer is None:
        return f"{CERT_FILE} is not signed by a CA in {CA_FILE}"
    wanted = subject_alt_names(service=service, namespace=namespace, extra_sans=extra_sans)
    if set(_sans_of(leaf)) != set(wanted):
        return "its names differ from the ones asked for"
    if leaf.not_valid_before_utc > now:
        return f"it is not valid before {leaf.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
    deadline = now + timedelta(days=min_days_left)
    for what, certificate in ((CERT_FILE, leaf), (CA_FILE, issuer)):
        if certificate.not_valid_after_utc <= deadline:
            return (
                f"{what} expires on {certificate.not_valid_after_utc:%Y-%m-%d}"
                f" (less than {min_days_left} days left)"
            )
    return None


def outgoing_ca(previous: Bundle | None, *, now: datetime | None = None) -> bytes:
    """The CA (PEM) that signed `previous`'s certificate while that is still valid, else b"".

    A new bundle carries it in its CA bundle, so that servers still presenting the old
    certificate (the kubelet takes a minute or two to update a mounted Secret) keep being
    trusted by the API server. It drops out at the next renewal.
    """
    if previous is None:
        return b""
    now = _utc(now)
    try:
        leaf = _parse_certificates(previous.cert_pem, CERT_FILE)[0]
    except CertificateError:
        return b""
    issuer = _issuer_of(leaf, _lenient_certificates(previous.ca_pem))
    if issuer is None or min(leaf.not_valid_after_utc, issuer.not_valid_after_utc) <= now:
        return b""
    return issuer.public_bytes(serialization.Encoding.PEM)


def _issuer_of(
    leaf: x509.Certificate, authorities: Iterable[x509.Certificate]
) -> x509.Certificate | None:
    for authority in authorities:
        try:
            leaf.verify_directly_issued_by(authority)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return authority
    return None


def _sans_of(certificate: x509.Certificate) -> list[x509.GeneralName]:
    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return list(extension.value)


def _lenient_certificates(pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


# --- reading and writing files ---------------------------------------------------------


def write_bundle(directory: PathLike, bundle: Bundle) -> Files:
    """Write `bundle` into `directory` (created if needed), each file atomically.

    A reader never sees a half-written file. The pair as a whole is not atomic: a server
    reloading between two writes may see a new key with the old certificate, which
    `CertificateReloader` refuses and retries.
    """
    files = Files.at(directory)
    try:
        files.directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CertificateError(f"{files.directory}: cannot create: {_reason(exc)}") from exc
    _write_atomically(files.key, bundle.key_pem, mode=0o600)
    _write_atomically(files.cert, bundle.cert_pem, mode=0o644)
    _write_atomically(files.ca, bundle.ca_pem, mode=0o644)
    return files


def read_bundle(directory: PathLike) -> Bundle | None:
    """The bundle in `directory` as it is (absent files read as b""), or None if it has none."""
    files = Files.at(directory)
    contents = [_read_if_present(path) for path in (files.ca, files.cert, files.key)]
    if all(content is None for content in contents):
        return None
    ca_pem, cert_pem, key_pem = (content or b"" for content in contents)
    return Bundle(ca_pem=ca_pem, cert_pem=cert_pem, key_pem=key_pem)


def ensure_local_certs(
    directory: PathLike,
    *,
    service: str,
    namespace: str,
    extra_sans: Iterable[str] = (),
    days: int = SERVING_DAYS,
) -> bool:
    """Make a CA and serving certificate in `directory` unless it already has a pair.

    Returns True when it made them. An existing `tls.crt`/`tls.key` is never touched, even
    with other names (it may be the admin's own, or a read-only mounted Secret); one that
    cannot be served, or half a pair, is a CertificateError. An expired one is only logged.
    """
    files = Files.at(directory)
    present = [path for path in (files.cert, files.key) if path.exists()]
    if len(present) == 2:
        pair = load_pair(files.cert, files.key)
        if pair.not_after <= datetime.now(UTC):
            logger.warning("%s expired on %s", files.cert, f"{pair.not_after:%Y-%m-%d}")
        return False
    if present:
        missing = files.key if present[0] == files.cert else files.cert
        raise CertificateError(
            f"{present[0]} exists but {missing} does not; "
            "remove it or run `gpu-share-webhook certs --force`"
        )
    bundle = make_bundle(service=service, namespace=namespace, extra_sans=extra_sans, days=days)
    write_bundle(files.directory, bundle)
    return True


def _write_atomically(path: Path, data: bytes, *, mode: int) -> None:
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise CertificateError(f"{path}: cannot write: {_reason(exc)}") from exc
    try:
        with os.fdopen(fd, "wb") as stream:
            # Before any byte is written: the key must never be readable by others.
            os.fchmod(stream.fileno(), mode)
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise CertificateError(f"{path}: cannot write: {_reason(exc)}") from exc


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CertificateError(f"{path}: no such file") from None
    except OSError as exc:
        raise CertificateError(f"{path}: cannot read: {_reason(exc)}") from exc


def _read_if_present(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CertificateError(f"{path}: cannot read: {_reason(exc)}") from exc


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


# --- loading into TLS ------------------------------------------------------------------


def load_pair(cert_file: PathLike, key_file: PathLike) -> ServingPair:
    """Read and check a certificate (chain) and its key: both PEM, and the key matches."""
    cert_path, key_path = Path(cert_file), Path(key_file)
    cert_pem, key_pem = _read(cert_path), _read(key_path)
    leaf = _parse_certificates(cert_pem, str(cert_path))[0]
    _require_match(_parse_key(key_pem, str(key_path)), leaf, str(key_path), str(cert_path))
    return ServingPair(cert_pem=cert_pem, key_pem=key_pem, certificate=leaf)


# TLS 1.2 suites: ECDHE key exchange (forward secrecy) with an AEAD cipher only, for ECDSA
# certificates (ours, cert-manager's in deploy/) and RSA ones (a site's own). Named one by one
# rather than by OpenSSL's aliases, whose meaning changes between versions; the order is the
# server's preference. No CBC suite (Lucky 13 and its kin), no plain RSA or DHE key exchange.
# TLS 1.3 has its own setting, and all its suites are AEAD with ephemeral keys: OpenSSL's
# default three (AES-GCM and ChaCha20-Poly1305) stay.
TLS12_CIPHERS = (
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
)


def server_ssl_context(
    cert_file: PathLike, key_file: PathLike, *, client: ClientAuthority | None = None
) -> ssl.SSLContext:
    """A TLS 1.2 and 1.3 server context serving the pair in the two files (and, with
    `client`, requiring a client certificate signed by one of its CAs)."""
    return context_for(load_pair(cert_file, key_file), client=client, source=str(cert_file))


def context_for(
    pair: ServingPair, *, client: ClientAuthority | None = None, source: str
) -> ssl.SSLContext:
    """A TLS 1.2 and 1.3 server context serving `pair`; with `client`, a handshake without a
    client certificate that one of its CAs signed fails (which names are accepted is
    `ClientAuthority.refusal`'s to say, after the handshake).

    TLS 1.2 offers only `TLS12_CIPHERS`; nothing older than 1.2 is spoken (SPEC: "TLS 1.2
    (ECDHE with AEAD suites only) and 1.3").
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(":".join(TLS12_CIPHERS))
    context.options |= (
        # No TLS-level compression (CRIME); Python's default, stated so it stays.
        ssl.OP_NO_COMPRESSION
        # Our order of suites, not the client's.
        | ssl.OP_CIPHER_SERVER_PREFERENCE
        # No renegotiation in TLS 1.2 (TLS 1.3 has none): a client cannot make the server
        # redo handshakes on one connection (CPU exhaustion) or splice sessions.
        | ssl.OP_NO_RENEGOTIATION
        # No TLS 1.2 session tickets: their key lives as long as the process, so a leaked
        # key would open every recorded session. The API server does not resume sessions.
        | ssl.OP_NO_TICKET
    )
    # Nor TLS 1.3 tickets, for the same reasons.
    context.num_tickets = 0
    load_into(context, pair, source=source)
    if client is not None:
        # OpenSSL checks the chain (and, for a server, that the leaf may be used by a TLS
        # client: an extendedKeyUsage without clientAuth fails).
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            context.load_verify_locations(cadata=client.pem.decode("ascii"))
        except (ssl.SSLError, UnicodeDecodeError, ValueError) as exc:
            raise CertificateError(f"{client.source}: TLS cannot use these CAs: {exc}") from exc
    return context


# --- client certificates -----------------------------------------------------------------

# The name a client certificate must carry when `serve --client-names` is not given: the
# common name most guides (and Gatekeeper's default) give the API server's client
# certificate for webhooks.
DEFAULT_CLIENT_NAMES = ("kube-apiserver",)
# Client certificates already judged, by their DER bytes (the API server presents the same
# one on every connection).
_JUDGED_CLIENTS = 64


class ClientAuthority:
    """The CAs whose client certificates the admission port accepts, and the names it
    accepts (a certificate's subject common name or one of its DNS SANs)."""

    def __init__(
        self, pem: bytes, certificates: list[x509.Certificate], names: Iterable[str], source: str
    ) -> None:
        self.pem = pem
        self.certificates = tuple(certificates)
        self.names = frozenset(names)
        self.source = source
        self._judged: dict[bytes, str | None] = {}

    def refusal(self, der: bytes | None) -> str | None:
        """Why a verified client certificate (DER) is not accepted, or None."""
        if der is None:
            return "none presented"
        judged = self._judged
        if der in judged:
            return judged[der]
        why = self._judge(der)
        if len(judged) >= _JUDGED_CLIENTS:
            judged.clear()
        judged[der] = why
        return why

    def _judge(self, der: bytes) -> str | None:
        try:
            certificate = x509.load_der_x509_certificate(der)
        except ValueError:
            return "cannot be read"  # OpenSSL verified it: not seen
        names = client_names_of(certificate)
        if self.names.intersection(names):
            return None
        shown = ", ".join(sorted(names)[:5]) or "none"
        accepted = ", ".join(sorted(self.names))
        return f"its names are {shown}, none of them accepted (--client-names: {accepted})"


def client_names_of(certificate: x509.Certificate) -> set[str]:
    """A client certificate's names: its subject common names and DNS SANs."""
    found = {str(a.value) for a in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)}
    with contextlib.suppress(x509.ExtensionNotFound):
        sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        found.update(sans.value.get_values_for_type(x509.DNSName))
    return found


def load_client_authority(path: PathLike, names: Iterable[str]) -> ClientAuthority:
    """The CA certificates (PEM, one or more) in `path`, with the names to accept.

    Each must be a CA (basicConstraints CA:TRUE): a leaf there would be trusted to sign
    client certificates by nobody, and is most likely the wrong file."""
    source = str(path)
    pem = _read(Path(path))
    found = _parse_certificates(pem, source)
    for certificate in found:
        try:
            constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
            is_ca = constraints.value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        if not is_ca:
            raise CertificateError(
                f"{source}: {certificate.subject.rfc4514_string() or 'a certificate'} is not a"
                " CA (no basicConstraints CA:TRUE): give the CA that signs the API server's"
                " client certificate"
            )
    accepted = [n.strip() for n in names if n.strip()]
    if not accepted:
        raise CertificateError("--client-names: at least one name is needed")
    return ClientAuthority(pem, found, accepted, source)


def _parse_certificates(pem: bytes, source: str) -> list[x509.Certificate]:
    if not pem.strip():
        raise CertificateError(f"{source}: empty, expected a PEM certificate")
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise CertificateError(f"{source}: not a PEM certificate, or a damaged one") from None


def _parse_key(pem: bytes, source: str) -> PrivateKeyTypes:
    if not pem.strip():
        raise CertificateError(f"{source}: empty, expected a PEM private key")
    try:
        return serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        raise CertificateError(f"{source}: the private key is encrypted") from None
    except (ValueError, UnsupportedAlgorithm):
        raise CertificateError(f"{source}: not a PEM private key, or a damaged one") from None


def _require_match(
    key: PrivateKeyTypes, leaf: x509.Certificate, key_source: str, cert_source: str
) -> None:
    if _public_key_bytes(key.public_key()) != _public_key_bytes(leaf.public_key()):
        raise CertificateError(
            f"{key_source}: the key does not match the certificate in {cert_source}"
        )


def _public_key_bytes(key: PublicKeyTypes | CertificatePublicKeyTypes) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def load_into(context: ssl.SSLContext, pair: ServingPair, *, source: str) -> None:
    """Make `context` serve `pair`, or leave it exactly as it was.

    `load_cert_chain` on a live context is not all-or-nothing: OpenSSL installs the
    certificate before it looks at the key, so a failure half-way leaves a certificate
    without its key, and every later handshake fails. Hence: load from one private snapshot
    of the checked bytes (the files may change between two reads), into a scratch context
    first, and into the live one only once that worked.
    """
    with _private_file(pair.cert_pem.rstrip(b"\n") + b"\n" + pair.key_pem) as path:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(path)
            context.load_cert_chain(path)
        except ssl.SSLError as exc:
            raise CertificateError(
                f"{source}: TLS cannot use this pair: {exc.reason or exc}"
            ) from exc


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    """A path to `data` that nothing else can see or change, for APIs that want a file.

    On Linux an anonymous in-memory file: it needs no writable directory (the server
    runs with a read-only root filesystem) and puts no key on disk.
    """
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None and os.path.isdir("/proc/self/fd"):
        with os.fdopen(memfd_create("gpu-share-webhook-tls", os.MFD_CLOEXEC), "w+b") as memory:
            memory.write(data)
            memory.flush()
            yield f"/proc/self/fd/{memory.fileno()}"
        return
    with tempfile.NamedTemporaryFile(prefix="gpu-share-webhook-", suffix=".pem") as stream:
        stream.write(data)
        stream.flush()
        yield stream.name
