"""Fetch sessions (KIP-227): the broker's cache and contexts (server/fetch_session.py) and the
fetching side's handler (client/fetch_session_handler.py), alone and against each other."""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from odradek.client.fetch_session_handler import FetchSessionHandler
from odradek.server.fetch_session import (
    EVICTION_MS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionlessFetchContext,
    new_context,
    next_epoch,
)

TP = tuple[str, int]


@dataclass(frozen=True)
class Req:
    fetch_offset: int
    max_bytes: int = 1024


@dataclass
class Res:
    error: ErrorCode = ErrorCode.none
    high_watermark: int = 0
    last_stable_offset: int = 0
    log_start_offset: int = 0
    size: int = 0
    preferred_read_replica: int = -1


A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def full(cache: FetchSessionCache[Req], data: dict[TP, Req], results: dict[TP, Res],
         now: int = 0, follower: bool = False) -> int:
    ctx = new_context(cache, 0, INITIAL_EPOCH, data, [], follower, now)
    assert isinstance(ctx, FullFetchContext)
    answer = ctx.answer(results, now)
    assert answer.error == ErrorCode.none and answer.partitions == results
    return answer.session_id


def test_next_epoch() -> None:
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1  # wraps past 0 (0 means a full fetch)
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_full_fetch_opens_a_session_and_incremental_answers_only_news() -> None:
    cache: FetchSessionCache[Req] = FetchSessionCache(10)
    results = {A0: Res(high_watermark=5), A1: Res(high_watermark=7), B0: Res()}
    sid = full(cache, {A0: Req(0), A1: Req(0), B0: Req(0)}, results)
    assert sid != INVALID_SESSION_ID and len(cache) == 1 and cache.num_partitions == 3
    # nothing changed: an empty answer, epoch 1 then 2
    ctx = new_context(cache, sid, 1, {}, [], False, 1)
    assert isinstance(ctx, IncrementalFetchContext)
    assert set(ctx.partitions()) == {A0, A1, B0}  # the whole session is read
    answer = ctx.answer({A0: Res(high_watermark=5), A1: Res(high_watermark=7), B0: Res()}, 1)
    assert (answer.error, answer.session_id, answer.partitions) == (ErrorCode.none, sid, {})
    # A0 sends a new offset; A1's HW moves; B0 errs; records in A0
    ctx = new_context(cache, sid, 2, {A0: Req(5)}, [], False, 2)
    assert ctx.partitions()[A0] == Req(5) and ctx.partitions()[A1] == Req(0)
    new = {A0: Res(high_watermark=5, size=10), A1: Res(high_watermark=8),
           B0: Res(ErrorCode.not_leader_or_follower, -1, -1, -1)}
    answer = ctx.answer(new, 2)
    assert answer.partitions == new
    # answered partitions went to the back of the line in that order
    assert list(cache.sessions[sid].partitions) == [A0, A1, B0]
    # B0's error reset its HW: the same good answer as before goes out again once
    ctx = new_context(cache, sid, 3, {}, [], False, 3)
    answer = ctx.answer({A0: Res(high_watermark=5), A1: Res(high_watermark=8), B0: Res()}, 3)
    assert list(answer.partitions) == [B0]


@pytest.mark.parametrize("change", ["last_stable_offset", "log_start_offset",
                                    "preferred_read_replica"])
def test_each_change_is_news(change: str) -> None:
    cached: CachedPartition[Req] = CachedPartition(Req(0))
    assert cached.must_respond(Res())  # first answer: -1 before
    assert not cached.must_respond(Res())
    assert cached.must_respond(Res(**{change: 3}))  # type: ignore[arg-type]


def test_session_errors() -> None:
    cache: FetchSessionCache[Req] = FetchSessionCache(10)
    sid = full(cache, {A0: Req(0)}, {A0: Res()})
    ctx = new_context(cache, sid + 1, 1, {}, [], False, 0)
    assert isinstance(ctx, SessionErrorContext)
    assert ctx.answer({}, 0).error == ErrorCode.fetch_session_id_not_found
    for wrong in (2, 5, 2**31 - 1):
        ctx = new_context(cache, sid, wrong, {A0: Req(1)}, [], False, 0)
        answer = ctx.answer({}, 0)
        assert answer.error == ErrorCode.invalid_fetch_session_epoch
        assert answer.session_id == INVALID_SESSION_ID and answer.partitions == {}
    assert cache.sessions[sid].partitions[A0].request == Req(0)  # untouched by bad requests
    assert new_context(cache, sid, 1, {}, [], False, 0).answer({A0: Res()}, 0).error == 0


