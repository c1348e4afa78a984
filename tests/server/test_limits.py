"""Every bound on connections and requests, with small settings, on the real listener.

The server runs as `serve` runs it (`serving.running`: the guarded listener, TLS, both
applications) on ports of its own; the clients speak TLS by hand so that they can stop
half-way, as a slowloris client or a stalled upload does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import server_helpers as h
from webhook.server import inflight, logs, serving
from webhook.server import limits as limits_module
from webhook.server.limits import Limits

SMALL = Limits(
    header_timeout=0.6,
    body_timeout=0.6,
    idle_timeout=3.0,
    max_connections=4,
    max_body_bytes=64 * 1024,
    max_inflight_bytes=128 * 1024,
    # Every client here is 127.0.0.1: the bounds of one address have tests of their own.
    max_inflight_bytes_per_source=1024 * 1024,
)


pytestmark = pytest.mark.usefixtures("quick_sweep")


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[serving.Running]:
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=SMALL)
    async with serving.running(settings) as running:
        yield running



async def closed_by_server(connection: h.Connection, within: float) -> float:
    """Seconds until the server closes `connection` (EOF or reset); fails after `within`."""
    started = time.monotonic()
    try:
        data = await asyncio.wait_for(connection.reader.read(), within)
    except (ConnectionError, ssl.SSLError):
        data = b""
    assert data in (b"", b"\n") or data.startswith(b"HTTP/1.1 "), data
    return time.monotonic() - started



async def healthy(running: serving.Running) -> bool:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as session:
        url = f"http://127.0.0.1:{running.metrics_port}/healthz"
        async with session.get(url) as response:
            return response.status == 200


def review(uid: str) -> bytes:
    return h.review_body(h.shared_pod(), uid)


async def test_a_request_that_stops_half_way_through_its_headers_is_closed(
    server: serving.Running,
) -> None:
    async with h.connect(server.port, h.ca_of(server)) as slow:
        await slow.send(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")
        waited = await closed_by_server(slow, within=5)
    assert waited < 1.5  # the header timeout, well before the idle one
    text = await h.scrape(server)
    assert h.metric(text, "gpu_share_webhook_connections_closed_total", reason="header") == 1


async def test_headers_sent_a_byte_at_a_time_do_not_keep_a_connection(
    server: serving.Running,
) -> None:
    # Slowloris: every byte resets no timer; the request must be whole in time.
    async with h.connect(server.port, h.ca_of(server)) as slow:
        data = b"POST /mutate HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 100
        assert await trickle(slow, data, every=0.1) < 1.5  # 13 s if never closed


async def trickle(connection: h.Connection, data: bytes, *, every: float) -> float:
    """Send `data` a byte every `every` seconds; seconds until the server closed the
    connection (or all was sent)."""
    started = time.monotonic()
    for byte in data:
        if connection.reader.at_eof():
            break
        try:
            await connection.send(bytes([byte]))
        except (ConnectionError, ssl.SSLError):
            break
        await asyncio.sleep(every)
    return time.monotonic() - started


async def test_a_connection_that_sends_nothing_is_closed(server: serving.Running) -> None:
    async with h.connect(server.port, h.ca_of(server)) as silent:
        waited = await closed_by_server(silent, within=5)
    assert 0.4 < waited < 1.5


async def test_a_tcp_connection_that_never_starts_tls_is_closed(server: serving.Running) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert time.monotonic() - started < 1.5
    finally:
        writer.close()


async def test_a_body_that_stops_arriving_is_a_408(server: serving.Running) -> None:
    body = review("uid-stalled")
    async with h.connect(server.port, h.ca_of(server)) as stalled:
        await stalled.send_head("/mutate", len(body))
        await stalled.send(body[:10])
        started = time.monotonic()
        status, headers, text = await asyncio.wait_for(stalled.response(), 5)
    assert status == 408
    assert headers["connection"] == "close"
    assert b"did not arrive within 0.6 s" in text
    assert time.monotonic() - started < 3


@pytest.mark.slow  # waits out the idle timeout
async def test_idle_keep_alive_connections_last_the_idle_timeout_then_close(
    server: serving.Running,
) -> None:
    async with h.connect(server.port, h.ca_of(server)) as connection:
        status, _, answer = await connection.post("/mutate", review("uid-idle"))
        assert status == 200
        h.response_of(json.loads(answer), "uid-idle")
        # Past the header timeout but within the idle one: still there, and usable.
        await asyncio.sleep(1.2)
        status, _, _ = await connection.post("/mutate", review("uid-idle-2"))
        assert status == 200
        waited = await closed_by_server(connection, within=6)
    assert 2.5 < waited < 4.5


async def test_beyond_max_connections_the_longest_idle_one_makes_room(
    server: serving.Running,
) -> None:
    ca = h.ca_of(server)
    async with (
        h.connect(server.port, ca) as oldest,
        h.connect(server.port, ca) as second,
        h.connect(server.port, ca) as third,
        h.connect(server.port, ca) as fourth,
    ):
        for number, connection in enumerate((oldest, second, third, fourth)):
            status, _, _ = await connection.post("/mutate", review(f"uid-{number}"))
            assert status == 200
        async with h.connect(server.port, ca) as newcomer:
            status, _, _ = await newcomer.post("/mutate", review("uid-new"))
            assert status == 200
            await closed_by_server(oldest, within=2)
            status, _, _ = await second.post("/mutate", review("uid-second"))
            assert status == 200
    text = await h.scrape(server)
    assert h.metric(text, "gpu_share_webhook_connections_closed_total", reason="evicted") == 1


async def refused_before_handshake(port: int, ca: Path) -> None:
    """A connection the server closes before its TLS handshake: the handshake fails."""
    with pytest.raises((ConnectionError, ssl.SSLError)):
        async with h.connect(port, ca):
            pytest.fail("the handshake succeeded")


async def test_beyond_max_connections_with_none_idle_a_new_one_is_closed_before_its_handshake(
    server: serving.Running,
) -> None:
    ca = h.ca_of(server)
    body = review("uid-busy")
    async with (
        h.connect(server.port, ca) as a,
        h.connect(server.port, ca) as b,
        h.connect(server.port, ca) as c,
        h.connect(server.port, ca) as d,
    ):
        for busy in (a, b, c, d):  # each in the middle of receiving a body
            await busy.send_head("/mutate", len(body))
            await busy.send(body[:10])
        await asyncio.sleep(0.1)
        await refused_before_handshake(server.port, ca)
        # The four carry on.
        for busy in (a, b, c, d):
            await busy.send(body[10:])
            status, _, _ = await busy.response()
            assert status == 200
    text = await h.scrape(server)
    assert h.metric(text, "gpu_share_webhook_connections_closed_total", reason="refused") == 1


SMALL_REVIEW_BYTES = 16 * 1024


@pytest.fixture
def large_above_16_kib(server: serving.Running) -> None:
    # Under SMALL limits every body would be a small one (up to 256 KiB, which may use the
    # reserve beyond --max-inflight-bytes); here bodies above 16 KiB are the large ones.
    server.state.budget = inflight.Budget(
        SMALL.max_inflight_bytes,
        small_bytes=SMALL_REVIEW_BYTES,
        per_source_bytes=SMALL.max_inflight_bytes_per_source,
    )


def padded(uid: str, size: int) -> bytes:
    """A review of a shared-GPU pod, padded to exactly `size` bytes."""
    bare = len(h.review_body({**h.shared_pod(), "padding": ""}, uid))
    body = h.review_body({**h.shared_pod(), "padding": "x" * (size - bare)}, uid)
    assert len(body) == size
    return body


async def counted(running: serving.Running, large: int, small: int = 0) -> None:
    """Until the server holds exactly these review bytes in flight (no fixed sleep)."""
    budget = running.state.budget

    async def there() -> bool:
        return (budget.large_held, budget.small_held) == (large, small)

    await h.eventually(there, what=f"{large} large and {small} small review bytes in flight")


async def test_beyond_the_review_bytes_in_flight_a_large_request_is_a_429_a_small_one_is_not(
    server: serving.Running, large_above_16_kib: None
) -> None:
    # One address each: one address's large reviews take turns (tests/deploy/test_sources.py).
    ca = h.ca_of(server)
    big = padded("uid-big", SMALL.max_body_bytes)
    ordinary = review("uid-ordinary")
    # Two large bodies all but arrived, and an ordinary review on top, pass the limit.
    assert 2 * (len(big) - 100) + len(ordinary) > SMALL.max_inflight_bytes
    async with (
        h.connect(server.port, ca, source="127.0.0.11") as first,
        h.connect(server.port, ca, source="127.0.0.12") as second,
    ):
        for connection in (first, second):
            await connection.send_head("/mutate", len(big))
            await connection.send(big[:-100])
        await counted(server, 2 * (len(big) - 100))
        async with h.connect(server.port, ca, source="127.0.0.13") as third:
            status, headers, text = await third.post("/mutate", big)
        assert status == 429
        assert headers["retry-after"] == "1"
        assert b"retry in a moment" in text
        # An ordinary review is not locked out by large ones: it has a reserve of its own.
        async with h.connect(server.port, ca, source="127.0.0.14") as fourth:
            status, _, answer = await fourth.post("/mutate", ordinary)
        assert status == 200
        assert h.response_of(json.loads(answer), "uid-ordinary")["allowed"] is True
        # Those in flight are answered when their bodies arrive.
        await first.send(big[-100:])
        status, _, _ = await first.response()
        assert status == 200
    text = await h.scrape(server)
    assert h.metric(text, "gpu_share_webhook_requests_shed_total", reason="inflight-bytes") == 1


async def test_the_reserve_of_small_reviews_is_bounded(
    server: serving.Running, large_above_16_kib: None
) -> None:
    # One address each: one address's large reviews take turns (tests/deploy/test_sources.py).
    reserve = 8 * 1024
    server.state.budget = inflight.Budget(
        SMALL.max_inflight_bytes, small_bytes=SMALL_REVIEW_BYTES, reserve_bytes=reserve
    )
    ca = h.ca_of(server)
    big = padded("uid-big", SMALL.max_body_bytes)
    small = padded("uid-small", 6 * 1024)
    last = padded("uid-last", 4 * 1024)
    held = 2 * (len(big) - 100) + len(small) - 100
    assert held <= SMALL.max_inflight_bytes + reserve < held + len(last)
    async with (
        h.connect(server.port, ca, source="127.0.0.11") as first,
        h.connect(server.port, ca, source="127.0.0.12") as second,
        h.connect(server.port, ca, source="127.0.0.13") as third,
    ):
        for connection, body in ((first, big), (second, big), (third, small)):
            await connection.send_head("/mutate", len(body))
            await connection.send(body[:-100])
        await counted(server, 2 * (len(big) - 100), len(small) - 100)
        async with h.connect(server.port, ca, source="127.0.0.14") as fourth:
            status, _, text = await fourth.post("/mutate", last)
        assert status == 429, text
        for connection, body, uid in ((first, big, "uid-big"), (third, small, "uid-small")):
            await connection.send(body[-100:])
            status, _, answer = await connection.response()
            assert status == 200
            assert h.response_of(json.loads(answer), uid)["allowed"] is True
    text = await h.scrape(server)
    assert h.metric(text, "gpu_share_webhook_requests_shed_total", reason="inflight-bytes") == 1
    # Every byte counted is given back, the one left mid-body included.
    budget = server.state.budget

    async def released() -> bool:
        return budget.large_held == budget.small_held == 0

    await h.eventually(released, what="review bytes given back")


async def test_bodies_announced_but_not_sent_hold_no_review_bytes(
    server: serving.Running, large_above_16_kib: None
) -> None:
    # One address each: one address's large reviews take turns (tests/deploy/test_sources.py).
    # Announcing the largest body and sending a byte of it must not lock others out: bytes
    # in flight are counted as they arrive. Three announced bodies would hold 192 KiB of the
    # 128 KiB, and a fourth large one would be refused.
    ca = h.ca_of(server)
    big = padded("uid-not-locked-out", SMALL.max_body_bytes)
    assert 4 * SMALL.max_body_bytes > SMALL.max_inflight_bytes
    async with (
        h.connect(server.port, ca, source="127.0.0.21") as a,
        h.connect(server.port, ca, source="127.0.0.22") as b,
        h.connect(server.port, ca, source="127.0.0.23") as c,
    ):
        for hog in (a, b, c):
            await hog.send_head("/mutate", SMALL.max_body_bytes)
            await hog.send(b"{")
        await counted(server, 3)
        # The three hogs fill the connection cap but one; the fourth slot reviews.
        async with h.connect(server.port, ca, source="127.0.0.24") as fine:
            status, _, answer = await fine.post("/mutate", big)
        assert status == 200
        assert h.response_of(json.loads(answer), "uid-not-locked-out")["allowed"] is True
    text = await h.scrape(server)
    assert h.metric(text, "gpu_share_webhook_requests_shed_total", reason="inflight-bytes") == 0


async def test_a_chunked_body_over_the_limit_is_a_413(server: serving.Running) -> None:
    ca = h.ca_of(server)
    async with h.connect(server.port, ca) as connection:
        head = (
            f"POST /mutate?{h.TIMEOUT} HTTP/1.1\r\nHost: {h.HOST}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        await connection.send(head.encode())
        chunk = b"x" * 16 * 1024
        for _ in range(5):  # 80 KiB, over the 64 KiB limit (no more: the server closes)
            await connection.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        status, headers, text = await asyncio.wait_for(connection.response(), 5)
    assert status == 413
    assert headers["connection"] == "close"
    assert b"larger than the limit" in text


async def test_probes_and_reviews_answer_while_connections_are_abused(
    server: serving.Running,
) -> None:
    ca = h.ca_of(server)
    async with h.connect(server.port, ca) as slow, h.connect(server.port, ca) as stalled:
        await slow.send(b"POST /mutate HTTP/1.1\r\n")
        body = review("uid-stalled")
        await stalled.send_head("/mutate", len(body))
        await stalled.send(body[:5])
        assert await healthy(server)
        async with h.connect(server.port, ca) as fine:
            status, _, answer = await fine.post("/mutate", review("uid-fine"))
        assert status == 200
        assert h.response_of(json.loads(answer), "uid-fine")["allowed"] is True


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("header_timeout", 0.0, "--header-timeout must be positive"),
        ("idle_timeout", -1.0, "--idle-timeout must be positive"),
        ("max_connections", 0, "--max-connections must be at least 1"),
        ("max_inflight_bytes", 1024, "--max-inflight-bytes must be at least --max-body-bytes"),
        ("max_connections_per_source", 0, "--max-connections-per-source must be at least 1"),
        ("max_handshakes", 0, "--max-handshakes must be at least 1"),
        ("max_handshakes_per_source", 0, "--max-handshakes-per-source must be at least 1"),
        (
            "max_inflight_bytes_per_source",
            1024,
            "--max-inflight-bytes-per-source must be at least --max-body-bytes",
        ),
        ("large_review_share", 0.0, "--large-review-share must be above 0 and at most 1"),
        ("large_review_share", 1.5, "--large-review-share must be above 0 and at most 1"),
    ],
)
def test_limits_that_cannot_work_are_named(field: str, value: Any, words: str) -> None:
    assert words in Limits(**{field: value}).problems()
    assert Limits().problems() == []


def test_this_aiohttp_has_what_the_guard_reads() -> None:
    limits_module.check_handler()


class RenamedHandler:
    """An aiohttp release's RequestHandler that renamed `_messages`."""

    __slots__ = ("_message_queue", "_request_count", "_request_in_progress")


