"""`odradek broker-api-versions`: Kafka's kafka-broker-api-versions (BrokerApiVersionsCommand).

  --bootstrap-server HOST:PORT (required)   [--command-config FILE]  (admin client properties)

For each alive broker (from Metadata), the API versions it answers in ApiVersions, in Kafka's
NodeApiVersions form:

  127.0.0.1:9092 (id: 0 rack: null) -> (
  <TAB>Produce(0): 0 to 10 [usable: 10],
  <TAB>Fetch(1): 4 to 12 [usable: 12],
  ...
  <TAB>DeleteRecords(21): UNSUPPORTED,
  ...
  )

or ``host:port (id: N rack: R) -> ERROR: <reason>`` for a broker that could not be reached.

"usable" is the highest version that both the broker and this tool's client speak. The tool's
client is odradek's own (odradek.client: the versions in its CLIENT_VERSIONS table, and v1 of
SaslHandshake and SaslAuthenticate, which it always sends), not Kafka 2.8's Java client: an API
the broker lists but odradek's client never sends (the inter-broker ones, OffsetForLeaderEpoch,
DescribeCluster...) has no bracket; ``[unusable: node too new]`` / ``[unusable: node too old]``
when the ranges do not meet. An API that Kafka 2.8's ZooKeeper broker serves and this broker
does not list is printed ``Name(key): UNSUPPORTED``, as Kafka's tool prints the APIs of its
version that an older broker lacks. Names are Kafka's (2.8's where they were later renamed:
AlterIsr(56)); an api key with no name is ``UNKNOWN(key)``."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .command import Subcommands, ToolError, add_admin_command, prefixed, run_tool
from .topics import admin_config, open_admin

if TYPE_CHECKING:
    from ..client.errors import KafkaError
    from ..client.types import Node

# The api keys Kafka 2.8's ZooKeeper-mode broker serves (message JSONs listing "zkBroker").
KAFKA_28_ZK_BROKER_APIS = (*range(0, 52), 56, 57, 60, 61)

# kio has no inter-broker schemas (odradek codes them itself), and names 56 by its later name.
_NAMES = {4: "LeaderAndIsr", 5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown",
          56: "AlterIsr"}

# Versions odradek's client sends outside CLIENT_VERSIONS (security/sasl_client.py).
_SASL_CLIENT_VERSIONS = {17: (1, 1), 36: (1, 1)}


def api_name(api_key: int) -> str | None:
    """Kafka's name of an api key (Produce, ListOffsets, ...), None when unknown."""
    if api_key in _NAMES:
        return _NAMES[api_key]
    from kio.schema.index import api_key_map

    snake = api_key_map.get(api_key)
    return None if snake is None else "".join(w.capitalize() for w in snake.split("_"))


def client_versions() -> dict[int, tuple[int, int]]:
    """The versions this tool's client (odradek's) speaks, per api key."""
    from ..client.connection import CLIENT_VERSIONS

    return {**CLIENT_VERSIONS, **_SASL_CLIENT_VERSIONS}


def api_line(api_key: int, lo: int, hi: int, ours: tuple[int, int] | None) -> str:
    """One API as NodeApiVersions prints it: "Produce(0): 0 to 10 [usable: 10]"."""
    name = api_name(api_key)
    text = f"{name or 'UNKNOWN'}({api_key}): " + (str(lo) if lo == hi else f"{lo} to {hi}")
    if name is None or ours is None:
        return text
    if ours[1] < lo:
        return text + " [unusable: node too new]"
    if hi < ours[0]:
        return text + " [unusable: node too old]"
    return text + f" [usable: {min(ours[1], hi)}]"


def format_versions(versions: Mapping[int, tuple[int, int]],
                    ours: Mapping[int, tuple[int, int]]) -> str:
    """A broker's versions as Kafka's ``NodeApiVersions.toString(true)``: "(", one API per
    line (tab-indented, comma-separated, by api key), ")"."""
    lines = {k: api_line(k, lo, hi, ours.get(k)) for k, (lo, hi) in versions.items()}
    for k in KAFKA_28_ZK_BROKER_APIS:
        if k not in lines:
            lines[k] = f"{api_name(k)}({k}): UNSUPPORTED"
    return "(\n\t" + ",\n\t".join(lines[k] for k in sorted(lines)) + "\n)"


def node_text(node: Node) -> str:
    """Kafka's Node.toString: "host:port (id: 0 rack: null)"."""
    return f"{node.host}:{node.port} (id: {node.node_id} rack: {node.rack or 'null'})"


def broker_lines(brokers: Mapping[Node, Mapping[int, tuple[int, int]] | KafkaError],
                 ours: Mapping[int, tuple[int, int]]) -> list[str]:
    out = []
    for node, info in brokers.items():
        if isinstance(info, Mapping):
            out.append(f"{node_text(node)} -> {format_versions(info, ours)}")
        else:
            out.append(f"{node_text(node)} -> ERROR: {info}")
    return out


async def run(args: argparse.Namespace) -> list[str]:
    admin = await open_admin(admin_config(args.bootstrap_server, args.command_config))
    try:
        brokers = await admin.broker_api_versions()
    finally:
        await admin.close()
    return broker_lines(brokers, client_versions())


def main(args: argparse.Namespace) -> int:
    def body() -> list[str]:
        if not args.bootstrap_server:
            raise ToolError("Missing required argument \"[bootstrap-server]\"")
        return asyncio.run(run(args))
    return run_tool(body, refused=prefixed("broker-api-versions"))


def add_parser(sub: Subcommands) -> None:
    p = add_admin_command(sub, "broker-api-versions",
                          help="the API versions each broker supports "
                               "(kafka-broker-api-versions)",
                          description=__doc__)
    p.set_defaults(func=main)
