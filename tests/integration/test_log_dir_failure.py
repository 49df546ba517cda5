"""Log dir failures (KIP-112) on an in-process 3-broker cluster, broker 0 with two log dirs, one
of them a small filesystem of its own:

* an I/O failure (ext4 on a loop device, failed through the kernel: every write gets EROFS) ->
  KAFKA_STORAGE_ERROR for the dir's partitions, the log dir event notification handled (and
  deleted) by the controller, leaders elected elsewhere without broker 0 in their ISR, the
  other dir still served, DescribeLogDirs showing the error, Metadata listing the replica
  offline;
* a full disk (a tiny tmpfs filled during acks=all produce): the dir goes offline, leaders move,
  every acknowledged record survives; log recovery of the failed dir yields a valid prefix
  holding every record broker 0 acknowledged; after the space comes back (and half a batch is
  appended to each segment, as a death in the middle of a write leaves it) broker 0 restarts,
  cuts the torn tails and catches up with everything acknowledged since;
* an injected OSError through the log's test seam (no root needed): the same offline handling.

Mounting needs root: without it the first two skip with the reason printed. Every mount is
unmounted in teardown, even on failure.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.chaos.environment import disk_faults
from odradek.cluster import AsyncCluster
from odradek.coordination import paths
from odradek.protocol.records import iter_headers
from tests.integration.broker_harness import fetch, metadata, req_module, run
from tests.integration.disk_support import (
    describe_log_dirs,
    produce_values,
    records_of,
    recovered_records,
)
from tests.wire import WireClient

TOPIC = "d"
PARTITIONS = 4
FAST = {"replica.fetch.backoff.ms": "100", "replica.fetch.wait.max.ms": "100",
        "log.flush.offset.checkpoint.interval.ms": "500",
        "replica.high.watermark.checkpoint.interval.ms": "500"}
STORAGE = int(ErrorCode.kafka_storage_error)


@pytest.fixture
def mounts(tmp_path: Path) -> Iterator[list[Path]]:
    """Mount points to unmount at the end, whatever happens."""
    reason = disk_faults.unavailable_reason()
    if reason is not None:
        print(f"skipped: {reason}")
        pytest.skip(reason)
    made: list[Path] = []
    yield made
    for m in reversed(made):
        disk_faults.unmount(m)


def state(cluster: AsyncCluster, p: int) -> dict[str, object]:
    path = paths.partition_state_path(TOPIC, p)
    return json.loads(cluster.zookeeper.dump(path)[path])


async def create_topic(cluster: AsyncCluster) -> None:
    """RF 3, broker 0 the preferred leader of every partition, min.insync.replicas 2."""
    m = req_module(19, 7)
    request = m.CreateTopicsRequest(topics=(m.CreatableTopic(
        name=TOPIC, num_partitions=-1, replication_factor=-1,
        assignments=tuple(m.CreatableReplicaAssignment(partition_index=p, broker_ids=(0, 1, 2))
                          for p in range(PARTITIONS)),
        configs=(m.CreatableTopicConfig(name="min.insync.replicas", value="2"),)),),
        timeout=datetime.timedelta(seconds=10), validate_only=False)
    c = await WireClient.connect("127.0.0.1", cluster.ports[1])
    try:
        r = await c.request(request)
        assert r.topics[0].error_code == 0, r.topics[0].error_message
    finally:
        await c.close()
    await cluster.wait_for(lambda: all(
        (TOPIC, p) in b.replica_manager.partitions
        and b.replica_manager.partitions[(TOPIC, p)].leader_id == 0
        and len(b.replica_manager.partitions[(TOPIC, p)].isr) == 3
        for b in cluster.brokers.values() for p in range(PARTITIONS)), what="topic created")


def split(cluster: AsyncCluster, special: Path) -> tuple[list[int], list[int]]:
    """Broker 0's partitions in the special dir and in the other one."""
    lm = cluster.brokers[0].log_manager
    assert lm is not None
    inside = sorted(p for (t, p) in lm.logs_in_dir(special) if t == TOPIC)
    outside = sorted(set(range(PARTITIONS)) - set(inside))
    assert inside and outside, "both dirs hold partitions"
    return inside, outside


