"""Fetch sessions (KIP-227) on real brokers: a consumer's session over the wire (full,
incremental, forgotten partitions, a delayed fetch answering in the session, bad epochs and ids,
closing), and followers replicating through incremental sessions on a 3-broker cluster."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.cluster import AsyncCluster
from odradek.protocol.codec import make
from odradek.server.replication.leader_endpoint import RemoteLeaderEndpoint
from tests.integration.broker_harness import (
    batch,
    client_for,
    create_topics,
    produce,
    req_module,
    run,
    running_broker,
)
from tests.integration.test_replication import create, state

F = req_module(1, 12)


def session_fetch(session_id: int, epoch: int, parts: dict[tuple[str, int], int],
                  forget: list[tuple[str, int]] = (), max_wait_ms: int = 0,  # type: ignore
                  ) -> Any:
    topics: dict[str, list[Any]] = {}
    for (t, p), offset in parts.items():
        topics.setdefault(t, []).append(make(
            F.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=offset,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20))
    forgotten: dict[str, list[int]] = {}
    for t, p in forget:
        forgotten.setdefault(t, []).append(p)
    return make(
        F.FetchRequest, cluster_id=None, replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 24,
        isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=tuple(make(F.FetchTopic, topic=t, partitions=tuple(ps))
                     for t, ps in topics.items()),
        forgotten_topics_data=tuple(make(F.ForgottenTopic, topic=t, partitions=tuple(ps))
                                    for t, ps in forgotten.items()),
        rack_id="")


def answered(response: Any) -> dict[tuple[str, int], Any]:
    return {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}


def test_consumer_session_over_the_wire(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            assert (await c.request(create_topics("s", 3))).topics[0].error_code == 0
            for p in range(3):
                r = await c.request(produce("s", p, batch([b"a", b"b"])))
                assert r.responses[0].partition_responses[0].error_code == 0
            every = {("s", p): 0 for p in range(3)}
            # a full fetch (epoch 0) opens a session and answers every partition
            r = await c.request(session_fetch(0, 0, every))
            sid = r.session_id
            assert r.error_code == 0 and sid != 0 and set(answered(r)) == set(every)
            cache = broker.apis.fetch.sessions  # type: ignore[union-attr]
            assert len(cache) == 1 and cache.num_partitions == 3
            # positions move on for all three; then nothing new: an empty answer
            r = await c.request(session_fetch(sid, 1, {tp: 2 for tp in every}))
            assert r.error_code == 0 and r.session_id == sid and answered(r) == {}
            # a produce to partition 1 shows up alone, without any partition in the request
            await c.request(produce("s", 1, batch([b"c"])))
            r = await c.request(session_fetch(sid, 2, {}))
            assert list(answered(r)) == [("s", 1)] and answered(r)[("s", 1)].records
            # forget partition 0; a delayed fetch waits and answers within the session
            await c.request(session_fetch(sid, 3, {("s", 1): 3}, forget=[("s", 0)]))
            assert cache.num_partitions == 2
            pending = asyncio.ensure_future(c.request(session_fetch(sid, 4, {},
                                                                    max_wait_ms=5000)))
            await asyncio.sleep(0.05)
            async with client_for(broker) as producer:
                await producer.request(produce("s", 2, batch([b"d"])))
            r = await asyncio.wait_for(pending, 5)
            assert r.error_code == 0 and list(answered(r)) == [("s", 2)]
            # bad input: a wrong epoch, an unknown id (nothing answered, session intact)
            for epoch in (4, 6, 2**31 - 1):
                r = await c.request(session_fetch(sid, epoch, {("s", 0): 0}))
                assert r.error_code == ErrorCode.invalid_fetch_session_epoch and not r.responses
            for bad_id, epoch in ((sid + 1, 1), (0, 3), (-7, 2), (sid, -5)):
                r = await c.request(session_fetch(bad_id, epoch, {("s", 0): 0}))
                assert r.error_code in (ErrorCode.fetch_session_id_not_found,
                                        ErrorCode.invalid_fetch_session_epoch), (bad_id, epoch)
                assert not r.responses and r.session_id == 0
            r = await c.request(session_fetch(sid, 5, {("s", 2): 3}))
            assert r.error_code == 0 and answered(r) == {}
            assert cache.sessions[sid].partitions.keys() == {("s", 1), ("s", 2)}
            # epoch -1 closes the session and answers sessionless
            r = await c.request(session_fetch(sid, -1, every))
            assert r.session_id == 0 and set(answered(r)) == set(every) and len(cache) == 0
            # the cache's counts are Kafka's FetchSessionCache metrics
            await c.request(session_fetch(0, 0, every))
            text = broker.metrics.render().decode()
            assert "kafka_server_fetchsessioncache_numincrementalfetchsessions 1.0" in text
            assert "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached 3.0" \
                in text
    run(body, 60)


def test_followers_replicate_through_incremental_sessions(tmp_path: Path) -> None:
    """Followers of 30 partitions: after the first full fetch their requests name only the
    partitions that moved and the idle answers are empty; every record still arrives."""
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path,
                                overrides={"replica.fetch.wait.max.ms": 50}) as cluster:
            await create(cluster, "r", partitions=30)
            sizes: list[tuple[int, int, int]] = []  # (epoch, partitions sent, answered)
            endpoints = [f.endpoint for b in cluster.brokers.values()
                         for f in b.replica_manager.fetcher_manager.fetchers.values()]
            assert endpoints and all(isinstance(e, RemoteLeaderEndpoint) for e in endpoints)
            for e in endpoints:
                send = e._send_fetch  # type: ignore[union-attr]

                async def spy(parts: Any, forgotten: Any, meta: Any, send: Any = send) -> Any:
                    r = await send(parts, forgotten, meta)
                    sizes.append((meta.epoch, len(parts), len(answered(r))))
                    return r
                e._send_fetch = spy  # type: ignore[union-attr]
            leader = state(cluster, "r", 0)["leader"]
            async with client_for(cluster.brokers[leader]) as c:
                for i in range(20):
                    await c.request(produce("r", 0, batch([b"v%d" % i])))
            await cluster.wait_for(lambda: all(
                b.replica_manager.partitions[("r", 0)].log_end_offset == 20
                and b.replica_manager.partitions[("r", 0)].high_watermark == 20
                for b in cluster.brokers.values()), what="followers caught up")
            sizes.clear()
            await cluster.wait_for(lambda: len(sizes) >= 12, what="idle fetches")
            idle = sizes[2:]
            assert all(epoch > 0 and sent == 0 and got == 0 for epoch, sent, got in idle), idle
            caches = [b.apis.fetch.sessions for b in cluster.brokers.values()]  # type: ignore
            assert sum(len(cache) for cache in caches) == len(endpoints)
            assert all(s.privileged for cache in caches for s in cache.sessions.values())
    run(body, 90)


def test_odradek_consumer_fetches_in_a_session(tmp_path: Path) -> None:
    """odradek's consumer: one session with the broker, incremental after the first fetch,
    every record once across partitions with produces interleaved; a session the broker lost
    (evicted, restarted) costs one FETCH_SESSION_ID_NOT_FOUND and a full fetch, nothing more."""
    from odradek.client import AsyncConsumer

    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            assert (await c.request(create_topics("oc", 3))).topics[0].error_code == 0
            conf = {"bootstrap.servers": f"127.0.0.1:{broker.bound_ports[0]}",
                    "auto.offset.reset": "earliest", "fetch.max.wait.ms": 50}
            cache = broker.apis.fetch.sessions  # type: ignore[union-attr]
            async with AsyncConsumer(conf) as consumer:
                consumer.assign([("oc", p) for p in range(3)])
                got: list[tuple[int, int, bytes]] = []
                for i in range(9):
                    await c.request(produce("oc", i % 3, batch([b"v%d" % i])))
                    if i == 5:
                        for sid in list(cache.sessions):
                            cache.remove(sid)  # as if evicted
                    deadline = asyncio.get_running_loop().time() + 10
                    while len(got) <= i and asyncio.get_running_loop().time() < deadline:
                        got += [(r.partition, r.offset, r.value)
                                for r in await consumer.poll(0.2)]
                assert sorted(v for _, _, v in got) == sorted(b"v%d" % i for i in range(9))
                assert len(got) == 9
                handler = next(iter(consumer._sessions.values()))  # type: ignore[attr-defined]
                assert handler.next_metadata.epoch > 1 and len(cache) == 1
    run(body, 60)


def test_quota_throttled_answers_leave_the_session_owing_its_news(tmp_path: Path) -> None:
    """A throttled consumer (KIP-219) gets an empty answer with its throttle time; the quota
    saw the size of what would have gone, and that news comes in the next answer."""
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            assert (await c.request(create_topics("q", 2))).topics[0].error_code == 0
            fetch_api = broker.apis.fetch  # type: ignore[union-attr]
            sizes: list[int] = []
            throttle_ms = [0]

            def quota(header: Any, conn: Any, size: int) -> int:
                sizes.append(size)
                return throttle_ms[0]
            fetch_api.fetch_throttle = quota
            every = {("q", 0): 0, ("q", 1): 0}
            sid = (await c.request(session_fetch(0, 0, every))).session_id
            assert sid != 0
            await c.request(produce("q", 1, batch([b"x" * 500])))
            throttle_ms[0] = 250
            r = await c.request(session_fetch(sid, 1, {}))
            assert (r.error_code, r.session_id, r.responses) == (0, sid, ())
            assert r.throttle_time == datetime.timedelta(milliseconds=250)
            assert sizes[-1] > 500  # the record it would have sent counted
            throttle_ms[0] = 0
            r = await c.request(session_fetch(sid, 2, {}))
            got = answered(r)
            assert list(got) == [("q", 1)] and got[("q", 1)].high_watermark == 1
            assert got[("q", 1)].records
            # a throttled full fetch opens no session
            throttle_ms[0] = 100
            r = await c.request(session_fetch(0, 0, every))
            assert r.session_id == 0 and not r.responses
            assert len(fetch_api.sessions) == 1
    run(body, 60)
