"""The admin side of partition reassignment on the coordination store (Kafka's AdminZkClient
role): ``/admin/reassign_partitions`` written by AlterPartitionReassignments and the
reassign-partitions tool, and the ongoing moves ListPartitionReassignments reports.

The controller acts on the node (controller/reassignment.py); this module only reads and
writes it, so the tools and the broker's admin APIs need not import the controller.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from ..common import TopicPartition
from ..common.sanitizer import sanitize_user
from . import paths
from .optimistic_update import VersionConflict, optimistic_update
from .store import BadVersionError, CoordinationStore, NodeExistsError, NoNodeError

__all__ = [
    "OngoingReassignment",
    "Reassignment",
    "alter_admin_node",
    "merge_requests",
    "ongoing_from",
    "read_ongoing",
]


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A pending partition reassignment: OAR (original) -> RAR (target), S-6.2."""

    original: tuple[int, ...]
    target: tuple[int, ...]

    @property
    def full(self) -> tuple[int, ...]:
        """AR during the reassignment: RAR followed by OAR - RAR (Kafka's ``reassignTo``)."""
        return tuple(dict.fromkeys((*self.target, *self.original)))

    @property
    def adding(self) -> tuple[int, ...]:
        """RAR - OAR: the replicas to create (LeaderAndIsr v3+ ``AddingReplicas``)."""
        return tuple(r for r in self.target if r not in self.original)

    @property
    def removing(self) -> tuple[int, ...]:
        """OAR - RAR: the replicas to delete at the end (``RemovingReplicas``)."""
        return tuple(r for r in self.original if r not in self.target)


def merge_requests(current: Mapping[tuple[str, int], Sequence[int]],
                   changes: Mapping[tuple[str, int], Sequence[int] | None]
                   ) -> dict[tuple[str, int], tuple[int, ...]]:
    """The admin node after an AlterPartitionReassignments: new targets replace old ones,
    ``None`` drops the partition (the caller turns a cancel into a target of OAR first)."""
    merged = {k: tuple(v) for k, v in current.items()}
    for k, v in changes.items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = tuple(v)
    return merged


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """One partition's reassignment as ListPartitionReassignments reports it."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def ongoing_from(assigned: Sequence[int], adding: Sequence[int], removing: Sequence[int],
                 target: Sequence[int]) -> OngoingReassignment:
    """What List reports: the recorded adding/removing replicas once the controller started
    the move, else what it will do (AR = RAR + OAR - RAR)."""
    if adding or removing:
        return OngoingReassignment(tuple(assigned), tuple(adding), tuple(removing))
    r = Reassignment(original=tuple(assigned), target=tuple(target))
    return OngoingReassignment(r.full, r.adding, r.removing)


async def read_ongoing(store: CoordinationStore,
                       topics: Mapping[str, Collection[int] | None] | None
                       ) -> dict[TopicPartition, OngoingReassignment]:
    """The ongoing reassignments (filtered to ``topics``: name -> partitions or None = all)."""
    found = await store.get_or_none(paths.REASSIGN_PARTITIONS)
    requested = paths.decode_reassignment(found[0]) if found is not None else {}
    out: dict[TopicPartition, OngoingReassignment] = {}
    assignments: dict[str, paths.TopicAssignment | None] = {}
    for (topic, p), target in sorted(requested.items()):
        if topics is not None:
            if topic not in topics:
                continue
            wanted = topics[topic]
            if wanted is not None and p not in wanted:
                continue
        if topic not in assignments:
            node = await store.get_or_none(paths.topic_path(topic))
            assignments[topic] = None if node is None else paths.decode_topic_assignment(node[0])
        a = assignments[topic]
        if a is None or p not in a.partitions:
            continue
        out[TopicPartition(topic, p)] = ongoing_from(
            a.partitions[p], a.adding_replicas.get(p, ()), a.removing_replicas.get(p, ()), target)
    return out


_ABSENT = (b"", None)


async def alter_admin_node(store: CoordinationStore,
                           changes: Mapping[tuple[str, int], tuple[int, ...] | None]
                           ) -> None:
    """Merge targets into ``/admin/reassign_partitions`` (version-checked, created if absent,
    deleted when it would be empty); a concurrent change of the node is read again and merged
    again (:func:`~odradek.coordination.optimistic_update.optimistic_update`)."""

    async def read() -> tuple[bytes, int | None]:
        found = await store.get_or_none(paths.REASSIGN_PARTITIONS)
        return _ABSENT if found is None else (found[0], found[1].version)

    def compute(node: tuple[bytes, int | None]
                ) -> dict[tuple[str, int], tuple[int, ...]]:
        data, version = node
        return merge_requests({} if version is None else paths.decode_reassignment(data),
                              changes)

    async def write(node: tuple[bytes, int | None],
                    merged: dict[tuple[str, int], tuple[int, ...]]) -> None:
        version = node[1]
        try:
            if version is None:
                if merged:
                    await store.create(paths.REASSIGN_PARTITIONS,
                                       paths.encode_reassignment(merged), makepath=True)
                return
            if not merged:
                with contextlib.suppress(NoNodeError):
                    await store.delete(paths.REASSIGN_PARTITIONS, version=version)
                return
            await store.set(paths.REASSIGN_PARTITIONS, paths.encode_reassignment(merged),
                            version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            raise VersionConflict() from None

    await optimistic_update(read, compute, write)


# -- /config/<type>/<entity> and /config/changes (Kafka's AdminZkClient.changeEntityConfig) ------

async def change_entity_config(store: CoordinationStore, path: str, config: Mapping[str, str],
                               entity_path: str) -> None:
    """Write an entity's config znode `path` (created, with its parents, if absent), then the
    sequential `/config/changes` notification naming `entity_path` (``<type>/<entity>``) that
    every broker's config change watcher reacts to."""
    data = paths.encode_entity_config(config)
    try:
        await store.create(path, data, makepath=True)
    except NodeExistsError:
        await store.set(path, data)
    await store.create(paths.config_change_path(), paths.encode_config_change(entity_path),
                       sequence=True, makepath=True)


# -- /config/users/<user> (SCRAM credentials; Kafka's AdminZkClient.changeUserOrUserClientIdConfig)
USERS = f"{paths.CONFIG}/users"


def user_config_path(user: str) -> str:
    return f"{USERS}/{sanitize_user(user)}"


async def read_user_config(store: CoordinationStore, user: str) -> dict[str, str]:
    found = await store.get_or_none(user_config_path(user))
    return paths.decode_entity_config(found[0]) if found else {}


async def write_user_config(store: CoordinationStore, user: str, config: dict[str, str]) -> None:
    """Write `/config/users/<user>` and the change notification every broker reacts to."""
    await change_entity_config(store, user_config_path(user), config,
                               f"users/{sanitize_user(user)}")
