"""What recording a review costs the admission handler, in process: the metrics and the
review log line of one request, against the target of 10 us for both together.

    python bench/record.py [--seconds 2]

Builds the server's application as `serve` does (`create_app(settings, review_log=...)`,
settings as tests/server_helpers.py makes them: fresh certificates, the shipped policies),
takes its `POST /mutate` route and times `_Route.record` on real `reviews.review` outcomes
of bench/core.py's pod(1) and pod(50) reviews: `Metrics.count_review` (a counter and a
latency histogram) and the review line, written by `logs.JsonLines` to /dev/null. Timed
inside a running event loop, as in the server (JsonLines then flushes at most every 0.2 s
instead of per line). Rows:

- record: the whole of `_Route.record`, review log to a buffered /dev/null stream;
- record, unbuffered log: the same with the stream unbuffered, as `serve` writes to
  `sys.stderr.buffer` in the image (PYTHONUNBUFFERED=1 in the Dockerfile makes it a raw
  FileIO): one write(2) per line, here to /dev/null (a pipe to the container runtime
  costs more);
- count_review: the metrics alone;
- review line: `JsonLines` on the line `record` builds, alone.

Prints us per request, the best batch of the run (one core: the process pins itself to
one CPU, as bench/core.py).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import core  # noqa: E402  bench/core.py: the review bodies

from webhook import certificates, reviews  # noqa: E402
from webhook.transport import app as server  # noqa: E402
from webhook.transport.logs import JsonLines  # noqa: E402
from webhook.transport.metrics import ALLOWED  # noqa: E402

SERVICE = "gpu-share-webhook"
NAMESPACE = "gpu-share-system"
TARGET_US = 10.0


def settings(directory: Path) -> server.Settings:
    """As tests/server_helpers.py's `settings`: its own certificates, the shipped policies."""
    cert_dir = directory / "certs"
    certificates.write_bundle(
        cert_dir, certificates.make_bundle(service=SERVICE, namespace=NAMESPACE)
    )
    return server.Settings(
        policies_dir=REPO / "policies", cert_dir=cert_dir, service=SERVICE, namespace=NAMESPACE
    )


def mutate_route(app: Any) -> Any:
    """The `_Route` behind `POST /mutate` (its handler is the route's bound `handle`)."""
    for route in app.router.routes():
        if route.method == "POST" and route.resource.canonical == "/mutate":
            return route.handler.__self__
    raise SystemExit("no POST /mutate route in the application")


def best_us(call: Callable[[], object], seconds: float) -> float:
    """Microseconds per call: the best batch over about `seconds`."""
    batch = 2000
    best = float("inf")
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(batch):
            call()
        best = min(best, (time.perf_counter() - start) / batch)
    return best * 1e6


async def measure(directory: Path, seconds: float) -> list[tuple[str, str, float]]:
    rows = []
    with open(os.devnull, "wb") as buffered, open(os.devnull, "wb", buffering=0) as raw:
        apps = {
            "record": server.create_app(settings(directory), review_log=JsonLines(buffered)),
            "record, unbuffered log": server.create_app(
                settings(directory), review_log=JsonLines(raw)
            ),
        }
        routes = {name: mutate_route(app) for name, app in apps.items()}
        route = routes["record"]
        policy_set = apps["record"][server.STATE].policies
        for n in (1, 50):
            body = core.review_body(core.pod(n))
            started = time.perf_counter()
            outcome = reviews.review(
                body, policies=policy_set, policy_name="default", endpoint="mutate"
            )
            # The handler's `seconds`: receiving and reviewing (the histogram bucket it hits).
            took = time.perf_counter() - started
            if not outcome.decision.allowed:
                raise SystemExit(f"pod({n}) was not admitted: {outcome.body[:200]!r}")
            calls: dict[str, Callable[[], object]] = {
                name: functools.partial(r.record, "default", policy_set, outcome, took)
                for name, r in routes.items()
            }
            calls["count_review"] = functools.partial(
                route.metrics.count_review, "mutate", "default", ALLOWED, took
            )
            calls["review line"] = functools.partial(
                JsonLines(buffered), server.review_line(outcome, "mutate", "default", took)
            )
            label = f"pod({n}), {len(outcome.decision.patch)} patch ops"
            rows += [(label, name, best_us(call, seconds)) for name, call in calls.items()]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="per row")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    with tempfile.TemporaryDirectory(prefix="gpu-share-webhook-record-") as tmp:
        rows = asyncio.run(measure(Path(tmp), args.seconds))
    print(f"recording one review (target: metrics and log line together <= {TARGET_US:g} us)")
    print()
    print(f"{'review':<24}{'what':<26}{'us/request':>11}")
    for label, name, us in rows:
        print(f"{label:<24}{name:<26}{us:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