async def wait_moved(cluster: AsyncCluster, moved: list[int], kept: list[int]) -> None:
    """Leaders of `moved` elsewhere and broker 0 out of their ISR; `kept` still led by 0; the
    notification znodes deleted by the controller."""
    await cluster.wait_for(lambda: all(
        state(cluster, p)["leader"] in (1, 2) and 0 not in state(cluster, p)["isr"]  # type: ignore[operator]
        for p in moved), timeout=30, what="leaders moved away from the failed dir")
    assert all(state(cluster, p)["leader"] == 0 for p in kept)
    await cluster.wait_for(lambda: not [
        p for p in cluster.zookeeper.dump(paths.LOG_DIR_EVENT_NOTIFICATION)
        if p != paths.LOG_DIR_EVENT_NOTIFICATION], timeout=30, what="notifications handled")


async def check_offline_answers(cluster: AsyncCluster, special: Path, moved: list[int],
                                kept: list[int]) -> None:
    c0 = await WireClient.connect("127.0.0.1", cluster.ports[0])
    try:
        # Produce, Fetch, ListOffsets to broker 0 for a partition of the failed dir
        code, _ = await produce_values(c0, TOPIC, moved[0], [b"after-failure"])
        assert code == STORAGE
        r = await c0.request(fetch(TOPIC, moved[0], 0))
        assert r.responses[0].partitions[0].error_code == STORAGE
        # the other dir keeps serving
        code, _ = await produce_values(c0, TOPIC, kept[0], [b"other-dir"])
        assert code == 0
        # DescribeLogDirs: the failed dir with KAFKA_STORAGE_ERROR, the other one fine
        r = await c0.request(describe_log_dirs())
        dirs = {res.log_dir: res for res in r.results}
        assert dirs[str(special)].error_code == STORAGE
        assert dirs[str(special)].topics == ()
        others = [res for d, res in dirs.items() if d != str(special)]
        assert len(others) == 1 and others[0].error_code == 0
        listed = {p.partition_index for t in others[0].topics if t.name == TOPIC
                  for p in t.partitions}
        assert listed == set(kept)
        # Metadata v5+: broker 0 listed offline for the moved partitions (once UpdateMetadata
        # reached broker 1)
    finally:
        await c0.close()
    c1 = await WireClient.connect("127.0.0.1", cluster.ports[1])
    try:
        async def offline() -> dict[int, tuple[int, ...]]:
            r = await c1.request(metadata([TOPIC], auto_create=False))
            return {p.partition_index: tuple(p.offline_replicas) for p in r.topics[0].partitions}
        for _ in range(100):
            found = await offline()
            if all(found[p] == (0,) for p in moved):
                break
            await asyncio.sleep(0.1)
        assert all(found[p] == (0,) for p in moved), found
        assert all(found[p] == () for p in kept), found
    finally:
        await c1.close()


def test_io_failure_takes_the_dir_offline(tmp_path: Path, mounts: list[Path]) -> None:
    plain = tmp_path / "b0-plain"
    fs = disk_faults.mount_ext4(tmp_path / "ext4", 32 << 20, tmp_path / "ext4.img")
    mounts.append(fs)
    special = fs / "logs"

    async def scenario() -> None:
        async with AsyncCluster(3, data_dir=tmp_path / "cluster", overrides=FAST,
                                broker_overrides={0: {"log.dirs": f"{plain},{special}"}},
                                http=False) as cluster:
            await create_topic(cluster)
            moved, kept = split(cluster, special)
            c0 = await WireClient.connect("127.0.0.1", cluster.ports[0])
            try:
                for p in range(PARTITIONS):
                    assert (await produce_values(c0, TOPIC, p, [b"before-%d" % p]))[0] == 0
            finally:
                await c0.close()
            how = await asyncio.to_thread(disk_faults.fail, fs)
            print(f"failed {fs} by {how}")
            await check_after_failure(cluster, special, moved, kept)

    run(scenario, timeout=180)


