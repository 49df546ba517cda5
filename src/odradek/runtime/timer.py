"""Hierarchical timing wheel: Kafka's ``kafka.utils.timer`` (``SystemTimer``) for one asyncio loop.

Kafka keeps every delayed request (acks=all produce, long-poll fetch, join/heartbeat) in a
*purgatory* whose timeouts live in a hierarchical timing wheel instead of a heap of tasks
(docs/design.md S-8.2). The pieces, named as in Kafka:

* :class:`TimerTask` -- something to run after ``delay_ms``. It holds a reference to its
  :class:`TimerTaskEntry` so that :meth:`TimerTask.cancel` unlinks it in O(1).
* :class:`TimerTaskList` -- a *bucket*: a circular doubly linked list of entries with one
  expiration time; O(1) add and remove.
* :class:`TimingWheel` -- ``wheel_size`` buckets of ``tick_ms`` each. A task beyond the wheel's
  interval goes to a lazily created *overflow wheel* whose tick is this wheel's interval, and so
  on up (1 ms x 20 -> 20 ms x 20 -> 400 ms x 20 -> 8 s x 20 -> 160 s x 20 ...).
* :class:`Timer` -- Kafka's ``SystemTimer``: the wheels plus a *delay queue of buckets* (a heap
  keyed by bucket expiration; a bucket is in it at most once, so the heap holds at most
  ``wheel_size`` entries per level however many tasks there are). ``advance_clock(now)`` pops the
  expired buckets, moves the wheels' clocks to each bucket's time and re-adds its tasks: tasks of an
  overflow wheel cascade down into finer wheels, tasks of the finest wheel run.

Differences from Kafka, all forced by "one asyncio loop, no threads":

* The clock is injected (``Timer(clock=...)``, milliseconds) and there is no executor thread: due
  tasks run synchronously inside :meth:`Timer.advance_clock`, never inside :meth:`Timer.add` (a task
  that is already due when added waits in a *ready* list for the next ``advance_clock``, as it
  would wait for Kafka's executor).
* :class:`AsyncTimerDriver` replaces Kafka's ``ExpirationReaper`` thread: it keeps exactly one
  ``loop.call_later`` handle armed for the earliest bucket and re-arms it when an earlier bucket
  appears. No polling.
* A task's expiration is rounded *up* to the tick, so a task never runs before its deadline and
  at most one tick after it (Kafka rounds down, which with its 1 ms tick is the same thing).
* Buckets whose tasks were all cancelled are dropped from the head of the delay queue instead of
  waking the loop for nothing.

Nothing here is thread-safe: all calls must come from the thread running the loop.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
from collections.abc import Callable

from ..common import clock

__all__ = [
    "AsyncTimerDriver",
    "Clock",
    "Timer",
    "TimerTask",
    "TimerTaskEntry",
    "TimerTaskList",
    "TimingWheel",
    "monotonic_ms",
]

log = logging.getLogger(__name__)

Clock = Callable[[], float]
"""A clock returning milliseconds (int or float) from an arbitrary, non-decreasing origin."""


def monotonic_ms() -> float:
    """The default clock: ``time.monotonic()`` in milliseconds (asyncio's default time base)."""
    return clock.monotonic() * 1000.0


class TimerTask:
    """Something to run once ``delay_ms`` after it is added to a :class:`Timer`.

    Subclasses override :meth:`run`; alternatively pass ``callback``. The task keeps its current
    :class:`TimerTaskEntry` so that :meth:`cancel` is O(1). Adding the task again (before or after
    it ran or was cancelled) reschedules it, replacing any pending entry, as in Kafka.
    """

    __slots__ = ("_callback", "_cancelled", "_entry", "delay_ms")

    def __init__(self, delay_ms: float, callback: Callable[[], object] | None = None) -> None:
        self.delay_ms = delay_ms
        self._callback = callback
        self._entry: TimerTaskEntry | None = None
        self._cancelled = False

    def run(self) -> None:
        """Called on the loop when the task expires. The default calls ``callback``."""
        if self._callback is not None:
            self._callback()

    def cancel(self) -> None:
        """Unlink the task from its bucket in O(1); a cancelled task does not run."""
        entry = self._entry
        if entry is not None:
            self._entry = None
            entry.remove()
        self._cancelled = True

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled

    @property
    def is_pending(self) -> bool:
        """True while the task sits in a timer, waiting to run."""
        return self._entry is not None

    def _set_entry(self, entry: TimerTaskEntry) -> None:
        old = self._entry
        if old is not None and old is not entry:
            old.remove()
        self._entry = entry
        self._cancelled = False


class TimerTaskEntry:
    """A node of a :class:`TimerTaskList`: one scheduling of a task, with its absolute expiration.

    The entry is *stale* (cancelled) once its task points to another entry or to none.
    """

    __slots__ = ("expiration_ms", "list", "next", "prev", "task")

    def __init__(self, task: TimerTask | None, expiration_ms: int) -> None:
        self.task = task
        self.expiration_ms = expiration_ms
        self.list: TimerTaskList | None = None
        self.next: TimerTaskEntry | None = None
        self.prev: TimerTaskEntry | None = None

    @property
    def cancelled(self) -> bool:
        return self.task is None or self.task._entry is not self

    def remove(self) -> None:
        """Unlink this entry from whatever bucket holds it (O(1); no-op if none)."""
        bucket = self.list
        if bucket is not None:
            bucket.remove(self)


class _Counter:
    """The task count shared by all buckets of one timer (Kafka's ``taskCounter``)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class TimerTaskList:
    """A bucket: circular doubly linked list of entries with a sentinel root, plus an expiration.

    ``expiration_ms`` is -1 while the bucket is not in the timer's delay queue.
    """

    __slots__ = ("_counter", "_root", "expiration_ms")

    def __init__(self, counter: _Counter | None = None) -> None:
        self._counter = counter if counter is not None else _Counter()
        root = TimerTaskEntry(None, -1)
        root.next = root
        root.prev = root
        self._root = root
        self.expiration_ms = -1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the bucket's expiration; True iff it changed (the bucket must then be queued)."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def add(self, entry: TimerTaskEntry) -> None:
        """Append ``entry`` at the tail (O(1)), unlinking it from any other bucket first."""
        if entry.list is not None:
            entry.list.remove(entry)
        root = self._root
        tail = root.prev
        assert tail is not None
        entry.next = root
        entry.prev = tail
        entry.list = self
        tail.next = entry
        root.prev = entry
        self._counter.value += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        """Unlink ``entry`` (O(1)); no-op if it is not in this bucket."""
        if entry.list is not self:
            return
        nxt, prev = entry.next, entry.prev
        assert nxt is not None and prev is not None
        nxt.prev = prev
        prev.next = nxt
        entry.next = entry.prev = None
        entry.list = None
        self._counter.value -= 1

    def pop(self) -> TimerTaskEntry | None:
        """Unlink and return the head entry, or None if the bucket is empty."""
        head = self._root.next
        if head is self._root or head is None:
            return None
        self.remove(head)
        return head

    def flush(self, f: Callable[[TimerTaskEntry], object]) -> None:
        """Remove every entry, handing each to ``f``, and mark the bucket unqueued (-1)."""
        while (entry := self.pop()) is not None:
            f(entry)
        self.expiration_ms = -1

    def is_empty(self) -> bool:
        return self._root.next is self._root

    def __len__(self) -> int:
        """O(n): walks the list (for tests and debugging; the timer keeps a shared count)."""
        n = 0
        entry = self._root.next
        while entry is not self._root and entry is not None:
            n += 1
            entry = entry.next
        return n

    def tasks(self) -> list[TimerTask]:
        """The tasks in this bucket, head first (O(n); for tests and debugging)."""
        out: list[TimerTask] = []
        entry = self._root.next
        while entry is not self._root and entry is not None:
            if entry.task is not None and not entry.cancelled:
                out.append(entry.task)
            entry = entry.next
        return out


class TimingWheel:
    """One level of the hierarchical timing wheel (Kafka's ``TimingWheel``).

    Covers ``[current_time_ms, current_time_ms + interval_ms)`` with ``wheel_size`` buckets of
    ``tick_ms``. Entries further out go to the overflow wheel (tick = this wheel's interval),
    created on first need. ``offer`` is called with each bucket whose expiration changed, i.e.
    that must (re-)enter the timer's delay queue.
    """

    __slots__ = (
        "_counter",
        "_offer",
        "buckets",
        "current_time_ms",
        "interval_ms",
        "overflow_wheel",
        "tick_ms",
        "wheel_size",
    )

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        offer: Callable[[TimerTaskList], None],
        counter: _Counter | None = None,
    ) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError("tick_ms must be >= 1 and wheel_size >= 2")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_time_ms = start_ms - (start_ms % tick_ms)  # rounded down to the tick
        self._offer = offer
        self._counter = counter if counter is not None else _Counter()
        self.buckets = [TimerTaskList(self._counter) for _ in range(wheel_size)]
        self.overflow_wheel: TimingWheel | None = None

    def add(self, entry: TimerTaskEntry) -> bool:
        """Place ``entry`` in this wheel or an overflow wheel.

        Returns False (and stores nothing) if the entry is cancelled or already expired, i.e.
        due before the end of the current tick; the caller then runs it.
        """
        expiration = entry.expiration_ms
        if entry.cancelled:
            return False
        if expiration < self.current_time_ms + self.tick_ms:
            return False
        if expiration < self.current_time_ms + self.interval_ms:
            virtual_id = expiration // self.tick_ms
            bucket = self.buckets[virtual_id % self.wheel_size]
            bucket.add(entry)
            # The expiration changes only when the wheel has moved on and this bucket is reused
            # for a later round: that is when it must be queued (again).
            if bucket.set_expiration(virtual_id * self.tick_ms):
                self._offer(bucket)
            return True
        if self.overflow_wheel is None:
            self.overflow_wheel = TimingWheel(
                self.interval_ms, self.wheel_size, self.current_time_ms, self._offer, self._counter
            )
        return self.overflow_wheel.add(entry)

    def advance_clock(self, time_ms: int) -> None:
        """Move this wheel's clock (and its overflow wheels') to ``time_ms``, rounded down."""
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - (time_ms % self.tick_ms)
            if self.overflow_wheel is not None:
                self.overflow_wheel.advance_clock(self.current_time_ms)

    def levels(self) -> int:
        """How many wheels exist in the hierarchy from this one up."""
        return 1 + (self.overflow_wheel.levels() if self.overflow_wheel is not None else 0)


class Timer:
    """Kafka's ``SystemTimer`` on an injected clock: timing wheels plus a delay queue of buckets.

    ``tick_ms`` 1 and ``wheel_size`` 20 are Kafka's defaults. Add, cancel and expiry of a task are
    O(1) amortised (a task is re-inserted once per wheel level it cascades through); the delay
    queue is a heap of *buckets*, at most ``wheel_size`` per level.

    Single-threaded: call everything from one thread (the broker's asyncio loop).
    """

    def __init__(
        self,
        clock: Clock = monotonic_ms,
        tick_ms: int = 1,
        wheel_size: int = 20,
        start_ms: float | None = None,
        on_error: Callable[[TimerTask, Exception], None] | None = None,
    ) -> None:
        self._clock = clock
        self.tick_ms = tick_ms
        self._counter = _Counter()
        self._delay_queue: list[tuple[int, int, TimerTaskList]] = []
        self._seq = itertools.count()
        start = math.floor(clock() if start_ms is None else start_ms)
        self._wheel = TimingWheel(tick_ms, wheel_size, start, self._offer, self._counter)
        # Tasks found due by add() or by a flush; run by the next advance_clock().
        self._ready = TimerTaskList(self._counter)
        self._advancing = False
        self._on_error = on_error
        self.owner: str | None = None
        """The purgatory using this timer; Kafka gives each purgatory its own timer."""
        self.on_schedule: Callable[[int], None] | None = None
        """Hook called with an expiration (ms) whenever something new becomes due at that time:
        a bucket entering the delay queue, or a task that is due already. Used by
        :class:`AsyncTimerDriver` to re-arm its wake-up."""

    # -- public API ---------------------------------------------------------------------------

    def now_ms(self) -> float:
        """The injected clock's current reading."""
        return self._clock()

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` to run ``task.delay_ms`` from now (rescheduling it if pending)."""
        now = self._clock()
        floor_now = math.floor(now)
        # When nothing queued is due, the wheels may be moved to "now" without breaking their
        # bucket invariants; that places the task relative to the real time instead of the time
        # of the last expired bucket and saves cascading through coarse buckets.
        queue = self._delay_queue
        if not queue or queue[0][0] > floor_now:
            self._wheel.advance_clock(floor_now)
        tick = self.tick_ms
        deadline = now + task.delay_ms
        expiration = math.ceil(deadline) if tick == 1 else -(-math.ceil(deadline) // tick) * tick
        entry = TimerTaskEntry(task, expiration)
        task._set_entry(entry)
        self._add_entry(entry)

    def advance_clock(self, now_ms: float | None = None) -> bool:
        """Expire every bucket due at ``now_ms`` (default: the clock) and run the due tasks.

        Buckets are taken from the delay queue in expiration order; for each, the wheels' clocks
        move to its expiration and its tasks are re-added: those of overflow wheels cascade into
        finer buckets (which, if also due, are expired in the same call), those of the finest
        wheel run. Tasks run after all due buckets are flushed, in the order their buckets
        expired (tasks found due by ``add`` first); a task
        cancelled by an earlier one in the same batch does not run; tasks added by a running task
        that are due immediately wait for the next call. Returns True iff a bucket expired or a
        task ran.
        """
        if self._advancing:
            raise RuntimeError("Timer.advance_clock is not re-entrant (called from a task's run())")
        now = math.floor(self._clock() if now_ms is None else now_ms)
        self._advancing = True
        try:
            progressed = False
            queue = self._delay_queue
            wheel = self._wheel
            while queue and queue[0][0] <= now:
                expiration, _, bucket = heapq.heappop(queue)
                if bucket.expiration_ms != expiration:  # defensive: a stale queue entry
                    continue
                progressed = True
                wheel.advance_clock(expiration)
                bucket.flush(self._add_entry)
            batch, self._ready = self._ready, TimerTaskList(self._counter)
            while (entry := batch.pop()) is not None:
                task = entry.task
                if task is None or task._entry is not entry:
                    continue
                task._entry = None
                progressed = True
                try:
                    task.run()
                except Exception as exc:
                    self._report(task, exc)
            return progressed
        finally:
            self._advancing = False

    def next_expiration_ms(self) -> int | None:
        """When the next bucket (or an already-due task) expires; None if nothing is pending.

        An event loop should call :meth:`advance_clock` at that time. Buckets emptied by
        cancellation are dropped here rather than reported.
        """
        if not self._ready.is_empty():
            return self._wheel.current_time_ms
        queue = self._delay_queue
        while queue:
            expiration, _, bucket = queue[0]
            if bucket.expiration_ms == expiration and not bucket.is_empty():
                return expiration
            heapq.heappop(queue)
            if bucket.expiration_ms == expiration:
                bucket.expiration_ms = -1  # empty: unqueued; a later add re-queues it
        return None

    def size(self) -> int:
        """The number of pending (not yet run, not cancelled) tasks, Kafka's ``Timer.size``."""
        return self._counter.value

    def __len__(self) -> int:
        return self._counter.value

    def levels(self) -> int:
        """How many wheels have been created (1 + overflow wheels)."""
        return self._wheel.levels()

    def queued_buckets(self) -> int:
        """Entries in the delay queue (bounded by wheel_size per level; for tests and metrics)."""
        return len(self._delay_queue)

    # -- internals -----------------------------------------------------------------------------

    def _offer(self, bucket: TimerTaskList) -> None:
        expiration = bucket.expiration_ms
        heapq.heappush(self._delay_queue, (expiration, next(self._seq), bucket))
        if self.on_schedule is not None:
            self.on_schedule(expiration)

    def _add_entry(self, entry: TimerTaskEntry) -> None:
        if not self._wheel.add(entry) and not entry.cancelled:
            # Already expired: queue it to run at the next advance_clock (Kafka's executor).
            was_empty = self._ready.is_empty()
            self._ready.add(entry)
            if was_empty and self.on_schedule is not None:
                self.on_schedule(self._wheel.current_time_ms)

    def _report(self, task: TimerTask, exc: Exception) -> None:
        if self._on_error is not None:
            self._on_error(task, exc)
        else:
            log.error("timer task %r failed", task, exc_info=exc)


class AsyncTimerDriver:
    """Runs a :class:`Timer` on an asyncio loop: Kafka's ``ExpirationReaper`` without a thread.

    Exactly one ``loop.call_later`` handle is armed, for the earliest bucket expiration; it is
    re-armed when an earlier bucket (or an already-due task) appears and after each expiry.
    Expired tasks' ``run()`` is called on the loop. The timer's clock must advance at the rate of
    real time (the default ``monotonic_ms`` does); the delay is computed on the timer's clock, so
    its origin need not match ``loop.time()``.
    """

    def __init__(self, timer: Timer, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.timer = timer
        self._loop = loop
        self._handle: asyncio.TimerHandle | None = None
        self._armed_ms: int | None = None
        self._firing = False
        self._running = False

    @property
    def running(self) -> bool:
        return self._running

    @property
    def handle(self) -> asyncio.TimerHandle | None:
        """The armed wake-up, or None (nothing pending, or stopped)."""
        return self._handle

    @property
    def armed_at_ms(self) -> int | None:
        """The timer-clock time the wake-up is armed for, or None."""
        return self._armed_ms

    def start(self) -> None:
        """Attach to the timer and arm for whatever is already pending."""
        if self._running:
            return
        if self.timer.on_schedule is not None:
            raise RuntimeError("this timer already has a driver")
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._running = True
        self.timer.on_schedule = self._on_schedule
        self._rearm()

    def stop(self) -> None:
        """Cancel the wake-up and detach; pending tasks stay in the timer, unrun."""
        self._running = False
        if self.timer.on_schedule == self._on_schedule:
            self.timer.on_schedule = None
        self._disarm()

    async def __aenter__(self) -> AsyncTimerDriver:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    # -- internals -----------------------------------------------------------------------------

    def _on_schedule(self, expiration_ms: int) -> None:
        if self._firing or not self._running:
            return  # _fire re-arms from next_expiration_ms() when it is done
        if self._armed_ms is None or expiration_ms < self._armed_ms:
            self._arm(expiration_ms)

    def _arm(self, expiration_ms: int) -> None:
        assert self._loop is not None
        if self._handle is not None:
            self._handle.cancel()
        delay_s = max(0.0, (expiration_ms - self.timer.now_ms()) / 1000.0)
        self._handle = self._loop.call_later(delay_s, self._fire)
        self._armed_ms = expiration_ms

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._armed_ms = None

    def _rearm(self) -> None:
        nxt = self.timer.next_expiration_ms()
        if nxt is None:
            self._disarm()
        elif nxt != self._armed_ms or self._handle is None:
            self._arm(nxt)

    def _fire(self) -> None:
        armed = self._armed_ms
        self._handle = None
        self._armed_ms = None
        if not self._running:
            return
        # The loop judged the deadline reached (within its clock resolution): trust it, so a
        # clock that reads a hair early does not make us spin.
        now = self.timer.now_ms()
        if armed is not None and armed > now:
            now = armed
        self._firing = True
        try:
            self.timer.advance_clock(now)
        finally:
            self._firing = False
        if self._running:
            self._rearm()