def test_forget_update_and_close() -> None:
    cache: FetchSessionCache[Req] = FetchSessionCache(10)
    sid = full(cache, {A0: Req(0), A1: Req(0)}, {A0: Res(), A1: Res()})
    ctx = new_context(cache, sid, 1, {B0: Req(3)}, [A1], False, 0)
    assert set(ctx.partitions()) == {A0, B0} and cache.num_partitions == 2
    ctx.answer({A0: Res(), B0: Res()}, 0)
    # forgetting every partition closes the session: a sessionless answer
    ctx = new_context(cache, sid, 2, {}, [A0, B0], False, 0)
    assert isinstance(ctx, SessionlessFetchContext) and len(cache) == 0
    assert cache.num_partitions == 0
    # epoch -1 closes a session and stays sessionless; epoch 0 closes it and opens another
    sid = full(cache, {A0: Req(0)}, {A0: Res()})
    ctx = new_context(cache, sid, FINAL_EPOCH, {A0: Req(0)}, [], False, 0)
    assert isinstance(ctx, SessionlessFetchContext) and len(cache) == 0
    assert ctx.answer({A0: Res()}, 0).session_id == INVALID_SESSION_ID
    sid = full(cache, {A0: Req(0)}, {A0: Res()})
    sid2 = full(cache, {A0: Req(0)}, {A0: Res()})
    assert len(cache) == 2  # a plain full fetch (session id 0) does not close anything
    ctx = new_context(cache, sid, INITIAL_EPOCH, {A0: Req(0)}, [], False, 0)
    sid3 = ctx.answer({A0: Res()}, 0).session_id
    assert set(cache.sessions) == {sid2, sid3}


def test_answer_after_a_newer_request_is_invalid_epoch() -> None:
    """A delayed fetch completing after the client sent the session's next request (say after
    a timeout): its answer is INVALID_FETCH_SESSION_EPOCH, as Kafka's."""
    cache: FetchSessionCache[Req] = FetchSessionCache(10)
    sid = full(cache, {A0: Req(0)}, {A0: Res()})
    first = new_context(cache, sid, 1, {}, [], False, 0)
    second = new_context(cache, sid, 2, {}, [], False, 0)
    assert first.answer({A0: Res(size=5)}, 0).error == ErrorCode.invalid_fetch_session_epoch
    assert second.answer({A0: Res(size=5)}, 0).partitions == {A0: Res(size=5)}
    assert first.throttled().error == ErrorCode.invalid_fetch_session_epoch
    assert second.throttled().partitions == {}


def test_preview_and_throttled_answers_change_nothing() -> None:
    """A quota-throttled consumer's answer (Kafka's getResponseSize, then
    getThrottledResponse): the preview names what would go, and after the empty throttled
    answer the session still owes the client that news."""
    cache: FetchSessionCache[Req] = FetchSessionCache(10)
    sid = full(cache, {A0: Req(0), B0: Req(0)}, {A0: Res(), B0: Res()})
    news = {A0: Res(high_watermark=4), B0: Res()}
    ctx = new_context(cache, sid, 1, {}, [], False, 0)
    assert ctx.preview(news) == {A0: Res(high_watermark=4)}
    throttled = ctx.throttled()
    assert (throttled.error, throttled.session_id, throttled.partitions) == (0, sid, {})
    ctx = new_context(cache, sid, 2, {}, [], False, 0)
    assert ctx.answer(news, 0).partitions == {A0: Res(high_watermark=4)}
    ctx = new_context(cache, 0, INITIAL_EPOCH, {A0: Req(0)}, [], False, 0)
    assert ctx.preview({A0: Res()}) == {A0: Res()} and ctx.throttled().session_id == 0
    assert len(cache) == 1  # a throttled full fetch opens no session


