"""`odradek chaos --spark`: the Spark pipeline (odradek source, read_committed, a transform, the
odradek sink) on a Spark standalone cluster (a master and two workers, separate JVMs), under
faults, checked for exactly once.

Three broker processes (odradek.chaos.environment.processes, on ZooKeeper; topics with
replication 3) are fed records at a steady rate while driver processes
(`odradek.spark.pipeline`, Spark's default trigger) copy them: one pipeline per sink guarantee
(exactly-once, at-least-once), side by side on the same brokers and Spark cluster, each with its
own topics, checkpoint and history. The transform has a per-row cost (--transform-cost-ms), so
a task's rows reach the sink over a second or more, and the faults wait for the sinks to be
writing (`wait_writing`: the output's high watermark moving, for exactly-once ahead of its last
stable offset: rows in transactions still open). Faults, in turn: kill -9 a worker's process
group mid-batch (its executors die; Spark retries the tasks elsewhere, the retried attempt's
InitProducerId fences the dead one's transaction and the coordinator aborts it; at-least-once,
the retry writes the dead attempt's delivered rows again); kill -9 each driver mid-batch and
start it again on its checkpoint (the replayed micro-batch's tasks abort the open transactions,
or write the rows again at-least-once); kill -9 the broker that is the exactly-once sink's
transaction coordinator (the coordinator moves; the driver's EndTxn finds the new one). Then
the feeds stop, the running queries catch up (a driver with Trigger.AvailableNow drains what is
left when one does not in time) and each run is judged by the consistency checker
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
from collections.abc import Callable
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


def _done(log: Path) -> int:
    return len([b for b in _batches(log) if "batch" in b])


@dataclass
class _Pipeline:
    """One guarantee's pipeline in a run: its feed into its input topic, its driver(s) writing
    its output topic, the read_committed reader of that output, and its own history."""

    guarantee: str
    source: str
    sink: str
    checkpoint: str
    history: History
    feed: ProducerWorker
    reader: ConsumerWorker
    logs: list[Path] = field(default_factory=list)
    driver: _Driver | None = None
    start_retried: bool = False

    def start_driver(self, sc: StandaloneCluster, args: list[str], base: Path) -> None:
        self.logs.append(base / f"driver-{self.tag}-{len(self.logs)}.log")
        self.driver = _Driver(sc, args, self.logs[-1])

    @property
    def tag(self) -> str:
        return "eos" if self.guarantee == "exactly-once" else "alo"

    def batches_done(self) -> int:
        return _done(self.logs[-1]) if self.logs else 0


# Spark's PythonWorkerFactory waits 10 s (not configurable) for a Python worker to connect back;
# on an overloaded machine a driver's planning worker can miss that and the query fails to start.
_WORKER_START_FAILED = "Python worker failed to connect back"


def _log_tail(log: Path, lines: int = 12) -> str:
    if not log.exists():
        return ""
    text = [ln for ln in log.read_text(errors="replace").splitlines()
            if ln.strip() and not ln.startswith(("\t", " ", "Picked up"))]
    return "\n".join(ln[:300] for ln in text[-lines:])


def _wait_batches(pipelines: list[_Pipeline], targets: list[int], timeout: float,
                  restart: Callable[[_Pipeline, str], None]) -> None:
    """Until each pipeline's current driver printed its target number of micro-batches (counted
    in its current log). A driver that exits meanwhile fails the run at once, with its log's
    end, unless it failed to start a Python worker in time (`_WORKER_START_FAILED`, before its
    first micro-batch): then `restart` starts it again on its checkpoint, once."""
    deadline = time.monotonic() + timeout
    while True:
        todo = [(p, n) for p, n in zip(pipelines, targets, strict=True)
                if p.batches_done() < n]
        if not todo:
            return
        for p, _ in todo:
            if p.driver is not None and p.driver.proc.poll() is not None:
                tail = _log_tail(p.logs[-1])
                if (_WORKER_START_FAILED in tail and p.batches_done() == 0
                        and not p.start_retried):
                    p.start_retried = True
                    restart(p, _WORKER_START_FAILED)
                    continue
                raise RuntimeError(f"the {p.guarantee} driver exited "
                                   f"({p.driver.proc.returncode}), {p.logs[-1]}:\n{tail}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {[n for _, n in todo]} micro-batches in {timeout}s "
                               f"(see {[str(p.logs[-1]) for p, _ in todo]})")
        time.sleep(0.3)


def _end_offsets(admin: Admin, topic: str, partitions: int, isolation_level: int) -> int:
    found = admin.list_offsets({(topic, p): -1 for p in range(partitions)},
                               isolation_level=isolation_level)
    return sum(offset for offset, _ in found.values())


def wait_writing(admin: Admin, pipelines: list[_Pipeline], partitions: int,
                 timeout: float, interval: float = 0.2) -> bool:
    """Until every pipeline's sink is writing at the same moment, seen in its output topic:
    the high watermark moved since the last look (a task is sending its rows; with
    --transform-cost-ms they trickle in over the task's whole run) and, for exactly-once, is
    ahead of the last stable offset (those rows are in transactions still open, which the
    driver has not committed). A kill then lands mid-batch, between a task's first send and
    its commit. False when that was not seen in `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = [_end_offsets(admin, p.sink, partitions, 0) for p in pipelines]
    while time.monotonic() < deadline:
        time.sleep(interval)
        writing = []
        for i, p in enumerate(pipelines):
            hw = _end_offsets(admin, p.sink, partitions, 0)
            moved, last[i] = hw > last[i], hw
            if moved and p.guarantee == "exactly-once":
                moved = hw > _end_offsets(admin, p.sink, partitions, 1)
            writing.append(moved)
        if all(writing):
            return True
    return False


def coordinator_of(bootstrap: str, transactional_id: str) -> int | None:
    with Admin({"bootstrap.servers": bootstrap}) as a:
        try:
            return a.describe_transactions([transactional_id])[transactional_id].coordinator_id
        except Exception:
            return None


def _judge(p: _Pipeline, bootstrap: str, partitions: int) -> CheckReport:
    """The checker on the pipeline's history so far against its output read back with
    read_committed."""
    output = consume_all(bootstrap, p.sink, partitions, client_config=READ_COMMITTED)
    return check(through_pipeline(p.history, str.upper), sink_guarantees(p.guarantee), output)


def run_spark_chaos(zookeeper_connect: str,
                    guarantees: tuple[str, ...] = ("exactly-once", "at-least-once"),
                    faults: tuple[str, ...] = FAULTS,
                    rate: float = 100.0, partitions: int = 4, settle: float = 2.0,
                    drain_timeout: float = 240.0, batches_between: int = 1,
                    start_timeout: float = 600.0, transform_cost_ms: int = 10,
                    max_offsets: int = 1000,
                    work_dir: str | None = None, log: Any = print,
                    standalone: StandaloneCluster | None = None) -> list[SparkChaosResult]:
    """One run, brokers on `zookeeper_connect` (a chroot of its own), one pipeline per
    guarantee side by side on the same brokers and Spark cluster (their own topics,
    checkpoints and drivers, spark.cores.max=2 each: an executor on each worker), under the
    same faults; one result per guarantee. `standalone`: a running Spark cluster to use (else
    one is started and stopped; with two pipelines its workers need 2 cores each);
    `batches_between`: micro-batches to wait for after each fault before the next (at most
    `start_timeout` seconds: a new driver's first micro-batch carries its executors' start-up,
    the Python workers' imports and the internal topics' creation, minutes on a loaded 2-core
    machine); `transform_cost_ms`: the transform's cost per row (the pipeline's
    --transform-cost-ms), which spreads a task's writes over a few seconds so the worker and
    driver kills land while the sink is writing (`wait_writing`)."""
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
        "transaction.state.log.min.isr": "2",
        # 4, not Kafka's 50 partitions each: the first FindCoordinator creates the topic, and
        # 150 replicas on three Python brokers take a while; coordinators still move on a kill.
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.num.partitions": "4"})
    sc: StandaloneCluster | None = None
    pipes: list[_Pipeline] = []
    feed_stop, reader_stop = threading.Event(), threading.Event()
    admin: Admin | None = None
    try:
        cluster.start()
        bs = cluster.bootstrap
        event("3 broker processes up")
        for i, g in enumerate(guarantees):
            tag = "eos" if g == "exactly-once" else "alo"
            h = History()
            pipes.append(_Pipeline(
                g, f"spark-in-{tag}", f"spark-out-{tag}", str(base / f"checkpoint-{tag}"), h,
                ProducerWorker(i, bs, f"spark-in-{tag}", rate, 120_000, feed_stop, history=h),
                ConsumerWorker(i, bs, f"spark-out-{tag}", partitions, reader_stop, h,
                               client_config=READ_COMMITTED)))
        topics = [t for p in pipes for t in (p.source, p.sink)]
        admin = Admin({"bootstrap.servers": bs})
        admin.create_topics([NewTopic(t, partitions, 3, config={"min.insync.replicas": "2"})
                             for t in topics])
        admin.wait_for_topics(topics, timeout=30)
        sc = standalone or StandaloneCluster(
            workers=2, cores=len(pipes), base_dir=str(base / "standalone")).start()
        event("standalone cluster up")

        def args(p: _Pipeline) -> list[str]:
            return ["--bootstrap", bs, "--source", p.source, "--sink", p.sink,
                    "--checkpoint", p.checkpoint, "--guarantee", p.guarantee,
                    "--max-offsets", str(max_offsets), "--transaction-timeout-ms", "120000",
                    "--transform-cost-ms", str(transform_cost_ms), "--cores-max", "2"]

        for p in pipes:
            p.feed.start()
            p.reader.start()
            p.start_driver(sc, args(p), base)
        def start_again(p: _Pipeline, why: str) -> None:
            assert sc is not None
            p.start_driver(sc, args(p), base)
            event(f"driver ({p.guarantee}) exited at its start ({why}): started again")

        # the executors are up
        _wait_batches(pipes, [1] * len(pipes), start_timeout, start_again)

        def mid_batch(which: list[_Pipeline]) -> str:
            assert admin is not None
            seen = wait_writing(admin, which, partitions, start_timeout / 4)
            return "mid-batch" if seen else "NOT seen writing"

        def recovered(n: list[int]) -> None:
            _wait_batches(pipes, [k + batches_between for k in n], start_timeout, start_again)

        if "worker" in faults:
            when = mid_batch(pipes)
            sc.kill_worker(0)
            n = [p.batches_done() for p in pipes]
            event(f"kill -9 worker 0 (and its executors), {when}")
            time.sleep(settle)
            sc.start_worker(0, wait=False)
            event("worker 0 restarted")
            recovered(n)
        if "driver" in faults:
            for p in pipes:
                when = mid_batch([p])
                assert p.driver is not None
                p.driver.kill()
                event(f"kill -9 driver ({p.guarantee}), {when}")
                p.start_driver(sc, args(p), base)
                event(f"driver ({p.guarantee}) restarted on its checkpoint")
            recovered([0] * len(pipes))
        if "coordinator" in faults:
            eos = [p for p in pipes if p.guarantee == "exactly-once"]
            node = None
            if eos:
                prefix = checkpoint_prefix({"checkpointlocation": eos[0].checkpoint})
                node = coordinator_of(bs, f"{prefix}-0")
            node = 1 if node is None else node
            n = [p.batches_done() for p in pipes]
            cluster.brokers[node].kill()
            event(f"kill -9 broker {node}" + (" (transaction coordinator)" if eos else ""))
            time.sleep(settle)
            cluster.brokers[node].restart(clean=False)
            event(f"broker {node} restarted")
            recovered(n)
        feed_stop.set()
        for p in pipes:
            p.feed.join(150)
            event(f"feed stopped ({p.guarantee}): {len(p.feed.stats.acked)} records "
                  "acknowledged")
        # The running queries catch up (Spark's default trigger); a driver with
        # Trigger.AvailableNow drains what is left only when one does not in time.
        deadline = time.monotonic() + drain_timeout
        behind = list(pipes)
        while behind and time.monotonic() < deadline:
            behind = [p for p in behind if _judge(p, bs, partitions).row("lost").observed
                      and p.driver is not None and p.driver.proc.poll() is None]
            if behind:  # each look reads the whole output back
                time.sleep(5)
        for p in pipes:
            assert p.driver is not None
            p.driver.kill()
            if _judge(p, bs, partitions).row("lost").observed:
                p.start_driver(sc, [*args(p), "--available-now"], base)
                if p.driver.proc.wait(240) != 0:
                    raise RuntimeError(f"the draining driver failed: see {p.logs[-1]}")
                event(f"drained ({p.guarantee}, Trigger.AvailableNow)")
            else:
                event(f"the running query caught up ({p.guarantee})")
        time.sleep(1.0)  # the readers' last fetches
        reader_stop.set()
        results = []
        for p in pipes:
            p.reader.join(30)
            output = consume_all(bs, p.sink, partitions, client_config=READ_COMMITTED)
            for part, entries in output.items():  # the read-back, in the saved history too
                for offset, value in entries:
                    p.history.read("read-back", part, offset, value)
            report = check(through_pipeline(p.history, str.upper),
                           sink_guarantees(p.guarantee), output)
            # librdkafka's default isolation.level is read_committed: say read_uncommitted
            uncommitted = consume_all(bs, p.sink, partitions,
                                      client_config={"isolation.level": "read_uncommitted"})
            aborted = sum(map(len, uncommitted.values())) - sum(map(len, output.values()))
            p.history.save(base / f"history-{p.tag}.jsonl")
            batches = []
            for lg in p.logs:
                for b in _batches(lg):
                    if "rows" in b:
                        ms = int(b.get("durations", {}).get("triggerExecution", 0))
                        start = datetime.fromisoformat(
                            b["ts"].replace("Z", "+00:00")).timestamp()
                        batches.append((start - wall0 + ms / 1000, int(b["rows"]), ms))
            result = SparkChaosResult(p.guarantee, report, p.history, aborted, list(events),
                                      batches, time.monotonic() - t0)
            log(report.to_text().rstrip())
            log(result.summary())
            results.append(result)
        return results
    finally:
        feed_stop.set()
        reader_stop.set()
        for p in pipes:
            if p.driver is not None:
                p.driver.kill()
        if admin is not None:
            admin.close()
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
            markers=[(t, e) for t, e in r.events
                     if e.startswith("kill") or "on its checkpoint" in e]))
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

    rate = float(getattr(args, "rate", 100.0) or 100.0)
    # Two executors per pipeline: at most half their time in the transform's per-row cost.
    cost_ms = max(1, min(10, int(1000 / rate)))
    work = Path(getattr(args, "data_dir", None) or tempfile.mkdtemp(prefix="odradek-spark-"))
    results = []

    def both(connect: str) -> None:
        chroot = f"/odradek-chaos-spark-{uuid.uuid4().hex[:8]}"
        results.extend(run_spark_chaos(connect + chroot, rate=rate, work_dir=str(work),
                                       transform_cost_ms=cost_ms, batches_between=2))

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
