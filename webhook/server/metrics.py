"""The Prometheus metrics of the admission server (`GET /metrics` on the plain-HTTP port).

One `Metrics` per server. In a single process its metrics live in a registry of their own
(so tests can run several servers side by side). With `serve --workers N` the N processes
share nothing in memory, so prometheus-client's multiprocess mode is used: the parent sets
`PROMETHEUS_MULTIPROC_DIR` before it starts the workers, each worker writes its values to
memory-mapped files there, and whichever worker answers a scrape adds up the files of all
of them. Counters and histograms are then sums over the workers (a worker that was restarted
still counts), `in_flight` is the sum over the living workers and the certificate expiry is
the smallest value any living worker reports.

Each worker watches the policy and certificate files on its own, so with N workers one
changed file counts as N reloads (and a refused one as N errors): the reload counters count
reloads per process, which is what a rate or `increase(...) > 0` alert wants.

What every admission request counts (reviews, violations, latency, requests in flight) is
counted in plain Python on the request path and added to prometheus-client's metrics by
`publish`: before every scrape this process answers, and, with several workers, once a
`PUBLISH_SECONDS` and at exit, so that a scrape one worker answers sees the others' counts
at most that late (and a worker killed outright, SIGKILL or the OOM killer, takes the counts
of its last second with it). prometheus-client's own path (a lock and several calls per
value, five values a request) cost 25,000 instructions a request, 6 % of a review answered
from the cache (bench/instructions.py); the plain count costs a fifth of that.
"""

from __future__ import annotations

import bisect
import logging
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
    multiprocess,
    values,
)

# Without this every counter also exposes a `_created` timestamp series, doubling the
# series for nothing a dashboard uses (process start time is there already).
disable_created_metrics()  # type: ignore[no-untyped-call]

logger = logging.getLogger(__name__)

PREFIX = "gpu_share_webhook"
CONTENT_TYPE = CONTENT_TYPE_LATEST

# A review takes well under a millisecond for an ordinary pod and tens of milliseconds for
# a review near the body limit; the API server gives up after `timeoutSeconds` (<= 30 s).
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)

# With several workers: how often each adds what it counted to the shared files.
PUBLISH_SECONDS = 1.0

# The values of the `decision` label of the reviews counter.
ALLOWED = "allowed"
DENIED = "denied"
# Answered with an AdmissionReview that denies because the review failed or ran out of time.
ERROR = "error"
# Not a usable AdmissionReview: answered 400, 413 or 415.
INVALID = "invalid"


def multiprocess_mode() -> bool:
    """Whether prometheus-client keeps its values in files shared by several processes.

    prometheus-client decides this once, when it is first imported, from
    `PROMETHEUS_MULTIPROC_DIR`; asking it rather than the environment gives its answer.
    """
    return values.ValueClass is not values.MutexValue


