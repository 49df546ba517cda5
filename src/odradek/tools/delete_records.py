"""`odradek delete-records`: Kafka's kafka-delete-records (DeleteRecordsCommand) on odradek's
admin client: move partitions' log start offsets forward, deleting the records before them.

  --bootstrap-server HOST:PORT --offset-json-file FILE [--command-config FILE]

The file is Kafka's: {"partitions": [{"topic": "t", "partition": 0, "offset": 3}],
"version": 1} (offset -1: up to the high watermark). The tool prints "Executing records delete
operation", sends DeleteRecords to each partition's leader, prints "Records delete operation
completed:" and one line per partition, "partition: t-0<TAB>low_watermark: 3" or
"partition: t-0<TAB>error: <Java exception>: <message>", as Kafka's command does. Leadership
errors and timeouts are retried (with a metadata refresh) until default.api.timeout.ms, as
newer Kafka admin clients do; other errors are printed at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..common import TopicPartition
from .command import Subcommands, ToolError, add_admin_command, read_input_file, run_tool
from .topics import admin_config, open_admin

if TYPE_CHECKING:
    from ..client import AsyncAdmin

API_KEY = 21
MAX_VERSION = 2
DEFAULT_TIMEOUT_MS = 30000  # Kafka's AdminClient: the request's timeout_ms

OFFSET_JSON_DOC = ('REQUIRED: The JSON file with offset per partition. The format to use is:\n'
                   '{"partitions":\n  [{"topic": "foo", "partition": 1, "offset": 1}],\n'
                   ' "version":1\n}')

# Kafka's Errors: the exception class and default message of the codes DeleteRecords answers
JAVA_ERRORS: dict[int, tuple[str, str]] = {
    ErrorCode.offset_out_of_range: (
        "OffsetOutOfRangeException",
        "The requested offset is not within the range of offsets maintained by the server."),
    ErrorCode.unknown_topic_or_partition: (
        "UnknownTopicOrPartitionException", "This server does not host this topic-partition."),
    ErrorCode.leader_not_available: (
        "LeaderNotAvailableException", "There is no leader for this topic-partition as we are "
        "in the middle of a leadership election."),
    ErrorCode.not_leader_or_follower: (
        "NotLeaderOrFollowerException", "For requests intended only for the leader, this error "
        "indicates that the broker is not the current leader. For requests intended for any "
        "replica, this error indicates that the broker is not a replica of the topic "
        "partition."),
    ErrorCode.request_timed_out: ("TimeoutException", "The request timed out."),
    ErrorCode.invalid_topic_exception: (
        "InvalidTopicException",
        "The request attempted to perform an operation on an invalid topic."),
    ErrorCode.topic_authorization_failed: ("TopicAuthorizationException",
                                           "Topic authorization failed."),
    ErrorCode.policy_violation: ("PolicyViolationException",
                                 "Request parameters do not satisfy the configured policy."),
    ErrorCode.kafka_storage_error: ("KafkaStorageException",
                                    "Disk error when trying to access log file on the disk."),
}

RETRIABLE = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
                       ErrorCode.request_timed_out, ErrorCode.fenced_leader_epoch,
                       ErrorCode.unknown_leader_epoch, ErrorCode.kafka_storage_error})


# -- pure helpers ---------------------------------------------------------------------------------
def parse_offset_json(text: str) -> list[tuple[str, int, int]]:
    """Kafka's parseOffsetJsonStringWithoutDedup: (topic, partition, offset) in file order;
    a ToolError for bad JSON, a version other than 1 (missing: 1) or no partitions field."""
    try:
        data = json.loads(text)
    except ValueError:
        raise ToolError("The input string is not a valid JSON") from None
    if not isinstance(data, dict):
        raise ToolError("The input string is not a valid JSON")
    version = data.get("version", 1)
    if version != 1:
        raise ToolError(f"Not supported version field value {version}")
    partitions = data.get("partitions")
    if not isinstance(partitions, list):
        raise ToolError("Missing partitions field")
    out: list[tuple[str, int, int]] = []
    for p in partitions:
        try:
            topic, partition, offset = p["topic"], p["partition"], p["offset"]
        except (KeyError, TypeError) as exc:
            raise ToolError(f"Invalid partition entry {json.dumps(p)}: missing {exc}") from None
        if not isinstance(topic, str) or not isinstance(partition, int) \
                or not isinstance(offset, int):
            raise ToolError(f"Invalid partition entry {json.dumps(p)}")
        out.append((topic, partition, offset))
    return out


def check_duplicates(entries: Sequence[tuple[str, int, int]]) -> None:
    counts = Counter((t, p) for t, p, _ in entries)
    dups = [f"{t}-{p}" for (t, p), n in counts.items() if n > 1]
    if dups:
        raise ToolError("Offset json file contains duplicate topic partitions: "
                        + ",".join(dups))


def java_error(code: int) -> str:
    """What Kafka's command prints for a failed partition (the ExecutionException's message)."""
    name, message = JAVA_ERRORS.get(code, ("UnknownServerException",
                                           f"error code {code}"))
    return f"org.apache.kafka.common.errors.{name}: {message}"


def result_lines(entries: Sequence[tuple[str, int, int]],
                 results: Mapping[tuple[str, int], int | ErrorCode]) -> list[str]:
    """"Records delete operation completed:" then one line per partition (file order)."""
    lines = ["Records delete operation completed:"]
    for topic, partition, _ in entries:
        r = results[(topic, partition)]
        if isinstance(r, ErrorCode):
            lines.append(f"partition: {topic}-{partition}\terror: {java_error(r)}")
        else:
            lines.append(f"partition: {topic}-{partition}\tlow_watermark: {r}")
    return lines


# -- the client side ------------------------------------------------------------------------------
async def delete_records(admin: AsyncAdmin, offsets: Mapping[tuple[str, int], int], *,
                         timeout_ms: int = DEFAULT_TIMEOUT_MS
                         ) -> dict[tuple[str, int], int | ErrorCode]:
    """DeleteRecords to each partition's leader: {(topic, partition): low watermark or the
    error code}. Retriable errors (leadership moving, a broker gone, the request timing out)
    are retried after a metadata refresh until the admin client's default.api.timeout.ms."""
    from ..client.errors import KafkaError

    loop = asyncio.get_running_loop()
    deadline = loop.time() + admin.api_timeout
    todo = dict(offsets)
    out: dict[tuple[str, int], int | ErrorCode] = {}
    while True:
        last: dict[tuple[str, int], ErrorCode] = {}
        try:
            md = await admin.client.refresh_metadata(topics={t for t, _ in todo})
        except KafkaError:
            md = admin.client.metadata
        by_node: dict[int, dict[str, list[dict[str, int]]]] = {}
        for (topic, partition), offset in todo.items():
            t = md.topics.get(topic)
            if t is None or (t.error == ErrorCode.none and partition not in t.partitions):
                out[(topic, partition)] = ErrorCode.unknown_topic_or_partition
                continue
            if t.error != ErrorCode.none and t.error != ErrorCode.leader_not_available:
                out[(topic, partition)] = ErrorCode(t.error)
                continue
            leader = md.leader(TopicPartition(topic, partition))
            if leader is None:
                last[(topic, partition)] = ErrorCode.leader_not_available
                continue
            by_node.setdefault(leader, {}).setdefault(topic, []).append(
                {"partition_index": partition, "offset": offset})
        for tp in out:
            todo.pop(tp, None)
        for node, topics in by_node.items():
            try:
                resp = await _send(admin, node, topics, timeout_ms)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                for topic, parts in topics.items():
                    for p in parts:
                        last[(topic, p["partition_index"])] = ErrorCode.request_timed_out
                continue
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, int(p.partition_index))
                    if tp not in todo:
                        continue
                    code = ErrorCode(p.error_code)
                    if code == ErrorCode.none:
                        out[tp] = int(p.low_watermark)
                        del todo[tp]
                    elif code in RETRIABLE:
                        last[tp] = code
                    else:
                        out[tp] = code
                        del todo[tp]
        if not todo:
            return out
        if loop.time() + admin.retry_backoff > deadline:
            for tp in todo:
                out[tp] = last.get(tp, ErrorCode.request_timed_out)
            return out
        await asyncio.sleep(admin.retry_backoff)


