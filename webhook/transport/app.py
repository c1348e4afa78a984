"""The two aiohttp applications of a server, and what they share.

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
  code 500 naming a reference that the log line with the trace carries);
- 400 (not a usable AdmissionReview), 408 (the body did not arrive within the body
  timeout), 413 (body over the limit, 7 MiB), 415 (not application/json), 429 (too many
  review bytes in flight: retry), with a one-line reason as text. Never a 5xx.

The handler is one function per endpoint, closed over the state it needs: a review is a
few dictionary lookups, the codec (`reviews.review`, with the decision cache) and one
counter, one histogram and one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import secrets
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aiohttp import StreamReader, web

from webhook import certificates, kinds, names, policies, reviews, watching
from webhook.core import pods, reviewing
from webhook.errors import BadReview, CertificateError
from webhook.transport import memory
from webhook.transport.limits import Connections, Limits
from webhook.transport.logs import REVIEW_LOGGER
from webhook.transport.metrics import (
    ALLOWED,
    CONTENT_TYPE,
    DENIED,
    ERROR,
    INVALID,
    PUBLISH_SECONDS,
    Metrics,
)

logger = logging.getLogger(__name__)
review_log = logging.getLogger(REVIEW_LOGGER)

MAX_BODY_BYTES = Limits().max_body_bytes
# Answer this long before the API server's deadline at most (a fifth of a short timeout):
# the answer must still cross the network and be read before the API server gives up.
DEADLINE_MARGIN_SECONDS = 1.0
# Reviews of bodies up to this size take at most a few milliseconds (a typical pod: ~25 us),
# so they run on the event loop. Larger ones (tens of ms near the limit) run on a thread:
# the loop keeps answering other reviews and probes meanwhile, and the wait can be cut at
# the deadline.
INLINE_REVIEW_BYTES = 256 * 1024
# Bytes of small reviews (up to INLINE_REVIEW_BYTES each) that may be in flight beyond
# --max-inflight-bytes: large reviews alone never get the ordinary ones refused. Without it,
# two 7 MiB reviews filled the 16 MiB and pods of a few KB were answered 429 (measured in
# bench/soak.py with 40 clients sending 7 MiB). 4 MiB is hundreds of ordinary reviews.
SMALL_REVIEWS_RESERVE_BYTES = 4 * 1024 * 1024
# Threads for large reviews. The GIL makes more of them no faster; two let one large review
# not queue behind another.
REVIEW_THREADS = 2
# Decisions kept per process (`reviewing.Cache`), and as many whole answers
# (`reviews.Answers`, which also stops at `reviews.ANSWERS_MAX_BYTES`, 8 MiB). Only reviews of
# bodies up to `reviews.CACHE_MAX_BODY_BYTES` (16 KiB) are cached, so the decisions hold
# 32 MB at the very most (a typical entry: well under 1 KB).
CACHE_SIZE = 2048
# A 4xx reason is one line of at most this many characters, whatever the body held.
REASON_LENGTH = 300

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
    service: str = names.DEFAULT_SERVICE
    namespace: str = names.DEFAULT_NAMESPACE
    workers: int = 1
    drain_seconds: float = 5.0
    reload_interval: float = 5.0
    # A WorkloadKinds file (None: the one shipped with the package).
    workload_kinds: Path | None = None
    # Where the last good policy files are kept for a restarted container (None: memory only).
    state_dir: Path | None = None
    limits: Limits = field(default_factory=Limits)
    cache_size: int = CACHE_SIZE
    # auto: uvloop where it is installed, else asyncio.
    event_loop: str = "auto"

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
        kinds: pods.Kinds,
    ) -> reviews.Outcome: ...


# Where the review lines go when not through `logging` (see `logs.JsonLines`).
ReviewLog = Callable[[dict[str, Any]], None]


class ReviewTimeout(Exception):
    """A review did not finish before the API server's deadline."""


# --------------------------------------------------------------------------- shared state


