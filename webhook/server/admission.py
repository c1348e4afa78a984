"""The admission routes: a request's bytes in, an AdmissionReview or a 4xx out.

What an admission request can get back:

- 200 with an AdmissionReview: allowed (with `patch`/`patchType`) or denied with a reason;
  also when the review failed unexpectedly or ran out of time (then a denial with status
  code 500 naming a reference that the log line with the trace carries);
- 400 (not a usable AdmissionReview), 408 (the body did not arrive within the body
  timeout), 413 (body over the limit, 7 MiB), 415 (not application/json, or compressed),
  429 (too many review bytes in flight: retry), with a one-line reason as text. Never a
  5xx.

One handler per route, closed over the state it needs. A body of up to `inline_bytes` (a
typical pod: a few KB) is read and reviewed on the event loop; a larger one first waits for
room in the budget of bytes in flight (`limits.Budget`, in total and per source address),
is read within the body timeout and reviewed on a thread, cut off at the API server's
deadline. Then one counter, one histogram and one review line (`record`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import re
import secrets
import time
import urllib.parse
from typing import Any

from aiohttp import web

from webhook.errors import BadReview
from webhook.policy import names, policies
from webhook.server import codec, limits, logs, metrics, states

logger = logging.getLogger(__name__)
review_log = logging.getLogger(logs.REVIEW_LOGGER)

# A 4xx reason is one line of at most this many characters, whatever the body held.
REASON_LENGTH = 300
# Answer this long before the API server's deadline at most (a fifth of a short timeout):
# the answer must still cross the network and be read before the API server gives up.
DEADLINE_MARGIN_SECONDS = 1.0

_JSON = "application/json"


class ReviewTimeout(Exception):
    """A review did not finish before the API server's deadline."""


