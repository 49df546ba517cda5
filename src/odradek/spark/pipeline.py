"""A Spark driver process running one pipeline: the `odradek` source (read_committed), a
transform (the value upper-cased), the `odradek` sink with a chosen deliveryGuarantee. Run as
its own process so a test, the chaos scenario or the benchmark can kill -9 it and start it
again on the same checkpoint (a restarted query goes on from its last committed batch).

    python -m odradek.spark.pipeline --master spark://127.0.0.1:7077 --bootstrap HOST:PORT \\
        --source in --sink out --checkpoint /tmp/ck --guarantee exactly-once [--available-now]

Without --available-now it runs with Spark's default trigger (a micro-batch as soon as the
previous one ends) until killed or --max-seconds pass. Each finished micro-batch prints one JSON
line (batch id, rows, durations: Spark's progress) on stdout. --batch copies with
spark.read / df.write instead (one two-phase commit for the whole write).

--transform-cost-ms N models a slower transform (a lookup per row, say): every row costs N ms
more (Thread.sleep through Spark SQL's `reflect`), and the rows reach the sink in small Arrow
batches as they are transformed (spark.sql.execution.arrow.maxRecordsPerBatch, and a small
spark.buffer.size so the executor's stream to the sink's Python worker does not hold them), so
a task's writes are spread over its whole run: a fault can then land while its rows are in the
log and its transaction still open (`odradek chaos --spark`, docs/spark.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

# With --transform-cost-ms: rows per Arrow batch to the sink, bytes of the executor's buffered
# stream to its Python worker (Spark's default 65536 would hold a whole task's small rows).
COST_ROWS_PER_BATCH = 50
COST_BUFFER_BYTES = 2048


def build_session(master: str, app: str, conf: dict[str, str] | None = None) -> Any:
    if master.startswith("local"):
        from .session import local_session
        cores = int(master[6:-1]) if master.startswith("local[") else 1
        return local_session(app, cores)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    pp = os.environ.get("PYTHONPATH", "")
    b = (SparkSession.builder.master(master).appName(app)
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.executor.memory", "512m")
         .config("spark.executor.cores", "1")
         .config("spark.executorEnv.PYTHONPATH", pp)
         .config("spark.pyspark.python", sys.executable)
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.python.worker.reuse", "true")
         .config("spark.task.maxFailures", "8")
         # Tasks read from brokers, not from executors' blocks: no locality to wait for.
         .config("spark.locality.wait", "0s"))
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    s = b.getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    return s


def sink_options(args: argparse.Namespace) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": args.bootstrap, "topic": args.sink,
            "deliveryGuarantee": args.guarantee, "kafka.linger.ms": "5"}
    if args.transaction_timeout_ms:
        opts["kafka.transaction.timeout.ms"] = str(args.transaction_timeout_ms)
    return opts


def transform(df: Any, cost_ms: int = 0) -> Any:
    """The value upper-cased; `cost_ms` > 0: each row also costs that many milliseconds (a
    slower transform). `reflect` of the void Thread.sleep answers the string "null", of which
    substr(..., 1, 0) keeps nothing: the value is unchanged."""
    value = "upper(cast(value as string))"
    if cost_ms > 0:
        value = (f"concat({value}, substr(reflect('java.lang.Thread', 'sleep', "
                 f"cast({int(cost_ms)} as bigint)), 1, 0))")
    return df.selectExpr("key", f"{value} as value")


def session_conf(args: argparse.Namespace) -> dict[str, str]:
    conf = {}
    if args.cores_max:
        conf["spark.cores.max"] = str(args.cores_max)
    if args.transform_cost_ms:
        conf["spark.sql.execution.arrow.maxRecordsPerBatch"] = str(COST_ROWS_PER_BATCH)
        conf["spark.buffer.size"] = str(COST_BUFFER_BYTES)
    return conf


def run_stream(spark: Any, args: argparse.Namespace) -> None:
    r = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", args.bootstrap)
         .option("subscribe", args.source).option("startingOffsets", "earliest")
         .option("kafka.isolation.level", "read_committed"))
    if args.max_offsets:
        r = r.option("maxOffsetsPerTrigger", str(args.max_offsets))
    w = transform(r.load(), args.transform_cost_ms).writeStream.format("odradek")
    for k, v in sink_options(args).items():
        w = w.option(k, v)
    w = w.option("checkpointLocation", args.checkpoint)
    if args.available_now:
        w = w.trigger(availableNow=True)
    q = w.start()
    seen = -1
    deadline = time.monotonic() + args.max_seconds if args.max_seconds else None
    while q.isActive:
        q.awaitTermination(0.5)
        for p in q.recentProgress:
            if p["batchId"] > seen:
                seen = p["batchId"]
                print(json.dumps({"batch": p["batchId"], "rows": p["numInputRows"],
                                  "durations": p.get("durationMs", {}),
                                  "ts": p["timestamp"]}), flush=True)
        if deadline is not None and time.monotonic() > deadline:
            q.stop()
    if q.exception() is not None:
        print(json.dumps({"error": str(q.exception())[:2000]}), flush=True)
        raise SystemExit(1)


def run_batch(spark: Any, args: argparse.Namespace) -> None:
    df = (spark.read.format("odradek").option("kafka.bootstrap.servers", args.bootstrap)
          .option("subscribe", args.source).option("kafka.isolation.level", "read_committed")
          .load())
    w = transform(df, args.transform_cost_ms).write.format("odradek").mode("append")
    for k, v in sink_options(args).items():
        w = w.option(k, v)
    started = time.monotonic()
    w.save()
    print(json.dumps({"batch": "write", "seconds": time.monotonic() - started}), flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m odradek.spark.pipeline")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--sink", required=True)
    p.add_argument("--checkpoint")
    p.add_argument("--guarantee", default="exactly-once",
                   choices=("exactly-once", "at-least-once"))
    p.add_argument("--transaction-timeout-ms", type=int)
    p.add_argument("--max-offsets", type=int, help="maxOffsetsPerTrigger")
    p.add_argument("--available-now", action="store_true")
    p.add_argument("--max-seconds", type=float)
    p.add_argument("--batch", action="store_true")
    p.add_argument("--transform-cost-ms", type=int, default=0,
                   help="milliseconds more per row in the transform (a slower transform)")
    p.add_argument("--cores-max", type=int,
                   help="spark.cores.max (standalone: the app leaves the rest to others)")
    args = p.parse_args(argv)
    spark = build_session(args.master, f"odradek-pipeline-{args.guarantee}",
                          session_conf(args))
    try:
        if args.batch:
            run_batch(spark, args)
        else:
            if not args.checkpoint:
                p.error("--checkpoint is required for a streaming pipeline")
            run_stream(spark, args)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
