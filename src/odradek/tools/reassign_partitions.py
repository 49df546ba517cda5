"""`odradek reassign-partitions`: Kafka's kafka-reassign-partitions.sh (S-6.2).

  --generate --topics-to-move-json-file F --broker-list "4,5,6"
        prints the current assignment and a proposal (the controller's own assignment function
        for new topics, odradek/common/replica_assignment.py), executes nothing
  --execute --reassignment-json-file F [--throttle BYTES_PER_SEC] [--additional]
            [--replica-alter-log-dirs-throttle BYTES_PER_SEC] [--timeout MS]
        prints the current assignment (save it for a rollback) and starts the moves
        (AlterPartitionReassignments); with --throttle the moving replicas are throttled
        (KIP-73: leader/follower.replication.throttled.rate on the brokers involved,
        leader/follower.replication.throttled.replicas on the topics). Replicas given a
        "log_dirs" entry other than "any" move to that dir of their broker
        (AlterReplicaLogDirs, KIP-113), retried until --timeout while a replica is not on its
        broker yet; --replica-alter-log-dirs-throttle sets
        replica.alter.log.dirs.io.max.bytes.per.second on those brokers
  --verify --reassignment-json-file F [--wait] [--preserve-throttles]
        per partition "is completed" / "is still in progress", and per replica with a log dir
        (DescribeLogDirs) whether its move is completed or still in progress; once everything
        is done, the throttles are cleared; --wait polls until then, with progress (the bytes
        and offsets left to copy of each log dir move) on stderr
  --cancel --reassignment-json-file F     cancels the moves (back to the original replicas;
                                           a log dir move goes back to its current dir)
  --list                                   the ongoing reassignments

--bootstrap-server goes through the admin API (AlterPartitionReassignments,
ListPartitionReassignments, IncrementalAlterConfigs); --zookeeper HOST:PORT[/chroot] reads the
topic znodes and writes /admin/reassign_partitions itself, as Kafka's ZooKeeper-era tool does.

The JSON files are Kafka's: {"version":1,"topics":[{"topic":"t"}]} and
{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[4,5,6],
"log_dirs":["any","/data/b","any"]}]} ("log_dirs" optional, as long as "replicas").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..common import TopicPartition as TP
from ..common.replica_assignment import AssignmentError, assign_replicas_to_brokers
from .command import Subcommands, ToolError, open_zookeeper, read_properties, run_tool

if TYPE_CHECKING:
    from ..client import AsyncAdmin
    from ..coordination.store import CoordinationStore


LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LOG_DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
BROKER_LEVEL_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIR_RATE)
ANY_LOG_DIR = "any"
REPLICA_NOT_AVAILABLE = 9
TOPIC_LEVEL_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

CANNOT_EXECUTE_BECAUSE_OF_EXISTING = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. The "
    "--additional flag can also be used to change the throttle by resubmitting the current "
    "reassignment.")
YOU_MUST_RUN_VERIFY = ("Warning: You must run --verify periodically, until the reassignment "
                       "completes, to ensure the throttle is removed.")


# ---- pure helpers ------------------------------------------------------------------------------


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise ToolError(f"The input string is not a valid JSON ({what})") from None


def tp_name(tp: TP) -> str:
    """Kafka's topic-partition form: str(tp), for plain (topic, partition) pairs as well."""
    topic, partition = tp
    return f"{topic}-{partition}"


def parse_topics_json(text: str) -> list[str]:
    """Kafka's topics-to-move JSON: {"version":1,"topics":[{"topic":"t"},...]}."""
    obj = _json(text, "topics to move")
    if not isinstance(obj, dict) or not isinstance(obj.get("topics", []), list):
        raise ToolError('Expected {"version":1,"topics":[{"topic":"name"},...]}')
    topics: list[str] = []
    for entry in obj.get("topics", []):
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise ToolError(f"Malformed topic entry {entry!r}: expected {{\"topic\":\"name\"}}")
        topics.append(entry["topic"])
    dups = sorted({t for t in topics if topics.count(t) > 1})
    if dups:
        raise ToolError(f"List of topics to reassign contains duplicate entries: {', '.join(dups)}")
    if not topics:
        raise ToolError("No topics to move in the topics-to-move JSON file")
    return topics


def parse_broker_list(text: str) -> list[int]:
    try:
        brokers = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise ToolError(f"--broker-list must be comma-separated broker ids, not {text!r}") from None
    dups = sorted({b for b in brokers if brokers.count(b) > 1})
    if dups:
        raise ToolError(f"Broker list contains duplicate entries: {','.join(map(str, dups))}")
    if not brokers:
        raise ToolError("--broker-list is empty")
    return brokers


