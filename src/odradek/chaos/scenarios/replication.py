"""`odradek chaos`: replication under faults (S-3, S-4), checked end to end.

Broker processes on a real ZooKeeper, a topic with replication factor 3,
`min.insync.replicas=2` and unclean leader election off. Idempotent acks=all producers write
unique values (`p<producer>-<seq>`) while faults are injected one at a time, each after the
cluster has healed from the previous one (all brokers registered, every ISR full), so that at
most one broker is ever down and min ISR 2 stays reachable:

* ``kill_leader``: kill -9 of the leader of a random partition, restarted after a short delay;
* ``kill_controller``: kill -9 of the controller, restarted likewise;
* ``pause_leader``: SIGSTOP of the leader of a random partition for longer than the
  coordination session timeout, then SIGCONT;
* ``restart``: clean restart (SIGTERM: controlled shutdown, then start) of a random broker.

With ``--admin-ops`` (S-6.1, S-6.2) admin operations join the schedule, through odradek's admin
client:

* ``reassign``: AlterPartitionReassignments of one or two random partitions to a random replica
  set (a new target may replace one still running); every other time the controller is killed
  (kill -9) right after the request, so that its successor must resume the move. The move is not
  waited for: later faults hit it while its new replicas catch up;
* ``elect_leaders``: ElectLeaders (PREFERRED) for every partition of the topic; the partitions
  it reports elected must be led by their preferred replica.

The cluster counts as healed when every broker is back and every ISR holds its partition's
replicas except those a reassignment is still adding. At the end, every partition must have
reached its last requested target (``/admin/reassign_partitions`` gone) within a grace period;
a reassignment still in progress then is a failure.

Then the cluster is healed, the producers flush, and three things are verified:

1. every acknowledged value is read back by a consumer at the offset its acknowledgement gave
   (zero lost); values present more than once are duplicates (zero expected with idempotence);
   values present but never acknowledged are reported (written, the acknowledgement lost);
2. after a clean stop of every broker, each replica's log is byte-for-byte identical below the
   high watermark (the `replication-offset-checkpoint` of the replicas), batch by batch;
3. the cluster healed after every fault (no stuck ISR), and every reassignment completed.

The workload is also recorded as a Jepsen-style history (odradek.chaos.checker.history: each send
invoked, then acknowledged or of unknown outcome; each record a consumer reads *during* the
faults), saved as ``history.jsonl`` in the run's directory, and the consistency checker
(odradek.chaos.checker.consistency) checks it against the logs read back and the replicas' logs: no
acknowledged write lost, no read of a record later truncated, per-producer order, no
duplicates, replicas identical below the HW, each stated with whether Kafka promises it under
the run's settings. Its table ends the report, and a guarantee Kafka promises that does not
hold fails the run. ChaosConfig's ``acks``, ``idempotence``, ``min_insync_replicas`` and
``unclean_leader_election`` weaken the settings (defaults: the safe ones above); what they no
longer promise (losses with acks=1, duplicates without idempotence) is then counted and reported
as expected, not as a failure. Each fault is also written to ``faults.log`` in the run's
directory (odradek.common.fault_log: a kill lasts until the restart, a pause until SIGCONT),
which ``state-change-log --plot`` finds beside the brokers' logs.

``--plot FILE.svg`` draws the checker's timeline (operations per second: acknowledged, unknown,
read; lost and truncated records) over the acknowledged writes per second of each producer,
with the faults shaded from start to end (odradek.common.plot).

`run_chaos()` is the function tests call; `odradek chaos` (odradek.chaos.command) wraps
it with its own ZooKeeper. ``odradek chaos --transactions`` runs the transactional workload of
odradek.chaos.scenarios.transactions instead, with this module's fault injector.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ...common.fault_log import FAULT_LOG_NAME, FaultLog, fault_spans, read_fault_events
from ...protocol import records as rb
from ...storage.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
from ..checker.consistency import CheckReport, Guarantees, check
from ..checker.history import History
from ..environment.processes import ProcessCluster

FAULT_KINDS = ("kill_leader", "kill_controller", "pause_leader", "restart")
ADMIN_FAULT_KINDS = ("reassign", "elect_leaders")
# ElectLeaders answers that are no failure: nothing to do, or the preferred replica cannot lead
# (Kafka's error codes: ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE).
ELECTION_NOT_NEEDED = 84
PREFERRED_LEADER_NOT_AVAILABLE = 80

T = TypeVar("T")
Progress = Callable[[str], None]


# -- configuration and results ------------------------------------------------------------------


@dataclass
class ChaosConfig:
    brokers: int = 3
    partitions: int = 6
    duration_s: float = 60.0  # the fault phase; a fault begun before its end completes
    seed: int = 0
    producers: int = 2
    rate: float = 200.0  # messages per second per producer
    consumers: int = 1  # read the topic during the faults (the checker's truncated reads)
    faults: tuple[str, ...] = FAULT_KINDS
    schedule: tuple[str, ...] | None = None  # exactly these faults in order (duration ignored)
    topic: str = "chaos"
    session_timeout_ms: int = 4000
    replica_lag_time_max_ms: int = 5000
    segment_bytes: int = 1 << 20  # small segments: the comparison crosses segment files
    first_fault_after_s: float = 2.0
    gap_s: tuple[float, float] = (1.0, 3.0)  # quiet time between faults, once healed
    restart_delay_s: float = 1.0  # between a kill -9 and the restart
    pause_s: float | None = None  # SIGSTOP length; default 1.5 x the session timeout
    heal_timeout_s: float = 60.0
    message_timeout_ms: int = 60000
    rebalance_check_s: int = 10  # leader.imbalance.check.interval.seconds: preferred elections
    reassign_grace_s: float = 60.0  # after healing, for the reassignments to complete
    log_level: str = "INFO"
    extra_overrides: dict[str, str] = field(default_factory=dict)
    # The settings that decide what Kafka promises (the consistency checker's Guarantees).
    # The defaults promise everything; with weaker ones (acks=1, say) the losses Kafka allows
    # are counted and reported as expected, not as failures.
    acks: str = "all"
    idempotence: bool = True
    min_insync_replicas: int = 2
    unclean_leader_election: bool = False

    def guarantees(self) -> Guarantees:
        return Guarantees.from_configs(
            {"min.insync.replicas": str(self.min_insync_replicas),
             "unclean.leader.election.enable": str(self.unclean_leader_election).lower()},
            # librdkafka's max.in.flight: 1000000 by default, at most 5 with idempotence
            {"acks": self.acks, "enable.idempotence": str(self.idempotence).lower(),
             "max.in.flight.requests.per.connection": "5" if self.idempotence else "1000000"})

    def producer_config(self) -> dict[str, Any]:
        """What the workload's producers are given over ProducerWorker's defaults."""
        if self.acks == "all" and self.idempotence:
            return {}
        return {"acks": self.acks, "enable.idempotence": self.idempotence}

    @property
    def pause_length_s(self) -> float:
        return self.pause_s if self.pause_s is not None else 1.5 * self.session_timeout_ms / 1000

    def broker_overrides(self) -> dict[str, str]:
        return {
            "default.replication.factor": str(min(3, self.brokers)),
            "min.insync.replicas": str(self.min_insync_replicas),
            "unclean.leader.election.enable": str(self.unclean_leader_election).lower(),
            "replica.lag.time.max.ms": str(self.replica_lag_time_max_ms),
            "controlled.shutdown.retry.backoff.ms": "200",
            "log.segment.bytes": str(self.segment_bytes),
            "leader.imbalance.check.interval.seconds": str(self.rebalance_check_s),
            **self.extra_overrides,
        }


@dataclass
class FaultRecord:
    at_s: float  # since the workload started
    kind: str
    target: int
    detail: str = ""
    failover_s: float | None = None  # until a new leader / controller / the broker stopped
    healed_s: float | None = None  # until every broker is back and every ISR full again
    error: str | None = None


@dataclass
class ProducerStats:
    index: int
    sent: int = 0
    # value -> (partition, offset); the offset is None when librdkafka delivered the message
    # without one (see check_values)
    acked: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # value -> error name
    undelivered: int = 0  # still queued after the final flush
    fatal: str | None = None
    ack_times: list[float] = field(default_factory=list)  # time.monotonic() of each ack


@dataclass
class ReplicaCheck:
    topic: str
    partition: int
    high_watermarks: dict[int, int]  # broker -> checkpointed HW
    compared_below: int
    problem: str | None = None


@dataclass
class ReassignmentCheck:
    """One partition's last requested reassignment and where it ended."""

    partition: int
    target: tuple[int, ...]
    requested_at_s: float
    replicas: tuple[int, ...] | None = None  # the AR at the end (None: unreadable)
    pending: bool = True  # still listed in /admin/reassign_partitions

    @property
    def completed(self) -> bool:
        return not self.pending and self.replicas == self.target


