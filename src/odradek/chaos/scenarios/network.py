"""`odradek chaos --network`: network faults between broker processes on a ZooKeeper ensemble
(docs/network-faults.md), checked by the consistency checker.

Every broker and every ZooKeeper server (an ensemble of three) runs in a Linux network namespace
of its own on one bridge (odradek.chaos.environment.netns); the chaos process and its Kafka clients
are the
``clients`` group in the root namespace. The workload: idempotent acks=all producers writing
unique values to ``chaos`` (RF 3, min.insync.replicas 2, unclean election off) and, beside
them, one acks=1 producer writing to ``chaos-acks1`` (whose losses are expected and counted);
one consumer reads both topics throughout. Every send, acknowledgement and read is recorded in a
History (odradek.chaos.checker.history); every fault in ``<workdir>/faults.log``.

Fault cycles, one at a time, each after the cluster is healthy again (every broker registered,
every ISR full, every ZooKeeper server serving); kinds in shuffled rounds:

* ``leader-from-zk-and-followers`` (the classic): the leader of a partition loses every
  ZooKeeper server and every other broker while the clients still reach it. Its session
  expires, the controller elects a follower; the old leader may still take acks=1 writes (they
  are truncated when it comes back) but must acknowledge no acks=all write it cannot replicate;
* ``isolate-broker``: a partition leader cut from everyone, clients included;
* ``one-way``: a follower's packets to its leader dropped (the leader shrinks the ISR);
* ``zk-leader-kill``: kill -9 of the ZooKeeper leader, restarted a moment later;
* ``zk-quorum-loss``: two of the three ZooKeeper servers killed or cut off, then back;
* ``slow-link``: packet loss (and latency with netem) between a leader and a follower;
* ``kill`` and ``pause``: kill -9 / SIGSTOP of a partition leader.

At the end: heal, flush, read both topics to their end, stop the brokers cleanly, read every
replica's log, and run the checker (acks=all: nothing acknowledged lost, no duplicates, no read
of a record later truncated, replicas identical; acks=1: losses counted).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...common.fault_log import FAULT_LOG_NAME, FaultLog
from ...protocol import records as rb
from ..checker.history import History, Op
from ..checker.replicas import valid_batches
from ..environment.netns import CLIENTS, LinkFault, Network
from ..environment.processes import ProcessCluster
from ..environment.zk_ensemble import ZkEnsemble, zk_node
from ..support import Progress, client_logger, stderr_progress
from ..workload import consume_all

NETWORK_FAULT_KINDS = ("leader-from-zk-and-followers", "isolate-broker", "one-way",
                       "zk-leader-kill", "zk-quorum-loss", "slow-link", "kill", "pause")
# The fault log's kind for each (common/fault_log's vocabulary).
FAULT_LOG_KIND = {"leader-from-zk-and-followers": "partition", "isolate-broker": "isolate",
                  "one-way": "one-way-partition", "zk-leader-kill": "zk-kill",
                  "zk-quorum-loss": "zk-quorum-loss", "slow-link": "slow-link", "kill": "kill",
                  "pause": "pause"}
TOPIC = "chaos"
TOPIC_ACKS1 = "chaos-acks1"


@dataclass
class NetChaosConfig:
    brokers: int = 3
    partitions: int = 4
    cycles: int = 8
    seed: int = 0
    faults: tuple[str, ...] = NETWORK_FAULT_KINDS
    schedule: tuple[str, ...] | None = None  # exactly these kinds in order (cycles ignored)
    producers: int = 2
    rate: float = 100.0  # values per second per producer
    acks1: bool = True  # the acks=1 topic beside
    session_timeout_ms: int = 3000
    replica_lag_time_max_ms: int = 3000
    hold_s: float | None = None  # how long a fault lasts; default 1.5 session timeouts + 1 s
    gap_s: tuple[float, float] = (0.3, 1.0)
    heal_timeout_s: float = 90.0
    message_timeout_ms: int = 60000
    slow_latency_ms: int = 100
    slow_loss: float = 0.3
    log_level: str = "WARNING"

    @property
    def hold(self) -> float:
        return self.hold_s if self.hold_s is not None else \
            1.5 * self.session_timeout_ms / 1000 + 1.0

    def broker_overrides(self) -> dict[str, str]:
        return {"default.replication.factor": str(min(3, self.brokers)),
                "min.insync.replicas": "2", "unclean.leader.election.enable": "false",
                "replica.lag.time.max.ms": str(self.replica_lag_time_max_ms),
                "controlled.shutdown.retry.backoff.ms": "200",
                "log.segment.bytes": str(1 << 20),
                "leader.imbalance.check.interval.seconds": "10"}


@dataclass
class Cycle:
    index: int
    kind: str
    targets: tuple[str, ...]
    detail: str = ""
    at_s: float = 0.0
    failover_s: float | None = None  # a new leader (or, one-way: the ISR shrunk), if it came
    healed_s: float | None = None
    error: str | None = None
    partition: int | None = None  # of the acks=all topic, whose leader the fault hit
    led: dict[str, list[int]] = field(default_factory=dict)  # topic -> partitions it led
    start_wall: float | None = None  # time.time() when the fault began and ended
    end_wall: float | None = None


@dataclass
class NetChaosReport:
    config: NetChaosConfig
    workdir: Path
    cycles: list[Cycle] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)  # topic -> the checker's report
    acks1_lost: int | None = None  # acknowledged acks=1 writes lost (expected)
    errors: list[str] = field(default_factory=list)
    netem_problem: str | None = None
    backend: str = ""
    elapsed_s: float = 0.0
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # topic -> op counts
    classic: list[str] = field(default_factory=list)  # what each classic cut let through

    @property
    def failures(self) -> list[str]:
        out = list(self.errors)
        out += [f"cycle {c.index} {c.kind}: {c.error}" for c in self.cycles if c.error]
        all_check = self.checks.get(TOPIC)
        if all_check is None:
            out.append("the acks=all topic was not checked")
        elif not all_check.ok:
            out.append("acks=all guarantees violated (see the table)")
        return out

    @property
    def ok(self) -> bool:
        return not self.failures


# -- the workload ---------------------------------------------------------------------------------


class Producer(threading.Thread):
    """Writes unique values round-robin over the partitions (explicit partitions, so that
    every send is recorded with its partition), recording invoke/ok/info in `history`."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, acks: str,
                 rate: float, history: History, stop: threading.Event, message_timeout_ms: int,
                 logger: logging.Logger) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.acks, self.rate, self.history, self.stop = acks, rate, history, stop
        self.message_timeout_ms, self.logger = message_timeout_ms, logger
        self.fatal: str | None = None
        self.undelivered = 0

    def run(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        def on_error(err: Any) -> None:
            if err.fatal():
                self.fatal = f"{err.name()}: {err.str()}"

        producer = KafkaProducer({
            "bootstrap.servers": self.bootstrap, "acks": self.acks,
            "enable.idempotence": self.acks == "all", "linger.ms": 5,
            "message.timeout.ms": self.message_timeout_ms, "retry.backoff.ms": 100,
            "client.id": self.name, "error_cb": on_error, "logger": self.logger})
        h = self.history
        seq = 0
        next_at = time.monotonic()
        while not self.stop.is_set() and self.fatal is None:
            value = f"{self.name}-{seq}"
            p = seq % self.partitions
            op = h.invoke(process=self.name, f="send", value=value, partition=p)

            def done(err: Any, msg: Any, op: int = op) -> None:
                if err is None:
                    off = msg.offset()
                    h.ok(op, offset=off if off is not None and off >= 0 else None)
                else:  # after retries: it may or may not be in the log
                    h.info(op, error=err.name())
            try:
                producer.produce(self.topic, value=value.encode(), partition=p, on_delivery=done)
            except BufferError:
                h.info(op, error="local queue full")  # never sent
                producer.poll(0.05)
                continue
            seq += 1
            next_at = max(next_at + 1.0 / self.rate, time.monotonic() - 1.0)
            while (delay := next_at - time.monotonic()) > 0:
                producer.poll(delay)
        self.undelivered = producer.flush(self.message_timeout_ms / 1000 + 10)


class Reader(threading.Thread):
    """Reads every partition of the topics from the beginning while the run goes on (assign,
    no group), recording each record in its topic's history."""

    def __init__(self, bootstrap: str, topics: dict[str, tuple[int, History]],
                 stop: threading.Event, logger: logging.Logger) -> None:
        super().__init__(name="consumer-0", daemon=True)
        self.bootstrap, self.topics, self.stop, self.logger = bootstrap, topics, stop, logger
        self.reads = 0

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "odradek-netchaos",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "logger": self.logger})
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING)
                         for t, (n, _) in self.topics.items() for p in range(n)])
        try:
            while not self.stop.is_set():
                for msg in consumer.consume(500, 0.5):
                    if msg.error():
                        continue
                    h = self.topics[msg.topic()][1]
                    h.read(process=self.name, partition=msg.partition(), offset=msg.offset(),
                           value=msg.value().decode())
                    self.reads += 1
        finally:
            consumer.close()