def parse_reassignment_json(text: str) -> dict[TP, list[int]]:
    """Kafka's reassignment JSON, with Kafka's checks (``parseExecuteAssignmentArgs``)."""
    obj = _json(text, "partition reassignment")
    if not isinstance(obj, dict) or not isinstance(obj.get("partitions"), list):
        raise ToolError('Expected {"version":1,"partitions":[{"topic":..,"partition":..,'
                        '"replicas":[..]},...]}')
    parts: list[tuple[TP, list[int]]] = []
    for e in obj["partitions"]:
        try:
            tp = TP(str(e["topic"]), int(e["partition"]))
            replicas = [int(r) for r in e["replicas"]]
        except (KeyError, TypeError, ValueError):
            raise ToolError(f"Malformed partition entry {e!r}: expected topic, partition and "
                            "replicas") from None
        dirs = e.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
            raise ToolError(f"Malformed partition entry {e!r}: log_dirs must be a list of "
                            "strings")
        if len(dirs) != len(replicas):
            raise ToolError(f"Size of replicas list {replicas} is different from size of log "
                            f"dirs list {dirs} for partition {tp_name(tp)}")
        parts.append((tp, replicas))
    if not parts:
        raise ToolError("Partition reassignment list cannot be empty")
    if any(not r for _, r in parts):
        raise ToolError("Partition replica list cannot be empty")
    keys = [tp for tp, _ in parts]
    dup_parts = sorted({tp for tp in keys if keys.count(tp) > 1})
    if dup_parts:
        raise ToolError("Partition reassignment contains duplicate topic partitions: "
                        + ",".join(tp_name(tp) for tp in dup_parts))
    dup_replicas = [(tp, sorted({b for b in r if r.count(b) > 1})) for tp, r in parts
                    if len(set(r)) != len(r)]
    if dup_replicas:
        raise ToolError("Partition replica lists may not contain duplicate entries: " + ". ".join(
            f"{tp_name(tp)} contains multiple entries for {','.join(map(str, d))}"
            for tp, d in dup_replicas))
    return dict(parts)


Replica = tuple[str, int, int]
"""(topic, partition, broker): Kafka's TopicPartitionReplica."""


def replica_name(r: Replica) -> str:
    """Kafka's TopicPartitionReplica.toString: topic-partition-broker."""
    return f"{r[0]}-{r[1]}-{r[2]}"


def replica_order(r: Replica) -> tuple[int, str, int]:
    """Kafka's compareTopicPartitionReplicas: by broker, topic, partition."""
    return r[2], r[0], r[1]


def parse_log_dirs(text: str) -> dict[Replica, str]:
    """The replicas of a reassignment JSON with a log dir other than "any" (Kafka's
    replicaAssignment of parsePartitionReassignmentData); the file is checked by
    ``parse_reassignment_json``."""
    parse_reassignment_json(text)
    out: dict[Replica, str] = {}
    for e in json.loads(text)["partitions"]:
        replicas = [int(r) for r in e["replicas"]]
        for b, d in zip(replicas, e.get("log_dirs", [ANY_LOG_DIR] * len(replicas)),
                        strict=True):
            if d != ANY_LOG_DIR:
                out[(str(e["topic"]), int(e["partition"]), b)] = d
    return out


@dataclass(frozen=True)
class LogDirMoveState:
    """Kafka's LogDirMoveState: "missing_replica" (no answer for it), "missing_log_dir" (in no
    live dir), "cancelled" (in `current`, not moving), "active" (moving to `future`) or
    "completed"; `lag` is the future replica's offset lag."""

    kind: str
    target: str
    current: str | None = None
    future: str | None = None
    lag: int = -1

    @property
    def done(self) -> bool:
        return self.kind != "active"


def log_dir_move_state(target: str, current: str | None, future: str | None,
                       lag: int = -1, found: bool = True) -> LogDirMoveState:
    """Kafka's findLogDirMoveStates for one replica."""
    if not found:
        return LogDirMoveState("missing_replica", target)
    if current is None:
        return LogDirMoveState("missing_log_dir", target)
    if future is None:
        return LogDirMoveState("completed" if current == target else "cancelled", target,
                               current)
    return LogDirMoveState("active", target, current, future, lag)