async def test_an_aiohttp_without_what_the_guard_reads_stops_the_server_before_it_listens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits_module, "RequestHandler", RenamedHandler)
    with pytest.raises(RuntimeError, match=r"RequestHandler lacks _messages: the connection"):
        limits_module.check_handler()
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=SMALL)
    with pytest.raises(RuntimeError, match=r"lacks _messages"):
        async with serving.running(settings):
            pytest.fail("listening without the connection limits")


async def test_a_closed_connection_lets_go_of_its_transport(server: serving.Running) -> None:
    # Its TLS state must not wait for the collector with aiohttp's objects.
    ca = h.ca_of(server)
    connections = server.state.connections
    assert connections is not None
    async with h.connect(server.port, ca) as connection:
        status, _, _ = await connection.post("/mutate", review("uid-transport"))
        assert status == 200
        (guarded,) = list(connections._open)
        assert guarded._transport is not None

    async def gone() -> bool:
        return guarded not in connections._open and guarded._transport is None

    await h.eventually(gone, what="the closed connection forgotten, its transport dropped")


def test_a_collection_follows_every_so_many_closed_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits_module.Connections, "COLLECT_AFTER_CLOSED", 3)
    collections: list[int] = []
    monkeypatch.setattr(limits_module.gc, "collect", lambda: collections.append(1) or 0)
    connections = limits_module.Connections(SMALL)

    class Closed:  # what `forget` is given: only its identity matters (and no address)
        source = None

    def closed() -> None:
        connection = Closed()
        connections._open[connection] = None  # type: ignore[index]
        connections.forget(connection)  # type: ignore[arg-type]
        connections.forget(connection)  # type: ignore[arg-type]  # counted once

    for _ in range(2):
        closed()
    assert connections.collect() is None
    assert collections == []
    closed()
    assert connections.collect() is not None
    assert collections == [1]
    assert connections.collect() is None  # counted anew from there
    assert collections == [1]


