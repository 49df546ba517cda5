"""The simulated network (odradek.sim.network): TCP's guarantees under latency and faults."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.sim.network import SimNetwork
from odradek.sim.simulation import Simulation

pytestmark = pytest.mark.sim

Main = Callable[[Simulation], Awaitable[Any]]


def run(main: Main, seed: int = 1, **kwargs: Any) -> Any:
    return Simulation(seed, **kwargs).run(main)


def stream_server(net: SimNetwork, host: str, port: int,
                  handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
                  limit: int = 2 ** 16) -> None:
    loop = net.loop

    def factory() -> asyncio.Protocol:
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        return asyncio.StreamReaderProtocol(reader, handle, loop=loop)

    net.listen(host, port, factory)


def keep_accepted(net: SimNetwork) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A stream server on broker:9092 that only keeps what it accepts, for the test to use."""
    accepted: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def keep(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append((reader, writer))

    stream_server(net, "broker", 9092, keep)
    return accepted


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(4096):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def collect(reader: asyncio.StreamReader, into: bytearray) -> None:
    while data := await reader.read(65536):
        into += data


def test_a_round_trip_and_the_transport_extras() -> None:
    async def main(sim: Simulation) -> None:
        stream_server(sim.network, "broker", 9092, echo)
        reader, writer = await sim.network.open_connection("client", "broker", 9092)
        assert writer.get_extra_info("peername") == ("broker", 9092)
        host, port = writer.get_extra_info("sockname")
        assert host == "client" and port >= 40000
        assert writer.get_extra_info("socket") is None
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        assert sim.now > 0  # latency is real
        writer.close()
        await writer.wait_closed()

    run(main)


def test_nobody_listening_is_refused() -> None:
    async def main(sim: Simulation) -> None:
        with pytest.raises(ConnectionRefusedError):
            await sim.network.open_connection("client", "broker", 9092)
        listener = sim.network.listen("broker", 9092, asyncio.Protocol)
        listener.close()
        with pytest.raises(ConnectionRefusedError):
            await sim.network.open_connection("client", "broker", 9092)

    run(main)


def test_the_connector_seam_has_open_connections_shape() -> None:
    async def main(sim: Simulation) -> None:
        stream_server(sim.network, "broker", 9092, echo)
        connect = sim.network.connector("client")
        reader, writer = await connect("broker", 9092, None, timeout=5.0, client_id="c")
        writer.write(b"x")
        assert await reader.readexactly(1) == b"x"

    run(main)


def test_order_and_no_duplicates_under_jitter_and_loss() -> None:
    async def main(sim: Simulation) -> None:
        net = sim.network
        net.set_loss("client", "broker", 0.3)
        received = bytearray()
        done = asyncio.Event()

        async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await collect(reader, received)
            done.set()

        stream_server(net, "broker", 9092, sink)
        _, writer = await net.open_connection("client", "broker", 9092)
        sent = b"".join(i.to_bytes(4, "big") for i in range(5000))
        for i in range(0, len(sent), 37):
            writer.write(sent[i:i + 37])
            if i % 370 == 0:
                await asyncio.sleep(0.0001)
        writer.close()
        await done.wait()
        assert bytes(received) == sent

    run(main, jitter=0.01)


def test_a_reset_raises_on_both_ends() -> None:
    async def main(sim: Simulation) -> None:
        accepted = keep_accepted(sim.network)
        reader, writer = await sim.network.open_connection("client", "broker", 9092)
        await asyncio.sleep(0.1)
        sim.network.reset("client", "broker")
        with pytest.raises(ConnectionResetError):
            await reader.read(10)
        with pytest.raises(ConnectionResetError):
            await accepted[0][0].read(10)
        with pytest.raises(ConnectionResetError):
            writer.write(b"more")
            await writer.drain()

    run(main)


def test_abort_resets_the_peer_and_close_ends_its_stream() -> None:
    async def main(sim: Simulation) -> None:
        accepted = keep_accepted(sim.network)
        _, w1 = await sim.network.open_connection("client", "broker", 9092)
        _, w2 = await sim.network.open_connection("client", "broker", 9092)
        await asyncio.sleep(0.1)
        w1.write(b"last words")
        w1.close()
        assert await accepted[0][0].read() == b"last words"  # then end-of-stream
        w2.transport.abort()
        with pytest.raises(ConnectionResetError):
            await accepted[1][0].read(10)

    run(main)


def test_data_for_a_closed_end_resets_the_sender() -> None:
    async def main(sim: Simulation) -> None:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.transport.abort()

        stream_server(sim.network, "broker", 9092, hang_up)
        reader, writer = await sim.network.open_connection("client", "broker", 9092)
        writer.write(b"hello?")
        with pytest.raises(ConnectionResetError):
            await reader.read(10)

    run(main)


def test_cut_then_heal_delivers_what_waited() -> None:
    async def main(sim: Simulation) -> None:
        net = sim.network
        stream_server(net, "broker", 9092, echo)
        reader, writer = await net.open_connection("client", "broker", 9092)
        net.cut("client", "broker")
        writer.write(b"during the cut")
        read = asyncio.ensure_future(reader.readexactly(14))
        await asyncio.sleep(60)
        assert not read.done()
        net.heal("client", "broker")
        healed_at = sim.now
        assert await read == b"during the cut"
        assert sim.now > healed_at

    run(main)


def test_a_connect_across_a_cut_times_out_and_works_after_the_heal() -> None:
    async def main(sim: Simulation) -> None:
        net = sim.network
        stream_server(net, "broker", 9092, echo)
        connect = net.connector("client")
        net.cut("client", "broker")
        with pytest.raises(TimeoutError):
            await connect("broker", 9092, None, timeout=3.0, client_id="c")
        assert sim.now == 3.0
        net.heal("client", "broker")
        reader, writer = await connect("broker", 9092, None, timeout=3.0, client_id="c")
        writer.write(b"ok")
        assert await reader.readexactly(2) == b"ok"

    run(main)


def test_a_long_cut_times_the_connection_out_like_tcp() -> None:
    async def main(sim: Simulation) -> None:
        net = sim.network
        accepted = keep_accepted(net)
        reader, writer = await net.open_connection("client", "broker", 9092)
        await asyncio.sleep(0.1)
        net.cut("client", "broker", timeout=30.0)
        cut_at = sim.now
        writer.write(b"never arrives")
        with pytest.raises(TimeoutError):
            await reader.read(10)
        assert 30.0 < sim.now - cut_at < 30.1  # parked when due, then 30 s
        with pytest.raises(ConnectionResetError):
            await accepted[0][0].read(10)

    run(main)


def test_a_one_way_cut_blocks_one_direction() -> None:
    async def main(sim: Simulation) -> None:
        net = sim.network
        sent_back: list[asyncio.StreamWriter] = []
        got = bytearray()

        async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sent_back.append(writer)
            await collect(reader, got)

        stream_server(net, "broker", 9092, server)
        reader, writer = await net.open_connection("client", "broker", 9092)
        await asyncio.sleep(0.1)
        net.cut("client", "broker", oneway=True)
        writer.write(b"up")
        sent_back[0].write(b"down")
        assert await reader.readexactly(4) == b"down"
        await asyncio.sleep(10)
        assert got == b""
        net.heal("client", "broker", oneway=True)
        await asyncio.sleep(1)
        assert got == b"up"

    run(main)


def test_drain_waits_for_a_receiver_that_does_not_read() -> None:
    async def main(sim: Simulation) -> None:
        net = sim.network
        readers: list[asyncio.StreamReader] = []
        stream_server(net, "broker", 9092,
                      lambda r, w: readers.append(r) or asyncio.sleep(0), limit=1024)
        _, writer = await net.open_connection("client", "broker", 9092)
        writer.write(b"x" * 200_000)
        drain = asyncio.ensure_future(writer.drain())
        await asyncio.sleep(5)
        assert not drain.done()  # the server's reader paused its transport
        assert writer.transport.get_write_buffer_size() > 64 * 1024
        assert len(await readers[0].readexactly(200_000)) == 200_000
        await drain
        assert writer.transport.get_write_buffer_size() == 0

    run(main)


def test_sendfile_sends_a_file_region_as_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    content = os.urandom(300_000)
    path.write_bytes(content)

    async def main(sim: Simulation) -> None:
        loop = asyncio.get_running_loop()
        got = bytearray()
        done = asyncio.Event()

        async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await collect(reader, got)
            done.set()

        stream_server(sim.network, "broker", 9092, sink)
        _, writer = await sim.network.open_connection("client", "broker", 9092)
        with path.open("rb") as f:
            assert await loop.sendfile(writer.transport, f, 1000, 200_000) == 200_000
            assert await loop.sendfile(writer.transport, f, 290_000, 50_000) == 10_000
            assert f.tell() == 0
        writer.close()
        await done.wait()
        assert bytes(got) == content[1000:201_000] + content[290_000:]

    run(main)


fault = st.one_of(
    st.tuples(st.just("cut"), st.booleans()),
    st.tuples(st.just("heal"), st.booleans()),
    st.tuples(st.just("loss"), st.sampled_from([0.0, 0.1, 0.5])),
    st.tuples(st.just("slow"), st.sampled_from([0.0, 0.05, 1.0])),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 32), schedule=st.lists(
    st.tuples(st.floats(0.0, 5.0), fault), max_size=12),
    sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=40))
