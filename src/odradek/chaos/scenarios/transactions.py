"""`odradek chaos --transactions`: an exactly-once pipeline under faults.

`odradek chaos --transactions` / run_txn_chaos(): an input topic pre-filled with N unique values
(`v<i>`), `pipelines` processes of odradek.chaos.scenarios.txn_pipeline (confluent-kafka, each with
its own
stable transactional.id, one consumer group) copying them to an output topic as `out:v<i>` in
transactions that carry the consumed offsets (send_offsets_to_transaction), aborting some
transactions on purpose with marker values. Faults, one at a time, each healed before the next:

* ``kill_txn_coordinator``: kill -9 of the leader of the `__transaction_state` partition of a
  pipeline's transactional.id, restarted after a delay;
* ``kill_group_coordinator``: kill -9 of the leader of the group's `__consumer_offsets`
  partition, restarted likewise;
* ``kill_leader``: kill -9 of the leader of a random input or output partition;
* ``kill_pipeline``: kill -9 of a pipeline process, restarted (its successor fences it and
  aborts its open transaction).

At the end a read_committed consumer must see every input value transformed exactly once and no
marker value, a read_uncommitted one must see the marker values (the aborts happened), the group's
committed offsets must be the input's end, and the output's replicas identical below the HW.

`run_txn_chaos()` is the function tests call; odradek.chaos.command wraps it with its own
ZooKeeper.
"""

from __future__ import annotations

import random
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checker.replicas import ReplicaCheck, compare_replicas
from ..checker.verdict import run_failures
from ..config import ChaosConfig
from ..environment.process_faults import FaultInjector, FaultRecord, in_sync
from ..environment.processes import ProcessCluster, stop_cleanly
from ..support import Progress, poll_for, stderr_progress
from ..workload import poll_until_read

TXN_FAULT_KINDS = ("kill_txn_coordinator", "kill_group_coordinator", "kill_leader",
                   "kill_pipeline")
TRANSACTION_STATE_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
PIPELINE_MODULE = "odradek.chaos.scenarios.txn_pipeline"
ABORT_MARKER = "ABORTED-"  # the marker values of the pipeline's deliberate aborts


def coordinator_partition(key: str, partitions: int) -> int:
    """Kafka's partitionFor of a group id or transactional id: Utils.abs(String.hashCode) %
    partitions (ASCII keys: one UTF-16 unit per character)."""
    h = 0
    for ch in key:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass
class TxnChaosConfig:
    brokers: int = 3
    partitions: int = 6  # of the input and of the output topic
    values: int = 3000  # the input's unique values
    pipelines: int = 2
    batch: int = 20  # records per transaction at most
    pause_s: float = 0.05  # between a pipeline's transactions
    hold_s: float = 0.2  # a transaction open after its records are written: faults hit it
    abort_every: int = 5  # every n-th transaction of a pipeline aborted on purpose
    schedule: tuple[str, ...] = TXN_FAULT_KINDS
    seed: int = 0
    session_timeout_ms: int = 4000
    first_fault_after_s: float = 3.0
    gap_s: tuple[float, float] = (1.0, 2.0)
    restart_delay_s: float = 1.0
    heal_timeout_s: float = 60.0
    finish_timeout_s: float = 120.0  # for the pipelines to consume the rest after the faults
    progress_before: int = 3  # transactions committed since the previous fault, before a fault
    progress_timeout_s: float = 60.0  # pipelines not committing that long: a failure
    coordinator_partitions: int = 6  # of __transaction_state and __consumer_offsets
    input_topic: str = "txn-input"
    output_topic: str = "txn-output"
    group: str = "txn-pipeline"
    log_level: str = "INFO"
    extra_overrides: dict[str, str] = field(default_factory=dict)

    def transactional_id(self, i: int) -> str:
        return f"txn-pipeline-{i}"

    def chaos_config(self) -> ChaosConfig:
        """The replication chaos settings the shared FaultInjector reads."""
        return ChaosConfig(brokers=self.brokers, partitions=self.partitions, seed=self.seed,
                           topic=self.input_topic, session_timeout_ms=self.session_timeout_ms,
                           restart_delay_s=self.restart_delay_s,
                           heal_timeout_s=self.heal_timeout_s, log_level=self.log_level)

    def broker_overrides(self) -> dict[str, str]:
        rf = str(min(3, self.brokers))
        return {
            **self.chaos_config().broker_overrides(),
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": "2",
            "transaction.state.log.num.partitions": str(self.coordinator_partitions),
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": str(self.coordinator_partitions),
            **self.extra_overrides,
        }


