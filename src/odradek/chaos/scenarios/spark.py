"""`odradek chaos --spark`: the Spark pipeline (odradek source, read_committed, a transform, the
odradek sink) on a Spark standalone cluster (a master and two workers, separate JVMs), under
faults, checked for exactly once.

Three broker processes (odradek.chaos.environment.processes, on ZooKeeper; topics with
replication 3) are fed records at a steady
rate while a driver process (`odradek.spark.pipeline`, Spark's default trigger) copies them.
Faults, in turn: kill -9 a worker's process group mid-batch (its executor dies; Spark retries the
tasks elsewhere, the retried attempt's InitProducerId fences the dead one's transaction); kill -9
the driver and start it again on its checkpoint (the replayed micro-batch is skipped where its
transactions were committed); kill -9 the broker that is the sink's transaction coordinator (the
coordinator moves; the driver's EndTxn finds the new one). Then the feed stops, a last driver
drains the input (Trigger.AvailableNow) and the run is judged by the consistency checker
(`odradek.chaos.checker.consistency`) on its history: the feed's sends (an idempotent acks=all
`ProducerWorker`, each send invoked and acknowledged or not), a read_committed
`ConsumerWorker` on the output during the run, and the output read back with read_committed
at the end; `through_pipeline` maps each input value to its upper-cased copy anywhere in the
output. With deliveryGuarantee=exactly-once no acknowledged input may be lost, none doubled,
and no record read with read_committed may be gone from the final output (a record of an
aborted attempt seen, then aborted); with at-least-once the loss and read checks are the
same and duplicates are counted and reported as expected. The output read with
read_uncommitted shows how many records of aborted attempts the log holds (the faults did
abort some). The plot shows the micro-batches' rows and durations with the faults marked.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ...client import Admin, NewTopic
from ...common import plot
from ...spark.eos import checkpoint_prefix
from ...spark.standalone import StandaloneCluster
from ..checker.consistency import CheckReport, Guarantees, check, through_pipeline
from ..checker.history import History
from ..environment.processes import ProcessCluster, stop_cleanly
from ..workload import ConsumerWorker, ProducerWorker, consume_all

FAULTS = ("worker", "driver", "coordinator")
READ_COMMITTED = {"isolation.level": "read_committed"}


def sink_guarantees(guarantee: str) -> Guarantees:
    """What the pipeline promises end to end: the feed is an idempotent acks=all producer and
    the topics have min.insync.replicas=2 (no acknowledged input lost); only the
    exactly-once sink's transactions (KIP-98) keep a retried task or a replayed micro-batch
    from writing its rows twice (Flink's DeliveryGuarantee.AT_LEAST_ONCE / EXACTLY_ONCE)."""
    eos = guarantee == "exactly-once"
    return Guarantees(acks="all", min_insync_replicas=2, idempotent=eos, transactional=eos)


@dataclass
class SparkChaosResult:
    guarantee: str
    consistency: CheckReport
    history: History = field(repr=False)
    aborted_records: int = 0  # in the output read_uncommitted, not read_committed
    events: list[tuple[float, str]] = field(default_factory=list)
    # (seconds since the start at the batch's end, rows, duration ms)
    batches: list[tuple[float, int, int]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.consistency.ok

    def observed(self, key: str) -> int:
        return self.consistency.row(key).observed

    def figures(self) -> str:
        c = self.consistency
        acked = c.row("lost").checked
        return (f"{acked} acknowledged inputs, " + ", ".join(
            f"{r.key} {r.observed} ({r.verdict})" for r in c.rows
            if r.key in ("lost", "duplicates", "truncated-reads", "unknown"))
            + f", {self.aborted_records} aborted records in the log")

    def summary(self) -> str:
        return (f"spark {self.guarantee}: {'OK' if self.ok else 'FAILED'}: {self.figures()}; "
                f"{len(self.batches)} micro-batches in {self.seconds:.0f} s; faults: "
                + ", ".join(e for _, e in self.events))


class _Driver:
    def __init__(self, sc: StandaloneCluster, args: list[str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "odradek.spark.pipeline", "--master", sc.url, *args],
                env=sc.env, stdout=out, stderr=out, start_new_session=True)  # JSON lines parsed

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def _batches(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def _wait_batches(log: Path, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len([b for b in _batches(log) if "batch" in b]) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {n} micro-batches in {timeout}s (see {log})")
        time.sleep(0.3)


def coordinator_of(bootstrap: str, transactional_id: str) -> int | None:
    with Admin({"bootstrap.servers": bootstrap}) as a:
        try:
            return a.describe_transactions([transactional_id])[transactional_id].coordinator_id
        except Exception:
            return None


def _judge(history: History, guarantee: str, bootstrap: str, partitions: int
           ) -> tuple[CheckReport, dict[int, list[tuple[int, str]]]]:
    """The checker on the history so far against the output read back with read_committed
    (returned too)."""
    output = consume_all(bootstrap, "spark-out", partitions, client_config=READ_COMMITTED)
    return check(through_pipeline(history, str.upper), sink_guarantees(guarantee),
                 output), output


def run_spark_chaos(zookeeper_connect: str, guarantee: str = "exactly-once",
                    faults: tuple[str, ...] = FAULTS,
                    rate: float = 400.0, partitions: int = 4, settle: float = 6.0,
                    drain_timeout: float = 60.0, batches_between: int = 2,
                    start_timeout: float = 600.0,
                    work_dir: str | None = None, log: Any = print,
                    standalone: StandaloneCluster | None = None) -> SparkChaosResult:
    """One run, brokers on `zookeeper_connect` (a chroot of its own); `standalone`: a running
    Spark cluster to use (else one is started and stopped); `batches_between`: micro-batches
    to wait for after each fault before the next (at most `start_timeout` seconds: a new
    driver's first micro-batch carries its executors' start-up, the Python workers' imports and
    the internal topics' creation, minutes on a loaded 2-core machine)."""
    base = Path(work_dir or tempfile.mkdtemp(prefix="odradek-spark-chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    t0, wall0 = time.monotonic(), time.time()
    events: list[tuple[float, str]] = []
    history = History()

    def event(what: str) -> None:
        events.append((time.monotonic() - t0, what))
        log(f"[{time.monotonic() - t0:6.1f}s] {what}")

    cluster = ProcessCluster(base / "brokers", zookeeper_connect, 3, overrides={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
        "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        # 4, not Kafka's 50 partitions each: the first FindCoordinator creates the topic, and
        # 150 replicas on three Python brokers take a while; coordinators still move on a kill.
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.num.partitions": "4"})
    sc: StandaloneCluster | None = None
    driver: _Driver | None = None
    feed_stop, reader_stop = threading.Event(), threading.Event()
    try:
        cluster.start()
        bs = cluster.bootstrap
        event("3 broker processes up")
        with Admin({"bootstrap.servers": bs}) as a:
            a.create_topics([NewTopic(t, partitions, 3, config={"min.insync.replicas": "2"})
                             for t in ("spark-in", "spark-out")])
            a.wait_for_topics(["spark-in", "spark-out"], timeout=30)
        sc = standalone or StandaloneCluster(workers=2,
                                             base_dir=str(base / "standalone")).start()
        event("standalone cluster up")
        ck = str(base / "checkpoint")
        args = ["--bootstrap", bs, "--source", "spark-in", "--sink", "spark-out",
                "--checkpoint", ck, "--guarantee", guarantee, "--max-offsets", "2000",
                "--transaction-timeout-ms", "120000"]
        feed = ProducerWorker(0, bs, "spark-in", rate, 120_000, feed_stop, history=history)
        reader = ConsumerWorker(0, bs, "spark-out", partitions, reader_stop, history,
                                client_config=READ_COMMITTED)
        feed.start()
        reader.start()
        driver_logs = [base / "driver-0.log"]
        driver = _Driver(sc, args, driver_logs[-1])
        _wait_batches(driver_logs[-1], 1, start_timeout)  # the executors are up
        if "worker" in faults:
            time.sleep(0.5)
            sc.kill_worker(0)
            event("kill -9 worker 0 (and its executor)")
            time.sleep(settle)
            sc.start_worker(0)
            event("worker 0 restarted")
            n = len(_batches(driver_logs[-1]))
            _wait_batches(driver_logs[-1], n + batches_between, start_timeout)
        if "driver" in faults:
            driver.kill()
            event("kill -9 driver")
            driver_logs.append(base / f"driver-{len(driver_logs)}.log")
            driver = _Driver(sc, args, driver_logs[-1])
            event("driver restarted on its checkpoint")
            _wait_batches(driver_logs[-1], batches_between, start_timeout)
        if "coordinator" in faults:
            prefix = checkpoint_prefix({"checkpointlocation": ck})
            node = coordinator_of(bs, f"{prefix}-0") if guarantee == "exactly-once" else None
            node = 1 if node is None else node
            cluster.brokers[node].kill()
            event(f"kill -9 broker {node}" + (" (transaction coordinator)"
                                              if guarantee == "exactly-once" else ""))
            n = len(_batches(driver_logs[-1]))
            time.sleep(settle)
            cluster.brokers[node].restart(clean=False)
            event(f"broker {node} restarted")
            _wait_batches(driver_logs[-1], n + batches_between, start_timeout)
        feed_stop.set()
        feed.join(150)
        event(f"feed stopped: {len(feed.stats.acked)} records acknowledged")
        # The running query catches up (Spark's default trigger); a driver with
        # Trigger.AvailableNow drains what is left only when it does not in time.
        deadline = time.monotonic() + drain_timeout
        report, _ = _judge(history, guarantee, bs, partitions)
        while (report.row("lost").observed and time.monotonic() < deadline
               and driver.proc.poll() is None):
            time.sleep(2)
            report, _ = _judge(history, guarantee, bs, partitions)
        driver.kill()
        if report.row("lost").observed:
            driver_logs.append(base / f"driver-{len(driver_logs)}.log")
            driver = _Driver(sc, [*args, "--available-now"], driver_logs[-1])
            if driver.proc.wait(240) != 0:
                raise RuntimeError(f"the draining driver failed: see {driver_logs[-1]}")
            event("drained (Trigger.AvailableNow)")
        else:
            event("the running query caught up")
        time.sleep(1.0)  # the reader's last fetches
        reader_stop.set()
        reader.join(30)
        output = consume_all(bs, "spark-out", partitions, client_config=READ_COMMITTED)
        for p, entries in output.items():  # the read-back, in the saved history too
            for offset, value in entries:
                history.read("read-back", p, offset, value)
        report = check(through_pipeline(history, str.upper), sink_guarantees(guarantee), output)
        uncommitted = consume_all(bs, "spark-out", partitions)
        aborted = sum(map(len, uncommitted.values())) - sum(map(len, output.values()))
        history.save(base / "history.jsonl")
        batches = []
        for lg in driver_logs:
            for b in _batches(lg):
                if "rows" in b:
                    ms = int(b.get("durations", {}).get("triggerExecution", 0))
                    start = datetime.fromisoformat(b["ts"].replace("Z", "+00:00")).timestamp()
                    batches.append((start - wall0 + ms / 1000, int(b["rows"]), ms))
        result = SparkChaosResult(guarantee, report, history, aborted, events, batches,
                                  time.monotonic() - t0)
        log(report.to_text().rstrip())
        log(result.summary())
        return result
    finally:
        feed_stop.set()
        reader_stop.set()
        if driver is not None:
            driver.kill()
        if sc is not None and standalone is None:
            sc.stop()
        elif sc is not None:  # leave the shared cluster with all its workers
            for i in range(sc.workers):
                if i not in sc.worker_procs:
                    sc.start_worker(i)
        stop_cleanly(cluster)
        cluster.close()


def plot_results(results: list[SparkChaosResult], path: str) -> Path:
    charts = []
    for r in results:
        charts.append(plot.line_chart(
            {"rows per micro-batch": [(t, rows) for t, rows, _ in r.batches],
             "micro-batch duration, ms / 10": [(t, ms / 10) for t, _, ms in r.batches]},
            title=f"Spark pipeline, {r.guarantee}: {r.figures()}",
            x_label="seconds (micro-batches at their end)", y_label="rows, ms/10",
            markers=[(t, e) for t, e in r.events if e.startswith(("kill", "driver r"))]))
    charts.append(plot.bar_chart(
        {r.guarantee: {"lost": r.observed("lost"), "duplicates": r.observed("duplicates"),
                       "truncated reads": r.observed("truncated-reads"),
                       "aborted records (read_uncommitted)": r.aborted_records}
         for r in results},
        title="The consistency checker: output (read_committed) against the acknowledged input",
        y_label="records"))
    return plot.write_svg(path, plot.stack(charts))


def run_spark_command(args: Any) -> int:
    """`odradek chaos --spark`: both guarantees, on --zookeeper or a local ZooKeeper."""
    import uuid

    rate = float(getattr(args, "rate", 400.0) or 400.0)
    work = Path(getattr(args, "data_dir", None) or tempfile.mkdtemp(prefix="odradek-spark-"))
    results = []

    def both(connect: str) -> None:
        for g in ("exactly-once", "at-least-once"):
            chroot = f"/odradek-chaos-spark-{uuid.uuid4().hex[:8]}"
            results.append(run_spark_chaos(connect + chroot, g, rate=rate,
                                           work_dir=str(work / g)))

    if getattr(args, "zookeeper", None):
        both(args.zookeeper.rstrip("/"))
    else:
        from ...coordination.zk_server import ZooKeeperServer

        with ZooKeeperServer(data_dir=work / "zookeeper", tick_time=500) as zk:
            both(zk.connect_string)
    for r in results:
        print(r.summary())
    if getattr(args, "plot", None):
        print(f"plot: {plot_results(results, args.plot)}")
    return 0 if all(r.ok for r in results) else 1
