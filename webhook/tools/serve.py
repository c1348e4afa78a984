"""`gpu-share-webhook serve`: the admission server (HTTPS) with probes and metrics (HTTP).

With no flags, from any directory: policies from `./policies` when it exists, else the
policies shipped with the package; certificates from `./certs`, made there (a local CA and
a serving certificate for the Service and localhost) when there are none. Every option also
reads `GPU_SHARE_WEBHOOK_<OPTION>`.

Ports: admission on --port (HTTPS, 8443); `/healthz`, `/readyz` and `/metrics` on
--metrics-port (plain HTTP, 8080); both on --host, 127.0.0.1 unless told otherwise (this
machine only: /metrics has no TLS). In a pod, --host 0.0.0.0 (deploy/ and the chart set it).

Ctrl-C (SIGINT) drains as SIGTERM does; a second Ctrl-C stops at once, exit code 130.

--workers N runs N server processes on the same ports (SO_REUSEPORT; the kernel spreads
connections over them) under this process, which restarts a worker that dies, passes
SIGTERM on and exits when they have drained. A worker whose supervisor is killed outright
(SIGKILL, the OOM killer) drains and exits as on SIGTERM. Their metrics are added up through
prometheus-client's multiprocess mode, in a temporary directory (set
PROMETHEUS_MULTIPROC_DIR to choose it; it must be writable).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

from prometheus_client import multiprocess

from webhook.errors import CertificateError, PolicyError
from webhook.policy import kinds
from webhook.server import certificates, logs, serving
from webhook.server.configuration import Settings
from webhook.server.limits import Limits
from webhook.server.logs import LOG_FORMATS, LOG_LEVELS, configure_logging
from webhook.tools import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    OPTIONAL_TEXT,
    TEXT,
    add_policies_argument,
    add_service_arguments,
    add_workload_kinds_argument,
    from_env,
    help_text,
    number,
    policies_directory,
    separated,
    whole_number,
)

logger = logging.getLogger(__name__)


_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# A worker that dies sooner than this after it started is failing to start (a port in use,
# unreadable files): restarting it would only loop, so the whole server stops instead.
_CRASH_LOOP_SECONDS = 10.0
# Between a worker dying and its replacement starting.
_RESTART_DELAY_SECONDS = 1.0
# How often a worker looks whether its supervisor is still there.
_SUPERVISOR_CHECK_SECONDS = 1.0


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
        "--workers",
        type=whole_number(1),
        default=from_env("workers", defaults.workers),
        help=help_text("server processes sharing the ports (SO_REUSEPORT)", "workers"),
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
        "--reload-interval",
        type=number(positive=True),
        default=from_env("reload-interval", defaults.reload_interval),
        help=help_text(
            "seconds between looks at the policy and certificate files", "reload-interval"
        ),
    )
    _add_limit_arguments(parser, defaults.limits)
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
        "--cache-size",
        type=whole_number(0),
        default=from_env("cache-size", defaults.cache_size),
        help=help_text(
            "answers kept for reviews that differ from an earlier one only in their uid and"
            " service account volume name, as the pods of one Deployment do (0: none, and"
            " no review is looked up)",
            "cache-size",
        ),
    )
    parser.add_argument(
        "--event-loop",
        choices=serving.EVENT_LOOPS,
        default=from_env("event-loop", defaults.event_loop),
        help=help_text("auto: uvloop where it is installed, else asyncio", "event-loop"),
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


def _add_limit_arguments(parser: argparse.ArgumentParser, limits: Limits) -> None:
    positive = number(positive=True)
    for option, value_type, what in (
        (
            "header-timeout",
            positive,
            "seconds for a TLS handshake and then a request's line and headers to arrive",
        ),
        ("body-timeout", positive, "seconds for a request's body to arrive after its headers"),
        (
            "idle-timeout",
            positive,
            "seconds an idle keep-alive connection is kept (above the API server's 90 s)",
        ),
        (
            "max-connections",
            whole_number(1),
            "open admission connections; a new one beyond replaces the one idle for longest"
            " (of the address with the most), or is closed before its handshake when none is"
            " idle",
        ),
        (
            "max-connections-per-source",
            whole_number(1),
            "open admission connections from one source address; a new one beyond replaces"
            " that address's one idle for longest, or is closed before its handshake",
        ),
        (
            "max-handshakes",
            whole_number(1),
            "TLS handshakes running at once; the others wait their turn, addresses in turn",
        ),
        (
            "max-handshakes-per-source",
            whole_number(1),
            "TLS handshakes running at once for one source address",
        ),
        (
            "handshakes-per-second-per-source",
            number(1),
            "TLS handshakes begun per second for one source address (as many at once); the"
            " others wait their turn",
        ),
        ("max-body-bytes", whole_number(1024), "largest review body (413 beyond)"),
        (
            "max-inflight-bytes",
            whole_number(1024),
            "review bytes being received or reviewed at once (429 beyond)",
        ),
        (
            "max-inflight-bytes-per-source",
            whole_number(1024),
            "review bytes being received or reviewed at once for one source address (429 beyond)",
        ),
        (
            "large-review-share",
            number(positive=True),
            "share of one core the reviews of bodies over 16 KiB from one source"
            " address may take on average (429 for its large ones beyond, until it comes down)",
        ),
    ):
        parser.add_argument(
            f"--{option}",
            type=value_type,
            default=from_env(option, getattr(limits, option.replace("-", "_"))),
            help=help_text(what, option),
        )


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
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
        workers=args.workers,
        drain_seconds=args.drain_seconds,
        reload_interval=args.reload_interval,
        workload_kinds=Path(args.workload_kinds).absolute() if args.workload_kinds else None,
        state_dir=Path(args.state_dir).absolute() if args.state_dir else None,
        # Each limit has the flag of its name (`_add_limit_arguments`).
        limits=Limits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)}),
        cache_size=args.cache_size,
        event_loop=args.event_loop,
        client_ca_file=Path(args.client_ca_file).absolute() if args.client_ca_file else None,
        client_names=tuple(_client_names(args.client_names)),
    )
    if settings.limits.problems():
        logger.error("%s", "; ".join(settings.limits.problems()))
        return EXIT_USAGE
    logger.info("policies from %s (%s)", directory, origin)
    try:
        # Once, here, before any worker starts: workers must not race to make a CA each.
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
        # Policy files that do not load do not stop the server (`watching.PolicyWatch`); a
        # workload kinds file is the server's own configuration, checked before any worker.
        kinds.load(settings.workload_kinds)
    except PolicyError as exc:
        logger.error(
            {
                "message": f"cannot use the workload kinds in {settings.workload_kinds}",
                "problems": exc.problems,
            }
        )
        return EXIT_USAGE
    if settings.workers == 1:
        return _serve(
            settings, reuse_port=False, log_level=args.log_level, log_format=args.log_format
        )
    return supervise(settings, log_level=args.log_level, log_format=args.log_format)


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
    if args.workers > 1 and not hasattr(socket, "SO_REUSEPORT"):
        return "--workers above 1 needs SO_REUSEPORT, which this system does not have"
    return None


def _serve(
    settings: Settings,
    *,
    reuse_port: bool,
    log_level: str,
    log_format: str,
    interrupt: bool = True,
) -> int:
    # JSON review lines skip `logging` (see `logs.JsonLines`); text ones are for reading.
    review_log = None
    if log_format == "json" and logging.getLevelName(log_level.upper()) <= logging.INFO:
        review_log = logs.JsonLines(_review_stream())
    try:
        serving.run(settings, reuse_port=reuse_port, review_log=review_log, interrupt=interrupt)
    except (PolicyError, CertificateError) as exc:
        # The files changed between the checks above and the worker's start.
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
    of whole lines that a pipe shared with other workers keeps in one piece; a buffered
    stream (what `sys.stderr.buffer` is without PYTHONUNBUFFERED) would cut them anywhere.
    Where standard error has no descriptor (an embedding host), its buffer as it is."""
    try:
        descriptor = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.stderr.buffer
    sys.stderr.flush()
    return io.FileIO(descriptor, "wb", closefd=False)


