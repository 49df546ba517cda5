"""Transactional offset commits on an in-process broker, through the wire protocol (KIP-98,
KIP-447): TxnOffsetCommit leaves the offsets pending (OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT, without it the previous offset), a COMMIT marker written by
WriteTxnMarkers to the group's `__consumer_offsets` partition makes them visible, an ABORT drops
them; a restart reloads committed offsets and still-pending ones (which a marker after the
restart completes); KIP-447 member/generation checks; the ACL checks of TxnOffsetCommit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.coordinator.offsets import OFFSETS_TOPIC
from odradek.protocol.codec import make
from odradek.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.server.broker import Broker
from tests.integration.broker_harness import (
    client_for,
    create_topics,
    req_module,
    run,
    running_broker,
)
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(120)

CONF = {"offsets.topic.num.partitions": 3, "offsets.topic.replication.factor": 1,
        "group.initial.rebalance.delay.ms": 0}
TOPIC = "t"
GROUP = "txn-group"


async def eventually(fn: Any, ok: Any, timeout: float = 20.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await fn()
        if ok(value):
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out; last: {value}")
        await asyncio.sleep(0.05)


async def setup(c: WireClient, broker: Broker, group: str = GROUP) -> int:
    """The topic exists, the broker coordinates `group` (its partition loaded); its partition."""
    r = await c.request(create_topics(TOPIC, 2))
    assert r.topics[0].error_code in (ErrorCode.none, ErrorCode.topic_already_exists)
    await wait_coordinator(c, group)
    await eventually(lambda: asyncio.sleep(0, broker.metadata_cache.partition(TOPIC, 1)),
                     lambda p: p is not None)
    return broker.group_coordinator.partition_for(group)


async def wait_coordinator(c: WireClient, group: str) -> None:
    m = req_module(10, 3)
    await eventually(lambda: c.request(make(m.FindCoordinatorRequest, key=group, key_type=0)),
                     lambda r: r.error_code == ErrorCode.none)


async def init_pid(c: WireClient) -> tuple[int, int]:
    m = req_module(22, 3)
    r = await c.request(make(m.InitProducerIdRequest, transactional_id=None,
                             transaction_timeout=60000, producer_id=-1, producer_epoch=-1))
    assert r.error_code == ErrorCode.none
    return r.producer_id, r.producer_epoch


async def txn_commit(c: WireClient, pid: int, epoch: int, offsets: dict[tuple[str, int], int],
                     *, version: int = 3, group: str = GROUP, member_id: str = "",
                     generation: int = -1, instance_id: str | None = None,
                     txn_id: str = "tx") -> dict[tuple[str, int], int]:
    m = req_module(28, version)
    topics: dict[str, list[Any]] = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append(make(
            m.TxnOffsetCommitRequestPartition, partition_index=p, committed_offset=off,
            committed_leader_epoch=-1, committed_metadata="meta"))
    r = await c.request(make(
        m.TxnOffsetCommitRequest, transactional_id=txn_id, group_id=group, producer_id=pid,
        producer_epoch=epoch, generation_id=generation, member_id=member_id,
        group_instance_id=instance_id,
        topics=tuple(make(m.TxnOffsetCommitRequestTopic, name=t, partitions=tuple(ps))
                     for t, ps in topics.items())))
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


async def fetch(c: WireClient, partitions: list[int], *, require_stable: bool,
                version: int = 7, group: str = GROUP) -> dict[int, tuple[int, int]]:
    """partition -> (error, offset)"""
    m = req_module(9, version)
    if version >= 8:
        r = await c.request(make(m.OffsetFetchRequest, require_stable=require_stable, groups=(
            make(m.OffsetFetchRequestGroup, group_id=group, topics=(
                make(m.OffsetFetchRequestTopics, name=TOPIC,
                     partition_indexes=tuple(partitions)),)),)))
        assert r.groups[0].error_code == ErrorCode.none
        topics = r.groups[0].topics
    else:
        r = await c.request(make(
            m.OffsetFetchRequest, group_id=group, require_stable=require_stable,
            topics=(make(m.OffsetFetchRequestTopic, name=TOPIC,
                         partition_indexes=tuple(partitions)),)))
        assert r.error_code == ErrorCode.none
        topics = r.topics
    return {p.partition_index: (p.error_code, p.committed_offset)
            for t in topics for p in t.partitions}


async def write_marker(c: WireClient, pid: int, epoch: int, offsets_partition: int,
                       commit: bool) -> None:
    m = req_module(27, 1)
    r = await c.request(make(m.WriteTxnMarkersRequest, markers=(make(
        m.WritableTxnMarker, producer_id=pid, producer_epoch=epoch, transaction_result=commit,
        coordinator_epoch=0, topics=(make(m.WritableTxnMarkerTopic, name=OFFSETS_TOPIC,
                                          partition_indexes=(offsets_partition,)),)),)))
    errors = [p.error_code for mk in r.markers for t in mk.topics for p in t.partitions]
    assert errors == [ErrorCode.none]


UNSTABLE = ErrorCode.unstable_offset_commit


def test_commit_abort_and_reload(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, **CONF) as broker, client_for(broker) as c:
            p = await setup(c, broker)
            pid, epoch = await init_pid(c)
            # A plain commit first (simple consumer: generation -1).
            m = req_module(8, 8)
            r = await c.request(make(
                m.OffsetCommitRequest, group_id=GROUP, generation_id_or_member_epoch=-1,
                member_id="", group_instance_id=None, topics=(make(
                    m.OffsetCommitRequestTopic, name=TOPIC, partitions=(make(
                        m.OffsetCommitRequestPartition, partition_index=0, committed_offset=5,
                        committed_leader_epoch=-1, committed_metadata=""),)),)))
            assert r.topics[0].partitions[0].error_code == ErrorCode.none

            assert await txn_commit(c, pid, epoch, {(TOPIC, 0): 42, (TOPIC, 1): 43}) == {
                (TOPIC, 0): ErrorCode.none, (TOPIC, 1): ErrorCode.none}
            assert await fetch(c, [0, 1], require_stable=True) == {0: (UNSTABLE, -1),
                                                                   1: (UNSTABLE, -1)}
            assert await fetch(c, [0, 1], require_stable=True, version=8) == {
                0: (UNSTABLE, -1), 1: (UNSTABLE, -1)}
            # Not stable-required: the offsets before the transaction.
            assert await fetch(c, [0, 1], require_stable=False) == {0: (0, 5), 1: (0, -1)}

            await write_marker(c, pid, epoch, p, commit=True)
            assert await fetch(c, [0, 1], require_stable=True) == {0: (0, 42), 1: (0, 43)}

            # Aborted: dropped.
            assert await txn_commit(c, pid, epoch, {(TOPIC, 0): 50}) == {
                (TOPIC, 0): ErrorCode.none}
            assert (await fetch(c, [0], require_stable=True))[0] == (UNSTABLE, -1)
            await write_marker(c, pid, epoch, p, commit=False)
            assert await fetch(c, [0, 1], require_stable=True) == {0: (0, 42), 1: (0, 43)}

            # Left open across a restart.
            assert await txn_commit(c, pid, epoch, {(TOPIC, 1): 60}) == {
                (TOPIC, 1): ErrorCode.none}

        async with running_broker(tmp_path, **CONF) as broker, client_for(broker) as c:
            await wait_coordinator(c, GROUP)
            assert await fetch(c, [0, 1], require_stable=True) == {0: (0, 42), 1: (UNSTABLE, -1)}
            assert await fetch(c, [0, 1], require_stable=False) == {0: (0, 42), 1: (0, 43)}
            group = broker.group_coordinator.manager.get_group(GROUP)
            assert group is not None and set(group.pending_txn_offset_commits) == {pid}
            await write_marker(c, pid, epoch, p, commit=True)
            assert await fetch(c, [0, 1], require_stable=True) == {0: (0, 42), 1: (0, 60)}
            assert group.pending_txn_offset_commits == {}

        # And the completed state reloads the same.
        async with running_broker(tmp_path, **CONF) as broker, client_for(broker) as c:
            await wait_coordinator(c, GROUP)
            assert await fetch(c, [0, 1], require_stable=True) == {0: (0, 42), 1: (0, 60)}

    run(main, timeout=100)


def test_kip447_checks_and_request_errors(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, **CONF) as broker, client_for(broker) as c:
            await setup(c, broker, "kip447")
            pid, epoch = await init_pid(c)
            # Unknown group: created Empty; generation 0 is the Empty group's.
            ok = {(TOPIC, 0): ErrorCode.none}
            assert await txn_commit(c, pid, epoch, {(TOPIC, 0): 1}, group="kip447") == ok
            assert await txn_commit(c, pid, epoch, {(TOPIC, 0): 1}, group="kip447",
                                    generation=0) == ok
            assert await txn_commit(c, pid, epoch, {(TOPIC, 0): 1}, group="kip447",
                                    generation=7) == {(TOPIC, 0): ErrorCode.illegal_generation}
            assert await txn_commit(c, pid, epoch, {(TOPIC, 0): 1}, group="kip447",
                                    member_id="nobody") == {
                (TOPIC, 0): ErrorCode.unknown_member_id}
            # v0 (no member fields), unknown topic partition, empty group id.
            assert await txn_commit(c, pid, epoch, {(TOPIC, 0): 2, (TOPIC, 9): 2,
                                                    ("nope", 0): 2},
                                    group="kip447", version=0) == {
                (TOPIC, 0): ErrorCode.none, (TOPIC, 9): ErrorCode.unknown_topic_or_partition,
                ("nope", 0): ErrorCode.unknown_topic_or_partition}
            assert await txn_commit(c, pid, epoch, {(TOPIC, 0): 1}, group="") == {
                (TOPIC, 0): ErrorCode.invalid_group_id}
            # Metadata over offset.metadata.max.bytes.
            m = req_module(28, 3)
            r = await c.request(make(
                m.TxnOffsetCommitRequest, transactional_id="tx", group_id="kip447",
                producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
                group_instance_id=None, topics=(make(
                    m.TxnOffsetCommitRequestTopic, name=TOPIC, partitions=(make(
                        m.TxnOffsetCommitRequestPartition, partition_index=1,
                        committed_offset=3, committed_leader_epoch=-1,
                        committed_metadata="x" * 5000),)),)))
            assert r.topics[0].partitions[0].error_code == ErrorCode.offset_metadata_too_large
            # While the group's partition loads: v2+ COORDINATOR_LOAD_IN_PROGRESS, older
            # versions COORDINATOR_NOT_AVAILABLE (KAFKA-7296).
            manager = broker.group_coordinator.manager
            p = manager.partition_for("kip447")
            manager.loading.add(p)
            try:
                for version, code in ((0, ErrorCode.coordinator_not_available),
                                      (1, ErrorCode.coordinator_not_available),
                                      (2, ErrorCode.coordinator_load_in_progress),
                                      (3, ErrorCode.coordinator_load_in_progress)):
                    assert await txn_commit(c, pid, epoch, {(TOPIC, 0): 1}, group="kip447",
                                            version=version) == {(TOPIC, 0): code}
            finally:
                manager.loading.discard(p)
            # A newer epoch of the producer on the offsets partition fences the older one: the
            # append's error (from the partition's producer state) is answered and nothing
            # stays pending for the refused commit.
            group = manager.get_group("kip447")
            assert group is not None
            await write_marker(c, pid, epoch, p, commit=False)
            assert await txn_commit(c, pid, epoch + 1, {(TOPIC, 0): 8}, group="kip447") == ok
            refused = await txn_commit(c, pid, epoch, {(TOPIC, 1): 9}, group="kip447")
            assert refused == {(TOPIC, 1): ErrorCode.invalid_producer_epoch}  # as Kafka 2.7+
            assert set(group.pending_txn_offset_commits) == {pid}
            assert set(group.pending_txn_offset_commits[pid]) == {(TOPIC, 0)}

    run(main, timeout=100)


ACL_CONF = {**CONF, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "true"}


def _only_alice(resource_type: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, PatternType.LITERAL),
                      AccessControlEntry("User:alice", "*", op, AclPermissionType.ALLOW))


def test_acls(tmp_path: Path) -> None:
    """ANONYMOUS may not use resources that have ACLs for alice only."""
    async def main() -> None:
        async with running_broker(tmp_path, **ACL_CONF) as broker, client_for(broker) as c:
            r = await c.request(create_topics("secret", 1))
            assert r.topics[0].error_code == ErrorCode.none
            await setup(c, broker, "open-group")
            await wait_coordinator(c, "secret-group")
            pid, epoch = await init_pid(c)
            errors = await broker.authorizer.create([
                _only_alice(ResourceType.TRANSACTIONAL_ID, "secret-tx", AclOperation.WRITE),
                _only_alice(ResourceType.GROUP, "secret-group", AclOperation.READ),
                _only_alice(ResourceType.TOPIC, "secret", AclOperation.READ)])
            assert errors == [None, None, None]
            both = {(TOPIC, 0): 1, ("secret", 0): 1}
            assert await txn_commit(c, pid, epoch, both, group="open-group",
                                    txn_id="secret-tx") == dict.fromkeys(
                both, ErrorCode.transactional_id_authorization_failed)
            assert await txn_commit(c, pid, epoch, both, group="secret-group") == dict.fromkeys(
                both, ErrorCode.group_authorization_failed)
            assert await txn_commit(c, pid, epoch, both, group="open-group") == {
                (TOPIC, 0): ErrorCode.none, ("secret", 0): ErrorCode.topic_authorization_failed}

    run(main, timeout=100)
