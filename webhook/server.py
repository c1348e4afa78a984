"""The admission server: HTTPS for the API server, plain HTTP for probes and metrics.

Transport only. The AdmissionReview codec (`reviews`) decides; this module receives the
bytes, enforces the limits, keeps the policies and the certificate current, answers, counts
and logs. Two applications share one `State`:

- `create_app(settings)` -- HTTPS, the port the API server calls (8443):
  `POST /mutate`, `POST /validate` (policy `default`), `POST /mutate/{policy}`,
  `POST /validate/{policy}`. No Kubernetes API call on this path: the policy comes from the
  URL, which the webhook configurations set per namespace selector.
- `create_probe_app(app)` -- plain HTTP on its own port (8080): `GET /healthz`,
  `GET /readyz`, `GET /metrics`. Separate so that the kubelet and Prometheus need neither
  the CA nor a client certificate, and so that nothing but admission is reachable over TLS.

What an admission request can get back:

- 200 with an AdmissionReview: allowed (with `patch`/`patchType`) or denied with a reason;
  also when the review failed unexpectedly or ran out of time (then a denial with status
  code 500 naming a reference that the log line with the trace carries).
- 400 (not a usable AdmissionReview), 413 (body over 7 MiB), 415 (not application/json),
  with a one-line reason as text. Never a 5xx.

`serve(settings)` runs both until SIGTERM, then drains: readiness turns false at once, the
admission port keeps answering (with `Connection: close`, so clients reconnect elsewhere)
for `drain_seconds`, then stops listening, waits for the requests still in flight, and
returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import re
import secrets
import signal
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import orjson
from aiohttp import web
from cryptography import x509

from webhook import certificates, policies, reviews
from webhook.commands import DEFAULT_NAMESPACE, DEFAULT_SERVICE
from webhook.errors import BadReview, CertificateError, PolicyError
from webhook.metrics import ALLOWED, CONTENT_TYPE, DENIED, ERROR, INVALID, Metrics

logger = logging.getLogger(__name__)
# One line per admission request, for people and log pipelines (see `JsonFormatter`).
review_log = logging.getLogger(f"{__name__}.review")

# A review can carry two objects (object and oldObject on UPDATE) of up to ~3 MB each, the
# API server's own request limit: 7 MiB admits every legitimate review and nothing far larger.
MAX_BODY_BYTES = 7 * 1024 * 1024
# What the API server waits when the webhook configuration sets no timeoutSeconds.
DEFAULT_TIMEOUT_SECONDS = 10.0
# Answer this long before the API server's deadline at most (a fifth of a short timeout):
# the answer must still cross the network and be read before the API server gives up.
DEADLINE_MARGIN_SECONDS = 1.0
# Reviews of bodies up to this size take at most a few milliseconds (a typical pod: ~40 us),
# so they run on the event loop. Larger ones (tens of ms near the limit) run on a thread:
# the loop keeps answering other reviews and probes meanwhile, and the wait can be cut at
# the deadline.
INLINE_REVIEW_BYTES = 256 * 1024
# Threads for large reviews. The GIL makes more of them no faster; two let one large review
# not queue behind another.
REVIEW_THREADS = 2
# After the drain, how long requests still in flight may take; the API server waits at most
# 30 s (the largest timeoutSeconds) for any of them anyway.
SHUTDOWN_TIMEOUT_SECONDS = 30.0
# How long an idle keep-alive connection is kept. Longer than the API server's client keeps
# one (Go's default, 90 s), so that the client closes idle connections, not the server:
# a server closing one races with a request being sent on it, and Go does not retry a POST.
KEEPALIVE_TIMEOUT_SECONDS = 120.0

_JSON = "application/json"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything `serve` can be told; each field has a flag and an environment variable."""

    policies_dir: Path
    cert_dir: Path = Path("certs")
    # A server in a pod listens on all its addresses.
    host: str = "0.0.0.0"
    port: int = 8443
    metrics_port: int = 8080
    # The Service the API server calls: the names the serving certificate is made for.
    service: str = DEFAULT_SERVICE
    namespace: str = DEFAULT_NAMESPACE
    workers: int = 1
    drain_seconds: float = 5.0
    reload_interval: float = 5.0

    @property
    def cert_file(self) -> Path:
        return self.cert_dir / certificates.CERT_FILE

    @property
    def key_file(self) -> Path:
        return self.cert_dir / certificates.KEY_FILE


