"""Preferred replica election, ElectLeaders and the auto leader rebalance (S-6.1).

The preferred replica of a partition is the head of its assignment (AR). After brokers fail and
return, leadership drifts away from the preferred replicas; a preferred replica election moves it
back, but only where the preferred replica is alive and in the ISR (never outside the ISR, so no
data can be lost). Three triggers, named as in Kafka's ``ElectionTrigger``:

* ``ZkTriggered``: the ``/admin/preferred_replica_election`` node (the older tool's way), read by
  the active controller on change and at failover; the controller deletes it when done.
* ``AdminClientTriggered``: the ElectLeaders API (key 43), PREFERRED or UNCLEAN.
* ``AutoTriggered``: ``auto.leader.rebalance.enable`` checks, every
  ``leader.imbalance.check.interval.seconds``, each broker's imbalance ratio (partitions whose
  preferred replica it is but led by another / partitions preferred on it) against
  ``leader.imbalance.per.broker.percentage``.

The first half of this module is pure decisions (unit tested without sockets); the second half,
:class:`ReplicaElectionManager`, is the controller's I/O for these events (it elects through
the partition state machine, KafkaController.scala's ``processReplicaLeaderElection`` /
``onReplicaElection`` / ``checkAndTriggerAutoLeaderRebalance``). The tools' JSON format is
parsed by ``coordination.paths.parse_election_json``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, IntEnum

from ..common.state_change import StateChangeLogger
from ..coordination import paths
from ..coordination.store import CoordinationError, DeleteOp
from . import leader_selectors as sel
from .channel import RequestSender
from .context import NO_LEADER, ControllerContext, LeaderAndIsr, TopicPartition
from .events import (
    AutoPreferredReplicaLeaderElection,
    ControllerEvent,
    ControllerMovedError,
    PreferredReplicaLeaderElection,
)
from .state_machines import PartitionStateMachine
from .zk_client import ControllerZkClient

__all__ = [
    "ElectionPlan",
    "ElectionTrigger",
    "ElectionType",
    "ReplicaElectionManager",
    "auto_rebalance_candidates",
    "imbalance_ratios",
    "plan_election",
]

log = logging.getLogger("odradek.controller")

# Kafka's error codes (Errors.java) used in election results.
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
REQUEST_TIMED_OUT = 7
INVALID_TOPIC_EXCEPTION = 17
NOT_CONTROLLER = 41
REASSIGNMENT_IN_PROGRESS = 60
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84
# Kafka answers ELECTION_NOT_NEEDED with its error's own message (ApiError(Errors))
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


class ElectionType(IntEnum):
    """ElectLeadersRequest's ``ElectionType``: 0 = PREFERRED, 1 = UNCLEAN."""

    PREFERRED = 0
    UNCLEAN = 1


class ElectionTrigger(Enum):
    """Who asked (Kafka's ``ElectionTrigger``)."""

    ZK = "ZkTriggered"
    ADMIN = "AdminClientTriggered"
    AUTO = "AutoTriggered"


def strategy_name(election_type: ElectionType) -> str:
    """Kafka's strategy name, as in its StateChangeFailedException message."""
    return ("PreferredReplicaPartitionLeaderElectionStrategy"
            if election_type is ElectionType.PREFERRED
            else "OfflinePartitionLeaderElectionStrategy(true)")


def failed_error(election_type: ElectionType) -> int:
    return (PREFERRED_LEADER_NOT_AVAILABLE if election_type is ElectionType.PREFERRED
            else ELIGIBLE_LEADERS_NOT_AVAILABLE)


@dataclass(frozen=True)
class ElectionPlan:
    """What to do for an election request: partitions to elect, and the others' results
    ``(error code, message)``."""

    electable: tuple[TopicPartition, ...]
    results: dict[TopicPartition, tuple[int, str | None]] = field(default_factory=dict)


