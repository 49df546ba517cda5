"""Workloads that exercise the simulator itself, before brokers run on it: an echo server on
one host and many clients on others, with a fault agent cutting, resetting and degrading their
links at random (FoundationDB's "swizzle" and "attrition" workloads in miniature). Every choice
comes from the seed's `"workload"` and `"faults"` forks, so the digest is a function of the
seed; `python -m odradek.sim echo --seed N` prints it.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import dataclass

from .simulation import Simulation

__all__ = ["EchoReport", "run_echo"]

_LEN = struct.Struct(">I")
SERVER = "server"
PORT = 7


@dataclass(frozen=True)
class EchoReport:
    """What an echo run did: the digest, how many round trips completed, reconnections,
    virtual and wall seconds."""

    seed: int
    digest: str
    events: int
    round_trips: int
    reconnects: int
    virtual_seconds: float
    wall_seconds: float


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Echo length-prefixed frames until the client goes away."""
    try:
        while True:
            head = await reader.readexactly(4)
            body = await reader.readexactly(_LEN.unpack(head)[0])
            writer.write(head + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, TimeoutError):
            await writer.wait_closed()


async def _client(sim: Simulation, host: str, messages: int, stats: dict[str, int]) -> None:
    """Send `messages` frames one at a time, each until echoed whole: a broken connection is
    reopened and the frame sent again."""
    rng = sim.random.fork(f"workload/{host}")
    connect = sim.network.connector(host)
    writer: asyncio.StreamWriter | None = None
    reader: asyncio.StreamReader | None = None
    sent = 0
    while sent < messages:
        body = rng.randbytes(rng.choice([0, 1, 10, 100, 1000, 20_000]))
        while True:
            try:
                if writer is None:
                    reader, writer = await connect(SERVER, PORT, None, timeout=5.0,
                                                   client_id=host)
                assert reader is not None
                writer.write(_LEN.pack(len(body)) + body)
                async with asyncio.timeout(10.0):
                    head = await reader.readexactly(4)
                    echoed = await reader.readexactly(_LEN.unpack(head)[0])
                if echoed != body:
                    raise AssertionError(f"{host}: echo differs from what was sent")
                break
            except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                if writer is not None:
                    writer.transport.abort()
                writer = reader = None
                stats["reconnects"] += 1
                await asyncio.sleep(rng.uniform(0.05, 0.5))
        sent += 1
        stats["round_trips"] += 1
        await asyncio.sleep(rng.choice([0.0, 0.001, 0.01, 0.1, 1.0]))
    if writer is not None:
        writer.close()


async def _fault_agent(sim: Simulation, hosts: list[str], stop: asyncio.Event) -> None:
    """Every so often, one fault on a random client's links; every fault healed at the end."""
    rng = sim.random.fork("faults")
    net = sim.network
    while not stop.is_set():
        await asyncio.sleep(rng.expovariate(2.0))
        host = rng.choice(hosts)
        action = rng.choice(["cut", "stall", "heal", "reset", "loss", "slow", "heal_all"])
        if action == "cut":
            net.cut(host, SERVER, oneway=rng.random() < 0.5, timeout=rng.choice([2.0, 30.0]))
        elif action == "stall":
            net.stall(host, SERVER, oneway=rng.random() < 0.5)
        elif action == "heal":
            net.heal(host, SERVER)
        elif action == "reset":
            net.reset(host, SERVER)
        elif action == "loss":
            net.set_loss(host, SERVER, rng.choice([0.0, 0.05, 0.3]))
        elif action == "slow":
            net.slow(host, SERVER, rng.choice([0.0, 0.02, 0.5]))
        else:
            net.heal_all()
    net.heal_all()


def run_echo(seed: int, clients: int = 20, messages: int = 50, faults: bool = True
             ) -> EchoReport:
    """One echo run: `clients` hosts each complete `messages` round trips (faults healed
    once every client has finished or after 300 virtual seconds, whichever first)."""
    stats = {"round_trips": 0, "reconnects": 0}

    async def main(sim: Simulation) -> None:
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.StreamReaderProtocol:
            return asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), _serve,
                                                loop=loop)

        sim.network.listen(SERVER, PORT, protocol)
        hosts = [f"client-{i}" for i in range(clients)]
        stop = asyncio.Event()
        agent = asyncio.ensure_future(_fault_agent(sim, hosts, stop)) if faults else None
        loop.call_later(300.0, stop.set)
        await asyncio.gather(*(_client(sim, h, messages, stats) for h in hosts))
        stop.set()
        if agent is not None:
            await agent
        for host in hosts:  # the server's connections end before the loop does
            sim.network.reset(host, SERVER)
        await asyncio.sleep(1.0)

    sim = Simulation(seed)
    sim.run(main)
    return EchoReport(seed, sim.digest.hexdigest(), sim.digest.events, stats["round_trips"],
                      stats["reconnects"], sim.now, sim.wall_seconds)
