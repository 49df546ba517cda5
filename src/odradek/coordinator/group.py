"""Group and member metadata (Kafka's GroupMetadata and MemberMetadata), pure: no I/O, no loop.

A group moves through five states; a transition is valid only from the states Kafka lists as
the target's valid previous states (`VALID_PREVIOUS_STATES`, the table), anything else raises
`InvalidStateTransition`:

  PreparingRebalance  <- Stable, CompletingRebalance, Empty   (a join, a leave, a failure)
  CompletingRebalance <- PreparingRebalance                   (the join phase completed)
  Stable              <- CompletingRebalance                  (the leader's assignment arrived)
  Empty               <- PreparingRebalance                   (the last member left)
  Dead                <- every state, Dead included           (unloaded, deleted, expired)

Groups loaded from `__consumer_offsets` start in Stable (members) or Empty (none), as in Kafka.

Offsets (Kafka's bookkeeping, KIP-98): a plain commit is pending from its append until the
append completes (`pending_offset_commits`, by partition); a transactional commit
(TxnOffsetCommit) is pending by producer id from its append until the transaction's COMMIT or
ABORT marker lands on the group's `__consumer_offsets` partition
(`pending_txn_offset_commits`: producer id -> partition -> the offset and, once appended, the
log offset of its batch). A COMMIT makes a producer's offsets visible unless the cache already
holds a commit from a later batch; an ABORT drops them. A producer's entry goes away with its
marker (or its failed append), so the map does not grow with completed transactions.
Member callbacks (`awaiting_join`, `awaiting_sync`) are plain callables set by the coordinator;
the clock is injected, so the whole module is deterministic under test.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from kio.schema.errors import ErrorCode

from ..common import TopicPartition, entropy
from .offsets import OffsetAndMetadata, SchemaError, subscribed_topics

CONSUMER_PROTOCOL_TYPE = "consumer"
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
NO_PROTOCOL = ""
NO_LEADER = ""

log = logging.getLogger("odradek.coordinator.group")



class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


Empty = GroupState.EMPTY
PreparingRebalance = GroupState.PREPARING_REBALANCE
CompletingRebalance = GroupState.COMPLETING_REBALANCE
Stable = GroupState.STABLE
Dead = GroupState.DEAD

# target state -> the states it may be entered from (Kafka's GroupState.validPreviousStates)
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    PreparingRebalance: frozenset({Stable, CompletingRebalance, Empty}),
    CompletingRebalance: frozenset({PreparingRebalance}),
    Stable: frozenset({CompletingRebalance}),
    Empty: frozenset({PreparingRebalance}),
    Dead: frozenset({Stable, PreparingRebalance, CompletingRebalance, Empty, Dead}),
}


class InvalidStateTransition(RuntimeError):
    pass


def is_valid_transition(current: GroupState, target: GroupState) -> bool:
    return current in VALID_PREVIOUS_STATES[target]


# -- results handed to the API layer -----------------------------------------------------------

@dataclass(slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(slots=True)
class JoinGroupResult:
    member_id: str
    error: int
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = NO_LEADER
    members: list[JoinMember] = field(default_factory=list)


@dataclass(slots=True)
class SyncGroupResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


JoinCallback = Callable[[JoinGroupResult], None]
SyncCallback = Callable[[SyncGroupResult], None]


@dataclass(slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupSummary:
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberSummary]


@dataclass(slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str


# -- members --------------------------------------------------------------------------------------

class MemberMetadata:
    """One member: its protocols (ordered by preference), timeouts, assignment, and the pending
    JoinGroup/SyncGroup callbacks while it waits for a rebalance phase to end."""

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str,
                 client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                 protocol_type: str, supported_protocols: list[tuple[str, bytes]],
                 assignment: bytes = b"") -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols = list(supported_protocols)
        self.assignment = assignment
        self.awaiting_join: JoinCallback | None = None
        self.awaiting_sync: SyncCallback | None = None
        self.is_leaving = False
        self.is_new = False
        # Set when a heartbeat (or anything proving liveness) arrives; the DelayedHeartbeat
        # watching this member completes instead of expiring.
        self.heartbeat_satisfied = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.supported_protocols}

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return self.heartbeat_satisfied  # new members may expire while awaiting join
        if self.is_awaiting_join or self.is_awaiting_sync:
            return True
        return self.heartbeat_satisfied

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return list(protocols) == self.supported_protocols

    def vote(self, candidates: set[str]) -> str:
        """The first protocol in this member's preference order that all members support."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def summary(self, protocol: str) -> MemberSummary:
        return MemberSummary(self.member_id, self.group_instance_id, self.client_id,
                             self.client_host, self.metadata(protocol), self.assignment)

    def summary_no_metadata(self) -> MemberSummary:
        return MemberSummary(self.member_id, self.group_instance_id, self.client_id,
                             self.client_host, b"", b"")

    def __repr__(self) -> str:
        return (f"MemberMetadata(memberId={self.member_id}, groupInstanceId="
                f"{self.group_instance_id}, clientId={self.client_id}, clientHost="
                f"{self.client_host}, sessionTimeoutMs={self.session_timeout_ms}, "
                f"rebalanceTimeoutMs={self.rebalance_timeout_ms}, supportedProtocols="
                f"{[p for p, _ in self.supported_protocols]})")


