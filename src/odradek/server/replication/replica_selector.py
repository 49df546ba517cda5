"""Which replica a consumer should fetch from (KIP-392, Kafka's `ReplicaSelector`).

A consumer that sends its `client.rack` (Fetch v11+, `rack_id`) to a partition's leader may be
told, through the response's `preferred_read_replica`, to fetch from a follower in its own rack
instead; it then fetches from that follower, which serves it up to the follower's high
watermark. With `replica.selector.class` unset the leader serves every consumer, as before.

`rack_aware_select` is Kafka's `RackAwareReplicaSelector`: no client rack, or no replica in the
client's rack: the leader; the leader in the client's rack: the leader; otherwise the most
caught-up replica of that rack (the largest log end offset, then the shortest time since it was
last caught up). The candidates (`preferred_read_replica`) are the leader and the followers
that hold the fetch offset (log start <= offset <= log end), as Kafka's
`findPreferredReadReplica` chooses them. Pure functions: the replica manager gathers the views.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
NO_PREFERRED_REPLICA = -1


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """What a consumer's Fetch (v11+) says of it for the selector (Kafka's ClientMetadata):
    its `client.rack`, empty when it has none."""

    rack_id: str = ""


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What the selector knows of one replica (Kafka's `ReplicaView`)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int = 0


def rack_aware_select(client_rack: str | None, leader: ReplicaView,
                      replicas: Iterable[ReplicaView]) -> ReplicaView:
    if not client_rack:
        return leader
    same_rack = [r for r in replicas if r.rack == client_rack]
    if not same_rack or any(r.broker_id == leader.broker_id for r in same_rack):
        return leader
    return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_caught_up_ms))


def preferred_read_replica(selector: str | None, client_rack: str | None, leader: ReplicaView,
                           followers: Iterable[ReplicaView], fetch_offset: int,
                           log_start_offsets: dict[int, int]) -> int:
    """The broker a consumer should fetch this partition from, or NO_PREFERRED_REPLICA (-1)
    when it is the leader itself (which then serves the fetch)."""
    if selector != RACK_AWARE:
        return NO_PREFERRED_REPLICA
    candidates = [f for f in followers
                  if f.log_end_offset >= fetch_offset
                  and log_start_offsets.get(f.broker_id, 0) <= fetch_offset]
    chosen = rack_aware_select(client_rack, leader, [*candidates, leader])
    return NO_PREFERRED_REPLICA if chosen.broker_id == leader.broker_id else chosen.broker_id