class ReviewFunction(Protocol):
    """What answers one review: `reviews.review`, or a stand-in given to `create_app`."""

    def __call__(
        self,
        body: bytes,
        *,
        policies: policies.PolicySet,
        policy_name: str,
        endpoint: reviews.Endpoint,
    ) -> reviews.Outcome: ...


# Where the review lines go when not through `logging` (see `JsonLines`).
ReviewLog = Callable[[dict[str, Any]], None]


class ReviewTimeout(Exception):
    """A review did not finish before the API server's deadline."""


# --------------------------------------------------------------------------- shared state


class State:
    """What both applications share: the policies and certificate in force, metrics, flags.

    `policies` is replaced whole by a reload (one reference assignment); a handler reads it
    once, so a review in flight finishes with the set it started with.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        review: ReviewFunction,
        metrics: Metrics,
        review_log: ReviewLog | None,
    ) -> None:
        self.settings = settings
        self.review = review
        self.metrics = metrics
        self._direct_review_log = review_log
        self.ready = False
        self.draining = False
        self.executor: ThreadPoolExecutor | None = None
        # Read before loading, so that a change made during the load shows on the next poll.
        self._policy_files = _policy_files(settings.policies_dir)
        self.policies: policies.PolicySet = policies.load_directory(settings.policies_dir)
        self.ssl_context = certificates.server_ssl_context(settings.cert_file, settings.key_file)
        self.certificates = certificates.CertificateReloader(
            self.ssl_context,
            settings.cert_file,
            settings.key_file,
            on_reload=self._certificate_reloaded,
            on_error=self._certificate_refused,
        )
        self.update_certificate_expiry()

    @property
    def review_lines_wanted(self) -> bool:
        """Whether review lines are written (asked before one is put together)."""
        return self._direct_review_log is not None or review_log.isEnabledFor(logging.INFO)

    def write_review_line(self, line: dict[str, Any]) -> None:
        """Write one review line: straight out when `serve` set a writer, else via logging."""
        if self._direct_review_log is not None:
            self._direct_review_log(line)
        else:
            review_log.info(line)

    def check_policies(self) -> bool:
        """Load the policies again if their files changed; True when a new set is in force.

        A set that does not load is refused: logged with every problem (file, field,
        reason), counted, and the set in force stays. The same broken files are reported
        once, not on every poll.
        """
        directory = self.settings.policies_dir
        version = _mounted_version(directory)
        files = _policy_files(directory)
        if files == self._policy_files:
            return False
        self._policy_files = files
        try:
            loaded = policies.load_directory(directory)
            if _mounted_version(directory) != version:
                # The kubelet swapped the mount while we read: the files may be half old,
                # half new. Look again next time, at one version.
                self._policy_files = None
                return False
        except Exception as exc:
            problems = exc.problems if isinstance(exc, PolicyError) else [repr(exc)]
            logger.error(
                {
                    "message": f"refused the changed policies in {directory}; the policies"
                    f" in force stay ({', '.join(self.policies.names)})",
                    "problems": problems,
                }
            )
            self.metrics.policy_reload_errors.inc()
            return False
        self.policies = loaded
        logger.info({"message": f"loaded policies from {directory}", "policies": loaded.names})
        self.metrics.policy_reloads.inc()
        return True

    def check_certificate(self) -> bool:
        """Serve the certificate files anew if they changed (see `CertificateReloader`)."""
        changed = self.certificates.check()
        self.update_certificate_expiry()
        return changed

    def update_certificate_expiry(self) -> None:
        self.metrics.certificate_expiry.set(self.certificates.seconds_until_expiry())

    def _certificate_reloaded(self, _certificate: x509.Certificate) -> None:
        self.metrics.certificate_reloads.inc()

    def _certificate_refused(self, _error: CertificateError) -> None:
        self.metrics.certificate_reload_errors.inc()


def _mounted_version(directory: Path) -> str | None:
    """Which version of a mounted ConfigMap the directory shows (where `..data` points)."""
    data = directory / "..data"
    return os.path.realpath(data) if data.is_symlink() else None


def _policy_files(directory: Path) -> tuple[tuple[str, bytes], ...] | None:
    """The names and contents of the policy files: what a reload compares.

    Contents rather than modification times: a ConfigMap update swaps the `..data` symlink
    (names and times of the visible files may not change), and an edit can land within one
    timestamp tick. The files are a few kilobytes; reading them every few seconds is free.
    """
    try:
        found = []
        for path in policies.policy_files(directory):
            try:
                found.append((path.name, path.read_bytes()))
            except OSError as exc:
                found.append((path.name, f"unreadable: {exc}".encode()))
        return tuple(found)
    except OSError:
        return None


STATE = web.AppKey("state", State)


# --------------------------------------------------------------------------- applications


def create_app(
    settings: Settings,
    *,
    review: ReviewFunction = reviews.review,
    metrics: Metrics | None = None,
    review_log: ReviewLog | None = None,
) -> web.Application:
    """The HTTPS admission application.

    Loads the policies and the certificate pair now, so that a server that cannot serve
    fails before it listens (PolicyError, CertificateError); the pair must exist (see
    `certificates.ensure_local_certs`). Serve it with `app[STATE].ssl_context`. The policy
    and certificate watchers run while the application runs. `review` replaces the codec's
    `reviews.review` (tests inject faults through it). Review lines go to `review_log`
    when given (`serve` passes a `JsonLines`), else to the logger `webhook.server.review`.
    """
    state = State(settings, review=review, metrics=metrics or Metrics(), review_log=review_log)
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[STATE] = state
    app.router.add_post("/mutate", _mutate)
    app.router.add_post("/mutate/{policy}", _mutate)
    app.router.add_post("/validate", _validate)
    app.router.add_post("/validate/{policy}", _validate)
    app.cleanup_ctx.append(_running)
    return app


def create_probe_app(app: web.Application) -> web.Application:
    """The plain-HTTP application for the kubelet's probes and Prometheus, sharing `app`'s state."""
    probes = web.Application()
    probes[STATE] = app[STATE]
    probes.router.add_get("/healthz", _healthz)
    probes.router.add_get("/readyz", _readyz)
    probes.router.add_get("/metrics", _metrics)
    return probes


async def _running(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE]
    state.executor = ThreadPoolExecutor(REVIEW_THREADS, thread_name_prefix="review")
    watchers = [
        asyncio.create_task(_watch(state.check_policies, state, in_thread=True)),
        # On the loop's thread: OpenSSL does not allow changing a context while another
        # thread starts handshakes from it, and a check is a millisecond of work.
        asyncio.create_task(_watch(state.check_certificate, state, in_thread=False)),
    ]
    state.ready = True
    try:
        yield
    finally:
        state.ready = False
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        # A large review cut off at its deadline may still be running; it is not waited for.
        state.executor.shutdown(wait=False, cancel_futures=True)


async def _watch(check: Callable[[], bool], state: State, *, in_thread: bool) -> None:
    interval = state.settings.reload_interval
    while True:
        await asyncio.sleep(interval)
        try:
            if in_thread:
                await asyncio.to_thread(check)
            else:
                check()
        except Exception:
            logger.exception("checking for changed files failed; will look again")


# --------------------------------------------------------------------------- admission


async def _mutate(request: web.Request) -> web.Response:
    return await _admit(request, "mutate")


async def _validate(request: web.Request) -> web.Response:
    return await _admit(request, "validate")


async def _admit(request: web.Request, endpoint: reviews.Endpoint) -> web.Response:
    state = request.app[STATE]
    exchange = _Exchange(state, endpoint, request.match_info.get("policy", policies.DEFAULT_POLICY))
    state.metrics.in_flight.inc()
    try:
        response = await exchange.answer(request)
    finally:
        state.metrics.in_flight.dec()
    if state.draining:
        # Sets `Connection: close`: the client's next request opens a new connection, which
        # the Service sends to a pod that is not going away.
        response.force_close()
    return response


class _Exchange:
    """One admission request, from its arrival to its answer, counted and logged."""

    __slots__ = ("endpoint", "policy_name", "policy_set", "started", "state")

    def __init__(self, state: State, endpoint: reviews.Endpoint, policy_name: str) -> None:
        self.state = state
        self.endpoint = endpoint
        self.policy_name = policy_name
        self.started = time.perf_counter()
        # One read of the reference: reloads during this review do not change its policies.
        self.policy_set = state.policies

    async def answer(self, request: web.Request) -> web.Response:
        if request.content_type != _JSON:
            return self.invalid(
                415, f"the content type must be {_JSON}, not {request.content_type}"
            )
        length = request.content_length
        if length is not None and length > MAX_BODY_BYTES:
            return self.invalid(413, _too_large(length))
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self.invalid(413, _too_large(None))
        deadline = self.started + _budget(request.rel_url.raw_query_string)
        try:
            outcome = await self.review(body, deadline)
        except BadReview as exc:
            return self.invalid(400, str(exc))
        except Exception as exc:
            return self.internal_error(body, exc)
        try:
            self.record(outcome)
        except Exception:
            # Counting and logging must never cost the API server its answer.
            logger.exception("recording review %s failed", outcome.request.uid)
        return web.Response(body=outcome.body, content_type=_JSON)

    async def review(self, body: bytes, deadline: float) -> reviews.Outcome:
        state = self.state
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            # Receiving took the whole budget (an overloaded server, a slow upload).
            raise ReviewTimeout("the API server's deadline passed before the review started")
        if len(body) <= INLINE_REVIEW_BYTES or state.executor is None:
            return state.review(
                body, policies=self.policy_set, policy_name=self.policy_name, endpoint=self.endpoint
            )
        work = asyncio.get_running_loop().run_in_executor(
            state.executor,
            lambda: state.review(
                body, policies=self.policy_set, policy_name=self.policy_name, endpoint=self.endpoint
            ),
        )
        try:
            return await asyncio.wait_for(work, remaining)
        except TimeoutError:
            # The thread cannot be stopped; it finishes and its result is dropped.
            raise ReviewTimeout(
                "the review did not finish before the API server's deadline"
            ) from None

    def record(self, outcome: reviews.Outcome) -> None:
        seconds = time.perf_counter() - self.started
        decision = outcome.decision
        verdict = ALLOWED if decision.allowed else DENIED
        self.count(verdict, seconds)
        if self.state.review_lines_wanted:
            request = outcome.request
            line: dict[str, Any] = {
                "message": "review",
                "uid": request.uid,
                "namespace": request.namespace,
                "name": request.name,
                "kind": request.kind,
                "operation": request.operation,
                "endpoint": self.endpoint,
                "policy": self.policy_name,
                "decision": verdict,
                "patch_operations": len(decision.patch),
                "ms": round(seconds * 1000, 3),
            }
            if not decision.allowed:
                line["rules"] = sorted({v.rule for v in decision.violations})
            self.state.write_review_line(line)

    def count(self, decision: str, seconds: float) -> None:
        self.state.metrics.count_review(self.endpoint, self.policy_label(), decision, seconds)

    def policy_label(self) -> str:
        # The path segment comes from whoever can reach the port: only names of policies in
        # force become label values, so a scanner cannot grow the metric without bound.
        name = self.policy_name
        return name if self.policy_set.get(name) is not None else reviews.UNKNOWN_POLICY

    def invalid(self, status: int, reason: str) -> web.Response:
        """A 4xx for a request that is not a usable AdmissionReview."""
        seconds = time.perf_counter() - self.started
        with contextlib.suppress(Exception):
            self.count(INVALID, seconds)
            review_log.warning(
                {
                    "message": "refused request",
                    "endpoint": self.endpoint,
                    "policy": self.policy_name,
                    "status": status,
                    "reason": reason,
                    "ms": round(seconds * 1000, 3),
                }
            )
        response = web.Response(status=status, text=reason + "\n")
        if status == 413:
            # The rest of an oversized body is not worth keeping the connection for.
            response.force_close()
        return response

    def internal_error(self, body: bytes, exc: Exception) -> web.Response:
        """Still an AdmissionReview with the request's uid, denying, with a reference."""
        reference = secrets.token_hex(4)
        uid = reviews.uid_of(body)
        seconds = time.perf_counter() - self.started
        with contextlib.suppress(Exception):
            if isinstance(exc, ReviewTimeout):
                logger.error("review %s (uid %s) ran out of time: %s", reference, uid, exc)
            else:
                logger.error("review %s (uid %s) failed unexpectedly", reference, uid, exc_info=exc)
            self.count(ERROR, seconds)
            self.state.write_review_line(
                {
                    "message": "review",
                    "uid": uid,
                    "endpoint": self.endpoint,
                    "policy": self.policy_name,
                    "decision": ERROR,
                    "error": reference,
                    "ms": round(seconds * 1000, 3),
                }
            )
        if uid is None:
            # Only a fault before the uid was known gets here (a real review raises BadReview
            # for such a body): there is no AdmissionReview to answer.
            return web.Response(
                status=400,
                text=f"the body has no readable request uid (internal error {reference})\n",
            )
        return web.Response(body=reviews.internal_error(uid, reference), content_type=_JSON)


