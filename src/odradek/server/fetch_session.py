"""Fetch sessions on the broker (KIP-227; Kafka's FetchSession.scala): the session cache and the
four fetch contexts, as pure decisions with no I/O.

A fetch request carries (session id, session epoch). Epoch 0 (INITIAL) or -1 (FINAL) asks for a
*full* fetch: any session named is closed first, then epoch 0 makes a new session of the
request's partitions (if the cache has or can free a slot) and epoch -1 stays sessionless. Any
other epoch is *incremental*: the named session must exist (else FETCH_SESSION_ID_NOT_FOUND)
and expect that epoch (else INVALID_FETCH_SESSION_EPOCH); the request then only adds or updates
partitions (new fetch offsets, max bytes, ...) and drops the `forgotten_topics_data` ones, and
the broker reads every partition of the session. Its answer holds only the partitions with
something to say: records, a changed high watermark, last stable offset or log start offset, an
error, a preferred read replica or a diverging epoch (Kafka's CachedPartition rules, plus the
last stable offset: a commit marker can move it while the HW stays). A session left without
partitions is closed and the answer is sessionless.

`FetchSessionCache` bounds the sessions to `max.incremental.fetch.session.cache.slots`. A new
session takes a free slot, or evicts: first any session unused for `EVICTION_MS` (2 min, Kafka's
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS); otherwise, among sessions older than that, the one
with the smallest (privileged, size, id) if the newcomer's key is not smaller; followers
(privileged) may also evict any consumer session regardless of its age. A newcomer that evicts
nothing gets session id 0 (a full fetch every time), as Kafka answers.

The epoch moves when the request is accepted (`FetchManager.new_context`); the answer is built
when the read completes (after a delayed fetch too), and an answer whose session has moved on
meanwhile (a newer request with the same session) becomes INVALID_FETCH_SESSION_EPOCH.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from ..common import TopicPartition, entropy

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1
#: Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
EVICTION_MS = 120_000
DEFAULT_SLOTS = 1000

R = TypeVar("R")  # one partition of a request (the replica manager's FetchRequestPartition)
P = TypeVar("P")  # one partition of an answer (its FetchResult)


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: -1 stays -1, MAX_INT wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


def is_full(epoch: int) -> bool:
    return epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class ResultView(Protocol):
    """What the session compares of one partition's answer."""

    @property
    def error(self) -> Any: ...  # an ErrorCode (0: none)

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def preferred_read_replica(self) -> int: ...


class CachedPartition(Generic[R]):
    """One partition of a session: the last request data and what was last answered."""

    __slots__ = ("high_watermark", "last_stable_offset", "log_start_offset", "request",
                 "topic_id")

    def __init__(self, request: R, topic_id: Any = None) -> None:
        self.request = request
        self.topic_id = topic_id  # stored beside the name when the request carries ids (v13+)
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1

    def must_respond(self, r: ResultView, update: bool = True) -> bool:
        """Kafka's maybeUpdateResponseData: does this answer say something new? With
        `update`, remember what it said (an error resets the HW so the next good answer goes
        out)."""
        respond = r.size > 0 or r.preferred_read_replica >= 0 \
            or getattr(r, "diverging_epoch", None) is not None
        if self.high_watermark != r.high_watermark:
            respond = True
            if update:
                self.high_watermark = r.high_watermark
        if self.last_stable_offset != r.last_stable_offset:
            respond = True
            if update:
                self.last_stable_offset = r.last_stable_offset
        if self.log_start_offset != r.log_start_offset:
            respond = True
            if update:
                self.log_start_offset = r.log_start_offset
        if r.error != ErrorCode.none:
            respond = True
            if update:
                self.high_watermark = -1
        return respond


