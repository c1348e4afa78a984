"""Running a server: both applications on their ports until SIGTERM, then a drain.

`serve(settings)` listens for admission through `connections.Listener` (every connection
bounded, see `limits`), and for probes and metrics with aiohttp's own site. On SIGTERM or
SIGINT: readiness turns false at once, the admission port keeps answering (with
`Connection: close`, so clients reconnect elsewhere) for `drain_seconds`, then stops
listening, closes idle connections, waits for the requests still in flight, and returns.
A SIGINT after that has begun (Ctrl-C again: a person who will not wait) ends the process at
once with exit code 130 and one line saying the drain was not finished; a second SIGTERM
changes nothing (the kubelet follows its SIGTERM with SIGKILL, not another SIGTERM).

`run(settings)` is `serve` on uvloop where it is installed, else on asyncio's loop. uvloop
does not make the server faster (bench/README.md), but an idle TLS connection costs ~30 KB
on it against ~280 KB on asyncio's loop, whose TLS layer keeps a 256 KiB read buffer for
each connection from the start: with the connection caps of `limits` that is the
difference between tens and hundreds of megabytes (docs/robustness.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import resource
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from webhook.server import app, configuration, connections, logs, states

logger = logging.getLogger(__name__)

# After the drain, how long requests still in flight may take; the API server waits at most
# 30 s (the largest timeoutSeconds) for any of them anyway.
SHUTDOWN_TIMEOUT_SECONDS = 30.0
# How a shell reports a process ended by SIGINT (128 + 2): what a second Ctrl-C exits with.
EXIT_INTERRUPTED = 128 + signal.SIGINT


@dataclass(frozen=True, slots=True)
class Running:
    """A server that is listening: its state and the ports it got (for a port 0)."""

    app: web.Application
    state: states.State
    port: int
    metrics_port: int


@contextlib.asynccontextmanager
async def running(
    settings: configuration.Settings,
    *,
    review_log: logs.ReviewLog | None = None,
    tls: bool = True,
) -> AsyncIterator[Running]:
    """Both applications listening as `serve` runs them; stopped (not drained) on exit.
    Without `tls`, admission is plain HTTP (for tests of what lies behind TLS)."""
    admission_app = app.create_app(settings, review_log=review_log)
    state = admission_app[states.STATE]
    limits = settings.limits
    runner = web.AppRunner(
        admission_app,
        access_log=None,  # one review line per request instead
        shutdown_timeout=SHUTDOWN_TIMEOUT_SECONDS,
        keepalive_timeout=limits.idle_timeout,
        # No reading and discarding the rest of a body left unread (aiohttp's default: up to
        # 10 s of it): a request refused before its body (408, 413, 429) closes its connection.
        lingering_time=0,
    )
    probe_runner = web.AppRunner(
        app.create_probe_app(admission_app), access_log=None, shutdown_timeout=1.0
    )
    await runner.setup()
    await probe_runner.setup()
    assert runner.server is not None
    listener = connections.Listener(
        runner.server,
        limits,
        tls=(lambda: state.ssl_context) if tls else None,
        check_client=state.client_refusal if state.clients is not None else None,
        count=state.metrics.count_closed,
        over_share=lambda address: state.budget.wait(address) > 0,
    )
    state.listener = listener
    try:
        port = await listener.start(settings.host, settings.port)
        # Last: readiness can only be asked for once admission is listening.
        probe_site = web.TCPSite(probe_runner, settings.host, settings.metrics_port)
        await probe_site.start()
        yield Running(admission_app, state, port, probe_site.port)
    finally:
        await listener.close()
        # Closes idle connections, waits for the requests in flight, runs the app's cleanup.
        await runner.cleanup()
        await probe_runner.cleanup()
        listener.abort_all()


async def serve(
    settings: configuration.Settings, *, review_log: logs.ReviewLog | None = None
) -> None:
    """Serve until SIGTERM or SIGINT, then drain and return (see the module docstring)."""
    _raise_open_files_limit()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)

    def on_signal(signum: signal.Signals) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            _abandon(review_log)
        stop.set()
        if signum == signal.SIGINT:
            logger.info("interrupted: draining (Ctrl-C again to stop at once)")

    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        async with running(settings, review_log=review_log) as server:
            state = server.state
            # What start-up made (modules, policies: ~70,000 objects) lives as long as the
            # process. Out of the collector's sight, a full collection, which holds up every
            # request in flight, takes microseconds instead of ~13 ms.
            gc.collect()
            gc.freeze()
            logger.info(
                {
                    "message": f"serving admission reviews on https://{settings.host}:"
                    f"{server.port}, probes and metrics on http://{settings.host}:"
                    f"{server.metrics_port}",
                    "policies": state.policies.names,
                    "policies_not_in_force": sorted(state.policies.broken),
                    "policies_dir": str(settings.policies_dir),
                    "certificate": str(settings.cert_file),
                    "certificate_expires": f"{state.certificates.not_after:%Y-%m-%dT%H:%M:%SZ}",
                    "event_loop": type(loop).__module__.split(".")[0],
                    "limits": {k: getattr(settings.limits, k) for k in settings.limits.__slots__},
                }
            )
            await stop.wait()
            state.draining = True
            logger.info(
                "shutting down: not ready any more, answering for %.1f s more before closing",
                settings.drain_seconds,
            )
            await asyncio.sleep(settings.drain_seconds)
            logger.info("drained; closing once the requests in flight are answered")
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
    logger.info("stopped")


def _abandon(review_log: logs.ReviewLog | None) -> None:
    """End the process now, requests in flight and all: the second Ctrl-C."""
    flush = getattr(review_log, "flush", None)
    if flush is not None:
        with contextlib.suppress(Exception):
            flush()
    logger.error("interrupted again: stopped without finishing the drain")
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    os._exit(EXIT_INTERRUPTED)


def run(settings: configuration.Settings, *, review_log: logs.ReviewLog | None = None) -> None:
    """`serve` on uvloop where it is installed, else on asyncio's loop."""
    main = serve(settings, review_log=review_log)
    try:
        import uvloop  # noqa: PLC0415 - not on every platform
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def _raise_open_files_limit() -> None:
    """Each connection is a file descriptor: take what the container allows (often 1024
    soft, 1048576 hard), so that the connection caps of `limits`, not the soft limit, are
    the bound."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
