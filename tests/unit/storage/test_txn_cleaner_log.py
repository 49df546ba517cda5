"""The log cleaner on compacted logs holding transactions (KIP-98, storage/cleaner.py with
cleaned_transaction_metadata.py): hand-built cases and a property test over random
interleavings of committed, aborted and ongoing transactions with plain records. After
cleaning, the read_committed view (latest value per key) equals the model's, aborted records
are gone, ongoing transactions are untouched, markers stay until their data is gone and the
delete horizon passed, each producer keeps its last batch, and the transaction indexes survive
the swap and a reopen."""

from __future__ import annotations

import heapq
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.control_records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
    parse_control_batch,
)
from odradek.protocol.records import build_batch, decode_records, iter_headers
from odradek.storage.cleaner import Cleaner, CleanerConfig, CleanerStats, clean_log, swap_in
from odradek.storage.cleaner_manager import LogCleanerManager
from odradek.storage.cleaning_plan import offsets_to_clean, plan_cleaning
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.transaction_index import AbortedTxn

NOW = 1_700_000_000_000
OLD = NOW - 3_600_000  # every segment's mtime before a pass
LONG_RETENTION = 10 * 365 * 86_400_000


def compact_log(directory: Path, delete_retention_ms: int = 0) -> Log:
    return Log.open(directory, LogConfig(cleanup_policy=("compact",),
                                         min_cleanable_dirty_ratio=0.0,
                                         delete_retention_ms=delete_retention_ms))


# -- writing a transactional log (as a follower would: offsets and producer state as given) -----

@dataclass
class Writer:
    """Appends batches to `lg` and keeps the model: every record with its offset and the
    transaction it belongs to (None: not transactional), each transaction's outcome."""

    lg: Log
    records: list[tuple[int, bytes, bytes | None, int | None]] = field(default_factory=list)
    outcome: dict[int, bool | None] = field(default_factory=dict)  # txn -> committed (None: open)
    txn_producer: dict[int, int] = field(default_factory=dict)
    txn_first: dict[int, int] = field(default_factory=dict)
    open_txn: dict[int, int] = field(default_factory=dict)  # producer -> its open txn
    seq: dict[int, int] = field(default_factory=dict)
    markers: dict[int, tuple[int, int, bool]] = field(default_factory=dict)  # offset -> (pid, ...)

    def data(self, kvs: Sequence[tuple[bytes, bytes | None]]) -> int:
        offset = self.lg.log_end_offset
        self.lg.append_as_follower(build_batch(list(kvs), base_offset=offset,
                                               timestamp_ms=NOW - 10_000))
        for i, (k, v) in enumerate(kvs):
            self.records.append((offset + i, k, v, None))
        return offset

    def txn(self, pid: int, kvs: Sequence[tuple[bytes, bytes | None]]) -> int:
        offset = self.lg.log_end_offset
        txn = self.open_txn.get(pid)
        if txn is None:
            txn = self.open_txn[pid] = len(self.outcome)
            self.outcome[txn] = None
            self.txn_producer[txn] = pid
            self.txn_first[txn] = offset
        seq = self.seq.get(pid, 0)
        self.seq[pid] = seq + len(kvs)
        self.lg.append_as_follower(build_batch(
            list(kvs), base_offset=offset, timestamp_ms=NOW - 10_000, producer_id=pid,
            producer_epoch=0, base_sequence=seq, is_transactional=True))
        for i, (k, v) in enumerate(kvs):
            self.records.append((offset + i, k, v, txn))
        return offset

    def end(self, pid: int, commit: bool) -> int:
        offset = self.lg.log_end_offset
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        self.lg.append_as_follower(build_end_txn_marker_batch(
            EndTransactionMarker(kind, 0), pid, 0, timestamp_ms=NOW - 10_000,
            base_offset=offset))
        txn = self.open_txn.pop(pid, None)
        if txn is not None:
            self.outcome[txn] = commit
        self.markers[offset] = (pid, -1 if txn is None else txn, commit)
        return offset

    def expected_view(self, lso: int) -> dict[bytes, bytes]:
        """The latest committed value of each key below the LSO (tombstones delete)."""
        view: dict[bytes, bytes | None] = {}
        for offset, k, v, txn in self.records:
            if offset < lso and (txn is None or self.outcome[txn]):
                view[k] = v
        return {k: v for k, v in view.items() if v is not None}


# -- reading it back ---------------------------------------------------------------------------

