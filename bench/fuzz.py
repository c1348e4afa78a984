"""Hostile AdmissionReviews against a real `gpu-share-webhook serve` process.

    python bench/fuzz.py [--count 5000] [--connections 8] [--seed N] [--generators 1]
                         [--generator-memory 4096] [--server-arg=--flag=value ...]
                         [--failures DIR]

Starts `python -m webhook serve` on free loopback ports in a directory of its own (its own
CA and serving certificate, the repository's policies, its log in a file: the way
tests/support/server_helpers.py runs it), generates --count cases from the strategies of
tests/support/fuzzing.py (the ones tests/server/test_fuzz.py runs a few thousand of, derandomized;
random here, --seed repeats a run) in --generators processes of their own (each limited to
--generator-memory MB of address space: one that needs more stops with the seed of its batch
rather than taking the machine), and sends them over
--connections keep-alive TLS connections, as the API server would (its Service name, its
CA, `?timeout=10s`). Each answer is judged as the tests judge it; an allowed review with a
patch is followed by the review of the patched object, which must be allowed with nothing
more to patch. 429 is a fair answer here (requests overlap: the in-flight limit).

Prints what the answers were (by status, and by the strategy that made the case), every
failure class (5xx, a status the contract does not allow, internal-error denials, malformed
answers, dropped connections, patches that do not apply or are not idempotent, refusals of
what must pass), requests/s, answer latency (measured here, so it includes this process's
own stalls), the slowest cases, and the server's RSS at the start, at its peak (VmHWM) and
at the end. The first 200 failing cases are written to --failures as they fail (the body,
and a report with the answer; all are counted); the server's error lines (with their
traces) are printed. Exit 1 when any failure class is non-zero or the server exited.

The rate is the fuzzer's, not the server's: generating a case costs more than reviewing it.
--server-arg passes flags to `serve` as they are (e.g. --server-arg=--max-connections=64).
See docs/robustness.md for a run of 100,000.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import multiprocessing
import os
import queue
import random
import resource
import signal
import ssl
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from soak import percentile, start_directory, status_of  # noqa: E402  bench/soak.py

from tests.support import fuzzing  # noqa: E402
from tests.support import server_helpers as h  # noqa: E402

# Cases per generator batch (one hypothesis run each, with a seed of its own).
BATCH = 1000
# A request that has no answer after this long counts as dropped.
REQUEST_TIMEOUT_SECONDS = 30.0
# Failing cases kept for the report (all are counted).
KEEP_REPORTS = 200
# The address space a generator process may take, MB (a batch takes ~0.2-0.7 GB of RSS).
GENERATOR_MEMORY_MB = 4096
# A generator's exit code when its batch did not fit in --generator-memory.
OUT_OF_MEMORY = 3


# --------------------------------------------------------------------------- generating


def batch(size: int, batch_seed: int) -> list[fuzzing.Case]:
    """`size` cases from one hypothesis run (generation only: nothing fails, nothing shrinks)."""
    cases: list[fuzzing.Case] = []

    @seed(batch_seed)
    @settings(
        max_examples=size,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=fuzzing.any_cases())
    def collect(case: fuzzing.Case) -> None:
        cases.append(case)

    collect()
    return cases[:size]


def limit_memory(megabytes: int) -> None:
    """Limit this process's address space: past it an allocation fails (MemoryError) rather
    than the machine swapping or the OOM killer choosing a victim."""
    limit = megabytes << 20
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def generate(
    out: Any,
    count: int,
    first_seed: int,
    step: int,
    *,
    memory_mb: int = GENERATOR_MEMORY_MB,
    making: Any = None,
) -> None:
    """Put `count` cases on `out` in lists of up to BATCH, then None. Runs in a process of
    its own, within `memory_mb` of address space; batch i of this generator uses seed
    `first_seed + i * step`, written to `making` (a shared int) before it is made."""
    limit_memory(memory_mb)
    made = 0
    batch_seed = first_seed
    while made < count:
        if making is not None:
            making.value = batch_seed
        try:
            cases = batch(min(BATCH, count - made), batch_seed)
        except MemoryError:
            print(
                f"the case generator ran out of its {memory_mb:,} MB making the batch of seed"
                f" {batch_seed}: a strategy of tests/support/fuzzing.py grows without bound"
                " (tests/tools/test_generators.py should have caught it)",
                file=sys.stderr,
                flush=True,
            )
            os._exit(OUT_OF_MEMORY)
        made += len(cases)
        out.put(cases)
        batch_seed += step
    out.put(None)


# --------------------------------------------------------------------------- sending


class Dropped(Exception):
    """The connection ended, or went silent, before a whole answer arrived."""


class Connection:
    """One keep-alive TLS connection, spoken to as the API server speaks (HTTP/1.1)."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.port = port
        self.context = context
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                "127.0.0.1",
                self.port,
                ssl=self.context,
                server_hostname=h.HOST,
                limit=1 << 20,
            )
        return self.reader, self.writer

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def post(self, case: fuzzing.Case) -> fuzzing.Answer:
        """The answer to `case`; Dropped when there is none."""
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_SECONDS):
                return await self._post(case)
        except (OSError, EOFError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError,
                ValueError) as exc:  # fmt: skip
            self.close()
            raise Dropped(f"{type(exc).__name__}: {exc}") from None

    async def _post(self, case: fuzzing.Case) -> fuzzing.Answer:
        reader, writer = await self._open()
        head = [f"POST {case.path} HTTP/1.1", f"Host: {h.HOST}"]
        if case.content_type is not None:
            head.append(f"Content-Type: {case.content_type}")
        head.append(f"Content-Length: {len(case.body)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        writer.write(case.body)
        # Read while the body is still being sent: a server may answer (413) before it has
        # read a large body, and then close.
        sending = asyncio.ensure_future(writer.drain())
        try:
            status_line = await reader.readline()
            if not status_line:
                raise EOFError("the connection closed before an answer")
            status = int(status_line.split()[1])
            headers: dict[str, str] = {}
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if "content-length" in headers:
                body = await reader.readexactly(int(headers["content-length"]))
            else:
                body = await reader.read()
        finally:
            if not sending.done():
                sending.cancel()
            with contextlib.suppress(BaseException):
                await sending
        if headers.get("connection", "").lower() == "close" or "content-length" not in headers:
            self.close()
        return fuzzing.Answer(status, headers.get("content-type", ""), body)


@dataclass
class Tally:
    """What the answers were, and what was wrong."""

    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    by_source: dict[str, collections.Counter[str]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )
    failures: collections.Counter[str] = field(default_factory=collections.Counter)
    again: collections.Counter[str] = field(default_factory=collections.Counter)
    cases: int = 0
    requests: int = 0
    reported: list[str] = field(default_factory=list)
    # Seconds from sending a case to its whole answer (first passes only).
    latencies: list[float] = field(default_factory=list)
    slowest: list[tuple[float, str]] = field(default_factory=list)
    # Where each failing case is written as it fails (None: kept in memory only).
    directory: Path | None = None

    def timed(self, seconds: float, case: fuzzing.Case) -> None:
        self.latencies.append(seconds)
        if len(self.slowest) < 5 or seconds > self.slowest[-1][0]:
            what = f"{case.source} ({case.what[:80]}), {len(case.body):,} bytes"
            self.slowest = sorted([*self.slowest, (seconds, what)], reverse=True)[:5]

    def fail(self, case: fuzzing.Case, problems: list[tuple[str, str]], answer: Any) -> None:
        for kind, _ in problems:
            self.failures[kind] += 1
        text = fuzzing.report(case, problems, answer)
        if len(self.reported) < KEEP_REPORTS:
            self.reported.append(text)
            if self.directory is not None:
                number = len(self.reported) - 1
                (self.directory / f"failure-{number:04}.txt").write_text(text + "\n")
                (self.directory / f"failure-{number:04}.body").write_bytes(case.body)
        print(f"  failure: {text.splitlines()[0][:300]}", file=sys.stderr, flush=True)
        self.by_source[case.source]["failed"] += 1


async def exchange(connection: Connection, case: fuzzing.Case, tally: Tally) -> None:
    tally.cases += 1
    tally.requests += 1
    started = time.perf_counter()
    try:
        answer = await connection.post(case)
        tally.timed(time.perf_counter() - started, case)
    except Dropped as exc:
        tally.outcomes["dropped"] += 1
        tally.by_source[case.source]["dropped"] += 1
        tally.fail(case, [(fuzzing.DROPPED, str(exc))], None)
        return
    verdict = fuzzing.judge(case, answer, busy=True)
    tally.outcomes[verdict.outcome] += 1
    tally.by_source[case.source][verdict.outcome] += 1
    if verdict.problems:
        tally.fail(case, verdict.problems, answer)
        return
    if verdict.again is None:
        return
    tally.requests += 1
    try:
        again = await connection.post(verdict.again)
    except Dropped as exc:
        tally.fail(verdict.again, [(fuzzing.DROPPED, str(exc))], None)
        return
    second = fuzzing.judge_again(verdict.again, again, busy=True)
    tally.again[second.outcome] += 1
    if second.problems:
        tally.fail(verdict.again, second.problems, again)


async def send_all(
    cases: asyncio.Queue[fuzzing.Case | None], port: int, context: ssl.SSLContext, tally: Tally
) -> None:
    connection = Connection(port, context)
    try:
        while (case := await cases.get()) is not None:
            await exchange(connection, case, tally)
    finally:
        connection.close()


# --------------------------------------------------------------------------- the server


def error_lines(server: h.Process) -> list[str]:
    """The server's log lines at level error (the traces of internal errors among them)."""
    return [
        f"{record.get('message')}\n{record.get('trace', '')}".strip()
        for record in server.log_lines()
        if isinstance(record, dict) and record.get("level") in ("error", "critical")
    ]


@dataclass
class Run:
    tally: Tally
    seconds: float
    rss_start: float
    rss_peak: float
    rss_end: float
    errors: list[str]


def _next_batch(out: Any, generators: list[Any], making: list[Any]) -> list[fuzzing.Case] | None:
    """The next batch a generator made, or None when one finished. A generator that dies
    (out of its --generator-memory, or killed) ends the run with its exit code rather than
    leaving it waiting for ever."""
    while True:
        try:
            batch: list[fuzzing.Case] | None = out.get(timeout=1.0)
        except queue.Empty:
            pairs = zip(generators, making, strict=True)
            dead = [(p, m) for p, m in pairs if p.exitcode not in (None, 0)]
            if dead:
                codes = "; ".join(f"{p.exitcode}, making the batch of seed {m.value}"
                                  for p, m in dead)  # fmt: skip
                message = f"a case generator died (exit code {codes})"
                if any(p.exitcode in (OUT_OF_MEMORY, -signal.SIGSEGV) for p, _ in dead):
                    # SIGSEGV: orjson does not survive an allocation that fails.
                    message += (
                        ": out of its --generator-memory, a strategy of"
                        " tests/support/fuzzing.py that grows without bound (python"
                        " bench/fuzz.py --help)"
                    )
                raise SystemExit(message) from None
            continue
        return batch


async def drive(args: argparse.Namespace, server: h.Process, ca_file: Path) -> Run:
    """Send the cases, judge the answers, watch the server's memory."""
    await server.ready()
    port, pid = server.port, server.popen.pid
    context = h.client_context(ca_file)
    spawn = multiprocessing.get_context("spawn")
    out = spawn.Queue(maxsize=2 * args.generators)
    shares = [args.count // args.generators] * args.generators
    shares[0] += args.count - sum(shares)
    # The seed of the batch each generator is making (for the message if it dies).
    making = [spawn.Value("q", args.seed + i, lock=False) for i in range(len(shares))]
    generators = [
        spawn.Process(
            target=generate,
            args=(out, share, args.seed + i, args.generators),
            kwargs={"memory_mb": args.generator_memory, "making": making[i]},
            daemon=True,
        )
        for i, share in enumerate(shares)
    ]
    for process in generators:
        process.start()
    cases: asyncio.Queue[fuzzing.Case | None] = asyncio.Queue(maxsize=4 * BATCH)
    tally = Tally(directory=args.failures)
    args.failures.mkdir(parents=True, exist_ok=True)
    loop = asyncio.get_running_loop()
    rss_start, _, _ = status_of(pid)
    started = time.perf_counter()
    senders = [
        asyncio.create_task(send_all(cases, port, context, tally))
        for _ in range(args.connections)
    ]
    finished = 0
    next_report = started + 10
    while finished < len(generators):
        batch = await loop.run_in_executor(None, _next_batch, out, generators, making)
        if batch is None:
            finished += 1
            continue
        for case in batch:
            await cases.put(case)
        if time.perf_counter() > next_report:
            next_report += 10
            print(
                f"  {tally.cases:,} cases, {tally.requests / (time.perf_counter() - started):,.0f}"
                f" requests/s, {sum(tally.failures.values())} failures,"
                f" RSS {status_of(pid)[0]:.0f} MB",
                file=sys.stderr,
                flush=True,
            )
    for _ in senders:
        await cases.put(None)
    await asyncio.gather(*senders)
    seconds = time.perf_counter() - started
    for process in generators:
        process.join(10)
    # Let the server settle (the review log flushes, large buffers are freed).
    await asyncio.sleep(1.0)
    rss_end, rss_peak, _ = status_of(pid)
    return Run(tally, seconds, rss_start, rss_peak, rss_end, [])


# --------------------------------------------------------------------------- the report


def table(run: Run, args: argparse.Namespace, command: str) -> str:
    tally = run.tally
    lines = [
        f"`{command}`: {tally.cases:,} cases, {args.connections} keep-alive TLS connections,"
        f" seed {args.seed}, {os.cpu_count()} CPUs",
        "",
        "| answer | cases |",
        "|---|---:|",
    ]
    rows = [*fuzzing.OUTCOMES, "dropped"]
    rows += sorted(set(tally.outcomes) - set(rows))
    for outcome in rows:
        lines.append(f"| {outcome} | {tally.outcomes[outcome]:,} |")
    agains = sum(tally.again.values())
    lines.append(
        f"| re-review of a patched object: allowed, nothing to patch | "
        f"{tally.again[fuzzing.ALLOWED]:,} of {agains:,} |"
    )
    lines += ["", "| failure | count |", "|---|---:|"]
    for kind in fuzzing.FAILURES:
        lines.append(f"| {kind} | {tally.failures[kind]:,} |")
    sources = sorted(tally.by_source)
    columns = [*fuzzing.OUTCOMES, "failed"]
    lines += [
        "",
        "| strategy | cases | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * (len(columns) + 1),
    ]
    for source in sources:
        counts = tally.by_source[source]
        cases = sum(v for k, v in counts.items() if k != "failed")
        lines.append(
            f"| {source} | {cases:,} | " + " | ".join(f"{counts[c]:,}" for c in columns) + " |"
        )
    lines += [
        "",
        "| | |",
        "|---|---:|",
        f"| requests (cases and re-reviews) | {tally.requests:,} |",
        f"| seconds | {run.seconds:,.0f} |",
        f"| requests/s | {tally.requests / run.seconds:,.0f} |",
        f"| answer ms, p50 / p99 / max | {percentile(tally.latencies, 50):,.1f} /"
        f" {percentile(tally.latencies, 99):,.1f} / {percentile(tally.latencies, 100):,.0f} |",
        f"| server RSS at start, MB | {run.rss_start:,.0f} |",
        f"| server RSS at peak, MB | {run.rss_peak:,.0f} |",
        f"| server RSS at end, MB | {run.rss_end:,.0f} |",
    ]
    if tally.slowest:
        lines += ["", "The slowest answers:", ""]
        lines += [f"- {seconds * 1000:,.0f} ms: {what}" for seconds, what in tally.slowest]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=5000, help="cases to send")
    parser.add_argument("--connections", type=int, default=8, help="concurrent connections")
    parser.add_argument("--seed", type=int, default=None, help="for a repeatable run")
    parser.add_argument(
        "--generators", type=int, default=max(1, (os.cpu_count() or 2) - 1),
        help="processes generating cases (generating costs more than reviewing)",
    )  # fmt: skip
    parser.add_argument(
        "--generator-memory", type=int, default=GENERATOR_MEMORY_MB, metavar="MB",
        help="address space each generator process may take; one that needs more stops the run",
    )  # fmt: skip
    parser.add_argument(
        "--server-arg", action="append", default=[], metavar="ARG",
        help="one more argument for `serve`, as it is (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--failures", type=Path, default=None,
        help=f"where failing cases are written, as they fail (the first {KEEP_REPORTS}):"
        " a report and the body of each (default: a new temporary directory)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.randrange(2**32)
    if args.failures is None:
        args.failures = Path(tempfile.mkdtemp(prefix="gpu-share-webhook-fuzz-failures-"))
    command = "python bench/fuzz.py " + " ".join(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="gpu-share-webhook-fuzz-") as directory:
        ca_file = start_directory(Path(directory))
        with h.serving(Path(directory), "--drain-seconds=0", *args.server_arg) as server:
            run = asyncio.run(drive(args, server, ca_file))
            alive = server.popen.poll() is None
            run.errors = error_lines(server)
    print(table(run, args, command))
    failed = sum(run.tally.failures.values()) + (0 if alive else 1)
    if not alive:
        print("\nthe server exited during the run", file=sys.stderr)
    if run.errors:
        print(f"\nthe server logged {len(run.errors)} errors; the first:", file=sys.stderr)
        for text in run.errors[:5]:
            print(text, file=sys.stderr)
    if run.tally.reported:
        print(
            f"\n{len(run.tally.reported)} failing cases written to {args.failures}; the first:",
            file=sys.stderr,
        )
        for text in run.tally.reported[:3]:
            print(text[:3000], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
