"""Review lines (`logs.JsonLines`): held, then written in whole lines a pipe keeps whole."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from webhook.server import logs


class Recording:
    """A raw stream that keeps each write apart, as the pipe sees them."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.flushes = 0

    def write(self, data: Any) -> int:
        self.writes.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        self.flushes += 1


def test_lines_are_written_together_in_whole_lines_of_at_most_4_kib() -> None:
    stream = Recording()
    lines = logs.JsonLines(stream)  # type: ignore[arg-type]

    async def burst() -> None:
        for n in range(40):
            lines({"n": n, "pad": "x" * 300})
        lines({"n": 40, "pad": "y" * 10_000})  # longer than one atomic write
        for n in range(41, 45):
            lines({"n": n})
        assert stream.writes == []  # held
        await asyncio.sleep(logs.JsonLines.FLUSH_SECONDS * 2)

    asyncio.run(burst())
    # ~16 KB of short lines and one of 10 KB: a handful of writes, several lines in most.
    assert 4 <= len(stream.writes) <= 8
    assert sum(write.count(b"\n") > 1 for write in stream.writes) >= 3
    for write in stream.writes:
        assert write.endswith(b"\n")
        assert len(write) <= logs.JsonLines.ATOMIC_WRITE_BYTES or write.count(b"\n") == 1
    numbers = [json.loads(line)["n"] for line in b"".join(stream.writes).splitlines()]
    assert numbers == list(range(45))
    assert stream.flushes >= 1


def test_past_the_held_limit_lines_are_written_at_once() -> None:
    stream = Recording()
    lines = logs.JsonLines(stream)  # type: ignore[arg-type]

    async def burst() -> int:
        for n in range(1000):
            lines({"n": n, "pad": "x" * 200})
        return len(stream.writes)

    # Without waiting for the timer: ~230 KB of lines cannot all be held.
    assert asyncio.run(burst()) > 0
