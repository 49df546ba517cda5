"""The consumer's fetcher (Kafka's Fetcher): the position and prefetch buffer of each assigned
partition, the fetch task, and the decoding of what it brings.

The fetcher runs in the background: one Fetch in flight per leader broker, covering every
assigned partition it leads that has a position and no buffered records, in a fetch session
with that broker (KIP-227, `fetch_session_handler`: only the partitions added or moved since
the last request are sent, the others forgotten; a session error means a full fetch next).
Records are checked (CRC32C, `check.crcs`) and decoded when they arrive; control batches are
skipped; records before the position (a compressed batch fetched from its middle) are dropped.
With `isolation.level=read_committed` fetches stop at the last stable offset and the batches of
aborted transactions are skipped (`read_committed`). fetched_records() returns at most the
records asked for and advances the positions past them; a fetch that answers for an old
position (the consumer sought elsewhere meanwhile) is discarded. A fetch answered
OFFSET_OUT_OF_RANGE leaves the partition to be reset by `auto.offset.reset` (`none`:
OffsetOutOfRangeError).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol.records import CorruptRecordError, InvalidRecordError, check_batch, decode_records
from ..protocol.records import iter_headers as iter_batch_headers
from .cluster_metadata import REFRESH_ERRORS, ClusterMetadata, KafkaClient
from .errors import KafkaError, OffsetOutOfRangeError
from .fetch_session_handler import FetchSessionHandler
from .read_committed import (
    READ_COMMITTED,
    AbortedTransactions,
    abort_marker_checker,
    aborted_of,
)
from .types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    ConsumerRecord,
    TopicPartition,
)

log = logging.getLogger("odradek.client.consumer")


def _leader_epoch(md: ClusterMetadata, tp: TopicPartition, node: int) -> int:
    """The leader epoch the metadata gives `node` as `tp`'s leader (-1: unknown, which a
    broker does not check)."""
    p = md.partition(tp)
    return p.leader_epoch if p is not None and p.leader == node else -1


class TopicPartitionState:
    """An assigned partition's fetch state (Kafka's SubscriptionState.TopicPartitionState, with
    the records fetched ahead of poll())."""

    __slots__ = ("backoff_until", "buffer", "fetching", "high_watermark", "last_stable_offset",
                 "log_start_offset", "next_offset", "paused", "position", "reset")

    def __init__(self) -> None:
        self.position: int | None = None
        self.reset: int | None = None  # EARLIEST / LATEST when a reset is pending
        self.buffer: deque[ConsumerRecord] = deque()
        self.next_offset = -1  # where the next fetch starts once the buffer is drained
        self.paused = False
        self.fetching = False
        self.backoff_until = 0.0
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1


@dataclass(frozen=True)
class FetchConfig:
    """The consumer's fetch settings (Kafka's FetchConfig): fetch.min.bytes, fetch.max.bytes,
    fetch.max.wait.ms, max.partition.fetch.bytes, isolation.level, check.crcs,
    retry.backoff.ms and request.timeout.ms (in seconds), auto.offset.reset (its policy and
    name), and the deserializers."""

    min_bytes: int
    max_bytes: int
    max_wait_ms: int
    max_partition_bytes: int
    isolation_level: int
    check_crcs: bool
    retry_backoff: float
    request_timeout: float
    reset_policy: int | None
    reset_policy_name: str
    key_deserializer: Callable[[bytes | None], Any] | None
    value_deserializer: Callable[[bytes | None], Any] | None


class Fetcher:
    """Fetches the assigned partitions from their leaders into their buffers. `data` is set
    when records (or an error, or a reset to resolve) are there for poll()."""

    def __init__(self, client: KafkaClient, config: FetchConfig) -> None:
        self.client = client
        self.config = config
        self.states: dict[TopicPartition, TopicPartitionState] = {}
        self.sessions: dict[int, FetchSessionHandler[tuple[int, int, int]]] = {}  # per broker
        self.error: KafkaError | None = None
        self.data: asyncio.Event | None = None
        self.closed = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._fetching_nodes: set[int] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._rotate = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.data = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._task = loop.create_task(self._run())

    def close(self) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()
        for t in list(self._tasks):
            t.cancel()

    def wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch exactly these partitions (those kept keep their position and buffer)."""
        self.states = {tp: self.states.get(tp) or TopicPartitionState() for tp in partitions}
        self.wake()

    def raise_error(self) -> None:
        if self.error is not None:
            err, self.error = self.error, None
            raise err

    def fetched_records(self, limit: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        tps = [tp for tp, st in self.states.items() if st.buffer and not st.paused]
        if not tps:
            return out
        self._rotate = (self._rotate + 1) % len(tps)
        for tp in tps[self._rotate:] + tps[:self._rotate]:
            st = self.states[tp]
            while st.buffer and len(out) < limit:
                out.append(st.buffer.popleft())
            if out and out[-1].topic_partition == tp:
                st.position = out[-1].offset + 1
            if not st.buffer and st.next_offset > (st.position or 0):
                st.position = st.next_offset  # past control batches and compacted gaps
            if len(out) >= limit:
                break
        self.wake()
        return out

    # -- the fetch task ------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self.loop is not None and self._wakeup is not None
        loop = self.loop
        while not self.closed:
            self._wakeup.clear()
            now = loop.time()
            md = self.client.metadata
            by_node: dict[int, list[TopicPartition]] = {}
            retry_at: float | None = None
            missing = False
            for tp, st in self.states.items():
                if st.position is None or st.paused or st.buffer or st.fetching:
                    continue
                if st.backoff_until > now:
                    retry_at = st.backoff_until if retry_at is None else min(retry_at,
                                                                             st.backoff_until)
                    continue
                leader = md.leader(tp)
                if leader is None:
                    missing = True
                    continue
                if leader not in self._fetching_nodes:
                    by_node.setdefault(leader, []).append(tp)
            if missing:
                self.client.add_topics({tp.topic for tp in self.states})
                self.client.request_update()
                at = now + self.config.retry_backoff
                retry_at = at if retry_at is None else min(retry_at, at)
            for node, tps in by_node.items():
                self._fetching_nodes.add(node)
                for tp in tps:
                    self.states[tp].fetching = True
                task = loop.create_task(self._fetch(node, tps))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            timeout = None if retry_at is None else max(0.0, retry_at - loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _fetch(self, node: int, tps: list[TopicPartition]) -> None:
        assert self.loop is not None
        offsets = {tp: self.states[tp].position for tp in tps}
        session = self.sessions.setdefault(node, FetchSessionHandler(node))
        try:
            # KIP-320: each partition carries the leader epoch the metadata names with the
            # leader (Kafka's FetchPosition.currentLeader), so that a broker that is not that
            # leader in that epoch any more (a follower serving KIP-392 reads, a restarted
            # broker) answers FENCED_LEADER_EPOCH, not a read of its own shorter log
            md = self.client.metadata
            data = session.build({tp: (offsets[tp] or 0, self.config.max_partition_bytes,
                                       _leader_epoch(md, tp, node)) for tp in tps})
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp, (offset, max_bytes, epoch) in data.to_send.items():
                by_topic.setdefault(tp[0], []).append({
                    "partition": tp[1], "current_leader_epoch": epoch,
                    "fetch_offset": offset, "last_fetched_epoch": -1,
                    "log_start_offset": -1, "partition_max_bytes": max_bytes})
            forget: dict[str, list[int]] = {}
            for t, index in data.to_forget:
                forget.setdefault(t, []).append(index)
            try:
                resp = await self.client.send(
                    node, 1,
                    request_timeout=self.config.request_timeout + self.config.max_wait_ms / 1000,
                    replica_id=-1, max_wait=self.config.max_wait_ms,
                    min_bytes=self.config.min_bytes, max_bytes=self.config.max_bytes,
                    isolation_level=self.config.isolation_level,
                    session_id=data.metadata.session_id, session_epoch=data.metadata.epoch,
                    topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
                    forgotten_topics_data=[{"topic": t, "partitions": ps}
                                           for t, ps in forget.items()], rack_id="")
            except BaseException:
                session.handle_error()
                raise
            top = getattr(resp, "error_code", ErrorCode.none)
            answered = [(t.topic, p.partition_index) for t in resp.responses
                        for p in t.partitions]
            throttle = getattr(resp, "throttle_time", None)
            throttle_ms = int(throttle.total_seconds() * 1000) if throttle else 0
            if not session.handle_response(top, getattr(resp, "session_id", 0), answered,
                                           throttle_ms):
                if top in (ErrorCode.fetch_session_id_not_found,
                           ErrorCode.invalid_fetch_session_epoch):
                    return  # a full fetch next, at once (Kafka's consumer does the same)
                if top != ErrorCode.none:
                    raise KafkaError.for_code(top, context="Fetch")
                return  # an answer that does not match the session: dropped
            for t in resp.responses:
                for p in t.partitions:
                    tp = TopicPartition(t.topic, p.partition_index)
                    if tp in offsets:
                        self._on_partition(tp, offsets[tp], p)
        except KafkaError as exc:
            log.debug("Fetch from node %d failed: %s", node, exc)
            self.client.node_failed(node)
            for tp in tps:
                st = self.states.get(tp)
                if st is not None:
                    st.backoff_until = self.loop.time() + self.config.retry_backoff
        except Exception as exc:  # a bug or corrupt data: surface it in poll()
            log.exception("Fetch from node %d failed", node)
            self._set_error(KafkaError(f"fetch failed: {exc!r}"))
        finally:
            self._fetching_nodes.discard(node)
            for tp in tps:
                st = self.states.get(tp)
                if st is not None:
                    st.fetching = False
            self.wake()

    def _set_error(self, err: KafkaError) -> None:
        self.error = err
        if self.data is not None:
            self.data.set()

    def _on_partition(self, tp: TopicPartition, offset: int | None, p: Any) -> None:
        assert self.loop is not None and self.data is not None
        st = self.states.get(tp)
        if st is None or offset is None or st.position != offset or st.buffer:
            return  # unassigned, sought elsewhere, or already fed meanwhile
        code = p.error_code
        if code == ErrorCode.none:
            st.high_watermark = p.high_watermark
            st.last_stable_offset = getattr(p, "last_stable_offset", -1)
            st.log_start_offset = getattr(p, "log_start_offset", -1)
            data = p.records
            if not data:
                return
            try:
                aborted = AbortedTransactions(aborted_of(p)) \
                    if self.config.isolation_level == READ_COMMITTED else None
                records, next_offset = self.parse(tp, offset, data, aborted)
            except (CorruptRecordError, InvalidRecordError) as exc:
                self._set_error(KafkaError(f"corrupt record batch in {tp} at offset "
                                           f"{offset}: {exc}", ErrorCode.corrupt_message))
                return
            st.next_offset = max(next_offset, offset)
            if records:
                st.buffer.extend(records)
                self.data.set()
            elif next_offset > offset:
                st.position = next_offset  # only control batches / records before position
            return
        if code == ErrorCode.offset_out_of_range:
            if self.config.reset_policy is None:
                self._set_error(OffsetOutOfRangeError(
                    f"fetch position {offset} is out of range for partition {tp} "
                    "(auto.offset.reset=none)"))
            else:
                log.info("Fetch position %d out of range for %s: resetting to %s", offset, tp,
                         self.config.reset_policy_name)
                st.position = None
                st.reset = self.config.reset_policy
                self.data.set()  # poll() resolves the reset
            return
        if code in REFRESH_ERRORS or ErrorCode(code).retriable:
            self.client.request_update()
            st.backoff_until = self.loop.time() + self.config.retry_backoff
            return
        self._set_error(KafkaError.for_code(code, context=f"Fetch {tp}"))

    def parse(self, tp: TopicPartition, offset: int, data: bytes,
               aborted: AbortedTransactions | None = None
               ) -> tuple[list[ConsumerRecord], int]:
        view = memoryview(data)
        out: list[ConsumerRecord] = []
        next_offset = offset
        kd, vd = self.config.key_deserializer, self.config.value_deserializer
        for h in iter_batch_headers(view):
            end = h.position + h.size
            if self.config.check_crcs:
                check_batch(view, h.position, end)
            next_offset = max(next_offset, h.next_offset)
            if aborted is not None and aborted.skip(h, abort_marker_checker(view, h)):
                continue  # a batch of an aborted transaction (read_committed)
            if h.is_control or h.next_offset <= offset:
                continue
            ts_type = TIMESTAMP_LOG_APPEND_TIME if h.is_log_append_time else \
                TIMESTAMP_CREATE_TIME
            for r in decode_records(view[h.position:end]):
                if r.offset < offset:
                    continue
                out.append(ConsumerRecord(
                    tp.topic, tp.partition, r.offset, r.timestamp, ts_type,
                    kd(r.key) if kd else r.key, vd(r.value) if vd else r.value,
                    r.headers, h.partition_leader_epoch))
        return out, next_offset
