"""The simulated network: in-memory TCP connections between named hosts, on the simulation
loop, with latencies and faults drawn from the run's seed (FoundationDB's `Sim2` network,
TigerBeetle's packet simulator — but with TCP's stream guarantees, because odradek speaks TCP).

Model. A connection is two directed pipes, each a FIFO of segments (SYN, SYN-ACK, data, FIN,
RST) with a delivery time: the link's base latency (drawn once per directed host pair), plus a
per-segment jitter, plus retransmission delays for segments "lost" (each loss costs the
retransmission timeout, doubling, as TCP's backoff), never earlier than the segment before it
— so bytes arrive in order, once, as TCP promises, however delays are drawn. Each pipe has at
most one loop timer armed, for its head segment.

Transports are asyncio `Transport`s feeding `Protocol`s, so `asyncio.StreamReader`/`StreamWriter`,
the broker's `Connection` and the client work unchanged: `write`/`writelines` (copied at once),
`write_eof`, `close` (pending data still arrives, then end-of-stream: `eof_received`, and if that
returns false the peer's transport closes), `abort` (the peer gets ConnectionResetError; pending
data is dropped), `pause_reading`/`resume_reading` (segments wait in the pipe: the sender's
buffer stays full), `set_write_buffer_limits`/`get_write_buffer_size` (the sender's buffer is
every byte written and not yet delivered, so `pause_writing`/`resume_writing`, and so
`StreamWriter.drain`, see the receiver's pace), `get_extra_info('peername'|'sockname')`
(`'socket'` is None). Data for an end that has closed makes the sender's end reset, as a TCP
RST would; a SYN for a port nobody listens on is refused (ConnectionRefusedError).

Faults, per directed link (`cut`/`stall`/`heal` take `oneway=True` for one direction):
- `cut`: segments wait (TCP retransmits them) until `heal`, then arrive after the link's
  latency; a connection whose segment has waited `timeout` seconds (default 924.6 s, Linux's
  `tcp_retries2=15`) gives up: the sender's end is lost with TimeoutError and the receiver's
  with ConnectionResetError (what its next write would meet). A connection with nothing to
  send notices nothing, as TCP without keepalives. A SYN waits too, so a connect across a cut
  hangs until the caller's timeout or the heal.
- `stall`: a cut that never times out (a frozen switch queue).
- `reset`: every connection between two hosts is reset now; both ends get
  ConnectionResetError.
- `set_loss`: a segment is lost with probability p and arrives after retransmissions.
- `slow`: extra one-way delay.
Every delivery goes into the run's digest (`odradek.sim.digest`) with its virtual time.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections import deque
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from ..faults.network import RETRANSMISSION_TIMEOUT_MS
from .digest import Digest
from .loop import NotSimulated, pread_region
from .random import SimRandom

if TYPE_CHECKING:
    from ..security.connector import ClientSecurity

__all__ = ["TCP_TIMEOUT_S", "Link", "SimListener", "SimNetwork", "SimTransport"]

# Linux gives up retransmitting after tcp_retries2=15 attempts, about 924.6 s with the
# default RTO bounds (man 7 tcp)
TCP_TIMEOUT_S = 924.6
SEND_CHUNK = 64 * 1024  # sendfile on a simulated transport: read and written this much a time
# a write is cut into segments of at most this: a receiver that pauses reading holds back
# what follows, as TCP's receive window does
SEGMENT_SIZE = 64 * 1024
_HIGH_WATER = 64 * 1024  # asyncio's default write buffer limits
_MAX_BACKOFF_DOUBLINGS = 6

SYN, SYNACK, DATA, FIN, RST = "syn", "synack", "data", "fin", "rst"

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


@dataclass(slots=True)
class _Segment:
    at: float
    kind: str
    data: bytes = b""


class Link:
    """One direction between two hosts: its latency and its faults."""

    def __init__(self, src: str, dst: str, latency: float, jitter: float, rto: float) -> None:
        self.src = src
        self.dst = dst
        self.latency = latency
        self.jitter = jitter
        self.rto = rto
        self.loss = 0.0
        self.extra = 0.0
        self.blocked = False
        self.timeout: float | None = None
        self.parked: dict[_Pipe, None] = {}  # pipes waiting for the heal, in arrival order

    def delay(self, rng: SimRandom) -> float:
        """One segment's one-way delay: latency, jitter, retransmissions of losses."""
        delay = self.latency + self.extra
        if self.jitter > 0:
            delay += rng.uniform(0.0, self.jitter)
        doublings = 0
        while self.loss > 0 and rng.chance(self.loss):
            delay += self.rto * (2 ** min(doublings, _MAX_BACKOFF_DOUBLINGS))
            doublings += 1
        return delay