def move_status_lines(states: Mapping[Replica, LogDirMoveState]) -> list[str]:
    """Kafka's replicaMoveStatesToString."""
    lines = []
    for r in sorted(states, key=replica_order):
        s, (topic, partition, broker) = states[r], r
        if s.kind == "missing_log_dir":
            lines.append(f"Partition {topic}-{partition} is not found in any live log dir on "
                         f"broker {broker}. There is likely an offline log directory on the "
                         "broker.")
        elif s.kind == "missing_replica":
            lines.append(f"Partition {topic}-{partition} cannot be found in any live log "
                         f"directory on broker {broker}.")
        elif s.kind == "active":
            if s.future == s.target:
                lines.append(f"Reassignment of replica {replica_name(r)} is still in progress.")
            else:
                lines.append(f"Partition {topic}-{partition} on broker {broker} is being moved "
                             f"to log dir {s.future} instead of {s.target}.")
        elif s.kind == "cancelled":
            lines.append(f"Partition {topic}-{partition} on broker {broker} is not being moved "
                         f"from log dir {s.current} to {s.target}.")
        else:
            lines.append(f"Reassignment of replica {replica_name(r)} completed successfully.")
    return lines


def format_reassignment_json(assignment: Mapping[TP, Sequence[int]]) -> str:
    """Kafka's ``formatAsReassignmentJson`` (compact, sorted, ``log_dirs`` "any")."""
    partitions = [{"topic": t, "partition": p, "replicas": list(r),
                   "log_dirs": ["any"] * len(r)} for (t, p), r in sorted(assignment.items())]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def propose_assignment(current: Mapping[TP, Sequence[int]], brokers: Iterable[int],
                       racks: Mapping[int, str | None] | None = None) -> dict[TP, list[int]]:
    """--generate: per topic, the partition count and replication factor it has now, placed
    over ``brokers`` by the assignment the controller uses for new topics (S-3.1); rack-aware
    when ``racks`` gives every broker a rack (Kafka's tool, unless --disable-rack-aware)."""
    by_topic: dict[str, list[TP]] = {}
    for tp in current:
        topic, _ = tp  # plain (topic, partition) pairs work as well
        by_topic.setdefault(topic, []).append(tp)
    out: dict[TP, list[int]] = {}
    for topic, tps in sorted(by_topic.items()):
        rf = len(current[min(tps)])
        try:
            placed = assign_replicas_to_brokers(brokers, len(tps), rf, racks=racks)
        except AssignmentError as exc:
            raise ToolError(str(exc)) from None
        out.update({TP(topic, p): r for p, r in placed.items()})
    return out


@dataclass(frozen=True)
class PartitionMove:
    sources: frozenset[int]
    destinations: frozenset[int]


def move_map(ongoing: Mapping[TP, tuple[Sequence[int], Sequence[int]]],
             proposed: Mapping[TP, Sequence[int]], current: Mapping[TP, Sequence[int]]
             ) -> dict[TP, PartitionMove]:
    """Kafka's ``calculateProposedMoveMap``: ``ongoing`` maps partitions being moved to
    (replicas, adding replicas); sources are the replicas a partition has (without those being
    added), destinations the new ones."""
    moves: dict[TP, PartitionMove] = {}
    for tp, (replicas, adding) in ongoing.items():
        moves[tp] = PartitionMove(frozenset(replicas) - frozenset(adding), frozenset(adding))
    for tp, target in proposed.items():
        if tp in moves:
            sources = moves[tp].sources
        elif tp in current:
            sources = frozenset(current[tp])
        else:
            raise ToolError(f"Trying to reassign a topic partition {tp_name(tp)} with 0 replicas")
        moves[tp] = PartitionMove(sources, frozenset(target) - sources)
    return moves


def throttled_replicas(moves: Mapping[TP, PartitionMove]) -> tuple[dict[str, str], dict[str, str]]:
    """(leader.replication.throttled.replicas, follower.replication.throttled.replicas) per
    topic: the existing replicas ("p:b,...") throttle what they send, the moving ones what
    they fetch (KIP-73)."""
    leader: dict[str, set[tuple[int, int]]] = {}
    follower: dict[str, set[tuple[int, int]]] = {}
    for (t, p), m in moves.items():
        leader.setdefault(t, set()).update((p, b) for b in m.sources)
        follower.setdefault(t, set()).update((p, b) for b in m.destinations if b not in m.sources)

    def text(d: dict[str, set[tuple[int, int]]]) -> dict[str, str]:
        return {t: ",".join(f"{p}:{b}" for p, b in sorted(v)) for t, v in d.items()}
    return text(leader), text(follower)


def reassigning_brokers(moves: Mapping[TP, PartitionMove]) -> list[int]:
    return sorted({b for m in moves.values() for b in (*m.sources, *m.destinations)})


