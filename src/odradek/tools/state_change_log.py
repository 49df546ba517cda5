"""`odradek state-change-log` (Kafka's StateChangeLogMerger, S-6.5): merge the brokers'
`state-change.log` files in time order, filtered by time range, topic and partitions.

    odradek state-change-log --logs DIR|FILE[,...] [--logs-regex REGEX]
        [--start-time "yyyy-MM-dd HH:mm:ss,SSS"] [--end-time ...] [--topic T [--partitions 0,1]]
        [--engine local|spark] [--output DIR] [--master local[*]] [--plot FILE.svg]

`--logs` takes files and directories (searched recursively for `state-change.log*`, rotated
files included). Each output line is the original line prefixed with its source (the broker
directory and file name) as `<source>: <line>`.

Two engines share the parsing and filtering functions below:

* `local` (default): a streaming k-way merge (`heapq.merge` over one lazy reader per file), so
  memory stays at one line per file whatever the logs weigh.
* `spark`: the same filter and order as a Spark job (text files -> parse -> filter -> sort by
  time, file, line), for clusters whose logs outgrow one machine; prints on stdout, or writes
  text files under `--output DIR`.

Ties (the same millisecond in two files) go to the file that comes first in the sorted list of
inputs, then by line order, in both engines, so both print the same lines in the same order.
Lines without a timestamp (stack traces) are skipped, and lines naming no partition are kept
only when no --topic is given, as Kafka's merger does.

`--plot FILE.svg` (local engine) also draws the merged lines as a timeline (`odradek.common.plot`):
one lane per partition (the first 40 by name; the title says when there were more), spans
coloured by the leader while the partition is online and by the controller's partition state
(NewPartition, OfflinePartition, NonExistentPartition) otherwise, replica state changes as
ticks. Under it, a second timeline gives each partition's ISR size over time ("ISR 3",
"ISR 2", ...) and its offline periods (no leader: leader -1 or OfflinePartition), so that a
shrunken ISR or an outage is seen at a glance.

The faults injected into the cluster (common/fault_log: `--faults FILE`, or a `faults.log`
found beside the logs given, in their directory or up to three directories above, as a chaos
run leaves it) are drawn on both: a lane per fault target (spans coloured by the kind of
fault: kill, pause, partition, ...) and each fault shaded across every partition, so that
what happened to a partition is seen next to why.
"""

from __future__ import annotations

import argparse
import datetime
import heapq
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common import TopicPartition
from ..common.fault_log import FAULT_LOG_NAME, FaultEvent, fault_spans, read_fault_events
from ..common.state_change import LINE_RE, PARTITION_RE
from .command import Subcommands, ToolError, prefixed, run_tool

TIME_FORMAT = "%Y-%m-%d %H:%M:%S,%f"  # Kafka's "yyyy-MM-dd HH:mm:ss,SSS"
LOG_NAME = "state-change.log"
DEFAULT_LOGS_REGEX = r"state-change\.log.*"


def bad_input(message: str) -> ToolError:
    """Bad arguments (unparseable times, a --partitions list without --topic, no input files),
    unreadable files or a missing pyspark: printed on stderr, exit status 2."""
    return ToolError(message, exit_code=2)


def parse_time(text: str) -> str:
    """Validate a "yyyy-MM-dd HH:mm:ss,SSS" time and return it in canonical form (the fixed
    width makes string order time order)."""
    try:
        t = datetime.datetime.strptime(text.strip(), TIME_FORMAT)
    except ValueError:
        raise bad_input(
            f"{text!r} is not a time in the format yyyy-MM-dd HH:mm:ss,SSS "
            "(e.g. 2026-11-21 23:38:44,309)") from None
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"


@dataclass(frozen=True, slots=True)
class Criteria:
    """What to keep: start <= time <= end, and (with `topic`) lines about that topic's
    partitions (all of them, or those in `partitions`)."""

    start: str = "0000-01-01 00:00:00,000"
    end: str = "9999-12-31 23:59:59,999"
    topic: str | None = None
    partitions: frozenset[int] = frozenset()