def test_random_fault_schedules_keep_each_connection_in_order(
        seed: int, schedule: list[tuple[float, tuple[str, Any]]], sizes: list[int]) -> None:
    """Whatever faults strike (stalls, one-way or not; loss; delay), each connection's bytes
    arrive whole, in order, once, after the last heal; a reset raises on both ends."""

    async def main(sim: Simulation) -> None:
        net = sim.network
        loop = asyncio.get_running_loop()
        received: dict[int, bytearray] = {}

        async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            buf = received[len(received)] = bytearray()
            await collect(reader, buf)
            writer.close()

        stream_server(net, "broker", 9092, sink)
        for when, (kind, arg) in schedule:
            if kind == "cut":
                loop.call_later(when, lambda a=arg: net.stall("client", "broker", oneway=a))
            elif kind == "heal":
                loop.call_later(when, lambda a=arg: net.heal("client", "broker", oneway=a))
            elif kind == "loss":
                loop.call_later(when, net.set_loss, "client", "broker", arg)
            else:
                loop.call_later(when, net.slow, "client", "broker", arg)
        loop.call_later(6.0, net.heal_all)
        rng = sim.random.fork("workload")
        streams: list[bytes] = []
        writers = []
        for c in range(3):
            _, writer = await net.open_connection("client", "broker", 9092)
            writers.append(writer)
            streams.append(b"".join(bytes([c, i % 251]) * n for i, n in enumerate(sizes)))
        for c, writer in enumerate(writers):
            data = streams[c]
            pos = 0
            while pos < len(data):
                step = rng.randint(1, 5000)
                writer.write(data[pos:pos + step])
                pos += step
                await asyncio.sleep(rng.choice([0.0, 0.01, 0.3]))
            writer.close()
        await asyncio.sleep(120)
        assert sorted(bytes(b) for b in received.values()) == sorted(streams)

    run(main, seed=seed)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 32), schedule=st.lists(st.tuples(
    st.floats(0.0, 5.0), st.sampled_from(["cut", "heal", "reset", "loss"])), max_size=10))
