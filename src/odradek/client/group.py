"""Consumer group membership (S-7.3, S-7.4) through the broker's group coordinator: Kafka's
classic (eager) protocol, as Java's ConsumerCoordinator and librdkafka speak it.

FindCoordinator -> JoinGroup (protocol type "consumer", one protocol per assignor, each carrying
this member's ConsumerProtocolSubscription; v4+ brokers first answer MEMBER_ID_REQUIRED) ->
the leader computes the assignment with the protocol the coordinator chose -> SyncGroup ->
Heartbeat every heartbeat.interval.ms; REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID or
ILLEGAL_GENERATION mean rejoin. As in Java, the rejoin happens inside the consumer's poll, so the
application finishes with the records of revoked partitions first; before rejoining, the consumer
commits (with enable.auto.commit) and revokes its whole assignment. A member that does not poll
within max.poll.interval.ms leaves the group. Offsets are committed with OffsetCommit (rejected
from an old generation: CommitFailedError) and read with OffsetFetch.

The coordinator gets a connection of its own, so a JoinGroup parked at the coordinator for a
whole rebalance never delays fetch responses queued behind it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from .assignors import (
    PROTOCOL_TYPE,
    Assignment,
    PartitionAssignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from .cluster_metadata import KafkaClient
from .connection import BrokerConnection
from .errors import (
    CommitFailedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
)
from .types import OffsetAndMetadata, TopicPartition

log = logging.getLogger("odradek.client.group")

_COORDINATOR_ERRORS = frozenset(int(e) for e in (
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
    ErrorCode.network_exception, ErrorCode.request_timed_out))
_REJOIN_ERRORS = frozenset(int(e) for e in (
    ErrorCode.rebalance_in_progress, ErrorCode.unknown_member_id,
    ErrorCode.illegal_generation, ErrorCode.fenced_instance_id))

Listener = Callable[[list[TopicPartition]], Awaitable[None] | None]


class GroupCoordinatorClient:
    """The membership of one consumer in one group."""

    def __init__(self, client: KafkaClient, config: dict[str, Any],
                 assignors: list[PartitionAssignor]) -> None:
        self.client = client
        self.group_id: str = config["group.id"]
        self.group_instance_id: str | None = config.get("group.instance.id")
        self.session_timeout_ms = int(config["session.timeout.ms"])
        self.rebalance_timeout_ms = int(config["max.poll.interval.ms"])
        self.heartbeat_interval = int(config["heartbeat.interval.ms"]) / 1000
        self.max_poll_interval = int(config["max.poll.interval.ms"]) / 1000
        self.retry_backoff = int(config["retry.backoff.ms"]) / 1000
        self.request_timeout = int(config["request.timeout.ms"]) / 1000
        self.assignors = assignors
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader_id: str | None = None
        self.coordinator: tuple[int, str, int] | None = None
        self.subscription: list[str] = []
        self.assignment: list[TopicPartition] = []
        self.need_rejoin = False
        self.rejoin_event = asyncio.Event()
        self.joined_topic_partitions: dict[str, int] = {}
        self.last_poll = 0.0
        self._hb_task: asyncio.Task[None] | None = None
        self._join_task: asyncio.Task[list[TopicPartition]] | None = None
        self._joining = False
        self._last_heartbeat_ok = 0.0
        self._closed = False

    # -- coordinator -----------------------------------------------------------------------------
    async def ensure_coordinator(self, deadline: float) -> BrokerConnection:
        loop = asyncio.get_running_loop()
        while True:
            if self.coordinator is not None:
                node, host, port = self.coordinator
                try:
                    return await self.client.connect_address(node, host, port, "group")
                except KafkaError as exc:
                    log.debug("Group coordinator %s unreachable: %s", self.coordinator, exc)
                    self.coordinator_dead()
            try:
                self.coordinator = await self._find_coordinator()
                log.debug("Group %s: coordinator is node %d", self.group_id, self.coordinator[0])
                continue
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                if loop.time() + self.retry_backoff > deadline:
                    raise KafkaTimeoutError(
                        f"no coordinator for group {self.group_id} ({exc})") from None
                await asyncio.sleep(self.retry_backoff)

    async def _find_coordinator(self) -> tuple[int, str, int]:
        resp = await self.client.send_any(10, key=self.group_id, key_type=0,
                                          coordinator_keys=[self.group_id])
        if hasattr(resp, "coordinators"):
            c = resp.coordinators[0]
            code, node, host, port, msg = c.error_code, c.node_id, c.host, c.port, \
                c.error_message
        else:
            code, node, host, port = resp.error_code, resp.node_id, resp.host, resp.port
            msg = getattr(resp, "error_message", None)
        if code != ErrorCode.none:
            raise KafkaError.for_code(code, msg, context=f"FindCoordinator({self.group_id})")
        return node, host, port

    def coordinator_dead(self) -> None:
        if self.coordinator is not None:
            self.client.close_connection(self.coordinator[0], "group")
        self.coordinator = None

    async def _send(self, api_key: int, deadline: float | None = None,
                    request_timeout: float | None = None, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.request_timeout
        conn = await self.ensure_coordinator(deadline)
        try:
            return await conn.send(api_key, request_timeout=request_timeout, **kwargs)
        except KafkaConnectionError:
            self.coordinator_dead()
            raise
        except KafkaTimeoutError:
            self.coordinator_dead()
            raise

    # -- membership ------------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str]) -> None:
        topics = sorted(set(topics))
        if topics != self.subscription:
            self.subscription = topics
            self.request_rejoin("subscription changed")

    def request_rejoin(self, why: str) -> None:
        if not self.need_rejoin:
            log.debug("Group %s: rejoin needed (%s)", self.group_id, why)
        self.need_rejoin = True
        self.rejoin_event.set()

    def metadata_changed(self) -> bool:
        """Partition counts of the subscribed topics differ from those at the last join."""
        if not self.joined_topic_partitions:
            return False
        md = self.client.metadata
        for topic in self.subscription:
            parts = md.partitions_for(topic)
            if parts is not None and len(parts) != self.joined_topic_partitions.get(topic, 0):
                return True
        return False

    @property
    def join_task(self) -> asyncio.Task[list[TopicPartition]] | None:
        """The last join-and-sync started (running or done); None before the first."""
        return self._join_task

    def start_join(self) -> asyncio.Task[list[TopicPartition]]:
        if self._join_task is None or self._join_task.done():
            self._join_task = asyncio.get_running_loop().create_task(self._join_and_sync())
        return self._join_task

    async def _join_and_sync(self) -> list[TopicPartition]:
        loop = asyncio.get_running_loop()
        self._joining = True
        try:
            while True:
                if self._closed:
                    raise KafkaError("the consumer is closed")
                self.need_rejoin = False
                self.rejoin_event.clear()
                deadline = loop.time() + self.rebalance_timeout_ms / 1000 + 5
                try:
                    joined = await self._join(deadline)
                    if joined is None:
                        continue
                    assignment = await self._sync(joined, deadline)
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    log.debug("Group %s: join failed (%s), retrying", self.group_id, exc)
                    await asyncio.sleep(self.retry_backoff)
                    continue
                if assignment is None:
                    await asyncio.sleep(self.retry_backoff)
                    continue
                self.assignment = assignment
                self._last_heartbeat_ok = loop.time()
                if self._hb_task is None or self._hb_task.done():
                    self._hb_task = loop.create_task(self._heartbeat_loop())
                if self.need_rejoin:
                    continue
                return assignment
        finally:
            self._joining = False

    def _metadata(self) -> bytes:
        return encode_subscription(Subscription(list(self.subscription), None,
                                                owned_partitions=[], version=1))

    async def _join(self, deadline: float) -> Any | None:
        """One JoinGroup; None when it must simply be sent again."""
        metadata = self._metadata()
        resp = await self._send(
            11, deadline, request_timeout=self.rebalance_timeout_ms / 1000 + 5,
            group_id=self.group_id, session_timeout=self.session_timeout_ms,
            rebalance_timeout=self.rebalance_timeout_ms, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
            protocols=[{"name": a.name, "metadata": metadata} for a in self.assignors],
            reason="joining" if not self.member_id else "rejoining")
        code = resp.error_code
        if code == ErrorCode.none:
            self.generation = resp.generation_id
            self.member_id = resp.member_id
            self.protocol = resp.protocol_name
            self.leader_id = resp.leader
            log.info("Group %s: joined generation %d as %s (%s, protocol %s)", self.group_id,
                     self.generation, self.member_id,
                     "leader" if self.leader_id == self.member_id else "follower", self.protocol)
            return resp
        if code == ErrorCode.member_id_required:
            self.member_id = resp.member_id
            return None
        if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
            self.reset_generation()
            return None
        if code in _COORDINATOR_ERRORS:
            self.coordinator_dead()
            raise KafkaError.for_code(code, context="JoinGroup")
        if code in (ErrorCode.coordinator_load_in_progress, ErrorCode.rebalance_in_progress):
            raise KafkaError.for_code(code, context="JoinGroup")
        raise KafkaError.for_code(code, context=f"JoinGroup({self.group_id})")

    async def _sync(self, joined: Any, deadline: float) -> list[TopicPartition] | None:
        assignments: list[dict[str, Any]] = []
        if joined.leader == self.member_id and not getattr(joined, "skip_assignment", False):
            assignments = await self._assign(joined)
        resp = await self._send(
            14, deadline, group_id=self.group_id, generation_id=self.generation,
            member_id=self.member_id, group_instance_id=self.group_instance_id,
            protocol_type=PROTOCOL_TYPE, protocol_name=self.protocol, assignments=assignments)
        code = resp.error_code
        if code == ErrorCode.none:
            assignment = decode_assignment(resp.assignment)
            # Partition counts seen now: a change later means rejoin (S-7.4 trigger).
            md = self.client.metadata
            self.joined_topic_partitions = {
                t: len(md.partitions_for(t) or []) for t in self.subscription}
            log.info("Group %s generation %d: assigned %s", self.group_id, self.generation,
                     sorted(assignment.partitions))
            return [tp for tp in assignment.partitions]
        if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
            self.reset_generation()
            return None
        if code == ErrorCode.rebalance_in_progress:
            return None
        if code in _COORDINATOR_ERRORS:
            self.coordinator_dead()
            return None
        raise KafkaError.for_code(code, context=f"SyncGroup({self.group_id})")

    async def _assign(self, joined: Any) -> list[dict[str, Any]]:
        subs: dict[str, Subscription] = {}
        for m in joined.members:
            subs[m.member_id] = decode_subscription(m.metadata, getattr(m, "group_instance_id",
                                                                         None))
        topics = sorted({t for s in subs.values() for t in s.topics})
        self.client.add_topics(topics)
        md = await self.client.refresh_metadata(topics)
        counts = {t: len(md.partitions_for(t) or []) for t in topics if md.partitions_for(t)}
        assignor = next((a for a in self.assignors if a.name == joined.protocol_name), None)
        if assignor is None:
            raise KafkaError(f"the coordinator chose assignor {joined.protocol_name!r}, which "
                             "this consumer did not offer")
        result = assignor.assign(counts, subs)
        log.debug("Group %s: %s assignment for %d members: %s", self.group_id, assignor.name,
                  len(subs), result)
        version = min([1, *(s.version for s in subs.values())])
        return [{"member_id": member,
                 "assignment": encode_assignment(Assignment(parts), max(0, version))}
                for member, parts in result.items()]

    def reset_generation(self) -> None:
        self.generation = -1
        self.member_id = ""
        self.protocol = None
        self.request_rejoin("generation reset")

    async def _heartbeat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed and self.generation >= 0:
            await asyncio.sleep(self.heartbeat_interval)
            if self._closed or self.generation < 0:
                return
            if self._joining:
                continue
            if self.last_poll and loop.time() - self.last_poll > self.max_poll_interval:
                log.warning("Group %s: no poll for more than max.poll.interval.ms (%.0f ms): "
                            "leaving the group", self.group_id, self.max_poll_interval * 1000)
                await self.leave("consumer poll timeout has expired")
                return
            if self.metadata_changed():
                self.request_rejoin("partition count of a subscribed topic changed")
            try:
                resp = await self._send(12, group_id=self.group_id, generation_id=self.generation,
                                        member_id=self.member_id,
                                        group_instance_id=self.group_instance_id)
                code = resp.error_code
            except KafkaError as exc:
                code = int(ErrorCode.network_exception)
                log.debug("Heartbeat failed: %s", exc)
            if code == ErrorCode.none:
                self._last_heartbeat_ok = loop.time()
            elif code == ErrorCode.rebalance_in_progress:
                self._last_heartbeat_ok = loop.time()
                self.request_rejoin("the group is rebalancing")
            elif code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation,
                          ErrorCode.fenced_instance_id):
                self.reset_generation()
                return
            elif code in _COORDINATOR_ERRORS:
                self.coordinator_dead()
                if loop.time() - self._last_heartbeat_ok > self.session_timeout_ms / 1000:
                    self.request_rejoin("coordinator unreachable for session.timeout.ms")
            else:
                log.warning("Heartbeat of group %s: %s", self.group_id,
                            KafkaError.for_code(code))

    async def leave(self, reason: str = "the consumer is being closed") -> None:
        """LeaveGroup (not for static members, as Kafka's consumer: their instance id keeps
        their place until session.timeout.ms)."""
        if self._hb_task is not None and self._hb_task is not asyncio.current_task():
            self._hb_task.cancel()
        self._hb_task = None
        if self.generation >= 0 and self.member_id and self.group_instance_id is None \
                and self.coordinator is not None:
            try:
                resp = await self._send(13, group_id=self.group_id, member_id=self.member_id,
                                        members=[{"member_id": self.member_id,
                                                  "group_instance_id": None,
                                                  "reason": reason}])
                if resp.error_code != ErrorCode.none:
                    log.debug("LeaveGroup: %s", KafkaError.for_code(resp.error_code))
            except KafkaError as exc:
                log.debug("LeaveGroup failed: %s", exc)
        self.generation = -1
        self.member_id = ""
        self.assignment = []
        self.request_rejoin(reason)

    async def close(self) -> None:
        self._closed = True
        if self._join_task is not None and not self._join_task.done():
            self._join_task.cancel()
        await self.leave()

    # -- offsets ---------------------------------------------------------------------------------
    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], deadline: float,
                     use_generation: bool = True, retry: bool = True) -> None:
        """OffsetCommit, retried on coordinator errors until `deadline`. Raises
        CommitFailedError when the group has moved to a new generation. With `retry` false
        (Java's commitAsync) the request is sent once and a retriable error raised: a resent
        commit could land after a newer one and move the committed offset back."""
        loop = asyncio.get_running_loop()
        if not offsets:
            return
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, om in offsets.items():
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch, "committed_metadata": om.metadata})
        while True:
            generation = self.generation if use_generation else -1
            member = self.member_id if use_generation else ""
            try:
                resp = await self._send(
                    8, deadline, group_id=self.group_id, generation_id_or_member_epoch=generation,
                    member_id=member,
                    group_instance_id=self.group_instance_id if use_generation else None,
                    retention_time=-1,
                    topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()])
            except KafkaError as exc:
                if not retry or not exc.retriable \
                        or loop.time() + self.retry_backoff > deadline:
                    raise
                await asyncio.sleep(self.retry_backoff)
                continue
            error: KafkaError | None = None
            for t in resp.topics:
                for p in t.partitions:
                    code = p.error_code
                    if code == ErrorCode.none:
                        continue
                    if code in _REJOIN_ERRORS:
                        if code != ErrorCode.rebalance_in_progress:
                            self.reset_generation()
                        else:
                            self.request_rejoin("commit during a rebalance")
                        raise CommitFailedError(
                            "commit cannot be completed: the group has rebalanced and the "
                            f"partitions were assigned to another member "
                            f"({ErrorCode(code).name.upper()})", code)
                    if code in _COORDINATOR_ERRORS:
                        self.coordinator_dead()
                        error = KafkaError.for_code(code)
                    elif code in (ErrorCode.coordinator_load_in_progress,
                                  ErrorCode.unknown_topic_or_partition):
                        error = KafkaError.for_code(code)
                    else:
                        raise KafkaError.for_code(code, context=f"OffsetCommit {t.name}-"
                                                  f"{p.partition_index}")
            if error is None:
                return
            if not retry or loop.time() + self.retry_backoff > deadline:
                raise error
            await asyncio.sleep(self.retry_backoff)

    async def fetch_committed(self, partitions: Iterable[TopicPartition], deadline: float
                              ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        loop = asyncio.get_running_loop()
        parts = sorted(set(partitions))
        if not parts:
            return {}
        by_topic: dict[str, list[int]] = {}
        for tp in parts:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        while True:
            try:
                resp = await self._send(9, deadline, group_id=self.group_id, topics=topics,
                                        require_stable=True,
                                        groups=[{"group_id": self.group_id, "topics": topics}])
                out, code = parse_offset_fetch(resp, self.group_id)
            except KafkaError as exc:
                if not exc.retriable or loop.time() + self.retry_backoff > deadline:
                    raise
                await asyncio.sleep(self.retry_backoff)
                continue
            if code == ErrorCode.none:
                return {tp: out.get(tp) for tp in parts}
            if code in _COORDINATOR_ERRORS:
                self.coordinator_dead()
            elif code not in (ErrorCode.coordinator_load_in_progress,
                              ErrorCode.unstable_offset_commit):
                raise KafkaError.for_code(code, context=f"OffsetFetch({self.group_id})")
            if loop.time() + self.retry_backoff > deadline:
                raise KafkaTimeoutError(f"OffsetFetch({self.group_id}): {ErrorCode(code).name}")
            await asyncio.sleep(self.retry_backoff)


def parse_offset_fetch(resp: Any, group_id: str
                        ) -> tuple[dict[TopicPartition, OffsetAndMetadata | None], int]:
    """(committed offsets, group-level error) of an OffsetFetch response of any version; a
    retriable per-partition error is returned as the group error."""
    if hasattr(resp, "groups"):
        group = next((g for g in resp.groups if g.group_id == group_id), None)
        if group is None:
            return {}, int(ErrorCode.unknown_server_error)
        topics, code = group.topics, int(group.error_code)
    else:
        topics, code = resp.topics, int(getattr(resp, "error_code", 0))
    out: dict[TopicPartition, OffsetAndMetadata | None] = {}
    for t in topics:
        for p in t.partitions:
            if p.error_code != ErrorCode.none:
                if p.error_code in (ErrorCode.unstable_offset_commit,
                                    ErrorCode.coordinator_load_in_progress) or \
                        p.error_code in _COORDINATOR_ERRORS:
                    code = code or int(p.error_code)
                    continue
                if p.error_code == ErrorCode.unknown_topic_or_partition:
                    out[TopicPartition(t.name, p.partition_index)] = None
                    continue
                raise KafkaError.for_code(p.error_code, context=f"OffsetFetch {t.name}-"
                                          f"{p.partition_index}")
            tp = TopicPartition(t.name, p.partition_index)
            out[tp] = None if p.committed_offset < 0 else OffsetAndMetadata(
                p.committed_offset, p.metadata or "", getattr(p, "committed_leader_epoch", -1))
    return out, code