@dataclass
class TxnChaosReport:
    config: TxnChaosConfig
    faults: list[FaultRecord] = field(default_factory=list)
    resumed_s: list[float | None] = field(default_factory=list)  # per fault: until a commit
    committed_read: int = 0  # records a read_committed consumer read from the output
    uncommitted_read: int = 0  # ... a read_uncommitted one
    missing: list[str] = field(default_factory=list)  # input values not in the output
    duplicates: list[str] = field(default_factory=list)  # output values read more than once
    aborted_visible: list[str] = field(default_factory=list)  # marker values read_committed
    unexpected: list[str] = field(default_factory=list)  # output values from no input
    markers_uncommitted: int = 0  # marker values read_uncommitted (the aborts happened)
    txns_committed: int = 0
    txns_aborted: int = 0  # on purpose
    deliberate_abort_records: int = 0  # the input records those transactions carried
    txns_aborted_after_error: int = 0  # by a pipeline after an abortable error
    commit_times_s: list[float] = field(default_factory=list)  # each commit, s since t0
    pipeline_restarts: int = 0  # restarts by the fault kill_pipeline
    pipeline_exits: list[str] = field(default_factory=list)  # exits nobody caused
    group_offsets: dict[int, int] = field(default_factory=dict)
    input_ends: dict[int, int] = field(default_factory=dict)
    output_lso: dict[int, int] = field(default_factory=dict)
    output_hw: dict[int, int] = field(default_factory=dict)
    replicas: list[ReplicaCheck] = field(default_factory=list)
    finished: bool = False  # the group's offsets reached the input's end
    healed: bool = True
    heal_problem: str | None = None
    stop_problems: list[str] = field(default_factory=list)
    broker_tracebacks: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    workdir: Path | None = None
    elapsed_s: float = 0.0

    @property
    def fault_aborted_records(self) -> int:
        """Output records of transactions aborted by something else than a deliberate abort:
        a pipeline's abort after an error, or the coordinator's abort of a killed pipeline's
        open transaction when its successor fenced it (read_uncommitted minus what the
        committed and the deliberately aborted transactions account for)."""
        return (self.uncommitted_read - self.committed_read - self.deliberate_abort_records
                - self.markers_uncommitted)

    @property
    def failures(self) -> list[str]:
        out = []
        if not self.finished:
            out.append(f"the pipelines did not finish: group offsets {self.group_offsets}, "
                       f"input ends {self.input_ends}")
        if self.missing:
            out.append(f"{len(self.missing)} input values missing from the output")
        if self.duplicates:
            out.append(f"{len(self.duplicates)} output values read more than once")
        if self.aborted_visible:
            out.append(f"{len(self.aborted_visible)} records of aborted transactions visible "
                       "to read_committed")
        if self.unexpected:
            out.append(f"{len(self.unexpected)} output values from no input value")
        if self.markers_uncommitted == 0:
            out.append("no aborted marker value read_uncommitted: the aborts were not tested")
        if self.output_lso != self.output_hw:
            out.append(f"output LSO {self.output_lso} != HW {self.output_hw} with no "
                       "transaction open")
        if not self.replicas or any(r.problem for r in self.replicas):
            out.append("output replicas differ below the high watermark" if self.replicas
                       else "output replicas not compared")
        out.extend(run_failures(self))
        return out

    @property
    def ok(self) -> bool:
        return not self.failures