# --------------------------------------------------------------------------- workers


def supervise(settings: Settings, *, log_level: str, log_format: str) -> int:
    """Run `settings.workers` worker processes until SIGTERM; 0 when all drained cleanly."""
    metrics_dir, own_dir = _metrics_directory()
    # Before any worker imports prometheus-client: it picks its mode from this on import.
    os.environ[_MULTIPROC_ENV] = str(metrics_dir)
    context = multiprocessing.get_context("spawn")
    workers: dict[int, BaseProcess] = {}
    started: dict[int, float] = {}
    stopping = False
    failed = abandoned = False

    def start(index: int) -> None:
        process = context.Process(
            target=_worker,
            args=(settings, log_level, log_format, os.getpid()),
            name=f"gpu-share-webhook-worker-{index}",
        )
        process.start()
        workers[index], started[index] = process, time.monotonic()
        if stopping:  # a signal came while it was starting
            _terminate(process)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping and signum == signal.SIGINT:
            raise _Abandoned
        if not stopping:
            logger.info("%s: stopping %d workers", signal.Signals(signum).name, len(workers))
        stopping = True
        for process in workers.values():
            _terminate(process)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for index in range(settings.workers):
            start(index)
        logger.info("started %d workers, metrics added up in %s", settings.workers, metrics_dir)
        while workers:
            multiprocessing.connection.wait([p.sentinel for p in workers.values()], timeout=1.0)
            for index, process in list(workers.items()):
                if process.is_alive():
                    continue
                process.join()
                del workers[index]
                _forget(process.pid, metrics_dir)
                code = process.exitcode
                if stopping:
                    # Killed by the forwarded SIGTERM before it set up its handler: it had
                    # no connection yet, nothing was lost.
                    if code not in (0, -signal.SIGTERM):
                        logger.error("worker %d exited with %s while stopping", index, code)
                        failed = True
                    continue
                lived = time.monotonic() - started[index]
                if lived < _CRASH_LOOP_SECONDS:
                    logger.error(
                        "worker %d exited with %s %.1f s after it started; stopping all",
                        index,
                        code,
                        lived,
                    )
                    failed = stopping = True
                    for other in workers.values():
                        _terminate(other)
                    continue
                logger.error("worker %d exited with %s; starting a new one", index, code)
                time.sleep(_RESTART_DELAY_SECONDS)
                if not stopping:
                    start(index)
    except _Abandoned:
        abandoned = True
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for process in workers.values():
            process.kill()
            process.join()
        if own_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    if abandoned:
        logger.error("interrupted again: stopped the workers without finishing the drain")
        return EXIT_INTERRUPTED
    logger.info("all workers stopped")
    return EXIT_FAILED if failed else EXIT_OK


