"""The `odradek` Spark data source (S-9.1): `spark.read.format("odradek")`, `readStream`,
`write` and `writeStream`, with the schema and option names of Spark's Kafka source.

    df = (spark.read.format("odradek")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events")
          .option("startingOffsets", '{"events":{"0":10,"1":-2}}')
          .load())

The driver plans offset ranges (`OffsetReader` asks the cluster for partitions and offsets;
`offsets` decides); every Spark task reads its own range on its executor
(`reader.read_ranges`) and yields Arrow batches. Streaming offsets are KafkaSourceOffset JSON,
``{"topic": {"0": 23}}``, kept in the query's checkpoint, so a restarted query goes on from the
last committed batch without losing or repeating a record.

Transactions: `kafka.isolation.level` is passed to the driver's and the executors' consumers as
Spark's Kafka source passes it; with read_committed the latest offsets are the partitions' last
stable offsets (ListOffsets isolation_level=1) and executors skip aborted transactions' records.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..client.errors import KafkaConnectionError, KafkaTimeoutError
from ..client.sync_consumer import Consumer
from ..client.types import TopicPartition
from ..common import TopicPartition as TP
from .offsets import (
    ClusterUnavailableError,
    OffsetMap,
    OffsetRange,
    OffsetSpec,
    OptionError,
    Strategy,
    check_all_partitions,
    check_assigned_exist,
    from_json_offsets,
    kafka_params,
    lower_keys,
    parse_bool,
    parse_positive_int,
    parse_strategy,
    plan_batch_ranges,
    rate_limit,
    resolve_specific,
    select_partitions,
    split_ranges,
    stream_ranges,
    to_json_offsets,
    validate_batch_options,
    validate_stream_options,
)
from .reader import DEFAULT_POLL_TIMEOUT_MS, read_ranges, spark_schema

log = logging.getLogger("odradek.spark")



class OffsetReader:
    """The driver's view of the cluster (Spark's KafkaOffsetReader): which partitions a
    strategy covers and their earliest / latest / by-timestamp offsets."""

    def __init__(self, kafka: Mapping[str, str]) -> None:
        cfg = {k: v for k, v in kafka.items() if k not in ("group.id", "group.instance.id")}
        cfg.setdefault("client.id", "odradek-spark-driver")
        cfg.setdefault("allow.auto.create.topics", "false")  # reading never creates a topic
        self._bootstrap = cfg.get("bootstrap.servers", "")
        with self._cluster_errors():
            self._consumer = Consumer(cfg)

    @contextlib.contextmanager
    def _cluster_errors(self) -> Iterator[None]:
        """A cluster that cannot be reached is one clear error naming kafka.bootstrap.servers
        (Spark's source would time out waiting for a node assignment)."""
        try:
            yield
        except (KafkaConnectionError, KafkaTimeoutError, OSError) as exc:
            raise ClusterUnavailableError(
                f"Cannot get partitions and offsets from the cluster at kafka.bootstrap.servers"
                f"={self._bootstrap}: {exc}. Check that the brokers are running and reachable."
            ) from None

    def close(self) -> None:
        self._consumer.close(autocommit=False)

    def __enter__(self) -> OffsetReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions(self, strategy: Strategy) -> list[TP]:
        with self._cluster_errors():
            topics = self._consumer.list_topics()
        if strategy.kind == "assign":
            check_assigned_exist(strategy.partitions, topics)
            return list(strategy.partitions)
        return select_partitions(strategy, topics)

    def earliest(self, tps: Sequence[TP]) -> OffsetMap:
        if not tps:
            return {}
        with self._cluster_errors():
            found = self._consumer.beginning_offsets([TopicPartition(*tp) for tp in tps])
        return dict(found)

    def latest(self, tps: Sequence[TP]) -> OffsetMap:
        if not tps:
            return {}
        with self._cluster_errors():
            found = self._consumer.end_offsets([TopicPartition(*tp) for tp in tps])
        return dict(found)

    def for_times(self, timestamps: Mapping[TP, int]) -> dict[TP, int | None]:
        """The first offset at or after each partition's timestamp (None: no such record)."""
        if not timestamps:
            return {}
        with self._cluster_errors():
            found = self._consumer.offsets_for_times(
                {TopicPartition(*tp): ts for tp, ts in timestamps.items()})
        return {tp: None if om is None else om.offset for tp, om in found.items()}

    def resolve(self, spec: OffsetSpec, tps: Sequence[TP], option: str,
                no_match_latest: bool) -> OffsetMap:
        """Offsets for `spec` on `tps` (a timestamp without a record at or after it gives the
        latest offset when `no_match_latest`, else an error, as Spark's strategy "error")."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "specific":
            requested = spec.offset_map
            check_all_partitions(requested, tps, option)
            return resolve_specific(requested, self.earliest(tps), self.latest(tps))
        if spec.kind == "timestamps":
            stamps = spec.offset_map
            check_all_partitions(stamps, tps, option.replace("Offsets", "OffsetsByTimestamp"))
        else:
            stamps = dict.fromkeys(tps, spec.timestamp)
        found = self.for_times(stamps)
        missing = [tp for tp, off in found.items() if off is None]
        latest = self.latest(missing) if missing else {}
        out: OffsetMap = {}
        for tp, off in found.items():
            if off is None:
                if not no_match_latest:
                    raise OptionError(f"No offset matched from request of topic-partition "
                                      f"{tp} and timestamp {stamps[tp]}.")
                off = latest[tp]
            out[tp] = off
        return out


class _Options:
    """The options every reader needs, parsed once on the driver (pickled to executors)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = options
        self.kafka = kafka_params(options)
        self.strategy = parse_strategy(options)
        self.fail_on_data_loss = parse_bool(options.get("failondataloss", "true"),
                                            "failOnDataLoss")
        self.include_headers = parse_bool(options.get("includeheaders", "false"),
                                          "includeHeaders")
        mp = options.get("minpartitions")
        self.min_partitions = None if mp is None else parse_positive_int(mp, "minPartitions")
        pt = options.get("kafkaconsumer.polltimeoutms")
        self.poll_timeout_ms = DEFAULT_POLL_TIMEOUT_MS if pt is None else parse_positive_int(
            pt, "kafkaConsumer.pollTimeoutMs")
        self.timestamp_no_match_latest = options.get(
            "startingoffsetsbytimestampstrategy", "error").strip().lower() == "latest"

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        ranges: list[OffsetRange] | None = partition.value
        if ranges is None:  # Spark's stand-in when there was nothing to plan
            return iter(())
        return read_ranges(ranges, self.kafka, fail_on_data_loss=self.fail_on_data_loss,
                           include_headers=self.include_headers,
                           poll_timeout_ms=self.poll_timeout_ms)


def _input_partitions(ranges: list[OffsetRange]) -> list[InputPartition]:
    return [InputPartition([r]) for r in ranges]


class OdradekBatchReader(DataSourceReader):
    """Batch read (Spark's KafkaBatch): startingOffsets default earliest, endingOffsets
    default latest, one task per partition range (more with minPartitions)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.start_spec, self.end_spec = validate_batch_options(options)
        self.opts = _Options(options)
        if "maxoffsetspertrigger" in options:
            log.warning("maxOffsetsPerTrigger option ignored in batch queries")

    def partitions(self) -> Sequence[InputPartition]:
        try:
            return self._plan()
        except NotImplementedError as exc:
            # Spark would take NotImplementedError for "one partition, value None".
            raise RuntimeError(f"planning the read failed: {exc!r}") from exc

    def _plan(self) -> list[InputPartition]:
        o = self.opts
        with OffsetReader(o.kafka) as r:
            tps = r.partitions(o.strategy)
            start = r.resolve(self.start_spec, tps, "startingOffsets",
                              o.timestamp_no_match_latest)
            end = r.resolve(self.end_spec, tps, "endingOffsets", True)
        ranges = [x for x in plan_batch_ranges(start, end) if x.size > 0]
        planned = split_ranges(ranges, o.min_partitions)
        log.info("Planned %d input partitions for %d topic partitions", len(planned), len(tps))
        return _input_partitions(planned)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.opts.read(partition)


class OdradekStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch read (Spark's KafkaMicroBatchStream): offsets are KafkaSourceOffset JSON;
    maxOffsetsPerTrigger limits each micro-batch (also under Trigger.AvailableNow, which reads
    up to the offsets latest when the query started); partitions created later are read from
    their earliest offset. commit() has nothing to do: the checkpoint is the source of truth."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.start_spec = validate_stream_options(options)
        self.opts = _Options(options)
        m = options.get("maxoffsetspertrigger")
        self.max_offsets = None if m is None else parse_positive_int(m, "maxOffsetsPerTrigger")
        self._target: OffsetMap | None = None
        self._reader: OffsetReader | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_reader"] = None
        return state

    def _offsets(self) -> OffsetReader:
        if self._reader is None:
            self._reader = OffsetReader(self.opts.kafka)
        return self._reader

    def initialOffset(self) -> dict:
        r = self._offsets()
        tps = r.partitions(self.opts.strategy)
        start = r.resolve(self.start_spec, tps, "startingOffsets",
                          self.opts.timestamp_no_match_latest)
        return to_json_offsets(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_offsets is None else ReadMaxRows(self.max_offsets)

    def prepareForTriggerAvailableNow(self) -> None:
        r = self._offsets()
        self._target = r.latest(r.partitions(self.opts.strategy))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        r = self._offsets()
        begin = from_json_offsets(start)
        latest = r.latest(r.partitions(self.opts.strategy))
        if self._target is not None:
            latest = {tp: min(off, self._target[tp]) for tp, off in latest.items()
                      if tp in self._target}
        if isinstance(limit, ReadMaxRows):
            new = [tp for tp in latest if tp not in begin]
            end = rate_limit(limit.max_rows, begin, latest, r.earliest(new))
        else:
            end = latest
        return to_json_offsets(end)

    def reportLatestOffset(self) -> dict | None:
        r = self._offsets()
        return to_json_offsets(r.latest(r.partitions(self.opts.strategy)))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, until = from_json_offsets(start), from_json_offsets(end)
        new = [tp for tp in until if tp not in begin]
        earliest_new = self._offsets().earliest(new) if new else {}
        ranges, losses = stream_ranges(begin, until, earliest_new, self.opts.fail_on_data_loss)
        for message in losses:
            log.warning("%s", message)
        return _input_partitions(split_ranges(ranges, self.opts.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.opts.read(partition)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class OdradekDataSource(DataSource):
    """`format("odradek")`: Spark's Kafka source and sink for odradek (and any Kafka)."""

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def _options(self) -> dict[str, str]:
        return lower_keys(self.options)

    def schema(self) -> str:
        opts = self._options()
        return spark_schema(parse_bool(opts.get("includeheaders", "false"), "includeHeaders"))

    def reader(self, schema: StructType) -> DataSourceReader:
        return OdradekBatchReader(self._options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OdradekStreamReader(self._options())

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import OdradekBatchWriter
        return OdradekBatchWriter(self._options(), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import OdradekStreamWriter
        return OdradekStreamWriter(self._options(), schema)
