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
drains the input (Trigger.AvailableNow) and the output is read with read_committed and counted
against the acknowledged input (`odradek.spark.audit.count_check`): exactly once with
deliveryGuarantee=exactly-once; with at-least-once nothing may be missing and duplicates are
counted and reported as expected. The plot shows the micro-batches' rows and durations with the
faults marked.
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

from ...client import Admin, NewTopic, Producer
from ...common import plot
from ...spark.audit import CountCheck, count_check, read_topic
from ...spark.eos import checkpoint_prefix
from ...spark.standalone import StandaloneCluster
from ..environment.processes import ProcessCluster, stop_cleanly

FAULTS = ("worker", "driver", "coordinator")


@dataclass
class SparkChaosResult:
    guarantee: str
    check: CountCheck
    events: list[tuple[float, str]] = field(default_factory=list)
    # (seconds since the start at the batch's end, rows, duration ms)
    batches: list[tuple[float, int, int]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.check.exactly_once if self.guarantee == "exactly-once" \
            else self.check.at_least_once

    def summary(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        extra = "" if self.guarantee == "exactly-once" else \
            f" ({self.check.duplicates} duplicates, expected with at-least-once)"
        return (f"spark {self.guarantee}: {verdict}: {self.check.summary()}{extra}; "
                f"{len(self.batches)} micro-batches in {self.seconds:.0f} s; faults: "
                + ", ".join(e for _, e in self.events))


class _Feed(threading.Thread):
    """Produces rec-NNNNNN values round-robin at `rate` per second; keeps the acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float) -> None:
        super().__init__(daemon=True, name="spark-chaos-feed")
        self.bootstrap, self.topic, self.partitions, self.rate = (bootstrap, topic,
                                                                  partitions, rate)
        self.acked: list[bytes] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        def done(err: Any, md: Any, v: bytes) -> None:
            if err is None:
                self.acked.append(v)
        with Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                       "delivery.timeout.ms": 120000}) as p:
            i, start = 0, time.monotonic()
            while not self.stop_event.is_set():
                due = int((time.monotonic() - start) * self.rate)
                while i < due:
                    v = f"rec-{i:06d}".encode()
                    p.send(self.topic, v, partition=i % self.partitions,
                           on_delivery=lambda e, m, v=v: done(e, m, v))
                    i += 1
                time.sleep(0.05)
            p.flush(120)


class _Driver:
    def __init__(self, sc: StandaloneCluster, args: list[str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "odradek.spark.pipeline", "--master", sc.url, *args],
                env=sc.env, stdout=out, stderr=subprocess.DEVNULL, start_new_session=True)

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


def run_spark_chaos(zookeeper_connect: str, guarantee: str = "exactly-once",
                    faults: tuple[str, ...] = FAULTS,
                    rate: float = 400.0, partitions: int = 4, settle: float = 6.0,
                    drain_timeout: float = 60.0,
                    work_dir: str | None = None, log: Any = print,
                    standalone: StandaloneCluster | None = None) -> SparkChaosResult:
    """One run, brokers on `zookeeper_connect` (a chroot of its own); `standalone`: a running
    Spark cluster to use (else one is started and stopped)."""
    base = Path(work_dir or tempfile.mkdtemp(prefix="odradek-spark-chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    t0, wall0 = time.monotonic(), time.time()
    events: list[tuple[float, str]] = []

    def event(what: str) -> None:
        events.append((time.monotonic() - t0, what))
        log(f"[{time.monotonic() - t0:6.1f}s] {what}")

    cluster = ProcessCluster(base / "brokers", zookeeper_connect, 3, overrides={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
        "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2"})
    sc: StandaloneCluster | None = None
    driver: _Driver | None = None
    feed: _Feed | None = None
    try:
        cluster.start()
        bs = cluster.bootstrap
        event("3 broker processes up")
        with Admin({"bootstrap.servers": bs}) as a:
            a.create_topics([NewTopic("spark-in", partitions, 3), NewTopic("spark-out",
                                                                            partitions, 3)])
            a.wait_for_topics(["spark-in", "spark-out"], timeout=30)
        sc = standalone or StandaloneCluster(workers=2,
                                             base_dir=str(base / "standalone")).start()
        event("standalone cluster up")
        ck = str(base / "checkpoint")
        args = ["--bootstrap", bs, "--source", "spark-in", "--sink", "spark-out",
                "--checkpoint", ck, "--guarantee", guarantee, "--max-offsets", "2000",
                "--transaction-timeout-ms", "120000"]
        feed = _Feed(bs, "spark-in", partitions, rate)
        feed.start()
        driver_logs = [base / "driver-0.log"]
        driver = _Driver(sc, args, driver_logs[-1])
        _wait_batches(driver_logs[-1], 2, 120)
        if "worker" in faults:
            time.sleep(0.5)
            sc.kill_worker(0)
            event("kill -9 worker 0 (and its executor)")
            time.sleep(settle)
            sc.start_worker(0)
            event("worker 0 restarted")
            n = len(_batches(driver_logs[-1]))
            _wait_batches(driver_logs[-1], n + 2, 120)
        if "driver" in faults:
            driver.kill()
            event("kill -9 driver")
            driver_logs.append(base / f"driver-{len(driver_logs)}.log")
            driver = _Driver(sc, args, driver_logs[-1])
            event("driver restarted on its checkpoint")
            _wait_batches(driver_logs[-1], 2, 120)
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
            _wait_batches(driver_logs[-1], n + 2, 120)
        feed.stop_event.set()
        feed.join(150)
        event(f"feed stopped: {len(feed.acked)} records acknowledged")
        expected = [v.upper() for v in feed.acked]
        # The running query catches up (Spark's default trigger); a driver with
        # Trigger.AvailableNow drains what is left only when it does not in time.
        deadline = time.monotonic() + drain_timeout
        check = count_check(expected, read_topic(bs, "spark-out", read_committed=True))
        while check.missing and time.monotonic() < deadline and driver.proc.poll() is None:
            time.sleep(2)
            check = count_check(expected, read_topic(bs, "spark-out", read_committed=True))
        driver.kill()
        if check.missing:
            driver_logs.append(base / f"driver-{len(driver_logs)}.log")
            driver = _Driver(sc, [*args, "--available-now"], driver_logs[-1])
            if driver.proc.wait(240) != 0:
                raise RuntimeError(f"the draining driver failed: see {driver_logs[-1]}")
            event("drained (Trigger.AvailableNow)")
            check = count_check(expected, read_topic(bs, "spark-out", read_committed=True))
        else:
            event("the running query caught up")
        batches = []
        for lg in driver_logs:
            for b in _batches(lg):
                if "rows" in b:
                    ms = int(b.get("durations", {}).get("triggerExecution", 0))
                    start = datetime.fromisoformat(b["ts"].replace("Z", "+00:00")).timestamp()
                    batches.append((start - wall0 + ms / 1000, int(b["rows"]), ms))
        result = SparkChaosResult(guarantee, check, events, batches, time.monotonic() - t0)
        log(result.summary())
        return result
    finally:
        if feed is not None:
            feed.stop_event.set()
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
            title=f"Spark pipeline, {r.guarantee}: {r.check.summary()}",
            x_label="seconds (micro-batches at their end)", y_label="rows, ms/10",
            markers=[(t, e) for t, e in r.events if e.startswith(("kill", "driver r"))]))
    charts.append(plot.bar_chart(
        {r.guarantee: {"missing": len(r.check.missing), "duplicates": r.check.duplicates,
                       "unexpected": len(r.check.unexpected)} for r in results},
        title="Output read with read_committed against the acknowledged input",
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
