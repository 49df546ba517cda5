"""The network layer (S-8.1): asyncio listeners, framing, per-connection ordered responses.

Kafka's SocketServer uses acceptor and processor threads; here one asyncio loop does both. A
connection parses frames as they arrive and hands each to the request handler at once (so
requests are pipelined), but responses leave strictly in request order. Back-pressure: at most
`max_in_flight` requests per connection are outstanding (reading pauses beyond that, like Kafka's
muted channels) and reading also pauses while the socket's send buffer is full.

A response is `bytes`, a list of parts (`bytes` or file regions sent with sendfile), or None
when the request gets no response (Produce with acks=0).

Listeners (Kafka's named listeners): each bound endpoint has a listener name and a security
protocol. On a TLS listener the handshake runs first (bounded by `ssl_handshake_timeout`; a
failure is logged and closes the connection) and the client certificate, if any, names the
connection's principal. TLS cannot use sendfile: file regions go out in bounded chunks (pread)
as the transport drains, so a connection's memory stays bounded by the fetch limits.

Client quotas (KIP-219): `Connection.throttle(ms)` mutes a connection (no request is read from
it) for that long; its response has already left. Connection limits (server/connection_quotas):
each listener socket has its own accept loop (Kafka's Acceptor) that waits for a connection slot
before accepting (`max.connections`, `listener.name.<l>.max.connections`), so pending connections
wait in the kernel's bounded backlog; a connection over its address's `max.connections.per.ip`
is closed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..common import clock
from ..protocol.framing import FrameDecoder, FrameError
from ..security.principal import ANONYMOUS, KafkaPrincipal, SslPrincipalMapper, ssl_principal
from ..security.protocol import SecurityProtocol
from . import request_log
from .quotas.connection_quotas import ConnectionQuotas, TooManyConnections, normalize_ip

log = logging.getLogger("odradek.network")

SENDFILE_THRESHOLD = 64 * 1024
# a closed TLS connection's descriptor is released after at most this long without the
# client's close_notify (asyncio's default, 30 s, kept refused clients' sockets open)
TLS_SHUTDOWN_TIMEOUT_S = 2.0
TLS_CHUNK = 64 * 1024  # file regions under TLS: read and written this much at a time
SSL_HANDSHAKE_TIMEOUT_S = 10.0


class Region(Protocol):
    """A slice of an open file, sent without copying through Python where possible."""

    file: Any
    position: int
    size: int


Part = bytes | Region
Response = bytes | list[Part] | None
Handler = Callable[["Connection", bytes], "Response | Awaitable[Response]"]
#: binds one of a server's listeners on (host, port) and returns the port bound (port 0: one
#: picked): `SocketServer.start` on real sockets; the simulated network's in odradek.sim
Binder = Callable[["SocketServer", str, int, "Listener"], Awaitable[int]]


class CloseConnection(Exception):
    """Raised by a handler to drop the connection (Kafka closes on unparseable requests)."""


class _Slot:
    __slots__ = ("done", "logged", "ready_at", "started", "value")

    def __init__(self) -> None:
        self.done = False
        self.value: Response = None
        # kafka.request.logger at DEBUG only: (request frame, start), when the response was ready
        self.logged: bytes | None = None
        self.started = 0.0
        self.ready_at = 0.0


class Listener:
    """One bound endpoint: its name, security protocol and, on TLS, its context and the
    ssl.principal.mapping.rules of its client certificates."""

    __slots__ = ("name", "port", "principal_mapper", "sasl_max_receive_size", "security_protocol",
                 "ssl_context")

    def __init__(self, name: str = "PLAINTEXT",
                 security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT,
                 ssl_context: ssl.SSLContext | None = None,
                 principal_mapper: SslPrincipalMapper | None = None,
                 sasl_max_receive_size: int = 524288) -> None:
        self.name = name
        self.security_protocol = security_protocol
        self.ssl_context = ssl_context
        self.principal_mapper = principal_mapper
        # sasl.server.max.receive.size: the largest frame before authentication
        self.sasl_max_receive_size = sasl_max_receive_size
        self.port = -1


class Connection(asyncio.Protocol):
    def __init__(self, server: SocketServer, listener: Listener | None = None) -> None:
        self.server = server
        listener = listener or Listener()
        self.listener = listener
        self.listener_name: str = listener.name
        self.security_protocol: SecurityProtocol = listener.security_protocol
        # who the client is: ANONYMOUS until authenticated (TLS client certificate: its DN)
        self.principal: KafkaPrincipal = ANONYMOUS
        # PLAINTEXT and SSL connections need no SASL exchange: authenticated from the start
        self.authenticated: bool = not listener.security_protocol.uses_sasl
        self.sasl: Any = None  # the SASL exchange's state (security.sasl_server), once begun
        self.decoder = FrameDecoder(server.max_request_size)
        if not self.authenticated:  # frames are bounded until the client is authenticated
            self.decoder.set_limit(min(server.max_request_size, listener.sasl_max_receive_size),
                                   "sasl.server.max.receive.size")
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._drained: asyncio.Future[None] | None = None
        # TLS: bytes decrypted before start_tls() returned the TLS transport (asyncio hands
        # them over at once after the handshake); processed once the transport is known
        self._tls_pending = False
        self._early: list[bytes] = []
        self._slots: deque[_Slot] = deque()
        self._tasks: set[asyncio.Future[Any]] = set()
        self._sending = False
        self._write_paused = False
        self._read_paused = False
        self._closed = False
        self._dispatching = False
        self.attributes: dict[str, Any] = {}  # per-connection state for handlers
        self._throttle_timer: asyncio.TimerHandle | None = None
        # requests read but not yet handled because the connection was throttled (Kafka
        # handles a channel's requests one at a time, so a throttle stops the next one too)
        self._held: deque[bytes] = deque()
        self._throttled_until = 0.0
        self.last_active = 0.0  # loop time of the last bytes read (least recently used: closed)
        self.quota_address: str | None = None  # counted in the server's connection quotas

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.connections[self] = None
        if self.listener.ssl_context is not None and transport.get_extra_info(
                "ssl_object") is None:
            # TLS first: nothing is read as a request until the handshake is done
            transport.pause_reading()
            self._tls_pending = True
            task = asyncio.ensure_future(self._start_tls(transport))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _start_tls(self, raw: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        listener = self.listener
        assert listener.ssl_context is not None
        try:
            tls = await loop.start_tls(raw, self, listener.ssl_context, server_side=True,
                                       ssl_handshake_timeout=self.server.ssl_handshake_timeout,
                                       ssl_shutdown_timeout=TLS_SHUTDOWN_TIMEOUT_S)
        except (OSError, TimeoutError, ConnectionError, EOFError, RuntimeError) as exc:
            # Kafka's "Failed authentication with /host (SSL handshake failed)"
            log.info("Failed authentication with %s on listener %s (SSL handshake failed: "
                     "%s); closing it", self.peer, listener.name, _describe(exc))
            self._closed = True
            raw.abort()
            self.server.connections.pop(self, None)
            self.server.connection_closed(self)  # its connection_lost may never come
            return
        if tls is None or self._closed:
            raw.abort()
            self.server.connections.pop(self, None)
            self.server.connection_closed(self)
            return
        self.transport = tls
        self._tls_pending = False
        ssl_object = tls.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        try:
            self.principal = ssl_principal(der, listener.principal_mapper)
        except ValueError as exc:  # no principal mapping rule applies
            log.info("Failed authentication with %s on listener %s: %s; closing it",
                     self.peer, listener.name, exc)
            self.close()
            return
        log.debug("TLS connection from %s on listener %s: principal %s", self.peer,
                  listener.name, self.principal)
        early, self._early = self._early, []
        for data in early:
            if self._closed:
                break
            self.data_received(data)

    def data_received(self, data: bytes) -> None:
        self.last_active = clock.monotonic()
        if self._tls_pending:
            self._early.append(data)
            return
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
                if self._throttle_timer is not None or self._held:
                    self._held.append(payload)
                    continue
                self._dispatch(payload)
        finally:
            self._dispatching = False
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.server.connections.pop(self, None)
        self.server.connection_closed(self)
        self._held.clear()
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
        for task in list(self._tasks):
            task.cancel()
        self._slots.clear()
        self._wake_writer()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writer()
        self._flush()

    def _wake_writer(self) -> None:
        waiter, self._drained = self._drained, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    @property
    def uses_tls(self) -> bool:
        return self.listener.ssl_context is not None

    # -- request pipeline ------------------------------------------------------------------
    def _dispatch(self, payload: bytes) -> None:
        slot = _Slot()
        self._slots.append(slot)
        if request_log.request_logger.isEnabledFor(logging.DEBUG):
            slot.logged, slot.started = payload[:512], time.monotonic()
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
            if slot.logged is not None:
                slot.ready_at = time.monotonic()
            self._flush()
        self._update_reading()

    def _completed(self, slot: _Slot, fut: asyncio.Future[Any]) -> None:
        self._tasks.discard(fut)
        if fut.cancelled():
            return
        exc = fut.exception()  # retrieved even when closed: asyncio would log it as lost
        if self._closed:
            if exc is not None and not isinstance(exc, CloseConnection):
                log.debug("Error handling a request from %s after it closed: %r", self.peer, exc)
            return
        if exc is not None:
            if isinstance(exc, CloseConnection):
                log.warning("Closing connection from %s: %s", self.peer, exc)
            else:
                log.error("Unexpected error handling a request from %s; closing it",
                          self.peer, exc_info=exc)
            self.close()
            return
        slot.done, slot.value = True, fut.result()
        if slot.logged is not None:
            slot.ready_at = time.monotonic()
        self._flush()
        self._update_reading()

    def _flush(self) -> None:
        if self._dispatching:
            return
        transport = self.transport
        out: list[bytes | bytearray | memoryview] = []
        while self._slots and self._slots[0].done and not self._sending and not self._closed:
            slot = self._slots.popleft()
            value = slot.value
            if slot.logged is not None:
                self._log_completed(slot)
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
                if self.uses_tls:
                    sent = await self._send_region_chunked(part)
                else:
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

    async def _send_region_chunked(self, part: Region) -> int:
        """A file region over TLS: TLS_CHUNK bytes at a time (pread: no shared file position),
        each written only once the transport has drained below its high-water mark."""
        fd = part.file.fileno()
        sent = 0
        while sent < part.size:
            while self._write_paused and not self._closed:
                self._drained = asyncio.get_running_loop().create_future()
                await self._drained
            if self._closed:
                return sent
            chunk = os.pread(fd, min(TLS_CHUNK, part.size - sent), part.position + sent)
            if not chunk:
                return sent
            self.transport.write(chunk)  # type: ignore[union-attr]
            sent += len(chunk)
        return sent

    def _log_completed(self, slot: _Slot) -> None:
        """Kafka's request log line (server/request_log.py) of a request whose response
        leaves now."""
        assert slot.logged is not None
        now = time.monotonic()
        transport = self.transport
        local = transport.get_extra_info("sockname") if transport is not None else None
        remote = transport.get_extra_info("peername") if transport is not None else None
        request_log.request_logger.debug("%s", request_log.completed_request_line(
            request_log.request_header(slot.logged),
            request_log.connection_id(local, remote),
            total_ms=(now - slot.started) * 1000, local_ms=(slot.ready_at - slot.started) * 1000,
            response_queue_ms=(now - slot.ready_at) * 1000,
            security_protocol=self.security_protocol.value, principal=str(self.principal),
            listener=self.listener_name,
            client_software=self.attributes.get("client_software")))

    def throttle(self, throttle_ms: int) -> None:
        """KIP-219: read no request from this connection for `throttle_ms` (Kafka mutes the
        channel until the quota manager's delay expires)."""
        if self._closed or throttle_ms <= 0:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + throttle_ms / 1000.0
        if until <= self._throttled_until:
            return
        self._throttled_until = until
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        self._throttle_timer = loop.call_at(until, self._throttle_done)
        self._update_reading()

    def _throttle_done(self) -> None:
        self._throttle_timer = None
        self._dispatching = True
        try:
            while self._held and self._throttle_timer is None and not self._closed:
                self._dispatch(self._held.popleft())
        finally:
            self._dispatching = False
        self._flush()
        self._update_reading()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def throttled(self) -> bool:
        return self._throttle_timer is not None

    def _update_reading(self) -> None:
        if self._closed or self.transport is None:
            return
        should_pause = (self._write_paused or len(self._slots) >= self.server.max_in_flight
                        or self._throttle_timer is not None or bool(self._held))
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
    """Listens on each configured endpoint; port 0 picks a free port (see `bound_ports`, in
    the order of start(), and `listener_ports`, by listener name). `connection_quotas`
    (Kafka's ConnectionQuotas) limits the connections accepted."""

    def __init__(self, handler: Handler, max_request_size: int, max_in_flight: int = 16,
                 ssl_handshake_timeout: float = SSL_HANDSHAKE_TIMEOUT_S,
                 connection_quotas: ConnectionQuotas | None = None) -> None:
        self.handler = handler
        self.max_request_size = max_request_size
        self.max_in_flight = max_in_flight
        self.ssl_handshake_timeout = ssl_handshake_timeout
        # in order of acceptance (a set would iterate in memory-address order, which differs
        # between runs: stop() closes them in this order)
        self.connections: dict[Connection, None] = {}
        self.connection_quotas = connection_quotas or ConnectionQuotas()
        self._sockets: list[tuple[socket.socket, Listener]] = []
        self._accept_tasks: list[asyncio.Task[None]] = []
        self._slot_freed: asyncio.Event | None = None
        self.bound_ports: list[int] = []
        self.listeners: dict[str, Listener] = {}
        self._closers: list[Callable[[], object]] = []  # listeners of another kind: stop()

    @property
    def listener_ports(self) -> dict[str, int]:
        return {name: listener.port for name, listener in self.listeners.items()}

    async def start(self, host: str, port: int, listener: Listener | None = None) -> int:
        """Bind a listener and return its port. It accepts no connection until
        :meth:`start_serving`: the broker binds first (its registration advertises the port)
        and serves once registered, as Kafka starts its processors only at the end of start-up,
        so no client gets answers from a broker that has not joined the cluster yet."""
        loop = asyncio.get_running_loop()
        listener = listener or Listener()
        infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        bound = -1
        seen: set[tuple[int, Any]] = set()
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if bound > 0:  # every family on the same (first picked) port
                    address = (address[0], bound, *address[2:])
                sock.bind(address)  # listen() only in start_serving: until then, refused
                sock.setblocking(False)
            except OSError as exc:
                sock.close()
                if bound > 0 and port == 0:
                    continue  # the port picked for the first family is taken in this one
                if exc.errno == errno.EADDRINUSE or len(infos) == 1:
                    raise
                continue  # e.g. no IPv6 on this host: the other families serve
            if bound < 0:
                bound = sock.getsockname()[1]
            self._sockets.append((sock, listener))
        if bound < 0:
            raise OSError(f"could not bind {host}:{port}")
        self.add_listener(listener, bound)
        return bound

    def add_listener(self, listener: Listener, port: int,
                     close: Callable[[], object] | None = None) -> None:
        """Record a listener bound on `port`: by :meth:`start`, or by a transport of another
        kind (the simulated network, odradek.sim) that hands its connections to
        :meth:`admit` and :meth:`connection_for` as the accept loop does; its `close` is
        called by :meth:`stop`."""
        if close is not None:
            self._closers.append(close)
        self.bound_ports.append(port)
        listener.port = port
        self.listeners[listener.name] = listener
        self.connection_quotas.add_listener(listener.name)

    async def start_serving(self) -> None:
        if self._accept_tasks:
            return
        self._slot_freed = asyncio.Event()
        for sock, listener in self._sockets:
            # a bound socket that does not listen refuses connections (asyncio's
            # create_server(start_serving=False) defers listen() the same way); the backlog
            # holds what waits for a connection slot (max.connections)
            sock.listen(256)
            self._accept_tasks.append(asyncio.ensure_future(self._accept_loop(sock, listener)))

    async def _wait_for_slot(self, listener: Listener) -> None:
        """Kafka's waitForConnectionSlot: until the listener and broker limits allow one more."""
        quotas = self.connection_quotas
        while not quotas.slot_available(listener.name):
            assert self._slot_freed is not None
            self._slot_freed.clear()
            await self._slot_freed.wait()

    def slot_freed(self) -> None:
        """A connection closed or a limit was raised: waiting acceptors look again."""
        if self._slot_freed is not None:
            self._slot_freed.set()

    async def _accept_loop(self, sock: socket.socket, listener: Listener) -> None:
        loop = asyncio.get_running_loop()
        quotas = self.connection_quotas
        while True:
            await self._wait_for_slot(listener)
            try:
                client, address = await loop.sock_accept(sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # EMFILE and the like: back off, never spin
                log.warning("Error accepting a connection on listener %s: %s", listener.name,
                            exc)
                await asyncio.sleep(0.1)
                continue
            ip = normalize_ip(str(address[0]))
            if not self.admit(listener, ip):
                _close_quietly(client)
                continue
            try:
                client.setblocking(False)
                await loop.connect_accepted_socket(
                    lambda ip=ip: self.connection_for(listener, ip), client)
            except asyncio.CancelledError:
                quotas.dec(listener.name, ip)
                _close_quietly(client)
                raise
            except (OSError, RuntimeError) as exc:
                quotas.dec(listener.name, ip)
                _close_quietly(client)
                log.info("Could not set up a connection from %s: %s", ip, exc)

    def admit(self, listener: Listener, ip: str) -> bool:
        """Count a connection just accepted from `ip` (Kafka's ConnectionQuotas.inc) and
        enforce the broker-wide limit; False, with nothing counted, when `ip` already has
        max.connections.per.ip connections (the caller closes it)."""
        quotas = self.connection_quotas
        try:
            quotas.inc(listener.name, ip)
        except TooManyConnections as exc:
            quotas.dec(listener.name, ip)
            log.info("Rejected connection from %s, address already has the configured "
                     "maximum of %d connections.", ip, exc.limit)
            return False
        self._enforce_broker_limit(listener)
        return True

    def connection_for(self, listener: Listener, ip: str) -> Connection:
        """The protocol of an admitted connection from `ip` on `listener`."""
        conn = Connection(self, listener)
        conn.quota_address = ip
        return conn

    def _enforce_broker_limit(self, accepted_on: Listener) -> None:
        """A protected (inter-broker) connection took the broker over max.connections: close
        the least recently active connection of another listener."""
        quotas = self.connection_quotas
        if not quotas.protected(accepted_on.name):
            return
        while quotas.total > quotas.max_connections:
            victims = [c for c in self.connections if not c.closed
                       and c.quota_address is not None
                       and quotas.max_connections_exceeded(c.listener_name)]
            if not victims:
                return
            victim = min(victims, key=lambda c: c.last_active)
            log.info("Closing connection from %s on listener %s: the broker is over "
                     "max.connections=%d", victim.peer, victim.listener_name,
                     quotas.max_connections)
            victim.close()
            self.connection_closed(victim)

    def connection_closed(self, conn: Connection) -> None:
        address, conn.quota_address = conn.quota_address, None
        if address is not None:
            self.connection_quotas.dec(conn.listener_name, address)
            self.slot_freed()

    async def stop(self) -> None:
        for task in self._accept_tasks:
            task.cancel()
        for task in self._accept_tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._accept_tasks.clear()
        for sock, _ in self._sockets:
            sock.close()
        self._sockets.clear()
        for close in self._closers:
            close()
        self._closers.clear()
        for conn in list(self.connections):
            conn.close()


async def bind_socket(server: SocketServer, host: str, port: int, listener: Listener) -> int:
    """The default `Binder`: a real socket (`SocketServer.start`)."""
    return await server.start(host, port, listener)


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no handshake within the timeout"
    reason = getattr(exc, "reason", None)
    return str(reason or exc or type(exc).__name__)
