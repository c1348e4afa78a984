"""The listener's bounds on connections, on the real listener with small limits: the caps in
total and per source address, the turns of TLS handshakes and their outcomes counted, the
header timeout (first request and later ones), the idle timeout; and the contract of the
one adapter (`connections.Connection`) with aiohttp.

The server runs as `serve` runs it (`serving.running`); the clients speak TLS by hand so
that they can stop half-way, as a slowloris client does. Two loopback addresses play two
sources: 127.0.0.1 the flood, 127.0.0.2 the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.support import server_helpers as h
from webhook.server import connections, serving
from webhook.server.limits import Limits

FLOOD = "127.0.0.1"
API_SERVER = "127.0.0.2"

# Small caps, generous times, so that a loaded machine makes a test slower, not wrong: the
# tests of the header timeout shorten it to a second (`quick_head`). What a test asserts of
# a time is what tells the bound apart from the alternative (closed by the header timeout,
# not by the idle one nor never), not how busy the machine is.
SMALL = Limits(
    header_timeout=30.0,
    body_timeout=30.0,
    idle_timeout=30.0,
    max_connections=6,
    max_connections_per_source=3,
    max_handshakes=2,
    max_handshakes_per_source=1,
)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[serving.Running]:
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=SMALL)
    async with serving.running(settings) as running:
        yield running


QUICK_HEAD = dataclasses.replace(SMALL, header_timeout=1.0)


@pytest.fixture
async def quick_head(tmp_path: Path) -> AsyncIterator[serving.Running]:
    """A server whose header timeout (the handshake's included) is a second."""
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=QUICK_HEAD)
    async with serving.running(settings) as running:
        yield running


def review(uid: str) -> bytes:
    return h.review_body(h.shared_pod(), uid)


def closed(text: str, reason: str) -> float:
    return h.metric(text, "gpu_share_webhook_connections_closed_total", reason=reason)


async def closed_by_server(connection: h.Connection, within: float) -> float:
    """Seconds until the server closes `connection` (EOF or reset); fails after `within`."""
    started = time.monotonic()
    try:
        data = await asyncio.wait_for(connection.reader.read(), within)
    except (ConnectionError, ssl.SSLError):
        data = b""
    assert data in (b"", b"\n") or data.startswith(b"HTTP/1.1 "), data
    return time.monotonic() - started


async def refused_before_handshake(port: int, ca: Path, source: str = FLOOD) -> None:
    """A connection the server closes before its TLS handshake: the handshake fails."""
    with pytest.raises((ConnectionError, ssl.SSLError)):
        async with h.connect(port, ca, source=source):
            pytest.fail("the handshake succeeded")


@contextlib.asynccontextmanager
async def silent(port: int, source: str, count: int) -> AsyncIterator[list[asyncio.StreamReader]]:
    """`count` TCP connections from `source` that never send a byte (a TLS slowloris)."""
    opened = []
    try:
        for _ in range(count):
            opened.append(await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)))
        yield [reader for reader, _ in opened]
    finally:
        for _, writer in opened:
            writer.close()


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


# --------------------------------------------------------------------------- header timeout


