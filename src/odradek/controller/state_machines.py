"""The controller's partition and replica state machines (Kafka's ZkPartitionStateMachine and
ZkReplicaStateMachine, S-5.4).

The valid transitions are the tables of partition_states.py and replica_states.py; these
objects apply transitions (checked against the tables and written to ``state-change.log``) and
do the coordination-store half of them: initial leadership for new partitions, leader
elections and ISR shrinks, each a fenced optimistic update of the partition state node
(zk_client.py), with the LeaderAndIsr requests they imply added to the caller's batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..metrics.stats import ControllerStats
from ..state_change import StateChangeLogger, leadership_text
from . import leader_selectors as sel
from .channel import RequestBatch
from .context import ControllerContext, LeaderAndIsr, PartitionAndReplica, TopicPartition
from .partition_states import IllegalStateTransition, PartitionState
from .pipeline import DEFAULT_WINDOW as STATE_WRITE_WINDOW
from .pipeline import run_bounded
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
        if stored is None:
            return
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

        async def online(tp: TopicPartition) -> None:
            if ctx.is_topic_queued_up_for_deletion(tp.topic):
                return
            state = self.state(tp)
            if state is P.NewPartition:
                await self.initialize_leadership(tp, batch)
            elif state is P.OfflinePartition:
                await self.elect_leader(tp, batch, "offline")

        # the state znode writes are pipelined (KAFKA-5642), each partition's steps in order
        await run_bounded([tp for tp in candidates
                           if self.state(tp) in (P.NewPartition, P.OfflinePartition)],
                          online, STATE_WRITE_WINDOW)

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
            if strategy in ("offline", "unclean"):  # unclean: ElectLeaders UNCLEAN (S-6.1)
                unclean = strategy == "unclean" or self.unclean_leader_election_enable(tp.topic)
                result = sel.offline_partition_leader(replicas, current.isr, live, unclean)
            elif strategy == "preferred":
                result = sel.preferred_replica_leader(replicas, current.isr, live)
            else:
                result = sel.controlled_shutdown_leader(replicas, current.isr,
                                                        ctx.live_or_shutting_down_broker_ids,
                                                        shutting_down or set())
            new = sel.apply_election(current, result)
            if new is None:
                self.sc.controller(ctx.epoch, (
                    f"No leader could be elected for partition {tp} ({strategy} election): "
                    f"assigned replicas {replicas}, isr {list(current.isr)}, live brokers "
                    f"{sorted(live)}; it stays {self.state(tp)}"), logging.ERROR)
            elections.append((current, result))
            return new

        stored = await self.zk.update_leader_and_isr(tp, compute)
        if stored is None:
            return False
        current, result = elections[-1]
        self.stats.record_election((time.perf_counter() - started) * 1000, result.unclean)
        if result.unclean:
            self.sc.controller(ctx.epoch, (
                f"Unclean leader election for partition {tp}: replica {stored.leader} "
                f"outside the ISR {list(current.isr)} became leader; data may be lost"),
                logging.WARNING)
        self.transition(tp, P.OnlinePartition, stored)
        replicas = ctx.partition_replica_assignment(tp)
        batch.add_leader_and_isr([r for r in result.recipients if r in ctx.live_brokers],
                                 tp, stored, replicas)
        return True
