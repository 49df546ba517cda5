"""The group coordinator on an embedded 3-broker cluster, through the raw wire protocol (S-7.3 -
S-7.5): FindCoordinator and `__consumer_offsets`, join/sync/heartbeat with generation bumps,
generation fencing of commits, offsets and group metadata surviving the coordinator's crash,
COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, session expiry, static membership, deletion and
expiration."""

from __future__ import annotations

import asyncio
import datetime
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.cluster import AsyncCluster
from odradek.coordinator import offsets as schema
from odradek.coordinator.group import Stable
from odradek.protocol.codec import make
from odradek.protocol.records import decode_records, iter_headers
from tests.integration.broker_harness import create_topics, req_module, run
from tests.wire import WireClient

OFFSETS = schema.OFFSETS_TOPIC
FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 100,
        "replica.fetch.backoff.ms": 100}
PROTOCOL_TYPE = "consumer"


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def td(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


async def connect(cluster: AsyncCluster, broker_id: int) -> WireClient:
    return await WireClient.connect("127.0.0.1", cluster.ports[broker_id])


async def eventually(fn: Callable[[], Awaitable[Any]], ok: Callable[[Any], bool],
                     timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await fn()
        if ok(value):
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {value}")
        await asyncio.sleep(0.05)


async def find_coordinator(cluster: AsyncCluster, group: str, version: int = 3) -> int:
    c = await connect(cluster, cluster.live_brokers()[0])
    m = req_module(10, version)
    try:
        r = await eventually(lambda: c.request(make(m.FindCoordinatorRequest, key=group,
                                                    key_type=0)),
                             lambda r: r.error_code == ErrorCode.none,
                             what=f"a coordinator for {group}")
    finally:
        await c.close()
    assert r.port == cluster.ports[r.node_id]
    return r.node_id


async def create_topic(cluster: AsyncCluster, name: str, partitions: int) -> None:
    c = await connect(cluster, cluster.live_brokers()[0])
    try:
        r = await c.request(create_topics(name, partitions,
                                          replication_factor=min(3, cluster.size)))
        assert r.topics[0].error_code == ErrorCode.none
    finally:
        await c.close()
    await cluster.wait_for(lambda: all(
        (t := b.metadata_cache.topic(name)) is not None and len(t.partitions) == partitions
        for b in cluster.brokers.values() if b.started), what=f"topic {name}")


def offsets_partition(cluster: AsyncCluster, group: str) -> int:
    b = cluster.brokers[cluster.live_brokers()[0]]
    return b.group_coordinator.partition_for(group)


class Member:
    """One group member speaking the wire protocol to its group's coordinator."""

    def __init__(self, cluster: AsyncCluster, group: str, *, client_id: str = "m",
                 topics: tuple[str, ...] = ("t",), session_ms: int = 10000,
                 rebalance_ms: int = 10000, instance_id: str | None = None,
                 protocols: list[tuple[str, bytes]] | None = None) -> None:
        self.cluster = cluster
        self.group = group
        self.client_id = client_id
        self.session_ms = session_ms
        self.rebalance_ms = rebalance_ms
        self.instance_id = instance_id
        self.protocols = protocols or [("range", subscription(*topics))]
        self.member_id = ""
        self.generation = -1
        self.conn: WireClient | None = None
        self.coordinator = -1

    async def connect(self, broker_id: int | None = None) -> WireClient:
        if self.conn is not None:
            await self.conn.close()
        if broker_id is None:
            broker_id = await find_coordinator(self.cluster, self.group)
        self.coordinator = broker_id
        self.conn = await connect(self.cluster, broker_id)
        return self.conn

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    async def request(self, req: Any, timeout: float = 15.0) -> Any:
        if self.conn is None:
            await self.connect()
        assert self.conn is not None
        # JoinGroup/SyncGroup may wait: a connection of its own, like a real client's.
        return await self.conn.request(req, timeout)

    def join_request(self, version: int = 5) -> Any:
        m = req_module(11, version)
        return make(m.JoinGroupRequest, group_id=self.group, session_timeout=td(self.session_ms),
                    rebalance_timeout=td(self.rebalance_ms), member_id=self.member_id,
                    group_instance_id=self.instance_id, protocol_type=PROTOCOL_TYPE,
                    protocols=tuple(m.JoinGroupRequestProtocol(name=n, metadata=d)
                                    for n, d in self.protocols), reason=None)

    async def join(self, version: int = 5) -> Any:
        """JoinGroup, retrying once with the member id handed out (MEMBER_ID_REQUIRED)."""
        r = await self.request(self.join_request(version))
        if r.error_code == ErrorCode.member_id_required:
            self.member_id = r.member_id
            r = await self.request(self.join_request(version))
        if r.error_code == ErrorCode.none:
            self.member_id, self.generation = r.member_id, r.generation_id
        return r

    def start_join(self, version: int = 5) -> asyncio.Future[Any]:
        return asyncio.ensure_future(self.join(version))

    async def sync(self, assignments: dict[str, bytes] | None = None, version: int = 3,
                   generation: int | None = None) -> Any:
        m = req_module(14, version)
        return await self.request(make(
            m.SyncGroupRequest, group_id=self.group,
            generation_id=self.generation if generation is None else generation,
            member_id=self.member_id, group_instance_id=self.instance_id,
            protocol_type=PROTOCOL_TYPE, protocol_name="range",
            assignments=tuple(m.SyncGroupRequestAssignment(member_id=k, assignment=v)
                              for k, v in (assignments or {}).items())))

    async def heartbeat(self, member_id: str | None = None, generation: int | None = None
                        ) -> int:
        m = req_module(12, 4)
        r = await self.request(m.HeartbeatRequest(
            group_id=self.group, generation_id=self.generation if generation is None
            else generation, member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance_id))
        return r.error_code

    async def leave(self) -> Any:
        m = req_module(13, 3)
        return await self.request(m.LeaveGroupRequest(group_id=self.group, members=(
            m.MemberIdentity(member_id=self.member_id, group_instance_id=self.instance_id),)))

    async def commit(self, offsets: dict[tuple[str, int], int], *, generation: int | None = None,
                     member_id: str | None = None, version: int = 8,
                     retention_ms: int = -1) -> dict[tuple[str, int], int]:
        m = req_module(8, version)
        by_topic: dict[str, list[Any]] = {}
        for (t, p), off in offsets.items():
            by_topic.setdefault(t, []).append(make(
                m.OffsetCommitRequestPartition, partition_index=p, committed_offset=off,
                committed_leader_epoch=-1, committed_metadata=f"meta-{off}"))
        r = await self.request(make(
            m.OffsetCommitRequest, group_id=self.group,
            generation_id_or_member_epoch=self.generation if generation is None else generation,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance_id, retention_time=td(retention_ms),
            topics=tuple(m.OffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                         for t, ps in by_topic.items())))
        return {(t.name, p.partition_index): p.error_code
                for t in r.topics for p in t.partitions}

    async def fetch_offsets(self, partitions: list[tuple[str, int]] | None
                            ) -> tuple[int, dict[tuple[str, int], tuple[int, str, int]]]:
        """(top-level error, (topic, partition) -> (offset, metadata, error)), OffsetFetch v7."""
        m = req_module(9, 7)
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
            topics = tuple(m.OffsetFetchRequestTopic(name=t, partition_indexes=tuple(ps))
                           for t, ps in by_topic.items())
        r = await self.request(m.OffsetFetchRequest(group_id=self.group, topics=topics,
                                                    require_stable=True))
        return r.error_code, {(t.name, p.partition_index): (p.committed_offset, p.metadata,
                                                            p.error_code)
                              for t in r.topics for p in t.partitions}

    async def describe(self) -> Any:
        m = req_module(15, 5)
        r = await self.request(m.DescribeGroupsRequest(groups=(self.group,),
                                                       include_authorized_operations=False))
        return r.groups[0]


async def stable_pair(cluster: AsyncCluster, group: str, **kw: Any) -> tuple[Member, Member]:
    """Two members in a Stable group, generation 2 (a joined alone first, then b)."""
    a = Member(cluster, group, client_id="a", **kw)
    b = Member(cluster, group, client_id="b", **kw)
    r = await a.join()
    assert r.error_code == ErrorCode.none and r.generation_id == 1 and r.leader == a.member_id
    assert (await a.sync({a.member_id: b"a:all"})).assignment == b"a:all"
    b_join = b.start_join()
    await eventually(a.heartbeat, lambda e: e == ErrorCode.rebalance_in_progress,
                     what="a told to rejoin")
    ra = await a.join()
    rb = await b_join
    assert ra.generation_id == rb.generation_id == 2
    b_sync = asyncio.ensure_future(b.sync())
    await asyncio.sleep(0.05)
    assert not b_sync.done()  # followers wait for the leader's assignment
    assert (await a.sync({a.member_id: b"a:half", b.member_id: b"b:half"})).assignment == \
        b"a:half"
    assert (await b_sync).assignment == b"b:half"
    return a, b


def with_cluster(tmp_path: Path, body: Callable[[AsyncCluster], Awaitable[None]],
                 overrides: dict[str, Any] | None = None, timeout: float = 90) -> None:
    async def main() -> None:
        async with AsyncCluster(3, data_dir=tmp_path,
                                overrides={**FAST, **(overrides or {})}) as cluster:
            await create_topic(cluster, "t", 4)
            await body(cluster)
    run(main, timeout)


# ---------------------------------------------------------------------------------------------

def test_find_coordinator_creates_the_offsets_topic(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        c = await connect(cluster, 0)
        m = req_module(10, 3)
        first = await c.request(m.FindCoordinatorRequest(key="my-group", key_type=0))
        assert first.error_code == ErrorCode.coordinator_not_available  # being created
        node = await find_coordinator(cluster, "my-group")
        info = cluster.brokers[0].metadata_cache.topic(OFFSETS)
        assert info is not None and info.internal and len(info.partitions) == 50
        assert all(len(p.replicas) == 3 for p in info.partitions.values())
        assert cluster.brokers[0].topic_config(OFFSETS).compact
        assert cluster.brokers[0].topic_config(OFFSETS).segment_bytes == 104857600
        # abs("my-group".hashCode()) % 50 == 12: the coordinator leads partition 12
        assert offsets_partition(cluster, "my-group") == 12
        assert info.partitions[12].leader == node
        # v0 (no key type) and v4 (batched keys) agree; unknown key types are refused
        r0 = await c.request(req_module(10, 0).FindCoordinatorRequest(key="my-group"))
        assert (r0.error_code, r0.node_id) == (ErrorCode.none, node)
        m4 = req_module(10, 4)
        r4 = await c.request(m4.FindCoordinatorRequest(key_type=0,
                                                       coordinator_keys=("my-group", "other")))
        got = {x.key: (x.error_code, x.node_id) for x in r4.coordinators}
        assert got["my-group"] == (ErrorCode.none, node)
        assert got["other"][0] == ErrorCode.none
        tx = await c.request(m.FindCoordinatorRequest(key="tx", key_type=2))
        assert tx.error_code == ErrorCode.invalid_request
        await c.close()
    with_cluster(tmp_path, body)


def test_join_sync_heartbeat_two_members_with_generation_bumps(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        a, b = await stable_pair(cluster, "g")
        assert await a.heartbeat() == ErrorCode.none
        assert await b.heartbeat() == ErrorCode.none
        d = await a.describe()
        assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == \
            (ErrorCode.none, "Stable", "consumer", "range")
        assert {m.member_id: m.member_assignment for m in d.members} == \
            {a.member_id: b"a:half", b.member_id: b"b:half"}
        assert all(m.client_host == "/127.0.0.1" for m in d.members)
        # the follower rejoining with the same metadata gets the current generation back
        r = await b.join()
        assert (r.error_code, r.generation_id, r.leader, r.members) == \
            (ErrorCode.none, 2, a.member_id, ())
        # the leader leaves: b must rejoin and leads generation 3 alone
        assert (await a.leave()).members[0].error_code == ErrorCode.none
        assert await b.heartbeat() == ErrorCode.rebalance_in_progress
        r = await b.join()
        assert (r.generation_id, r.leader) == (3, b.member_id)
        assert [m.member_id for m in r.members] == [b.member_id]
        assert (await b.sync({b.member_id: b"b:all"})).assignment == b"b:all"
        assert await a.heartbeat() == ErrorCode.unknown_member_id
        # ListGroups on the coordinator
        lm = req_module(16, 4)
        lg = await b.request(lm.ListGroupsRequest(states_filter=("Stable",)))
        assert [(g.group_id, g.protocol_type, g.group_state) for g in lg.groups] == \
            [("g", "consumer", "Stable")]
        # b leaves: the group is Empty and keeps its generation
        await b.leave()
        d = await b.describe()
        assert (d.group_state, d.members) == ("Empty", ())
        for m in (a, b):
            await m.close()
    with_cluster(tmp_path, body)


def test_initial_rebalance_delay_gathers_members_into_one_generation(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        members = [Member(cluster, "g", client_id=f"m{i}") for i in range(3)]
        loop = asyncio.get_running_loop()
        start = loop.time()
        joins = []
        for m in members:
            joins.append(m.start_join())
            await asyncio.sleep(0.1)
        results = await asyncio.gather(*joins)
        assert loop.time() - start >= 0.4  # KIP-134: the delay restarted per new member
        assert {r.generation_id for r in results} == {1}
        leaders = [r for r in results if r.members]
        assert len(leaders) == 1 and len(leaders[0].members) == 3
        for m in members:
            await m.close()
    with_cluster(tmp_path, body, overrides={"group.initial.rebalance.delay.ms": 300})


def test_commits_are_fenced_by_generation_and_member(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        a, b = await stable_pair(cluster, "g")
        tp0, tp1 = ("t", 0), ("t", 1)
        assert await a.commit({tp0: 5, tp1: 6}) == {tp0: ErrorCode.none, tp1: ErrorCode.none}
        assert await a.commit({tp0: 1}, generation=1) == {tp0: ErrorCode.illegal_generation}
        assert await a.commit({tp0: 1}, member_id="nobody") == {tp0: ErrorCode.unknown_member_id}
        # a simple consumer (generation -1) may not commit for a group with members
        assert await a.commit({tp0: 1}, generation=-1, member_id="") == \
            {tp0: ErrorCode.unknown_member_id}
        # an unknown topic never reaches the coordinator
        assert await a.commit({("nope", 0): 1, tp0: 7}) == \
            {("nope", 0): ErrorCode.unknown_topic_or_partition, tp0: ErrorCode.none}
        error, got = await a.fetch_offsets([tp0, tp1, ("t", 2)])
        assert error == ErrorCode.none
        assert got == {tp0: (7, "meta-7", 0), tp1: (6, "meta-6", 0), ("t", 2): (-1, "", 0)}
        # a third member joins: generation 3 starts, generation 2 commits are refused
        c = Member(cluster, "g", client_id="c")
        c_join = c.start_join()
        await eventually(a.heartbeat, lambda e: e == ErrorCode.rebalance_in_progress,
                         what="rebalance")
        # during PreparingRebalance the current generation may still commit
        assert await b.commit({tp1: 8}) == {tp1: ErrorCode.none}
        ra, _rb = await asyncio.gather(a.join(), b.join())
        await c_join
        assert ra.generation_id == 3
        # CompletingRebalance: commits wait for the assignment
        assert await b.commit({tp1: 9}) == {tp1: ErrorCode.rebalance_in_progress}
        assert await b.commit({tp1: 9}, generation=2) == {tp1: ErrorCode.illegal_generation}
        # OffsetFetch v8: several groups, all partitions of each (topics null)
        m8 = req_module(9, 8)
        r = await a.request(m8.OffsetFetchRequest(groups=(
            m8.OffsetFetchRequestGroup(group_id="g", topics=None),
            m8.OffsetFetchRequestGroup(group_id="unknown-group", topics=None)),
            require_stable=False))
        groups = {g.group_id: g for g in r.groups}
        assert {(t.name, p.partition_index): p.committed_offset
                for t in groups["g"].topics for p in t.partitions} == {tp0: 7, tp1: 8}
        # unknown-group maps to some partition: this broker answers it or NOT_COORDINATOR
        assert groups["unknown-group"].error_code in (ErrorCode.none, ErrorCode.not_coordinator)
        for m in (a, b, c):
            await m.close()
    with_cluster(tmp_path, body)


def test_simple_consumer_commits_without_a_group(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        s = Member(cluster, "simple")
        assert await s.commit({("t", 3): 42}, generation=-1, member_id="") == \
            {("t", 3): ErrorCode.none}
        # OffsetCommit v2 with a retention time: an explicit expire timestamp (value v1)
        assert await s.commit({("t", 2): 1}, generation=-1, member_id="", version=2) == \
            {("t", 2): ErrorCode.none}
        error, got = await s.fetch_offsets(None)
        assert error == ErrorCode.none and got == {("t", 3): (42, "meta-42", 0),
                                                   ("t", 2): (1, "meta-1", 0)}
        d = await s.describe()
        assert (d.group_state, d.protocol_type) == ("Empty", "")
        # OffsetCommit v2-v4 with a retention time: an explicit expire timestamp, written as
        # offset value v1, and the offset expires then, not offsets.retention.minutes later
        assert await s.commit({("t", 1): 9}, generation=-1, member_id="", version=2,
                              retention_ms=60_000) == {("t", 1): ErrorCode.none}
        coordinator = cluster.brokers[s.coordinator].group_coordinator
        p = offsets_partition(cluster, "simple")
        key, value = offsets_log_records(cluster, s.coordinator, p)[-1]
        assert key == schema.offset_commit_key("simple", "t", 1)
        assert value is not None and value[:2] == b"\x00\x01"
        om = schema.read_offset_value(value)
        assert om is not None and om.expire_timestamp == om.commit_timestamp + 60_000
        assert coordinator.manager.cleanup_expired(om.commit_timestamp + 59_999) == 0
        assert coordinator.manager.cleanup_expired(om.commit_timestamp + 60_000) == 1
        assert ("t", 1) not in (await s.fetch_offsets(None))[1]
        # a member with a generation cannot commit to a group that does not exist
        ghost = Member(cluster, "ghost")
        assert await ghost.commit({("t", 0): 1}, generation=3, member_id="x") == \
            {("t", 0): ErrorCode.illegal_generation}
        await s.close()
        await ghost.close()
    with_cluster(tmp_path, body)


def test_offsets_and_group_survive_the_coordinators_crash(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        a, b = await stable_pair(cluster, "g")
        committed = {("t", p): 100 + p for p in range(4)}
        assert set((await a.commit(committed)).values()) == {ErrorCode.none}
        old = a.coordinator
        p = offsets_partition(cluster, "g")
        # acks=-1: every ISR replica of the offsets partition has the records already
        for bid in cluster.live_brokers():
            part = cluster.brokers[bid].replica_manager.partitions[(OFFSETS, p)]
            assert part.log_end_offset >= 2
        await cluster.kill_broker(old)
        new = await eventually(lambda: find_coordinator(cluster, "g"),
                               lambda n: n != old, what="a new coordinator")
        for m in (a, b):
            await m.connect(new)
        _error, got = await eventually(lambda: a.fetch_offsets(list(committed)),
                                      lambda r: r[0] == ErrorCode.none, what="offsets loaded")
        assert {tp: v[0] for tp, v in got.items()} == committed
        # the group metadata record was replicated too: same generation, members, assignment
        group = cluster.brokers[new].group_coordinator.manager.get_group("g")
        assert group is not None and group.is_(Stable) and group.generation_id == 2
        assert {m.member_id: m.assignment for m in group.members.values()} == \
            {a.member_id: b"a:half", b.member_id: b"b:half"}
        assert await a.heartbeat() == ErrorCode.none
        assert await b.heartbeat() == ErrorCode.none
        assert set((await b.commit({("t", 0): 200})).values()) == {ErrorCode.none}
        _error, got = await a.fetch_offsets([("t", 0)])
        assert got[("t", 0)][0] == 200
        for m in (a, b):
            await m.close()
    with_cluster(tmp_path, body)


def test_load_in_progress_and_not_coordinator(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        a, b = await stable_pair(cluster, "g")
        assert set((await a.commit({("t", 1): 11})).values()) == {ErrorCode.none}
        coordinator = a.coordinator
        others = [x for x in cluster.live_brokers() if x != coordinator]
        # any other broker: NOT_COORDINATOR for every group API
        stranger = Member(cluster, "g", client_id="s")
        stranger.member_id, stranger.generation = a.member_id, a.generation
        await stranger.connect(others[0])
        assert (await stranger.join()).error_code == ErrorCode.not_coordinator
        assert await stranger.heartbeat() == ErrorCode.not_coordinator
        assert (await stranger.sync()).error_code == ErrorCode.not_coordinator
        assert await stranger.commit({("t", 1): 1}) == {("t", 1): ErrorCode.not_coordinator}
        assert (await stranger.fetch_offsets([("t", 1)]))[0] == ErrorCode.not_coordinator
        assert (await stranger.describe()).error_code == ErrorCode.not_coordinator
        # hold every survivor's load after its first chunk, then crash the coordinator
        gate = asyncio.Event()

        async def held() -> None:
            await gate.wait()
        for x in others:
            cluster.brokers[x].group_coordinator.manager.load_pause = held
        p = offsets_partition(cluster, "g")
        await cluster.kill_broker(coordinator)
        await cluster.wait_for(lambda: any(p in cluster.brokers[x].group_coordinator.manager
                                           .loading for x in others), what="a load")
        new = next(x for x in others
                   if p in cluster.brokers[x].group_coordinator.manager.loading)
        for m in (a, b):
            await m.connect(new)
        assert (await a.fetch_offsets([("t", 1)]))[0] == ErrorCode.coordinator_load_in_progress
        assert await a.commit({("t", 1): 12}) == \
            {("t", 1): ErrorCode.coordinator_load_in_progress}
        assert (await b.join()).error_code == ErrorCode.coordinator_load_in_progress
        assert await a.heartbeat() == ErrorCode.none  # answered blindly while loading
        assert (await a.sync()).error_code == ErrorCode.rebalance_in_progress
        assert (await a.describe()).error_code == ErrorCode.coordinator_load_in_progress
        lg = await a.request(req_module(16, 4).ListGroupsRequest(states_filter=()))
        assert lg.error_code == ErrorCode.coordinator_load_in_progress
        gate.set()
        _error, got = await eventually(lambda: a.fetch_offsets([("t", 1)]),
                                      lambda r: r[0] == ErrorCode.none, what="loaded")
        assert got[("t", 1)][0] == 11
        assert await a.heartbeat() == ErrorCode.none
        for m in (a, b, stranger):
            await m.close()
    with_cluster(tmp_path, body)


def test_session_timeout_removes_a_member_and_rebalances(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        a, b = await stable_pair(cluster, "g", session_ms=600, rebalance_ms=5000)
        loop = asyncio.get_running_loop()
        start = loop.time()
        # a keeps heartbeating, b goes silent
        error = await eventually(a.heartbeat, lambda e: e != ErrorCode.none, timeout=10,
                                 what="b's session to expire")
        assert error == ErrorCode.rebalance_in_progress
        assert loop.time() - start >= 0.5
        r = await a.join()
        assert (r.generation_id, r.leader) == (3, a.member_id)
        assert [m.member_id for m in r.members] == [a.member_id]
        await a.sync({a.member_id: b"all"})
        assert await b.heartbeat() == ErrorCode.unknown_member_id
        d = await a.describe()
        assert (d.group_state, [m.member_id for m in d.members]) == ("Stable", [a.member_id])
        for m in (a, b):
            await m.close()
    with_cluster(tmp_path, body)


def test_static_member_rejoin_keeps_its_assignment_without_a_rebalance(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        s1 = Member(cluster, "static", client_id="s1", instance_id="i1")
        s2 = Member(cluster, "static", client_id="s2", instance_id="i2")
        # static members join with no member id and no MEMBER_ID_REQUIRED round
        r1 = s1.start_join()
        r2 = s2.start_join()
        j1, j2 = await asyncio.gather(r1, r2)
        assert j1.error_code == j2.error_code == ErrorCode.none
        assert j1.generation_id == j2.generation_id == 1
        leader, follower = (s1, s2) if j1.members else (s2, s1)
        assert {m.group_instance_id for m in (j1.members or j2.members)} == {"i1", "i2"}
        follower_sync = asyncio.ensure_future(follower.sync())
        await leader.sync({s1.member_id: b"for-i1", s2.member_id: b"for-i2"})
        await follower_sync
        old_id = s1.member_id
        # s1 restarts: a new process, no member id, the same group.instance.id
        await s1.close()
        s1.member_id, s1.generation = "", -1
        r = await s1.join()
        assert r.error_code == ErrorCode.none
        assert r.generation_id == 1  # no rebalance
        assert r.member_id != old_id and r.member_id.startswith("i1-")
        assert r.members == ()  # it is not asked to assign
        assert r.leader == (old_id if leader is s1 else s2.member_id)
        assert (await s1.sync()).assignment == b"for-i1"
        assert await s2.heartbeat() == ErrorCode.none  # the other member saw nothing
        assert await s1.heartbeat() == ErrorCode.none
        # the old incarnation is fenced
        assert await s1.heartbeat(member_id=old_id) == ErrorCode.fenced_instance_id
        d = await s1.describe()
        assert d.group_state == "Stable"
        assert {m.group_instance_id: m.member_assignment for m in d.members} == \
            {"i1": b"for-i1", "i2": b"for-i2"}
        # the new member id is persisted: after a coordinator crash it is still the member
        coordinator = s1.coordinator
        await cluster.kill_broker(coordinator)
        new = await eventually(lambda: find_coordinator(cluster, "static"),
                               lambda n: n != coordinator, what="a new coordinator")
        for m in (s1, s2):
            await m.connect(new)
        manager = cluster.brokers[new].group_coordinator.manager
        await cluster.wait_for(lambda: manager.get_group("static") is not None,
                               what="the group loaded")
        group = manager.get_group("static")
        assert group is not None and group.static_members["i1"] == s1.member_id
        assert group.generation_id == 1
        assert await s1.heartbeat() == ErrorCode.none
        assert await s1.heartbeat(member_id=old_id) == ErrorCode.fenced_instance_id
        for m in (s1, s2):
            await m.close()
    with_cluster(tmp_path, body, overrides={"group.initial.rebalance.delay.ms": 200})


def test_protocol_errors(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        a = Member(cluster, "g", session_ms=50)
        assert (await a.join()).error_code == ErrorCode.invalid_session_timeout
        a.session_ms = 10000
        r = await a.request(a.join_request(version=5))
        # the new member id is the client id (the request header's) and a UUID
        assert r.error_code == ErrorCode.member_id_required
        assert r.member_id.startswith("wire-test-")
        # JoinGroup v3 (before KIP-394): the member is added at once
        v3 = Member(cluster, "g3")
        r = await v3.join(version=3)
        assert r.error_code == ErrorCode.none and r.generation_id == 1
        # a member with a protocol nobody shares cannot join a group with members
        odd = Member(cluster, "g3", protocols=[("sticky", b"")])
        assert (await odd.join()).error_code == ErrorCode.inconsistent_group_protocol
        # an unknown member id of an existing group
        ghost = Member(cluster, "g3")
        ghost.member_id = "ghost"
        assert (await ghost.join()).error_code == ErrorCode.unknown_member_id
        assert (await ghost.sync()).error_code == ErrorCode.unknown_member_id
        # empty group id
        empty = Member(cluster, "")
        await empty.connect(cluster.live_brokers()[0])
        assert (await empty.join()).error_code == ErrorCode.invalid_group_id
        # LeaveGroup v0 (single member, error at the top level) and v3 (batch)
        m0 = req_module(13, 0)
        r = await v3.request(m0.LeaveGroupRequest(group_id="g3", member_id="nobody"))
        assert r.error_code == ErrorCode.unknown_member_id
        m3 = req_module(13, 5)
        r = await v3.request(m3.LeaveGroupRequest(group_id="g3", members=(
            m3.MemberIdentity(member_id=v3.member_id, group_instance_id=None, reason="bye"),
            m3.MemberIdentity(member_id="nobody", group_instance_id=None, reason=None))))
        assert r.error_code == ErrorCode.none
        assert [(m.member_id, m.error_code) for m in r.members] == \
            [(v3.member_id, ErrorCode.none), ("nobody", ErrorCode.unknown_member_id)]
        for m in (a, v3, odd, ghost, empty):
            await m.close()
    with_cluster(tmp_path, body)


def offsets_log_records(cluster: AsyncCluster, broker_id: int, partition: int
                        ) -> list[tuple[bytes | None, bytes | None]]:
    p = cluster.brokers[broker_id].replica_manager.partitions[(OFFSETS, partition)]
    data = p.log.read(p.log_start_offset, 1 << 30).read_bytes()
    return [(r.key, r.value) for h in iter_headers(data)
            for r in decode_records(data[h.position:h.position + h.size])]


def test_delete_groups_offset_delete_and_expiration(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        await create_topic(cluster, "other", 1)
        a, b = await stable_pair(cluster, "g")
        assert set((await a.commit({("t", 0): 1, ("other", 0): 2})).values()) == \
            {ErrorCode.none}
        dm = req_module(42, 2)
        r = await a.request(dm.DeleteGroupsRequest(groups_names=("g",)))
        assert r.results[0].error_code == ErrorCode.non_empty_group
        om = req_module(47, 0)
        r = await a.request(om.OffsetDeleteRequest(group_id="g", topics=(
            om.OffsetDeleteRequestTopic(name="t", partitions=(
                om.OffsetDeleteRequestPartition(partition_index=0),)),
            om.OffsetDeleteRequestTopic(name="other", partitions=(
                om.OffsetDeleteRequestPartition(partition_index=0),)))))
        got = {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}
        assert got == {("t", 0): ErrorCode.group_subscribed_to_topic,
                       ("other", 0): ErrorCode.none}
        assert (await a.fetch_offsets(None))[1] == {("t", 0): (1, "meta-1", 0)}
        await a.leave()
        await b.leave()
        r = await a.request(dm.DeleteGroupsRequest(groups_names=("g", "never-was")))
        errors = {x.group_id: x.error_code for x in r.results}
        assert errors["g"] == ErrorCode.none
        assert errors["never-was"] in (ErrorCode.group_id_not_found, ErrorCode.not_coordinator)
        assert (await a.fetch_offsets(None))[1] == {}
        # tombstones in the log: the offsets and the group metadata are deleted
        p = offsets_partition(cluster, "g")
        records = offsets_log_records(cluster, a.coordinator, p)
        assert (schema.group_metadata_key("g"), None) in records
        assert (schema.offset_commit_key("g", "t", 0), None) in records
        # expiration: a simple consumer's offsets go `offsets.retention.minutes` after the
        # commit, by the periodic task (run here by hand, with a clock far ahead)
        s = Member(cluster, "g")
        assert await s.commit({("t", 1): 5}, generation=-1, member_id="") == \
            {("t", 1): ErrorCode.none}
        coordinator = cluster.brokers[a.coordinator].group_coordinator
        manager = coordinator.manager
        assert manager.cleanup_expired(coordinator.clock() + 1000) == 0
        assert manager.cleanup_expired(coordinator.clock() + 7 * 24 * 3600 * 1000 + 1) == 1
        assert (await s.fetch_offsets(None))[1] == {}
        assert manager.get_group("g") is None  # Empty without offsets: Dead and gone
        await cluster.wait_for(lambda: offsets_log_records(cluster, a.coordinator, p)[-1] == (
            schema.offset_commit_key("g", "t", 1), None), what="the expiry tombstone")
        leader = cluster.brokers[a.coordinator].replica_manager.partitions[(OFFSETS, p)]
        await cluster.wait_for(lambda: leader.high_watermark == leader.log_end_offset,
                               what="the tombstones replicated")  # written with acks=1
        # a new coordinator reading the log sees nothing of "g"
        old = a.coordinator
        await cluster.kill_broker(old)
        new = await eventually(lambda: find_coordinator(cluster, "g"),
                               lambda n: n != old, what="a new coordinator")
        await s.connect(new)
        _error, got = await eventually(lambda: s.fetch_offsets(None),
                                      lambda r: r[0] == ErrorCode.none, what="loaded")
        assert got == {}
        assert cluster.brokers[new].group_coordinator.manager.get_group("g") is None
        for m in (a, b, s):
            await m.close()
    with_cluster(tmp_path, body)


def test_offsets_survive_a_restart_of_a_single_broker(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncCluster(1, data_dir=tmp_path, overrides=FAST) as cluster:
            await create_topic(cluster, "t", 2)
            a = Member(cluster, "g")
            await a.join()
            await a.sync({a.member_id: b"all"})
            assert set((await a.commit({("t", 0): 3, ("t", 1): 4})).values()) == \
                {ErrorCode.none}
            await a.close()
            info = cluster.brokers[0].metadata_cache.topic(OFFSETS)
            assert info is not None and len(info.partitions[0].replicas) == 1  # RF capped
            await cluster.restart_broker(0)
            _error, got = await eventually(lambda: a.fetch_offsets(None),
                                           lambda r: r[0] == ErrorCode.none, what="loaded")
            assert {tp: v[0] for tp, v in got.items()} == {("t", 0): 3, ("t", 1): 4}
            group = cluster.brokers[0].group_coordinator.manager.get_group("g")
            assert group is not None and group.is_(Stable) and group.generation_id == 1
            await a.close()
    run(main, 60)


def test_rebalance_timeout_drops_members_that_do_not_rejoin(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        a, b = await stable_pair(cluster, "g", rebalance_ms=800)
        c = Member(cluster, "g", rebalance_ms=800)
        loop = asyncio.get_running_loop()
        c_join = c.start_join()
        await eventually(a.heartbeat, lambda e: e == ErrorCode.rebalance_in_progress,
                         what="rebalance")
        start = loop.time()
        ra = await a.join()  # b stays silent (its session is still alive)
        rc = await c_join
        assert loop.time() - start >= 0.5  # the join phase waited for b until the timeout
        assert ra.generation_id == rc.generation_id == 3
        assert ra.leader == a.member_id  # the leader rejoined: it keeps leading
        assert sorted(m.member_id for m in ra.members) == sorted([a.member_id, c.member_id])
        assert await b.heartbeat() == ErrorCode.unknown_member_id
        for m in (a, b, c):
            await m.close()
    with_cluster(tmp_path, body)


def test_a_coordinator_that_becomes_follower_unloads_its_groups(tmp_path: Path) -> None:
    """The coordinator loses its coordination session (cut off, not dead): another broker
    takes its `__consumer_offsets` partitions and loads them; when it comes back it is made a
    follower and unloads its groups, answering NOT_COORDINATOR from then on."""
    async def body(cluster: AsyncCluster) -> None:
        controller = cluster.controller_id()
        group = "g0"
        for i in range(100):  # a group the controller does not coordinate
            group = f"g{i}"
            if await find_coordinator(cluster, group) != controller:
                break
        a, b = await stable_pair(cluster, group)
        assert set((await a.commit({("t", 0): 7})).values()) == {ErrorCode.none}
        old = a.coordinator
        p = offsets_partition(cluster, group)
        old_manager = cluster.brokers[old].group_coordinator.manager
        assert p in old_manager.owned and old_manager.get_group(group) is not None
        store = cluster.brokers[old].store
        store.disconnect()
        store.expire_session()  # its /brokers/ids node goes: the controller moves leadership
        new = await eventually(lambda: find_coordinator(cluster, group),
                               lambda n: n != old, what="a new coordinator")
        for m in (a, b):
            await m.connect(new)
        _error, got = await eventually(lambda: a.fetch_offsets([("t", 0)]),
                                       lambda r: r[0] == ErrorCode.none, what="loaded")
        assert got[("t", 0)][0] == 7
        assert await a.heartbeat() == ErrorCode.none
        store.reconnect()  # back on a new session: registered again, made a follower
        await cluster.wait_for(lambda: p not in old_manager.owned
                               and old_manager.get_group(group) is None,
                               what="the old coordinator to unload")
        stale = Member(cluster, group)
        stale.member_id, stale.generation = a.member_id, a.generation
        await stale.connect(old)
        assert await stale.heartbeat() == ErrorCode.not_coordinator
        assert (await stale.fetch_offsets([("t", 0)]))[0] == ErrorCode.not_coordinator
        assert await stale.commit({("t", 0): 1}) == {("t", 0): ErrorCode.not_coordinator}
        # the new coordinator goes on; the group survived the move
        assert set((await b.commit({("t", 0): 8})).values()) == {ErrorCode.none}
        assert (await a.fetch_offsets([("t", 0)]))[1][("t", 0)][0] == 8
        for m in (a, b, stale):
            await m.close()
    with_cluster(tmp_path, body)


def test_every_advertised_version(tmp_path: Path) -> None:
    """Each advertised version of each group API, through one join/sync/heartbeat/leave cycle
    per JoinGroup version and one commit/fetch per offsets API version."""
    async def body(cluster: AsyncCluster) -> None:
        from odradek.server.apis import APIS

        ranges = {APIS[k][0]: (APIS[k][1], APIS[k][2]) for k in (8, 9, 10, 11, 12, 13, 14, 15,
                                                                    16, 42, 47)}
        assert ranges == {"OffsetCommit": (2, 8), "OffsetFetch": (1, 8),
                          "FindCoordinator": (0, 4), "JoinGroup": (0, 7), "Heartbeat": (0, 4),
                          "LeaveGroup": (0, 5), "SyncGroup": (0, 5), "DescribeGroups": (0, 5),
                          "ListGroups": (0, 4), "DeleteGroups": (0, 2), "OffsetDelete": (0, 0)}
        for v in range(5):
            m = req_module(10, v)
            c = await connect(cluster, 0)
            req = (make(m.FindCoordinatorRequest, key_type=0, coordinator_keys=("x",)) if v >= 4
                   else make(m.FindCoordinatorRequest, key="x", key_type=0))
            r = await eventually(lambda req=req, c=c: c.request(req),
                                 lambda r, v=v: (r.coordinators[0] if v >= 4 else r)
                                 .error_code == 0,
                                 what=f"FindCoordinator v{v}")
            assert (r.coordinators[0] if v >= 4 else r).port > 0
            await c.close()
        members = []
        for v in range(8):
            m = Member(cluster, f"join-v{v}")
            members.append(m)
            r = await m.join(version=v)
            assert (r.error_code, r.generation_id, r.leader) == (0, 1, m.member_id), v
            assert r.protocol_name == "range" and len(r.members) == 1
            if v >= 7:
                assert r.protocol_type == "consumer"
            s = await m.sync({m.member_id: b"x%d" % v}, version=min(v, 5))
            assert (s.error_code, s.assignment) == (0, b"x%d" % v), v
            hm = req_module(12, min(v, 4))
            h = await m.request(make(hm.HeartbeatRequest, group_id=m.group, generation_id=1,
                                     member_id=m.member_id, group_instance_id=None))
            assert h.error_code == 0, v
            lv = min(v, 5)
            lm = req_module(13, lv)
            if lv <= 2:
                lr = await m.request(lm.LeaveGroupRequest(group_id=m.group,
                                                          member_id=m.member_id))
                assert lr.error_code == 0
            else:
                lr = await m.request(make(lm.LeaveGroupRequest, group_id=m.group, members=(
                    make(lm.MemberIdentity, member_id=m.member_id, group_instance_id=None,
                         reason="done"),)))
                assert lr.error_code == 0 and lr.members[0].error_code == 0
            d = await m.describe()
            assert d.group_state == "Empty", v
        simple = Member(cluster, "simple")
        for v in range(2, 9):
            got = await simple.commit({("t", 0): v}, generation=-1, member_id="", version=v)
            assert got == {("t", 0): 0}, v
        for v in range(1, 9):
            fm = req_module(9, v)
            if v >= 8:
                r = await simple.request(make(fm.OffsetFetchRequest, require_stable=False,
                                              groups=(fm.OffsetFetchRequestGroup(
                                                  group_id="simple", topics=None),)))
                assert r.groups[0].error_code == 0
                parts = [p for t in r.groups[0].topics for p in t.partitions]
            else:
                r = await simple.request(make(fm.OffsetFetchRequest, group_id="simple",
                                              require_stable=False, topics=(
                                                  fm.OffsetFetchRequestTopic(
                                                      name="t", partition_indexes=(0,)),)))
                parts = [p for t in r.topics for p in t.partitions]
            assert [(p.partition_index, p.committed_offset, p.error_code) for p in parts] == \
                [(0, 8, 0)], v
        for v in range(6):
            dm = req_module(15, v)
            r = await members[7].request(make(dm.DescribeGroupsRequest, groups=("join-v7",),
                                              include_authorized_operations=False))
            assert (r.groups[0].error_code, r.groups[0].group_state) == (0, "Empty"), v
        for v in range(5):
            lm = req_module(16, v)
            r = await members[7].request(make(lm.ListGroupsRequest, states_filter=()))
            assert r.error_code == 0 and "join-v7" in {g.group_id for g in r.groups}, v
        for v in range(3):
            dm = req_module(42, v)
            r = await members[v].request(dm.DeleteGroupsRequest(groups_names=(f"join-v{v}",)))
            assert [(x.group_id, x.error_code) for x in r.results] == [(f"join-v{v}", 0)], v
        om = req_module(47, 0)
        r = await simple.request(om.OffsetDeleteRequest(group_id="simple", topics=(
            om.OffsetDeleteRequestTopic(name="t", partitions=(
                om.OffsetDeleteRequestPartition(partition_index=0),)),)))
        assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0
        for m in (*members, simple):
            await m.close()
    with_cluster(tmp_path, body)