class _Abandoned(Exception):
    """A second Ctrl-C while the workers drain: end them now."""


def _worker(settings: Settings, log_level: str, log_format: str, supervisor: int) -> None:
    """A worker process: one server on the shared ports."""
    configure_logging(log_level, log_format)
    # Ctrl-C reaches every process of the terminal's group: the supervisor answers it (the
    # first with SIGTERM to each worker, the second by ending them all); a worker does not.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _stop_without(supervisor)
    sys.exit(
        _serve(
            settings,
            reuse_port=True,
            log_level=log_level,
            log_format=log_format,
            interrupt=False,
        )
    )


def _stop_without(supervisor: int) -> None:
    """Drain and exit, as on SIGTERM, once the process `supervisor` is no longer the parent.

    Without it, workers of a supervisor killed outright serve on: nobody restarts them or
    passes SIGTERM on, and they share the port (SO_REUSEPORT) with a server started anew in
    its place. A thread, not a signal from the kernel (Linux's PR_SET_PDEATHSIG): it works on
    every system, and a look once a second costs nothing.
    """

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(_SUPERVISOR_CHECK_SECONDS)
        logger.warning("the supervisor (pid %d) is gone: stopping this worker", supervisor)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


def _terminate(process: BaseProcess) -> None:
    with contextlib.suppress(ProcessLookupError, ValueError, AttributeError):
        process.terminate()


def _metrics_directory() -> tuple[Path, bool]:
    """Where the workers keep their metrics, and whether this process made it (and removes it).

    A directory the admin chose is emptied first: values left by an earlier run would be
    added to this one's.
    """
    chosen = os.environ.get(_MULTIPROC_ENV)
    if chosen:
        path = Path(chosen)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink(missing_ok=True)
        return path, False
    return Path(tempfile.mkdtemp(prefix="gpu-share-webhook-metrics-")), True


def _forget(pid: int | None, metrics_dir: Path) -> None:
    # Drops a dead worker's live gauges (in flight, certificate expiry); its counters stay.
    if pid is None:
        return
    with contextlib.suppress(OSError):
        multiprocess.mark_process_dead(pid, str(metrics_dir))  # type: ignore[no-untyped-call]
