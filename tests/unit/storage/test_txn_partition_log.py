"""Transactions in the log (KIP-98): LSO against a simple model under random interleavings of
transactional batches, markers and HW moves; ``.txnindex`` written on ABORT, truncated, rebuilt
by recovery (deleted, corrupt, torn, crash-truncated log); LSO across restarts; read_committed
reads with aborted transactions; control batches refused from clients."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.control_records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from odradek.protocol.records import InvalidRecordError, build_batch, validate_batches
from odradek.storage.append_origin import AppendOrigin
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.transaction_index import AbortedTransaction, AbortedTxn

CLIENT, COORDINATOR = AppendOrigin.CLIENT, AppendOrigin.COORDINATOR


def data(pid: int, seq: int, n: int = 1, txn: bool = True, epoch: int = 0) -> bytes:
    return build_batch([(b"k", b"v%d" % i) for i in range(n)], timestamp_ms=1_000,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=txn)


def marker(pid: int, abort: bool, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    kind = ControlRecordType.ABORT if abort else ControlRecordType.COMMIT
    return build_end_txn_marker_batch(EndTransactionMarker(kind, coordinator_epoch), pid, epoch,
                                      timestamp_ms=1_000)


def append(log: Log, records: bytes, origin: AppendOrigin = CLIENT):
    buf = bytearray(records)
    headers = validate_batches(buf, allow_control=origin is COORDINATOR)
    return log.append_as_leader(buf, headers, 0, 1_000, origin)


def small_segments() -> LogConfig:
    return LogConfig(segment_bytes=400)


@dataclass
class Model:
    """The partition's transactions, kept naively."""

    ongoing: dict[int, int] = field(default_factory=dict)  # pid -> first offset
    completed: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, first, marker)
    aborted: list[AbortedTxn] = field(default_factory=list)
    hw: int = 0

    def lso(self, leo: int) -> int:
        hw = min(self.hw, leo)
        unstable = list(self.ongoing.values()) + [f for _, f, m in self.completed if m >= hw]
        return min([*unstable, hw])


