"""A Kafka workload on whole simulated brokers: an in-process cluster (`sim.cluster`) of one or
more brokers with the embedded coordination store, a topic created through the admin client,
odradek.client's `AsyncProducer` (acks=all) writing keyed records with pauses drawn from the
seed, and an `AsyncConsumer` in a group reading them all back. With faults (three brokers or
more) a broker is killed and restarted (the cluster's fault API, `cluster.faults`), another is
cut from the coordination store and healed, and a link between two brokers is cut on the
simulated network and healed, while the producer writes (FoundationDB's "attrition" and
"swizzle" in miniature).

Every choice comes from the seed (the workload's fork `"workload"`, the fault plan's
`"faults"`, odradek's own through `common.entropy`), so the digest of the network's traffic is
a function of the seed: `python -m odradek.sim kafka --seed N` prints it.

The steady mode (`duration`, `rate`) is the workload the simulator's speed is measured with
(docs/simulation.md, "Speed"): the producer sends `rate` records per virtual second, evenly
spaced, for `duration` virtual seconds while the consumer group reads continuously, so most of
the cluster's time is the steady state of a real one (replica fetchers long-polling, heartbeats,
purgatory timeouts) rather than start-up.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..client.admin import AsyncAdmin
from ..client.consumer import AsyncConsumer
from ..client.producer import AsyncProducer
from ..client.types import NewTopic
from ..cluster.async_cluster import AsyncCluster
from .cluster import broker_host, connect, sim_cluster
from .disk import temporary_data_dir
from .random import SimRandom
from .simulation import Simulation

__all__ = ["KafkaReport", "TransactionTimeoutReport", "run_kafka", "run_transaction_timeout"]

TOPIC = "events"


@dataclass(frozen=True)
class KafkaReport:
    """What a run did: its digest, the records acknowledged and consumed (each consumed once
    at least, `missing` none), the faults, and its virtual, wall and CPU seconds."""

    seed: int
    brokers: int
    digest: str
    events: int
    acked: int
    consumed: int
    missing: int
    faults: tuple[str, ...]
    virtual_seconds: float
    wall_seconds: float
    cpu_seconds: float


def run_kafka(seed: int, brokers: int = 1, records: int = 200, *, partitions: int = 3,
              faults: bool = False, data_dir: str | Path | None = None,
              duration: float | None = None, rate: float = 50.0,
              offsets_partitions: int | None = None) -> KafkaReport:
    """One run of the workload in a fresh `Simulation(seed)`; the brokers' files go to a
    temporary directory, in memory where the machine has one (`disk.temporary_data_dir`,
    removed after), unless `data_dir` is given.
    With `duration` (virtual seconds) the run is steady: `rate` records per second for
    `duration` seconds (`records` is ignored), consumed while they are produced.
    `offsets_partitions` sets the brokers' offsets.topic.num.partitions (Kafka's default 50;
    Kafka's own integration tests run with 5, `TestUtils.createBrokerConfig`): every follower
    fetch reads each partition it follows."""
    if duration is not None and (duration <= 0 or rate <= 0):
        raise ValueError("duration and rate must be positive")
    if faults and brokers < 3:
        raise ValueError("the fault plan needs three brokers or more")
    sim = Simulation(seed)
    tmp = (Path(temporary_data_dir())
           if data_dir is None else Path(data_dir))
    acked: list[str] = []
    consumed: set[str] = set()
    done_faults: list[str] = []
    producing_done = asyncio.Event()

    async def produce(cluster_bootstrap: str) -> None:
        rng = sim.random.fork("workload")
        producer = connect(sim, "client-producer", AsyncProducer({
            "bootstrap.servers": cluster_bootstrap, "acks": "all", "linger.ms": 5,
            "delivery.timeout.ms": 120_000, "request.timeout.ms": 10_000}))
        await producer.start()
        try:
            if duration is not None:
                await produce_steadily(producer, rng)
                return
            for i in range(records):
                value = f"record-{i}"
                future = await producer.send(TOPIC, value.encode(),
                                             key=f"key-{rng.randrange(16)}".encode())
                future.add_done_callback(
                    lambda f, v=value: acked.append(v)
                    if not f.cancelled() and f.exception() is None else None)
                if rng.random() < 0.1:
                    await asyncio.sleep(rng.uniform(0.001, 0.2))
            await producer.flush()
        finally:
            producing_done.set()
            await producer.close()

    def on_ack(value: str) -> Callable[[asyncio.Future[object]], None]:
        def done(f: asyncio.Future[object]) -> None:
            if not f.cancelled() and f.exception() is None:
                acked.append(value)
        return done

    async def produce_steadily(producer: AsyncProducer, rng: SimRandom) -> None:
        assert duration is not None
        interval = 1.0 / rate
        start = sim.now
        i = 0
        while (due := start + i * interval) < start + duration:
            if due > sim.now:
                await asyncio.sleep(due - sim.now)
            value = f"record-{i}"
            future = await producer.send(TOPIC, value.encode(),
                                         key=f"key-{rng.randrange(16)}".encode())
            future.add_done_callback(on_ack(value))
            i += 1
        await producer.flush()

    async def fault_plan(cluster: AsyncCluster) -> None:
        rng = sim.random.fork("faults")
        await asyncio.sleep(rng.uniform(0.05, 0.3))
        victim = rng.randrange(brokers)
        await cluster.faults.kill(victim)
        done_faults.append(f"kill broker {victim} at {sim.now:.3f}")
        others = [b for b in range(brokers) if b != victim]
        a, b = rng.sample(others, 2)
        # the cluster's own fault API where it needs no TCP proxies: a store cut, healed
        # before the session times out
        cut_off = rng.choice(others)
        await asyncio.sleep(rng.uniform(0.05, 0.3))
        handle = await cluster.faults.isolate_from_store(cut_off)
        done_faults.append(f"isolate broker {cut_off} from the store at {sim.now:.3f}")
        await asyncio.sleep(rng.uniform(0.5, 2.0))
        await cluster.faults.heal(handle)
        done_faults.append(f"heal broker {cut_off} - store at {sim.now:.3f}")
        await asyncio.sleep(rng.uniform(0.1, 1.0))
        sim.network.cut(broker_host(a), broker_host(b))
        done_faults.append(f"cut broker {a} - broker {b} at {sim.now:.3f}")
        await asyncio.sleep(rng.uniform(1.0, 5.0))
        sim.network.heal(broker_host(a), broker_host(b))
        done_faults.append(f"heal broker {a} - broker {b} at {sim.now:.3f}")
        await asyncio.sleep(rng.uniform(0.5, 3.0))
        await cluster.faults.restart(victim)
        done_faults.append(f"restart broker {victim} at {sim.now:.3f}")

    async def consume(cluster_bootstrap: str, steady: bool = False) -> None:
        consumer = connect(sim, "client-consumer", AsyncConsumer({
            "bootstrap.servers": cluster_bootstrap, "group.id": "sim-readers",
            "auto.offset.reset": "earliest"}))
        await consumer.start()
        try:
            consumer.subscribe([TOPIC])
            if steady:
                # read while the producer writes; then until everything acknowledged is in
                while not producing_done.is_set():
                    for record in await consumer.poll(1.0):
                        consumed.add(record.value.decode())
            deadline = sim.now + 120.0
            while not set(acked) <= consumed and sim.now < deadline:
                for record in await consumer.poll(1.0):
                    consumed.add(record.value.decode())
        finally:
            await consumer.close()

    async def main(sim: Simulation) -> None:
        overrides = ({} if offsets_partitions is None
                     else {"offsets.topic.num.partitions": offsets_partitions})
        cluster = sim_cluster(sim, brokers, data_dir=tmp, overrides=overrides)
        await cluster.start()
        try:
            bootstrap = cluster.bootstrap_servers
            admin = connect(sim, "client-admin", AsyncAdmin({"bootstrap.servers": bootstrap}))
            await admin.start()
            try:
                await admin.create_topics([NewTopic(TOPIC, partitions, min(3, brokers))])
            finally:
                await admin.close()
            if duration is not None:
                await asyncio.gather(produce(bootstrap), consume(bootstrap, steady=True),
                                     *([fault_plan(cluster)] if faults else []))
                return
            if faults:
                await asyncio.gather(produce(bootstrap), fault_plan(cluster))
            else:
                await produce(bootstrap)
            await consume(bootstrap)
        finally:
            await cluster.stop()

    cpu = time.process_time()
    try:
        sim.run(main)
    finally:
        if data_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return KafkaReport(seed, brokers, sim.digest.hexdigest(), sim.digest.events, len(acked),
                       len(consumed), len(set(acked) - consumed), tuple(done_faults), sim.now,
                       sim.wall_seconds, time.process_time() - cpu)


@dataclass(frozen=True)
class TransactionTimeoutReport:
    """A transaction left open past transaction.timeout.ms: how the producer's commit ended
    (the coordinator aborted it and bumped the epoch, so Kafka answers the commit with
    PRODUCER_FENCED or INVALID_PRODUCER_EPOCH), what a read_committed consumer read of it
    (nothing), and the run's virtual, wall and CPU seconds."""

    seed: int
    brokers: int
    digest: str
    commit_error: str
    committed_reads: int
    virtual_seconds: float
    wall_seconds: float
    cpu_seconds: float