def make_criteria(start: str | None = None, end: str | None = None, topic: str | None = None,
                  partitions: str | None = None) -> Criteria:
    """Criteria from the tool's string arguments; raises ToolError on bad input."""
    parts: frozenset[int] = frozenset()
    if partitions:
        if not topic:
            raise bad_input("--partitions needs --topic")
        try:
            parts = frozenset(int(p) for p in partitions.split(",") if p.strip())
        except ValueError:
            raise bad_input(
                f"--partitions expects comma-separated partition numbers, got {partitions!r}"
            ) from None
    c = Criteria(topic=topic or None, partitions=parts)
    if start:
        c = Criteria(parse_time(start), c.end, c.topic, c.partitions)
    if end:
        c = Criteria(c.start, parse_time(end), c.topic, c.partitions)
    if c.start > c.end:
        raise bad_input(f"--start-time {c.start} is after --end-time {c.end}")
    return c


def line_time(line: str) -> str | None:
    """The timestamp of a state-change.log line, None for anything else."""
    m = LINE_RE.match(line)
    return m.group("time") if m else None


def keep(line: str, time: str, criteria: Criteria) -> bool:
    """Kafka's merger filter, for a line whose time is `time`."""
    if not criteria.start <= time <= criteria.end:
        return False
    if criteria.topic is None:
        return True
    m = PARTITION_RE.search(line)
    if m is None or m.group("topic") != criteria.topic:
        return False
    return not criteria.partitions or int(m.group("partition")) in criteria.partitions


def select(lines: Iterable[str], criteria: Criteria) -> Iterator[tuple[str, str]]:
    """(time, line) for the lines of one file that pass `criteria`, in file order."""
    for raw in lines:
        line = raw.rstrip("\r\n")
        time = line_time(line)
        if time is not None and keep(line, time, criteria):
            yield time, line


def merge(sources: Sequence[tuple[str, Iterable[str]]], criteria: Criteria
          ) -> Iterator[str]:
    """The k-way merge: `sources` are (label, lines) in tie-break order; yields
    "<label>: <line>" in time order. Each source is read lazily, one line at a time."""
    streams = [_labelled(label, select(lines, criteria)) for label, lines in sources]
    for _, line in heapq.merge(*streams, key=lambda item: item[0]):
        yield line


