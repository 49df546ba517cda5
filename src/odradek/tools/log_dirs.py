"""`odradek log-dirs` (Kafka's kafka-log-dirs.sh, LogDirsCommand): the log directories of
brokers and the partitions in each, through DescribeLogDirs (key 35).

  --describe --bootstrap-server HOST:PORT [--broker-list 1,2] [--topic-list a,b]
  [--command-config FILE]

Prints "Querying brokers for log directories information", then "Received log directory
information from brokers 1,2" and one JSON line as Kafka's tool does:
{"version":1,"brokers":[{"broker":1,"logDirs":[{"logDir":"/d","error":null,"partitions":
[{"partition":"t-0","size":123,"offsetLag":0,"isFuture":false}]}]}]}. An offline log dir
(KIP-112) has "error":"org.apache.kafka.common.errors.KafkaStorageException" and no partitions.
Without --broker-list every broker of the cluster is asked. The admin client's id defaults to
"log-dirs-tool" as Kafka's. A replica being moved between the dirs of a broker
(AlterReplicaLogDirs, ``odradek reassign-partitions`` with "log_dirs") shows twice: in its
current dir, and in the destination with "isFuture":true and an offsetLag of what remains to copy.

The module also holds the admin calls ``reassign-partitions`` uses for replica moves between
log dirs: ``describe_replica_log_dirs`` (Kafka's Admin.describeReplicaLogDirs) and
``alter_replica_log_dirs`` (Admin.alterReplicaLogDirs), each talking to the brokers concerned.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .command import Subcommands, ToolError, add_admin_command, run_tool
from .topics import admin_config, open_admin

# Kafka's exception class for a DescribeLogDirs dir error code (Errors.exception)
JAVA_ERRORS = {
    56: "org.apache.kafka.common.errors.KafkaStorageException",
    -1: "org.apache.kafka.common.errors.UnknownServerException",
    31: "org.apache.kafka.common.errors.ClusterAuthorizationException",
}
DESCRIBE_LOG_DIRS = 35
ALTER_REPLICA_LOG_DIRS = 34
MAX_VERSION = 2  # what this tool speaks (v2: flexible)
MIN_VERSION = 1  # v0 is v1 on the wire; the codec has v1's classes


def parse_list(value: str | None, what: str) -> list[str]:
    if not value:
        return []
    return [v for v in value.split(",") if v]


def parse_brokers(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(v) for v in parse_list(value, "--broker-list")]
    except ValueError:
        raise ToolError(f"Invalid broker list {value!r}: broker ids are integers") from None


def format_json(by_broker: dict[int, list[dict[str, Any]]], topics: Sequence[str]) -> str:
    """Kafka's formatAsJson: {broker: [{logDir, error_code, topics}]} as the tool prints it."""
    wanted = set(topics)
    brokers = []
    for broker, dirs in by_broker.items():
        log_dirs = []
        for d in dirs:
            code = d["error_code"]
            partitions = [{"partition": f"{topic}-{p['partition_index']}",
                           "size": p["partition_size"], "offsetLag": p["offset_lag"],
                           "isFuture": p["is_future_key"]}
                          for topic, parts in d["topics"] for p in parts
                          if not wanted or topic in wanted]
            log_dirs.append({"logDir": d["log_dir"],
                             "error": None if code == 0 else JAVA_ERRORS.get(
                                 code, "org.apache.kafka.common.errors.ApiException"),
                             "partitions": partitions})
        brokers.append({"broker": broker, "logDirs": log_dirs})
    return json.dumps({"version": 1, "brokers": brokers}, separators=(",", ":"))


def _dirs_of(response: Any) -> list[dict[str, Any]]:
    out = []
    for r in response.results:
        out.append({"log_dir": r.log_dir, "error_code": int(r.error_code), "topics": [
            (t.name, [{"partition_index": int(p.partition_index),
                       "partition_size": int(p.partition_size),
                       "offset_lag": int(p.offset_lag), "is_future_key": bool(p.is_future_key)}
                      for p in t.partitions]) for t in r.topics]})
    return out


async def _request_one(admin: Any, broker: int, api_key: int, name: str, **fields: Any) -> Any:
    """A request of `api_key` to `broker`, at the highest version both speak."""
    from ..protocol.codec import build, request_class

    conn = await admin.client.connection(broker)
    theirs = conn.api_versions.get(api_key)
    if theirs is None or theirs[1] < MIN_VERSION:
        raise ToolError(f"broker {broker} does not support {name}")
    version = min(MAX_VERSION, theirs[1])
    return await conn.request(build(request_class(api_key, version), **fields))


async def _describe_one(admin: Any, broker: int) -> Any:
    """DescribeLogDirs (every partition) to `broker`."""
    return await _request_one(admin, broker, DESCRIBE_LOG_DIRS, "DescribeLogDirs", topics=None)


@dataclass(frozen=True)
class ReplicaLogDirInfo:
    """Kafka's DescribeReplicaLogDirsResult.ReplicaLogDirInfo: where a replica is (None: in no
    live dir) and where it is being moved (None: no move), with the offset lags."""

    current: str | None = None
    current_lag: int = -1
    future: str | None = None
    future_lag: int = -1