@dataclass(eq=False)
class _Pipe:
    """One direction of one connection: a FIFO of segments and one armed timer."""

    net: SimNetwork
    conn: _Connection
    link: Link
    src: SimTransport
    dst: SimTransport
    queue: deque[_Segment] = field(default_factory=deque)
    last_at: float = 0.0
    timer: asyncio.TimerHandle | None = None
    parked_since: float | None = None  # on a blocked link since then
    waiting_reader: bool = False  # the receiver paused reading
    fields: str = ""  # how the digest names this direction (`deliver` fills it in once)

    def send(self, kind: str, data: bytes = b"") -> None:
        net = self.net
        at = max(net.loop.time() + self.link.delay(net.rng), self.last_at)
        self.last_at = at
        self.queue.append(_Segment(at, kind, data))
        if len(self.queue) == 1:
            self._arm()

    def clear(self, keep_handshake: bool = False) -> None:
        """Drop every undelivered segment (a reset); with `keep_handshake`, all but a SYN or
        SYN-ACK (an accepted connection aborted at once: the kernel had already answered)."""
        kept = [s for s in self.queue if s.kind in (SYN, SYNACK)] if keep_handshake else []
        self.queue = deque(kept)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not kept:
            self.link.parked.pop(self, None)
            self.parked_since = None
        self.waiting_reader = False
        self._arm()

    def _arm(self) -> None:
        if self.timer is None and self.queue and self.parked_since is None \
                and not self.waiting_reader:
            self.timer = self.net.loop.call_at(self.queue[0].at, self.fire)

    def fire(self) -> None:
        self.timer = None
        self.waiting_reader = False
        loop = self.net.loop
        while self.queue and self.queue[0].at <= loop.time() and self.parked_since is None:
            if self.link.blocked:
                self._park(loop.time())
                return
            segment = self.queue[0]
            if segment.kind == DATA and not self.dst.reading and not self.dst.lost:
                self.waiting_reader = True  # resume_reading fires the pipe again
                return
            self.queue.popleft()
            self.net.deliver(self, segment)
        self._arm()

    def _park(self, now: float) -> None:
        self.parked_since = now
        self.link.parked[self] = None
        timeout = self.link.timeout
        if timeout is not None:
            self.net.loop.call_at(now + timeout, self._give_up, now)

    def _give_up(self, since: float) -> None:
        if self.parked_since == since and self.queue:
            self.net.time_out(self)

    def unpark(self) -> None:
        """The link healed: what waited is retransmitted and arrives after the latency."""
        self.parked_since = None
        now = self.net.loop.time()
        previous = 0.0
        for segment in self.queue:
            segment.at = previous = max(previous, segment.at,
                                        now + self.link.delay(self.net.rng))
        self.last_at = max(self.last_at, previous)
        self._arm()

    def reader_resumed(self) -> None:
        if self.waiting_reader:
            self.waiting_reader = False
            if self.timer is None:
                self.timer = self.net.loop.call_soon(self.fire)  # type: ignore[assignment]


