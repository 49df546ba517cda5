"""`odradek leader-election` and `odradek preferred-replica-election` (S-6.1).

leader-election is Kafka's kafka-leader-election.sh, through the ElectLeaders API:

  --bootstrap-server HOST:PORT (required)   --admin.config FILE (admin client properties)
  --election-type PREFERRED|UNCLEAN (required)
  one of: --all-topic-partitions | --topic T --partition P | --path-to-json-file FILE
          (FILE: {"partitions": [{"topic": "t", "partition": 0}, ...]})

  Successfully completed leader election (PREFERRED) for partitions t-0, t-2
  Valid replica already elected for partitions t-1
  Error completing leader election (PREFERRED) for partition: t-3: <exception>: <message>

preferred-replica-election is the older kafka-preferred-replica-election.sh (Kafka 2.x):

  --zookeeper HOST:PORT[/chroot]   writes /admin/preferred_replica_election (all partitions, or
                                   those of --path-to-json-file) for the controller to act on,
                                   as Kafka's ZooKeeper-era tool did
  --bootstrap-server HOST:PORT     the same through ElectLeaders(PREFERRED), waiting for results

The exit status is 1 when any partition could not be elected or the input is invalid.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..common import TopicPartition
from ..coordination.paths import parse_election_json
from .command import (
    Subcommands,
    ToolError,
    open_zookeeper,
    prefixed,
    read_properties,
    reader_gone,
    run_tool,
)

if TYPE_CHECKING:
    from ..client.errors import KafkaError
    from ..coordination.store import CoordinationStore

ELECTION_NOT_NEEDED = 84

# Kafka's exception class per error code (what its tools print).
EXCEPTIONS = {
    3: "UnknownTopicOrPartitionException", 7: "TimeoutException",
    17: "InvalidTopicException", 41: "NotControllerException",
    42: "InvalidRequestException", 60: "ReassignmentInProgressException",
    80: "PreferredLeaderNotAvailableException", 83: "EligibleLeadersNotAvailableException",
}


def _tps(items: Iterable[TopicPartition]) -> str:
    return ", ".join(str(tp) for tp in sorted(items))


def exception_text(error: KafkaError) -> str:
    name = EXCEPTIONS.get(error.code, "KafkaException")
    text = str(error)
    message = text.split(": ", 2)[-1] if text.count(": ") >= 2 else text
    return f"org.apache.kafka.common.errors.{name}: {message}"


def _outcomes(results: Mapping[TopicPartition, KafkaError | None]
              ) -> tuple[list[TopicPartition], list[TopicPartition],
                         dict[TopicPartition, KafkaError]]:
    """(elected, ELECTION_NOT_NEEDED, failed with their errors)."""
    done = [tp for tp, e in results.items() if e is None]
    noop = [tp for tp, e in results.items() if e is not None and e.code == ELECTION_NOT_NEEDED]
    failed = {tp: e for tp, e in results.items() if e is not None
              and e.code != ELECTION_NOT_NEEDED}
    return done, noop, failed


def _report(results: Mapping[TopicPartition, KafkaError | None], elected: str, already: str,
            failed_for: str, replicas: str) -> tuple[list[str], list[str]]:
    """(stdout lines, stderr lines) of an election's results; stderr non-empty means some
    election failed."""
    done, noop, failed = _outcomes(results)
    out: list[str] = []
    if done:
        out.append(f"{elected} for partitions {_tps(done)}")
    if noop:
        out.append(f"{already} for partitions {_tps(noop)}")
    for tp in sorted(failed):
        out.append(f"{failed_for} for partition: {tp}: {exception_text(failed[tp])}")
    err = [f"Error: {len(failed)} {replicas} could not be elected"] if failed else []
    return out, err


def election_report(election_type: str, results: Mapping[TopicPartition, KafkaError | None]
                    ) -> tuple[list[str], list[str]]:
    """Kafka's LeaderElectionCommand output."""
    return _report(results, f"Successfully completed leader election ({election_type})",
                   "Valid replica already elected",
                   f"Error completing leader election ({election_type})", "replica(s)")


