"""Process faults on a `ProcessCluster`, one at a time, each waited out until the cluster healed:
kill -9 of a partition leader or of the controller, SIGSTOP of a leader past the session
timeout, a clean restart (controlled shutdown), and with ``--admin-ops`` partition reassignments
(AlterPartitionReassignments, sometimes with the controller killed right after) and preferred
leader elections (ElectLeaders).

`FaultInjector` injects them and records each as a `FaultRecord` (and in the run's faults.log);
`fault_plan` is the order they come in; `in_sync` is the health check (every ISR full but for
the replicas a reassignment is still adding, KIP-455); `random_target` a reassignment's new
replica set; `ReassignmentCheck` where each partition's last requested move ended. The
transactional scenario extends the injector with its own faults."""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...common.fault_log import FaultLog
from ..config import ChaosConfig
from ..support import Progress, poll_for
from .processes import ProcessCluster

# ElectLeaders answers that are no failure: nothing to do, or the preferred replica cannot lead
# (Kafka's error codes: ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE).
ELECTION_NOT_NEEDED = 84
PREFERRED_LEADER_NOT_AVAILABLE = 80


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
