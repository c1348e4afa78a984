"""`gpu-share-webhook serve`: the admission server (HTTPS) with probes and metrics (HTTP).

With no flags, from any directory: policies from `./policies` when it exists, else the
policies shipped with the package; certificates from `./certs`, made there (a local CA and
a serving certificate for the Service and localhost) when there are none. Every option also
reads `GPU_SHARE_WEBHOOK_<OPTION>`.

Ports: admission on --port (HTTPS, 8443); `/healthz`, `/readyz` and `/metrics` on
--metrics-port (plain HTTP, 8080); both on --host, 127.0.0.1 unless told otherwise (this
machine only: /metrics has no TLS). In a pod, --host 0.0.0.0 (deploy/ and the chart set it).

Ctrl-C (SIGINT) drains as SIGTERM does; a second Ctrl-C stops at once, exit code 130.

The bounds of connections and requests (timeouts, connection caps, the 7 MiB body limit, the
bytes in flight) are fixed values, listed in docs/operations.md. One process serves; more
load takes more replicas.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any, BinaryIO

from webhook.errors import CertificateError, PolicyError
from webhook.policy import kinds
from webhook.server import certificates, logs
from webhook.server.configuration import Settings
from webhook.server.logs import LOG_FORMATS, LOG_LEVELS, configure_logging
from webhook.tools import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    OPTIONAL_TEXT,
    TEXT,
    add_policies_argument,
    add_service_arguments,
    add_workload_kinds_argument,
    env_name,
    from_env,
    help_text,
    number,
    policies_directory,
    separated,
    whole_number,
)

logger = logging.getLogger(__name__)

# Options `serve` had before its bounds became fixed values: a variable of one of them is
# named in a warning at start-up (it is not read), so that a setting that no longer takes
# effect does not go unnoticed.
RETIRED_OPTIONS = (
    "workers",
    "reload-interval",
    "header-timeout",
    "body-timeout",
    "idle-timeout",
    "max-connections",
    "max-connections-per-source",
    "max-handshakes",
    "max-handshakes-per-source",
    "handshakes-per-second-per-source",
    "max-body-bytes",
    "max-inflight-bytes",
    "max-inflight-bytes-per-source",
    "large-review-share",
    "cache-size",
    "event-loop",
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the admission webhook server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = Settings(policies_dir=Path())
    parser.add_argument(
        "--host",
        default=from_env("host", defaults.host),
        help=help_text(
            "address to listen on, for both ports: 0.0.0.0 for every IPv4 address (in a pod),"
            " :: for every IPv6 one",
            "host",
        ),
    )
    parser.add_argument(
        "--port",
        type=whole_number(1, 65535),
        default=from_env("port", defaults.port),
        help=help_text("HTTPS port for admission reviews", "port"),
    )
    parser.add_argument(
        "--metrics-port",
        type=whole_number(1, 65535),
        default=from_env("metrics-port", defaults.metrics_port),
        help=help_text("plain-HTTP port for /healthz, /readyz and /metrics", "metrics-port"),
    )
    parser.add_argument(
        "--cert-dir",
        metavar="DIR",
        default=from_env("cert-dir", str(defaults.cert_dir)),
        help=help_text(
            "directory with tls.crt and tls.key (a mounted kubernetes.io/tls Secret works);"
            " made there when missing, reloaded when they change",
            "cert-dir",
        ),
    )
    add_policies_argument(
        parser,
        "directory of policy files, reloaded when they change; a file that does not load"
        " never stops the server (its last good version serves on, else its namespaces are"
        " told why)",
    )
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        type=OPTIONAL_TEXT,
        default=from_env("state-dir", None),
        help=help_text(
            "where to keep the last good version of each policy file, for a restarted"
            " container (deploy/: an emptyDir)",
            "state-dir",
            "memory only",
        ),
    )
    add_workload_kinds_argument(parser)
    add_service_arguments(
        parser,
        service_help="the webhook's Service: a certificate made here is for its names",
        namespace_help="namespace of the Service",
        san_help="one more DNS name or IP address for a certificate made here",
    )
    parser.add_argument(
        "--drain-seconds",
        type=number(0),
        default=from_env("drain-seconds", defaults.drain_seconds),
        help=help_text(
            "after SIGTERM: how long to keep answering (not ready, Connection: close)"
            " before closing the port",
            "drain-seconds",
        ),
    )
    parser.add_argument(
        "--client-ca-file",
        metavar="FILE",
        type=OPTIONAL_TEXT,
        default=from_env("client-ca-file", None),
        help=help_text(
            "PEM file of the CAs whose client certificates the admission port accepts,"
            " reloaded when it changes: a handshake without one is refused before any request"
            " is read (the probes and /metrics port is not affected)",
            "client-ca-file",
            "no client certificate asked for",
        ),
    )
    parser.add_argument(
        "--client-names",
        metavar="NAMES",
        type=separated(",", TEXT),
        default=from_env("client-names", ",".join(certificates.DEFAULT_CLIENT_NAMES)),
        help=help_text(
            "with --client-ca-file: the names a client certificate may carry (its subject"
            " common name or a DNS SAN), separated by commas",
            "client-names",
        ),
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=from_env("log-level", "info"),
        help=help_text("least severe log lines written (info: one line per review)", "log-level"),
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=from_env("log-format", "json"),
        help=help_text("json: one JSON object per line; text: for reading", "log-format"),
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    retired = [env_name(o) for o in RETIRED_OPTIONS if env_name(o) in os.environ]
    if retired:
        logger.warning(
            "not read, these settings are fixed now (docs/operations.md lists them): %s",
            ", ".join(retired),
        )
    problem = _usage_problem(args)
    if problem:
        logger.error("%s", problem)
        return EXIT_USAGE
    directory, origin = policies_directory(args.policies)
    directory = directory.absolute()
    if not directory.is_dir():
        logger.error("%s: not a directory of policy files", directory)
        return EXIT_USAGE
    settings = Settings(
        policies_dir=directory,
        cert_dir=Path(args.cert_dir).absolute(),
        host=args.host,
        port=args.port,
        metrics_port=args.metrics_port,
        service=args.service,
        namespace=args.namespace,
        drain_seconds=args.drain_seconds,
        workload_kinds=Path(args.workload_kinds).absolute() if args.workload_kinds else None,
        state_dir=Path(args.state_dir).absolute() if args.state_dir else None,
        client_ca_file=Path(args.client_ca_file).absolute() if args.client_ca_file else None,
        client_names=tuple(_client_names(args.client_names)),
    )
    logger.info("policies from %s (%s)", directory, origin)
    try:
        made = certificates.ensure_local_certs(
            settings.cert_dir,
            service=settings.service,
            namespace=settings.namespace,
            extra_sans=args.extra_san,
        )
    except CertificateError as exc:
        logger.error("cannot serve without a certificate: %s", exc)
        return EXIT_USAGE
    if made:
        logger.info(
            "no certificate in %s: made a local CA (%s) and a serving certificate for %s (%s, %s)",
            settings.cert_dir,
            settings.cert_dir / certificates.CA_FILE,
            certificates.service_host(service=settings.service, namespace=settings.namespace),
            settings.cert_dir / certificates.CERT_FILE,
            settings.cert_dir / certificates.KEY_FILE,
        )
    try:
        # Policy files that do not load do not stop the server (`reload.PolicyWatch`); a
        # workload kinds file is the server's own configuration, checked before it starts.
        kinds.load(settings.workload_kinds)
    except PolicyError as exc:
        logger.error(
            {
                "message": f"cannot use the workload kinds in {settings.workload_kinds}",
                "problems": exc.problems,
            }
        )
        return EXIT_USAGE
    return _serve(settings, log_level=args.log_level, log_format=args.log_format)


def _client_names(value: str | list[str]) -> list[str]:
    # The default is the variable's text form; a value given is already a list.
    parts = value.split(",") if isinstance(value, str) else value
    return [part.strip() for part in parts if part.strip()]


def _usage_problem(args: argparse.Namespace) -> str | None:
    # Each value's own range is checked by its option's type (also when it comes from the
    # environment); what is left is how values go together.
    if args.port == args.metrics_port:
        return f"--port and --metrics-port are both {args.port}; they must differ"
    if args.client_ca_file and not _client_names(args.client_names):
        return "--client-names: at least one name is needed with --client-ca-file"
    return None


def _serve(settings: Settings, *, log_level: str, log_format: str) -> int:
    # JSON review lines skip `logging` (see `logs.JsonLines`); text ones are for reading.
    review_log = None
    if log_format == "json" and logging.getLevelName(log_level.upper()) <= logging.INFO:
        review_log = logs.JsonLines(_review_stream())
    # aiohttp takes a fifth of a second to import: only a server that starts needs it.
    from webhook.server import serving  # noqa: PLC0415

    try:
        serving.run(settings, review_log=review_log)
    except (PolicyError, CertificateError) as exc:
        # The files changed between the checks above and the server's start.
        logger.error("cannot serve: %s", exc)
        return EXIT_USAGE
    except RuntimeError as exc:
        logger.error("cannot serve: %s", exc)
        return EXIT_USAGE
    except socket.gaierror as exc:
        # --host names no address of this machine: a usage error, not a failed start.
        logger.error("--host %r: not an address to listen on: %s", settings.host, exc.strerror)
        return EXIT_USAGE
    except OSError as exc:
        logger.error(
            "cannot serve on %s:%s/%s: %s", settings.host, settings.port, settings.metrics_port, exc
        )
        return EXIT_FAILED
    finally:
        if review_log is not None:
            review_log.flush()
    return EXIT_OK


def _review_stream() -> BinaryIO:
    """Where review lines go: standard error's descriptor itself, unbuffered, in a file
    object of its own that does not close it. `logs.JsonLines` does the buffering, in writes
    of whole lines that a pipe shared with other processes keeps in one piece; a buffered
    stream (what `sys.stderr.buffer` is without PYTHONUNBUFFERED) would cut them anywhere.
    Where standard error has no descriptor (an embedding host), its buffer as it is."""
    try:
        descriptor = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.stderr.buffer
    sys.stderr.flush()
    return io.FileIO(descriptor, "wb", closefd=False)