async def test_a_request_that_stops_half_way_through_its_head_is_closed_and_counted(
    quick_head: serving.Running,
) -> None:
    server = quick_head
    async with h.connect(server.port, h.ca_of(server)) as slow:
        await slow.send(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")
        waited = await closed_by_server(slow, within=20)
    assert waited < 10  # the header timeout, well before the idle one (30 s)
    assert closed(await h.scrape(server), "header") == 1


async def test_a_head_sent_a_byte_at_a_time_does_not_keep_a_connection(
    quick_head: serving.Running,
) -> None:
    server = quick_head
    # Slowloris: no byte resets the clock; the head must be whole in time.
    async with h.connect(server.port, h.ca_of(server)) as slow:
        data = b"POST /mutate HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 300
        assert await trickle(slow, data, every=0.1) < 10  # 33 s and more if never closed


@pytest.mark.slow  # idles past the header timeout, then waits it out: three seconds
async def test_the_head_of_a_later_request_on_a_kept_connection_is_timed_too(
    quick_head: serving.Running,
) -> None:
    server = quick_head
    async with h.connect(server.port, h.ca_of(server)) as connection:
        for number in range(3):  # whole requests, some in two writes: never late
            body = review(f"uid-{number}")
            if number == 1:
                await connection.send_head("/mutate", len(body))
                await connection.send(body)
                status, _, _ = await connection.response()
            else:
                status, _, _ = await connection.post("/mutate", body)
            assert status == 200
        await asyncio.sleep(1.5)  # idle past the header timeout: idle is not late
        data = b"POST /mutate HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 300
        assert await trickle(connection, data, every=0.1) < 10
    assert closed(await h.scrape(server), "header") == 1


async def test_a_connection_that_sends_nothing_after_its_handshake_is_closed(
    quick_head: serving.Running,
) -> None:
    server = quick_head
    async with h.connect(server.port, h.ca_of(server)) as silent_one:
        waited = await closed_by_server(silent_one, within=20)
    assert waited < 10  # not the idle timeout (30 s)
    assert closed(await h.scrape(server), "header") == 1


@pytest.mark.slow  # waits out the idle timeout
async def test_an_idle_keep_alive_connection_lasts_the_idle_timeout_then_closes(
    tmp_path: Path,
) -> None:
    # The header timeout a second (QUICK_HEAD's), the idle one three.
    limits = dataclasses.replace(QUICK_HEAD, idle_timeout=3.0)
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=limits)
    async with (
        serving.running(settings) as server,
        h.connect(server.port, h.ca_of(server)) as connection,
    ):
        status, _, answer = await connection.post("/mutate", review("uid-idle"))
        assert status == 200
        h.response_of(json.loads(answer), "uid-idle")
        # Past the header timeout but within the idle one: still there, and usable.
        await asyncio.sleep(1.5)
        status, _, _ = await connection.post("/mutate", review("uid-idle-2"))
        assert status == 200
        waited = await closed_by_server(connection, within=20)
    assert waited > 2.5


