"""ZooKeeper-era inter-broker APIs: LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6),
ControlledShutdown (7) — request and response bodies (S-4.2, S-4.3, S-4.4, S-5.3, S-5.7).

kio does not cover these APIs, so this module carries their schemas, transcribed field by field
from Kafka 3.x's ``clients/src/main/resources/common/message/*.json``, as tables of
:class:`Field` attached to frozen dataclasses, and one small interpreter that reads and writes
any of them at any version: classic encodings up to the first flexible version, then compact
strings/arrays and tagged-field sections (unknown tags are skipped, as the protocol says).

Writing a field that does not exist at the chosen version is an error when the field is not
"ignorable" and holds a non-default value (Kafka's ``UnsupportedVersionException``); ignorable
fields are silently dropped.  The ``for_version`` methods re-lay a request out for an older or
newer version (grouped by topic or not), as Kafka's Java request builders do.

The frame functions at the end add the request/response headers (and the size prefix when
encoding), sans-IO: the controller's channel and the broker's inter-broker handler both use them,
so the bytes on the wire have one definition.  Note that ControlledShutdown v0 uses request
header v0 (no client id): see :func:`request_header_version`.

structure: over 1,000 lines allowed. Two thirds of the module are the four APIs' schema tables,
one field a line as in Kafka's JSON; the interpreter beside them is ~300 lines. Split by API,
each piece would need the interpreter and the tables would no longer read side by side with
the JSON they transcribe (.ci/structure.py checks the 1,000-line limit).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import MISSING, dataclass, fields, replace
from functools import cache
from typing import Any, ClassVar, Literal, TypeVar

__all__ = [
    "API_NAMES",
    "CODEC_VERSIONS",
    "CONTROLLED_SHUTDOWN",
    "LEADER_AND_ISR",
    "STOP_REPLICA",
    "SUPPORTED_API_VERSIONS",
    "UPDATE_METADATA",
    "ZERO_UUID",
    "ControlledShutdownRequest",
    "ControlledShutdownResponse",
    "DecodeError",
    "Field",
    "LeaderAndIsrLiveLeader",
    "LeaderAndIsrPartitionError",
    "LeaderAndIsrPartitionState",
    "LeaderAndIsrRequest",
    "LeaderAndIsrResponse",
    "LeaderAndIsrTopicError",
    "LeaderAndIsrTopicState",
    "RemainingPartition",
    "StopReplicaPartitionError",
    "StopReplicaPartitionState",
    "StopReplicaPartitionV0",
    "StopReplicaRequest",
    "StopReplicaResponse",
    "StopReplicaTopicState",
    "StopReplicaTopicV1",
    "UnsupportedVersionError",
    "UpdateMetadataBroker",
    "UpdateMetadataEndpoint",
    "UpdateMetadataPartitionState",
    "UpdateMetadataRequest",
    "UpdateMetadataResponse",
    "UpdateMetadataTopicState",
    "broker_epoch_offset",
    "decode_request",
    "decode_request_frame",
    "decode_response",
    "decode_response_frame",
    "encode_request",
    "encode_request_frame",
    "encode_response",
    "encode_response_frame",
    "group_topic_states",
    "is_flexible",
    "read_message",
    "request_header_version",
    "response_header_version",
    "write_message",
]

LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
CONTROLLED_SHUTDOWN = 7

ZERO_UUID = uuid.UUID(int=0)
"""Kafka's ``Uuid.ZERO_UUID``: no topic id."""

_MAX_VERSION = 0x7FFF


class UnsupportedVersionError(ValueError):
    """Version out of range, or a non-ignorable field cannot be written at this version.

    ``error_code`` is Kafka's UNSUPPORTED_VERSION.
    """

    error_code = 35


class DecodeError(ValueError):
    """The bytes do not parse as the expected message (truncated, bad length, bad UTF-8)."""


# --------------------------------------------------------------------------------------------
# Schema description
# --------------------------------------------------------------------------------------------

def _parse_versions(spec: str | None) -> tuple[int, int] | None:
    """``"0+"`` -> (0, max); ``"0-1"`` -> (0, 1); ``"5"`` -> (5, 5); ``None`` -> None."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), _MAX_VERSION
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


def _in(rng: tuple[int, int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a Kafka message schema (the JSON's name/type/versions/...).

    ``type`` is one of ``int8 int16 int32 int64 bool string uuid``, ``[]int32``, ``[]int64``,
    or ``[]`` + a struct dataclass given as ``struct``.
    """

    name: str
    type: str
    versions: str
    struct: type | None = None
    nullable_versions: str | None = None
    ignorable: bool = False
    tag: int | None = None
    tagged_versions: str | None = None

    @property
    def version_range(self) -> tuple[int, int] | None:
        return _parse_versions(self.versions)


def _f(name: str, type_: str | type, versions: str, *, nullable: str | None = None,
       ignorable: bool = False, tag: int | None = None, tagged: str | None = None) -> Field:
    if isinstance(type_, str):
        return Field(name, type_, versions, None, nullable, ignorable, tag, tagged)
    return Field(name, "[]struct", versions, type_, nullable, ignorable, tag, tagged)


