"""Request dispatch by API key (Kafka's KafkaApis, split by area into small modules).

`KafkaApis` is built with the broker's collaborators (replica manager, metadata cache, group and
transaction coordinators, admin manager, config managers, producer id manager, controller,
store), as Kafka's `KafkaApis(requestChannel, replicaManager, groupCoordinator, ...)`; each area
module gets only what it uses. `KafkaApis.handle(connection, payload)` parses the frame with the
codec and calls the handler of that API key. A handler returns a response (bytes or parts), None (no
response), or an awaitable of one. Unknown API keys and unparseable requests close the
connection with a log line, as Kafka does; ApiVersions at an unsupported version is answered
with UNSUPPORTED_VERSION (v0 body).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from time import perf_counter, perf_counter_ns
from typing import Any

from ...controller.controller import KafkaController
from ...coordination.store import CoordinationStore
from ...coordinator.group_coordinator import GroupCoordinator
from ...coordinator.transaction_coordinator import TransactionCoordinator
from ...metrics.stats import RequestStats, RequestTimer, TopicStats
from ...protocol import interbroker as ib
from ...protocol.codec import MalformedRequest, UnsupportedVersion, decode_request, peek_api
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..admin_manager import AdminManager
from ..configs.config import KafkaConfig
from ..configs.topic_config_manager import TopicConfigManager
from ..credential_cache import CredentialCache
from ..metadata_cache import MetadataCache
from ..network import CloseConnection, Connection, Response
from ..producer_id_manager import ProducerIdManager
from ..quotas.client_quota_manager import QuotaManagers
from ..quotas.request_throttler import RequestThrottler
from ..replication.replica_manager import ReplicaManager
from .acls import AclApis
from .admin import AdminApis
from .alter_configs import AlterConfigsApis
from .alter_replica_log_dirs import AlterReplicaLogDirsApi
from .api_versions import ApiVersionsApi
from .client_quotas import ClientQuotaApis
from .delete_records import DeleteRecordsApi
from .describe_cluster import DescribeClusterApi
from .describe_log_dirs import DescribeLogDirsApi
from .describe_producers import DescribeProducersApi
from .elect_leaders import ElectLeadersApi
from .fetch import FetchApi
from .find_coordinator import FindCoordinatorApi
from .groups import GroupApis
from .interbroker import InterBrokerApis
from .list_offsets import ListOffsetsApi
from .metadata import MetadataApi
from .offset_for_leader_epoch import OffsetForLeaderEpochApi
from .offsets import OffsetApis
from .produce import ProduceApi
from .producer_ids import InitProducerIdApi
from .reassignments import ReassignmentApis
from .sasl import SaslApis, sasl_server_configs
from .scram_credentials import ScramCredentialApis
from .transactions import TransactionApis
from .update_features import UpdateFeaturesApi
from .write_txn_markers import WriteTxnMarkersApi

log = logging.getLogger("odradek.apis")

HandlerFn = Callable[[Any, Any, Connection], "Response | Awaitable[Response]"]

# api key -> (name, min version, max version)
APIS: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 10),
    1: ("Fetch", 4, 16),
    2: ("ListOffsets", 0, 7),  # v0: protocol/list_offsets_v0.py (kio has 1+)
    3: ("Metadata", 0, 12),
    8: ("OffsetCommit", 2, 8),
    9: ("OffsetFetch", 1, 8),
    10: ("FindCoordinator", 0, 4),
    11: ("JoinGroup", 0, 7),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 5),
    14: ("SyncGroup", 0, 5),
    15: ("DescribeGroups", 0, 5),
    16: ("ListGroups", 0, 4),
    17: ("SaslHandshake", 0, 1),
    18: ("ApiVersions", 0, 3),
    19: ("CreateTopics", 2, 7),
    20: ("DeleteTopics", 1, 6),
    21: ("DeleteRecords", 0, 2),
    22: ("InitProducerId", 0, 4),
    23: ("OffsetForLeaderEpoch", 2, 4),
    24: ("AddPartitionsToTxn", 0, 3),
    25: ("AddOffsetsToTxn", 0, 3),
    26: ("EndTxn", 0, 3),
    27: ("WriteTxnMarkers", 0, 1),
    28: ("TxnOffsetCommit", 0, 3),
    29: ("DescribeAcls", 1, 2),  # v0 (pre-KIP-290): not in the codec (kio)
    30: ("CreateAcls", 1, 2),
    31: ("DeleteAcls", 1, 2),
    32: ("DescribeConfigs", 1, 4),
    33: ("AlterConfigs", 0, 2),
    34: ("AlterReplicaLogDirs", 0, 2),  # v0: v1's schema (codec.V0_SAME_WIRE_AS_V1)
    35: ("DescribeLogDirs", 0, 2),  # v0: v1's schema (codec.V0_SAME_WIRE_AS_V1)
    36: ("SaslAuthenticate", 0, 2),
    37: ("CreatePartitions", 0, 3),
    42: ("DeleteGroups", 0, 2),
    43: ("ElectLeaders", 0, 2),
    44: ("IncrementalAlterConfigs", 0, 1),
    45: ("AlterPartitionReassignments", 0, 0),
    46: ("ListPartitionReassignments", 0, 0),
    47: ("OffsetDelete", 0, 0),
    48: ("DescribeClientQuotas", 0, 1),
    49: ("AlterClientQuotas", 0, 1),
    50: ("DescribeUserScramCredentials", 0, 0),
    51: ("AlterUserScramCredentials", 0, 0),
    57: ("UpdateFeatures", 0, 0),
    60: ("DescribeCluster", 0, 1),  # v1: Kafka 3.7 (KIP-919, endpoint_type)
    61: ("DescribeProducers", 0, 0),
    65: ("DescribeTransactions", 0, 0),  # Kafka 3.0 (KIP-664)
    66: ("ListTransactions", 0, 0),  # Kafka 3.0 (KIP-664)
}

# Advertised below what is handled (Kafka 4.0's KAFKA-18659): librdkafka before 2.10 compresses
# with gzip, snappy or lz4 only if the broker lists Produce v0, and otherwise silently sends those
# batches uncompressed (librdkafka issue 4956). A Produce request below v3 still closes the
# connection; no client able to write magic-2 batches sends one.
ADVERTISED_MIN_VERSION = {0: 0}


# LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown: their own codec.
INTERBROKER_APIS: dict[int, tuple[int, int]] = {
    k: (lo, hi) for k, lo, hi in ib.SUPPORTED_API_VERSIONS}


def advertised_versions() -> list[tuple[int, int, int]]:
    """(api key, min, max) as ApiVersions advertises them (see ADVERTISED_MIN_VERSION): Kafka
    2.8's ranges but where docs/design.md (S-8.1, "Protocol versions") says otherwise."""
    ranges = [(k, min(lo, ADVERTISED_MIN_VERSION.get(k, lo)), hi)
              for k, (_, lo, hi) in APIS.items()]
    ranges += [(k, lo, hi) for k, (lo, hi) in INTERBROKER_APIS.items()]
    return sorted(ranges)