class PipelineProcess:
    """One `python -m odradek.chaos.scenarios.txn_pipeline` process; its stdout (progress lines) and
    stderr go to files in `workdir`, appended across restarts."""

    def __init__(self, index: int, workdir: Path, args: list[str]) -> None:
        self.index = index
        self.args = args
        self.out_path = workdir / f"pipeline-{index}.out"
        self.err_path = workdir / f"pipeline-{index}.err"
        self.proc: Any = None
        self.expected_down = False
        self.starts = 0

    def start(self) -> None:
        import os
        import subprocess

        self.starts += 1
        with open(self.out_path, "ab") as out, open(self.err_path, "ab") as err:
            err.write(f"\n===== start {self.starts}\n".encode())
            err.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", PIPELINE_MODULE, *self.args], stdout=out, stderr=err,
                stdin=subprocess.DEVNULL, start_new_session=True, env=dict(os.environ))
        self.expected_down = False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        self.expected_down = True
        if self.running():
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(10)

    def terminate(self) -> None:
        """SIGTERM: the process ends after its current transaction (see wait)."""
        self.expected_down = True
        if self.running():
            self.proc.terminate()

    def wait(self, timeout: float = 30) -> int | None:
        """Its exit status; SIGKILL after `timeout` seconds."""
        import subprocess

        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def counts(self) -> tuple[int, int, int, int]:
        """Over every run, from stdout: transactions committed, transactions aborted on
        purpose, the input records those held, transactions aborted after an error."""
        committed = deliberate = deliberate_records = after_error = 0
        if self.out_path.exists():
            for line in self.out_path.read_text(errors="replace").splitlines():
                word, *rest = line.split()
                if word == "committed":
                    committed += 1
                elif word == "aborted" and rest and rest[0].isdigit():
                    deliberate += 1
                    deliberate_records += int(rest[0])
                elif line.startswith("aborted after error"):
                    after_error += 1
        return committed, deliberate, deliberate_records, after_error

    def commit_times(self) -> list[float]:
        """The wall-clock time (epoch seconds) of every commit, over every run, from the
        `@<time>` that ends each progress line."""
        times: list[float] = []
        if self.out_path.exists():
            for line in self.out_path.read_text(errors="replace").splitlines():
                if line.startswith("committed") and "@" in line:
                    try:
                        times.append(float(line.rsplit("@", 1)[1]))
                    except ValueError:
                        continue
        return times

    def tail(self, lines: int = 10) -> str:
        text = self.err_path.read_text(errors="replace") if self.err_path.exists() else ""
        out = self.out_path.read_text(errors="replace") if self.out_path.exists() else ""
        return "\n".join(out.splitlines()[-lines:] + text.splitlines()[-lines:])


class PipelineSupervisor(threading.Thread):
    """Restarts a pipeline process that exited while nobody meant it to (a fatal error, a
    crash), recording each such exit."""

    def __init__(self, pipelines: list[PipelineProcess], report: TxnChaosReport,
                 progress: Progress) -> None:
        super().__init__(name="txn-pipeline-supervisor", daemon=True)
        self.pipelines = pipelines
        self.report = report
        self.progress = progress
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            with self.lock:
                for pl in self.pipelines:
                    if pl.expected_down or pl.proc is None or pl.running():
                        continue
                    code = pl.proc.returncode
                    last = pl.tail(2).replace("\n", " | ")
                    self.report.pipeline_exits.append(f"pipeline {pl.index} exited {code}: "
                                                      f"{last}")
                    self.progress(f"pipeline {pl.index} exited {code} unexpectedly; restarting")
                    pl.start()


