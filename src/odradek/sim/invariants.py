"""Kafka's replication invariants checked DURING a simulated run (docs/simulation.md,
"Invariants during the run"), not only on the final logs.

`InvariantMonitor` reads the in-process brokers' state — each hosted partition's leader epoch,
ISR and high watermark (`ReplicaManager.partitions`), its log's last stable offset, open
transactions and leader epochs, the group coordinators' committed offsets, the transaction
coordinators' state — at most every `interval` virtual seconds, when the simulated network
delivers a segment (an observer of the run's digest), and every transaction the embedded
coordination store commits, through one hook on the store object of the run
(`EmbeddedZooKeeper._commit`, wrapped on that instance only). It only reads: it sends nothing,
draws nothing from the seed and arms no timer, so a run's digest is the same with it or without
it (a liveness check that has to wait past the run's natural end is the one exception, and
only when the cluster has not recovered by then).

Each violation is a `Violation` (virtual time, invariant, partition or broker, one line),
written to the trace (`source` "invariant") and, per invariant, a `Row` of the run's
`CheckReport` (`rows()`), so a violated invariant fails `odradek sim` as the checker's rows do.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..chaos.checker.consistency import Row
from ..chaos.checker.history import History
from ..common import clock
from ..coordination import paths
from ..coordinator.transaction_state import CompleteAbort, CompleteCommit, Empty
from ..protocol import codec
from .trace import Trace

if TYPE_CHECKING:
    from ..cluster.async_cluster import AsyncCluster
    from ..server.broker import Broker
    from ..server.replication.partition import Partition
    from .simulation import Simulation

__all__ = ["INVARIANTS", "CrashLoss", "InvariantMonitor", "Violation"]

#: name -> (the guarantee, why Kafka promises it), in the order the rows are printed
INVARIANTS: dict[str, tuple[str, str]] = {
    "hw-monotonic": (
        "a leader's HW never moves backwards in its leader epoch",
        "Partition.maybeIncrementLeaderHW only raises the HW"),
    "hw-within-isr": (
        "a leader's HW, when it moves, is at most every ISR member's LEO",
        "HW = min LEO over the (maximal) ISR, KIP-497"),
    "one-leader-per-epoch": (
        "one leader per partition and leader epoch",
        "the controller's leader epoch bump, KIP-101/KIP-279"),
    "epochs-agree": (
        "below the HW a follower's leader epochs are its leader's, offset by offset",
        "KIP-101/KIP-279 truncation by leader epoch"),
    "isr-in-store": (
        "a leader's settled ISR is the one in the partition state node",
        "ZkIsrManager writes the ISR before using it"),
    "controller-fenced": (
        "controller epochs only grow and only the current controller's writes land",
        "the controller epoch zkVersion check (ControllerContext.epochZkVersion)"),
    "lso-bound": (
        "the LSO never passes an open transaction's first offset nor the HW",
        "KIP-98 last stable offset"),
    "txn-markers": (
        "a partition's open transaction is its producer's current one",
        "KIP-98: markers written to every partition before the next transaction"),
    "offsets-monotonic": (
        "a group's committed offsets never go backwards except by a seek or a late request",
        "OffsetCommit with generation checks, acks=all __consumer_offsets"),
    "liveness-isr": (
        "after the heal every partition has a leader from a full ISR, replicas converged",
        "unclean.leader.election.enable=false, replica.lag.time.max.ms"),
    "liveness-ops": (
        "after the heal every operation invoked before it completes",
        "delivery.timeout.ms, transaction timeouts"),
}

_OFFSETS_TOPIC = "__consumer_offsets"
_TXN_TOPIC = "__transaction_state"
_STATE_SUFFIX = "/state"
#: a partition of one incarnation of its topic: (topic, partition) and the topic id
_Incarnation = tuple[tuple[str, int], uuid.UUID | None]
_DELIVERIES = frozenset({"syn", "synack", "data", "fin"})  # the network's delivery events
_OFFSET_COMMIT = (8).to_bytes(2, "big")  # api key of a request frame (after its size)


@dataclass(frozen=True)
class Violation:
    """One broken invariant: when (virtual seconds), which, where, what."""

    time: float
    invariant: str
    where: str
    description: str

    def line(self) -> str:
        return f"{self.time:.3f} {self.invariant} {self.where}: {self.description}"


@dataclass(frozen=True)
class CrashLoss:
    """Records below a partition's high watermark that its new leader does not have, because
    its machine crashed and took the log's unsynced tail with it: Kafka 2.8 does not fsync
    on acknowledge, and a clean election picks the last ISR member whatever its log lost
    (the case of KIP-966, fixed in KRaft only). Offsets [start, end): `start` where the
    leader's epoch begins (its log end after the crash), `end` the largest HW seen before."""

    time: float
    topic: str
    partition: int
    broker: int
    leader_epoch: int
    start: int
    end: int

    def covers(self, tp: tuple[str, int], offset: int) -> bool:
        return (self.topic, self.partition) == (tp[0], tp[1]) and self.start <= offset < self.end

    def line(self) -> str:
        return (f"{self.time:.3f} {self.topic}-{self.partition}: broker {self.broker}, its log "
                f"cut by a machine crash, leads epoch {self.leader_epoch} from offset "
                f"{self.start}, below the HW {self.end} seen before (lost by Kafka's design)")


