"""DescribeLogDirs (key 35), v0-2 (v2 flexible; v0 is v1 on the wire and decoded with v1's
schema, ``codec.V0_SAME_WIRE_AS_V1``): the log dirs of this broker and the partitions in each
(size, offset lag, whether a future replica), as ``kafka-log-dirs.sh --describe`` shows.

Kafka's ``handleDescribeLogDirsRequest``: DESCRIBE on the CLUSTER is required (without it the
result list is empty: v0-2 have no top-level error); null topics mean every partition of this
broker. An offline log dir (KIP-112: an I/O error or a full disk) answers KAFKA_STORAGE_ERROR
with no topics (``ReplicaManager.describe_log_dirs``)."""

from __future__ import annotations

from typing import Any

from ...common import TopicPartition
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ..network import Connection
from .authz import allowed
from .replica_api import ReplicaManagerApi


class DescribeLogDirsApi(ReplicaManagerApi):
    def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        results: list[Any] = []
        if allowed(self.authorizer, conn, AclOperation.DESCRIBE, ResourceType.CLUSTER,
                   request_name="DescribeLogDirs"):
            wanted: set[TopicPartition] | None = None
            if request.topics is not None:
                wanted = {TopicPartition(t.topic, int(p))
                          for t in request.topics for p in t.partitions}
            for d in self.replica_manager.describe_log_dirs(wanted):
                topics = tuple(
                    make(mod.DescribeLogDirsTopic, name=topic, partitions=tuple(
                        make(mod.DescribeLogDirsPartition, partition_index=p.index,
                             partition_size=p.size, offset_lag=p.offset_lag,
                             is_future_key=p.is_future)
                        for p in parts))
                    for topic, parts in d.topics.items())
                results.append(make(mod.DescribeLogDirsResult, error_code=d.error,
                                    log_dir=d.log_dir, topics=topics))
        return encode_response(type(request), header.correlation_id,
                               make(mod.DescribeLogDirsResponse, throttle_time=0,
                                    results=tuple(results)))
