#!/usr/bin/env python3
"""Spark source throughput (S-9.1, S-9.2): rows per second read into Spark through
`format("odradek")` on `local[2]`, against reading the same records with a confluent-kafka
Consumer alone (and with odradek's own Consumer alone, for reference).

Setup: one `odradek broker` process (bench/common.py), a topic of `--partitions` (4)
partitions, `--records` (1,000,000) records of 100 bytes produced by `kcat -P` (linger.ms=5,
batch.size=1000000), the high watermarks checked against the count. Then, each `--repeat` (3)
times, best run kept and every run listed:

(a) Spark: a batch read, `spark.read.format("odradek").option("subscribe", T).load()
    .selectExpr("count(*)", "sum(length(value))").collect()`, on a SparkSession of `local[2]`
    started beforehand (session start-up excluded; planning, the tasks and the result included);
    the count and the byte sum are checked;
(b) confluent-kafka: `bench_broker.py worker consume` in its own process: Consumer, assign()
    of every partition from the beginning, consume() until N records (time from assign() to the
    last record), librdkafka's defaults and the big prefetch queue of bench_broker.py;
(c) odradek's Consumer (`odradek.client`), in its own process: assign(), seek_to_beginning(),
    poll() until N records.

The broker's CPU time during each run comes from /proc. The markdown section goes between
`<!-- spark:begin -->` and `<!-- spark:end -->`; `--update-doc docs/performance.md` replaces
it there (or appends it). The section is generated entirely, commentary included::

    python bench/bench_spark.py                                  # markdown on stdout
    python bench/bench_spark.py --update-doc docs/performance.md
    python bench/bench_spark.py --records 200000 --repeat 1      # a smoke test
    python bench/bench_spark.py --splice F.md --update-doc docs/performance.md  # no run

Internal: `python bench/bench_spark.py worker odradek-consume ...` is reader (c).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    BrokerProcess,
    add_section_options,
    cpu_seconds,
    ensure_topic,
    fmt_int,
    machine_facts,
    progress,
    python_worker,
    run_section,
    run_timed,
    table,
    topic_record_count,
)
from plots import figure, spark_chart

SCRIPT = Path(__file__).resolve()
BENCH_BROKER = SCRIPT.parent / "bench_broker.py"
RECORD_SIZE = 100
MB = 2**20  # MiB, as bench_broker.py (and Kreps 2014's "MB/s")
BEGIN, END = "<!-- spark:begin -->", "<!-- spark:end -->"
# bench_broker.py's BIG_QUEUE: librdkafka without its client-side fetch pauses.
BIG_QUEUE = ("queued.min.messages=10000000", "queued.max.messages.kbytes=2097151")


# -- reader (c), in its own process -----------------------------------------------------------
def worker_odradek_consume(a: argparse.Namespace) -> None:
    from odradek.client import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": a.bootstrap, "enable.auto.commit": False,
                  "max.poll.records": 10_000})
    tps = [TopicPartition(a.topic, p) for p in c.partitions_for_topic(a.topic)]
    t0 = time.perf_counter()
    c.assign(tps)
    c.seek_to_beginning(*tps)
    n = nbytes = 0
    deadline = time.monotonic() + a.timeout
    while n < a.records and time.monotonic() < deadline:
        for r in c.poll(1.0):
            n += 1
            nbytes += len(r.value or b"")
    seconds = time.perf_counter() - t0
    c.close(autocommit=False)
    print(json.dumps({"records": n, "bytes": nbytes, "seconds": seconds}), flush=True)


def worker_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="bench_spark.py worker")
    ap.add_argument("kind", choices=["odradek-consume"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=300.0)
    a = ap.parse_args(argv)
    worker_odradek_consume(a)


# -- measurements -----------------------------------------------------------------------------
@dataclass
class Run:
    reader: str
    records: int
    value_bytes: int
    seconds: float
    broker_cpu: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def mb_s(self) -> float:
        return self.records * RECORD_SIZE / self.seconds / MB


@dataclass
class Results:
    facts: dict[str, str] = field(default_factory=dict)
    produce: str = ""
    topic_creation: str = ""
    session_start_s: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)
    runs: dict[str, list[Run]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def best(self, reader: str) -> Run:
        return min(self.runs[reader], key=lambda r: r.seconds)


def write_records_file(path: Path, n: int) -> None:
    """n lines, each a 100-byte value (kcat -P drops the newline); as bench_broker.py."""
    pad = "x" * (RECORD_SIZE - 10)
    with open(path, "w") as f:
        for start in range(0, n, 100_000):
            f.write("".join(f"{i:010d}{pad}\n" for i in range(start, min(n, start + 100_000))))


def produce(broker: BrokerProcess, topic: str, n: int, tmp: Path, timeout: float) -> str:
    records = tmp / "records.txt"
    write_records_file(records, n)
    timed = run_timed(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-X", "linger.ms=5",
                       "-X", "batch.size=1000000", "-X", "acks=1"],
                      timeout=timeout, stdin_path=str(records))
    records.unlink()
    if timed.returncode != 0:
        raise RuntimeError(f"kcat -P failed ({timed.returncode}): {timed.stderr[-500:]}")
    held = topic_record_count(broker.bootstrap, topic)
    if held != n:
        raise RuntimeError(f"the topic holds {held:,} records, {n:,} were produced")
    return f"kcat -P: {n:,} records in {timed.wall:.1f} s ({fmt_int(n / timed.wall)} rec/s)"


def timed_run(broker: BrokerProcess, reader: str, n: int,
              fn: Callable[[], tuple[int, int, float]]) -> Run:
    """`fn` returns (records, value bytes, seconds); checked against `n`."""
    cpu0 = cpu_seconds(broker.pid)
    records, nbytes, seconds = fn()
    run = Run(reader, records, nbytes, seconds, cpu_seconds(broker.pid) - cpu0)
    if records != n or nbytes != n * RECORD_SIZE:
        raise RuntimeError(f"{reader} read {records:,} records / {nbytes:,} value bytes, "
                           f"expected {n:,} / {n * RECORD_SIZE:,}")
    progress(f"  {reader}: {seconds:.2f} s, {fmt_int(run.rate)} rows/s, {run.mb_s:.1f} MB/s "
             f"(broker CPU {run.broker_cpu:.2f} s)")
    return run


def spark_session(cores: int) -> Any:
    from odradek.spark.session import local_session

    return local_session("odradek-bench-spark", cores)


def spark_read(spark: Any, bootstrap: str, topic: str) -> tuple[int, int, float]:
    t0 = time.perf_counter()
    row = (spark.read.format("odradek")
           .option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic)
           .load()
           .selectExpr("count(*) AS n", "sum(length(value)) AS bytes")
           .collect()[0])
    return int(row["n"]), int(row["bytes"] or 0), time.perf_counter() - t0


def worker_read(cmd: list[str], timeout: float) -> tuple[int, int, float]:
    timed = run_timed(cmd, timeout=timeout)
    if timed.returncode != 0:
        raise RuntimeError(f"{cmd[1]} worker failed: {timed.stderr[-800:]}")
    out = json.loads(timed.stdout.strip().splitlines()[-1])
    return int(out["records"]), int(out["bytes"]), float(out["seconds"])


def confluent_read(bootstrap: str, topic: str, n: int, timeout: float,
                   conf: tuple[str, ...] = ()) -> tuple[int, int, float]:
    cmd = python_worker(BENCH_BROKER, "worker", "consume", "--bootstrap", bootstrap,
                        "--topic", topic, "--records", str(n), "--timeout", str(timeout),
                        *(x for kv in conf for x in ("--conf", kv)))
    return worker_read(cmd, timeout + 30)


def odradek_read(bootstrap: str, topic: str, n: int, timeout: float) -> tuple[int, int, float]:
    cmd = python_worker(SCRIPT, "worker", "odradek-consume", "--bootstrap", bootstrap,
                        "--topic", topic, "--records", str(n), "--timeout", str(timeout))
    return worker_read(cmd, timeout + 30)


SPARK = "Spark `format(\"odradek\")`, local[2]"
CONFLUENT = "confluent-kafka Consumer, assign()"
CONFLUENT_BIG = "confluent-kafka Consumer, assign(), big prefetch queue"
ODRADEK = "odradek Consumer (odradek.client), assign()"


def run_bench(a: argparse.Namespace) -> Results:
    res = Results(facts=machine_facts())
    import pyarrow
    import pyspark

    res.versions = {"pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__,
                    "java": _java_version()}
    topic = "spark-bench"
    tmp = Path(tempfile.mkdtemp(prefix="odradek-bench-spark-"))
    try:
        with BrokerProcess(overrides={"num.partitions": str(a.partitions)}) as broker:
            progress(f"broker {broker.pid} at {broker.bootstrap}")
            res.topic_creation = ensure_topic(broker.bootstrap, topic, a.partitions)
            progress(f"producing {a.records:,} records of {RECORD_SIZE} bytes into {topic} "
                     f"({a.partitions} partitions) with kcat")
            res.produce = produce(broker, topic, a.records, tmp, a.timeout)
            progress(res.produce)

            readers: list[tuple[str, Callable[[], tuple[int, int, float]]]] = [
                (CONFLUENT, lambda: confluent_read(broker.bootstrap, topic, a.records,
                                                   a.timeout)),
                (CONFLUENT_BIG, lambda: confluent_read(broker.bootstrap, topic, a.records,
                                                       a.timeout, BIG_QUEUE)),
                (ODRADEK, lambda: odradek_read(broker.bootstrap, topic, a.records, a.timeout)),
            ]
            for name, fn in readers:
                progress(f"{name}: {a.repeat} run(s)")
                res.runs[name] = [timed_run(broker, name, a.records, fn)
                                  for _ in range(a.repeat)]

            progress("starting a SparkSession (local[2]); not timed")
            t0 = time.perf_counter()
            spark = spark_session(2)
            res.session_start_s = time.perf_counter() - t0
            try:
                progress(f"{SPARK}: {a.repeat} run(s)")
                res.runs[SPARK] = [
                    timed_run(broker, SPARK, a.records,
                              lambda: spark_read(spark, broker.bootstrap, topic))
                    for _ in range(a.repeat)]
            finally:
                spark.stop()
            errors = broker.errors_logged()
            if errors:
                progress(f"the broker logged {len(errors)} ERROR lines, e.g. {errors[0]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def _java_version() -> str:
    import subprocess

    try:
        r = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return "?"
    m = re.search(r'version "([^"]+)"', r.stderr + r.stdout)
    return m.group(1) if m else "?"


# -- the section ------------------------------------------------------------------------------
def render(res: Results, a: argparse.Namespace) -> str:
    lines: list[str] = []
    w = lines.append
    w(BEGIN)
    w("## Spark source (bench/bench_spark.py)")
    w("")
    w(f"`python bench/bench_spark.py --records {a.records} --partitions {a.partitions} "
      f"--repeat {a.repeat}`: {a.records:,} records of {RECORD_SIZE} bytes in a topic of "
      f"{a.partitions} partitions on one `odradek broker` process, read in full (S-9.1). "
      f"Spark: a batch read through `format(\"odradek\")` on `local[2]`, "
      "`selectExpr(\"count(*)\", \"sum(length(value))\").collect()`, the SparkSession started "
      f"beforehand ({res.session_start_s:.1f} s, not counted) and the job counted from planning "
      "to the result. The others: a client alone in its own process, from assign() to the "
      "last record. Best of "
      f"{a.repeat} runs (all runs in the last column); counts and value bytes checked. "
      "MB/s = 100-byte values, MiB.")
    w("")
    spark = res.best(SPARK)
    rows = []
    for name in (SPARK, CONFLUENT, CONFLUENT_BIG, ODRADEK):
        best = res.best(name)
        runs = ", ".join(f"{r.seconds:.2f}" for r in res.runs[name])
        rows.append([name, fmt_int(best.rate), f"{best.mb_s:.1f}", f"{best.seconds:.2f}",
                     f"{best.broker_cpu / best.seconds * 100:.0f}%",
                     f"{spark.rate / best.rate:.2f}x" if name != SPARK else "1", runs])
    w(table(["reader", "rows/s", "MB/s", "s (best)", "broker CPU", "Spark rows/s ÷ this",
             "runs (s)"], rows, "lrrrrrr"))
    w("")
    w(figure("spark", spark_chart([(name, res.best(name).rate)
                                   for name in (SPARK, CONFLUENT, CONFLUENT_BIG, ODRADEK)])))
    w("")
    big, default, own = res.best(CONFLUENT_BIG), res.best(CONFLUENT), res.best(ODRADEK)
    first = res.runs[SPARK][0]
    w(f"Through the source, Spark reads {fmt_int(spark.rate)} rows/s: "
      f"{spark.rate / big.rate * 100:.0f}% of a confluent-kafka Consumer alone with a big "
      f"prefetch queue ({fmt_int(big.rate)} rows/s), {spark.rate / default.rate:.1f}x the same "
      "Consumer with librdkafka's defaults (which pause fetching while 100,000 records wait "
      "in its local queue: see \"Consume throughput\" above) and "
      f"{spark.rate / own.rate:.1f}x odradek's own Consumer, which builds a Python object per "
      "record where the source's reader decodes record batches column by column into Arrow. "
      "Spark's figure includes what every Spark job pays around the transfer: planning (the "
      "driver asks the broker for partitions and offsets), a task per partition range in the "
      "Python workers, the Arrow hand-over to the JVM and the aggregation. A Python data "
      "source that only yields ready Arrow rows was measured earlier at 0.5-0.6 s per "
      "1,000,000 rows "
      f"on this machine kind; the rest of the best run's {spark.seconds:.1f} s "
      f"({spark.records:,} rows) is the source's fetching and decoding in the Python workers "
      "and Spark's per-job costs.")
    w("")
    if len(res.runs[SPARK]) > 1:
        w(f"The first Spark run ({first.seconds:.1f} s) also starts the Python workers and "
          "imports the source in them; later jobs reuse them (`spark.python.worker.reuse`).")
    w("The broker and the reader share the 2 cores (with whatever else runs on the machine: "
      "see the load average below); the broker CPU column is the broker's share of one core "
      "during the run.")
    w("")
    w(f"Setup: {res.produce}; topic created by {res.topic_creation}. "
      f"PySpark {res.versions.get('pyspark')}, pyarrow {res.versions.get('pyarrow')}, "
      f"Java {res.versions.get('java')}.")
    w("")
    w(table(["machine", ""], list(res.facts.items())))
    w(END)
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000, help="records (1,000,000)")
    ap.add_argument("--partitions", type=int, default=4, help="topic partitions (4)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per reader; the best is kept")
    ap.add_argument("--timeout", type=float, default=600.0, help="per run, seconds (600)")
    add_section_options(ap, "spark")
    a = ap.parse_args()
    if a.splice and not a.update_doc:
        ap.error("--splice needs --update-doc")
    if a.splice:
        run_section(a, "Spark", run_bench, render, BEGIN, END)
        return
    if a.records < 1 or a.partitions < 1 or a.repeat < 1:
        ap.error("--records, --partitions and --repeat must be at least 1")
    if not shutil.which("kcat"):
        sys.exit("kcat is not installed (apt-get install -y kcat)")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        sys.exit("pyspark is not installed (pip install -e '.[spark]')")
    run_section(a, "Spark", run_bench, render, BEGIN, END)


if __name__ == "__main__":
    main()
