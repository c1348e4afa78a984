"""The bounds of a request, on the real server with small limits: the body timeout, the body
limit (announced and chunked), the review bytes in flight in total and per source address,
and large reviews off the event loop.

The server runs as `serve` runs it (`serving.running`); the clients speak TLS by hand so
that they can stop half-way, as a stalled upload does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import server_helpers as h
from webhook.server import codec, logs, serving
from webhook.server.limits import KIB, Budget, Limits

# Small sizes, generous times: a test holds a body half-sent while it looks at others, and
# must not see a 408 on a loaded machine. The body timeout's own test shortens it.
SMALL = Limits(
    header_timeout=30.0,
    body_timeout=30.0,
    large_share=1.0,
    idle_timeout=60.0,
    max_body_bytes=64 * KIB,
    inline_bytes=16 * KIB,
    max_inflight_bytes=128 * KIB,
    max_inflight_bytes_per_source=64 * KIB,
)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[serving.Running]:
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=SMALL)
    async with serving.running(settings) as running:
        yield running


@pytest.fixture
async def quick_body(tmp_path: Path) -> AsyncIterator[serving.Running]:
    """A server whose body timeout is a second (the only bound the test waits out)."""
    limits = dataclasses.replace(SMALL, body_timeout=1.0)
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=limits)
    async with serving.running(settings) as running:
        yield running


def review(uid: str) -> bytes:
    return h.review_body(h.shared_pod(), uid)


def padded(uid: str, size: int) -> bytes:
    """A review of a shared-GPU pod, padded to exactly `size` bytes."""
    bare = len(h.review_body({**h.shared_pod(), "padding": ""}, uid))
    body = h.review_body({**h.shared_pod(), "padding": "x" * (size - bare)}, uid)
    assert len(body) == size
    return body


def shed(text: str, reason: str) -> float:
    return h.metric(text, "gpu_share_webhook_requests_shed_total", reason=reason)


async def held(running: serving.Running, size: int) -> None:
    """Until the server holds exactly `size` review bytes in flight (no fixed sleep)."""
    budget = running.state.budget

    async def there() -> bool:
        return budget.held == size

    await h.eventually(there, what=f"{size} review bytes in flight")


# --------------------------------------------------------------------------- the body


async def test_a_body_that_stops_arriving_is_a_408_and_closes(
    quick_body: serving.Running,
) -> None:
    server = quick_body

    async def stalled(body: bytes) -> tuple[int, dict[str, str], bytes, float]:
        async with h.connect(server.port, h.ca_of(server)) as connection:
            await connection.send_head("/mutate", len(body))
            await connection.send(body[:10])
            started = time.monotonic()
            # Generous: the server answers after its 1 s, however busy the machine is.
            answer = await asyncio.wait_for(connection.response(), 20)
            return (*answer, time.monotonic() - started)

    # Inline, and large (held in the budget while it is awaited); both at once.
    answers = await asyncio.gather(
        stalled(review("uid-small")), stalled(padded("uid-large", 40 * KIB))
    )
    for status, headers, text, waited in answers:
        assert status == 408
        assert headers["connection"] == "close"
        assert b"did not arrive within 1 s" in text
        assert waited > 0.9  # not before its time
    assert shed(await h.scrape(server), "body-timeout") == 2
    assert server.state.budget.held == 0


async def test_a_body_announced_over_the_limit_is_a_413_before_any_of_it_is_read(
    server: serving.Running,
) -> None:
    async with h.connect(server.port, h.ca_of(server)) as uploading:
        await uploading.send_head("/mutate", SMALL.max_body_bytes + 1)
        status, headers, text = await asyncio.wait_for(uploading.response(), 20)
    assert status == 413
    assert headers["connection"] == "close"
    assert b"larger than the limit of 65536 bytes" in text


async def test_a_chunked_body_over_the_limit_is_a_413(server: serving.Running) -> None:
    async with h.connect(server.port, h.ca_of(server)) as connection:
        head = (
            f"POST /mutate?{h.TIMEOUT} HTTP/1.1\r\nHost: {h.HOST}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        await connection.send(head.encode())
        chunk = b"x" * 16 * KIB
        for _ in range(5):  # 80 KiB, over the 64 KiB limit (no more: the server closes)
            await connection.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        status, headers, text = await asyncio.wait_for(connection.response(), 20)
    assert status == 413
    assert headers["connection"] == "close"
    assert b"larger than the limit" in text


async def test_a_client_that_goes_away_mid_body_is_a_line_not_an_internal_error(
    server: serving.Running, caplog: pytest.LogCaptureFixture
) -> None:
    body = review("uid-gone")
    with caplog.at_level(logging.INFO):
        async with h.connect(server.port, h.ca_of(server)) as leaving:
            await leaving.send_head("/mutate", len(body))
            await leaving.send(body[:10])
            await asyncio.sleep(0.1)

        async def said() -> bool:
            return any("closed before the body arrived" in str(r.msg) for r in caplog.records)

        await h.eventually(said, what="the refused request's line")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    text = await h.scrape(server)
    assert h.metric(text, "gpu_share_webhook_reviews_total", decision="error") == 0


# --------------------------------------------------------------------------- bytes in flight


async def test_one_address_holds_no_more_than_its_review_bytes_others_go_on(
    server: serving.Running,
) -> None:
    ca = h.ca_of(server)
    big = padded("uid-big", SMALL.max_body_bytes)
    async with (
        h.connect(server.port, ca, source="127.0.0.1") as first,
        h.connect(server.port, ca, source="127.0.0.1") as second,
        h.connect(server.port, ca, source="127.0.0.2") as other,
    ):
        await first.send_head("/mutate", len(big))
        await first.send(big[:-100])
        await held(server, len(big))  # its 64 KiB: all an address may hold
        # The address's next large review waits for room (half the review's time: 0.8 s
        # of ?timeout=2s), then is a 429.
        started = time.monotonic()
        await second.send(
            f"POST /mutate?timeout=2s HTTP/1.1\r\nHost: {h.HOST}\r\nContent-Type:"
            f" application/json\r\nContent-Length: {len(big)}\r\n\r\n".encode()
        )
        status, headers, text = await asyncio.wait_for(second.response(), 20)
        assert status == 429
        assert time.monotonic() - started > 0.6  # it waited for room before its 429
        assert headers["retry-after"] == "1"
        assert headers["connection"] == "close"
        assert b"from 127.0.0.1 are being received or reviewed" in text
        # Another address is not held back: its large review goes.
        status, _, answer = await other.post("/mutate", padded("uid-other", 40 * KIB))
        assert status == 200
        assert h.response_of(json.loads(answer), "uid-other")["allowed"] is True
        await first.send(big[-100:])
        status, _, _ = await first.response()
        assert status == 200
    assert shed(await h.scrape(server), "source-inflight-bytes") == 1
    await held(server, 0)


async def test_a_large_review_waits_for_room_and_goes_when_there_is(
    server: serving.Running,
) -> None:
    ca = h.ca_of(server)
    big = padded("uid-big", SMALL.max_body_bytes)
    async with (
        h.connect(server.port, ca, source="127.0.0.1") as first,
        h.connect(server.port, ca, source="127.0.0.1") as waiting,
    ):
        await first.send_head("/mutate", len(big))
        await first.send(big[:-100])
        await held(server, len(big))
        second = padded("uid-second", 32 * KIB)
        await waiting.send_head("/mutate", len(second))
        await waiting.send(second)

        async def queued() -> bool:
            return server.state.budget.waiting == 1

        await h.eventually(queued, what="the second review waiting for room")
        await first.send(big[-100:])  # the first is answered, and the second goes
        for connection, uid in ((first, "uid-big"), (waiting, "uid-second")):
            status, _, answer = await connection.response()
            assert status == 200
            assert h.response_of(json.loads(answer), uid)["allowed"] is True
    await held(server, 0)


async def test_a_large_review_ending_as_the_next_of_its_address_gives_up_is_no_500(
    tmp_path: Path,
) -> None:
    """Two deadlines in one turn of the event loop, as on a starved machine: the body
    timeout of one large review, which gives its bytes back, and the end of the wait for
    room of its address's next one, cancelled but not yet resumed. Each gets its 4xx."""
    limits = dataclasses.replace(SMALL, body_timeout=3.0)
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=limits)
    big = padded("uid-big", SMALL.max_body_bytes)
    async with serving.running(settings) as server:
        ca = h.ca_of(server)
        async with (
            h.connect(server.port, ca, source="127.0.0.1") as first,
            h.connect(server.port, ca, source="127.0.0.1") as second,
        ):
            begun = time.monotonic()
            await first.send_head("/mutate", len(big))
            await first.send(big[:10])
            await held(server, len(big))
            # ?timeout=7s: 6 s for the review, 3 s of it to wait for room, which ends after
            # the first's body timeout (3 s from before the second was sent).
            await second.send(
                f"POST /mutate?timeout=7s HTTP/1.1\r\nHost: {h.HOST}\r\nContent-Type:"
                f" application/json\r\nContent-Length: {len(big)}\r\n\r\n".encode()
            )

            async def queued() -> bool:
                return server.state.budget.waiting == 1

            await h.eventually(queued, what="the second review waiting for room")
            if time.monotonic() - begun >= limits.body_timeout:
                pytest.skip("the machine was too slow to have both deadlines still ahead")
            # The loop stands still past both deadlines: they come due in the same turn.
            time.sleep(limits.body_timeout + 0.5)
            statuses = [(await c.response())[0] for c in (first, second)]
    assert statuses == [408, 429]
    assert (server.state.budget.held, server.state.budget.waiting) == (0, 0)