# -- the faults -----------------------------------------------------------------------------------


def broker_node(b: int) -> str:
    return f"broker-{b}"


def classic_cut(leader: int, brokers: list[int], zk_servers: list[int]) -> list[tuple[str, str]]:
    """The links the classic case cuts: the leader from every ZooKeeper server and every other
    broker (not from the clients)."""
    me = broker_node(leader)
    return ([(me, zk_node(n)) for n in zk_servers]
            + [(me, broker_node(b)) for b in brokers if b != leader])


def quorum_loss_victims(zk_servers: list[int], leader: int | None, rng: random.Random
                        ) -> list[int]:
    """Two servers of three (a majority of any ensemble less one): the leader among them when
    there is one, so that the survivor is a follower left alone."""
    k = len(zk_servers) // 2 + 1
    rest = [n for n in zk_servers if n != leader]
    chosen = ([leader] if leader is not None else []) + rng.sample(rest, k - (leader is not None))
    return sorted(chosen)


class Injector:
    def __init__(self, net: Network, ens: ZkEnsemble, cluster: ProcessCluster,
                 config: NetChaosConfig, log: FaultLog, rng: random.Random,
                 progress: Progress) -> None:
        self.net, self.ens, self.cluster, self.config = net, ens, cluster, config
        self.log, self.rng, self.progress = log, rng, progress
        self.topics = [TOPIC] + ([TOPIC_ACKS1] if config.acks1 else [])

    # -- health ---------------------------------------------------------------------------------
    def problem(self) -> str | None:
        """Why the cluster is not healthy, or None."""
        serving = self.ens.serving()
        if len(serving) < self.ens.size:
            return f"ZooKeeper serving {serving}"
        live = self.cluster.live_ids()
        if len(live) < len(self.cluster.brokers):
            return f"brokers registered {live}"
        for t in self.topics:
            for p, s in self.cluster.states(t).items():
                ar = self.cluster.assignment(t)[p]
                if s["leader"] < 0 or set(s["isr"]) != set(ar):
                    return f"{t}-{p} leader {s['leader']} isr {s['isr']} of {ar}"
        return None

    def wait_healthy(self, timeout: float) -> float:
        t0 = time.monotonic()
        last: str | None = "not checked"
        while True:
            try:
                last = self.problem()
            except Exception as exc:  # ZooKeeper in flux
                last = repr(exc)
            if last is None:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"not healed after {timeout:.0f}s: {last}")
            time.sleep(0.2)

    def _leader_of(self) -> tuple[int, int, list[int]]:
        p = self.rng.randrange(self.config.partitions)
        s = self.cluster.state(TOPIC, p)
        return p, int(s["leader"]), [int(b) for b in s["isr"]]

    def _wait_new_leader(self, p: int, old: int, timeout: float) -> float | None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                if self.cluster.leader(TOPIC, p) not in (old, -1):
                    return time.monotonic() - t0
            except Exception:
                pass
            time.sleep(0.1)
        return None

    def _wait_isr_without(self, p: int, broker: int, timeout: float) -> float | None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                if broker not in self.cluster.state(TOPIC, p)["isr"]:
                    return time.monotonic() - t0
            except Exception:
                pass
            time.sleep(0.1)
        return None

    # -- one cycle ------------------------------------------------------------------------------
    def run(self, index: int, kind: str, t0: float) -> Cycle:
        cycle = Cycle(index, kind, (), at_s=time.monotonic() - t0)
        getattr(self, "_" + kind.replace("-", "_"))(cycle)
        return cycle

    def _hold_network(self, cycle: Cycle, kind: str, faults: list[LinkFault],
                      p: int | None = None,
                      old: int | None = None, shrunk: int | None = None) -> None:
        """Hold `faults` for the configured time, then heal them. `failover_s` is when the
        partition `p` got a leader other than `old`, or when its ISR lost `shrunk`."""
        fid = self.log.start(FAULT_LOG_KIND[kind], cycle.targets, cycle.detail)
        start = time.monotonic()
        cycle.partition, cycle.start_wall = p, time.time()
        try:
            if p is not None and old is not None:
                cycle.failover_s = self._wait_new_leader(p, old, self.config.hold)
            elif p is not None and shrunk is not None:
                cycle.failover_s = self._wait_isr_without(p, shrunk, self.config.hold)
            time.sleep(max(0.0, self.config.hold - (time.monotonic() - start)))
        finally:
            self.net.heal(faults)
            cycle.end_wall = time.time()
            self.log.end(fid, FAULT_LOG_KIND[kind], cycle.targets)

    def _leader_from_zk_and_followers(self, cycle: Cycle) -> None:
        p, leader, isr = self._leader_of()
        links = classic_cut(leader, sorted(self.cluster.brokers), sorted(self.ens.servers))
        cycle.targets = (broker_node(leader), *sorted({b for _, b in links}))
        cycle.detail = (f"leader {leader} of {TOPIC}-{p} (isr {isr}) cut from ZooKeeper and "
                        "its followers; clients still reach it")
        cycle.led = {t: sorted(q for q, st in self.cluster.states(t).items()
                               if st["leader"] == leader) for t in self.topics}
        faults = self.net.inject_all([LinkFault("cut", a, b) for a, b in links])
        self._hold_network(cycle, "leader-from-zk-and-followers", faults, p, leader)

    def _isolate_broker(self, cycle: Cycle) -> None:
        p, leader, _ = self._leader_of()
        cycle.targets = (broker_node(leader),)
        cycle.detail = f"leader {leader} of {TOPIC}-{p} isolated from everyone"
        self._hold_network(cycle, "isolate-broker", [self.net.isolate(broker_node(leader))],
                           p, leader)

    def _one_way(self, cycle: Cycle) -> None:
        p, leader, isr = self._leader_of()
        followers = [b for b in isr if b != leader] or \
            [b for b in self.cluster.brokers if b != leader]
        f = self.rng.choice(followers)
        cycle.targets = (broker_node(f), broker_node(leader))
        cycle.detail = f"follower {f} -> leader {leader} of {TOPIC}-{p} dropped"
        self._hold_network(cycle, "one-way",
                           [self.net.cut_one_way(broker_node(f), broker_node(leader))],
                           p, shrunk=f)

    def _slow_link(self, cycle: Cycle) -> None:
        p, leader, isr = self._leader_of()
        others = [b for b in isr if b != leader] or \
            [b for b in self.cluster.brokers if b != leader]
        peer = self.rng.choice([*(broker_node(b) for b in others), CLIENTS])
        c = self.config
        cycle.targets = (broker_node(leader), peer)
        latency = 0 if self.net.netem_problem else c.slow_latency_ms
        cycle.detail = (f"{broker_node(leader)} (leader of {TOPIC}-{p}) <-> {peer}: "
                        f"loss {c.slow_loss:.0%}, latency {latency} ms"
                        + (" (netem unavailable)" if self.net.netem_problem else ""))
        self._hold_network(cycle, "slow-link",
                           [self.net.slow(broker_node(leader), peer, latency, c.slow_loss)])

    def _zk_leader_kill(self, cycle: Cycle) -> None:
        leader = self.ens.leader()
        if leader is None:
            cycle.error = f"no ZooKeeper leader: {self.ens.modes()}"
            return
        cycle.targets = (zk_node(leader),)
        cycle.detail = f"kill -9 of the ZooKeeper leader {zk_node(leader)}"
        self.log.instant("zk-kill", cycle.targets, cycle.detail)
        self.ens.kill(leader)
        try:
            cycle.failover_s = self.ens.wait_quorum(30, servers=self.ens.size - 1)
        except TimeoutError as exc:
            cycle.error = str(exc)
        time.sleep(1.0)
        self.ens.start_server(leader)
        self.log.instant("restart", cycle.targets, f"{zk_node(leader)} started again")

    def _zk_quorum_loss(self, cycle: Cycle) -> None:
        victims = quorum_loss_victims(sorted(self.ens.servers), self.ens.leader(), self.rng)
        how = self.rng.choice(("kill", "isolate"))
        cycle.targets = tuple(zk_node(n) for n in victims)
        cycle.detail = f"quorum lost: {how} {', '.join(cycle.targets)}, then back"
        fid = self.log.start("zk-quorum-loss", cycle.targets, cycle.detail)
        faults: list[LinkFault] = []
        try:
            if how == "kill":
                for n in victims:
                    self.ens.kill(n)
            else:
                faults = self.net.inject_all([LinkFault("isolate", zk_node(n))
                                              for n in victims])
            time.sleep(self.config.hold)
        finally:
            self.net.heal(faults)
            for n in victims:
                if n not in self.ens.running():
                    self.ens.start_server(n)
            self.log.end(fid, "zk-quorum-loss", cycle.targets)
        try:
            cycle.failover_s = self.ens.wait_quorum(60)
        except TimeoutError as exc:
            cycle.error = str(exc)

    def _kill(self, cycle: Cycle) -> None:
        p, leader, _ = self._leader_of()
        cycle.targets = (broker_node(leader),)
        cycle.detail = f"kill -9 of leader {leader} of {TOPIC}-{p}, restarted after 1 s"
        self.log.instant("kill", cycle.targets, cycle.detail)
        broker = self.cluster.brokers[leader]
        broker.kill()
        cycle.failover_s = self._wait_new_leader(p, leader, 30)
        time.sleep(max(0.0, 1.0 - (cycle.failover_s or 0)))
        broker.restart(clean=False)
        self.log.instant("restart", cycle.targets, "")

    def _pause(self, cycle: Cycle) -> None:
        p, leader, _ = self._leader_of()
        cycle.targets = (broker_node(leader),)
        cycle.detail = f"SIGSTOP of leader {leader} of {TOPIC}-{p} for {self.config.hold:.1f}s"
        fid = self.log.start("pause", cycle.targets, cycle.detail)
        broker = self.cluster.brokers[leader]
        broker.pause()
        try:
            cycle.failover_s = self._wait_new_leader(p, leader, self.config.hold)
            time.sleep(max(0.0, self.config.hold - (cycle.failover_s or self.config.hold)))
        finally:
            broker.resume()
            self.log.end(fid, "pause", cycle.targets)

    def heal_all(self) -> None:
        self.net.heal()
        for n in sorted(self.ens.servers):
            if n not in self.ens.running():
                self.ens.start_server(n)
        for b in self.cluster.brokers.values():
            b.resume()
            if not b.running():
                b.restart(clean=False)


