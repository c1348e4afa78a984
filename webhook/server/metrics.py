"""The Prometheus metrics of the admission server (`GET /metrics` on the plain-HTTP port).

One `Metrics` per server, in a registry of its own (so tests can run several servers side
by side). What every admission request counts (reviews, violations, latency, requests in
flight) is counted in plain Python on the request path, a dictionary update or two, and read
by a collector of our own when Prometheus scrapes (prometheus-client's documented custom
collector: `collect` yields metric families). prometheus-client's own metric objects take a
lock and several calls per value; they stay for what happens now and then (reloads,
connections closed, requests shed).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

# Without this every counter also exposes a `_created` timestamp series, doubling the
# series for nothing a dashboard uses (process start time is there already).
disable_created_metrics()  # type: ignore[no-untyped-call]

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

# The values of the `decision` label of the reviews counter.
ALLOWED = "allowed"
DENIED = "denied"
# Answered with an AdmissionReview that denies because the review failed or ran out of time.
ERROR = "error"
# Not a usable AdmissionReview, or not taken now: answered 400, 408, 413, 415 or 429.
INVALID = "invalid"

# Why a connection was closed or turned away: the `reason` of
# gpu_share_webhook_connections_closed_total (`connections` says when each is counted).
HEADER = "header"
REFUSED = "refused"
SOURCE_REFUSED = "source-refused"
TLS_TIMEOUT = "tls-timeout"
TLS_FAILED = "tls-failed"
CLIENT_CERTIFICATE = "client-certificate"
CLOSE_REASONS = (HEADER, REFUSED, SOURCE_REFUSED, TLS_TIMEOUT, TLS_FAILED, CLIENT_CERTIFICATE)

# Why a request was answered 429 or 408 before review: the `reason` of
# gpu_share_webhook_requests_shed_total.
INFLIGHT_BYTES = "inflight-bytes"
SOURCE_INFLIGHT_BYTES = "source-inflight-bytes"
SOURCE_LARGE_SHARE = "source-large-share"
BODY_TIMEOUT = "body-timeout"
SHED_REASONS = (INFLIGHT_BYTES, SOURCE_INFLIGHT_BYTES, SOURCE_LARGE_SHARE, BODY_TIMEOUT)


class Metrics:
    """The server's metrics and the registry `/metrics` exposes."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        # Counted on the request path (`count_review`, `count_violation`, `in_flight`), read
        # by `_Requests` at a scrape.
        self.in_flight = 0
        self.reviews: dict[tuple[str, str, str], int] = {}
        self.violations: dict[tuple[str, str, str, str], int] = {}
        self.latencies: dict[str, _Latencies] = {}
        registry.register(_Requests(self))
        self.policy_reloads = Counter(
            f"{PREFIX}_policy_reloads",
            "Changed policy sets loaded and put in force.",
            registry=registry,
        )
        self.policy_reload_errors = Counter(
            f"{PREFIX}_policy_reload_errors",
            "Changed policy sets refused as invalid; the last good set stayed in force.",
            registry=registry,
        )
        self.certificate_reloads = Counter(
            f"{PREFIX}_certificate_reloads",
            "New serving certificates loaded from the certificate directory.",
            registry=registry,
        )
        self.certificate_reload_errors = Counter(
            f"{PREFIX}_certificate_reload_errors",
            "New certificate files refused; the certificate served before stayed.",
            registry=registry,
        )
        self.certificate_expiry = Gauge(
            f"{PREFIX}_certificate_expiry_seconds",
            "Seconds until the serving certificate expires (negative once it has).",
            registry=registry,
        )

        self.connections = Gauge(
            f"{PREFIX}_connections",
            "Admission connections open right now (waiting for their TLS handshake, in it,"
            " or past it).",
            registry=registry,
        )
        self.connections_closed = Counter(
            f"{PREFIX}_connections_closed",
            "Admission connections the server closed or turned away, by reason: header (no"
            " complete request head within the header timeout, 10 s), refused (closed before"
            " its handshake at 4,096 connections open: the newcomer, or one still waiting for"
            " its handshake to make room), source-refused (the newcomer at 1,024 from its"
            " address, or from an address whose large reviews took more than their share of"
            " the server's time), tls-timeout (no TLS handshake within the header timeout, its wait"
            " for a turn included), tls-failed (the handshake failed: not TLS, no common"
            " suite, the client went away), client-certificate (with --client-ca-file:"
            " missing, not signed by those CAs, or of a name not in --client-names).",
            ["reason"],
            registry=registry,
        )
        self.requests_shed = Counter(
            f"{PREFIX}_requests_shed",
            "Admission requests answered 429 or 408 before review, by reason: inflight-bytes"
            " (16 MiB of large review bodies in flight), source-inflight-bytes (8 MiB from the"
            " request's address), source-large-share (the large reviews of the request's"
            " address took more than a fifth of the server's time lately), body-timeout (the"
            " body did not arrive within 10 s).",
            ["reason"],
            registry=registry,
        )
        # Every reason's series from the start, at 0 (a rate over a series that appears
        # only with its first event misses that event), each looked up once: a flood's
        # refusals are counted a thousand times a second.
        self._closed = {r: self.connections_closed.labels(r) for r in CLOSE_REASONS}
        self._shed = {r: self.requests_shed.labels(r) for r in SHED_REASONS}
        self.policy_files_not_loaded = Gauge(
            f"{PREFIX}_policy_files_not_loaded",
            "Policy files that do not load right now (their last good version, if any, serves;"
            " see /readyz and the log for the file and the error).",
            registry=registry,
        )

    def count_review(self, endpoint: str, policy: str, decision: str, seconds: float) -> None:
        """One admission request answered: count it by its labels and observe its latency."""
        key = (endpoint, policy, decision)
        reviews = self.reviews
        reviews[key] = reviews.get(key, 0) + 1
        latencies = self.latencies.get(endpoint)
        if latencies is None:
            latencies = self.latencies[endpoint] = _Latencies()
        latencies.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        latencies.sum += seconds

    def count_violation(self, endpoint: str, policy: str, rule: str, mode: str) -> None:
        violations = self.violations
        violation = (endpoint, policy, rule, mode)
        violations[violation] = violations.get(violation, 0) + 1

    def count_closed(self, reason: str) -> None:
        self._closed[reason].inc()

    def count_shed(self, reason: str) -> None:
        self._shed[reason].inc()

    def exposition(self) -> bytes:
        """The text format a Prometheus scrape reads (this process's counts up to now)."""
        return bytes(generate_latest(self.registry))


