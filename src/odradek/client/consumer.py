"""The consumer (S-7.2): manual assignment or group subscription, positions, offset resets,
commits; the fetching itself is `fetcher.Fetcher`'s (Kafka's Fetcher).

Positions: each assigned partition has a position, the offset of the next record poll() will
return. A partition without one gets its group's committed offset (OffsetFetch), or else follows
`auto.offset.reset`: `earliest` / `latest` (ListOffsets), `none` -> NoOffsetForPartitionError
from poll(). A fetch answered OFFSET_OUT_OF_RANGE resets the same way (`none` ->
OffsetOutOfRangeError).

The fetcher runs in the background, one Fetch in flight per leader broker in a fetch session
with that broker (KIP-227), and buffers the decoded records of each partition. With
`isolation.level=read_committed` fetches and ListOffsets stop at the last stable offset and the
batches of aborted transactions are skipped (`read_committed`). poll() returns at most
`max.poll.records` buffered records and advances the positions past them; a seek() drops what
was buffered for that partition.

With `group.id` and subscribe(), membership is `group.GroupCoordinatorClient`'s; poll() joins
and rejoins (so revocation happens between two polls, as in Java). With
`enable.auto.commit`, positions are committed every `auto.commit.interval.ms` from poll(), before
a rebalance and on close.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from .assignors import assignors_from_config
from .cluster_metadata import REFRESH_ERRORS, KafkaClient
from .config import CONSUMER, build_config
from .errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
)
from .fetch_session_handler import FetchSessionHandler
from .fetcher import FetchConfig, Fetcher, TopicPartitionState
from .group import GroupCoordinatorClient, Listener
from .read_committed import (
    AbortedTransactions,
    isolation_level,
)
from .types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    TopicPartition,
)

log = logging.getLogger("odradek.client.consumer")

EARLIEST, LATEST = -2, -1
_RESETS = {"earliest": EARLIEST, "smallest": EARLIEST, "beginning": EARLIEST,
           "latest": LATEST, "largest": LATEST, "end": LATEST, "none": None}


def _to_offsets(offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
                ) -> dict[TopicPartition, OffsetAndMetadata]:
    out = {}
    for tp, o in offsets.items():
        tp = TopicPartition(*tp)
        out[tp] = o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
    return out


async def _call(fn: Listener | None, partitions: list[TopicPartition]) -> None:
    if fn is None:
        return
    try:
        result = fn(partitions)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("Rebalance listener %r failed", fn)


class AsyncConsumer:
    """The asyncio consumer.

        async with AsyncConsumer({"bootstrap.servers": ..., "group.id": "g",
                                  "auto.offset.reset": "earliest"}) as c:
            c.subscribe(["topic"])
            for record in await c.poll(1.0): ...
    """

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        cfg = build_config(CONSUMER, config, kwargs)
        self.config = cfg
        policy = str(cfg["auto.offset.reset"]).lower()
        if policy not in _RESETS:
            raise ValueError(f"auto.offset.reset must be latest, earliest or none, got {policy!r}")
        self.reset_policy = _RESETS[policy]
        self.reset_policy_name = policy
        self.group_id: str | None = cfg.get("group.id") or None
        self.auto_commit = bool(cfg["enable.auto.commit"]) and self.group_id is not None
        self.auto_commit_interval = int(cfg["auto.commit.interval.ms"]) / 1000
        self.max_poll_records = int(cfg["max.poll.records"])
        if self.max_poll_records < 1:
            raise ValueError("max.poll.records must be at least 1")
        self.fetch_min_bytes = int(cfg["fetch.min.bytes"])
        self.fetch_max_bytes = int(cfg["fetch.max.bytes"])
        self.fetch_max_wait_ms = int(cfg["fetch.max.wait.ms"])
        self.max_partition_fetch_bytes = int(cfg["max.partition.fetch.bytes"])
        self.isolation_level = isolation_level(cfg["isolation.level"])
        self.check_crcs = bool(cfg["check.crcs"])
        self.retry_backoff = int(cfg["retry.backoff.ms"]) / 1000
        self.request_timeout = int(cfg["request.timeout.ms"]) / 1000
        self.api_timeout = 60.0
        self.key_deserializer: Callable[[bytes | None], Any] | None = cfg.get("key.deserializer")
        self.value_deserializer: Callable[[bytes | None], Any] | None = \
            cfg.get("value.deserializer")
        self.assignors = assignors_from_config(cfg["partition.assignment.strategy"])
        self.client = KafkaClient(cfg)
        self.group: GroupCoordinatorClient | None = None
        if self.group_id is not None:
            self.group = GroupCoordinatorClient(self.client, cfg, self.assignors)
        self.fetcher = Fetcher(self.client, FetchConfig(
            min_bytes=self.fetch_min_bytes, max_bytes=self.fetch_max_bytes,
            max_wait_ms=self.fetch_max_wait_ms,
            max_partition_bytes=self.max_partition_fetch_bytes,
            isolation_level=self.isolation_level, check_crcs=self.check_crcs,
            retry_backoff=self.retry_backoff, request_timeout=self.request_timeout,
            reset_policy=self.reset_policy, reset_policy_name=self.reset_policy_name,
            key_deserializer=self.key_deserializer, value_deserializer=self.value_deserializer))
        self._subscription: list[str] = []
        self._mode: str | None = None  # "subscribe" | "assign"
        self._on_assign: Listener | None = None
        self._on_revoke: Listener | None = None
        self._holding = False  # group mode: an assignment not yet revoked
        self._applied_join: asyncio.Task[list[TopicPartition]] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._next_auto_commit = 0.0
        self._last_committed: dict[TopicPartition, int] = {}
        # One commit at a time, in the order of the calls (Java's commitAsync sends its commits
        # in order on the coordinator's connection, and commitSync blocks the caller)
        self._commit_lock = asyncio.Lock()
        self._closed = False
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def closed(self) -> bool:
        """Whether close() has run."""
        return self._closed

    @property
    def _sessions(self) -> dict[int, FetchSessionHandler[tuple[int, int]]]:
        """The fetcher's fetch session with each broker (KIP-227)."""
        return self.fetcher.sessions

    def _parse(self, tp: TopicPartition, offset: int, data: bytes,
               aborted: AbortedTransactions | None = None) -> tuple[list[ConsumerRecord], int]:
        """The records of fetched `data` from `offset` on, as the fetcher decodes them."""
        return self.fetcher.parse(tp, offset, data, aborted)

    def known_position(self, tp: TopicPartition) -> int | None:
        """The fetch position of an assigned partition when known, without a lookup."""
        st = self.fetcher.states.get(tp)
        return None if st is None else st.position

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> AsyncConsumer:
        self.loop = asyncio.get_running_loop()
        await self.client.start()
        self.fetcher.start(self.loop)
        self._next_auto_commit = self.loop.time() + self.auto_commit_interval
        return self

    async def __aenter__(self) -> AsyncConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, autocommit: bool = True) -> None:
        if self._closed:
            return
        try:
            if self.group is not None and self._mode is not None:
                if (autocommit and self.auto_commit and self._holding) or (
                        autocommit and self.auto_commit and self._mode == "assign"):
                    try:
                        await self.commit()
                    except KafkaError as exc:
                        log.warning("Commit on close failed: %s", exc)
                if self._mode == "subscribe":
                    if self._holding:
                        await _call(self._on_revoke, sorted(self.fetcher.states))
                    await self.group.close()
        finally:
            self._closed = True
            self.fetcher.close()
            for t in list(self._tasks):
                t.cancel()
            await self.client.close()

    # -- subscription and assignment -----------------------------------------------------------
    def subscribe(self, topics: Iterable[str], on_assign: Listener | None = None,
                  on_revoke: Listener | None = None) -> None:
        """Join the consumer's group for `topics` (needs group.id). `on_assign` / `on_revoke`
        get the partitions (and may be coroutines)."""
        if self.group is None:
            raise IllegalStateError("subscribe() needs a group.id (use assign() without one)")
        if self._mode == "assign":
            raise IllegalStateError("subscribe() after assign(): call unassign() first")
        topics = [topics] if isinstance(topics, str) else list(topics)
        self._mode = "subscribe"
        self._subscription = sorted(set(topics))
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self.client.add_topics(self._subscription)
        self.group.subscribe(self._subscription)

    def subscription(self) -> list[str]:
        return list(self._subscription)

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Consume exactly these partitions, without group membership (offsets may still be
        committed to group.id)."""
        if self._mode == "subscribe":
            raise IllegalStateError("assign() while subscribed: call unsubscribe() first")
        parts = [TopicPartition(*tp) for tp in partitions]
        self._mode = "assign" if parts else None
        self._set_assignment(parts)
        self.client.add_topics({tp.topic for tp in parts})

    def unassign(self) -> None:
        if self._mode == "assign":
            self._mode = None
            self._set_assignment([])

    async def unsubscribe(self) -> None:
        if self._mode == "subscribe" and self.group is not None:
            if self._holding:
                if self.auto_commit:
                    try:
                        await self.commit()
                    except KafkaError as exc:
                        log.warning("Commit on unsubscribe failed: %s", exc)
                await _call(self._on_revoke, sorted(self.fetcher.states))
            await self.group.leave("the consumer unsubscribed")
            self.group.subscription = []
        self._mode = None
        self._holding = False
        self._subscription = []
        self._set_assignment([])

    def assignment(self) -> set[TopicPartition]:
        return set(self.fetcher.states)

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        self.fetcher.assign(partitions)

    # -- positions -------------------------------------------------------------------------------
    def _state(self, tp: TopicPartition | tuple[str, int]) -> TopicPartitionState:
        st = self.fetcher.states.get(TopicPartition(*tp))
        if st is None:
            raise IllegalStateError(f"partition {TopicPartition(*tp)} is not assigned to this "
                                    "consumer")
        return st

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        """The next poll() returns records of `tp` from `offset` on."""
        if offset < 0:
            raise ValueError(f"seek offset must not be negative, got {offset}")
        st = self._state(tp)
        st.position = int(offset)
        st.next_offset = int(offset)
        st.reset = None
        st.buffer.clear()
        st.backoff_until = 0.0
        self.fetcher.wake()

    def seek_to_beginning(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        self._seek_reset(partitions, EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        self._seek_reset(partitions, LATEST)

    def _seek_reset(self, partitions: Iterable[Any], where: int) -> None:
        tps = [TopicPartition(*tp) for tp in partitions] or list(self.fetcher.states)
        for tp in tps:
            st = self._state(tp)
            st.position = None
            st.reset = where
            st.buffer.clear()

    async def position(self, tp: TopicPartition | tuple[str, int],
                       timeout: float | None = None) -> int:
        """The offset of the next record poll() would return (resolved now if unknown)."""
        st = self._state(tp)
        if st.position is None:
            assert self.loop is not None
            await self._update_positions(self.loop.time() + (timeout or self.api_timeout))
        if st.position is None:
            raise KafkaTimeoutError(f"no position for {TopicPartition(*tp)}")
        return st.position

    def pause(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        for tp in partitions:
            self._state(tp).paused = False
        self.fetcher.wake()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self.fetcher.states.items() if st.paused}

    def highwater(self, tp: TopicPartition | tuple[str, int]) -> int:
        """The high watermark of `tp` from the last fetch (-1 before one)."""
        return self._state(tp).high_watermark

    def last_stable_offset(self, tp: TopicPartition | tuple[str, int]) -> int:
        """The last stable offset of `tp` from the last fetch (-1 before one)."""
        return self._state(tp).last_stable_offset

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """The group and this member's generation and ids, for a transactional producer's
        send_offsets_to_transaction (KIP-447)."""
        if self.group_id is None or self.group is None:
            raise IllegalStateError("To use the group management or offset commit APIs, you "
                                    "must provide a valid group.id in the consumer "
                                    "configuration.")
        g = self.group
        return ConsumerGroupMetadata(self.group_id, g.generation, g.member_id,
                                     g.group_instance_id)

    # -- polling ---------------------------------------------------------------------------------
    async def poll(self, timeout: float = 1.0, max_records: int | None = None
                   ) -> list[ConsumerRecord]:
        """Up to max.poll.records (or `max_records`) records, waiting at most `timeout`
        seconds for some."""
        data = self.fetcher.data
        assert self.loop is not None and data is not None, "call start() first"
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        loop = self.loop
        deadline = loop.time() + max(0.0, timeout)
        self._maybe_auto_commit()
        while True:
            self.fetcher.raise_error()
            if self.group is not None:
                self.group.last_poll = loop.time()  # inside poll(): not stuck in user code
            if self._mode == "subscribe":
                await self._ensure_group(deadline)
            if (self._mode is None or not self.fetcher.states) and self._mode != "subscribe":
                raise IllegalStateError("the consumer is neither subscribed nor assigned")
            await self._update_positions(deadline)
            records = self.fetcher.fetched_records(max_records or self.max_poll_records)
            if records:
                return records
            self.fetcher.raise_error()
            left = deadline - loop.time()
            if left <= 0:
                return []
            data.clear()
            waits: list[asyncio.Future[Any]] = [loop.create_task(data.wait())]
            if self.group is not None and self._mode == "subscribe":
                waits.append(loop.create_task(self.group.rejoin_event.wait()))
                join = self.group.join_task
                if join is not None and not join.done():
                    waits.append(loop.create_task(asyncio.wait([join])))
            try:
                await asyncio.wait(waits, timeout=min(left, 1.0),
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while not self._closed:
            for record in await self.poll(1.0):
                yield record

    async def _ensure_group(self, deadline: float) -> None:
        group = self.group
        assert group is not None and self.loop is not None
        task = group.join_task
        if task is not None and task.done() and task is not self._applied_join:
            await self._apply_join(task)  # finished after an earlier poll() gave up waiting
        joining = task is not None and not task.done()
        if group.generation >= 0 and not group.need_rejoin and not joining \
                and not group.metadata_changed():
            return
        if group.metadata_changed():
            group.request_rejoin("partition count of a subscribed topic changed")
        if self._holding:
            # Eager rebalance: commit, then give everything back before rejoining.
            if self.auto_commit:
                try:
                    await self.commit(timeout=self.request_timeout)
                except KafkaError as exc:
                    log.warning("Commit before rebalance failed: %s", exc)
            await _call(self._on_revoke, sorted(self.fetcher.states))
            self._set_assignment([])
            self._holding = False
        task = group.start_join()
        left = deadline - self.loop.time()
        if not task.done():
            await asyncio.wait([task], timeout=max(0.0, left))
        if task.done():
            await self._apply_join(task)

    async def _apply_join(self, task: asyncio.Task[list[TopicPartition]]) -> None:
        self._applied_join = task
        assignment = task.result()  # raises a fatal join error
        self._set_assignment(assignment)
        for tp in assignment:
            self.fetcher.states[tp].position = None
        self._holding = True
        self.client.add_topics({tp.topic for tp in assignment})
        await _call(self._on_assign, sorted(assignment))

    def _maybe_auto_commit(self) -> None:
        assert self.loop is not None
        if not self.auto_commit or self.loop.time() < self._next_auto_commit:
            return
        self._next_auto_commit = self.loop.time() + self.auto_commit_interval
        offsets = self._positions_to_commit()
        if offsets:
            self.commit_async(offsets, self._auto_committed)

    def _auto_committed(self, error: KafkaError | None,
                        offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """A retriable failure: the next auto-commit (of the positions of then) after
        retry.backoff.ms, as ConsumerCoordinator.autoCommitOffsetsAsync."""
        if error is None:
            return
        if error.retriable and self.loop is not None:
            log.debug("Asynchronous auto-commit of offsets %s failed due to retriable error: %s",
                      offsets, error)
            self._next_auto_commit = min(self._next_auto_commit,
                                         self.loop.time() + self.retry_backoff)
        else:
            log.warning("Asynchronous auto-commit of offsets %s failed: %s", offsets, error)

    def _positions_to_commit(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(st.position) for tp, st in self.fetcher.states.items()
                if st.position is not None and self._last_committed.get(tp) != st.position}

    async def _update_positions(self, deadline: float) -> None:
        missing = [tp for tp, st in self.fetcher.states.items() if st.position is None
                   and st.reset is None]
        if missing:
            committed: dict[TopicPartition, OffsetAndMetadata | None] = {}
            if self.group is not None:
                committed = await self.group.fetch_committed(missing, max(
                    deadline, asyncio.get_running_loop().time() + self.request_timeout))
            for tp in missing:
                st = self.fetcher.states.get(tp)
                if st is None or st.position is not None or st.reset is not None:
                    continue
                om = committed.get(tp)
                if om is not None:
                    st.position = st.next_offset = om.offset
                    self._last_committed[tp] = om.offset
                    self.fetcher.wake()
                elif self.reset_policy is None:
                    raise NoOffsetForPartitionError(
                        f"undefined offset with no reset policy for partition {tp} "
                        "(auto.offset.reset=none)")
                else:
                    st.reset = self.reset_policy
        resets = {tp: st.reset for tp, st in self.fetcher.states.items()
                  if st.position is None and st.reset is not None}
        if resets:
            found = await self._list_offsets(resets, max(
                deadline, asyncio.get_running_loop().time() + self.request_timeout))
            for tp, (offset, _) in found.items():
                st = self.fetcher.states.get(tp)
                if st is not None and st.position is None and st.reset == resets[tp]:
                    st.position = st.next_offset = offset
                    st.reset = None
            self.fetcher.wake()

    # -- offsets lookups -------------------------------------------------------------------------
    async def _list_offsets(self, timestamps: Mapping[TopicPartition, int], deadline: float
                            ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets to each leader: tp -> (offset, timestamp); offset -1 when none."""
        loop = asyncio.get_running_loop()
        todo = dict(timestamps)
        out: dict[TopicPartition, tuple[int, int]] = {}
        while todo:
            md = self.client.metadata
            by_node: dict[int, list[TopicPartition]] = {}
            for tp in todo:
                leader = md.leader(tp)
                if leader is not None:
                    by_node.setdefault(leader, []).append(tp)
            if by_node:
                results = await asyncio.gather(
                    *(self._list_offsets_node(n, {tp: todo[tp] for tp in tps})
                      for n, tps in by_node.items()), return_exceptions=True)
                for r in results:
                    if isinstance(r, BaseException):
                        if isinstance(r, KafkaError) and r.retriable:
                            continue
                        raise r
                    for tp, value in r.items():
                        out[tp] = value
                        todo.pop(tp, None)
            if not todo:
                break
            if loop.time() >= deadline:
                raise KafkaTimeoutError(f"ListOffsets for {sorted(todo)} timed out")
            self.client.add_topics({tp.topic for tp in todo})
            with contextlib.suppress(KafkaError):
                await self.client.refresh_metadata()
            await asyncio.sleep(self.retry_backoff)
        return out

    async def _list_offsets_node(self, node: int, timestamps: dict[TopicPartition, int]
                                 ) -> dict[TopicPartition, tuple[int, int]]:
        by_topic: dict[str, list[dict[str, int]]] = {}
        for tp, ts in timestamps.items():
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "current_leader_epoch": -1, "timestamp": ts})
        try:
            resp = await self.client.send(node, 2, replica_id=-1,
                                          isolation_level=self.isolation_level,
                                          topics=[{"name": t, "partitions": ps}
                                                  for t, ps in by_topic.items()])
        except KafkaError:
            self.client.node_failed(node)
            raise
        out = {}
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code == ErrorCode.none:
                    out[tp] = (p.offset, getattr(p, "timestamp", -1))
                elif p.error_code in REFRESH_ERRORS or ErrorCode(p.error_code).retriable:
                    self.client.request_update()
                else:
                    raise KafkaError.for_code(p.error_code, context=f"ListOffsets {tp}")
        return out

    async def beginning_offsets(self, partitions: Iterable[TopicPartition | tuple[str, int]],
                                timeout: float | None = None) -> dict[TopicPartition, int]:
        return await self._offsets_at(partitions, EARLIEST, timeout)

    async def end_offsets(self, partitions: Iterable[TopicPartition | tuple[str, int]],
                          timeout: float | None = None) -> dict[TopicPartition, int]:
        return await self._offsets_at(partitions, LATEST, timeout)

    async def _offsets_at(self, partitions: Iterable[Any], ts: int, timeout: float | None
                          ) -> dict[TopicPartition, int]:
        assert self.loop is not None
        tps = [TopicPartition(*tp) for tp in partitions]
        self.client.add_topics({tp.topic for tp in tps})
        found = await self._list_offsets({tp: ts for tp in tps},
                                         self.loop.time() + (timeout or self.api_timeout))
        return {tp: found[tp][0] for tp in tps}

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                                timeout: float | None = None
                                ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The earliest offset whose timestamp is >= the given one (None: no such record)."""
        assert self.loop is not None
        ts = {TopicPartition(*tp): int(t) for tp, t in timestamps.items()}
        self.client.add_topics({tp.topic for tp in ts})
        found = await self._list_offsets(ts, self.loop.time() + (timeout or self.api_timeout))
        return {tp: None if found[tp][0] < 0 else OffsetAndMetadata(found[tp][0])
                for tp in ts}

    async def committed(self, partitions: Iterable[TopicPartition | tuple[str, int]],
                        timeout: float | None = None
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        if self.group is None:
            raise IllegalStateError("committed offsets need a group.id")
        assert self.loop is not None
        return await self.group.fetch_committed([TopicPartition(*tp) for tp in partitions],
                                                self.loop.time() + (timeout or self.api_timeout))

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
                     timeout: float | None = None) -> None:
        """Commit `offsets` (default: the positions of all assigned partitions) and wait:
        Java's commitSync (retried on retriable errors within the timeout). The offset
        committed is the next record to read."""
        assert self.loop is not None
        todo = _to_offsets(offsets) if offsets is not None else {
            tp: OffsetAndMetadata(st.position) for tp, st in self.fetcher.states.items()
            if st.position is not None}
        await self._commit(todo, self.loop.time() + (timeout or self.api_timeout), retry=True)

    async def _commit(self, todo: dict[TopicPartition, OffsetAndMetadata], deadline: float,
                      retry: bool) -> None:
        if self.group is None:
            raise IllegalStateError("commit needs a group.id")
        if not todo:
            return
        async with self._commit_lock:
            if self._mode == "subscribe" and self.group.generation < 0:
                # Not a member of an active generation (it left, or was removed after
                # max.poll.interval.ms): the partitions may belong to another member by now.
                raise CommitFailedError(
                    "commit cannot be completed: this consumer is not part of an active group "
                    "generation (the group rebalanced, or poll() was not called within "
                    "max.poll.interval.ms); poll() rejoins")
            await self.group.commit(todo, deadline, use_generation=self._mode == "subscribe",
                                    retry=retry)
        for tp, om in todo.items():
            self._last_committed[tp] = om.offset

    def commit_async(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
                     callback: Callable[[KafkaError | None, dict[TopicPartition,
                                                                 OffsetAndMetadata]], Any]
                     | None = None) -> asyncio.Future[None]:
        """Commit without waiting (Java's commitAsync); `callback(error, offsets)` when done.
        Commits are sent in the order of the calls and not resent: a retriable failure (the
        coordinator moved, the request timed out) goes to the callback, as Java's
        RetriableCommitFailedException; resent, an old commit could land after a newer one
        and move the committed offset back."""
        assert self.loop is not None
        todo = _to_offsets(offsets) if offsets is not None else {
            tp: OffsetAndMetadata(st.position) for tp, st in self.fetcher.states.items()
            if st.position is not None}
        task = self.loop.create_task(self._commit(
            todo, self.loop.time() + self.request_timeout, retry=False))
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            exc = None if t.cancelled() else t.exception()
            if exc is not None and callback is None:
                log.warning("Asynchronous commit failed: %s", exc)
            if callback is not None:
                err = None if exc is None else (
                    exc if isinstance(exc, KafkaError) else KafkaError(repr(exc)))
                callback(err, todo)
        task.add_done_callback(done)
        return task

    async def list_topics(self) -> dict[str, list[int]]:
        md = await self.client.refresh_metadata(all_topics=True)
        return {name: sorted(t.partitions) for name, t in md.topics.items()
                if t.error == ErrorCode.none}

    async def partitions_for_topic(self, topic: str) -> list[int]:
        return await self.client.ensure_topic(topic, self.api_timeout)


# ---------------------------------------------------------------------------------------------