class KafkaApis:
    def __init__(self, *, broker_id: int, config: KafkaConfig,
                 replica_manager: ReplicaManager, metadata_cache: MetadataCache,
                 group_coordinator: GroupCoordinator, txn_coordinator: TransactionCoordinator,
                 admin_manager: AdminManager,
                 topic_config_manager: TopicConfigManager, producer_ids: ProducerIdManager,
                 controller: KafkaController, store: CoordinationStore,
                 flush_checkpoints: Callable[[], Awaitable[Any]],
                 authorizer: Authorizer = ALLOW_ALL,
                 credential_cache: CredentialCache | None = None,
                 request_stats: RequestStats | None = None,
                 topic_stats: TopicStats | None = None,
                 quotas: QuotaManagers | None = None,
                 broker_epoch: Callable[[], int] | None = None) -> None:
        auth = authorizer
        # client quotas (KIP-219): recorded and applied after each request's handler
        self.throttler = RequestThrottler(quotas if quotas is not None else QuotaManagers())
        client_quotas = ClientQuotaApis(store, auth)
        # RequestMetrics per request name (metrics/): count, total/local/remote time
        self.request_stats = request_stats if request_stats is not None else RequestStats()
        self._timers = {key: self.request_stats.timer(name) for key, (name, _, _) in APIS.items()}
        admin = AdminApis(broker_id, admin_manager, metadata_cache, auth)
        alter_configs = AlterConfigsApis(admin_manager, auth)
        groups = GroupApis(group_coordinator, auth)
        offsets = OffsetApis(group_coordinator, metadata_cache, auth)
        reassignments = ReassignmentApis(store, auth)
        transactions = TransactionApis(txn_coordinator, group_coordinator, metadata_cache, auth)
        acls = AclApis(auth)
        self.api_versions = ApiVersionsApi(self.supported)
        cache = credential_cache or CredentialCache(store)  # SASL (SB)
        self.sasl = SaslApis(sasl_server_configs(
            config.originals, [ep.listener for ep in config.listeners], cache.get))
        scram = ScramCredentialApis(store, cache, auth)
        self.interbroker = InterBrokerApis(
            replica_manager, metadata_cache, topic_config_manager, controller, flush_checkpoints,
            auth, broker_epoch)
        self.fetch = FetchApi(replica_manager, config["fetch.max.bytes"], auth, topic_stats,
                              config["max.incremental.fetch.session.cache.slots"],
                              fetch_throttle=self.throttler.fetch_throttle)
        self.handlers: dict[int, HandlerFn] = {
            0: ProduceApi(replica_manager, auth).handle,
            1: self.fetch.handle,
            2: ListOffsetsApi(replica_manager, auth).handle,
            3: MetadataApi(metadata_cache, config["auto.create.topics.enable"],
                           admin_manager.auto_create_topics, auth).handle,
            8: offsets.handle_offset_commit,
            9: offsets.handle_offset_fetch,
            10: FindCoordinatorApi(group_coordinator, metadata_cache, auth,
                                   txn_coordinator).handle,
            11: groups.handle_join_group,
            12: groups.handle_heartbeat,
            13: groups.handle_leave_group,
            14: groups.handle_sync_group,
            15: groups.handle_describe_groups,
            16: groups.handle_list_groups,
            17: self.sasl.handle_handshake,
            18: self.api_versions.handle,
            19: admin.handle_create_topics,
            20: admin.handle_delete_topics,
            21: DeleteRecordsApi(replica_manager, metadata_cache, auth).handle,
            22: InitProducerIdApi(producer_ids, txn_coordinator, auth).handle,
            23: OffsetForLeaderEpochApi(replica_manager, auth).handle,
            24: transactions.handle_add_partitions_to_txn,
            25: transactions.handle_add_offsets_to_txn,
            26: transactions.handle_end_txn,
            27: WriteTxnMarkersApi(replica_manager, group_coordinator,
                                   config["request.timeout.ms"], auth).handle,
            28: offsets.handle_txn_offset_commit,
            29: acls.handle_describe_acls,
            30: acls.handle_create_acls,
            31: acls.handle_delete_acls,
            32: admin.handle_describe_configs,
            33: alter_configs.handle_alter_configs,
            36: self.sasl.handle_authenticate,
            37: admin.handle_create_partitions,
            42: groups.handle_delete_groups,
            43: ElectLeadersApi(controller, metadata_cache, auth).handle,
            44: alter_configs.handle_incremental_alter_configs,
            45: reassignments.handle_alter,
            46: reassignments.handle_list,
            47: offsets.handle_offset_delete,
            48: client_quotas.handle_describe,
            49: client_quotas.handle_alter,
            50: scram.handle_describe,
            51: scram.handle_alter,
            57: UpdateFeaturesApi(controller, auth).handle,
            60: DescribeClusterApi(metadata_cache, auth).handle,
            61: DescribeProducersApi(replica_manager, metadata_cache, auth).handle,
            34: AlterReplicaLogDirsApi(replica_manager, auth).handle,
            35: DescribeLogDirsApi(replica_manager, auth).handle,
            65: transactions.handle_describe_transactions,
            66: transactions.handle_list_transactions,
        }
        assert self.handlers.keys() == APIS.keys()

    def supported(self) -> list[tuple[int, int, int]]:
        """The ranges ApiVersions advertises (advertised_versions)."""
        return advertised_versions()

    def handle(self, conn: Connection, payload: bytes) -> Response | Awaitable[Response]:
        if not conn.authenticated:  # a SASL listener's client before authentication (SB)
            try:
                return self.sasl.before_authentication(conn, payload, self._handle)
            except MalformedRequest as exc:
                raise CloseConnection(str(exc)) from None
        return self._handle(conn, payload)

    def _handle(self, conn: Connection, payload: bytes) -> Response | Awaitable[Response]:
        try:
            key, version, correlation_id = peek_api(payload)
        except MalformedRequest as exc:
            raise CloseConnection(str(exc)) from None
        if key in INTERBROKER_APIS:
            lo, hi = INTERBROKER_APIS[key]
            if not lo <= version <= hi:
                raise CloseConnection(f"unsupported inter-broker api {key} version {version}")
            return self.interbroker.handle(conn, payload)
        entry = APIS.get(key)
        if entry is None:
            raise CloseConnection(f"unknown API key {key} (correlation id {correlation_id})")
        name, lo, hi = entry
        if log.isEnabledFor(logging.DEBUG):
            software = conn.attributes.get("client_software")
            log.debug("%s v%d (correlation id %d) from %s%s", name, version, correlation_id,
                      conn.peer, f" ({software[0]} {software[1]})" if software else "")
        if not lo <= version <= hi:
            if key == 18:
                return self.api_versions.unsupported_version(correlation_id)
            raise CloseConnection(f"unsupported {name} version {version} (supported {lo}-{hi})")
        try:
            header, request = decode_request(payload)
        except (MalformedRequest, UnsupportedVersion) as exc:
            raise CloseConnection(f"malformed {name} v{version} request: {exc}") from None
        throttler = self.throttler
        if throttler.enabled and conn.authenticated:  # client quotas (request_throttler.py)
            request = throttler.prepare(key, header, request, conn)
            started = perf_counter_ns()
            result = self._handle_decoded(key, header, request, conn)
            return throttler.complete(key, header, request, conn, len(payload),
                                      perf_counter_ns() - started, result)
        return self._handle_decoded(key, header, request, conn)

    def _handle_decoded(self, key: int, header: Any, request: Any, conn: Connection
                        ) -> Response | Awaitable[Response]:
        if not self.request_stats.enabled:
            return self.handlers[key](header, request, conn)
        start = perf_counter()
        result = self.handlers[key](header, request, conn)
        local = perf_counter() - start
        if isinstance(result, Awaitable):
            return _timed(result, self._timers[key], start, local)
        self._timers[key].record(local, local)
        return result


async def _timed(result: Awaitable[Response], timer: RequestTimer, start: float,
                 local: float) -> Response:
    """The response of a request that waits (a purgatory, another broker): its total time
    counts until the response is ready."""
    response = await result
    timer.record(local, perf_counter() - start)
    return response
