"""dump-log on transactional data (control batches, `__transaction_state` records, .txnindex
files) and `odradek transactions` (argument checks, Kafka's tables, hanging-transaction logic,
the commands against a scripted admin)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.cli import build_parser
from odradek.client.errors import KafkaError
from odradek.client.types import (
    AbortTransactionSpec,
    PartitionDescription,
    ProducerState,
    TopicDescription,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)
from odradek.coordinator import transaction_log
from odradek.coordinator.transaction_state import TransactionState, TxnTransitMetadata
from odradek.protocol.control_records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from odradek.protocol.records import build_batch
from odradek.protocol.transaction_log_records import format_record_key_and_value
from odradek.storage.transaction_index import AbortedTxn
from odradek.tools import transactions as tool
from odradek.tools.dump_log import DumpOptions, DumpReport, dump_file

SEG = "00000000000000000000"


def dump(path: Path, **opts: Any) -> tuple[list[str], DumpReport]:
    report = DumpReport()
    return list(dump_file(path, DumpOptions(**opts), report)), report


def txn_segment(tmp_path: Path) -> Path:
    path = tmp_path / f"{SEG}.log"
    path.write_bytes(b"".join([
        build_batch([(b"k", b"v0"), (b"k", b"v1")], base_offset=0, timestamp_ms=5,
                    producer_id=42, producer_epoch=3, base_sequence=0, is_transactional=True),
        build_end_txn_marker_batch(EndTransactionMarker(ControlRecordType.COMMIT, 7), 42, 3,
                                   timestamp_ms=6, base_offset=2),
        build_end_txn_marker_batch(EndTransactionMarker(ControlRecordType.ABORT, 8), 43, 0,
                                   timestamp_ms=7, base_offset=3),
    ]))
    return path


def test_dump_log_shows_control_batches_and_markers(tmp_path: Path) -> None:
    lines, report = dump(txn_segment(tmp_path), print_data_log=True)
    assert report.clean
    batches = [x for x in lines if x.startswith("baseOffset:")]
    assert "producerId: 42 producerEpoch: 3" in batches[0]
    assert "isTransactional: true isControl: false" in batches[0]
    assert "isTransactional: true isControl: true" in batches[1]
    records = [x for x in lines if x.startswith("| offset:")]
    assert records[0].endswith("key: k payload: v0")
    assert records[2] == ("| offset: 2 CreateTime: 6 keySize: 4 valueSize: 6 sequence: -1 "
                          "headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 7")
    assert records[3].endswith("endTxnMarker: ABORT coordinatorEpoch: 8")
    assert "payload" not in records[2]  # a control record's key and value are not data
    deep, _ = dump(txn_segment(tmp_path), deep_iteration=True)
    assert next(x for x in deep if "endTxnMarker" in x).endswith("COMMIT coordinatorEpoch: 7")


def test_dump_log_other_control_types(tmp_path: Path) -> None:
    path = tmp_path / f"{SEG}.log"
    path.write_bytes(build_batch([(b"\x00\x00\x00\x05", b"")], producer_id=1, producer_epoch=0,
                                 is_transactional=True, is_control=True))
    lines, _ = dump(path, deep_iteration=True)
    assert lines[-1].endswith("headerKeys: [] controlType: UNKNOWN(5)")


def transit(state: TransactionState, parts: set[TopicPartition]) -> TxnTransitMetadata:
    return TxnTransitMetadata(9, -1, 2, -1, 60000, state, frozenset(parts), 100, 200)


def test_transaction_log_decoder(tmp_path: Path) -> None:
    key = transaction_log.key_to_bytes("my-txn")
    value = transaction_log.value_to_bytes(transit(
        TransactionState.ONGOING, {TopicPartition("b", 1), TopicPartition("a", 0)}))
    path = tmp_path / f"{SEG}.log"
    path.write_bytes(build_batch([(key, value), (key, None)], producer_id=-1, timestamp_ms=1))
    lines, _ = dump(path, transaction_log_decoder=True)
    records = [x for x in lines if x.startswith("| offset:")]
    assert records[0].endswith(
        "key: transaction_metadata::transactionalId=my-txn payload: producerId:9,"
        "producerEpoch:2,state=Ongoing,partitions=[a-0,b-1],txnLastUpdateTimestamp=200,"
        "txnTimeoutMs=60000")
    assert records[1].endswith("payload: <DELETE>")
    assert build_parser().parse_args(
        ["dump-log", "--files", "x.log", "--transaction-log-decoder"]).transaction_log_decoder


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(list(TransactionState)),
       st.sets(st.tuples(st.sampled_from(["a", "b", "topic"]), st.integers(0, 40)),
               max_size=6),
       st.text(min_size=1, max_size=12))
def test_the_decoder_prints_what_the_coordinator_wrote(state: TransactionState,
                                                       parts: set[tuple[str, int]],
                                                       tid: str) -> None:
    """What dump-log prints for the bytes the coordinator writes names the same id, producer,
    state and partitions (sorted; none for Empty) as the metadata written."""
    tps = set() if state is TransactionState.EMPTY else {TopicPartition(*p) for p in parts}
    key = transaction_log.key_to_bytes(tid)
    value = transaction_log.value_to_bytes(transit(state, tps))
    shown = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(tps))
    assert format_record_key_and_value(key, value) == (
        f"transaction_metadata::transactionalId={tid}",
        f"producerId:9,producerEpoch:2,state={state.state_name},partitions=[{shown}],"
        "txnLastUpdateTimestamp=200,txnTimeoutMs=60000")
    loaded = transaction_log.read_txn_record_value(tid, value)
    assert loaded is not None and loaded.state is state and loaded.topic_partitions == tps


def test_dump_txn_index(tmp_path: Path) -> None:
    path = tmp_path / f"{SEG}.txnindex"
    path.write_bytes(AbortedTxn(5, 10, 20, 9).to_bytes() + AbortedTxn(6, 30, 31, 30).to_bytes()
                     + b"\x00" * 5)
    lines, report = dump(path)
    assert lines[1:] == [
        "version: 0 producerId: 5 firstOffset: 10 lastOffset: 20 lastStableOffset: 9",
        "version: 0 producerId: 6 firstOffset: 30 lastOffset: 31 lastStableOffset: 30"]
    assert not report.clean and "5 bytes after its last whole entry" in report.other[0]


# -- odradek transactions -------------------------------------------------------------------------
def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["transactions", "--bootstrap-server", "h:1", *argv])


@pytest.mark.parametrize(("argv", "message"), [
    (["abort", "--topic", "t", "--partition", "0"],
     "must be identified either with --start-offset"),
    (["abort", "--topic", "t", "--partition", "0", "--producer-id", "5"],
     "Missing required argument --producer-epoch"),
    (["abort", "--topic", "t", "--partition", "0", "--producer-id", "5", "--producer-epoch",
      "1"], "Missing required argument --coordinator-epoch"),
    (["find-hanging"], "requires either --topic or --broker-id"),
    (["find-hanging", "--broker-id", "1", "--partition", "0"],
     "The --partition argument requires --topic to be provided"),
])
def test_argument_checks(argv: list[str], message: str,
                         capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(*argv)
    assert args.func(args) == 1
    assert message in capsys.readouterr().err


def test_parsing_defaults() -> None:
    args = parse("find-hanging", "--topic", "t")
    assert (args.max_transaction_timeout, args.partition, args.broker_id) == (15, None, None)
    args = parse("describe-producers", "--topic", "t", "--partition", "3", "--broker-id", "2")
    assert (args.topic, args.partition, args.broker_id) == ("t", 3, 2)
    with pytest.raises(SystemExit):
        parse("describe")  # --transactional-id is required


def test_pretty_table_is_kafkas() -> None:
    assert tool.pretty_table(("A", "Long"), [["xyz", "1"]]) == ["A  \tLong\t", "xyz\t1   \t"]


NOW = 10 * 60 * 60 * 1000
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_hanging_logic() -> None:
    old = NOW - 20 * 60000
    producers = {
        TP0: [ProducerState(1, 0, 5, old, 3, 100),        # open, old, unknown pid: hanging
              ProducerState(2, 0, 5, old, -1, -1)],       # no open transaction
        TP1: [ProducerState(3, 0, 5, NOW - 60000, 1, 7),  # open but recent
              ProducerState(4, 0, 5, old, 1, 8),          # open, its txn includes t-1
              ProducerState(5, 0, 5, old, 1, 9)],         # open, its txn moved on (t-0 only)
    }
    candidates = tool.open_transactions(producers, 15 * 60000, NOW)
    assert sorted(c.producer.producer_id for c in candidates) == [1, 4, 5]
    desc = {"four": TransactionDescription(0, "Ongoing", 4, 0, 60000, old, [TP1]),
            "five": TransactionDescription(0, "Ongoing", 5, 0, 60000, old, [TP0])}
    found = tool.hanging(candidates, {4: "four", 5: "five"}, desc)
    assert sorted(c.producer.producer_id for c in found) == [1, 5]
    rows = tool.hanging_rows(found, NOW)
    assert ["t", "0", "1", "0", "3", "100", str(old), "20"] in rows


class FakeAdmin:
    def __init__(self) -> None:
        self.aborted: list[AbortTransactionSpec] = []
        self.old = NOW - 30 * 60000

    async def list_transactions(self, *, states: Any = (), producer_ids: Any = (),
                                duration_ms: int = -1) -> dict[int, list[TransactionListing]]:
        all_ = {1: [TransactionListing("tx-a", 11, "Ongoing")],
                2: [TransactionListing("tx-b", 12, "CompleteCommit")]}
        if producer_ids:
            return {n: [t for t in ts if t.producer_id in producer_ids]
                    for n, ts in all_.items()}
        return all_

    async def describe_transactions(self, ids: Any) -> dict[str, TransactionDescription]:
        (tid,) = ids
        if tid != "tx-a":
            raise KafkaError.for_code(105)  # TRANSACTIONAL_ID_NOT_FOUND
        return {tid: TransactionDescription(1, "Ongoing", 11, 2, 60000, NOW - 1500, [TP0, TP1])}

    async def describe_producers(self, tps: Any, *, broker_id: int | None = None
                                 ) -> dict[TopicPartition, list[ProducerState]]:
        return {tp: [ProducerState(11, 2, 4, self.old, 0, 40), ProducerState(99, 0, 1, self.old,
                                                                            -1, 50)]
                for tp in tps}

    async def abort_transaction(self, spec: AbortTransactionSpec) -> None:
        self.aborted.append(spec)

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        return ["t"]

    async def describe_topics(self, names: Any) -> dict[str, TopicDescription]:
        return {"t": TopicDescription("t", None, False, [
            PartitionDescription(0, 1, 0, [1, 2], [1, 2]),
            PartitionDescription(1, 2, 0, [2, 3], [2, 3])])}


async def run(admin: FakeAdmin, *argv: str) -> list[str]:
    args = parse(*argv)
    command = {"list": tool.list_transactions, "describe": tool.describe,
               "describe-producers": tool.describe_producers, "abort": tool.abort,
               "find-hanging": tool.find_hanging}[args.txn_command]
    return await command(admin, args, lambda: NOW)  # type: ignore[arg-type]


def test_commands_against_a_scripted_admin() -> None:
    import asyncio

    admin = FakeAdmin()
    out = asyncio.run(run(admin, "list"))
    assert out[0].split() == ["TransactionalId", "Coordinator", "ProducerId",
                              "TransactionState"]
    assert out[1].split() == ["tx-a", "1", "11", "Ongoing"]
    assert out[2].split() == ["tx-b", "2", "12", "CompleteCommit"]
    out = asyncio.run(run(admin, "describe", "--transactional-id", "tx-a"))
    assert out[1].split("\t")[:-1] == [
        "1            ", "tx-a           ", "11        ", "2            ", "Ongoing         ",
        "60000               ", str(NOW - 1500).ljust(29), "1500                 ",
        "t-0,t-1        "]
    out = asyncio.run(run(admin, "describe-producers", "--topic", "t", "--partition", "0"))
    assert out[0].split() == list(tool.PRODUCERS_HEADERS)
    assert out[2].split() == ["99", "0", "-1", "1", str(admin.old), "50"]
    asyncio.run(run(admin, "abort", "--topic", "t", "--partition", "0", "--start-offset", "50"))
    asyncio.run(run(admin, "abort", "--topic", "t", "--partition", "1", "--producer-id", "7",
                    "--producer-epoch", "1", "--coordinator-epoch", "-1"))
    assert admin.aborted == [AbortTransactionSpec(TP0, 99, 0, 0),
                             AbortTransactionSpec(TP1, 7, 1, 0)]
    with pytest.raises(tool.ToolError, match="Could not find any open transactions starting at "
                       "offset 3 on partition t-0"):
        asyncio.run(run(admin, "abort", "--topic", "t", "--partition", "0", "--start-offset",
                        "3"))
    with pytest.raises(tool.ToolError, match=r"Failed to describe transaction state of "
                       r"transactional-id `nope`: .*Enable debug logging"):
        asyncio.run(run(admin, "describe", "--transactional-id", "nope"))
    # producer 99 is unknown to every coordinator: hanging on both partitions; producer 11's
    # transaction includes both partitions: not hanging
    out = asyncio.run(run(admin, "find-hanging", "--broker-id", "2"))
    assert [r.split()[:3] for r in out[1:]] == [["t", "0", "99"], ["t", "1", "99"]]
    assert out[1].split()[-1] == "30"
    out = asyncio.run(run(admin, "find-hanging", "--broker-id", "1"))
    assert [r.split()[:3] for r in out[1:]] == [["t", "0", "99"]]  # broker 1 has only t-0
