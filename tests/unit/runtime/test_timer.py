"""Tests of the hierarchical timing wheel (odradek.runtime.timer), on an injected fake clock."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.runtime.timer import (
    AsyncTimerDriver,
    Timer,
    TimerTask,
    TimerTaskEntry,
    TimerTaskList,
    TimingWheel,
)


class FakeClock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Recorder:
    """Collects (task id, time it ran) pairs."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.runs: list[tuple[int, int]] = []

    def task(self, delay_ms: int, ident: int) -> TimerTask:
        return TimerTask(delay_ms, lambda: self.runs.append((ident, self.clock.now)))

    def ran_at(self) -> dict[int, int]:
        return dict(self.runs)


def make(start: int = 0, tick_ms: int = 1, wheel_size: int = 20) -> tuple[FakeClock, Timer]:
    clock = FakeClock(start)
    return clock, Timer(clock=clock, tick_ms=tick_ms, wheel_size=wheel_size)


def step(clock: FakeClock, timer: Timer, until: int) -> None:
    """Advance the timer at the current time, then one millisecond at a time up to ``until``."""
    timer.advance_clock(clock.now)
    while clock.now < until:
        clock.now += 1
        timer.advance_clock(clock.now)


def drain(clock: FakeClock, timer: Timer) -> None:
    """Event-driven advance, as the asyncio driver does: jump to each next expiration."""
    while (nxt := timer.next_expiration_ms()) is not None:
        clock.now = max(clock.now, nxt)
        timer.advance_clock(clock.now)


def level_of(timer: Timer, task: TimerTask) -> int | None:
    """Which wheel (0 = finest) holds the task's bucket, or None."""
    entry = task._entry
    if entry is None or entry.list is None:
        return None
    wheel: TimingWheel | None = timer._wheel
    level = 0
    while wheel is not None:
        if any(entry.list is b for b in wheel.buckets):
            return level
        wheel, level = wheel.overflow_wheel, level + 1
    return None


# -- buckets ---------------------------------------------------------------------------------


def test_bucket_is_a_doubly_linked_list_with_o1_remove() -> None:
    bucket = TimerTaskList()
    tasks = [TimerTask(10) for _ in range(5)]
    entries = []
    for t in tasks:
        e = TimerTaskEntry(t, 10)
        t._set_entry(e)
        bucket.add(e)
        entries.append(e)
    assert len(bucket) == 5 and bucket.tasks() == tasks
    middle = entries[2]
    tasks[2].cancel()
    # The neighbours now point at each other; the removed node is detached.
    assert entries[1].next is entries[3] and entries[3].prev is entries[1]
    assert middle.list is None and middle.next is None and middle.prev is None
    assert bucket.tasks() == [tasks[0], tasks[1], tasks[3], tasks[4]]
    assert bucket._counter.value == 4
    assert bucket.set_expiration(10) is True
    assert bucket.set_expiration(10) is False  # unchanged: must not be queued twice
    flushed: list[TimerTaskEntry] = []
    bucket.flush(flushed.append)
    assert [e.task for e in flushed] == [tasks[0], tasks[1], tasks[3], tasks[4]]
    assert bucket.is_empty() and bucket.expiration_ms == -1 and bucket._counter.value == 0


# -- firing times ----------------------------------------------------------------------------


def test_tasks_fire_exactly_at_their_tick_when_clock_steps_by_one_ms() -> None:
    clock, timer = make(start=1_000)
    rec = Recorder(clock)
    delays = [*range(0, 45), 399, 400, 401, 799, 1_234, 7_999, 8_000, 8_001]
    for i, d in enumerate(delays):
        timer.add(rec.task(d, i))
    assert timer.size() == len(delays)
    step(clock, timer, 1_000 + 8_100)
    assert rec.ran_at() == {i: 1_000 + max(d, 0) for i, d in enumerate(delays)}
    assert timer.size() == 0


