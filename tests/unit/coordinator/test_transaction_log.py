"""`__transaction_state` records (Kafka 2.8's TransactionLog with TransactionLogKey and
TransactionLogValue v0): golden bytes written out field by field from the schemas, round trips
with hypothesis, tombstones, bad input, and DumpLogSegments' strings."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.common import TopicPartition
from odradek.coordinator import transaction_log as tl
from odradek.coordinator.transaction_state import (
    CompleteCommit,
    Empty,
    IllegalTransactionState,
    Ongoing,
    PrepareCommit,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from odradek.protocol.primitives import SchemaError
from odradek.protocol.transaction_log_records import format_record_key_and_value

# -- golden bytes ----------------------------------------------------------------------------------

KEY_MY_TXN = bytes.fromhex(
    "0000"              # version int16 = 0
    "0006" "6d792d74786e"  # transactional_id string: length 6, "my-txn"
)

# TransactionLogValue v0, fields in the schema's order. The two timestamps differ, so writing
# them the other way round (or any other reordering) changes the bytes.
VALUE_ONGOING = bytes.fromhex(
    "0000"                  # version int16 = 0
    "00000000000003e8"      # producer_id int64 = 1000
    "0005"                  # producer_epoch int16 = 5
    "0000ea60"              # transaction_timeout_ms int32 = 60000
    "01"                    # transaction_status int8 = 1 (Ongoing)
    "00000002"              # transaction_partitions: 2 topics
    "0003" "626172"         #   topic string "bar"
    "00000001"              #   partition_ids: 1 element
    "00000001"              #     1
    "0003" "666f6f"         #   topic string "foo"
    "00000002"              #   partition_ids: 2 elements
    "00000000"              #     0
    "00000002"              #     2
    "00000000000f4240"      # transaction_last_update_timestamp_ms int64 = 1000000
    "00000000000f3e58"      # transaction_start_timestamp_ms int64 = 999000
)

VALUE_EMPTY = bytes.fromhex(
    "0000"                  # version int16 = 0
    "000000000000002a"      # producer_id int64 = 42
    "0000"                  # producer_epoch int16 = 0
    "000003e8"              # transaction_timeout_ms int32 = 1000
    "00"                    # transaction_status int8 = 0 (Empty)
    "ffffffff"              # transaction_partitions: null (Empty is written without)
    "0000000000000064"      # transaction_last_update_timestamp_ms int64 = 100
    "ffffffffffffffff"      # transaction_start_timestamp_ms int64 = -1 (no transaction)
)

ONGOING_TRANSIT = TxnTransitMetadata(
    producer_id=1000, last_producer_id=1000, producer_epoch=5, last_producer_epoch=4,
    txn_timeout_ms=60_000, txn_state=Ongoing,
    topic_partitions=frozenset({TopicPartition("foo", 2), TopicPartition("bar", 1),
                                TopicPartition("foo", 0)}),
    txn_start_timestamp=999_000, txn_last_update_timestamp=1_000_000)

EMPTY_TRANSIT = TxnTransitMetadata(42, 41, 0, -1, 1000, Empty, frozenset(), -1, 100)


def test_key_golden() -> None:
    assert tl.key_to_bytes("my-txn") == KEY_MY_TXN
    assert tl.read_txn_record_key(KEY_MY_TXN) == tl.TxnKey("my-txn", 0)


def test_value_golden_ongoing() -> None:
    assert tl.value_to_bytes(ONGOING_TRANSIT) == VALUE_ONGOING
    m = tl.read_txn_record_value("my-txn", VALUE_ONGOING)
    # the last producer id and epoch are not in v0: a loaded metadata has none
    assert m == TransactionMetadata(
        "my-txn", 1000, -1, 5, -1, 60_000, Ongoing,
        {TopicPartition("bar", 1), TopicPartition("foo", 0), TopicPartition("foo", 2)},
        999_000, 1_000_000)


def test_value_golden_empty() -> None:
    assert tl.value_to_bytes(EMPTY_TRANSIT) == VALUE_EMPTY
    m = tl.read_txn_record_value("t", VALUE_EMPTY)
    assert m is not None
    assert (m.producer_id, m.producer_epoch, m.txn_timeout_ms, m.state, m.topic_partitions,
            m.txn_last_update_timestamp, m.txn_start_timestamp) == (42, 0, 1000, Empty, set(),
                                                                     100, -1)


def test_status_byte_is_the_state_id() -> None:
    for state in TransactionState:
        parts = frozenset() if state is Empty else frozenset({TopicPartition("t", 0)})
        value = tl.value_to_bytes(TxnTransitMetadata(1, 1, 0, -1, 1, state, parts, 0, 0))
        assert value[2 + 8 + 2 + 4] == state.id


# -- rules Kafka's TransactionLog enforces --------------------------------------------------------

def test_empty_with_partitions_is_refused() -> None:
    transit = TxnTransitMetadata(1, 1, 0, -1, 1, Empty, frozenset({TopicPartition("t", 0)}), -1, 0)
    with pytest.raises(IllegalTransactionState):
        tl.value_to_bytes(transit)


def test_partitions_of_an_empty_value_are_ignored_on_read() -> None:
    # an Empty value carrying a partition (not written by Kafka, but readable): loaded without
    value = bytearray(VALUE_ONGOING)
    value[16] = 0  # status Ongoing -> Empty
    m = tl.read_txn_record_value("t", bytes(value))
    assert m is not None
    assert (m.state, m.topic_partitions) == (Empty, set())


def test_tombstone() -> None:
    assert tl.read_txn_record_value("t", None) is None


def test_null_partitions_in_another_state_read_as_none() -> None:
    value = bytearray(VALUE_EMPTY)
    value[16] = CompleteCommit.id
    m = tl.read_txn_record_value("t", bytes(value))
    assert m is not None
    assert (m.state, m.topic_partitions) == (CompleteCommit, set())


@pytest.mark.parametrize("version", [1, 2, -1])
def test_unknown_versions(version: int) -> None:
    with pytest.raises(SchemaError):
        tl.read_txn_record_key(struct.pack(">h", version) + KEY_MY_TXN[2:])
    with pytest.raises(SchemaError):
        tl.read_txn_record_value("t", struct.pack(">h", version) + VALUE_ONGOING[2:])


@pytest.mark.parametrize("status", [8, 42, -1])
def test_unknown_status_byte(status: int) -> None:
    value = bytearray(VALUE_ONGOING)
    value[16] = status & 0xFF
    with pytest.raises(SchemaError):
        tl.read_txn_record_value("t", bytes(value))


@pytest.mark.parametrize("cut", [1, 2, 10, 17, 25, 40, len(VALUE_ONGOING) - 1])
def test_truncated_value(cut: int) -> None:
    with pytest.raises(SchemaError):
        tl.read_txn_record_value("t", VALUE_ONGOING[:cut])


def test_truncated_or_null_key() -> None:
    with pytest.raises(SchemaError):
        tl.read_txn_record_key(KEY_MY_TXN[:5])
    with pytest.raises(SchemaError):
        tl.read_txn_record_key(b"\x00\x00\xff\xff")  # a null transactional id


def test_null_topic_or_partition_ids_are_refused() -> None:
    head = VALUE_ONGOING[:17] + bytes.fromhex("00000001")
    tail = VALUE_ONGOING[-16:]
    with pytest.raises(SchemaError):
        tl.read_txn_record_value("t", head + bytes.fromhex("ffff" "00000000") + tail)
    with pytest.raises(SchemaError):
        tl.read_txn_record_value("t", head + bytes.fromhex("0001" "74" "ffffffff") + tail)


# -- DumpLogSegments ------------------------------------------------------------------------------

def test_format_record_key_and_value() -> None:
    assert format_record_key_and_value(KEY_MY_TXN, VALUE_ONGOING) == (
        "transaction_metadata::transactionalId=my-txn",
        "producerId:1000,producerEpoch:5,state=Ongoing,partitions=[bar-1,foo-0,foo-2],"
        "txnLastUpdateTimestamp=1000000,txnTimeoutMs=60000")
    assert format_record_key_and_value(KEY_MY_TXN, None) == (
        "transaction_metadata::transactionalId=my-txn", "<DELETE>")


# -- round trips ---------------------------------------------------------------------------------

int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
partitions = st.frozensets(
    st.builds(TopicPartition, st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)),
    max_size=12)


@st.composite
def transits(draw: st.DrawFn) -> TxnTransitMetadata:
    state = draw(st.sampled_from(list(TransactionState)))
    tps = frozenset() if state is Empty else draw(partitions)
    return TxnTransitMetadata(draw(int64s), draw(int64s), draw(int16s), draw(int16s),
                              draw(int32s), state, tps, draw(int64s), draw(int64s))


@given(st.text(max_size=200))
def test_key_round_trip(transactional_id: str) -> None:
    key = tl.key_to_bytes(transactional_id)
    assert tl.read_txn_record_key(key) == tl.TxnKey(transactional_id)
    assert len(key) == 2 + 2 + len(transactional_id.encode())


@given(transits(), st.text(max_size=20))
def test_value_round_trip(transit: TxnTransitMetadata, transactional_id: str) -> None:
    value = tl.value_to_bytes(transit)
    m = tl.read_txn_record_value(transactional_id, value)
    assert m is not None
    assert (m.transactional_id, m.producer_id, m.producer_epoch, m.txn_timeout_ms, m.state,
            frozenset(m.topic_partitions), m.txn_start_timestamp, m.txn_last_update_timestamp) \
        == (transactional_id, transit.producer_id, transit.producer_epoch, transit.txn_timeout_ms,
            transit.txn_state, transit.topic_partitions, transit.txn_start_timestamp,
            transit.txn_last_update_timestamp)
    assert (m.last_producer_id, m.last_producer_epoch, m.pending_state) == (-1, -1, None)
    # the loaded metadata writes the same bytes again
    assert tl.value_to_bytes(m.prepare_no_transit()) == value


@given(partitions.filter(bool))
def test_partitions_are_grouped_by_topic(tps: frozenset[TopicPartition]) -> None:
    value = tl.value_to_bytes(TxnTransitMetadata(1, 1, 0, -1, 1, PrepareCommit, tps, 0, 0))
    (count,) = struct.unpack_from(">i", value, 17)
    assert count == len({tp.topic for tp in tps})