@dataclass(frozen=True)
class PartitionState:
    current: tuple[int, ...]
    target: tuple[int, ...]
    done: bool


def status_lines(states: Mapping[TP, PartitionState]) -> list[str]:
    """Kafka's ``partitionReassignmentStatesToString``."""
    lines = ["Status of partition reassignment:"]
    for tp, s in sorted(states.items()):
        if not s.done:
            lines.append(f"Reassignment of partition {tp_name(tp)} is still in progress.")
        elif s.current == s.target:
            lines.append(f"Reassignment of partition {tp_name(tp)} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {tp_name(tp)}, but "
                         f"replica set is {','.join(map(str, s.current))} rather than "
                         f"{','.join(map(str, s.target))}.")
    return lines


def list_lines(ongoing: Mapping[TP, tuple[Sequence[int], Sequence[int], Sequence[int]]]
               ) -> list[str]:
    """Kafka's ``curReassignmentsToString``: replicas, adding, removing per partition."""
    if not ongoing:
        return ["No partition reassignments found."]
    lines = ["Current partition reassignments:"]
    for tp, (replicas, adding, removing) in sorted(ongoing.items()):
        line = f"{tp_name(tp)}: replicas: {','.join(map(str, replicas))}."
        if adding:
            line += f" adding: {','.join(map(str, adding))}."
        if removing:
            line += f" removing: {','.join(map(str, removing))}."
        lines.append(line)
    return lines


# ---- where the tool reads and writes: the admin API, or ZooKeeper directly (Kafka 2.x's way)


def _read(path: str | None, flag: str) -> str:
    if not path:
        raise ToolError(f"Missing required argument \"{flag}\"")
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ToolError(f"Cannot read {path}: {exc.strerror}") from None


Ongoing = dict[TP, tuple[list[int], list[int], list[int]]]
"""partition -> (replicas, adding replicas, removing replicas)"""


class AdminBackend:
    """--bootstrap-server: the admin API (AlterPartitionReassignments & co, KIP-455)."""

    throttles = True

    def __init__(self, admin: AsyncAdmin) -> None:
        self.admin = admin

    async def replicas(self, topics: Iterable[str]) -> dict[TP, list[int]]:
        from ..client.errors import KafkaError

        out: dict[TP, list[int]] = {}
        for topic in sorted(set(topics)):
            try:
                desc = (await self.admin.describe_topics([topic]))[topic]
            except KafkaError:
                raise ToolError(f"Topic {topic} not found.") from None
            out.update({TP(topic, p.partition): list(p.replicas) for p in desc.partitions})
        return out

    async def brokers(self) -> set[int]:
        return {b.node_id for b in (await self.admin.describe_cluster()).brokers}

    async def racks(self) -> dict[int, str | None]:
        return {b.node_id: b.rack for b in (await self.admin.describe_cluster()).brokers}

    async def ongoing(self, partitions: Iterable[TP] | None = None) -> Ongoing:
        found = await self.admin.list_partition_reassignments(partitions)
        return {tp: (r.replicas, r.adding_replicas, r.removing_replicas)
                for tp, r in found.items()}

    async def alter(self, changes: Mapping[TP, list[int] | None]) -> dict[TP, str]:
        errors = await self.admin.alter_partition_reassignments(dict(changes),
                                                                raise_errors=False)
        return {tp: str(e) for tp, e in errors.items() if e is not None}

    async def alter_configs(self, changes: Mapping[tuple[str, str], Mapping[str, str | None]]
                            ) -> None:
        await self.admin.incremental_alter_configs(
            {r: dict(c) for r, c in changes.items()})

    async def alter_log_dirs(self, moves: Mapping[Replica, str]) -> dict[Replica, int]:
        from .log_dirs import alter_replica_log_dirs

        return await alter_replica_log_dirs(self.admin, dict(moves))

    async def log_dir_states(self, targets: Mapping[Replica, str]
                             ) -> dict[Replica, LogDirMoveState]:
        from .log_dirs import describe_replica_log_dirs

        infos = await describe_replica_log_dirs(self.admin, set(targets))
        return {r: log_dir_move_state(d, infos[r].current, infos[r].future, infos[r].future_lag,
                                      found=r in infos) for r, d in targets.items()}


