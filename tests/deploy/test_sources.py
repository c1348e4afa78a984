"""The bounds of one source address: connections, TLS handshakes, review bytes in flight and
the share of a core its large reviews take, on the real listener.

Two loopback addresses play two sources: 127.0.0.1 the flood, 127.0.0.2 the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support import server_helpers as h
from webhook.server import inflight, serving
from webhook.server.limits import Limits

FLOOD = "127.0.0.1"
API_SERVER = "127.0.0.2"
KIB = 1024

LIMITS = Limits(
    header_timeout=5.0,
    body_timeout=5.0,
    idle_timeout=30.0,
    max_connections=16,
    max_connections_per_source=2,
    max_handshakes=2,
    max_handshakes_per_source=1,
    max_body_bytes=64 * KIB,
    max_inflight_bytes=256 * KIB,
    max_inflight_bytes_per_source=64 * KIB,
)


pytestmark = pytest.mark.usefixtures("quick_sweep")


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[serving.Running]:
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=LIMITS)
    async with serving.running(settings) as running:
        yield running




def closed(text: str, reason: str) -> float:
    return h.metric(text, "gpu_share_webhook_connections_closed_total", reason=reason)


def review(uid: str) -> bytes:
    return h.review_body(h.shared_pod(), uid)


@contextlib.asynccontextmanager
async def silent(port: int, source: str, count: int) -> AsyncIterator[list[asyncio.StreamWriter]]:
    """`count` TCP connections from `source` that never send a byte (a TLS slowloris)."""
    writers = []
    try:
        for _ in range(count):
            _, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
            writers.append(writer)
        yield writers
    finally:
        for writer in writers:
            writer.close()


async def test_the_server_sees_the_two_loopback_addresses_as_two_sources(
    server: serving.Running,
) -> None:
    connections = server.state.connections
    assert connections is not None
    ca = h.ca_of(server)
    async with (
        h.connect(server.port, ca, source=FLOOD),
        h.connect(server.port, ca, source=API_SERVER),
    ):
        assert connections.sources == 2
        assert sorted(connections._sources) == [FLOOD, API_SERVER]


async def test_beyond_the_connections_of_one_address_its_own_idle_one_makes_room(
    server: serving.Running,
) -> None:
    ca = h.ca_of(server)
    async with (
        h.connect(server.port, ca, source=API_SERVER) as other,
        h.connect(server.port, ca, source=FLOOD) as oldest,
        h.connect(server.port, ca, source=FLOOD) as second,
    ):
        for number, connection in enumerate((other, oldest, second)):
            status, _, _ = await connection.post("/mutate", review(f"uid-{number}"))
            assert status == 200
        async with h.connect(server.port, ca, source=FLOOD) as newcomer:
            status, _, _ = await newcomer.post("/mutate", review("uid-new"))
            assert status == 200
            # The flood's oldest made room, not the other address's (older still).
            assert await oldest.reader.read() == b""
            status, _, _ = await other.post("/mutate", review("uid-other"))
            assert status == 200
    assert closed(await h.scrape(server), "evicted") == 1


async def test_beyond_the_connections_of_one_address_with_none_idle_it_is_refused_alone(
    server: serving.Running,
) -> None:
    ca = h.ca_of(server)
    body = review("uid-busy")
    async with (
        h.connect(server.port, ca, source=FLOOD) as a,
        h.connect(server.port, ca, source=FLOOD) as b,
    ):
        for busy in (a, b):
            await busy.send_head("/mutate", len(body))
            await busy.send(body[:10])
        with pytest.raises((ConnectionError, ssl.SSLError)):
            async with h.connect(server.port, ca, source=FLOOD):
                pytest.fail("a third connection of the address was served")
        async with h.connect(server.port, ca, source=API_SERVER) as other:
            status, _, _ = await other.post("/mutate", review("uid-other"))
            assert status == 200
    assert closed(await h.scrape(server), "source-refused") == 1


async def test_handshakes_of_one_address_wait_their_turn_and_others_go_first(
    server: serving.Running,
) -> None:
    connections = server.state.connections
    assert connections is not None
    # Beyond its two connections the flood is refused: with 16 in all, its silent ones
    # would take the handshake slots; one address holds one of the two.
    async with silent(server.port, FLOOD, 2):

        async def waiting() -> bool:
            return len(connections) == 2 and connections.handshaking == 1

        await h.eventually(waiting, what="one handshake running, one waiting")
        async with h.connect(server.port, h.ca_of(server), source=API_SERVER) as other:
            status, _, _ = await other.post("/mutate", review("uid-other"))
            assert status == 200
        # Served while the flood's handshakes were still waiting, not once they timed out.
        assert closed(await h.scrape(server), "tls-timeout") == 0
        assert connections.handshaking == 1


async def test_handshakes_that_never_come_are_closed_and_counted(tmp_path: Path) -> None:
    limits = Limits(
        header_timeout=0.5,
        max_handshakes=1,
        max_handshakes_per_source=1,
        max_connections_per_source=8,
    )
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=limits)
    async with serving.running(settings) as server, silent(server.port, FLOOD, 3):
        # One timed out in its handshake, two while waiting for their turn.

        async def all_three() -> bool:
            return closed(await h.scrape(server), "tls-timeout") == 3

        await h.eventually(all_three, what="three TLS timeouts counted")
        connections = server.state.connections
        assert connections is not None
        assert len(connections) == 0
        assert connections.handshaking == 0

        async def forgotten() -> bool:
            # Once its handshake rate has refilled: an address that closes all its
            # connections gets no fresh burst by it.
            return connections.sources == 0

        await h.eventually(forgotten, what="the address forgotten")


async def test_a_failed_handshake_is_counted(server: serving.Running) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # plain HTTP to the TLS port
    with contextlib.suppress(ConnectionError):
        await asyncio.wait_for(reader.read(), 5)
    writer.close()

    async def counted() -> bool:
        return closed(await h.scrape(server), "tls-failed") == 1

    await h.eventually(counted, what="the failed handshake counted")


async def test_one_address_holds_no_more_than_its_review_bytes(server: serving.Running) -> None:
    ca = h.ca_of(server)
    budget = server.state.budget
    padding = 64 * KIB - len(h.review_body({**h.shared_pod(), "padding": ""}, "uid-big"))
    big = h.review_body({**h.shared_pod(), "padding": "x" * padding}, "uid-big")
    assert len(big) == LIMITS.max_body_bytes
    async with h.connect(server.port, ca, source=FLOOD) as stalled:
        await stalled.send_head("/mutate", len(big))
        await stalled.send(big[:-10])  # all but the end: held until the body timeout

        async def holding() -> bool:
            return budget.by_source.get(FLOOD, 0) == len(big) - 10

        await h.eventually(holding, what="the stalled body held")
        async with h.connect(server.port, ca, source=FLOOD) as more:
            status, _, text = await more.post("/mutate", review("uid-more"))
        assert status == 429
        assert b"from 127.0.0.1" in text
        assert b"the limit per address is 65536" in text
        async with h.connect(server.port, ca, source=API_SERVER) as other:
            status, _, _ = await other.post("/mutate", review("uid-other"))
            assert status == 200
        await stalled.send(big[-10:])
        status, _, _ = await stalled.response()
        assert status == 200
    assert budget.by_source == {}
    text = await h.scrape(server)
    assert (
        h.metric(text, "gpu_share_webhook_requests_shed_total", reason="source-inflight-bytes") == 1
    )


async def test_an_address_whose_large_reviews_took_their_share_waits_and_no_other_does(
    server: serving.Running,
) -> None:
    # Under these limits every body is small (up to 256 KiB): here above 16 KiB is large.
    state = server.state
    state.budget = inflight.Budget(
        LIMITS.max_inflight_bytes,
        small_bytes=16 * KIB,
        per_source_bytes=LIMITS.max_inflight_bytes_per_source,
    )
    charged: list[tuple[str, float]] = []

    class Recording(inflight.LargeShares):
        __slots__ = ()

        def charge(self, source: str, seconds: float, now: float | None = None) -> None:
            charged.append((source, seconds))
            super().charge(source, seconds, now)

    state.budget.shares = state.budget.turns.shares = Recording(0.5)
    bare = len(review("uid-0"))
    large = h.review_body({**h.shared_pod(), "padding": "x" * (32 * KIB - bare)}, "uid-large")
    ca = h.ca_of(server)
    connections = state.connections
    assert connections is not None
    # The address's two connections (its limit here), made before it took its share.
    async with (
        h.connect(server.port, ca, source=FLOOD) as first,
        h.connect(server.port, ca, source=FLOOD) as second,
    ):
        # 5 s beyond the burst: 10 s at half a core, more than a large review may wait for
        # its turn (half the API server's 10 s default, less a margin).
        state.budget.shares.charge(FLOOD, 6.0)
        charged.clear()
        status, headers, text = await first.post("/mutate", large)
        assert status == 429
        # The whole seconds until it is back within its share: 10, less what has passed.
        assert 8 <= int(headers["retry-after"]) <= 10
        assert b"the large reviews from 127.0.0.1 took more than 50% of a core lately" in text
        # The refusal is counted against the address too (what it cost).
        assert charged == [(FLOOD, inflight.REFUSAL_SECONDS)]
        status, _, _ = await second.post("/mutate", review("uid-small"))
        assert status == 200  # its small ones go on, on the connections it has
    # A new connection of the address waits: no handshake until it is within its share.
    async with silent(server.port, FLOOD, 1):

        async def waiting() -> bool:
            flood = connections._sources.get(FLOOD)
            return flood is not None and len(flood.waiting) == 1

        await h.eventually(waiting, what="the new connection waiting for its handshake")
        assert connections.handshaking == 0
        # Another address is served at once, its large reviews included.
        charged.clear()
        async with h.connect(server.port, ca, source=API_SERVER) as other:
            status, _, _ = await other.post("/mutate", large)
        assert status == 200
        assert connections.handshaking == 0
    # ...and what that review cost was charged to its own address: its thread's CPU time,
    # and what receiving it cost.
    assert [source for source, _ in charged] == [API_SERVER, API_SERVER]
    assert min(seconds for _, seconds in charged) > 0
    text = await h.scrape(server)
    assert h.metric(text, "gpu_share_webhook_requests_shed_total", reason="source-large-share") == 1


async def test_one_address_begins_handshakes_at_its_rate_and_others_at_theirs(
    tmp_path: Path,
) -> None:
    limits = Limits(
        handshakes_per_second_per_source=2,
        max_handshakes_per_source=8,
        max_connections_per_source=16,
    )
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=limits)
    async with serving.running(settings) as server:
        connections = server.state.connections
        assert connections is not None
        async with silent(server.port, FLOOD, 6):

            async def six() -> bool:
                return len(connections) == 6

            await h.eventually(six, what="six connections accepted")
            # A burst of four (two seconds of its rate), then one every half second: not six
            # at once.
            assert connections.handshaking == 4
            async with h.connect(server.port, h.ca_of(server), source=API_SERVER) as other:
                status, _, _ = await other.post("/mutate", review("uid-other"))
                assert status == 200

            async def one_more() -> bool:
                return connections.handshaking == 5

            await h.eventually(one_more, what="the next handshake once the rate allows")


@pytest.mark.parametrize("stage", ["waiting for its turn", "in a slow handshake"])
async def test_at_the_total_limit_a_silent_connection_makes_room_before_an_idle_one(
    tmp_path: Path, stage: str
) -> None:
    # Silent connections from a few addresses must not push out the API server's idle ones.
    waiting = stage == "waiting for its turn"
    limits = Limits(
        max_connections=4,
        max_connections_per_source=3,
        header_timeout=5.0,
        # One handshake of the flood at a time: its other two wait their turn; else all three
        # are in their handshake, which takes over a second.
        max_handshakes_per_source=1 if waiting else 4,
    )
    settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=limits)
    async with serving.running(settings) as server:
        connections = server.state.connections
        assert connections is not None
        ca = h.ca_of(server)
        async with h.connect(server.port, ca, source=API_SERVER) as idle:
            status, _, _ = await idle.post("/mutate", review("uid-1"))
            assert status == 200
            async with silent(server.port, FLOOD, 3):

                async def accepted() -> bool:
                    return len(connections) == 4

                await h.eventually(accepted, what="the flood's three accepted")
                flood = connections._sources[FLOOD]
                assert len(flood.waiting) == (2 if waiting else 0)
                if not waiting:
                    await asyncio.sleep(1.2)  # their handshakes now slower than any real one
                async with silent(server.port, "127.0.0.5", 1):

                    async def evicted() -> bool:
                        return closed(await h.scrape(server), "evicted") == 1

                    await h.eventually(evicted, what="one connection evicted")
                    # One of the flood's (the address holding the most) went, not the API
                    # server's idle one.
                    assert len(flood.open) == 2
                    status, _, _ = await idle.post("/mutate", review("uid-2"))
                    assert status == 200
                    text = await h.scrape(server)
                    assert closed(text, "tls-failed") == closed(text, "tls-timeout") == 0