def select_protocol(members: Iterable[MemberMetadata]) -> str:
    """The group protocol: among the protocols every member supports, each member votes for its
    most preferred one and the most votes win (Kafka's selectProtocol). Kafka breaks a tie in
    hash-map order; here the tie goes to the protocol that got its first vote earliest (members
    in join order), so the choice is deterministic."""
    members = list(members)
    if not members:
        raise ValueError("Cannot select protocol for empty group")
    counts: Counter[str] = Counter()
    for m in members:
        counts.update(m.protocol_names())
    candidates = {p for p, n in counts.items() if n == len(members)}
    votes = [m.vote(candidates) for m in members]
    tally = Counter(votes)
    first_vote = {p: votes.index(p) for p in tally}
    return min(tally, key=lambda p: (-tally[p], first_vote[p]))


# -- offsets cached with the batch offset of their commit record --------------------------------

@dataclass(frozen=True, slots=True)
class CommitRecordMetadataAndOffset:
    """A committed offset and the log offset of the batch that carried it (so the latest commit
    wins even if compaction reorders what a reload sees)."""

    appended_batch_offset: int | None
    offset_and_metadata: OffsetAndMetadata

    def older_than(self, other: CommitRecordMetadataAndOffset) -> bool:
        return (self.appended_batch_offset or 0) < (other.appended_batch_offset or 0)


# -- groups ---------------------------------------------------------------------------------------