class FetchSession(Generic[R]):
    """Kafka's FetchSession: the partitions (in answer order: those just answered move to the
    end, so each gets its turn under max_bytes), the epoch the next request must carry, and
    the cache's bookkeeping (privileged = a follower's, last used, size at last touch)."""

    __slots__ = ("cached_size", "creation_ms", "epoch", "id", "last_used_ms", "partitions",
                 "privileged", "uses_topic_ids")

    def __init__(self, session_id: int, privileged: bool,
                 partitions: OrderedDict[TopicPartition, CachedPartition[R]], now_ms: int,
                 uses_topic_ids: bool = False) -> None:
        self.id = session_id
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids  # opened by a v13+ request (KIP-516)
        self.partitions = partitions
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = -1

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, privileged={self.privileged}, "
                f"partitions={len(self.partitions)}, epoch={self.epoch})")

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)

    def update(self, fetch_data: Mapping[TopicPartition, R], to_forget: Iterable[TopicPartition],
               topic_ids: Mapping[str, Any] | None = None
               ) -> tuple[list[TopicPartition], list[TopicPartition], list[TopicPartition]]:
        """Add or update the request's partitions, drop the forgotten ones: (added, updated,
        removed)."""
        added, updated, removed = [], [], []
        for tp, req in fetch_data.items():
            cached = self.partitions.get(tp)
            if cached is None:
                self.partitions[tp] = CachedPartition(
                    req, topic_ids.get(tp[0]) if topic_ids else None)
                added.append(tp)
            else:
                cached.request = req
                if topic_ids:
                    cached.topic_id = topic_ids.get(tp[0])
                updated.append(tp)
        for tp in to_forget:
            if self.partitions.pop(tp, None) is not None:
                removed.append(tp)
        return added, updated, removed


# -- the cache ----------------------------------------------------------------------------------


