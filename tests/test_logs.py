"""Review lines (`logs.JsonLines`): held, then written in whole lines a pipe keeps whole."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import orjson

from tests import kube, test_decision_cache
from webhook import names, policies, reviews
from webhook.transport import app as server
from webhook.transport import logs


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


# Uids and names as anyone who can reach the port may send them, and the corpus' pods.
ODD_UIDS = ["uid-1", 'q"uote\\', "ünï\u2028code", "\x00ctrl"]


def _outcomes(directory: Path) -> list[tuple[reviews.Outcome, str, str]]:
    found = []
    answers = reviews.Answers(1000)
    shipped = kube.shipped()
    # The shipped default policy in warn mode: refusals become would-be refusals.
    text = (kube.REPO / "policies" / "default.yaml").read_text()
    (directory / "default.yaml").write_text(
        text.replace("  sharedResources:", f"  mode: {names.WARN}\n  sharedResources:", 1))
    warned = policies.load_directory(directory)
    for n, obj in enumerate(test_decision_cache.CORPUS):
        for loaded, policy_name in ((shipped, "default"), (warned, "default"), (shipped, "nope")):
            for endpoint in ("mutate", "validate"):
                data = orjson.dumps(kube.admission_review(obj, uid=ODD_UIDS[n % len(ODD_UIDS)]))
                outcome = reviews.review(
                    data, policies=loaded, policy_name=policy_name, endpoint=endpoint,
                    answers=answers,
                )
                found.append((outcome, endpoint, policy_name))
    return found


def test_a_review_line_from_kept_fields_is_the_line_of_its_dict(tmp_path: Path) -> None:
    made, direct = Recording(), Recording()
    fast, slow = logs.JsonLines(made), logs.JsonLines(direct)  # type: ignore[arg-type]
    lines = server.ReviewLines()
    outcomes = _outcomes(tmp_path)
    kinds = set()
    for seconds in (0.0, 0.000_123_4, 0.5, 12.345_678_9):
        for outcome, endpoint, policy_name in outcomes:
            fast.write_fields(lines.fields(outcome, endpoint, policy_name, seconds))
            line = server.review_line(outcome, endpoint, policy_name, seconds)
            slow(line)
            kinds.add((line["decision"], "would_refuse" in line))
    fast.flush()
    slow.flush()
    # Each side's own time heads: compare what follows them.
    tails = [[line.split(b'"logger":"webhook.review",', 1)[1]
              for line in b"".join(stream.writes).splitlines()] for stream in (made, direct)]
    assert tails[0] == tails[1]
    assert len(tails[0]) == 4 * len(outcomes)
    # Allowed, denied and admitted-with-would-be-refusals lines were all among them.
    assert {("allowed", False), ("denied", False), ("allowed", True)} <= kinds
    for raw in tails[0]:
        json.loads(b"{" + raw)


def test_review_lines_keep_only_short_fields_and_a_bounded_number() -> None:
    lines = server.ReviewLines()
    obj = kube.as_served(test_decision_cache.CORPUS[0])
    long_name = copy.deepcopy(obj)
    long_name["metadata"]["name"] = "n" * 100_000
    outcome = reviews.review(
        orjson.dumps(kube.admission_review(long_name, uid="u-long")),
        policies=kube.shipped(), policy_name="default", endpoint="mutate",
    )
    fields = lines.fields(outcome, "mutate", "default", 0.001)
    assert json.loads(b"{" + fields)["name"] == "n" * 100_000
    assert len(lines) == 0  # written, not kept
    for n in range(server.ReviewLines.LINES_KEPT + 10):
        named = copy.deepcopy(obj)
        named["metadata"]["name"] = f"pod-{n}"
        outcome = reviews.review(
            orjson.dumps(kube.admission_review(named, uid=f"u-{n}")),
            policies=kube.shipped(), policy_name="default", endpoint="mutate",
        )
        lines.fields(outcome, "mutate", "default", 0.001)
        assert 0 < len(lines) <= server.ReviewLines.LINES_KEPT
