"""`odradek topics` (S-6.3): Kafka's kafka-topics on odradek's admin client.

  --bootstrap-server HOST:PORT [--command-config FILE]   (admin client properties)
  --create --topic T [--partitions N] [--replication-factor R] [--replica-assignment 0:1,1:2]
           [--config k=v ...] [--if-not-exists]
  --delete --topic T|REGEX [--if-exists]
  --list [--topic REGEX] [--exclude-internal]
  --describe [--topic REGEX] [--under-replicated-partitions | --unavailable-partitions |
             --under-min-isr-partitions | --at-min-isr-partitions] [--topics-with-overrides]
             [--exclude-internal] [--if-exists]
  --alter --topic T --partitions N [--replica-assignment ...]     (CreatePartitions)
  --alter --topic T --config k=v ... --delete-config k ...        (IncrementalAlterConfigs)

Every operation goes through the Kafka admin API (CreateTopics, DeleteTopics, Metadata,
DescribeConfigs, CreatePartitions, IncrementalAlterConfigs). Output, validation messages and
exit codes follow Kafka's TopicCommand: a bad command line prints the reason on stderr and exits
1; a failed request prints "Error while executing topic command : <reason>" and exits 1.
Describe prints one line per topic and one per partition:

  Topic: t<TAB>TopicId: ...<TAB>PartitionCount: 3<TAB>ReplicationFactor: 3<TAB>Configs: k=v,...
  <TAB>Topic: t<TAB>Partition: 0<TAB>Leader: 1<TAB>Replicas: 1,2,3<TAB>Isr: 1,2,3

("Leader: none" without a leader; "<TAB>Offline: 2" appended when replicas sit on brokers that are
not alive.) Unlike Kafka 4's tool (which moved it to kafka-configs), --alter also changes topic
configs, as the ZooKeeper-era tool did.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .command import Subcommands, ToolError, add_admin_command, read_properties, run_tool

if TYPE_CHECKING:
    from ..client import AsyncAdmin
    from ..client.errors import KafkaError
    from ..client.types import ConfigEntry, PartitionDescription, TopicDescription

log = logging.getLogger("odradek.tools.topics")

MAX_REPLICATION_FACTOR = 32767
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


# -- pure helpers: parsing ------------------------------------------------------------------------
def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """Kafka's "0:1:2,1:2:0" -> {0: [0, 1, 2], 1: [1, 2, 0]} (partition i: its broker list)."""
    out: dict[int, list[int]] = {}
    for i, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError:
            raise ToolError(f"Invalid replica assignment '{text}': partition {i} has a "
                            f"broker id that is not an integer: '{part}'") from None
        dups = sorted({b for b in brokers if brokers.count(b) > 1})
        if dups:
            raise ToolError("Partition replica lists may not contain duplicate entries: "
                            + ",".join(map(str, dups)))
        out[i] = brokers
        if len(brokers) != len(out[0]):
            raise ToolError(f"Partition {i} has different replication factor: {brokers}")
    return out


def parse_topic_configs(items: Iterable[str]) -> dict[str, str]:
    """--config k=v values (spaces around '=' allowed) -> {k: v}."""
    out: dict[str, str] = {}
    for item in items:
        parts = re.split(r"\s*=\s*", item)
        if len(parts) != 2 or not parts[0].strip():
            raise ToolError('requirement failed: Invalid topic config: all configs to be added '
                            'must be in the format "key=val".')
        out[parts[0].strip()] = parts[1].strip()
    return out


def topic_filter(pattern: str | None) -> re.Pattern[str] | None:
    """Kafka's IncludeList: a regex matched against the whole name; ',' also separates
    alternatives and surrounding quotes are dropped."""
    if pattern is None:
        return None
    text = pattern.strip().strip("'\"").replace(",", "|")
    try:
        return re.compile(text)
    except re.error as exc:
        raise ToolError(f"Invalid topic regex '{pattern}': {exc}") from None


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def select_topics(all_topics: Iterable[str], pattern: str | None,
                  exclude_internal: bool) -> list[str]:
    regex = topic_filter(pattern)
    return [t for t in sorted(all_topics)
            if not (exclude_internal and is_internal(t))
            and (regex is None or regex.fullmatch(t) is not None)]


