"""Offset planning for the `odradek` Spark data source (S-9.1): pure functions, no I/O.

Everything here follows Spark's Kafka source (connector/kafka-0-10-sql):

* offsets in the checkpoint are KafkaSourceOffset's JSON shape, ``{"topic": {"0": 23}}``, with
  -2 for earliest and -1 for latest in user-given JSON (`parse_partition_offsets`);
* `rate_limit` is KafkaMicroBatchStream.rateLimit: maxOffsetsPerTrigger shared among partitions
  in proportion to their backlog, never starving a partition that has data;
* `split_ranges` is KafkaOffsetRangeCalculator.getRanges: minPartitions splits the large ranges;
* `validate_*` reject the option combinations Spark rejects, with Spark's messages.

Partitions are `(topic, partition)` tuples; offset maps are ``dict[(topic, partition), int]``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..common import TopicPartition as TP

EARLIEST = -2
LATEST = -1
OffsetMap = dict[TP, int]

STRATEGY_KEYS = ("subscribe", "subscribepattern", "assign")
_STRATEGY_LIST = "subscribe, subscribepattern, assign"


class OptionError(ValueError):
    """A bad option or option combination (Spark's IllegalArgumentException)."""


class ClusterUnavailableError(RuntimeError):
    """The driver could not reach the cluster to plan the read."""


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, truncation) and failOnDataLoss is true."""


INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_TRUE = (
    "Some data may have been lost because they are not available in Kafka any more; either the "
    "data was aged out by Kafka or the topic may have been deleted before all the data in the "
    "topic was processed. If you don't want your streaming query to fail on such cases, set the "
    "source option \"failOnDataLoss\" to \"false\".")
INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_FALSE = (
    "Some data may have been lost because they are not available in Kafka any more; either the "
    "data was aged out by Kafka or the topic may have been deleted before all the data in the "
    "topic was processed. If you want your streaming query to fail on such cases, set the "
    "source option \"failOnDataLoss\" to \"true\".")


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """[from_offset, until_offset) of one partition: the work of one Spark input partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


# -- options ---------------------------------------------------------------------------------------
def lower_keys(options: Mapping[str, Any]) -> dict[str, str]:
    """Spark options are case-insensitive: one lower-case dict (values as strings)."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def parse_bool(value: str, name: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise OptionError(f"option '{name}' must be true or false, got '{value}'")


def parse_positive_int(value: str, name: str, message: str | None = None) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got '{value}'") from None
    if n <= 0:
        raise OptionError(message or f"{name} must be positive")
    return n


@dataclass(frozen=True, slots=True)
class Strategy:
    """Which partitions to read: `subscribe` (topics), `subscribePattern` (regex), `assign`."""

    kind: str  # "subscribe" | "subscribepattern" | "assign"
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[TP, ...] = ()


def parse_strategy(options: Mapping[str, str]) -> Strategy:
    """Spark's validateGeneralOptions for the strategy: exactly one of subscribe,
    subscribePattern, assign, each non-empty. `options` has lower-case keys."""
    given = [k for k in STRATEGY_KEYS if k in options]
    if not given:
        raise OptionError("One of the following options must be specified for Kafka source: "
                          f"{_STRATEGY_LIST}. See the docs for more details.")
    if len(given) > 1:
        raise OptionError("Only one of the following options can be specified for Kafka source: "
                          f"{_STRATEGY_LIST}. See the docs for more details.")
    kind = given[0]
    value = options[kind]
    if kind == "assign":
        if not value.strip().startswith("{"):
            raise OptionError("No topicpartitions to assign as specified value for option "
                              f"'assign' is '{value}'")
        try:
            return Strategy(kind, partitions=tuple(parse_partitions(value)))
        except OptionError as exc:
            raise OptionError(f"option 'assign': {exc}") from None
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError("No topics to subscribe to as specified value for option "
                              f"'subscribe' is '{value}'")
        return Strategy(kind, topics=topics)
    pattern = value.strip()
    if not pattern:
        raise OptionError("Pattern to subscribe is empty as specified value for option "
                          f"'subscribePattern' is '{value}'")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise OptionError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
    return Strategy(kind, pattern=pattern)


def select_partitions(strategy: Strategy, topics: Mapping[str, Iterable[int]]) -> list[TP]:
    """The partitions a strategy reads, given the cluster's topics -> partition ids."""
    if strategy.kind == "assign":
        return sorted(strategy.partitions)
    if strategy.kind == "subscribe":
        names = [t for t in strategy.topics if t in topics]
    else:
        rx = re.compile(strategy.pattern)
        names = [t for t in topics if rx.fullmatch(t) and not t.startswith("__")]
    return sorted(TP(t, p) for t in names for p in topics[t])


