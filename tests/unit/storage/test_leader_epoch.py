"""LeaderEpochFileCache (KIP-101): Kafka's assignment rules, OffsetsForLeaderEpoch, truncation,
persistence in leader-epoch-checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.storage.leader_epoch import LeaderEpochFileCache


def cache(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochFileCache:
    c = LeaderEpochFileCache(tmp_path)
    for epoch, offset in entries:
        c.assign(epoch, offset)
    return c


def test_assign_appends_new_epochs_and_persists(tmp_path: Path) -> None:
    c = cache(tmp_path, (0, 0), (2, 10), (5, 25))
    assert c.entries() == [(0, 0), (2, 10), (5, 25)]
    assert c.latest_epoch == 5
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 10\n5 25\n"
    assert LeaderEpochFileCache(tmp_path).entries() == [(0, 0), (2, 10), (5, 25)]


def test_same_epoch_is_a_no_op_unless_the_offset_is_smaller(tmp_path: Path) -> None:
    c = cache(tmp_path, (1, 10))
    assert not c.assign(1, 15)
    assert c.entries() == [(1, 10)]
    assert c.assign(1, 5)
    assert c.entries() == [(1, 5)]


def test_non_monotonic_entries_are_truncated(tmp_path: Path) -> None:
    c = cache(tmp_path, (1, 10), (2, 20), (3, 30))
    c.assign(2, 25)  # an older epoch again: everything with epoch >= 2 goes
    assert c.entries() == [(1, 10), (2, 25)]
    c.assign(4, 15)  # a smaller start offset: entries starting at >= 15 go
    assert c.entries() == [(1, 10), (4, 15)]
    assert LeaderEpochFileCache(tmp_path).entries() == [(1, 10), (4, 15)]


def test_invalid_entries(tmp_path: Path) -> None:
    c = cache(tmp_path)
    with pytest.raises(ValueError):
        c.assign(-1, 0)
    with pytest.raises(ValueError):
        c.assign(0, -5)


@pytest.mark.parametrize(("requested", "expected"), [
    (-1, (-1, -1)),     # UNDEFINED_EPOCH
    (6, (6, 100)),      # the latest epoch: the log end offset
    (7, (-1, -1)),      # newer than anything known
    (0, (0, 10)),       # older than the first epoch: the first epoch's start offset
    (1, (1, 20)),       # known epoch: the start of the next one
    (2, (1, 20)),       # unknown epoch in between: previous epoch, start of the next
    (3, (3, 40)),
    (4, (3, 40)),
])
def test_end_offset_for(tmp_path: Path, requested: int, expected: tuple[int, int]) -> None:
    c = cache(tmp_path, (1, 10), (3, 20), (6, 40))
    assert c.end_offset_for(requested, 100) == expected


def test_end_offset_for_empty_cache(tmp_path: Path) -> None:
    assert cache(tmp_path).end_offset_for(3, 50) == (-1, -1)


def test_truncate_from_end(tmp_path: Path) -> None:
    c = cache(tmp_path, (1, 10), (3, 20), (6, 40))
    c.truncate_from_end(41)
    assert c.entries() == [(1, 10), (3, 20), (6, 40)]
    c.truncate_from_end(40)
    assert c.entries() == [(1, 10), (3, 20)]
    c.truncate_from_end(5)
    assert c.entries() == []
    assert LeaderEpochFileCache(tmp_path).entries() == []


def test_truncate_from_start(tmp_path: Path) -> None:
    c = cache(tmp_path, (1, 10), (3, 20), (6, 40))
    c.truncate_from_start(5)
    assert c.entries() == [(1, 10), (3, 20), (6, 40)]
    c.truncate_from_start(25)
    assert c.entries() == [(3, 25), (6, 40)]
    c.truncate_from_start(40)
    assert c.entries() == [(6, 40)]
    assert LeaderEpochFileCache(tmp_path).entries() == [(6, 40)]


def test_epoch_for_offset(tmp_path: Path) -> None:
    c = cache(tmp_path, (1, 10), (3, 20))
    assert c.epoch_for_offset(5) is None
    assert c.epoch_for_offset(10) == 1
    assert c.epoch_for_offset(19) == 1
    assert c.epoch_for_offset(1000) == 3
    assert c.previous_epoch(3) == 1
    assert c.earliest_entry() == (1, 10)


def test_clear_empties_the_cache_and_its_checkpoint(tmp_path: Path) -> None:
    c = cache(tmp_path, (1, 10))
    c.clear()
    assert c.entries() == [] and c.latest_epoch is None
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n0\n"
