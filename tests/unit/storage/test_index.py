"""OffsetIndex / TimeIndex: Kafka's binary entry formats, sparse lookups, truncation, sanity."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.index import (
    CorruptIndexError,
    IndexFullError,
    InvalidOffsetError,
    OffsetIndex,
    TimeIndex,
)

BASE = 1000


def offset_index(tmp_path: Path, max_size: int = 10 * 1024 * 1024) -> OffsetIndex:
    return OffsetIndex(tmp_path / f"{BASE:020d}.index", BASE, max_size)


def time_index(tmp_path: Path, max_size: int = 10 * 1024 * 1024) -> TimeIndex:
    return TimeIndex(tmp_path / f"{BASE:020d}.timeindex", BASE, max_size)


class TestOffsetIndex:
    def test_file_holds_big_endian_relative_offset_and_position(self, tmp_path: Path) -> None:
        idx = offset_index(tmp_path)
        idx.append(1005, 4200)
        idx.append(1010, 9000)
        assert idx.path.read_bytes() == struct.pack(">IIII", 5, 4200, 10, 9000)

    def test_lookup_returns_largest_entry_not_above_target(self, tmp_path: Path) -> None:
        idx = offset_index(tmp_path)
        for rel, pos in [(3, 100), (7, 200), (20, 300)]:
            idx.append(BASE + rel, pos)
        assert idx.lookup(BASE - 5) == (BASE, 0)
        assert idx.lookup(BASE + 2) == (BASE, 0)
        assert idx.lookup(BASE + 3) == (BASE + 3, 100)
        assert idx.lookup(BASE + 6) == (BASE + 3, 100)
        assert idx.lookup(BASE + 7) == (BASE + 7, 200)
        assert idx.lookup(BASE + 19) == (BASE + 7, 200)
        assert idx.lookup(BASE + 10**9) == (BASE + 20, 300)
        assert idx.last_offset == BASE + 20

    def test_empty_index_lookup_is_base_offset_position_zero(self, tmp_path: Path) -> None:
        idx = offset_index(tmp_path)
        assert idx.lookup(BASE + 50) == (BASE, 0)
        assert idx.last_offset == BASE
        assert idx.entries == 0

    def test_append_must_increase(self, tmp_path: Path) -> None:
        idx = offset_index(tmp_path)
        idx.append(BASE + 5, 10)
        with pytest.raises(InvalidOffsetError):
            idx.append(BASE + 5, 20)
        with pytest.raises(InvalidOffsetError):
            idx.append(BASE + 4, 20)
        with pytest.raises(InvalidOffsetError):
            idx.append(BASE - 1 + 2**31 + 10, 20)  # relative offset overflow

    def test_segment_index_bytes_caps_entries(self, tmp_path: Path) -> None:
        idx = offset_index(tmp_path, max_size=8 * 3 + 5)  # rounds down to 3 entries
        assert idx.max_entries == 3
        for i in range(3):
            assert not idx.is_full()
            idx.append(BASE + i, i * 10)
        assert idx.is_full()
        with pytest.raises(IndexFullError):
            idx.append(BASE + 9, 90)
        assert idx.path.stat().st_size == 24  # never preallocated: only real entries

    @pytest.mark.parametrize(("target", "remaining"), [
        (BASE + 7, [3]),        # entry at exactly the target goes
        (BASE + 8, [3, 7]),     # entries below the target stay
        (BASE + 2, []),
        (BASE + 100, [3, 7, 20]),
        (BASE - 1, []),
    ])
    def test_truncate_to(self, tmp_path: Path, target: int, remaining: list[int]) -> None:
        idx = offset_index(tmp_path)
        for rel in (3, 7, 20):
            idx.append(BASE + rel, rel * 10)
        idx.truncate_to(target)
        assert [idx.entry(i)[0] - BASE for i in range(idx.entries)] == remaining
        assert idx.path.stat().st_size == 8 * len(remaining)
        reloaded = offset_index(tmp_path)
        assert reloaded.entries == len(remaining)
        assert reloaded.last_offset == BASE + (remaining[-1] if remaining else 0)
        # appends continue after truncation
        reloaded.append(BASE + 500, 5000)
        assert reloaded.lookup(BASE + 501) == (BASE + 500, 5000)

    def test_release_and_reload(self, tmp_path: Path) -> None:
        idx = offset_index(tmp_path)
        idx.append(BASE + 1, 11)
        assert idx.has_open_file
        idx.release()
        assert not idx.has_open_file and not idx.loaded
        assert idx.lookup(BASE + 1) == (BASE + 1, 11)
        idx.append(BASE + 2, 22)
        assert offset_index(tmp_path).entries == 2

    def test_size_not_a_multiple_is_corrupt(self, tmp_path: Path) -> None:
        path = tmp_path / f"{BASE:020d}.index"
        path.write_bytes(struct.pack(">II", 1, 1) + b"\x00\x01")
        with pytest.raises(CorruptIndexError):
            offset_index(tmp_path).load()

    @pytest.mark.parametrize("entries", [
        [(5, 10), (3, 20)],      # offsets go back
        [(5, 10), (5, 20)],      # offsets repeat
        [(5, 30), (6, 20)],      # positions go back
    ])
    def test_sanity_check_detects_unsorted(self, tmp_path: Path,
                                           entries: list[tuple[int, int]]) -> None:
        path = tmp_path / f"{BASE:020d}.index"
        path.write_bytes(b"".join(struct.pack(">II", *e) for e in entries))
        idx = offset_index(tmp_path)
        with pytest.raises(CorruptIndexError):
            idx.sanity_check()

    def test_sanity_check_detects_position_past_log_end(self, tmp_path: Path) -> None:
        idx = offset_index(tmp_path)
        idx.append(BASE + 1, 500)
        idx.sanity_check(log_size=501)
        with pytest.raises(CorruptIndexError):
            idx.sanity_check(log_size=500)

    def test_lookup_position(self, tmp_path: Path) -> None:
        idx = offset_index(tmp_path)
        for rel, pos in [(3, 100), (7, 200), (20, 300)]:
            idx.append(BASE + rel, pos)
        assert idx.lookup_position(99) == (BASE, 0)
        assert idx.lookup_position(100) == (BASE + 3, 100)
        assert idx.lookup_position(299) == (BASE + 7, 200)
        assert idx.lookup_position(10**6) == (BASE + 20, 300)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.integers(1, 50), min_size=0, max_size=60), st.data())
    def test_lookup_matches_brute_force(self, tmp_path_factory: pytest.TempPathFactory,
                                        gaps: list[int], data: st.DataObject) -> None:
        idx = OffsetIndex(tmp_path_factory.mktemp("idx") / "x.index", BASE)
        rel, entries = 0, []
        for i, gap in enumerate(gaps):
            rel += gap
            entries.append((rel, i * 7))
            idx.append(BASE + rel, i * 7)
        near = [e[0] + d for e in entries for d in (-1, 0, 1)]
        target_rel = data.draw(st.sampled_from(near) if near else st.integers(-5, 5))
        below = [e for e in entries if e[0] <= target_rel]
        expected = (BASE + below[-1][0], below[-1][1]) if below else (BASE, 0)
        assert idx.lookup(BASE + target_rel) == expected


class TestTimeIndex:
    def test_file_holds_timestamp_and_relative_offset(self, tmp_path: Path) -> None:
        idx = time_index(tmp_path)
        idx.maybe_append(1_600_000_000_000, BASE + 4)
        assert idx.path.read_bytes() == struct.pack(">qI", 1_600_000_000_000, 4)

    def test_only_larger_timestamps_are_appended(self, tmp_path: Path) -> None:
        idx = time_index(tmp_path)
        idx.maybe_append(100, BASE + 1)
        idx.maybe_append(100, BASE + 2)  # same timestamp: ignored (roll/close re-offer it)
        assert idx.entries == 1
        with pytest.raises(InvalidOffsetError):
            idx.maybe_append(90, BASE + 3)
        with pytest.raises(InvalidOffsetError):
            idx.maybe_append(200, BASE)  # offset goes back
        idx.maybe_append(200, BASE + 5)
        assert idx.last_entry() == (200, BASE + 5)

    def test_lookup_finds_the_last_entry_at_or_before_the_timestamp(self, tmp_path: Path) -> None:
        idx = time_index(tmp_path)
        for ts, rel in [(100, 1), (200, 5), (300, 9)]:
            idx.maybe_append(ts, BASE + rel)
        assert idx.lookup(50) == (-1, BASE)
        assert idx.lookup(100) == (100, BASE + 1)
        assert idx.lookup(199) == (100, BASE + 1)
        assert idx.lookup(200) == (200, BASE + 5)
        assert idx.lookup(250) == (200, BASE + 5)
        assert idx.lookup(300) == (300, BASE + 9)
        assert idx.lookup(10**15) == (300, BASE + 9)

    def test_full_reserves_a_slot_for_the_roll_entry(self, tmp_path: Path) -> None:
        idx = time_index(tmp_path, max_size=36)  # 3 entries
        idx.maybe_append(1, BASE)
        idx.maybe_append(2, BASE + 1)
        assert idx.is_full()
        with pytest.raises(IndexFullError):
            idx.maybe_append(3, BASE + 2)
        idx.maybe_append(3, BASE + 2, skip_full_check=True)
        assert idx.entries == 3

    @pytest.mark.parametrize(("target", "remaining"), [
        (BASE + 5, [1]), (BASE + 6, [1, 5]), (BASE, []), (BASE + 100, [1, 5, 9]),
    ])
    def test_truncate_to(self, tmp_path: Path, target: int, remaining: list[int]) -> None:
        idx = time_index(tmp_path)
        for ts, rel in [(100, 1), (200, 5), (300, 9)]:
            idx.maybe_append(ts, BASE + rel)
        idx.truncate_to(target)
        assert [idx.entry(i)[1] - BASE for i in range(idx.entries)] == remaining
        assert time_index(tmp_path).entries == len(remaining)

    def test_last_entry_reads_only_the_tail(self, tmp_path: Path) -> None:
        idx = time_index(tmp_path)
        idx.maybe_append(100, BASE + 1)
        idx.maybe_append(200, BASE + 2)
        fresh = time_index(tmp_path)
        assert fresh.last_entry() == (200, BASE + 2)
        assert not fresh.loaded

    def test_corrupt_time_index(self, tmp_path: Path) -> None:
        path = tmp_path / f"{BASE:020d}.timeindex"
        path.write_bytes(struct.pack(">qI", 300, 1) + struct.pack(">qI", 200, 2))
        with pytest.raises(CorruptIndexError):
            time_index(tmp_path).sanity_check()
        path.write_bytes(b"\x00" * 13)
        with pytest.raises(CorruptIndexError):
            time_index(tmp_path).load()
        with pytest.raises(CorruptIndexError):
            time_index(tmp_path).last_entry()

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.integers(1, 100), st.integers(0, 5)), max_size=60), st.data())
    def test_lookup_matches_brute_force(self, tmp_path_factory: pytest.TempPathFactory,
                                        steps: list[tuple[int, int]], data: st.DataObject
                                        ) -> None:
        idx = TimeIndex(tmp_path_factory.mktemp("tidx") / "x.timeindex", BASE)
        ts, rel, entries = 0, 0, []
        for dt, drel in steps:
            ts, rel = ts + dt, rel + drel
            entries.append((ts, BASE + rel))
            idx.maybe_append(ts, BASE + rel)
        near = [e[0] + d for e in entries for d in (-1, 0, 1)]
        target = data.draw(st.sampled_from(near) if near else st.integers(-10, 10))
        below = [e for e in entries if e[0] <= target]
        assert idx.lookup(target) == (below[-1] if below else (-1, BASE))