def fault_schedule(config: NetChaosConfig, rng: random.Random) -> list[str]:
    """The kinds of the run's cycles: the forced schedule, else shuffled rounds of the enabled
    kinds (each once per round) up to `cycles`."""
    if config.schedule is not None:
        return list(config.schedule)
    out: list[str] = []
    while len(out) < config.cycles:
        round_ = list(config.faults)
        rng.shuffle(round_)
        out += round_
    return out[:config.cycles]


# -- the run ---------------------------------------------------------------------------------


def replica_logs(cluster: ProcessCluster, topic: str, partitions: int
                 ) -> dict[int, dict[int, list[tuple[int, str]]]]:
    """Each replica's records (offset, value) read from its segment files (brokers stopped)."""
    out: dict[int, dict[int, list[tuple[int, str]]]] = {}
    for p, replicas in cluster.assignment(topic).items():
        out[p] = {}
        for b in replicas:
            records: list[tuple[int, str]] = []
            for _, _, data in valid_batches(cluster.brokers[b].log_dir / f"{topic}-{p}"):
                header = rb.read_header(data, 0)
                if header.is_control:
                    continue
                records += [(r.offset, (r.value or b"").decode()) for r in rb.decode_records(data)]
            out[p][b] = records
    return out


def checkpointed_hws(cluster: ProcessCluster, topic: str) -> dict[int, int]:
    from ...storage.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile

    hw: dict[int, int] = {}
    for bp in cluster.brokers.values():
        for (t, p), v in OffsetCheckpointFile(bp.log_dir / REPLICATION_OFFSET_CHECKPOINT
                                              ).read().items():
            if t == topic:
                hw[p] = max(hw.get(p, -1), v)
    return hw


