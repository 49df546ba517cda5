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