def test_eviction_rules() -> None:
    cache: FetchSessionCache[Req] = FetchSessionCache(2)
    small = full(cache, {A0: Req(0)}, {A0: Res()}, now=0)
    big = full(cache, {A0: Req(0), A1: Req(0)}, {A0: Res(), A1: Res()}, now=1)
    # full and young: a consumer gets no session; a follower evicts a consumer's session
    assert full(cache, {A0: Req(0)}, {A0: Res()}, now=2) == INVALID_SESSION_ID
    assert cache.evictions == 0
    leader = full(cache, {B0: Req(0)}, {B0: Res()}, now=3, follower=True)
    assert leader != INVALID_SESSION_ID and cache.evictions == 1
    assert small not in cache.sessions and big in cache.sessions  # the smallest went
    # a consumer may not evict a young follower; nobody evicts it before EVICTION_MS
    assert full(cache, {A0: Req(0)}, {A0: Res()}, now=4, follower=True) != INVALID_SESSION_ID
    assert big not in cache.sessions and leader in cache.sessions
    assert full(cache, {A0: Req(0)}, {A0: Res()}, now=5) == INVALID_SESSION_ID
    # sessions unused for EVICTION_MS are stale: anyone evicts the least recently used
    for sid in list(cache.sessions):
        if sid != leader:
            new_context(cache, sid, 1, {}, [], True, EVICTION_MS)
    fresh = full(cache, {A0: Req(0)}, {A0: Res()}, now=EVICTION_MS + 4)
    assert fresh != INVALID_SESSION_ID and leader not in cache.sessions
    assert len(cache) == 2 and cache.evictions == 3


def test_old_sessions_are_evicted_by_size() -> None:
    cache: FetchSessionCache[Req] = FetchSessionCache(1)
    big = full(cache, {A0: Req(0), A1: Req(0)}, {A0: Res(), A1: Res()}, now=0)
    later = EVICTION_MS + 10
    new_context(cache, big, 1, {}, [], False, later - 5)  # touched: not stale, but old
    # a smaller or equal newcomer may not evict an old session (its id 0 ranks first); a
    # bigger one may
    assert full(cache, {A0: Req(0)}, {A0: Res()}, now=later) == INVALID_SESSION_ID
    assert full(cache, {A0: Req(0), B0: Req(0)}, {A0: Res(), B0: Res()}, now=later) == 0
    three = {A0: Req(0), A1: Req(0), B0: Req(0)}
    sid = full(cache, three, {tp: Res() for tp in three}, now=later)
    assert sid != INVALID_SESSION_ID and list(cache.sessions) == [sid]


def test_session_ids_are_random_and_nonzero() -> None:
    cache: FetchSessionCache[Req] = FetchSessionCache(50, rng=random.Random(7))
    ids = {full(cache, {A0: Req(0)}, {A0: Res()}) for _ in range(50)}
    assert len(ids) == 50 and INVALID_SESSION_ID not in ids


# -- the handler ---------------------------------------------------------------------------------


def test_handler_sends_only_changes_and_resets_on_errors() -> None:
    h: FetchSessionHandler[Req] = FetchSessionHandler(1)
    data = h.build({A0: Req(0), A1: Req(0)})
    assert (data.metadata.session_id, data.metadata.epoch) == (0, 0)
    assert set(data.to_send) == {A0, A1}
    assert h.handle_response(0, 77, [A0, A1])
    data = h.build({A0: Req(0), A1: Req(4), B0: Req(0)})
    assert (data.metadata.session_id, data.metadata.epoch) == (77, 1)
    assert data.to_send == {A1: Req(4), B0: Req(0)} and data.to_forget == []
    assert h.handle_response(0, 77, [A1])
    data = h.build({A1: Req(4), B0: Req(0)})
    assert data.to_send == {} and data.to_forget == [A0] and data.metadata.epoch == 2
    assert set(data.session) == {A1, B0}
    # an answer naming a partition outside the session: dropped, next closes the session
    assert not h.handle_response(0, 77, [A0])
    assert (h.next_metadata.session_id, h.next_metadata.epoch) == (77, 0)
    data = h.build({A1: Req(4)})
    assert data.to_send == {A1: Req(4)}
    assert h.handle_response(0, 78, [A1])
    assert not h.handle_response(ErrorCode.invalid_fetch_session_epoch, 0, [])
    assert (h.next_metadata.session_id, h.next_metadata.epoch) == (78, 0)
    assert h.handle_response(0, 79, [A1])
    assert not h.handle_response(ErrorCode.fetch_session_id_not_found, 0, [])
    assert (h.next_metadata.session_id, h.next_metadata.epoch) == (0, 0)
    h.handle_error()
    assert h.next_metadata.epoch == 0
    # a full answer missing a partition is dropped; a broker declining sessions: full again
    h.build({A0: Req(0), A1: Req(0)})
    assert not h.handle_response(0, 5, [A0])
    h.build({A0: Req(0)})
    assert h.handle_response(0, 0, [A0]) and h.next_metadata.is_full


