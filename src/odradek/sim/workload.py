"""`odradek sim`'s workload: whole brokers in a `Simulation`, odradek.client clients doing what
Kafka promises things about, a seeded fault schedule (sim/schedule.py), and the project's
consistency checker (odradek.chaos.checker, docs/checker.md) over the run's history and the
final logs.

The clients, each on its own simulated host:
- idempotent producers (acks=all, enable.idempotence) writing unique values to `events`
  (min.insync.replicas=2 with three brokers or more);
- a consumer group reading `events`;
- transactional producers writing batches to `txn` and committing or aborting each (drawn
  from the seed), and a read_committed reader of `txn`.

Every send is an invoke in the history, completed `ok` with its offset when acknowledged
(for a transaction: once the commit returned), `fail` when it certainly did not happen (the
send was refused, or its transaction aborted) and `info` when the client cannot know;
every record read is a read op. After the schedule, every fault is healed, killed brokers are
back, the producers are flushed and closed, the final logs are read with read_committed and
every replica's log below the high watermark in process. The checker's rows (no acknowledged
write lost, no read of a truncated record, order per producer, no duplicates, replicas
identical below the HW) get one more: read_committed sees no aborted data (no aborted value
read by the read_committed reader nor in the final read_committed logs).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..chaos.checker.consistency import CheckReport, Guarantees, Row, check
from ..chaos.checker.history import History
from ..client.admin import AsyncAdmin
from ..client.consumer import AsyncConsumer
from ..client.producer import AsyncProducer
from ..client.types import NewTopic, TopicPartition
from ..cluster.async_cluster import AsyncCluster
from ..protocol.records import decode_records, iter_headers
from ..server.replication.partition import Partition
from .cluster import connect
from .disk import temporary_data_dir
from .invariants import InvariantMonitor
from .operation_runner import OperationRunner
from .operations import (
    PlannedOperation,
    broker_overrides,
    cluster_overrides,
    coverage,
    plan_operations,
)
from .schedule import FAULT_KINDS, FaultInjector, PlannedFault, plan_faults
from .simulation import Simulation
from .trace import Trace

__all__ = ["EVENTS", "TXN", "SimReport", "WorkloadConfig", "run_workload"]

EVENTS = "events"
TXN = "txn"
PARTITIONS = 3


@dataclass(frozen=True)
class WorkloadConfig:
    """What `odradek sim` runs: `duration` virtual seconds of workload under faults of
    `fault_kinds` (empty: none), then the healing and the check."""

    seed: int
    duration: float = 20.0
    brokers: int = 3
    producers: int = 2
    consumers: int = 2
    transactional_producers: int = 1
    fault_kinds: Sequence[str] = FAULT_KINDS
    fault_scale: float = 1.0
    trace: str | Path | None = None
    data_dir: str | Path | None = None
    #: an explicit fault plan (a schedule file's, a shrunk one) instead of the seed's draw
    faults: Sequence[PlannedFault] | None = None
    #: the producers' send rate: their pauses between sends divided by it (1: as drawn)
    rate: float = 1.0
    invariants: bool = True  # check sim/invariants.py's invariants during the run
    # the explorer's operations (sim/operations.py): none by default, today's workload exactly
    operation_kinds: Sequence[str] = ()
    operations: Sequence[PlannedOperation] | None = None  # an explicit plan: replaces the draw
    operation_rate: float = 1.0  # operations per virtual second in a drawn plan


@dataclass
class SimReport:
    """What a run did and the verdict."""

    seed: int
    virtual_s: float
    wall_s: float
    operations: int
    faults: int
    digest: str
    check: CheckReport
    fault_lines: list[str] = field(default_factory=list)
    digest_tail: list[str] = field(default_factory=list)
    #: with operations: "op:<kind>:<ok|fail|info>" and "fault:<kind>" counts (else empty)
    coverage: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.check.ok

    def summary(self) -> dict[str, object]:
        """The last line's fields (`odradek sim --json`)."""
        return {"seed": self.seed, "virtual_s": round(self.virtual_s, 3),
                "wall_s": round(self.wall_s, 3), "operations": self.operations,
                "faults": self.faults, "digest": self.digest, "ok": self.ok,
                **({"coverage": self.coverage} if self.coverage else {})}

    def last_line(self) -> str:
        return (f"seed {self.seed} virtual {self.virtual_s:.3f}s wall {self.wall_s:.3f}s "
                f"operations {self.operations} faults {self.faults} digest {self.digest} "
                f"{'ok' if self.ok else 'FAIL'}")