def batches(lg: Log) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of every batch in the log."""
    data = lg.read(lg.log_start_offset, 1 << 30).read_bytes()
    return [(h.base_offset, bytes(data[h.position:h.position + h.size]))
            for h in iter_headers(data)]


def read_committed_view(lg: Log) -> dict[bytes, bytes]:
    """The latest value per key a read_committed consumer sees (Kafka's consumer algorithm:
    the fetch's aborted transactions, skipping an aborted producer's transactional batches
    from its first offset until its ABORT marker; stops at the LSO)."""
    lso = lg.last_stable_offset
    data = lg.read(lg.log_start_offset, 1 << 30).read_bytes()
    pending = [(t.first_offset, t.producer_id)
               for t in lg.collect_aborted_transactions(lg.log_start_offset, lso)]
    heapq.heapify(pending)
    aborted: set[int] = set()
    view: dict[bytes, bytes | None] = {}
    for h in iter_headers(data):
        if h.base_offset >= lso:
            break
        while pending and pending[0][0] <= h.last_offset:
            aborted.add(heapq.heappop(pending)[1])
        raw = data[h.position:h.position + h.size]
        if h.is_control:
            cb = parse_control_batch(raw)
            if cb is not None and cb.control_type == ControlRecordType.ABORT:
                aborted.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborted:
            continue
        for r in decode_records(raw):
            if r.offset < lso:
                assert r.key is not None
                view[r.key] = r.value
    return {k: v for k, v in view.items() if v is not None}


def set_old_mtimes(lg: Log) -> None:
    for seg in lg.segments:
        os.utime(seg.log_path, ns=(OLD * 1_000_000, OLD * 1_000_000))


def clean_passes(lg: Log, passes: int = 3) -> int:
    """A full pass, then passes with a clean section (a checkpoint just past the log start, so
    that the delete horizon is the first segment's mtime minus delete.retention.ms); returns the
    first uncleanable offset of the first pass."""
    set_old_mtimes(lg)
    bound = offsets_to_clean(lg, None, NOW).first_uncleanable_dirty_offset
    clean_log(lg, NOW)
    for _ in range(passes - 1):
        set_old_mtimes(lg)
        if bound > lg.log_start_offset + 1:
            clean_log(lg, NOW, last_clean_offset=lg.log_start_offset + 1)
    return bound


# -- hand-built cases --------------------------------------------------------------------------

def test_before_the_fix_an_aborted_value_replaced_the_committed_one(tmp_path: Path) -> None:
    """What the cleaner did with transactions before it understood them: the aborted record
    was the key's latest, so the committed value went, and read_committed saw no value."""
    lg = compact_log(tmp_path / "t-0")
    w = Writer(lg)
    w.data([(b"k", b"committed")])
    w.txn(7, [(b"k", b"aborted")])
    w.end(7, commit=False)
    w.data([(b"j", b"x")])
    lg.roll()
    assert read_committed_view(lg) == {b"k": b"committed", b"j": b"x"}
    clean_log(lg, NOW)
    assert read_committed_view(lg) == {b"k": b"committed", b"j": b"x"}
    kept = {r.offset: r.value for _, b in batches(lg) for r in decode_records(b)}
    assert kept[0] == b"committed" and 1 not in kept  # the aborted record is gone
    # its batch stays, empty (producer 7's last data batch); so do the marker and its index
    # entry, in the cleaned segment
    assert [(o, len(decode_records(b))) for o, b in batches(lg)] == [(0, 1), (1, 0), (2, 1),
                                                                     (3, 1)]
    assert lg.segments[0].txn_index.all_aborted_txns() == [AbortedTxn(7, 1, 2, 3)]


def test_markers_go_after_their_data_and_the_delete_horizon(tmp_path: Path) -> None:
    lg = compact_log(tmp_path / "t-0")
    w = Writer(lg)
    w.txn(1, [(b"a", b"1")])          # 0, aborted
    w.end(1, commit=False)            # 1
    w.txn(2, [(b"b", b"1")])          # 2, committed then superseded
    w.end(2, commit=True)             # 3
    w.data([(b"b", b"2")])            # 4
    w.txn(1, [(b"c", b"1")])          # 5, committed, producer 1's last data batch
    w.end(1, commit=True)             # 6
    w.txn(2, [(b"d", b"1")])          # 7, producer 2's last data batch, aborted
    w.end(2, commit=False)            # 8
    lg.roll()
    w.data([(b"z", b"0")])            # 9
    lg.roll()
    set_old_mtimes(lg)
    clean_log(lg, NOW)  # no clean section yet: horizon 0, every marker stays
    offsets = [o for o, _ in batches(lg)]
    assert offsets == [1, 3, 4, 5, 6, 7, 8, 9]  # aborted 0 and superseded 2 are gone
    assert read_committed_view(lg) == {b"b": b"2", b"c": b"1", b"z": b"0"}
    # a pass with a clean section and old segments: the markers whose data is gone go; the
    # abort of producer 2 stays (its empty last batch is still there), with its index entry
    set_old_mtimes(lg)
    clean_log(lg, NOW, last_clean_offset=1)
    kept = {o: len(decode_records(b)) for o, b in batches(lg)}
    assert sorted(kept) == [4, 5, 6, 7, 8, 9]
    assert kept[7] == 0 and kept[5] == 1 and kept[6] == 1
    assert lg.collect_aborted_transactions(0, 10) == [AbortedTxn(2, 7, 8, 9)]
    assert read_committed_view(lg) == {b"b": b"2", b"c": b"1", b"z": b"0"}
    # the producer state survives a reopen from the cleaned log
    lg.close()
    lg = compact_log(tmp_path / "t-0")
    assert read_committed_view(lg) == {b"b": b"2", b"c": b"1", b"z": b"0"}
    assert lg.collect_aborted_transactions(0, 10) == [AbortedTxn(2, 7, 8, 9)]
    assert lg.producer_state.producers[1].last_data_offset == 5
    assert lg.producer_state.producers[2].last_data_offset == 7
    lg.close()


def test_an_ongoing_transaction_bounds_the_cleanable_range(tmp_path: Path) -> None:
    lg = compact_log(tmp_path / "t-0")
    w = Writer(lg)
    w.data([(b"k", b"1")])            # 0
    lg.roll()
    w.txn(3, [(b"k", b"open")])       # 1: ongoing
    w.data([(b"k", b"2")])            # 2
    lg.roll()
    w.data([(b"k", b"3")])            # 3
    lg.roll()
    assert lg.first_unstable_offset == 1
    before = batches(lg)
    plan = plan_cleaning(lg, NOW)
    assert plan is not None and plan.first_uncleanable_offset == 1
    manager = LogCleanerManager([tmp_path], lambda: {("t", 0): lg}, lambda path, data: None)
    [(_, _, ltc)] = manager.cleanable(NOW)
    assert (ltc.first_dirty_offset, ltc.first_uncleanable_offset) == (0, 1)
    clean_log(lg, NOW)
    assert batches(lg) == before  # nothing below 1 is superseded below 1
    w.end(3, commit=False)            # 4
    lg.roll()
    assert lg.first_unstable_offset is None
    clean_log(lg, NOW)
    assert read_committed_view(lg) == {b"k": b"3"}
    assert [r.value for _, b in batches(lg) for r in decode_records(b)] == [b"3", b"\0\0\0\0\0\0"]


# -- the property ------------------------------------------------------------------------------

KEYS = [b"a", b"b", b"c", b"d", b"e"]
kv = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.sampled_from([b"1", b"2", b"3"])))
kvs = st.lists(kv, min_size=1, max_size=2)
op = st.one_of(
    st.tuples(st.just("data"), kvs),
    st.tuples(st.just("txn"), st.sampled_from([1, 2, 3]), kvs),
    st.tuples(st.just("end"), st.sampled_from([1, 2, 3]), st.booleans()),
    st.just(("roll",)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=40), long_retention=st.booleans())