# -- both sides together -------------------------------------------------------------------------


class SessionMachine(RuleBasedStateMachine):
    """A consumer (handler) fetching from a broker (cache) while partitions come and go, logs
    grow and HWs move, requests get lost or go with a wrong epoch, and others' sessions evict
    this one from a tiny cache: after every accepted answer the fetcher's view of every
    partition (HW, position) is the broker's, nothing skipped or given twice."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: FetchSessionCache[Req] = FetchSessionCache(2, rng=random.Random(1))
        self.handler: FetchSessionHandler[Req] = FetchSessionHandler(0)
        self.log_end: dict[TP, int] = {}  # the leader's logs
        self.hw: dict[TP, int] = {}
        self.position: dict[TP, int] = {}  # the follower's fetch offsets
        self.seen_hw: dict[TP, int] = {}
        self.now = 0

    @rule(tp=st.sampled_from([A0, B0]))
    def add_partition(self, tp: TP) -> None:
        if tp not in self.position:
            self.log_end.setdefault(tp, 0)
            self.hw.setdefault(tp, 0)
            self.position[tp] = 0  # (its HW stays known to the follower)

    @rule(tp=st.sampled_from([A0, B0]))
    def remove_partition(self, tp: TP) -> None:
        self.position.pop(tp, None)

    @rule(tp=st.sampled_from([A0, B0]), n=st.integers(1, 3))
    def produce(self, tp: TP, n: int) -> None:
        if tp in self.log_end:
            self.log_end[tp] += n

    @rule(tp=st.sampled_from([A0, B0]))
    def advance_hw(self, tp: TP) -> None:
        if tp in self.hw:
            self.hw[tp] = self.log_end[tp]

    @rule(really=st.sampled_from([False] * 3 + [True]))
    def other_client_takes_a_slot(self, really: bool) -> None:
        if not really:
            return  # (rarer than the other rules)
        self.now += 1
        full(self.cache, {("z", 0): Req(0)}, {("z", 0): Res()}, now=self.now, follower=True)

    def _read(self, reqs: dict[TP, Req]) -> dict[TP, Res]:
        out = {}
        for tp, r in reqs.items():
            end = self.log_end[tp]
            out[tp] = Res(high_watermark=self.hw[tp], size=max(0, end - r.fetch_offset),
                          last_stable_offset=0)
        return out

    @rule(mishap=st.sampled_from(["none"] * 6 + ["lose", "stale"]))
    def fetch(self, mishap: str) -> None:
        lose, stale_epoch = mishap == "lose", mishap == "stale"
        self.now += 1
        data = self.handler.build({tp: Req(off) for tp, off in self.position.items()})
        epoch = data.metadata.epoch
        if stale_epoch and not data.metadata.is_full:
            epoch += 1  # a client bug / a duplicate: the broker refuses it
        ctx = new_context(self.cache, data.metadata.session_id, epoch, data.to_send,
                          data.to_forget, False, self.now)  # evictable by "z"
        answer = ctx.answer(self._read(dict(ctx.partitions())), self.now)
        if lose:  # the answer never arrives
            self.handler.handle_error()
            return
        if stale_epoch and not data.metadata.is_full:
            assert answer.error in (ErrorCode.invalid_fetch_session_epoch,
                                    ErrorCode.fetch_session_id_not_found)
        ok = self.handler.handle_response(answer.error, answer.session_id, answer.partitions)
        if not ok:
            return
        for tp, r in answer.partitions.items():
            assert tp in self.position
            if r.size:
                self.position[tp] += r.size  # fetched exactly from where it was
            self.seen_hw[tp] = r.high_watermark
        # everything unanswered had no news: the follower's view is the leader's
        for tp, off in self.position.items():
            assert off == self.log_end[tp], (tp, off, self.log_end[tp])
            assert self.seen_hw.get(tp) == self.hw[tp], tp

    @invariant()
    def cache_is_bounded_and_counted(self) -> None:
        assert len(self.cache) <= 2
        assert self.cache.num_partitions == sum(len(s.partitions)
                                                for s in self.cache.sessions.values())


TestSessionMachine = SessionMachine.TestCase
TestSessionMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


@given(st.lists(st.integers(0, 5), min_size=1, max_size=20))
def test_incremental_answer_is_subset_in_session(hws: list[int]) -> None:
    cache: FetchSessionCache[Req] = FetchSessionCache(1)
    parts = {("t", i): Req(0) for i in range(len(hws))}
    sid = full(cache, parts, {tp: Res() for tp in parts})
    ctx = new_context(cache, sid, 1, {}, [], False, 0)
    results = {("t", i): Res(high_watermark=h) for i, h in enumerate(hws)}
    answer = ctx.answer(results, 0)
    assert set(answer.partitions) == {("t", i) for i, h in enumerate(hws) if h != 0}
    order = list(cache.sessions[sid].partitions)
    answered = list(answer.partitions)
    assert order[len(order) - len(answered):] == answered  # answered: to the back
    assert isinstance(cache.sessions[sid].partitions, OrderedDict)



def test_a_session_keeps_to_topic_ids_or_names() -> None:
    """Kafka 3.1's rule: a session opened by a v13+ request (topic ids) refuses an older one,
    and the other way round (FETCH_SESSION_TOPIC_ID_ERROR); ids are kept beside the names."""
    cache: FetchSessionCache[Req] = FetchSessionCache(10)
    ctx = new_context(cache, 0, INITIAL_EPOCH, {A0: Req(0)}, [], False, 0, {"a": "id-a"}, True)
    sid = ctx.answer({A0: Res()}, 0).session_id
    assert cache.sessions[sid].partitions[A0].topic_id == "id-a"
    ctx = new_context(cache, sid, 1, {A0: Req(1)}, [], False, 0)
    assert ctx.answer({}, 0).error == ErrorCode.fetch_session_topic_id_error
    ctx = new_context(cache, sid, 1, {B0: Req(0)}, [], False, 0, {"b": "id-b"}, True)
    assert ctx.answer({A0: Res(), B0: Res()}, 0).error == ErrorCode.none
    assert cache.sessions[sid].partitions[B0].topic_id == "id-b"
    named = full(cache, {A0: Req(0)}, {A0: Res()})
    ctx = new_context(cache, named, 1, {}, [], False, 0, {"a": "id-a"}, True)
    assert ctx.answer({}, 0).error == ErrorCode.fetch_session_topic_id_error


def test_an_idle_followers_requests_are_reused_round_to_round() -> None:
    """The replica fetcher hands the session the same request object for a partition whose
    fetch state did not change (an identity check in the session), a new one when it did."""
    import asyncio
    from types import SimpleNamespace

    from odradek.server.replication.fetcher import (
        FETCHING,
        FetcherConfig,
        PartitionFetchState,
        ReplicaFetcher,
    )

    async def body() -> None:
        part = SimpleNamespace(log_start_offset=0)
        f = ReplicaFetcher("f", 1, 0, SimpleNamespace(close=lambda: None),
                           lambda _tp: part, FetcherConfig())  # type: ignore[arg-type]
        for i in range(3):
            f.states[("t", i)] = PartitionFetchState(5, 1, FETCHING, 1)
        first = f._build_fetch()
        f.states[("t", 1)] = PartitionFetchState(6, 1, FETCHING, 1)
        second = f._build_fetch()
        assert second[("t", 0)] is first[("t", 0)] and second[("t", 2)] is first[("t", 2)]
        assert second[("t", 1)].fetch_offset == 6
        part.log_start_offset = 3  # (the log start is part of the request too)
        assert f._build_fetch()[("t", 0)].log_start_offset == 3
        handler: FetchSessionHandler[object] = FetchSessionHandler(0)
        handler.build(first)
        handler.handle_response(0, 9, list(first))
        assert handler.build(second).to_send == {("t", 1): second[("t", 1)]}
    asyncio.run(body())