def _key(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class _Run:
    """One run's clients and records (the history, the trace, what was aborted)."""

    def __init__(self, sim: Simulation, cfg: WorkloadConfig, trace: Trace) -> None:
        self.sim = sim
        self.cfg = cfg
        self.trace = trace
        self.history = History()
        self.aborted: set[str] = set()
        self.stop = asyncio.Event()
        self.fault_lines: list[str] = []
        self.faults = 0
        self.replication = min(3, cfg.brokers)
        self.min_isr = min(2, cfg.brokers)
        self.monitor: InvariantMonitor | None = None
        self.operations: OperationRunner | None = None

    # -- the history, traced -----------------------------------------------------------------
    def _traced(self, index: int) -> int:
        if self.trace.enabled:
            op = self.history[index]
            self.trace.event(self.sim.now, "op", process=op.process, type=op.type, f=op.f,
                             value=op.value, partition=op.partition, offset=op.offset,
                             error=op.error, ref=op.ref)
        return index

    def invoke(self, process: str, value: str) -> int:
        return self._traced(self.history.invoke(process, "send", value))

    def ok(self, op: int, topic: str, partition: int, offset: int) -> None:
        self._traced(self.history.ok(op, offset=offset, partition=_key(topic, partition)))

    def fail(self, op: int, error: BaseException | str) -> None:
        self._traced(self.history.fail(op, error=_name(error)))

    def info(self, op: int, error: BaseException | str) -> None:
        self._traced(self.history.info(op, error=_name(error)))

    def read(self, process: str, topic: str, partition: int, offset: int, value: str) -> None:
        self._traced(self.history.read(process, _key(topic, partition), offset, value))

    def on_fault(self, now: float, phase: str, fault: PlannedFault) -> None:
        line = f"{phase} {fault.describe()} at {now:.3f}"
        self.fault_lines.append(line)
        self.trace.event(now, "fault", phase=phase, kind=fault.kind,
                         nodes=[str(n) for n in fault.nodes], amount=fault.amount or None)

    # -- clients -----------------------------------------------------------------------------
    def _producer(self, host: str, bootstrap: str, **extra: object) -> AsyncProducer:
        return connect(self.sim, host, AsyncProducer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "delivery.timeout.ms": 60_000, "request.timeout.ms": 5_000,
            "max.block.ms": 10_000, **extra}))

    async def produce(self, index: int, bootstrap: str) -> None:
        process = f"producer-{index}"
        rng = self.sim.random.fork(f"workload/{process}")
        producer = self._producer(f"client-{process}", bootstrap)
        await producer.start()
        n = 0
        try:
            while not self.stop.is_set():
                value = f"p{index}-{n}"
                n += 1
                op = self.invoke(process, value)
                try:
                    future = await producer.send(EVENTS, value.encode(),
                                                 key=f"k{rng.randrange(8)}".encode())
                except Exception as exc:  # refused before anything was sent
                    self.fail(op, exc)
                    await asyncio.sleep(0.1)
                    continue
                future.add_done_callback(lambda f, op=op: self._delivered(op, f))
                await asyncio.sleep(rng.choice([0.005, 0.02, 0.05, 0.1]) / self.cfg.rate)
            await producer.flush(30.0)
        finally:
            with contextlib.suppress(Exception):
                await producer.close(5.0)

    def _delivered(self, op: int, future: asyncio.Future[object]) -> None:
        if future.cancelled():
            self.info(op, "cancelled")
        elif future.exception() is not None:
            self.info(op, future.exception())  # type: ignore[arg-type]
        else:
            md = future.result()
            self.ok(op, md.topic, md.partition, md.offset)  # type: ignore[attr-defined]

    async def transact(self, index: int, bootstrap: str) -> None:
        process = f"txn-producer-{index}"
        rng = self.sim.random.fork(f"workload/{process}")
        n = 0
        while not self.stop.is_set():
            producer = self._producer(f"client-{process}", bootstrap,
                                      **{"transactional.id": f"sim-txn-{index}",
                                         "transaction.timeout.ms": 30_000})
            try:
                await producer.start()
                await producer.init_transactions(30.0)
                while not self.stop.is_set():
                    ops: list[tuple[int, asyncio.Future[object]]] = []
                    producer.begin_transaction()
                    for _ in range(rng.randint(1, 5)):
                        value = f"t{index}-{n}"
                        n += 1
                        op = self.invoke(process, value)
                        ops.append((op, await producer.send(TXN, value.encode())))
                    commit = rng.random() < 0.6
                    try:
                        if commit:
                            await producer.commit_transaction(20.0)
                        else:
                            await producer.abort_transaction(20.0)
                    except Exception as exc:
                        for op, _ in ops:
                            self.info(op, exc)
                        raise
                    for op, future in ops:
                        if commit:
                            md = future.result()
                            self.ok(op, md.topic, md.partition, md.offset)  # type: ignore[attr-defined]
                        else:
                            self.aborted.add(self.history[op].value or "")
                            self.fail(op, "aborted")
                    await asyncio.sleep(rng.choice([0.0, 0.01, 0.1]) / self.cfg.rate)
            except Exception:  # a new producer with the same transactional.id fences this one
                await asyncio.sleep(0.5)
            finally:
                with contextlib.suppress(Exception):
                    await producer.close(5.0)

    async def consume(self, process: str, topic: str, bootstrap: str, group: str,
                      isolation: str) -> None:
        consumer = connect(self.sim, f"client-{process}", AsyncConsumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "isolation.level": isolation, "request.timeout.ms": 5_000}))
        await consumer.start()
        try:
            consumer.subscribe([topic])
            while not self.stop.is_set():
                with contextlib.suppress(Exception):
                    for r in await consumer.poll(0.5):
                        self.read(process, r.topic, r.partition, r.offset,
                                  (r.value or b"").decode())
        finally:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10.0):
                    await consumer.close()

    async def final_logs(self, bootstrap: str) -> dict[str, list[tuple[int, str | None]]]:
        """Every partition of both topics from the start to its end, read_committed."""
        consumer = connect(self.sim, "client-checker", AsyncConsumer({
            "bootstrap.servers": bootstrap, "isolation.level": "read_committed",
            "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
        await consumer.start()
        logs: dict[str, list[tuple[int, str | None]]] = {}
        try:
            tps = [TopicPartition(t, p) for t in (EVENTS, TXN) for p in range(PARTITIONS)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps, 30.0)
            for tp in tps:
                logs[_key(tp.topic, tp.partition)] = []
            deadline = self.sim.now + 120.0
            while self.sim.now < deadline:
                positions = [await consumer.position(tp) for tp in tps]
                if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                    break
                for r in await consumer.poll(0.5):
                    logs[_key(r.topic, r.partition)].append(
                        (r.offset, None if r.value is None else r.value.decode()))
        finally:
            await consumer.close(autocommit=False)
        return logs

    # -- the run ---------------------------------------------------------------------------
    async def main(self, cluster: AsyncCluster) -> CheckReport:
        if self.cfg.invariants:
            self.monitor = InvariantMonitor(self.sim, cluster, self.history, self.trace)
            self.monitor.start()
        try:
            report = await self._main(cluster)
            if self.monitor is not None:
                await self.monitor.settle()
                report = dataclasses.replace(report, rows=(*report.rows, *self.monitor.rows()))
            return report
        finally:
            if self.monitor is not None:
                self.monitor.stop()

    async def _main(self, cluster: AsyncCluster) -> CheckReport:
        cfg, sim = self.cfg, self.sim
        bootstrap = cluster.bootstrap_servers
        admin = connect(sim, "client-admin", AsyncAdmin({"bootstrap.servers": bootstrap}))
        await admin.start()
        try:
            await admin.create_topics([
                NewTopic(t, PARTITIONS, self.replication,
                         config={"min.insync.replicas": str(self.min_isr)})
                for t in (EVENTS, TXN)])
        finally:
            await admin.close()
        readers = [asyncio.ensure_future(self.consume(f"consumer-{i}", EVENTS, bootstrap,
                                                      "sim-group", "read_uncommitted"))
                   for i in range(cfg.consumers)]
        if cfg.transactional_producers:
            readers.append(asyncio.ensure_future(self.consume(
                "reader-committed", TXN, bootstrap, "sim-committed", "read_committed")))
        writers = [asyncio.ensure_future(self.produce(i, bootstrap))
                   for i in range(cfg.producers)]
        writers += [asyncio.ensure_future(self.transact(i, bootstrap))
                    for i in range(cfg.transactional_producers)]
        hosts = ([f"client-producer-{i}" for i in range(cfg.producers)]
                 + [f"client-txn-producer-{i}" for i in range(cfg.transactional_producers)]
                 + [f"client-consumer-{i}" for i in range(cfg.consumers)]
                 + (["client-reader-committed"] if cfg.transactional_producers else []))
        if cfg.operation_kinds or cfg.operations:
            hosts.append("client-ops")
        injector = FaultInjector(sim, cluster, hosts, self.on_fault)
        plan = list(cfg.faults) if cfg.faults is not None else plan_faults(
            sim.random.fork("faults"), cfg.brokers, cfg.duration, cfg.fault_kinds,
            cfg.fault_scale)
        if cfg.operation_kinds or cfg.operations:
            ops = list(cfg.operations) if cfg.operations is not None else plan_operations(
                sim.random.fork("operations"), cfg.operation_kinds, cfg.duration,
                cfg.operation_rate, cfg.brokers)
            self.operations = OperationRunner(sim, cluster, self.history, self._traced, ops,
                                              plan)
            self.operations.start()
        faults = asyncio.ensure_future(injector.run(plan))
        await asyncio.sleep(cfg.duration)
        await injector.stop(faults)
        # heal: every fault off, every broker back
        await cluster.faults.reset()
        sim.network.heal_all()
        if self.operations is not None:  # its restarts end before the heal's
            await self.operations.stop()
        for broker_id, broker in sorted(cluster.brokers.items()):
            if not broker.started:
                await cluster.faults.restart(broker_id)
        if self.monitor is not None:
            self.monitor.healed()
        self.stop.set()
        await asyncio.gather(*writers, return_exceptions=True)
        await asyncio.sleep(2.0)  # the readers catch up
        # The final read_committed read stops at each partition's last stable offset, which a
        # leader elected at the end holds back until its followers fetch again (its HW lags the
        # old leader's, as in Kafka): read once the replicas agree, or after 30 virtual s.
        await self._await_caught_up(cluster)
        logs = await self.final_logs(cluster.bootstrap_servers)
        await asyncio.gather(*readers, return_exceptions=True)
        self.faults = injector.injected
        replicas, hws = await self.replica_logs(cluster)
        return self.verdict(logs, replicas, hws)

    async def replica_logs(self, cluster: AsyncCluster
                           ) -> tuple[dict[str, dict[int, list[tuple[int, str | None]]]],
                                      dict[str, int]]:
        """Every replica's log of both topics below the partition's high watermark, once the
        replicas have caught up (or after 30 virtual seconds: a replica that never catches up
        is then a divergence the checker reports)."""
        await self._await_caught_up(cluster)
        logs: dict[str, dict[int, list[tuple[int, str | None]]]] = {}
        hws: dict[str, int] = {}
        for tp in _TPS:
            ps = _replicas(cluster, tp)
            hw = max((p.high_watermark for p in ps.values()), default=0)
            hws[_key(*tp)] = hw
            logs[_key(*tp)] = {b: _records(p, hw) for b, p in ps.items()}
        return logs, hws

    async def _await_caught_up(self, cluster: AsyncCluster) -> None:
        """Until the replicas agree (`_caught_up`), 30 virtual seconds at most."""
        with contextlib.suppress(TimeoutError):
            await cluster.wait_for(lambda: self._caught_up(cluster), 30.0,
                                   "the replicas to catch up")

    def _caught_up(self, cluster: AsyncCluster) -> bool:
        """Every partition of both topics on all its replicas, with one log end offset, which
        the high watermark has reached."""
        for tp in _TPS:
            ps = list(_replicas(cluster, tp).values())
            ends = {p.log_end_offset for p in ps}
            if len(ps) < self.replication or len(ends) != 1 \
                    or max(p.high_watermark for p in ps) not in ends:
                return False
        return True

    def verdict(self, logs: dict[str, list[tuple[int, str | None]]],
                replicas: dict[str, dict[int, list[tuple[int, str | None]]]] | None = None,
                hws: dict[str, int] | None = None) -> CheckReport:
        g = Guarantees(acks="all", min_insync_replicas=self.min_isr, idempotent=True,
                       transactional=self.cfg.transactional_producers > 0)
        # committed records Kafka's design loses (the invariant monitor's `CrashLoss`)
        lost_by_design: dict[str, list[tuple[int, int]]] = {}
        for loss in self.monitor.losses if self.monitor is not None else ():
            lost_by_design.setdefault(_key(loss.topic, loss.partition), []).append(
                (loss.start, loss.end))
        report = check(self.history, g, logs, replica_logs=replicas, high_watermarks=hws,
                       lost_by_design=lost_by_design)
        seen = [op for op in self.history.ops() if op.f == "read"
                and op.process == "reader-committed" and op.value in self.aborted]
        kept = [(p, o, v) for p, entries in logs.items() for o, v in entries
                if v in self.aborted]
        checked = sum(1 for op in self.history.ops() if op.f == "read"
                      and op.process == "reader-committed") + sum(map(len, logs.values()))
        examples = ([f"reader-committed read aborted {op.value!r} p{op.partition}@{op.offset}"
                     for op in seen[:3]]
                    + [f"aborted {v!r} in the final read_committed log of {p} at {o}"
                       for p, o, v in kept[:2]])
        observed = len(seen) + len(kept)
        promised = self.cfg.transactional_producers > 0
        row = Row("aborted", "read_committed sees no aborted data", promised,
                  "transactions (KIP-98), read_committed", checked, observed, tuple(examples),
                  "skipped" if not promised or checked == 0
                  else "ok" if observed == 0 else "FAIL")
        return dataclasses.replace(report, rows=(*report.rows, row))


_TPS = [(t, p) for t in (EVENTS, TXN) for p in range(PARTITIONS)]


def _replicas(cluster: AsyncCluster, tp: tuple[str, int]) -> dict[int, Partition]:
    """`tp`'s replicas on the started brokers, by broker id."""
    out = {}
    for b, broker in sorted(cluster.brokers.items()):
        partition = broker.replica_manager.partitions.get(tp) if broker.started else None
        if partition is not None and partition.log is not None:
            out[b] = partition
    return out


def _records(partition: Partition, end: int) -> list[tuple[int, str | None]]:
    """(offset, value) of a replica's records below `end`, control records included (the
    same on every replica)."""
    log = partition.log
    data = log.read(log.log_start_offset, 1 << 30, max_offset=end).read_bytes()
    out: list[tuple[int, str | None]] = []
    for h in iter_headers(data):
        for r in decode_records(data[h.position:h.position + h.size]):
            out.append((r.offset, None if r.value is None
                        else r.value.decode("utf-8", "backslashreplace")))
    return out


def _name(error: BaseException | str) -> str:
    return error if isinstance(error, str) else type(error).__name__


def run_workload(cfg: WorkloadConfig) -> SimReport:
    """One run of the workload in a fresh `Simulation(cfg.seed)`: the brokers' files in a
    temporary directory (in memory where the machine has one, `disk.temporary_data_dir`;
    removed after) unless `cfg.data_dir` is given."""
    sim = Simulation(cfg.seed)
    trace = Trace(cfg.trace)
    trace.follow(sim.digest)
    tmp = Path(temporary_data_dir()) if cfg.data_dir is None else Path(cfg.data_dir)
    sim.digest.place(str(tmp), "<data-dir>")  # the same digest wherever the files are
    run = _Run(sim, cfg, trace)
    kinds = [*cfg.operation_kinds, *(op.kind for op in cfg.operations or ())]

    async def main(sim: Simulation) -> CheckReport:
        async with AsyncCluster(cfg.brokers, simulation=sim, data_dir=tmp, overrides={
                "replica.lag.time.max.ms": 3000, "zookeeper.session.timeout.ms": 6000,
                "auto.create.topics.enable": "false",
                # a few partitions for the internal topics: 50 each (Kafka's default) is
                # 300 logs to create and checkpoint on three brokers, most of a short run
                "offsets.topic.num.partitions": 3,
                "transaction.state.log.num.partitions": 3, **cluster_overrides(kinds)},
                broker_overrides=broker_overrides(kinds, cfg.brokers, tmp)) as cluster:
            return await run.main(cluster)

    began = time.perf_counter()
    try:
        report = sim.run(main)
    finally:
        trace.close()
        if cfg.data_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    ran = run.operations
    return SimReport(cfg.seed, sim.now, time.perf_counter() - began, len(run.history),
                     run.faults, sim.digest.hexdigest(), report, run.fault_lines,
                     list(sim.digest.tail),
                     {} if ran is None else coverage(ran.outcomes, (
                         line.split()[1] for line in run.fault_lines
                         if line.startswith("start "))))
