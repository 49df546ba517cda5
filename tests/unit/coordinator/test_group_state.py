"""Group states, membership and protocol selection (Kafka's GroupMetadata / MemberMetadata),
without sockets: every transition against a hand list from Kafka 2.8, the vote, leader
election, static members, offsets expiration (S-7.4)."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from odradek.coordinator.group import (
    VALID_PREVIOUS_STATES,
    CommitRecordMetadataAndOffset,
    CompletingRebalance,
    Dead,
    Empty,
    GroupMetadata,
    GroupState,
    InvalidStateTransition,
    JoinGroupResult,
    MemberMetadata,
    PreparingRebalance,
    Stable,
    SyncGroupResult,
    is_valid_transition,
    select_protocol,
)
from odradek.coordinator.offsets import OffsetAndMetadata

# Kafka 2.8 GroupMetadata.scala, each state's validPreviousStates, written out as (from, to).
KAFKA_VALID = {
    (Stable, PreparingRebalance), (CompletingRebalance, PreparingRebalance),
    (Empty, PreparingRebalance),
    (PreparingRebalance, CompletingRebalance),
    (CompletingRebalance, Stable),
    (PreparingRebalance, Empty),
    (Stable, Dead), (PreparingRebalance, Dead), (CompletingRebalance, Dead), (Empty, Dead),
    (Dead, Dead),
}
ALL = list(GroupState)


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def member(member_id: str, protocols: list[tuple[str, bytes]] | None = None,
           instance: str | None = None, rebalance_ms: int = 1000,
           session_ms: int = 500) -> MemberMetadata:
    return MemberMetadata(member_id, instance, "client", "/127.0.0.1", rebalance_ms, session_ms,
                          "consumer", protocols or [("range", b"r"), ("roundrobin", b"rr")])


def group_in(state: GroupState, clock: Clock | None = None) -> GroupMetadata:
    g = GroupMetadata("g", Empty, clock or Clock())
    g.state = state  # set directly: the table is what is under test
    return g


# -- the transition table --------------------------------------------------------------------------

def test_table_matches_kafka() -> None:
    table = {(prev, target) for target, prevs in VALID_PREVIOUS_STATES.items() for prev in prevs}
    assert table == KAFKA_VALID
    assert set(VALID_PREVIOUS_STATES) == set(GroupState)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(ALL, ALL)),
                         ids=lambda s: s.value)
def test_every_transition(current: GroupState, target: GroupState) -> None:
    clock = Clock()
    g = group_in(current, clock)
    clock.now += 5
    valid = (current, target) in KAFKA_VALID
    assert is_valid_transition(current, target) is valid
    if valid:
        g.transition_to(target)
        assert g.state is target
        assert g.current_state_timestamp == clock.now  # stamped at each transition
    else:
        with pytest.raises(InvalidStateTransition):
            g.transition_to(target)
        assert g.state is current


@pytest.mark.parametrize("state", ALL, ids=lambda s: s.value)
def test_can_rebalance(state: GroupState) -> None:
    assert group_in(state).can_rebalance() is (state in (Stable, CompletingRebalance, Empty))


def test_state_names_are_kafkas() -> None:
    assert [s.value for s in ALL] == ["Empty", "PreparingRebalance", "CompletingRebalance",
                                      "Stable", "Dead"]


# -- protocol selection ----------------------------------------------------------------------------

def test_select_protocol_by_vote() -> None:
    a = member("a", [("range", b""), ("roundrobin", b"")])
    b = member("b", [("roundrobin", b""), ("range", b"")])
    c = member("c", [("roundrobin", b""), ("sticky", b""), ("range", b"")])
    assert select_protocol([a, b, c]) == "roundrobin"  # 2 votes to 1
    # sticky is not supported by everyone, so c votes for its next common choice
    d = member("d", [("sticky", b""), ("range", b"")])
    assert select_protocol([a, d]) == "range"


def test_select_protocol_tie_is_deterministic() -> None:
    a = member("a", [("range", b""), ("roundrobin", b"")])
    b = member("b", [("roundrobin", b""), ("range", b"")])
    assert select_protocol([a, b]) == "range"  # first vote cast wins the tie
    assert select_protocol([b, a]) == "roundrobin"


def test_select_protocol_needs_members_and_a_common_protocol() -> None:
    with pytest.raises(ValueError):
        select_protocol([])
    with pytest.raises(ValueError):
        select_protocol([member("a", [("x", b"")]), member("b", [("y", b"")])])


def test_supports_protocols() -> None:
    g = GroupMetadata("g", Empty, Clock())
    assert g.supports_protocols("consumer", {"range"})
    assert not g.supports_protocols("", {"range"})
    assert not g.supports_protocols("consumer", set())
    g.add(member("a", [("range", b""), ("roundrobin", b"")]))
    g.transition_to(PreparingRebalance)
    assert g.supports_protocols("consumer", {"roundrobin", "sticky"})
    assert not g.supports_protocols("consumer", {"sticky"})
    assert not g.supports_protocols("connect", {"range"})


def test_member_vote_matches_and_metadata() -> None:
    m = member("a", [("range", b"R"), ("roundrobin", b"RR")])
    assert m.vote({"roundrobin"}) == "roundrobin"
    assert m.vote({"roundrobin", "range"}) == "range"
    assert m.matches([("range", b"R"), ("roundrobin", b"RR")])
    assert not m.matches([("range", b"R")])
    assert not m.matches([("range", b"X"), ("roundrobin", b"RR")])
    assert m.metadata("roundrobin") == b"RR"
    with pytest.raises(ValueError):
        m.metadata("sticky")


def test_heartbeat_satisfaction() -> None:
    m = member("a")
    assert not m.has_satisfied_heartbeat()
    m.awaiting_join = lambda r: None
    assert m.has_satisfied_heartbeat()  # waiting for a rebalance counts as alive
    m.is_new = True
    assert not m.has_satisfied_heartbeat()  # except for a new member
    m.heartbeat_satisfied = True
    assert m.has_satisfied_heartbeat()


# -- membership ------------------------------------------------------------------------------------

def test_first_member_leads_and_leadership_moves_on_removal() -> None:
    g = GroupMetadata("g", Empty, Clock())
    g.add(member("a"))
    g.add(member("b"))
    assert g.leader_id == "a" and g.protocol_type == "consumer"
    g.remove("a")
    assert g.leader_id == "b"
    g.remove("b")
    assert g.leader_id is None and g.size == 0


def test_join_accounting_and_pending_members() -> None:
    g = GroupMetadata("g", Empty, Clock())
    results: list[JoinGroupResult] = []
    g.add(member("a"), results.append)
    g.add(member("b"))
    assert g.num_members_awaiting_join == 1
    assert not g.has_all_members_joined()
    g.update_member(g.get("b"), [("range", b"")], results.append)
    assert g.has_all_members_joined()
    g.pending_members.add("c")
    assert g.is_pending_member("c")
    assert not g.has_all_members_joined()  # a member id was handed out, it must join first
    g.pending_members.discard("c")
    g.maybe_invoke_join_callback(g.get("a"), JoinGroupResult("a", ErrorCode.none))
    assert [r.member_id for r in results] == ["a"] and g.num_members_awaiting_join == 1
    assert g.supported_protocols["range"] == 2 and g.supported_protocols["roundrobin"] == 1


def test_leader_kept_if_rejoined_else_any_rejoined_member() -> None:
    g = GroupMetadata("g", Empty, Clock())
    g.add(member("a"))
    g.add(member("b"), lambda r: None)
    assert g.maybe_elect_new_joined_leader()
    assert g.leader_id == "b"  # a did not rejoin
    g.add(member("c"))
    g.get("b").awaiting_join = None
    g.num_members_awaiting_join = 0
    assert not g.maybe_elect_new_joined_leader()  # nobody rejoined


def test_init_next_generation() -> None:
    g = GroupMetadata("g", Empty, Clock())
    g.add(member("a", [("range", b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t")]))
    g.transition_to(PreparingRebalance)
    g.init_next_generation()
    assert (g.generation_id, g.state, g.protocol_name) == (1, CompletingRebalance, "range")
    assert g.subscribed_topics == {"t"}
    assert [m.member_id for m in g.current_member_metadata()] == ["a"]
    g.transition_to(PreparingRebalance)
    g.remove("a")
    g.init_next_generation()
    assert (g.generation_id, g.state, g.protocol_name) == (2, Empty, None)
    assert g.subscribed_topics == set()


def test_static_member_replacement_fences_the_old_id() -> None:
    g = GroupMetadata("g", Empty, Clock())
    old = member("old", instance="i1")
    join_results: list[JoinGroupResult] = []
    sync_results: list[SyncGroupResult] = []
    g.add(old, join_results.append)
    g.static_members["i1"] = "old"
    old.awaiting_sync = sync_results.append
    old.assignment = b"mine"
    replaced = g.replace_group_instance("old", "new", "i1")
    assert replaced is old and replaced.member_id == "new" and replaced.assignment == b"mine"
    assert g.leader_id == "new" and g.static_member_id("i1") == "new"
    assert not g.has("old") and g.has("new")
    assert join_results[0].error == ErrorCode.fenced_instance_id
    assert sync_results[0].error == ErrorCode.fenced_instance_id
    assert g.is_static_member_fenced("old", "i1")
    assert not g.is_static_member_fenced("new", "i1")
    assert not g.is_static_member_fenced("whoever", None)


def test_summary_shows_metadata_only_when_stable() -> None:
    g = GroupMetadata("g", Empty, Clock())
    g.add(member("a", [("range", b"M")]))
    g.transition_to(PreparingRebalance)
    assert g.summary().members[0].metadata == b""
    assert g.summary().protocol == ""
    g.init_next_generation()
    g.get("a").assignment = b"A"
    g.transition_to(Stable)
    s = g.summary()
    assert (s.state, s.protocol_type, s.protocol) == ("Stable", "consumer", "range")
    assert (s.members[0].metadata, s.members[0].assignment) == (b"M", b"A")


# -- offsets ---------------------------------------------------------------------------------------

def commit(g: GroupMetadata, topic: str, partition: int, commit_ts: int,
           expire: int | None = None, batch_offset: int = 0) -> None:
    om = OffsetAndMetadata(10, commit_timestamp=commit_ts, expire_timestamp=expire)
    g.prepare_offset_commit({(topic, partition): om})
    g.on_offset_commit_append((topic, partition), CommitRecordMetadataAndOffset(batch_offset, om))


def test_offset_commit_bookkeeping() -> None:
    g = GroupMetadata("g", Empty, Clock())
    om = OffsetAndMetadata(5, commit_timestamp=1)
    g.prepare_offset_commit({("t", 0): om})
    assert g.has_pending_offset_commits(("t", 0)) and g.has_offsets()
    assert g.offset(("t", 0)) is None
    g.on_offset_commit_append(("t", 0), CommitRecordMetadataAndOffset(100, om))
    assert g.offset(("t", 0)) == om and not g.has_pending_offset_commits(("t", 0))
    # an older record (lower batch offset) does not replace a newer one
    older = OffsetAndMetadata(3, commit_timestamp=2)
    g.prepare_offset_commit({("t", 0): older})
    g.on_offset_commit_append(("t", 0), CommitRecordMetadataAndOffset(50, older))
    assert g.offset(("t", 0)) == om
    failed = OffsetAndMetadata(7, commit_timestamp=3)
    g.prepare_offset_commit({("t", 1): failed})
    g.fail_pending_offset_write(("t", 1), failed)
    assert g.offset(("t", 1)) is None and not g.has_pending_offset_commits(("t", 1))
    assert g.remove_offsets([("t", 0), ("t", 9)]) == {("t", 0): om}
    assert not g.has_offsets()


RETENTION = 60_000


def test_empty_group_offsets_expire_from_when_it_became_empty() -> None:
    clock = Clock(1000)
    g = GroupMetadata("g", Empty, clock)
    g.add(member("a"))
    g.transition_to(PreparingRebalance)
    commit(g, "t", 0, commit_ts=1000)
    clock.now = 500_000  # the group empties long after the commit
    g.remove("a")
    g.init_next_generation()
    assert g.is_(Empty) and g.current_state_timestamp == 500_000
    assert g.remove_expired_offsets(500_000 + RETENTION - 1, RETENTION) == {}
    assert set(g.remove_expired_offsets(500_000 + RETENTION, RETENTION)) == {("t", 0)}


def test_stable_consumer_group_keeps_subscribed_topics() -> None:
    clock = Clock(1000)
    sub = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t"
    g = GroupMetadata("g", Empty, clock)
    g.add(member("a", [("range", sub)]))
    g.transition_to(PreparingRebalance)
    g.init_next_generation()
    g.transition_to(Stable)
    commit(g, "t", 0, commit_ts=1000)
    commit(g, "old-topic", 0, commit_ts=1000)
    expired = g.remove_expired_offsets(1000 + RETENTION, RETENTION)
    assert set(expired) == {("old-topic", 0)}
    assert g.offset(("t", 0)) is not None


def test_simple_consumer_offsets_expire_per_commit_and_explicit_expiry_wins() -> None:
    g = GroupMetadata("g", Empty, Clock())  # no protocol type: commits only
    commit(g, "t", 0, commit_ts=1000)
    commit(g, "t", 1, commit_ts=50_000)
    commit(g, "t", 2, commit_ts=1000, expire=10_000_000)
    assert set(g.remove_expired_offsets(1000 + RETENTION, RETENTION)) == {("t", 0)}
    assert set(g.remove_expired_offsets(10_000_000, RETENTION)) == {("t", 1), ("t", 2)}


def test_pending_commits_never_expire_and_rebalancing_groups_keep_offsets() -> None:
    g = GroupMetadata("g", Empty, Clock())
    commit(g, "t", 0, commit_ts=0)
    g.prepare_offset_commit({("t", 0): OffsetAndMetadata(11)})
    assert g.remove_expired_offsets(10**12, RETENTION) == {}
    g2 = GroupMetadata("g2", Empty, Clock())
    g2.add(member("a"))
    g2.transition_to(PreparingRebalance)
    commit(g2, "t", 0, commit_ts=0)
    assert g2.remove_expired_offsets(10**12, RETENTION) == {}  # neither Empty nor Stable


def test_dead_group_cannot_come_back() -> None:
    g = GroupMetadata("g", Empty, Clock())
    g.transition_to(Dead)
    for target in (Empty, PreparingRebalance, CompletingRebalance, Stable):
        with pytest.raises(InvalidStateTransition):
            g.transition_to(target)