def preferred_report(results: Mapping[TopicPartition, KafkaError | None]
                     ) -> tuple[list[str], list[str]]:
    """kafka-preferred-replica-election's output in --bootstrap-server mode."""
    return _report(results, "Successfully completed preferred leader election",
                   "Preferred replica already elected", "Failed to elect preferred leader",
                   "preferred replica(s)")


def read_json_file(path: str) -> list[TopicPartition]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ToolError(f"Cannot read {path}: {exc.strerror or exc}") from None
    try:
        return parse_election_json(text)
    except ValueError as exc:
        raise ToolError(f"{path}: {exc}") from None


def partitions_from_args(args: argparse.Namespace) -> list[TopicPartition] | None:
    """The leader-election partition selection (None = all); Kafka's option rules."""
    chosen = [name for name, given in (("--all-topic-partitions", args.all_topic_partitions),
                                       ("--topic", args.topic is not None),
                                       ("--path-to-json-file", args.path_to_json_file))
              if given]
    if len(chosen) != 1:
        raise ToolError("One and only one of the following options is required: "
                        "--all-topic-partitions, --topic, --path-to-json-file")
    if args.partition is not None and args.topic is None:
        raise ToolError("Option --partition is only allowed together with --topic")
    if args.topic is not None:
        if args.partition is None:
            raise ToolError("Missing required option(s) [partition] (required with --topic)")
        return [TopicPartition(args.topic, args.partition)]
    if args.path_to_json_file:
        return read_json_file(args.path_to_json_file)
    return None


async def write_election_znode(store: CoordinationStore,
                               partitions: list[TopicPartition] | None) -> str:
    """Create ``/admin/preferred_replica_election`` (all partitions when None); returns its
    JSON. Kafka's ZkCommand.writePreferredReplicaElectionData."""
    from ..coordination import paths
    from ..coordination.store import NodeExistsError

    if partitions is None:
        partitions = []
        for topic in sorted(await store.get_children(paths.TOPICS)):
            found = await store.get_or_none(paths.topic_path(topic))
            if found is not None:
                assignment = paths.decode_topic_assignment(found[0])
                partitions += [TopicPartition(topic, p) for p in sorted(assignment.partitions)]
    data = paths.encode_preferred_replica_election(partitions)
    try:
        await store.create(paths.PREFERRED_REPLICA_ELECTION, data, makepath=True)
    except NodeExistsError:
        found = await store.get_or_none(paths.PREFERRED_REPLICA_ELECTION)
        pending = sorted(paths.decode_preferred_replica_election(found[0])) if found else []
        raise ToolError("Preferred replica leader election currently in progress for "
                        f"{','.join(f'{t}-{p}' for t, p in pending)}. Aborting operation"
                        ) from None
    return data.decode()


def _admin_config(args: argparse.Namespace) -> dict[str, Any]:
    path = getattr(args, "admin_config", None)
    config: dict[str, Any] = read_properties(path) if path else {}
    config["bootstrap.servers"] = args.bootstrap_server
    return config


async def _elect(args: argparse.Namespace, election_type: str,
                 partitions: list[TopicPartition] | None
                 ) -> dict[TopicPartition, KafkaError | None]:
    from ..client import AsyncAdmin

    timeout = float(getattr(args, "timeout_ms", 30000)) / 1000
    async with AsyncAdmin(_admin_config(args)) as admin:
        results = await admin.elect_leaders(election_type, partitions, timeout=timeout,
                                            raise_errors=False)
    return results


def _emit(out: list[str], err: list[str]) -> int:
    try:
        for line in out:
            print(line, flush=True)
    except BrokenPipeError:  # `odradek leader-election ... | head`: the rest goes nowhere
        reader_gone()
    for line in err:
        print(line, file=sys.stderr, flush=True)
    return 1 if err else 0


def _run_election_tool(tool: str, body: Callable[[], int]) -> int:
    from ..client.errors import KafkaError

    refused = prefixed(tool)

    def failed(exc: BaseException) -> int:
        refused(f"Error while making request: {exc}")
        return 1

    return run_tool(body, refused=refused, failures=(KafkaError,), failed=failed)


