"""The simulation loop (odradek.sim.loop): virtual time that jumps, one deterministic order,
no real I/O."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.sim.loop import NotSimulated, SimLoop, SimulationDeadlock
from odradek.sim.simulation import Simulation

pytestmark = pytest.mark.sim


def run(main, start: float = 0.0):  # type: ignore[no-untyped-def]
    sim = Simulation(seed=1, start=start)
    return sim, sim.run(main)


def test_a_ten_minute_sleep_takes_no_wall_time() -> None:
    async def main(sim: Simulation) -> float:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        t0 = loop.time()
        await asyncio.sleep(600)
        return loop.time() - t0

    began = time.perf_counter()
    sim, elapsed = run(main)
    assert elapsed == 600.0
    assert sim.now == 600.0
    assert time.perf_counter() - began < 1.0


def test_deadlines_beyond_a_day_are_exact() -> None:
    # asyncio caps one select() at a day (MAXIMUM_SELECT_TIMEOUT); the clock still lands on
    # the deadline exactly
    async def main(sim: Simulation) -> float:
        await asyncio.sleep(3 * 86400 + 0.25)
        return sim.now

    _, now = run(main, start=12345.5)
    assert now == 3 * 86400 + 0.25


def test_timeouts_fire_at_their_deadline() -> None:
    async def main(sim: Simulation) -> float:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), 5)
        return sim.now

    assert run(main)[1] == 5.0


def test_a_timeout_does_not_fire_before_the_work_it_bounds() -> None:
    # looptime needs no-op cycles for this; here time only moves when nothing is ready
    async def main(sim: Simulation) -> float:
        async with asyncio.timeout(9):
            await asyncio.sleep(1)
        return sim.now

    assert run(main)[1] == 1.0


def test_a_timer_run_early_moves_the_clock_to_its_deadline() -> None:
    # asyncio runs a timer up to its clock resolution early when other callbacks are ready;
    # were the clock left behind, waiting out the remaining 2e-14 s would never end (a
    # producer's sender looped so in `odradek sim --seed 4`)
    async def main(sim: Simulation) -> tuple[int, bool]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(7.649872264736745)
        deadline = loop.time() + 2.3e-14
        busy = [True]

        async def spin() -> None:  # keeps a callback ready at every iteration
            while busy[0]:
                await asyncio.sleep(0)
        spinner = asyncio.ensure_future(spin())
        waits = 0
        while loop.time() < deadline and waits < 100:
            waits += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.Event().wait(), deadline - loop.time())
        busy[0] = False
        await spinner
        return waits, loop.time() >= deadline

    assert run(main)[1] == (1, True)


def test_equal_deadlines_fire_in_the_order_they_were_set() -> None:
    async def main(sim: Simulation) -> list[int]:
        loop = asyncio.get_running_loop()
        fired: list[int] = []
        done = loop.create_future()
        for i in range(200):
            loop.call_at(10.0, fired.append, i)
        loop.call_at(10.0, done.set_result, None)
        await done
        return fired

    assert run(main)[1] == list(range(200))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=60))
def test_timers_fire_by_deadline_then_insertion(delays_ms: list[int]) -> None:
    async def main(sim: Simulation) -> list[tuple[int, float]]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[int, float]] = []
        for i, d in enumerate(delays_ms):
            loop.call_later(d / 1000, lambda i=i: fired.append((i, loop.time())))
        await asyncio.sleep(1)
        return fired

    fired = run(main)[1]
    expected = sorted(range(len(delays_ms)), key=lambda i: (delays_ms[i], i))
    assert [i for i, _ in fired] == expected
    assert all(t == delays_ms[i] / 1000 for i, t in fired)


def test_tasks_interleave_the_same_way_every_run() -> None:
    async def main(sim: Simulation) -> list[str]:
        trace: list[str] = []
        rng = sim.random.fork("workload")

        async def worker(name: str) -> None:
            for step in range(20):
                trace.append(f"{name}{step}")
                await asyncio.sleep(rng.choice([0, 0.001, 0.002]))

        await asyncio.gather(*(worker(n) for n in "abcde"))
        return trace

    assert run(main)[1] == run(main)[1]


def test_to_thread_runs_on_the_loop_thread() -> None:
    async def main(sim: Simulation) -> tuple[int, int, float]:
        value = await asyncio.to_thread(lambda: threading.get_ident())
        with pytest.raises(ZeroDivisionError):
            await asyncio.get_running_loop().run_in_executor(None, lambda: 1 // 0)
        return value, threading.get_ident(), sim.now

    worker, loop_thread, now = run(main)[1]
    assert worker == loop_thread
    assert now == 0.0


def test_real_io_is_refused_loudly() -> None:
    async def main(sim: Simulation) -> list[str]:
        loop = asyncio.get_running_loop()
        errors: list[str] = []
        # plain TCP goes onto the simulated network (nobody listens there: refused); TLS
        # and real sockets do not exist
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("localhost", 9092)
        for attempt in (lambda: asyncio.open_connection("localhost", 9092,
                                                        ssl=ssl.create_default_context()),
                        lambda: asyncio.start_server(lambda r, w: None, "localhost", 0),
                        lambda: loop.getaddrinfo("localhost", 80)):
            with pytest.raises(NotSimulated) as info:
                await attempt()
            errors.append(str(info.value))
        with pytest.raises(NotSimulated):
            loop.add_reader(0, print)
        failure: list[BaseException] = []

        def other_thread() -> None:
            try:
                loop.call_soon_threadsafe(print)
            except NotSimulated as exc:
                failure.append(exc)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert len(failure) == 1
        return errors

    errors = run(main)[1]
    assert all("not simulated" in e for e in errors)


def test_waiting_forever_is_a_deadlock_not_a_hang() -> None:
    async def main(sim: Simulation) -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(SimulationDeadlock):
        run(main)