class State:
    """What both applications share: the policies and certificate in force, metrics, flags.

    `policies.policies` is replaced whole by a reload (one reference assignment); a handler
    reads it once, so a review in flight finishes with the set it started with.
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
        self.metrics = metrics
        self.cache = reviewing.Cache(settings.cache_size)
        self.answers = reviews.Answers(settings.cache_size)
        if review is reviews.review:
            review = functools.partial(reviews.review, cache=self.cache, answers=self.answers)
        self.review = review
        self._direct_review_log = review_log
        self.ready = False
        self.draining = False
        self.executor: ThreadPoolExecutor | None = None
        # Set by `serving` when it listens through `limits.listen`.
        self.connections: Connections | None = None
        # Review bytes being received or reviewed, of large and of small reviews
        # (`_Held`, `_Route.hold`).
        self.inflight_large_bytes = 0
        self.inflight_small_bytes = 0
        self.trimmer = memory.Trimmer()
        self.policy_watch = watching.PolicyWatch(
            settings.policies_dir, state_dir=settings.state_dir
        )
        self.kinds = pods.kinds_by_name(kinds.all_kinds(settings.workload_kinds))
        self.ssl_context = certificates.server_ssl_context(settings.cert_file, settings.key_file)
        self.certificates = watching.CertificateWatch(
            self.ssl_context,
            settings.cert_file,
            settings.key_file,
            on_reload=lambda _certificate: metrics.certificate_reloads.inc(),
            on_error=self._certificate_refused,
        )
        self.update_gauges()

    @property
    def policies(self) -> policies.PolicySet:
        return self.policy_watch.policies

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
        """Load the policy files again if they changed (see `watching.PolicyWatch`)."""
        before = dict(self.policy_watch.problems)
        changed = self.policy_watch.check()
        problems = self.policy_watch.problems
        if changed and set(problems) - set(before):
            self.metrics.policy_reload_errors.inc()
        elif changed:
            self.metrics.policy_reloads.inc()
        self.update_gauges()
        return changed

    def check_certificate(self) -> bool:
        """Serve the certificate files anew if they changed (see `watching.CertificateWatch`)."""
        changed = self.certificates.check()
        self.update_gauges()
        return changed

    def update_gauges(self) -> None:
        metrics = self.metrics
        metrics.certificate_expiry.set(self.certificates.seconds_until_expiry())
        metrics.policy_files_not_loaded.set(len(self.policy_watch.problems))
        metrics.decision_cache_hits.set(self.cache.hits + self.answers.hits)
        if self.connections is not None:
            metrics.connections.set(len(self.connections))

    def _certificate_refused(self, _error: CertificateError) -> None:
        self.metrics.certificate_reload_errors.inc()


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
    fails before it listens (CertificateError; a policy file that does not load does not
    stop it, see `watching.PolicyWatch`); the pair must exist (see
    `certificates.ensure_local_certs`). Serve it with `app[STATE].ssl_context`. The policy
    and certificate watchers run while the application runs. `review` replaces the codec's
    `reviews.review` (tests inject faults through it). Review lines go to `review_log`
    when given (`serve` passes a `logs.JsonLines`), else to the logger `webhook.review`.
    """
    state = State(settings, review=review, metrics=metrics or Metrics(), review_log=review_log)
    app = web.Application(client_max_size=settings.limits.max_body_bytes)
    app[STATE] = state
    for endpoint in reviews.ENDPOINTS:
        app.router.add_post(f"/{endpoint}", _Route(state, endpoint, names.DEFAULT_POLICY).handle)
        app.router.add_post(f"/{endpoint}/{{policy}}", _Route(state, endpoint, None).handle)
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
    if state.metrics.multiprocess:
        # The other workers answer scrapes too: they read what this one published.
        watchers.append(asyncio.create_task(_publish_metrics(state.metrics)))
    state.ready = True
    try:
        yield
    finally:
        state.ready = False
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        try:
            # The last counts of this process (with --workers, for the others to add up).
            state.metrics.publish()
        except Exception:
            logger.exception("publishing the metrics failed")
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


async def _publish_metrics(metrics: Metrics) -> None:
    while True:
        await asyncio.sleep(PUBLISH_SECONDS)
        try:
            metrics.publish()
        except Exception:
            logger.exception("publishing the metrics failed; will try again")