def check_assigned_exist(assigned: Iterable[TP], topics: Mapping[str, Iterable[int]]) -> None:
    """`assign` names partitions that must exist: a missing one is an error naming it (rather
    than ListOffsets timing out on it)."""
    known = {(t, p) for t, ps in topics.items() for p in ps}
    missing = sorted(set(assigned) - known)
    if missing:
        raise OptionError(
            f"Topic partitions {_tps(dict.fromkeys(missing, 0))} of option 'assign' do not "
            "exist in the cluster (create the topic first, or check its partition count)")


def _json(value: str, what: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise OptionError(f"Expected e.g. {what}, got {value}: {exc}") from None


def parse_partitions(value: str) -> list[TP]:
    """`assign` JSON: ``{"topicA":[0,1],"topicB":[2,4]}``."""
    data = _json(value, '{"topicA":[0,1],"topicB":[0,1]}')
    if not isinstance(data, dict) or not all(
            isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool)
                                         for p in ps) for ps in data.values()):
        raise OptionError('Expected e.g. {"topicA":[0,1],"topicB":[0,1]}, got ' + value)
    return sorted({TP(str(t), int(p)) for t, ps in data.items() for p in ps})


def parse_partition_offsets(value: str) -> OffsetMap:
    """startingOffsets / endingOffsets JSON: ``{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}``
    (-2 earliest, -1 latest)."""
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    data = _json(value, example)
    out: OffsetMap = {}
    if not isinstance(data, dict):
        raise OptionError(f"Expected e.g. {example}, got {value}")
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise OptionError(f"Expected e.g. {example}, got {value}")
        for p, off in parts.items():
            try:
                pid = int(p)
            except ValueError:
                raise OptionError(f"Expected e.g. {example}, got {value}") from None
            if not isinstance(off, int) or isinstance(off, bool) or off < EARLIEST:
                raise OptionError(f"Expected e.g. {example}, got {value}")
            out[TP(str(topic), pid)] = off
    return out


