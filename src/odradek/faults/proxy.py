"""The fault network's moving parts: `FaultNetwork` (the policy in force, and a way to wait for
it to change) and `LinkProxy`, a byte-level TCP forwarder for one directed pair of nodes.

A `LinkProxy` listens on a local port; each connection accepted there is dialled on to the
target's current port (asked at every connect, so a restarted broker is found). Bytes are
forwarded as they are, so TLS and SASL pass end to end. Each direction has a gate:

* cut (a partition, an isolation, a paused end): the direction stops *reading* from its
  source. Nothing is dropped: what was read stays queued, the rest stays in the socket
  buffers, and the sender's writes eventually block (back-pressure), which is what a
  blackholed TCP link looks like to both ends until their own timeouts fire. Healing
  delivers what was held, in order.
* slowed: every chunk is delivered ``latency_ms`` after it was read, in order; with
  probability ``loss`` a chunk is delayed by one more retransmission timeout (200 ms), and the
  chunks behind it wait for it: loss as TCP shows it to an application (late, never missing).

A connection refused by the target (a killed broker) closes the accepted one at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable

from .network import NetworkState, Node, blocked, chunk_delay_ms, link_shape, node_name

log = logging.getLogger("odradek.faults")

CHUNK = 64 * 1024
#: Chunks read ahead per direction before the reader waits (the bound on held bytes is this
#: times CHUNK, plus the kernel's socket buffers).
QUEUE_CHUNKS = 16


class FaultNetwork:
    """The `NetworkState` in force; gates wait on it. One per cluster, on the cluster's loop."""

    def __init__(self, seed: int | None = None) -> None:
        self.state = NetworkState()
        self._changed = asyncio.Event()
        self.random = random.Random(seed)

    def set_state(self, state: NetworkState) -> None:
        self.state = state
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def blocked(self, src: Node, dst: Node) -> bool:
        return blocked(self.state, src, dst)

    async def wait_open(self, src: Node, dst: Node) -> None:
        while blocked(self.state, src, dst):
            await self._changed.wait()

    def delay_s(self, src: Node, dst: Node) -> float:
        shape = link_shape(self.state, src, dst)
        if shape.clean:
            return 0.0
        return chunk_delay_ms(shape, self.random.random()) / 1000


class LinkProxy:
    """Forwards connections from node ``src`` to node ``dst`` (``dst``'s listener at
    ``host:target()``) through the gates of ``network``."""

    def __init__(self, network: FaultNetwork, src: Node, dst: Node, host: str,
                 target: Callable[[], int | None], *, listen_port: int = 0) -> None:
        self.network = network
        self.src = src
        self.dst = dst
        self.host = host
        self.target = target
        self.listen_port = listen_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    def __repr__(self) -> str:
        return (f"LinkProxy({node_name(self.src)} -> {node_name(self.dst)}, "
                f"{self.host}:{self.port})")

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accepted, self.host, self.listen_port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.close()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    @property
    def connections(self) -> int:
        return len(self._tasks)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        self._writers.add(writer)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            pass  # closed by close(): the task ends quietly (asyncio reports it otherwise)
        finally:
            self._tasks.discard(task)  # type: ignore[arg-type]
            self._writers.discard(writer)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = self.target()
        if port is None:
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, port)
        except OSError:
            return  # refused: the accepted connection is closed
        self._writers.add(up_writer)
        try:
            await asyncio.gather(self._direction(reader, up_writer, self.src, self.dst),
                                 self._direction(up_reader, writer, self.dst, self.src))
        finally:
            self._writers.discard(up_writer)
            up_writer.close()

    async def _direction(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         src: Node, dst: Node) -> None:
        """Bytes from ``src`` (read from ``reader``) to ``dst`` (written to ``writer``)."""
        net = self.network
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUE_CHUNKS)

        async def read() -> None:
            while True:
                await net.wait_open(src, dst)  # cut: stop reading (held, back-pressure)
                try:
                    data = await reader.read(CHUNK)
                except (ConnectionError, OSError):
                    data = b""
                await queue.put((loop.time() + net.delay_s(src, dst), data))
                if not data:
                    return

        reading = asyncio.create_task(read())
        try:
            last = 0.0
            while True:
                due, data = await queue.get()
                last = max(due, last)  # in order: nothing overtakes a late chunk
                wait = last - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await net.wait_open(src, dst)  # cut while in flight: held until healed
                if not data:
                    if writer.can_write_eof():
                        with contextlib.suppress(OSError):
                            writer.write_eof()
                    return
                writer.write(data)
                try:
                    await writer.drain()
                except (ConnectionError, OSError):
                    writer.close()
                    return
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reading
