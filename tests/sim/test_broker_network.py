"""The broker's network layer (server/network.py's SocketServer and Connection) and the client's
connection (client/connection.py) running unchanged on the simulated loop and network."""

from __future__ import annotations

import asyncio
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from odradek.client.connection import BrokerConnection
from odradek.client.errors import KafkaConnectionError, KafkaTimeoutError
from odradek.protocol.codec import decode_request
from odradek.server.apis import advertised_versions
from odradek.server.apis.api_versions import ApiVersionsApi
from odradek.server.network import Connection, Response, SocketServer
from odradek.server.quotas.connection_quotas import ConnectionQuotas
from odradek.sim.broker_network import serve_socket_server
from odradek.sim.simulation import Simulation

pytestmark = pytest.mark.sim

BROKER, CLIENT = "10.0.0.1", "10.0.0.2"
API_VERSIONS = ApiVersionsApi(advertised_versions)


def api_versions_only(conn: Connection, payload: bytes) -> Response:
    header, request = decode_request(payload)
    assert header.request_api_key == 18
    return API_VERSIONS.handle(header, request, conn)


def test_the_client_negotiates_api_versions_with_the_socket_server() -> None:
    async def main(sim: Simulation) -> tuple[str, float]:
        server = SocketServer(api_versions_only, max_request_size=100 * 1024 * 1024)
        serve_socket_server(sim.network, BROKER, 9092, server)
        assert server.listener_ports == {"PLAINTEXT": 9092}
        client = BrokerConnection(BROKER, 9092, node_id=1, client_id="sim-client",
                                  connector=sim.network.connector(CLIENT))
        await client.connect()
        assert client.api_versions[18] == (0, 3)
        assert client.api_versions[1][1] >= 12  # Fetch
        (conn,) = server.connections
        assert conn.attributes["client_software"][0] == "odradek"
        assert conn.peer.startswith(f"{CLIENT}:")
        # pipelined: sent back to back, answered in order
        answers = await asyncio.gather(*(client.send(18, client_software_name="odradek",
                                                     client_software_version="1")
                                         for _ in range(50)))
        assert all(a.error_code == 0 for a in answers)
        client.close()
        await client.wait_closed()
        await asyncio.sleep(1)
        assert not server.connections
        return sim.digest.hexdigest(), sim.now

    first, second = Simulation(42).run(main), Simulation(42).run(main)
    assert first == second
    assert Simulation(43).run(main)[0] != first[0]


def test_max_connections_per_ip_closes_the_extra_connection() -> None:
    async def main(sim: Simulation) -> None:
        server = SocketServer(api_versions_only, max_request_size=1 << 20,
                              connection_quotas=ConnectionQuotas(max_per_ip=1))
        serve_socket_server(sim.network, BROKER, 9092, server)
        connect = sim.network.connector(CLIENT)
        _, first = await connect(BROKER, 9092, None, timeout=5.0, client_id="a")
        reader, _ = await connect(BROKER, 9092, None, timeout=5.0, client_id="b")
        assert await reader.read() == b""  # closed by the broker
        first.close()
        await asyncio.sleep(1)
        client = BrokerConnection(BROKER, 9092, connector=connect)
        await client.connect()  # the slot is free again
        client.close()

    Simulation(1).run(main)


@dataclass
class Region:
    """server/network.py's Region: a slice of an open file."""

    file: BinaryIO
    position: int
    size: int


def test_file_regions_go_out_through_sendfile_as_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    content = os.urandom(500_000)
    path.write_bytes(content)
    regions = [(0, 100), (1000, 300_000), (400_000, 70_000)]  # pread, sendfile, sendfile

    async def main(sim: Simulation) -> None:
        sendfile = sim.loop.sendfile
        sent: list[int] = []

        async def counted(*args: Any, **kwargs: Any) -> int:
            sent.append(await sendfile(*args, **kwargs))
            return sent[-1]

        sim.loop.sendfile = counted  # type: ignore[method-assign]
        with path.open("rb") as f:
            def handler(conn: Connection, payload: bytes) -> Any:
                correlation = payload[4:8]
                parts: list[Any] = [correlation]
                parts += [Region(f, pos, size) for pos, size in regions]
                size = sum(len(p) if isinstance(p, bytes) else p.size for p in parts)
                return [struct.pack(">i", size), *parts]

            server = SocketServer(handler, max_request_size=1 << 20)
            serve_socket_server(sim.network, BROKER, 9092, server)
            reader, writer = await sim.network.connector(CLIENT)(
                BROKER, 9092, None, timeout=5.0, client_id="c")
            for correlation in range(3):
                body = struct.pack(">hhi", 1, 12, correlation) + b"\0\0"
                writer.write(struct.pack(">i", len(body)) + body)
            for correlation in range(3):
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                assert struct.unpack(">i", frame[:4])[0] == correlation
                assert frame[4:] == b"".join(content[p:p + s] for p, s in regions)
            writer.close()
        assert sent == [300_000, 70_000] * 3  # regions of 64 KiB or more: loop.sendfile

    Simulation(3).run(main)


def slow_after_the_first(conn: Connection, payload: bytes) -> Any:
    """ApiVersions, answered at once the first time on a connection, after 5 s later on."""
    response = api_versions_only(conn, payload)
    if not conn.attributes.get("answered"):
        conn.attributes["answered"] = True
        return response

    async def later() -> bytes:
        await asyncio.sleep(5)
        assert isinstance(response, bytes)
        return response

    return later()


def test_faults_fail_the_clients_requests_and_free_the_brokers_slots() -> None:
    async def main(sim: Simulation) -> None:
        net = sim.network
        server = SocketServer(slow_after_the_first, max_request_size=1 << 20)
        serve_socket_server(net, BROKER, 9092, server)
        connect = net.connector(CLIENT)

        # a reset fails every request in flight with KafkaConnectionError
        client = BrokerConnection(BROKER, 9092, connector=connect)
        await client.connect()
        pending = [asyncio.ensure_future(client.send(18, client_software_name="odradek",
                                                     client_software_version="1"))
                   for _ in range(10)]
        await asyncio.sleep(1)
        net.reset(CLIENT, BROKER)
        results = await asyncio.gather(*pending, return_exceptions=True)
        assert all(isinstance(r, KafkaConnectionError) for r in results)
        await asyncio.sleep(0.1)
        assert not server.connections and server.connection_quotas.total == 0

        # a stall: the request times out at request.timeout.ms, exactly
        client = BrokerConnection(BROKER, 9092, connector=connect, request_timeout_ms=3000)
        await client.connect()
        net.stall(CLIENT, BROKER)
        sent_at = sim.now
        with pytest.raises(KafkaTimeoutError):
            await client.send(18, client_software_name="odradek", client_software_version="1")
        assert sim.now - sent_at == pytest.approx(3.0, abs=1e-9)
        net.heal(CLIENT, BROKER)
        await asyncio.sleep(1)  # the client's close reaches the broker
        assert not server.connections

    Simulation(9).run(main)