def replica_log_dir_infos(dirs: list[dict[str, Any]], wanted: set[tuple[str, int]]
                          ) -> dict[tuple[str, int], ReplicaLogDirInfo]:
    """From one broker's DescribeLogDirs (``_dirs_of``): the info of each wanted partition."""
    out = {tp: ReplicaLogDirInfo() for tp in wanted}
    for d in dirs:
        if d["error_code"] != 0:
            continue
        for topic, parts in d["topics"]:
            for p in parts:
                tp = (topic, p["partition_index"])
                if tp not in out:
                    continue
                info = out[tp]
                if p["is_future_key"]:
                    out[tp] = ReplicaLogDirInfo(info.current, info.current_lag, d["log_dir"],
                                                p["offset_lag"])
                else:
                    out[tp] = ReplicaLogDirInfo(d["log_dir"], p["offset_lag"], info.future,
                                                info.future_lag)
    return out


async def describe_replica_log_dirs(admin: Any, replicas: set[tuple[str, int, int]]
                                    ) -> dict[tuple[str, int, int], ReplicaLogDirInfo]:
    """Kafka's describeReplicaLogDirs: (topic, partition, broker) -> ReplicaLogDirInfo, from a
    DescribeLogDirs to each broker concerned."""
    out: dict[tuple[str, int, int], ReplicaLogDirInfo] = {}
    for broker in sorted({b for _, _, b in replicas}):
        dirs = _dirs_of(await _describe_one(admin, broker))
        wanted = {(t, p) for t, p, b in replicas if b == broker}
        for (t, p), info in replica_log_dir_infos(dirs, wanted).items():
            out[(t, p, broker)] = info
    return out


async def alter_replica_log_dirs(admin: Any, moves: dict[tuple[str, int, int], str]
                                 ) -> dict[tuple[str, int, int], int]:
    """Kafka's alterReplicaLogDirs: (topic, partition, broker) -> absolute dir; the error
    code of each replica, from an AlterReplicaLogDirs to each broker concerned."""
    from ..protocol.codec import make, request_class

    out: dict[tuple[str, int, int], int] = {}
    for broker in sorted({b for _, _, b in moves}):
        by_dir: dict[str, dict[str, list[int]]] = {}
        for (t, p, b), d in moves.items():
            if b == broker:
                by_dir.setdefault(d, {}).setdefault(t, []).append(p)
        cls = request_class(ALTER_REPLICA_LOG_DIRS, 1)
        mod = sys.modules[cls.__module__]
        dirs = tuple(make(mod.AlterReplicaLogDir, path=d, topics=tuple(
            make(mod.AlterReplicaLogDirTopic, name=t, partitions=tuple(ps))
            for t, ps in sorted(topics.items())))
            for d, topics in sorted(by_dir.items()))
        response = await _request_one(admin, broker, ALTER_REPLICA_LOG_DIRS,
                                      "AlterReplicaLogDirs", dirs=dirs)
        for r in response.results:
            for part in r.partitions:
                out[(r.topic_name, int(part.partition_index), broker)] = int(part.error_code)
    return out


async def describe(cfg: dict[str, Any], brokers: list[int] | None, topics: list[str],
                   out: list[str]) -> None:
    admin = await open_admin(cfg)
    try:
        if brokers is None:
            md = await admin.client.refresh_metadata()
            brokers = sorted(md.brokers)
        out.append("Querying brokers for log directories information")
        by_broker: dict[int, list[dict[str, Any]]] = {}
        for b in brokers:
            try:
                response = await _describe_one(admin, b)
            except Exception as exc:
                raise ToolError(f"Error while describing the log dirs of broker {b}: "
                                f"{exc}") from None
            by_broker[b] = _dirs_of(response)
        out.append("Received log directory information from brokers "
                   + ",".join(str(b) for b in brokers))
        out.append(format_json(by_broker, topics))
    finally:
        await admin.close()


def add_parser(sub: Subcommands) -> None:
    p = add_admin_command(sub, "log-dirs", "describe the log dirs of brokers "
                          "(kafka-log-dirs)", __doc__)
    p.add_argument("--describe", action="store_true",
                   help="describe the log dirs of the brokers")
    p.add_argument("--broker-list", help='the brokers to ask, "0,1,2" (default: all)')
    p.add_argument("--topic-list", default="",
                   help='the topics to show, "topic1,topic2" (default: all)')
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    def body() -> list[str]:
        if not args.describe:
            raise ToolError("Command must include the --describe action")
        if not args.bootstrap_server:
            raise ToolError("Missing required argument \"[bootstrap-server]\"")
        brokers = parse_brokers(args.broker_list)
        cfg = admin_config(args.bootstrap_server, args.command_config)
        if cfg["client.id"] == "odradek-admin":  # not set by --command-config (putIfAbsent)
            cfg["client.id"] = "log-dirs-tool"
        out: list[str] = []
        asyncio.run(describe(cfg, brokers, parse_list(args.topic_list, "--topic-list"), out))
        return out
    return run_tool(body)


__all__ = ["ReplicaLogDirInfo", "add_parser", "alter_replica_log_dirs",
           "describe_replica_log_dirs", "format_json", "replica_log_dir_infos", "run"]