def _first_divergence(mine: list[tuple[int, int]], theirs: list[tuple[int, int]]) -> int:
    """The first offset where two lists of (epoch, first offset) differ."""
    for a, b in zip(mine, theirs, strict=False):
        if a != b:
            return min(a[1], b[1])
    longer = mine if len(mine) > len(theirs) else theirs
    return longer[min(len(mine), len(theirs))][1]


def _epoch_ranges(entries: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """(epoch, first offset) of each epoch holding offsets in [lo, hi): epochs without records
    (a leader's epoch that appended nothing) and those outside the range left out."""
    out = []
    for i, (epoch, start) in enumerate(entries):
        end = min(entries[i + 1][1], hi) if i + 1 < len(entries) else hi
        first = max(start, lo)
        if first < end:
            out.append((epoch, first))
    return out


def _tp_name(tp: tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"


def _not_converged(cluster: AsyncCluster, brokers: list[tuple[int, Broker]],
                   leaders: dict[tuple[str, int], tuple[int, Partition]]) -> str:
    """What keeps the cluster from having converged (a leader from a full ISR for every
    partition, every replica at its leader's epoch, LEO and HW), "" when nothing does."""
    live = {b for b, _ in brokers}
    if len(live) < len(cluster.brokers):
        return f"brokers {sorted(set(cluster.brokers) - live)} not running"
    hosted: dict[tuple[str, int], list[tuple[int, Partition]]] = {}
    for b, broker in brokers:
        assert broker.replica_manager is not None
        for tp, p in broker.replica_manager.partitions.items():
            hosted.setdefault(tp, []).append((b, p))
    for tp, replicas in sorted(hosted.items()):
        lead = leaders.get(tp)
        if lead is None:
            return f"{_tp_name(tp)} has no leader (hosted by {sorted(b for b, _ in replicas)})"
        leader = lead[1]
        if set(leader.isr) != set(leader.replicas) or lead[0] not in leader.isr:
            return (f"{_tp_name(tp)}: leader {lead[0]} epoch {leader.leader_epoch} has ISR "
                    f"{sorted(leader.isr)} of replicas {sorted(leader.replicas)}")
        for b, p in replicas:
            if p.leader_id != lead[0] or p.leader_epoch != leader.leader_epoch \
                    or p.log_end_offset != leader.log_end_offset \
                    or p.high_watermark != leader.high_watermark:
                return (f"{_tp_name(tp)}: broker {b} follows {p.leader_id} epoch "
                        f"{p.leader_epoch} at LEO {p.log_end_offset} HW {p.high_watermark}; "
                        f"leader {lead[0]} epoch {leader.leader_epoch} at LEO "
                        f"{leader.log_end_offset} HW {leader.high_watermark}")
    return ""


class InvariantMonitor:
    """Checks the invariants of `INVARIANTS` over `cluster` while `sim` runs.

    `start()` once the cluster is up; `healed()` when every fault is off and every broker
    back (starts the liveness bounds); `settle()` before the verdict (waits, only if needed,
    for the liveness bounds); `stop()`; then `rows()`."""

    def __init__(self, sim: Simulation, cluster: AsyncCluster, history: History, trace: Trace,
                 *, interval: float = 0.05, isr_bound: float = 30.0,
                 ops_bound: float = 90.0, txn_slack: float = 2.0) -> None:
        self.sim = sim
        self.cluster = cluster
        self.history = history
        self.trace = trace
        self.interval = interval
        self.isr_bound = isr_bound
        self.ops_bound = ops_bound
        self.txn_slack = txn_slack
        self.violations: list[Violation] = []
        # committed records lost by Kafka's design (`CrashLoss`), and per invariant the
        # violations they explain (reported, not failed)
        self.losses: list[CrashLoss] = []
        self.exempted: dict[str, int] = dict.fromkeys(INVARIANTS, 0)
        # A partition is keyed with its topic id (`_Incarnation`): a topic deleted and created
        # again under its name starts again at leader epoch 0 and offset 0 (KIP-516)
        self._committed: dict[_Incarnation, int] = {}  # the largest HW seen
        self._led: set[tuple[_Incarnation, int]] = set()  # (partition, leader epoch) seen
        self.error: BaseException | None = None  # raised by `rows()` if sampling failed
        self.checked: dict[str, int] = dict.fromkeys(INVARIANTS, 0)
        self.cpu_s = 0.0  # process time spent checking (the monitor's cost)
        self.samples = 0
        self._next_sample = 0.0
        self._reported: set[tuple[str, str]] = set()
        # hw-monotonic: (broker, tp) -> (partition object, leader epoch, HW)
        self._hw: dict[tuple[int, tuple[str, int]], tuple[Partition, int, int]] = {}
        self._lso: dict[tuple[int, tuple[str, int]], tuple[Partition, int, int]] = {}
        # one-leader-per-epoch: (partition, leader epoch) -> broker
        self._leaders: dict[tuple[_Incarnation, int], int] = {}
        self._state_paths: dict[tuple[str, int], str] = {}
        self._store_nodes: dict[str, Any] = getattr(cluster.zookeeper, "_nodes", {})
        self._store_isr: dict[tuple[str, int], tuple[int, list[int] | None]] = {}
        # controller-fenced: the largest controller epoch seen in the store
        self._controller_epoch = -1
        # txn-markers: (tp, first offset, producer id) -> clock.now_ms() when first seen open
        self._open_txns: dict[tuple[tuple[str, int], int, int], int] = {}
        # offsets-monotonic: (group, topic, partition) -> largest committed offset
        self._offsets: dict[tuple[str, str, int], int] = {}
        # ... and the offsets of OffsetCommit requests delivered after their client closed
        # the connection (a request it gave up on, applied after its later commits)
        self._late_commits: dict[tuple[str, str, int], set[int]] = {}
        self._history_seen = 0
        # ... and the seeks (group, topic, partition) -> (invoke index, the target once the
        # seek's commit was acknowledged): a seek's commit may land any time after its
        # invoke, even after the seek gave up (a cancelled or timed-out commit)
        self._seeks: dict[tuple[str, str, int], tuple[int, int | None]] = {}
        # liveness
        self._healed_at: float | None = None
        self._pending_at_heal: list[int] = []
        self._converged_at: float | None = None
        self._unconverged = ""  # what the last sample found not converged yet
        self._unhook: Callable[[], None] | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._hook_store()
        self.sim.digest.observers.append(self._on_event)

    def _on_event(self, now: float, kind: str, fields: str, payload: bytes) -> None:
        """A delivery on the simulated network (the digest's observer): sample at most once
        per `interval`. Riding on deliveries rather than on a timer of its own, the monitor
        leaves the loop's timers and clock exactly as they were (a timer of its own, due
        within the loop's clock resolution of another, would move the clock a few ulps for
        the callbacks after it, and the digest with it)."""
        if kind == "data" and payload[4:6] == _OFFSET_COMMIT and self.error is None:
            try:
                self._note_late_commit(fields, payload)
            except Exception as exc:
                self.error = exc
        if now < self._next_sample or kind not in _DELIVERIES or self.error is not None:
            return
        self._next_sample = now + self.interval
        try:
            self.sample()
        except Exception as exc:  # a broken monitor must not pass for a quiet run
            self.error = exc

    def healed(self) -> None:
        """Every fault is off and every broker back: the liveness bounds start now."""
        self._healed_at = self.sim.now
        self._pending_at_heal = [op.index for op in self.history.pending()]

    async def settle(self) -> None:
        """Before the verdict: if the cluster has not converged yet, wait for it up to the
        liveness bound (a run that converged already waits for nothing, so its digest is the
        same as without the monitor)."""
        if self._healed_at is None:
            return
        deadline = self._healed_at + self.isr_bound
        while self._converged_at is None and self.sim.now < deadline:
            await asyncio.sleep(min(self.interval * 5, deadline - self.sim.now))
            self.sample()

    def stop(self) -> None:
        if self._unhook is not None:
            self._unhook()
            self._unhook = None
        with contextlib.suppress(ValueError):
            self.sim.digest.observers.remove(self._on_event)

    # -- recording ---------------------------------------------------------------------------
    def _violate(self, invariant: str, where: str, description: str, *,
                 once: str | None = None) -> None:
        """Record a violation; with `once`, only the first of that key."""
        if once is not None:
            key = (invariant, once)
            if key in self._reported:
                return
            self._reported.add(key)
        v = Violation(self.sim.now, invariant, where, description)
        self.violations.append(v)
        self.trace.event(v.time, "invariant", name=invariant, where=where,
                         description=description)

    def rows(self) -> tuple[Row, ...]:
        """One `Row` per invariant: FAIL with examples when violated."""
        if self.error is not None:
            raise RuntimeError("the invariant monitor failed") from self.error
        self._final_liveness()
        out = []
        for name, (guarantee, why) in INVARIANTS.items():
            found = [v for v in self.violations if v.invariant == name]
            checked, exempted = self.checked[name], self.exempted[name]
            verdict = "FAIL" if found else "expected" if exempted else \
                "ok" if checked else "skipped"
            examples = tuple(v.line() for v in found[:3])
            if exempted:
                why += f"; {exempted} explained by a crash's loss (KIP-966's case)"
                examples += tuple(loss.line() for loss in self.losses[:2])
            out.append(Row(name, guarantee, True, why, checked, len(found) + exempted,
                           examples, verdict))
        return tuple(out)

    def _note_crash_loss(self, b: int, tp: tuple[str, int], p: Partition, epoch: int) -> None:
        """A new leadership (`tp`, `epoch`) on broker `b`: if its log begins the epoch below
        the partition's largest HW seen and a machine crash cut the partition's files on `b`,
        the records in between are a `CrashLoss`. Without such a crash, a leader missing
        committed records fails the rows that see it (`lost`, `epochs-agree`, ...)."""
        committed = self._committed.get((tp, getattr(p, "topic_id", None)), 0)
        start = next((first for e, first in p.log.leader_epoch_cache.entries() if e == epoch),
                     p.log_end_offset)
        if start >= committed:
            return
        dirs = {os.path.abspath(d) for d in self.cluster.brokers[b].config.log_dirs}
        prefix = f"{tp[0]}-{tp[1]}{os.sep}"
        if not any(top in dirs and any(rel.startswith(prefix) for rel in report)
                   for _, top, report in getattr(self.sim.disk, "crashes", ())):
            return
        loss = CrashLoss(self.sim.now, tp[0], tp[1], b, epoch, start, committed)
        self.losses.append(loss)
        self.trace.event(loss.time, "invariant", name="crash-loss", where=_tp_name(tp),
                         description=loss.line())

    def _lost(self, tp: tuple[str, int], offset: int) -> bool:
        return any(loss.covers(tp, offset) for loss in self.losses)

    # -- the store hook: controller writes ---------------------------------------------------
    def _hook_store(self) -> None:
        zk = self.cluster.zookeeper
        commit = getattr(zk, "_commit", None)
        nodes = getattr(zk, "_nodes", None)
        if commit is None or nodes is None:
            return

        def observed(txn: Any) -> None:
            if self.error is None:
                try:
                    self._on_store_commit(txn.before, nodes)
                except Exception as exc:  # fails the verdict (`rows()`), not the store
                    self.error = exc
            commit(txn)

        zk._commit = observed  # type: ignore[method-assign]

        def unhook() -> None:
            with contextlib.suppress(AttributeError):
                del zk._commit

        self._unhook = unhook

    def _on_store_commit(self, before: dict[str, Any], nodes: dict[str, Any]) -> None:
        started = time.process_time()
        epoch_node = nodes.get(paths.CONTROLLER_EPOCH)
        if paths.CONTROLLER_EPOCH in before and epoch_node is not None:
            self.checked["controller-fenced"] += 1
            epoch = paths.decode_controller_epoch(epoch_node.data)
            if epoch < self._controller_epoch:
                self._violate("controller-fenced", "/controller_epoch",
                              f"controller epoch went from {self._controller_epoch} to {epoch}")
            self._controller_epoch = max(self._controller_epoch, epoch)
        current = paths.decode_controller_epoch(epoch_node.data) if epoch_node is not None else -1
        for path, old in before.items():
            if not path.endswith(_STATE_SUFFIX) or not path.startswith(paths.TOPICS):
                continue
            node = nodes.get(path)
            if node is None:
                continue
            new = paths.decode_partition_state(node.data)
            if new is None:
                continue
            where = path[len(paths.TOPICS) + 1:-len(_STATE_SUFFIX)].replace("/partitions/", "-")
            self.checked["controller-fenced"] += 1
            if new.controller_epoch < current:
                prior = paths.decode_partition_state(old.data) if old is not None else None
                if prior is None or prior.controller_epoch != new.controller_epoch \
                        or prior.leader_epoch != new.leader_epoch:
                    # a leader's own ISR write keeps the controller epoch it found; a
                    # controller's write (new leader epoch) names the writer's epoch
                    self._violate("controller-fenced", where,
                                  f"state written by controller epoch {new.controller_epoch} "
                                  f"while the controller epoch is {current} (leader "
                                  f"{new.leader} epoch {new.leader_epoch} isr {list(new.isr)})")
            if old is not None:
                prior = paths.decode_partition_state(old.data)
                if prior is not None:
                    self.checked["one-leader-per-epoch"] += 1
                    if new.leader_epoch < prior.leader_epoch or (
                            new.leader_epoch == prior.leader_epoch
                            and new.leader != prior.leader):
                        self._violate("one-leader-per-epoch", where,
                                      f"state node went from leader {prior.leader} epoch "
                                      f"{prior.leader_epoch} to leader {new.leader} epoch "
                                      f"{new.leader_epoch}")
        self.cpu_s += time.process_time() - started

    # -- the periodic sample -----------------------------------------------------------------
    def _live(self) -> Iterator[tuple[int, Broker]]:
        for b, broker in sorted(self.cluster.brokers.items()):
            if broker.started and broker.replica_manager is not None:
                yield b, broker

    def sample(self) -> None:
        started = time.process_time()
        self.samples += 1
        brokers = list(self._live())
        leaders: dict[tuple[str, int], tuple[int, Partition]] = {}
        now_ms = clock.now_ms()
        open_now: set[tuple[tuple[str, int], int, int]] = set()
        for b, broker in brokers:
            rm = broker.replica_manager
            assert rm is not None
            for tp, p in rm.partitions.items():
                if not p.is_leader:
                    continue
                self._check_leader(b, tp, p, now_ms, open_now)
                best = leaders.get(tp)
                if best is None or best[1].leader_epoch < p.leader_epoch:
                    leaders[tp] = (b, p)
        for b, broker in brokers:
            rm = broker.replica_manager
            assert rm is not None
            for tp, p in rm.partitions.items():
                lead = leaders.get(tp)
                if lead is not None and lead[0] != b and lead[0] == p.leader_id \
                        and lead[1].leader_epoch == p.leader_epoch:
                    self._check_epochs(b, tp, p, lead[0], lead[1])
        for key in [k for k in self._open_txns if k not in open_now]:
            del self._open_txns[key]
        self._check_txn_markers(brokers, leaders, now_ms)
        self._check_offsets(brokers)
        if self._healed_at is not None:
            self._check_converged(brokers, leaders)
        self.cpu_s += time.process_time() - started

    def _check_leader(self, b: int, tp: tuple[str, int], p: Partition, now_ms: int,
                      open_now: set[tuple[tuple[str, int], int, int]]) -> None:
        epoch, hw = p.leader_epoch, p.high_watermark
        key = (b, tp)
        inc = (tp, p.topic_id)
        if (inc, epoch) not in self._led:
            self._led.add((inc, epoch))
            self._note_crash_loss(b, tp, p, epoch)
        if hw > self._committed.get(inc, 0):
            self._committed[inc] = hw
        # one leader per (partition, leader epoch), over the whole run
        self.checked["one-leader-per-epoch"] += 1
        other = self._leaders.setdefault((inc, epoch), b)
        if other != b:
            self._violate("one-leader-per-epoch", _tp_name(tp),
                          f"brokers {other} and {b} both led leader epoch {epoch}",
                          once=f"{tp}/{epoch}")
        # HW monotonic while the same replica leads in the same epoch
        self.checked["hw-monotonic"] += 1
        last = self._hw.get(key)
        if last is not None and last[0] is p and last[1] == epoch:
            if hw < last[2]:
                self._violate("hw-monotonic", f"{_tp_name(tp)} broker {b}",
                              f"HW went back from {last[2]} to {hw} in leader epoch {epoch}")
            elif hw > last[2]:
                self._check_hw_within_isr(b, tp, p)
        self._hw[key] = (p, epoch, hw)
        # the ISR the leader uses is the store's, once no write is in flight
        self._check_isr_in_store(b, tp, p)
        # the LSO: <= HW, <= every open transaction's first offset, monotonic in the epoch
        log = p.log
        psm = log.producer_state
        lso = log.last_stable_offset
        self.checked["lso-bound"] += 1
        if lso > hw:
            self._violate("lso-bound", f"{_tp_name(tp)} broker {b}",
                          f"LSO {lso} above the HW {hw}", once=f"{tp}/{b}/hw")
        for first, pid in psm.ongoing_txns.items():
            open_now.add((tp, first, pid))
            self._open_txns.setdefault((tp, first, pid), now_ms)
            if lso > first:
                self._violate("lso-bound", f"{_tp_name(tp)} broker {b}",
                              f"LSO {lso} passed producer {pid}'s open transaction at {first}",
                              once=f"{tp}/{first}/{pid}")
        last_lso = self._lso.get(key)
        if last_lso is not None and last_lso[0] is p and last_lso[1] == epoch \
                and lso < last_lso[2]:
            self._violate("lso-bound", f"{_tp_name(tp)} broker {b}",
                          f"LSO went back from {last_lso[2]} to {lso} in leader epoch {epoch}")
        self._lso[key] = (p, epoch, lso)

    def _check_epochs(self, b: int, tp: tuple[str, int], follower: Partition, leader_id: int,
                      leader: Partition) -> None:
        """The epoch of every offset both replicas hold below both HWs is the same (a
        follower truncates where its epochs diverge from the leader's before fetching)."""
        lo = max(follower.log_start_offset, leader.log_start_offset)
        hi = min(follower.high_watermark, leader.high_watermark)
        if hi <= lo:
            return
        self.checked["epochs-agree"] += 1
        mine = _epoch_ranges(follower.log.leader_epoch_cache.entries(), lo, hi)
        theirs = _epoch_ranges(leader.log.leader_epoch_cache.entries(), lo, hi)
        if mine != theirs and self._lost(tp, _first_divergence(mine, theirs)):
            self.exempted["epochs-agree"] += 1  # a follower not yet cut back to the loss
        elif mine != theirs:
            self._violate("epochs-agree", f"{_tp_name(tp)} broker {b}",
                          f"epochs (epoch, start) below {hi}: {mine[-3:]} on broker {b}, "
                          f"{theirs[-3:]} on its leader {leader_id}",
                          once=f"{tp}/{b}/{follower.leader_epoch}")

    def _check_hw_within_isr(self, b: int, tp: tuple[str, int], p: Partition) -> None:
        self.checked["hw-within-isr"] += 1
        hw = p.high_watermark
        for r in p.maximal_isr:
            state = p.remote.get(r)
            if r == b or state is None or state.log_end_offset < 0:
                continue
            if hw > state.log_end_offset:
                self._violate("hw-within-isr", f"{_tp_name(tp)} broker {b}",
                              f"HW {hw} above ISR member {r}'s LEO {state.log_end_offset} "
                              f"(ISR {list(p.maximal_isr)})", once=f"{tp}/{b}/{p.leader_epoch}")
                return

    def _check_isr_in_store(self, b: int, tp: tuple[str, int], p: Partition) -> None:
        if p.isr_update_in_flight:
            return
        path = self._state_paths.get(tp)
        if path is None:
            path = self._state_paths[tp] = paths.partition_state_path(*tp)
        node = self._store_nodes.get(path)
        if node is None:
            return
        self.checked["isr-in-store"] += 1
        # a state version other than the leader's: the controller moved on and its
        # LeaderAndIsr is on the way; the same version with another ISR is a lost write
        if node.version != p.zk_version:
            return
        cached = self._store_isr.get(tp)
        if cached is None or cached[0] != node.mzxid:
            state = paths.decode_partition_state(node.data)
            cached = (node.mzxid, None if state is None else sorted(state.isr))
            self._store_isr[tp] = cached
        if cached[1] is not None and cached[1] == sorted(p.isr):
            return
        # no write in flight and the version the leader holds: the store has the ISR the
        # leader uses (it writes the store first, then its memory: ZkIsrManager)
        self._violate("isr-in-store", f"{_tp_name(tp)} broker {b}",
                      f"leader uses ISR {p.isr} at state version {p.zk_version}; the store "
                      f"has {cached[1]} at that version", once=f"{tp}/{b}/{p.zk_version}")

    def _check_txn_markers(self, brokers: list[tuple[int, Broker]],
                           leaders: dict[tuple[str, int], tuple[int, Partition]],
                           now_ms: int) -> None:
        """A transaction still open on a partition while its producer's coordinator has
        completed it, or begun a later one, lacks a marker (KIP-98: the coordinator completes
        a transaction only once every partition has its marker)."""
        if not self._open_txns:
            return
        current: dict[int, tuple[int, Any]] = {}  # producer id -> (coordinator epoch, meta)
        for _, broker in brokers:
            tc = broker.txn_coordinator
            manager = getattr(tc, "txn_manager", None)
            if manager is None:
                continue
            loading = {p for p, _ in manager.loading_partitions}
            for partition, entry in manager.transaction_metadata_cache.items():
                txn_tp = (_TXN_TOPIC, partition)
                lead = leaders.get(txn_tp)
                if partition in loading or lead is None or lead[0] != broker.broker_id:
                    continue
                for meta in entry.metadata_per_transactional_id.values():
                    seen = current.get(meta.producer_id)
                    if seen is None or seen[0] < entry.coordinator_epoch:
                        current[meta.producer_id] = (entry.coordinator_epoch, meta)
        slack_ms = self.txn_slack * 1000
        for (tp, first, pid), seen_ms in self._open_txns.items():
            lead = leaders.get(tp)
            found = current.get(pid)
            if lead is None or found is None:
                continue
            self.checked["txn-markers"] += 1
            meta = found[1]
            if now_ms - seen_ms < slack_ms or meta.pending_state is not None \
                    or first not in lead[1].log.producer_state.ongoing_txns:
                continue
            done = meta.state in (CompleteCommit, CompleteAbort, Empty)
            later = meta.txn_start_timestamp > seen_ms + slack_ms
            if (done and meta.txn_last_update_timestamp > seen_ms + slack_ms) or later:
                what = (f"completed ({meta.state.name})" if done
                        else "began a later transaction")
                self._violate("txn-markers", _tp_name(tp),
                              f"producer {pid}'s transaction open at offset {first} since "
                              f"{(seen_ms - now_ms) / 1000 + self.sim.now:.3f}s while its "
                              f"coordinator {what}", once=f"{tp}/{first}/{pid}")

    def _note_late_commit(self, fields: str, payload: bytes) -> None:
        """An OffsetCommit request delivered on a connection whose client end has closed:
        the client gave up on it (a request timed out, the connection was closed with the
        request still on its way, as TCP delivers what was written before a close) and may
        have committed newer offsets since on another connection. Kafka orders a member's
        commits on one connection only; the coordinator applies such a request when it
        arrives (same member, same generation), so the committed offset may go back to it."""
        conn_id, _, ends = fields.partition(" ")
        conn = self.sim.network.connections.get(int(conn_id.lstrip("#")))
        if conn is None or not conn.client.closing \
                or ends.partition(">")[0] != f"{conn.client.local[0]}:{conn.client.local[1]}":
            return
        size = int.from_bytes(payload[:4], "big")
        if len(payload) < 4 + size:
            return  # a request cut into segments: not an OffsetCommit of the workload's
        _, request = codec.decode_request(payload[4:4 + size])
        for topic in request.topics:
            for p in topic.partitions:
                self._late_commits.setdefault(
                    (request.group_id, topic.name, p.partition_index), set()).add(
                    p.committed_offset)

    def _check_offsets(self, brokers: list[tuple[int, Broker]]) -> None:
        """Committed offsets on each group's current coordinator never go backwards; a seek
        in the history (f "seek" of group `value`, partition "topic-p") lets its partition go
        back once, whenever its commit lands, and so does a late request
        (`_note_late_commit`) to the offset it carried."""
        history = self.history
        if len(history) > self._history_seen:
            for index in range(self._history_seen, len(history)):
                op = history[index]
                if op.f != "seek" or op.partition is None:
                    continue
                topic, _, part = str(op.partition).rpartition("-")
                key = (str(op.value), topic, int(part))
                if op.type == "invoke":
                    self._seeks[key] = (op.index, None)
                elif op.type == "ok" and key in self._seeks \
                        and self._seeks[key][0] == op.ref:
                    self._seeks[key] = (self._seeks[key][0], op.offset)
            self._history_seen = len(history)
        coordinators: dict[int, tuple[int, Any]] = {}  # offsets partition -> (epoch, manager)
        for _, broker in brokers:
            gc = broker.group_coordinator
            manager = getattr(gc, "manager", None)
            if manager is None or not getattr(gc, "is_active", False):
                continue
            for partition in manager.owned:
                if partition in manager.loading:
                    continue
                epoch = manager.epoch_for_partition.get(partition, -1)
                best = coordinators.get(partition)
                if best is None or best[0] < epoch:
                    coordinators[partition] = (epoch, manager)
        seen: set[int] = set()
        for _partition, (_, manager) in sorted(coordinators.items()):
            if id(manager) in seen:
                continue
            seen.add(id(manager))
            for group_id, group in list(manager.groups.items()):
                if coordinators.get(manager.partition_for(group_id), (0, None))[1] \
                        is not manager:
                    continue
                for tp, committed in list(group.offsets.items()):
                    offset = committed.offset_and_metadata.offset
                    key = (group_id, tp[0], tp[1])
                    self.checked["offsets-monotonic"] += 1
                    last = self._offsets.get(key)
                    seek = self._seeks.get(key)
                    if seek is not None and seek[1] == offset:
                        del self._seeks[key]  # the seek's commit landed
                        self._offsets[key] = offset
                        continue
                    if last is not None and offset < last:
                        if seek is not None:  # the seek's commit (its target unknown yet)
                            del self._seeks[key]
                            self._offsets[key] = offset
                            continue
                        late = self._late_commits.get(key)
                        if late is not None and offset in late:
                            late.discard(offset)
                            self._offsets[key] = offset
                            continue
                        if any(loss.covers(tp, loss.start) and last > loss.start
                               for loss in self.losses):
                            # the group had consumed records a crash's loss took back: its
                            # consumer starts again below them (OFFSET_OUT_OF_RANGE, or
                            # KIP-320's truncation detection)
                            self.exempted["offsets-monotonic"] += 1
                            self._offsets[key] = offset
                            continue
                        self._violate("offsets-monotonic", f"{group_id} {_tp_name(tp)}",
                                      f"committed offset went back from {last} to {offset}",
                                      once=f"{key}/{offset}")
                    if last is None or offset > last:
                        self._offsets[key] = offset

    # -- liveness ------------------------------------------------------------------------------
    def _check_converged(self, brokers: list[tuple[int, Broker]],
                         leaders: dict[tuple[str, int], tuple[int, Partition]]) -> None:
        if self._converged_at is not None:
            return
        self._unconverged = _not_converged(self.cluster, brokers, leaders)
        if not self._unconverged:
            self._converged_at = self.sim.now

    def _final_liveness(self) -> None:
        if self._healed_at is None:
            return
        self.checked["liveness-isr"] += 1
        if self._converged_at is None or self._converged_at > self._healed_at + self.isr_bound:
            self._violate("liveness-isr", "cluster",
                          f"not converged (a leader from a full ISR per partition, replicas "
                          f"at the leader's LEO and HW) within {self.isr_bound:g}s of the heal "
                          f"at {self._healed_at:.3f}: {self._unconverged or 'never sampled'}",
                          once="isr")
        done = self.history.completions()
        for index in self._pending_at_heal:
            self.checked["liveness-ops"] += 1
            completion = done.get(index)
            late = completion is None or completion.time > self._healed_at + self.ops_bound
            if late:
                op = self.history[index]
                self._violate("liveness-ops", op.process,
                              f"{op.f} {op.value!r} invoked at {op.time:.3f} "
                              + ("never completed" if completion is None
                                 else f"completed at {completion.time:.3f}"),
                              once=f"op/{index}")
