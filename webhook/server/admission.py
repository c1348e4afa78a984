"""The admission routes: a request's bytes in, an AdmissionReview or a 4xx out.

What an admission request can get back:

- 200 with an AdmissionReview: allowed (with `patch`/`patchType`) or denied with a reason;
  also when the review failed unexpectedly or ran out of time (then a denial with status
  code 500 naming a reference that the log line with the trace carries);
- 400 (not a usable AdmissionReview), 408 (the body did not arrive within the body
  timeout), 413 (body over the limit, 7 MiB), 415 (not application/json), 429 (too many
  review bytes in flight: retry), with a one-line reason as text. Never a 5xx.

The handler is one function per route, closed over the state it needs: a review is a few
dictionary lookups, the codec (`codec.review`, with the answer cache) and one counter,
one histogram and one log line. The bytes a request holds are one `inflight.Hold`, given
back when the request leaves, however it leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from typing import Any

from aiohttp import StreamReader, web

from webhook.errors import BadReview
from webhook.policy import names, policies
from webhook.server import codec, deadlines, inflight, logs, metrics, states

logger = logging.getLogger(__name__)
review_log = logging.getLogger(logs.REVIEW_LOGGER)

# Reviews of bodies up to this size take at most a millisecond or two (a typical pod of a
# few KB: ~25 us; a review's cost grows with its bytes, ~90 us a KiB at worst, measured), so
# they run on the event loop. Larger ones run on a thread: the loop keeps answering other
# reviews and probes meanwhile, the wait can be cut at the deadline, and they are "large"
# for the bounds of their address (they take turns, and count against its share of a core:
# `inflight.LargeTurns`). 256 KiB, as it was, let one address send reviews of 20-30 ms each
# (thousands of hostPath volumes) that held up the loop for everyone (found by an attack).
INLINE_REVIEW_BYTES = 16 * 1024
# The bound of a small review in the in-flight budget (`create_app`): bytes of reviews up
# to this size have a reserve of their own beyond --max-inflight-bytes.
SMALL_REVIEW_BYTES = 256 * 1024
# A 4xx reason is one line of at most this many characters, whatever the body held.
REASON_LENGTH = 300

_JSON = "application/json"


class ReviewTimeout(Exception):
    """A review did not finish before the API server's deadline."""


