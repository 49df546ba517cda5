"""Log dir failures (KIP-112) in storage: the LogDirFailureChannel, a log raising
KafkaStorageError on an I/O error and reporting its dir, the log manager taking a dir offline
(its logs closed, no checkpoint written there any more, new logs elsewhere, every dir offline an
error), and recovery of what a full disk leaves: torn tails of the .log, .index, .timeindex and
.txnindex files and of the checkpoint files, cut at every byte of their last entry."""

from __future__ import annotations

import errno
import os
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.common import file_system
from odradek.protocol.control_records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from odradek.protocol.records import build_batch, check_batch, iter_headers, validate_batches
from odradek.storage import segment as segment_module
from odradek.storage.append_origin import AppendOrigin
from odradek.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT
from odradek.storage.errors import KafkaStorageError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_dir_failure_channel import LogDirFailureChannel
from odradek.storage.log_manager import LogManager

NOW = 1_700_000_000_000
SETTINGS = settings(max_examples=8, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


def append(log: Log, values: list[bytes], origin: AppendOrigin = AppendOrigin.CLIENT,
           raw: bytes | None = None) -> int:
    buf = bytearray(raw if raw is not None else build_batch([(None, v) for v in values],
                                                            timestamp_ms=NOW))
    headers = validate_batches(buf, allow_control=origin is AppendOrigin.COORDINATOR)
    return log.append_as_leader(buf, headers, 0, NOW, origin).first_offset


# -- the channel -------------------------------------------------------------------------------

def test_channel_reports_each_dir_once_to_every_listener(tmp_path: Path) -> None:
    channel = LogDirFailureChannel()
    seen: list[Path] = []
    channel.add_listener(seen.append)
    assert channel.maybe_add_offline_log_dir(tmp_path / "a", "disk full",
                                             OSError(errno.ENOSPC, "full"))
    assert not channel.maybe_add_offline_log_dir(tmp_path / "a", "again")
    threads = [threading.Thread(target=channel.maybe_add_offline_log_dir,
                                args=(tmp_path / "b", "from a thread")) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [(tmp_path / "a").absolute(), (tmp_path / "b").absolute()]
    assert channel.has_offline_log_dir(tmp_path / "a")
    assert not channel.has_offline_log_dir(tmp_path / "c")
    assert channel.reason(tmp_path / "a") == "disk full"
    assert sorted(channel.offline_log_dirs()) == sorted(seen)


def test_a_failing_listener_does_not_stop_the_others(tmp_path: Path) -> None:
    channel = LogDirFailureChannel()
    seen: list[Path] = []

    def bad(_d: Path) -> None:
        raise RuntimeError("boom")
    channel.add_listener(bad)
    channel.add_listener(seen.append)
    channel.maybe_add_offline_log_dir(tmp_path, "eio")
    assert seen == [tmp_path.absolute()]


# -- the log and the log manager --------------------------------------------------------------

def failing_pwrite(monkeypatch: pytest.MonkeyPatch, err: int, partial: bool = False,
                   keep_torn_bytes: bool = False) -> None:
    """The next segment writes fail with `err` (after writing half, with `partial`); with
    `keep_torn_bytes` the segment cannot cut what was written either (a crash right then)."""
    real = file_system.pwrite

    def pwrite(fd: int, data: object, position: int) -> int:
        view = memoryview(data).cast("B")  # type: ignore[arg-type]
        if partial and len(view) > 1:
            real(fd, view[: len(view) // 2], position)
        raise OSError(err, os.strerror(err))
    monkeypatch.setattr(file_system, "pwrite", pwrite)
    if keep_torn_bytes:
        def ftruncate(_fd: int, _size: int) -> None:
            raise OSError(err, os.strerror(err))
        monkeypatch.setattr(segment_module.os, "ftruncate", ftruncate)


def test_io_error_takes_the_dir_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    lm = LogManager([a, b], clock=lambda: NOW)
    offline: list[Path] = []
    lm.failure_channel.add_listener(offline.append)
    la = lm.get_or_create_log("t", 0)
    lb = lm.get_or_create_log("t", 1)
    assert {la.dir.parent, lb.dir.parent} == {a.absolute(), b.absolute()}
    append(la, [b"x"])
    append(lb, [b"y"])
    lm.checkpoint_recovery_points_and_log_start_offsets()
    lm.write_high_watermarks({("t", 0): 1, ("t", 1): 1})
    failed_dir = la.dir.parent
    checkpoint = failed_dir / RECOVERY_POINT_CHECKPOINT
    before = checkpoint.read_bytes()
    with monkeypatch.context() as m:
        failing_pwrite(m, errno.EIO)
        with pytest.raises(KafkaStorageError):
            append(la, [b"z"])
    assert offline == [failed_dir]
    with pytest.raises(KafkaStorageError):  # the failed log refuses everything now
        la.read(0, 100)
    assert lm.handle_log_dir_failure(failed_dir) == [("t", 0)]
    assert lm.offline_dirs == {failed_dir}
    assert lm.get_log("t", 0) is None
    # the other dir keeps serving; new logs go there; nothing is written into the failed dir
    append(lb, [b"still"])
    assert lm.get_or_create_log("t", 2).dir.parent == lb.dir.parent
    lm.checkpoint_recovery_points_and_log_start_offsets()
    lm.write_high_watermarks({("t", 1): 2})
    lm.checkpoint_writer.flush_blocking()
    assert checkpoint.read_bytes() == before
    assert b"t 0" in (failed_dir / REPLICATION_OFFSET_CHECKPOINT).read_bytes()
    lm.shutdown()
    assert not (failed_dir / ".kafka_cleanshutdown").exists()
    assert (lb.dir.parent / ".kafka_cleanshutdown").exists()
    # restarted with the disk back: both dirs load, the failed one recovers
    lm2 = LogManager([a, b], clock=lambda: NOW)
    try:
        assert not lm2.offline_dirs
        assert lm2.get_log("t", 0).log_end_offset == 1  # type: ignore[union-attr]
        assert lm2.get_log("t", 1).log_end_offset == 2  # type: ignore[union-attr]
    finally:
        lm2.shutdown()


def test_every_dir_offline_is_an_error(tmp_path: Path) -> None:
    lm = LogManager([tmp_path / "only"], clock=lambda: NOW)
    lm.get_or_create_log("t", 0)
    lm.report_io_error(lm.log_dirs[0], "eio", OSError(errno.EIO, "eio"))
    with pytest.raises(KafkaStorageError):
        lm.handle_log_dir_failure(lm.log_dirs[0])
    with pytest.raises(KafkaStorageError):
        lm.get_or_create_log("t", 1)
    lm.close_without_shutdown()


def test_checkpoint_write_error_reports_the_dir(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    lm = LogManager([tmp_path / "a", tmp_path / "b"], clock=lambda: NOW)

    def broken(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(lm.checkpoint_writer, "_write", broken)
    lm.checkpoint_recovery_points_and_log_start_offsets()
    lm.checkpoint_writer.flush_blocking()
    assert sorted(lm.failure_channel.offline_log_dirs()) == sorted(lm.log_dirs)
    lm.close_without_shutdown()


def test_unreadable_dir_at_start_is_offline(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    b.mkdir()
    (b / "t-0").write_text("a file where a partition dir should be")  # listdir fails below
    lm0 = LogManager([a], clock=lambda: NOW)
    lm0.shutdown()
    (b / "t-0").unlink()
    (b / "t-0").mkdir()
    (b / "t-0" / "00000000000000000000.log").mkdir()  # opening it as a file: IsADirectoryError
    lm = LogManager([a, b], clock=lambda: NOW)
    try:
        assert lm.offline_dirs == {b.absolute()}
        assert lm.failure_channel.has_offline_log_dir(b)
        assert lm.get_or_create_log("t", 1).dir.parent == a.absolute()
    finally:
        lm.shutdown()


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO, errno.EROFS])
def test_torn_append_recovers_to_the_acknowledged_prefix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    """ENOSPC (or EIO) in the middle of an append, and the torn bytes stay (the segment could
    not cut them): after a restart, recovery keeps exactly the appends that succeeded."""
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2000), clock=lambda: NOW)
    acked = [append(log, [b"v%d" % i * 20]) for i in range(30)]
    reported: list[Path] = []
    log.on_io_error = lambda d, _m, _e: reported.append(d)
    with monkeypatch.context() as m:
        failing_pwrite(m, err, partial=True, keep_torn_bytes=True)
        with pytest.raises(KafkaStorageError):
            append(log, [b"never acknowledged" * 10])
    assert reported == [tmp_path]
    log.release_handles()  # the dir is offline: no flush, no snapshot
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2000), clock=lambda: NOW)
    assert reopened.log_end_offset == acked[-1] + 1
    data = reopened.read(0, 10**9).read_bytes()
    assert [h.base_offset for h in iter_headers(data)] == acked
    assert append(reopened, [b"after"]) == acked[-1] + 1


# -- torn tails, every byte of the last entry ------------------------------------------------

def txn_batch(pid: int, seq: int) -> bytes:
    return build_batch([(b"k", b"txn-%d" % seq)], timestamp_ms=NOW, producer_id=pid,
                       producer_epoch=0, base_sequence=seq, is_transactional=True)


def abort_marker(pid: int) -> bytes:
    return build_end_txn_marker_batch(EndTransactionMarker(ControlRecordType.ABORT, 0), pid, 0,
                                      timestamp_ms=NOW)


def write_log(root: Path, sizes: list[int], aborts: int) -> tuple[Path, list[bytes]]:
    """A log of plain batches and `aborts` aborted transactions (so .txnindex has entries),
    left as a crash leaves it."""
    config = LogConfig(segment_bytes=100_000, index_interval_bytes=1)
    log = Log.open(root / "t-0", config, clock=lambda: NOW)
    for i, size in enumerate(sizes):
        append(log, [b"%d" % i + b"x" * size])
    for pid in range(1, aborts + 1):
        append(log, [], raw=txn_batch(pid, 0))
        append(log, [], AppendOrigin.COORDINATOR, raw=abort_marker(pid))
    append(log, [b"last" * 10])
    batches = []
    data = log.read(0, 10**9).read_bytes()
    for h in iter_headers(data):
        batches.append(bytes(data[h.position:h.position + h.size]))
    log.release_handles()
    return root / "t-0", batches


def check_prefix(directory: Path, batches: list[bytes], at_least: int) -> Log:
    log = Log.open(directory, LogConfig(segment_bytes=100_000, index_interval_bytes=1),
                   clock=lambda: NOW)
    data = log.read(0, 10**9).read_bytes() if log.log_end_offset else b""
    headers = list(iter_headers(data))
    assert len(headers) >= at_least
    assert data == b"".join(batches[:len(headers)])
    for h in headers:
        check_batch(data, h.position, len(data))
    for segment in log.segments:
        segment.offset_index.sanity_check(segment.size)
        segment.time_index.sanity_check()
    # every surviving offset is found through the (repaired) index
    for h in headers:
        assert log.read(h.last_offset, 1).read_bytes()[:8] == data[h.position:h.position + 8]
    return log


sizes_st = st.lists(st.integers(0, 120), min_size=1, max_size=4)


@SETTINGS
@given(sizes_st, st.integers(0, 2))
def test_log_cut_at_every_byte_of_its_last_batch(sizes: list[int], aborts: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory, batches = write_log(Path(tmp), sizes, aborts)
        path = directory / "00000000000000000000.log"
        full = path.read_bytes()
        start = len(full) - len(batches[-1])
        for cut in range(start, len(full)):
            path.write_bytes(full[:cut])
            check_prefix(directory, batches, len(batches) - 1).release_handles()
            path.write_bytes(full)


@SETTINGS
@given(sizes_st, st.integers(1, 2), st.sampled_from([".index", ".timeindex", ".txnindex"]))
def test_index_files_cut_at_every_byte_of_their_last_entry(sizes: list[int], aborts: int,
                                                           suffix: str) -> None:
    entry = {".index": 8, ".timeindex": 12, ".txnindex": 34}[suffix]
    with tempfile.TemporaryDirectory() as tmp:
        directory, batches = write_log(Path(tmp), sizes, aborts)
        path = directory / f"00000000000000000000{suffix}"
        full = path.read_bytes()
        assert len(full) >= entry
        for cut in range(len(full) - entry, len(full)):
            path.write_bytes(full[:cut])
            log = check_prefix(directory, batches, len(batches))
            if suffix == ".txnindex":  # the aborted transactions are all found again
                aborted = log.collect_aborted_transactions(0, log.log_end_offset)
                assert len(aborted) == aborts
            log.release_handles()
            path.write_bytes(full)


@SETTINGS
@given(sizes_st, st.sampled_from(["recovery-point-offset-checkpoint",
                                  "log-start-offset-checkpoint",
                                  "replication-offset-checkpoint", "leader-epoch-checkpoint"]))
def test_checkpoints_cut_at_every_byte(sizes: list[int], name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "dir"
        lm = LogManager([root], clock=lambda: NOW)
        log = lm.get_or_create_log("t", 0)
        for i, size in enumerate(sizes):
            append(log, [b"%d" % i + b"y" * size])
        lm.write_high_watermarks({("t", 0): log.log_end_offset})
        leo = log.log_end_offset
        lm.shutdown()
        path = root / "t-0" / name if name == "leader-epoch-checkpoint" else root / name
        full = path.read_bytes()
        (root / ".kafka_cleanshutdown").unlink()  # a crash: recovery runs
        for cut in range(len(full)):
            path.write_bytes(full[:cut])
            lm2 = LogManager([root], clock=lambda: NOW)
            try:
                again = lm2.get_log("t", 0)
                assert again is not None and again.log_end_offset == leo
                assert set(lm2.read_high_watermarks().values()) <= {leo}
            finally:
                lm2.close_without_shutdown()
            path.write_bytes(full)
