"""Where the time of a review goes, in process: each step of `serve`'s request path, timed
on its own over a stream of bench/server.py's reviews, in us per review.

    python bench/request_path.py [--stream mixed] [--pods 5000] [--deployments 10]
                                 [--seconds 2]

The steps of `codec.review` as `serve` calls it (with its answer cache, `--cache-size`
2048) and of `admission.Route.record`, each timed alone on every review of the stream in
turn (the best pass over about --seconds; one core: the process pins itself to one CPU, as
bench/core.py). On the mixed stream (distinct pods) every cache lookup misses; on the
replicas stream (the pods of a few Deployments) every review after the first of its
Deployment is answered from the answer cache. Rows:

- answer cache: the body's shape (`codec.shape`, its key), the lookup, and on a miss
  what is kept of the answer (`codec._entry` and `Answers.put`);
- parse: `codec.parse` (orjson and the Request);
- core: the pod's view (`view.templates`, `view.read`); what is worked out of it before
  the rules (`facts.gather`: GPU usage, profile, placement); the rest of `codec.decide`
  (the checks and patches of the policy's table, the record, the decision's assembly);
- encode, summary: the response body and what the log line and metrics read of it;
- total: `codec.review` as serve calls it, with the answer cache and with none (what
  `--cache-size 0` runs);
- metrics: `Metrics.count_review`; review line: `logs.review_line` and `logs.JsonLines`
  writing it to a file (as bench/server.py's serve writes its standard error to a log file)
  and to /dev/null;
- gc: the collector's pauses (gc.callbacks) while `codec.review` runs, after a
  `gc.freeze()` as `serve` makes at start.

What it does not see: TLS, aiohttp and the handler around the review (bench/server.py and
bench/server_breakdown.py measure those under load), and the caches' effect on the
processor's caches when a server does everything at once.

It measures the installed package when there is one (a wheel install is compiled with
mypyc), as bench/core.py: run it with the interpreter of the build to measure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The installed package when there is one (as bench/core.py): imported before bench/server.py
# puts this checkout first on the path.
sys.path.append(str(REPO))

import orjson  # noqa: E402

from webhook.engine import facts, reviewing, view  # noqa: E402
from webhook.policy import policies  # noqa: E402
from webhook.server import app as server  # noqa: E402
from webhook.server import certificates, codec, configuration, logs  # noqa: E402
from webhook.server.metrics import ALLOWED  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
import server as bench  # noqa: E402  bench/server.py: the streams

BUILD = "compiled (mypyc)" if not reviewing.__file__.endswith(".py") else "pure Python"
ENDPOINT = "mutate"


def per_review(
    step: Callable[[Any], object], inputs: Callable[[], list[Any]], seconds: float
) -> float:
    """Microseconds per call of `step` on each of the inputs (made anew, untimed, for each
    pass): the best of three passes at least, more while `seconds` last. CPU time of this
    process (the machine is shared: time spent waiting for the core is not counted)."""
    best = float("inf")
    passes = 0
    deadline = time.perf_counter() + seconds
    while passes < 3 or time.perf_counter() < deadline:
        items = inputs()
        started = time.process_time()
        for item in items:
            step(item)
        best = min(best, (time.process_time() - started) / len(items))
        passes += 1
    return best * 1e6


def gc_us(call: Callable[[], object], count: int) -> float:
    """Microseconds per call that the collector's pauses took while `call` ran `count` times
    (gc.callbacks)."""
    paused = 0.0
    started = 0.0

    def callback(phase: str, _info: dict[str, int]) -> None:
        nonlocal paused, started
        if phase == "start":
            started = time.perf_counter()
        else:
            paused += time.perf_counter() - started

    gc.callbacks.append(callback)
    try:
        for _ in range(count):
            call()
    finally:
        gc.callbacks.remove(callback)
    return paused / count * 1e6


async def measure(bodies: list[bytes], directory: Path, seconds: float) -> list[tuple[str, float]]:
    loaded = policies.load_directory(REPO / "policies")
    policy = loaded.get("default")
    assert policy is not None
    size = configuration.CACHE_SIZE
    rows: list[tuple[str, float]] = []

    def row(name: str, step: Callable[[Any], object], inputs: Callable[[], list[Any]]) -> float:
        us = per_review(step, inputs, seconds)
        rows.append((name, us))
        print(f"  {name}: {us:.2f}", file=sys.stderr)
        return us

    def same(items: list[Any]) -> Callable[[], list[Any]]:
        return lambda: items

    # What each step starts from, made once (untimed).
    shapes = [codec.shape(body) for body in bodies]
    assert all(shape is not None for shape in shapes)
    requests = [codec.parse(body) for body in bodies]
    decisions = [
        codec.decide(r, policies=loaded, policy_name="default", endpoint=ENDPOINT)
        for r in requests
    ]
    outcomes = [
        codec.Outcome(r, d, codec.encode(r.uid, d), codec.summary(d))
        for r, d in zip(requests, decisions, strict=True)
    ]
    patches = [orjson.dumps(d.patch) if d.patch else b"" for d in decisions]

    def views() -> list[view.Pod]:
        return [view.read(view.templates(r.object or {})[0][0]) for r in requests]

    def serve_review(answers: codec.Answers | None) -> Callable[[bytes], Any]:
        def call(body: bytes) -> Any:
            return codec.review(
                body, policies=loaded, policy_name="default", endpoint=ENDPOINT, answers=answers
            )

        return call

    # The answer cache as serve has it: each review of the stream once before the timing,
    # so that it is as full as on a server that runs for a while.
    answers = codec.Answers(size)
    cache_full = serve_review(answers)
    for body in bodies:
        cache_full(body)
    gc.collect()
    gc.freeze()  # as serve does once started

    row("answer cache: shape (its key)", codec.shape, same(bodies))
    looked_up = row(
        "answer cache: shape and lookup",
        lambda body: answers.get((policy, ENDPOINT, codec.shape(body).key)),  # type: ignore[union-attr]
        same(bodies),
    )
    rows[-1] = ("answer cache: lookup alone", looked_up - rows[-2][1])
    row("parse", codec.parse, same(bodies))
    view_us = row(
        "core: view (view.templates, view.read)",
        lambda r: view.read(view.templates(r.object)[0][0]),
        same(requests),
    )
    row("core: facts (facts.gather)", lambda view: facts.gather(view, policy), views)
    decided = per_review(
        lambda r: codec.decide(r, policies=loaded, policy_name="default", endpoint=ENDPOINT),
        same(requests),
        seconds,
    )
    rows.append(("core: the rest (rules, record, assembly)", decided - view_us - rows[-1][1]))
    rows.append(("core: codec.decide", decided))
    row("encode", lambda o: codec.encode(o.request.uid, o.decision), same(outcomes))
    row("summary", lambda o: codec.summary(o.decision), same(outcomes))
    fresh_answers: list[codec.Answers] = []

    def entries() -> list[tuple[codec.Outcome, codec.Shape, bytes]]:
        fresh_answers[:] = [codec.Answers(size)]
        return list(zip(outcomes, shapes, patches, strict=True))  # type: ignore[arg-type]

    def keep(item: tuple[codec.Outcome, codec.Shape, bytes]) -> None:
        outcome, shape, patch = item
        kept = codec._entry(outcome, shape, patch)
        if kept is not None:
            fresh_answers[0].put((policy, ENDPOINT, shape.key), kept, key_bytes=len(shape.key))

    row("answer cache: keep the answer (_entry, put)", keep, entries)
    row("total: codec.review with the answer cache", cache_full, same(bodies))
    row("total: codec.review, no cache (--cache-size 0)", serve_review(None), same(bodies))

    # Recording, as bench/record.py: the application serve makes, its POST /mutate route.
    cert_dir = directory / "certs"
    certificates.write_bundle(
        cert_dir, certificates.make_bundle(service=bench.SERVICE, namespace=bench.NAMESPACE)
    )
    settings = configuration.Settings(policies_dir=REPO / "policies", cert_dir=cert_dir)
    with (
        open(directory / "serve.log", "wb", buffering=0) as log_file,
        open(os.devnull, "wb", buffering=0) as devnull,
    ):
        app = server.create_app(settings, review_log=logs.JsonLines(log_file))
        route = next(
            r.handler.__self__
            for r in app.router.routes()
            if r.method == "POST" and r.resource.canonical == "/mutate"
        )
        row(
            "metrics (count_review)",
            lambda o: route.metrics.count_review(ENDPOINT, "default", ALLOWED, 0.0002),
            same(outcomes),
        )
        for name, stream in (("a file", log_file), ("/dev/null", devnull)):
            lines = logs.JsonLines(stream)
            row(
                f"review line, to {name}",
                lambda o, lines=lines: lines(logs.review_line(o, ENDPOINT, "default", 0.0002)),
                same(outcomes),
            )
            lines.flush()
    at = iter(range(10**9))
    rows.append(
        (
            "gc pauses in codec.review with the answer cache",
            gc_us(lambda: cache_full(bodies[next(at) % len(bodies)]), len(bodies) * 4),
        )
    )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stream", choices=("mixed", "replicas"), default="mixed")
    parser.add_argument("--pods", type=int, default=5000, help="reviews of the stream")
    parser.add_argument("--deployments", type=int, default=10, help="of the replicas stream")
    parser.add_argument("--seconds", type=float, default=2.0, help="per row")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    deployments = args.deployments if args.stream == "replicas" else None
    bodies = bench.stream_bodies(args.pods, deployments, seed=1 if deployments is None else 2)
    with tempfile.TemporaryDirectory(prefix="gpu-share-webhook-path-") as tmp:
        rows = asyncio.run(measure(bodies, Path(tmp), args.seconds))
    print(f"core: {BUILD} ({Path(reviewing.__file__).parent})")
    print(f"{args.stream} stream, {len(bodies):,} reviews, {time.strftime('%Y-%m-%d %H:%M')}")
    print()
    print(f"| {'step':<46} | us/review |")
    print(f"|{'-' * 48}|----------:|")
    for name, us in rows:
        print(f"| {name:<46} | {us:>9.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