# --------------------------------------------------------------------------- admission


class _Held:
    """Bytes of a review body one request holds (see `_Route.hold`), and whether they are a
    small review's: a Content-Length up to INLINE_REVIEW_BYTES (aiohttp reads no more than
    announced). None (chunked, which the API server never sends) counts as large."""

    __slots__ = ("bytes", "small")

    def __init__(self, length: int | None) -> None:
        self.bytes = 0
        self.small = length is not None and length <= INLINE_REVIEW_BYTES


class _Refused(Exception):
    """A request answered with a 4xx before it is reviewed."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _Route:
    """One admission route: `/<endpoint>` (a fixed policy) or `/<endpoint>/{policy}`.
    `handle` is its aiohttp handler."""

    __slots__ = ("endpoint", "fixed_policy", "limits", "metrics", "state")

    def __init__(self, state: State, endpoint: reviews.Endpoint, fixed_policy: str | None) -> None:
        self.state = state
        self.endpoint = endpoint
        self.fixed_policy = fixed_policy
        self.limits = state.settings.limits
        self.metrics = state.metrics

    async def handle(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        state, limits = self.state, self.limits
        policy_name = self.fixed_policy or request.match_info["policy"]
        headers = request.headers
        media_type = headers.get("Content-Type", "")
        if media_type != _JSON and _media_type(media_type) != _JSON:
            return self.invalid(
                policy_name,
                started,
                415,
                f"the content type must be {_JSON}, not {_media_type(media_type) or 'none'}",
            )
        max_body = limits.max_body_bytes
        length = _content_length(headers.get("Content-Length"))
        if length is not None and length > max_body:
            return self.invalid(policy_name, started, 413, _too_large(length, max_body))
        self.metrics.in_flight += 1
        # Review bytes held by this request: counted as they arrive, not as announced, so
        # that connections announcing large bodies and sending none hold nothing.
        held = _Held(length)
        body = b""
        try:
            content = request.content
            if content.is_eof():  # all arrived with the headers: the common case
                body = await request.read()
                self.hold(held, len(body))
            else:
                async with asyncio.timeout(limits.body_timeout):
                    body = await self.receive(content, held)
            # One read of the reference: reloads during this review do not change its policies.
            policy_set = state.policy_watch.policies
            if len(body) <= INLINE_REVIEW_BYTES or state.executor is None:
                outcome = self.review(body, policy_set, policy_name)
            else:
                deadline = started + _budget(request.raw_path)
                outcome = await self.review_in_thread(body, policy_set, policy_name, deadline)
        except _Refused as refused:
            return self.invalid(policy_name, started, refused.status, refused.reason)
        except web.HTTPRequestEntityTooLarge:
            return self.invalid(policy_name, started, 413, _too_large(None, max_body))
        except TimeoutError:
            self.metrics.count_shed("body-timeout")
            return self.invalid(
                policy_name,
                started,
                408,
                f"the body did not arrive within {limits.body_timeout:g} s",
            )
        except BadReview as exc:
            return self.invalid(policy_name, started, 400, str(exc))
        except Exception as exc:
            return self.internal_error(policy_name, started, body, exc)
        finally:
            if held.small:
                state.inflight_small_bytes -= held.bytes
            else:
                state.inflight_large_bytes -= held.bytes
            self.metrics.in_flight -= 1
            if held.bytes > INLINE_REVIEW_BYTES:
                state.trimmer.after_large_review(state.executor)
        try:
            self.record(policy_name, policy_set, outcome, time.perf_counter() - started)
        except Exception:
            # Counting and logging must never cost the API server its answer.
            logger.exception("recording review %s failed", outcome.request.uid)
        response = web.Response(body=outcome.body, content_type=_JSON)
        if state.draining:
            # Sets `Connection: close`: the client's next request opens a new connection,
            # which the Service sends to a pod that is not going away.
            response.force_close()
        return response

    def hold(self, held: _Held, size: int) -> None:
        """Count `size` more bytes of this request as in flight; refuse past the limit.

        Large reviews may hold --max-inflight-bytes between them; small ones may go
        SMALL_REVIEWS_RESERVE_BYTES beyond it, and what they hold does not count against
        the large ones, so that large reviews never get ordinary ones refused."""
        state = self.state
        held.bytes += size
        if held.small:
            state.inflight_small_bytes += size
            counted = state.inflight_large_bytes + state.inflight_small_bytes
            limit = self.limits.max_inflight_bytes + SMALL_REVIEWS_RESERVE_BYTES
        else:
            state.inflight_large_bytes += size
            counted = state.inflight_large_bytes
            limit = self.limits.max_inflight_bytes
        if counted > limit:
            self.metrics.count_shed("inflight-bytes")
            raise _Refused(
                429,
                f"{counted - held.bytes} bytes of reviews are being received or"
                f" reviewed, the limit is {limit}: retry in a moment",
            )

    async def receive(self, content: StreamReader, held: _Held) -> bytes:
        """The body, chunk by chunk as it arrives, each counted as it comes."""
        max_body = self.limits.max_body_bytes
        chunks = []
        while chunk := await content.readany():
            self.hold(held, len(chunk))
            if held.bytes > max_body:
                raise _Refused(413, _too_large(None, max_body))
            chunks.append(chunk)
        return b"".join(chunks)

    def review(
        self, body: bytes, policy_set: policies.PolicySet, policy_name: str
    ) -> reviews.Outcome:
        state = self.state
        return state.review(
            body,
            policies=policy_set,
            policy_name=policy_name,
            endpoint=self.endpoint,
            kinds=state.kinds,
        )

    async def review_in_thread(
        self, body: bytes, policy_set: policies.PolicySet, policy_name: str, deadline: float
    ) -> reviews.Outcome:
        """A large review, on a thread, cut off at `deadline` (see INLINE_REVIEW_BYTES)."""
        state = self.state
        assert state.executor is not None
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            # Receiving took the whole budget (an overloaded server, a slow upload).
            raise ReviewTimeout("the API server's deadline passed before the review started")
        work = asyncio.get_running_loop().run_in_executor(
            state.executor, self.review, body, policy_set, policy_name
        )
        try:
            return await asyncio.wait_for(work, remaining)
        except TimeoutError:
            # The thread cannot be stopped; it finishes and its result is dropped.
            raise ReviewTimeout(
                "the review did not finish before the API server's deadline"
            ) from None

    def record(
        self,
        policy_name: str,
        policy_set: policies.PolicySet,
        outcome: reviews.Outcome,
        seconds: float,
    ) -> None:
        verdict = outcome.verdict
        metrics, endpoint = self.metrics, self.endpoint
        policy = _policy_label(policy_name, policy_set)
        metrics.count_review(endpoint, policy, ALLOWED if verdict.allowed else DENIED, seconds)
        for rule, mode in verdict.violations:
            metrics.count_violation(endpoint, policy, rule, mode)
        state = self.state
        if state.review_lines_wanted:
            state.write_review_line(review_line(outcome, endpoint, policy_name, seconds))

    def invalid(self, policy_name: str, started: float, status: int, reason: str) -> web.Response:
        """A 4xx for a request that is not a usable AdmissionReview, or cannot be taken now."""
        reason = " ".join(reason.split())
        if len(reason) > REASON_LENGTH:
            reason = reason[: REASON_LENGTH - 3] + "..."
        seconds = time.perf_counter() - started
        with contextlib.suppress(Exception):
            label = _policy_label(policy_name, self.state.policies)
            self.metrics.count_review(self.endpoint, label, INVALID, seconds)
            review_log.warning(
                {
                    "message": "refused request",
                    "endpoint": self.endpoint,
                    "policy": policy_name,
                    "status": status,
                    "reason": reason,
                    "ms": round(seconds * 1000, 3),
                }
            )
        response = web.Response(status=status, text=reason + "\n")
        if status == 429:
            response.headers["Retry-After"] = "1"
        if status in (408, 413, 429):
            # The rest of the body is not worth keeping the connection for.
            response.force_close()
        return response

    def internal_error(
        self, policy_name: str, started: float, body: bytes, exc: Exception
    ) -> web.Response:
        """Still an AdmissionReview with the request's uid, denying, with a reference."""
        reference = secrets.token_hex(4)
        uid = reviews.uid_of(body)
        seconds = time.perf_counter() - started
        with contextlib.suppress(Exception):
            if isinstance(exc, ReviewTimeout):
                logger.error("review %s (uid %s) ran out of time: %s", reference, uid, exc)
            else:
                logger.error("review %s (uid %s) failed unexpectedly", reference, uid, exc_info=exc)
            label = _policy_label(policy_name, self.state.policies)
            self.metrics.count_review(self.endpoint, label, ERROR, seconds)
            self.state.write_review_line(
                {
                    "message": "review",
                    "uid": uid,
                    "endpoint": self.endpoint,
                    "policy": policy_name,
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


def review_line(
    outcome: reviews.Outcome, endpoint: reviews.Endpoint, policy_name: str, seconds: float
) -> dict[str, Any]:
    """The log line of one answered review."""
    request, verdict = outcome.request, outcome.verdict
    line: dict[str, Any] = {
        "message": "review",
        "uid": request.uid,
        "namespace": request.namespace,
        "name": request.name,
        "kind": request.kind,
        "operation": request.operation,
        "endpoint": endpoint,
        "policy": policy_name,
        "decision": ALLOWED if verdict.allowed else DENIED,
        "patch_operations": verdict.patch_operations,
        "ms": round(seconds * 1000, 3),
    }
    if not verdict.allowed:
        line["rules"] = list(verdict.rules)
        line["mode"] = names.ENFORCE
    if verdict.would_refuse:
        # Admitted although these rules would refuse: the mode that decided so.
        line["would_refuse"] = list(verdict.would_refuse)
    return line


def _policy_label(name: str, policy_set: policies.PolicySet) -> str:
    # The path segment comes from whoever can reach the port: only names of policies in
    # force become label values, so a scanner cannot grow the metric without bound.
    return name if policy_set.get(name) is not None else reviews.UNKNOWN_POLICY


@functools.lru_cache(maxsize=64)
def _media_type(header: str) -> str:
    return header.split(";", 1)[0].strip().lower()


def _content_length(text: str | None) -> int | None:
    # aiohttp has already refused a Content-Length that is not a number.
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


@functools.lru_cache(maxsize=64)
def _budget(raw_path: str) -> float:
    """Seconds a review may take: the API server's `?timeout=` less a margin.

    Past it, the answer is an internal-error denial: a denial the API server still reads and
    shows the user, rather than a timeout it would resolve by the webhook's failurePolicy
    with a less helpful message. Cached by the raw path: the API server calls the same one
    for every review of a webhook.
    """
    query = raw_path.partition("?")[2]
    raw = urllib.parse.parse_qs(query).get("timeout", [""])[-1] if query else ""
    timeout = parse_duration(raw) if raw else None
    if timeout is None or timeout <= 0:
        timeout = names.API_SERVER_DEFAULT_TIMEOUT_SECONDS
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
    text = text.strip()[:64]
    try:
        return float(text)
    except ValueError:
        pass
    if not _DURATION.fullmatch(text):
        return None
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


def _too_large(length: int | None, limit: int) -> str:
    size = f" ({length} bytes)" if length is not None else ""
    readable = f" ({limit / 1024 / 1024:g} MiB)" if limit >= 1024 * 1024 else ""
    return f"the body{size} is larger than the limit of {limit} bytes{readable}"


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
    # Ready even when a policy file does not load: the other policies serve, and the
    # namespaces of the broken one are told why. Not ready would take the replica out of the
    # Service, and with failurePolicy Fail no GPU pod could be created anywhere.
    detail = state.policy_watch.detail()
    return web.Response(text="\n".join(["ok", *detail]) + "\n")


async def _metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    # The expiry moves with the clock, not only on reloads.
    state.update_gauges()
    response = web.Response(body=state.metrics.exposition())
    # With parameters, so set as a header: aiohttp's content_type= takes none.
    response.headers["Content-Type"] = CONTENT_TYPE
    return response