class ZooKeeperBackend:
    """--zookeeper: reads the topic znodes and writes ``/admin/reassign_partitions`` itself, as
    Kafka's kafka-reassign-partitions.sh --zookeeper does; the controller watches the node."""

    throttles = False

    def __init__(self, store: CoordinationStore) -> None:
        self.store = store

    async def replicas(self, topics: Iterable[str]) -> dict[TP, list[int]]:
        from ..coordination import paths

        out: dict[TP, list[int]] = {}
        for topic in sorted(set(topics)):
            found = await self.store.get_or_none(paths.topic_path(topic))
            if found is None:
                raise ToolError(f"Topic {topic} not found.")
            a = paths.decode_topic_assignment(found[0])
            out.update({TP(topic, p): list(r) for p, r in a.partitions.items()})
        return out

    async def brokers(self) -> set[int]:
        from ..coordination import paths

        return {int(b) for b in await self.store.get_children(paths.BROKER_IDS)}

    async def racks(self) -> dict[int, str | None]:
        from ..coordination import paths

        out: dict[int, str | None] = {}
        for broker_id in await self.brokers():
            found = await self.store.get_or_none(paths.broker_path(broker_id))
            if found is not None:
                out[broker_id] = paths.decode_broker_registration(broker_id, found[0]).rack
        return out

    async def ongoing(self, partitions: Iterable[TP] | None = None) -> Ongoing:
        from ..coordination.admin_zk import read_ongoing

        wanted: dict[str, set[int] | None] | None = None
        if partitions is not None:
            wanted = {}
            for t, p in partitions:
                wanted.setdefault(t, set()).add(p)  # type: ignore[union-attr]
        found = await read_ongoing(self.store, wanted)
        return {tp: (list(o.replicas), list(o.adding), list(o.removing))
                for tp, o in found.items()}

    async def alter(self, changes: Mapping[TP, list[int] | None]) -> dict[TP, str]:
        from ..coordination import paths
        from ..coordination.admin_zk import alter_admin_node

        if any(v is None for v in changes.values()):
            raise ToolError("--cancel requires --bootstrap-server")
        if await self.store.get_or_none(paths.REASSIGN_PARTITIONS) is not None:
            raise ToolError("There is an existing assignment running.")
        await alter_admin_node(self.store, {tp: tuple(r or ()) for tp, r in changes.items()})
        return {}

    async def alter_configs(self, changes: Mapping[tuple[str, str], Mapping[str, str | None]]
                            ) -> None:
        raise ToolError("--throttle requires --bootstrap-server")

    async def alter_log_dirs(self, moves: Mapping[Replica, str]) -> dict[Replica, int]:
        raise ToolError("bootstrap-server needs to be provided in order to reassign replica to "
                        "the specified log directory")

    async def log_dir_states(self, targets: Mapping[Replica, str]
                             ) -> dict[Replica, LogDirMoveState]:
        raise ToolError("bootstrap-server needs to be provided when replica reassignments are "
                        "present.")


Backend = AdminBackend | ZooKeeperBackend


# ---- the actions ------------------------------------------------------------------------------


async def generate(b: Backend, args: argparse.Namespace) -> list[str]:
    topics = parse_topics_json(_read(args.topics_to_move_json_file,
                                     "--topics-to-move-json-file"))
    if not args.broker_list:
        raise ToolError('Missing required argument "--broker-list"')
    wanted = parse_broker_list(args.broker_list)
    current = await b.replicas(topics)
    live = await b.brokers()
    brokers = [x for x in wanted if x in live]
    racks = None
    if not args.disable_rack_aware:
        known = await b.racks()
        racks = {x: known.get(x) for x in brokers}
        if any(r is not None for r in racks.values()) and any(r is None for r in racks.values()):
            raise ToolError("Not all brokers have rack information. Add --disable-rack-aware in "
                            "command line to make replica assignment without rack information.")
    proposed = propose_assignment(current, brokers, racks)
    return ["Current partition replica assignment", format_reassignment_json(current), "",
            "Proposed partition reassignment configuration", format_reassignment_json(proposed)]


