"""Kafka's ZooKeeper znode layout and its JSON payloads (docs/design.md S-5.2).

Paths and payloads are those of Kafka's ZooKeeper-era brokers (Kafka's ``kafka.zk.ZkData``), so
that the tree odradek writes reads like a Kafka 2.x cluster's::

    /brokers/ids/<id>               ephemeral; broker registration JSON v4 (v5: + features)
    /brokers/topics/<topic>         {"version":1,"partitions":{"0":[1,2,3]}}
    /brokers/topics/<topic>/partitions/<p>/state
                                    {"controller_epoch":1,"leader":1,"version":1,
                                     "leader_epoch":0,"isr":[1,2]}
    /controller                     ephemeral; {"version":1,"brokerid":N,"timestamp":"..."}
    /controller_epoch               plain integer text
    /admin/delete_topics/<topic>    (no data)
    /admin/reassign_partitions      {"version":1,"partitions":[{"topic":..,"partition":..,
                                     "replicas":[..]}]}
    /admin/preferred_replica_election
                                    {"version":1,"partitions":[{"topic":..,"partition":..}]}
    /isr_change_notification/isr_change_<seq>
                                    {"version":1,"partitions":[{"topic":..,"partition":..}]}
    /config/topics/<topic>          {"version":1,"config":{...}}
    /config/changes/config_change_<seq>
                                    {"version":2,"entity_path":"topics/<topic>"}
    /cluster/id                     {"version":"1","id":"..."}

Everything here is a pure function or a frozen dataclass except :func:`create_top_level_paths`.
Partitions are named by ``(topic, partition)`` tuples, which compare and hash equal to the
controller's ``TopicPartition`` named tuple. JSON is written compactly as Jackson does; decoders
ignore unknown keys (newer Kafka versions add some) and accept every version Kafka 2.x wrote.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.common import TopicPartition
from odradek.common.clock import now_ms
from odradek.coordination.store import NodeExistsError

if TYPE_CHECKING:
    from odradek.coordination.store import CoordinationStore

__all__ = [
    "ADMIN",
    "BROKERS",
    "BROKER_IDS",
    "BROKER_SEQID",
    "CLUSTER",
    "CLUSTER_ID",
    "CONFIG",
    "CONFIG_CHANGES",
    "CONFIG_CHANGE_PREFIX",
    "CONFIG_TYPES",
    "CONSUMERS",
    "CONTROLLER",
    "CONTROLLER_EPOCH",
    "DELETE_TOPICS",
    "INITIAL_CONTROLLER_EPOCH",
    "INITIAL_CONTROLLER_EPOCH_ZK_VERSION",
    "ISR_CHANGE_NOTIFICATION",
    "ISR_CHANGE_NOTIFICATION_VERSION",
    "ISR_CHANGE_PREFIX",
    "LATEST_PRODUCER_ID_BLOCK",
    "LOG_DIR_EVENT_NOTIFICATION",
    "LOG_DIR_EVENT_PREFIX",
    "PERSISTENT_PATHS",
    "PREFERRED_REPLICA_ELECTION",
    "REASSIGN_PARTITIONS",
    "TOPICS",
    "BrokerRegistration",
    "ControllerRegistration",
    "Endpoint",
    "LeaderIsrAndControllerEpoch",
    "TopicAssignment",
    "broker_path",
    "config_change_path",
    "config_entity_path",
    "create_top_level_paths",
    "decode_broker_registration",
    "decode_cluster_id",
    "decode_config_change",
    "decode_controller",
    "decode_controller_epoch",
    "decode_entity_config",
    "decode_isr_change_notification",
    "decode_log_dir_event",
    "decode_partition_state",
    "decode_preferred_replica_election",
    "decode_reassignment",
    "decode_topic_assignment",
    "delete_topic_path",
    "encode_broker_registration",
    "encode_cluster_id",
    "encode_config_change",
    "encode_controller",
    "encode_controller_epoch",
    "encode_entity_config",
    "encode_isr_change_notification",
    "encode_log_dir_event",
    "encode_partition_state",
    "encode_preferred_replica_election",
    "encode_reassignment",
    "encode_topic_assignment",
    "isr_change_path",
    "log_dir_event_path",
    "parse_election_json",
    "partition_state_path",
    "sequence_number",
    "topic_config_path",
    "topic_partition_path",
    "topic_partitions_path",
    "topic_path",
]

# ---------------------------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------------------------

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
CLUSTER = "/cluster"
CLUSTER_ID = "/cluster/id"
CONSUMERS = "/consumers"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"

#: Entity types under ``/config`` (Kafka's ConfigType.all).
CONFIG_TYPES = ("topics", "clients", "users", "brokers", "ips")

#: Persistent znodes every broker makes sure exist at start-up (Kafka's ZkData.PersistentZkPaths).
PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS,
    BROKER_IDS,
    TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION,
    LATEST_PRODUCER_ID_BLOCK,
    LOG_DIR_EVENT_NOTIFICATION,
    *(f"{CONFIG}/{entity_type}" for entity_type in CONFIG_TYPES),
)

#: ``/controller_epoch`` is created with this value by the first controller, which then bumps it.
INITIAL_CONTROLLER_EPOCH = 0
INITIAL_CONTROLLER_EPOCH_ZK_VERSION = 0
#: Version of the ISR change notification payload (Kafka's IsrChangeNotificationHandler.Version).
ISR_CHANGE_NOTIFICATION_VERSION = 1


def _name(value: str, what: str) -> str:
    if not value or "/" in value or value in (".", ".."):
        raise ValueError(f"invalid {what} for a znode name: {value!r}")
    return value


def broker_path(broker_id: int) -> str:
    """``/brokers/ids/<id>``: a live broker's ephemeral registration."""
    return f"{BROKER_IDS}/{int(broker_id)}"