class SimTransport(asyncio.Transport):
    """One end of a simulated connection (asyncio's `Transport` interface)."""

    def __init__(self, net: SimNetwork, conn: _Connection, local: tuple[str, int],
                 remote: tuple[str, int], protocol: asyncio.BaseProtocol | None) -> None:
        super().__init__({"peername": remote, "sockname": local, "socket": None})
        self.net = net
        self.conn = conn
        self.local = local
        self.remote = remote
        self.protocol = protocol
        self.out: _Pipe | None = None
        self.into: _Pipe | None = None
        self.connected = False
        self.closing = False  # close(), abort() or lost: no more writes
        self.lost = False  # connection_lost scheduled
        self.eof_sent = False
        self.reading = True
        self.buffered = 0
        self.high = _HIGH_WATER
        self.low = _HIGH_WATER // 4
        self.write_paused = False
        self._drain: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return (f"<SimTransport #{self.conn.id} {self.local[0]}:{self.local[1]}>"
                f"{self.remote[0]}:{self.remote[1]}>")

    # -- writing ---------------------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing or self.eof_sent or not data:
            return
        payload = bytes(data)
        assert self.out is not None
        mss = self.net.segment_size
        if len(payload) <= mss:
            self.out.send(DATA, payload)
        else:  # segments, so a receiver that stops reading stops the rest (its window)
            for i in range(0, len(payload), mss):
                self.out.send(DATA, payload[i:i + mss])
        self.buffered += len(payload)
        if self.buffered > self.high and not self.write_paused:
            self.write_paused = True
            self.protocol.pause_writing()  # type: ignore[union-attr]

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(bytes(d) for d in list_of_data))

    def write_eof(self) -> None:
        if self.closing or self.eof_sent:
            return
        self.eof_sent = True
        assert self.out is not None
        self.out.send(FIN)

    def can_write_eof(self) -> bool:
        return True

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (self.low, self.high)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = _HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self.high, self.low = high, low
        self._maybe_resume_writing()

    def _delivered(self, size: int) -> None:
        self.buffered -= size
        self._maybe_resume_writing()

    def _maybe_resume_writing(self) -> None:
        if self.write_paused and self.buffered <= self.low:
            self.write_paused = False
            if not self.lost:
                self.protocol.resume_writing()  # type: ignore[union-attr]
            waiter, self._drain = self._drain, None
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif not self.write_paused and self.buffered > self.high:
            self.write_paused = True
            self.protocol.pause_writing()  # type: ignore[union-attr]

    async def send_file_region(self, fd: int, offset: int, count: int | None) -> int:
        """`loop.sendfile` on this transport: the region read and written as bytes."""
        if self.closing:
            raise RuntimeError("Transport is closing")
        if count is None:
            count = max(0, os.fstat(fd).st_size - offset)
        sent = 0
        while sent < count:
            while self.write_paused and not self.lost:
                self._drain = self.net.loop.create_future()
                await self._drain
            if self.closing:
                raise ConnectionResetError("connection lost during sendfile")
            chunk = pread_region(fd, offset + sent, min(SEND_CHUNK, count - sent))
            if not chunk:
                break
            self.write(chunk)
            sent += len(chunk)
        return sent

    # -- reading ---------------------------------------------------------------------------
    def is_reading(self) -> bool:
        return self.reading and not self.closing

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        if not self.reading:
            self.reading = True
            if self.into is not None:
                self.into.reader_resumed()

    # -- closing ---------------------------------------------------------------------------
    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        """Pending data still goes out, then the peer sees end-of-stream."""
        if self.closing:
            return
        self.closing = True
        if self.connected and not self.eof_sent:
            assert self.out is not None
            self.eof_sent = True
            self.out.send(FIN)
        self.net.lose(self, None)

    def abort(self) -> None:
        """Drop what is pending; the peer's end is reset."""
        if self.lost:
            return
        self.closing = True
        if self.out is not None:
            self.out.clear(keep_handshake=True)
            if self.connected:
                self.out.send(RST)
        self.net.lose(self, None)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol


class _Connection:
    def __init__(self, cid: int) -> None:
        self.id = cid
        self.client: SimTransport
        self.server: SimTransport
        self.waiter: asyncio.Future[None] | None = None


