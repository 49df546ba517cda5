"""server/gc_freeze.py: many long-lived partitions go to the permanent GC generation."""

from __future__ import annotations

import gc

import pytest

from odradek.server import gc_freeze
from odradek.server.gc_freeze import FREEZE_MIN_PARTITIONS, freeze_long_lived, should_freeze


def test_only_many_partitions_are_worth_a_freeze() -> None:
    assert not should_freeze(FREEZE_MIN_PARTITIONS - 1)
    assert should_freeze(FREEZE_MIN_PARTITIONS)
    assert should_freeze(5, threshold=5)


def test_a_process_odradek_does_not_own_is_never_frozen(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setattr(gc_freeze, "_process_owned", False)  # e.g. a user's test process
    gc.unfreeze()
    assert not freeze_long_lived(FREEZE_MIN_PARTITIONS * 10, collect=False, reason="test")
    assert gc.get_freeze_count() == 0


def test_freeze_moves_tracked_objects_to_the_permanent_generation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gc_freeze, "_process_owned", True)
    gc.unfreeze()
    try:
        assert not freeze_long_lived(10, collect=False, reason="test")
        assert gc.get_freeze_count() == 0
        kept = [[i] for i in range(1000)]
        assert freeze_long_lived(FREEZE_MIN_PARTITIONS, collect=True, reason="test")
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()


def test_paused_gc_only_in_an_owned_process_and_nested_pauses_leave_it_to_the_outermost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from odradek.server.gc_freeze import paused_gc
    assert gc.isenabled()
    monkeypatch.setattr(gc_freeze, "_process_owned", False)
    with paused_gc():
        assert gc.isenabled()  # a user's process: untouched
    monkeypatch.setattr(gc_freeze, "_process_owned", True)
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause did not re-enable it
    assert gc.isenabled()
    with pytest.raises(ValueError), paused_gc():
        raise ValueError("an exception still re-enables it")
    assert gc.isenabled()


def test_an_awaiting_pause_gets_the_gc_back_after_its_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from odradek.server.gc_freeze import paused_gc
    monkeypatch.setattr(gc_freeze, "_process_owned", True)

    async def stuck() -> list[bool]:
        seen = []
        with paused_gc(limit_s=0.05):
            seen.append(gc.isenabled())
            await asyncio.sleep(0.2)  # (a controller event waiting on ZooKeeper)
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())
        return seen
    try:
        assert asyncio.run(stuck()) == [False, True, True]
    finally:
        gc.enable()
