"""AlterReplicaLogDirs (key 34), v0-2 (v2 flexible; v0 is v1 on the wire and decoded with
v1's schema, ``codec.V0_SAME_WIRE_AS_V1``): move replicas of this broker to other log dirs
(KIP-113), as ``kafka-reassign-partitions.sh`` with ``log_dirs`` and
``AdminClient.alterReplicaLogDirs`` ask.

Kafka's ``handleAlterReplicaLogDirsRequest``: ALTER on the CLUSTER is required (without it
every partition answers CLUSTER_AUTHORIZATION_FAILED); the rest is
``ReplicaAlterLogDirsManager.alter_replica_log_dirs``
(server/replication/replica_alter_log_dirs.py):
LOG_DIR_NOT_FOUND, KAFKA_STORAGE_ERROR, REPLICA_NOT_AVAILABLE or NONE per partition. A
partition named under two dirs goes to the last one (Kafka builds a map)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ..network import Connection
from .authz import allowed
from .replica_api import ReplicaManagerApi


class AlterReplicaLogDirsApi(ReplicaManagerApi):
    def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        assignments: dict[TopicPartition, str] = {}
        for d in request.dirs:
            for t in d.topics:
                for p in t.partitions:
                    assignments[TopicPartition(t.name, int(p))] = d.path
        if allowed(self.authorizer, conn, AclOperation.ALTER, ResourceType.CLUSTER,
                   request_name="AlterReplicaLogDirs"):
            errors = self.replica_manager.alter_log_dirs.alter_replica_log_dirs(assignments)
        else:
            errors = dict.fromkeys(assignments, ErrorCode.cluster_authorization_failed)
        by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
        for (topic, partition), code in errors.items():
            by_topic.setdefault(topic, []).append((partition, code))
        results = tuple(
            make(mod.AlterReplicaLogDirTopicResult, topic_name=topic, partitions=tuple(
                make(mod.AlterReplicaLogDirPartitionResult, partition_index=p, error_code=code)
                for p, code in parts))
            for topic, parts in by_topic.items())
        return encode_response(type(request), header.correlation_id,
                               make(mod.AlterReplicaLogDirsResponse, throttle_time=0,
                                    results=results))