@dataclass(eq=False)
class SimListener:
    """A listening (host, port): `close()` stops accepting; accepted connections stay."""

    net: SimNetwork
    host: str
    port: int
    protocol_factory: Callable[..., asyncio.BaseProtocol]
    peer_aware: bool = False

    def protocol_for(self, peer: tuple[str, int]) -> asyncio.BaseProtocol:
        """The protocol of a connection accepted from `peer`."""
        return self.protocol_factory(peer) if self.peer_aware else self.protocol_factory()

    def close(self) -> None:
        if self.net.listeners.get((self.host, self.port)) is self:
            del self.net.listeners[(self.host, self.port)]


@dataclass(eq=False)
class SimNetwork:
    """Hosts by name, listeners by (host, port), links by directed host pair.

    Latencies are drawn from `rng` when a link is first used: uniform in
    [`min_latency`, `max_latency`] per link, plus up to `jitter` per segment; `rto` is the
    first retransmission delay of a lost segment (Linux's minimum RTO, as the fault network's
    `faults.network.RETRANSMISSION_TIMEOUT_MS`)."""

    loop: asyncio.AbstractEventLoop
    rng: SimRandom
    digest: Digest
    _: KW_ONLY
    min_latency: float = 0.0002
    max_latency: float = 0.002
    jitter: float = 0.0005
    rto: float = RETRANSMISSION_TIMEOUT_MS / 1000
    segment_size: int = SEGMENT_SIZE
    listeners: dict[tuple[str, int], SimListener] = field(default_factory=dict)
    links: dict[tuple[str, str], Link] = field(default_factory=dict)
    connections: dict[int, _Connection] = field(default_factory=dict)
    #: called with each link when it is created (a fault policy covering hosts not seen yet)
    link_observers: list[Callable[[Link], None]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _ports: dict[str, itertools.count[int]] = field(default_factory=dict)

    # -- topology --------------------------------------------------------------------------
    def link(self, src: str, dst: str) -> Link:
        """The directed link src→dst, created (its latency drawn) on first use."""
        link = self.links.get((src, dst))
        if link is None:
            latency = self.rng.uniform(self.min_latency, self.max_latency)
            link = self.links[(src, dst)] = Link(src, dst, latency, self.jitter, self.rto)
            for observe in self.link_observers:
                observe(link)
        return link

    def _ephemeral_port(self, host: str) -> int:
        counter = self._ports.setdefault(host, itertools.count(40000))
        while True:
            port = next(counter)
            if (host, port) not in self.listeners:
                return port

    def listen(self, host: str, port: int, protocol_factory: Callable[..., asyncio.BaseProtocol],
               *, peer_aware: bool = False) -> SimListener:
        """Accept connections to (host, port) with a protocol from `protocol_factory` (called
        with the peer's (host, port) if `peer_aware`); port 0 picks a free one (the
        listener's `port`). OSError if the address is taken."""
        if port == 0:
            port = self._ephemeral_port(host)
        if (host, port) in self.listeners:
            raise OSError(98, f"address already in use: {host}:{port}")
        listener = self.listeners[(host, port)] = SimListener(self, host, port,
                                                              protocol_factory, peer_aware)
        return listener

    # -- connecting ------------------------------------------------------------------------
    async def connect(self, src: str, host: str, port: int, protocol_factory: ProtocolFactory
                      ) -> tuple[SimTransport, asyncio.BaseProtocol]:
        """From host `src` to (host, port), as `loop.create_connection`: SYN, then the
        listener's SYN-ACK. ConnectionRefusedError when nobody listens; cancelling (a
        timeout) abandons the attempt."""
        conn = _Connection(next(self._ids))
        local = (src, self._ephemeral_port(src))
        protocol = protocol_factory()
        client = conn.client = SimTransport(self, conn, local, (host, port), protocol)
        server = conn.server = SimTransport(self, conn, (host, port), local, None)
        client.out = server.into = _Pipe(self, conn, self.link(src, host), client, server)
        server.out = client.into = _Pipe(self, conn, self.link(host, src), server, client)
        waiter = conn.waiter = self.loop.create_future()
        self.connections[conn.id] = conn
        client.out.send(SYN)
        try:
            await waiter
        except BaseException:
            if not client.lost:
                client.abort()
            raise
        return client, protocol

    async def open_connection(self, src: str, host: str, port: int, *, limit: int = 2 ** 16
                              ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """`asyncio.open_connection` from host `src`."""
        reader = asyncio.StreamReader(limit=limit, loop=self.loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=self.loop)
        transport, _ = await self.connect(src, host, port, lambda: protocol)
        writer = asyncio.StreamWriter(transport, protocol, reader, self.loop)
        return reader, writer

    def connector(self, src: str) -> Callable[..., Any]:
        """A `security.connector.Connector` for code running on host `src`: same signature
        and result as `open_connection` there. PLAINTEXT and SASL_PLAINTEXT only (TLS is not
        simulated)."""

        async def open_connection(host: str, port: int, security: ClientSecurity | None, *,
                                  timeout: float, client_id: str
                                  ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            if security is not None and security.protocol.uses_ssl:
                raise NotSimulated("TLS connections are not simulated")
            async with asyncio.timeout(timeout):
                reader, writer = await self.open_connection(src, host, port)
            if security is not None and security.protocol.uses_sasl:
                from ..security.sasl_client import authenticate

                try:
                    await authenticate(reader, writer,
                                       mechanism=security.sasl_mechanism or "PLAIN",
                                       username=security.username or "",
                                       password=security.password or "",
                                       client_id=client_id, timeout=timeout)
                except BaseException:
                    writer.transport.abort()
                    raise
            return reader, writer

        return open_connection

    # -- delivery --------------------------------------------------------------------------
    def deliver(self, pipe: _Pipe, segment: _Segment) -> None:
        """A segment reaches `pipe.dst` now."""
        dst, src, conn = pipe.dst, pipe.src, pipe.conn
        fields = pipe.fields
        if not fields:
            fields = pipe.fields = (f"#{conn.id} {src.local[0]}:{src.local[1]}>"
                                    f"{dst.local[0]}:{dst.local[1]}")
        kind = segment.kind
        self.digest.record(self.loop.time(), kind, fields, segment.data)
        if kind == SYN:
            self._syn(conn)
        elif kind == SYNACK:
            if dst.lost:  # the connect was abandoned: the server's end is reset
                src.out.send(RST)  # type: ignore[union-attr]
                return
            dst.connected = True
            assert conn.waiter is not None
            if not conn.waiter.done():
                dst.protocol.connection_made(dst)  # type: ignore[union-attr]
                conn.waiter.set_result(None)
        elif kind == DATA:
            src._delivered(len(segment.data))
            if dst.closing:  # TCP answers data for a closed socket with RST
                src.out.send(RST)  # type: ignore[union-attr]
                return
            dst.protocol.data_received(segment.data)  # type: ignore[union-attr]
        elif kind == FIN:
            if dst.closing:
                return
            keep_open = dst.protocol.eof_received()  # type: ignore[union-attr]
            if not keep_open:
                dst.close()
        elif kind == RST:
            self._reset_end(dst, ConnectionRefusedError(
                f"connection refused: {src.local[0]}:{src.local[1]}")
                if not dst.connected and dst is conn.client else
                ConnectionResetError("connection reset by peer"))

    def _syn(self, conn: _Connection) -> None:
        server = conn.server
        listener = self.listeners.get(server.local)
        if listener is None:
            server.out.send(RST)  # type: ignore[union-attr]
            server.closing = server.lost = True
            self._forget_if_done(conn)
            return
        server.protocol = listener.protocol_for(server.remote)
        server.connected = True
        server.out.send(SYNACK)  # type: ignore[union-attr]
        server.protocol.connection_made(server)
        # the client's end connects when the SYN-ACK arrives

    def _reset_end(self, end: SimTransport, exc: Exception) -> None:
        if end.lost:
            return
        end.closing = True
        if end.out is not None:
            end.out.clear()
        conn = end.conn
        if end is conn.client and not end.connected:
            end.lost = True
            if conn.waiter is not None and not conn.waiter.done():
                conn.waiter.set_exception(exc)
            self._forget_if_done(conn)
            return
        self.lose(end, exc)

    def lose(self, end: SimTransport, exc: Exception | None) -> None:
        """`end`'s protocol gets connection_lost(exc) at the next loop iteration."""
        if end.lost:
            return
        end.lost = end.closing = True
        waiter, end._drain = end._drain, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self._forget_if_done(end.conn)
        if end.connected and end.protocol is not None:
            self.loop.call_soon(end.protocol.connection_lost, exc)

    def _forget_if_done(self, conn: _Connection) -> None:
        """Both ends gone: no fault can reach the connection any more (its pipes may still
        deliver what was pending)."""
        if conn.client.lost and conn.server.lost:
            self.connections.pop(conn.id, None)

    def time_out(self, pipe: _Pipe) -> None:
        """A segment waited on a cut link past its timeout: TCP gives up."""
        conn = pipe.conn
        self.digest.record(self.loop.time(), "timeout", f"#{conn.id}")
        pipe.clear()
        self._reset_end(pipe.src, TimeoutError("connection timed out"))
        self._reset_end(pipe.dst, ConnectionResetError("connection reset by peer"))

    # -- faults ----------------------------------------------------------------------------
    def _pairs(self, a: str, b: str, oneway: bool) -> list[Link]:
        return [self.link(a, b)] if oneway else [self.link(a, b), self.link(b, a)]

    def cut(self, a: str, b: str, *, oneway: bool = False,
            timeout: float | None = TCP_TIMEOUT_S) -> None:
        """Nothing passes a→b (and b→a unless `oneway`) until `heal`; connections waiting
        longer than `timeout` to send give up (None: never, a stall)."""
        self.digest.record(self.loop.time(), "cut", f"{a}>{b}{' oneway' if oneway else ''}")
        for link in self._pairs(a, b, oneway):
            link.blocked = True
            link.timeout = timeout

    def stall(self, a: str, b: str, *, oneway: bool = False) -> None:
        """A cut without timeouts: everything waits for the heal."""
        self.cut(a, b, oneway=oneway, timeout=None)

    def heal(self, a: str, b: str, *, oneway: bool = False) -> None:
        """Undo `cut`/`stall`: waiting segments are retransmitted."""
        self.digest.record(self.loop.time(), "heal", f"{a}>{b}{' oneway' if oneway else ''}")
        for link in self._pairs(a, b, oneway):
            link.blocked = False
            link.timeout = None
            parked, link.parked = list(link.parked), {}
            for pipe in parked:
                pipe.unpark()

    def heal_all(self) -> None:
        """Every link back to normal: no cut, no loss, no extra delay."""
        for link in list(self.links.values()):
            link.loss = link.extra = 0.0
            if link.blocked:
                self.heal(link.src, link.dst, oneway=True)

    def reset(self, a: str, b: str) -> None:
        """Every connection between hosts a and b is reset at once, both ends."""
        self.digest.record(self.loop.time(), "reset", f"{a}<>{b}")
        for conn in list(self.connections.values()):
            hosts = {conn.client.local[0], conn.server.local[0]}
            if hosts == {a, b}:
                for end in (conn.client, conn.server):
                    self._reset_end(end, ConnectionResetError("connection reset by peer"))

    def set_loss(self, a: str, b: str, probability: float, *, oneway: bool = False) -> None:
        """Each segment a→b (and back unless `oneway`) is lost with `probability` and
        retransmitted after the RTO (doubling per repeated loss)."""
        for link in self._pairs(a, b, oneway):
            link.loss = probability

    def slow(self, a: str, b: str, extra: float, *, oneway: bool = False) -> None:
        """`extra` seconds more one-way delay a→b (and back unless `oneway`)."""
        for link in self._pairs(a, b, oneway):
            link.extra = extra
