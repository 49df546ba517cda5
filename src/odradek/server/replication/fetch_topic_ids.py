"""Topic ids in Fetch (KIP-516), as pure decisions: Fetch v13+ names each topic by its id, which
the broker resolves against its metadata cache (the ids Metadata v10+ answers, from the topic
znodes); v15+ moves the follower's replica id into the `replica_state` tagged field (KIP-903).

Kafka's answers: an id the broker does not know -> UNKNOWN_TOPIC_ID for each of its partitions
(the response echoes the id); a known topic without that partition -> UNKNOWN_TOPIC_OR_PARTITION
(the replica manager answers that); a partition whose local log holds another topic's id (the
topic was deleted and re-created under the same name while this replica still has the old
one) -> INCONSISTENT_TOPIC_ID (checked by the replica manager against `partition.metadata`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

TOPIC_IDS_FROM = 13  # Fetch v13: topics named by id
REPLICA_STATE_FROM = 15  # Fetch v15: replica id in `replica_state` (KIP-903)
ZERO_ID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class ResolvedTopics:
    """The request's topics resolved: `names[i]` is request topic i's name (None: an unknown
    id), and `ids` maps each resolved name to the id the request used (empty before v13)."""

    names: list[str | None]
    ids: dict[str, uuid.UUID]

    def unknown(self, topics: Sequence[Any]) -> list[tuple[uuid.UUID, list[int]]]:
        """(id, partitions) of each request topic whose id the broker does not know."""
        return [(t.topic_id if t.topic_id is not None else ZERO_ID,
                 [p.partition for p in t.partitions])
                for t, name in zip(topics, self.names, strict=True) if name is None]


def resolve_topics(version: int, topics: Sequence[Any],
                   name_of: Callable[[uuid.UUID], str | None]) -> ResolvedTopics:
    """Resolve a Fetch request's topics: by name before v13, by id (`name_of`, the metadata
    cache's id -> name; the zero id is never a topic's) from v13."""
    if version < TOPIC_IDS_FROM:
        return ResolvedTopics([t.topic for t in topics], {})
    names: list[str | None] = []
    ids: dict[str, uuid.UUID] = {}
    for t in topics:
        tid = t.topic_id
        name = None if tid is None or tid == ZERO_ID else name_of(tid)
        names.append(name)
        if name is not None:
            ids[name] = tid
    return ResolvedTopics(names, ids)


def has_consistent_topic_id(requested: uuid.UUID | None, local: uuid.UUID | None) -> bool:
    """Kafka's hasConsistentTopicId: ids differ only if both are known (and not zero)."""
    if requested is None or local is None or not requested.int or not local.int:
        return True
    return requested == local


def replica_id_of(request: Any) -> int:
    """The fetching replica's id: `replica_state.replica_id` from v15 (KIP-903), else the
    request's `replica_id` (-1 for consumers)."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))