ops = st.lists(st.tuples(st.sampled_from(["data", "commit", "abort", "hw", "plain"]),
                         st.integers(0, 3), st.integers(1, 3)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_lso_and_aborted_transactions_match_a_model(steps) -> None:
    tmp = Path(tempfile.mkdtemp())
    try:
        log = Log.open(tmp / "t-0", small_segments())
        log.high_watermark = 0
        model, seqs = Model(), {}
        for kind, pid, n in steps:
            leo = log.log_end_offset
            if kind in ("data", "plain"):
                txn = kind == "data"
                if not txn and pid in model.ongoing:
                    with pytest.raises(Exception, match="transactional"):
                        append(log, data(pid, seqs.get(pid, 0), n, txn=False))
                    continue
                append(log, data(pid, seqs.get(pid, 0), n, txn=txn))
                seqs[pid] = seqs.get(pid, 0) + n
                if txn:
                    model.ongoing.setdefault(pid, leo)
            elif kind in ("commit", "abort"):
                append(log, marker(pid, kind == "abort"), COORDINATOR)
                if pid in model.ongoing:
                    first = model.ongoing.pop(pid)
                    model.completed.append((pid, first, leo))
                    if kind == "abort":
                        others = list(model.ongoing.values())
                        model.aborted.append(AbortedTxn(pid, first, leo,
                                                        min(others) if others else leo + 1))
            else:
                model.hw = min(leo, model.hw + n * 2)
                log.high_watermark = model.hw
            assert log.last_stable_offset == model.lso(log.log_end_offset)
        indexed = [t for s in log.segments for t in s.txn_index.all_aborted_txns()]
        assert indexed == model.aborted
        leo = log.log_end_offset
        for start in range(0, leo + 1, 3):
            for upper in range(start, leo + 2, 4):
                expected = [t for t in model.aborted
                            if t.last_offset >= start and t.first_offset < upper]
                assert log.collect_aborted_transactions(start, upper) == expected
        # restart (clean): the ongoing transactions come back from the snapshot
        log.close()
        reopened = Log.open(tmp / "t-0", small_segments(), had_clean_shutdown=True)
        assert reopened.first_unstable_offset == min(model.ongoing.values(), default=None)
        reopened.close()
        # the transaction indexes are rebuilt by recovery when they are gone
        for name in os.listdir(tmp / "t-0"):
            if name.endswith(".txnindex"):
                os.unlink(tmp / "t-0" / name)
        recovered = Log.open(tmp / "t-0", small_segments(), recovery_point=0)
        assert [t for s in recovered.segments
                for t in s.txn_index.all_aborted_txns()] == model.aborted
        assert recovered.first_unstable_offset == min(model.ongoing.values(), default=None)
        recovered.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_abort_writes_the_txnindex_and_read_committed_reads_list_it(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    append(log, data(1, 0, 2))          # 0-1
    append(log, data(2, 0, 1))          # 2
    append(log, marker(1, True), COORDINATOR)   # 3
    assert log.last_stable_offset == 2
    path = log.active_segment.txn_index_path
    assert path.exists() and path.stat().st_size == 34
    assert log.active_segment.txn_index.all_aborted_txns() == [AbortedTxn(1, 0, 3, 2)]
    append(log, marker(2, False), COORDINATOR)  # 4
    assert log.last_stable_offset == 5 and log.first_unstable_offset is None
    full = log.read(0, 1 << 20, max_offset=log.last_stable_offset, include_aborted_txns=True)
    assert full.aborted_transactions == [AbortedTransaction(1, 0)]
    assert log.read(4, 1 << 20, include_aborted_txns=True).aborted_transactions == []
    assert log.read(0, 1 << 20).aborted_transactions is None
    # an empty read_committed read lists none (not null)
    assert log.read(5, 1 << 20, include_aborted_txns=True).aborted_transactions == []


def test_clients_may_not_write_control_batches(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    with pytest.raises(InvalidRecordError):
        validate_batches(marker(1, True))
    buf = bytearray(marker(1, True))
    headers = validate_batches(buf, allow_control=True)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(buf, headers, 0, 1_000, CLIENT)
    assert log.log_end_offset == 0


def test_truncation_rewinds_the_txnindex_and_the_producer_state(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_segments())
    append(log, data(1, 0, 2))                    # 0-1
    append(log, marker(1, True), COORDINATOR)     # 2
    append(log, data(1, 2, 1))                    # 3
    append(log, data(2, 0, 1))                    # 4
    append(log, marker(2, True), COORDINATOR)     # 5
    aborted = [t for s in log.segments for t in s.txn_index.all_aborted_txns()]
    assert [t.last_offset for t in aborted] == [2, 5]
    log.truncate_to(5)
    assert [t for s in log.segments for t in s.txn_index.all_aborted_txns()] == aborted[:1]
    assert log.producer_state.ongoing_txns == {3: 1, 4: 2}
    assert log.first_unstable_offset == 3
    log.truncate_to(3)
    assert log.producer_state.ongoing_txns == {}
    log.truncate_to(2)
    assert [t for s in log.segments for t in s.txn_index.all_aborted_txns()] == []
    assert log.producer_state.ongoing_txns == {0: 1}
    log.truncate_fully_and_start_at(10)
    assert log.first_unstable_offset is None


def test_recovery_rebuilds_corrupt_or_torn_txnindex_and_after_a_torn_log(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory)
    append(log, data(1, 0, 2))
    append(log, marker(1, True), COORDINATOR)     # 2
    append(log, data(2, 0, 1))                    # 3
    append(log, marker(2, True), COORDINATOR)     # 4
    append(log, data(3, 0, 1))                    # 5
    expected = log.active_segment.txn_index.all_aborted_txns()
    assert len(expected) == 2
    log.close(flush=True)
    txn = directory / "00000000000000000000.txnindex"
    # a torn tail (crash in the middle of an index append) makes the loader recover
    with open(txn, "ab") as f:
        f.write(b"\x00" * 7)
    reopened = Log.open(directory, had_clean_shutdown=True, recovery_point=6)
    assert reopened.active_segment.txn_index.all_aborted_txns() == expected
    assert txn.stat().st_size == 68
    reopened.close(flush=True)
    # a corrupt entry (last offsets not increasing) too
    content = txn.read_bytes()
    txn.write_bytes(content[34:] + content[:34])
    reopened = Log.open(directory, had_clean_shutdown=True, recovery_point=6)
    assert reopened.active_segment.txn_index.all_aborted_txns() == expected
    assert reopened.first_unstable_offset == 5
    reopened.close(flush=True)
    # a crash that tore the log's tail inside the second ABORT marker drops its entry
    log_file = directory / "00000000000000000000.log"
    size = log_file.stat().st_size
    os.truncate(log_file, size - 79 - 10)  # the last data batch and part of the marker
    crashed = Log.open(directory, recovery_point=0)
    assert crashed.log_end_offset == 4
    assert crashed.active_segment.txn_index.all_aborted_txns() == expected[:1]
    assert crashed.producer_state.ongoing_txns == {3: 2}
    assert crashed.last_stable_offset == 3
    crashed.close()


def test_follower_appends_keep_the_same_txnindex_and_lso(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "l-0", small_segments())
    append(leader, data(1, 0, 3))
    append(leader, data(2, 0, 1))
    append(leader, marker(1, True), COORDINATOR)
    append(leader, data(3, 0, 2))
    append(leader, marker(2, False), COORDINATOR)
    append(leader, marker(3, True), COORDINATOR)
    append(leader, data(4, 0, 1))
    follower = Log.open(tmp_path / "f-0", small_segments())
    offset = 0
    while offset < leader.log_end_offset:
        chunk = leader.read(offset, 150).read_bytes()
        info = follower.append_as_follower(chunk)
        assert info is not None
        offset = info.last_offset + 1
    leader_idx = [t for s in leader.segments for t in s.txn_index.all_aborted_txns()]
    follower_idx = [t for s in follower.segments for t in s.txn_index.all_aborted_txns()]
    assert follower_idx == leader_idx and len(leader_idx) == 2
    assert follower.first_unstable_offset == leader.first_unstable_offset
    for log in (leader, follower):
        log.high_watermark = log.log_end_offset
    assert follower.last_stable_offset == leader.last_stable_offset


def test_retention_and_deletion_take_the_txnindex_with_the_segment(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_segments())
    for i in range(4):
        append(log, data(i, 0, 2))
        append(log, marker(i, True), COORDINATOR)
    first = log.segments[0]
    path = first.txn_index_path
    assert path.exists()
    log.high_watermark = log.log_end_offset
    log.maybe_increment_log_start_offset(log.segments[1].base_offset)
    log.delete_retention_segments(now_ms=1_000)
    assert not path.exists()
    assert not Path(str(path) + ".deleted").exists()


def test_the_last_stable_offset_is_never_below_the_log_start_offset(tmp_path: Path) -> None:
    """DeleteRecords may move the log start offset past the first offset of an open
    transaction (only the high watermark bounds it): the first unstable offset is then the log
    start offset (Kafka's maybeIncrementFirstUnstableOffset keeps log start offset <= last
    stable offset <= high watermark), so read_committed fetches and ListOffsets never see an
    offset below the log."""
    log = Log.open(tmp_path / "t-0", LogConfig())
    append(log, data(1, 0, 3))                     # 0-2: an open transaction
    append(log, build_batch([(b"k", b"v")] * 4, timestamp_ms=1_000))  # 3-6
    log.high_watermark = log.log_end_offset
    assert log.first_unstable_offset == 0 and log.last_stable_offset == 0
    assert log.maybe_increment_log_start_offset(5)
    assert log.first_unstable_offset == 5 and log.last_stable_offset == 5
    append(log, marker(1, abort=False), COORDINATOR)  # 7
    log.high_watermark = log.log_end_offset
    assert log.first_unstable_offset is None and log.last_stable_offset == 8