def run_network_chaos(config: NetChaosConfig, workdir: Path,
                      progress: Progress | None = None) -> NetChaosReport:
    """The whole run: network, ensemble, brokers, workload, cycles, healing, the checker.
    Namespaces, processes and the bridge are always removed; logs stay in `workdir`."""
    t_start = time.monotonic()
    progress = progress or stderr_progress(t_start)
    workdir.mkdir(parents=True, exist_ok=True)
    report = NetChaosReport(config, workdir)
    rng = random.Random(config.seed)
    log = FaultLog(workdir / FAULT_LOG_NAME)
    logger = client_logger(workdir)
    kazoo_log = _quiet_kazoo(workdir)
    net = Network()
    ens: ZkEnsemble | None = None
    cluster: ProcessCluster | None = None
    try:
        net.create()
        report.netem_problem, report.backend = net.netem_problem, net.backend
        if net.netem_problem:
            progress(net.netem_problem)
        ens = ZkEnsemble(net, workdir / "zookeeper")
        hosts = {b: net.add(broker_node(b)) for b in range(config.brokers)}
        ens.start()
        progress(f"ZooKeeper ensemble {ens.connect_string} ({net.backend} faults, bridge "
                 f"{net.bridge})")
        cluster = ProcessCluster(workdir / "brokers", ens.connect_string + "/odradek",
                                 config.brokers, overrides=config.broker_overrides(),
                                 session_timeout_ms=config.session_timeout_ms,
                                 log_level=config.log_level, hosts=hosts,
                                 command_prefixes={b: net.exec_prefix(broker_node(b))
                                                   for b in hosts})
        cluster.start()
        progress(f"{config.brokers} brokers on {cluster.bootstrap}")
        _create_topics(cluster, config)
        injector = Injector(net, ens, cluster, config, log, rng, progress)
        injector.wait_healthy(config.heal_timeout_s)
        _workload_and_cycles(cluster, config, injector, report, progress, logger, workdir)
    except Exception as exc:
        progress(f"run aborted: {traceback.format_exc()}")
        report.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        if cluster is not None:
            cluster.close()
        if ens is not None:
            ens.close()
        net.close()
        for lg in (logger, kazoo_log):
            for handler in list(lg.handlers):
                handler.close()
                lg.removeHandler(handler)
        kazoo_log.propagate = True
        report.elapsed_s = time.monotonic() - t_start
    return report


