"""`odradek consumer-groups` (S-6.3, S-7.3): Kafka's kafka-consumer-groups on odradek's admin
client.

  --bootstrap-server HOST:PORT [--command-config FILE] [--timeout MS]
  --list [--state [STATES]]
  --describe --group G ... | --all-groups  [--offsets (default) | --members [--verbose] |
             --state [--verbose]]
  --reset-offsets --group G ... | --all-groups
             (--topic T | --topic T:0,1 ... | --all-topics | --from-file CSV)
             (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N |
              --to-datetime YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm] | --by-duration PnDTnHnMnS |
              --from-file CSV)
             [--dry-run (default) | --execute] [--export]
  --delete --group G ... | --all-groups
  --delete-offsets --group G --topic T[:P,...] ...

--describe prints Kafka's columns, GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
CONSUMER-ID HOST CLIENT-ID, with "-" where a value is absent; LOG-END-OFFSET is what ListOffsets
answers for the latest offset (the high watermark), and LAG = LOG-END-OFFSET - CURRENT-OFFSET.
--reset-offsets refuses groups with active members, clamps the new offsets into [log start
offset, high watermark] and only prints the plan (GROUP TOPIC PARTITION NEW-OFFSET) unless
--execute is given. Messages follow Kafka's ConsumerGroupCommand; unlike Kafka's tool, a command
that printed an error exits with status 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..common import TopicPartition
from .command import Subcommands, ToolError, add_admin_command, read_input_file
from .topics import admin_config, error_message, java_error, open_admin, run_admin_command

if TYPE_CHECKING:
    from ..client import AsyncAdmin
    from ..client.errors import KafkaError
    from ..client.types import GroupDescription

MISSING = "-"
EARLIEST, LATEST = -2, -1
# The states a classic consumer group can be in (Kafka's GroupState for CLASSIC groups).
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
CONSUMER_PROTOCOL_TYPES = ("consumer", "")


# -- pure helpers: parsing ------------------------------------------------------------------------
_DURATION_RE = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """Java's Duration.parse ("PnDTnHnMn.nS", ISO-8601 seconds-based) -> milliseconds."""
    m = _DURATION_RE.fullmatch(text.strip())
    if m is None or (m.group(3) is not None and m.group(3).upper() == "T") or \
            not any(m.group(i) for i in (2, 4, 5, 6)):
        raise ToolError(f"Text cannot be parsed to a Duration: {text}")
    sign, days, _t, hours, minutes, seconds, fraction = m.groups()

    def num(v: str | None) -> int:
        return int(v) if v else 0
    ms = ((num(days) * 24 + num(hours)) * 60 + num(minutes)) * 60_000 + num(seconds) * 1000
    if fraction:
        frac_ms = int((fraction + "000")[:3])
        ms += -frac_ms if seconds and seconds.startswith("-") else frac_ms
    return -ms if sign == "-" else ms


_DATETIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?")


def parse_datetime_ms(text: str, local_tz: dt.tzinfo | None = None) -> int:
    """Kafka's Utils.getDateTime: 'YYYY-MM-DDTHH:mm:SS.sss' with an optional zone (Z, +hh,
    +hhmm, +hh:mm); without one, the local time zone (or `local_tz`). -> epoch ms."""
    if "T" not in text:
        raise ToolError("Error parsing timestamp. It does not contain a 'T' according to "
                        "ISO8601 format")
    m = _DATETIME_RE.fullmatch(text.strip())
    if m is None:
        raise ToolError(f"Unparseable date: \"{text}\" (expected YYYY-MM-DDTHH:mm:SS.sss, "
                        "optionally followed by Z or an offset such as +02:00)")
    year, month, day, hour, minute, second, millis, zone = m.groups()
    try:
        naive = dt.datetime(int(year), int(month), int(day), int(hour), int(minute),
                            int(second), int((millis or "0").ljust(3, "0")) * 1000)
    except ValueError as exc:
        raise ToolError(f"Unparseable date: \"{text}\": {exc}") from None
    if zone is None:
        tz = local_tz
        if tz is None:
            return int(time.mktime(naive.timetuple())) * 1000 + naive.microsecond // 1000
    elif zone == "Z":
        tz = dt.UTC
    else:
        digits = zone[1:].replace(":", "")
        offset = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        tz = dt.timezone(-offset if zone[0] == "-" else offset)
    return int(naive.replace(tzinfo=tz).timestamp() * 1000)