def to_json_offsets(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """KafkaSourceOffset's JSON shape (what Spark writes to the checkpoint's offsets log)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(off)
    return out


def from_json_offsets(data: Mapping[str, Mapping[str, int]] | str) -> OffsetMap:
    if isinstance(data, str):
        data = json.loads(data)
    return {TP(str(t), int(p)): int(o) for t, ps in data.items() for p, o in ps.items()}


def parse_partition_timestamps(value: str, option: str) -> OffsetMap:
    """startingOffsetsByTimestamp / endingOffsetsByTimestamp JSON (Spark's
    JsonUtils.partitionTimestamps): ``{"topicA":{"0":1700000000000,"1":1700000000000}}``,
    milliseconds since the epoch per partition."""
    example = '{"topicA":{"0":1700000000000,"1":1700000000000}}'
    try:
        data = _json(value, example)
    except OptionError as exc:
        raise OptionError(f"option '{option}': {exc}") from None
    bad = OptionError(f"option '{option}': Expected e.g. {example}, got {value}")
    if not isinstance(data, dict):
        raise bad
    out: OffsetMap = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise bad
        for p, ts in parts.items():
            try:
                pid = int(p)
            except ValueError:
                raise bad from None
            if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
                raise bad
            out[TP(str(topic), pid)] = ts
    return out


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where to start or end: "earliest", "latest", specific offsets, one timestamp (ms) for
    every partition, or a timestamp per partition ("timestamps", kept in `offsets`)."""

    kind: str  # "earliest" | "latest" | "specific" | "timestamp" | "timestamps"
    offsets: tuple[tuple[TP, int], ...] = ()
    timestamp: int = -1

    @property
    def offset_map(self) -> OffsetMap:
        return dict(self.offsets)


def parse_offset_spec(options: Mapping[str, str], which: str, default: str) -> OffsetSpec:
    """`which` is "starting" or "ending": <which>Timestamp wins over
    <which>OffsetsByTimestamp, which wins over <which>Offsets (Spark's
    getKafkaOffsetRangeLimit)."""
    ts = options.get(f"{which}timestamp")
    if ts is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(ts.strip()))
        except ValueError:
            raise OptionError(f"option '{which}Timestamp' must be a timestamp in milliseconds, "
                              f"got '{ts}'") from None
    by_ts = options.get(f"{which}offsetsbytimestamp")
    if by_ts is not None:
        stamps = parse_partition_timestamps(by_ts.strip(), f"{which}OffsetsByTimestamp")
        return OffsetSpec("timestamps", tuple(sorted(stamps.items())))
    value = options.get(f"{which}offsets")
    if value is None:
        return OffsetSpec(default)
    v = value.strip()
    if v.lower() in ("earliest", "latest"):
        return OffsetSpec(v.lower())
    try:
        offsets = parse_partition_offsets(v)
    except OptionError as exc:  # name the option: there are two of them
        raise OptionError(f"option '{which}Offsets': {exc}") from None
    return OffsetSpec("specific", tuple(sorted(offsets.items())))


def _batch_limit(options: Mapping[str, str], which: str, default: str, refused: str,
                 per_partition: str) -> OffsetSpec:
    """The starting or ending (`which`) offsets of a batch query, refused (Spark's
    validateBatchOptions) when they are `refused` ("latest" for the start, "earliest" for the
    end) as a whole or for one partition (`per_partition` names them in that message)."""
    spec = parse_offset_spec(options, which, default)
    if spec.kind == refused:
        raise OptionError(f"{which} offset can't be {refused} for batch queries on Kafka")
    sentinel = LATEST if refused == "latest" else EARLIEST
    for tp, off in spec.offsets:
        if off == sentinel:
            raise OptionError(f"{per_partition} for {tp} can't be {refused} for batch "
                              "queries on Kafka")
    return spec


def validate_batch_options(options: Mapping[str, str]) -> tuple[OffsetSpec, OffsetSpec]:
    """Spark's validateBatchOptions + checkOffsetLimitValidity; returns (start, end)."""
    start = _batch_limit(options, "starting", "earliest", "latest", "startingOffsets")
    end = _batch_limit(options, "ending", "latest", "earliest", "ending offset")
    validate_general_options(options)
    if start.kind == end.kind and start.kind in ("specific", "timestamps"):
        what = "offset" if start.kind == "specific" else "timestamp"
        s, e = start.offset_map, end.offset_map
        if set(s) != set(e):
            raise OptionError(
                f"The specified start and end {what}s must cover the same topic partitions: "
                f"start {_tps(s)}, end {_tps(e)}")
        for tp, so in s.items():
            eo = e[tp]
            if so > eo >= 0 and so >= 0:
                raise OptionError(
                    f"The start {what} {so} of {tp} is greater than its end "
                    f"{what} {eo}")
    if start.kind == end.kind == "timestamp" and start.timestamp > end.timestamp:
        raise OptionError(f"startingTimestamp {start.timestamp} is greater than "
                          f"endingTimestamp {end.timestamp}")
    return start, end


