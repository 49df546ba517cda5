"""Configs changed at run time take effect without a restart (S-6.3):
the topic configs of S-6.3 through IncrementalAlterConfigs / AlterConfigs (retention.ms,
retention.bytes, segment.bytes, segment.ms, max.message.bytes, min.insync.replicas,
unclean.leader.election.enable, cleanup.policy), dynamic broker configs (KIP-226: `<default>`
and per-broker, log.* defaults), and KIP-73 replication throttling: a throttled follower
catches up at about the configured rate while unthrottled partitions and acks=1 producers are
not held back, and removing the throttle lets it finish."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client import AsyncAdmin, AsyncProducer
from odradek.client.types import NewTopic
from odradek.cluster import Cluster
from odradek.coordination import paths
from odradek.server.broker import Broker
from tests.integration.broker_harness import batch, produce
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(120)

_names = itertools.count()


def topic_name(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(2, overrides={"log.retention.check.interval.ms": 100,
                               "log.segment.delete.delay.ms": 0,
                               "replica.fetch.backoff.ms": 100,
                               "replica.fetch.wait.max.ms": 100}) as c:
        yield c


async def wait_until(predicate: Callable[[], object], timeout: float = 20.0,
                     what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def run(cluster: Cluster, body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    cluster.run(body(), timeout=100)


async def create(admin: AsyncAdmin, cluster: Cluster, topic: str, partitions: int = 1,
                 config: dict[str, str] | None = None,
                 assignment: dict[int, list[int]] | None = None) -> None:
    spec = NewTopic(topic, -1 if assignment else partitions, -1 if assignment else 2,
                    config or {}, assignment)
    await admin.create_topics([spec])
    brokers = cluster.c.brokers
    hosts = assignment or {p: [b for b, x in brokers.items() if x.started]
                           for p in range(partitions)}
    await wait_until(lambda: all(
        (topic, p) in brokers[b].replica_manager.partitions for p, rs in hosts.items()
        for b in rs), what=f"{topic} on its replicas")


def leader_of(cluster: Cluster, topic: str, p: int = 0) -> Broker:
    for b in cluster.c.brokers.values():
        part = b.replica_manager.partitions.get((topic, p)) if b.started else None
        if part is not None and part.is_leader:
            return b
    raise AssertionError(f"no leader for {topic}-{p}")


async def produce_raw(broker: Broker, topic: str, values: list[bytes], acks: int = -1,
                      partition: int = 0) -> Any:
    c = await WireClient.connect("127.0.0.1", broker.bound_ports[0])
    try:
        r = await c.request(produce(topic, partition, batch(values), acks=acks), timeout=30)
    finally:
        await c.close()
    return r.responses[0].partition_responses[0]


async def fill(broker: Broker, topic: str, count: int, size: int = 200) -> None:
    for i in range(count):
        resp = await produce_raw(broker, topic, [bytes([65 + i % 26]) * size])
        assert resp.error_code == ErrorCode.none, resp


def applied(cluster: Cluster, fn: Callable[[Broker], bool]) -> Callable[[], bool]:
    return lambda: all(fn(b) for b in cluster.c.brokers.values() if b.started)


def logs(cluster: Cluster, topic: str, p: int = 0) -> list[Any]:
    return [b.log_manager.get_log(topic, p) for b in cluster.c.brokers.values() if b.started]


# -- topic configs at run time ------------------------------------------------------------------


def test_retention_ms_at_run_time_deletes_old_segments(cluster: Cluster) -> None:
    topic = topic_name("retention-ms")

    async def body() -> None:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            await create(admin, cluster, topic, config={"segment.bytes": "1024"})
            await fill(leader_of(cluster, topic), topic, 20)
            await wait_until(lambda: all(lg.log_end_offset == 20 for lg in logs(cluster, topic)))
            assert all(lg.num_segments > 3 and lg.log_start_offset == 0
                       for lg in logs(cluster, topic))
            await admin.incremental_alter_configs({("topic", topic): {"retention.ms": "1"}})
            # next retention check, on the leader and the follower alike
            await wait_until(lambda: all(lg.log_start_offset > 0 for lg in logs(cluster, topic)),
                             what="segments deleted by retention.ms")
            assert all(lg.num_segments <= 2 for lg in logs(cluster, topic))
    run(cluster, body)


def test_retention_bytes_at_run_time(cluster: Cluster) -> None:
    topic = topic_name("retention-bytes")

    async def body() -> None:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            await create(admin, cluster, topic, config={"segment.bytes": "1024"})
            await fill(leader_of(cluster, topic), topic, 30)
            await wait_until(lambda: all(lg.log_end_offset == 30 for lg in logs(cluster, topic)))
            before = max(lg.size for lg in logs(cluster, topic))
            assert before > 4096
            await admin.alter_configs({("topic", topic): {"segment.bytes": "1024",
                                                          "retention.bytes": "2048"}})
            await wait_until(lambda: all(lg.size <= 2048 + 1024 and lg.log_start_offset > 0
                                         for lg in logs(cluster, topic)),
                             what="segments deleted by retention.bytes")
    run(cluster, body)


def test_segment_bytes_and_segment_ms_at_run_time(cluster: Cluster) -> None:
    topic = topic_name("segments")

    async def body() -> None:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            await create(admin, cluster, topic)
            leader = leader_of(cluster, topic)
            await fill(leader, topic, 10)
            await wait_until(lambda: all(lg.log_end_offset == 10 for lg in logs(cluster, topic)))
            assert [lg.num_segments for lg in logs(cluster, topic)] == [1, 1]
            await admin.incremental_alter_configs({("topic", topic): {"segment.bytes": "1024"}})
            await wait_until(applied(cluster, lambda b: b.topic_config(topic).segment_bytes
                                     == 1024), what="segment.bytes applied")
            await fill(leader, topic, 10)
            await wait_until(lambda: all(lg.log_end_offset == 20 for lg in logs(cluster, topic)))
            rolled = [lg.num_segments for lg in logs(cluster, topic)]
            assert all(n >= 2 for n in rolled), rolled  # the next roll, on every replica
            # segment.ms: back to big segments, then a time-based roll
            await admin.incremental_alter_configs({("topic", topic): {
                "segment.bytes": None, "segment.ms": "50"}})
            await wait_until(applied(cluster, lambda b: b.topic_config(topic).segment_ms == 50),
                             what="segment.ms applied")
            lg = leader.log_manager.get_log(topic, 0)
            before = lg.num_segments
            for _ in range(200):
                await asyncio.sleep(0.06)
                await fill(leader, topic, 1)
                if lg.num_segments >= before + 2:
                    break
            assert lg.num_segments >= before + 2
    run(cluster, body)


def test_max_message_bytes_at_run_time(cluster: Cluster) -> None:
    topic = topic_name("max-message")

    async def body() -> None:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            await create(admin, cluster, topic)
            leader = leader_of(cluster, topic)
            big = [b"x" * 3000]
            assert (await produce_raw(leader, topic, big)).error_code == ErrorCode.none
            await admin.incremental_alter_configs({("topic", topic):
                                                   {"max.message.bytes": "1000"}})
            await wait_until(applied(cluster, lambda b: b.topic_config(topic).max_message_bytes
                                     == 1000))
            resp = await produce_raw(leader, topic, big)
            assert resp.error_code == ErrorCode.message_too_large
            assert (await produce_raw(leader, topic, [b"x" * 100])).error_code == ErrorCode.none
            await admin.incremental_alter_configs({("topic", topic): {"max.message.bytes": None}})
            await wait_until(applied(cluster, lambda b: b.topic_config(topic).max_message_bytes
                                     > 1000))
            assert (await produce_raw(leader, topic, big)).error_code == ErrorCode.none
    run(cluster, body)


def test_min_insync_replicas_at_run_time(cluster: Cluster) -> None:
    topic = topic_name("min-isr")

    async def body() -> None:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            await create(admin, cluster, topic)
            leader = leader_of(cluster, topic)
            assert (await produce_raw(leader, topic, [b"a"])).error_code == ErrorCode.none
            await admin.incremental_alter_configs({("topic", topic):
                                                   {"min.insync.replicas": "3"}})
            await wait_until(applied(cluster, lambda b: b.topic_config(topic).min_insync_replicas
                                     == 3))
            resp = await produce_raw(leader, topic, [b"b"], acks=-1)
            assert resp.error_code == ErrorCode.not_enough_replicas
            # acks=1 is not bound by min.insync.replicas
            assert (await produce_raw(leader, topic, [b"c"], acks=1)).error_code == \
                ErrorCode.none
            await admin.incremental_alter_configs({("topic", topic):
                                                   {"min.insync.replicas": "2"}})
            await wait_until(applied(cluster, lambda b: b.topic_config(topic).min_insync_replicas
                                     == 2))
            assert (await produce_raw(leader, topic, [b"d"])).error_code == ErrorCode.none
    run(cluster, body)


def test_cleanup_policy_accepted_and_described(cluster: Cluster) -> None:
    topic = topic_name("cleanup")

    async def body() -> None:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            await create(admin, cluster, topic)
            await admin.incremental_alter_configs({("topic", topic): {
                "cleanup.policy": (2, "compact")}})  # APPEND to the default "delete"
            res = await admin.describe_configs([("topic", topic)], include_synonyms=True)
            entry = next(iter(res.values()))["cleanup.policy"]
            assert (entry.value, entry.source) == ("delete,compact", 1)
            await wait_until(applied(cluster, lambda b: b.topic_config(topic).cleanup_policy
                                     == ("delete", "compact")))
            errors = await admin.incremental_alter_configs(
                {("topic", topic): {"cleanup.policy": "shred"}}, raise_errors=False)
            err = next(iter(errors.values()))
            assert err is not None and err.code == ErrorCode.invalid_request
            assert "cleanup.policy" in str(err)
    run(cluster, body)


def test_alter_errors_and_validate_only(cluster: Cluster) -> None:
    topic = topic_name("errors")

    async def body() -> None:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            await create(admin, cluster, topic)

            async def error(resource: tuple[str, str], change: dict[str, Any]) -> Any:
                out = await admin.incremental_alter_configs({resource: change},
                                                            raise_errors=False)
                return next(iter(out.values()))
            e = await error(("topic", "no-such-topic"), {"retention.ms": "1"})
            assert e.code == ErrorCode.unknown_topic_or_partition
            e = await error(("topic", topic), {"no.such.config": "1"})
            assert e.code == ErrorCode.invalid_config and "no.such.config" in str(e)
            e = await error(("topic", topic), {"retention.ms": "soon"})
            assert e.code == ErrorCode.invalid_request and "retention.ms" in str(e)
            e = await error(("topic", topic), {"retention.ms": (2, "1")})  # APPEND
            assert e.code == ErrorCode.invalid_request
            e = await error(("broker", "0"), {"broker.id": "7"})
            assert e.code == ErrorCode.invalid_request and "broker.id" in str(e)
            e = await error(("broker", ""), {"log.dirs": "/x"})
            assert e.code == ErrorCode.invalid_request and "log.dirs" in str(e)
            # validate_only: checked, not written
            out = await admin.incremental_alter_configs(
                {("topic", topic): {"retention.ms": "1234"}}, validate_only=True)
            assert next(iter(out.values())) is None
            assert cluster.zookeeper.dump(paths.topic_config_path(topic))
            node = json.loads(cluster.zookeeper.dump(paths.topic_config_path(topic))[
                paths.topic_config_path(topic)])
            assert "retention.ms" not in node["config"]
    run(cluster, body)


# -- dynamic broker configs ---------------------------------------------------------------------


def test_dynamic_broker_configs_default_and_per_broker(cluster: Cluster) -> None:
    topic = topic_name("broker-defaults")

    async def body() -> None:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            await create(admin, cluster, topic)
            await admin.incremental_alter_configs({("broker", ""): {
                "log.retention.ms": "86400000", "message.max.bytes": "2000"}})
            await admin.incremental_alter_configs({("broker", "1"): {
                "log.retention.ms": "3600000"}})
            brokers = cluster.c.brokers
            await wait_until(lambda: brokers[0].topic_config(topic).retention_ms == 86400000
                             and brokers[1].topic_config(topic).retention_ms == 3600000,
                             what="dynamic log.retention.ms applied")
            assert brokers[0].dynamic_config == {"log.retention.ms": "86400000",
                                                 "message.max.bytes": "2000"}
            # the dynamic default feeds topics without an override: max.message.bytes
            leader = leader_of(cluster, topic)
            resp = await produce_raw(leader, topic, [b"x" * 3000])
            assert resp.error_code == ErrorCode.message_too_large
            # described with the right sources and synonyms
            res = await admin.describe_configs([("broker", "1")], include_synonyms=True)
            e = next(iter(res.values()))["log.retention.ms"]
            assert (e.value, e.source, e.read_only) == ("3600000", 2, False)
            assert [s[2] for s in e.synonyms][:2] == [2, 3]
            res = await admin.describe_configs([("broker", "")], include_synonyms=True)
            assert {k: (v.value, v.source) for k, v in next(iter(res.values())).items()} == {
                "log.retention.ms": ("86400000", 3), "message.max.bytes": ("2000", 3)}
            res = await admin.describe_configs([("topic", topic)], include_synonyms=True)
            e = next(iter(res.values()))["max.message.bytes"]
            assert (e.value, e.source) == ("2000", 3)
            assert ("message.max.bytes", "2000", 3) in e.synonyms
            res = await admin.describe_configs([("broker", "0")])
            assert next(iter(res.values()))["broker.id"].read_only
            # removing them restores the static/default values
            await admin.incremental_alter_configs({("broker", ""): {
                "log.retention.ms": None, "message.max.bytes": None}})
            await admin.incremental_alter_configs({("broker", "1"): {"log.retention.ms": None}})
            await wait_until(lambda: all(b.topic_config(topic).retention_ms == 604800000
                                         and b.dynamic_config == {} for b in brokers.values()),
                             what="dynamic configs removed")
            assert (await produce_raw(leader, topic, [b"x" * 3000])).error_code == \
                ErrorCode.none
    run(cluster, body)


# -- unclean.leader.election.enable -------------------------------------------------------------


@pytest.mark.parametrize("where", ["topic", "broker-default"])
def test_unclean_leader_election_enabled_at_run_time(where: str) -> None:
    """The only ISR member dies; the other replica comes back: the partition stays offline
    until unclean.leader.election.enable=true is set on the topic (or as a dynamic default of
    the brokers), then the controller elects the out-of-sync replica at once (Kafka's
    TopicUncleanLeaderElectionEnable / DynamicLogConfig)."""
    with Cluster(3, overrides={"replica.fetch.backoff.ms": 100}) as cluster:
        topic = f"unclean-{where}"
        resource = ("topic", topic) if where == "topic" else ("broker", "")

        async def setup() -> None:
            async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
                await create(admin, cluster, topic, assignment={0: [1, 2]})
                await wait_until(lambda: leader_of(cluster, topic).broker_id == 1)
        cluster.run(setup(), timeout=60)
        cluster.stop_broker(2)  # controlled shutdown: leaves the ISR
        cluster.run(fill(cluster.brokers[1], topic, 3), timeout=30)
        cluster.kill_broker(1)  # the last ISR member
        cluster.start_broker(2)

        async def offline_then_unclean() -> None:
            await asyncio.sleep(1.0)  # time for a (wrong) election to happen
            assert cluster.brokers[2].metadata_cache.topic(topic).partitions[0].leader == -1
            live = next(b for b in cluster.c.brokers.values() if b.started)
            async with AsyncAdmin({"bootstrap.servers": f"127.0.0.1:{live.bound_ports[0]}"}
                                  ) as admin:
                await admin.incremental_alter_configs({resource: {
                    "unclean.leader.election.enable": "true"}})
            await wait_until(lambda: cluster.brokers[2].replica_manager.partitions[
                (topic, 0)].is_leader, what="unclean election of broker 2")
        cluster.run(offline_then_unclean(), timeout=60)


# -- KIP-73 replication throttling --------------------------------------------------------------

RATE = 100_000  # bytes/s
RECORD = 1000
COUNT = {0: 1500, 1: 300}  # records of partition 0 (throttled: about 15 s at RATE) and 1


def throttle_cluster() -> Cluster:
    return Cluster(2, overrides={"replication.quota.window.num": 2,
                                 "replica.fetch.max.bytes": 10_000,
                                 "replica.fetch.backoff.ms": 100,
                                 "replica.fetch.wait.max.ms": 100})


def _follower_offset(cluster: Cluster, topic: str, p: int) -> int:
    part = cluster.brokers[1].replica_manager.partitions.get((topic, p))
    return part.log_end_offset if part is not None else 0


@pytest.mark.parametrize("side", ["leader", "follower"])
def test_throttled_follower_catches_up_at_the_rate(side: str) -> None:
    """Broker 1 (follower of partitions 0 and 1, led by broker 0) is down while 1.5 MB go to
    partition 0 and 300 kB to partition 1. Partition 0 is throttled (leader- or follower-side)
    at 100 kB/s: broker 1 gets partition 1 whole while partition 0 lags, replicated bytes of
    partition 0 stay within the rate (plus one window and one fetch), an acks=1 producer keeps
    getting acks, and removing the throttle lets partition 0 finish."""
    with throttle_cluster() as cluster:
        topic = f"throttled-{side}"

        async def setup() -> None:
            async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
                await create(admin, cluster, topic, assignment={0: [0, 1], 1: [0, 1]})
                if side == "leader":
                    topic_cfg = {"leader.replication.throttled.replicas": "0:0"}
                    broker_cfg = {("broker", "0"): {"leader.replication.throttled.rate":
                                                    str(RATE)}}
                else:
                    topic_cfg = {"follower.replication.throttled.replicas": "0:1"}
                    broker_cfg = {("broker", "1"): {"follower.replication.throttled.rate":
                                                    str(RATE)}}
                await admin.incremental_alter_configs({("topic", topic): topic_cfg})
                await admin.incremental_alter_configs(broker_cfg)
        cluster.run(setup(), timeout=60)
        cluster.stop_broker(1)
        leader = cluster.brokers[0]

        async def load() -> None:
            for p in (0, 1):
                for _ in range(0, COUNT[p], 50):
                    resp = await produce_raw(leader, topic, [b"v" * RECORD] * 50, acks=1,
                                             partition=p)
                    assert resp.error_code == ErrorCode.none
        cluster.run(load(), timeout=60)
        cluster.start_broker(1)

        async def throttled() -> None:
            follower = cluster.brokers[1]
            quota = (follower.replica_manager.follower_quota if side == "follower"
                     else leader.replica_manager.leader_quota)
            await wait_until(lambda: quota.quota == RATE and quota.is_throttled(topic, 0),
                             what="throttle configured")
            loop = asyncio.get_running_loop()
            start = loop.time()
            async with AsyncProducer({"bootstrap.servers": cluster.bootstrap_servers,
                                      "acks": 1, "linger.ms": 0}) as producer:
                # the unthrottled partition catches up completely...
                await wait_until(lambda: _follower_offset(cluster, topic, 1) >= COUNT[1],
                                 what="unthrottled partition 1 replicated")
                # ...and producers with acks=1 keep getting acks meanwhile
                for _ in range(5):
                    md = await producer.send_and_wait(topic, b"p" * 100, partition=1)
                    assert md.offset >= COUNT[1]
                elapsed = loop.time() - start
                got = _follower_offset(cluster, topic, 0)
                # bytes of the throttled partition bounded by the rate: the quota window
                # (2 samples of 1 s) + the time spent + the one fetch that crosses the quota
                # (a whole 50-record batch: KIP-74 sends the first batch even if too large)
                bound = RATE * (elapsed + 2) + 50 * RECORD + 1000
                assert got * RECORD <= bound, (got, elapsed)
                assert got < COUNT[0]
                # it progresses (not starved): some bytes arrive within a few windows
                await wait_until(lambda: _follower_offset(cluster, topic, 0) > 0,
                                 what="throttled partition progressing")
            async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
                rate_key = f"{side}.replication.throttled.rate"
                broker = "0" if side == "leader" else "1"
                await admin.incremental_alter_configs({("broker", broker): {rate_key: None}})
            await wait_until(lambda: _follower_offset(cluster, topic, 0) >= COUNT[0], timeout=30,
                             what="partition 0 replicated after the throttle was removed")
            part = leader.replica_manager.partitions[(topic, 0)]
            await wait_until(lambda: sorted(part.isr) == [0, 1], what="follower back in ISR")
        cluster.run(throttled(), timeout=90)