class Metrics:
    """The server's metrics and the registry `/metrics` exposes."""

    def __init__(self) -> None:
        self.multiprocess = multiprocess_mode()
        self.registry = CollectorRegistry()
        # In multiprocess mode the metrics are registered nowhere: their values go to the
        # shared files, and the collector that reads all the files is what gets exposed
        # (registering both would expose this process's values twice).
        own: CollectorRegistry | None
        if self.multiprocess:
            # prometheus-client leaves this constructor unannotated.
            multiprocess.MultiProcessCollector(self.registry)  # type: ignore[no-untyped-call]
            own = None
        else:
            # Process metrics only make sense for one process (the multiprocess collector
            # cannot add up CPU seconds or resident memory).
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
            own = self.registry
        self.reviews = Counter(
            f"{PREFIX}_reviews",
            "Admission requests answered, by endpoint, policy and decision"
            " (allowed, denied, error: answered with an internal-error denial,"
            " invalid: refused with HTTP 400/413/415).",
            ["endpoint", "policy", "decision"],
            registry=own,
        )
        self.violations = Counter(
            f"{PREFIX}_rule_violations",
            "Rule violations found in reviews, by endpoint, policy, rule and the mode that"
            " applied it: enforce (refused), warn or dry-run (admitted; the would-be"
            " refusals of a rollout).",
            ["endpoint", "policy", "rule", "mode"],
            registry=own,
        )
        self.latency = Histogram(
            f"{PREFIX}_review_duration_seconds",
            "Time from receiving an admission request to having its answer.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=own,
        )
        _check_histogram(self.latency.labels("mutate"))
        self.in_flight_gauge = Gauge(
            f"{PREFIX}_reviews_in_flight",
            "Admission requests being received or reviewed (with --workers, the other"
            " workers' counts are up to a second old).",
            registry=own,
            multiprocess_mode="livesum",
        )
        self.policy_reloads = Counter(
            f"{PREFIX}_policy_reloads",
            "Changed policy sets loaded and put in force (per worker process).",
            registry=own,
        )
        self.policy_reload_errors = Counter(
            f"{PREFIX}_policy_reload_errors",
            "Changed policy sets refused as invalid; the last good set stayed in force.",
            registry=own,
        )
        self.certificate_reloads = Counter(
            f"{PREFIX}_certificate_reloads",
            "New serving certificates loaded from the certificate directory (per worker).",
            registry=own,
        )
        self.certificate_reload_errors = Counter(
            f"{PREFIX}_certificate_reload_errors",
            "New certificate files refused; the certificate served before stayed.",
            registry=own,
        )
        self.certificate_expiry = Gauge(
            f"{PREFIX}_certificate_expiry_seconds",
            "Seconds until the serving certificate expires (negative once it has).",
            registry=own,
            multiprocess_mode="livemin",
        )

        self.connections = Gauge(
            f"{PREFIX}_connections",
            "Admission connections open right now (waiting for their TLS handshake, in it,"
            " or past it).",
            registry=own,
            multiprocess_mode="livesum",
        )
        self.connections_closed = Counter(
            f"{PREFIX}_connections_closed",
            "Admission connections the server closed or turned away, by reason: header"
            " (no complete request within --header-timeout), idle (--idle-timeout), evicted"
            " (the idle one that made room for a new one at --max-connections or"
            " --max-connections-per-source), refused (closed before its handshake:"
            " --max-connections reached and none idle), source-refused (the same at"
            " --max-connections-per-source), tls-timeout (no TLS handshake within"
            " --header-timeout, its wait for a turn included), tls-failed (the handshake"
            " failed: not TLS, no common suite, the client went away), client-certificate"
            " (with --client-ca-file: missing, not signed by those CAs, or of a name not in"
            " --client-names).",
            ["reason"],
            registry=own,
        )
        self.requests_shed = Counter(
            f"{PREFIX}_requests_shed",
            "Admission requests answered 429 or 408 before review, by reason: inflight-bytes"
            " (--max-inflight-bytes reached), source-inflight-bytes"
            " (--max-inflight-bytes-per-source reached by the request's address),"
            " source-large-share (the large reviews of the request's address took more than"
            " --large-review-share of a core lately), source-large-turn (its address had a"
            " review over 16 KiB in progress and 8 MiB of them waiting, or no turn came in time),"
            " body-timeout (the body did not arrive within --body-timeout).",
            ["reason"],
            registry=own,
        )
        self.policy_files_not_loaded = Gauge(
            f"{PREFIX}_policy_files_not_loaded",
            "Policy files that do not load right now (their last good version, if any, serves;"
            " see /readyz and the log for the file and the error).",
            registry=own,
            multiprocess_mode="livemax",
        )
        # Set when scraped, from the cache's own count: nothing added to the request path.
        # (Its name is older than the answer cache, which replaced a cache of decisions.)
        self.decision_cache_hits = Gauge(
            f"{PREFIX}_decision_cache_hits",
            "Reviews answered from the answer cache since the process started (reviews equal"
            " to an earlier one but for their uid and service account volume name).",
            registry=own,
            multiprocess_mode="livesum",
        )
        # Counted on the request path since the last `publish` (see the module docstring).
        # Admission requests being received or reviewed: read when published.
        self.in_flight = 0
        self._reviews: dict[tuple[str, str, str], int] = {}
        self._violations: dict[tuple[str, str, str, str], int] = {}
        self._latencies: dict[str, _Latencies] = {}

    def count_review(self, endpoint: str, policy: str, decision: str, seconds: float) -> None:
        """One admission request answered: count it by its labels and observe its latency."""
        key = (endpoint, policy, decision)
        reviews = self._reviews
        reviews[key] = reviews.get(key, 0) + 1
        latencies = self._latencies.get(endpoint)
        if latencies is None:
            latencies = self._latencies[endpoint] = _Latencies()
        latencies.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        latencies.sum += seconds

    def count_violation(self, endpoint: str, policy: str, rule: str, mode: str) -> None:
        key = (endpoint, policy, rule, mode)
        violations = self._violations
        violations[key] = violations.get(key, 0) + 1

    def publish(self) -> None:
        """Add what the request path counted since the last call to the metrics exposed.

        Runs on the event loop's thread, as the counting does; each dict is taken whole
        (one assignment) before it is read, so nothing counted meanwhile is lost."""
        reviews, self._reviews = self._reviews, {}
        for review, count in reviews.items():
            self.reviews.labels(*review).inc(count)
        violations, self._violations = self._violations, {}
        for violation, count in violations.items():
            self.violations.labels(*violation).inc(count)
        latencies, self._latencies = self._latencies, {}
        for endpoint, counted in latencies.items():
            histogram = self.latency.labels(endpoint)
            # prometheus-client keeps one value per bucket, each counting the observations
            # of that bucket alone, and one for the sum (`Histogram.observe`); `_check_histogram`
            # fails at start-up if a release keeps them otherwise.
            for value, count in zip(histogram._buckets, counted.buckets, strict=True):
                if count:
                    value.inc(count)
            histogram._sum.inc(counted.sum)
        self.in_flight_gauge.set(self.in_flight)

    def count_closed(self, reason: str) -> None:
        self.connections_closed.labels(reason).inc()

    def count_shed(self, reason: str) -> None:
        self.requests_shed.labels(reason).inc()

    def exposition(self) -> bytes:
        """The text format a Prometheus scrape reads (this process's counts up to now)."""
        try:
            self.publish()
        except Exception:
            # The scrape still gets what was published before.
            logger.exception("publishing the metrics failed")
        return bytes(generate_latest(self.registry))


class _Latencies:
    """Review latencies of one endpoint observed since the last publish: how many fell in each
    bucket (the last one: beyond the largest bound), and their sum."""

    __slots__ = ("buckets", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0


def _check_histogram(histogram: Any) -> None:
    """Fail at start-up, not at the first scrape, when prometheus-client no longer keeps a
    histogram's values as `Metrics.publish` adds to them."""
    values = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if (
        not isinstance(values, list)
        or len(values) != len(LATENCY_BUCKETS) + 1
        or not all(callable(getattr(v, "inc", None)) for v in [*values, total])
    ):
        raise RuntimeError(
            "this prometheus-client keeps histograms otherwise than Metrics.publish expects;"
            " install a release within pyproject.toml's range"
        )