def topic_path(topic: str) -> str:
    """``/brokers/topics/<topic>``: the topic's replica assignment."""
    return f"{TOPICS}/{_name(topic, 'topic')}"


def topic_partitions_path(topic: str) -> str:
    """``/brokers/topics/<topic>/partitions``."""
    return f"{topic_path(topic)}/partitions"


def topic_partition_path(topic: str, partition: int) -> str:
    """``/brokers/topics/<topic>/partitions/<p>``."""
    return f"{topic_partitions_path(topic)}/{int(partition)}"


def partition_state_path(topic: str, partition: int) -> str:
    """``/brokers/topics/<topic>/partitions/<p>/state``: leader, ISR, epochs (S-5.2)."""
    return f"{topic_partition_path(topic, partition)}/state"


def delete_topic_path(topic: str) -> str:
    """``/admin/delete_topics/<topic>``: a topic queued for deletion (S-5.7)."""
    return f"{DELETE_TOPICS}/{_name(topic, 'topic')}"


def config_entity_path(entity_type: str, entity_name: str) -> str:
    """``/config/<entity_type>/<entity_name>``, e.g. ``/config/topics/t``."""
    return f"{CONFIG}/{_name(entity_type, 'entity type')}/{_name(entity_name, 'entity name')}"


def topic_config_path(topic: str) -> str:
    """``/config/topics/<topic>``: the topic's config overrides."""
    return config_entity_path("topics", topic)


def isr_change_path(sequence: str = "") -> str:
    """``/isr_change_notification/isr_change_<seq>``; without ``sequence``, the prefix to create
    as a sequential znode."""
    return f"{ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}{sequence}"


def config_change_path(sequence: str = "") -> str:
    """``/config/changes/config_change_<seq>``; without ``sequence``, the sequential prefix."""
    return f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}{sequence}"


def log_dir_event_path(sequence: str = "") -> str:
    """``/log_dir_event_notification/log_dir_event_<seq>``; without ``sequence``, the prefix."""
    return f"{LOG_DIR_EVENT_NOTIFICATION}/{LOG_DIR_EVENT_PREFIX}{sequence}"


def sequence_number(name_or_path: str, prefix: str) -> str:
    """The 10-digit counter of a sequential znode: ``isr_change_0000000003`` -> ``0000000003``."""
    idx = name_or_path.rfind(prefix)
    if idx < 0:
        raise ValueError(f"{name_or_path!r} is not a {prefix}<seq> znode")
    return name_or_path[idx + len(prefix) :]


async def create_top_level_paths(store: CoordinationStore) -> None:
    """Make sure the persistent base znodes exist (Kafka's ``createTopLevelPaths``)."""
    for path in PERSISTENT_PATHS:
        if await store.exists(path) is None:
            with contextlib.suppress(NodeExistsError):
                await store.create(path, b"", makepath=True)