# -- pure helpers: which partitions a report shows ------------------------------------------------
@dataclass(frozen=True)
class PartitionState:
    """What Kafka's PartitionDescription needs to decide and print one partition."""

    topic: str
    partition: int
    leader: int  # -1: none
    replicas: list[int]
    isr: list[int]
    min_isr: int = 1
    # An ongoing reassignment (ListPartitionReassignments): the replicas being added and removed.
    adding: list[int] | None = None
    removing: list[int] | None = None

    @property
    def has_leader(self) -> bool:
        return self.leader >= 0

    @property
    def reassigning(self) -> bool:
        return self.adding is not None

    def replication_factor(self) -> int:
        """Kafka's getReplicationFactor: the replicas not counting those being added."""
        return len(self.replicas) - len(self.adding or ())

    def under_replicated(self) -> bool:
        return self.replication_factor() - len(self.isr) > 0

    def unavailable(self, live_brokers: set[int]) -> bool:
        return not self.has_leader or self.leader not in live_brokers

    def under_min_isr(self) -> bool:
        return not self.has_leader or len(self.isr) < self.min_isr

    def at_min_isr(self) -> bool:
        return len(self.isr) == self.min_isr

    def offline(self, live_brokers: set[int]) -> list[int]:
        return [r for r in self.replicas if r not in live_brokers]


REPORTS = ("under_replicated_partitions", "unavailable_partitions",
           "under_min_isr_partitions", "at_min_isr_partitions")


def partition_shown(p: PartitionState, reports: set[str], live_brokers: set[int]) -> bool:
    """Without a report option every partition is shown; with some, those matching any."""
    if not reports:
        return True
    return (("under_replicated_partitions" in reports and p.under_replicated())
            or ("unavailable_partitions" in reports and p.unavailable(live_brokers))
            or ("under_min_isr_partitions" in reports and p.under_min_isr())
            or ("at_min_isr_partitions" in reports and p.at_min_isr()))


# -- pure helpers: output -------------------------------------------------------------------------
def format_topic_line(topic: str, topic_id: object, partition_count: int,
                      replication_factor: int, configs: Mapping[str, str | None]) -> str:
    """The topic line of --describe; `configs` are the non-default ones, in order."""
    line = f"Topic: {topic}"
    if topic_id is not None and str(topic_id) not in ("", "AAAAAAAAAAAAAAAAAAAAAA",
                                                      "00000000-0000-0000-0000-000000000000"):
        line += f"\tTopicId: {format_topic_id(topic_id)}"
    line += f"\tPartitionCount: {partition_count}\tReplicationFactor: {replication_factor}"
    line += "\tConfigs: " + ",".join(f"{k}={v}" for k, v in configs.items())
    return line


def format_topic_id(topic_id: object) -> str:
    """Kafka prints a Uuid as URL-safe base64 without padding (22 characters)."""
    import base64
    import uuid

    if isinstance(topic_id, uuid.UUID):
        return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    return str(topic_id)