def _quiet_kazoo(workdir: Path) -> logging.Logger:
    """The inspection client's reconnects (ZooKeeper servers come and go) go to
    `workdir/kazoo.log`, not to the terminal."""
    lg = logging.getLogger("kazoo")
    lg.propagate = False
    handler = logging.FileHandler(workdir / "kazoo.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    lg.addHandler(handler)
    return lg


def _create_topics(cluster: ProcessCluster, config: NetChaosConfig) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    rf = min(3, config.brokers)
    cfg = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    topics = [NewTopic(TOPIC, config.partitions, rf, config=cfg)]
    if config.acks1:
        topics.append(NewTopic(TOPIC_ACKS1, config.partitions, rf, config=cfg))
    for f in admin.create_topics(topics, operation_timeout=20).values():
        f.result(30)


def _workload_and_cycles(cluster: ProcessCluster, config: NetChaosConfig, injector: Injector,
                         report: NetChaosReport, progress: Progress, logger: logging.Logger,
                         workdir: Path) -> None:
    histories = {TOPIC: History()}
    if config.acks1:
        histories[TOPIC_ACKS1] = History()
    stop = threading.Event()
    producers = [Producer(f"all-p{i}", cluster.bootstrap, TOPIC, config.partitions, "all",
                          config.rate, histories[TOPIC], stop, config.message_timeout_ms, logger)
                 for i in range(config.producers)]
    if config.acks1:
        producers.append(Producer("one-p0", cluster.bootstrap, TOPIC_ACKS1, config.partitions,
                                  "1", config.rate, histories[TOPIC_ACKS1], stop,
                                  config.message_timeout_ms, logger))
    reader_stop = threading.Event()
    reader = Reader(cluster.bootstrap, {t: (config.partitions, h) for t, h in histories.items()},
                    reader_stop, logger)
    for w in [*producers, reader]:
        w.start()
    t0 = time.monotonic()
    schedule = fault_schedule(config, injector.rng)
    progress(f"{len(producers)} producers, 1 consumer; {len(schedule)} fault cycles")
    try:
        time.sleep(1.0)
        for i, kind in enumerate(schedule, 1):
            cycle = injector.run(i, kind, t0)
            report.cycles.append(cycle)
            if cycle.error is None:
                try:
                    cycle.healed_s = injector.wait_healthy(config.heal_timeout_s)
                except TimeoutError as exc:
                    cycle.error = str(exc)
            acked = histories[TOPIC].counts().get("send:ok", 0)
            progress(f"cycle {i}/{len(schedule)} {kind}: {cycle.detail}; failover "
                     f"{_secs(cycle.failover_s)}, healed {_secs(cycle.healed_s)}; "
                     f"{acked} acks=all writes acknowledged so far" + (f"; ERROR {cycle.error}"
                                                           if cycle.error else ""))
            if cycle.error:
                break
            time.sleep(injector.rng.uniform(*config.gap_s))
    finally:
        stop.set()
        progress("faults over: healing, flushing the producers")
        injector.heal_all()
        try:
            injector.wait_healthy(config.heal_timeout_s)
        except TimeoutError as exc:
            report.errors.append(f"cluster did not heal at the end: {exc}")
        for w in producers:
            w.join()
        report.errors += [f"{w.name}: fatal {w.fatal}" for w in producers if w.fatal]
    time.sleep(2.0)  # the reader catches up before it stops
    reader_stop.set()
    reader.join()
    progress("reading every partition to its end, stopping the brokers, reading the replicas")
    final = {t: consume_all(cluster.bootstrap, t, config.partitions, logger=logger)
             for t in histories}
    for b in cluster.brokers.values():
        try:
            b.stop()
        except AssertionError as exc:
            report.errors.append(f"clean shutdown of broker {b.broker_id}: "
                                 f"{str(exc).splitlines()[0]}")
    for t, h in histories.items():
        h.save(workdir / f"history-{t}.jsonl")
        report.counts[t] = h.counts()
        report.checks[t] = _check(h, t, final[t], replica_logs(cluster, t, config.partitions),
                                  checkpointed_hws(cluster, t))
    acks1 = report.checks.get(TOPIC_ACKS1)
    if acks1 is not None:
        report.acks1_lost = _lost_count(acks1)
    report.classic = [classic_summary(c, {t: (h.ops(), report.checks[t].lost)
                                          for t, h in histories.items()})
                      for c in report.cycles if c.kind == "leader-from-zk-and-followers"
                      and c.start_wall is not None and c.end_wall is not None]
    (workdir / "cycles.json").write_text(json.dumps([c.__dict__ for c in report.cycles],
                                                    indent=1))


def _check(h: History, topic: str, final: dict[int, list[tuple[int, str]]],
           replicas: dict[int, dict[int, list[tuple[int, str]]]], hws: dict[int, int]) -> Any:
    from ..checker.consistency import Guarantees, check

    acks = "all" if topic == TOPIC else "1"
    settings = Guarantees(acks=acks, min_insync_replicas=2, unclean_leader_election=False,
                          idempotent=acks == "all", transactional=False)
    return check(h, settings, final_logs=final, replica_logs=replicas, high_watermarks=hws)


def acked_during(ops: Iterable[Op], partitions: Iterable[int], start: float, end: float
                 ) -> list[Op]:
    """The sends to `partitions` acknowledged between the wall times `start` and `end`."""
    wanted = set(partitions)
    return [op for op in ops if op.f == "send" and op.type == "ok"
            and op.partition in wanted and start <= op.wall <= end]


def classic_summary(cycle: Cycle, topics: dict[str, tuple[Iterable[Op], Iterable[Op]]]) -> str:
    """What a classic cut let through: per topic (ops, the checker's lost ops), the writes to
    the partitions the cut-off broker led when it was cut (`cycle.led`; else the cycle's
    partition) acknowledged during the cut, and how many of them were lost."""
    assert cycle.partition is not None and cycle.start_wall is not None
    assert cycle.end_wall is not None
    parts = []
    for topic, (ops, lost) in topics.items():
        led = cycle.led.get(topic, [cycle.partition])
        acked = acked_during(ops, led, cycle.start_wall, cycle.end_wall)
        lost_values = {op.value for op in lost}
        n_lost = sum(1 for op in acked if op.value in lost_values)
        parts.append(f"{topic} p{','.join(map(str, led)) or '-'}: {len(acked)} acknowledged, "
                     f"{n_lost} lost")
    return (f"cycle {cycle.index} ({cycle.targets[0]} cut {cycle.end_wall - cycle.start_wall:.1f}s"
            "): " + "; ".join(parts))


def _lost_count(report: Any) -> int:
    return int(report.row("lost").observed)


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}s"


