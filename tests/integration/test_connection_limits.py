"""The socket server's connection limits and KIP-219 muting, with real sockets: a connection over
its address's `max.connections.per.ip` is closed at once, a listener at `max.connections` stops
accepting until a connection closes (the client waits in the kernel's backlog), the inter-broker
listener is protected, and a throttled connection's next request waits out its throttle."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from odradek.server.network import Connection, Listener, SocketServer
from odradek.server.quotas.connection_quotas import ConnectionQuotas


def _echo(conn: Connection, payload: bytes) -> bytes:
    """Answers each frame with its first 8 bytes; b"throttle" mutes the connection 300 ms."""
    if payload.startswith(b"throttle"):
        conn.throttle(300)
    return struct.pack(">i", 8) + payload[:8].replace(b"_", b".")


def _frame(body: bytes) -> bytes:
    body = body.ljust(16, b"_")  # frames shorter than a request header are refused
    return struct.pack(">i", len(body)) + body


async def _ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes,
               timeout: float = 5.0) -> bytes:
    writer.write(_frame(body))
    await writer.drain()
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout))[0]
    return await asyncio.wait_for(reader.readexactly(size), timeout)


async def _closed_by_server(reader: asyncio.StreamReader, timeout: float = 5.0) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout) == b""
    except (ConnectionError, OSError):
        return True


@contextlib.asynccontextmanager
async def _server() -> AsyncIterator[SocketServer]:
    quotas = ConnectionQuotas(inter_broker_listener="INTERNAL")
    s = SocketServer(_echo, 1024, connection_quotas=quotas)
    await s.start("127.0.0.1", 0, Listener("INTERNAL"))
    await s.start("127.0.0.1", 0, Listener("EXTERNAL"))
    await s.start_serving()
    try:
        yield s
    finally:
        await s.stop()


async def _run(body: Callable[[SocketServer], Awaitable[None]]) -> None:
    async with _server() as s:
        await asyncio.wait_for(body(s), 30)


async def _open(s: SocketServer, listener: str
                ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", s.listener_ports[listener])


def test_per_ip_limit_closes_the_extra_connection() -> None:
    asyncio.run(_run(_test_per_ip_limit_closes_the_extra_connection))


async def _test_per_ip_limit_closes_the_extra_connection(server: SocketServer) -> None:
    server.connection_quotas.max_per_ip = 2
    conns = [await _open(server, "EXTERNAL") for _ in range(2)]
    for r, w in conns:
        assert await _ask(r, w, b"hello") == b"hello..."
    r3, w3 = await _open(server, "EXTERNAL")
    assert await _closed_by_server(r3)
    # an override for the address raises its limit; the others were never disturbed
    server.connection_quotas.update_overrides({"127.0.0.1": 3})
    r4, w4 = await _open(server, "INTERNAL")
    assert await _ask(r4, w4, b"again") == b"again..."
    for _, w in [*conns, (r3, w3), (r4, w4)]:
        w.close()


def test_listener_limit_blocks_accepting_until_a_slot_frees() -> None:
    asyncio.run(_run(_test_listener_limit_blocks_accepting_until_a_slot_frees))


async def _test_listener_limit_blocks_accepting_until_a_slot_frees(server: SocketServer
                                                                  ) -> None:
    server.connection_quotas.listener_limits = {"EXTERNAL": 1}
    r1, w1 = await _open(server, "EXTERNAL")
    assert await _ask(r1, w1, b"first") == b"first..."
    r2, w2 = await _open(server, "EXTERNAL")  # in the backlog: not accepted, not served
    w2.write(_frame(b"second"))
    await w2.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(r2.readexactly(4), 0.5)
    assert server.connection_quotas.total == 1
    # other listeners still accept
    r3, w3 = await _open(server, "INTERNAL")
    assert await _ask(r3, w3, b"inter") == b"inter..."
    w1.close()
    size = struct.unpack(">i", await asyncio.wait_for(r2.readexactly(4), 5))[0]
    assert await r2.readexactly(size) == b"second.."
    w2.close()
    w3.close()


def test_inter_broker_listener_is_protected() -> None:
    asyncio.run(_run(_test_inter_broker_listener_is_protected))


async def _test_inter_broker_listener_is_protected(server: SocketServer) -> None:
    quotas = server.connection_quotas
    quotas.max_connections = 2
    old = [await _open(server, "EXTERNAL") for _ in range(2)]
    await _ask(*old[1], b"recent")  # old[0] is the least recently active
    await _ask(*old[0], b"x")
    await asyncio.sleep(0.01)
    await _ask(*old[1], b"newest")
    r, w = await _open(server, "INTERNAL")  # over max.connections, still accepted
    assert await _ask(r, w, b"broker") == b"broker.."
    assert await _closed_by_server(old[0][0])  # the LRU external connection made room
    assert await _ask(*old[1], b"alive") == b"alive..."
    assert quotas.total == 2
    for _, wr in [*old, (r, w)]:
        wr.close()


def test_throttled_connection_reads_nothing_for_the_throttle_time() -> None:
    asyncio.run(_run(_test_throttled_connection_reads_nothing_for_the_throttle_time))


async def _test_throttled_connection_reads_nothing_for_the_throttle_time(server: SocketServer
                                                                        ) -> None:
    r, w = await _open(server, "EXTERNAL")
    assert await _ask(r, w, b"throttle") == b"throttle"  # the response leaves at once
    start = time.monotonic()
    assert await _ask(r, w, b"next") == b"next...."
    waited = time.monotonic() - start
    assert 0.25 <= waited < 2.0
    other_r, other_w = await _open(server, "EXTERNAL")  # other connections are not muted
    start = time.monotonic()
    await _ask(other_r, other_w, b"free")
    assert time.monotonic() - start < 0.25
    w.close()
    other_w.close()