class GroupMetadata:
    def __init__(self, group_id: str, initial_state: GroupState,
                 clock: Callable[[], int]) -> None:
        self.group_id = group_id
        self._clock = clock
        self.state = initial_state
        self.current_state_timestamp: int | None = clock()
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: set[str] = set()
        self.num_members_awaiting_join = 0
        self.supported_protocols: Counter[str] = Counter()
        self.offsets: dict[TopicPartition, CommitRecordMetadataAndOffset] = {}
        self.pending_offset_commits: dict[TopicPartition, OffsetAndMetadata] = {}
        self.pending_txn_offset_commits: dict[
            int, dict[TopicPartition, CommitRecordMetadataAndOffset]] = {}
        self.received_txn_offset_commits = False
        self.received_consumer_offset_commits = False
        self.pending_sync_members: set[str] = set()
        self.subscribed_topics: set[str] | None = None
        self.new_member_added = False

    @classmethod
    def load(cls, group_id: str, initial_state: GroupState, generation_id: int,
             protocol_type: str, protocol_name: str | None, leader_id: str | None,
             current_state_timestamp: int | None, members: Iterable[MemberMetadata],
             clock: Callable[[], int]) -> GroupMetadata:
        """A group as read back from its group metadata record (Kafka's GroupMetadata.loadGroup)."""
        group = cls(group_id, initial_state, clock)
        group.generation_id = generation_id
        group.protocol_type = protocol_type or None
        group.protocol_name = protocol_name
        group.leader_id = leader_id
        group.current_state_timestamp = current_state_timestamp
        for member in members:
            group.add(member)
            if member.is_static:
                group.static_members[member.group_instance_id] = member.member_id  # type: ignore[index]
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    # -- state ------------------------------------------------------------------------------
    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, target: GroupState) -> None:
        if not is_valid_transition(self.state, target):
            raise InvalidStateTransition(
                f"Group {self.group_id} should be in the "
                f"{','.join(sorted(s.value for s in VALID_PREVIOUS_STATES[target]))} states "
                f"before moving to {target} state. Instead it is in {self.state} state")
        self.state = target
        self.current_state_timestamp = self._clock()

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[PreparingRebalance]

    # -- membership -------------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    def __len__(self) -> int:
        return len(self.members)

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def add(self, member: MemberMetadata, callback: JoinCallback | None = None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise ValueError("member protocol type differs from the group's")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names())
        member.awaiting_join = callback
        if member.is_awaiting_join:
            self.num_members_awaiting_join += 1

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(member.protocol_names())
            self.supported_protocols += Counter()  # drop zero counts
            if member.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_sync_members.discard(member_id)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined; else any rejoined member leads. False if the group has
        no leader or nobody rejoined."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def replace_group_instance(self, old_member_id: str, new_member_id: str,
                               group_instance_id: str) -> MemberMetadata:
        """Static membership: the member keeps everything but gets a new member id; whoever
        still waits under the old id is fenced."""
        member = self.members.pop(old_member_id)
        self.maybe_invoke_join_callback(member, JoinGroupResult(old_member_id,
                                                                ErrorCode.fenced_instance_id))
        self.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.fenced_instance_id))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return member

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members and member_id not in self.members

    def has_static_member(self, group_instance_id: str | None) -> bool:
        return group_instance_id is not None and group_instance_id in self.static_members

    def static_member_id(self, group_instance_id: str) -> str:
        return self.static_members[group_instance_id]

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        return (self.has_static_member(group_instance_id)
                and self.static_members[group_instance_id] != member_id)  # type: ignore[index]

    def add_pending_sync_member(self, member_id: str) -> None:
        if member_id not in self.members:
            raise ValueError(f"{member_id} is not a member of {self.group_id}")
        self.pending_sync_members.add(member_id)

    def remove_pending_sync_member(self, member_id: str) -> None:
        self.pending_sync_members.discard(member_id)

    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @staticmethod
    def generate_member_id(client_id: str, group_instance_id: str | None) -> str:
        prefix = group_instance_id if group_instance_id is not None else client_id
        return f"{prefix}-{entropy.uuid4()}"

    # -- protocols --------------------------------------------------------------------------
    def select_protocol(self) -> str:
        return select_protocol(self.members.values())

    def supports_protocols(self, member_protocol_type: str, protocols: set[str]) -> bool:
        if self.is_(Empty):
            return bool(member_protocol_type) and bool(protocols)
        return (self.protocol_type == member_protocol_type
                and any(self.supported_protocols[p] == len(self.members) for p in protocols))

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics |= subscribed_topics(m.metadata(self.protocol_name))
        except (SchemaError, ValueError):
            return None  # unknown to the coordinator: treated as subscribed to everything
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.subscribed_topics is None or topic in self.subscribed_topics

    def update_member(self, member: MemberMetadata, protocols: list[tuple[str, bytes]],
                      callback: JoinCallback | None) -> None:
        self.supported_protocols.subtract(member.protocol_names())
        member.supported_protocols = list(protocols)
        self.supported_protocols.update(member.protocol_names())
        self.supported_protocols += Counter()
        if callback is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member.awaiting_join = callback

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinGroupResult) -> None:
        if member.awaiting_join is not None:
            callback, member.awaiting_join = member.awaiting_join, None
            self.num_members_awaiting_join -= 1
            callback(result)

    def maybe_invoke_sync_callback(self, member: MemberMetadata, result: SyncGroupResult) -> bool:
        if member.awaiting_sync is not None:
            callback, member.awaiting_sync = member.awaiting_sync, None
            callback(result)
            return True
        return False

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(CompletingRebalance)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(Empty)
        self.received_consumer_offset_commits = False
        self.received_txn_offset_commits = False
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> list[JoinMember]:
        if self.state in (Dead, PreparingRebalance) or self.protocol_name is None:
            raise InvalidStateTransition(
                f"Cannot obtain member metadata for group in state {self.state}")
        return [JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()]

    def summary(self) -> GroupSummary:
        if self.is_(Stable):
            protocol = self.protocol_name or ""
            return GroupSummary(self.state.value, self.protocol_type or "", protocol,
                                [m.summary(protocol) for m in self.members.values()])
        return GroupSummary(self.state.value, self.protocol_type or "", NO_PROTOCOL,
                            [m.summary_no_metadata() for m in self.members.values()])

    def overview(self) -> GroupOverview:
        return GroupOverview(self.group_id, self.protocol_type or "", self.state.value)

    # -- offsets ----------------------------------------------------------------------------
    def initialize_offsets(self, offsets: dict[TopicPartition, CommitRecordMetadataAndOffset],
                           pending_txn_offsets: dict[
                               int, dict[TopicPartition, CommitRecordMetadataAndOffset]]
                           | None = None) -> None:
        self.offsets.update(offsets)
        for producer_id, producer_offsets in (pending_txn_offsets or {}).items():
            if producer_offsets:
                self.pending_txn_offset_commits.setdefault(producer_id, {}).update(
                    producer_offsets)

    def prepare_offset_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        self.received_consumer_offset_commits = True
        self.pending_offset_commits.update(offsets)

    def on_offset_commit_append(self, tp: TopicPartition,
                                committed: CommitRecordMetadataAndOffset) -> None:
        if tp in self.pending_offset_commits:
            current = self.offsets.get(tp)
            if current is None or current.older_than(committed):
                self.offsets[tp] = committed
            if self.pending_offset_commits[tp] == committed.offset_and_metadata:
                del self.pending_offset_commits[tp]

    def fail_pending_offset_write(self, tp: TopicPartition, om: OffsetAndMetadata) -> None:
        if self.pending_offset_commits.get(tp) == om:
            del self.pending_offset_commits[tp]

    def has_pending_offset_commits(self, tp: TopicPartition) -> bool:
        """A plain or a transactional commit of `tp` not yet complete (Kafka's
        hasPendingOffsetCommitsForTopicPartition): OffsetFetch with require_stable answers
        UNSTABLE_OFFSET_COMMIT for it."""
        return tp in self.pending_offset_commits or any(
            tp in pending for pending in self.pending_txn_offset_commits.values())

    # -- transactional offsets (KIP-98) -------------------------------------------------------
    def prepare_txn_offset_commit(self, producer_id: int,
                                  offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """The producer's offsets are pending from now on (no log offset yet)."""
        self.received_txn_offset_commits = True
        pending = self.pending_txn_offset_commits.setdefault(producer_id, {})
        for tp, om in offsets.items():
            pending[tp] = CommitRecordMetadataAndOffset(None, om)

    def has_received_consistent_offset_commits(self) -> bool:
        """False once this generation got both plain and transactional commits (Kafka warns)."""
        return not (self.received_consumer_offset_commits and self.received_txn_offset_commits)

    def on_txn_offset_commit_append(self, producer_id: int, tp: TopicPartition,
                                    committed: CommitRecordMetadataAndOffset) -> None:
        """The batch carrying the producer's offset for `tp` is in the log at
        `committed.appended_batch_offset` (ignored if the entry is gone or was replaced)."""
        pending = self.pending_txn_offset_commits.get(producer_id)
        if pending is not None:
            current = pending.get(tp)
            if current is not None and current.offset_and_metadata == \
                    committed.offset_and_metadata:
                pending[tp] = committed

    def fail_pending_txn_offset_commit(self, producer_id: int, tp: TopicPartition) -> None:
        """The append failed: the client retries (maybe elsewhere); forget the entry."""
        pending = self.pending_txn_offset_commits.get(producer_id)
        if pending is not None:
            pending.pop(tp, None)
            if not pending:
                del self.pending_txn_offset_commits[producer_id]

    def complete_pending_txn_offset_commit(self, producer_id: int, is_commit: bool
                                           ) -> list[TopicPartition]:
        """The producer's COMMIT (offsets become visible unless a later batch already set the
        partition's offset) or ABORT (dropped) marker was written; returns the partitions whose
        offset changed. An entry whose batch was never appended cannot be ordered and is
        dropped (Kafka raises IllegalStateException there)."""
        pending = self.pending_txn_offset_commits.pop(producer_id, None)
        changed: list[TopicPartition] = []
        if not is_commit or pending is None:
            return changed
        for tp, committed in pending.items():
            if committed.appended_batch_offset is None:
                log.error("Trying to complete a transactional offset commit for producerId %d "
                          "and groupId %s even though the offset commit record itself hasn't "
                          "been appended to the log.", producer_id, self.group_id)
                continue
            current = self.offsets.get(tp)
            if current is None or current.older_than(committed):
                self.offsets[tp] = committed
                changed.append(tp)
        return changed

    @property
    def active_producers(self) -> set[int]:
        return set(self.pending_txn_offset_commits)

    def has_pending_offset_commits_from_producer(self, producer_id: int) -> bool:
        return producer_id in self.pending_txn_offset_commits

    def remove_offsets(self, partitions: Iterable[TopicPartition]
                       ) -> dict[TopicPartition, OffsetAndMetadata]:
        removed = {}
        for tp in partitions:
            self.pending_offset_commits.pop(tp, None)
            for producer_id, pending in list(self.pending_txn_offset_commits.items()):
                pending.pop(tp, None)
                if not pending:
                    del self.pending_txn_offset_commits[producer_id]
            found = self.offsets.pop(tp, None)
            if found is not None:
                removed[tp] = found.offset_and_metadata
        return removed

    def remove_all_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return self.remove_offsets(list(self.offsets))

    def remove_expired_offsets(self, now_ms: int, retention_ms: int
                               ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Kafka 2.1+ expiration (KIP-211): an Empty group's offsets expire `retention_ms` after
        it became Empty (or after the commit if that time is unknown); a Stable consumer
        group's offsets of topics nobody subscribes to expire `retention_ms` after their commit;
        a group without a protocol type (simple consumers) expires each offset `retention_ms`
        after its commit; an explicit expire timestamp (OffsetCommit v1-v4) wins. Offsets with a
        commit in flight never expire."""

        def expired(base: Callable[[CommitRecordMetadataAndOffset], int],
                    subscribed: set[str] | frozenset[str] = frozenset()
                    ) -> dict[TopicPartition, OffsetAndMetadata]:
            out = {}
            for tp, c in self.offsets.items():
                topic, _ = tp  # plain (topic, partition) pairs work as well
                if topic in subscribed or tp in self.pending_offset_commits:
                    continue
                om = c.offset_and_metadata
                if om.expire_timestamp is None:
                    due = now_ms - base(c) >= retention_ms
                else:
                    due = now_ms >= om.expire_timestamp
                if due:
                    out[tp] = om
            return out

        if self.protocol_type is not None and self.is_(Empty):
            state_ts = self.current_state_timestamp
            result = expired(lambda c: state_ts if state_ts is not None
                             else c.offset_and_metadata.commit_timestamp)
        elif (self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None
              and self.is_(Stable)):
            result = expired(lambda c: c.offset_and_metadata.commit_timestamp,
                             self.subscribed_topics)
        elif self.protocol_type is None:
            result = expired(lambda c: c.offset_and_metadata.commit_timestamp)
        else:
            result = {}
        for tp in result:
            del self.offsets[tp]
        return result

    def offset(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        found = self.offsets.get(tp)
        return None if found is None else found.offset_and_metadata

    def all_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: c.offset_and_metadata for tp, c in self.offsets.items()}

    def has_offsets(self) -> bool:
        return (bool(self.offsets) or bool(self.pending_offset_commits)
                or bool(self.pending_txn_offset_commits))

    def __repr__(self) -> str:
        return (f"GroupMetadata(groupId={self.group_id}, generation={self.generation_id}, "
                f"protocolType={self.protocol_type}, currentState={self.state}, "
                f"members={list(self.members.values())})")