def format_partition_line(p: PartitionState, live_brokers: set[int] | None = None) -> str:
    line = (f"\tTopic: {p.topic}\tPartition: {p.partition}"
            f"\tLeader: {p.leader if p.has_leader else 'none'}"
            f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
    if p.reassigning:
        line += (f"\tAdding Replicas: {','.join(map(str, p.adding or ()))}"
                 f"\tRemoving Replicas: {','.join(map(str, p.removing or ()))}")
    if live_brokers is not None:
        offline = p.offline(live_brokers)
        if offline:
            line += "\tOffline: " + ",".join(map(str, offline))
    return line


def non_default_configs(entries: Mapping[str, ConfigEntry]) -> dict[str, str | None]:
    """Kafka shows the entries whose source is not DEFAULT_CONFIG (5)."""
    return {name: e.value for name, e in entries.items() if not e.is_default and e.source != 5}


def describe_lines(desc: TopicDescription, configs: Mapping[str, ConfigEntry],
                   live_brokers: set[int], reports: set[str],
                   with_overrides_only: bool,
                   reassignments: Mapping[tuple[str, int], Any] | None = None) -> list[str]:
    """The lines --describe prints for one topic (Kafka's DescribeOptions); `reassignments`
    ({(topic, partition): PartitionReassignment}) adds Kafka's "Adding Replicas" and "Removing
    Replicas" to the partitions being moved."""
    overrides = non_default_configs(configs)
    min_isr_entry = configs.get("min.insync.replicas")
    min_isr = int(min_isr_entry.value) if min_isr_entry and min_isr_entry.value else 1
    moving = reassignments or {}
    parts = []
    for p in sorted(desc.partitions, key=_pnum):
        r = moving.get((desc.name, p.partition))
        parts.append(PartitionState(
            desc.name, p.partition, p.leader, list(p.replicas), list(p.isr), min_isr,
            None if r is None else list(r.adding_replicas),
            None if r is None else list(r.removing_replicas)))
    lines: list[str] = []
    if not reports and (not with_overrides_only or overrides):
        rf = parts[0].replication_factor() if parts else 0
        lines.append(format_topic_line(desc.name, desc.topic_id, len(parts), rf, overrides))
    if not with_overrides_only:
        lines.extend(format_partition_line(p, live_brokers) for p in parts
                     if partition_shown(p, reports, live_brokers))
    return lines


def _pnum(p: PartitionDescription) -> int:
    return p.partition


# -- errors as Kafka's tools print them -----------------------------------------------------------
# Java exception names and default messages of the errors these tools meet (Kafka's Errors).
KAFKA_EXCEPTIONS: dict[str, tuple[str, str]] = {
    "topic_already_exists": ("TopicExistsException", "Topic with this name already exists."),
    "unknown_topic_or_partition": ("UnknownTopicOrPartitionException",
                                   "This server does not host this topic-partition."),
    "invalid_partitions": ("InvalidPartitionsException", "Number of partitions is below 1."),
    "invalid_replication_factor": ("InvalidReplicationFactorException",
                                   "Replication factor is below 1 or larger than the number "
                                   "of available brokers."),
    "invalid_replica_assignment": ("InvalidReplicaAssignmentException",
                                   "Replica assignment is invalid."),
    "invalid_config": ("InvalidConfigurationException", "Configuration is invalid."),
    "invalid_topic_exception": ("InvalidTopicException",
                                "The request attempted to perform an operation on an invalid "
                                "topic."),
    "topic_deletion_disabled": ("TopicDeletionDisabledException",
                                "Topic deletion is disabled."),
    "non_empty_group": ("GroupNotEmptyException", "The group is not empty."),
    "group_id_not_found": ("GroupIdNotFoundException", "The group id does not exist."),
    "invalid_group_id": ("InvalidGroupIdException", "The configured groupId is invalid."),
    "group_subscribed_to_topic": ("GroupSubscribedToTopicException",
                                  "The consumer group is actively subscribed to the topic"),
    "coordinator_not_available": ("CoordinatorNotAvailableException",
                                  "The coordinator is not available."),
    "leader_not_available": ("LeaderNotAvailableException",
                             "There is no leader for this topic-partition as we are in the "
                             "middle of a leadership election."),
    "unsupported_version": ("UnsupportedVersionException",
                            "The version of API is not supported."),
    "request_timed_out": ("TimeoutException", "The request timed out."),
    "network_exception": ("NetworkException", "The server disconnected before a response was "
                          "received."),
}


def error_message(err: BaseException) -> str:
    """The broker's error message of a KafkaError (else Kafka's default for its code)."""
    from ..client.errors import KafkaError

    text = str(err)
    if not isinstance(err, KafkaError):
        return text
    name = err.name.upper()
    idx = text.find(name + ": ")
    if idx >= 0:
        return text[idx + len(name) + 2:]
    known = KAFKA_EXCEPTIONS.get(err.name.lower())
    if known is not None and (text == name or text.endswith(": " + name)):
        return known[1]
    return text


def java_error(err: BaseException) -> str:
    """"org.apache.kafka.common.errors.X: message", as a Java exception prints itself."""
    from ..client.errors import KafkaError

    if isinstance(err, KafkaError):
        known = KAFKA_EXCEPTIONS.get(err.name.lower())
        if known is not None:
            return f"org.apache.kafka.common.errors.{known[0]}: {error_message(err)}"
    return error_message(err)


# -- the admin client -----------------------------------------------------------------------------
def admin_config(bootstrap: str, command_config: str | None,
                 overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = read_properties(command_config, "--command-config") \
        if command_config else {}
    cfg["bootstrap.servers"] = bootstrap
    cfg.setdefault("client.id", "odradek-admin")
    cfg.update(overrides or {})
    return cfg


async def open_admin(cfg: Mapping[str, Any]) -> AsyncAdmin:
    from ..client import AsyncAdmin

    try:
        admin = AsyncAdmin(dict(cfg))
    except ValueError as exc:
        raise ToolError(f"Invalid admin client configuration: {exc}") from None
    try:
        await admin.start()
    except BaseException:
        await admin.close()
        raise
    return admin


# -- the command ----------------------------------------------------------------------------------
ACTIONS = ("create", "list", "alter", "describe", "delete")


def _opt(name: str) -> str:
    return f"[{name.replace('_', '-')}]"


def _cant_use(option: str, with_option: str) -> ToolError:
    return ToolError(f'Option "{_opt(option)}" can\'t be used with option "{_opt(with_option)}"')


def check_args(args: argparse.Namespace) -> None:
    """Kafka's TopicCommandOptions.checkArgs, messages included."""
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise ToolError("Command must include exactly one action: --list, --describe, --create, "
                        "--alter or --delete")
    action = actions[0]
    if not args.bootstrap_server:
        raise ToolError("--bootstrap-server must be specified")
    if action not in ("list", "describe") and not args.topic:
        raise ToolError(f'Missing required argument "{_opt("topic")}"')
    if action == "alter" and args.partitions is None and not args.config \
            and not args.delete_config:
        raise ToolError(f'Missing required argument "{_opt("partitions")}"')
    used = {
        "config": bool(args.config), "partitions": args.partitions is not None,
        "replication_factor": args.replication_factor is not None,
        "replica_assignment": args.replica_assignment is not None,
        "delete_config": bool(args.delete_config),
        "if_exists": args.if_exists, "if_not_exists": args.if_not_exists,
        "exclude_internal": args.exclude_internal,
        "topics_with_overrides": args.topics_with_overrides,
        **{r: getattr(args, r) for r in REPORTS},
    }
    allowed = {
        "config": ("alter", "create"), "partitions": ("alter", "create"),
        "replication_factor": ("create",), "replica_assignment": ("alter", "create"),
        "delete_config": ("alter",), "if_exists": ("alter", "delete", "describe"),
        "if_not_exists": ("create",), "exclude_internal": ("list", "describe"),
        "topics_with_overrides": ("describe",), **{r: ("describe",) for r in REPORTS},
    }
    for option, is_used in used.items():
        if is_used and action not in allowed[option]:
            raise _cant_use(option, action)
    if action == "create" and args.replica_assignment is not None:
        for other in ("partitions", "replication_factor"):
            if used[other]:
                raise _cant_use("replica_assignment", other)
    reports = [r for r in REPORTS if used[r]]
    if args.topics_with_overrides and reports:
        raise _cant_use("topics_with_overrides", reports[0])
    if action == "create":
        if args.replication_factor is not None and not (
                1 <= args.replication_factor <= MAX_REPLICATION_FACTOR):
            raise ToolError("The replication factor must be between 1 and "
                            f"{MAX_REPLICATION_FACTOR} inclusive")
        if args.partitions is not None and args.partitions < 1:
            raise ToolError("The partitions must be greater than 0")


def add_parser(subparsers: Subcommands) -> None:
    p = add_admin_command(subparsers, "topics", "create, delete, describe or change topics "
                          "(Kafka's kafka-topics)", __doc__)
    for action, text in (("create", "Create a new topic."), ("delete", "Delete a topic."),
                         ("list", "List all available topics."),
                         ("describe", "List details for the given topics."),
                         ("alter", "Alter the number of partitions, replica assignment and/or "
                          "configuration of a topic.")):
        p.add_argument(f"--{action}", action="store_true", help=text)
    p.add_argument("--topic", help="the topic to create, alter, describe or delete; a regular "
                   "expression except with --create")
    p.add_argument("--partitions", type=int, help="# of partitions (create, alter)")
    p.add_argument("--replication-factor", type=int, help="replication factor (create)")
    p.add_argument("--replica-assignment", help="broker_id_for_part1_replica1:"
                   "broker_id_for_part1_replica2,broker_id_for_part2_replica1:...")
    p.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                   help="a topic config override (create, alter)")
    p.add_argument("--delete-config", action="append", default=[], metavar="NAME",
                   help="a topic config override to remove (alter)")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="describe: only partitions whose ISR is smaller than their replicas")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="describe: only partitions whose leader is not available")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="describe: only partitions whose ISR is below min.insync.replicas")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="describe: only partitions whose ISR equals min.insync.replicas")
    p.add_argument("--topics-with-overrides", action="store_true",
                   help="describe: only topics that have overridden configs")
    p.add_argument("--if-exists", action="store_true",
                   help="alter/delete/describe: only if the topic exists")
    p.add_argument("--if-not-exists", action="store_true",
                   help="create: do not fail if the topic already exists")
    p.add_argument("--exclude-internal", action="store_true",
                   help="list/describe: leave out internal topics")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    return run_admin_command(
        args, check_args, run,
        lambda text: print(f"Error while executing topic command : {text}"))


