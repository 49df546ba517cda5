"""Request dispatch by API key (Kafka's KafkaApis, split by area into small modules).

`KafkaApis.handle(connection, payload)` parses the frame with the codec and calls the handler of
that API key. A handler returns a response (bytes or parts), None (no response), or an awaitable
of one. Unknown API keys and unparseable requests close the connection with a log line, as
Kafka does; ApiVersions at an unsupported version is answered with UNSUPPORTED_VERSION (v0 body).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...protocol import interbroker as ib
from ...protocol.codec import MalformedRequest, UnsupportedVersion, decode_request, peek_api
from ..network import CloseConnection, Connection, Response
from . import (
    admin,
    alter_configs,
    api_versions,
    elect_leaders,
    fetch,
    find_coordinator,
    groups,
    interbroker,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    offsets,
    produce,
    producer_ids,
    reassignments,
)

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger("odradek.apis")

HandlerFn = Callable[["Broker", Any, Any, Connection], "Response | Awaitable[Response]"]

# api key -> (name, min version, max version, handler)
APIS: dict[int, tuple[str, int, int, HandlerFn]] = {
    0: ("Produce", 3, 10, produce.handle),
    1: ("Fetch", 4, 12, fetch.handle),
    2: ("ListOffsets", 1, 7, list_offsets.handle),
    3: ("Metadata", 0, 12, metadata.handle),
    8: ("OffsetCommit", 2, 8, offsets.handle_offset_commit),
    9: ("OffsetFetch", 1, 8, offsets.handle_offset_fetch),
    10: ("FindCoordinator", 0, 4, find_coordinator.handle),
    11: ("JoinGroup", 0, 7, groups.handle_join_group),
    12: ("Heartbeat", 0, 4, groups.handle_heartbeat),
    13: ("LeaveGroup", 0, 5, groups.handle_leave_group),
    14: ("SyncGroup", 0, 5, groups.handle_sync_group),
    15: ("DescribeGroups", 0, 5, groups.handle_describe_groups),
    16: ("ListGroups", 0, 4, groups.handle_list_groups),
    18: ("ApiVersions", 0, 3, api_versions.handle),
    19: ("CreateTopics", 2, 7, admin.handle_create_topics),
    20: ("DeleteTopics", 1, 6, admin.handle_delete_topics),
    22: ("InitProducerId", 0, 4, producer_ids.handle),
    23: ("OffsetForLeaderEpoch", 2, 4, offset_for_leader_epoch.handle),
    32: ("DescribeConfigs", 1, 4, admin.handle_describe_configs),
    33: ("AlterConfigs", 0, 2, alter_configs.handle_alter_configs),
    37: ("CreatePartitions", 0, 3, admin.handle_create_partitions),
    42: ("DeleteGroups", 0, 2, groups.handle_delete_groups),
    43: ("ElectLeaders", 0, 2, elect_leaders.handle),
    44: ("IncrementalAlterConfigs", 0, 1, alter_configs.handle_incremental_alter_configs),
    45: ("AlterPartitionReassignments", 0, 0, reassignments.handle_alter),
    46: ("ListPartitionReassignments", 0, 0, reassignments.handle_list),
    47: ("OffsetDelete", 0, 0, offsets.handle_offset_delete),
}

# Advertised below what is handled (Kafka 4.0's KAFKA-18659): librdkafka before 2.10 compresses
# with gzip, snappy or lz4 only if the broker lists Produce v0, and otherwise silently sends those
# batches uncompressed (librdkafka issue 4956). A Produce request below v3 still closes the
# connection; no client able to write magic-2 batches sends one.
ADVERTISED_MIN_VERSION = {0: 0}


# LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown: their own codec.
INTERBROKER_APIS: dict[int, tuple[int, int]] = {
    k: (lo, hi) for k, lo, hi in ib.SUPPORTED_API_VERSIONS}


class KafkaApis:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.apis = dict(APIS)

    def supported(self) -> list[tuple[int, int, int]]:
        """The ranges ApiVersions advertises (see ADVERTISED_MIN_VERSION)."""
        ranges = [(k, min(lo, ADVERTISED_MIN_VERSION.get(k, lo)), hi)
                  for k, (_, lo, hi, _) in self.apis.items()]
        ranges += [(k, lo, hi) for k, (lo, hi) in INTERBROKER_APIS.items()]
        return sorted(ranges)

    def handle(self, conn: Connection, payload: bytes) -> Response | Awaitable[Response]:
        try:
            key, version, correlation_id = peek_api(payload)
        except MalformedRequest as exc:
            raise CloseConnection(str(exc)) from None
        if key in INTERBROKER_APIS:
            lo, hi = INTERBROKER_APIS[key]
            if not lo <= version <= hi:
                raise CloseConnection(f"unsupported inter-broker api {key} version {version}")
            return interbroker.handle(self.broker, conn, payload)
        entry = self.apis.get(key)
        if entry is None:
            raise CloseConnection(f"unknown API key {key} (correlation id {correlation_id})")
        name, lo, hi, fn = entry
        if log.isEnabledFor(logging.DEBUG):
            software = conn.attributes.get("client_software")
            log.debug("%s v%d (correlation id %d) from %s%s", name, version, correlation_id,
                      conn.peer, f" ({software[0]} {software[1]})" if software else "")
        if not lo <= version <= hi:
            if key == 18:
                return api_versions.unsupported_version(self.broker, correlation_id)
            raise CloseConnection(f"unsupported {name} version {version} (supported {lo}-{hi})")
        try:
            header, request = decode_request(payload)
        except (MalformedRequest, UnsupportedVersion) as exc:
            raise CloseConnection(f"malformed {name} v{version} request: {exc}") from None
        return fn(self.broker, header, request, conn)