class _Refused(Exception):
    """A request answered with a 4xx before it is reviewed."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


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
        state, limits = self.state, self.limits
        policy_name = self.fixed_policy or request.match_info["policy"]
        if self.pod_security:
            policy_name = policies.policy_path(policy_name, pod_security=True)
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
            return self.invalid(
                policy_name, started, 413, _too_large(length, max_body), request=request
            )
        source = request.remote or ""
        budget = state.budget
        large = length is None or length > INLINE_REVIEW_BYTES
        if large:
            # Its address's large reviews take turns (`inflight.LargeTurns`): waiting for one
            # may take up to half of what the API server gives the review.
            within = deadlines.review_seconds(request.raw_path) / 2
            try:
                await budget.turns.enter(source, within - (time.perf_counter() - started), length)
            except inflight.Busy as busy:
                budget.shares.charge(source, inflight.REFUSAL_SECONDS)
                self.metrics.count_shed("source-large-share" if busy.share else "source-large-turn")
                return self.invalid(
                    policy_name,
                    started,
                    429,
                    busy.reason,
                    retry_after=inflight.retry_after(busy.wait),
                    request=request,
                )
        self.metrics.in_flight += 1
        body = b""
        with budget.hold(length, source) as held:
            try:
                content = request.content
                if content.is_eof():  # all arrived with the headers: the common case
                    body = await request.read()
                    held.add(len(body))
                else:
                    async with asyncio.timeout(limits.body_timeout):
                        body = await self.receive(content, held)
                # One read of the reference: reloads during this review do not change its
                # policies.
                policy_set = state.policy_watch.policies
                if len(body) <= INLINE_REVIEW_BYTES or state.executor is None:
                    outcome = self.review(body, policy_set, policy_name)
                else:
                    deadline = started + deadlines.review_seconds(request.raw_path)
                    outcome = await self.review_in_thread(
                        body, policy_set, policy_name, deadline, source=source, held=held
                    )
            except inflight.Exceeded as exceeded:
                if exceeded.source is None:
                    self.metrics.count_shed("inflight-bytes")
                    reason = (
                        f"{exceeded.others} bytes of reviews are being received or reviewed,"
                        f" the limit is {exceeded.limit}: retry in a moment"
                    )
                else:
                    self.metrics.count_shed("source-inflight-bytes")
                    reason = (
                        f"{exceeded.others} bytes of reviews from {exceeded.source} are being"
                        f" received or reviewed, the limit per address is {exceeded.limit}:"
                        " retry in a moment"
                    )
                return self.invalid(policy_name, started, 429, reason, request=request)
            except _Refused as refused:
                return self.invalid(
                    policy_name, started, refused.status, refused.reason, request=request
                )
            except web.HTTPRequestEntityTooLarge:
                return self.invalid(
                    policy_name, started, 413, _too_large(None, max_body), request=request
                )
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
            except ConnectionError:
                # The client went away in the middle of its body: no one to answer, and
                # nothing wrong here (a line, not an error with a trace).
                return self.invalid(
                    policy_name,
                    started,
                    400,
                    "the connection closed before the body arrived",
                )
            except Exception as exc:
                return self.internal_error(policy_name, started, body, exc)
            finally:
                self.metrics.in_flight -= 1
                if large:
                    # What receiving it cost the event loop, as its review's thread time is
                    # charged (`charged_review`): reading, decrypting and copying.
                    budget.shares.charge(source, held.bytes * inflight.RECEIVE_SECONDS_PER_BYTE)
                    budget.turns.leave(source)
                if held.bytes > state.budget.small_bytes:
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

    async def receive(self, content: StreamReader, held: inflight.Hold) -> bytes:
        """The body, chunk by chunk as it arrives, each held as it comes."""
        max_body = self.limits.max_body_bytes
        chunks = []
        while chunk := await content.readany():
            held.add(len(chunk))
            if held.bytes > max_body:
                raise _Refused(413, _too_large(None, max_body))
            chunks.append(chunk)
        return b"".join(chunks)

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

    def charged_review(
        self, body: bytes, policy_set: policies.PolicySet, policy_name: str, source: str
    ) -> codec.Outcome:
        """`review`, its thread's CPU time charged to `source` (also when it fails, and when
        the wait for it was cut off: the thread ran all the same)."""
        started = time.thread_time()
        refusal = None
        try:
            return self.review(body, policy_set, policy_name)
        except BadReview as exc:
            refusal = str(exc)
        finally:
            self.state.budget.shares.charge(source, time.thread_time() - started)
        # A new one, without the traceback of this thread's frames: the futures that carry it
        # to the handler would keep those frames, and the body in them, alive with it.
        raise BadReview(refusal)

    async def review_in_thread(
        self,
        body: bytes,
        policy_set: policies.PolicySet,
        policy_name: str,
        deadline: float,
        *,
        source: str = "",
        held: inflight.Hold | None = None,
    ) -> codec.Outcome:
        """A large review, on a thread, cut off at `deadline` (see INLINE_REVIEW_BYTES); its
        CPU time is charged to `source` (`inflight.LargeShares`); the body's bytes in flight,
        `held`, are given back when the thread is done with them."""
        state = self.state
        assert state.executor is not None
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            # Receiving took the whole budget (an overloaded server, a slow upload).
            raise ReviewTimeout("the API server's deadline passed before the review started")
        loop = asyncio.get_running_loop()
        running = state.executor.submit(self.charged_review, body, policy_set, policy_name, source)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(running, loop=loop), remaining)
        except TimeoutError:
            # A review not started yet is cancelled; a running one cannot be stopped: it
            # finishes and its result is dropped. Until then it holds the body, so the bytes
            # stay counted in flight (`held`), or bodies would pile up beyond the bound
            # behind threads still busy (found by an attack: 24 bodies of 7 MiB at once).
            if held is not None and not running.done():
                held.keep()
                running.add_done_callback(lambda _done: loop.call_soon_threadsafe(held.release))
            raise ReviewTimeout(
                "the review did not finish before the API server's deadline"
            ) from None
        finally:
            # The thread's future holds, through the asyncio future its callback fills, an
            # exception whose traceback holds this frame, which holds the future: a cycle
            # that only the collector would free, the body with it (20 bodies of 7 MiB at
            # once in an attack). This frame lets go of the future.
            del running

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
        *,
        retry_after: str = "1",
        request: web.Request | None = None,
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
            response.headers["Retry-After"] = retry_after
        if status in (408, 413, 429):
            # The rest of the body is not worth keeping the connection for.
            response.force_close()
            connections = self.state.connections
            if request is not None and connections is not None:
                # Nor reading (413, 429: a large body may be on its way; after a 408 the
                # client is not sending).
                connections.stop_reading(request.transport)
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
    # Pod Security level is not part of it (one series per policy, as before).
    name, _ = policies.split_path(path)
    return name if policy_set.get(name) is not None else names.UNKNOWN_POLICY_PATH


@functools.lru_cache(maxsize=64)
def _media_type(header: str) -> str:
    return header.split(";", 1)[0].strip().lower()


def _content_length(text: str | None) -> int | None:
    # aiohttp has already refused a Content-Length that is not a number.
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


def _too_large(length: int | None, limit: int) -> str:
    size = f" ({length} bytes)" if length is not None else ""
    readable = f" ({limit / 1024 / 1024:g} MiB)" if limit >= 1024 * 1024 else ""
    return f"the body{size} is larger than the limit of {limit} bytes{readable}"
