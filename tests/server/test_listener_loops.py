"""The listener starts TLS itself (`limits._Guarded._handshake`), which the two event loops
`serve` runs on do differently underneath: uvloop starts reading a connection as soon as it
is accepted, whatever the protocol asks, so a ClientHello can arrive before the TLS layer has
the connection and must be handed to it (`_Guarded._feed`). The same scenarios on both loops,
with connections waiting for a handshake turn and with client certificates.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from tests.support import server_helpers as h
from webhook.server import certificates, serving
from webhook.server import limits as limits_module
from webhook.server.limits import Limits

LIMITS = Limits(max_handshakes=2, max_handshakes_per_source=1)


def run_on(event_loop: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    if event_loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        uvloop.run(main())
    else:
        asyncio.run(main())


async def reviews_over_new_connections(
    port: int, ca: Path, count: int, client: tuple[Path, Path] | None = None
) -> list[int]:
    """`count` connections opened at once, one review each: their statuses."""

    async def one(number: int) -> int:
        async with h.connect(port, ca, client=client) as connection:
            body = h.review_body(h.shared_pod(), f"uid-{number}")
            status, _, _ = await asyncio.wait_for(connection.post("/mutate", body), 10)
            return status

    return list(await asyncio.gather(*(one(n) for n in range(count))))


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_connections_waiting_their_handshake_turn_are_all_served(
    tmp_path: Path, event_loop: str
) -> None:
    async def main() -> None:
        settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=LIMITS)
        async with serving.running(settings) as server:
            ca = settings.cert_dir / certificates.CA_FILE
            # One handshake at a time for the one address: 19 wait their turn.
            assert await reviews_over_new_connections(server.port, ca, 20) == [200] * 20
            connections = server.state.connections
            assert connections is not None
            assert connections.handshaking == 0

    run_on(event_loop, main)


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_client_certificates_are_asked_for_on_both_loops(tmp_path: Path, event_loop: str) -> None:
    authority = certificates.make_ca()
    ca_file = tmp_path / "client-ca.crt"
    ca_file.write_bytes(authority.cert_pem)
    pair = certificates.make_client_certificate(authority, common_name="kube-apiserver")
    client = (tmp_path / "client.crt", tmp_path / "client.key")
    client[0].write_bytes(pair.cert_pem)
    client[1].write_bytes(pair.key_pem)

    async def main() -> None:
        settings = h.settings(
            tmp_path,
            host="127.0.0.1",
            port=0,
            metrics_port=0,
            limits=LIMITS,
            client_ca_file=ca_file,
        )
        async with serving.running(settings) as server:
            ca = settings.cert_dir / certificates.CA_FILE
            assert await reviews_over_new_connections(server.port, ca, 5, client) == [200] * 5
            with pytest.raises((ConnectionError, OSError, IndexError)):
                await reviews_over_new_connections(server.port, ca, 1)

    run_on(event_loop, main)


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_a_connection_waiting_its_turn_keeps_at_most_one_record_of_what_it_sent(
    tmp_path: Path, event_loop: str
) -> None:
    # uvloop reads once before the pause holds; what it read is kept for the TLS layer, up to
    # one TLS record. More is no ClientHello: the connection is dropped and counted.
    limits = Limits(max_handshakes=1, max_handshakes_per_source=1, header_timeout=5.0)

    async def main() -> None:
        settings = h.settings(tmp_path, host="127.0.0.1", port=0, metrics_port=0, limits=limits)
        async with serving.running(settings) as server:
            connections = server.state.connections
            assert connections is not None
            _, holder = await asyncio.open_connection("127.0.0.1", server.port)  # the one slot
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)

            async def waiting() -> bool:
                return len(connections) == 2 and connections.handshaking == 1

            await h.eventually(waiting, what="the second connection waiting its turn")
            (source,) = connections._sources.values()
            (second,) = [c for c in source.open if c.phase == limits_module._WAITING]
            writer.write(b"\x16\x03\x01" + b"\x00" * (20 * 1024))
            await writer.drain()
            if event_loop == "uvloop":
                with contextlib.suppress(ConnectionError):
                    await asyncio.wait_for(reader.read(), 5)
            else:
                await asyncio.sleep(0.2)  # asyncio reads nothing while it waits
            kept = second._hello
            assert kept is None or len(kept) <= limits_module._HELLO_BYTES
            if event_loop == "uvloop":
                # Read, found to be more than a record, dropped and counted.
                assert second not in source.open
                assert (
                    server.state.metrics.connections_closed.labels("tls-failed")._value.get() == 1
                )
            writer.close()
            holder.close()

    run_on(event_loop, main)
