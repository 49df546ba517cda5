"""What exactly-once costs in the Spark sink: rows per second through the pipeline (odradek
source with read_committed, a transform, odradek sink) on a Spark standalone cluster (a master
and two 1-core workers, separate JVMs), with deliveryGuarantee=at-least-once and exactly-once,
and the driver's commit latency per micro-batch.

Setup: an in-process 3-broker odradek cluster (replication 3), N records of 100 bytes
pre-produced into a 4-partition topic; a driver process (`odradek.spark.pipeline`, Spark's
default trigger, maxOffsetsPerTrigger=M so the backlog is read in N/M micro-batches) copies it
into a fresh topic. The throughput is the rows over the span from the second micro-batch's
start to the last one's end (the first carries the executors' start-up and is left out).
Commit latency: the driver's EndTxn round for one micro-batch's transactions (one per Spark
task: 4), timed with the client call the sink's commit makes
(`odradek.client.two_phase.finish_transactions`) over --commit-rounds rounds (median and p99),
beside the micro-batch durations (Spark's triggerExecution). Prints a markdown table and the
machine's load average before and after (the machine may be shared).

    python bench/bench_spark_eos.py [--records 200000] [--per-batch 20000] [--commit-rounds 100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from odradek.client import Admin, NewTopic, Producer
from odradek.client.two_phase import TwoPhaseProducer, finish_transactions
from odradek.cluster import Cluster
from odradek.spark.standalone import StandaloneCluster


def _ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def run_pipeline(sc: StandaloneCluster, bs: str, src: str, dst: str, guarantee: str,
                 records: int, per_batch: int, work: Path) -> dict[str, Any]:
    log = work / f"driver-{guarantee}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "odradek.spark.pipeline", "--master", sc.url, "--bootstrap",
             bs, "--source", src, "--sink", dst, "--checkpoint", str(work / f"ck-{guarantee}"),
             "--guarantee", guarantee, "--max-offsets", str(per_batch)],
            env=sc.env, stdout=out, stderr=subprocess.DEVNULL, start_new_session=True)
    batches: list[dict[str, Any]] = []
    deadline = time.monotonic() + 900
    try:
        while sum(b["rows"] for b in batches) < records:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {guarantee} driver stopped early: see {log}")
            time.sleep(1)
            batches = [json.loads(x) for x in log.read_text().splitlines()
                       if x.startswith('{"batch"')]
            batches = [b for b in batches if b["rows"] > 0]
    finally:
        import signal
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    timed = batches[1:]  # the first one carries the executors' and Python workers' start-up
    start = _ts(timed[0]["ts"])
    end = max(_ts(b["ts"]) + b["durations"]["triggerExecution"] / 1000 for b in timed)
    rows = sum(b["rows"] for b in timed)
    durs = [b["durations"]["triggerExecution"] for b in timed]
    return {"rows": rows, "seconds": end - start, "rate": rows / (end - start),
            "batches": len(timed), "batch_ms": statistics.median(durs)}


def commit_latency(bs: str, topic: str, tasks: int, rounds: int) -> list[float]:
    """Seconds of one micro-batch's commit: EndTxn for `tasks` prepared transactions."""
    out = []
    for r in range(rounds):
        prepared = []
        for t in range(tasks):
            with TwoPhaseProducer({"bootstrap.servers": bs,
                                   "transactional.id": f"bench-commit-{t}"}) as p:
                p.begin()
                p.send_rows([(topic, f"r{r}".encode(), None, t % 4, None)] * 100)
                prepared.append(p.prepare())
        t0 = time.perf_counter()
        finish_transactions({"bootstrap.servers": bs}, prepared, commit=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--per-batch", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--commit-rounds", type=int, default=100)
    a = ap.parse_args()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="odradek-bench-spark-"))
    cluster = Cluster(brokers=3).start()
    try:
        assert cluster.inner is not None
        bs = cluster.inner.bootstrap_servers
        names = ["bench-in", "bench-out-alo", "bench-out-eos", "bench-commit"]
        with Admin({"bootstrap.servers": bs}) as adm:
            adm.create_topics([NewTopic(n, a.partitions, 3) for n in names])
            adm.wait_for_topics(names, timeout=30)
        print(f"producing {a.records} records", file=sys.stderr)
        with Producer({"bootstrap.servers": bs, "linger.ms": 5}) as p:
            for i in range(a.records):
                p.send("bench-in", f"{i:012d}".encode() + b"x" * 88, partition=i % a.partitions)
        results = {}
        with StandaloneCluster(workers=2, base_dir=str(work / "standalone")) as sc:
            for g, dst in (("at-least-once", "bench-out-alo"), ("exactly-once", "bench-out-eos")):
                print(f"running {g}", file=sys.stderr)
                results[g] = run_pipeline(sc, bs, "bench-in", dst, g, a.records, a.per_batch,
                                          work)
        lat = commit_latency(bs, "bench-commit", a.partitions, a.commit_rounds)
    finally:
        cluster.stop()
    alo, eos = results["at-least-once"], results["exactly-once"]
    print(f"Spark pipeline (odradek source read_committed -> upper(value) -> odradek sink), "
          f"standalone cluster of 2 one-core workers, {a.records} records of 100 bytes, "
          f"{a.partitions} partitions, maxOffsetsPerTrigger={a.per_batch}, default trigger.\n")
    print("| sink | rows/s | micro-batches | median micro-batch ms | relative |")
    print("|---|---:|---:|---:|---:|")
    for g, r in results.items():
        print(f"| {g} | {r['rate']:,.0f} | {r['batches']} | {r['batch_ms']:.0f} | "
              f"{r['rate'] / alo['rate']:.2f} |")
    lat_ms = sorted(x * 1000 for x in lat)
    p99 = lat_ms[max(0, -(-99 * len(lat_ms) // 100) - 1)]  # nearest rank
    print(f"\nDriver commit per micro-batch (EndTxn of {a.partitions} transactions, "
          f"{len(lat_ms)} rounds): median {statistics.median(lat_ms):.1f} ms, p99 {p99:.1f} ms, "
          f"max {lat_ms[-1]:.1f} ms. Exactly-once / at-least-once throughput: "
          f"{eos['rate'] / alo['rate']:.2f}. Load average (1, 5, 15 min) before "
          + ", ".join(f"{x:.1f}" for x in load_before) + "; after "
          + ", ".join(f"{x:.1f}" for x in os.getloadavg()) + ".")


if __name__ == "__main__":
    main()