# ---------------------------------------------------------------------------------------------
# JSON helpers
# ---------------------------------------------------------------------------------------------


def _dumps(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _loads(data: bytes | None, what: str) -> dict[str, Any] | None:
    """Parse a JSON object; ``None`` for a znode without data."""
    if data is None or not data.strip():
        return None
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"invalid JSON in {what}: {data!r}") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"{what} is not a JSON object: {data!r}")
    return obj


def _require(obj: dict[str, Any] | None, what: str, data: bytes | None) -> dict[str, Any]:
    if obj is None:
        raise ValueError(f"empty {what}: {data!r}")
    return obj


def _partitions_list(items: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": int(p)} for t, p in sorted(set(items))]


def _decode_partitions_list(obj: dict[str, Any], what: str) -> set[tuple[str, int]]:
    try:
        return {(str(e["topic"]), int(e["partition"])) for e in obj["partitions"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed {what}: {obj!r}") from exc


def _now_ms_str() -> str:
    return str(now_ms())


# ---------------------------------------------------------------------------------------------
# /brokers/ids/<id>
# ---------------------------------------------------------------------------------------------

_ENDPOINT_RE = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One advertised listener of a broker (Kafka's ``EndPoint``): ``PLAINTEXT://host:9092``."""

    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        """``LISTENER://host:port`` (IPv6 hosts in brackets), as in ``endpoints``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    @classmethod
    def parse(cls, value: str, protocol_map: Mapping[str, str] | None = None) -> Endpoint:
        """Parse ``LISTENER://host:port``; the security protocol comes from ``protocol_map``
        (``listener_security_protocol_map``) or, without an entry, is the listener name."""
        match = _ENDPOINT_RE.match(value)
        if match is None:
            raise ValueError(f"unable to parse endpoint {value!r}")
        listener = match.group(1).upper()
        protocol = (protocol_map or {}).get(listener, listener)
        return cls(listener, match.group(2), int(match.group(3)), protocol)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """The content of ``/brokers/ids/<id>`` (Kafka's ``BrokerInfo``, JSON v1 to v5).

    ``timestamp`` is the registration time in ms as a decimal string (Kafka writes a string);
    ``None`` means "now" when encoding. ``features`` only exists in v5.
    """

    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    version: int = 4
    timestamp: str | None = None
    features: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def plaintext_endpoint(self) -> Endpoint | None:
        """The first PLAINTEXT endpoint (the top-level ``host``/``port`` of the JSON)."""
        for endpoint in self.endpoints:
            if endpoint.security_protocol == "PLAINTEXT":
                return endpoint
        return None

    def endpoint(self, listener_name: str) -> Endpoint | None:
        """The endpoint of a listener, if the broker advertises it."""
        for endpoint in self.endpoints:
            if endpoint.listener_name == listener_name:
                return endpoint
        return None


def encode_broker_registration(registration: BrokerRegistration) -> bytes:
    """JSON for ``/brokers/ids/<id>``, Kafka's v4 layout (v5 adds ``features``).

    The top-level ``host``/``port`` are the first PLAINTEXT endpoint's, for old clients
    (``null``/-1 without one).
    """
    plaintext = registration.plaintext_endpoint
    obj: dict[str, Any] = {}
    if registration.version >= 4:
        obj["listener_security_protocol_map"] = {
            e.listener_name: e.security_protocol for e in registration.endpoints
        }
    obj["endpoints"] = [e.connection_string for e in registration.endpoints]
    if registration.rack is not None and registration.version >= 3:
        obj["rack"] = registration.rack
    obj["jmx_port"] = registration.jmx_port
    obj["host"] = plaintext.host if plaintext else None
    obj["timestamp"] = registration.timestamp or _now_ms_str()
    obj["port"] = plaintext.port if plaintext else -1
    if registration.version >= 5:
        obj["features"] = {k: dict(v) for k, v in registration.features.items()}
    obj["version"] = registration.version
    return _dumps(obj)


def decode_broker_registration(broker_id: int, data: bytes) -> BrokerRegistration:
    """Parse ``/brokers/ids/<id>`` (any of Kafka's versions 1 to 5)."""
    what = f"broker registration of broker {broker_id}"
    obj = _require(_loads(data, what), what, data)
    try:
        version = int(obj["version"])
        jmx_port = int(obj.get("jmx_port", -1))
        if version < 1:
            raise ValueError(f"unsupported version of broker registration: {data!r}")
        if version == 1:
            endpoints: tuple[Endpoint, ...] = (
                Endpoint("PLAINTEXT", str(obj["host"]), int(obj["port"]), "PLAINTEXT"),
            )
        else:
            protocol_map = obj.get("listener_security_protocol_map") or {}
            endpoints = tuple(Endpoint.parse(e, protocol_map) for e in obj["endpoints"])
        timestamp = obj.get("timestamp")
        return BrokerRegistration(
            broker_id=int(broker_id),
            endpoints=endpoints,
            rack=obj.get("rack"),
            jmx_port=jmx_port,
            version=version,
            timestamp=None if timestamp is None else str(timestamp),
            features=obj.get("features") or {},
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed {what}: {data!r}") from exc


# ---------------------------------------------------------------------------------------------
# /brokers/topics/<topic>
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """The content of ``/brokers/topics/<topic>``: partition -> replica list (AR).

    ``adding_replicas``/``removing_replicas`` are the ongoing reassignment's (Kafka 2.4+,
    JSON v2); ``topic_id`` is Kafka 2.8's (JSON v3).
    """

    partitions: Mapping[int, tuple[int, ...]]
    adding_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    topic_id: str | None = None

    @property
    def version(self) -> int:
        """The JSON version :func:`encode_topic_assignment` writes."""
        if self.topic_id is not None:
            return 3
        if any(self.adding_replicas.values()) or any(self.removing_replicas.values()):
            return 2
        return 1


def _int_key_map(m: Mapping[int, Sequence[int]]) -> dict[str, list[int]]:
    return {str(p): [int(r) for r in replicas] for p, replicas in sorted(m.items()) if replicas}


def encode_topic_assignment(assignment: TopicAssignment) -> bytes:
    """JSON for ``/brokers/topics/<topic>``: Kafka's v1 ``{"version":1,"partitions":{...}}``,
    or v2 (v3 with a topic id) when a reassignment records adding/removing replicas."""
    version = assignment.version
    partitions = sorted(assignment.partitions.items())
    obj: dict[str, Any] = {
        "version": version,
        "partitions": {str(p): [int(r) for r in replicas] for p, replicas in partitions},
    }
    if version >= 2:
        obj["adding_replicas"] = _int_key_map(assignment.adding_replicas)
        obj["removing_replicas"] = _int_key_map(assignment.removing_replicas)
    if assignment.topic_id is not None:
        obj["topic_id"] = assignment.topic_id
    return _dumps(obj)


def decode_topic_assignment(data: bytes | None) -> TopicAssignment:
    """Parse ``/brokers/topics/<topic>`` (v1, v2 or v3); no data gives an empty assignment."""
    obj = _loads(data, "topic assignment")
    if obj is None:
        return TopicAssignment({})

    def int_map(key: str) -> dict[int, tuple[int, ...]]:
        raw = obj.get(key) or {}
        return {int(p): tuple(int(r) for r in replicas) for p, replicas in raw.items()}

    try:
        topic_id = obj.get("topic_id")
        return TopicAssignment(
            partitions=int_map("partitions"),
            adding_replicas={p: r for p, r in int_map("adding_replicas").items() if r},
            removing_replicas={p: r for p, r in int_map("removing_replicas").items() if r},
            topic_id=None if topic_id is None else str(topic_id),
        )
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed topic assignment: {data!r}") from exc


# ---------------------------------------------------------------------------------------------
# /brokers/topics/<topic>/partitions/<p>/state
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderIsrAndControllerEpoch:
    """The content of a partition state znode (Kafka's ``LeaderIsrAndControllerEpoch``).

    The znode's version (``Stat.version``) is the "zkVersion" conditional ISR/leader writes use.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int


def encode_partition_state(state: LeaderIsrAndControllerEpoch) -> bytes:
    """JSON for ``/brokers/topics/<t>/partitions/<p>/state`` (version 1), byte for byte what
    ``_dumps`` of the dict in Kafka's key order gives, formatted directly: the controller writes
    thousands per broker failure and json.dumps was a fifth of its election loop."""
    isr = ",".join([str(int(r)) for r in state.isr])
    return (f'{{"controller_epoch":{int(state.controller_epoch)},"leader":{int(state.leader)},'
            f'"version":1,"leader_epoch":{int(state.leader_epoch)},"isr":[{isr}]}}').encode()


def decode_partition_state(data: bytes | None) -> LeaderIsrAndControllerEpoch | None:
    """Parse a partition state znode; ``None`` if it has no data."""
    obj = _loads(data, "partition state")
    if obj is None:
        return None
    try:
        return LeaderIsrAndControllerEpoch(
            leader=int(obj["leader"]),
            leader_epoch=int(obj["leader_epoch"]),
            isr=tuple(int(r) for r in obj["isr"]),
            controller_epoch=int(obj["controller_epoch"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed partition state: {data!r}") from exc


# ---------------------------------------------------------------------------------------------
# /controller and /controller_epoch
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """The content of the ephemeral ``/controller`` znode (S-5.1)."""

    broker_id: int
    timestamp: str | None = None


def encode_controller(broker_id: int, timestamp_ms: int | None = None) -> bytes:
    """JSON for ``/controller``: ``{"version":1,"brokerid":N,"timestamp":"<ms>"}``."""
    timestamp = _now_ms_str() if timestamp_ms is None else str(int(timestamp_ms))
    return _dumps({"version": 1, "brokerid": int(broker_id), "timestamp": timestamp})


def decode_controller(data: bytes | None) -> ControllerRegistration | None:
    """Parse ``/controller``; ``None`` if it has no data. Accepts the pre-0.8 plain id too."""
    if data is not None and data.strip().lstrip(b"-").isdigit():
        return ControllerRegistration(int(data))
    obj = _loads(data, "controller registration")
    if obj is None:
        return None
    try:
        timestamp = obj.get("timestamp")
        return ControllerRegistration(
            int(obj["brokerid"]), None if timestamp is None else str(timestamp)
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed controller registration: {data!r}") from exc


def encode_controller_epoch(epoch: int) -> bytes:
    """``/controller_epoch`` holds the epoch as plain decimal text."""
    return str(int(epoch)).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    """Parse ``/controller_epoch``."""
    try:
        return int(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"malformed controller epoch: {data!r}") from exc


# ---------------------------------------------------------------------------------------------
# /admin
# ---------------------------------------------------------------------------------------------


def encode_reassignment(reassignment: Mapping[tuple[str, int], Sequence[int]]) -> bytes:
    """JSON for ``/admin/reassign_partitions``: the target replica list (RAR) per partition."""
    partitions = [
        {"topic": t, "partition": int(p), "replicas": [int(r) for r in replicas]}
        for (t, p), replicas in sorted(reassignment.items())
    ]
    return _dumps({"version": 1, "partitions": partitions})


def decode_reassignment(data: bytes | None) -> dict[tuple[str, int], tuple[int, ...]]:
    """Parse ``/admin/reassign_partitions`` into ``{(topic, partition): replicas}``."""
    obj = _loads(data, "partition reassignment")
    if obj is None:
        return {}
    try:
        return {
            (str(e["topic"]), int(e["partition"])): tuple(int(r) for r in e["replicas"])
            for e in obj["partitions"]
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed partition reassignment: {data!r}") from exc


def encode_preferred_replica_election(partitions: Iterable[tuple[str, int]]) -> bytes:
    """JSON for ``/admin/preferred_replica_election`` (S-6.1)."""
    return _dumps({"version": 1, "partitions": _partitions_list(partitions)})


def decode_preferred_replica_election(data: bytes | None) -> set[tuple[str, int]]:
    """Parse ``/admin/preferred_replica_election`` into a set of ``(topic, partition)``."""
    obj = _loads(data, "preferred replica election")
    return set() if obj is None else _decode_partitions_list(obj, "preferred replica election")


def parse_election_json(text: str) -> list[TopicPartition]:
    """The tools' ``--path-to-json-file`` (and the znode's) format:
    ``{"partitions": [{"topic": "t", "partition": 0}, ...]}``.

    Raises ValueError with Kafka's messages for empty data and duplicates.
    """
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"The JSON is not valid: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("partitions"), list):
        raise ValueError('The JSON must be an object with a "partitions" array of '
                         '{"topic": ..., "partition": ...}')
    out: list[TopicPartition] = []
    for item in obj["partitions"]:
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str) \
                or not isinstance(item.get("partition"), int) \
                or isinstance(item.get("partition"), bool):
            raise ValueError(f"Invalid partition entry {json.dumps(item)}: expected "
                             '{"topic": <string>, "partition": <int>}')
        out.append(TopicPartition(item["topic"], item["partition"]))
    if not out:
        raise ValueError("Preferred replica election data is empty")
    dups = sorted(tp for tp, n in Counter(out).items() if n > 1)
    if dups:
        raise ValueError("Preferred replica election data contains duplicate partitions: "
                         + ",".join(str(tp) for tp in dups))
    return out


# ---------------------------------------------------------------------------------------------
# Notifications
# ---------------------------------------------------------------------------------------------


def encode_isr_change_notification(partitions: Iterable[tuple[str, int]]) -> bytes:
    """JSON for ``/isr_change_notification/isr_change_<seq>``: partitions whose ISR changed."""
    return _dumps(
        {"version": ISR_CHANGE_NOTIFICATION_VERSION, "partitions": _partitions_list(partitions)}
    )


def decode_isr_change_notification(data: bytes | None) -> set[tuple[str, int]]:
    """Parse an ISR change notification into a set of ``(topic, partition)``."""
    obj = _loads(data, "ISR change notification")
    return set() if obj is None else _decode_partitions_list(obj, "ISR change notification")


def encode_log_dir_event(broker_id: int) -> bytes:
    """JSON for ``/log_dir_event_notification/log_dir_event_<seq>`` (a log dir failure)."""
    return _dumps({"version": 1, "broker": int(broker_id), "event": 1})


def decode_log_dir_event(data: bytes | None) -> int | None:
    """The broker id of a log dir event notification."""
    obj = _loads(data, "log dir event")
    if obj is None:
        return None
    try:
        return int(obj["broker"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed log dir event: {data!r}") from exc


# ---------------------------------------------------------------------------------------------
# /config
# ---------------------------------------------------------------------------------------------


def encode_entity_config(config: Mapping[str, str]) -> bytes:
    """JSON for ``/config/<type>/<name>``: ``{"version":1,"config":{"retention.ms":"1000"}}``."""
    return _dumps({"version": 1, "config": {str(k): str(v) for k, v in config.items()}})


def decode_entity_config(data: bytes | None) -> dict[str, str]:
    """Parse an entity config znode into string properties (empty if no data)."""
    obj = _loads(data, "entity config")
    if obj is None:
        return {}
    config = obj.get("config")
    if not isinstance(config, dict):
        return {}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}


def encode_config_change(entity_path: str) -> bytes:
    """JSON for ``/config/changes/config_change_<seq>`` (v2): ``entity_path`` is e.g.
    ``topics/<topic>``."""
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes | None) -> str:
    """The changed entity's path (``topics/<topic>``) of a config change notification (v1 or v2)."""
    obj = _require(_loads(data, "config change"), "config change", data)
    try:
        if int(obj["version"]) == 1:
            return f"{obj['entity_type']}/{obj['entity_name']}"
        return str(obj["entity_path"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed config change notification: {data!r}") from exc


# ---------------------------------------------------------------------------------------------
# /cluster/id
# ---------------------------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    """JSON for ``/cluster/id``: ``{"version":"1","id":"..."}`` (Kafka writes the version as a
    string here)."""
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    """Parse ``/cluster/id``."""
    obj = _require(_loads(data, "cluster id"), "cluster id", data)
    try:
        return str(obj["id"])
    except KeyError as exc:
        raise ValueError(f"malformed cluster id: {data!r}") from exc


# ---------------------------------------------------------------------------------------------
# ACLs (Kafka's ZkAclStore / ZkAclChangeStore; written by the AclAuthorizer)
#
#   /kafka-acl/<ResourceType>/<name>                      literal patterns
#   /kafka-acl-extended/prefixed/<ResourceType>/<name>    prefixed patterns
#       {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
#                             "operation":"Read","host":"*"}]}
#   /kafka-acl-changes/acl_changes_<seq>                  "TOPIC:foo" (literal changes)
#   /kafka-acl-extended-changes/acl_changes_<seq>         {"version":1,"resourceType":"TOPIC",
#                                                          "name":"foo","patternType":"PREFIXED"}
# Resource types are PascalCase in paths (SecurityUtils.resourceTypeName) and upper-case in the
# change notifications (Java's enum names); readers accept either spelling.
# ---------------------------------------------------------------------------------------------

ACL = "/kafka-acl"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED = "/kafka-acl-extended"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
ACL_VERSION = 1


def acl_store_path(pattern_type: str) -> str:
    """The root of a pattern type's ACL znodes: ``/kafka-acl`` for LITERAL,
    ``/kafka-acl-extended/<pattern type, lower case>`` for the others (PREFIXED)."""
    kind = pattern_type.upper()
    if kind == "LITERAL":
        return ACL
    if kind == "PREFIXED":
        return f"{ACL_EXTENDED}/prefixed"
    raise ValueError(f"Invalid pattern type: {pattern_type}")


def acl_change_path(pattern_type: str, sequence: str = "") -> str:
    """``/kafka-acl-changes/acl_changes_<seq>`` (LITERAL) or
    ``/kafka-acl-extended-changes/acl_changes_<seq>``; without ``sequence``, the prefix."""
    root = ACL_CHANGES if pattern_type.upper() == "LITERAL" else ACL_EXTENDED_CHANGES
    return f"{root}/{ACL_CHANGE_PREFIX}{sequence}"


def acl_resource_path(pattern_type: str, resource_type: str, name: str) -> str:
    """``/kafka-acl/Topic/foo``, ``/kafka-acl-extended/prefixed/Group/app-``..."""
    return (f"{acl_store_path(pattern_type)}/{_name(resource_type, 'resource type')}/"
            f"{_name(name, 'resource name')}")


def encode_acls(entries: Iterable[Mapping[str, str]]) -> bytes:
    """A resource's ACL znode: entries as ``{"principal","permissionType","operation","host"}``
    with Kafka's PascalCase names (``Allow``, ``Read``, ``IdempotentWrite``)."""
    acls = sorted(({"principal": e["principal"], "permissionType": e["permissionType"],
                    "operation": e["operation"], "host": e["host"]} for e in entries),
                  key=lambda d: (d["principal"], d["permissionType"], d["operation"], d["host"]))
    return _dumps({"version": ACL_VERSION, "acls": acls})


def decode_acls(data: bytes | None) -> list[dict[str, str]]:
    """The entries of a resource's ACL znode (empty for a node without data)."""
    obj = _loads(data, "acls")
    if obj is None:
        return []
    try:
        return [{"principal": str(a["principal"]), "permissionType": str(a["permissionType"]),
                 "operation": str(a["operation"]), "host": str(a["host"])}
                for a in obj["acls"]]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed acls: {data!r}") from exc


def encode_literal_acl_change(resource_type: str, name: str) -> bytes:
    """A literal ACL change notification: ``TOPIC:foo`` (Kafka writes the Java enum name)."""
    return f"{resource_type}:{name}".encode()


def decode_literal_acl_change(data: bytes | None) -> tuple[str, str]:
    """(resource type as written, name) of a literal ACL change notification."""
    text = (data or b"").decode("utf-8", "replace")
    kind, sep, name = text.partition(":")
    if not sep:
        raise ValueError(f"expected a string in format ResourceType:ResourceName but got {text}")
    return kind, name


def encode_extended_acl_change(resource_type: str, name: str, pattern_type: str) -> bytes:
    """An extended (prefixed) ACL change notification."""
    return _dumps({"version": ACL_VERSION, "resourceType": resource_type, "name": name,
                   "patternType": pattern_type})


def decode_extended_acl_change(data: bytes | None) -> tuple[str, str, str]:
    """(resource type, name, pattern type) of an extended ACL change notification."""
    obj = _require(_loads(data, "acl change event"), "acl change event", data)
    try:
        if int(obj["version"]) > ACL_VERSION:
            raise ValueError(f"Acl change event received for unsupported version: "
                             f"{obj['version']}")
        return str(obj["resourceType"]), str(obj["name"]), str(obj["patternType"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed acl change event: {data!r}") from exc
