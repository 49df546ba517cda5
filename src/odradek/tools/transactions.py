"""`odradek transactions` (KIP-664): Kafka's kafka-transactions on odradek's admin client, to
look at transactional state and to find and abort hanging transactions.

  --bootstrap-server HOST:PORT [--command-config FILE] COMMAND
  list [--duration-filter MS]
  describe --transactional-id ID
  describe-producers --topic T --partition P [--broker-id B]
  abort --topic T --partition P (--start-offset O |
        --producer-id PID --producer-epoch E --coordinator-epoch C)
  find-hanging (--broker-id B | --topic T [--partition P]) [--max-transaction-timeout MIN]

Tables are printed as Kafka's ToolsUtils.prettyPrintTable prints them (each cell padded to its
column's width and followed by a tab), with Kafka's columns. A transaction is hanging when a
partition has an open transaction (DescribeProducers) older than --max-transaction-timeout whose
producer id no coordinator lists, or whose transactional id's transaction does not include that
partition. `abort --start-offset` looks the producer of the open transaction up first; abort
writes the ABORT marker through WriteTxnMarkers to the partition's leader (CLUSTER_ACTION
needed). Failures print "<what failed>: <reason>. Enable debug logging for additional detail."
on stderr and exit 1, as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .command import Subcommands, ToolError, add_admin_command, run_tool
from .topics import admin_config, error_message, open_admin

if TYPE_CHECKING:
    from ..client import AsyncAdmin
    from ..client.types import ProducerState, TopicPartition, TransactionDescription

MAX_BATCH_SIZE = 500

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                    "TransactionDurationMs", "TopicPartitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                     "LastTimestamp", "CurrentTransactionStartOffset")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                   "StartOffset", "LastTimestamp", "Duration(min)")


# -- pure helpers ---------------------------------------------------------------------------------
def pretty_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Kafka's ToolsUtils.prettyPrintTable: every cell left-aligned to its column's widest
    value and followed by a tab."""
    rows = [list(r) for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    return ["".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths, strict=True))
            for row in [list(headers), *rows]]


