"""Log: leader/follower appends, rolls, reads bounded by the high watermark, ListOffsets,
truncation, flush, retention, LogConfig."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.protocol.records import (
    Record,
    build_batch,
    check_batch,
    decode_records,
    iter_headers,
    validate_batches,
)
from odradek.storage.errors import (
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from odradek.storage.log import Log
from odradek.storage.log_config import InvalidConfigError, LogConfig
from odradek.storage.log_validator import follower_append_runs

NOW = 1_700_000_000_000


@given(st.lists(st.integers(min_value=1, max_value=500), max_size=40),
       st.integers(min_value=1, max_value=1000))
def test_follower_append_runs_cover_every_batch_once_within_the_segment_size(
        sizes: list[int], segment_bytes: int) -> None:
    ends = list(itertools.accumulate(sizes))
    runs = follower_append_runs(ends, segment_bytes)
    assert [i for lo, hi in runs for i in range(lo, hi)] == list(range(len(sizes)))
    for lo, hi in runs:
        assert hi > lo
        size = sum(sizes[lo:hi])
        assert size <= segment_bytes or hi - lo == 1
    # greedy: a run is closed only when the next batch would not fit
    for (lo, hi), (nlo, _) in itertools.pairwise(runs):
        assert sum(sizes[lo:hi + 1]) > segment_bytes and nlo == hi


class Clock:
    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def produce(log: Log, n_records: int = 1, *, ts: int = NOW, epoch: int = 0, value: bytes = b"v",
            batches: int = 1, **kwargs: object):
    buf = bytearray()
    for _ in range(batches):
        buf += build_batch([(b"k", value)] * n_records, timestamp_ms=ts, **kwargs)
    return log.append_as_leader(buf, validate_batches(buf), epoch, NOW)


def open_log(tmp_path: Path, **config: object) -> Log:
    return Log.open(tmp_path / "topic-0", LogConfig(**config), clock=Clock())  # type: ignore[arg-type]


def all_headers(log: Log) -> list:
    return list(iter_headers(log.read(log.log_start_offset, 10**9).read_bytes()))


class TestAppend:
    def test_offsets_are_assigned_in_place(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        info = produce(log, 3, epoch=7)
        assert (info.first_offset, info.last_offset) == (0, 2)
        info = produce(log, 2, batches=2, epoch=7)
        assert (info.first_offset, info.last_offset) == (3, 6)
        assert info.log_append_time == -1 and not info.duplicate
        headers = all_headers(log)
        assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 2), (3, 4), (5, 6)]
        assert {h.partition_leader_epoch for h in headers} == {7}
        data = log.read(0, 10**9).read_bytes()
        assert [r.offset for h in headers
                for r in decode_records(data[h.position:h.position + h.size])] == list(range(7))
        assert log.log_end_offset == 7
        assert log.leader_epoch_cache.entries() == [(7, 0)]

    def test_log_append_time_is_stamped_and_crc_recomputed(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
        info = produce(log, 2, ts=5)
        assert info.log_append_time == NOW and info.max_timestamp == NOW
        data = log.read(0, 10**9).read_bytes()
        header = check_batch(data, 0, len(data))
        assert header.is_log_append_time and header.max_timestamp == NOW
        assert [r.timestamp for r in decode_records(data)] == [NOW, NOW]

    def test_record_too_large(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, max_message_bytes=200)
        with pytest.raises(RecordTooLargeError):
            produce(log, value=b"x" * 300)
        assert log.log_end_offset == 0 and log.size == 0

    def test_batch_larger_than_segment(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, segment_bytes=150)
        with pytest.raises(RecordBatchTooLargeError):
            produce(log, value=b"x" * 200)

    def test_roll_by_size(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, segment_bytes=300)
        for _ in range(10):
            produce(log, value=b"x" * 40)
        assert log.num_segments > 2
        assert all(s.size <= 300 for s in log.segments)
        bases = [s.base_offset for s in log.segments]
        assert bases == sorted(bases) and bases[0] == 0
        for seg, nxt in zip(log.segments, log.segments[1:], strict=False):
            assert seg.read_next_offset() == nxt.base_offset
        names = sorted(p.name for p in log.dir.iterdir() if p.suffix == ".log")
        assert names == [f"{b:020d}.log" for b in bases]

    def test_roll_by_segment_ms_uses_batch_timestamps(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, segment_ms=1000)
        produce(log, ts=NOW)
        produce(log, ts=NOW + 999)
        assert log.num_segments == 1
        produce(log, ts=NOW + 1001)
        assert log.num_segments == 2 and log.active_segment.base_offset == 2

    def test_roll_when_the_index_is_full(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, segment_index_bytes=24, index_interval_bytes=1)
        for _ in range(12):
            produce(log)
        assert log.num_segments >= 3
        assert all(s.offset_index.entries <= 3 for s in log.segments)

    def test_flush_messages_advances_the_recovery_point(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, flush_messages=3)
        produce(log)
        produce(log)
        assert log.recovery_point == 0
        produce(log)
        assert log.recovery_point == 3

    def test_maybe_flush_by_flush_ms(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, flush_ms=1000)
        produce(log)
        assert not log.maybe_flush(log.last_flush_ms + 10)
        assert log.maybe_flush(log.last_flush_ms + 1000)
        assert log.recovery_point == 1
        assert not log.maybe_flush(log.last_flush_ms + 5000)  # nothing unflushed

    def test_roll_schedules_a_flush_of_the_old_segments(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        produce(log)
        log.roll()
        produce(log)
        assert log.recovery_point == 0
        assert log.maybe_flush(NOW)
        assert log.recovery_point == 1


class TestRead:
    def test_out_of_range(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        produce(log, 3)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(4, 1000)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(-1, 1000)
        empty = log.read(3, 1000)
        assert empty.regions == [] and empty.log_end_offset == 3

    def test_high_watermark_bounds_reads(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        for _ in range(5):
            produce(log, 2)
        data = log.read(0, 10**6, max_offset=6)
        assert [h.base_offset for h in iter_headers(data.read_bytes())] == [0, 2, 4]
        assert data.high_offset == 6
        assert log.read(6, 10**6, max_offset=6).regions == []
        assert log.read(3, 10**6, max_offset=4).read_bytes()[:8] == (2).to_bytes(8, "big")

    def test_max_bytes_never_splits_a_batch(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        for _ in range(5):
            produce(log, value=b"x" * 30)
        size = log.size // 5
        data = log.read(0, size * 2 + size // 2)
        assert data.size == size * 2
        first = log.read(0, 3, min_one_message=True)
        assert first.size == size
        nothing = log.read(0, 3, min_one_message=False)
        assert nothing.size == 0 and nothing.first_entry_incomplete

    def test_reads_span_segments(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, segment_bytes=250)
        for _ in range(12):
            produce(log, value=b"y" * 30)
        assert log.num_segments > 3
        data = log.read(1, 10**6)
        assert len(data.regions) == log.num_segments
        assert [h.base_offset for h in iter_headers(data.read_bytes())] == list(range(1, 12))
        bounded = log.read(0, 10**6, max_offset=5)
        assert [h.base_offset for h in iter_headers(bounded.read_bytes())] == list(range(5))

    def test_offset_for_timestamp(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=1)
        for i in range(10):
            recs = [Record(0, NOW + 100 * i + j, b"k", b"v") for j in range(3)]
            buf = bytearray(build_batch(recs))
            log.append_as_leader(buf, validate_batches(buf), 0, NOW)
        assert log.num_segments > 1
        assert log.offset_for_timestamp(NOW) == (0, NOW)
        assert log.offset_for_timestamp(NOW + 101) == (4, NOW + 101)
        assert log.offset_for_timestamp(NOW + 150) == (6, NOW + 200)
        assert log.offset_for_timestamp(NOW + 902) == (29, NOW + 902)
        assert log.offset_for_timestamp(NOW + 903) is None
        assert log.offset_for_timestamp(-2) == (0, -1)
        assert log.offset_for_timestamp(-1) == (30, -1)
        assert log.offset_for_timestamp(-3) == (29, NOW + 902)

    def test_legacy_offsets_before(self, tmp_path: Path) -> None:
        """ListOffsets v0 (Kafka's legacyFetchOffsetsBefore): segment bases dated by their files'
        modification times, and the log end offset dated now, largest first."""
        log = open_log(tmp_path, segment_bytes=300)
        for _ in range(8):
            produce(log, value=b"x" * 40)
        bases = [s.base_offset for s in log.segments]
        assert len(bases) >= 3 and log.segments[-1].size > 0
        for i, seg in enumerate(log.segments):  # segment i last written at NOW - 1000 * (n - i)
            mtime_s = (NOW - 1000 * (len(bases) - i)) / 1000
            os.utime(seg.log_path, (mtime_s, mtime_s))
        leo = log.log_end_offset
        newest_first = [leo, *reversed(bases)]
        assert log.legacy_offsets_before(-1, 100) == newest_first
        assert log.legacy_offsets_before(-1, 2) == newest_first[:2]
        assert log.legacy_offsets_before(-1, 0) == []
        assert log.legacy_offsets_before(-2, 100) == [0]  # earliest: the first candidate only
        assert log.legacy_offsets_before(NOW, 100) == newest_first  # the LEO is dated now
        # before the last segment's mtime: that segment and the LEO are too new
        assert log.legacy_offsets_before(NOW - 1001, 100) == newest_first[2:]
        assert log.legacy_offsets_before(NOW - 1000 * len(bases), 1) == [0]
        assert log.legacy_offsets_before(NOW - 1000 * len(bases) - 1, 100) == []
        with pytest.raises(ValueError, match="negative"):
            log.legacy_offsets_before(-1, -1)
        # the log start offset stands in for a base below it; an empty active segment is no
        # candidate
        log.maybe_increment_log_start_offset(bases[1] + 1)
        log.roll()
        assert log.segments[-1].size == 0
        assert log.legacy_offsets_before(-2, 5) == [bases[1] + 1]


class TestTruncation:
    def test_truncate_to(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, segment_bytes=250)
        for epoch in range(6):
            produce(log, 2, epoch=epoch, value=b"z" * 30)
        assert log.num_segments > 2
        assert log.truncate_to(6)
        assert log.log_end_offset == 6
        assert [h.base_offset for h in all_headers(log)] == [0, 2, 4]
        assert log.leader_epoch_cache.entries() == [(0, 0), (1, 2), (2, 4)]
        assert not log.truncate_to(100)
        info = produce(log, epoch=9)
        assert info.first_offset == 6
        assert [h.base_offset for h in all_headers(log)] == [0, 2, 4, 6]

    def test_truncate_fully_and_start_at(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        produce(log, 5)
        log.truncate_fully_and_start_at(42)
        assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (42, 42, 1)
        assert log.leader_epoch_cache.entries() == []
        assert produce(log).first_offset == 42
        assert sorted(p.name for p in log.dir.glob("*.log")) == [f"{42:020d}.log"]


class TestFollower:
    def test_keeps_offsets_and_epochs(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        data = (build_batch([(b"a", b"1")] * 2, base_offset=0, partition_leader_epoch=3)
                + build_batch([(b"b", b"2")], base_offset=2, partition_leader_epoch=5))
        info = log.append_as_follower(data)
        assert info is not None and (info.first_offset, info.last_offset) == (0, 2)
        assert log.read(0, 10**6).read_bytes() == data
        assert log.leader_epoch_cache.entries() == [(3, 0), (5, 2)]

    def test_ignores_a_trailing_partial_batch(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        full = build_batch([(b"a", b"1")], base_offset=0)
        partial = build_batch([(b"b", b"2")], base_offset=1)[:30]
        log.append_as_follower(full + partial)
        assert log.log_end_offset == 1
        assert log.append_as_follower(partial) is None

    def test_rejects_offsets_below_the_log_end(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        log.append_as_follower(build_batch([(b"a", b"1")] * 3, base_offset=0))
        with pytest.raises(UnexpectedAppendOffsetError):
            log.append_as_follower(build_batch([(b"a", b"1")], base_offset=2))

    def test_a_fetch_larger_than_a_segment_is_split_across_segments(self, tmp_path: Path
                                                                   ) -> None:
        # The leader took each batch alone (each fits segment.bytes), a follower fetches several
        # at once: it must roll between them, not refuse what the leader acknowledged.
        log = open_log(tmp_path, segment_bytes=300)
        batches = [build_batch([(b"k", b"v" * 100)], base_offset=i) for i in range(5)]
        assert all(len(b) < 300 < 2 * len(b) + 10 for b in batches)
        data = b"".join(batches)
        info = log.append_as_follower(data)
        assert info is not None and (info.first_offset, info.last_offset) == (0, 4)
        assert log.num_segments >= 3
        assert all(seg.size <= 300 for seg in log.segments)
        assert log.read(0, 10**6).read_bytes() == data
        for i in range(5):  # every offset is found through the indexes
            assert log.read(i, 10**6).read_bytes() == b"".join(batches[i:])

    def test_a_batch_larger_than_a_segment_gets_a_segment_of_its_own(self, tmp_path: Path
                                                                     ) -> None:
        log = open_log(tmp_path, segment_bytes=120)
        small = build_batch([(b"k", b"v")], base_offset=0)
        big = build_batch([(b"k", b"v" * 300)], base_offset=1)
        log.append_as_follower(small + big)
        assert log.log_end_offset == 2
        assert [s.base_offset for s in log.segments] == [0, 1]
        assert log.read(0, 10**6).read_bytes() == small + big

    def test_rejects_corrupt_batches(self, tmp_path: Path) -> None:
        from odradek.protocol.records import CorruptRecordError
        log = open_log(tmp_path)
        data = bytearray(build_batch([(b"a", b"1")], base_offset=0))
        data[-1] ^= 0xFF
        with pytest.raises(CorruptRecordError):
            log.append_as_follower(data)


class TestRetention:
    def test_retention_bytes_keeps_the_newest_segments(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, segment_bytes=250, retention_bytes=500)
        for _ in range(20):
            produce(log, value=b"r" * 30)
        before = log.num_segments
        deleted = log.delete_retention_segments(NOW)
        assert deleted > 0 and log.num_segments == before - deleted
        assert log.size - log.segments[0].size < 500 <= log.size
        assert log.log_start_offset == log.segments[0].base_offset > 0
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0, 1000)
        assert not list(log.dir.glob("*.deleted"))
        assert len(list(log.dir.glob("*.log"))) == log.num_segments

    def test_retention_ms_never_passes_the_high_watermark(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, segment_bytes=250, retention_ms=1000)
        for _ in range(10):
            produce(log, ts=NOW, value=b"r" * 30)
        log.high_watermark = 4
        log.delete_retention_segments(NOW + 5000)
        assert log.log_start_offset <= 4
        log.high_watermark = log.log_end_offset
        log.delete_retention_segments(NOW + 5000)
        # everything expired: the active segment was rolled and removed; the log is empty
        assert log.log_start_offset == log.log_end_offset == 10
        assert log.num_segments == 1 and log.active_segment.size == 0
        assert log.read(10, 1000).regions == []

    def test_log_start_offset_breach_deletes_without_delete_policy(self, tmp_path: Path) -> None:
        log = open_log(tmp_path, segment_bytes=250, cleanup_policy=("compact",))
        for _ in range(10):
            produce(log, value=b"r" * 30)
        second = log.segments[1].base_offset
        assert log.maybe_increment_log_start_offset(second + 1)
        assert log.delete_retention_segments(NOW) == 1
        assert log.segments[0].base_offset == second
        assert log.log_start_offset == second + 1


class TestLogConfig:
    def test_defaults_are_kafkas(self) -> None:
        cfg = LogConfig()
        props = cfg.to_props()
        assert props["segment.bytes"] == "1073741824"
        assert props["segment.ms"] == "604800000"
        assert props["segment.index.bytes"] == "10485760"
        assert props["index.interval.bytes"] == "4096"
        assert props["flush.messages"] == str(2**63 - 1)
        assert props["retention.bytes"] == "-1"
        assert props["max.message.bytes"] == "1048588"
        assert props["cleanup.policy"] == "delete"
        assert props["unclean.leader.election.enable"] == "false"
        assert props["message.timestamp.type"] == "CreateTime"
        assert props["file.delete.delay.ms"] == "60000"
        assert props["min.insync.replicas"] == "1"

    def test_from_props_parses_over_a_base(self) -> None:
        base = LogConfig(retention_ms=5)
        cfg = LogConfig.from_props({"segment.bytes": "1024", "cleanup.policy": "compact, delete",
                                    "unclean.leader.election.enable": "TRUE"}, base)
        assert cfg.segment_bytes == 1024 and cfg.retention_ms == 5
        assert cfg.cleanup_policy == ("compact", "delete") and cfg.compact and cfg.delete
        assert cfg.unclean_leader_election_enable is True
        assert LogConfig.from_props(cfg.to_props()) == cfg

    @pytest.mark.parametrize(("key", "value"), [
        ("segment.bytes", "abc"), ("segment.bytes", "10"), ("segment.bytes", str(2**31)),
        ("retention.ms", "-2"), ("min.insync.replicas", "0"),
        ("message.timestamp.type", "WallTime"), ("cleanup.policy", "delete,shred"),
        ("unclean.leader.election.enable", "yes"), ("min.cleanable.dirty.ratio", "1.5"),
    ])
    def test_invalid_values_name_the_key(self, key: str, value: str) -> None:
        with pytest.raises(InvalidConfigError, match=key.replace(".", r"\.")):
            LogConfig.from_props({key: value})

    def test_unknown_keys(self) -> None:
        props = {"retention.ms": "1", "retention.hours": "2"}
        assert LogConfig.unknown_keys(props) == ["retention.hours"]
        with pytest.raises(InvalidConfigError, match=r"retention\.hours"):
            LogConfig.from_props(props)
        assert LogConfig.from_props(props, allow_unknown=True).retention_ms == 1


def test_reopen_without_clean_shutdown_keeps_everything(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for epoch in range(8):
        produce(log, 2, epoch=epoch // 3, value=b"q" * 30)
    data = log.read(0, 10**9).read_bytes()
    log.release_handles()  # no close(): as after a crash
    again = Log.open(log.dir, log.config, clock=Clock())
    assert again.log_end_offset == 16
    assert again.read(0, 10**9).read_bytes() == data
    assert again.leader_epoch_cache.entries() == [(0, 0), (1, 6), (2, 12)]
    assert produce(again, epoch=2).first_offset == 16


def test_iter_batch_headers(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=250)
    for _ in range(8):
        produce(log, 2, value=b"h" * 20)
    assert [h.base_offset for h in log.iter_batch_headers(5)] == [4, 6, 8, 10, 12, 14]
    assert [h.base_offset for h in log.iter_batch_headers()][:2] == [0, 2]


def test_log_dir_must_be_topic_partition(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Log.open(tmp_path / "no_partition")
    log = Log.open(tmp_path / "my-topic-with-dashes-12")
    assert (log.topic, log.partition) == ("my-topic-with-dashes", 12)
    assert os.path.isdir(log.dir)


def test_an_unreadable_epoch_checkpoint_is_rebuilt_from_batch_headers(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for epoch in (0, 0, 2, 2, 5):
        produce(log, 2, epoch=epoch, value=b"e" * 30)
    log.close()
    (log.dir / "leader-epoch-checkpoint").write_text("0\n7\ngarbage\n")
    again = Log.open(log.dir, log.config, clock=Clock())
    assert again.leader_epoch_cache.entries() == [(0, 0), (2, 4), (5, 8)]
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 4\n5 8\n"


def test_an_interrupted_swap_is_completed_and_stray_files_removed(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for _ in range(9):
        produce(log, value=b"s" * 40)
    assert log.num_segments >= 3
    data = log.read(0, 10**9).read_bytes()
    first, second = log.segments[0], log.segments[1]
    merged = first.log_path.read_bytes() + second.log_path.read_bytes()
    log.close()
    # a cleaner crashed after writing the merged segment as .swap, before swapping it in
    (log.dir / f"{0:020d}.log.swap").write_bytes(merged)
    third = log.segments[2].base_offset
    (log.dir / f"{third:020d}.log.cleaned").write_bytes(b"partial")
    (log.dir / f"{third:020d}.log.swap").write_bytes(b"an unfinished split")
    (log.dir / f"{second.base_offset:020d}.index.deleted").write_bytes(b"old")
    again = Log.open(log.dir, log.config, clock=Clock())
    assert [s.base_offset for s in again.segments][:1] == [0]
    assert second.base_offset not in [s.base_offset for s in again.segments]
    assert again.read(0, 10**9).read_bytes() == data
    leftovers = [p.name for p in log.dir.iterdir()
                 if p.name.endswith((".swap", ".cleaned", ".deleted"))]
    assert leftovers == []


def test_file_descriptors_stay_bounded_with_many_segments(tmp_path: Path) -> None:
    from odradek.storage.segment import FileHandleCache

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    cache = FileHandleCache(max_open=8)
    log = Log.open(tmp_path / "many-0", LogConfig(segment_bytes=120), clock=Clock(),
                   handle_cache=cache)
    for _ in range(200):
        produce(log, value=b"m" * 40)
    assert log.num_segments >= 150
    log.flush()
    log.close()
    before = open_fds()
    again = Log.open(tmp_path / "many-0", LogConfig(segment_bytes=120), clock=Clock(),
                     recovery_point=log.recovery_point, had_clean_shutdown=True,
                     handle_cache=cache)
    assert open_fds() - before <= 3 * 8
    data = again.read(0, 10**9)  # touches every segment
    assert len(data.regions) == again.num_segments
    del data
    assert len(cache) <= 8 and open_fds() - before <= 3 * 8
    assert again.offset_for_timestamp(NOW) == (0, NOW)
    again.delete_retention_segments(NOW)
    assert open_fds() - before <= 3 * 8