def validate_stream_options(options: Mapping[str, str]) -> OffsetSpec:
    """Spark's validateStreamOptions; returns the starting spec (default latest)."""
    if "endingoffsets" in options:
        raise OptionError("ending offset not valid in streaming queries")
    if "endingtimestamp" in options or "endingoffsetsbytimestamp" in options:
        raise OptionError("ending timestamp not valid in streaming queries")
    validate_general_options(options)
    return parse_offset_spec(options, "starting", "latest")


def validate_general_options(options: Mapping[str, str]) -> None:
    parse_strategy(options)
    if "minpartitions" in options:
        parse_positive_int(options["minpartitions"], "minPartitions",
                           "minPartitions must be positive")
    if "maxoffsetspertrigger" in options:
        parse_positive_int(options["maxoffsetspertrigger"], "maxOffsetsPerTrigger",
                           "maxOffsetsPerTrigger must be positive")
    if "failondataloss" in options:
        parse_bool(options["failondataloss"], "failOnDataLoss")
    if "includeheaders" in options:
        parse_bool(options["includeheaders"], "includeHeaders")
    if "kafka.auto.offset.reset" in options:
        raise OptionError(
            "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
            "'startingoffsets' to 'earliest' or 'latest' to specify where to start.")
    if "kafka.key.deserializer" in options:
        raise OptionError(
            "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte "
            "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly "
            "deserialize the keys.")
    if "kafka.value.deserializer" in options:
        raise OptionError(
            "Kafka option 'value.deserializer' is not supported as values are deserialized as "
            "byte arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly "
            "deserialize the values.")
    for name in ("enable.auto.commit", "interceptor.classes"):
        if f"kafka.{name}" in options:
            raise OptionError(f"Kafka option '{name}' is not supported")
    if "kafka.bootstrap.servers" not in options:
        raise OptionError("Option 'kafka.bootstrap.servers' must be specified for configuring "
                          "Kafka consumer")


def _tps(offsets: Mapping[TP, int]) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(offsets)) + "]"


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """The `kafka.`-prefixed options with the prefix removed (passed to the client)."""
    return {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}


# -- resolving -------------------------------------------------------------------------------------
def resolve_specific(requested: Mapping[TP, int], earliest: Mapping[TP, int],
                     latest: Mapping[TP, int]) -> OffsetMap:
    """Replace -2 / -1 in user-given offsets with the partition's earliest / latest offset."""
    out: OffsetMap = {}
    for tp, off in requested.items():
        if off == EARLIEST:
            out[tp] = earliest[tp]
        elif off == LATEST:
            out[tp] = latest[tp]
        else:
            out[tp] = off
    return out


def check_all_partitions(specified: Iterable[TP], assigned: Iterable[TP], option: str) -> None:
    """Batch queries with specific offsets must name every partition they read (as Spark's
    KafkaOffsetReader.fetchSpecificOffsets asserts)."""
    s, a = set(specified), set(assigned)
    if s != a:
        hint = ("timestamps, you must specify all TopicPartitions.\n"
                if option.endswith("ByTimestamp") else
                "offsets, you must specify all TopicPartitions.\n"
                "Use -1 for latest, -2 for earliest.\n")
        raise OptionError(
            f"If {option} contains specific {hint}Specified: {_tps(dict.fromkeys(s, 0))} "
            f"Assigned: {_tps(dict.fromkeys(a, 0))}")


def plan_batch_ranges(start: Mapping[TP, int], end: Mapping[TP, int]) -> list[OffsetRange]:
    """One range per partition in `end` (partitions missing from `start` are skipped). A
    resolved start after its end is an error, as in Spark's batch read."""
    out = []
    for tp in sorted(end):
        if tp in start:
            topic, partition = tp  # plain (topic, partition) pairs work as well
            if start[tp] > end[tp]:
                raise OptionError(
                    f"The start offset {start[tp]} of {topic}-{partition} is greater than its "
                    f"end offset {end[tp]}")
            out.append(OffsetRange(topic, partition, start[tp], end[tp]))
    return out


