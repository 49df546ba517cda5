"""The controller's partition and replica state machines (Kafka's ZkPartitionStateMachine and
ZkReplicaStateMachine, S-5.4).

The valid transitions are the tables of partition_states.py and replica_states.py; these
objects apply transitions (checked against the tables and written to ``state-change.log``) and
do the coordination-store half of them: initial leadership for new partitions, leader
elections and ISR shrinks, each a fenced optimistic update of the partition state node
(zk_client.py), with the LeaderAndIsr requests they imply added to the caller's batch.
An event's many elections or ISR shrinks (a broker failure, a controlled shutdown) are decided
together from the context and written in transactions of many, as Kafka's
``doElectLeaderForPartitions`` decides a batch and writes it with one ``updateLeaderAndIsr``;
only the partitions whose node moved meanwhile take the one-by-one optimistic update.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..common.state_change import StateChangeLogger, leadership_text
from ..metrics.stats import ControllerStats
from . import leader_selectors as sel
from .channel import RequestBatch
from .context import ControllerContext, LeaderAndIsr, PartitionAndReplica, TopicPartition
from .partition_states import IllegalStateTransition, PartitionState
from .pipeline import DEFAULT_WINDOW as STATE_WRITE_WINDOW
from .pipeline import run_bounded, yielding
from .replica_states import ReplicaState
from .zk_client import ControllerZkClient

__all__ = ["ElectionStrategy", "PartitionStateMachine", "ReplicaStateMachine"]

P = PartitionState
R = ReplicaState

ElectionStrategy = str
"""``"offline"``, ``"unclean"`` (ElectLeaders UNCLEAN), ``"preferred"`` or
``"controlled_shutdown"`` (Kafka's PartitionLeaderElectionStrategy)."""


class ReplicaStateMachine:
    """Replica states (PartitionAndReplica -> ReplicaState) and their store-side effects."""

    def __init__(self, context: ControllerContext, zk: ControllerZkClient,
                 state_change: StateChangeLogger) -> None:
        self.ctx = context
        self.zk = zk
        self.sc = state_change

    def initialize(self, partitions: Iterable[TopicPartition]) -> None:
        """Kafka's initializeReplicaState at failover: states are read off the live brokers
        and the deletion queue, not transitioned."""
        ctx = self.ctx
        for tp in partitions:
            for r in ctx.partition_replica_assignment(tp):
                ctx.replica_states.put(PartitionAndReplica(tp, r), R.OnlineReplica
                                       if r in ctx.live_brokers else R.ReplicaDeletionIneligible
                                       if ctx.is_topic_queued_up_for_deletion(tp.topic)
                                       else R.OfflineReplica)

    def state(self, tp: TopicPartition, replica: int) -> ReplicaState:
        return self.ctx.replica_states.state(PartitionAndReplica(tp, replica))

    def transition(self, tp: TopicPartition, replicas: Iterable[int],
                   target: ReplicaState) -> None:
        """Move replicas of ``tp`` to ``target``; a transition the table refuses is logged."""
        for r in replicas:
            key = PartitionAndReplica(tp, r)
            try:
                change = self.ctx.replica_states.transition(key, target)
            except IllegalStateTransition as exc:
                self.sc.controller(self.ctx.epoch, f"Invalid state change: {exc}", logging.ERROR)
                continue
            self.sc.replica_change(self.ctx.epoch, r, tp, change.from_state, change.to_state)

    async def remove_replica_from_isr(self, tp: TopicPartition, replica: int,
                                      batch: RequestBatch) -> None:
        """OfflineReplica: the replica leaves the ISR; if it led, the leader becomes -1."""
        def compute(current: LeaderAndIsr) -> LeaderAndIsr | None:
            if replica not in current.isr and current.leader != replica:
                return None
            return sel.remove_replica_from_isr(current, replica)

        stored = await self.zk.update_leader_and_isr(tp, compute)
        if stored is not None:
            self._removed(tp, replica, stored, batch)

    async def remove_replicas_from_isr(self, partitions: Sequence[TopicPartition],
                                       replica: int, batch: RequestBatch) -> None:
        """:meth:`remove_replica_from_isr` of many partitions at once: each decided from the
        context's leadership, the state nodes written in fenced, version-checked
        transactions of many (:meth:`ControllerZkClient.write_leader_and_isrs`); a partition
        whose transaction failed on a version goes through :meth:`remove_replica_from_isr`,
        which reads it again and decides again."""
        ctx = self.ctx
        decided: dict[TopicPartition, LeaderAndIsr] = {}
        unsure: list[TopicPartition] = []
        for tp in partitions:
            current = ctx.leader_and_isr(tp)
            new = None if current is None else sel.remove_replica_from_isr(current, replica)
            if new is not None:
                decided[tp] = new
            elif current is not None:
                unsure.append(tp)
        # Kafka decides from the state nodes it reads (removeReplicasFromIsr). The context
        # lags a leader's own ISR expansion until its isr_change_notification is processed
        # (a follower that fetched again after its controlled shutdown's ISR shrink, say), so
        # a partition the context says the replica has left is read again before it is
        # skipped; the writes of the others are version-checked.
        read = await run_bounded(unsure, self.zk.refresh_leadership, STATE_WRITE_WINDOW)
        for tp, current in zip(unsure, read, strict=True):
            new = None if current is None else sel.remove_replica_from_isr(current, replica)
            if new is not None:
                decided[tp] = new
        writes = [(tp, decided[tp]) for tp in partitions if tp in decided]
        retry: list[TopicPartition] = []
        stored_values = await self.zk.write_leader_and_isrs(writes)
        async for (tp, _new), stored in yielding(zip(writes, stored_values, strict=True)):
            if stored is None:
                retry.append(tp)
            else:
                self._removed(tp, replica, stored, batch)
        await run_bounded(retry, lambda tp: self.remove_replica_from_isr(tp, replica, batch),
                          STATE_WRITE_WINDOW)

    def _removed(self, tp: TopicPartition, replica: int, stored: LeaderAndIsr,
                 batch: RequestBatch) -> None:
        """After an ISR shrink's state node was written: the state-change line, requests."""
        self.sc.controller(self.ctx.epoch, (
            f"Removed replica {replica} from the ISR of partition {tp}: "
            f"{leadership_text(stored.leader, stored.leader_epoch, stored.isr)}"))
        replicas = self.ctx.partition_replica_assignment(tp)
        batch.add_leader_and_isr([r for r in replicas if r in self.ctx.live_broker_ids
                                  and r != replica], tp, stored, replicas)


@dataclass(eq=False, repr=False)
class PartitionStateMachine:
    """Partition states (TopicPartition -> PartitionState) and their store-side effects."""

    ctx: ControllerContext
    zk: ControllerZkClient
    replicas: ReplicaStateMachine
    sc: StateChangeLogger
    unclean_leader_election_enable: Callable[[str], bool]
    # LeaderElectionRateAndTimeMs, UncleanLeaderElectionsPerSec (metrics/)
    stats: ControllerStats = field(default_factory=ControllerStats)

    def initialize(self, partitions: Iterable[TopicPartition]) -> None:
        """Kafka's initializePartitionState at failover: states are read off the stored
        leadership and the live brokers, not transitioned."""
        ctx = self.ctx
        for tp in partitions:
            leadership = ctx.leader_and_isr(tp)
            if leadership is None:
                state = P.NewPartition
            elif leadership.leader >= 0 and leadership.leader in ctx.live_brokers:
                state = P.OnlinePartition
            else:
                state = P.OfflinePartition
            ctx.partition_states.put(tp, state)

    def state(self, tp: TopicPartition) -> PartitionState:
        return self.ctx.partition_states.state(tp)

    def transition(self, tp: TopicPartition, target: PartitionState,
                   leadership: LeaderAndIsr | None = None) -> bool:
        """One partition transition, checked against the table and logged."""
        try:
            change = self.ctx.partition_states.transition(tp, target)
        except IllegalStateTransition as exc:
            self.sc.controller(self.ctx.epoch, f"Invalid state change: {exc}", logging.ERROR)
            return False
        detail = "" if leadership is None else leadership_text(
            leadership.leader, leadership.leader_epoch, leadership.isr)
        self.sc.partition_change(self.ctx.epoch, tp, change.from_state, change.to_state, detail)
        return True

    async def trigger_online_partitions(self, batch: RequestBatch,
                                        only: Iterable[TopicPartition] | None = None) -> None:
        """New and offline partitions go online: initial leaders for new ones, the offline
        partition leader election for the others (S-4.1, S-5.7); requests go into ``batch``."""
        ctx = self.ctx
        candidates = sorted(ctx.all_partitions() if only is None else only)

        movable = [tp for tp in candidates if not ctx.is_topic_queued_up_for_deletion(tp.topic)]
        # Kafka's handleStateChanges order: new partitions' initial leaders, then the
        # elections. The state znode writes are pipelined (KAFKA-5642).
        await run_bounded([tp for tp in movable if self.state(tp) is P.NewPartition],
                          lambda tp: self.initialize_leadership(tp, batch), STATE_WRITE_WINDOW)
        await self.elect_leaders([tp for tp in movable if self.state(tp) is P.OfflinePartition],
                                 batch, "offline")

    async def initialize_leadership(self, tp: TopicPartition, batch: RequestBatch) -> None:
        """NewPartition -> OnlinePartition: create the state node with the first live replica
        as leader."""
        replicas = self.ctx.partition_replica_assignment(tp)
        result = sel.new_partition_leader(replicas, self.ctx.live_broker_ids)
        if result.leader is None:
            self.sc.controller(self.ctx.epoch, (
                f"Encountered error during state change of partition {tp} from NewPartition to "
                f"OnlinePartition: no live replica among {replicas}"), logging.ERROR)
            return
        leadership = LeaderAndIsr.initial(result.leader, result.isr, self.ctx.epoch)
        stored = await self.zk.write_leader_and_isr(tp, leadership, create=True)
        if stored is None:  # someone created it: read what is there and elect from it
            await self.zk.refresh_leadership(tp)
            self.transition(tp, P.OfflinePartition)
            await self.elect_leader(tp, batch, "offline")
            return
        self.transition(tp, P.OnlinePartition, stored)
        self.replicas.transition(tp, [r for r in replicas if r in self.ctx.live_brokers],
                                 R.OnlineReplica)
        batch.add_leader_and_isr(result.recipients or result.isr, tp, stored, replicas,
                                 is_new=True)

    async def elect_leaders(self, partitions: Sequence[TopicPartition], batch: RequestBatch,
                            strategy: ElectionStrategy,
                            shutting_down: set[int] | None = None) -> set[TopicPartition]:
        """The elections of many partitions (one controller event's) at once: each decided
        from the context's leadership by the pure selectors, the state nodes written in
        fenced, version-checked transactions of many (:meth:`ControllerZkClient.
        write_leader_and_isrs`), then the transitions, state-change lines and LeaderAndIsr
        requests, as :meth:`elect_leader` does for one. A partition whose transaction failed
        on a version (its node moved, or a neighbour's did) goes through :meth:`elect_leader`,
        which reads it again and decides again. Returns the partitions given a leader."""
        ctx = self.ctx
        started = time.perf_counter()
        shutting = shutting_down or set()
        live_ids = ctx.live_broker_ids
        live_or_shutting_down = ctx.live_or_shutting_down_broker_ids
        any_offline_dir = any(ctx.replicas_on_offline_dirs.values())
        unclean_of: dict[str, bool] = {}
        decided: list[tuple[TopicPartition, LeaderAndIsr, sel.ElectionResult]] = []
        writes: list[tuple[TopicPartition, LeaderAndIsr]] = []
        retry: list[TopicPartition] = []
        for tp in partitions:
            current = ctx.leader_and_isr(tp)
            if current is None:
                retry.append(tp)  # elect_leader finds nothing to elect from, as before
                continue
            replicas = ctx.replicas_of(tp)
            live = ({r for r in live_ids if ctx.is_replica_online(r, tp)} if any_offline_dir
                    else live_ids)
            if strategy == "offline" and tp.topic not in unclean_of:
                unclean_of[tp.topic] = self.unclean_leader_election_enable(tp.topic)
            unclean = unclean_of.get(tp.topic, False)
            result = sel.decide_election(strategy, replicas, current.isr, live, unclean,
                                         live_or_shutting_down, shutting)
            new = sel.apply_election(current, result)
            if new is None:
                self._log_no_leader(tp, strategy, replicas, current, live)
                continue
            decided.append((tp, current, result))
            writes.append((tp, new))
        elected: set[TopicPartition] = set()
        stored_values = await self.zk.write_leader_and_isrs(writes)
        for (tp, current, result), stored in zip(decided, stored_values, strict=True):
            if stored is None:
                retry.append(tp)
            else:
                self._elected(tp, current, result, stored, batch, started)
                elected.add(tp)

        async def one(tp: TopicPartition) -> None:
            if await self.elect_leader(tp, batch, strategy, shutting_down):
                elected.add(tp)

        await run_bounded(retry, one, STATE_WRITE_WINDOW)
        return elected

    async def elect_leader(self, tp: TopicPartition, batch: RequestBatch,
                           strategy: ElectionStrategy,
                           shutting_down: set[int] | None = None) -> bool:
        """One leader election, a fenced optimistic update of the state node (re-read and
        decided again when the node moved, S-4.2). Returns True if a leader was written."""
        ctx = self.ctx
        started = time.perf_counter()
        elections: list[tuple[LeaderAndIsr, sel.ElectionResult]] = []

        def compute(current: LeaderAndIsr) -> LeaderAndIsr | None:
            replicas = ctx.partition_replica_assignment(tp)
            # live brokers whose replica of tp is not in an offline log dir (KIP-112)
            live = {r for r in ctx.live_broker_ids if ctx.is_replica_online(r, tp)}
            unclean = strategy == "offline" and self.unclean_leader_election_enable(tp.topic)
            result = sel.decide_election(strategy, replicas, current.isr, live, unclean,
                                         ctx.live_or_shutting_down_broker_ids,
                                         shutting_down or set())
            new = sel.apply_election(current, result)
            if new is None:
                self._log_no_leader(tp, strategy, replicas, current, live)
            elections.append((current, result))
            return new

        stored = await self.zk.update_leader_and_isr(tp, compute)
        if stored is None:
            return False
        current, result = elections[-1]
        self._elected(tp, current, result, stored, batch, started)
        return True

    def _log_no_leader(self, tp: TopicPartition, strategy: ElectionStrategy,
                       replicas: Sequence[int], current: LeaderAndIsr,
                       live: Iterable[int]) -> None:
        self.sc.controller(self.ctx.epoch, (
            f"No leader could be elected for partition {tp} ({strategy} election): "
            f"assigned replicas {replicas}, isr {list(current.isr)}, live brokers "
            f"{sorted(live)}; it stays {self.state(tp)}"), logging.ERROR)

    def _elected(self, tp: TopicPartition, current: LeaderAndIsr, result: sel.ElectionResult,
                 stored: LeaderAndIsr, batch: RequestBatch, started: float) -> None:
        """After an election's state node was written: metrics, transition, requests."""
        ctx = self.ctx
        self.stats.record_election((time.perf_counter() - started) * 1000, result.unclean)
        if result.unclean:
            self.sc.controller(ctx.epoch, (
                f"Unclean leader election for partition {tp}: replica {stored.leader} "
                f"outside the ISR {list(current.isr)} became leader; data may be lost"),
                logging.WARNING)
        self.transition(tp, P.OnlinePartition, stored)
        replicas = ctx.replicas_of(tp)
        batch.add_leader_and_isr([r for r in result.recipients if r in ctx.live_brokers],
                                 tp, stored, replicas)