def parse_topic_arg(arg: str) -> tuple[str, list[int] | None]:
    """--topic "t" -> ("t", None: all of its partitions); "t:0,1" -> ("t", [0, 1])."""
    if ":" not in arg:
        return arg, None
    parts = arg.split(":")
    if len(parts) != 2:
        raise ToolError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    topic, partitions = parts
    out = []
    for p in partitions.split(","):
        try:
            out.append(int(p))
        except ValueError:
            raise ToolError(f"Invalid partition '{p}' specified in topic arg '{arg}'") from None
    return topic, out


def parse_reset_plan(csv_text: str, groups: Sequence[str]
                     ) -> dict[str, dict[TopicPartition, int]]:
    """Kafka's reset plan CSV: "topic,partition,offset" lines for a single --group, else
    "group,topic,partition,offset"."""
    lines = [ln.strip() for ln in csv_text.splitlines() if ln.strip()]
    out: dict[str, dict[TopicPartition, int]] = {}
    single = len(groups) == 1 and bool(lines) and len(lines[0].split(",")) == 3
    for n, line in enumerate(lines, 1):
        cells = [c.strip() for c in line.split(",")]
        try:
            if single:
                group, (topic, part, off) = groups[0], cells
            else:
                group, topic, part, off = cells
            out.setdefault(group, {})[TopicPartition(topic, int(part))] = int(off)
        except ValueError:
            shape = "topic,partition,offset" if single else "group,topic,partition,offset"
            raise ToolError(f"Invalid reset plan line {n}: '{line}' (expected {shape})"
                            ) from None
    return out


def parse_states(text: str) -> set[str]:
    """--state "Stable,Empty" (case-insensitive) -> Kafka's state names."""
    by_lower = {s.lower(): s for s in GROUP_STATES}
    out = set()
    for item in text.split(","):
        state = by_lower.get(item.strip().lower())
        if state is None:
            raise ToolError(f"Invalid state list '{text}'. Valid states are: "
                            + ", ".join(GROUP_STATES))
        out.add(state)
    return out


# -- pure helpers: offsets ------------------------------------------------------------------------
def lag(offset: int | None, log_end: int | None) -> int | None:
    """Kafka's getLag: unknown without a committed offset or a log end offset."""
    if offset is None or offset == -1 or log_end is None:
        return None
    return log_end - offset


def clamp(requested: Mapping[Any, int], log_start: Mapping[Any, int],
          log_end: Mapping[Any, int]) -> dict[Any, int]:
    """Kafka's checkOffsetsRange: above the high watermark -> it; below the log start -> it."""
    out = {}
    for tp, offset in requested.items():
        end, start = log_end.get(tp), log_start.get(tp)
        if end is not None and offset > end:
            out[tp] = end
        elif start is not None and offset < start:
            out[tp] = start
        else:
            out[tp] = offset
    return out


@dataclass(frozen=True)
class ResetSpec:
    """One reset scenario: kind is one of to_earliest, to_latest, to_current, to_offset,
    shift_by, to_timestamp (to-datetime and by-duration become a timestamp), from_file."""

    kind: str
    value: int = 0


def plan_reset(spec: ResetSpec, partitions: Iterable[Any], committed: Mapping[Any, int],
               log_start: Mapping[Any, int], log_end: Mapping[Any, int],
               by_timestamp: Mapping[Any, int] | None = None,
               from_file: Mapping[Any, int] | None = None) -> dict[Any, int]:
    """The new offset of each partition (Kafka's GroupOffsetsResetter), given the log start
    offsets, the high watermarks, and for to_timestamp the offsets ListOffsets found for the
    timestamp (-1: no record that late, which falls back to the high watermark)."""
    parts = list(partitions)
    if spec.kind == "to_earliest":
        return {tp: log_start[tp] for tp in parts}
    if spec.kind == "to_latest":
        return {tp: log_end[tp] for tp in parts}
    if spec.kind == "to_current":
        return {tp: committed[tp] if tp in committed else log_end[tp] for tp in parts}
    if spec.kind == "to_offset":
        return clamp(dict.fromkeys(parts, spec.value), log_start, log_end)
    if spec.kind == "shift_by":
        for tp in parts:
            if tp not in committed:
                topic, partition = tp  # plain (topic, partition) pairs work as well
                raise ToolError(f"Cannot shift offset for partition {topic}-{partition} since "
                                "there is no current committed offset")
        return clamp({tp: committed[tp] + spec.value for tp in parts}, log_start, log_end)
    if spec.kind == "to_timestamp":
        found = by_timestamp or {}
        return {tp: found[tp] if found.get(tp, -1) >= 0 else log_end[tp] for tp in parts}
    if spec.kind == "from_file":
        return clamp(dict(from_file or {}), log_start, log_end)
    raise ValueError(f"unknown reset scenario {spec.kind}")


