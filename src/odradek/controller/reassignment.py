"""Partition reassignment, OAR -> RAR (Kafka's ``onPartitionReassignment``, S-6.2).

An admin writes the targets to ``/admin/reassign_partitions`` (Kafka's JSON
``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[4,5,6]}]}``), either directly,
with ``odradek reassign-partitions --execute`` or with AlterPartitionReassignments. The controller
then runs the steps of docs/design.md S-6.2 for each partition (numbered here A1-B8):

====  ======================================================================================
A1    AR = OAR + RAR in the topic znode (with KIP-455's ``adding_replicas`` /
      ``removing_replicas``), leader epoch + 1, LeaderAndIsr to every replica of OAR + RAR
A2    RAR - OAR -> NewReplica (they start fetching from the leader)
      ... wait until RAR is in the ISR (an ISR change notification or a broker start-up
      re-checks) ...
B1    RAR - OAR -> OnlineReplica
B2    AR = RAR in memory
B3    a leader from RAR if the leader is not in RAR (ReassignedPartitionLeaderSelector), else
      leader epoch + 1; LeaderAndIsr to RAR
B4    OAR - RAR -> OfflineReplica: out of the ISR, StopReplica
B5    OAR - RAR -> ReplicaDeletionStarted (StopReplica with deletion) -> ... -> NonExistent
B6    AR = RAR in the topic znode
B7    the partition leaves ``/admin/reassign_partitions`` (the node goes with the last one)
B8    UpdateMetadata to every broker
====  ======================================================================================

Every write leaves the coordination store in a state from which a new controller resumes: the
admin node keeps listing the target until B7, and the topic znode holds OAR + RAR (and which
replicas are being added/removed) until B6. A new controller re-reads the admin node at
failover and runs the steps again: A1 is idempotent, and the original replicas come from the
topic znode (``replicas - adding_replicas``), so ``OAR - RAR`` is still deleted.

A new target for a partition already being moved replaces the old one (KIP-455): the original
replicas stay OAR, and replicas added for the old target that the new one does not need are
stopped and deleted at once. Cancelling (AlterPartitionReassignments with null replicas) is a
reassignment back to OAR.

The decisions are pure functions (unit-tested in tests/unit/controller/test_reassignment.py); the
:class:`ReassignmentManager` applies them through the state machines, the fenced writes of
zk_client.py and the request batches. The admin side (writing and listing the admin node) is
coordination/admin_zk.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..common.state_change import StateChangeLogger, leadership_text
from ..coordination import paths
from ..coordination.admin_zk import Reassignment
from . import leader_selectors as sel
from .channel import RequestBatch, RequestSender
from .context import ControllerContext, LeaderAndIsr, TopicPartition
from .events import ControllerEvent, TopicDeletion
from .partition_states import PartitionState
from .replica_states import ReplicaState
from .state_machines import PartitionStateMachine, ReplicaStateMachine
from .zk_client import DELETE_NODE, ControllerZkClient

__all__ = [
    "LeaderMove",
    "ReassignmentManager",
    "epoch_bumped_within",
    "is_reassignment_complete",
    "isr_without_removed",
    "leader_move",
    "original_replicas",
    "reassign_to",
    "stray_replicas",
    "unneeded_replicas",
    "validate_replicas",
    "validate_target",
]

log = logging.getLogger("odradek.controller.reassignment")
R = ReplicaState
DELETE_ACK_WAIT_S = 2.0  # longest a move waits for its StopReplica(delete) answers


# ---- pure decisions ----------------------------------------------------------------------------


def original_replicas(replicas: Sequence[int], adding: Sequence[int] = ()) -> tuple[int, ...]:
    """OAR from a topic znode: its replica list minus the replicas being added (KIP-455's
    ``originReplicas``). Without ``adding_replicas`` (none recorded) the replica list is OAR."""
    return tuple(r for r in replicas if r not in adding)


def reassign_to(current: Reassignment | None, assigned: Sequence[int],
                target: Sequence[int]) -> Reassignment:
    """The reassignment to run when ``target`` is requested (Kafka's ``reassignTo``).

    ``current`` is the ongoing reassignment of the partition, if any: its OAR stays OAR (a
    new target replaces the old one, a cancel is a target equal to OAR). Otherwise ``assigned``
    (the partition's AR) is OAR.
    """
    original = current.original if current is not None else tuple(assigned)
    return Reassignment(original=tuple(original), target=tuple(target))


def unneeded_replicas(previous_full: Sequence[int], new: Reassignment) -> tuple[int, ...]:
    """Replicas in the AR so far that the new reassignment's AR (OAR + RAR) drops: replicas
    added for a replaced or cancelled target. They are stopped and deleted at once."""
    full = set(new.full)
    return tuple(r for r in previous_full if r not in full)


def stray_replicas(partitions: Iterable[TopicPartition], broker: int,
                   assignment: Callable[[TopicPartition], Sequence[int]]
                   ) -> list[TopicPartition]:
    """Of the partitions whose replica on ``broker`` was removed while it was down, those it
    still must delete: not assigned to it again since (a partition gone altogether has an
    empty assignment: deleted too)."""
    return sorted(tp for tp in partitions if broker not in assignment(tp))


def is_reassignment_complete(target: Iterable[int], isr: Iterable[int]) -> bool:
    """Step 4 of S-6.2 is over once every replica of RAR is in the ISR."""
    return set(target) <= set(isr)


def validate_replicas(target: Sequence[int], known_brokers: Collection[int],
                      adding: Sequence[int] = ()) -> str | None:
    """Kafka's KafkaController.validateReplicas, checked before anything else of a requested
    target: the error message (INVALID_REPLICA_ASSIGNMENT), or None. ``adding`` are the
    replicas the reassignment would add (RAR - OAR): they must be on live brokers. The lists
    are printed as Kafka's messages print them (Scala buffers and sets)."""
    if not target:
        return "Empty replica list specified in partition reassignment."
    if len(set(target)) != len(target):
        return ("Duplicate replica ids in partition reassignment replica list: "
                f"{_scala('ArrayBuffer', target)}")
    if any(r < 0 for r in target):
        return f"Invalid broker id in replica list: {_scala('ArrayBuffer', target)}"
    if any(r not in known_brokers for r in adding):
        live = sorted(known_brokers)
        return (f"Replica assignment has brokers that are not alive. Replica list: "
                f"{_scala('ArrayBuffer', adding)}, live broker list: "
                f"{_scala('Set' if len(live) <= 4 else 'HashSet', live)}")
    return None


def _scala(kind: str, items: Iterable[int]) -> str:
    return f"{kind}({', '.join(map(str, items))})"


def validate_target(tp: TopicPartition, target: Sequence[int], assigned: Sequence[int],
                    known_brokers: Collection[int], adding: Sequence[int] = (),
                    topic_being_deleted: bool = False) -> str | None:
    """Kafka's checks of a requested reassignment; the error message, or None if it may run.

    ``assigned`` is the partition's AR ([] for an unknown partition), ``adding`` the replicas
    the reassignment would add (RAR - OAR): they must be on live brokers.
    """
    if not assigned:
        return f"Partition {tp} does not exist"
    if topic_being_deleted:
        return f"Topic {tp.topic} is queued for deletion"
    return validate_replicas(target, known_brokers, adding)


@dataclass(frozen=True, slots=True)
class LeaderMove:
    """Step B3's decision: ``elect`` a leader from RAR, or keep the leader and bump the epoch."""

    elect: bool
    leadership: LeaderAndIsr | None
    """The leadership to write (None: no replica of RAR can lead, nothing is written)."""


def leader_move(target: Sequence[int], current: LeaderAndIsr, live: Collection[int]
                ) -> LeaderMove:
    """Kafka's ``moveReassignedPartitionLeaderIfRequired``: if the leader is not in RAR or not
    alive, the ReassignedPartitionLeaderSelector picks the first live ISR member of RAR (ISR
    unchanged); otherwise the leader stays and only its epoch moves (so that every replica
    learns the new AR). Both bump the leader epoch."""
    if current.leader in target and current.leader in live:
        return LeaderMove(False, current.new_epoch())
    result = sel.reassign_partition_leader(target, current.isr, live)
    return LeaderMove(True, sel.apply_election(current, result))


def isr_without_removed(current: LeaderAndIsr, removing: Collection[int]) -> LeaderAndIsr | None:
    """Step B4: OAR - RAR leave the ISR (leader epoch + 1); None if none of them is in it.
    The ISR never empties: a last member is kept (as the replica state machine does)."""
    isr = tuple(r for r in current.isr if r not in removing)
    if isr == current.isr:
        return None
    if not isr:
        isr = current.isr[:1]
    leader = current.leader if current.leader not in removing else -1
    return current.new_leader_and_isr(leader, isr)


def epoch_bumped_within(current: LeaderAndIsr, replicas: Collection[int]) -> LeaderAndIsr:
    """Steps A1 and B3's leader epoch bump (same leader, epoch + 1) with the ISR cut to
    members of ``replicas``, the AR the LeaderAndIsr carries; kept whole if none is."""
    isr = tuple(r for r in current.isr if r in replicas)
    if not isr or isr == current.isr:
        return current.new_epoch()
    return current.new_leader_and_isr(current.leader, isr)


# ---- the controller side -----------------------------------------------------------------------


@dataclass(eq=False, repr=False)
class ReassignmentManager:
    """Runs the steps on the controller's event loop (every method is called from an event)."""

    broker_id: int
    ctx: ControllerContext
    zk: ControllerZkClient
    partitions: PartitionStateMachine
    replicas: ReplicaStateMachine
    requests: RequestSender
    sc: StateChangeLogger
    put_event: Callable[[ControllerEvent], None]
    # B5 on a broker that was down: its replica was never deleted. Removed-replica
    # partitions per broker, deleted when the broker comes back (as Kafka's topic deletion
    # retries ReplicaDeletionIneligible replicas); without this a broker killed while its
    # replica was being moved away keeps the stray log for good.
    undeleted: dict[int, set[TopicPartition]] = field(init=False, default_factory=dict)
    # The controller epoch of the last read of the admin node: the first read of a term
    # resumes what earlier controllers accepted (see on_admin_node_change).
    _read_in_epoch: int | None = field(init=False, default=None)

    # -- triggers ---------------------------------------------------------------------------------
    async def on_admin_node_change(self) -> None:
        """``/admin/reassign_partitions`` changed, or this controller just took over and resumes
        what it lists (S-5.6).

        Resumed targets (the first read of a controller term) are not refused for new replicas
        on brokers that are down: an earlier controller or the AlterPartitionReassignments API
        accepted them, and the broker may just be restarting (a killed controller that was
        also a target replica comes back after its successor took over). As Kafka's controller,
        the move then waits for the broker. Without this the successor silently dropped such a
        partition from the admin node and the move never happened."""
        resuming = self._read_in_epoch != self.ctx.epoch
        self._read_in_epoch = self.ctx.epoch
        found = await self.zk.store.get_or_none(paths.REASSIGN_PARTITIONS)
        if found is None:
            return
        try:
            requested = paths.decode_reassignment(found[0])
        except ValueError as exc:
            log.error("[Controller id=%d] Ignoring %s: %s", self.broker_id,
                      paths.REASSIGN_PARTITIONS, exc)
            return
        invalid: list[tuple[str, int]] = []
        for (topic, p), target in sorted(requested.items()):
            tp = TopicPartition(topic, p)
            current = self.ctx.partitions_being_reassigned.get(tp)
            if current is not None and current.target == tuple(target):
                continue  # already running; ISR changes and broker start-ups drive it on
            if not await self._trigger(tp, tuple(target), resuming):
                invalid.append((topic, p))
        if invalid:
            await self._remove_from_admin_node(invalid)

    async def on_isr_change(self, partitions: Iterable[TopicPartition]) -> None:
        """The ISR of some partitions changed: those being moved may have their RAR in sync."""
        for tp in sorted(partitions):
            r = self.ctx.partitions_being_reassigned.get(tp)
            leadership = self.ctx.leader_and_isr(tp)
            if r is not None and leadership is not None and \
                    is_reassignment_complete(r.target, leadership.isr):
                await self._complete(tp, r)

    async def on_broker_startup(self, brokers: Iterable[int]) -> None:
        """onBrokerStartup step 4 (S-4.3): reassignments with replicas on the new brokers
        go on (their new replicas get LeaderAndIsr again and start fetching)."""
        new = set(brokers)
        self._delete_strays(new)
        for tp, r in sorted(self.ctx.partitions_being_reassigned.items()):
            if new & set(r.full):
                await self._trigger(tp, r.target)

    def _delete_strays(self, brokers: Iterable[int]) -> None:
        """StopReplica with deletion to brokers back up for the replicas B5 could not delete
        while they were down (unless the broker is a replica of the partition again)."""
        ctx = self.ctx
        batch = self.requests.new_batch()
        for b in sorted(brokers):
            stray = stray_replicas(self.undeleted.pop(b, ()), b,
                                   ctx.partition_replica_assignment)
            for tp in stray:
                batch.add_stop_replica([b], tp, delete=True, leader_epoch=ctx.leader_epoch(tp))
            if stray:
                self.sc.controller(ctx.epoch, (
                    f"Deleting the replicas of broker {b} removed by reassignments while it was "
                    f"down: {', '.join(str(tp) for tp in stray)}"))
        self._send(batch)

    # -- the steps --------------------------------------------------------------------------------
    async def _trigger(self, tp: TopicPartition, target: tuple[int, ...],
                       resuming: bool = False) -> bool:
        """onPartitionReassignment for one partition; False if the request is refused.
        ``resuming``: a target accepted before this controller's term (no liveness check)."""
        ctx = self.ctx
        assigned = ctx.partition_replica_assignment(tp)
        current = ctx.partitions_being_reassigned.get(tp)
        if current is None and assigned:
            # A reassignment a previous controller started: OAR is in the topic znode.
            current = await self._recorded_reassignment(tp, assigned)
        new = reassign_to(current, assigned, target)
        previous_full = current.full if current is not None else tuple(assigned)
        # Only replicas new to the partition must be alive: a move whose new replica's broker
        # died meanwhile is resumed (and waits for it), not refused.
        fresh = [] if resuming else [r for r in new.adding if r not in previous_full]
        error = validate_target(tp, target, assigned, ctx.live_broker_ids, fresh,
                                ctx.is_topic_queued_up_for_deletion(tp.topic))
        if error is not None:
            self.sc.controller(ctx.epoch, f"Failed completing reassignment of partition {tp} to "
                                       f"{list(target)}: {error}", logging.ERROR)
            return False
        log.info("[Controller id=%d] Handling reassignment of partition %s: OAR %s -> RAR %s "
                 "(AR during the move %s, adding %s, removing %s)", self.broker_id, tp,
                 list(new.original), list(new.target), list(new.full), list(new.adding),
                 list(new.removing))
        # A1: AR = OAR + RAR, in the store first, then in memory.
        await self._write_assignment(tp, new.full, new.adding, new.removing)
        ctx.update_partition_replica_assignment(tp, new.full)
        ctx.partitions_being_reassigned[tp] = new
        unneeded = unneeded_replicas(previous_full, new)
        if unneeded:
            await self._stop_removed_replicas(tp, unneeded)
        leadership = ctx.leader_and_isr(tp)
        if leadership is not None and is_reassignment_complete(new.target, leadership.isr):
            await self._complete(tp, new)
            return True
        # A1: leader epoch + 1 so that the leader takes the new replicas as followers.
        await self._bump_leader_epoch(tp, list(new.full))
        # A2: RAR - OAR -> NewReplica.
        fresh = [r for r in new.adding
                 if self.replicas.state(tp, r) is R.NonExistentReplica]
        self.replicas.transition(tp, fresh, R.NewReplica)
        return True

    async def _complete(self, tp: TopicPartition, r: Reassignment) -> None:
        """Steps B1-B8, once RAR is in the ISR."""
        ctx = self.ctx
        leadership = ctx.leader_and_isr(tp)
        if leadership is None:
            return
        # B1
        self.replicas.transition(tp, [x for x in r.adding if x in ctx.live_brokers],
                                 R.OnlineReplica)
        # B2
        ctx.update_partition_replica_assignment(tp, r.target)
        # B3
        if not await self._move_leader_if_required(tp, r):
            ctx.update_partition_replica_assignment(tp, r.full)
            return
        # B4, B5
        if r.removing:
            await self._stop_removed_replicas(tp, r.removing)
        # B6
        await self._write_assignment(tp, r.target, (), ())
        ctx.partitions_being_reassigned.pop(tp, None)
        # B7
        await self._remove_from_admin_node([(tp.topic, tp.partition)])
        # B8
        batch = self.requests.new_batch()
        batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, [tp])
        self._send(batch)
        current = ctx.leader_and_isr(tp)
        self.sc.controller(ctx.epoch, (
            f"Completed reassignment of partition {tp}: AR {list(r.target)}"
            + ("" if current is None else
               f", {leadership_text(current.leader, current.leader_epoch, current.isr)}")))
        log.info("[Controller id=%d] Reassignment of partition %s to %s completed",
                 self.broker_id, tp, list(r.target))
        if ctx.is_topic_queued_up_for_deletion(tp.topic) and not any(
                p.topic == tp.topic for p in ctx.partitions_being_reassigned):
            self.put_event(TopicDeletion())  # the deletion this move held back may go on

    async def _move_leader_if_required(self, tp: TopicPartition, r: Reassignment) -> bool:
        ctx = self.ctx
        moves: list[LeaderMove] = []

        def compute(current: LeaderAndIsr) -> LeaderAndIsr | None:
            move = leader_move(r.target, current, ctx.live_broker_ids)
            if move.leadership is None:
                self.sc.controller(ctx.epoch, (
                    f"No replica of {list(r.target)} in the ISR {list(current.isr)} of "
                    f"partition {tp} is alive to lead; the reassignment waits"), logging.ERROR)
            moves.append(move)
            return move.leadership

        stored = await self.zk.update_leader_and_isr(tp, compute)
        if stored is None:
            return False
        if moves[-1].elect:
            self.partitions.transition(tp, PartitionState.OnlinePartition, stored)
        batch = self.requests.new_batch()
        batch.add_leader_and_isr([x for x in r.target if x in ctx.live_brokers], tp, stored,
                                 list(r.target))
        self._send(batch)
        return True

    async def _bump_leader_epoch(self, tp: TopicPartition, replicas: list[int]) -> None:
        """Kafka's updateLeaderEpochAndSendRequest: same leader, epoch + 1, sent to every live
        replica of ``replicas`` (with ``replicas`` as AR); the ISR keeps only members of
        ``replicas`` (KRaft's PartitionChangeBuilder does the same). A replica a changed
        target dropped was stopped before this bump, but its leader, still counting it as a
        replica, may have taken it into the ISR since; left there, it could end as the
        ISR's last member, a replica of nothing, and no leader could be elected again."""
        ctx = self.ctx

        def compute(current: LeaderAndIsr) -> LeaderAndIsr | None:
            if current.leader < 0:
                self.sc.controller(ctx.epoch, (
                    f"Partition {tp} has no leader; the replicas of its reassignment start "
                    f"once it has one"), logging.WARNING)
                return None
            return epoch_bumped_within(current, replicas)

        if ctx.leader_and_isr(tp) is None:
            self.sc.controller(ctx.epoch, (
                f"Partition {tp} has no leader; the replicas of its reassignment start "
                f"once it has one"), logging.WARNING)
            return
        stored = await self.zk.update_leader_and_isr(tp, compute)
        if stored is None:
            return
        self.sc.controller(ctx.epoch, (
            f"Updated leader epoch for partition {tp} being reassigned to {replicas}: "
            f"{leadership_text(stored.leader, stored.leader_epoch, stored.isr)}"))
        batch = self.requests.new_batch()
        batch.add_leader_and_isr([x for x in replicas if x in ctx.live_brokers], tp, stored,
                                 replicas)
        self._send(batch)

    async def _stop_removed_replicas(self, tp: TopicPartition, removing: Sequence[int]) -> None:
        """B4: OfflineReplica (out of the ISR, StopReplica); B5: ReplicaDeletionStarted
        (StopReplica with deletion), ReplicaDeletionSuccessful, NonExistentReplica."""
        ctx = self.ctx
        live_removing = [x for x in removing if x in ctx.live_or_shutting_down_broker_ids]
        for x in removing:
            if x not in live_removing:
                self.undeleted.setdefault(x, set()).add(tp)
        stop = self.requests.new_batch()
        stop.add_stop_replica(live_removing, tp, delete=False)
        self.replicas.transition(tp, removing, R.OfflineReplica)
        stored = await self.zk.update_leader_and_isr(
            tp, lambda current: isr_without_removed(current, removing))
        if stored is not None:
            self.sc.controller(ctx.epoch, (
                f"Removed replicas {list(removing)} from the ISR of partition {tp}: "
                f"{leadership_text(stored.leader, stored.leader_epoch, stored.isr)}"))
            remaining = [x for x in ctx.partition_replica_assignment(tp) if x not in removing]
            stop.add_leader_and_isr([x for x in remaining if x in ctx.live_brokers], tp, stored,
                                    remaining)
        self._send(stop)
        delete = self.requests.new_batch()
        delete.add_stop_replica(live_removing, tp, delete=True,
                                leader_epoch=ctx.leader_epoch(tp))
        self.replicas.transition(tp, removing, R.ReplicaDeletionStarted)
        sent = self._send(delete)
        if sent:
            # The assignment in the store moves on (B6) once the deletions are answered, so a
            # controller killed before the StopReplica went out leaves the removing replicas in
            # the znode and its successor deletes them. Bounded: a paused broker must not stall
            # the controller (its request stays queued and is delivered when it wakes).
            await asyncio.wait(sent, timeout=DELETE_ACK_WAIT_S)
        self.replicas.transition(tp, removing, R.ReplicaDeletionSuccessful)
        self.replicas.transition(tp, removing, R.NonExistentReplica)

    def _send(self, batch: RequestBatch) -> list[asyncio.Future[Any]]:
        return self.requests.send(batch)

    # -- store ------------------------------------------------------------------------------------
    async def _recorded_reassignment(self, tp: TopicPartition, assigned: Sequence[int]
                                     ) -> Reassignment | None:
        """The reassignment a topic znode records (KIP-455 fields), if any."""
        found = await self.zk.store.get_or_none(paths.topic_path(tp.topic))
        if found is None:
            return None
        assignment = paths.decode_topic_assignment(found[0])
        adding = assignment.adding_replicas.get(tp.partition, ())
        removing = assignment.removing_replicas.get(tp.partition, ())
        if not adding and not removing:
            return None
        original = original_replicas(assigned, adding)
        target = tuple(x for x in assigned if x not in removing)
        return Reassignment(original=original, target=target)

    async def _write_assignment(self, tp: TopicPartition, replicas: Sequence[int],
                                adding: Sequence[int], removing: Sequence[int]) -> None:
        """One partition's AR (and adding/removing replicas) in ``/brokers/topics/<topic>``,
        fenced by the controller epoch."""

        def compute(data: bytes) -> bytes | None:
            old = paths.decode_topic_assignment(data)
            partitions = dict(old.partitions)
            partitions[tp.partition] = tuple(replicas)
            adds = {p: v for p, v in old.adding_replicas.items() if p != tp.partition}
            rems = {p: v for p, v in old.removing_replicas.items() if p != tp.partition}
            if adding:
                adds[tp.partition] = tuple(adding)
            if removing:
                rems[tp.partition] = tuple(removing)
            new = paths.encode_topic_assignment(paths.TopicAssignment(
                partitions, adds, rems, old.topic_id))
            return None if new == data else new

        await self.zk.update_node(paths.topic_path(tp.topic), compute)

    async def _remove_from_admin_node(self, done: Iterable[tuple[str, int]]) -> None:
        """B7: drop partitions from ``/admin/reassign_partitions``; the last one deletes it."""
        drop = set(done)

        def compute(data: bytes) -> bytes | None:
            try:
                current = paths.decode_reassignment(data)
            except ValueError:
                current = {}
            left = {k: v for k, v in current.items() if k not in drop}
            if left == current and current:
                return None
            return paths.encode_reassignment(left) if left else DELETE_NODE

        await self.zk.update_node(paths.REASSIGN_PARTITIONS, compute)