@dataclass
class ChaosReport:
    config: ChaosConfig
    faults: list[FaultRecord] = field(default_factory=list)
    sent: int = 0
    acked: int = 0
    lost: list[str] = field(default_factory=list)  # acked, never read back
    misplaced: list[str] = field(default_factory=list)  # acked, read back at another offset
    duplicates: int = 0  # extra copies of values read back more than once
    unacked_written: int = 0  # read back, never acknowledged nor failed
    failed_written: int = 0  # read back, though delivery reported an error
    read_back: int = 0
    delivery_errors: Counter[str] = field(default_factory=Counter)
    undelivered: int = 0
    fatal_errors: list[str] = field(default_factory=list)
    replicas: list[ReplicaCheck] = field(default_factory=list)
    healed: bool = True
    heal_problem: str | None = None
    stop_problems: list[str] = field(default_factory=list)  # clean shutdowns that failed
    broker_tracebacks: dict[int, int] = field(default_factory=dict)  # in brokers' stderr
    errors: list[str] = field(default_factory=list)  # the run itself broke off
    acked_end: dict[int, int] = field(default_factory=dict)  # partition -> max acked + 1
    acked_without_offset: int = 0  # delivered, but librdkafka gave no offset (check_values)
    reassignments: list[ReassignmentCheck] = field(default_factory=list)
    throughput: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    workdir: Path | None = None
    elapsed_s: float = 0.0
    history: History | None = field(default=None, repr=False)  # the workload, op by op
    consistency: CheckReport | None = field(default=None, repr=False)  # the checker's verdict

    @property
    def replicas_identical(self) -> bool:
        return bool(self.replicas) and all(r.problem is None for r in self.replicas)

    @property
    def failures(self) -> list[str]:
        out = []
        promised = self.config.guarantees()  # acks=all, idempotence...: every check counts
        if self.lost and promised.no_loss:
            out.append(f"{len(self.lost)} acknowledged values lost")
        if self.misplaced and promised.no_loss:
            out.append(f"{len(self.misplaced)} acknowledged values at another offset")
        if self.duplicates and promised.no_duplicates:
            out.append(f"{self.duplicates} duplicates (idempotent producers: expected 0)")
        if not self.replicas_identical:
            out.append("replicas differ below the high watermark" if self.replicas
                       else "replicas not compared")
        if not self.healed:
            out.append(f"cluster did not heal: {self.heal_problem}")
        out.extend(f"clean shutdown failed: {p}" for p in self.stop_problems)
        out.extend(f"run aborted: {e}" for e in self.errors)
        out.extend(f"fault {f.kind} at {f.at_s:.1f}s: {f.error}" for f in self.faults
                   if f.error)
        out.extend(f"fatal producer error: {e}" for e in self.fatal_errors)
        if self.consistency is not None and not self.consistency.ok:
            out.append("consistency check failed: " + ", ".join(
                f"{r.guarantee} ({r.observed})" for r in self.consistency.rows
                if r.verdict == "FAIL"))
        stuck = [r for r in self.reassignments if not r.completed]
        if stuck:
            out.append(f"{len(stuck)} reassignments not completed after "
                       f"{self.config.reassign_grace_s:.0f}s: " + ", ".join(
                           f"p{r.partition} -> {list(r.target)} (AR "
                           f"{list(r.replicas) if r.replicas is not None else '?'}"
                           f"{', pending' if r.pending else ''})" for r in stuck))
        return out

    @property
    def ok(self) -> bool:
        return not self.failures


# -- small helpers ---------------------------------------------------------------------------------


