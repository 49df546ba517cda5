"""An asyncio event loop on virtual time, for deterministic simulation (FoundationDB's
simulator, TigerBeetle's VOPR: the real code on a fake world, a run a pure function of a seed).

`SimLoop` is an `asyncio.BaseEventLoop` whose `time()` is a number it owns. Its selector
stand-in never blocks: when no callback is ready, `select(timeout)` moves the clock straight to
the earliest timer, so a ten-minute `asyncio.sleep` costs no wall time and ends at exactly
600 s. Callbacks run in one deterministic order: the ready queue is FIFO (asyncio's own
`_ready` deque) and timers leave the heap by (when, insertion sequence) — asyncio's
`TimerHandle` orders by `when` alone, which leaves equal deadlines in heap order.

There are no file descriptors: no self-pipe, no sockets, no threads. `run_in_executor` (and so
`asyncio.to_thread`) runs the function on the loop at its next iteration, whichever executor is
named; `create_connection` (so `asyncio.open_connection`) opens a connection on the simulated
network when the simulation attached one (`connect_from`); `call_soon_threadsafe` from another
thread, sockets, pipes, subprocesses, DNS, TLS and signal handlers raise `NotSimulated` rather
than quietly doing real I/O. The simulated network
(`odradek.sim.network`) supplies transports; `sendfile` on one of them reads the file region
with `os.pread` and writes the bytes (the disk itself is not simulated yet).

Why not `looptime` (0.9, the fast-forward time plugin): it patches a *real* selector-based loop
and keeps polling real file descriptors (`select(timeout=0)` every cycle, a self-pipe), so it
needs real sockets; before it moves time it spins a number of no-op cycles (`noop_cycles`, 42)
as a heuristic to let coroutines reach their timers; executors still run on real threads, and
while one is busy it advances time in real-time steps (`idle_step`), so how far time moved
depends on thread scheduling; equal deadlines keep asyncio's heap order. Fast-forwarding is
what it is built for, determinism is not, and it is shaped as a pytest plugin. The loop here
is under three hundred lines of plain asyncio subclassing with none of those heuristics: when
nothing is ready nothing can happen until the next timer, because nothing outside the loop
exists.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import threading
from collections.abc import Awaitable, Callable
from contextvars import Context, copy_context
from typing import Any, TypeVar

__all__ = ["NotSimulated", "SimLoop", "SimulationDeadlock"]

_T = TypeVar("_T")

#: `create_connection`'s way onto the simulated network: (host, port, protocol factory) ->
#: the transport and protocol (`Simulation` sets `SimNetwork.connect` from the clients' host)
Connect = Callable[[str, int, Callable[[], asyncio.BaseProtocol]],
                   Awaitable[tuple[asyncio.Transport, asyncio.BaseProtocol]]]

# Timers whose deadline is within this of the clock run (asyncio's `_clock_resolution`); the
# clock is moved exactly to a deadline, so this only absorbs float addition in callers.
_RESOLUTION = 1e-9

# asyncio's (base_events): when cancelled timers are purged from the heap all at once, and the
# longest a select may block
_MIN_SCHEDULED_TIMER_HANDLES = 100
_MIN_CANCELLED_TIMER_HANDLES_FRACTION = 0.5
_MAXIMUM_SELECT_TIMEOUT = 24 * 3600


class NotSimulated(NotImplementedError):
    """Real I/O (or a thread) was asked of the simulation loop, which has none."""


class SimulationDeadlock(RuntimeError):
    """No callback is ready and no timer is pending, yet the loop was asked to go on: every
    task waits for something that can never happen in a closed simulated world."""


class _SeqTimerHandle(asyncio.TimerHandle):
    """A timer ordered by (when, insertion sequence): equal deadlines fire in the order set."""

    __slots__ = ("_seq",)

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...],
                 loop: asyncio.AbstractEventLoop, context: Context | None, seq: int) -> None:
        if loop.get_debug():  # the source traceback asyncio keeps in debug mode
            super().__init__(when, callback, args, loop, context=context)
        else:  # what `TimerHandle.__init__` sets, without its calls (one timer per segment)
            self._context = copy_context() if context is None else context
            self._loop = loop
            self._callback = callback
            self._args = args
            self._cancelled = False
            self._repr = None
            self._source_traceback = None
            self._when = when
            self._scheduled = False
        self._seq = seq

    def _key(self) -> tuple[float, int]:
        return (self._when, self._seq)

    def _run(self) -> None:
        # asyncio runs a timer up to `_clock_resolution` before its deadline while other
        # callbacks are ready; the virtual clock must then reach the deadline, or a task that
        # waits out what is left (a few 1e-14 s: the producer's sender did) waits again and
        # again while the clock stands still
        loop = self._loop
        if self._when > loop._now:
            loop._now = self._when
        super()._run()

    def __lt__(self, other: object) -> bool:
        # the heap's one comparison, so written for speed: the heap holds only these
        mine, theirs = self._when, other._when  # type: ignore[attr-defined]
        return mine < theirs or (mine == theirs
                                 and self._seq < other._seq)  # type: ignore[attr-defined]

    def __le__(self, other: object) -> bool:
        if isinstance(other, _SeqTimerHandle):
            return self._key() <= other._key()
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if isinstance(other, _SeqTimerHandle):
            return self._key() > other._key()
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if isinstance(other, _SeqTimerHandle):
            return self._key() >= other._key()
        return NotImplemented

    __hash__ = asyncio.TimerHandle.__hash__


class _VirtualSelector:
    """What `BaseEventLoop._run_once` polls: never blocks, moves the loop's clock instead."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        self._loop._advance(timeout)
        return []

    def close(self) -> None:
        pass