def test_already_expired_tasks_run_on_next_advance_not_inside_add() -> None:
    clock, timer = make(start=50)
    rec = Recorder(clock)
    for i in range(-5, 1):
        timer.add(rec.task(i, i))
    assert rec.runs == []
    assert timer.size() == 6
    nxt = timer.next_expiration_ms()
    assert nxt is not None and nxt <= clock.now
    assert timer.advance_clock(clock.now) is True
    assert sorted(rec.ran_at()) == list(range(-5, 1))
    assert timer.size() == 0 and timer.next_expiration_ms() is None
    assert timer.advance_clock(clock.now) is False


@pytest.mark.parametrize("tick_ms", [2, 10])
def test_coarse_tick_is_never_early_and_at_most_one_tick_late(tick_ms: int) -> None:
    clock, timer = make(start=7, tick_ms=tick_ms, wheel_size=8)
    rec = Recorder(clock)
    rng = random.Random(tick_ms)
    deadlines = {}
    for i in range(300):
        d = rng.randrange(0, 2_000)
        deadlines[i] = clock.now + d
        timer.add(rec.task(d, i))
    step(clock, timer, 7 + 2_000 + 2 * tick_ms)
    ran = rec.ran_at()
    assert ran.keys() == deadlines.keys()
    for i, at in ran.items():
        assert deadlines[i] <= at <= deadlines[i] + tick_ms, (i, deadlines[i], at)


@pytest.mark.parametrize(
    "delay_ms, levels",
    [
        (5_000, 3),  # wheels of 1 ms x20 (20 ms), 20 ms x20 (400 ms), 400 ms x20 (8 s)
        (10 * 60_000, 5),  # ... 8 s x20 (160 s), 160 s x20 (3200 s)
        (3 * 3_600_000, 6),
        (48 * 3_600_000, 7),
    ],
)
def test_overflow_wheels_for_seconds_minutes_hours(delay_ms: int, levels: int) -> None:
    clock, timer = make(start=123_456)
    rec = Recorder(clock)
    task = rec.task(delay_ms, 1)
    timer.add(task)
    assert timer.levels() == levels
    deadline = 123_456 + delay_ms
    # A big jump just short of the deadline cascades the task down but does not run it.
    clock.now = deadline - 1
    timer.advance_clock(deadline - 1)
    assert rec.runs == [] and timer.size() == 1
    assert timer.next_expiration_ms() == deadline
    assert level_of(timer, task) == 0
    clock.now = deadline
    timer.advance_clock(deadline)
    assert rec.runs == [(1, deadline)]
    assert timer.size() == 0


def test_event_driven_advance_runs_each_task_at_its_deadline() -> None:
    clock, timer = make(start=0)
    rec = Recorder(clock)
    delays = [3, 25, 450, 9_000, 61_000, 3_600_000, 3_600_001]
    for i, d in enumerate(delays):
        timer.add(rec.task(d, i))
    wakeups = 0
    while (nxt := timer.next_expiration_ms()) is not None:
        clock.now = nxt
        timer.advance_clock(nxt)
        wakeups += 1
    assert rec.ran_at() == dict(enumerate(delays))
    # Cascading costs a few wake-ups per level, not one per millisecond.
    assert wakeups < 60


def test_reinsertion_cascades_down_the_wheels() -> None:
    clock, timer = make(start=0)
    rec = Recorder(clock)
    task = rec.task(8_450, 1)
    timer.add(task)
    assert level_of(timer, task) == 3  # 8 s buckets
    timer.advance_clock(8_000)
    assert level_of(timer, task) == 2  # 400 ms buckets: 8000..8399 -> 8400
    timer.advance_clock(8_400)
    assert level_of(timer, task) == 1  # 20 ms buckets: 8440
    timer.advance_clock(8_440)
    assert level_of(timer, task) == 0  # 1 ms buckets: 8450
    timer.advance_clock(8_449)
    assert rec.runs == []
    timer.advance_clock(8_450)
    assert rec.runs == [(1, 0)]
    assert level_of(timer, task) is None and not task.is_pending