def test_property_cleaning_keeps_the_read_committed_view(ops: list[tuple], long_retention: bool
                                                         ) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        lg = compact_log(Path(tmp) / "t-0", LONG_RETENTION if long_retention else 0)
        w = Writer(lg)
        for o in ops:
            if o[0] == "data":
                w.data(o[1])
            elif o[0] == "txn":
                w.txn(o[1], o[2])
            elif o[0] == "end":
                w.end(o[1], o[2])
            else:
                lg.roll()
        lg.roll()
        lso = lg.last_stable_offset
        expected = w.expected_view(lso)
        assert read_committed_view(lg) == expected
        before = dict(batches(lg))
        last_data = {pid: e.last_data_offset for pid, e in lg.producer_state.producers.items()}

        bound = clean_passes(lg)

        assert read_committed_view(lg) == expected
        after = batches(lg)
        kept = {r.offset for _, b in after for r in decode_records(b)}
        by_offset = dict(after)
        # ongoing transactions (and all from the first unstable offset's segment) untouched
        assert {o: b for o, b in after if o >= bound} == {o: b for o, b in before.items()
                                                         if o >= bound}
        # aborted records gone
        for offset, _, _, txn in w.records:
            if txn is not None and w.outcome[txn] is False and offset < bound:
                assert offset not in kept
        # each producer's last data batch kept
        for pid, last in last_data.items():
            if 0 <= last < bound:
                assert any(o + _last_delta(b) == last for o, b in after), (pid, last)
        # markers: all stay with a long retention; otherwise a marker stays only while a batch
        # of its transaction does; a kept ABORT of a transaction with data keeps its entry
        aborted_entries = {t.last_offset: t for t in lg.collect_aborted_transactions(0, lso)}
        for offset, (pid, txn, commit) in w.markers.items():
            if offset >= bound:
                continue
            present = offset in by_offset and len(decode_records(by_offset[offset])) == 1
            txn_batches = [] if txn < 0 else [
                o for o, b in after
                if o < offset and o >= w.txn_first[txn] and _pid(b) == pid
                and not _is_control(b)]
            if long_retention:
                assert present, offset
            elif not present:
                assert not txn_batches, (offset, txn_batches)
            if present and not commit and txn_batches:
                assert offset in aborted_entries
        # every aborted transaction with a batch left is indexed
        entries = {(t.producer_id, t.last_offset)
                   for t in lg.collect_aborted_transactions(0, lg.log_end_offset)}
        with_data = {(pid, offset) for offset, (pid, txn, commit) in w.markers.items()
                     if not commit and txn >= 0 and any(
                         w.txn_first[txn] <= o < offset and _pid(b) == pid
                         and not _is_control(b) for o, b in after)}
        assert with_data <= entries
        # the cleaned log reopens (recovering every segment, which rebuilds the transaction
        # indexes from the batches left: an aborted transaction whose batches all went is no
        # longer indexed, one may start later) to the same view
        lg.close()
        lg = compact_log(Path(tmp) / "t-0", 0)
        assert read_committed_view(lg) == expected
        reopened = {(t.producer_id, t.last_offset)
                    for t in lg.collect_aborted_transactions(0, lg.log_end_offset)}
        assert with_data <= reopened <= entries
        lg.close()


