"""The request path counts in plain Python and a collector of ours shows the counts at a
scrape: what it shows must be what prometheus-client itself would have counted."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from webhook.server import metrics
from webhook.server.metrics import ALLOWED, DENIED, Metrics

LATENCY = "gpu_share_webhook_review_duration_seconds"
REVIEWS = "gpu_share_webhook_reviews_total"
VIOLATIONS = "gpu_share_webhook_rule_violations_total"

# Below, on and between the bounds (a value on a bound counts in that bucket), beyond the
# largest one, and zero.
SECONDS = [0.0, 0.0001, 0.0005, 0.00051, 0.001, 0.0049, 0.005, 0.2, 29.9, 30.0, 31.0, 400.0]


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(registry: CollectorRegistry, name: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        if family.name == name
        for s in family.samples
    }


def test_latencies_and_reviews_are_exposed_as_prometheus_client_counts_them() -> None:
    ours = Metrics()
    reference = CollectorRegistry()
    histogram = Histogram(LATENCY, "", ["endpoint"], buckets=metrics.LATENCY_BUCKETS,
                          registry=reference)
    counter = Counter("gpu_share_webhook_reviews", "", ["endpoint", "policy", "decision"],
                      registry=reference)
    for n, seconds in enumerate(SECONDS):
        endpoint = "mutate" if n % 3 else "validate"
        decision = ALLOWED if n % 2 else DENIED
        ours.count_review(endpoint, "default", decision, seconds)
        histogram.labels(endpoint).observe(seconds)
        counter.labels(endpoint, "default", decision).inc()
        if n == 5:
            ours.exposition()  # a scrape in between changes nothing
    ours.exposition()
    for name in (LATENCY, "gpu_share_webhook_reviews"):
        expected = samples(reference, name)
        assert expected
        # Sums of the same values added in another order may differ in the last digit.
        assert samples(ours.registry, name) == pytest.approx(expected, rel=1e-12)


def test_each_count_is_shown_once_however_often_scraped() -> None:
    ours = Metrics()
    ours.count_review("mutate", "default", ALLOWED, 0.002)
    ours.count_violation("validate", "default", "replicas", "enforce")
    ours.count_violation("validate", "default", "replicas", "enforce")
    ours.exposition()
    ours.exposition()
    registry = ours.registry
    labels = {"endpoint": "mutate", "policy": "default", "decision": ALLOWED}
    assert registry.get_sample_value(REVIEWS, labels) == 1
    assert registry.get_sample_value(f"{LATENCY}_count", {"endpoint": "mutate"}) == 1
    assert registry.get_sample_value(f"{LATENCY}_sum", {"endpoint": "mutate"}) == 0.002
    violation = {"endpoint": "validate", "policy": "default", "rule": "replicas",
                 "mode": "enforce"}
    assert registry.get_sample_value(VIOLATIONS, violation) == 2
    ours.count_review("mutate", "default", ALLOWED, 0.002)
    ours.exposition()
    assert registry.get_sample_value(REVIEWS, labels) == 2


def test_requests_in_flight_are_what_they_are_when_scraped() -> None:
    ours = Metrics()
    ours.in_flight += 2
    ours.exposition()
    assert ours.registry.get_sample_value("gpu_share_webhook_reviews_in_flight") == 2
    ours.in_flight -= 2
    ours.exposition()
    assert ours.registry.get_sample_value("gpu_share_webhook_reviews_in_flight") == 0