def test_delay_queue_holds_buckets_not_tasks() -> None:
    _clock, timer = make(start=0)
    rng = random.Random(7)
    for _ in range(20_000):
        timer.add(TimerTask(rng.randrange(1, 3_600_000)))
    assert timer.size() == 20_000
    # At most one queue entry per bucket of each wheel.
    assert timer.queued_buckets() <= 20 * timer.levels()


# -- cancellation and rescheduling ------------------------------------------------------------


def test_cancelled_tasks_never_run_and_leave_the_timer() -> None:
    clock, timer = make(start=0)
    rec = Recorder(clock)
    tasks = [rec.task(d, d) for d in range(1, 101)]
    for t in tasks:
        timer.add(t)
    for t in tasks[::2]:
        t.cancel()
        t.cancel()  # idempotent
    assert timer.size() == 50
    assert all(t.is_cancelled and not t.is_pending for t in tasks[::2])
    step(clock, timer, 200)
    assert sorted(rec.ran_at()) == list(range(2, 101, 2))
    assert timer.size() == 0


def test_buckets_emptied_by_cancellation_do_not_wake_the_loop() -> None:
    _clock, timer = make(start=0)
    early = TimerTask(10)
    late = TimerTask(500)
    timer.add(early)
    timer.add(late)
    assert timer.next_expiration_ms() == 10
    early.cancel()
    # The 10 ms bucket is empty: the next wake-up is the (400 ms overflow) bucket holding `late`.
    assert timer.next_expiration_ms() == 400
    late.cancel()
    assert timer.next_expiration_ms() is None and timer.size() == 0
    # A pruned bucket is re-queued when reused.
    again = TimerTask(10)
    timer.add(again)
    assert timer.next_expiration_ms() == 10


def test_task_cancelled_by_an_earlier_task_in_the_same_batch_does_not_run() -> None:
    _clock, timer = make(start=0)
    ran: list[str] = []
    victim = TimerTask(5, lambda: ran.append("victim"))
    killer = TimerTask(5, lambda: (ran.append("killer"), victim.cancel()))
    timer.add(killer)
    timer.add(victim)
    timer.advance_clock(5)
    assert ran == ["killer"]


def test_re_adding_a_pending_task_reschedules_it() -> None:
    clock, timer = make(start=0)
    rec = Recorder(clock)
    task = rec.task(10, 1)
    timer.add(task)
    task.delay_ms = 30
    timer.add(task)
    assert timer.size() == 1
    step(clock, timer, 50)
    assert rec.runs == [(1, 30)]


def test_a_task_can_reschedule_itself_from_run() -> None:
    clock, timer = make(start=0)
    times: list[int] = []

    class Periodic(TimerTask):
        def run(self) -> None:
            times.append(clock.now)
            if len(times) < 4:
                timer.add(self)

    timer.add(Periodic(7))
    step(clock, timer, 100)
    assert times == [7, 14, 21, 28]


def test_task_added_due_during_run_waits_for_the_next_advance() -> None:
    clock, timer = make(start=0)
    ran: list[str] = []
    follow = TimerTask(0, lambda: ran.append("follow"))
    timer.add(TimerTask(3, lambda: (ran.append("first"), timer.add(follow))))
    clock.now = 3
    timer.advance_clock(3)
    assert ran == ["first"]
    assert timer.next_expiration_ms() is not None
    timer.advance_clock(3)
    assert ran == ["first", "follow"]


def test_failing_task_does_not_stop_the_others() -> None:
    errors: list[tuple[TimerTask, Exception]] = []
    clock = FakeClock(0)
    timer = Timer(clock=clock, on_error=lambda t, e: errors.append((t, e)))
    ran: list[int] = []

    def boom() -> None:
        raise ValueError("boom")

    bad = TimerTask(5, boom)
    timer.add(bad)
    timer.add(TimerTask(5, lambda: ran.append(1)))
    timer.advance_clock(5)
    assert ran == [1]
    assert len(errors) == 1 and errors[0][0] is bad and isinstance(errors[0][1], ValueError)


