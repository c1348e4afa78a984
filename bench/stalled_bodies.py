"""The "announce 1 MiB, send 9 bytes" reproducer of docs/robustness.md, against a real `serve`.

    python bench/stalled_bodies.py [--stalled 32] [--announce 1048576] [--send 9]
                                   [--reviews 20] [--server-arg=--flag=value ...]

Starts `python -m webhook serve` as bench/soak.py does, opens --stalled TLS connections that
each send a request head with `Content-Length: --announce` and --send bytes of body and then
nothing, waits a second, then sends --reviews ordinary reviews (one pod asking for a shared
GPU) one after another on a connection of their own, and prints what each was answered, the
server's 429 count, and what the stalled connections got when the server closed them (408
after the body timeout). Exit 1 when an ordinary review was not allowed.

At 7acb895 (bytes in flight reserved from the announced length) 32 such connections made
every ordinary review a 429.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import soak

h = soak.h


async def run(args: argparse.Namespace, server: h.Process, ca_file: Path) -> int:
    await server.ready()
    context = h.client_context(ca_file)

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=context, server_hostname=h.HOST, limit=1 << 20
        )

    body = soak.review_body(soak.POD)
    stalled = []
    for _ in range(args.stalled):
        reader, writer = await connect()
        writer.write(soak.head(args.announce) + body[: args.send])
        await writer.drain()
        stalled.append((reader, writer))
    opened = time.perf_counter()
    await asyncio.sleep(1.0)

    answers: collections.Counter[str] = collections.Counter()
    latencies = []
    reader, writer = await connect()
    for n in range(args.reviews):
        uid = f"00000000-0000-0000-0000-{n:012d}".encode()
        one = body.replace(soak.UID.encode(), uid)
        started = time.perf_counter()
        status, _, answer = await soak.exchange(reader, writer, soak.head(len(one)) + one)
        latencies.append((time.perf_counter() - started) * 1000)
        allowed = status == 200 and b'"allowed":true' in answer and uid in answer
        answers["200 allowed" if allowed else f"{status} {answer[:100]!r}"] += 1
    writer.close()
    seconds_in = time.perf_counter() - opened
    print(
        f"{args.stalled} connections announcing {args.announce} bytes and sending {args.send};"
        f" {args.reviews} ordinary reviews sent {seconds_in:.1f} s after they opened:"
        f" {dict(answers)}; ms max {max(latencies):.1f}",
        flush=True,
    )

    async def outcome(reader: asyncio.StreamReader) -> str:
        try:
            async with asyncio.timeout(30):
                data = await reader.read()
        except (OSError, TimeoutError) as exc:
            return type(exc).__name__
        return data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "closed"

    closed = collections.Counter(await asyncio.gather(*(outcome(r) for r, _ in stalled)))
    print(
        f"the stalled connections, {time.perf_counter() - opened:.1f} s after they opened:"
        f" {dict(closed)}",
        flush=True,
    )
    for _, w in stalled:
        w.close()
    return 0 if answers == {"200 allowed": args.reviews} else 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stalled", type=int, default=32, help="connections with short bodies")
    parser.add_argument("--announce", type=int, default=1024 * 1024, help="Content-Length")
    parser.add_argument("--send", type=int, default=9, help="body bytes they send")
    parser.add_argument("--reviews", type=int, default=20, help="ordinary reviews after them")
    parser.add_argument("--server-arg", action="append", default=[], metavar="ARG")
    args = parser.parse_args()
    soak.raise_fd_limit(2 * args.stalled + 1024)
    with tempfile.TemporaryDirectory(prefix="gpu-share-webhook-stalled-") as name:
        directory = Path(name)
        ca_file = soak.start_directory(directory)
        with h.serving(directory, "--drain-seconds=0", *args.server_arg) as server:
            return asyncio.run(run(args, server, ca_file))


if __name__ == "__main__":
    sys.exit(main())