# --------------------------------------------------------------------------------------------
# Messages (field order = schema order; python names = snake_case of the JSON names)
# --------------------------------------------------------------------------------------------

Ints = tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrPartitionState:
    """A partition's leadership as the controller tells it to a broker."""

    topic_name: str = ""
    partition_index: int = 0
    controller_epoch: int = 0
    leader: int = 0
    leader_epoch: int = 0
    isr: Ints = ()
    partition_epoch: int = 0
    """The partition state node's ZooKeeper version (``ZkVersion`` before Kafka 3.x)."""
    replicas: Ints = ()
    adding_replicas: Ints = ()
    removing_replicas: Ints = ()
    is_new: bool = False
    leader_recovery_state: int = 0

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("topic_name", "string", "0-1", ignorable=True),
        _f("partition_index", "int32", "0+"),
        _f("controller_epoch", "int32", "0+"),
        _f("leader", "int32", "0+"),
        _f("leader_epoch", "int32", "0+"),
        _f("isr", "[]int32", "0+"),
        _f("partition_epoch", "int32", "0+"),
        _f("replicas", "[]int32", "0+"),
        _f("adding_replicas", "[]int32", "3+", ignorable=True),
        _f("removing_replicas", "[]int32", "3+", ignorable=True),
        _f("is_new", "bool", "1+", ignorable=True),
        _f("leader_recovery_state", "int8", "6+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrTopicState:
    topic_name: str = ""
    topic_id: uuid.UUID = ZERO_UUID
    partition_states: tuple[LeaderAndIsrPartitionState, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("topic_name", "string", "2+"),
        _f("topic_id", "uuid", "5+", ignorable=True),
        _f("partition_states", LeaderAndIsrPartitionState, "2+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrLiveLeader:
    broker_id: int = 0
    host_name: str = ""
    port: int = 0

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("broker_id", "int32", "0+"),
        _f("host_name", "string", "0+"),
        _f("port", "int32", "0+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrRequest:
    """LeaderAndIsr (api key 4): become leader/follower for these partitions (S-4.2).

    ``type`` (v5+): 0 unknown, 1 incremental, 2 full (all the broker's partitions; Kafka sends
    full requests on controller fail-over and broker start-up).
    """

    controller_id: int = 0
    is_kraft_controller: bool = False
    controller_epoch: int = 0
    broker_epoch: int = -1
    type: int = 0
    ungrouped_partition_states: tuple[LeaderAndIsrPartitionState, ...] = ()
    topic_states: tuple[LeaderAndIsrTopicState, ...] = ()
    live_leaders: tuple[LeaderAndIsrLiveLeader, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("controller_id", "int32", "0+"),
        _f("is_kraft_controller", "bool", "7+"),
        _f("controller_epoch", "int32", "0+"),
        _f("broker_epoch", "int64", "2+", ignorable=True),
        _f("type", "int8", "5+"),
        _f("ungrouped_partition_states", LeaderAndIsrPartitionState, "0-1"),
        _f("topic_states", LeaderAndIsrTopicState, "2+"),
        _f("live_leaders", LeaderAndIsrLiveLeader, "0+"),
    )

    def partition_states(self) -> list[LeaderAndIsrPartitionState]:
        """Every partition state with ``topic_name`` filled, whatever the layout."""
        return _ungrouped(self.ungrouped_partition_states, self.topic_states)

    def named_partition_states(self) -> Iterator[tuple[str, LeaderAndIsrPartitionState]]:
        """(topic, state) for every partition state, whatever the layout, without copying the
        states (in the grouped layout their ``topic_name`` is empty)."""
        return _named(self.ungrouped_partition_states, self.topic_states)

    def partition_count(self) -> int:
        """How many partition states the request holds (without copying them)."""
        return len(self.ungrouped_partition_states) + sum(
            len(ts.partition_states) for ts in self.topic_states)

    def topic_names(self) -> set[str]:
        """The topics of the request's partition states (without copying them)."""
        return ({ps.topic_name for ps in self.ungrouped_partition_states}
                | {ts.topic_name for ts in self.topic_states})

    def for_version(self, version: int,
                    topic_ids: Mapping[str, uuid.UUID] | None = None) -> LeaderAndIsrRequest:
        """The same request laid out for ``version`` (ungrouped for v0-1, by topic for v2+)."""
        states = self.partition_states()
        if version <= 1:
            return replace(self, ungrouped_partition_states=tuple(states), topic_states=())
        return replace(self, ungrouped_partition_states=(), topic_states=_regrouped(
            LeaderAndIsrTopicState, states, self.topic_states, topic_ids))


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrPartitionError:
    topic_name: str = ""
    partition_index: int = 0
    error_code: int = 0

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("topic_name", "string", "0-4", ignorable=True),
        _f("partition_index", "int32", "0+"),
        _f("error_code", "int16", "0+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrTopicError:
    topic_id: uuid.UUID = ZERO_UUID
    partition_errors: tuple[LeaderAndIsrPartitionError, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("topic_id", "uuid", "5+"),
        _f("partition_errors", LeaderAndIsrPartitionError, "5+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrResponse:
    error_code: int = 0
    partition_errors: tuple[LeaderAndIsrPartitionError, ...] = ()
    topics: tuple[LeaderAndIsrTopicError, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("error_code", "int16", "0+"),
        _f("partition_errors", LeaderAndIsrPartitionError, "0-4"),
        _f("topics", LeaderAndIsrTopicError, "5+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaPartitionV0:
    topic_name: str = ""
    partition_index: int = 0

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("topic_name", "string", "0"),
        _f("partition_index", "int32", "0"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaTopicV1:
    name: str = ""
    partition_indexes: Ints = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("name", "string", "1-2"),
        _f("partition_indexes", "[]int32", "1-2"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaPartitionState:
    partition_index: int = 0
    leader_epoch: int = -1
    delete_partition: bool = False

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("partition_index", "int32", "3+"),
        _f("leader_epoch", "int32", "3+"),
        _f("delete_partition", "bool", "3+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaTopicState:
    topic_name: str = ""
    partition_states: tuple[StopReplicaPartitionState, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("topic_name", "string", "3+"),
        _f("partition_states", StopReplicaPartitionState, "3+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaRequest:
    """StopReplica (api key 5): stop fetching/serving, optionally delete (S-5.7, S-6.2)."""

    controller_id: int = 0
    is_kraft_controller: bool = False
    controller_epoch: int = 0
    broker_epoch: int = -1
    delete_partitions: bool = False
    ungrouped_partitions: tuple[StopReplicaPartitionV0, ...] = ()
    topics: tuple[StopReplicaTopicV1, ...] = ()
    topic_states: tuple[StopReplicaTopicState, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("controller_id", "int32", "0+"),
        _f("is_kraft_controller", "bool", "4+"),
        _f("controller_epoch", "int32", "0+"),
        _f("broker_epoch", "int64", "1+", ignorable=True),
        _f("delete_partitions", "bool", "0-2"),
        _f("ungrouped_partitions", StopReplicaPartitionV0, "0"),
        _f("topics", StopReplicaTopicV1, "1-2"),
        _f("topic_states", StopReplicaTopicState, "3+"),
    )

    def partition_states(self) -> list[tuple[str, StopReplicaPartitionState]]:
        """(topic, state) for every partition, whatever the layout (v0-2 use the global flag)."""
        out = [(p.topic_name, StopReplicaPartitionState(
            partition_index=p.partition_index, delete_partition=self.delete_partitions))
            for p in self.ungrouped_partitions]
        out += [(t.name, StopReplicaPartitionState(
            partition_index=i, delete_partition=self.delete_partitions))
            for t in self.topics for i in t.partition_indexes]
        out += [(t.topic_name, ps) for t in self.topic_states for ps in t.partition_states]
        return out

    def for_version(self, version: int) -> StopReplicaRequest:
        """Re-lay out for ``version``; v0-2 need one ``delete_partitions`` for all partitions."""
        states = self.partition_states()
        if version >= 3:
            return replace(self, delete_partitions=False, ungrouped_partitions=(), topics=(),
                           topic_states=group_topic_states(StopReplicaTopicState, states))
        deletes = {ps.delete_partition for _, ps in states}
        if len(deletes) > 1:
            raise UnsupportedVersionError(
                f"StopReplica v{version} cannot mix deleting and non-deleting partitions")
        delete = deletes.pop() if deletes else self.delete_partitions
        if version == 0:
            return replace(self, delete_partitions=delete, topics=(), topic_states=(),
                           ungrouped_partitions=tuple(StopReplicaPartitionV0(
                               topic_name=t, partition_index=ps.partition_index)
                               for t, ps in states))
        by_topic: dict[str, list[int]] = {}
        for topic, ps in states:
            by_topic.setdefault(topic, []).append(ps.partition_index)
        return replace(self, delete_partitions=delete, ungrouped_partitions=(), topic_states=(),
                       topics=tuple(StopReplicaTopicV1(name=t, partition_indexes=tuple(ids))
                                    for t, ids in by_topic.items()))


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaPartitionError:
    topic_name: str = ""
    partition_index: int = 0
    error_code: int = 0

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("topic_name", "string", "0+"),
        _f("partition_index", "int32", "0+"),
        _f("error_code", "int16", "0+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaResponse:
    error_code: int = 0
    partition_errors: tuple[StopReplicaPartitionError, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("error_code", "int16", "0+"),
        _f("partition_errors", StopReplicaPartitionError, "0+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataPartitionState:
    topic_name: str = ""
    partition_index: int = 0
    controller_epoch: int = 0
    leader: int = 0
    leader_epoch: int = 0
    isr: Ints = ()
    zk_version: int = 0
    replicas: Ints = ()
    offline_replicas: Ints = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("topic_name", "string", "0-4", ignorable=True),
        _f("partition_index", "int32", "0+"),
        _f("controller_epoch", "int32", "0+"),
        _f("leader", "int32", "0+"),
        _f("leader_epoch", "int32", "0+"),
        _f("isr", "[]int32", "0+"),
        _f("zk_version", "int32", "0+"),
        _f("replicas", "[]int32", "0+"),
        _f("offline_replicas", "[]int32", "4+", ignorable=True),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataTopicState:
    topic_name: str = ""
    topic_id: uuid.UUID = ZERO_UUID
    partition_states: tuple[UpdateMetadataPartitionState, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("topic_name", "string", "5+"),
        _f("topic_id", "uuid", "7+", ignorable=True),
        _f("partition_states", UpdateMetadataPartitionState, "5+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataEndpoint:
    port: int = 0
    host: str = ""
    listener: str = ""
    security_protocol: int = 0

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("port", "int32", "1+"),
        _f("host", "string", "1+"),
        _f("listener", "string", "3+", ignorable=True),
        _f("security_protocol", "int16", "1+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataBroker:
    id: int = 0
    v0_host: str = ""
    v0_port: int = 0
    endpoints: tuple[UpdateMetadataEndpoint, ...] = ()
    rack: str | None = None

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("id", "int32", "0+"),
        _f("v0_host", "string", "0", ignorable=True),
        _f("v0_port", "int32", "0", ignorable=True),
        _f("endpoints", UpdateMetadataEndpoint, "1+", ignorable=True),
        _f("rack", "string", "2+", nullable="0+", ignorable=True),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataRequest:
    """UpdateMetadata (api key 6): the controller's view for every broker's metadata cache."""

    controller_id: int = 0
    is_kraft_controller: bool = False
    type: int = 0
    controller_epoch: int = 0
    broker_epoch: int = -1
    ungrouped_partition_states: tuple[UpdateMetadataPartitionState, ...] = ()
    topic_states: tuple[UpdateMetadataTopicState, ...] = ()
    live_brokers: tuple[UpdateMetadataBroker, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("controller_id", "int32", "0+"),
        _f("is_kraft_controller", "bool", "8+"),
        _f("type", "int8", "8+", tag=0, tagged="8+"),
        _f("controller_epoch", "int32", "0+"),
        _f("broker_epoch", "int64", "5+", ignorable=True),
        _f("ungrouped_partition_states", UpdateMetadataPartitionState, "0-4"),
        _f("topic_states", UpdateMetadataTopicState, "5+"),
        _f("live_brokers", UpdateMetadataBroker, "0+"),
    )

    def partition_states(self) -> list[UpdateMetadataPartitionState]:
        """Every partition state with ``topic_name`` filled, whatever the layout."""
        return _ungrouped(self.ungrouped_partition_states, self.topic_states)

    def named_partition_states(self) -> Iterator[tuple[str, UpdateMetadataPartitionState]]:
        """(topic, state) for every partition state without copying the states (see
        ``LeaderAndIsrRequest.named_partition_states``)."""
        return _named(self.ungrouped_partition_states, self.topic_states)

    def for_version(self, version: int,
                    topic_ids: Mapping[str, uuid.UUID] | None = None) -> UpdateMetadataRequest:
        """Re-lay out partitions (grouped from v5) and brokers (v0: one host/port) for ``version``.

        For v0 the broker's host/port come from ``v0_host``/``v0_port`` or else its first
        endpoint; for v1+ a broker without endpoints gets one PLAINTEXT endpoint from them.
        """
        states = self.partition_states()
        brokers = tuple(_broker_for_version(b, version) for b in self.live_brokers)
        if version <= 4:
            return replace(self, ungrouped_partition_states=tuple(states), topic_states=(),
                           live_brokers=brokers)
        return replace(self, ungrouped_partition_states=(), live_brokers=brokers,
                       topic_states=_regrouped(UpdateMetadataTopicState, states,
                                               self.topic_states, topic_ids))


def _broker_for_version(broker: UpdateMetadataBroker, version: int) -> UpdateMetadataBroker:
    if version == 0:
        if broker.endpoints and not broker.v0_host:
            first = broker.endpoints[0]
            return replace(broker, v0_host=first.host, v0_port=first.port)
        return broker
    if not broker.endpoints and broker.v0_host:
        return replace(broker, endpoints=(UpdateMetadataEndpoint(
            port=broker.v0_port, host=broker.v0_host, listener="PLAINTEXT",
            security_protocol=0),))
    return broker


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataResponse:
    error_code: int = 0

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("error_code", "int16", "0+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownRequest:
    """ControlledShutdown (api key 7): a stopping broker asks the controller (S-4.4)."""

    broker_id: int = 0
    broker_epoch: int = -1

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("broker_id", "int32", "0+"),
        _f("broker_epoch", "int64", "2+", ignorable=True),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RemainingPartition:
    topic_name: str = ""
    partition_index: int = 0

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("topic_name", "string", "0+"),
        _f("partition_index", "int32", "0+"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownResponse:
    """``remaining_partitions``: those the broker still leads (empty: shutdown may proceed)."""

    error_code: int = 0
    remaining_partitions: tuple[RemainingPartition, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        _f("error_code", "int16", "0+"),
        _f("remaining_partitions", RemainingPartition, "0+"),
    )


_T = TypeVar("_T")


def group_topic_states(cls: Callable[..., _T], states: Iterable[tuple[str, Any]],
                       topic_ids: Mapping[str, uuid.UUID] | None = None) -> tuple[_T, ...]:
    """One ``cls(topic_name=, partition_states=)`` per topic of the (topic, partition state)
    pairs, topics in first-seen order; given ``topic_ids``, each also gets its ``topic_id``
    (``ZERO_UUID`` if unknown).  The topic layout of LeaderAndIsr v2+, UpdateMetadata v5+ and
    StopReplica v3+."""
    grouped: dict[str, list[Any]] = {}
    for topic, ps in states:
        grouped.setdefault(topic, []).append(ps)
    if topic_ids is None:
        return tuple(cls(topic_name=t, partition_states=tuple(ps)) for t, ps in grouped.items())
    return tuple(cls(topic_name=t, topic_id=topic_ids.get(t, ZERO_UUID),
                     partition_states=tuple(ps)) for t, ps in grouped.items())


def _named(ungrouped: tuple[_T, ...], topic_states: Iterable[Any]) -> Iterator[tuple[str, _T]]:
    """(topic, state) of both layouts, the states as they are (``_ungrouped`` copies them to
    fill ``topic_name``)."""
    for ps in ungrouped:
        yield ps.topic_name, ps  # type: ignore[attr-defined]
    for ts in topic_states:
        for ps in ts.partition_states:
            yield ts.topic_name, ps


def _ungrouped(ungrouped: tuple[_T, ...], topic_states: Iterable[Any]) -> list[_T]:
    """The partition states of both layouts, with ``topic_name`` filled in the grouped ones."""
    return [*ungrouped, *(replace(ps, topic_name=ts.topic_name)
                          for ts in topic_states for ps in ts.partition_states)]


def _regrouped(cls: Callable[..., _T], states: Iterable[Any], old: Iterable[Any],
               topic_ids: Mapping[str, uuid.UUID] | None) -> tuple[_T, ...]:
    """``states`` (``topic_name`` filled) grouped by topic, ``topic_name`` cleared in each; topic
    ids from ``topic_ids``, else from the ``old`` topic states."""
    ids = {ts.topic_name: ts.topic_id for ts in old}
    ids.update(topic_ids or {})
    return group_topic_states(cls, ((ps.topic_name, replace(ps, topic_name="")) for ps in states),
                              ids)


# --------------------------------------------------------------------------------------------
# APIs and versions
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Api:
    name: str
    request: type
    response: type
    min_version: int
    max_version: int
    first_flexible: int


_APIS: dict[int, _Api] = {
    LEADER_AND_ISR: _Api("LeaderAndIsr", LeaderAndIsrRequest, LeaderAndIsrResponse, 0, 7, 4),
    STOP_REPLICA: _Api("StopReplica", StopReplicaRequest, StopReplicaResponse, 0, 4, 2),
    UPDATE_METADATA: _Api("UpdateMetadata", UpdateMetadataRequest, UpdateMetadataResponse,
                          0, 8, 6),
    CONTROLLED_SHUTDOWN: _Api("ControlledShutdown", ControlledShutdownRequest,
                              ControlledShutdownResponse, 0, 3, 3),
}

API_NAMES: Mapping[int, str] = {k: a.name for k, a in _APIS.items()}

CODEC_VERSIONS: Mapping[int, tuple[int, int]] = {
    k: (a.min_version, a.max_version) for k, a in _APIS.items()}
"""Every version this module can encode and decode (Kafka 3.x's validVersions)."""

SUPPORTED_API_VERSIONS: tuple[tuple[int, int, int], ...] = (
    (LEADER_AND_ISR, 0, 5),
    (STOP_REPLICA, 0, 3),
    (UPDATE_METADATA, 0, 7),
    (CONTROLLED_SHUTDOWN, 0, 3),
)
"""(api_key, min, max) for ApiVersions: the ZooKeeper-era (Kafka 2.8) ranges.

The later versions (LeaderAndIsr 6-7, StopReplica 4, UpdateMetadata 8) only add KIP-704 leader
recovery and KIP-866 KRaft-migration fields that odradek does not implement, so they are decoded
but not advertised.
"""


def _api(api_key: int, version: int) -> _Api:
    api = _APIS.get(api_key)
    if api is None:
        raise UnsupportedVersionError(f"api key {api_key} is not an inter-broker API")
    if not api.min_version <= version <= api.max_version:
        raise UnsupportedVersionError(
            f"{api.name} version {version} is not in {api.min_version}-{api.max_version}")
    return api


def is_flexible(api_key: int, version: int) -> bool:
    """Whether ``version`` uses compact encodings and tagged fields."""
    return version >= _api(api_key, version).first_flexible


def request_header_version(api_key: int, version: int) -> int:
    """Request header version: 2 if flexible, else 1; 0 for ControlledShutdown v0 (no client id)."""
    if api_key == CONTROLLED_SHUTDOWN and version == 0:
        return 0
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    """Response header version: 1 (with tagged fields) if flexible, else 0."""
    return 1 if is_flexible(api_key, version) else 0


# --------------------------------------------------------------------------------------------
# Primitive encodings
# --------------------------------------------------------------------------------------------

Buffer = bytes | bytearray | memoryview

_INT = {"int8": struct.Struct(">b"), "int16": struct.Struct(">h"),
        "int32": struct.Struct(">i"), "int64": struct.Struct(">q")}
_I16 = _INT["int16"]
_I32 = _INT["int32"]


def _write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError("unsigned varint cannot be negative")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise DecodeError("truncated unsigned varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise DecodeError("unsigned varint is longer than 5 bytes")


def _take(buf: memoryview, pos: int, n: int) -> tuple[memoryview, int]:
    end = pos + n
    if n < 0 or end > len(buf):
        raise DecodeError(f"need {n} bytes at offset {pos}, have {len(buf) - pos}")
    return buf[pos:end], end


Reader = Callable[[memoryview, int], tuple[Any, int]]
Writer = Callable[[bytearray, Any], None]


def _int_codec(kind: str, what: str | None = None) -> tuple[Reader, Writer]:
    """Big-endian ``kind``; a truncated read names ``what`` (default: the kind)."""
    st = _INT[kind]
    what = what or kind

    def read(buf: memoryview, pos: int) -> tuple[int, int]:
        if pos + st.size > len(buf):
            raise DecodeError(f"truncated {what} at offset {pos}")
        return st.unpack_from(buf, pos)[0], pos + st.size

    def write(out: bytearray, value: int) -> None:
        out += st.pack(value)

    return read, write


def _read_bool(buf: memoryview, pos: int) -> tuple[bool, int]:
    if pos >= len(buf):
        raise DecodeError(f"truncated bool at offset {pos}")
    return buf[pos] != 0, pos + 1


def _write_bool(out: bytearray, value: bool) -> None:
    out.append(1 if value else 0)


def _read_uuid(buf: memoryview, pos: int) -> tuple[uuid.UUID, int]:
    raw, pos = _take(buf, pos, 16)
    return uuid.UUID(bytes=bytes(raw)), pos


def _write_uuid(out: bytearray, value: uuid.UUID) -> None:
    out += value.bytes


def _length_codec(flexible: bool, array: bool) -> tuple[Reader, Writer]:
    """Length prefix of a string (int16) or array (int32), or compact: uvarint(n + 1). -1=null."""
    if flexible:
        def read(buf: memoryview, pos: int) -> tuple[int, int]:
            n, pos = _read_uvarint(buf, pos)
            return n - 1, pos

        def write(out: bytearray, n: int) -> None:
            _write_uvarint(out, n + 1)
        return read, write
    return _int_codec("int32" if array else "int16", "length")


def _string_codec(flexible: bool, nullable: bool, name: str) -> tuple[Reader, Writer]:
    read_len, write_len = _length_codec(flexible, array=False)

    def read(buf: memoryview, pos: int) -> tuple[str | None, int]:
        n, pos = read_len(buf, pos)
        if n < 0:
            if nullable and n == -1:
                return None, pos
            raise DecodeError(f"invalid length {n} for string {name}")
        raw, pos = _take(buf, pos, n)
        try:
            return str(raw, "utf-8"), pos
        except UnicodeDecodeError as e:
            raise DecodeError(f"string {name} is not UTF-8: {e}") from None

    def write(out: bytearray, value: str | None) -> None:
        if value is None:
            if not nullable:
                raise ValueError(f"non-nullable string field {name} is None")
            write_len(out, -1)
            return
        raw = value.encode("utf-8")
        if not flexible and len(raw) > 0x7FFF:
            raise ValueError(f"string field {name} is longer than 32767 bytes")
        write_len(out, len(raw))
        out += raw

    return read, write


def _array_codec(flexible: bool, nullable: bool, name: str,
                 element: tuple[Reader, Writer]) -> tuple[Reader, Writer]:
    read_len, write_len = _length_codec(flexible, array=True)
    read_el, write_el = element

    def read(buf: memoryview, pos: int) -> tuple[tuple[Any, ...] | None, int]:
        n, pos = read_len(buf, pos)
        if n < 0:
            if nullable and n == -1:
                return None, pos
            raise DecodeError(f"invalid length {n} for array {name}")
        if n > len(buf) - pos:
            raise DecodeError(f"array {name} claims {n} elements, only {len(buf) - pos} bytes")
        items = []
        for _ in range(n):
            item, pos = read_el(buf, pos)
            items.append(item)
        return tuple(items), pos

    def write(out: bytearray, value: Iterable[Any] | None) -> None:
        if value is None:
            if not nullable:
                raise ValueError(f"non-nullable array field {name} is None")
            write_len(out, -1)
            return
        items = tuple(value)
        write_len(out, len(items))
        for item in items:
            write_el(out, item)

    return read, write


# --------------------------------------------------------------------------------------------
# Struct interpreter: one compiled plan per (dataclass, version)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _FieldPlan:
    attr: str
    read: Reader
    write: Writer
    default: Any


@dataclass(frozen=True, slots=True)
class _StructPlan:
    cls: type
    version: int
    flexible: bool
    regular: tuple[_FieldPlan, ...]
    tagged: Mapping[int, _FieldPlan]
    absent: tuple[tuple[str, Any, bool], ...]
    """(attr, default, ignorable) of the fields that do not exist at this version."""


def _field_defaults(cls: type) -> dict[str, Any]:
    """Every schema dataclass gives each field a plain default (the schema's default)."""
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.default is MISSING:
            raise TypeError(f"{cls.__name__}.{f.name} needs a default")
        out[f.name] = f.default
    return out


def _value_codec(field: Field, version: int, flexible: bool) -> tuple[Reader, Writer]:
    nullable = _in(_parse_versions(field.nullable_versions), version)
    kind = field.type
    if kind in _INT:
        return _int_codec(kind)
    if kind == "bool":
        return _read_bool, _write_bool
    if kind == "uuid":
        return _read_uuid, _write_uuid
    if kind == "string":
        return _string_codec(flexible, nullable, field.name)
    if kind in ("[]int32", "[]int64"):
        return _array_codec(flexible, nullable, field.name, _int_codec(kind[2:]))
    if kind == "[]struct" and field.struct is not None:
        element_cls = field.struct

        def read_el(buf: memoryview, pos: int) -> tuple[Any, int]:
            return _read_struct(_plan(element_cls, version, flexible), buf, pos)

        def write_el(out: bytearray, value: Any) -> None:
            _write_struct(_plan(element_cls, version, flexible), out, value)

        return _array_codec(flexible, nullable, field.name, (read_el, write_el))
    raise TypeError(f"unsupported field type {kind!r} for {field.name}")


@cache
def _plan(cls: type, version: int, flexible: bool) -> _StructPlan:
    defaults = _field_defaults(cls)
    schema: tuple[Field, ...] = cls.SCHEMA  # type: ignore[attr-defined]
    regular: list[_FieldPlan] = []
    tagged: dict[int, _FieldPlan] = {}
    absent: list[tuple[str, Any, bool]] = []
    for field in schema:
        is_tagged = (flexible and field.tag is not None
                     and _in(_parse_versions(field.tagged_versions), version))
        present = _in(field.version_range, version)
        if not present:
            absent.append((field.name, defaults[field.name], field.ignorable))
            continue
        read, write = _value_codec(field, version, flexible)
        plan = _FieldPlan(field.name, read, write, defaults[field.name])
        if is_tagged:
            assert field.tag is not None
            tagged[field.tag] = plan
        else:
            regular.append(plan)
    return _StructPlan(cls, version, flexible, tuple(regular),
                       dict(sorted(tagged.items())), tuple(absent))


def _read_struct(plan: _StructPlan, buf: memoryview, pos: int) -> tuple[Any, int]:
    values: dict[str, Any] = {}
    for fp in plan.regular:
        values[fp.attr], pos = fp.read(buf, pos)
    if plan.flexible:
        count, pos = _read_uvarint(buf, pos)
        for _ in range(count):
            tag, pos = _read_uvarint(buf, pos)
            size, pos = _read_uvarint(buf, pos)
            raw, pos = _take(buf, pos, size)
            fp = plan.tagged.get(tag)
            if fp is None:
                continue  # unknown tagged field: skipped, as the protocol requires
            value, used = fp.read(raw, 0)
            if used != size:
                raise DecodeError(f"tagged field {fp.attr} used {used} of {size} bytes")
            values[fp.attr] = value
    return plan.cls(**values), pos


def _write_struct(plan: _StructPlan, out: bytearray, msg: Any) -> None:
    if type(msg) is not plan.cls:
        raise TypeError(f"expected {plan.cls.__name__}, got {type(msg).__name__}")
    for attr, default, ignorable in plan.absent:
        if not ignorable and getattr(msg, attr) != default:
            raise UnsupportedVersionError(
                f"Attempted to write a non-default {attr} at version {plan.version} "
                f"of {plan.cls.__name__}")
    for fp in plan.regular:
        fp.write(out, getattr(msg, fp.attr))
    if plan.flexible:
        present = [(tag, fp, getattr(msg, fp.attr)) for tag, fp in plan.tagged.items()
                   if getattr(msg, fp.attr) != fp.default]
        _write_uvarint(out, len(present))
        for tag, fp, value in present:
            body = bytearray()
            fp.write(body, value)
            _write_uvarint(out, tag)
            _write_uvarint(out, len(body))
            out += body


def write_message(msg: Any, version: int, flexible: bool) -> bytes:
    """Encode any schema dataclass at ``version`` (``flexible``: compact + tagged fields)."""
    out = bytearray()
    try:
        _write_struct(_plan(type(msg), version, flexible), out, msg)
    except struct.error as e:
        raise ValueError(f"{type(msg).__name__} v{version}: value out of range: {e}") from None
    return bytes(out)


def read_message(cls: type, version: int, flexible: bool, buf: Buffer,
                 offset: int = 0) -> tuple[Any, int]:
    """Decode a ``cls`` at ``version`` from ``buf[offset:]``; returns (message, end offset)."""
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return _read_struct(_plan(cls, version, flexible), view, offset)


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------

_Side = Literal["request", "response"]


def _encode_body(api_key: int, version: int, msg: Any, side: _Side) -> bytes:
    api = _api(api_key, version)
    cls: type = getattr(api, side)
    if not isinstance(msg, cls):
        raise TypeError(f"{api.name} {side} must be {cls.__name__}")
    return write_message(msg, version, version >= api.first_flexible)


def _decode_body(api_key: int, version: int, side: _Side, buf: Buffer, offset: int) -> Any:
    api = _api(api_key, version)
    return read_message(getattr(api, side), version, version >= api.first_flexible, buf,
                        offset)[0]


def encode_request(api_key: int, version: int, msg: Any) -> bytes:
    """The request body (no header) of ``msg`` at ``version``."""
    return _encode_body(api_key, version, msg, "request")


def decode_request(api_key: int, version: int, buf: Buffer, offset: int = 0) -> Any:
    """Parse a request body starting at ``offset`` (just after the request header)."""
    return _decode_body(api_key, version, "request", buf, offset)


def encode_response(api_key: int, version: int, msg: Any) -> bytes:
    """The response body (no header) of ``msg`` at ``version``."""
    return _encode_body(api_key, version, msg, "response")


def decode_response(api_key: int, version: int, buf: Buffer, offset: int = 0) -> Any:
    """Parse a response body starting at ``offset`` (just after the response header)."""
    return _decode_body(api_key, version, "response", buf, offset)


# --------------------------------------------------------------------------------------------
# Frames: size prefix + header + body
# --------------------------------------------------------------------------------------------

_REQUEST_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id


_FIXED_SIZES = {"int8": 1, "bool": 1, "int16": 2, "int32": 4, "int64": 8, "uuid": 16}
_I64 = _INT["int64"]


@cache
def broker_epoch_offset(api_key: int, version: int) -> int | None:
    """Where a request's ``broker_epoch`` (KIP-380, int64) starts in its body at
    ``version``, or None when the request has none at that version. Only fixed-size fields
    precede it (controller id and epoch, ...), so one body encoded for several brokers can
    carry each one's epoch (:func:`encode_request_frame`)."""
    api = _api(api_key, version)
    flexible = version >= api.first_flexible
    offset = 0
    for f in api.request.SCHEMA:
        tagged = (flexible and f.tag is not None
                  and _in(_parse_versions(f.tagged_versions), version))
        if tagged or not _in(f.version_range, version):
            continue
        if f.name == "broker_epoch":
            return offset
        size = _FIXED_SIZES.get(f.type)
        if size is None:
            return None
        offset += size
    return None


def encode_request_frame(api_key: int, version: int, msg: Any, correlation_id: int,
                         client_id: str, body: bytes | None = None) -> bytes:
    """A whole request frame: size prefix, request header (v0/v1/v2 by API and version, no
    tagged fields), then the body (`body`: `msg` already encoded by :func:`encode_request`,
    when one message goes to several brokers; those differ in their ``broker_epoch`` only,
    which the frame takes from `msg`)."""
    header = bytearray(_REQUEST_HEADER.pack(api_key, version, correlation_id))
    hv = request_header_version(api_key, version)
    if hv >= 1:
        cid = client_id.encode()
        header += _I16.pack(len(cid)) + cid
    if hv >= 2:
        header += b"\x00"  # no tagged fields
    if body is None:
        body = encode_request(api_key, version, msg)
    elif (at := broker_epoch_offset(api_key, version)) is not None:
        shared = memoryview(body)  # (one copy of a large body, as below)
        return b"".join((_I32.pack(len(header) + len(body)), header, shared[:at],
                         _I64.pack(msg.broker_epoch), shared[at + 8:]))
    return _I32.pack(len(header) + len(body)) + bytes(header) + body


def decode_request_frame(payload: Buffer) -> tuple[int, int, int, Any]:
    """(api key, version, correlation id, message) of a request frame's payload (the bytes
    after the size prefix); the client id and tagged header fields are skipped.

    Raises :class:`DecodeError` when the body does not parse at that API and version."""
    key, version, correlation_id = _REQUEST_HEADER.unpack_from(payload)
    off = _REQUEST_HEADER.size
    hv = request_header_version(key, version)
    if hv >= 1:
        (n,) = _I16.unpack_from(payload, off)
        off += 2 + max(n, 0)
    if hv >= 2:
        tags = payload[off]
        off += 1
        for _ in range(tags):  # skip tagged header fields
            off += 1
            size = payload[off]
            off += 1 + size
    try:
        return key, version, correlation_id, decode_request(key, version, payload, off)
    except (DecodeError, UnsupportedVersionError, IndexError, struct.error) as exc:
        raise DecodeError(
            f"malformed inter-broker request (key {key} v{version}): {exc}") from None


def encode_response_frame(api_key: int, version: int, correlation_id: int, msg: Any) -> bytes:
    """A whole response frame: size prefix, response header (v1 adds empty tagged fields),
    then the body."""
    header = _I32.pack(correlation_id)
    if response_header_version(api_key, version) >= 1:
        header += b"\x00"
    body = encode_response(api_key, version, msg)
    return _I32.pack(len(header) + len(body)) + header + body


def decode_response_frame(api_key: int, version: int, payload: Buffer) -> Any:
    """The message of a response frame's payload (the bytes after the size prefix): the
    correlation id and the empty tagged fields of header v1 are skipped."""
    offset = 4  # correlation id
    if response_header_version(api_key, version) >= 1:
        offset += 1  # empty tagged fields
    return decode_response(api_key, version, payload, offset)