def test_advance_clock_is_not_reentrant() -> None:
    _clock, timer = make(start=0)
    errors: list[Exception] = []
    timer._on_error = lambda t, e: errors.append(e)
    timer.add(TimerTask(1, lambda: timer.advance_clock(2)))
    timer.advance_clock(1)
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)


# -- stale wheel time -------------------------------------------------------------------------


def test_adding_after_a_long_idle_period_is_exact() -> None:
    clock, timer = make(start=0)
    rec = Recorder(clock)
    clock.now = 10_000_000  # nobody advanced the timer meanwhile
    task = rec.task(5, 1)
    timer.add(task)
    # Placed relative to the clock, not to the stale wheel time: straight into the 1 ms wheel.
    assert level_of(timer, task) == 0
    assert timer.next_expiration_ms() == 10_000_005
    timer.advance_clock(10_000_004)
    assert rec.runs == []
    clock.now = 10_000_005
    timer.advance_clock()  # defaults to the clock
    assert rec.runs == [(1, 10_000_005)]


def test_adding_while_a_due_bucket_is_unprocessed_is_not_early() -> None:
    clock, timer = make(start=0)
    rec = Recorder(clock)
    timer.add(rec.task(900, 1))  # a 400 ms overflow bucket at 800
    clock.now = 850  # the 800 bucket is due but nobody advanced
    timer.add(rec.task(30, 2))  # deadline 880, placed relative to the stale wheel time
    for now in range(851, 880):
        timer.advance_clock(now)
    assert rec.runs == []
    timer.advance_clock(880)
    assert [i for i, _ in rec.runs] == [2]
    timer.advance_clock(899)
    assert [i for i, _ in rec.runs] == [2]
    timer.advance_clock(900)
    assert [i for i, _ in rec.runs] == [2, 1]


def test_a_due_bucket_is_not_reused_for_a_later_round_before_it_is_flushed() -> None:
    clock, timer = make(start=0)
    rec = Recorder(clock)
    timer.add(rec.task(5, 1))  # 1 ms wheel, slot 5
    clock.now = 10  # due, not advanced yet
    # 25 would share slot 5 if the wheel were moved to 10 while the 5 bucket is still queued.
    timer.add(rec.task(15, 2))
    timer.advance_clock(10)
    assert rec.runs == [(1, 10)]
    step(clock, timer, 30)
    assert rec.runs == [(1, 10), (2, 25)]


# -- properties -------------------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(-5, 100_000)),
        st.tuples(st.just("add"), st.integers(0, 50)),
        st.tuples(st.just("cancel"), st.integers(0, 10_000)),
        st.tuples(st.just("advance"), st.integers(0, 30)),
        st.tuples(st.just("advance"), st.integers(0, 20_000)),
    ),
    max_size=300,
)