def _not_simulated(name: str, what: str) -> Callable[..., Any]:
    def method(self: SimLoop, *args: Any, **kwargs: Any) -> Any:
        raise NotSimulated(f"loop.{name}: {what} is not simulated (use odradek.sim.network)")

    method.__name__ = name
    method.__doc__ = f"Raises NotSimulated: {what} is not simulated."
    return method


class SimLoop(asyncio.BaseEventLoop):
    """The simulation's event loop: virtual `time()`, deterministic order, no real I/O.

    `start` is the clock's first value (seconds). `steps` counts loop iterations and `jumps`
    the times the clock moved, for reports."""

    def __init__(self, start: float = 0.0) -> None:
        super().__init__()
        self._now = float(start)
        self._clock_resolution = _RESOLUTION
        self._selector = _VirtualSelector(self)
        self._timer_seq = itertools.count()
        self.jumps = 0
        #: where `create_connection` (so `asyncio.open_connection`) goes: None refuses it
        self.connect_from: Connect | None = None

    # -- the clock -------------------------------------------------------------------------
    def time(self) -> float:
        return self._now

    def _advance(self, timeout: float | None) -> None:
        """Called by `_run_once` with what it would block for: 0 when callbacks are ready, the
        time to the earliest timer, or None when there is none."""
        if timeout == 0:
            return
        if timeout is None:
            raise SimulationDeadlock(
                "nothing is ready and no timer is pending: every task waits for an event "
                "that nothing in the simulation will produce")
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        # exactly to the deadline (now + timeout may round); asyncio caps a timeout at one
        # day (MAXIMUM_SELECT_TIMEOUT): a farther deadline is approached a day at a time
        if scheduled and scheduled[0].when() - self._now <= timeout:
            target = scheduled[0].when()
        else:
            target = self._now + timeout
        if target > self._now:
            self._now = target
            self.jumps += 1

    def _run_once(self) -> None:
        """`BaseEventLoop._run_once` with the selector's `_advance` folded in: the same steps
        in the same order (cancelled timers dropped, the clock moved to the earliest timer when
        nothing is ready, due timers made ready in heap order, the ready callbacks run), without
        the calls a real selector needs; asyncio's own in debug mode."""
        if self._debug:  # type: ignore[attr-defined]
            super()._run_once()  # type: ignore[misc]
            return
        scheduled: list[Any] = self._scheduled  # type: ignore[attr-defined]
        count = len(scheduled)
        if count > _MIN_SCHEDULED_TIMER_HANDLES and (
                self._timer_cancelled_count / count  # type: ignore[attr-defined]
                > _MIN_CANCELLED_TIMER_HANDLES_FRACTION):
            kept = []
            for handle in scheduled:
                if handle._cancelled:
                    handle._scheduled = False
                else:
                    kept.append(handle)
            heapq.heapify(kept)
            self._scheduled = scheduled = kept
            self._timer_cancelled_count = 0
        else:
            while scheduled and scheduled[0]._cancelled:
                self._timer_cancelled_count -= 1  # type: ignore[attr-defined]
                heapq.heappop(scheduled)._scheduled = False
        ready = self._ready  # type: ignore[attr-defined]
        now = self._now
        if not ready and not self._stopping:  # type: ignore[attr-defined]
            if not scheduled:
                self._advance(None)  # raises SimulationDeadlock
            when = scheduled[0]._when
            if when > now:  # the jump `_advance` makes (a day at most, as asyncio's timeout)
                now = self._now = when if when - now <= _MAXIMUM_SELECT_TIMEOUT \
                    else now + _MAXIMUM_SELECT_TIMEOUT
                self.jumps += 1
        end = now + self._clock_resolution
        while scheduled:
            handle = scheduled[0]
            if handle._when >= end:
                break
            heapq.heappop(scheduled)._scheduled = False
            ready.append(handle)
        popleft = ready.popleft
        for _ in range(len(ready)):
            handle = popleft()
            if not handle._cancelled:
                handle._run()
        handle = None  # as asyncio: no cycle through an exception's frame

    # -- deterministic timers --------------------------------------------------------------
    def call_at(self, when: float, callback: Callable[..., Any], *args: Any,
                context: Context | None = None) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()  # type: ignore[attr-defined]
        timer = _SeqTimerHandle(when, callback, args, self, context, next(self._timer_seq))
        if timer._source_traceback:  # type: ignore[attr-defined]
            del timer._source_traceback[-1]  # type: ignore[attr-defined]
        heapq.heappush(self._scheduled, timer)  # type: ignore[attr-defined]
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    # -- what BaseEventLoop leaves to a selector loop --------------------------------------
    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def call_soon_threadsafe(self, callback: Callable[..., Any], *args: Any,
                             context: Context | None = None) -> asyncio.Handle:
        """Only from the loop's own thread: another thread would make the order depend on
        the operating system's scheduler."""
        thread_id = self._thread_id  # type: ignore[attr-defined]
        if thread_id is not None and thread_id != threading.get_ident():
            raise NotSimulated("call_soon_threadsafe from another thread: threads are not "
                               "simulated")
        return self.call_soon(callback, *args, context=context)

    # -- executors: inline, at the next iteration ------------------------------------------
    def run_in_executor(self, executor: Any, func: Callable[..., _T],
                        *args: Any) -> asyncio.Future[_T]:
        """Runs `func(*args)` on the loop at its next iteration (whatever `executor` is), so
        `asyncio.to_thread` and `run_in_executor` are deterministic; a blocking `func` blocks
        the whole simulation, as it costs no virtual time."""
        self._check_closed()  # type: ignore[attr-defined]
        future: asyncio.Future[_T] = self.create_future()

        def run() -> None:
            if future.cancelled():
                return
            try:
                result = func(*args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)

        self.call_soon(run)
        return future

    def set_default_executor(self, executor: Any) -> None:
        """Accepted and unused: executors run inline."""

    # -- sendfile over simulated transports ------------------------------------------------
    async def sendfile(self, transport: asyncio.WriteTransport, file: Any, offset: int = 0,
                       count: int | None = None, *, fallback: bool = True) -> int:
        """On a simulated transport: read the region with `os.pread` (no shared file
        position, as the broker's own small-region path) in 64 KiB chunks, each written once
        the transport is below its high-water mark. Returns the bytes sent (fewer if the
        file is shorter), and leaves the file position alone."""
        send = getattr(transport, "send_file_region", None)
        if send is None:
            raise NotSimulated("loop.sendfile: only simulated transports can send files")
        result: int = await send(file.fileno(), offset, count)
        return result

    # -- connections: onto the simulated network, from the clients' host -------------------
    async def create_connection(self, protocol_factory: Callable[[], asyncio.BaseProtocol],
                                host: str | None = None, port: int | None = None, *,
                                ssl: Any = None, sock: Any = None, **kwargs: Any
                                ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        """A plain TCP connection to (host, port) on the simulated network, opened from the
        host `connect_from` stands for (code that is not a broker: a user's client); TLS, a
        given socket, or a loop without a network raise `NotSimulated`."""
        if self.connect_from is None or ssl or sock is not None or host is None \
                or port is None:
            raise NotSimulated("loop.create_connection: TLS, given sockets and loops without a "
                               "network are not simulated (plain TCP on the simulated "
                               "network only)")
        return await self.connect_from(str(host), int(port), protocol_factory)

    # -- real I/O: refused -----------------------------------------------------------------
    create_server = _not_simulated("create_server", "a listening socket")
    create_unix_connection = _not_simulated("create_unix_connection", "a Unix socket")
    create_unix_server = _not_simulated("create_unix_server", "a Unix socket")
    create_datagram_endpoint = _not_simulated("create_datagram_endpoint", "UDP")
    connect_accepted_socket = _not_simulated("connect_accepted_socket", "a socket")
    start_tls = _not_simulated("start_tls", "TLS")
    getaddrinfo = _not_simulated("getaddrinfo", "DNS")
    getnameinfo = _not_simulated("getnameinfo", "DNS")
    sock_recv = _not_simulated("sock_recv", "a socket")
    sock_recv_into = _not_simulated("sock_recv_into", "a socket")
    sock_sendall = _not_simulated("sock_sendall", "a socket")
    sock_connect = _not_simulated("sock_connect", "a socket")
    sock_accept = _not_simulated("sock_accept", "a socket")
    sock_sendfile = _not_simulated("sock_sendfile", "a socket")
    add_reader = _not_simulated("add_reader", "a file descriptor")
    remove_reader = _not_simulated("remove_reader", "a file descriptor")
    add_writer = _not_simulated("add_writer", "a file descriptor")
    remove_writer = _not_simulated("remove_writer", "a file descriptor")
    connect_read_pipe = _not_simulated("connect_read_pipe", "a pipe")
    connect_write_pipe = _not_simulated("connect_write_pipe", "a pipe")
    subprocess_exec = _not_simulated("subprocess_exec", "a subprocess")
    subprocess_shell = _not_simulated("subprocess_shell", "a subprocess")
    add_signal_handler = _not_simulated("add_signal_handler", "a signal")
    remove_signal_handler = _not_simulated("remove_signal_handler", "a signal")


def pread_region(fd: int, offset: int, size: int) -> bytes:
    """`size` bytes at `offset` of `fd`, or fewer at the end of the file."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        chunk = os.pread(fd, size - got, offset + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
