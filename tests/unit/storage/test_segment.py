"""LogSegment: appends, sparse index entries, reads as file regions, timestamps, recovery,
truncation and lazily opened, bounded file handles."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from odradek.protocol.records import (
    build_batch,
    check_batch,
    iter_headers,
    read_header,
)
from odradek.storage.index import OffsetIndex
from odradek.storage.segment import FileHandleCache, LogSegment

BASE = 100


def batch(offset: int, n: int = 1, ts: int = 1000, value_size: int = 50) -> bytes:
    records = [(f"k{offset + i}".encode(), bytes([65 + i % 26]) * value_size) for i in range(n)]
    return build_batch(records, base_offset=offset, timestamp_ms=ts)


def new_segment(tmp_path: Path, **kwargs: object) -> LogSegment:
    kwargs.setdefault("index_interval_bytes", 0)
    return LogSegment.create(tmp_path, BASE, **kwargs)  # type: ignore[arg-type]


def fill(segment: LogSegment, count: int, per_batch: int = 1, start_ts: int = 1000
         ) -> list[bytes]:
    """Append `count` single-append batches with increasing offsets and timestamps."""
    out = []
    offset = segment.base_offset
    for i in range(count):
        data = batch(offset, per_batch, ts=start_ts + i * 10)
        segment.append(offset + per_batch - 1, start_ts + i * 10, offset + per_batch - 1, data)
        out.append(data)
        offset += per_batch
    return out


def test_create_makes_kafka_named_files(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000100.index", "00000000000000000100.log",
        "00000000000000000100.timeindex"]
    assert seg.size == 0
    assert seg.read_next_offset() == BASE


def test_append_writes_batches_verbatim_and_indexes_every_interval(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, index_interval_bytes=200)
    batches = fill(seg, 10)
    assert seg.log_path.read_bytes() == b"".join(batches)
    # Kafka adds an entry when more than index.interval.bytes were appended since the last one
    size = len(batches[0])
    expected, since = [], 0
    for i in range(10):
        if since > 200:
            expected.append((BASE + i, i * size))
            since = 0
        since += size
    idx = seg.offset_index
    assert [idx.entry(i) for i in range(idx.entries)] == expected
    assert idx.entries > 0
    assert seg.read_next_offset() == BASE + 10


def test_translate_offset_scans_headers_from_the_index(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, index_interval_bytes=300)
    batches = fill(seg, 12, per_batch=3)
    positions = [sum(len(b) for b in batches[:i]) for i in range(12)]
    for i in range(12):
        for off in range(BASE + 3 * i, BASE + 3 * i + 3):
            found = seg.translate_offset(off)
            assert found is not None
            assert (found.base_offset, found.position, found.size) == (
                BASE + 3 * i, positions[i], len(batches[i]))
    assert seg.translate_offset(BASE + 36) is None
    assert seg.translate_offset(0).position == 0


def test_read_returns_whole_batches_within_max_size(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, index_interval_bytes=150)
    batches = fill(seg, 8)
    size = len(batches[0])
    region = seg.read(BASE + 2, size * 3 + size // 2)
    assert region is not None
    assert (region.position, region.size) == (2 * size, 3 * size)
    assert region.read_bytes() == b"".join(batches[2:5])
    assert os.pread(region.fileno(), region.size, region.position) == region.read_bytes()


def test_min_one_message_returns_oversized_first_batch_whole(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    big = batch(BASE, 5, value_size=400)
    seg.append(BASE + 4, 1000, BASE + 4, big)
    seg.append(BASE + 5, 1000, BASE + 5, batch(BASE + 5))
    region = seg.read(BASE, 10, min_one_message=True)
    assert region is not None and region.read_bytes() == big
    region = seg.read(BASE, 10, min_one_message=False)
    assert region is not None and region.size == 0


def test_read_respects_max_position(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    batches = fill(seg, 5)
    size = len(batches[0])
    region = seg.read(BASE, 10**6, max_position=3 * size)
    assert region is not None and region.read_bytes() == b"".join(batches[:3])
    region = seg.read(BASE + 3, 10**6, max_position=3 * size)
    assert region is not None and region.size == 0
    assert seg.read(BASE + 5, 10**6) is None


def test_find_offset_by_timestamp_finds_the_record_inside_a_batch(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    from odradek.protocol.records import Record
    recs = [Record(0, 1000 + 10 * i, b"k", b"v") for i in range(5)]
    data = build_batch(recs, base_offset=BASE)
    seg.append(BASE + 4, 1040, BASE + 4, data)
    recs2 = [Record(0, 2000 + 10 * i, b"k", b"v") for i in range(5)]
    seg.append(BASE + 9, 2040, BASE + 9, build_batch(recs2, base_offset=BASE + 5))
    assert seg.find_offset_by_timestamp(1000) == (1000, BASE, -1)
    assert seg.find_offset_by_timestamp(1015)[:2] == (1020, BASE + 2)
    assert seg.find_offset_by_timestamp(1041)[:2] == (2000, BASE + 5)
    assert seg.find_offset_by_timestamp(2040)[:2] == (2040, BASE + 9)
    assert seg.find_offset_by_timestamp(2041) is None
    assert seg.find_offset_by_timestamp(0, starting_offset=BASE + 3)[:2] == (1030, BASE + 3)


def test_recover_truncates_a_torn_tail_and_rebuilds_indexes(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, index_interval_bytes=100)
    batches = fill(seg, 6)
    whole = b"".join(batches)
    with open(seg.log_path, "r+b") as f:
        f.truncate(len(whole) - 7)
    seg.index_path.unlink()
    seg.close_handles()
    fresh = LogSegment(tmp_path, BASE, index_interval_bytes=100)
    seen: list[int] = []
    truncated = fresh.recover(on_batch=lambda h: seen.append(h.base_offset))
    assert truncated == len(batches[-1]) - 7
    assert seen == [BASE + i for i in range(5)]
    assert fresh.log_path.read_bytes() == b"".join(batches[:5])
    assert fresh.read_next_offset() == BASE + 5
    idx = fresh.offset_index
    assert idx.entries > 0
    for i in range(idx.entries):
        off, pos = idx.entry(i)
        header = read_header(whole, pos)
        assert header.last_offset == off
    assert fresh.time_index.last_entry() == (1040, BASE + 4)


def test_recover_stops_at_a_crc_error(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    batches = fill(seg, 5)
    pos = len(batches[0]) * 2 + 40  # inside the records of the third batch
    with open(seg.log_path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert seg.recover() == len(batches[0]) * 3
    assert seg.size == len(batches[0]) * 2
    assert seg.read_next_offset() == BASE + 2


def test_recover_rejects_offsets_that_go_backwards(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    seg.append(BASE + 4, 1, BASE + 4, batch(BASE + 4))
    seg.append(BASE + 4, 1, BASE + 4, batch(BASE + 4))  # a bogus duplicate offset
    assert seg.recover() == len(batch(BASE + 4))
    assert seg.read_next_offset() == BASE + 5


def test_truncate_to(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, index_interval_bytes=100)
    batches = fill(seg, 6, per_batch=2)
    size = len(batches[0])
    assert seg.truncate_to(BASE + 7) == 3 * size  # offset 7 is in the 4th batch (6-7): goes whole
    assert seg.size == 3 * size
    assert seg.read_next_offset() == BASE + 6
    assert seg.offset_index.last_offset < BASE + 7
    assert seg.time_index.last_entry()[1] < BASE + 7
    assert seg.max_timestamp_so_far == 1020
    assert seg.truncate_to(BASE + 100) == 0
    assert seg.truncate_to(BASE) == 3 * size
    assert seg.size == 0 and seg.offset_index.entries == 0 and seg.time_index.entries == 0


def test_roll_entry_and_kafka_shaped_files(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, index_interval_bytes=10**6)
    fill(seg, 3)
    assert seg.time_index.entries == 0  # interval not reached
    seg.on_become_inactive()
    assert seg.time_index.last_entry() == (1020, BASE + 2)
    assert seg.time_index_path.stat().st_size == 12
    assert seg.index_path.stat().st_size == 0


def test_handles_are_lazy_and_bounded(tmp_path: Path) -> None:
    cache = FileHandleCache(max_open=2)
    segments = []
    for i in range(5):
        seg = LogSegment.create(tmp_path, i * 10, handle_cache=cache, index_interval_bytes=0)
        seg.append(i * 10, 1000, i * 10, batch(i * 10))
        segments.append(seg)
        assert len(cache) <= 2
    assert sum(s.has_open_handles for s in segments) <= 2
    reopened = LogSegment(tmp_path, 0, handle_cache=cache)
    assert not reopened.has_open_handles  # opening a segment reads nothing
    assert reopened.size == len(batch(0))
    region = reopened.read(0, 1000)
    assert region is not None and reopened.has_open_handles
    for s in segments[1:]:
        s.read(s.base_offset, 1000)
    assert not reopened.has_open_handles  # evicted by the LRU...
    assert region.read_bytes() == batch(0)  # ...but the region still reads


def test_region_survives_segment_deletion(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    data = b"".join(fill(seg, 3))
    region = seg.read(BASE, 10**6)
    seg.delete()
    assert not seg.log_path.exists()
    assert region is not None and region.read_bytes() == data


def test_lazy_index_load_rebuilds_a_corrupt_index(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, index_interval_bytes=100)
    batches = fill(seg, 6)
    seg.close()
    seg.index_path.write_bytes(struct.pack(">IIII", 5, 400, 2, 100))  # unsorted
    fresh = LogSegment(tmp_path, BASE, index_interval_bytes=100)
    found = fresh.translate_offset(BASE + 4)
    assert found is not None and found.position == 4 * len(batches[0])
    assert OffsetIndex(fresh.index_path, BASE).entries == fresh.offset_index.entries
    fresh.offset_index.sanity_check(fresh.size)


def test_appended_batches_stay_valid(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    fill(seg, 4, per_batch=3)
    data = seg.log_path.read_bytes()
    headers = list(iter_headers(data))
    assert [h.base_offset for h in headers] == [BASE, BASE + 3, BASE + 6, BASE + 9]
    for h in headers:
        check_batch(data, h.position, len(data))


def test_an_evicted_active_segment_keeps_its_index_memory(tmp_path: Path) -> None:
    cache = FileHandleCache(max_open=1)
    active = LogSegment.create(tmp_path, 0, handle_cache=cache, index_interval_bytes=0)
    active.active = True
    fill(active, 3)
    other = LogSegment.create(tmp_path, 1000, handle_cache=cache)
    other.append(1000, 1, 1000, batch(1000))  # evicts `active`
    assert not active.has_open_handles
    assert active._offset_index.loaded  # no re-read of the index on the next append
    other.close_handles()
    fill_more = batch(3)
    active.append(3, 2000, 3, fill_more)
    assert active.read_next_offset() == 4