@functools.lru_cache(maxsize=64)
def _budget(query: str) -> float:
    """Seconds a review may take: the API server's `?timeout=` less a margin.

    Past it, the answer is an internal-error denial (`_Exchange.internal_error`): a denial
    the API server still reads and shows the user, rather than a timeout it would resolve by
    the webhook's failurePolicy with a less helpful message. Cached by the raw query string:
    the API server sends the same one for every review of a webhook.
    """
    raw = urllib.parse.parse_qs(query).get("timeout", [""])[-1] if query else ""
    timeout = parse_duration(raw) if raw else None
    if timeout is None or timeout <= 0:
        timeout = DEFAULT_TIMEOUT_SECONDS
    return timeout - min(DEADLINE_MARGIN_SECONDS, timeout / 5)


_DURATION = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_duration(text: str) -> float | None:
    """Seconds in a Go duration as the API server writes `?timeout=` ("10s", "1m0s",
    "1.5s"); a bare number is seconds. None when it is neither."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    if not _DURATION.fullmatch(text):
        return None
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


def _too_large(length: int | None) -> str:
    size = f" ({length} bytes)" if length is not None else ""
    return f"the body{size} is larger than the limit of {MAX_BODY_BYTES} bytes (7 MiB)"


# --------------------------------------------------------------------------- probes


async def _healthz(request: web.Request) -> web.Response:
    # Alive is answering at all: a wedged event loop does not get here.
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.draining:
        return web.Response(status=503, text="draining: shutting down\n")
    if not state.ready:
        return web.Response(status=503, text="starting\n")
    return web.Response(text="ok\n")


async def _metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    # The expiry moves with the clock, not only on reloads.
    state.update_certificate_expiry()
    response = web.Response(body=state.metrics.exposition())
    # With parameters, so set as a header: aiohttp's content_type= takes none.
    response.headers["Content-Type"] = CONTENT_TYPE
    return response


# --------------------------------------------------------------------------- running


async def serve(
    settings: Settings, *, reuse_port: bool = False, review_log: ReviewLog | None = None
) -> None:
    """Serve until SIGTERM or SIGINT, then drain and return (see the module docstring).

    `reuse_port` lets several worker processes listen on the same ports (SO_REUSEPORT);
    the kernel spreads new connections over them.
    """
    app = create_app(settings, review_log=review_log)
    state = app[STATE]
    # What start-up made (modules, policies: ~70,000 objects) lives as long as the process.
    # Out of the collector's sight, a full collection, which holds up every request in
    # flight, takes microseconds instead of ~13 ms.
    gc.collect()
    gc.freeze()
    runner = web.AppRunner(
        app,
        access_log=None,  # one review line per request instead, see `_record`
        shutdown_timeout=SHUTDOWN_TIMEOUT_SECONDS,
        keepalive_timeout=KEEPALIVE_TIMEOUT_SECONDS,
    )
    probe_runner = web.AppRunner(create_probe_app(app), access_log=None, shutdown_timeout=1.0)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await runner.setup()
    await probe_runner.setup()
    try:
        await web.TCPSite(
            runner,
            settings.host,
            settings.port,
            ssl_context=state.ssl_context,
            reuse_port=reuse_port or None,
        ).start()
        # Last: readiness can only be asked for once admission is listening.
        await web.TCPSite(
            probe_runner, settings.host, settings.metrics_port, reuse_port=reuse_port or None
        ).start()
        logger.info(
            {
                "message": f"serving admission reviews on https://{settings.host}:{settings.port}"
                f", probes and metrics on http://{settings.host}:{settings.metrics_port}",
                "policies": state.policies.names,
                "policies_dir": str(settings.policies_dir),
                "certificate": str(settings.cert_file),
                "certificate_expires": f"{state.certificates.not_after:%Y-%m-%dT%H:%M:%SZ}",
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
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        # Stops listening, closes idle connections, waits for the requests in flight.
        await runner.cleanup()
        await probe_runner.cleanup()
    logger.info("stopped")


# --------------------------------------------------------------------------- logging


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, then the message.

    A record whose message is a dict (the review lines, reload reports) has its keys merged
    into the object, so log pipelines get fields rather than text to parse.
    """

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        if isinstance(record.msg, dict):
            line.update(record.msg)
        else:
            line["message"] = record.getMessage()
        if record.exc_info:
            line["trace"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class JsonLines:
    """Writes review lines straight to a binary stream, shaped as `JsonFormatter` shapes records.

    The same line through `logging` costs five times as much (a LogRecord, the caller's frame,
    handler locks): measured with bench/server.py, about 30 us of the server's CPU per
    review under load, a sixth of all it spends. A flush per line (a write system call each)
    cost another ~15 us, so lines are flushed together, at most `FLUSH_SECONDS` after they
    are written, when another log line is written (its handler flushes the same stream,
    which keeps the order), and at exit.
    """

    FLUSH_SECONDS = 0.2

    def __init__(self, stream: BinaryIO, *, logger_name: str = review_log.name) -> None:
        self._stream = stream
        self._logger = logger_name
        self._flush_due = False

    def __call__(self, line: dict[str, Any]) -> None:
        record: dict[str, Any] = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "level": "info",
            "logger": self._logger,
        }
        record.update(line)
        self._stream.write(orjson.dumps(record, default=str, option=orjson.OPT_APPEND_NEWLINE))
        if self._flush_due:
            return
        try:
            asyncio.get_running_loop().call_later(self.FLUSH_SECONDS, self.flush)
        except RuntimeError:  # no event loop: write through
            self.flush()
            return
        self._flush_due = True

    def flush(self) -> None:
        self._flush_due = False
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()


class TextFormatter(logging.Formatter):
    """Plain lines for a person at a terminal; dict messages are shown as `key=value`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        if isinstance(record.msg, dict):
            fields = dict(record.msg)
            text = str(fields.pop("message", ""))
            extra = " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
            record.message = f"{text} {extra}".strip()
        return super().formatMessage(record)


def _text_value(value: object) -> str:
    if isinstance(value, str) and value and " " not in value:
        return value
    return orjson.dumps(value, default=str).decode()