async def _send(admin: AsyncAdmin, node: int, topics: dict[str, list[dict[str, int]]],
                timeout_ms: int) -> Any:
    """One DeleteRecords request at the highest version both sides speak (v0-2)."""
    from ..client.connection import request_for
    from ..client.errors import UnsupportedVersionError

    conn = await admin.client.connection(node)
    theirs = conn.api_versions.get(API_KEY)
    if theirs is None or theirs[0] > MAX_VERSION:
        raise UnsupportedVersionError(f"node {node} does not support DeleteRecords")
    request = request_for(API_KEY, min(MAX_VERSION, theirs[1]), timeout=timeout_ms,
                          topics=[{"name": t, "partitions": ps} for t, ps in topics.items()])
    return await conn.request(request, timeout=timeout_ms / 1000 + admin.api_timeout)


# -- the command ----------------------------------------------------------------------------------
def add_parser(subparsers: Subcommands) -> None:
    p = add_admin_command(subparsers, "delete-records", "delete records of partitions down to "
                          "given offsets (Kafka's kafka-delete-records)", __doc__)
    p.add_argument("--offset-json-file", help=OFFSET_JSON_DOC)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    def body() -> list[str]:
        if not args.bootstrap_server:
            raise ToolError("Missing required argument \"[bootstrap-server]\"")
        if not args.offset_json_file:
            raise ToolError("Missing required argument \"[offset-json-file]\"")
        entries = parse_offset_json(read_input_file(args.offset_json_file))
        check_duplicates(entries)
        return asyncio.run(run(args, entries))
    return run_tool(body)


async def run(args: argparse.Namespace, entries: list[tuple[str, int, int]]) -> list[str]:
    from ..client.errors import KafkaError

    admin = await open_admin(admin_config(args.bootstrap_server, args.command_config))
    try:
        print("Executing records delete operation", flush=True)
        try:
            results = await delete_records(admin, {(t, p): o for t, p, o in entries})
        except KafkaError as exc:
            raise ToolError(f"Error while executing records delete operation: {exc}") from None
        return result_lines(entries, results)
    finally:
        await admin.close()