def _last_delta(b: bytes) -> int:
    return int.from_bytes(b[23:27], "big", signed=True)


def _pid(b: bytes) -> int:
    return int.from_bytes(b[43:51], "big", signed=True)


def _is_control(b: bytes) -> bool:
    return bool(b[22] & 0x20)


# -- crash safety: the .txnindex goes through the swap with its segment -------------------------

class Crash(Exception):
    pass


def _txn_log(directory: Path) -> tuple[Log, Writer]:
    lg = compact_log(directory)
    w = Writer(lg)
    w.data([(b"k", b"committed")])    # 0
    w.txn(7, [(b"k", b"aborted")])    # 1
    w.txn(7, [(b"j", b"aborted")])    # 2
    lg.roll()
    w.end(7, commit=False)            # 3
    w.txn(8, [(b"k", b"c2")])         # 4
    w.end(8, commit=True)             # 5
    lg.roll()
    w.txn(7, [(b"z", b"1")])          # 6
    w.end(7, commit=True)             # 7
    lg.roll()
    return lg, w


@pytest.mark.parametrize("crash_after", ["cleaned", "swap", "deleted-1", "deleted-3", "final",
                                         None])
def test_a_crash_during_the_swap_keeps_the_aborted_transactions(tmp_path: Path,
                                                                crash_after: str | None) -> None:
    directory = tmp_path / "t-0"
    lg, w = _txn_log(directory)
    expected = w.expected_view(lg.last_stable_offset)
    assert expected == {b"k": b"c2", b"z": b"1"}
    end = lg.log_end_offset
    cleaner = Cleaner(0, CleanerConfig())
    plan = plan_cleaning(lg, NOW)
    assert plan is not None
    stats = CleanerStats()
    cleaner.build_offset_map(plan, stats)
    [group] = plan.groups(plan.first_uncleanable_offset)
    assert len(group) == 3
    cleaned = cleaner.clean_group(plan, group, stats)
    # the cleaned segment holds the aborted transaction's entry (its marker stays: batches of
    # the transaction were read in this pass)
    assert cleaned.txn_index.all_aborted_txns() == [AbortedTxn(7, 1, 3, 4)]
    steps: list[str] = []

    def step(name: str) -> None:
        steps.append(name)
        label = name if name != "deleted" else f"deleted-{steps.count('deleted')}"
        if label == crash_after:
            raise Crash(label)

    if crash_after is None:
        assert swap_in(lg, plan, group, cleaned)
        lg.close()
    elif crash_after != "cleaned":
        with pytest.raises(Crash):
            swap_in(lg, plan, group, cleaned, step=step)
    lg.release_handles()
    cleaned.close_handles()
    # reopened without recovering the segments (recovery point at the end): the .txnindex
    # files are taken as they are
    recovered = Log.open(directory, lg.config, recovery_point=end)
    assert read_committed_view(recovered) == expected
    assert recovered.collect_aborted_transactions(0, end) == [AbortedTxn(7, 1, 3, 4)]
    names = os.listdir(directory)
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    recovered.close()