async def execute(b: Backend, args: argparse.Namespace) -> list[str]:
    text = _read(args.reassignment_json_file, "--reassignment-json-file")
    proposed = parse_reassignment_json(text)
    log_dirs = parse_log_dirs(text)
    if log_dirs and not isinstance(b, AdminBackend):
        raise ToolError("bootstrap-server needs to be provided in order to reassign replica to "
                        "the specified log directory")
    if (args.throttle >= 0 or args.replica_alter_log_dirs_throttle >= 0) and not b.throttles:
        raise ToolError("--throttle requires --bootstrap-server")
    ongoing = await b.ongoing()
    if not args.additional and ongoing:
        raise ToolError(CANNOT_EXECUTE_BECAUSE_OF_EXISTING)
    unknown = sorted({x for r in proposed.values() for x in r} - await b.brokers())
    if unknown:
        raise ToolError(f"Unknown broker id {unknown[0]}")
    current_all = await b.replicas({t for t, _ in proposed})
    missing = sorted(set(proposed) - set(current_all))
    if missing:
        raise ToolError("Unable to find partition: " + ", ".join(tp_name(tp) for tp in missing))
    current = {tp: current_all[tp] for tp in proposed}
    out = ["Current partition replica assignment", "", format_reassignment_json(current), "",
           "Save this to use as the --reassignment-json-file option during rollback"]
    if args.throttle >= 0 or args.replica_alter_log_dirs_throttle >= 0:
        out.append(YOU_MUST_RUN_VERIFY)
    if args.throttle >= 0:
        moves = move_map({tp: (r, a) for tp, (r, a, _) in ongoing.items()}, proposed, current)
        leader, follower = throttled_replicas(moves)
        topic_ops: dict[tuple[str, str], dict[str, str | None]] = {}
        for t in sorted(set(leader) | set(follower)):
            ops: dict[str, str | None] = {}
            if t in leader:
                ops[LEADER_REPLICAS] = leader[t]
            if t in follower:
                ops[FOLLOWER_REPLICAS] = follower[t]
            topic_ops[("topic", t)] = ops
        await b.alter_configs(topic_ops)
        rate = str(args.throttle)
        await b.alter_configs({("broker", str(x)): {LEADER_RATE: rate, FOLLOWER_RATE: rate}
                               for x in reassigning_brokers(moves)})
        out.append(f"The inter-broker throttle limit was set to {args.throttle} B/s")
    if args.replica_alter_log_dirs_throttle >= 0:
        rate = str(args.replica_alter_log_dirs_throttle)
        await b.alter_configs({("broker", str(x)): {LOG_DIR_RATE: rate}
                               for x in sorted({r[2] for r in log_dirs})})
        out.append("The replica-alter-dir throttle limit was set to "
                   f"{args.replica_alter_log_dirs_throttle} B/s")
    failed = await b.alter(dict(proposed))
    if failed:
        raise ToolError("\n".join(out + ["Error reassigning partition(s):"] + [
            f"{tp_name(tp)}: {e}" for tp, e in sorted(failed.items())]))
    s = "" if len(proposed) == 1 else "s"
    out.append(f"Successfully started partition reassignment{s} for "
               + ",".join(tp_name(tp) for tp in sorted(proposed)))
    if log_dirs:
        await execute_moves(b, log_dirs, args.timeout, out)
    return out


async def execute_moves(b: Backend, moves: Mapping[Replica, str], timeout_ms: int,
                        out: list[str]) -> None:
    """Kafka's executeMoves: AlterReplicaLogDirs until every replica's move started; a replica
    not on its broker yet (REPLICA_NOT_AVAILABLE: its reassignment has not created it) is
    retried every 100 ms until `timeout_ms`."""
    from kio.schema.errors import ErrorCode

    deadline = time.monotonic() + timeout_ms / 1000
    pending = dict(moves)
    while True:
        errors = await b.alter_log_dirs(pending)
        completed = [r for r in pending if errors.get(r) == 0]
        failed = sorted((r for r in pending if errors.get(r) not in (0, REPLICA_NOT_AVAILABLE)),
                        key=replica_order)
        if failed:
            r = failed[0]
            code = errors.get(r)
            cause = "no answer" if code is None else ErrorCode(code).name.upper()
            raise ToolError("\n".join([*out, f"Failed to alter dir for {replica_name(r)}: "
                                              f"{cause}"]))
        if completed:
            s = "" if len(completed) == 1 else "s"
            out.append(f"Successfully started log directory move{s} for: " + ",".join(
                replica_name(r) for r in sorted(completed, key=replica_order)))
        for r in completed:
            del pending[r]
        if not pending:
            return
        if time.monotonic() >= deadline:
            s = "" if len(pending) == 1 else "s"
            raise ToolError("\n".join([
                *out, f"Timed out before log directory move{s} could be started for: " + ",".join(
                    replica_name(r) for r in sorted(pending, key=replica_order))]))
        await asyncio.sleep(0.1)


async def _states(b: Backend, targets: Mapping[TP, Sequence[int]]
                  ) -> tuple[dict[TP, PartitionState], bool]:
    """Kafka's ``findPartitionReassignmentStates``: (states, any reassignment ongoing)."""
    ongoing = await b.ongoing()
    not_found = [tp for tp in targets if tp not in ongoing]
    current = await b.replicas({t for t, _ in not_found}) if not_found else {}
    states: dict[TP, PartitionState] = {}
    for tp, target in targets.items():
        if tp in ongoing:
            states[tp] = PartitionState(tuple(ongoing[tp][0]), tuple(target), False)
        else:
            states[tp] = PartitionState(tuple(current.get(tp, ())), tuple(target), True)
    return states, bool(ongoing)


