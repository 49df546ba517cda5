"""What the APIs answered by the replica manager alone share (Produce, ListOffsets,
OffsetForLeaderEpoch, AlterReplicaLogDirs, DescribeLogDirs): built with the replica manager and
the authorizer their checks ask (KIP-113's and the data path's requests in Kafka's
KafkaApis)."""

from __future__ import annotations

from ...security.authorizer import ALLOW_ALL, Authorizer
from ..replication.replica_manager import ReplicaManager


class ReplicaManagerApi:
    def __init__(self, replica_manager: ReplicaManager,
                 authorizer: Authorizer = ALLOW_ALL) -> None:
        self.replica_manager = replica_manager
        self.authorizer = authorizer
