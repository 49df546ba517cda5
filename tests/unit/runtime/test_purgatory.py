"""Tests of the delayed-operation purgatory (odradek.runtime.purgatory), on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.runtime.purgatory import DelayedOperation, DelayedOperationPurgatory
from odradek.runtime.timer import AsyncTimerDriver, Timer


class FakeClock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Op(DelayedOperation):
    """Completes once ``state[key] >= needed`` for each key it waits on (like ISR acks)."""

    def __init__(
        self, delay_ms: int, state: dict[Hashable, int], needs: dict[Hashable, int]
    ) -> None:
        super().__init__(delay_ms)
        self.state = state
        self.needs = needs
        self.events: list[str] = []
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        if all(self.state.get(k, 0) >= n for k, n in self.needs.items()):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.events.append("expired-complete" if self.timed_out else "complete")

    def on_expiration(self) -> None:
        self.events.append("expiration")


def make(purge_interval: int = 1000) -> tuple[FakeClock, DelayedOperationPurgatory[Op]]:
    clock = FakeClock(0)
    return clock, DelayedOperationPurgatory("produce", Timer(clock=clock), purge_interval)


def advance(clock: FakeClock, purgatory: DelayedOperationPurgatory[Op], now: int) -> None:
    clock.now = now
    purgatory.advance_clock(now)


def test_completes_at_once_without_watching_or_timing() -> None:
    _clock, p = make()
    op = Op(100, {"p0": 1}, {"p0": 1})
    assert p.try_complete_else_watch(op, ["p0"]) is True
    assert op.is_completed and op.events == ["complete"]
    assert p.watched() == 0 and p.delayed() == 0 and p.num_watch_keys() == 0


def test_empty_keys_are_rejected() -> None:
    _clock, p = make()
    with pytest.raises(ValueError):
        p.try_complete_else_watch(Op(10, {}, {"a": 1}), [])


def test_second_try_after_watching_catches_a_racing_update() -> None:
    state: dict[Hashable, int] = {}

    class Racy(Op):
        def try_complete(self) -> bool:
            done = super().try_complete()
            state["p0"] = 1  # the awaited event lands between the two tries
            return done

    _clock, p = make()
    op = Racy(100, state, {"p0": 1})
    assert p.try_complete_else_watch(op, ["p0"]) is True
    assert op.tries == 2 and op.events == ["complete"]
    assert p.delayed() == 0  # never entered the timer


def test_complete_by_check_and_complete_cancels_the_timeout() -> None:
    clock, p = make()
    state: dict[Hashable, int] = {}
    op = Op(100, state, {"p0": 2})
    assert p.try_complete_else_watch(op, ["p0"]) is False
    assert p.watched() == 1 and p.delayed() == 1 and op.is_pending
    state["p0"] = 1
    assert p.check_and_complete("p0") == 0
    assert p.watched() == 1
    state["p0"] = 2
    assert p.check_and_complete("p0") == 1
    assert op.is_completed and not op.timed_out
    assert p.delayed() == 0 and not op.is_pending  # unlinked from its bucket at once
    assert p.watched() == 0 and p.num_watch_keys() == 0
    advance(clock, p, 1_000)
    assert op.events == ["complete"]  # the timeout never fires
    assert p.check_and_complete("p0") == 0


def test_complete_by_expiration_calls_on_expiration_once() -> None:
    clock, p = make()
    state: dict[Hashable, int] = {}
    op = Op(100, state, {"p0": 1})
    assert p.try_complete_else_watch(op, ["p0"]) is False
    advance(clock, p, 99)
    assert not op.is_completed and op.events == []
    advance(clock, p, 100)
    assert op.is_completed and op.timed_out
    # Kafka's order: forceComplete() -> onComplete(), then onExpiration().
    assert op.events == ["expired-complete", "expiration"]
    assert p.delayed() == 0
    # Late completion attempts change nothing.
    state["p0"] = 1
    assert op.force_complete() is False
    assert p.check_and_complete("p0") == 0
    advance(clock, p, 10_000)
    assert op.events == ["expired-complete", "expiration"]
    # The expired operation left the watch list when its key was checked.
    assert p.watched() == 0 and p.num_watch_keys() == 0


def test_only_the_first_force_complete_completes() -> None:
    op = Op(10, {}, {"a": 1})
    assert op.force_complete() is True
    assert op.force_complete() is False
    op.run()  # a timeout racing the completion
    assert op.events == ["complete"] and not op.timed_out


def test_completed_operation_is_removed_from_all_watch_lists_after_purge() -> None:
    _clock, p = make(purge_interval=1_000)
    state: dict[Hashable, int] = {}
    op = Op(100, state, {"a": 1, "b": 1, "c": 1})
    assert p.try_complete_else_watch(op, ["a", "b", "c"]) is False
    assert p.watched() == 3 and p.num_watch_keys() == 3
    state.update(a=1, b=1, c=1)
    assert p.check_and_complete("a") == 1
    # Kafka's lazy removal: the lists of "b" and "c" still hold the completed operation ...
    assert p.watched() == 2 and p.num_watch_keys() == 2
    # ... until a purge, which also drops the emptied watch lists.
    assert p.purge_completed() == 2
    assert p.watched() == 0 and p.num_watch_keys() == 0


def test_automatic_purge_keeps_watch_lists_bounded_when_ops_complete_early() -> None:
    clock, p = make(purge_interval=50)
    state: dict[Hashable, int] = {}
    peak = 0
    for i in range(5_000):
        key = f"p{i % 7}"
        op = Op(30_000, state, {key: i + 1, "other": 0})
        assert p.try_complete_else_watch(op, [key, "other"]) is False
        state[key] = i + 1
        assert p.check_and_complete(key) == 1
        peak = max(peak, p.watched())
        clock.now += 1
    # Without purging, "other" would hold all 5000 completed operations.
    assert peak <= 50 + 2 + 7
    assert p.delayed() == 0
    p.purge_completed()
    assert p.watched() == 0 and p.num_watch_keys() == 0


def count_sweeps(p: DelayedOperationPurgatory[Op]) -> list[int]:
    sweeps: list[int] = []
    original = p.purge_completed

    def counting() -> int:
        sweeps.append(p.watched())
        return original()

    p.purge_completed = counting  # type: ignore[method-assign]
    return sweeps


def test_single_key_operations_never_need_a_sweep() -> None:
    """check_and_complete removes them from their only list, so nothing lingers."""
    _clock, p = make(purge_interval=10)
    sweeps = count_sweeps(p)
    state: dict[Hashable, int] = {}
    ops = [Op(30_000, state, {i % 10: 1}) for i in range(2_000)]
    for i, op in enumerate(ops):
        p.try_complete_else_watch(op, [i % 10])
    for key in range(10):
        state[key] = 1
        assert p.check_and_complete(key) == 200
    assert sweeps == []
    assert p.watched() == 0 and p.delayed() == 0 and p.num_watch_keys() == 0


def test_sweeps_are_amortised_against_many_pending_operations() -> None:
    _clock, p = make(purge_interval=10)
    sweeps = count_sweeps(p)
    state: dict[Hashable, int] = {}
    for _ in range(500):
        p.try_complete_else_watch(Op(30_000, state, {"slow": 1}), ["slow"])
    peak = 0
    for i in range(3_000):
        op = Op(30_000, state, {f"k{i}": 1, "slow": 0})
        p.try_complete_else_watch(op, [f"k{i}", "slow"])
        state[f"k{i}"] = 1
        assert p.check_and_complete(f"k{i}") == 1
        peak = max(peak, p.watched())
    # A sweep walks every watch entry, so it waits until the lingering operations outnumber
    # the 500 pending ones: a few sweeps, not one per purge_interval completions ...
    assert 3 <= len(sweeps) <= 6
    # ... and memory stays within twice the pending operations.
    assert peak <= 2 * 500 + 2
    p.purge_completed()
    assert p.watched() == 500 and p.delayed() == 500


def test_pending_operations_are_not_purged() -> None:
    clock, p = make(purge_interval=5)
    state: dict[Hashable, int] = {}
    pending = [Op(1_000, state, {"slow": 1}) for _ in range(20)]
    for op in pending:
        p.try_complete_else_watch(op, ["slow"])
    for i in range(50):
        op = Op(1_000, state, {f"k{i}": 1, "slow": 0})
        p.try_complete_else_watch(op, [f"k{i}", "slow"])
        state[f"k{i}"] = 1
        p.check_and_complete(f"k{i}")
    p.purge_completed()
    assert p.watched() == 20 and p.delayed() == 20
    advance(clock, p, 1_000)
    assert all(op.events == ["expired-complete", "expiration"] for op in pending)
    assert p.delayed() == 0


def test_cancel_for_key_cancels_timeouts_without_completing() -> None:
    clock, p = make()
    ops = [Op(100, {}, {"gone": 1}) for _ in range(3)]
    for op in ops:
        p.try_complete_else_watch(op, ["gone"])
    assert p.cancel_for_key("gone") == ops
    assert p.delayed() == 0 and p.watched() == 0 and p.num_watch_keys() == 0
    advance(clock, p, 1_000)
    assert all(not op.is_completed and op.events == [] for op in ops)
    assert p.cancel_for_key("gone") == []


def test_shutdown_forgets_everything() -> None:
    clock, p = make()
    ops = [Op(100, {}, {f"k{i}": 1}) for i in range(4)]
    for i, op in enumerate(ops):
        p.try_complete_else_watch(op, [f"k{i}", "all"])
    p.shutdown()
    assert p.delayed() == 0 and p.watched() == 0
    advance(clock, p, 1_000)
    assert all(op.events == [] for op in ops)


def test_a_timer_cannot_be_shared_between_purgatories() -> None:
    timer = Timer(clock=FakeClock())
    DelayedOperationPurgatory[Op]("produce", timer)
    with pytest.raises(ValueError):
        DelayedOperationPurgatory[Op]("fetch", timer)


def test_reentrant_completion_watching_the_same_key() -> None:
    """on_complete may itself call into the purgatory (e.g. a response unblocks another op)."""
    _clock, p = make()
    state: dict[Hashable, int] = {}
    follow_up = Op(100, state, {"p0": 5})

    class Chained(Op):
        def on_complete(self) -> None:
            super().on_complete()
            p.try_complete_else_watch(follow_up, ["p0"])
            p.check_and_complete("p0")

    first = Chained(100, state, {"p0": 1})
    second = Op(100, state, {"p0": 1})
    p.try_complete_else_watch(first, ["p0"])
    p.try_complete_else_watch(second, ["p0"])
    state["p0"] = 1
    # The outer call completes `first`; the nested call from its on_complete completes `second`.
    assert p.check_and_complete("p0") == 1
    assert first.is_completed and second.is_completed and not follow_up.is_completed
    assert p.watched() == 1 and p.delayed() == 1  # only the follow-up remains
    state["p0"] = 5
    assert p.check_and_complete("p0") == 1
    assert p.watched() == 0 and p.delayed() == 0


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("op"), st.integers(0, 500), st.sets(st.integers(0, 4), min_size=1)),
            st.tuples(st.just("bump"), st.integers(0, 4), st.just(frozenset())),
            st.tuples(st.just("tick"), st.integers(0, 200), st.just(frozenset())),
        ),
        max_size=150,
    ),
    st.integers(1, 20),
)
def test_property_every_op_completes_exactly_once_and_expires_only_if_late(
    actions: list[tuple[str, int, frozenset[int]]], purge_interval: int
) -> None:
    clock, p = make(purge_interval=purge_interval)
    state: dict[Hashable, int] = {}
    ops: list[tuple[Op, int]] = []
    for kind, n, keys in actions:
        if kind == "op":
            needs: dict[Hashable, int] = {k: state.get(k, 0) + 1 for k in keys}
            op = Op(n, state, needs)
            ops.append((op, clock.now + n))
            p.try_complete_else_watch(op, list(keys))
        elif kind == "bump":
            state[n] = state.get(n, 0) + 1
            p.check_and_complete(n)
        else:
            advance(clock, p, clock.now + n)
        for op, deadline in ops:
            if op.timed_out:
                assert clock.now >= deadline
        assert p.delayed() == sum(1 for op, _ in ops if not op.is_completed)
    advance(clock, p, clock.now + 1_000)
    for op, _ in ops:
        assert op.events in (["complete"], ["expired-complete", "expiration"])
    p.purge_completed()
    assert p.watched() == 0 and p.num_watch_keys() == 0 and p.delayed() == 0


def test_purgatory_on_asyncio_driver_expires_and_completes_in_real_time() -> None:
    async def scenario() -> None:
        p = DelayedOperationPurgatory[Op]("fetch", Timer())
        driver = AsyncTimerDriver(p.timer)
        driver.start()
        state: dict[Hashable, int] = {}
        expiring = Op(15, state, {"quiet": 1})
        completing = Op(5_000, state, {"busy": 1})
        start = p.timer.now_ms()
        p.try_complete_else_watch(expiring, ["quiet"])
        p.try_complete_else_watch(completing, ["busy"])
        await asyncio.sleep(0.005)
        state["busy"] = 1
        assert p.check_and_complete("busy") == 1
        while not expiring.is_completed:
            await asyncio.sleep(0.005)
            assert p.timer.now_ms() - start < 2_000
        assert p.timer.now_ms() - start >= 15
        assert expiring.events == ["expired-complete", "expiration"]
        assert completing.events == ["complete"]
        assert p.delayed() == 0 and driver.handle is None
        driver.stop()

    asyncio.run(scenario())