def poll_for(fn: Callable[[], T | None], timeout: float, what: str,
             interval: float = 0.05) -> T:
    """The first non-None result of `fn` (exceptions count as not yet); TimeoutError after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = fn()
            if value is not None:
                return value
        except Exception as exc:  # a znode in flux, a broker not answering yet
            last = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:.0f}s"
                               + (f" (last error: {last!r})" if last else ""))
        time.sleep(interval)


def client_logger(workdir: Path) -> logging.Logger:
    """librdkafka's log lines (disconnects during faults) go to `workdir/clients.log`, not to
    the terminal."""
    logger = logging.getLogger(f"odradek.chaos.clients.{workdir}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    if not logger.handlers:
        handler = logging.FileHandler(workdir / "clients.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
    return logger


def chaos_workdir(data_dir: str | None, prefix: str) -> tuple[Path, bool]:
    """A run's directory: `--data-dir` when given, else a new temporary one; and whether the
    run owns it (a run removes only its own directory, after a success without --keep)."""
    workdir = Path(data_dir or tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir, data_dir is None


def stderr_progress(t0: float) -> Progress:
    def progress(message: str) -> None:
        print(f"[{time.monotonic() - t0:7.1f}s] {message}", file=sys.stderr, flush=True)
    return progress


# -- the workload ----------------------------------------------------------------------------------


class ProducerWorker(threading.Thread):
    """One idempotent acks=all producer writing `p<index>-<seq>` at `rate` per second until
    `stop` is set, then flushing. Delivery callbacks run on this thread (in poll/flush)."""

    def __init__(self, index: int, bootstrap: str, topic: str, rate: float,
                 message_timeout_ms: int, stop: threading.Event,
                 logger: logging.Logger | None = None,
                 client_config: dict[str, Any] | None = None,
                 history: History | None = None) -> None:
        super().__init__(name=f"chaos-producer-{index}", daemon=True)
        self.stats = ProducerStats(index)
        self.history = history  # each send: invoke, then ok (acked) or info (error)
        self.logger = logger
        self.client_config = dict(client_config or {})  # security.protocol, sasl.*, ssl.*
        self.bootstrap = bootstrap
        self.topic = topic
        self.rate = rate
        self.message_timeout_ms = message_timeout_ms
        self.stop = stop

    def _config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
            "message.timeout.ms": self.message_timeout_ms, "linger.ms": 5,
            "retry.backoff.ms": 100, "client.id": self.name, "error_cb": self._on_error,
            **self.client_config}
        if self.logger is not None:
            config["logger"] = self.logger
        return config

    def _on_error(self, err: Any) -> None:
        if err.fatal():
            self.stats.fatal = f"{err.name()}: {err.str()}"
            self.stop.set()

    def _on_delivery(self, err: Any, msg: Any, op: int | None = None) -> None:
        value = msg.value().decode()
        if err is None:
            self.stats.acked[value] = (msg.partition(), msg.offset())
            self.stats.ack_times.append(time.monotonic())
            if op is not None and self.history is not None:
                offset = msg.offset()
                self.history.ok(op, offset=offset if offset is not None and offset >= 0
                                else None, partition=msg.partition())
        else:
            self.stats.failed[value] = err.name()
            if op is not None and self.history is not None:
                # A delivery error of librdkafka does not say whether an earlier attempt was
                # written (a timed-out request may have been): the outcome is unknown.
                self.history.info(op, error=err.name(), partition=msg.partition())

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(self._config())
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        seq = 0
        while not self.stop.is_set():
            value = f"p{self.stats.index}-{seq}"
            op = (self.history.invoke(self.name, "send", value)
                  if self.history is not None else None)
            try:
                producer.produce(self.topic, value=value.encode(),
                                 key=f"p{self.stats.index}-k{seq % 64}".encode(),
                                 on_delivery=lambda err, msg, op=op: self._on_delivery(
                                     err, msg, op))
            except BufferError:
                if op is not None and self.history is not None:
                    self.history.fail(op, error="BufferError")  # never handed to librdkafka
                producer.poll(0.05)
                continue
            seq += 1
            self.stats.sent = seq
            next_at = max(next_at + interval, time.monotonic() - 1.0)
            while (delay := next_at - time.monotonic()) > 0:
                producer.poll(delay)
        self.stats.undelivered = producer.flush(self.message_timeout_ms / 1000 + 10)


class ConsumerWorker(threading.Thread):
    """Reads every partition of `topic` from the beginning while the faults go on, recording
    each record it is given in `history` (``read`` ops): a consumer only sees records below
    the high watermark, so none of them may be truncated later (the checker's
    truncated-reads row)."""

    def __init__(self, index: int, bootstrap: str, topic: str, partitions: int,
                 stop: threading.Event, history: History,
                 logger: logging.Logger | None = None,
                 client_config: dict[str, Any] | None = None) -> None:
        super().__init__(name=f"chaos-consumer-{index}", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.stop, self.history, self.logger = stop, history, logger
        self.client_config = dict(client_config or {})
        self.read = 0
        self.error: str | None = None

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap, "group.id": f"odradek-{self.name}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "client.id": self.name, **self.client_config}
        if self.logger is not None:
            config["logger"] = self.logger
        consumer = Consumer(config)
        try:
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                             for p in range(self.partitions)])
            while not self.stop.is_set():
                for msg in consumer.consume(500, 0.2):
                    if msg.error():
                        continue  # partition EOF, a broker gone: librdkafka carries on
                    value = msg.value()
                    self.history.read(self.name, msg.partition(), msg.offset(),
                                      value.decode() if value is not None else None)
                    self.read += 1
        except Exception as exc:  # reported; the run's other checks go on
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            consumer.close()


# -- faults ----------------------------------------------------------------------------------------


class FaultInjector:
    """Injects one fault at a time on `cluster` and records what the cluster did."""

    def __init__(self, cluster: ProcessCluster, config: ChaosConfig, rng: random.Random,
                 t0: float, progress: Progress) -> None:
        self.cluster = cluster
        self.config = config
        self.rng = rng
        self.t0 = t0
        self.progress = progress
        self.topic = config.topic
        self.reassignments: dict[int, ReassignmentCheck] = {}  # partition -> last request
        self.fault_log: FaultLog | None = None  # where the faults are recorded, if anywhere
        self._open_faults: dict[int, tuple[int, str]] = {}  # broker -> (fault id, kind)

    # -- the fault log ------------------------------------------------------------------------
    def _fault_start(self, kind: str, broker: int, detail: str = "") -> None:
        """A fault on `broker` that lasts until `_fault_end(broker)` (its restart, resume)."""
        if self.fault_log is not None:
            self._fault_end(broker)
            fault_id = self.fault_log.start(kind, [f"broker-{broker}"], detail)
            self._open_faults[broker] = (fault_id, kind)

    def _fault_end(self, broker: int) -> None:
        if self.fault_log is not None and broker in self._open_faults:
            fault_id, kind = self._open_faults.pop(broker)
            self.fault_log.end(fault_id, kind, [f"broker-{broker}"])

    def _fault_instant(self, kind: str, targets: Sequence[object], detail: str = "") -> None:
        if self.fault_log is not None:
            self.fault_log.instant(kind, targets, detail)

    # -- cluster views ----------------------------------------------------------------------------
    def healthy(self) -> bool | None:
        """Every broker running and registered, a controller, every ISR full (but for the
        replicas a reassignment is still adding); else None."""
        c = self.cluster
        if not all(b.running() for b in c.brokers.values()):
            return None
        if len(c.live_ids()) != len(c.brokers) or c.controller_or_none() is None:
            return None
        node = c.json(f"/brokers/topics/{self.topic}")
        states = c.states(self.topic)
        return True if in_sync(node, states) else None

    def describe(self) -> str:
        try:
            states = self.cluster.states(self.topic)
            parts = [f"p{p}: leader {s['leader']} isr {s['isr']}" for p, s in states.items()]
            return (f"live {self.cluster.live_ids()}, controller "
                    f"{self.cluster.controller_or_none()}; " + "; ".join(parts))
        except Exception as exc:
            return f"(state unreadable: {exc!r})"

    def wait_healthy(self, timeout: float) -> None:
        try:
            poll_for(self.healthy, timeout, "healthy cluster", interval=0.1)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}: {self.describe()}") from None

    def _random_leader(self) -> tuple[int, int]:
        p = self.rng.randrange(self.config.partitions)
        return p, self.cluster.leader(self.topic, p)

    def _new_leader(self, p: int, old: int, timeout: float) -> int:
        def check() -> int | None:
            leader = self.cluster.leader(self.topic, p)
            return leader if leader not in (old, -1) else None
        return poll_for(check, timeout, f"new leader of partition {p}")

    def _role(self, broker: int) -> str:
        return " (controller)" if self.cluster.controller_or_none() == broker else ""

    # -- the faults -------------------------------------------------------------------------------
    def run(self, kind: str) -> FaultRecord:
        record = FaultRecord(time.monotonic() - self.t0, kind, -1)
        start = time.monotonic()
        try:
            getattr(self, f"_{kind}")(record, start)
            self.wait_healthy(self.config.heal_timeout_s)
            record.healed_s = time.monotonic() - start
        except Exception as exc:  # timeouts, a broker that would not stop or start, kazoo
            self.progress(f"fault {kind} failed: {exc}")  # with a broker's stderr tail
            record.error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        self.progress(f"fault {kind} on broker {record.target}: {record.detail}"
                      + (f"; healed in {record.healed_s:.1f}s" if record.healed_s else "")
                      + (f"; ERROR {record.error}" if record.error else ""))
        return record

    def _failover_timeout(self) -> float:
        return self.config.session_timeout_ms / 1000 * 3 + 15

    def _kill_leader(self, record: FaultRecord, start: float) -> None:
        p, leader = self._random_leader()
        record.target = leader
        role = self._role(leader)
        self._fault_start("kill", leader, f"kill -9, leader of p{p}{role}")
        self.cluster.brokers[leader].kill()
        new = self._new_leader(p, leader, self._failover_timeout())
        record.failover_s = time.monotonic() - start
        record.detail = f"p{p} leader {leader}{role} -> {new}"
        self._restart_after_delay(leader)

    def _kill_controller(self, record: FaultRecord, start: float) -> None:
        old = self.cluster.controller()
        epoch = self.cluster.controller_epoch()
        record.target = old
        self._fault_start("kill", old, "kill -9, the controller")
        self.cluster.brokers[old].kill()

        def check() -> int | None:
            now = self.cluster.controller_or_none()
            return now if now not in (None, old) else None
        new = poll_for(check, self._failover_timeout(), "new controller")
        record.failover_s = time.monotonic() - start
        # /controller is created before /controller_epoch is bumped: wait for the bump (S-5.1)
        bumped = poll_for(lambda: e if (e := self.cluster.controller_epoch()) > epoch else None,
                          10, f"controller epoch above {epoch}")
        record.detail = f"controller {old} -> {new}, epoch {epoch} -> {bumped}"
        self._restart_after_delay(old)

    def _pause_leader(self, record: FaultRecord, start: float) -> None:
        p, leader = self._random_leader()
        record.target = leader
        role = self._role(leader)
        broker = self.cluster.brokers[leader]
        self._fault_start("pause", leader, f"SIGSTOP, leader of p{p}{role}")
        broker.pause()
        try:
            new = self._new_leader(p, leader, self._failover_timeout())
            record.failover_s = time.monotonic() - start
            remaining = self.config.pause_length_s - (time.monotonic() - start)
            if remaining > 0:
                time.sleep(remaining)
            poll_for(lambda: True if leader not in self.cluster.live_ids() else None,
                     self._failover_timeout(), f"broker {leader}'s session expiry")
        finally:
            broker.resume()
            self._fault_end(leader)
        record.detail = (f"p{p} leader {leader}{role} -> {new}; SIGCONT after "
                         f"{time.monotonic() - start:.1f}s")

    def _restart(self, record: FaultRecord, start: float) -> None:
        states = self.cluster.states(self.topic)
        leaders = sorted({s["leader"] for s in states.values() if s["leader"] >= 0})
        # a broker leading partitions, when there is one: its controlled shutdown moves them
        target = self.rng.choice(leaders or sorted(self.cluster.brokers))
        record.target = target
        role = self._role(target)
        led = [p for p, s in states.items() if s["leader"] == target]
        self._fault_start("controlled-shutdown", target, f"SIGTERM{role}, then start")
        self.cluster.brokers[target].stop()
        record.failover_s = time.monotonic() - start
        after = self.cluster.states(self.topic)
        moved = sum(1 for p in led if after[p]["leader"] not in (target, -1))
        record.detail = (f"broker {target}{role} controlled shutdown "
                         f"{record.failover_s:.1f}s, {moved}/{len(led)} leaders moved")
        if moved != len(led):
            raise AssertionError(f"controlled shutdown left {len(led) - moved} partitions "
                                 f"led by broker {target} or offline: {self.describe()}")
        self.cluster.brokers[target].restart(clean=False)
        self._fault_end(target)

    def _admin(self) -> Any:
        from ...client import Admin

        return Admin({"bootstrap.servers": self.cluster.bootstrap})

    def _reassign(self, record: FaultRecord, start: float) -> None:
        """AlterPartitionReassignments of one or two partitions to random replica sets; every
        other time kill -9 of the controller right after it answered."""
        rf = min(3, len(self.cluster.brokers))
        assignment = self.cluster.assignment(self.topic)
        chosen = self.rng.sample(sorted(assignment), min(len(assignment),
                                                         self.rng.choice((1, 2))))
        targets = {p: random_target(assignment[p], sorted(self.cluster.brokers), rf, self.rng)
                   for p in chosen}
        kill = self.rng.random() < 0.5
        with self._admin() as admin:
            results = admin.alter_partition_reassignments(
                {(self.topic, p): t for p, t in targets.items()}, raise_errors=False)
        refused = {tp: str(e) for tp, e in results.items() if e is not None}
        for p, t in targets.items():
            if (self.topic, p) not in refused:
                self.reassignments[p] = ReassignmentCheck(p, tuple(t), start - self.t0)
        record.target = self.cluster.controller()
        record.detail = ", ".join(f"p{p} {assignment[p]} -> {t}" for p, t in targets.items())
        self._fault_instant("reassign", sorted({f"broker-{b}" for t in targets.values()
                                                for b in t}), record.detail)
        if refused:
            raise RuntimeError(f"reassignment refused: {refused}")
        if kill:
            old = record.target
            self._fault_start("kill", old, "kill -9, the controller, after a reassignment")
            self.cluster.brokers[old].kill()
            new = poll_for(lambda: n if (n := self.cluster.controller_or_none()) not in
                           (None, old) else None, self._failover_timeout(), "new controller")
            record.failover_s = time.monotonic() - start
            record.detail += f"; controller {old} kill -9 -> {new}"
            self._restart_after_delay(old)

    def _elect_leaders(self, record: FaultRecord, start: float) -> None:
        """ElectLeaders (PREFERRED) for every partition: the ones reported elected must then
        be led by their preferred replica (the head of their replica list)."""
        with self._admin() as admin:
            results = admin.elect_leaders(
                "PREFERRED", [(self.topic, p) for p in range(self.config.partitions)],
                raise_errors=False)
        record.target = self.cluster.controller()
        elected = sorted(tp.partition for tp, e in results.items() if e is None)
        codes = Counter(e.name() for e in results.values()
                        if e is not None and e.code != ELECTION_NOT_NEEDED)
        not_needed = sum(1 for e in results.values() if e and e.code == ELECTION_NOT_NEEDED)
        record.detail = (f"elected {elected}, not needed {not_needed}"
                         + (f", {dict(codes)}" if codes else ""))
        self._fault_instant("elect-leaders", [f"broker-{record.target}"], record.detail)
        unexpected = {tp.partition: e.name() for tp, e in results.items() if e is not None
                      and e.code not in (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE)}
        if unexpected:
            raise RuntimeError(f"ElectLeaders failed: {unexpected}")
        record.failover_s = time.monotonic() - start
        # The election writes the state znodes before it answers: no waiting here.
        assignment = self.cluster.assignment(self.topic)
        wrong = {p: (self.cluster.leader(self.topic, p), assignment[p][0]) for p in elected
                 if self.cluster.leader(self.topic, p) != assignment[p][0]}
        if wrong:
            raise AssertionError(f"elected partitions not led by their preferred replica "
                                 f"(leader, preferred): {wrong}")

    def check_reassignments(self, grace_s: float) -> list[ReassignmentCheck]:
        """Wait up to `grace_s` for every requested reassignment to complete (the last target
        of each partition is its replica list, ``/admin/reassign_partitions`` gone), then
        report each one."""
        checks = [self.reassignments[p] for p in sorted(self.reassignments)]
        if not checks:
            return checks

        def look() -> bool | None:
            pending = set(self._pending_partitions())
            assignment = self.cluster.assignment(self.topic)
            for r in checks:
                r.pending = r.partition in pending
                r.replicas = tuple(assignment.get(r.partition, ()))
            return True if all(r.completed for r in checks) and not pending else None
        with contextlib.suppress(TimeoutError):
            poll_for(look, grace_s, "completed reassignments", interval=0.2)
        return checks

    def _pending_partitions(self) -> list[int]:
        zk = self.cluster.zk
        if zk.exists("/admin/reassign_partitions") is None:
            return []
        data = json.loads(zk.get("/admin/reassign_partitions")[0])
        return [x["partition"] for x in data["partitions"] if x["topic"] == self.topic]

    def _restart_after_delay(self, broker_id: int) -> None:
        time.sleep(self.config.restart_delay_s)
        self.cluster.brokers[broker_id].restart(clean=False)
        self._fault_end(broker_id)

    # -- healing -------------------------------------------------------------------------------
    def heal(self) -> None:
        """Bring every broker back (SIGCONT, start) and wait for every ISR to be full."""
        for i, b in self.cluster.brokers.items():
            b.resume()
            if not b.running():
                b.restart(clean=False)
            self._fault_end(i)
        self.wait_healthy(self.config.heal_timeout_s)


def in_sync(topic_node: dict[str, Any], states: dict[int, dict[str, Any]]) -> bool:
    """Every partition of a topic znode has a leader and an ISR holding its replicas, except
    the ones a reassignment is still adding (KIP-455's ``adding_replicas``)."""
    adding = topic_node.get("adding_replicas") or {}
    for p, replicas in topic_node["partitions"].items():
        s = states.get(int(p))
        if s is None or s["leader"] < 0:
            return False
        if not set(replicas) - set(adding.get(p, ())) <= set(s["isr"]):
            return False
    return True


def random_target(current: Sequence[int], brokers: Sequence[int], rf: int,
                  rng: random.Random) -> list[int]:
    """A random replica set of `rf` brokers other than `current`, in random order (so the
    preferred leader moves too, often). With no other set (as many brokers as replicas), the
    same replicas in another order."""
    if len(set(brokers)) > rf:
        while set(target := rng.sample(list(brokers), rf)) == set(current):
            pass
        return target
    target = rng.sample(list(current), len(current))
    while target == list(current) and len(set(current)) > 1:
        target = rng.sample(list(current), len(current))
    return target


def throughput_series(stats: Sequence[ProducerStats], t0: float, bucket_s: float = 1.0
                      ) -> dict[str, list[tuple[float, float]]]:
    """Acknowledged writes per second of each producer, in `bucket_s` buckets since `t0`
    (every bucket up to the last acknowledgement, zeros included: a stall shows)."""
    out: dict[str, list[tuple[float, float]]] = {}
    end = max((t for s in stats for t in s.ack_times), default=t0)
    n = int((end - t0) // bucket_s) + 1
    for s in stats:
        counts = [0] * n
        for t in s.ack_times:
            if t >= t0:
                counts[int((t - t0) // bucket_s)] += 1
        out[f"producer {s.index}"] = [(i * bucket_s, c / bucket_s)
                                      for i, c in enumerate(counts)]
    return out


def plot_report(report: ChaosReport, path: str) -> None:
    """The run as an SVG file: the consistency checker's timeline (operations per second,
    lost or truncated records) over the acknowledged writes per second of each producer,
    both with the injected faults shaded (from the run's faults.log; without one, the
    faults as markers)."""
    from ...common import plot
    from ...common.fault_log import fault_label
    from ..checker.report import checker_svg

    events = (read_fault_events(report.workdir / FAULT_LOG_NAME)
              if report.workdir is not None else [])
    spans = fault_spans(events)
    t0 = (min(op.wall for op in report.history.ops())
          if report.history is not None and len(report.history) else None)
    if spans and t0 is not None:
        end = t0 + max((x for pts in report.throughput.values() for x, _ in pts), default=0.0)
        bands = [(s.start - t0, (s.end if s.end is not None else end) - t0, fault_label(s))
                 for s in spans]
        markers: list[tuple[float, str]] = []
    else:
        bands, markers = [], [(f.at_s, f.kind) for f in report.faults]
    charts = []
    legend = 26  # the longest of both legends ("LOST (acked, by ack time)"): x axes aligned
    if report.consistency is not None:
        charts.append(checker_svg(report.consistency, events, legend_chars=legend))
    charts.append(plot.line_chart(
        report.throughput,
        title=f"odradek chaos, seed {report.config.seed}: acknowledged writes per second",
        x_label="seconds since the workload started", y_label="acks/s",
        markers=markers, bands=bands, step=True, width=1000, legend_chars=legend))
    plot.write_svg(path, plot.stack(charts))


def fault_plan(config: ChaosConfig, rng: random.Random) -> Callable[[], str | None]:
    """The next fault kind: the forced schedule in order, else shuffled rounds of the enabled
    kinds (each kind once per round) until the duration ends (None: stop)."""
    if config.schedule is not None:
        queue = list(config.schedule)
        return lambda: queue.pop(0) if queue else None
    round_: list[str] = []

    def next_kind() -> str:
        if not round_:
            round_.extend(config.faults)
            rng.shuffle(round_)
        return round_.pop(0)
    return next_kind


# -- verification ----------------------------------------------------------------------------------


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 120.0,
                logger: logging.Logger | None = None,
                client_config: dict[str, Any] | None = None
                ) -> dict[int, list[tuple[int, str]]]:
    """Every record of every partition from the beginning to the high watermark, as
    (offset, value) pairs, with a confluent-kafka consumer (assign, no group);
    `client_config` adds librdkafka properties (security.protocol, sasl.*, ssl.*)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "group.id": "odradek-chaos-verify",
        "enable.auto.commit": False, "enable.partition.eof": True,
        "auto.offset.reset": "earliest", **(client_config or {})}
    if logger is not None:
        config["logger"] = logger
    consumer = Consumer(config)
    try:
        # Right after healing a leadership may still move (a preferred election): a
        # NOT_LEADER_FOR_PARTITION answer is retried until the timeout.
        ends = {p: poll_for(lambda p=p: consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=10)[1], 60, f"partition {p}'s end",
                    interval=0.5)
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
        position = {p: 0 for p in range(partitions)}
        remaining = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumer stuck: positions {position}, ends {ends}")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"consumer error: {msg.error()}")
                continue
            p = msg.partition()
            out[p].append((msg.offset(), msg.value().decode()))
            position[p] = msg.offset() + 1
            if position[p] >= ends[p]:
                remaining.discard(p)
        return out
    finally:
        consumer.close()


def check_values(report: ChaosReport, stats: Sequence[ProducerStats],
                 read: dict[int, list[tuple[int, str]]]) -> None:
    """Acknowledged values against what a consumer reads back: each at the partition and
    offset of its delivery report. librdkafka's idempotent producer may deliver a message with
    no offset: when a batch it is about to resend turns out to be written (a later batch's ack
    proves it, since the broker takes a producer's batches only in sequence order), it reports
    the batch's messages as delivered without offsets (rd_kafka_msgq_move_acked). Those are
    checked by partition only."""
    at: dict[tuple[int, int], str] = {}
    read_in: dict[str, int] = {}
    copies: Counter[str] = Counter()
    for p, records in read.items():
        for offset, value in records:
            at[(p, offset)] = value
            read_in[value] = p
            copies[value] += 1
    report.read_back = sum(copies.values())
    report.duplicates = sum(n - 1 for n in copies.values() if n > 1)
    acked: dict[str, tuple[int, int]] = {}
    failed: dict[str, str] = {}
    for s in stats:
        acked.update(s.acked)
        failed.update(s.failed)
        report.delivery_errors.update(s.failed.values())
        report.sent += s.sent
        report.undelivered += s.undelivered
        if s.fatal:
            report.fatal_errors.append(f"producer {s.index}: {s.fatal}")
    report.acked = len(acked)
    for p, offset in acked.values():
        if offset is not None:
            report.acked_end[p] = max(report.acked_end.get(p, 0), offset + 1)
    for value, (p, offset) in sorted(acked.items()):
        if offset is None:
            report.acked_without_offset += 1
            if read_in.get(value) == p:
                continue
        elif at.get((p, offset)) == value:
            continue
        (report.misplaced if value in copies else report.lost).append(
            f"{value}@p{p}:{'?' if offset is None else offset}")
    report.failed_written = sum(1 for v in copies if v in failed)
    report.unacked_written = sum(1 for v in copies if v not in acked and v not in failed)


def valid_batches(partition_dir: Path) -> list[tuple[int, int, bytes]]:
    """(base offset, last offset, bytes) of each CRC-valid batch of a replica, in offset order
    across its segment files (a replica's segment boundaries need not match another's)."""
    out: list[tuple[int, int, bytes]] = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        for h in rb.scan_valid_prefix(data):
            out.append((h.base_offset, h.last_offset, data[h.position:h.position + h.size]))
    return out


def compare_replicas(cluster: ProcessCluster, topic: str, assignment: dict[int, list[int]],
                     acked_end: dict[int, int]) -> list[ReplicaCheck]:
    """After a clean stop: every replica's batches below the highest checkpointed HW of the
    partition are byte-for-byte those of the partition's first replica, and that HW covers
    every acknowledged offset (`acked_end`: partition -> last acknowledged offset + 1)."""
    hws = {b: OffsetCheckpointFile(bp.log_dir / REPLICATION_OFFSET_CHECKPOINT).read()
           for b, bp in cluster.brokers.items()}
    checks = []
    for p, replicas in sorted(assignment.items()):
        high = {b: hws[b].get((topic, p), -1) for b in replicas}
        hw = max(high.values())
        check = ReplicaCheck(topic, p, high, hw)
        logs = {b: [x for x in valid_batches(cluster.brokers[b].log_dir / f"{topic}-{p}")
                    if x[0] < hw] for b in replicas}
        problems = [_first_difference(logs, hw)]
        if hw < acked_end.get(p, 0):
            problems.append(f"the HW {hw} is below acknowledged offset {acked_end[p] - 1}")
        check.problem = "; ".join(x for x in problems if x) or None
        checks.append(check)
    return checks


def _first_difference(logs: dict[int, list[tuple[int, int, bytes]]], hw: int) -> str | None:
    problems = []
    for b, batches in logs.items():
        end = batches[-1][1] + 1 if batches else 0
        if end < hw:
            problems.append(f"broker {b}'s log ends at {end} below the HW {hw}")
    ref_id, ref = next(iter(logs.items()))
    for b, batches in logs.items():
        for mine, theirs in zip(ref, batches, strict=False):
            if mine != theirs:
                problems.append(f"brokers {ref_id} and {b} differ at offset "
                                f"{min(mine[0], theirs[0])}")
                break
    return "; ".join(problems) or None


# -- the run ---------------------------------------------------------------------------------------


def stop_cleanly(cluster: ProcessCluster) -> list[str]:
    """SIGTERM each running broker in turn; the brokers that did not exit 0 (in time). A
    broker SIGKILLed after ignoring SIGTERM still has its log (appends are written at once),
    so the replica comparison goes on."""
    problems = []
    for i, broker in cluster.brokers.items():
        if not broker.running():
            continue
        try:
            broker.stop()
        except AssertionError as exc:  # BrokerError
            problems.append(f"broker {i}: {str(exc).splitlines()[0]}")
    return problems


def create_topic(cluster: ProcessCluster, config: ChaosConfig) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(config.topic, config.partitions, min(3, config.brokers), config={
        "min.insync.replicas": str(config.min_insync_replicas),
        "unclean.leader.election.enable": str(config.unclean_leader_election).lower()})
    admin.create_topics([topic], operation_timeout=20)[config.topic].result(30)


def run_chaos(config: ChaosConfig, workdir: Path, zookeeper_connect: str,
              progress: Progress | None = None) -> ChaosReport:
    """Start the brokers on `zookeeper_connect` (a chroot of its own), run the workload and
    the faults, heal, verify. The brokers are always killed at the end; their directories
    (logs, stderr, state-change.log) stay in `workdir`."""
    t_start = time.monotonic()
    progress = progress or stderr_progress(t_start)
    report = ChaosReport(config, workdir=workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    logger = client_logger(workdir)
    cluster = ProcessCluster(workdir, zookeeper_connect, config.brokers,
                             overrides=config.broker_overrides(),
                             session_timeout_ms=config.session_timeout_ms,
                             log_level=config.log_level)
    try:
        progress(f"starting {config.brokers} brokers on {zookeeper_connect} in {workdir}")
        cluster.start()
        create_topic(cluster, config)
        injector = FaultInjector(cluster, config, random.Random(config.seed), time.monotonic(),
                                 progress)
        (workdir / FAULT_LOG_NAME).unlink(missing_ok=True)
        injector.fault_log = FaultLog(workdir / FAULT_LOG_NAME)
        injector.wait_healthy(config.heal_timeout_s)
        read = _run_workload_and_faults(cluster, config, injector, report, progress, logger)
        assignment = cluster.assignment(config.topic)
        stop_and_compare_replicas(cluster, config.topic, report, progress)
        check_consistency(report, read, replica_records(cluster, config.topic, assignment),
                          {r.partition: r.compared_below for r in report.replicas})
    except Exception as exc:  # reported (and failing the run), with the broker logs kept
        progress(f"run aborted: {traceback.format_exc()}")
        report.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        close_run(cluster, report, logger, t_start)
    return report


def stop_and_compare_replicas(cluster: ProcessCluster, topic: str, report: ChaosReport,
                              progress: Callable[[str], None]) -> None:
    """The end of a run: every broker stopped cleanly, then the replicas' logs compared below
    the high watermark."""
    progress("stopping every broker cleanly, then comparing replicas")
    assignment = cluster.assignment(topic)
    report.stop_problems = stop_cleanly(cluster)
    report.replicas = compare_replicas(cluster, topic, assignment, report.acked_end)


def close_run(cluster: ProcessCluster, report: ChaosReport, logger: logging.Logger,
              t_start: float) -> None:
    """Close the cluster, count the tracebacks in the brokers' logs, detach the run's log
    handlers and record the elapsed time."""
    cluster.close()
    report.broker_tracebacks = {i: b.stderr_text().count("Traceback")
                                for i, b in cluster.brokers.items()}
    for handler in list(logger.handlers):
        handler.close()
        logger.removeHandler(handler)
    report.elapsed_s = time.monotonic() - t_start


def _run_workload_and_faults(cluster: ProcessCluster, config: ChaosConfig,
                             injector: FaultInjector, report: ChaosReport,
                             progress: Progress, logger: logging.Logger
                             ) -> dict[int, list[tuple[int, str]]]:
    stop = threading.Event()
    history = report.history = History()
    workers = [ProducerWorker(i, cluster.bootstrap, config.topic, config.rate,
                              config.message_timeout_ms, stop, logger,
                              client_config=config.producer_config(), history=history)
               for i in range(config.producers)]
    readers = [ConsumerWorker(i, cluster.bootstrap, config.topic, config.partitions, stop,
                              history, logger) for i in range(config.consumers)]
    injector.t0 = time.monotonic()
    for w in [*workers, *readers]:
        w.start()
    progress(f"{config.producers} producers writing {config.rate:.0f} values/s each, "
             f"{config.consumers} consumers reading")
    try:
        _inject_faults(config, injector, report, stop)
    finally:
        stop.set()
        for r in readers:
            r.join()
            if r.error:
                report.errors.append(f"consumer {r.name}: {r.error}")
        progress("faults over: healing the cluster")
        try:
            injector.heal()
        except Exception as exc:  # a stuck ISR, a broker that would not start
            report.healed, report.heal_problem = False, str(exc)
        if injector.reassignments:
            progress(f"waiting up to {config.reassign_grace_s:.0f}s for "
                     f"{len(injector.reassignments)} reassignments to complete")
            report.reassignments = injector.check_reassignments(config.reassign_grace_s)
        for w in workers:
            w.join()
        report.throughput = throughput_series([w.stats for w in workers], injector.t0)
    progress(f"producers flushed ({sum(len(w.stats.acked) for w in workers)} acked); "
             "reading everything back")
    read = consume_all(cluster.bootstrap, config.topic, config.partitions, logger=logger)
    check_values(report, [w.stats for w in workers], read)
    if report.workdir is not None:
        history.save(report.workdir / HISTORY_NAME)
    return read


HISTORY_NAME = "history.jsonl"  # the workload's history, in the run's directory

# What the default replication run promises: acks=all idempotent producers (librdkafka caps
# the in-flight requests at 5 with idempotence), min.insync.replicas=2, unclean election off.
RUN_GUARANTEES = ChaosConfig().guarantees()


def replica_records(cluster: ProcessCluster, topic: str, assignment: dict[int, list[int]]
                    ) -> dict[int, dict[int, list[tuple[int, str | None]]]]:
    """Each replica's records (offset, value) from its segment files (after a clean stop),
    for the checker's replica row; control records and unreadable batches left out."""
    out: dict[int, dict[int, list[tuple[int, str | None]]]] = {}
    for p, replicas in sorted(assignment.items()):
        out[p] = {}
        for b in replicas:
            entries: list[tuple[int, str | None]] = []
            for _base, _last, data in valid_batches(cluster.brokers[b].log_dir / f"{topic}-{p}"):
                if rb.read_header(data).is_control:
                    continue
                try:
                    records = rb.decode_records(data)
                except ValueError:
                    continue
                entries.extend((r.offset, r.value.decode("utf-8", "replace")
                                if r.value is not None else None) for r in records)
            out[p][b] = entries
    return out


def check_consistency(report: ChaosReport, final_logs: dict[int, list[tuple[int, str]]],
                      replica_logs: dict[int, dict[int, list[tuple[int, str | None]]]] | None,
                      high_watermarks: dict[int, int] | None,
                      guarantees: Guarantees | None = None) -> CheckReport | None:
    """The checker (odradek.chaos.checker.consistency) on the run's history, the logs read back
    after
    healing and the replicas' logs below their HW, with the guarantees of the run's settings
    (`report.config.guarantees()`) unless others are given; kept in `report.consistency`."""
    if report.history is None:
        return None
    report.consistency = check(report.history, guarantees or report.config.guarantees(),
                               final_logs, replica_logs, high_watermarks)
    return report.consistency


def _inject_faults(config: ChaosConfig, injector: FaultInjector, report: ChaosReport,
                   stop: threading.Event) -> None:
    rng = injector.rng
    next_kind = fault_plan(config, rng)
    time.sleep(config.first_fault_after_s)
    deadline = injector.t0 + config.duration_s
    while not stop.is_set():
        if config.schedule is None and time.monotonic() >= deadline:
            return
        kind = next_kind()
        if kind is None:
            return
        record = injector.run(kind)
        report.faults.append(record)
        if record.error:
            return  # the cluster did not recover: more faults would tell nothing more
        time.sleep(rng.uniform(*config.gap_s))


# -- output ----------------------------------------------------------------------------------------


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}s"


def format_report(report: ChaosReport) -> str:
    rows = [("t", "fault", "target", "failover", "healed", "what happened")]
    for f in report.faults:
        rows.append((f"{f.at_s:.1f}s", f.kind, str(f.target), _secs(f.failover_s),
                     _secs(f.healed_s), f.detail + (f" ERROR: {f.error}" if f.error else "")))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5]
             for r in rows]
    lines.insert(1, "-" * min(120, sum(widths) + 12 + len(rows[0][5])))
    c = report.config
    errors = ", ".join(f"{k}={v}" for k, v in sorted(report.delivery_errors.items())) or "none"
    identical = "yes" if report.replicas_identical else "NO"
    lines += [
        "",
        f"seed {c.seed}, {c.brokers} brokers, {c.partitions} partitions, RF "
        f"{min(3, c.brokers)}, min.insync.replicas {c.min_insync_replicas}"
        + (", unclean election on" if c.unclean_leader_election else "")
        + f", {c.producers} {'idempotent ' if c.idempotence else ''}acks={c.acks} "
        f"producers, {len(report.faults)} faults, {report.elapsed_s:.0f}s in all",
        f"sent               {report.sent}",
        f"acknowledged       {report.acked}" + (
            f" ({report.acked_without_offset} delivered by librdkafka without an offset, "
            "checked by partition)" if report.acked_without_offset else ""),
        f"read back          {report.read_back}",
        f"lost               {len(report.lost)}" + _examples(report.lost)
        + ("  (allowed by these settings)" if report.lost and not c.guarantees().no_loss
           else ""),
        f"misplaced          {len(report.misplaced)}" + _examples(report.misplaced),
        f"duplicates         {report.duplicates}" + (
            ("  (FAILURE: idempotence should make this 0)" if c.idempotence
             else "  (allowed without idempotence)") if report.duplicates else ""),
        f"unacked-written    {report.unacked_written} (+{report.failed_written} written "
        "though delivery failed)",
        f"delivery failures  {errors}; still queued after flush: {report.undelivered}",
        f"replicas identical {identical} below the HW ({len(report.replicas)} partitions)",
        f"broker tracebacks  {sum(report.broker_tracebacks.values())} in their stderr"
        + (f" {report.broker_tracebacks}" if any(report.broker_tracebacks.values()) else ""),
    ]
    lines += [f"  p{r.partition}: {r.problem} (HWs {r.high_watermarks})"
              for r in report.replicas if r.problem]
    if report.reassignments:
        done = sum(1 for r in report.reassignments if r.completed)
        lines.append(f"reassignments      {done}/{len(report.reassignments)} partitions at "
                     "their last target: " + ", ".join(
                         f"p{r.partition}->{list(r.target)}"
                         + ("" if r.completed else " NOT COMPLETED") for r in
                         report.reassignments))
    if report.consistency is not None:
        lines += ["", report.consistency.to_text().rstrip()]
    lines.append("RESULT: " + ("OK" if report.ok else "FAILED: " + "; ".join(report.failures)))
    return "\n".join(lines)


def _examples(items: list[str]) -> str:
    return f"  e.g. {', '.join(items[:5])}" if items else ""
