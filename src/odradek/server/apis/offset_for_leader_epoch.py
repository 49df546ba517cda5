"""OffsetForLeaderEpoch (key 23), v2-v4 (KIP-101, KIP-279, S-3.7): for each partition, the end
offset of the requested leader epoch in the leader's log — the start offset of the next larger
epoch, or the LEO for the latest — with the largest epoch <= the requested one. Followers truncate
there when they start following (when the leader cannot tell them in its Fetch answer, KIP-320);
consumers (replica id -1) ask it to validate their position after a leader change. Only the
leader answers (NOT_LEADER_OR_FOLLOWER otherwise), and the request's current leader epoch is
checked (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ..network import Connection
from ..replication.replica_manager import ReplicaManager
from .authz import allowed, allowed_names
from .replica_api import ReplicaManagerApi


class OffsetForLeaderEpochApi(ReplicaManagerApi):
    def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        denied: set[str] = set()
        auth = self.authorizer
        # Kafka (KIP-320): CLUSTER_ACTION on the cluster (followers), or else DESCRIBE on each
        # topic (consumers validating their position), whatever the request's replica id
        if auth.enabled and not allowed(auth, conn, AclOperation.CLUSTER_ACTION,
                                        ResourceType.CLUSTER, request_name="OffsetForLeaderEpoch",
                                        log_if_denied=False):
            names = {t.topic for t in request.topics}
            denied = names - allowed_names(auth, conn, AclOperation.DESCRIBE,
                                           ResourceType.TOPIC, names,
                                           request_name="OffsetForLeaderEpoch")
        return _handle(self.replica_manager, header, request, denied)


def _handle(rm: ReplicaManager, header: Any, request: Any, denied: set[str] | None = None
            ) -> bytes:
    mod = response_module(type(request))
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if denied and t.topic in denied:
                parts.append(make(mod.EpochEndOffset,
                                  error_code=ErrorCode.topic_authorization_failed,
                                  partition=p.partition, leader_epoch=-1, end_offset=-1))
                continue
            r = rm.last_offset_for_leader_epoch((t.topic, p.partition),
                                                getattr(p, "current_leader_epoch", -1),
                                                p.leader_epoch)
            parts.append(make(mod.EpochEndOffset, error_code=r.error, partition=p.partition,
                              leader_epoch=r.leader_epoch, end_offset=r.end_offset))
        topics.append(make(mod.OffsetForLeaderTopicResult, topic=t.topic,
                           partitions=tuple(parts)))
    return encode_response(type(request), header.correlation_id,
                           make(mod.OffsetForLeaderEpochResponse, throttle_time=0,
                                topics=tuple(topics)))