# -- pure helpers: output --------------------------------------------------------------------------
@dataclass(frozen=True)
class OffsetRow:
    """One line of --describe --offsets (Kafka's PartitionAssignmentState)."""

    group: str
    topic: str | None
    partition: int | None
    offset: int | None
    log_end: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None
    leader_epoch: int | None = None

    @property
    def lag(self) -> int | None:
        return lag(self.offset, self.log_end)


def _s(v: object) -> str:
    return MISSING if v is None else str(v)


def _row(widths: Sequence[int], cells: Sequence[object]) -> str:
    """Java's "%-Ns %-Ms ... %s": left-justified columns, the last one unpadded."""
    parts = [f"{_s(c):<{w}}" for w, c in zip(widths, cells[:-1], strict=False)]
    return " ".join([*parts, _s(cells[-1])])


def format_offsets(rows: Sequence[OffsetRow], verbose: bool = False) -> str:
    """The --describe --offsets table (header first; no surrounding blank lines)."""
    g = max([15, *(len(r.group) for r in rows)])
    t = max([15, *(len(_s(r.topic)) for r in rows)])
    c = max([15, *(len(_s(r.consumer_id)) for r in rows)])
    h = max([15, *(len(_s(r.host)) for r in rows)])
    if verbose:
        widths = [g, t, 10, 15, 15, 15, 15, c, h]
        head = ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET",
                "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        body = [[r.group, r.topic, r.partition, r.leader_epoch, r.offset, r.log_end, r.lag,
                 r.consumer_id, r.host, r.client_id] for r in rows]
    else:
        widths = [g, t, 10, 15, 15, 15, c, h]
        head = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                "CONSUMER-ID", "HOST", "CLIENT-ID"]
        body = [[r.group, r.topic, r.partition, r.offset, r.log_end, r.lag, r.consumer_id,
                 r.host, r.client_id] for r in rows]
    return "\n".join(_row(widths, cells) for cells in [head, *body])