class TxnFaultInjector(FaultInjector):
    """The replication chaos injector with the transactional faults, and a healthy cluster
    meaning every ISR full in the input, output and both coordinator topics."""

    def __init__(self, cluster: ProcessCluster, txn: TxnChaosConfig, rng: random.Random,
                 t0: float, progress: Progress, supervisor: PipelineSupervisor) -> None:
        super().__init__(cluster, txn.chaos_config(), rng, t0, progress)
        self.txn = txn
        self.supervisor = supervisor
        self.topics = [txn.input_topic, txn.output_topic, TRANSACTION_STATE_TOPIC, OFFSETS_TOPIC]

    def healthy(self) -> bool | None:
        c = self.cluster
        if not all(b.running() for b in c.brokers.values()):
            return None
        if len(c.live_ids()) != len(c.brokers) or c.controller_or_none() is None:
            return None
        for topic in self.topics:
            if c.zk.exists(f"/brokers/topics/{topic}") is None:
                continue  # a coordinator topic not created yet
            if not in_sync(c.json(f"/brokers/topics/{topic}"), c.states(topic)):
                return None
        return True

    def describe(self) -> str:
        parts = []
        for topic in self.topics:
            try:
                states = self.cluster.states(topic)
                parts.append(f"{topic}: " + ", ".join(
                    f"p{p} leader {s['leader']} isr {s['isr']}" for p, s in states.items()))
            except Exception as exc:
                parts.append(f"{topic}: ({exc!r})")
        return f"live {self.cluster.live_ids()}; " + "; ".join(parts)

    def _kill_partition_leader(self, record: FaultRecord, start: float, topic: str, p: int,
                               what: str) -> None:
        leader = self.cluster.leader(topic, p)
        record.target = leader
        role = self._role(leader)
        self.cluster.brokers[leader].kill()

        def moved() -> int | None:
            now = self.cluster.leader(topic, p)
            return now if now not in (leader, -1) else None
        new = poll_for(moved, self._failover_timeout(), f"new leader of {topic}-{p}")
        record.failover_s = time.monotonic() - start
        record.detail = f"{what} {topic}-{p} leader {leader}{role} -> {new}"
        self._restart_after_delay(leader)

    def _kill_txn_coordinator(self, record: FaultRecord, start: float) -> None:
        tid = self.txn.transactional_id(self.rng.randrange(self.txn.pipelines))
        p = coordinator_partition(tid, self.txn.coordinator_partitions)
        self._kill_partition_leader(record, start, TRANSACTION_STATE_TOPIC, p,
                                    f"transaction coordinator of {tid}:")

    def _kill_group_coordinator(self, record: FaultRecord, start: float) -> None:
        p = coordinator_partition(self.txn.group, self.txn.coordinator_partitions)
        self._kill_partition_leader(record, start, OFFSETS_TOPIC, p,
                                    f"group coordinator of {self.txn.group}:")

    def _kill_leader(self, record: FaultRecord, start: float) -> None:
        topic = self.rng.choice([self.txn.input_topic, self.txn.output_topic])
        p = self.rng.randrange(self.txn.partitions)
        self._kill_partition_leader(record, start, topic, p, "partition")

    def _kill_pipeline(self, record: FaultRecord, start: float) -> None:
        pl = self.rng.choice(self.supervisor.pipelines)
        record.target = pl.index
        with self.supervisor.lock:
            pl.kill()
        record.failover_s = time.monotonic() - start
        time.sleep(self.config.restart_delay_s)
        with self.supervisor.lock:
            pl.start()
        self.supervisor.report.pipeline_restarts += 1
        record.detail = f"pipeline {pl.index} kill -9, restarted (start {pl.starts})"