class Route:
    """One admission route: `/<endpoint>` (a fixed policy), `/<endpoint>/{policy}`, or
    `/<endpoint>/{policy}/baseline` (`pod_security`: the namespace enforces Pod Security
    baseline or restricted). `handle` is its aiohttp handler. The policy path handed to the
    review is `<policy>` or `<policy>/baseline` (`policies.split_path`)."""

    __slots__ = ("endpoint", "fixed_policy", "limits", "metrics", "pod_security", "state")

    def __init__(
        self,
        state: states.State,
        endpoint: codec.Endpoint,
        fixed_policy: str | None,
        *,
        pod_security: bool = False,
    ) -> None:
        self.state = state
        self.endpoint = endpoint
        self.fixed_policy = fixed_policy
        self.pod_security = pod_security
        self.limits = state.settings.limits
        self.metrics = state.metrics

    async def handle(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        policy_name = self.fixed_policy or request.match_info["policy"]
        if self.pod_security:
            policy_name = policies.join_path(policy_name, pod_security=True)
        media_type = request.headers.get("Content-Type", "")
        if media_type != _JSON and _media_type(media_type) != _JSON:
            return self.invalid(
                policy_name,
                started,
                415,
                f"the content type must be {_JSON}, not {_media_type(media_type) or 'none'}",
            )
        encoding = request.headers.get("Content-Encoding", "")
        if encoding and encoding.strip().lower() != "identity":
            # The API server sends JSON as it is. A compressed body would be inflated past
            # every bound counted on the wire (the body cap, the bytes in flight, the small
            # review done on the event loop): refused before a byte of it is read.
            return self.invalid(
                policy_name,
                started,
                415,
                f"the body must not be compressed (Content-Encoding: {encoding[:40]})",
                request,
            )
        limits = self.limits
        length = request.content_length
        if length is not None and length > limits.max_body_bytes:
            return self.invalid(
                policy_name, started, 413, _too_large(length, limits.max_body_bytes), request
            )
        if length is None or length > limits.inline_bytes:
            return await self.large(request, policy_name, length, started)
        metrics = self.metrics
        metrics.in_flight += 1
        body = b""
        try:
            if request.content.is_eof():  # all arrived with the head: the common case
                body = await request.read()
            else:
                async with asyncio.timeout(limits.body_timeout):
                    body = await request.read()
            # One read of the reference: a reload during this review does not change it.
            policy_set = self.state.policy_watch.policies
            outcome = self.review(body, policy_set, policy_name)
        except Exception as exc:
            return self.failed(policy_name, started, body, exc, request)
        finally:
            metrics.in_flight -= 1
        return self.answer(policy_name, policy_set, outcome, started)

    async def large(
        self, request: web.Request, policy_name: str, length: int | None, started: float
    ) -> web.Response:
        """A body over `inline_bytes` (or of no announced length): its bytes held in the
        budget while it is received and reviewed, its review on a thread."""
        state, bounds, counts = self.state, self.limits, self.metrics
        source = request.remote or ""
        size = length if length is not None else bounds.max_body_bytes
        seconds = review_seconds(request.raw_path)
        budget = state.budget
        # Waiting, for its address's share of time and for room, may take up to half of what
        # the API server gives the review.
        # A refusal is answered at the end of the wait, not at once: a refused client that
        # sends again at once would otherwise be refused over and over, and closing each
        # connection costs the decryption of what its client still sends.
        wait = budget.wait(source)
        if wait >= seconds / 2:
            await asyncio.sleep(seconds / 2)
            counts.count_shed(metrics.SOURCE_LARGE_SHARE)
            reason = (
                f"the large reviews from {source} took more than {budget.share:.0%} of the"
                f" server's time lately: retry in {wait:.1f} s"
            )
            return self.invalid(
                policy_name, started, 429, reason, request, retry_after=math.ceil(wait)
            )
        try:
            async with asyncio.timeout(seconds / 2 - (time.perf_counter() - started)):
                if wait > 0:
                    await asyncio.sleep(wait)
                await budget.take(source, size)
        except TimeoutError:
            if budget.source_full(source, size):
                counts.count_shed(metrics.SOURCE_INFLIGHT_BYTES)
                reason = (
                    f"{budget.by_source.get(source, 0)} bytes of reviews from {source} are"
                    " being received or reviewed, the limit per address is"
                    f" {budget.per_source}: retry in a moment"
                )
            else:
                counts.count_shed(metrics.INFLIGHT_BYTES)
                reason = (
                    f"{budget.held} bytes of reviews are being received or reviewed, the"
                    f" limit is {budget.total}: retry in a moment"
                )
            return self.invalid(policy_name, started, 429, reason, request)
        counts.in_flight += 1
        body = b""
        given = False
        taken = time.perf_counter()
        try:
            async with asyncio.timeout(bounds.body_timeout):
                body = await request.read()
            policy_set = state.policy_watch.policies
            loop = asyncio.get_running_loop()
            running = loop.run_in_executor(
                state.executor, self.review, body, policy_set, policy_name
            )
            remaining = started + seconds - time.perf_counter()
            try:
                outcome = await asyncio.wait_for(asyncio.shield(running), max(remaining, 0))
            except TimeoutError:
                # A running review cannot be stopped: it finishes and its answer is dropped.
                # Until then it holds the body, so its bytes stay held.
                running.add_done_callback(
                    functools.partial(
                        _give_when_done,
                        budget=budget,
                        source=source,
                        size=size,
                        since=time.perf_counter(),
                    )
                )
                given = True
                raise ReviewTimeout(
                    "the review did not finish before the API server's deadline"
                ) from None
        except Exception as exc:
            return self.failed(policy_name, started, body, exc, request)
        finally:
            counts.in_flight -= 1
            # Receiving and reviewing it: the time its address's share is charged.
            budget.charge(source, time.perf_counter() - taken)
            if not given:
                budget.give(source, size)
        return self.answer(policy_name, policy_set, outcome, started)

    def review(
        self, body: bytes, policy_set: policies.PolicySet, policy_name: str
    ) -> codec.Outcome:
        state = self.state
        return state.review(
            body,
            policies=policy_set,
            policy_name=policy_name,
            endpoint=self.endpoint,
            kinds=state.kinds,
        )

    def answer(
        self,
        policy_name: str,
        policy_set: policies.PolicySet,
        outcome: codec.Outcome,
        started: float,
    ) -> web.Response:
        try:
            self.record(policy_name, policy_set, outcome, time.perf_counter() - started)
        except Exception:
            # Counting and logging must never cost the API server its answer.
            logger.exception("recording review %s failed", outcome.request.uid)
        response = web.Response(body=outcome.body, content_type=_JSON)
        if self.state.draining:
            # Sets `Connection: close`: the client's next request opens a new connection,
            # which the Service sends to a pod that is not going away.
            response.force_close()
        return response

    def failed(
        self,
        policy_name: str,
        started: float,
        body: bytes,
        exc: Exception,
        request: web.Request,
    ) -> web.Response:
        """The answer to a request whose review did not come to an outcome."""
        if isinstance(exc, BadReview):
            return self.invalid(policy_name, started, 400, str(exc))
        if isinstance(exc, TimeoutError):
            self.metrics.count_shed(metrics.BODY_TIMEOUT)
            return self.invalid(
                policy_name,
                started,
                408,
                f"the body did not arrive within {self.limits.body_timeout:g} s",
                request,
            )
        if isinstance(exc, web.HTTPRequestEntityTooLarge):  # chunked, past the limit
            return self.invalid(
                policy_name, started, 413, _too_large(None, self.limits.max_body_bytes), request
            )
        if isinstance(exc, ConnectionError):
            # The client went away in the middle of its body: no one to answer, and
            # nothing wrong here (a line, not an error with a trace).
            return self.invalid(
                policy_name, started, 400, "the connection closed before the body arrived"
            )
        return self.internal_error(policy_name, started, body, exc)

    def record(
        self,
        policy_name: str,
        policy_set: policies.PolicySet,
        outcome: codec.Outcome,
        seconds: float,
    ) -> None:
        summary = outcome.summary
        counts, endpoint = self.metrics, self.endpoint
        policy = _policy_label(policy_name, policy_set)
        decision = metrics.ALLOWED if summary.allowed else metrics.DENIED
        counts.count_review(endpoint, policy, decision, seconds)
        for rule, mode in summary.violations:
            counts.count_violation(endpoint, policy, rule, mode)
        lines = self.state.review_lines
        if lines.wanted:
            name, pod_security = policies.split_path(policy_name)
            line = logs.review_line(outcome, endpoint, name, seconds)
            if pod_security:
                line[_POD_SECURITY_FIELD] = True
            lines.write(line)

    def invalid(
        self,
        policy_name: str,
        started: float,
        status: int,
        reason: str,
        request: web.Request | None = None,
        *,
        retry_after: int = 1,
    ) -> web.Response:
        """A 4xx for a request that is not a usable AdmissionReview, or cannot be taken now."""
        reason = " ".join(reason.split())
        if len(reason) > REASON_LENGTH:
            reason = reason[: REASON_LENGTH - 3] + "..."
        seconds = time.perf_counter() - started
        with contextlib.suppress(Exception):
            label = _policy_label(policy_name, self.state.policies)
            self.metrics.count_review(self.endpoint, label, metrics.INVALID, seconds)
            review_log.warning(
                {
                    "message": "refused request",
                    "endpoint": self.endpoint,
                    **_policy_fields(policy_name),
                    "status": status,
                    "reason": reason,
                    "ms": round(seconds * 1000, 3),
                }
            )
        response = web.Response(status=status, text=reason + "\n")
        if status == 429:
            response.headers["Retry-After"] = str(max(1, retry_after))
        if request is not None:
            # 408, 413, 429: the rest of the body is worth neither the connection nor
            # reading: nothing more is read, and the connection closes once answered.
            response.force_close()
            if request.transport is not None:
                request.transport.pause_reading()
        return response

    def internal_error(
        self, policy_name: str, started: float, body: bytes, exc: Exception
    ) -> web.Response:
        """Still an AdmissionReview with the request's uid, denying, with a reference."""
        reference = secrets.token_hex(4)
        uid = codec.uid_of(body)
        seconds = time.perf_counter() - started
        with contextlib.suppress(Exception):
            if isinstance(exc, ReviewTimeout):
                logger.error("review %s (uid %s) ran out of time: %s", reference, uid, exc)
            else:
                logger.error("review %s (uid %s) failed unexpectedly", reference, uid, exc_info=exc)
            label = _policy_label(policy_name, self.state.policies)
            self.metrics.count_review(self.endpoint, label, metrics.ERROR, seconds)
            self.state.review_lines.write(
                {
                    "message": "review",
                    "uid": uid,
                    "endpoint": self.endpoint,
                    **_policy_fields(policy_name),
                    "decision": metrics.ERROR,
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
        return web.Response(body=codec.internal_error(uid, reference), content_type=_JSON)


def _give_when_done(
    done: asyncio.Future[codec.Outcome],
    *,
    budget: limits.Budget,
    source: str,
    size: int,
    since: float,
) -> None:
    """Give a review's bytes back once its thread is done with them (its answer unread), and
    charge its address the time the thread ran on after the deadline (`since`): a short
    `?timeout=` does not shorten what the review costs."""
    if not done.cancelled():
        done.exception()  # read, so that asyncio does not report it as never retrieved
    budget.charge(source, time.perf_counter() - since)
    budget.give(source, size)


# A log line's field for reviews on a `<policy>/baseline` path: the namespace enforces Pod
# Security baseline or restricted (`policies.split_path`).
_POD_SECURITY_FIELD = "pod_security"


def _policy_fields(path: str) -> dict[str, Any]:
    """A log line's fields for the policy path `path`: the policy name, and the level."""
    name, pod_security = policies.split_path(path)
    return {"policy": name, _POD_SECURITY_FIELD: True} if pod_security else {"policy": name}


def _policy_label(path: str, policy_set: policies.PolicySet) -> str:
    # The path segment comes from whoever can reach the port: only names of policies in
    # force become label values, so a scanner cannot grow the metric without bound. The
    # Pod Security level is not part of it (one series per policy).
    name, _ = policies.split_path(path)
    return name if policy_set.get(name) is not None else names.UNKNOWN_POLICY_PATH


@functools.lru_cache(maxsize=64)
def _media_type(header: str) -> str:
    return header.split(";", 1)[0].strip().lower()


def _too_large(length: int | None, limit: int) -> str:
    size = f" ({length} bytes)" if length is not None else ""
    readable = f" ({limit / limits.MIB:g} MiB)" if limit >= limits.MIB else ""
    return f"the body{size} is larger than the limit of {limit} bytes{readable}"


@functools.lru_cache(maxsize=64)
def review_seconds(raw_path: str) -> float:
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


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION = re.compile(f"(?:{_DURATION_PART.pattern})+")
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