@settings(max_examples=300, deadline=None)
@given(
    ops=OPS,
    tick_ms=st.sampled_from([1, 1, 3, 10]),
    wheel_size=st.sampled_from([2, 5, 20]),
    start=st.integers(0, 10**9),
)
def test_property_each_live_task_runs_once_at_first_advance_after_deadline(
    ops: list[tuple[str, int]], tick_ms: int, wheel_size: int, start: int
) -> None:
    clock = FakeClock(start)
    timer = Timer(clock=clock, tick_ms=tick_ms, wheel_size=wheel_size)
    runs: dict[int, list[int]] = {}
    tasks: list[TimerTask] = []
    due: dict[int, int] = {}  # effective deadline: rounded up to the tick
    cancelled: set[int] = set()
    expected_run_at: dict[int, int] = {}

    def make_task(i: int, delay: int) -> TimerTask:
        return TimerTask(delay, lambda: runs.setdefault(i, []).append(clock.now))

    def advance(now: int) -> None:
        clock.now = now
        timer.advance_clock(now)
        for i, d in due.items():
            if i not in cancelled and i not in expected_run_at and d <= now:
                expected_run_at[i] = now

    for op, arg in ops:
        if op == "add":
            i = len(tasks)
            task = make_task(i, arg)
            tasks.append(task)
            deadline = clock.now + arg
            due[i] = -(-deadline // tick_ms) * tick_ms
            timer.add(task)
        elif op == "cancel" and tasks:
            i = arg % len(tasks)
            if i not in expected_run_at:
                cancelled.add(i)
            tasks[i].cancel()
        elif op == "advance":
            advance(clock.now + arg)
        pending = len(tasks) - len(cancelled) - len(expected_run_at)
        assert timer.size() == pending
    advance(clock.now + 200_000)
    assert timer.size() == 0 and timer.next_expiration_ms() is None
    for i in range(len(tasks)):
        if i in cancelled:
            assert i not in runs
        else:
            # Exactly once, never before the deadline, at the first advance past it.
            assert runs[i] == [expected_run_at[i]], (i, due[i], runs.get(i))
            assert runs[i][0] >= due[i]


def test_large_scale_random_delays_and_cancels() -> None:
    """200k tasks (delays up to an hour, half cancelled) driven event by event."""
    rng = random.Random(42)
    clock, timer = make(start=5)
    n = 200_000
    deadline = [0] * n
    ran_at = [-1] * n
    count = [0] * n

    class T(TimerTask):
        __slots__ = ("i",)

        def __init__(self, delay: int, i: int) -> None:
            super().__init__(delay)
            self.i = i

        def run(self) -> None:
            count[self.i] += 1
            ran_at[self.i] = clock.now

    tasks = []
    for i in range(n):
        d = rng.randrange(0, rng.choice((100, 30_000, 3_600_000)))
        deadline[i] = 5 + d
        t = T(d, i)
        tasks.append(t)
        timer.add(t)
    cancelled = set(rng.sample(range(n), n // 2))
    for i in cancelled:
        tasks[i].cancel()
    assert timer.size() == n - len(cancelled)
    assert timer.queued_buckets() <= 20 * timer.levels()
    drain(clock, timer)
    for i in range(n):
        if i in cancelled:
            assert count[i] == 0
        else:
            assert count[i] == 1 and ran_at[i] == deadline[i]


# -- asyncio driver ---------------------------------------------------------------------------


def test_async_driver_fires_tasks_with_real_time_and_stops_cleanly() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        timer = Timer()  # monotonic clock, same rate as the loop's
        driver = AsyncTimerDriver(timer, loop)
        driver.start()
        fired: dict[str, float] = {}
        added: dict[str, float] = {}
        done = asyncio.Event()

        def add(name: str, delay: int) -> TimerTask:
            added[name] = timer.now_ms()
            task = TimerTask(delay, lambda: (fired.setdefault(name, timer.now_ms()), check()))
            timer.add(task)
            return task

        def check() -> None:
            if {"a", "b", "c"} <= fired.keys():
                done.set()

        add("c", 50)
        assert driver.armed_at_ms is not None
        armed_for_c = driver.armed_at_ms
        add("b", 20)
        add("a", 5)  # an earlier bucket re-arms the single wake-up
        assert driver.armed_at_ms is not None and driver.armed_at_ms < armed_for_c
        cancelled = add("x", 10)
        cancelled.cancel()
        await asyncio.wait_for(done.wait(), timeout=2.0)
        for name, delay in (("a", 5), ("b", 20), ("c", 50)):
            assert fired[name] >= added[name] + delay - 0.01, (name, fired, added)
        assert "x" not in fired
        # Nothing pending: no wake-up armed, so no polling.
        assert timer.size() == 0 and driver.handle is None

        late = add("late", 10_000)
        handle = driver.handle
        assert handle is not None and not handle.cancelled()
        driver.stop()
        assert driver.handle is None and handle.cancelled() and not driver.running
        assert timer.on_schedule is None
        pending = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        assert pending == []
        assert late.is_pending  # stop() leaves tasks in the timer, unrun

    asyncio.run(scenario())