def produce_input(bootstrap: str, topic: str, values: int) -> None:
    """`v0` .. `v<values-1>`, idempotent acks=all, every one delivered."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20})
    for i in range(values):
        while True:
            try:
                producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(60)
    if left:
        raise RuntimeError(f"{left} input values undelivered")


def read_topic(bootstrap: str, topic: str, partitions: int, isolation: str,
               timeout: float = 60.0) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of every record a consumer with `isolation` reads from the
    beginning to the end of each partition (the LSO for read_committed, the HW otherwise):
    done when librdkafka reports the end at or past the ListOffsets answer."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[tuple[int, int, str]] = []
        remaining = {p for p, end in ends.items() if end > 0}
        for msg in poll_until_read(
                consumer, remaining, timeout,
                lambda: f"{isolation} reader stuck on {sorted(remaining)}, ends {ends}"):
            if msg.error():  # the end of a partition, as far as `isolation` reads
                if msg.offset() >= ends[msg.partition()]:
                    remaining.discard(msg.partition())
                continue
            out.append((msg.partition(), msg.offset(), msg.value().decode()))
        return out
    finally:
        consumer.close()


def list_offsets(bootstrap: str, topic: str, partitions: int, isolation: str
                 ) -> dict[int, int]:
    """partition -> ListOffsets latest with `isolation` (LSO for read_committed, else HW)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lo-{uuid.uuid4()}",
                         "isolation.level": isolation})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets of `topic` (OffsetFetch; -1001 where none)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                 timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def check_output(report: TxnChaosReport, committed: list[tuple[int, int, str]],
                 uncommitted: list[tuple[int, int, str]]) -> None:
    """Every input value transformed exactly once among the read_committed records, no marker
    value of an aborted transaction, nothing else; the markers present read_uncommitted."""
    want = {f"out:v{i}" for i in range(report.config.values)}
    copies = Counter(v for _p, _o, v in committed)
    report.committed_read = len(committed)
    report.uncommitted_read = len(uncommitted)
    report.missing = sorted(want - set(copies))
    report.duplicates = sorted(v for v, n in copies.items() if n > 1)
    report.aborted_visible = sorted(v for v in copies if v.startswith(ABORT_MARKER))
    report.unexpected = sorted(v for v in copies if v not in want
                               and not v.startswith(ABORT_MARKER))
    report.markers_uncommitted = sum(1 for _p, _o, v in uncommitted
                                     if v.startswith(ABORT_MARKER))