def run_admin_command(args: argparse.Namespace, check: Callable[[argparse.Namespace], None],
                      run: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
                      report: Callable[[str], None]) -> int:
    """How Kafka's TopicCommand and ConsumerGroupCommand end: a bad command line is printed on
    stderr (exit 1); any failure is reported, never a traceback: `report(failure_text)`, exit 1.
    """
    def body() -> int:
        check(args)
        return asyncio.run(run(args))

    def failed(exc: BaseException) -> int:
        report(failure_text(exc))
        return 1

    return run_tool(body, failures=(Exception,), failed=failed)


def failure_text(exc: BaseException) -> str:
    """How Kafka's TopicCommand and ConsumerGroupCommand name a failure: the broker's message
    of a Kafka or I/O error, else the exception's class and message."""
    from ..client.errors import KafkaError

    if isinstance(exc, KafkaError | OSError):
        return error_message(exc)
    return f"{type(exc).__name__}: {exc}"


async def run(args: argparse.Namespace) -> int:
    admin = await open_admin(admin_config(args.bootstrap_server, args.command_config))
    try:
        if args.create:
            return await create(admin, args)
        if args.list:
            for name in await topics_matching(admin, args.topic, args.exclude_internal):
                print(name)
            return 0
        if args.describe:
            return await describe(admin, args)
        if args.delete:
            return await delete(admin, args)
        return await alter(admin, args)
    finally:
        await admin.close()


