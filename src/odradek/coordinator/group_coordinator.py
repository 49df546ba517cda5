"""The group coordinator (Kafka's GroupCoordinator, ZooKeeper era): group membership, rebalances
and committed offsets for the groups whose `__consumer_offsets` partition this broker leads
(S-7.3 - S-7.5).

Rebalance protocol (eager, as Kafka 2.x): a member that joins, leaves, fails or changes its
subscription moves the group to PreparingRebalance; the join phase ends when every known member
has sent JoinGroup again (or at the largest rebalance timeout, dropping the missing ones); the
next generation starts (protocol chosen by vote, leader kept if it rejoined); the leader gets all
members' subscriptions, computes the assignment client-side and sends it in SyncGroup; the
assignment is written to `__consumer_offsets` and handed to every member. Commits carry the
generation and member id, and a commit from another generation is refused.

Responses are callbacks (as in Kafka); the API layer turns them into futures. Timeouts are
delayed operations in two purgatories, each with its own timing wheel driven on the loop:
joins and syncs in the rebalance purgatory, member sessions in the heartbeat purgatory.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from ..common import entropy
from ..common import replica_assignment as asg
from ..common.clock import now_ms
from ..coordination import paths
from ..coordination.store import CoordinationStore, NodeExistsError
from ..runtime.purgatory import DelayedOperation, DelayedOperationPurgatory
from ..runtime.timer import AsyncTimerDriver, Timer
from .delayed import (
    DelayedHeartbeat,
    DelayedJoin,
    DelayedSync,
    InitialDelayedJoin,
    join_key,
    member_key,
    sync_key,
)
from .group import (
    UNKNOWN_MEMBER_ID,
    CompletingRebalance,
    Dead,
    Empty,
    GroupMetadata,
    GroupOverview,
    GroupSummary,
    JoinCallback,
    JoinGroupResult,
    MemberMetadata,
    PreparingRebalance,
    Stable,
    SyncCallback,
    SyncGroupResult,
    TopicPartition,
)
from .group_config import GroupConfig
from .metadata_manager import GroupMetadataManager, OffsetFetchResult
from .offsets import OFFSETS_TOPIC, OffsetAndMetadata
from .replica_access import ReplicaAccess

log = logging.getLogger("odradek.coordinator")

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

# Kafka's AdminZkClient.createTopicWithAssignment: (topic, assignment, configs, topic id);
# raises NodeExistsError if the topic exists.
CreateTopic = Callable[[str, dict[int, list[int]], dict[str, str], uuid.UUID], Awaitable[None]]

# APIs whose group id may be empty (offsets of the "" group, describe/delete everything).
_EMPTY_GROUP_ID_OK = {"OffsetCommit", "OffsetFetch", "DescribeGroups", "DeleteGroups"}

DEAD_GROUP = GroupSummary(Dead.value, "", "", [])
EMPTY_SUMMARY = GroupSummary("", "", "", [])


@dataclass(slots=True)
class LeaveMemberResult:
    member_id: str
    group_instance_id: str | None
    error: int


def txn_commit_error(group: GroupMetadata, member_id: str, group_instance_id: str | None,
                     generation_id: int) -> int | None:
    """Why a TxnOffsetCommit to `group` is refused, or None (Kafka's doTxnCommitOffsets). The
    member id and generation (KIP-447, v3) are checked only when given: "" and -1 (what v0-v2
    imply) skip them; a known static instance under another member id is fenced."""
    if group.is_(Dead):
        # Just removed from this coordinator (moved, or deleted): the client looks it up again.
        return ErrorCode.coordinator_not_available
    if group.is_static_member_fenced(member_id, group_instance_id):
        return ErrorCode.fenced_instance_id
    if member_id != UNKNOWN_MEMBER_ID and not group.has(member_id):
        return ErrorCode.unknown_member_id
    if generation_id >= 0 and generation_id != group.generation_id:
        return ErrorCode.illegal_generation
    return None


class GroupCoordinator:
    """Kafka's GroupCoordinator. `live_brokers()` are the brokers `__consumer_offsets` may be
    placed on when FindCoordinator first asks for it; `create_topic` writes that topic."""

    def __init__(self, broker_id: int, config: GroupConfig, replica_manager: ReplicaAccess,
                 store: CoordinationStore, live_brokers: Callable[[], Iterable[int]],
                 create_topic: CreateTopic, clock: Callable[[], int] = now_ms) -> None:
        self.broker_id = broker_id
        self.config = config
        self.replica_manager = replica_manager
        self.store = store
        self.live_brokers = live_brokers
        self.create_topic = create_topic
        self.clock = clock
        self.heartbeat_purgatory: DelayedOperationPurgatory[DelayedOperation] = \
            DelayedOperationPurgatory("Heartbeat", Timer())
        self.rebalance_purgatory: DelayedOperationPurgatory[DelayedOperation] = \
            DelayedOperationPurgatory("Rebalance", Timer())
        self._drivers = [AsyncTimerDriver(self.heartbeat_purgatory.timer),
                         AsyncTimerDriver(self.rebalance_purgatory.timer)]
        self.manager = GroupMetadataManager(
            broker_id, replica_manager, self.offsets_partition_count,
            clock, commit_timeout_ms=self.config.offsets_commit_timeout_ms,
            load_buffer_size=self.config.offsets_load_buffer_size,
            max_metadata_size=self.config.offset_metadata_max_bytes,
            retention_ms=self.config.offsets_retention_ms)
        self.is_active = False
        self._offsets_partition_count = self.config.offsets_topic_num_partitions
        self._expiration_task: asyncio.Task[None] | None = None
        self._creating_offsets_topic: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def offsets_partition_count(self) -> int:
        return self._offsets_partition_count

    async def startup(self) -> None:
        """Fix the `__consumer_offsets` partition count (from the topic if it exists, else
        the config, as Kafka does at start-up); start the purgatories' timers, the load/unload
        worker and the expiration task. From now on leadership changes of `__consumer_offsets`
        partitions load and unload groups."""
        log.info("[GroupCoordinator %d]: Starting up.", self.broker_id)
        found = await self.store.get_or_none(paths.topic_path(OFFSETS_TOPIC))
        if found is not None:
            self._offsets_partition_count = len(
                paths.decode_topic_assignment(found[0]).partitions)
        for d in self._drivers:
            d.start()
        self.manager.startup()
        self.replica_manager.role_listeners[OFFSETS_TOPIC] = self.on_offsets_partition_role
        self._expiration_task = asyncio.create_task(
            self._expire_periodically(), name=f"delete-expired-group-metadata-{self.broker_id}")
        self.is_active = True
        log.info("[GroupCoordinator %d]: Startup complete.", self.broker_id)

    def shutdown(self) -> None:
        log.info("[GroupCoordinator %d]: Shutting down.", self.broker_id)
        self.is_active = False
        self.replica_manager.role_listeners.pop(OFFSETS_TOPIC, None)
        self.manager.shutdown()
        for task in (self._expiration_task, self._creating_offsets_topic):
            if task is not None:
                task.cancel()
        for d in self._drivers:
            d.stop()
        self.heartbeat_purgatory.shutdown()
        self.rebalance_purgatory.shutdown()
        log.info("[GroupCoordinator %d]: Shutdown complete.", self.broker_id)

    async def _expire_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.config.offsets_retention_check_interval_ms / 1000)
            try:
                self.manager.cleanup_expired()
            except Exception:
                log.exception("Offset expiration failed")

    def on_offsets_partition_role(self, partition: int, is_leader: bool,
                                  leader_epoch: int) -> None:
        """The replica manager's hook: leader -> load (onElection), follower or stopped ->
        unload (onResignation; epoch -1 = none, from StopReplica)."""
        if not self.is_active:
            return
        if is_leader:
            log.info("[GroupCoordinator %d]: Elected as the group coordinator for partition %d "
                     "in epoch %d", self.broker_id, partition, leader_epoch)
            self.manager.schedule_load(partition, leader_epoch, self._on_group_loaded)
        else:
            log.info("[GroupCoordinator %d]: Resigned as the group coordinator for partition %d "
                     "in epoch %s", self.broker_id, partition, leader_epoch)
            self.manager.schedule_unload(partition, None if leader_epoch < 0 else leader_epoch,
                                         self._on_group_unloaded)

    # -- __consumer_offsets creation (FindCoordinator) ------------------------------------------
    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` (once at a time) as Kafka's auto topic creation does:
        `offsets.topic.num.partitions` partitions, `offsets.topic.replication.factor` replicas
        (capped by the live brokers), compacted."""
        task = self._creating_offsets_topic
        if task is not None and not task.done():
            return
        self._creating_offsets_topic = asyncio.ensure_future(self._create_offsets_topic())

    async def _create_offsets_topic(self) -> None:
        if await self.store.exists(paths.topic_path(OFFSETS_TOPIC)) is not None:
            return
        brokers = sorted(self.live_brokers())
        if not brokers:
            return
        rf = min(self.config.offsets_topic_replication_factor, len(brokers))
        assignment = asg.assign_replicas_to_brokers(
            brokers, self.config.offsets_topic_num_partitions, rf)
        try:
            # The config node first, then the assignment.
            await self.create_topic(OFFSETS_TOPIC, assignment,
                                    self.config.offsets_topic_configs(), entropy.uuid4())
            log.info("Created internal topic %s with %d partitions and replication factor %d",
                     OFFSETS_TOPIC, len(assignment), rf)
        except NodeExistsError:
            pass
        except Exception:
            log.exception("Could not create %s", OFFSETS_TOPIC)

    # -- validation -----------------------------------------------------------------------------
    def _validate_group_status(self, group_id: str | None, api: str) -> int | None:
        if group_id is None or (not group_id and api not in _EMPTY_GROUP_ID_OK):
            return ErrorCode.invalid_group_id
        if not self.is_active:
            return ErrorCode.coordinator_not_available
        if self.manager.is_group_loading(group_id):
            return ErrorCode.coordinator_load_in_progress
        if not self.manager.is_group_local(group_id):
            return ErrorCode.not_coordinator
        return None

    def partition_for(self, group_id: str) -> int:
        return self.manager.partition_for(group_id)

    # -- JoinGroup ------------------------------------------------------------------------------
    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        if group.state in (Empty, Dead):
            return True
        if group.is_(PreparingRebalance):
            return ((group.has(member_id) and group.get(member_id).is_awaiting_join)
                    or group.num_members_awaiting_join < self.config.max_size)
        return group.has(member_id) or group.size < self.config.max_size

    def handle_join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                          require_known_member_id: bool, client_id: str, client_host: str,
                          rebalance_timeout_ms: int, session_timeout_ms: int,
                          protocol_type: str, protocols: list[tuple[str, bytes]],
                          callback: JoinCallback) -> None:
        error = self._validate_group_status(group_id, "JoinGroup")
        if error is not None:
            callback(JoinGroupResult(member_id, error))
            return
        if not (self.config.min_session_timeout_ms <= session_timeout_ms
                <= self.config.max_session_timeout_ms):
            callback(JoinGroupResult(member_id, ErrorCode.invalid_session_timeout))
            return
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.manager.get_or_maybe_create_group(group_id, is_unknown)
        if group is None:
            callback(JoinGroupResult(member_id, ErrorCode.unknown_member_id))
            return
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached))
        elif is_unknown:
            self._do_unknown_join_group(group, group_instance_id, require_known_member_id,
                                        client_id, client_host, rebalance_timeout_ms,
                                        session_timeout_ms, protocol_type, protocols, callback)
        else:
            self._do_join_group(group, member_id, group_instance_id, client_id, client_host,
                                rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                protocols, callback)
        if group.is_(PreparingRebalance):
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def _do_unknown_join_group(self, group: GroupMetadata, group_instance_id: str | None,
                               require_known_member_id: bool, client_id: str, client_host: str,
                               rebalance_timeout_ms: int, session_timeout_ms: int,
                               protocol_type: str, protocols: list[tuple[str, bytes]],
                               callback: JoinCallback) -> None:
        if group.is_(Dead):
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.coordinator_not_available))
        elif not group.supports_protocols(protocol_type, {p for p, _ in protocols}):
            callback(JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol))
        else:
            new_member_id = group.generate_member_id(client_id, group_instance_id)
            if group.has_static_member(group_instance_id):
                assert group_instance_id is not None
                self._update_static_member_and_rebalance(group, new_member_id,
                                                         group_instance_id, protocols, callback)
            elif require_known_member_id:
                # Dynamic member: it must come back with this id (KIP-394).
                log.debug("Dynamic member with unknown member id joins group %s in %s state. "
                          "Created a new member id %s and request the member to rejoin with "
                          "this id.", group.group_id, group.state, new_member_id)
                group.pending_members.add(new_member_id)
                self._add_pending_member_expiration(group, new_member_id, session_timeout_ms)
                callback(JoinGroupResult(new_member_id, ErrorCode.member_id_required))
            else:
                log.info("%s member with unknown member id joins group %s in %s state. Created "
                         "a new member id %s for this member and add to the group.",
                         "Static" if group_instance_id is not None else "Dynamic",
                         group.group_id, group.state, new_member_id)
                self._add_member_and_rebalance(rebalance_timeout_ms, session_timeout_ms,
                                               new_member_id, group_instance_id, client_id,
                                               client_host, protocol_type, protocols, group,
                                               callback)

    def _join_result(self, group: GroupMetadata, member_id: str, *, with_members: bool,
                     leader_id: str | None = None) -> JoinGroupResult:
        return JoinGroupResult(
            member_id, ErrorCode.none, group.generation_id, group.protocol_type,
            group.protocol_name, (group.leader_id or "") if leader_id is None else leader_id,
            group.current_member_metadata() if with_members else [])

    def _do_join_group(self, group: GroupMetadata, member_id: str,
                       group_instance_id: str | None, client_id: str, client_host: str,
                       rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                       protocols: list[tuple[str, bytes]], callback: JoinCallback) -> None:
        if group.is_(Dead):
            callback(JoinGroupResult(member_id, ErrorCode.coordinator_not_available))
        elif not group.supports_protocols(protocol_type, {p for p, _ in protocols}):
            callback(JoinGroupResult(member_id, ErrorCode.inconsistent_group_protocol))
        elif group.is_pending_member(member_id):
            if group_instance_id is not None:
                raise RuntimeError(f"the static member {group_instance_id} was not expected to "
                                   f"be assigned into pending member bucket with member id "
                                   f"{member_id}")
            log.debug("Dynamic member with specific member id %s joins group %s in %s state. "
                      "Adding to the group now.", member_id, group.group_id, group.state)
            self._add_member_and_rebalance(rebalance_timeout_ms, session_timeout_ms, member_id,
                                           group_instance_id, client_id, client_host,
                                           protocol_type, protocols, group, callback)
        else:
            instance_unknown = (group_instance_id is not None
                                and not group.has_static_member(group_instance_id))
            if group.is_static_member_fenced(member_id, group_instance_id):
                callback(JoinGroupResult(member_id, ErrorCode.fenced_instance_id))
            elif not group.has(member_id) or instance_unknown:
                callback(JoinGroupResult(member_id, ErrorCode.unknown_member_id))
            else:
                member = group.get(member_id)
                if group.is_(PreparingRebalance):
                    self._update_member_and_rebalance(
                        group, member, protocols,
                        f"Member {member_id} joining group during {group.state}", callback)
                elif group.is_(CompletingRebalance):
                    if member.matches(protocols):
                        # It lost the JoinGroup response: send the current generation again.
                        callback(self._join_result(group, member_id,
                                                   with_members=group.is_leader(member_id)))
                    else:
                        self._update_member_and_rebalance(
                            group, member, protocols,
                            f"Updating metadata for member {member_id} during {group.state}",
                            callback)
                elif group.is_(Stable):
                    if group.is_leader(member_id):
                        # The leader rejoining forces a rebalance (e.g. topic metadata changed).
                        self._update_member_and_rebalance(
                            group, member, protocols,
                            f"leader {member_id} re-joining group during {group.state}",
                            callback)
                    elif not member.matches(protocols):
                        self._update_member_and_rebalance(
                            group, member, protocols,
                            f"Updating metadata for member {member_id} during {group.state}",
                            callback)
                    else:
                        callback(self._join_result(group, member_id, with_members=False))
                else:
                    log.warning("Attempt to add rejoining member %s of group %s in unexpected "
                                "group state %s", member_id, group.group_id, group.state)
                    callback(JoinGroupResult(member_id, ErrorCode.unknown_member_id))

    # -- SyncGroup ------------------------------------------------------------------------------
    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str,
                          protocol_type: str | None, protocol_name: str | None,
                          group_instance_id: str | None, assignment: dict[str, bytes],
                          callback: SyncCallback) -> None:
        error = self._validate_group_status(group_id, "SyncGroup")
        if error == ErrorCode.coordinator_load_in_progress:
            # The rebalance state was lost with the old coordinator: start over at JoinGroup.
            callback(SyncGroupResult(ErrorCode.rebalance_in_progress))
            return
        if error is not None:
            callback(SyncGroupResult(error))
            return
        group = self.manager.get_group(group_id)
        if group is None:
            callback(SyncGroupResult(ErrorCode.unknown_member_id))
            return
        self._do_sync_group(group, generation_id, member_id, protocol_type, protocol_name,
                            group_instance_id, assignment, callback)

    def _do_sync_group(self, group: GroupMetadata, generation_id: int, member_id: str,
                       protocol_type: str | None, protocol_name: str | None,
                       group_instance_id: str | None, assignment: dict[str, bytes],
                       callback: SyncCallback) -> None:
        if group.is_(Dead):
            callback(SyncGroupResult(ErrorCode.coordinator_not_available))
        elif group.is_static_member_fenced(member_id, group_instance_id):
            callback(SyncGroupResult(ErrorCode.fenced_instance_id))
        elif not group.has(member_id):
            callback(SyncGroupResult(ErrorCode.unknown_member_id))
        elif generation_id != group.generation_id:
            callback(SyncGroupResult(ErrorCode.illegal_generation))
        elif ((protocol_type is not None and group.protocol_type != protocol_type)
              or (protocol_name is not None and group.protocol_name != protocol_name)):
            callback(SyncGroupResult(ErrorCode.inconsistent_group_protocol))
        elif group.is_(Empty):
            callback(SyncGroupResult(ErrorCode.unknown_member_id))
        elif group.is_(PreparingRebalance):
            callback(SyncGroupResult(ErrorCode.rebalance_in_progress))
        elif group.is_(CompletingRebalance):
            group.get(member_id).awaiting_sync = callback
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                log.info("Assignment received from leader for group %s for generation %d. The "
                         "group has %d members, %d of which are static.", group.group_id,
                         group.generation_id, group.size, len(group.static_members))
                missing = [m for m in group.members if m not in assignment]
                full = {**assignment, **dict.fromkeys(missing, b"")}
                if missing:
                    log.warning("Setting empty assignments for members %s of %s for generation "
                                "%d", missing, group.group_id, group.generation_id)

                def stored(error: int) -> None:
                    # Another member may have joined meanwhile: act only if still this phase.
                    if group.is_(CompletingRebalance) and generation_id == group.generation_id:
                        if error != ErrorCode.none:
                            self._reset_and_propagate_assignment_error(group, error)
                            self._maybe_prepare_rebalance(
                                group, f"error when storing group assignment during SyncGroup "
                                       f"(member: {member_id})")
                        else:
                            self._set_and_propagate_assignment(group, full)
                            group.transition_to(Stable)

                self.manager.store_group(group, full, stored)
        elif group.is_(Stable):
            self._remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            callback(SyncGroupResult(ErrorCode.none, member.assignment, group.protocol_type,
                                     group.protocol_name))
            self._complete_and_schedule_next_heartbeat_expiration(group, member)

    # -- LeaveGroup -----------------------------------------------------------------------------
    def handle_leave_group(self, group_id: str, members: list[tuple[str, str | None]]
                           ) -> tuple[int, list[LeaveMemberResult]]:
        """members: (member id, group instance id); returns (top-level error, per member)."""
        error = self._validate_group_status(group_id, "LeaveGroup")
        if error is not None:
            return error, []
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.none, [LeaveMemberResult(m, i, ErrorCode.unknown_member_id)
                                    for m, i in members]
        if group.is_(Dead):
            return ErrorCode.coordinator_not_available, []
        results = []
        for member_id, instance_id in members:
            if (member_id != UNKNOWN_MEMBER_ID
                    and group.is_static_member_fenced(member_id, instance_id)):
                results.append(LeaveMemberResult(member_id, instance_id,
                                                 ErrorCode.fenced_instance_id))
            elif group.is_pending_member(member_id):
                log.info("Pending member %s is leaving group %s.", member_id, group.group_id)
                self._remove_pending_member_and_update_group(group, member_id)
                self.heartbeat_purgatory.check_and_complete(member_key(group.group_id,
                                                                       member_id))
                results.append(LeaveMemberResult(member_id, instance_id, ErrorCode.none))
            elif not group.has(member_id) and not group.has_static_member(instance_id):
                results.append(LeaveMemberResult(member_id, instance_id,
                                                 ErrorCode.unknown_member_id))
            else:
                member = (group.get(group.static_member_id(instance_id))
                          if group.has_static_member(instance_id) else group.get(member_id))
                self._remove_heartbeat_for_leaving_member(group, member)
                log.info("Member[group.instance.id %s, member.id %s] in group %s has left, "
                         "removing it from the group", member.group_instance_id,
                         member.member_id, group.group_id)
                self._remove_member_and_update_group(group, member,
                                                     f"removing member {member_id} on "
                                                     "LeaveGroup")
                results.append(LeaveMemberResult(member_id, instance_id, ErrorCode.none))
        return ErrorCode.none, results

    # -- DeleteGroups / OffsetDelete ------------------------------------------------------------
    def handle_delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        errors: dict[str, int] = {}
        eligible: list[GroupMetadata] = []
        for group_id in group_ids:
            error = self._validate_group_status(group_id, "DeleteGroups")
            if error is not None:
                errors[group_id] = error
                continue
            group = self.manager.get_group(group_id)
            if group is None or group.is_(Dead):
                errors[group_id] = (ErrorCode.group_id_not_found
                                    if self.manager.group_not_exists(group_id)
                                    else ErrorCode.not_coordinator)
            elif group.is_(Empty):
                group.transition_to(Dead)
                eligible.append(group)
            else:
                errors[group_id] = ErrorCode.non_empty_group
        if eligible:
            removed = self.manager.cleanup_group_metadata(eligible,
                                                          lambda g: g.remove_all_offsets())
            for g in eligible:
                errors[g.group_id] = ErrorCode.none
            log.info("The following groups were deleted: %s. A total of %d offsets were "
                     "removed.", ", ".join(g.group_id for g in eligible), removed)
        return errors

    def handle_delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                              ) -> tuple[int, dict[TopicPartition, int]]:
        error = self._validate_group_status(group_id, "OffsetDelete")
        if error is not None:
            return error, {}
        group = self.manager.get_group(group_id)
        if group is None or group.is_(Dead):
            return (ErrorCode.group_id_not_found if self.manager.group_not_exists(group_id)
                    else ErrorCode.not_coordinator), {}
        partition_errors: dict[TopicPartition, int] = {}
        if group.is_(Empty):
            eligible = list(partitions)
        elif group.is_consumer_group():
            eligible = []
            for tp in partitions:
                if group.is_subscribed_to_topic(tp.topic):
                    partition_errors[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.non_empty_group, {}
        if eligible:
            removed = self.manager.cleanup_group_metadata([group],
                                                          lambda g: g.remove_offsets(eligible))
            partition_errors.update(dict.fromkeys(eligible, ErrorCode.none))
            log.info("The following offsets of the group %s were deleted: %s. A total of %d "
                     "offsets were removed.", group_id, eligible, removed)
        return ErrorCode.none, partition_errors

    # -- Heartbeat ------------------------------------------------------------------------------
    def handle_heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                         generation_id: int) -> int:
        error = self._validate_group_status(group_id, "Heartbeat")
        if error is not None:
            # While loading, the group's state is unknown: answer blindly.
            return ErrorCode.none if error == ErrorCode.coordinator_load_in_progress else error
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(Dead):
            return ErrorCode.coordinator_not_available
        if group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(Empty):
            return ErrorCode.unknown_member_id
        self._complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
        if group.is_(PreparingRebalance):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # -- OffsetCommit / OffsetFetch ---------------------------------------------------------------
    def handle_commit_offsets(self, group_id: str, member_id: str,
                              group_instance_id: str | None, generation_id: int,
                              offsets: dict[TopicPartition, OffsetAndMetadata],
                              callback: Callable[[dict[TopicPartition, int]], None]) -> None:
        error = self._validate_group_status(group_id, "OffsetCommit")
        if error is not None:
            callback(dict.fromkeys(offsets, error))
            return
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id < 0:
                # Not using Kafka for group management (a "simple" consumer): allow it.
                group = self.manager.add_group(GroupMetadata(group_id, Empty, self.clock))
            else:
                # Or a commit from an older generation of a group that is gone.
                callback(dict.fromkeys(offsets, ErrorCode.illegal_generation))
                return
        self._do_commit_offsets(group, member_id, group_instance_id, generation_id, offsets,
                                callback)

    def _do_commit_offsets(self, group: GroupMetadata, member_id: str,
                           group_instance_id: str | None, generation_id: int,
                           offsets: dict[TopicPartition, OffsetAndMetadata],
                           callback: Callable[[dict[TopicPartition, int]], None]) -> None:
        if group.is_(Dead):
            callback(dict.fromkeys(offsets, ErrorCode.coordinator_not_available))
        elif group.is_static_member_fenced(member_id, group_instance_id):
            callback(dict.fromkeys(offsets, ErrorCode.fenced_instance_id))
        elif generation_id < 0 and group.is_(Empty):
            self.manager.store_offsets(group, member_id, offsets, callback)
        elif not group.has(member_id):
            callback(dict.fromkeys(offsets, ErrorCode.unknown_member_id))
        elif generation_id != group.generation_id:
            callback(dict.fromkeys(offsets, ErrorCode.illegal_generation))
        elif group.state in (Stable, PreparingRebalance):
            # During PreparingRebalance commits are still allowed; the heartbeat response tells
            # the member to rejoin.
            self._complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
            self.manager.store_offsets(group, member_id, offsets, callback)
        elif group.is_(CompletingRebalance):
            callback(dict.fromkeys(offsets, ErrorCode.rebalance_in_progress))
        else:
            raise RuntimeError(f"Logic error: unexpected group state {group.state}")

    # -- TxnOffsetCommit / transaction markers (KIP-98, KIP-447) ---------------------------------
    def handle_txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                  member_id: str, group_instance_id: str | None,
                                  generation_id: int,
                                  offsets: dict[TopicPartition, OffsetAndMetadata],
                                  callback: Callable[[dict[TopicPartition, int]], None]
                                  ) -> None:
        """Offsets committed inside the producer's transaction: appended now, visible once the
        transaction commits. The group is created (Empty) if unknown, as the producer need not
        be one of its members."""
        error = self._validate_group_status(group_id, "TxnOffsetCommit")
        if error is not None:
            callback(dict.fromkeys(offsets, error))
            return
        group = self.manager.get_group(group_id)
        if group is None:
            group = self.manager.add_group(GroupMetadata(group_id, Empty, self.clock))
        error = txn_commit_error(group, member_id, group_instance_id, generation_id)
        if error is not None:
            callback(dict.fromkeys(offsets, error))
            return
        self.manager.store_offsets(group, member_id, offsets, callback,
                                   producer_id=producer_id, producer_epoch=producer_epoch)

    def handle_txn_completion(self, producer_id: int, offsets_partitions: set[int],
                              is_commit: bool) -> None:
        """The producer's COMMIT (`is_commit`) or ABORT marker is written to these partitions of
        `__consumer_offsets` (WriteTxnMarkers): its pending offsets in their groups become
        visible or are dropped."""
        self.manager.handle_txn_completion(producer_id, set(offsets_partitions), is_commit)

    def handle_fetch_offsets(self, group_id: str, require_stable: bool,
                             partitions: list[TopicPartition] | None = None
                             ) -> tuple[int, dict[TopicPartition, OffsetFetchResult]]:
        error = self._validate_group_status(group_id, "OffsetFetch")
        if error is not None:
            return error, {}
        return ErrorCode.none, self.manager.get_offsets(group_id, require_stable, partitions)

    # -- ListGroups / DescribeGroups ------------------------------------------------------------
    def handle_list_groups(self, states: set[str]) -> tuple[int, list[GroupOverview]]:
        if not self.is_active:
            return ErrorCode.coordinator_not_available, []
        error = (ErrorCode.coordinator_load_in_progress if self.manager.is_loading()
                 else ErrorCode.none)
        groups = [g.overview() for g in self.manager.groups.values()
                  if not states or g.state.value in states]
        return error, groups

    def handle_describe_group(self, group_id: str) -> tuple[int, GroupSummary]:
        error = self._validate_group_status(group_id, "DescribeGroups")
        if error is not None:
            return error, EMPTY_SUMMARY
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.none, DEAD_GROUP
        return ErrorCode.none, group.summary()

    # -- loading and unloading -------------------------------------------------------------------
    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        log.info("Unloading group metadata for %s with generation %d", group.group_id,
                 group.generation_id)
        previous = group.state
        group.transition_to(Dead)
        if previous is PreparingRebalance:
            for member in list(group.members.values()):
                group.maybe_invoke_join_callback(
                    member, JoinGroupResult(member.member_id, ErrorCode.not_coordinator))
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))
        elif previous in (Stable, CompletingRebalance):
            for member in list(group.members.values()):
                group.maybe_invoke_sync_callback(member,
                                                 SyncGroupResult(ErrorCode.not_coordinator))
                self.heartbeat_purgatory.check_and_complete(member_key(group.group_id,
                                                                       member.member_id))
        self._remove_sync_expiration(group)

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        log.info("Loading group metadata for %s with generation %d", group.group_id,
                 group.generation_id)
        if group.size > self.config.max_size:
            self._prepare_rebalance(group, f"Freshly-loaded group is over capacity "
                                           f"({self.config.max_size}). Rebalancing in order to "
                                           "give a chance for consumers to commit offsets")
        for member in list(group.members.values()):
            self._complete_and_schedule_next_heartbeat_expiration(group, member)

    # -- rebalance machinery ----------------------------------------------------------------------
    def _set_and_propagate_assignment(self, group: GroupMetadata,
                                      assignment: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignment[member.member_id]
        self._propagate_assignment(group, ErrorCode.none)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: int) -> None:
        ptype, pname = ((group.protocol_type, group.protocol_name) if error == ErrorCode.none
                        else (None, None))
        for member in list(group.members.values()):
            if not member.assignment and error == ErrorCode.none:
                log.warning("Sending empty assignment to member %s of %s for generation %d with "
                            "no errors", member.member_id, group.group_id, group.generation_id)
            if group.maybe_invoke_sync_callback(
                    member, SyncGroupResult(error, member.assignment, ptype, pname)):
                # The session restarts when the member gets its assignment.
                self._complete_and_schedule_next_heartbeat_expiration(group, member)

    def _complete_and_schedule_next_heartbeat_expiration(self, group: GroupMetadata,
                                                         member: MemberMetadata) -> None:
        self._complete_and_schedule_next_expiration(group, member, member.session_timeout_ms)

    def _complete_and_schedule_next_expiration(self, group: GroupMetadata,
                                               member: MemberMetadata, timeout_ms: int) -> None:
        key = member_key(group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member.member_id, False, timeout_ms), [key])

    def _add_pending_member_expiration(self, group: GroupMetadata, member_id: str,
                                       timeout_ms: int) -> None:
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member_id, True, timeout_ms),
            [member_key(group.group_id, member_id)])

    def _remove_heartbeat_for_leaving_member(self, group: GroupMetadata,
                                             member: MemberMetadata) -> None:
        member.is_leaving = True
        self.heartbeat_purgatory.check_and_complete(member_key(group.group_id,
                                                               member.member_id))

    def _add_member_and_rebalance(self, rebalance_timeout_ms: int, session_timeout_ms: int,
                                  member_id: str, group_instance_id: str | None, client_id: str,
                                  client_host: str, protocol_type: str,
                                  protocols: list[tuple[str, bytes]], group: GroupMetadata,
                                  callback: JoinCallback) -> None:
        member = MemberMetadata(member_id, group_instance_id, client_id, client_host,
                                rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                protocols)
        member.is_new = True
        if group.is_(PreparingRebalance) and group.generation_id == 0:
            group.new_member_added = True  # lets InitialDelayedJoin wait a bit longer
        group.add(member, callback)
        # A new member cannot heartbeat before its JoinGroup completes; expire it if that takes
        # too long (it will retry), so defunct joiners do not pile up.
        self._complete_and_schedule_next_expiration(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        if member.is_static:
            log.info("Adding new static member %s to group %s with member id %s.",
                     group_instance_id, group.group_id, member_id)
            group.static_members[group_instance_id] = member_id  # type: ignore[index]
        else:
            group.pending_members.discard(member_id)
        self._maybe_prepare_rebalance(group, f"Adding new member {member_id} with group "
                                             f"instance id {group_instance_id}")

    def _update_static_member_and_rebalance(self, group: GroupMetadata, new_member_id: str,
                                            group_instance_id: str,
                                            protocols: list[tuple[str, bytes]],
                                            callback: JoinCallback) -> None:
        old_member_id = group.static_member_id(group_instance_id)
        log.info("Static member %s of group %s with unknown member id rejoins, assigning new "
                 "member id %s, while old member id %s will be removed.", group_instance_id,
                 group.group_id, new_member_id, old_member_id)
        current_leader = group.leader_id or ""
        member = group.replace_group_instance(old_member_id, new_member_id, group_instance_id)
        # The old id's heartbeat expires harmlessly; the new id gets its own session.
        self._complete_and_schedule_next_heartbeat_expiration(group, member)
        old_protocols = list(member.supported_protocols)
        group.update_member(member, protocols, callback)
        if group.is_(Stable):
            # Same protocol for the next generation: no rebalance, persist the new member id and
            # give the member its current assignment (Kafka 2.x, KIP-345).
            if group.protocol_name == group.select_protocol():
                log.info("Static member which joins during Stable stage and doesn't affect "
                         "selectProtocol will not trigger rebalance.")
                assignment = {m.member_id: m.assignment for m in group.members.values()}

                def stored(error: int) -> None:
                    if error != ErrorCode.none:
                        log.warning("Failed to persist metadata for group %s: %s",
                                    group.group_id, ErrorCode(error).name)
                        group.update_member(member, old_protocols, None)
                        old = group.replace_group_instance(new_member_id, old_member_id,
                                                           group_instance_id)
                        self._complete_and_schedule_next_heartbeat_expiration(group, old)
                        callback(JoinGroupResult(
                            UNKNOWN_MEMBER_ID, error, group.generation_id, group.protocol_type,
                            group.protocol_name, current_leader))
                    else:
                        # The old leader id is returned so that the rejoined member does not
                        # compute an assignment a Stable group would never distribute.
                        group.maybe_invoke_join_callback(member, JoinGroupResult(
                            new_member_id, ErrorCode.none, group.generation_id,
                            group.protocol_type, group.protocol_name, current_leader))

                self.manager.store_group(group, assignment, stored)
            else:
                self._maybe_prepare_rebalance(
                    group, f"Group's selectedProtocol will change because static member "
                           f"{member.member_id} with instance id {group_instance_id} joined "
                           "with change of protocol")
        elif group.is_(CompletingRebalance):
            # The leader may be assigning partitions to the old member id: start over.
            self._prepare_rebalance(group, f"Updating metadata for static member "
                                           f"{member.member_id} with instance id "
                                           f"{group_instance_id}")
        elif group.state in (Empty, Dead):
            raise RuntimeError(f"Group {group.group_id} was not supposed to be in the state "
                               f"{group.state} when the unknown static member "
                               f"{group_instance_id} rejoins.")
        # PreparingRebalance: the member just waits for the join phase to end.

    def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata,
                                     protocols: list[tuple[str, bytes]], reason: str,
                                     callback: JoinCallback) -> None:
        group.update_member(member, protocols, callback)
        self._maybe_prepare_rebalance(group, reason)

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(CompletingRebalance):
            # Members waiting for their assignment must rejoin instead.
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)
        delay = self.config.initial_rebalance_delay_ms
        op: DelayedJoin
        if group.is_(Empty):
            op = InitialDelayedJoin(self, self.rebalance_purgatory, group, delay, delay,
                                    max(group.rebalance_timeout_ms - delay, 0))
        else:
            op = DelayedJoin(self, group, group.rebalance_timeout_ms)
        group.transition_to(PreparingRebalance)
        log.info("Preparing to rebalance group %s in state %s with old generation %d "
                 "(%s-%d) (reason: %s)", group.group_id, group.state, group.generation_id,
                 OFFSETS_TOPIC, self.partition_for(group.group_id), reason)
        self.rebalance_purgatory.try_complete_else_watch(op, [join_key(group.group_id)])

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata,
                                        reason: str) -> None:
        # A new member may time out while its JoinGroup waits: answer it before removing it.
        group.maybe_invoke_join_callback(member, JoinGroupResult(UNKNOWN_MEMBER_ID,
                                                                 ErrorCode.unknown_member_id))
        group.remove(member.member_id)
        if group.state in (Stable, CompletingRebalance):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(PreparingRebalance):
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def _remove_pending_member_and_update_group(self, group: GroupMetadata,
                                                member_id: str) -> None:
        group.pending_members.discard(member_id)
        if group.is_(PreparingRebalance):
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    # called by DelayedJoin
    def try_complete_join(self, group: GroupMetadata, force_complete: Callable[[], bool]
                          ) -> bool:
        return force_complete() if group.has_all_members_joined() else False

    def on_complete_join(self, group: GroupMetadata) -> None:
        gone = [m for m in group.not_yet_rejoined_members() if not m.is_static]
        if gone:
            log.info("Group %s removed dynamic members who haven't joined: %s", group.group_id,
                     [m.member_id for m in gone])
            for m in gone:
                self._remove_heartbeat_for_leaving_member(group, m)
                group.remove(m.member_id)
        if group.is_(Dead):
            log.info("Group %s is dead, skipping rebalance stage", group.group_id)
        elif not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait again until the session timeouts remove the members.
            log.error("Group %s could not complete rebalance because no members rejoined",
                      group.group_id)
            self.rebalance_purgatory.try_complete_else_watch(
                DelayedJoin(self, group, group.rebalance_timeout_ms), [join_key(group.group_id)])
        else:
            group.init_next_generation()
            if group.is_(Empty):
                log.info("Group %s with generation %d is now empty (%s-%d)", group.group_id,
                         group.generation_id, OFFSETS_TOPIC, self.partition_for(group.group_id))

                def stored(error: int) -> None:
                    if error != ErrorCode.none:
                        log.warning("Failed to write empty metadata for group %s: %s",
                                    group.group_id, ErrorCode(error).name)

                self.manager.store_group(group, {}, stored)
            else:
                log.info("Stabilized group %s generation %d (%s-%d) with %d members",
                         group.group_id, group.generation_id, OFFSETS_TOPIC,
                         self.partition_for(group.group_id), group.size)
                for member in list(group.members.values()):
                    result = self._join_result(group, member.member_id,
                                               with_members=group.is_leader(member.member_id))
                    group.maybe_invoke_join_callback(member, result)
                    self._complete_and_schedule_next_heartbeat_expiration(group, member)
                    member.is_new = False
                    group.add_pending_sync_member(member.member_id)
                self._schedule_pending_sync(group)

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.remove_pending_sync_member(member_id)
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.pending_sync_members.clear()
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        self.rebalance_purgatory.try_complete_else_watch(
            DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms),
            [sync_key(group.group_id)])

    # called by DelayedSync
    def try_complete_pending_sync(self, group: GroupMetadata, generation_id: int,
                                  force_complete: Callable[[], bool]) -> bool:
        if generation_id != group.generation_id or group.state in (Dead, Empty,
                                                                    PreparingRebalance):
            return force_complete()
        return force_complete() if group.has_received_sync_from_all_members() else False

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        if generation_id != group.generation_id:
            log.error("Received unexpected notification of sync expiration for %s with an old "
                      "generation %d while the group has %d.", group.group_id, generation_id,
                      group.generation_id)
        elif group.state in (Dead, Empty, PreparingRebalance):
            log.error("Received unexpected notification of sync expiration after group %s "
                      "already transitioned to the %s state.", group.group_id, group.state)
        elif not group.has_received_sync_from_all_members():
            pending = set(group.pending_sync_members)
            for member_id in pending:
                self._remove_heartbeat_for_leaving_member(group, group.get(member_id))
                group.remove(member_id)
            log.debug("Group %s removed members who haven't sent their sync request: %s",
                      group.group_id, pending)
            self._prepare_rebalance(group, f"Removing {pending} on pending sync request "
                                           "expiration")

    # called by DelayedHeartbeat
    def try_complete_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool,
                               force_complete: Callable[[], bool]) -> bool:
        if group.is_(Dead):
            return force_complete()
        if is_pending:
            return force_complete() if group.has(member_id) else False
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat() or member.is_leaving:
            return force_complete()
        return False

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str,
                            is_pending: bool) -> None:
        if group.is_(Dead):
            log.info("Received notification of heartbeat expiration for member %s after group "
                     "%s had already been unloaded or deleted.", member_id, group.group_id)
        elif is_pending:
            log.info("Pending member %s in group %s has been removed after session timeout "
                     "expiration.", member_id, group.group_id)
            self._remove_pending_member_and_update_group(group, member_id)
        elif not group.has(member_id):
            log.debug("Member %s has already been removed from the group.", member_id)
        else:
            member = group.get(member_id)
            if not member.has_satisfied_heartbeat():
                log.info("Member %s in group %s has failed, removing it from the group",
                         member_id, group.group_id)
                self._remove_member_and_update_group(
                    group, member, f"removing member {member_id} on heartbeat expiration")