async def test_a_body_announced_large_counts_as_large_from_its_first_byte(
    server: serving.Running, large_above_16_kib: None
) -> None:
    # Otherwise every large upload would take its first 16 KiB (256 KiB as shipped) of the
    # reserve of the small ones, and a few dozen stalled ones would fill it.
    ca = h.ca_of(server)
    budget = server.state.budget
    big = padded("uid-big", SMALL.max_body_bytes)
    small = padded("uid-small", 8 * 1024)
    async with h.connect(server.port, ca) as large, h.connect(server.port, ca) as ordinary:
        await large.send_head("/mutate", len(big))
        await large.send(big[:10_000])  # fewer bytes than a small review may have
        await ordinary.send_head("/mutate", len(small))
        await ordinary.send(small[:5_000])

        await counted(server, 10_000, 5_000)
        await large.send(big[10_000:])
        await ordinary.send(small[5_000:])
        for connection in (large, ordinary):
            status, _, _ = await connection.response()
            assert status == 200
    assert budget.large_held == budget.small_held == 0


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


async def test_malformed_requests_are_one_warning_a_while_not_a_trace_each(
    server: serving.Running, caplog: pytest.LogCaptureFixture
) -> None:
    server_log = logging.getLogger("aiohttp.server")
    quiet = logs.MalformedRequests()
    server_log.addFilter(quiet)
    ca = h.ca_of(server)
    with caplog.at_level(logging.DEBUG):
        for _ in range(5):
            async with h.connect(server.port, ca) as bad:
                await bad.send(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
                status, _, _ = await asyncio.wait_for(bad.response(), 5)
                assert status == 400
    lines = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert len(lines) == 1
    (line,) = lines
    assert line.levelno == logging.WARNING
    assert line.exc_info is None
    assert "refused a malformed request from 127.0.0.1: BadHttpMessage" in line.getMessage()
    server_log.removeFilter(quiet)


def test_logging_as_serve_configures_it_quiets_malformed_requests() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    server_log = logging.getLogger("aiohttp.server")
    filters = server_log.filters[:]
    try:
        logs.configure_logging("info", "text")
        assert [f for f in server_log.filters if isinstance(f, logs.MalformedRequests)]
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        server_log.filters[:] = filters


async def test_a_request_refused_before_its_body_reads_no_more_of_it(
    server: serving.Running,
) -> None:
    # A 413 by its Content-Length: the answer goes out, and what the client goes on sending
    # is not read (nor decrypted): its TCP transport is given to a reader of nothing.
    connections = server.state.connections
    assert connections is not None
    async with h.connect(server.port, h.ca_of(server)) as uploading:
        await uploading.send_head("/mutate", SMALL.max_body_bytes + 1)
        status, _, _ = await asyncio.wait_for(uploading.response(), 5)
        assert status == 413
        (refused,) = list(connections._open)
        assert refused._raw is not None
        assert isinstance(refused._raw.get_protocol(), limits_module._Refused)
        assert not refused._raw.is_reading()