async def test_beyond_the_review_bytes_in_total_a_large_request_is_a_429_a_small_one_is_not(
    server: serving.Running,
) -> None:
    ca = h.ca_of(server)
    big = padded("uid-big", SMALL.max_body_bytes)
    async with (
        h.connect(server.port, ca, source="127.0.0.11") as first,
        h.connect(server.port, ca, source="127.0.0.12") as second,
    ):
        for connection in (first, second):  # two addresses, 128 KiB: the total
            await connection.send_head("/mutate", len(big))
            await connection.send(big[:-100])
        await held(server, 2 * len(big))
        async with h.connect(server.port, ca, source="127.0.0.13") as third:
            body = padded("uid-third", 20 * KIB)
            await third.send(
                f"POST /mutate?timeout=1s HTTP/1.1\r\nHost: {h.HOST}\r\nContent-Type:"
                f" application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            status, _, text = await asyncio.wait_for(third.response(), 20)
        assert status == 429
        assert b"the limit is 131072" in text
        # An ordinary review is not counted: the large ones do not lock it out.
        async with h.connect(server.port, ca, source="127.0.0.14") as fourth:
            status, _, _ = await fourth.post("/mutate", review("uid-ordinary"))
        assert status == 200
        for connection in (first, second):
            await connection.send(big[-100:])
            status, _, _ = await connection.response()
            assert status == 200
    assert shed(await h.scrape(server), "inflight-bytes") == 1


async def test_a_budget_lets_each_address_go_in_order_and_others_past_it() -> None:
    budget = Budget(total=100, per_source=60)
    await budget.take("a", 50)
    a_next = asyncio.ensure_future(budget.take("a", 40))  # over a's 60: waits
    a_small = asyncio.ensure_future(budget.take("a", 5))  # fits, but after a's waiting one
    await asyncio.sleep(0)
    assert not a_next.done()
    assert not a_small.done()
    await budget.take("b", 40)  # another address goes past them
    assert (budget.held, budget.by_source) == (90, {"a": 50, "b": 40})
    budget.give("b", 40)
    assert not a_next.done()  # a is still at its own bound
    budget.give("a", 50)
    await asyncio.sleep(0)
    assert a_next.done()
    assert a_small.done()
    assert budget.by_source == {"a": 45}
    # A wait given up leaves nothing behind.
    waiting = asyncio.ensure_future(budget.take("a", 60))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    budget.give("a", 45)
    assert (budget.held, budget.by_source) == (0, {})


async def _one_waiting_one_behind() -> tuple[Budget, asyncio.Future[None], asyncio.Future[None]]:
    """A budget whose address "a" holds 50 of its 60, with a wait for 50 more (over its
    60: it waits) and one for 5 behind it (it fits, but comes after)."""
    budget = Budget(total=100, per_source=60)
    await budget.take("a", 50)
    waiting = asyncio.ensure_future(budget.take("a", 50))
    behind = asyncio.ensure_future(budget.take("a", 5))
    await asyncio.sleep(0)
    return budget, waiting, behind


async def test_a_wait_given_up_just_as_room_comes_leaves_the_budget_whole() -> None:
    budget, given_up, behind = await _one_waiting_one_behind()
    # Cancelled as its timeout cancels it, and the room given back before it resumes.
    given_up.cancel()
    budget.give("a", 50)
    await behind  # the one given up holds it back no longer
    with pytest.raises(asyncio.CancelledError):
        await given_up
    assert (budget.held, budget.by_source, budget.waiting) == (5, {"a": 5}, 0)
    budget.give("a", 5)
    assert (budget.held, budget.by_source) == (0, {})


async def test_a_wait_given_up_lets_the_later_ones_of_its_address_go_at_once() -> None:
    budget, given_up, behind = await _one_waiting_one_behind()
    given_up.cancel()
    # Cancelled, not yet resumed: a newcomer of its address is not held back by it.
    await asyncio.wait_for(budget.take("a", 3), 5)
    with pytest.raises(asyncio.CancelledError):
        await given_up
    # Withdrawn, with no bytes given back: the one it held back goes without another give.
    await asyncio.wait_for(behind, 5)
    assert (budget.held, budget.by_source, budget.waiting) == (58, {"a": 58}, 0)


# --------------------------------------------------------------------------- off the loop


async def test_a_large_review_runs_on_a_thread_and_the_loop_answers_meanwhile(
    tmp_path: Path,
) -> None:
    threads: list[str] = []
    release = threading.Event()

    def slow_review(body: bytes, **options: Any) -> codec.Outcome:
        threads.append(threading.current_thread().name)
        if len(body) > SMALL.inline_bytes:
            release.wait(30)
        return codec.review(body, **options)

    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=SMALL)
    async with serving.running(settings) as server:
        server.state.review = slow_review
        ca = h.ca_of(server)
        async with h.connect(server.port, ca) as large, h.connect(server.port, ca) as small:
            body = padded("uid-large", 40 * KIB)
            await large.send_head("/mutate", len(body))
            await large.send(body)

            async def on_its_thread() -> bool:
                return bool(threads)

            await h.eventually(on_its_thread, what="the large review on its thread")
            # The large review is on its thread: a small one is answered meanwhile.
            status, _, _ = await asyncio.wait_for(small.post("/mutate", review("uid-s")), 20)
            assert status == 200
            release.set()
            status, _, _ = await asyncio.wait_for(large.response(), 30)
            assert status == 200
    assert threads[0].startswith("review")
    assert threads[1] == threading.main_thread().name


