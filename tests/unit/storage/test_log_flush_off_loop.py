"""The periodic flusher's fsyncs off the event loop (storage/log.py ``plan_flush`` /
``complete_flush``, LogManager.flush_dirty_logs_async, S-2.5): a recovery point moves only
after the fsyncs covering it, and not when the log was truncated in between; checkpoints are
computed when asked (on the loop) and written by the writer thread."""

from __future__ import annotations

import asyncio
from pathlib import Path

from odradek.protocol.records import build_batch, validate_batches
from odradek.storage.checkpoints import OffsetCheckpointFile
from odradek.storage.log import FlushPlan, Log, fsync_files
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager

NOW = 1_700_000_000_000


def produce(log: Log, n: int = 1) -> None:
    for _ in range(n):
        buf = bytearray(build_batch([(b"k", b"v" * 40)], timestamp_ms=NOW))
        log.append_as_leader(buf, validate_batches(buf), 0, NOW)


def test_plan_covers_the_unflushed_segments_and_completes(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400))
    produce(log, 12)
    assert len(log.segments) > 2 and log.recovery_point == 0
    plan = log.plan_flush()
    assert plan is not None and plan.offset == log.log_end_offset == 12
    assert plan.files[0] == log.segments[0].log_path
    assert len(plan.files) == 3 * len(log.segments)
    assert plan.directory == log.dir  # new segment files since the last flush
    fsync_files(plan)
    assert log.recovery_point == 0  # not before complete_flush
    assert log.complete_flush(plan)
    assert log.recovery_point == 12
    assert log.plan_flush() is None


def test_a_truncation_during_the_fsyncs_keeps_the_recovery_point(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400))
    produce(log, 6)
    plan = log.plan_flush()
    assert plan is not None
    log.truncate_to(2)  # the follower truncates while the fsyncs run ...
    produce(log, 6)  # ... and new, unflushed data arrives at the same offsets
    fsync_files(plan)
    assert not log.complete_flush(plan)
    assert log.recovery_point == 0


def test_failed_fsyncs_are_retried_by_the_next_flush(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400))
    produce(log, 6)
    plan = log.maybe_flush_plan(NOW)  # the segments rolled so far
    assert plan is not None
    assert not log.complete_flush(plan, ok=False)
    again = log.maybe_flush_plan(NOW)
    assert again is not None and again.offset >= plan.offset


def test_fsync_files_skips_removed_files(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x")
    fsync_files(FlushPlan(1, (tmp_path / "gone", tmp_path / "a"), tmp_path, 0))


def test_flush_dirty_logs_async_then_checkpoint(tmp_path: Path) -> None:
    lm = LogManager([tmp_path], LogConfig(segment_bytes=400, flush_ms=0))
    logs = [lm.get_or_create_log("t", p) for p in range(3)]
    for log in logs:
        produce(log, 5)

    async def periodic() -> None:
        assert await lm.flush_dirty_logs_async() == 3
        lm.checkpoint_recovery_points_and_log_start_offsets()  # queued for the writer
        await lm.checkpoint_writer.flush()

    asyncio.run(periodic())
    assert [log.recovery_point for log in logs] == [5, 5, 5]
    assert OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read() == {
        ("t", 0): 5, ("t", 1): 5, ("t", 2): 5}
    lm.shutdown()