async def clear_throttles(b: Backend, targets: Mapping[TP, Sequence[int]]) -> list[str]:
    """Kafka's ``clearAllThrottles``: every broker's rates, every named topic's replica lists."""
    if not b.throttles:
        return []
    brokers = await b.brokers() | {x for r in targets.values() for x in r}
    topics = sorted({t for t, _ in targets})
    await b.alter_configs({("broker", str(x)): dict.fromkeys(BROKER_LEVEL_THROTTLES)
                           for x in sorted(brokers)})
    await b.alter_configs({("topic", t): dict.fromkeys(TOPIC_LEVEL_THROTTLES) for t in topics})
    return ["", f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
            + ",".join(map(str, sorted(brokers))),
            f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} "
            + ",".join(topics)]


async def verify(b: Backend, args: argparse.Namespace) -> list[str]:
    text = _read(args.reassignment_json_file, "--reassignment-json-file")
    targets = parse_reassignment_json(text)
    log_dirs = parse_log_dirs(text)

    async def look() -> tuple[dict[TP, PartitionState], bool, dict[Replica, LogDirMoveState]]:
        states, ongoing = await _states(b, targets)
        moves = await b.log_dir_states(log_dirs) if log_dirs else {}
        return states, ongoing, moves

    def unfinished(states: Mapping[TP, PartitionState], ongoing: bool,
                   moves: Mapping[Replica, LogDirMoveState]) -> bool:
        return (ongoing or any(s.current != s.target for s in states.values())
                or any(m.kind != "completed" for m in moves.values()))

    states, ongoing, moves = await look()
    if args.wait:
        deadline = time.monotonic() + args.wait_timeout_ms / 1000 if args.wait_timeout_ms else None
        while unfinished(states, ongoing, moves):
            pending = sorted(tp for tp, s in states.items() if not s.done or s.current != s.target)
            moving = sorted((r for r, m in moves.items() if m.kind != "completed"),
                            key=replica_order)
            line = (f"Waiting for {len(pending)} of {len(states)} partition reassignments: "
                    + ",".join(tp_name(tp) for tp in pending) + (
                        "" if pending or not ongoing else " (other reassignments are ongoing)"))
            if log_dirs:
                line += (f"; {len(moving)} of {len(moves)} log dir moves: " + ",".join(
                    replica_name(r) + (f" (offset lag {moves[r].lag})"
                                       if moves[r].kind == "active" else "")
                    for r in moving))
            print(line, file=sys.stderr, flush=True)
            if deadline is not None and time.monotonic() > deadline:
                break
            await asyncio.sleep(args.wait_interval_ms / 1000)
            states, ongoing, moves = await look()
    out = status_lines(states)
    out += move_status_lines(moves)
    moves_ongoing = not all(m.done for m in moves.values())
    if not ongoing and not moves_ongoing and not args.preserve_throttles:
        out += await clear_throttles(b, targets)
    if args.wait and unfinished(states, ongoing, moves):
        # --wait (odradek's) promised completion: its timeout is a failure, said last.
        out.append(f"Gave up waiting after --wait-timeout-ms {args.wait_timeout_ms}: "
                   "reassignments are still in progress.")
        args.exit_status = 1
    return out


async def cancel(b: Backend, args: argparse.Namespace) -> list[str]:
    text = _read(args.reassignment_json_file, "--reassignment-json-file")
    targets = parse_reassignment_json(text)
    log_dirs = parse_log_dirs(text)
    if not isinstance(b, AdminBackend):
        raise ToolError("--cancel requires --bootstrap-server")
    active = sorted(await b.ongoing(list(targets)))
    out: list[str] = []
    if active:
        failed = await b.alter(dict.fromkeys(active))
        if failed:
            s = "" if len(failed) == 1 else "s"
            raise ToolError(f"Error cancelling partition reassignment{s} for:\n" + "\n".join(
                f"{tp_name(tp)}: {e}" for tp, e in sorted(failed.items())))
        s = "" if len(active) == 1 else "s"
        out.append(f"Successfully cancelled partition reassignment{s} for: "
                   + ",".join(tp_name(tp) for tp in active))
    else:
        out.append("None of the specified partition reassignments are active.")
    # Kafka's cancelAssignment: a log dir move in progress goes back to the current dir (its
    # future log is dropped)
    states = await b.log_dir_states(log_dirs) if log_dirs else {}
    back = {r: st.current for r, st in states.items() if st.kind == "active" and st.current}
    if back:
        await execute_moves(b, {r: d for r, d in back.items() if d is not None}, args.timeout,
                            out)
    else:
        out.append("None of the specified partition moves are active.")
    if not args.preserve_throttles:
        out += (await clear_throttles(b, targets))[1:]
    return out


