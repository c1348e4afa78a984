"""Where the admission server's time goes: the real server with its review swapped for
stand-ins that do ever more of the work, under the load of bench/server.py.

    python bench/server_breakdown.py [--seconds 10] [--connections 32] [--loop uvloop]
                                     [--containers 1 | --stream mixed|replicas] [--pods 5000]
                                     [--serve-python PYTHON]

Rows, each a server process on one core on the event loop --loop (uvloop, serve's default
where installed, or asyncio), driven by wrk (one thread, keep-alive TLS) with bench/core.py's
review of a pod with --containers containers over and over (bench/server.py's bodies), or
with one of bench/server.py's streams (`--stream mixed`: --pods distinct pods in turn,
`--stream replicas`: the pods of a few Deployments):

- bare aiohttp: reads the body, answers a canned AdmissionReview (bench/server.py's);
- canned review: gpu-share-webhook's server (the listener and its adapter, routing, the
  handler's checks, metrics) answering the canned response without looking at the body;
- canned review, review log: the same with its JSON review line (as `serve` writes it);
- + parse: `codec.parse` of each body, then the canned answer;
- + decide: parse and `codec.decide` (the core), then the canned answer;
- real review: `codec.review`, as `serve` runs it, without the review line;
- serve: `gpu-share-webhook serve` itself, review log on (run by --serve-python, default
  this interpreter, as the stand-ins are: the installed package when there is one).

The rows below "bare" run without review log lines but the second and "serve". Compare the rows of
one run (the cores are shared with wrk), and read the differences as CPU per request: "CPU
us" is the server's CPU time over the requests wrk counted, steadier than 1 / (reviews/s)
on a machine whose other jobs take the server's core at times.
"""

from __future__ import annotations