async def test_a_review_cut_off_at_its_deadline_is_charged_until_its_thread_ends(
    tmp_path: Path,
) -> None:
    """A short `?timeout=` ends the answer early, not the review's thread: its address's
    share is charged the time the thread ran on."""
    release = threading.Event()

    def slow_review(body: bytes, **options: Any) -> codec.Outcome:
        release.wait(30)
        return codec.review(body, **options)

    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=SMALL)
    async with serving.running(settings) as server:
        server.state.review = slow_review
        budget = server.state.budget
        async with h.connect(server.port, h.ca_of(server)) as large:
            body = padded("uid-cut", 40 * KIB)
            head = (
                f"POST /mutate?timeout=1s HTTP/1.1\r\nHost: {h.HOST}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            await large.send(head.encode() + body)
            status, _, answer = await asyncio.wait_for(large.response(), 30)
            assert status == 200
            assert b"internal error" in answer or b"InternalError" in answer
            at_deadline = budget.wait("127.0.0.1")
            await asyncio.sleep(3.0)  # the thread runs on past its answer
            release.set()

            async def given_back() -> bool:
                return budget.held == 0

            await h.eventually(given_back, what="the cut-off review's bytes given back")
        # Charged the 3 s or more it ran on, less the burst: at least 2 s to wait (more on a
        # loaded machine, where the thread runs on longer).
        assert budget.wait("127.0.0.1") > at_deadline + 1.0


async def test_review_lines_of_large_and_small_reviews_are_alike(
    tmp_path: Path,
) -> None:
    lines: list[dict[str, Any]] = []
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=SMALL)
    async with serving.running(settings, review_log=lines.append) as server:
        ca = h.ca_of(server)
        async with h.connect(server.port, ca) as connection:
            for body in (review("uid-s"), padded("uid-l", 40 * KIB)):
                status, _, _ = await connection.post("/mutate", body)
                assert status == 200
    assert [(line["uid"], line["decision"]) for line in lines] == [
        ("uid-s", "allowed"),
        ("uid-l", "allowed"),
    ]
    assert logs.REVIEW_LOGGER == "webhook.review"


async def test_an_address_whose_large_reviews_took_their_share_waits_and_no_other_does() -> None:
    budget = Budget(total=100, per_source=60, share=0.5, burst=1.0)
    budget.charge("a", 1.0)
    assert budget.wait("a") == 0.0  # within its burst
    budget.charge("a", 1.0)
    # One second over its burst, paid back at half a second a second: two seconds.
    assert 1.9 < budget.wait("a") <= 2.0
    assert budget.wait("b") == 0.0