def tp_str(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def failure(message: str, exc: BaseException) -> ToolError:
    """Kafka's printErrorAndExit(message, throwable)."""
    return ToolError(f"{message}: {error_message(exc)}. Enable debug logging for additional "
                     "detail.")


def list_rows(by_coordinator: dict[int, list[Any]]) -> list[list[str]]:
    return [[t.transactional_id, str(node), str(t.producer_id), t.state]
            for node, listings in by_coordinator.items() for t in listings]


def describe_row(tid: str, d: TransactionDescription, now_ms: int) -> list[str]:
    start = d.transaction_start_time_ms
    started = start >= 0
    return [str(d.coordinator_id), tid, str(d.producer_id), str(d.producer_epoch), d.state,
            str(d.transaction_timeout_ms), str(start) if started else "None",
            str(now_ms - start) if started else "None",
            ",".join(tp_str(tp) for tp in d.topic_partitions)]


def producer_row(p: ProducerState) -> list[str]:
    start = p.current_transaction_start_offset
    return [str(p.producer_id), str(p.producer_epoch),
            str(p.coordinator_epoch if p.coordinator_epoch >= 0 else -1), str(p.last_sequence),
            str(p.last_timestamp), str(start) if start >= 0 else "None"]


@dataclass(frozen=True)
class OpenTransaction:
    topic_partition: TopicPartition
    producer: ProducerState


def open_transactions(producers: dict[TopicPartition, list[ProducerState]],
                      max_timeout_ms: int, now_ms: int) -> list[OpenTransaction]:
    """Kafka's collectCandidateOpenTransactions: open transactions whose producer wrote last
    longer than the maximum transaction timeout ago."""
    return [OpenTransaction(tp, p) for tp, states in producers.items() for p in states
            if p.current_transaction_start_offset >= 0
            and now_ms - p.last_timestamp > max_timeout_ms]


def hanging(candidates: list[OpenTransaction], transactional_ids: dict[int, str],
            descriptions: dict[str, TransactionDescription | None]) -> list[OpenTransaction]:
    """Kafka's filterHangingTransactions: an open transaction hangs when no coordinator knows
    its producer id, the id is not found, or its transaction does not include the partition
    (a transaction in PrepareCommit/PrepareAbort still lists the partitions awaiting
    markers)."""
    out = []
    for c in candidates:
        tid = transactional_ids.get(c.producer.producer_id)
        d = descriptions.get(tid) if tid is not None else None
        if d is None or c.topic_partition not in d.topic_partitions:
            out.append(c)
    return out


def hanging_rows(found: Iterable[OpenTransaction], now_ms: int) -> list[list[str]]:
    return [[o.topic_partition.topic, str(o.topic_partition.partition),
             str(o.producer.producer_id), str(o.producer.producer_epoch),
             str(o.producer.coordinator_epoch if o.producer.coordinator_epoch >= 0 else -1),
             str(o.producer.current_transaction_start_offset), str(o.producer.last_timestamp),
             str((now_ms - o.producer.last_timestamp) // 60000)] for o in found]


def batches(items: Sequence[Any], size: int = MAX_BATCH_SIZE) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


# -- the command ----------------------------------------------------------------------------------
def add_parser(subparsers: Subcommands) -> None:
    p = add_admin_command(subparsers, "transactions", "list, describe and abort transactions, "
                          "find hanging ones (Kafka's kafka-transactions)", __doc__)
    sub = p.add_subparsers(dest="txn_command", title="commands", metavar="COMMAND")
    c = sub.add_parser("list", help="list transactions")
    c.add_argument("--duration-filter", type=int, default=None,
                   help="Duration (in millis) to filter by: if < 0, all transactions will be "
                   "returned; otherwise, only transactions running longer than this duration "
                   "will be returned")
    c = sub.add_parser("describe", help="describe the state of an active transactional-id",
                       description="Describe the state of an active transactional-id.")
    c.add_argument("--transactional-id", required=True, help="transactional id")
    c = sub.add_parser("describe-producers",
                       help="describe the states of active producers for a topic partition")
    c.add_argument("--broker-id", type=int, help="optional broker id to describe the producer "
                   "state on a specific replica")
    c.add_argument("--topic", required=True, help="topic name")
    c.add_argument("--partition", type=int, required=True, help="partition number")
    c = sub.add_parser("abort", help="abort a hanging transaction (requires administrative "
                       "privileges)")
    c.add_argument("--topic", required=True, help="topic name")
    c.add_argument("--partition", type=int, required=True, help="partition number")
    g = c.add_argument_group("Brokers on versions 3.0 and above", "For newer brokers, only the "
                             "start offset of the transaction to be aborted is required")
    g.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    g = c.add_argument_group("Brokers on versions older than 3.0",
                             "For older brokers, you must provide all of these arguments")
    g.add_argument("--producer-id", type=int, help="producer id")
    g.add_argument("--producer-epoch", type=int, help="producer epoch")
    g.add_argument("--coordinator-epoch", type=int, help="coordinator epoch")
    c = sub.add_parser("find-hanging", help="find hanging transactions")
    c.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    c.add_argument("--max-transaction-timeout", type=int, default=15,
                   help="maximum transaction timeout in minutes to limit the scope of the "
                   "search (15 minutes by default)")
    c.add_argument("--topic", help="topic name to limit search to (required if --partition is "
                   "specified)")
    c.add_argument("--partition", type=int, help="partition number")
    p.set_defaults(func=main)


def check_args(args: argparse.Namespace) -> None:
    """The checks Kafka's command makes before (or instead of) calling the cluster."""
    if not args.bootstrap_server:
        raise ToolError("argument --bootstrap-server is required")
    if args.txn_command is None:
        raise ToolError("too few arguments: a command is required (list, describe, "
                        "describe-producers, abort, find-hanging)")
    if args.txn_command == "abort":
        if args.start_offset is None and args.producer_id is None:
            raise ToolError("The transaction to abort must be identified either with "
                            "--start-offset (for brokers on 3.0 or above) or with "
                            "--producer-id, --producer-epoch, and --coordinator-epoch (for "
                            "older brokers)")
        if args.start_offset is None:
            if args.producer_epoch is None:
                raise ToolError("Missing required argument --producer-epoch")
            if args.coordinator_epoch is None:
                raise ToolError("Missing required argument --coordinator-epoch")
    if args.txn_command == "find-hanging":
        if args.topic is None and args.broker_id is None:
            raise ToolError("The `find-hanging` command requires either --topic or "
                            "--broker-id to limit the scope of the search")
        if args.partition is not None and args.topic is None:
            raise ToolError("The --partition argument requires --topic to be provided")


def main(args: argparse.Namespace, now_ms: Callable[[], int] | None = None) -> int:
    clock = now_ms or (lambda: int(time.time() * 1000))

    def body() -> list[str]:
        check_args(args)
        return asyncio.run(run(args, clock))
    return run_tool(body)


async def run(args: argparse.Namespace, now_ms: Callable[[], int]) -> list[str]:
    admin = await open_admin(admin_config(args.bootstrap_server, args.command_config))
    try:
        command = {"list": list_transactions, "describe": describe,
                   "describe-producers": describe_producers, "abort": abort,
                   "find-hanging": find_hanging}[args.txn_command]
        return await command(admin, args, now_ms)
    finally:
        await admin.close()


async def list_transactions(admin: AsyncAdmin, args: argparse.Namespace,
                            now_ms: Callable[[], int]) -> list[str]:
    try:
        found = await admin.list_transactions(
            duration_ms=-1 if args.duration_filter is None else args.duration_filter)
    except Exception as exc:
        raise failure("Failed to list transactions", exc) from None
    return pretty_table(LIST_HEADERS, list_rows(found))


async def describe(admin: AsyncAdmin, args: argparse.Namespace,
                   now_ms: Callable[[], int]) -> list[str]:
    tid = args.transactional_id
    try:
        d = (await admin.describe_transactions([tid]))[tid]
    except Exception as exc:
        raise failure(f"Failed to describe transaction state of transactional-id `{tid}`",
                      exc) from None
    return pretty_table(DESCRIBE_HEADERS, [describe_row(tid, d, now_ms())])


async def describe_producers(admin: AsyncAdmin, args: argparse.Namespace,
                             now_ms: Callable[[], int]) -> list[str]:
    from ..client.types import TopicPartition

    tp = TopicPartition(args.topic, args.partition)
    try:
        found = await admin.describe_producers([tp], broker_id=args.broker_id)
    except Exception as exc:
        where = f"broker {args.broker_id}" if args.broker_id is not None else "leader"
        raise failure(f"Failed to describe producers for partition {tp_str(tp)} on {where}",
                      exc) from None
    return pretty_table(PRODUCERS_HEADERS, [producer_row(p) for p in found.get(tp, [])])


async def abort(admin: AsyncAdmin, args: argparse.Namespace,
                now_ms: Callable[[], int]) -> list[str]:
    from ..client.types import AbortTransactionSpec, TopicPartition

    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is None:
        # a transaction that hung before its first marker shows coordinator epoch -1: use 0
        spec = AbortTransactionSpec(tp, args.producer_id, args.producer_epoch,
                                    max(0, args.coordinator_epoch))
    else:
        try:
            producers = (await admin.describe_producers([tp])).get(tp, [])
        except Exception as exc:
            raise failure(f"Failed to validate producer state for partition {tp_str(tp)}",
                          exc) from None
        match = next((p for p in producers
                      if p.current_transaction_start_offset == args.start_offset), None)
        if match is None:
            raise ToolError(f"Could not find any open transactions starting at offset "
                            f"{args.start_offset} on partition {tp_str(tp)}")
        spec = AbortTransactionSpec(tp, match.producer_id, match.producer_epoch,
                                    max(0, match.coordinator_epoch))
    try:
        await admin.abort_transaction(spec)
    except Exception as exc:
        raise failure(f"Failed to abort transaction AbortTransactionSpec(topicPartition="
                      f"{tp_str(tp)}, producerId={spec.producer_id}, producerEpoch="
                      f"{spec.producer_epoch}, coordinatorEpoch={spec.coordinator_epoch})",
                      exc) from None
    return []


async def find_hanging(admin: AsyncAdmin, args: argparse.Namespace,
                       now_ms: Callable[[], int]) -> list[str]:
    from ..client.types import TopicPartition

    broker = args.broker_id
    if args.topic is not None and args.partition is not None:
        partitions = [TopicPartition(args.topic, args.partition)]
    else:
        if args.topic is not None:
            topics = [args.topic]
        else:
            try:
                topics = await admin.list_topics(include_internal=True)
            except Exception as exc:
                raise failure("Failed to list topics", exc) from None
        partitions = []
        for chunk in batches(topics):
            try:
                described = await admin.describe_topics(chunk)
            except Exception as exc:
                raise failure(f"Failed to describe {len(chunk)} topics", exc) from None
            for name, d in described.items():
                partitions += [TopicPartition(name, p.partition) for p in d.partitions
                               if broker is None or broker in p.replicas]
    candidates: list[OpenTransaction] = []
    for chunk in batches(partitions):
        try:
            producers = await admin.describe_producers(chunk, broker_id=broker)
        except Exception as exc:
            where = f"Optional[{broker}]" if broker is not None else "Optional.empty"
            raise failure(f"Failed to describe producers for {len(chunk)} partitions on broker "
                          f"{where}", exc) from None
        candidates += open_transactions(producers, args.max_transaction_timeout * 60000,
                                        now_ms())
    if not candidates:
        return pretty_table(HANGING_HEADERS, [])
    pids = {c.producer.producer_id for c in candidates}
    try:
        listed = await admin.list_transactions(producer_ids=sorted(pids))
    except Exception as exc:
        raise failure(f"Failed to list transactions for {len(pids)} producers", exc) from None
    tids = {t.producer_id: t.transactional_id for ts in listed.values() for t in ts
            if t.producer_id in pids}
    descriptions = await _descriptions(admin, sorted(set(tids.values())))
    return pretty_table(HANGING_HEADERS,
                        hanging_rows(hanging(candidates, tids, descriptions), now_ms()))


async def _descriptions(admin: AsyncAdmin, tids: list[str]
                        ) -> dict[str, TransactionDescription | None]:
    from kio.schema.errors import ErrorCode

    from ..client.errors import KafkaError

    out: dict[str, TransactionDescription | None] = {}
    for tid in tids:
        try:
            out[tid] = (await admin.describe_transactions([tid]))[tid]
        except KafkaError as exc:
            if exc.code != ErrorCode.transactional_id_not_found:
                raise failure(f"Failed to describe {len(tids)} transactions", exc) from None
            out[tid] = None
    return out
