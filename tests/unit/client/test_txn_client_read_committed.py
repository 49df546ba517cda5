"""read_committed filtering (client/read_committed.py through the consumer's batch parsing):
random interleavings of transactional batches of several producers, their COMMIT/ABORT markers
and plain batches; the consumer must return exactly the records of committed transactions and
plain batches, in offset order, and never a control record."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.client import AsyncConsumer, TopicPartition
from odradek.client.read_committed import AbortedTransactions, isolation_level
from odradek.protocol.control_records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from odradek.protocol.records import build_batch, read_header

TP = TopicPartition("t", 0)

# An event: ("data", producer, n records) | ("end", producer, commit?) | ("plain", -, n)
events = st.lists(st.one_of(
    st.tuples(st.just("data"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("end"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("plain"), st.just(-1), st.integers(1, 2)),
), max_size=25)


def build_log(evts: list[tuple[str, int, object]]) -> tuple[bytes, list[tuple[int, int, int]],
                                                           list[bytes], list[bytes]]:
    """(log bytes, aborted transactions (producer, first offset, marker offset), values a
    read_committed and a read_uncommitted consumer must see). Transactions still open at the
    end are aborted."""
    out = bytearray()
    offset = 0
    open_txn: dict[int, tuple[int, list[bytes]]] = {}  # producer -> (first offset, values)
    aborted: list[tuple[int, int, int]] = []  # (producer, first offset, abort marker offset)
    committed_values: dict[int, bytes] = {}  # offset -> value, of records that stay visible
    all_values: list[bytes] = []
    epoch = 0

    def end(pid: int, commit: bool) -> None:
        nonlocal offset
        first, values = open_txn.pop(pid)
        if commit:
            for off, v in values:  # type: ignore[misc]
                committed_values[off] = v
        else:
            aborted.append((1000 + pid, first, offset))
        marker = EndTransactionMarker(ControlRecordType.COMMIT if commit
                                      else ControlRecordType.ABORT, 3)
        out.extend(build_end_txn_marker_batch(marker, 1000 + pid, epoch, timestamp_ms=1,
                                              base_offset=offset))
        offset += 1

    for kind, pid, arg in [*evts, *(("end", p, False) for p in range(3))]:
        if kind == "data":
            n = int(arg)  # type: ignore[call-overload]
            values = [f"p{pid}-{offset + i}".encode() for i in range(n)]
            out.extend(build_batch([(None, v) for v in values], base_offset=offset,
                                   timestamp_ms=1, producer_id=1000 + pid, producer_epoch=epoch,
                                   base_sequence=offset, is_transactional=True))
            first, pending = open_txn.get(pid, (offset, []))
            pending = [*pending, *((offset + i, v) for i, v in enumerate(values))]
            open_txn[pid] = (first, pending)  # type: ignore[assignment]
            all_values.extend(values)
            offset += n
        elif kind == "end" and pid in open_txn:
            end(pid, bool(arg))
        elif kind == "plain":
            n = int(arg)  # type: ignore[call-overload]
            values = [f"plain-{offset + i}".encode() for i in range(n)]
            out.extend(build_batch([(None, v) for v in values], base_offset=offset,
                                   timestamp_ms=1))
            for i, v in enumerate(values):
                committed_values[offset + i] = v
            all_values.extend(values)
            offset += n
    visible = [committed_values[k] for k in sorted(committed_values)]
    return bytes(out), aborted, visible, all_values


def consumer(level: str) -> AsyncConsumer:
    return AsyncConsumer({"bootstrap.servers": "h:1", "isolation.level": level})


@settings(max_examples=200, deadline=None)
@given(events, st.integers(0, 5))
def test_read_committed_returns_committed_records_only(evts: list[tuple[str, int, object]],
                                                       start_batch: int) -> None:
    data, aborted, visible, all_values = build_log(evts)
    c = consumer("read_committed")
    listed = [(pid, first) for pid, first, _ in aborted]
    records, next_offset = c._parse(TP, 0, data, AbortedTransactions(listed))
    assert [r.value for r in records] == visible
    offsets = [r.offset for r in records]
    assert offsets == sorted(offsets)
    # a fetch that starts at some batch boundary: records from there on, the same filtering
    # (the broker lists the aborted transactions overlapping the fetched range)
    pos, skipped = 0, 0
    while skipped < start_batch and pos < len(data):
        pos += read_header(data, pos).size
        skipped += 1
    if pos < len(data):
        start = read_header(data, pos).base_offset
        # Kafka lists only the aborted transactions whose marker is at or after the fetch
        # offset (LogSegment.collectAbortedTxns: last offset >= fetch offset)
        overlapping = [(pid, first) for pid, first, marker in aborted if marker >= start]
        later, _ = c._parse(TP, start, data[pos:], AbortedTransactions(overlapping))
        assert [r.value for r in later] == [r.value for r in records if r.offset >= start]
    # read_uncommitted: every data record, never a marker
    u = consumer("read_uncommitted")
    raw, next_u = u._parse(TP, 0, data, None)
    assert [r.value for r in raw] == all_values
    assert next_offset == next_u


def test_a_producer_reads_again_after_its_abort_marker() -> None:
    # pid 1: aborted txn at 0-1, marker at 2, committed txn at 3, marker at 4
    data = b"".join([
        build_batch([(None, b"a0"), (None, b"a1")], base_offset=0, producer_id=1,
                    producer_epoch=0, base_sequence=0, is_transactional=True),
        build_end_txn_marker_batch(EndTransactionMarker(ControlRecordType.ABORT, 0), 1, 0,
                                   timestamp_ms=1, base_offset=2),
        build_batch([(None, b"c3")], base_offset=3, producer_id=1, producer_epoch=0,
                    base_sequence=2, is_transactional=True),
        build_end_txn_marker_batch(EndTransactionMarker(ControlRecordType.COMMIT, 0), 1, 0,
                                   timestamp_ms=1, base_offset=4),
    ])
    records, next_offset = consumer("read_committed")._parse(
        TP, 0, data, AbortedTransactions([(1, 0)]))
    assert [r.value for r in records] == [b"c3"] and next_offset == 5
    # a non-transactional batch of a producer id listed as aborted is still returned
    flt = AbortedTransactions([(1, 0)])
    plain = read_header(build_batch([(None, b"x")], base_offset=0, producer_id=1,
                                    producer_epoch=0, base_sequence=0))
    assert not flt.skip(plain, lambda: False)


def test_isolation_level_names() -> None:
    assert isolation_level("READ_COMMITTED") == 1
    assert isolation_level("read_uncommitted") == 0
    assert consumer("read_committed").isolation_level == 1
    assert consumer("read_uncommitted").isolation_level == 0
    try:
        isolation_level("serializable")
    except ValueError as exc:
        assert "isolation.level" in str(exc)
    else:
        raise AssertionError("an unknown isolation level was accepted")


@settings(max_examples=100, deadline=None)
@given(events)
def test_spark_reader_decodes_committed_records_only(evts: list[tuple[str, int, object]]) -> None:
    """The Spark executor's column decoder with kafka.isolation.level=read_committed."""
    import pytest

    pytest.importorskip("pyarrow")
    from odradek.spark.reader import Columns, decode_into

    data, aborted, visible, all_values = build_log(evts)
    cols = Columns()
    nxt = decode_into(cols, data, 0, 1 << 40, True, False,
                      AbortedTransactions([(pid, first) for pid, first, _ in aborted]))
    assert cols.values == visible
    raw = Columns()
    assert decode_into(raw, data, 0, 1 << 40) == nxt
    assert raw.values == all_values
