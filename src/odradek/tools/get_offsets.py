"""`odradek get-offsets`: Kafka 2.8's GetOffsetShell (kafka-run-class kafka.tools.GetOffsetShell;
kafka-get-offsets.sh is its later wrapper).

  --broker-list HOST:PORT,... | --bootstrap-server HOST:PORT,...   (one is required)
  --topic T (required)   [--partitions 0,1,...]   [--time -1|-2|TIMESTAMP_MS]
  [--command-config FILE]   client properties (security.protocol, sasl.*, ssl.*)
  [--offsets N] [--max-wait-ms MS]   accepted and ignored, as Kafka 2.8 does

Prints one ``topic:partition:offset`` line per partition, by partition: the latest offset (the
high watermark, --time -1, the default), the earliest (-2), or the first offset whose record
timestamp is at or after TIMESTAMP_MS (an empty offset, ``t:0:``, when no record is that
recent). As Kafka's tool: "Topic T does not exist", "Topic T has 0 partitions" and "Topic T
does not have any of the requested partitions 5" end it with status 1; a requested partition
that does not exist is reported as "Error: partition 5 does not exist" on stderr, one without a
leader as "Error: partition 1 does not have a leader. Skip getting offsets"; a --partitions that
is not a list of numbers prints "--partitions expects a comma separated list of numeric
partition ids, but received: ..." and exits 1. --bootstrap-server and --command-config are the
later tool's (KIP-635); the 2.8 tool took only --broker-list."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .command import Subcommands, ToolError, run_tool
from .topics import admin_config, open_admin

if TYPE_CHECKING:
    from ..client import AsyncAdmin
    from ..client.types import PartitionDescription

LATEST, EARLIEST = -1, -2


def parse_partitions(text: str) -> set[int]:
    """"0,1,3" -> {0, 1, 3}; "" -> set() (every partition)."""
    if not text:
        return set()
    try:
        return {int(p) for p in text.split(",")}
    except ValueError:
        raise ToolError("--partitions expects a comma separated list of numeric partition ids, "
                        f"but received: {text}") from None


def valid_host_ports(servers: str) -> bool:
    """Kafka's ToolsUtils.validatePortOrDie: every comma-separated item has a numeric port."""
    items = servers.split(",")
    return bool(items) and all(
        ":" in item and item.rsplit(":", 1)[1].isdigit() for item in items)


def offset_lines(topic: str, offsets: Mapping[int, int | None]) -> list[str]:
    """"t:0:42" per partition, by partition; None (no offset for the timestamp): "t:0:"."""
    return [f"{topic}:{p}:{'' if offsets[p] is None else offsets[p]}" for p in sorted(offsets)]


def select(topic: str, partitions: Iterable[PartitionDescription] | None, requested: set[int],
           warn: list[str]) -> list[int]:
    """The partitions to ask (those with a leader), the stderr lines of those skipped; a topic
    without any of them is a ToolError, as Kafka's tool exits on it."""
    if partitions is None:
        raise ToolError(f"Topic {topic} does not exist")
    chosen = [p for p in partitions if not requested or p.partition in requested]
    if not chosen:
        if not requested:
            raise ToolError(f"Topic {topic} has 0 partitions")
        raise ToolError(f"Topic {topic} does not have any of the requested partitions "
                        + ",".join(str(p) for p in sorted(requested)))
    known = {p.partition for p in chosen}
    for missing in sorted(requested - known):
        warn.append(f"Error: partition {missing} does not exist")
    out = []
    for p in sorted(chosen, key=lambda p: p.partition):
        if p.leader is None or p.leader < 0:
            warn.append(f"Error: partition {p.partition} does not have a leader. "
                        "Skip getting offsets")
        else:
            out.append(p.partition)
    return out


async def run(args: argparse.Namespace, warn: list[str]) -> list[str]:
    from ..client.errors import KafkaError
    from ..client.types import TopicPartition

    servers = args.bootstrap_server or args.broker_list
    if not servers:
        raise ToolError('Missing required argument "[broker-list]"')
    if not valid_host_ports(servers):
        raise ToolError("Please provide valid host:port like host1:9091,host2:9092")
    requested = parse_partitions(args.partitions)
    admin: AsyncAdmin = await open_admin(admin_config(servers, args.command_config,
                                                      {"client.id": "GetOffsetShell"}))
    try:
        try:
            described = (await admin.describe_topics([args.topic]))[args.topic].partitions
        except KafkaError:
            described = None
        partitions = select(args.topic, described, requested, warn)
        found = await admin.list_offsets({TopicPartition(args.topic, p): args.time
                                          for p in partitions})
    finally:
        await admin.close()
    return offset_lines(args.topic, {tp.partition: None if offset < 0 else offset
                                     for tp, (offset, _) in found.items()})


def main(args: argparse.Namespace) -> int:
    warn: list[str] = []

    def body() -> list[str]:
        try:
            return asyncio.run(run(args, warn))
        finally:
            for line in warn:
                print(line, file=sys.stderr, flush=True)
    return run_tool(body)  # Kafka prints its refusals bare on stderr


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("get-offsets", help="the offsets of a topic's partitions (GetOffsetShell, "
                                           "kafka-get-offsets)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--broker-list", metavar="HOST:PORT,...",
                   help="REQUIRED (or --bootstrap-server): the servers to connect to")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT,...",
                   help="the servers to connect to (the later tool's name of --broker-list)")
    p.add_argument("--topic", required=True, help="REQUIRED: the topic to get offsets of")
    p.add_argument("--partitions", default="", metavar="0,1,...",
                   help="comma separated partition ids (default: every partition)")
    p.add_argument("--time", type=int, default=LATEST, metavar="-1|-2|TIMESTAMP_MS",
                   help="-1: latest (default), -2: earliest, else the first offset whose "
                        "timestamp is at or after this one")
    p.add_argument("--command-config", metavar="FILE", help="client properties file")
    p.add_argument("--offsets", type=int, default=1, help="DEPRECATED AND IGNORED")
    p.add_argument("--max-wait-ms", type=int, default=1000, help="DEPRECATED AND IGNORED")
    p.set_defaults(func=main)
