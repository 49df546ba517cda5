"""LogManager: start-up loading, clean shutdown marker, checkpoints, retention, placement of new
partitions, deletion, several managers in one process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.protocol.records import build_batch, iter_headers, validate_batches
from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogDirLockedError, LogManager

NOW = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def produce(log: Log, *, ts: int = NOW, value: bytes = b"v" * 40, epoch: int = 0) -> int:
    buf = bytearray(build_batch([(b"k", value)], timestamp_ms=ts))
    return log.append_as_leader(buf, validate_batches(buf), epoch, NOW).first_offset


def manager(*dirs: Path, clock: Clock | None = None, **config: object) -> LogManager:
    return LogManager(list(dirs), LogConfig(**config), clock or Clock())  # type: ignore[arg-type]


def test_restart_after_clean_shutdown_keeps_everything(tmp_path: Path) -> None:
    mgr = manager(tmp_path, segment_bytes=400)
    a = mgr.get_or_create_log("orders", 0)
    b = mgr.get_or_create_log("orders", 1)
    for i in range(20):
        produce(a, epoch=i // 10)
    produce(b)
    data = a.read(0, 10**9).read_bytes()
    mgr.write_high_watermarks({("orders", 0): 15, ("orders", 1): 1, ("ghost", 0): 3})
    mgr.shutdown()
    marker = tmp_path / ".kafka_cleanshutdown"
    assert json.loads(marker.read_text()) == {"version": 0, "brokerEpoch": -1}
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == \
        "0\n2\norders 0 20\norders 1 1\n"
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == \
        "0\n2\norders 0 0\norders 1 0\n"

    again = manager(tmp_path, segment_bytes=400)
    assert again.had_clean_shutdown[tmp_path.absolute()]
    assert not marker.exists()  # a crash from now on means recovery
    log = again.get_log("orders", 0)
    assert log is not None and log.log_end_offset == 20 and log.recovery_point == 20
    assert log.read(0, 10**9).read_bytes() == data
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 10)]
    assert again.read_high_watermarks() == {("orders", 0): 15, ("orders", 1): 1}
    assert sorted(again.partitions()) == [("orders", 0), ("orders", 1)]
    again.shutdown()


def test_restart_after_a_crash_recovers(tmp_path: Path) -> None:
    mgr = manager(tmp_path, segment_bytes=400)
    log = mgr.get_or_create_log("t", 0)
    for _ in range(10):
        produce(log)
    mgr.flush_dirty_logs(NOW)  # the rolled segments get flushed
    mgr.checkpoint_recovery_points_and_log_start_offsets()
    for _ in range(3):
        produce(log)
    active = log.active_segment.log_path
    mgr.close_without_shutdown()  # crash: no marker
    with open(active, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x0d\x00\x00\x01")  # a torn batch
    again = manager(tmp_path, segment_bytes=400)
    assert not again.had_clean_shutdown[tmp_path.absolute()]
    log = again.get_log("t", 0)
    assert log is not None and log.log_end_offset == 13
    assert [h.base_offset for h in iter_headers(log.read(0, 10**9).read_bytes())] == \
        list(range(13))
    again.shutdown()


def test_retention_by_time_and_by_bytes_advances_the_log_start(tmp_path: Path) -> None:
    clock = Clock()
    mgr = manager(tmp_path, clock=clock, segment_bytes=400)
    timed = mgr.get_or_create_log("timed", 0, LogConfig(segment_bytes=400, retention_ms=60_000))
    sized = mgr.get_or_create_log("sized", 0, LogConfig(segment_bytes=400, retention_bytes=800))
    for i in range(12):
        produce(timed, ts=NOW + i * 10_000)
        produce(sized)
    assert timed.num_segments > 3 and sized.num_segments > 3
    deleted = mgr.cleanup_logs(NOW + 100_000)
    assert deleted > 0
    # retention.ms: segments whose newest record is more than 60 s old are gone
    assert timed.log_start_offset > 0
    assert all(NOW + 100_000 - s.largest_timestamp() <= 60_000 for s in timed.segments)
    assert timed.segments[0].base_offset == timed.log_start_offset
    # retention.bytes: the log shrank below the oldest segment's worth over the limit
    assert sized.log_start_offset > 0 and sized.size >= 800 > sized.size - sized.segments[0].size
    with pytest.raises(OffsetOutOfRangeError):
        sized.read(0, 1000)
    mgr.checkpoint_recovery_points_and_log_start_offsets()
    starts = {("timed", 0): timed.log_start_offset, ("sized", 0): sized.log_start_offset}
    mgr.shutdown()
    again = manager(tmp_path, segment_bytes=400)
    for (topic, p), start in starts.items():
        log = again.get_log(topic, p)
        assert log is not None and log.log_start_offset == start
    again.shutdown()


def test_roll_by_size_and_by_time(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    by_size = mgr.get_or_create_log("s", 0, LogConfig(segment_bytes=300))
    by_time = mgr.get_or_create_log("m", 0, LogConfig(segment_ms=5_000))
    for i in range(6):
        produce(by_size)
        produce(by_time, ts=NOW + i * 2_000)
    assert by_size.num_segments == 3
    assert [s.base_offset for s in by_time.segments] == [0, 3, 6][:by_time.num_segments]
    assert by_time.num_segments == 2
    mgr.shutdown()


def test_new_partitions_go_to_the_dir_with_fewest(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    (d1 / "old-0").mkdir(parents=True)
    (d1 / "old-1").mkdir()
    mgr = manager(d1, d2)
    placed = [mgr.get_or_create_log("new", p).dir.parent for p in range(4)]
    assert placed == [d2.absolute(), d2.absolute(), d1.absolute(), d2.absolute()]
    assert len(mgr.logs_in_dir(d1)) == 3 and len(mgr.logs_in_dir(d2)) == 3
    mgr.shutdown()
    again = manager(d1, d2)
    assert len(again.all_logs()) == 6
    again.shutdown()


def test_delete_log(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    log = mgr.get_or_create_log("gone", 3)
    produce(log)
    assert mgr.delete_log("gone", 3)
    assert not mgr.delete_log("gone", 3)
    assert mgr.get_log("gone", 3) is None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("gone")]
    assert "gone" not in (tmp_path / "recovery-point-offset-checkpoint").read_text()
    fresh = mgr.get_or_create_log("gone", 3)
    assert fresh.log_end_offset == 0
    mgr.shutdown()


def test_startup_removes_leftovers(tmp_path: Path) -> None:
    (tmp_path / "t-0.0123abcd-delete").mkdir()
    (tmp_path / "t-0.0123abcd-delete" / "00000000000000000000.log").write_bytes(b"x")
    (tmp_path / "not-a-partition").mkdir()
    part = tmp_path / "t-1"
    part.mkdir()
    (part / "00000000000000000000.log.deleted").write_bytes(b"junk")
    (part / "00000000000000000007.index").write_bytes(b"")  # orphan index
    mgr = manager(tmp_path)
    assert not (tmp_path / "t-0.0123abcd-delete").exists()
    # (the leader epoch checkpoint and its spare appear when the checkpoint writer is idle)
    assert sorted(p.name for p in part.iterdir()
                  if not p.name.startswith("leader-epoch-checkpoint")) == [
        "00000000000000000000.index", "00000000000000000000.log",
        "00000000000000000000.timeindex"]
    assert mgr.partitions() == [("t", 1)]
    mgr.shutdown()


def test_several_managers_in_one_process_and_dir_locks(tmp_path: Path) -> None:
    m1 = manager(tmp_path / "b1")
    m2 = manager(tmp_path / "b2")
    produce(m1.get_or_create_log("x", 0))
    produce(m2.get_or_create_log("x", 0))
    produce(m2.get_or_create_log("x", 0))
    with pytest.raises(LogDirLockedError):
        manager(tmp_path / "b1")
    m1.shutdown()
    m2.shutdown()
    m3 = manager(tmp_path / "b1")  # the lock is gone after shutdown
    log = m3.get_or_create_log("x", 0)
    assert log.log_end_offset == 1
    m3.shutdown()


def test_topic_config_overrides(tmp_path: Path) -> None:
    mgr = manager(tmp_path, segment_bytes=10_000)
    log = mgr.get_or_create_log("t", 0)
    assert log.config.segment_bytes == 10_000
    mgr.update_topic_config("t", LogConfig(segment_bytes=300))
    assert log.config.segment_bytes == 300
    with pytest.raises(ValueError):
        mgr.get_or_create_log("../escape", 0)
    mgr.shutdown()


def test_a_moved_log_checkpoints_its_source_dir_then_its_destination(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # in that order in every process: a set of the two dirs was iterated in hash order, so
    # the checkpoints' writes came in an order that depended on PYTHONHASHSEED (here one of
    # the two moves, one each way, would meet the other order)
    d1, d2 = (tmp_path / "d1").absolute(), (tmp_path / "d2").absolute()
    mgr = manager(d1, d2)
    produce(mgr.get_or_create_log("t", 0))
    moves = []
    for _ in range(2):  # there and back
        source = mgr.get_log("t", 0).dir.parent  # type: ignore[union-attr]
        dest = d2 if source == d1 else d1
        produce(mgr.create_future_log("t", 0, dest))  # as far as the current log
        written: list[Path] = []
        monkeypatch.setattr(mgr, "_checkpoint_dir", written.append)
        mgr.replace_current_with_future_log("t", 0)
        monkeypatch.undo()
        moves.append((source, dest))
        assert written == [source, dest]
    assert moves == [(d1, d2), (d2, d1)]
    mgr.shutdown()