def run_txn_chaos(config: TxnChaosConfig, workdir: Path, zookeeper_connect: str,
                  progress: Progress | None = None) -> TxnChaosReport:
    """Start the brokers, fill the input, run the pipelines through the faults, wait until the
    group's offsets reach the input's end, stop the pipelines cleanly, verify. The brokers and
    pipelines are always stopped; their logs stay in `workdir`."""
    t_start = time.monotonic()
    progress = progress or stderr_progress(t_start)
    report = TxnChaosReport(config, workdir=workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = ProcessCluster(workdir, zookeeper_connect, config.brokers,
                             overrides=config.broker_overrides(),
                             session_timeout_ms=config.session_timeout_ms,
                             log_level=config.log_level)
    pipelines: list[PipelineProcess] = []
    supervisor = PipelineSupervisor(pipelines, report, progress)
    try:
        progress(f"starting {config.brokers} brokers on {zookeeper_connect} in {workdir}")
        cluster.start()
        _create_txn_topics(cluster, config)
        injector = TxnFaultInjector(cluster, config, random.Random(config.seed),
                                    time.monotonic(), progress, supervisor)
        injector.wait_healthy(config.heal_timeout_s)
        produce_input(cluster.bootstrap, config.input_topic, config.values)
        report.input_ends = list_offsets(cluster.bootstrap, config.input_topic,
                                         config.partitions, "read_uncommitted")
        progress(f"input filled: {config.values} values; starting {config.pipelines} "
                 "pipelines")
        for i in range(config.pipelines):
            pipelines.append(PipelineProcess(i, workdir, [
                "--bootstrap", cluster.bootstrap, "--input", config.input_topic,
                "--output", config.output_topic, "--group", config.group,
                "--transactional-id", config.transactional_id(i), "--batch", str(config.batch),
                "--pause", str(config.pause_s), "--hold", str(config.hold_s),
                "--abort-every", str(config.abort_every)]))
            pipelines[-1].start()
        supervisor.start()
        injector.t0 = time.monotonic()
        wall_t0 = time.time()
        _txn_faults(config, injector, report, progress, pipelines)
        progress("faults over: healing the cluster")
        try:
            injector.heal()
        except Exception as exc:
            report.healed, report.heal_problem = False, str(exc)
        _await_pipelines(cluster, config, report, progress)
        supervisor.stop.set()
        supervisor.join()
        for pl in pipelines:
            pl.terminate()
        for pl in pipelines:
            pl.wait()
            c, a, records, after_error = pl.counts()
            report.txns_committed += c
            report.txns_aborted += a
            report.deliberate_abort_records += records
            report.txns_aborted_after_error += after_error
            report.commit_times_s += [t - wall_t0 for t in pl.commit_times()]
        progress(f"pipelines stopped ({report.txns_committed} transactions committed, "
                 f"{report.txns_aborted} aborted on purpose, {report.txns_aborted_after_error} "
                 "after an error); reading the output")
        bs = cluster.bootstrap
        report.output_hw = list_offsets(bs, config.output_topic, config.partitions,
                                        "read_uncommitted")
        report.output_lso = list_offsets(bs, config.output_topic, config.partitions,
                                         "read_committed")
        check_output(report,
                     read_topic(bs, config.output_topic, config.partitions, "read_committed"),
                     read_topic(bs, config.output_topic, config.partitions,
                                "read_uncommitted"))
        progress("stopping every broker cleanly, then comparing the output's replicas")
        assignment = cluster.assignment(config.output_topic)
        report.stop_problems = stop_cleanly(cluster)
        report.replicas = compare_replicas(cluster, config.output_topic, assignment, {})
    except Exception as exc:
        progress(f"run aborted: {traceback.format_exc()}")
        report.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        supervisor.stop.set()
        for pl in pipelines:
            if pl.running():
                pl.kill()
        cluster.close()
        report.broker_tracebacks = {i: b.stderr_text().count("Traceback")
                                    for i, b in cluster.brokers.items()}
        report.elapsed_s = time.monotonic() - t_start
    return report


def _create_txn_topics(cluster: ProcessCluster, config: TxnChaosConfig) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = [NewTopic(t, config.partitions, min(3, config.brokers), config={
        "min.insync.replicas": "2", "unclean.leader.election.enable": "false"})
        for t in (config.input_topic, config.output_topic)]
    for fut in admin.create_topics(topics, operation_timeout=20).values():
        fut.result(30)


def _txn_faults(config: TxnChaosConfig, injector: TxnFaultInjector, report: TxnChaosReport,
                progress: Progress, pipelines: list[PipelineProcess]) -> None:
    """Each fault once the pipelines are committing (`progress_before` new transactions since
    the previous fault healed), so that every fault hits a running pipeline; after each, how
    long until a pipeline commits again."""
    def committed() -> int:
        return sum(pl.counts()[0] for pl in pipelines)

    def committing(at_least: int) -> bool | None:
        return True if committed() >= at_least else None

    time.sleep(config.first_fault_after_s)
    for kind in config.schedule:
        wanted = committed() + config.progress_before
        try:
            poll_for(lambda: committing(wanted), config.progress_timeout_s,  # noqa: B023
                     "commits by the pipelines", interval=0.1)
        except TimeoutError as exc:
            report.errors.append(f"before {kind}: {exc}")
            return
        record = injector.run(kind)
        report.faults.append(record)
        if record.error:
            return
        next_commit = committed() + 1
        try:
            poll_for(lambda: committing(next_commit), config.progress_timeout_s,  # noqa: B023
                     f"a commit after {kind}", interval=0.05)
            report.resumed_s.append(time.monotonic() - (injector.t0 + record.at_s))
        except TimeoutError as exc:
            report.resumed_s.append(None)
            report.errors.append(f"after {kind}: {exc}")
            return
        time.sleep(injector.rng.uniform(*config.gap_s))


def _await_pipelines(cluster: ProcessCluster, config: TxnChaosConfig, report: TxnChaosReport,
                     progress: Progress) -> None:
    """Until the group's committed offsets reach the input's end (or the finish timeout)."""
    deadline = time.monotonic() + config.finish_timeout_s
    while time.monotonic() < deadline:
        try:
            report.group_offsets = group_offsets(cluster.bootstrap, config.group,
                                                 config.input_topic, config.partitions)
        except Exception as exc:  # a coordinator moving
            progress(f"group offsets unreadable: {exc}")
            time.sleep(1)
            continue
        if report.group_offsets == report.input_ends:
            report.finished = True
            return
        time.sleep(1)


def format_txn_report(report: TxnChaosReport) -> str:
    rows = [("t", "fault", "target", "failover", "healed", "committing", "what happened")]
    for i, f in enumerate(report.faults):
        resumed = report.resumed_s[i] if i < len(report.resumed_s) else None
        rows.append((f"{f.at_s:.1f}s", f.kind, str(f.target), _seconds(f.failover_s),
                     _seconds(f.healed_s), _seconds(resumed),
                     f.detail + (f" ERROR: {f.error}" if f.error else "")))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:6], widths, strict=True)) + "  " + r[6]
             for r in rows]
    lines.insert(1, "-" * min(120, sum(widths) + 14 + len(rows[0][6])))
    lines.append("(committing: from the fault until a pipeline committed a transaction again)")
    c = report.config
    identical = ("yes" if report.replicas and not any(r.problem for r in report.replicas)
                 else "NO")
    lines += [
        "",
        f"seed {c.seed}, {c.brokers} brokers, RF {min(3, c.brokers)}, min.insync.replicas 2, "
        f"{c.pipelines} exactly-once pipelines (confluent-kafka processes), {c.values} input "
        f"values, {len(report.faults)} faults, {report.elapsed_s:.0f}s in all",
        f"transactions       {report.txns_committed} committed, {report.txns_aborted} aborted "
        f"on purpose (every {c.abort_every}th, with marker values), "
        f"{report.txns_aborted_after_error} aborted after an error; each held open "
        f"{c.hold_s:.2f}s after its records were written",
        f"pipeline restarts  {report.pipeline_restarts} by faults; unexpected exits "
        f"{len(report.pipeline_exits)}" + "".join(f"\n  {e}" for e in report.pipeline_exits[:5]),
        f"finished           {'yes' if report.finished else 'NO'} (group offsets "
        f"{report.group_offsets}, input ends {report.input_ends})",
        f"read_committed     {report.committed_read} records",
        f"missing            {len(report.missing)}" + _some(report.missing),
        f"duplicates         {len(report.duplicates)}" + _some(report.duplicates),
        f"aborted visible    {len(report.aborted_visible)}" + _some(report.aborted_visible),
        f"unexpected         {len(report.unexpected)}" + _some(report.unexpected),
        f"read_uncommitted   {report.uncommitted_read} records, {report.markers_uncommitted} "
        f"aborted marker values among them, {report.fault_aborted_records} records of "
        "transactions aborted by errors or by fencing a killed pipeline",
        f"output LSO = HW    {'yes' if report.output_lso == report.output_hw else 'NO'} "
        f"({report.output_hw})",
        f"replicas identical {identical} below the HW (output, {len(report.replicas)} "
        "partitions)",
        f"broker tracebacks  {sum(report.broker_tracebacks.values())} in their stderr"
        + (f" {report.broker_tracebacks}" if any(report.broker_tracebacks.values()) else ""),
    ]
    lines += [f"  p{r.partition}: {r.problem}" for r in report.replicas if r.problem]
    lines.append("RESULT: " + ("OK" if report.ok else "FAILED: " + "; ".join(report.failures)))
    return "\n".join(lines)


def _seconds(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}s"


def _some(items: list[str]) -> str:
    return f"  e.g. {', '.join(items[:5])}" if items else ""


def plot_txn_report(report: TxnChaosReport, path: str) -> None:
    """Committed transactions per second (every pipeline) with the faults as markers, as an
    SVG file: where the pipelines stalled and when they committed again."""
    from ...common import plot

    times = sorted(t for t in report.commit_times_s if t >= 0)
    if not times:
        raise ValueError("no committed transaction to draw")
    per_second = [0] * (int(times[-1]) + 1)
    for t in times:
        per_second[int(t)] += 1
    svg = plot.line_chart(
        {"commits": [(float(i), float(n)) for i, n in enumerate(per_second)]},
        title=f"odradek chaos --transactions, seed {report.config.seed}: commits per second",
        x_label="seconds since the pipelines started", y_label="commits/s",
        markers=[(f.at_s, f.kind) for f in report.faults], step=True)
    plot.write_svg(path, svg)