def test_under_timeouts_and_resets_each_connection_gets_a_prefix(
        seed: int, schedule: list[tuple[float, str]]) -> None:
    """Cuts that time out and resets may end connections early: what arrived is still a
    prefix of what was sent (in order, no duplicate, no gap), and a broken connection's
    reader raises ConnectionError (TimeoutError or ConnectionResetError)."""

    async def main(sim: Simulation) -> None:
        net = sim.network
        loop = asyncio.get_running_loop()
        received: list[bytearray] = []
        errors: list[BaseException] = []

        async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            buf = bytearray()
            received.append(buf)
            try:
                await collect(reader, buf)
            except (ConnectionError, TimeoutError) as exc:
                errors.append(exc)

        stream_server(net, "broker", 9092, sink)
        actions = {"cut": lambda: net.cut("client", "broker", timeout=1.5),
                   "heal": lambda: net.heal("client", "broker"),
                   "reset": lambda: net.reset("client", "broker"),
                   "loss": lambda: net.set_loss("client", "broker", 0.2)}
        for when, kind in schedule:
            loop.call_later(when, actions[kind])
        loop.call_later(6.0, net.heal_all)
        rng = sim.random.fork("workload")
        sent: dict[int, bytes] = {}
        for c in range(3):
            try:  # a connect may meet the reset or time out across the cut too
                _, writer = await net.open_connection("client", "broker", 9092)
            except (ConnectionError, TimeoutError):
                continue
            data = sent[c] = bytes([c]) + rng.randbytes(20_000)
            for i in range(0, len(data), 1000):
                writer.write(data[i:i + 1000])
                await asyncio.sleep(0.05)
            writer.close()
        await asyncio.sleep(1000)
        for buf in received:
            if buf:
                assert sent[buf[0]].startswith(bytes(buf))
        complete = sum(1 for buf in received if buf and bytes(buf) == sent[buf[0]])
        assert complete + len(errors) >= len(received) - sum(1 for b in received if not b)

    run(main, seed=seed)


def test_a_stall_never_times_out() -> None:
    async def main(sim: Simulation) -> None:
        net = sim.network
        stream_server(net, "broker", 9092, echo)
        reader, writer = await net.open_connection("client", "broker", 9092)
        net.stall("client", "broker")
        writer.write(b"patience")
        read = asyncio.ensure_future(reader.readexactly(8))
        await asyncio.sleep(3600)  # far past TCP's give-up time of a cut
        assert not read.done()
        net.heal("client", "broker")
        assert await read == b"patience"

    run(main)


def test_write_eof_half_closes() -> None:
    async def main(sim: Simulation) -> None:
        async def reply_after_eof(reader: asyncio.StreamReader,
                                  writer: asyncio.StreamWriter) -> None:
            request = await reader.read()  # until the client's FIN
            writer.write(request[::-1])
            writer.close()

        stream_server(sim.network, "broker", 9092, reply_after_eof)
        reader, writer = await sim.network.open_connection("client", "broker", 9092)
        writer.write(b"abc")
        assert writer.can_write_eof()
        writer.write_eof()
        assert await reader.read() == b"cba"

    run(main)
