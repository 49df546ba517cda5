"""The network layer (S-8.1): asyncio listeners, framing, per-connection ordered responses.

Kafka's SocketServer uses acceptor and processor threads; here one asyncio loop does both. A
connection parses frames as they arrive and hands each to the request handler at once (so
requests are pipelined), but responses leave strictly in request order. Back-pressure: at most
`max_in_flight` requests per connection are outstanding (reading pauses beyond that, like Kafka's
muted channels) and reading also pauses while the socket's send buffer is full.

A response is `bytes`, a list of parts (`bytes` or file regions sent with sendfile), or None
when the request gets no response (Produce with acks=0).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..protocol.framing import FrameDecoder, FrameError
from ..security.principal import ANONYMOUS, KafkaPrincipal
from ..security.protocol import SecurityProtocol

log = logging.getLogger("odradek.network")

SENDFILE_THRESHOLD = 64 * 1024


class Region(Protocol):
    """A slice of an open file, sent without copying through Python where possible."""

    file: Any
    position: int
    size: int


Part = bytes | Region
Response = bytes | list[Part] | None
Handler = Callable[["Connection", bytes], "Response | Awaitable[Response]"]


class CloseConnection(Exception):
    """Raised by a handler to drop the connection (Kafka closes on unparseable requests)."""


class _Slot:
    __slots__ = ("done", "value")

    def __init__(self) -> None:
        self.done = False
        self.value: Response = None


class Connection(asyncio.Protocol):
    def __init__(self, server: SocketServer, listener_name: str = "PLAINTEXT",
                 security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT) -> None:
        self.server = server
        self.decoder = FrameDecoder(server.max_request_size)
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.principal: KafkaPrincipal = ANONYMOUS
        self.authenticated = not security_protocol.uses_sasl
        self.sasl: Any = None  # the SASL authenticator's state, None until a handshake
        if not self.authenticated:  # frames are bounded until the client is authenticated
            self.decoder.set_limit(min(server.max_request_size, server.sasl_max_receive_size),
                                   "sasl.server.max.receive.size")
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._slots: deque[_Slot] = deque()
        self._tasks: set[asyncio.Future[Any]] = set()
        self._sending = False
        self._write_paused = False
        self._read_paused = False
        self._closed = False
        self._dispatching = False
        self.attributes: dict[str, Any] = {}  # per-connection state for handlers

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            log.warning("Closing connection from %s: %s", self.peer, exc)
            self.close()
            return
        # Responses ready during this read leave in one write (one send syscall).
        self._dispatching = True
        try:
            for payload in frames:
                if self._closed:
                    return
                self._dispatch(payload)
        finally:
            self._dispatching = False
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.server.connections.discard(self)
        for task in list(self._tasks):
            task.cancel()
        self._slots.clear()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._flush()

    # -- request pipeline ------------------------------------------------------------------
    def _dispatch(self, payload: bytes) -> None:
        slot = _Slot()
        self._slots.append(slot)
        try:
            result = self.server.handler(self, payload)
        except CloseConnection as exc:
            log.warning("Closing connection from %s: %s", self.peer, exc)
            self.close()
            return
        except Exception:
            log.exception("Unexpected error handling a request from %s; closing it", self.peer)
            self.close()
            return
        if isinstance(result, Awaitable):
            fut = asyncio.ensure_future(result)
            self._tasks.add(fut)
            fut.add_done_callback(lambda f, s=slot: self._completed(s, f))
        else:
            slot.done, slot.value = True, result
            self._flush()
        self._update_reading()

    def _completed(self, slot: _Slot, fut: asyncio.Future[Any]) -> None:
        self._tasks.discard(fut)
        if self._closed or fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            if isinstance(exc, CloseConnection):
                log.warning("Closing connection from %s: %s", self.peer, exc)
            else:
                log.error("Unexpected error handling a request from %s; closing it",
                          self.peer, exc_info=exc)
            self.close()
            return
        slot.done, slot.value = True, fut.result()
        self._flush()
        self._update_reading()

    def _flush(self) -> None:
        if self._dispatching:
            return
        transport = self.transport
        out: list[bytes | bytearray | memoryview] = []
        while self._slots and self._slots[0].done and not self._sending and not self._closed:
            value = self._slots.popleft().value
            if value is None:
                continue
            if isinstance(value, bytes | bytearray):
                out.append(value)
                continue
            parts = list(value)
            while parts:
                part = parts[0]
                if isinstance(part, bytes | bytearray | memoryview):
                    out.append(part)
                elif part.size < SENDFILE_THRESHOLD:
                    out.append(os.pread(part.file.fileno(), part.size, part.position))
                else:
                    self._sending = True
                    if out:
                        transport.write(b"".join(out))  # type: ignore[union-attr]
                        out = []
                    task = asyncio.ensure_future(self._send_regions(parts))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                    break
                parts.pop(0)
        if out and not self._closed:
            transport.write(out[0] if len(out) == 1 else b"".join(out))  # type: ignore[union-attr]
        self._update_reading()

    async def _send_regions(self, parts: list[Part]) -> None:
        loop = asyncio.get_running_loop()
        try:
            for part in parts:
                if self._closed:
                    return
                if isinstance(part, bytes | bytearray | memoryview):
                    self.transport.write(part)  # type: ignore[union-attr]
                    continue
                sent = await loop.sendfile(self.transport, part.file, part.position, part.size)  # type: ignore[arg-type]
                if sent != part.size:
                    # The segment shrank under us (truncation): the frame can't be completed.
                    log.warning("Closing connection from %s: log truncated during a fetch",
                                self.peer)
                    self.close()
                    return
        except (ConnectionError, OSError, RuntimeError) as exc:
            log.info("Connection from %s failed while sending: %s", self.peer, exc)
            self.close()
            return
        finally:
            self._sending = False
        self._flush()

    def _update_reading(self) -> None:
        if self._closed or self.transport is None:
            return
        should_pause = self._write_paused or len(self._slots) >= self.server.max_in_flight
        if should_pause and not self._read_paused:
            self.transport.pause_reading()
            self._read_paused = True
        elif not should_pause and self._read_paused:
            self.transport.resume_reading()
            self._read_paused = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self.transport is not None:
                self.transport.close()


class SocketServer:
    """Listens on each configured endpoint; port 0 picks a free port (see `bound_ports`)."""

    def __init__(self, handler: Handler, max_request_size: int, max_in_flight: int = 16) -> None:
        self.handler = handler
        self.max_request_size = max_request_size
        self.max_in_flight = max_in_flight
        self.sasl_max_receive_size = 524288
        self.connections: set[Connection] = set()
        self._servers: list[asyncio.AbstractServer] = []
        self.bound_ports: list[int] = []

    async def start(self, host: str, port: int, listener_name: str = "PLAINTEXT",
                    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT) -> int:
        """Bind a listener and return its port. It accepts no connection until
        :meth:`start_serving`: the broker binds first (its registration advertises the port)
        and serves once registered, as Kafka starts its processors only at the end of start-up,
        so no client gets answers from a broker that has not joined the cluster yet."""
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: Connection(self, listener_name, security_protocol), host or None, port,
            reuse_address=True, backlog=256, start_serving=False)
        self._servers.append(server)
        bound = server.sockets[0].getsockname()[1]
        self.bound_ports.append(bound)
        return bound

    async def start_serving(self) -> None:
        for server in self._servers:
            await server.start_serving()

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