def format_network_report(report: NetChaosReport) -> str:
    c = report.config
    lines = [f"odradek chaos --network: seed {c.seed}, {c.brokers} brokers, ZooKeeper ensemble "
             f"of 3, {len(report.cycles)} fault cycles in {report.elapsed_s:.0f}s "
             f"({report.backend or 'no'} faults)"]
    if report.netem_problem:
        lines.append(f"note: {report.netem_problem}")
    kinds: dict[str, int] = {}
    for cy in report.cycles:
        kinds[cy.kind] = kinds.get(cy.kind, 0) + 1
    lines.append("cycles by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    for t, counts in report.counts.items():
        lines.append(f"{t}: ops {dict(sorted(counts.items()))}")
    for t, check_report in report.checks.items():
        lines.append(f"-- {t} ({'acks=all' if t == TOPIC else 'acks=1: losses expected'})")
        lines.append(check_report.to_text())
    if report.acks1_lost is not None:
        lines.append(f"acks=1 acknowledged writes lost (expected, counted): {report.acks1_lost}")
    if report.classic:
        lines.append("the classic cuts (leader from ZooKeeper and followers): writes to the "
                     "partitions it led, acknowledged during the cut:")
        lines += [f"  {line}" for line in report.classic]
    lines += [f"FAILED: {f}" for f in report.failures]
    lines.append("OK: every guarantee held" if report.ok else "NOT OK")
    return "\n".join(lines)


def plot_network_report(report: NetChaosReport, path: str) -> None:
    from ...common.fault_log import read_fault_events

    check_report = report.checks[TOPIC]
    check_report.plot(path, faults=read_fault_events(report.workdir / FAULT_LOG_NAME))