class _Latencies:
    """Review latencies of one endpoint: how many fell in each bucket (the last one: beyond
    the largest bound), and their sum."""

    __slots__ = ("buckets", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0


class _Requests(Collector):
    """What the request path counts, as metric families, when the registry is scraped."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        counts = self._metrics
        reviews = CounterMetricFamily(
            f"{PREFIX}_reviews",
            "Admission requests answered, by endpoint, policy and decision"
            " (allowed, denied, error: answered with an internal-error denial,"
            " invalid: refused with HTTP 400, 408, 413, 415 or 429).",
            labels=["endpoint", "policy", "decision"],
        )
        for review, count in list(counts.reviews.items()):
            reviews.add_metric(review, count)
        yield reviews
        violations = CounterMetricFamily(
            f"{PREFIX}_rule_violations",
            "Rule violations found in reviews, by endpoint, policy, rule and the mode that"
            " applied it: enforce (refused), warn or dry-run (admitted; the would-be"
            " refusals of a rollout).",
            labels=["endpoint", "policy", "rule", "mode"],
        )
        for violation, count in list(counts.violations.items()):
            violations.add_metric(violation, count)
        yield violations
        latency = HistogramMetricFamily(
            f"{PREFIX}_review_duration_seconds",
            "Time from receiving an admission request to having its answer.",
            labels=["endpoint"],
        )
        bounds = [*(f"{b}" for b in LATENCY_BUCKETS), "+Inf"]
        for endpoint, counted in list(counts.latencies.items()):
            cumulative, total = [], 0
            for bound, count in zip(bounds, counted.buckets, strict=True):
                total += count
                cumulative.append((bound, float(total)))
            latency.add_metric([endpoint], cumulative, counted.sum)
        yield latency
        yield GaugeMetricFamily(
            f"{PREFIX}_reviews_in_flight",
            "Admission requests being received or reviewed.",
            value=counts.in_flight,
        )