def run_leader_election(args: argparse.Namespace) -> int:
    def body() -> int:
        if not args.bootstrap_server:
            raise ToolError("Missing required option(s) [bootstrap-server]")
        if not args.election_type:
            raise ToolError("Missing required option(s) [election-type]")
        election_type = args.election_type.upper()
        if election_type not in ("PREFERRED", "UNCLEAN"):
            raise ToolError(f"Unknown election type {args.election_type!r}: "
                            "expected PREFERRED or UNCLEAN")
        partitions = partitions_from_args(args)
        print(f"Electing leaders ({election_type}) for "
              f"{'all partitions' if partitions is None else _tps(partitions)} ...",
              file=sys.stderr, flush=True)
        results = asyncio.run(_elect(args, election_type, partitions))
        return _emit(*election_report(election_type, results))

    return _run_election_tool("leader-election", body)


def run_preferred_replica_election(args: argparse.Namespace) -> int:
    def body() -> int:
        from ..coordination import paths

        if bool(args.zookeeper) == bool(args.bootstrap_server):
            raise ToolError("Exactly one of --zookeeper and --bootstrap-server is required")
        partitions = read_json_file(args.path_to_json_file) if args.path_to_json_file else None
        if args.bootstrap_server:
            results = asyncio.run(_elect(args, "PREFERRED", partitions))
            return _emit(*preferred_report(results))
        data = asyncio.run(_write_through_zookeeper(args.zookeeper, partitions))
        written = sorted(TopicPartition(t, p)
                         for t, p in paths.decode_preferred_replica_election(data.encode()))
        print(f"Created preferred replica election path with {data}")
        print(f"Successfully started preferred replica election for partitions "
              f"{_tps(written)}")
        return 0

    return _run_election_tool("preferred-replica-election", body)


async def _write_through_zookeeper(connect: str, partitions: list[TopicPartition] | None
                                   ) -> str:
    from ..coordination.store import CoordinationError

    print(f"Connecting to ZooKeeper at {connect} ...", file=sys.stderr, flush=True)
    store = await open_zookeeper(connect)
    try:
        return await write_election_znode(store, partitions)
    except CoordinationError as exc:
        raise ToolError(f"ZooKeeper error: {exc}") from None
    finally:
        await store.close()


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("leader-election",
                       help="elect preferred or unclean leaders (kafka-leader-election)")
    p.add_argument("--bootstrap-server", help="HOST:PORT[,HOST:PORT...] to connect to")
    p.add_argument("--admin.config", "--command-config", dest="admin_config", metavar="FILE",
                   help="admin client properties (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--election-type", help="PREFERRED or UNCLEAN")
    p.add_argument("--all-topic-partitions", action="store_true",
                   help="elect leaders for every partition")
    p.add_argument("--topic", help="the topic of the partition to elect (with --partition)")
    p.add_argument("--partition", type=int, help="the partition (with --topic)")
    p.add_argument("--path-to-json-file", metavar="FILE",
                   help='{"partitions": [{"topic": "t", "partition": 0}, ...]}')
    p.add_argument("--timeout-ms", type=int, default=30000, help=argparse.SUPPRESS)
    p.set_defaults(func=run_leader_election)

    p = sub.add_parser("preferred-replica-election",
                       help="move leadership back to preferred replicas "
                            "(kafka-preferred-replica-election)")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]",
                   help="write /admin/preferred_replica_election through ZooKeeper")
    p.add_argument("--bootstrap-server", help="use the ElectLeaders API instead")
    p.add_argument("--admin.config", "--command-config", dest="admin_config", metavar="FILE",
                   help="admin client properties (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--path-to-json-file", metavar="FILE",
                   help='{"partitions": [{"topic": "t", "partition": 0}, ...]} (default: all)')
    p.add_argument("--timeout-ms", type=int, default=30000, help=argparse.SUPPRESS)
    p.set_defaults(func=run_preferred_replica_election)