import argparse
import functools
import logging
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The installed package when there is one (a wheel install is compiled, as bench/core.py):
# run with a wheel install's interpreter to measure the compiled build's stand-ins.
sys.path.append(str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import server as bench  # noqa: E402  bench/server.py: bodies, wrk driver, process helpers

from webhook.policy import kinds, policies  # noqa: E402
from webhook.policy.policies import PolicySet  # noqa: E402
from webhook.server import app as server  # noqa: E402
from webhook.server import codec, configuration, logs, serving  # noqa: E402
from webhook.tools import serve as serve_tool  # noqa: E402

# Stand-in: its row in the table.
VARIANTS = {
    "canned": "canned review",
    "logged": "canned review, review log",
    "parse": "+ parse",
    "decide": "+ decide",
    "real": "real review",
}


def serve_variant(
    variant: str, *, port: int, metrics_port: int, cert_dir: Path, body_file: Path, loop: str
) -> None:
    """Run the real server with the review stand-in `variant` until SIGTERM."""
    loaded = policies.load_directory(REPO / "policies")
    sample = body_file.read_bytes().split(b"\n", 1)[0]  # a stream's first review
    canned = codec.review(sample, policies=loaded, policy_name="default", endpoint="mutate")

    def stand_in(
        body: bytes,
        *,
        policies: PolicySet,
        policy_name: str,
        endpoint: codec.Endpoint,
        kinds: kinds.Kinds = kinds.BUILTIN,
    ) -> codec.Outcome:
        if variant in ("canned", "logged"):
            return canned
        request = codec.parse(body)
        if variant == "decide":
            codec.decide(
                request, policies=policies, policy_name=policy_name, endpoint=endpoint, kinds=kinds
            )
        return canned

    # `serve` makes its app with create_app: hand it the stand-in.
    review = codec.review if variant == "real" else stand_in
    server.create_app = functools.partial(server.create_app, review=review)  # type: ignore[assignment]
    settings = configuration.Settings(
        policies_dir=REPO / "policies",
        cert_dir=cert_dir,
        host="127.0.0.1",
        port=port,
        metrics_port=metrics_port,
        drain_seconds=0,
    )
    if loop == "asyncio":
        sys.modules["uvloop"] = None  # type: ignore[assignment]  # serve takes asyncio's loop
    review_log = logs.JsonLines(serve_tool._review_stream()) if variant == "logged" else None
    logs.configure_logging("info")  # the start-up line, which the drivers wait for
    if variant != "logged":
        # No review line at all: without a review log, serve writes them through `logging`.
        logging.getLogger(logs.REVIEW_LOGGER).setLevel(logging.WARNING)
    serving.run(settings, review_log=review_log)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per row")
    parser.add_argument("--warmup", type=float, default=2.0, help="before each row")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--loop", choices=bench.LOOPS, default="uvloop")
    parser.add_argument("--containers", type=int, default=1, help="in the review's pod")
    parser.add_argument("--stream", choices=("mixed", "replicas"), help="instead of one body")
    parser.add_argument("--pods", type=int, default=5000, help="reviews of the stream")
    parser.add_argument("--serve-python", default=sys.executable, help="runs the serve rows")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--metrics-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cert-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--body", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        serve_variant(
            args.variant,
            port=args.port,
            metrics_port=args.metrics_port,
            cert_dir=args.cert_dir,
            body_file=args.body,
            loop=args.loop,
        )
        return 0
    if shutil.which("wrk") is None:
        print("bench/server_breakdown.py needs wrk: apt-get install -y wrk", file=sys.stderr)
        return 2
    if args.loop == "uvloop" and bench.uvloop is None:
        print("bench/server_breakdown.py --loop uvloop: uvloop is not installed", file=sys.stderr)
        return 2
    rows: list[tuple[str, bench.Result]] = []
    replayed = () if args.stream else (args.containers,)
    streams = (args.stream,) if args.stream else ()
    with bench.workspace("gpu-share-webhook-breakdown-", replayed, streams, pods=args.pods) as ws:
        body = ws.streams[args.stream] if args.stream else ws.bodies[args.containers]

        for variant, label in VARIANTS.items():
            port, metrics_port = bench.free_port(), bench.free_port()
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                f"--variant={variant}",
                f"--loop={args.loop}",
                f"--port={port}",
                f"--metrics-port={metrics_port}",
                f"--cert-dir={ws.cert_dir}",
                f"--body={body.file}",
            ]
            log = ws.directory / f"{variant}.log"
            with bench.running(command, log, ws.env) as process:
                bench.wait_ready(metrics_port, process, log)
                bench.check_answer(label, bench.post(port, body.data, ws.ca_file), body.expected)
                result = bench.measure(label, port, args=args, body=body, pids=[process.pid])
            rows.append((label, result))
        build = bench.build_of(args.serve_python)[0]
        serve = bench.measure_serve(
            ws, body, loop=args.loop, python=args.serve_python, label=build, args=args
        )
        rows.append(("serve (review log on)", serve))
        bare = bench.measure_bare(bench.BARE, ws, body, loop=args.loop, parse=False, args=args)
        rows.insert(0, (bare.name, bare))
    print(
        f"POST {bench.PATH}, TLS, keep-alive, wrk -t1 -c{args.connections},"
        f" {args.seconds:g} s each, 1 server process on {args.loop}, {body.label};"
        f" serve rows: {build}, stand-ins: {bench.build_of(sys.executable)[0]};"
        f" load average {bench.load()} after"
    )
    print()
    bare_rate, bare_us = rows[0][1].requests_per_second, rows[0][1].cpu_us
    print(
        "| server answers with | reviews/s | us/request | vs bare | CPU us/request"
        " | CPU us beyond bare | server CPU |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        rate = r.requests_per_second
        cpu = f"{r.cpu_us:.1f}" if r.cpu_us is not None else "-"
        beyond = f"{r.cpu_us - bare_us:.1f}" if r.cpu_us is not None and bare_us else "-"
        share = f"{r.server_cpu:.0%}" if r.server_cpu is not None else "-"
        print(
            f"| {name} | {rate:,.0f} | {1e6 / rate:.1f} | {rate / bare_rate:.2f} | {cpu}"
            f" | {beyond} | {share} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
