"""The Structured Streaming job: page views from topic `page-views` (format "odradek", the
options and schema of Spark's Kafka source, S-9.1) -> JSON parsed with from_json -> tumbling
event-time windows with a watermark -> count per (window, page) -> (a) topic `page-counts`
(key = page, value = JSON of window start/end, page, count) and (b) Parquet, both in append
mode, so each finalized window is written once (S-9.2).

Two queries, each with its own checkpoint (per-partition offsets of the source, the state store
of the counts, the sink's commit log), so a restarted job neither loses nor repeats a window.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .events import HEARTBEAT, PAGE_VIEW

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

SOURCE_TOPIC = "page-views"
SINK_TOPIC = "page-counts"

# The JSON of a page view (events.PageView.value), as from_json's DDL schema.
EVENT_SCHEMA = ("event STRING, user_id STRING, session_id STRING, page STRING, "
                "referrer STRING, ts LONG")


@dataclass(frozen=True, slots=True)
class JobConfig:
    bootstrap_servers: str
    output_dir: Path
    """Parquet files of the counts go to `output_dir/page_counts`; checkpoints to
    `output_dir/checkpoints/{parquet,topic}`."""
    source_topic: str = SOURCE_TOPIC
    sink_topic: str = SINK_TOPIC
    window: str = "1 minute"
    watermark: str = "2 minutes"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    delivery_guarantee: str = "at-least-once"  # the sink's; "exactly-once": docs/spark.md

    @property
    def parquet_dir(self) -> Path:
        return self.output_dir / "page_counts"

    def checkpoint(self, sink: str) -> Path:
        return self.output_dir / "checkpoints" / sink


def read_page_views(spark: SparkSession, cfg: JobConfig) -> DataFrame:
    """The source, exactly as Spark's Kafka source is used (format "odradek")."""
    reader = (spark.readStream.format("odradek")
              .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
              .option("subscribe", cfg.source_topic)
              .option("startingOffsets", cfg.starting_offsets))
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    return reader.load()


def parse_events(records: DataFrame) -> DataFrame:
    """Kafka-schema rows (value binary) -> event, user_id, session_id, page, referrer,
    event_time (timestamp from the JSON's `ts`, ms since the epoch). Values that are not JSON
    objects of that shape become rows of nulls and are filtered out."""
    from pyspark.sql import functions as F

    parsed = records.select(
        F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
    return (parsed.select("e.*")
            .where(F.col("ts").isNotNull() & F.col("event").isin(PAGE_VIEW, HEARTBEAT))
            .withColumn("event_time", F.timestamp_millis(F.col("ts"))))


def page_counts(events: DataFrame, window: str, watermark: str) -> DataFrame:
    """Page views per (tumbling event-time window, page). Columns: window_start, window_end
    (timestamps), page, count (long).

    Heartbeats must reach the watermark operator (they carry the event time that finalizes the
    last windows), so they are not filtered out before the aggregation: Spark's optimizer would
    push such a filter below withWatermark. They are counted as 0 instead, and the groups with
    a count of 0 (heartbeats only) are dropped after it."""
    from pyspark.sql import functions as F

    views = F.count(F.when(F.col("event") == PAGE_VIEW, True))
    return (events.withWatermark("event_time", watermark)
            .groupBy(F.window("event_time", window).alias("w"), F.col("page"))
            .agg(views.alias("count"))
            .where(F.col("count") > 0)
            .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                    "page", "count"))


def as_records(counts: DataFrame) -> DataFrame:
    """The sink's form (Spark's Kafka sink columns): key = page, value = JSON object of
    window_start, window_end (ISO-8601 in the session time zone), page, count."""
    return counts.selectExpr(
        "CAST(page AS STRING) AS key",
        "to_json(named_struct('window_start', window_start, 'window_end', window_end, "
        "'page', page, 'count', count)) AS value")


def start(spark: SparkSession, cfg: JobConfig, *, available_now: bool = True,
          processing_time: str | None = None) -> list[StreamingQuery]:
    """Start the two queries (topic and Parquet). With `available_now`, each processes what the
    topic holds when it starts, finalizes what the watermark allows, and stops."""
    counts = page_counts(parse_events(read_page_views(spark, cfg)), cfg.window, cfg.watermark)
    trigger: dict[str, Any] = ({"availableNow": True} if available_now
                               else {"processingTime": processing_time or "5 seconds"})
    to_topic = (as_records(counts).writeStream.format("odradek")
                .queryName("page_counts_to_topic")
                .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
                .option("topic", cfg.sink_topic)
                .option("deliveryGuarantee", cfg.delivery_guarantee)
                .option("checkpointLocation", str(cfg.checkpoint("topic")))
                .outputMode("append").trigger(**trigger).start())
    try:
        to_parquet = (counts.writeStream.format("parquet")
                      .queryName("page_counts_to_parquet")
                      .option("path", str(cfg.parquet_dir))
                      .option("checkpointLocation", str(cfg.checkpoint("parquet")))
                      .outputMode("append").trigger(**trigger).start())
    except BaseException:
        to_topic.stop()
        raise
    return [to_topic, to_parquet]


@dataclass(frozen=True, slots=True)
class QueryRun:
    """What one query did in a run (from its progress reports)."""

    name: str
    batches: int
    input_rows: int
    watermark: str | None

    def __str__(self) -> str:
        return (f"{self.name}: {self.batches} micro-batch(es), {self.input_rows:,} input rows, "
                f"watermark {self.watermark or '-'}")


def run_available_now(spark: SparkSession, cfg: JobConfig, timeout_s: float = 600.0
                      ) -> list[QueryRun]:
    """Run both queries to the end of what the topic holds now; raise if one failed or did not
    finish within `timeout_s`."""
    queries = start(spark, cfg, available_now=True)
    try:
        runs = []
        for q in queries:
            if not q.awaitTermination(timeout_s):
                raise TimeoutError(f"query {q.name} did not finish within {timeout_s:.0f} s")
            exc = q.exception()
            if exc is not None:
                raise RuntimeError(f"query {q.name} failed: {exc}")
            progress = q.recentProgress
            runs.append(QueryRun(q.name or "?", len(progress),
                                 sum(int(p["numInputRows"]) for p in progress),
                                 progress[-1]["eventTime"].get("watermark") if progress else None))
        return runs
    finally:
        for q in queries:
            if q.isActive:
                q.stop()


def session(master: str | None, app_name: str = "odradek-clickstream") -> SparkSession:
    """`local_session()`, or one on a Spark standalone cluster (`spark://host:port`) whose
    executors run this interpreter with this `odradek` importable."""
    if master is None or master.startswith("local"):
        return local_session(app_name)
    from ...spark.pipeline import build_session

    return build_session(master, app_name)


def local_session(app_name: str = "odradek-clickstream", cores: int = 2) -> SparkSession:
    """A local SparkSession for the example (`odradek.spark.session.local_session`)."""
    from ...spark.session import local_session as make

    return make(app_name, cores)