def rate_limit(limit: int, start: Mapping[TP, int], latest: Mapping[TP, int],
               earliest_of_new: Mapping[TP, int] | None = None) -> OffsetMap:
    """KafkaMicroBatchStream.rateLimit: the end offsets of a micro-batch reading at most about
    `limit` records. Each partition with a backlog gets limit * backlog / total (rounded down,
    but at least 1 so that small partitions are not starved). Partitions new since `start`
    begin at `earliest_of_new`."""
    new = earliest_of_new or {}
    sizes: dict[TP, int] = {}
    for tp, end in latest.items():
        begin = start.get(tp, new.get(tp))
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out: OffsetMap = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        begin = start[tp] if tp in start else new[tp]
        prorate = limit * (size / total)
        n = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begin + n)
    return out


def _scala_round(x: float) -> int:
    return math.floor(x + 0.5)


def _part_count(size: int, total: int, min_parts: int) -> int:
    return max(_scala_round(size / total * min_parts), 1)


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """KafkaOffsetRangeCalculator.getRanges: drop empty ranges; with fewer non-empty ranges
    than `min_partitions`, split the large ones so that there are about min_partitions."""
    nonempty = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(nonempty) >= min_partitions:
        return nonempty
    total = sum(r.size for r in nonempty)
    unsplit = {(r.topic, r.partition) for r in nonempty
               if _part_count(r.size, total, min_partitions) == 1}
    unsplit_total = sum(r.size for r in nonempty if (r.topic, r.partition) in unsplit)
    split_total = total - unsplit_total
    split_min = max(min_partitions - len(unsplit), 1)
    out: list[OffsetRange] = []
    for r in nonempty:
        parts = 1 if (r.topic, r.partition) in unsplit else _part_count(r.size, split_total,
                                                                         split_min)
        remaining = r.size
        begin = r.from_offset
        for i in range(parts):
            this = remaining // (parts - i)
            remaining -= this
            end = min(begin + this, r.until_offset)
            if end > begin:
                out.append(OffsetRange(r.topic, r.partition, begin, end))
            begin = end
    return out


def cap_to(offsets: Mapping[TP, int], target: Mapping[TP, int]) -> OffsetMap:
    """availableNow: never go past the offsets recorded when the trigger was prepared
    (partitions unknown then are not read in this run)."""
    return {tp: min(off, target[tp]) for tp, off in offsets.items() if tp in target}


def stream_ranges(start: Mapping[TP, int], end: Mapping[TP, int],
                  earliest_of_new: Mapping[TP, int], fail_on_data_loss: bool
                  ) -> tuple[list[OffsetRange], list[str]]:
    """KafkaMicroBatchStream.planInputPartitions: ranges for the partitions of `end`; a
    partition new since `start` begins at its earliest offset. Returns (ranges, data-loss
    messages): a deleted partition or an end before the start is data loss (raised as
    DataLossError when `fail_on_data_loss`, else returned to be logged)."""
    losses: list[str] = []
    deleted = sorted(set(start) - set(end))
    if deleted:
        losses.append(f"{_tps(dict.fromkeys(deleted, 0))} are gone. "
                      "Some data may have been missed.")
    ranges = []
    for tp in sorted(end):
        topic, partition = tp  # plain (topic, partition) pairs work as well
        begin = start.get(tp, earliest_of_new.get(tp))
        if begin is None:
            losses.append(f"Cannot find earliest offsets of {topic}-{partition}. "
                          "Some data may have been missed")
            continue
        until = end[tp]
        if until < begin:
            losses.append(f"Partition {topic}-{partition}'s offset was changed from {begin} to "
                          f"{until}, some data may have been missed")
            continue
        ranges.append(OffsetRange(topic, partition, begin, until))
    if losses and fail_on_data_loss:
        raise DataLossError(losses[0] + "\n" + INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_TRUE)
    return ranges, losses
