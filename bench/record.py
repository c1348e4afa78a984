"""What recording a review costs the admission handler, in process: the metrics and the
review log line of one request, against the target of 10 us for both together.

    python bench/record.py [--seconds 2]

Builds the server's application as `serve` does (`create_app(settings, review_log=...)`,
settings as tests/support/server_helpers.py makes them: fresh certificates, the shipped policies),
takes its `POST /mutate` route and times `admission.Route.record` on real `codec.review` outcomes
of bench/core.py's pod(1) and pod(50) reviews: `Metrics.count_review` (a review counted
and its latency observed, in plain Python until `Metrics.publish`) and the review line,
made by `logs.review_line` and written by `logs.JsonLines` to an unbuffered
/dev/null, as `serve` writes to standard error's descriptor (JsonLines holds the lines and
writes them together, a write(2) per 4 KiB of lines; a pipe to the container runtime costs
more than /dev/null). Timed inside a running event loop, as in the server. Rows:

- record: the whole of `admission.Route.record`;
- count_review: the metrics alone;
- review line: the line alone, made and written as `record` does.

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

from tests.support import server_helpers as h  # noqa: E402
from webhook.server import app as server  # noqa: E402
from webhook.server import (  # noqa: E402
    codec,
    logs,
    states,
)
from webhook.server.logs import JsonLines  # noqa: E402
from webhook.server.metrics import ALLOWED  # noqa: E402

TARGET_US = 10.0


def mutate_route(app: Any) -> Any:
    """The `admission.Route` behind `POST /mutate` (its handler is the route's bound `handle`)."""
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


def write_line(log: JsonLines, outcome: codec.Outcome, seconds: float) -> None:
    log(logs.review_line(outcome, "mutate", "default", seconds))


async def measure(directory: Path, seconds: float) -> list[tuple[str, str, float]]:
    rows = []
    with open(os.devnull, "wb", buffering=0) as raw:
        app = server.create_app(h.settings(directory), review_log=JsonLines(raw))
        route = mutate_route(app)
        policy_set = app[states.STATE].policies
        for n in (1, 50):
            body = core.review_body(core.pod(n))
            started = time.perf_counter()
            outcome = codec.review(
                body, policies=policy_set, policy_name="default", endpoint="mutate"
            )
            # The handler's `seconds`: receiving and reviewing (the histogram bucket it hits).
            took = time.perf_counter() - started
            if not outcome.decision.allowed:
                raise SystemExit(f"pod({n}) was not admitted: {outcome.body[:200]!r}")
            calls: dict[str, Callable[[], object]] = {
                "record": functools.partial(route.record, "default", policy_set, outcome, took),
                "count_review": functools.partial(
                    route.metrics.count_review, "mutate", "default", ALLOWED, took
                ),
                "review line": functools.partial(write_line, JsonLines(raw), outcome, took),
            }
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