async def test_a_head_longer_than_any_api_servers_closes_the_connection(
    server: serving.Running,
) -> None:
    async with h.connect(server.port, h.ca_of(server)) as long_head:
        line = b"X-Pad: " + b"a" * 8000 + b"\r\n"
        await long_head.send(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            for _ in range(connections.MAX_HEAD_BYTES // len(line) + 2):
                await long_head.send(line)
        await closed_by_server(long_head, within=20)


@pytest.mark.parametrize("requests", [1, 2, 3])
async def test_the_adapter_follows_heads_and_bodies_however_they_are_cut(requests: int) -> None:
    body = b'{"x": "\r\n\r\n"}'  # an empty line inside a body is not a head's end
    request = (
        b"POST /mutate HTTP/1.1\r\nHost: x\r\ncontent-LENGTH: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    listener = connections.Listener(web.Server(lambda _r: web.Response()), SMALL, tls=None)
    stream = request * requests
    # Every cut of the stream into two reads (a head or a body split anywhere, a request
    # and part of the next in one read): at the end, no head is awaited and no body.
    for cut in range(len(stream) + 1):
        connection = connections.Connection(listener, "127.0.0.1")
        connection.head_since = 1.0  # the connection's first head
        for piece in (stream[:cut], stream[cut:]):
            if piece:
                connection._watch(piece)
        assert connection.head_since is None, cut
        assert connection._body_left == 0, cut
    # And a head cut short is still awaited, from its first byte.
    connection = connections.Connection(listener, "127.0.0.1")
    connection._watch(stream + request[:10])
    assert connection.head_since is not None


async def test_the_handler_aiohttp_makes_is_the_protocol_the_adapter_hands_bytes_to() -> None:
    # The adapter calls aiohttp's handler as an asyncio transport calls a protocol: this
    # fails when an aiohttp release stops making one that way.
    server = web.Server(lambda _r: web.Response())
    handler = server()
    assert isinstance(handler, asyncio.Protocol)
    for method in (
        "connection_made",
        "data_received",
        "eof_received",
        "connection_lost",
        "pause_writing",
        "resume_writing",
    ):
        assert callable(getattr(handler, method)), method


# --------------------------------------------------------------------------- connection caps


async def test_the_server_sees_the_two_loopback_addresses_as_two_sources(
    server: serving.Running,
) -> None:
    listener = server.state.listener
    assert listener is not None
    ca = h.ca_of(server)
    async with (
        h.connect(server.port, ca, source=FLOOD),
        h.connect(server.port, ca, source=API_SERVER),
    ):
        assert listener.sources == 2
        assert len(listener) == 2


async def test_beyond_the_connections_of_one_address_it_alone_is_refused(
    server: serving.Running,
) -> None:
    ca = h.ca_of(server)
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(SMALL.max_connections_per_source):
            await stack.enter_async_context(h.connect(server.port, ca, source=FLOOD))
        await refused_before_handshake(server.port, ca)
        async with h.connect(server.port, ca, source=API_SERVER) as other:
            status, _, _ = await other.post("/mutate", review("uid-other"))
            assert status == 200
    assert closed(await h.scrape(server), "source-refused") == 1


async def test_connections_waiting_together_in_the_accept_queue_are_each_judged(
    server: serving.Running,
) -> None:
    """Connected while the server's loop is busy, they wait in the kernel's queue together
    and are taken in one go: each counts against its address's cap as if it came alone."""
    listener = server.state.listener
    assert listener is not None
    queued = [
        socket.create_connection(("127.0.0.1", server.port), source_address=(FLOOD, 0))
        for _ in range(10)
    ]
    try:
        for _ in range(200):
            await asyncio.sleep(0.05)
            if closed(await h.scrape(server), "source-refused") == 7:
                break
        assert closed(await h.scrape(server), "source-refused") == 7
        assert len(listener) == SMALL.max_connections_per_source == 3
        async with h.connect(server.port, h.ca_of(server), source=API_SERVER) as other:
            status, _, _ = await other.post("/mutate", review("uid-other"))
            assert status == 200
    finally:
        for sock in queued:
            sock.close()


async def test_an_address_over_its_share_of_time_opens_no_connection_until_it_is_back(
    server: serving.Running,
) -> None:
    # Its large reviews took the server's time: its handshakes would take more of it.
    budget = server.state.budget
    budget.charge(FLOOD, budget.burst + 60.0)
    assert budget.wait(FLOOD) > 0
    ca = h.ca_of(server)
    await refused_before_handshake(server.port, ca, source=FLOOD)
    async with h.connect(server.port, ca, source=API_SERVER) as other:
        status, _, _ = await other.post("/mutate", review("uid-other"))
        assert status == 200
    assert closed(await h.scrape(server), "source-refused") == 1


async def test_beyond_the_connections_in_total_a_new_one_is_refused_before_its_handshake(
    server: serving.Running,
) -> None:
    ca = h.ca_of(server)
    async with contextlib.AsyncExitStack() as stack:
        for number in range(SMALL.max_connections):
            source = f"127.0.0.{10 + number % 3}"
            await stack.enter_async_context(h.connect(server.port, ca, source=source))
        await refused_before_handshake(server.port, ca, source="127.0.0.20")
    assert closed(await h.scrape(server), "refused") == 1

    async def forgotten() -> bool:
        listener = server.state.listener
        return listener is not None and len(listener) == 0 and listener.sources == 0

    await h.eventually(forgotten, what="every closed connection forgotten")


# --------------------------------------------------------------------------- TLS handshakes


async def test_at_the_total_a_newcomer_closes_a_connection_still_waiting_for_its_handshake(
    tmp_path: Path,
) -> None:
    # Three addresses of silent connections fill the total: one handshake turn each (the
    # header timeout, 30 s, for a client that never speaks), the others wait for one. The
    # API server's new connection closes the oldest of those waiting and is served.
    limits = dataclasses.replace(
        SMALL, max_connections=6, max_connections_per_source=2, max_handshakes=4
    )
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=limits)
    async with contextlib.AsyncExitStack() as stack:
        server = await stack.enter_async_context(serving.running(settings))
        listener = server.state.listener
        assert listener is not None
        readers = []
        for source in ("127.0.0.11", "127.0.0.12", "127.0.0.13"):
            readers += await stack.enter_async_context(silent(server.port, source, 2))

        async def all_six() -> bool:
            return len(listener) == 6

        await h.eventually(all_six, what="six connections in or before their handshake")
        async with h.connect(server.port, h.ca_of(server), source=API_SERVER) as other:
            status, _, _ = await asyncio.wait_for(other.post("/mutate", review("uid-in")), 20)
            assert status == 200

        async def one_ended() -> bool:
            return sum(r.at_eof() for r in readers) == 1

        # One silent connection was closed to make room.
        await h.eventually(one_ended, what="one silent connection closed")
        assert closed(await h.scrape(server), "refused") == 1


async def test_handshakes_that_never_come_are_closed_and_counted(
    quick_head: serving.Running,
) -> None:
    server = quick_head
    async with silent(server.port, FLOOD, 2) as readers:
        started = time.monotonic()
        for reader in readers:
            assert await asyncio.wait_for(reader.read(), 20) == b""
        assert time.monotonic() - started < 10  # not never
    assert closed(await h.scrape(server), "tls-timeout") == 2


async def test_a_handshake_one_address_never_finishes_does_not_hold_up_anothers(
    tmp_path: Path,
) -> None:
    # The flood holds its one handshake turn for the header timeout, 30 s, and waits for
    # more (the total is two): the API server's connections still get theirs at once.
    limits = Limits(header_timeout=30.0, max_handshakes=2, max_handshakes_per_source=1)
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=limits)
    async with serving.running(settings) as server, silent(server.port, FLOOD, 4):
        ca = h.ca_of(server)
        await asyncio.sleep(0.1)
        started = time.monotonic()
        for number in range(3):
            async with h.connect(server.port, ca, source=API_SERVER) as other:
                status, _, _ = await other.post("/mutate", review(f"uid-{number}"))
                assert status == 200
        assert time.monotonic() - started < 15  # not behind the flood's 30 s


async def test_connections_opened_at_once_wait_their_handshake_turn_and_are_all_served(
    tmp_path: Path,
) -> None:
    limits = Limits(max_handshakes=2, max_handshakes_per_source=1)
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=limits)
    async with serving.running(settings) as server:
        ca = h.ca_of(server)

        async def one(number: int) -> int:
            async with h.connect(server.port, ca) as connection:
                body = review(f"uid-{number}")
                status, _, _ = await asyncio.wait_for(connection.post("/mutate", body), 10)
                return status

        assert await asyncio.gather(*(one(n) for n in range(20))) == [200] * 20


async def test_a_failed_handshake_is_counted(server: serving.Running) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # not TLS
    with contextlib.suppress(ConnectionError):
        await asyncio.wait_for(reader.read(), 20)
    writer.close()

    async def counted() -> bool:
        return closed(await h.scrape(server), "tls-failed") == 1

    await h.eventually(counted, what="the failed handshake counted")


async def test_probes_answer_while_connections_are_abused(server: serving.Running) -> None:
    ca = h.ca_of(server)
    async with (
        silent(server.port, FLOOD, 2),
        h.connect(server.port, ca, source=API_SERVER) as slow,
    ):
        await slow.send(b"POST /mutate HTTP/1.1\r\n")
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(f"http://127.0.0.1:{server.metrics_port}/healthz") as response,
        ):
            assert response.status == 200