class FetchSessionCache(Generic[R]):
    """Kafka's FetchSessionCache: at most `max_entries` sessions (memory stays bounded: each
    session holds no more partitions than one request named)."""

    def __init__(self, max_entries: int = DEFAULT_SLOTS, eviction_ms: int = EVICTION_MS,
                 rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession[R]] = {}
        # least recently used first (touch moves a session to the end; the clock only grows)
        self._last_used: OrderedDict[int, FetchSession[R]] = OrderedDict()
        self.num_partitions = 0
        self.evictions = 0  # IncrementalFetchSessionEvictionsPerSec's count
        self._rng = rng or entropy.new_random()

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession[R] | None:
        return self.sessions.get(session_id)

    def new_session_id(self) -> int:
        while True:
            sid = self._rng.randint(1, INT32_MAX - 1)
            if sid not in self.sessions:
                return sid

    def maybe_create_session(self, now_ms: int, privileged: bool, size: int,
                             partitions: Callable[[], OrderedDict[TopicPartition,
                                                                  CachedPartition[R]]],
                             uses_topic_ids: bool = False) -> int:
        """A new session's id, or 0 when there is no slot and nothing may be evicted."""
        if len(self.sessions) >= self.max_entries \
                and not self.try_evict(privileged, (privileged, size, 0), now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self.new_session_id(), privileged, partitions(), now_ms,
                               uses_topic_ids)
        self.sessions[session.id] = session
        self.touch(session, now_ms)
        return session.id

    def _evictable(self, session: FetchSession[R], by_privileged: bool, now_ms: int) -> bool:
        old = now_ms - session.creation_ms > self.eviction_ms
        return old or (by_privileged and not session.privileged)

    def try_evict(self, privileged: bool, key: tuple[bool, int, int], now_ms: int) -> bool:
        """Kafka's tryEvict: a stale session goes first; else the smallest evictable key if
        the newcomer's is not smaller."""
        if not self._last_used:
            return False
        oldest = next(iter(self._last_used.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self.remove(oldest)
            self.evictions += 1
            return True
        # Kafka keeps the evictable keys as of each session's last touch; so does this scan
        candidates = [s for s in self.sessions.values()
                      if self._evictable(s, privileged, s.last_used_ms)]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if key < victim.evictable_key():
            return False
        self.remove(victim)
        self.evictions += 1
        return True

    def remove(self, session: FetchSession[R] | int) -> FetchSession[R] | None:
        sid = session if isinstance(session, int) else session.id
        found = self.sessions.pop(sid, None)
        if found is not None:
            self._last_used.pop(sid, None)
            if found.cached_size > 0:
                self.num_partitions -= found.cached_size
        return found

    def touch(self, session: FetchSession[R], now_ms: int) -> None:
        session.last_used_ms = max(now_ms, session.last_used_ms)
        self._last_used.pop(session.id, None)
        self._last_used[session.id] = session
        if session.cached_size > 0:
            self.num_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self.num_partitions += session.cached_size


# -- the contexts (Kafka's FetchContext and its four kinds) -------------------------------------


@dataclass(slots=True)
class FetchAnswer(Generic[P]):
    """What goes into the response: the top-level error, the session id, the partitions."""

    error: ErrorCode
    session_id: int
    partitions: dict[TopicPartition, P]


class FetchContext(Generic[R, P]):
    """`partitions()`: what to read (for an incremental fetch, the whole session);
    `answer(results, now_ms)`: the response's content once the read is done."""

    session_id = INVALID_SESSION_ID

    def partitions(self) -> Mapping[TopicPartition, R]:
        raise NotImplementedError

    def answer(self, results: dict[TopicPartition, P], now_ms: int) -> FetchAnswer[P]:
        raise NotImplementedError

    def preview(self, results: dict[TopicPartition, P]) -> dict[TopicPartition, P]:
        """What `answer` would send, changing nothing (Kafka's getResponseSize: a quota
        decides on this before the session is updated)."""
        return results

    def throttled(self) -> FetchAnswer[P]:
        """Kafka's getThrottledResponse: no partitions (a quota-throttled consumer); the
        session keeps what it last sent, so nothing of this answer is lost."""
        return FetchAnswer(ErrorCode.none, INVALID_SESSION_ID, {})


class SessionErrorContext(FetchContext[R, P]):
    def __init__(self, error: ErrorCode) -> None:
        self.error = error

    def partitions(self) -> Mapping[TopicPartition, R]:
        return {}

    def answer(self, results: dict[TopicPartition, P], now_ms: int) -> FetchAnswer[P]:
        return FetchAnswer(self.error, INVALID_SESSION_ID, {})

    def preview(self, results: dict[TopicPartition, P]) -> dict[TopicPartition, P]:
        return {}


class SessionlessFetchContext(FetchContext[R, P]):
    def __init__(self, fetch_data: Mapping[TopicPartition, R]) -> None:
        self.fetch_data = fetch_data

    def partitions(self) -> Mapping[TopicPartition, R]:
        return self.fetch_data

    def answer(self, results: dict[TopicPartition, P], now_ms: int) -> FetchAnswer[P]:
        return FetchAnswer(ErrorCode.none, INVALID_SESSION_ID, results)


class FullFetchContext(FetchContext[R, P]):
    """Epoch 0: answer everything and open a session of the request's partitions (as
    answered) if the cache has or frees a slot."""

    def __init__(self, cache: FetchSessionCache[R], fetch_data: Mapping[TopicPartition, R],
                 privileged: bool, topic_ids: Mapping[str, Any] | None = None,
                 uses_topic_ids: bool = False) -> None:
        self.cache = cache
        self.uses_topic_ids = uses_topic_ids
        self.fetch_data = fetch_data
        self.privileged = privileged
        self.topic_ids = topic_ids

    def partitions(self) -> Mapping[TopicPartition, R]:
        return self.fetch_data

    def answer(self, results: dict[TopicPartition, P], now_ms: int) -> FetchAnswer[P]:
        def cached() -> OrderedDict[TopicPartition, CachedPartition[R]]:
            out: OrderedDict[TopicPartition, CachedPartition[R]] = OrderedDict()
            ids = self.topic_ids
            for tp, req in self.fetch_data.items():
                c = CachedPartition(req, ids.get(tp[0]) if ids else None)
                r = results.get(tp)
                if r is not None:
                    c.must_respond(r)  # type: ignore[arg-type]
                out[tp] = c
            return out
        sid = self.cache.maybe_create_session(now_ms, self.privileged, len(self.fetch_data),
                                              cached, self.uses_topic_ids)
        return FetchAnswer(ErrorCode.none, sid, results)


class IncrementalFetchContext(FetchContext[R, P]):
    def __init__(self, session: FetchSession[R], request_epoch: int) -> None:
        self.session = session
        self.request_epoch = request_epoch
        self.session_id = session.id

    def partitions(self) -> Mapping[TopicPartition, R]:
        return {tp: c.request for tp, c in self.session.partitions.items()}

    def _current(self) -> bool:
        return self.session.epoch == next_epoch(self.request_epoch)

    def answer(self, results: dict[TopicPartition, P], now_ms: int) -> FetchAnswer[P]:
        session = self.session
        if not self._current():  # a newer request of this session came meanwhile
            return FetchAnswer(ErrorCode.invalid_fetch_session_epoch, session.id, {})
        out: dict[TopicPartition, P] = {}
        parts = session.partitions
        for tp, r in results.items():
            cached = parts.get(tp)
            if cached is None:  # forgotten meanwhile (cannot happen: the epoch would differ)
                continue
            if cached.must_respond(r):  # type: ignore[arg-type]
                out[tp] = r
                parts.move_to_end(tp)  # answered: to the back of the line
        return FetchAnswer(ErrorCode.none, session.id, out)

    def preview(self, results: dict[TopicPartition, P]) -> dict[TopicPartition, P]:
        if not self._current():
            return {}
        parts = self.session.partitions
        return {tp: r for tp, r in results.items()
                if tp in parts and parts[tp].must_respond(r, update=False)}  # type: ignore

    def throttled(self) -> FetchAnswer[P]:
        if not self._current():
            return FetchAnswer(ErrorCode.invalid_fetch_session_epoch, self.session.id, {})
        return FetchAnswer(ErrorCode.none, self.session.id, {})


def new_context(cache: FetchSessionCache[R], session_id: int, epoch: int,
                fetch_data: Mapping[TopicPartition, R], to_forget: Iterable[TopicPartition],
                is_follower: bool, now_ms: int, topic_ids: Mapping[str, Any] | None = None,
                uses_topic_ids: bool = False) -> FetchContext[R, Any]:
    """Kafka's FetchManager.newContext: which context a request gets, updating the cache (a
    full fetch closes the session it names; an incremental one updates its session, moves the
    epoch and touches it). `uses_topic_ids`: the request is v13+ (topics by id); a session
    opened by one kind of request refuses the other (FETCH_SESSION_TOPIC_ID_ERROR, Kafka
    3.1's rule)."""
    if is_full(epoch):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        if epoch == FINAL_EPOCH:
            return SessionlessFetchContext(fetch_data)
        return FullFetchContext(cache, fetch_data, is_follower, topic_ids, uses_topic_ids)
    session = cache.get(session_id)
    if session is None:
        return SessionErrorContext(ErrorCode.fetch_session_id_not_found)
    if session.epoch != epoch:
        return SessionErrorContext(ErrorCode.invalid_fetch_session_epoch)
    if session.uses_topic_ids != uses_topic_ids:
        return SessionErrorContext(ErrorCode.fetch_session_topic_id_error)
    session.update(fetch_data, to_forget, topic_ids)
    if not session.partitions:
        cache.remove(session)
        return SessionlessFetchContext(fetch_data)
    cache.touch(session, now_ms)
    session.epoch = next_epoch(session.epoch)
    return IncrementalFetchContext(session, epoch)


__all__ = [
    "DEFAULT_SLOTS",
    "EVICTION_MS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchAnswer",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "FullFetchContext",
    "IncrementalFetchContext",
    "SessionErrorContext",
    "SessionlessFetchContext",
    "is_full",
    "new_context",
    "next_epoch",
]