async def check_after_failure(cluster: AsyncCluster, special: Path, moved: list[int],
                              kept: list[int]) -> None:
    # the first write into the failed dir finds the error: KAFKA_STORAGE_ERROR
    c0 = await WireClient.connect("127.0.0.1", cluster.ports[0])
    try:
        code, _ = await produce_values(c0, TOPIC, moved[0], [b"hits-the-failure"])
        assert code == STORAGE
    finally:
        await c0.close()
    lm = cluster.brokers[0].log_manager
    assert lm is not None
    await cluster.wait_for(lambda: special in lm.offline_dirs, what="dir offline")
    await wait_moved(cluster, moved, kept)
    await check_offline_answers(cluster, special, moved, kept)
    # the moved partitions take writes on their new leaders (acks=all: ISR of 2 >= min ISR)
    for p in moved:
        leader = int(state(cluster, p)["leader"])  # type: ignore[call-overload]
        c = await WireClient.connect("127.0.0.1", cluster.ports[leader])
        try:
            assert (await produce_values(c, TOPIC, p, [b"on-new-leader"]))[0] == 0
        finally:
            await c.close()


def test_full_disk_recovers_every_acknowledged_record(tmp_path: Path,
                                                      mounts: list[Path]) -> None:
    plain = tmp_path / "b0-plain"
    fs = disk_faults.mount_tmpfs(tmp_path / "tmpfs", 4 << 20)
    mounts.append(fs)
    special = fs / "logs"

    async def scenario() -> None:
        async with AsyncCluster(3, data_dir=tmp_path / "cluster", overrides=FAST,
                                broker_overrides={0: {"log.dirs": f"{plain},{special}"}},
                                http=False) as cluster:
            await create_topic(cluster)
            moved, kept = split(cluster, special)
            acked: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
            acked_by_0: dict[int, dict[int, bytes]] = {p: {} for p in moved}
            c0 = await WireClient.connect("127.0.0.1", cluster.ports[0])
            seq = 0

            async def send(client: WireClient, p: int, n: int = 5) -> int:
                nonlocal seq
                values = [b"v-%d-%06d-" % (p, seq + i) + b"x" * 300 for i in range(n)]
                seq += n
                code, base = await produce_values(client, TOPIC, p, values)
                if code == 0:
                    for i, v in enumerate(values):
                        acked[p][base + i] = v
                return code

            try:
                for _ in range(10):
                    for p in range(PARTITIONS):
                        assert await send(c0, p) == 0
                for p in moved:
                    acked_by_0[p] = dict(acked[p])
                written = await asyncio.to_thread(disk_faults.fill, special.parent, 6000)
                print(f"filled {fs} with {written} bytes")
                failed = None
                for _ in range(400):  # until a write into the full dir fails
                    for p in moved:
                        code = await send(c0, p)
                        if code == 0:
                            acked_by_0[p] = {o: v for o, v in acked[p].items()}
                        elif code == STORAGE:
                            failed = p
                            break
                    if failed is not None:
                        break
                assert failed is not None, "the full disk never failed a write"
            finally:
                await c0.close()
            lm = cluster.brokers[0].log_manager
            assert lm is not None
            await cluster.wait_for(lambda: special in lm.offline_dirs, what="dir offline")
            await wait_moved(cluster, moved, kept)
            # what log recovery makes of the failed dir, before the broker restarts: a valid
            # prefix with every record broker 0 acknowledged as leader
            for p in moved:
                records = dict(await asyncio.to_thread(recovered_records,
                                                       special / f"{TOPIC}-{p}"))
                missing = {o for o, v in acked_by_0[p].items() if records.get(o) != v}
                assert not missing, f"partition {p}: acknowledged records lost {sorted(missing)}"
            # writes go on at the new leaders
            for p in moved:
                leader = int(state(cluster, p)["leader"])  # type: ignore[call-overload]
                c = await WireClient.connect("127.0.0.1", cluster.ports[leader])
                try:
                    for _ in range(3):
                        assert await send(c, p) == 0
                finally:
                    await c.close()
            # space back; as if the broker had died in the middle of a write that could not
            # be cut back, each moved partition's active segment ends with half a batch
            disk_faults.free(special.parent)
            for p in moved:
                segments = sorted((special / f"{TOPIC}-{p}").glob("*.log"))
                data = segments[-1].read_bytes()
                last = list(iter_headers(data))[-1]
                with open(segments[-1], "ab") as f:
                    f.write(data[last.position:last.position + last.size // 2])
            # broker 0 restarted: it recovers the dir (cutting the torn tails) and catches up
            await cluster.restart_broker(0)
            await cluster.wait_for(lambda: all(
                0 in state(cluster, p)["isr"] for p in range(PARTITIONS)),  # type: ignore[operator]
                timeout=60, what="broker 0 back in every ISR")
            lm = cluster.brokers[0].log_manager
            assert lm is not None and not lm.offline_dirs
            for p in range(PARTITIONS):
                log = lm.get_log(TOPIC, p)
                assert log is not None
                await cluster.wait_for(lambda log=log, p=p: log.log_end_offset > max(acked[p]),
                                       timeout=30, what="caught up")
                records = dict(records_of(log))
                missing = {o for o, v in acked[p].items() if records.get(o) != v}
                assert not missing, f"partition {p}: acknowledged records lost {sorted(missing)}"

    run(scenario, timeout=240)


def test_injected_io_error_takes_the_dir_offline(tmp_path: Path) -> None:
    """The same handling from an OSError injected at the log's I/O edge (no root needed)."""
    plain, other = tmp_path / "b0-a", tmp_path / "b0-b"

    async def scenario() -> None:
        async with AsyncCluster(3, data_dir=tmp_path / "cluster", overrides=FAST,
                                broker_overrides={0: {"log.dirs": f"{plain},{other}"}},
                                http=False) as cluster:
            await create_topic(cluster)
            moved, kept = split(cluster, other)
            lm = cluster.brokers[0].log_manager
            assert lm is not None
            log = lm.get_log(TOPIC, moved[0])
            assert log is not None
            segment = log.active_segment

            def broken_append(*_args: object, **_kwargs: object) -> None:
                raise OSError(5, "Input/output error (injected)")
            segment.append = broken_append  # type: ignore[method-assign]
            await check_after_failure(cluster, other, moved, kept)

    run(scenario, timeout=180)


def test_every_dir_failed_stops_the_broker(tmp_path: Path) -> None:
    """Kafka halts a broker whose last log dir failed; in-process it stops as if it crashed."""
    async def scenario() -> None:
        async with AsyncCluster(1, data_dir=tmp_path / "cluster", http=False) as cluster:
            c = await WireClient.connect("127.0.0.1", cluster.ports[0])
            try:
                from tests.integration.broker_harness import create_topics
                r = await c.request(create_topics("one", 1))
                assert r.topics[0].error_code == 0
                broker = cluster.brokers[0]
                await cluster.wait_for(lambda: ("one", 0) in broker.replica_manager.partitions,
                                       what="partition")
                log = broker.log_manager.get_log("one", 0)  # type: ignore[union-attr]
                assert log is not None

                def broken_append(*_args: object, **_kwargs: object) -> None:
                    raise OSError(28, "No space left on device (injected)")
                log.active_segment.append = broken_append  # type: ignore[method-assign]
                code, _ = await produce_values(c, "one", 0, [b"x"])
                assert code == STORAGE
            finally:
                await c.close()
            await cluster.wait_for(lambda: not cluster.brokers[0].started, timeout=30,
                                   what="broker stopped")

    run(scenario, timeout=120)