async def topics_matching(admin: AsyncAdmin, pattern: str | None,
                          exclude_internal: bool) -> list[str]:
    return select_topics(await admin.list_topics(include_internal=True), pattern,
                         exclude_internal)


def _ensure_found(found: Sequence[str], requested: str | None, if_exists: bool) -> None:
    if requested and not if_exists and not found:
        raise ToolError(f"Topic '{requested}' does not exist as expected")


async def create(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    from ..client.types import NewTopic

    configs = parse_topic_configs(args.config)
    name = args.topic
    if "." in name or "_" in name:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or "
              "underscore ('_') could collide. To avoid issues it is best to use either, but "
              "not both.")
    if args.replica_assignment:
        topic = NewTopic(name, config=configs,
                         replica_assignment=parse_replica_assignment(args.replica_assignment))
    else:
        topic = NewTopic(name, -1 if args.partitions is None else args.partitions,
                         -1 if args.replication_factor is None else args.replication_factor,
                         configs)
    results = await admin.create_topics([topic], raise_errors=False)
    err: KafkaError | None = results.get(name)
    if err is not None:
        if err.name == "topic_already_exists" and args.if_not_exists:
            return 0
        raise err
    print(f"Created topic {name}.")
    return 0


async def describe(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    from ..client.errors import KafkaError
    from ..client.types import ConfigResource

    names = await topics_matching(admin, args.topic, args.exclude_internal)
    _ensure_found(names, args.topic, args.if_exists)
    if not names:
        return 0
    descriptions = await admin.describe_topics(names)
    configs = await admin.describe_configs([ConfigResource("topic", n) for n in names])
    live = {b.node_id for b in (await admin.describe_cluster()).brokers}
    reports = {r for r in REPORTS if getattr(args, r)}
    try:  # as Kafka's tool: without the API (or the right to call it), no reassignment columns
        moving = {(tp.topic, tp.partition): r
                  for tp, r in (await admin.list_partition_reassignments()).items()}
    except KafkaError as exc:
        log.debug("Couldn't query reassignments through the AdminClient API: %s", exc)
        moving = {}
    for name in names:
        entries = configs.get(ConfigResource("topic", name), {})
        for line in describe_lines(descriptions[name], entries, live, reports,
                                   args.topics_with_overrides, moving):
            print(line)
    return 0


async def delete(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    names = await topics_matching(admin, args.topic, False)
    _ensure_found(names, args.topic, args.if_exists)
    if names:
        await admin.delete_topics(names)
    return 0


async def alter(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    from ..client.types import ConfigResource

    set_configs = parse_topic_configs(args.config)
    names = await topics_matching(admin, args.topic, False)
    _ensure_found(names, args.topic, args.if_exists)
    if not names:
        return 0
    if set_configs or args.delete_config:
        changes: dict[str, str | None] = {**set_configs, **dict.fromkeys(args.delete_config)}
        await admin.incremental_alter_configs(
            {ConfigResource("topic", n): changes for n in names})
        for n in names:
            print(f"Updated config for topic {n}.")
    if args.partitions is not None:
        assignments: dict[str, list[list[int]]] | None = None
        if args.replica_assignment:
            plan = parse_replica_assignment(args.replica_assignment)
            current = await admin.describe_topics(names)
            assignments = {n: [b for p, b in sorted(plan.items())
                               if p >= len(current[n].partitions)] for n in names}
        await admin.create_partitions({n: args.partitions for n in names},
                                      assignments=assignments)
        print("Adding partitions succeeded!")
    return 0