def plan_election(requested: Iterable[TopicPartition], election_type: ElectionType,
                  trigger: ElectionTrigger,
                  assignments: Mapping[TopicPartition, Sequence[int]],
                  leadership: Mapping[TopicPartition, LeaderAndIsr],
                  live: Collection[int],
                  topics_being_deleted: Collection[str] = (),
                  partitions_being_reassigned: Collection[TopicPartition] = ()) -> ElectionPlan:
    """Sort requested partitions as Kafka's ``processReplicaLeaderElection`` does.

    Unknown partitions: UNKNOWN_TOPIC_OR_PARTITION; topics queued for deletion:
    INVALID_TOPIC_EXCEPTION; partitions being reassigned are skipped for ZK/auto triggers
    (REASSIGNMENT_IN_PROGRESS, only logged). PREFERRED: already led by the preferred replica:
    ELECTION_NOT_NEEDED; preferred replica dead or outside the ISR:
    PREFERRED_LEADER_NOT_AVAILABLE. UNCLEAN (only partitions without a live leader): leader
    alive: ELECTION_NOT_NEEDED; no live replica at all: ELIGIBLE_LEADERS_NOT_AVAILABLE.
    """
    electable: list[TopicPartition] = []
    results: dict[TopicPartition, tuple[int, str | None]] = {}
    for tp in sorted(set(requested)):
        replicas = assignments.get(tp)
        if not replicas:
            results[tp] = (UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            continue
        if tp.topic in topics_being_deleted:
            results[tp] = (INVALID_TOPIC_EXCEPTION, "The topic is being deleted")
            continue
        if tp in partitions_being_reassigned and trigger is not ElectionTrigger.ADMIN:
            results[tp] = (REASSIGNMENT_IN_PROGRESS, "The partition is being reassigned")
            continue
        current = leadership.get(tp)
        fail = (failed_error(election_type), f"Failed to elect leader for partition {tp} under "
                f"strategy {strategy_name(election_type)}")
        if election_type is ElectionType.PREFERRED:
            if current is not None and current.leader == replicas[0]:
                results[tp] = (ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE)
            elif current is None or not sel.preferred_replica_leader(
                    replicas, current.isr, live).elected:
                results[tp] = fail
            else:
                electable.append(tp)
        else:
            if current is not None and current.leader != NO_LEADER and current.leader in live:
                results[tp] = (ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE)
            elif current is None or not sel.offline_partition_leader(
                    replicas, current.isr, set(live), True).elected:
                results[tp] = fail
            else:
                electable.append(tp)
    return ElectionPlan(tuple(electable), results)


def imbalance_ratios(assignments: Mapping[TopicPartition, Sequence[int]],
                     leaders: Mapping[TopicPartition, int]
                     ) -> dict[int, tuple[float, set[TopicPartition]]]:
    """Per preferred broker: (imbalance ratio, partitions preferred on it but led elsewhere).

    Kafka's ``checkAndTriggerAutoLeaderRebalance``: the ratio's denominator counts every
    partition whose preferred replica the broker is; the numerator those with a known leader
    other than it.
    """
    by_broker: dict[int, list[TopicPartition]] = {}
    for tp, replicas in assignments.items():
        if replicas:
            by_broker.setdefault(replicas[0], []).append(tp)
    out: dict[int, tuple[float, set[TopicPartition]]] = {}
    for broker, tps in by_broker.items():
        off = {tp for tp in tps if tp in leaders and leaders[tp] != broker}
        out[broker] = (len(off) / len(tps), off)
    return out


def auto_rebalance_candidates(assignments: Mapping[TopicPartition, Sequence[int]],
                              leadership: Mapping[TopicPartition, LeaderAndIsr],
                              live: Collection[int], percentage: int,
                              topics_being_deleted: Collection[str] = (),
                              partitions_being_reassigned: Collection[TopicPartition] = ()
                              ) -> set[TopicPartition]:
    """Partitions the auto rebalance moves back to their preferred replica.

    Only brokers whose ratio is strictly above ``percentage``/100; none at all while any
    partition is being reassigned; only where the preferred replica can lead (alive, in ISR).
    """
    if partitions_being_reassigned:
        return set()
    kept = {tp: r for tp, r in assignments.items() if tp.topic not in topics_being_deleted}
    leaders = {tp: la.leader for tp, la in leadership.items() if tp in kept}
    out: set[TopicPartition] = set()
    for _broker, (ratio, off) in imbalance_ratios(kept, leaders).items():
        if ratio > percentage / 100:
            out |= {tp for tp in off
                    if sel.preferred_replica_leader(kept[tp], leadership[tp].isr, live).elected}
    return out


# ---------------------------------------------------------------------------------------------
# The controller's side (runs on its event queue).
# ---------------------------------------------------------------------------------------------

FIRST_AUTO_REBALANCE_DELAY_S = 5.0  # KafkaController.onControllerFailover's first schedule


@dataclass(eq=False, repr=False)
class ReplicaElectionManager:
    """Replica leader elections on the active controller (KafkaController.scala's
    ``processReplicaLeaderElection`` / ``onReplicaElection`` /
    ``checkAndTriggerAutoLeaderRebalance``) and the auto-rebalance timer."""

    broker_id: int
    ctx: ControllerContext
    zk: ControllerZkClient
    partitions: PartitionStateMachine
    requests: RequestSender
    sc: StateChangeLogger
    put_event: Callable[[ControllerEvent], None]
    is_active: Callable[[], bool]
    auto_leader_rebalance_enable: bool
    leader_imbalance_per_broker_percentage: int
    leader_imbalance_check_interval_seconds: float
    auto_rebalance_timer: asyncio.TimerHandle | None = field(init=False, default=None)

    async def _run(self, requested: Iterable[TopicPartition], election_type: ElectionType,
                   trigger: ElectionTrigger
                   ) -> dict[TopicPartition, tuple[int, str | None, int]]:
        """Plan, elect, send LeaderAndIsr/UpdateMetadata; ``tp -> (error, message, leader)``."""
        ctx = self.ctx
        requested = sorted(set(requested))
        assignments = {tp: ctx.partition_replica_assignment(tp) for tp in ctx.all_partitions()}
        # As Kafka's doElectLeaderForPartitions: decide on the stored state, not the context's
        # (an ISR expansion may not have been notified yet).
        for tp in requested:
            if tp in assignments:
                await self.zk.refresh_leadership(tp)
        leadership = {tp: la for tp in assignments if (la := ctx.leader_and_isr(tp)) is not None}
        plan = plan_election(requested, election_type, trigger, assignments, leadership,
                             ctx.live_broker_ids, ctx.topics_to_be_deleted,
                             set(ctx.partitions_being_reassigned))
        name = election_type.name
        results: dict[TopicPartition, tuple[int, str | None, int]] = {}
        for tp, (code, message) in plan.results.items():
            la = leadership.get(tp)
            results[tp] = (code, message, la.leader if la else NO_LEADER)
            if code == ELECTION_NOT_NEEDED:
                continue
            self.sc.controller(ctx.epoch, (
                f"Skipping replica leader election ({name}) for partition {tp} by "
                f"{trigger.value}: {message or 'error ' + str(code)}; assigned replicas "
                f"{list(assignments.get(tp, []))}, isr {list(la.isr) if la else []}, live "
                f"brokers {sorted(ctx.live_broker_ids)}"), logging.WARNING)
        if not plan.electable:
            return results
        self.sc.controller(ctx.epoch, (
            f"Starting replica leader election ({name}) for partitions "
            f"{','.join(str(tp) for tp in plan.electable)} triggered by {trigger.value}"))
        batch = self.requests.new_batch()
        strategy = "preferred" if election_type is ElectionType.PREFERRED else "unclean"
        elected: list[TopicPartition] = []
        for tp in plan.electable:
            if await self.partitions.elect_leader(tp, batch, strategy):
                la2 = ctx.leader_and_isr(tp)
                results[tp] = (NONE, None, la2.leader if la2 else NO_LEADER)
                elected.append(tp)
            else:
                results[tp] = (failed_error(election_type), f"Failed to elect leader for "
                               f"partition {tp} under strategy {strategy_name(election_type)}",
                               NO_LEADER)
        batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, elected)
        self.requests.send(batch)
        return results

    async def process_election(self, event: PreferredReplicaLeaderElection) -> None:
        """``PreferredReplicaLeaderElection`` on the active controller.

        ``partitions is None``: ZK-triggered, read ``/admin/preferred_replica_election``,
        elect, then delete the node (also when nothing could be elected, as Kafka does).
        Otherwise an admin request: elect and answer ``event.reply`` with
        ``tp -> (error, message, leader)``.
        """
        election_type = ElectionType(event.election_type)
        if event.partitions is not None:
            try:
                results = await self._run(event.partitions, election_type,
                                          ElectionTrigger.ADMIN)
            except BaseException as exc:
                if event.reply is not None and not event.reply.done():
                    if isinstance(exc, Exception):
                        event.reply.set_exception(exc)
                    else:
                        event.reply.cancel()
                if not isinstance(exc, CoordinationError):
                    raise
                # the store unreachable midway: the request has its error (Kafka's
                # ElectLeaders callback with the exception), the event loop goes on
                log.warning("[Controller id=%d] Leader election for ElectLeaders interrupted: "
                            "%r", self.broker_id, exc)
                return
            if event.reply is not None and not event.reply.done():
                event.reply.set_result(results)  # type: ignore[arg-type]
            return
        found = await self.zk.store.get_or_none(paths.PREFERRED_REPLICA_ELECTION)
        if found is None:
            return
        try:
            requested = paths.decode_preferred_replica_election(found[0])
        except ValueError as exc:
            log.error("[Controller id=%d] Ignoring invalid %s: %s", self.broker_id,
                      paths.PREFERRED_REPLICA_ELECTION, exc)
            requested = set()
        try:
            await self._run((TopicPartition(t, p) for t, p in requested),
                            ElectionType.PREFERRED, ElectionTrigger.ZK)
        except CoordinationError as exc:  # the session expired or the connection dropped
            log.warning("[Controller id=%d] Preferred replica election from %s interrupted: %s",
                        self.broker_id, paths.PREFERRED_REPLICA_ELECTION, exc)
        finally:
            await self._delete_election_node()

    async def _delete_election_node(self) -> None:
        """Delete the znode, fenced by the controller epoch's version (Kafka's
        deletePreferredReplicaElection(expectedControllerEpochZkVersion)): a controller that
        lost its place meanwhile must not delete a successor's request."""
        if not self.is_active():
            return
        try:
            await self.zk.fenced([DeleteOp(paths.PREFERRED_REPLICA_ELECTION)])
        except (CoordinationError, ControllerMovedError) as exc:
            log.info("[Controller id=%d] Did not remove %s: %s", self.broker_id,
                     paths.PREFERRED_REPLICA_ELECTION, exc)
            return
        log.info("[Controller id=%d] Removed %s", self.broker_id,
                 paths.PREFERRED_REPLICA_ELECTION)

    async def process_auto_rebalance(self, _event: AutoPreferredReplicaLeaderElection) -> None:
        """The periodic imbalance check (only on the active controller), then the next timer."""
        if not self.auto_leader_rebalance_enable:
            return
        try:
            ctx = self.ctx
            assignments = {tp: ctx.partition_replica_assignment(tp)
                           for tp in ctx.all_partitions()}
            leadership = {tp: la for tp in assignments
                          if (la := ctx.leader_and_isr(tp)) is not None}
            candidates = auto_rebalance_candidates(
                assignments, leadership, ctx.live_broker_ids,
                self.leader_imbalance_per_broker_percentage, ctx.topics_to_be_deleted,
                set(ctx.partitions_being_reassigned))
            if candidates:
                await self._run(candidates, ElectionType.PREFERRED, ElectionTrigger.AUTO)
        except CoordinationError as exc:
            # A controller whose session expired (SIGSTOP, a long pause) resigns right after;
            # a lost connection is retried by the next check. One line, not a traceback.
            log.warning("[Controller id=%d] Auto leader rebalance interrupted: %s",
                        self.broker_id, exc)
        finally:
            if self.is_active():
                self.schedule_auto_rebalance(self.leader_imbalance_check_interval_seconds)

    def schedule_auto_rebalance(self, delay: float) -> None:
        """Put an ``AutoPreferredReplicaLeaderElection`` on the queue after ``delay`` s."""
        self.cancel_auto_rebalance()
        if not self.auto_leader_rebalance_enable:
            return
        self.auto_rebalance_timer = asyncio.get_running_loop().call_later(
            delay, self.put_event, AutoPreferredReplicaLeaderElection())

    def cancel_auto_rebalance(self) -> None:
        handle, self.auto_rebalance_timer = self.auto_rebalance_timer, None
        if handle is not None:
            handle.cancel()
