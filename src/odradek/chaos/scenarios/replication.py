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
it with its own ZooKeeper. The run is put together from the kit's library: the settings
(odradek.chaos.config), the workload (odradek.chaos.workload), the fault injector
(odradek.chaos.environment.process_faults) on broker processes
(odradek.chaos.environment.processes), and the verdict (odradek.chaos.checker.verdict, with
the replicas' logs read by odradek.chaos.checker.replicas). ``odradek chaos --transactions``
runs the transactional workload of odradek.chaos.scenarios.transactions instead, with the same
fault injector.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
from pathlib import Path

from ...common.fault_log import FAULT_LOG_NAME, FaultLog
from ..checker.history import History
from ..checker.replicas import replica_records
from ..checker.verdict import (
    ChaosReport,
    check_consistency,
    check_values,
    close_run,
    stop_and_compare_replicas,
)
from ..config import ChaosConfig
from ..environment.process_faults import FaultInjector, fault_plan
from ..environment.processes import ProcessCluster
from ..support import Progress, client_logger, stderr_progress
from ..workload import ConsumerWorker, ProducerWorker, consume_all, throughput_series

HISTORY_NAME = "history.jsonl"  # the workload's history, in the run's directory


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