def run_transaction_timeout(seed: int, brokers: int = 3, *, timeout_ms: int = 600_000,
                            data_dir: str | Path | None = None) -> TransactionTimeoutReport:
    """A transactional producer (transaction.timeout.ms `timeout_ms`, ten minutes by default)
    writes one record in a transaction and does not commit; the coordinator's periodic check
    (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s) aborts it once the
    timeout has passed. Then the producer tries to commit, and a read_committed consumer
    reads the topic. The ten virtual minutes cost the wall time of the brokers' idle work
    only (docs/simulation.md, "Speed")."""
    sim = Simulation(seed)
    tmp = (Path(temporary_data_dir())
           if data_dir is None else Path(data_dir))
    outcome: list[str] = []
    reads: list[bytes] = []

    async def main(sim: Simulation) -> None:
        cluster = sim_cluster(sim, brokers, data_dir=tmp)
        await cluster.start()
        try:
            bootstrap = cluster.bootstrap_servers
            admin = connect(sim, "client-admin", AsyncAdmin({"bootstrap.servers": bootstrap}))
            await admin.start()
            try:
                await admin.create_topics([NewTopic(TOPIC, 1, min(3, brokers))])
            finally:
                await admin.close()
            producer = connect(sim, "client-producer", AsyncProducer({
                "bootstrap.servers": bootstrap, "transactional.id": "sim-txn",
                "transaction.timeout.ms": timeout_ms}))
            await producer.start()
            try:
                await producer.init_transactions()
                producer.begin_transaction()
                await producer.send(TOPIC, b"never-committed")
                await producer.flush()
                await asyncio.sleep(timeout_ms / 1000 + 20.0)  # past the timeout and a check
                try:
                    await producer.commit_transaction(timeout=30.0)
                    outcome.append("none")
                except Exception as exc:
                    outcome.append(type(exc).__name__)
            finally:
                await producer.close()
            consumer = connect(sim, "client-consumer", AsyncConsumer({
                "bootstrap.servers": bootstrap, "group.id": "sim-committed",
                "auto.offset.reset": "earliest", "isolation.level": "read_committed"}))
            await consumer.start()
            try:
                consumer.subscribe([TOPIC])
                for _ in range(10):
                    reads.extend(r.value for r in await consumer.poll(1.0))
            finally:
                await consumer.close()
        finally:
            await cluster.stop()

    cpu = time.process_time()
    try:
        sim.run(main)
    finally:
        if data_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return TransactionTimeoutReport(seed, brokers, sim.digest.hexdigest(), outcome[0],
                                    len(reads), sim.now, sim.wall_seconds,
                                    time.process_time() - cpu)