def _labelled(label: str, selected: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    for time, line in selected:
        yield time, f"{label}: {line}"


# -- finding the files -------------------------------------------------------------------------


def find_logs(inputs: Sequence[str], logs_regex: str | None = None) -> list[Path]:
    """Files named by `inputs` (a directory is searched recursively for files whose name
    matches `logs_regex`, default state-change.log*), sorted by path, without duplicates."""
    try:
        name_re = re.compile(logs_regex or DEFAULT_LOGS_REGEX)
    except re.error as exc:
        raise bad_input(f"--logs-regex {logs_regex!r} is not a valid regex: {exc}"
                              ) from None
    found: set[Path] = set()
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found.update(f for f in p.rglob("*") if f.is_file() and name_re.fullmatch(f.name))
        elif p.is_file():
            found.add(p)
        else:
            raise bad_input(f"{item} is neither a file nor a directory")
    if not found:
        raise bad_input(f"no state change log files in {', '.join(inputs)}")
    return sorted(found, key=_rotation_key)


def _rotation_key(p: Path) -> tuple[str, int, str]:
    """Sort by directory, then rotated files (state-change.log.2, .1) before the live one."""
    suffix = p.name[len(LOG_NAME) + 1:] if p.name.startswith(LOG_NAME + ".") else ""
    rank = -int(suffix) if suffix.isdigit() else (0 if p.name == LOG_NAME else -(10**9))
    return (str(p.parent), rank, p.name)


def source_label(path: Path) -> str:
    """What prefixes a file's lines: its directory and file name (broker-0/state-change.log)."""
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8", errors="replace") as f:
        yield from f


def merge_local(files: Sequence[Path], criteria: Criteria) -> Iterator[str]:
    return merge([(source_label(p), _lines(p)) for p in files], criteria)


# -- Spark ------------------------------------------------------------------------------------


def uri_path(uri: str) -> str:
    """The local path of a file URI as Spark's input_file_name() gives it (file:/a, file:///a)."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def _spark_rows(criteria: Criteria, labels: dict[str, tuple[int, str]]) -> Any:
    """A picklable per-row function for the Spark job: the same select() as the local merge."""
    def parse(row: Any) -> list[tuple[str, int, int, str]]:
        path = uri_path(row.source)
        index, label = labels.get(path, (len(labels), path))
        return [(time, index, row.id, f"{label}: {line}")
                for time, line in select([row.value], criteria)]
    return parse


def merge_spark(spark: Any, files: Sequence[Path], criteria: Criteria) -> Any:
    """The merge as a Spark job; returns a DataFrame with one column `line`, sorted by (time,
    input file, line order)."""
    from pyspark.sql import functions as F

    resolved = [p.resolve() for p in files]
    df = (spark.read.text([str(p) for p in resolved])
          .withColumn("source", F.input_file_name())
          .withColumn("id", F.monotonically_increasing_id()))
    labels = {str(r): (i, source_label(p)) for i, (p, r) in enumerate(zip(files, resolved,
                                                                          strict=True))}
    rows = df.rdd.flatMap(_spark_rows(criteria, labels))
    ordered = rows.sortBy(lambda r: (r[0], r[1], r[2]))
    return spark.createDataFrame(ordered.map(lambda r: (r[3],)), schema="line string")


def run_spark(files: Sequence[Path], criteria: Criteria, output: str | None, master: str
              ) -> int:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise bad_input("--engine spark needs pyspark (pip install 'odradek[spark]')") from None
    existing = SparkSession.getActiveSession()
    spark = existing or (SparkSession.builder.master(master)
                         .appName("odradek-state-change-log")
                         .config("spark.ui.enabled", "false").getOrCreate())
    try:
        df = merge_spark(spark, files, criteria)
        if output:
            df.coalesce(1).write.mode("overwrite").text(output)
            print(f"Merged lines written to {output}", file=sys.stderr)
        else:
            for row in df.toLocalIterator():
                sys.stdout.write(row.line + "\n")
    finally:
        if existing is None:
            spark.stop()
    return 0


# -- --plot: partition state over time ----------------------------------------------------------

MAX_LANES = 40
_EPOCH = datetime.datetime(1970, 1, 1)
# Fixed colours for the states; leaders ("leader 2") take the plot palette's other colours.
STATE_COLOURS = {"NewPartition": "#B0B0B0", "OfflinePartition": "#D55E00",
                 "NonExistentPartition": "#606060", "OfflineReplica": "#000000"}
_SOURCE_RE = re.compile(r"^(?:(?P<source>.*?): )?(?=\[\d{4}-\d\d-\d\d )")
_PARTITION_CHANGE_RE = re.compile(r"^Changed partition \S+ state from (?P<before>\w+) to "
                                  r"(?P<after>\w+)")
_REPLICA_CHANGE_RE = re.compile(r"^Changed state of replica (?P<replica>-?\d+) for partition "
                                r"\S+ from (?P<before>\w+) to (?P<after>\w+)")
_LEADER_RE = re.compile(r"\bleader=(?P<leader>-?\d+)")
# The ISR a line states: "isr=[0,1,2]" / "isr=[0, 1, 2]" (controller and LeaderAndIsr lines),
# or the partition leader's committed change "ISR of partition t-0 updated to 0,2,1 and ...".
# ("Shrinking/Expanding ISR ... from a to b" are proposals, which may be refused: not taken.)
_ISR_RE = re.compile(r"\bisr=\[(?P<isr>[\d, ]*)\]|ISR of partition \S+ updated to "
                     r"(?P<updated>[\d,]*) and")


@dataclass(frozen=True, slots=True)
class Change:
    """What one state-change.log line says about one partition: the controller's new partition
    state (`state`), a replica's new state (`replica_state`), and/or the leader it names."""

    time: str
    partition: TopicPartition
    state: str | None = None
    leader: int | None = None
    replica_state: str | None = None
    isr: tuple[int, ...] | None = None  # the ISR the line states, if it states one


def _parse_isr(message: str) -> tuple[int, ...] | None:
    m = _ISR_RE.search(message)
    if m is None:
        return None
    text = m.group("isr") if m.group("isr") is not None else m.group("updated")
    return tuple(int(x) for x in re.split(r"[,\s]+", text) if x)


def parse_change(line: str) -> Change | None:
    """The state change in a (merged, "<source>: "-prefixed, or raw) line; None for lines about
    no partition or saying nothing about its state or leader."""
    m = _SOURCE_RE.match(line)
    if m is None:
        return None
    parsed = LINE_RE.match(line[m.end():])
    if parsed is None:
        return None
    message = parsed.group("message")
    part = PARTITION_RE.search(message)
    if part is None:
        return None
    tp = TopicPartition(part.group("topic"), int(part.group("partition")))
    time = parsed.group("time")
    replica = _REPLICA_CHANGE_RE.match(message)
    if replica is not None:
        return Change(time, tp, replica_state=replica.group("after"))
    leader_m = _LEADER_RE.search(message)
    leader = int(leader_m.group("leader")) if leader_m else None
    isr = _parse_isr(message)
    change = _PARTITION_CHANGE_RE.match(message)
    if change is not None and parsed.group("actor") == "Controller":
        return Change(time, tp, state=change.group("after"), leader=leader, isr=isr)
    if change is not None and leader is not None:  # a broker's LeaderAndIsr: leader only
        return Change(time, tp, leader=leader, isr=isr)
    if isr is not None:  # an ISR change, a LeaderAndIsr request sent: the ISR only
        return Change(time, tp, isr=isr)
    return None


def _span_label(state: str | None, leader: int | None) -> str | None:
    """What a span shows: the leader while the partition is online (or its state unknown),
    the partition state otherwise."""
    if leader is not None and leader >= 0 and state in (None, "OnlinePartition"):
        return f"leader {leader}"
    if leader is not None and leader < 0 and state in (None, "OnlinePartition"):
        return "OfflinePartition"  # no leader (-1): offline, whatever the state says
    return state


def _seconds(time: str) -> float:
    # naive local times, as the logs write them: differences only, no time zone involved
    return (datetime.datetime.strptime(time, TIME_FORMAT) - _EPOCH).total_seconds()


def timeline_rows(changes: Iterable[Change], max_lanes: int = MAX_LANES
                  ) -> tuple[dict[str, list[tuple[float, float, str]]], int, str | None]:
    """Lanes for `plot.timeline` from changes in time order: per partition, spans (seconds
    since the first change) labelled by `_span_label`, each closed by the next change of label
    or by the last change overall; replica state changes become zero-length spans (ticks).
    Returns (the first `max_lanes` partitions by name, how many partitions there were, the
    time of the first change)."""
    current: dict[TopicPartition, tuple[str | None, int | None]] = {}
    opened: dict[TopicPartition, tuple[float, str]] = {}
    spans: dict[TopicPartition, list[tuple[float, float, str]]] = {}
    first: str | None = None
    t0 = now = 0.0
    for c in changes:
        if first is None:
            first, t0 = c.time, _seconds(c.time)
        now = _seconds(c.time) - t0
        lane = spans.setdefault(c.partition, [])
        if c.replica_state is not None:
            lane.append((now, now, c.replica_state))
            continue
        state, leader = current.get(c.partition, (None, None))
        if c.state is not None:
            state = c.state
            if state in ("NonExistentPartition", "NewPartition", "OfflinePartition"):
                leader = None
        if c.leader is not None:
            leader = c.leader
        current[c.partition] = (state, leader)
        label = _span_label(state, leader)
        previous = opened.get(c.partition)
        if previous is not None and previous[1] == label:
            continue
        if previous is not None and now > previous[0]:  # same-millisecond states are dropped
            lane.append((previous[0], now, previous[1]))
        if label is None:
            opened.pop(c.partition, None)
        else:
            opened[c.partition] = (now, label)
    for tp, (start, label) in opened.items():
        spans[tp].append((start, max(now, start), label))
    names = sorted(spans)
    rows = {f"{t}-{p}": sorted(spans[(t, p)], key=lambda s: (s[0], s[1] == s[0]))
            for t, p in names[:max_lanes]}
    return rows, len(names), first


def _name(tp: TopicPartition) -> str:
    """Kafka's topic-partition form: str(tp), for plain (topic, partition) pairs as well."""
    topic, partition = tp
    return f"{topic}-{partition}"


def is_offline(state: str | None, leader: int | None) -> bool:
    """No leader: the controller's OfflinePartition, or a leader of -1 (none of the ISR
    left to lead, unclean election off)."""
    return state == "OfflinePartition" or (leader is not None and leader < 0)


def isr_series(changes: Iterable[Change]) -> dict[str, list[tuple[float, int]]]:
    """Per partition ("t-0"), its ISR size over time as (seconds since the first change,
    size) points, one each time the size changes."""
    out: dict[str, list[tuple[float, int]]] = {}
    t0: float | None = None
    for c in changes:
        t0 = _seconds(c.time) if t0 is None else t0
        if c.isr is None:
            continue
        points = out.setdefault(_name(c.partition), [])
        if not points or points[-1][1] != len(c.isr):
            points.append((_seconds(c.time) - t0, len(c.isr)))
    return out


def offline_periods(changes: Iterable[Change]) -> dict[str, list[tuple[float, float]]]:
    """Per partition, the (start, end) periods (seconds since the first change) it had no
    leader; a period still open at the last change ends there."""
    out: dict[str, list[tuple[float, float]]] = {}
    state: dict[TopicPartition, tuple[str | None, int | None]] = {}
    since: dict[TopicPartition, float] = {}
    t0: float | None = None
    now = 0.0
    for c in changes:
        t0 = _seconds(c.time) if t0 is None else t0
        now = _seconds(c.time) - t0
        if c.state is None and c.leader is None:
            continue
        before_state, before_leader = state.get(c.partition, (None, None))
        new_state = c.state if c.state is not None else before_state
        new_leader = c.leader if c.leader is not None else before_leader
        if c.state in ("OfflinePartition", "NewPartition", "NonExistentPartition"):
            new_leader = c.leader  # the leader is gone with the state (or not yet there)
        state[c.partition] = (new_state, new_leader)
        off = is_offline(new_state, new_leader)
        if off and c.partition not in since:
            since[c.partition] = now
        elif not off and c.partition in since:
            out.setdefault(_name(c.partition), []).append((since.pop(c.partition), now))
    for tp, start in since.items():
        out.setdefault(_name(tp), []).append((start, now))
    for periods in out.values():
        periods.sort()
    return out


def isr_rows(changes: Sequence[Change], max_lanes: int = MAX_LANES
             ) -> dict[str, list[tuple[float, float, str]]]:
    """Lanes for `plot.timeline`: per partition, spans "ISR <size>" from each ISR change to
    the next (the last to the last change), with the offline periods over them."""
    series = isr_series(changes)
    offline = offline_periods(changes)
    end = (_seconds(changes[-1].time) - _seconds(changes[0].time)) if changes else 0.0
    rows: dict[str, list[tuple[float, float, str]]] = {}
    names = sorted({_name(c.partition) for c in changes},
                   key=lambda n: (n.rpartition("-")[0], int(n.rpartition("-")[2])))
    for name in names[:max_lanes]:
        points = series.get(name, [])
        lane = [(t, nxt[0] if nxt else end, f"ISR {size}")
                for (t, size), nxt in zip(points, [*points[1:], None], strict=True)]
        lane = [s for s in lane if s[1] > s[0]]
        lane.extend((a, b, "offline") for a, b in offline.get(name, []) if b >= a)
        rows[name] = lane
    return rows


def fault_rows(events: Iterable[FaultEvent], t0_epoch: float, end: float
               ) -> tuple[dict[str, list[tuple[float, float, str]]],
                          list[tuple[float, float, str]]]:
    """The faults (epoch times) on the plot's time axis (seconds since `t0_epoch`): a lane per
    target ("fault broker-1") with spans named by kind, and the bands to shade (start, end,
    "kind targets"); a fault still active at the end lasts to `end`."""
    from ..common.fault_log import fault_label

    lanes: dict[str, list[tuple[float, float, str]]] = {}
    bands: list[tuple[float, float, str]] = []
    for s in fault_spans(events):
        a = s.start - t0_epoch
        b = (s.end if s.end is not None else t0_epoch + end) - t0_epoch
        bands.append((a, b, fault_label(s)))
        for target in s.targets or ("cluster",):
            lanes.setdefault(f"fault {target}", []).append((a, b, s.kind))
    return dict(sorted(lanes.items())), bands


def epoch_seconds(time: str) -> float:
    """A log time (naive, the brokers' local time) as seconds since the epoch."""
    return datetime.datetime.strptime(time, TIME_FORMAT).timestamp()


ISR_COLOURS = {"offline": "#D55E00", "ISR 1": "#E69F00", "ISR 2": "#56B4E9",
               "ISR 3": "#009E73", "ISR 4": "#0072B2", "ISR 5": "#0072B2"}
FAULT_COLOURS = {"kill": "#B22222", "pause": "#CC79A7", "controlled-shutdown": "#7F7F7F",
                 "partition": "#8C564B", "isolate": "#8C564B", "restart": "#BCBD22"}


def state_change_plot(changes: Iterable[Change], max_lanes: int = MAX_LANES,
                      faults: Iterable[FaultEvent] = ()) -> str:
    """The SVG timeline of the partitions' states and leaders (`--plot`), with their ISR sizes
    and offline periods under it when the lines state ISRs; `faults` (the events of a fault
    log) are drawn on both."""
    from ..common.plot import stack, timeline

    changes = list(changes)
    rows, total, first = timeline_rows(changes, max_lanes)
    title = "Partition state and leader over time"
    if total > len(rows):
        title += f" (first {len(rows)} of {total} partitions)"
    x_label = f"seconds since {first}" if first else "seconds"
    events = list(faults)
    lanes: dict[str, list[tuple[float, float, str]]] = {}
    bands: list[tuple[float, float, str]] = []
    if events and first is not None:
        end = _seconds(changes[-1].time) - _seconds(first)
        lanes, bands = fault_rows(events, epoch_seconds(first), end)
    colours = {**FAULT_COLOURS, **STATE_COLOURS}
    states = timeline({**lanes, **rows}, title=title, x_label=x_label, colours=colours,
                      bands=bands)
    if not any(c.isr is not None for c in changes):
        return states
    isr_title = "ISR size and offline periods" + (
        f" (first {len(rows)} of {total} partitions)" if total > len(rows) else "")
    isr = timeline({**lanes, **isr_rows(changes, max_lanes)}, title=isr_title,
                   x_label=x_label, colours={**FAULT_COLOURS, **ISR_COLOURS}, bands=bands)
    return stack([states, isr])


def faults_beside(inputs: Sequence[str]) -> Path | None:
    """A faults.log in the directory of a --logs input (or the input directory itself), or up
    to three directories above it: where a chaos run leaves it."""
    for item in inputs:
        p = Path(item).resolve()
        start = p if p.is_dir() else p.parent
        for d in [start, *list(start.parents)[:3]]:
            candidate = d / FAULT_LOG_NAME
            if candidate.is_file():
                return candidate
    return None


def _collect(lines: Iterable[str], into: list[Change]) -> Iterator[str]:
    """Pass `lines` through, keeping the state changes they carry."""
    for line in lines:
        change = parse_change(line)
        if change is not None:
            into.append(change)
        yield line


# -- CLI --------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    return run_tool(lambda: _merge(args), refused=prefixed("state-change-log"))


def _merge(args: argparse.Namespace) -> int:
    criteria = make_criteria(args.start_time, args.end_time, args.topic, args.partitions)
    inputs = [x.strip() for x in args.logs.split(",") if x.strip()] if args.logs else []
    if args.logs_regex and not inputs:
        # Kafka's --logs-regex names a directory and a file-name pattern in one string.
        directory, _, pattern = args.logs_regex.rpartition("/")
        inputs, regex = [directory or "."], pattern
    else:
        regex = args.logs_regex
    if not inputs:
        raise bad_input("give --logs (files or directories) or --logs-regex")
    if args.plot and args.engine == "spark":
        raise bad_input("--plot works with --engine local only")
    files = find_logs(inputs, regex)
    print(f"Merging {len(files)} state change log file(s)", file=sys.stderr)
    faults: list[FaultEvent] = []
    if args.plot:
        faults_path = Path(args.faults) if args.faults else faults_beside(inputs)
        if args.faults and not faults_path.is_file():
            raise bad_input(f"--faults {args.faults}: no such file")
        if faults_path is not None:
            faults = read_fault_events(faults_path)
            print(f"Marking {len(fault_spans(faults))} fault(s) from {faults_path}",
                  file=sys.stderr)
    elif args.faults:
        raise bad_input("--faults goes with --plot")
    try:
        return _merge_to_output(args, files, criteria, faults)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise bad_input(str(exc)) from None


def _merge_to_output(args: argparse.Namespace, files: Sequence[Path], criteria: Criteria,
                     faults: Sequence[FaultEvent] = ()) -> int:
    if args.engine == "spark":
        return run_spark(files, criteria, args.output, args.master)
    changes: list[Change] = []
    merged = merge_local(files, criteria)
    if args.plot:
        merged = _collect(merged, changes)
    out = sys.stdout
    if args.output:
        Path(args.output).mkdir(parents=True, exist_ok=True)
        target = Path(args.output) / "merged-state-change.log"
        with target.open("w") as f:
            for line in merged:
                f.write(line + "\n")
        print(f"Merged lines written to {target}", file=sys.stderr)
    else:
        for line in merged:
            out.write(line + "\n")
        out.flush()
    if args.plot:
        from ..common.plot import write_svg

        path = write_svg(args.plot, state_change_plot(changes, faults=faults))
        print(f"Plot of {len({c.partition for c in changes})} partition(s) written to {path}",
              file=sys.stderr)
    return 0


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("state-change-log",
                       help="merge the brokers' state-change.log files in time order "
                            "(Kafka's StateChangeLogMerger)")
    p.add_argument("--logs", help="comma-separated state-change.log files or directories "
                                  "(searched recursively)")
    p.add_argument("--logs-regex", help="file names to take from the --logs directories "
                                        "(default state-change.log*); without --logs, "
                                        "DIR/REGEX as Kafka's tool takes it")
    p.add_argument("--start-time", help='earliest time, "yyyy-MM-dd HH:mm:ss,SSS"')
    p.add_argument("--end-time", help='latest time, "yyyy-MM-dd HH:mm:ss,SSS"')
    p.add_argument("--topic", help="only lines about this topic")
    p.add_argument("--partitions", help="comma-separated partitions of --topic")
    p.add_argument("--engine", choices=("local", "spark"), default="local")
    p.add_argument("--output", help="write the merged lines under this directory")
    p.add_argument("--master", default="local[*]", help="Spark master for --engine spark")
    p.add_argument("--plot", metavar="FILE.svg",
                   help="also draw the merged lines as an SVG timeline: one lane per partition "
                        f"(at most {MAX_LANES}), spans coloured by leader or partition state, "
                        "replica state changes as ticks; under it each partition's ISR size "
                        "and offline periods; the faults of --faults (or of a faults.log "
                        "found beside the logs) marked on both")
    p.add_argument("--faults", metavar="FILE",
                   help="with --plot: the fault log (common/fault_log, one JSON event a line) "
                        "whose faults to mark; default: a faults.log in the --logs directory "
                        "or up to three directories above it")
    p.set_defaults(func=run)
