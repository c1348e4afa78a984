"""`gpu-share-webhook certs`: the CA and serving certificate, locally and in the cluster.

It always leaves `ca.crt`, `tls.crt` and `tls.key` in --dir. With --secret the pair lives in
that TLS Secret too, and with --inject-ca the CA goes into the webhook configurations. The
bootstrap Job runs all of it in one go:

    gpu-share-webhook certs --dir /tmp/certs --secret gpu-share-webhook-tls --inject-ca

Every run is idempotent: a pair that still fits (same names, signed by its ca.crt, more than
30 days left) is kept, so running the Job again writes nothing; --force makes a new one.

Exit 0 when done; 1 when a step fails (the API refuses or does not answer, a file cannot be
written); 2 for bad options or a kubeconfig that is missing or no kubeconfig (nothing was
tried yet).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from webhook.errors import CertificateError
from webhook.policy import names
from webhook.server import certificates
from webhook.tools import (
    DEFAULT_WEBHOOK_NAME,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    FLAG,
    OPTIONAL_TEXT,
    add_service_arguments,
    from_env,
    help_text,
    object_name,
    whole_number,
)

_DNS1123_SUBDOMAIN = re.compile(names.DNS1123_SUBDOMAIN)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "certs",
        help="make the CA and serving certificate; store them in a Secret, inject the CA",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--dir",
        "--cert-dir",
        dest="dir",
        metavar="DIR",
        default=from_env("cert-dir", "certs"),
        help=help_text("directory for ca.crt, tls.crt and tls.key", "cert-dir"),
    )
    add_service_arguments(
        parser,
        service_help="name of the webhook's Service",
        namespace_help="namespace of the Service and the Secret",
        san_help="one more DNS name or IP address for the certificate",
    )
    parser.add_argument(
        "--days",
        type=whole_number(1),
        default=from_env("days", certificates.SERVING_DAYS),
        help=help_text("validity of the serving certificate in days", "days"),
    )
    parser.add_argument(
        "--force",
        action=argparse.BooleanOptionalAction,
        default=from_env("force", False, FLAG),
        help=help_text("make a new pair even if the current one still fits", "force"),
    )
    parser.add_argument(
        "--secret",
        metavar="NAME",
        type=object_name(empty=True),
        default=from_env("secret", None),
        help=help_text(
            "keep the pair in this kubernetes.io/tls Secret in --namespace", "secret", "none"
        ),
    )
    parser.add_argument(
        "--inject-ca",
        action=argparse.BooleanOptionalAction,
        default=from_env("inject-ca", False, FLAG),
        help=help_text("write the CA into the webhook configurations' caBundle", "inject-ca"),
    )
    parser.add_argument(
        "--mutating-webhook",
        metavar="NAME",
        type=object_name(empty=True),
        default=from_env("mutating-webhook", DEFAULT_WEBHOOK_NAME),
        help=help_text(
            "MutatingWebhookConfiguration for --inject-ca; '' skips it", "mutating-webhook"
        ),
    )
    parser.add_argument(
        "--validating-webhook",
        metavar="NAME",
        type=object_name(empty=True),
        default=from_env("validating-webhook", DEFAULT_WEBHOOK_NAME),
        help=help_text(
            "ValidatingWebhookConfiguration for --inject-ca; '' skips it", "validating-webhook"
        ),
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        type=OPTIONAL_TEXT,
        default=from_env("kubeconfig", None),
        help=help_text(
            "kubeconfig for --secret and --inject-ca",
            "kubeconfig",
            "the pod's service account, else $KUBECONFIG or ~/.kube/config",
        ),
    )
    parser.set_defaults(func=run)


@dataclass(frozen=True)
class _Request:
    directory: Path
    service: str
    namespace: str
    extra_sans: tuple[str, ...]
    days: int
    force: bool
    secret: str | None
    inject_ca: bool
    mutating: str | None
    validating: str | None
    kubeconfig: str | None

    @property
    def needs_cluster(self) -> bool:
        return bool(self.secret) or self.inject_ca


def run(args: argparse.Namespace) -> int:
    try:
        request = _request(args)
    except CertificateError as exc:
        return _fail(exc, EXIT_USAGE)
    try:
        # No usable configuration (a kubeconfig that is no kubeconfig) is bad input: nothing
        # was tried yet. What fails after it (the API, the files) is a failed step.
        api = _cabundle().connect(request.kubeconfig) if request.needs_cluster else None
    except CertificateError as exc:
        return _fail(exc, EXIT_USAGE)
    try:
        with api if api is not None else contextlib.nullcontext():
            _carry_out(request, api)
    except CertificateError as exc:
        return _fail(exc, EXIT_FAILED)
    return EXIT_OK


def _request(args: argparse.Namespace) -> _Request:
    """The arguments, checked before anything is written or asked of the cluster."""
    request = _Request(
        directory=Path(args.dir),
        service=args.service,
        namespace=args.namespace,
        extra_sans=tuple(args.extra_san),
        days=args.days,
        force=args.force,
        secret=args.secret or None,
        inject_ca=args.inject_ca,
        mutating=args.mutating_webhook or None,
        validating=args.validating_webhook or None,
        kubeconfig=args.kubeconfig or None,
    )
    certificates.subject_alt_names(
        service=request.service, namespace=request.namespace, extra_sans=request.extra_sans
    )
    if request.days < 1:
        raise CertificateError(f"--days must be at least 1, not {request.days}")
    if request.secret and not (
        len(request.secret) <= names.MAX_SUBDOMAIN_LENGTH
        and _DNS1123_SUBDOMAIN.fullmatch(request.secret)
    ):
        raise CertificateError(f"--secret {request.secret!r} is not a valid Secret name")
    if request.inject_ca and not (request.mutating or request.validating):
        raise CertificateError("--inject-ca needs --mutating-webhook or --validating-webhook")
    if request.kubeconfig and not Path(request.kubeconfig).exists():
        # Bad input, found before anything is written (as cabundle.connect would say it);
        # a typo too where nothing needs the cluster.
        raise CertificateError(f"{request.kubeconfig}: no such kubeconfig file")
    return request


def _cabundle() -> ModuleType:
    """The cluster half of the command: the Kubernetes client takes half a second to import,
    and only --secret and --inject-ca need it."""
    from webhook.tools import cabundle  # noqa: PLC0415

    return cabundle


def _carry_out(request: _Request, api: Any) -> None:
    """Every step, with `api` (a `cabundle.connect` client) where the request needs the
    cluster."""
    local = certificates.read_bundle(request.directory)
    candidates = [(f"in {request.directory}", local)]
    if api is None:
        _write_local(request, _choose(request, candidates, previous=local), local)
        return
    previous = local
    if request.secret:
        stored = _cabundle().read_secret(api, namespace=request.namespace, name=request.secret)
        candidates.insert(0, (f"in {_secret_name(request)}", stored))
        # The CA to keep trusting is that of the certificate the servers present now,
        # which is the Secret's.
        previous = stored
    bundle = _choose(request, candidates, previous=previous)
    _write_local(request, bundle, local)
    if request.secret and bundle != previous:
        _store(request, api, bundle)
    if request.inject_ca:
        for installed in _cabundle().install_ca_bundle(
            api, bundle.ca_pem, mutating=request.mutating, validating=request.validating
        ):
            _say(str(installed))


def _store(request: _Request, api: Any, bundle: certificates.Bundle) -> None:
    assert request.secret is not None
    outcome = _cabundle().store_secret(
        api,
        namespace=request.namespace,
        name=request.secret,
        ca_pem=bundle.ca_pem,
        cert_pem=bundle.cert_pem,
        key_pem=bundle.key_pem,
    )
    _say(f"{_secret_name(request)}: {outcome}")


def _secret_name(request: _Request) -> str:
    return f"Secret {request.namespace}/{request.secret}"


def _choose(
    request: _Request,
    candidates: list[tuple[str, certificates.Bundle | None]],
    *,
    previous: certificates.Bundle | None,
) -> certificates.Bundle:
    """The first candidate that still fits, else a new bundle that also trusts `previous`."""
    if not request.force:
        for where, candidate in candidates:
            if candidate is None:
                continue
            problem = certificates.why_not_reusable(
                candidate,
                service=request.service,
                namespace=request.namespace,
                extra_sans=request.extra_sans,
            )
            if problem is None:
                _say(f"keeping the certificate {where}, valid until {_date(candidate)}")
                return candidate
            _say(f"replacing the certificate {where}: {problem}")
    bundle = certificates.make_bundle(
        service=request.service,
        namespace=request.namespace,
        extra_sans=request.extra_sans,
        days=request.days,
        also_trust=certificates.outgoing_ca(previous),
    )
    host = certificates.service_host(service=request.service, namespace=request.namespace)
    _say(f"made a new CA and serving certificate for {host}, valid until {_date(bundle)}")
    return bundle


def _write_local(
    request: _Request, bundle: certificates.Bundle, local: certificates.Bundle | None
) -> None:
    files = certificates.Files.at(request.directory)
    if bundle == local:
        _say(f"{files.directory}: up to date")
        return
    certificates.write_bundle(files.directory, bundle)
    _say(f"wrote {files.ca}, {files.cert}, {files.key}")


def _date(bundle: certificates.Bundle) -> str:
    return f"{bundle.not_after:%Y-%m-%d}"


def _say(line: str) -> None:
    print(line, flush=True)


def _fail(exc: CertificateError, code: int) -> int:
    print(f"gpu-share-webhook certs: {exc}", file=sys.stderr, flush=True)
    return code