async def list_reassignments(b: Backend, args: argparse.Namespace) -> list[str]:
    return list_lines(await b.ongoing())


ACTIONS = {"generate": generate, "execute": execute, "verify": verify, "cancel": cancel,
           "list": list_reassignments}


async def run(args: argparse.Namespace) -> list[str]:
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise ToolError("Command must include exactly one action: --execute, --generate, "
                        "--verify, --cancel, or --list")
    if bool(args.bootstrap_server) == bool(args.zookeeper):
        raise ToolError("Exactly one of --bootstrap-server and --zookeeper is required")
    action = ACTIONS[chosen[0]]
    if args.zookeeper:
        store = await open_zookeeper(args.zookeeper)
        try:
            return await action(ZooKeeperBackend(store), args)
        finally:
            await store.close()
    from ..client import AsyncAdmin

    cfg: dict[str, Any] = read_properties(args.command_config) if args.command_config else {}
    cfg["bootstrap.servers"] = args.bootstrap_server
    cfg.setdefault("client.id", "reassign-partitions-tool")
    async with AsyncAdmin(cfg) as admin:
        return await action(AdminBackend(admin), args)


def main(args: argparse.Namespace) -> int:
    from ..client.errors import KafkaError
    from ..coordination.store import CoordinationError

    def failed(exc: BaseException) -> int:
        print(f"Error: {exc}")
        return 1

    return run_tool(lambda: asyncio.run(run(args)), refused=print,
                    failures=(KafkaError, CoordinationError, OSError, TimeoutError),
                    failed=failed, status=lambda: int(getattr(args, "exit_status", 0)))


def add_parser(subparsers: Subcommands) -> None:
    p = subparsers.add_parser(
        "reassign-partitions", help="move partitions between brokers "
        "(Kafka's kafka-reassign-partitions)", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap-server", help="the server(s) to use for bootstrapping")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]",
                   help="work on ZooKeeper directly, as Kafka's older tool does (no --throttle, "
                        "no --cancel)")
    p.add_argument("--command-config", help="properties file of admin client configs")
    p.add_argument("--generate", action="store_true",
                   help="Generate a candidate partition reassignment configuration.")
    p.add_argument("--execute", action="store_true",
                   help="Kick off the reassignment as specified by --reassignment-json-file.")
    p.add_argument("--verify", action="store_true",
                   help="Verify if the reassignment completed as specified by "
                        "--reassignment-json-file; then clear the throttles.")
    p.add_argument("--cancel", action="store_true",
                   help="Cancel an active reassignment (back to the original replicas).")
    p.add_argument("--list", action="store_true", help="List all active partition reassignments.")
    p.add_argument("--reassignment-json-file", help="the partition reassignment JSON file")
    p.add_argument("--topics-to-move-json-file",
                   help='JSON file of the topics to move: {"topics":[{"topic":"t"}],"version":1}')
    p.add_argument("--broker-list", help='the brokers to move to, e.g. "4,5,6" (--generate)')
    p.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_SEC",
                   help="inter-broker replication throttle of the moving replicas (KIP-73)")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1,
                   metavar="BYTES_PER_SEC",
                   help="throttle of the moves of replicas between the log dirs of a broker "
                        "(replica.alter.log.dirs.io.max.bytes.per.second, KIP-113)")
    p.add_argument("--timeout", type=int, default=10000, metavar="MS",
                   help="the maximum time in ms to wait for log directory replica assignment "
                        "to begin")
    p.add_argument("--additional", action="store_true",
                   help="execute even though other reassignments are ongoing")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="do not clear the throttles in --verify / --cancel")
    p.add_argument("--disable-rack-aware", action="store_true",
                   help="with --generate: place replicas without the brokers' racks")
    p.add_argument("--wait", action="store_true",
                   help="(odradek) --verify polls until every reassignment is completed, "
                        "showing progress on stderr")
    p.add_argument("--wait-timeout-ms", type=int, default=0,
                   help="(odradek) give up waiting after this long (0: never)")
    p.add_argument("--wait-interval-ms", type=int, default=500,
                   help="(odradek) polling interval of --wait")
    p.set_defaults(func=main)