def assignment_string(partitions: Iterable[Any]) -> str:
    """Kafka's "t1:0,1;t2:0" (topics sorted, partitions sorted)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return ";".join(f"{t}:" + ",".join(map(str, sorted(ps))) for t, ps in sorted(by_topic.items()))


@dataclass(frozen=True)
class MemberRow:
    group: str
    consumer_id: str
    group_instance_id: str
    host: str
    client_id: str
    assignment: tuple[TopicPartition, ...]


def format_members(rows: Sequence[MemberRow], verbose: bool = False) -> str:
    g = max([15, *(len(r.group) for r in rows)])
    c = max([15, *(len(r.consumer_id) for r in rows)])
    gi = max([17, *(len(r.group_instance_id) for r in rows)])
    h = max([15, *(len(r.host) for r in rows)])
    cl = max([15, *(len(r.client_id) for r in rows)])
    with_instance = any(r.group_instance_id for r in rows)
    assignments = [assignment_string(r.assignment) or MISSING for r in rows]
    a = max([20, *(len(s) for s in assignments)])
    head: list[object] = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if with_instance
                                                    else []), "HOST", "CLIENT-ID", "#PARTITIONS"]
    widths = [g, c, *([gi] if with_instance else []), h, cl, 15]
    if verbose:
        head += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        widths += [15, a, 15, a]
    lines = []
    for cells in [head, *([r.group, r.consumer_id,
                           *([r.group_instance_id] if with_instance else []), r.host,
                           r.client_id, len(r.assignment),
                           *([MISSING, assignments[i], MISSING, MISSING] if verbose else [])]
                          for i, r in enumerate(rows))]:
        lines.append(" ".join(f"{_s(x):<{w}}" for w, x in zip(widths, cells, strict=True))
                     .rstrip())
    return "\n".join(lines)


def format_state(group: str, coordinator: str, strategy: str, state: str, members: int,
                 verbose: bool = False) -> str:
    """--describe --state; --verbose adds the epochs of KIP-848 groups ("-" for the classic
    groups of this ZooKeeper-era design)."""
    cw = max(25, len(coordinator))
    gw = max(15, len(group))
    if verbose:
        return "\n".join(_row([gw, cw, 20, 20, 15, 25, 0], cells) for cells in (
            ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
             "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"],
            [group, coordinator, strategy or MISSING, state, MISSING, MISSING, members]))
    return "\n".join(_row([gw, cw, 20, 20, 0], cells) for cells in (
        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
        [group, coordinator, strategy or MISSING, state, members]))


def format_reset_plan(plan: Mapping[str, Mapping[Any, int]]) -> str:
    """GROUP TOPIC PARTITION NEW-OFFSET (Kafka's printOffsetsToReset); '' when nothing."""
    if not plan:
        return ""
    g = max([15, *(len(k) for k in plan)])
    t = max([15, *(len(topic) for a in plan.values() for topic, _ in a)])
    widths = [g, t, 10, 0]
    lines = [_row(widths, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"])]
    for group, assignment in plan.items():
        for (topic, partition), offset in sorted(assignment.items()):
            lines.append(_row(widths, [group, topic, partition, offset]))
    return "\n".join(lines)


def format_group_listing(listings: Sequence[tuple[str, str]]) -> str:
    """--list --state: GROUP and STATE columns."""
    g = max([15, *(len(gid) for gid, _ in listings)]) + 10
    return "\n".join(f"{gid:<{g}} {state:<20}".rstrip()
                     for gid, state in [("GROUP", "STATE"), *listings])


def export_csv(plan: Mapping[str, Mapping[Any, int]], single_group: bool) -> str:
    return "".join((f"{t},{p},{o}\n" if single_group else f"{g},{t},{p},{o}\n")
                   for g, a in plan.items() for (t, p), o in sorted(a.items()))


# -- the command ----------------------------------------------------------------------------------
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_offset", "shift_by", "to_datetime", "by_duration", "to_earliest", "to_latest",
             "to_current", "from_file")


def _opt(name: str) -> str:
    return f"[{name.replace('_', '-')}]"


def _used(args: argparse.Namespace, name: str) -> bool:
    v = getattr(args, name)
    return v is not None and v is not False and v != []


def check_args(args: argparse.Namespace) -> None:
    """Kafka's ConsumerGroupCommandOptions.checkArgs, messages included."""
    actions = [a for a in ACTIONS if _used(args, a)]
    if len(actions) != 1:
        raise ToolError("Command must include exactly one action: --list, --describe, --delete, "
                        "--reset-offsets, --delete-offsets")
    action = actions[0]
    if not args.bootstrap_server:
        raise ToolError(f'Missing required argument "{_opt("bootstrap_server")}"')
    scope = "[group], [all-groups]"
    if action == "describe":
        if not args.group and not args.all_groups:
            raise ToolError(f"Option [describe] takes one of these options: {scope}")
        if sum(bool(x) for x in (args.members, args.offsets, args.state is not None)) > 1:
            raise ToolError("Option [describe] takes at most one of these options: [members], "
                            "[offsets], [state]")
        if args.state:
            raise ToolError("Option [describe] does not take a value for [state]")
    elif args.members or args.offsets or args.verbose:
        name = "members" if args.members else "offsets" if args.offsets else "verbose"
        raise ToolError(f'Option "{_opt(name)}" can only be used with option "[describe]"')
    if action != "list" and action != "describe" and args.state is not None:
        raise ToolError('Option "[state]" can only be used with options "[describe]", "[list]"')
    if action == "delete":
        if not args.group and not args.all_groups:
            raise ToolError(f"Option [delete] takes one of these options: {scope}")
        if args.topic:
            raise ToolError("The consumer does not support topic-specific offset deletion from "
                            "a consumer group.")
    if action == "delete_offsets" and (not args.group or not args.topic):
        raise ToolError("Option [delete-offsets] takes the following options: [group], [topic]")
    if action == "reset_offsets":
        if args.dry_run and args.execute:
            raise ToolError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
        if not args.group and not args.all_groups:
            raise ToolError(f"Option [reset-offsets] takes one of these options: {scope}")
        scenarios = [s for s in SCENARIOS if _used(args, s)]
        if len(scenarios) > 1:
            raise ToolError(f'Option "{_opt(scenarios[0])}" can\'t be used with option '
                            f'"{_opt(scenarios[1])}"')
        if not scenarios:
            raise ToolError("Option [reset-offsets] requires one of the following scenarios: "
                            + ", ".join(_opt(s) for s in SCENARIOS))
        if args.all_topics and args.topic:
            raise ToolError('Option "[all-topics]" can\'t be used with option "[topic]"')
        if not args.all_topics and not args.topic and not args.from_file:
            raise ToolError("One of the reset scopes should be defined: --all-topics, --topic.")
        if args.to_datetime is not None:  # bad values fail before connecting
            parse_datetime_ms(args.to_datetime)
        if args.by_duration is not None:
            parse_duration_ms(args.by_duration)
        for arg in args.topic:
            parse_topic_arg(arg)
    else:
        for s in (*SCENARIOS, "dry_run", "execute", "export", "all_topics"):
            if _used(args, s):
                raise ToolError(f'Option "{_opt(s)}" can only be used with option '
                                '"[reset-offsets]"')
    if args.group and args.all_groups:
        raise ToolError('Option "[group]" can\'t be used with option "[all-groups]"')
    if args.group and action == "list":
        raise ToolError('Option "[group]" can\'t be used with option "[list]"')
    if args.topic and action in ("list", "describe"):
        raise ToolError(f'Option "[topic]" can\'t be used with option "{_opt(action)}"')


def add_parser(subparsers: Subcommands) -> None:
    p = add_admin_command(subparsers, "consumer-groups", "list, describe, delete consumer "
                          "groups and reset their offsets (Kafka's kafka-consumer-groups)",
                          __doc__)
    p.add_argument("--timeout", type=int, default=5000,
                   help="ms to wait for group operations (default 5000)")
    for action, text in (("list", "List all consumer groups."),
                         ("describe", "Describe consumer group(s) and list offset lag."),
                         ("delete", "Delete consumer group(s) (inactive ones only)."),
                         ("reset-offsets", "Reset the offsets of a consumer group."),
                         ("delete-offsets", "Delete the offsets of a group for topics.")):
        p.add_argument(f"--{action}", action="store_true", help=text)
    p.add_argument("--group", action="append", default=[], help="the consumer group")
    p.add_argument("--all-groups", action="store_true", help="apply to all consumer groups")
    p.add_argument("--topic", action="append", default=[],
                   help="T or T:0,1 (reset-offsets, delete-offsets)")
    p.add_argument("--all-topics", action="store_true",
                   help="reset-offsets: every topic the group has offsets for")
    p.add_argument("--members", action="store_true", help="describe: the group's members")
    p.add_argument("--offsets", action="store_true",
                   help="describe: offsets and lag (the default)")
    p.add_argument("--verbose", action="store_true", help="describe: more columns")
    p.add_argument("--state", nargs="?", const="", default=None,
                   help="describe: the group's state; list: with states (filter: "
                   "comma-separated states)")
    p.add_argument("--dry-run", action="store_true", help="reset-offsets: only show (default)")
    p.add_argument("--execute", action="store_true", help="reset-offsets: do it")
    p.add_argument("--export", action="store_true", help="reset-offsets: print the plan as CSV")
    p.add_argument("--to-offset", type=int, help="reset to this offset")
    p.add_argument("--shift-by", type=int, help="move the committed offsets by N (+/-)")
    p.add_argument("--to-datetime", help="YYYY-MM-DDTHH:mm:SS.sss[zone]")
    p.add_argument("--by-duration", help="PnDTnHnMnS: that long before now")
    p.add_argument("--to-earliest", action="store_true", help="reset to the log start offset")
    p.add_argument("--to-latest", action="store_true", help="reset to the high watermark")
    p.add_argument("--to-current", action="store_true", help="reset to the committed offset")
    p.add_argument("--from-file", help="CSV: topic,partition,offset (or group,topic,...)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    return run_admin_command(
        args, check_args, run,
        lambda text: print_error(f"Executing consumer group command failed due to {text}"))


def print_error(msg: str) -> None:
    print(f"\nError: {msg}")


async def run(args: argparse.Namespace) -> int:
    overrides = {"default.api.timeout.ms": max(1, args.timeout)}
    admin = await open_admin(admin_config(args.bootstrap_server, args.command_config,
                                          overrides))
    try:
        if args.list:
            return await list_groups(admin, args)
        if args.describe:
            return await describe(admin, args)
        if args.delete:
            return await delete_groups(admin, args)
        if args.reset_offsets:
            return await reset_offsets(admin, args)
        return await delete_offsets(admin, args)
    finally:
        await admin.close()


async def consumer_group_ids(admin: AsyncAdmin) -> list[str]:
    return [g.group_id for g in await admin.list_groups()
            if g.protocol_type in CONSUMER_PROTOCOL_TYPES]


async def list_groups(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    listings = [g for g in await admin.list_groups()
                if g.protocol_type in CONSUMER_PROTOCOL_TYPES]
    if args.state is None:
        for g in listings:
            print(g.group_id)
        return 0
    wanted = parse_states(args.state) if args.state else set()
    rows = []
    for g in listings:
        state = g.state
        if state is None:  # ListGroups before v4 carries no state: ask the group
            state = (await admin.describe_groups([g.group_id]))[g.group_id].state
        if not wanted or state in wanted:
            rows.append((g.group_id, state))
    print(format_group_listing(rows))
    return 0


async def _group_ids(admin: AsyncAdmin, args: argparse.Namespace) -> list[str]:
    return await consumer_group_ids(admin) if args.all_groups else list(dict.fromkeys(args.group))


def _state_ok(group: str, state: str, rows: int) -> bool:
    """Kafka's shouldPrintMemberState: messages for dead, empty and rebalancing groups."""
    if state == "Dead":
        print_error(f"Consumer group '{group}' does not exist.")
        return False
    if state == "Empty":
        print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
    elif state in ("PreparingRebalance", "CompletingRebalance"):
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
    return rows > 0


async def log_offsets(admin: AsyncAdmin, partitions: Iterable[TopicPartition],
                      which: int) -> dict[TopicPartition, int]:
    """The offsets ListOffsets answers (EARLIEST, LATEST or a timestamp) of the partitions that
    have a leader; the others are left out."""
    parts = list(dict.fromkeys(partitions))
    if not parts:
        return {}
    md = await admin.client.refresh_metadata()
    wanted = [tp for tp in parts if md.leader(tp) is not None]  # deleted topics: unknown
    found = await admin.list_offsets(dict.fromkeys(wanted, which)) if wanted else {}
    return {tp: off for tp, (off, _ts) in found.items()}


async def collect_offsets(admin: AsyncAdmin, group: str, desc: GroupDescription
                          ) -> list[OffsetRow]:
    """Kafka's collectGroupsOffsets: members by number of partitions, then the committed
    partitions no member holds."""
    committed = await admin.list_consumer_group_offsets(group)
    members = sorted((m for m in desc.members if m.assignment),
                     key=lambda m: -len(m.assignment))
    assigned = {TopicPartition(*tp) for m in members for tp in m.assignment}
    all_parts = sorted(assigned | set(committed))
    ends = await log_offsets(admin, all_parts, LATEST)

    def row(tp: TopicPartition, cid: str | None, host: str | None, client: str | None
            ) -> OffsetRow:
        om = committed.get(tp)
        epoch = om.leader_epoch if om is not None and om.leader_epoch >= 0 else None
        return OffsetRow(group, tp.topic, tp.partition, om.offset if om is not None else None,
                         ends.get(tp), cid, host, client, epoch)

    rows = []
    for m in members:
        for tp in sorted(TopicPartition(*x) for x in m.assignment):
            rows.append(row(tp, m.member_id, m.client_host, m.client_id))
    for tp in sorted(set(committed) - assigned):
        rows.append(row(tp, MISSING, MISSING, MISSING))
    return rows


async def describe(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    groups = await _group_ids(admin, args)
    status = 0
    for group in sorted(groups):
        desc = (await admin.describe_groups([group]))[group]
        if args.state is not None:
            if _state_ok(group, desc.state, 1):
                b = await admin.find_coordinator(group)
                print("\n" + format_state(group, f"{b.host}:{b.port}  ({b.node_id})",
                                          desc.protocol, desc.state, len(desc.members),
                                          args.verbose))
            status |= desc.state == "Dead"
        elif args.members:
            rows = [MemberRow(group, m.member_id, m.group_instance_id or "", m.client_host,
                              m.client_id, tuple(m.assignment))
                    for m in desc.members]
            if _state_ok(group, desc.state, len(rows)):
                print("\n" + format_members(rows, args.verbose))
            status |= desc.state == "Dead"
        else:
            rows = [] if desc.state == "Dead" else await collect_offsets(admin, group, desc)
            if _state_ok(group, desc.state, len(rows)):
                print("\n" + format_offsets(rows, args.verbose) + "\n")
            status |= desc.state == "Dead"
    return int(bool(status))


async def delete_groups(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    groups = await _group_ids(admin, args)
    results = await admin.delete_groups(groups, raise_errors=False)
    ok = [g for g in groups if results.get(g) is None]
    failed = {g: e for g in groups if (e := results.get(g)) is not None}
    quoted = ", ".join(f"'{g}'" for g in ok)
    if not failed:
        print(f"Deletion of requested consumer groups ({quoted}) was successful.")
        return 0
    print_error("Deletion of some consumer groups failed:")
    for g, err in failed.items():
        print(f"* Group '{g}' could not be deleted due to: {java_error(err)}")
    if ok:
        print(f"\nThese consumer groups were deleted successfully: {quoted}")
    return 1


async def _partitions_of(admin: AsyncAdmin, topic_args: Iterable[str]) -> list[TopicPartition]:
    explicit: list[TopicPartition] = []
    whole: list[str] = []
    for arg in topic_args:
        topic, parts = parse_topic_arg(arg)
        if parts is None:
            whole.append(topic)
        else:
            explicit.extend(TopicPartition(topic, p) for p in parts)
    if whole:
        for name, d in (await admin.describe_topics(whole)).items():
            explicit.extend(TopicPartition(name, p.partition) for p in d.partitions)
    return list(dict.fromkeys(explicit))


async def _check_partitions(admin: AsyncAdmin, partitions: Sequence[TopicPartition]) -> None:
    """Kafka's checkAllTopicPartitionsValid: every partition exists and has a leader."""
    from ..client.errors import KafkaError

    topics = sorted({tp.topic for tp in partitions})
    md = await admin.client.refresh_metadata()
    existing = {(t, p) for t in topics if (tm := md.topics.get(t)) is not None
                and tm.error == 0 for p in tm.partitions}
    missing = [tp for tp in partitions if (tp.topic, tp.partition) not in existing]
    if missing:
        raise KafkaError.for_code(3, "The partitions \"" + ",".join(map(str, missing))
                                  + "\" do not exist")
    leaderless = [tp for tp in partitions if (leader := md.leader(tp)) is None or leader < 0]
    if leaderless:
        raise KafkaError.for_code(5, "The partitions \"" + ",".join(map(str, leaderless))
                                  + "\" have no leader")


def _scenario(args: argparse.Namespace, now_ms: Callable[[], int]) -> ResetSpec:
    if args.to_offset is not None:
        return ResetSpec("to_offset", args.to_offset)
    if args.shift_by is not None:
        return ResetSpec("shift_by", args.shift_by)
    if args.to_datetime is not None:
        return ResetSpec("to_timestamp", parse_datetime_ms(args.to_datetime))
    if args.by_duration is not None:
        return ResetSpec("to_timestamp", now_ms() - parse_duration_ms(args.by_duration))
    if args.from_file is not None:
        return ResetSpec("from_file")
    for kind in ("to_earliest", "to_latest", "to_current"):
        if getattr(args, kind):
            return ResetSpec(kind)
    raise ToolError("no reset scenario")  # check_args prevents this


async def reset_offsets(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    if not args.dry_run and not args.execute:
        print("WARN: No action will be performed as the --execute option is missing. In a "
              "future major release, the default behavior of this command will be to prompt "
              "the user before executing the reset rather than doing a dry run. You should add "
              "the --dry-run option explicitly if you are scripting this command and want to "
              "keep the current default behavior without prompting.", file=sys.stderr)
    spec = _scenario(args, lambda: int(time.time() * 1000))
    file_plan: dict[str, dict[TopicPartition, int]] = {}
    if spec.kind == "from_file":
        file_plan = parse_reset_plan(read_input_file(args.from_file, "--from-file"), args.group)
    groups = await _group_ids(admin, args)
    plan: dict[str, dict[TopicPartition, int]] = {}
    status = 0
    for group in groups:
        state = (await admin.describe_groups([group]))[group].state
        if state not in ("Empty", "Dead"):
            print_error(f"Assignments can only be reset if the group '{group}' is inactive, "
                        f"but the current state is {state}.")
            plan[group] = {}
            status = 1
            continue
        committed = {tp: om.offset
                     for tp, om in (await admin.list_consumer_group_offsets(group)).items()}
        from_file: dict[TopicPartition, int] = {}
        if spec.kind == "from_file":
            if group not in file_plan:
                print_error(f"No reset plan for group {group} found.")
                plan[group] = {}
                status = 1
                continue
            from_file = file_plan[group]
            partitions = list(from_file)
        elif args.all_topics:
            partitions = sorted(committed)
        else:
            partitions = await _partitions_of(admin, args.topic)
        if not partitions:
            plan[group] = {}
            continue
        await _check_partitions(admin, partitions)
        starts = await log_offsets(admin, partitions, EARLIEST)
        ends = await log_offsets(admin, partitions, LATEST)
        by_time: dict[TopicPartition, int] = {}
        if spec.kind == "to_timestamp":
            found = await admin.list_offsets(dict.fromkeys(partitions, spec.value))
            by_time = {tp: off for tp, (off, _ts) in found.items()}
            for tp in partitions:
                if by_time.get(tp, -1) < 0:
                    print(f"\nWarn: Partition {tp.partition} from topic {tp.topic} is empty. "
                          "Falling back to latest known offset.")
        new = plan_reset(spec, partitions, committed, starts, ends, by_time, from_file)
        if args.execute:
            await admin.alter_consumer_group_offsets(group, new)
        plan[group] = new
    if args.export:
        print(export_csv(plan, len(args.group) == 1), end="")
    else:
        text = format_reset_plan({g: a for g, a in plan.items()})
        print(("\n" + text) if text else "")
    return status


async def delete_offsets(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    from ..client.errors import KafkaError
    group = args.group[0]
    results: dict[TopicPartition, KafkaError | None] = {}
    partitions: list[TopicPartition] = []
    explicit = [a for a in args.topic if ":" in a]
    for name in (a for a in args.topic if ":" not in a):
        try:
            partitions.extend(await _partitions_of(admin, [name]))
        except KafkaError as exc:  # reported per topic, as Kafka does
            results[TopicPartition(name, -1)] = exc
    partitions.extend(await _partitions_of(admin, explicit))
    top: KafkaError | None = None
    if partitions:
        top, per_partition = await admin.delete_consumer_group_offsets(group, partitions)
        results.update(per_partition)
        if top is not None:
            results.update({tp: top for tp in partitions if tp not in per_partition})
    first = top or next((e for e in results.values() if e is not None), None)
    if first is None:
        print(f"Request succeeded for deleting offsets from group {group}.")
    elif first.name in ("invalid_group_id", "group_id_not_found", "group_authorization_failed",
                        "non_empty_group"):
        print_error(error_message(first))
    elif first.name in ("group_subscribed_to_topic", "topic_authorization_failed",
                        "unknown_topic_or_partition"):
        print_error("Encountered some partition-level error, see the follow-up details.")
    else:
        print_error(f"Encountered some unknown error: {first.name.upper()}")
    width = max([15, *(len(tp.topic) for tp in results)])
    print()
    print(f"{'TOPIC':<{width}} {'PARTITION':<10} {'STATUS':<15}".rstrip())
    for tp, err in sorted(results.items()):
        status = "Successful" if err is None else f"Error: {error_message(err)}"
        print(f"{tp.topic:<{width}} {(tp.partition if tp.partition >= 0 else MISSING)!s:<10} "
              f"{status}")
    return 0 if first is None else 1
