"""Idempotent producers (KIP-98): duplicates answer with the original offsets, sequence gaps and
stale epochs are rejected, state survives restarts (snapshots + header scan) and truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.protocol.records import BatchHeader, build_batch, read_header, validate_batches
from odradek.storage.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)
from odradek.storage.log import Log
from odradek.storage.log_config import INT_MAX, LogConfig
from odradek.storage.producer_state import ProducerStateManager

NOW = 1_700_000_000_000
PID = 4242


def header(seq: int, n: int = 1, *, epoch: int = 0, pid: int = PID, offset: int = 0,
           ts: int = NOW) -> BatchHeader:
    data = build_batch([(b"k", b"v")] * n, base_offset=offset, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, timestamp_ms=ts)
    return read_header(data)


def applied(psm: ProducerStateManager, h: BatchHeader, offset: int) -> None:
    assert psm.check(h) is None
    psm.update(h, base_offset=offset)


class TestValidation:
    def test_in_sequence_batches_pass(self) -> None:
        psm = ProducerStateManager()
        applied(psm, header(0, 3), 0)
        applied(psm, header(3, 2), 3)
        entry = psm.last_entry(PID)
        assert entry is not None and (entry.first_seq, entry.last_seq) == (0, 4)
        assert entry.last_data_offset == 4

    def test_duplicate_returns_the_original_offsets(self) -> None:
        psm = ProducerStateManager()
        applied(psm, header(0, 3), 100)
        applied(psm, header(3, 2), 250)
        dup = psm.check(header(0, 3))
        assert dup is not None and (dup.first_offset, dup.last_offset) == (100, 102)
        dup = psm.check(header(3, 2))
        assert dup is not None and (dup.first_offset, dup.last_offset) == (250, 251)
        # same first sequence but a different range is not a duplicate: it is out of order
        with pytest.raises(OutOfOrderSequenceError):
            psm.check(header(3, 1))

    def test_only_the_last_five_batches_are_remembered(self) -> None:
        psm = ProducerStateManager()
        for i in range(7):
            applied(psm, header(i), i)
        assert psm.check(header(2)) is not None
        with pytest.raises(OutOfOrderSequenceError):
            psm.check(header(1))  # too old to be recognised as a duplicate

    def test_gap_is_out_of_order(self) -> None:
        psm = ProducerStateManager()
        applied(psm, header(0, 2), 0)
        with pytest.raises(OutOfOrderSequenceError):
            psm.check(header(3))

    def test_older_epoch_is_fenced(self) -> None:
        psm = ProducerStateManager()
        applied(psm, header(0, epoch=5), 0)
        with pytest.raises(InvalidProducerEpochError):
            psm.check(header(1, epoch=4))

    def test_new_epoch_must_start_at_zero(self) -> None:
        psm = ProducerStateManager()
        applied(psm, header(0, 3, epoch=1), 0)
        with pytest.raises(OutOfOrderSequenceError):
            psm.check(header(3, epoch=2))
        applied(psm, header(0, epoch=2), 3)
        entry = psm.last_entry(PID)
        assert entry is not None and entry.producer_epoch == 2 and len(entry.batches) == 1

    def test_sequence_wraps_at_int_max(self) -> None:
        psm = ProducerStateManager()
        # replicated: sequences INT_MAX-1 and INT_MAX
        psm.update(header(INT_MAX - 1, 2), base_offset=0)
        applied(psm, header(0), 2)
        dup = psm.check(header(INT_MAX - 1, 2))
        assert dup is not None and dup.first_offset == 0

    def test_unknown_producer(self) -> None:
        assert ProducerStateManager().check(header(17)) is None  # Kafka >= 2.5 (KIP-360)
        with pytest.raises(UnknownProducerIdError):
            ProducerStateManager(strict_unknown_producer=True).check(header(17))

    def test_batches_of_one_request_are_checked_in_order(self) -> None:
        psm = ProducerStateManager()
        applied(psm, header(0, 2), 0)
        assert psm.check_batches([header(2, 2), header(4, 1)]) is None
        with pytest.raises(OutOfOrderSequenceError):
            psm.check_batches([header(2, 2), header(5, 1)])

    def test_expiration(self) -> None:
        psm = ProducerStateManager(producer_id_expiration_ms=1000)
        psm.update(header(0, ts=NOW), base_offset=0)
        psm.update(header(0, pid=7, ts=NOW + 900), base_offset=1)
        assert psm.remove_expired_producers(NOW + 1000) == 1
        assert psm.last_entry(PID) is None and psm.last_entry(7) is not None


class TestSnapshots:
    def test_round_trip_in_kafkas_layout(self, tmp_path: Path) -> None:
        psm = ProducerStateManager(tmp_path)
        psm.update(header(0, 3, epoch=2), base_offset=10)
        psm.update(header(0, pid=9), base_offset=13)
        path = psm.take_snapshot()
        assert path is not None and path.name == f"{14:020d}.snapshot"
        raw = path.read_bytes()
        assert raw[:2] == b"\x00\x01" and len(raw) == 2 + 4 + 4 + 2 * 46
        fresh = ProducerStateManager(tmp_path)
        assert fresh.load_latest_snapshot(0, 100) == 14
        entry = fresh.last_entry(PID)
        assert entry is not None and entry.producer_epoch == 2
        assert (entry.last_seq, entry.last_data_offset, entry.last_offset_delta) == (2, 12, 2)
        dup = fresh.check(header(0, 3, epoch=2))
        assert dup is not None and (dup.first_offset, dup.last_offset) == (10, 12)

    def test_corrupt_or_too_new_snapshots_are_dropped(self, tmp_path: Path) -> None:
        psm = ProducerStateManager(tmp_path)
        psm.update(header(0), base_offset=0)
        psm.take_snapshot()
        psm.update(header(1), base_offset=1)
        newest = psm.take_snapshot()
        assert newest is not None
        data = bytearray(newest.read_bytes())
        data[-1] ^= 1
        newest.write_bytes(data)
        fresh = ProducerStateManager(tmp_path)
        assert fresh.load_latest_snapshot(0, 100) == 1  # the older, valid one
        assert not newest.exists()
        assert fresh.load_latest_snapshot(0, 0) == 0  # above max_offset: deleted
        assert fresh.snapshot_offsets() == []


def produce(log: Log, seq: int, n: int = 1, epoch: int = 0):
    buf = bytearray(build_batch([(b"k", b"v")] * n, producer_id=PID, producer_epoch=epoch,
                                base_sequence=seq, timestamp_ms=NOW))
    return log.append_as_leader(buf, validate_batches(buf), 0, NOW)


class TestThroughTheLog:
    def test_duplicate_append_writes_nothing(self, tmp_path: Path) -> None:
        log = Log.open(tmp_path / "t-0", clock=lambda: NOW)
        first = produce(log, 0, 3)
        produce(log, 3, 2)
        size = log.size
        again = produce(log, 0, 3)
        assert again.duplicate and (again.first_offset, again.last_offset) == (0, 2)
        assert log.size == size and log.log_end_offset == 5
        assert not first.duplicate
        with pytest.raises(OutOfOrderSequenceError):
            produce(log, 9)
        assert log.log_end_offset == 5

    @pytest.mark.parametrize("clean", [True, False])
    def test_state_is_rebuilt_after_reopen(self, tmp_path: Path, clean: bool) -> None:
        config = LogConfig(segment_bytes=300)
        log = Log.open(tmp_path / "t-0", config, clock=lambda: NOW)
        seq = 0
        for _ in range(10):
            produce(log, seq, 2)
            seq += 2
        assert log.num_segments > 1
        if clean:
            log.close()
        else:
            log.release_handles()
        again = Log.open(tmp_path / "t-0", config, had_clean_shutdown=clean, clock=lambda: NOW)
        dup = produce(again, 18, 2)
        assert dup.duplicate and (dup.first_offset, dup.last_offset) == (18, 19)
        with pytest.raises(OutOfOrderSequenceError):
            produce(again, 21)
        assert produce(again, 20).first_offset == 20

    def test_truncation_rebuilds_the_state(self, tmp_path: Path) -> None:
        log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300), clock=lambda: NOW)
        for seq in range(0, 12, 2):
            produce(log, seq, 2)
        log.truncate_to(6)
        entry = log.producer_state.last_entry(PID)
        assert entry is not None and entry.last_seq == 5
        assert produce(log, 6, 2).first_offset == 6  # the truncated sequences may come again
        dup = produce(log, 6, 2)
        assert dup.duplicate and dup.first_offset == 6

    def test_follower_appends_feed_the_state(self, tmp_path: Path) -> None:
        leader = Log.open(tmp_path / "l-0", clock=lambda: NOW)
        follower = Log.open(tmp_path / "f-0", clock=lambda: NOW)
        for seq in range(0, 6, 2):
            produce(leader, seq, 2)
        follower.append_as_follower(leader.read(0, 10**6).read_bytes())
        dup = produce(follower, 4, 2)  # the follower becomes leader; the producer retries
        assert dup.duplicate and (dup.first_offset, dup.last_offset) == (4, 5)
