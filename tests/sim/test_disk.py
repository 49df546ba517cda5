"""The simulated disk (sim/disk.py): what a machine crash keeps (only what was fsynced, a torn
unsynced tail), EIO and ENOSPC on demand; then whole brokers on it: a machine crash of one of
three replicas loses no acknowledged acks=all write (replication restores what its disk lost,
after log recovery cut the torn tails), a full disk takes its log directory offline and
leadership moves (KIP-112), and a run is a function of its seed."""

from __future__ import annotations

import asyncio
import errno
import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.client.admin import AsyncAdmin
from odradek.client.producer import AsyncProducer
from odradek.client.types import NewTopic
from odradek.cluster.async_cluster import AsyncCluster
from odradek.common import file_system
from odradek.protocol.records import BatchHeader, Record, build_batch, validate_batches
from odradek.sim.cluster import connect, sim_cluster
from odradek.sim.simulation import Simulation
from odradek.storage.checkpoints import fsync_dir, write_atomically
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.partition_metadata import read_partition_metadata, write_partition_metadata
from tests.integration.disk_support import records_of

pytestmark = pytest.mark.sim

TOPIC = "crash"
#: recovery points and high watermarks checkpointed within the run, so that recovery after the
#: crash starts from a checkpoint (Kafka's defaults: every 60 s and 5 s)
CHECKPOINTS = {"log.flush.offset.checkpoint.interval.ms": 500,
               "replica.high.watermark.checkpoint.interval.ms": 500}
PAD = "x" * 100  # records of ~120 bytes: a few segments of segment.bytes 4096 each
NOW = 1_700_000_000_000  # the records' timestamps (ms)


def on_disk(sim: Simulation, body: Callable[[], None]) -> None:
    """Run `body` with the simulation's disk installed (as during `Simulation.run`)."""
    with file_system.use(sim.disk):
        body()


# -- the model --------------------------------------------------------------------------------


def test_a_crash_keeps_what_was_synced_and_tears_the_rest(tmp_path: Path) -> None:
    sim = Simulation(3)
    sim.disk.root = str(tmp_path)
    seg = tmp_path / "0.log"

    def body() -> None:
        fd = os.open(seg, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            file_system.pwrite(fd, b"a" * 100, 0)
            file_system.fsync(fd)  # a new file's first fsync: its content and its name
            file_system.pwrite(fd, b"b" * 400, 100)
        finally:
            os.close(fd)
        write_atomically(tmp_path / "checkpoint", b"v1")  # tmp, fsync, rename, fsync dir
        (tmp_path / "never-synced").write_bytes(b"x")
        (tmp_path / "checkpoint.tmp").write_bytes(b"v2")
        file_system.replace(tmp_path / "checkpoint.tmp", tmp_path / "checkpoint")  # no dir sync
    on_disk(sim, body)
    report = sim.disk.machine_crash(tmp_path)
    data = seg.read_bytes()
    assert data[:100] == b"a" * 100 and len(data) == 100 + report["0.log"] <= 500
    assert report["never-synced"] == -1 and not (tmp_path / "never-synced").exists()
    assert (tmp_path / "checkpoint").read_bytes() == b"v1"  # the rename was undone
    assert "disk-crash" in "\n".join(sim.digest.tail)


def test_a_partition_metadata_file_survives_a_crash_whole(tmp_path: Path) -> None:
    """Its topic id is fsynced before the rename (Kafka's PartitionMetadataFile): a crash
    right after the write keeps it, where a torn id could read as another topic's."""
    topic_id = uuid.UUID(int=0x0159B4A7E46A43CEEF63CF3B1C8F4665)
    part = tmp_path / "t-0"
    part.mkdir()
    sim = Simulation(3)
    sim.disk.root = str(tmp_path)
    on_disk(sim, lambda: write_partition_metadata(part, topic_id))
    sim.disk.machine_crash(tmp_path)
    assert read_partition_metadata(part) == topic_id


def test_torn_tails_are_drawn_from_the_seed(tmp_path: Path) -> None:
    def torn(seed: int, where: Path) -> bytes:
        where.mkdir()
        sim = Simulation(seed)
        f = where / "0.log"

        def body() -> None:
            fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
            file_system.fsync(fd)
            file_system.pwrite(fd, bytes(range(256)) * 4, 0)
            os.close(fd)
        on_disk(sim, body)
        sim.disk.machine_crash(where)
        return f.read_bytes()
    runs = [torn(seed, tmp_path / f"run-{i}") for i, seed in enumerate((5, 5, 6, 7, 8))]
    assert runs[0] == runs[1]
    assert len(set(runs[1:])) > 1  # other seeds tear elsewhere


def test_a_synced_directory_keeps_its_renames_and_removals(tmp_path: Path) -> None:
    sim = Simulation(1)

    def body() -> None:
        for name in ("a", "b"):
            (tmp_path / name).write_bytes(name.encode())
        fsync_dir(tmp_path)  # names durable, contents not
        file_system.replace(tmp_path / "a", tmp_path / "c")
        (tmp_path / "b").unlink()
        fsync_dir(tmp_path)
    on_disk(sim, body)
    sim.disk.machine_crash(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
    assert (tmp_path / "c").read_bytes() == b""  # its content was never fsynced


def test_a_removal_is_undone_and_a_renamed_directory_keeps_what_it_synced(
        tmp_path: Path) -> None:
    sim = Simulation(1)
    log_dir = tmp_path / "t-0"
    log_dir.mkdir()

    def body() -> None:
        write_atomically(log_dir / "leader-epoch-checkpoint", b"0\n0\n")
        (log_dir / "leader-epoch-checkpoint").unlink()  # no directory fsync after
        file_system.rename(log_dir, tmp_path / "t-0.future")
    on_disk(sim, body)
    sim.disk.machine_crash(tmp_path)
    assert (tmp_path / "t-0.future" / "leader-epoch-checkpoint").read_bytes() == b"0\n0\n"
    assert not log_dir.exists()


def test_a_removed_file_comes_back_with_its_own_bytes_whoever_took_its_inode(
        tmp_path: Path) -> None:
    """Removals not synced are undone with the removed file's own bytes, whichever file the
    kernel gave its inode number to next (ext4 gives it to the very next one): the record is
    per file, not per inode number, and a crash is a function of what the run did."""
    sim = Simulation(1)

    def synced_file(path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            file_system.pwrite(fd, data, 0)
            file_system.fsync(fd)
        finally:
            os.close(fd)

    def body() -> None:
        synced_file(tmp_path / "a.index", b"a" * 10)
        (tmp_path / "a.index").unlink()  # no directory fsync after
        synced_file(tmp_path / "b.index", b"b" * 20)  # most likely a's inode number again
        synced_file(tmp_path / "c.index", b"c" * 10)
        (tmp_path / "c.index").unlink()
        # a new file at the same path (and likely inode number), its bytes never synced
        (tmp_path / "c.index").write_bytes(b"c" * 10 + b"d" * 10)
    on_disk(sim, body)
    report = sim.disk.machine_crash(tmp_path)
    assert (tmp_path / "a.index").read_bytes() == b"a" * 10
    assert (tmp_path / "b.index").read_bytes() == b"b" * 20
    assert (tmp_path / "c.index").read_bytes() == b"c" * 10  # the old file, not a torn new one
    assert report == {"a.index": -2, "c.index": -2}


def test_a_failed_directory_raises_its_errno_on_writes_and_fsyncs(tmp_path: Path) -> None:
    sim = Simulation(1)
    (tmp_path / "bad").mkdir()
    sim.disk.fail(tmp_path / "bad", "ENOSPC")

    def body() -> None:
        fd = os.open(tmp_path / "bad" / "f", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            with pytest.raises(OSError) as e:
                file_system.write(fd, b"x")
            assert e.value.errno == errno.ENOSPC
            with pytest.raises(OSError):
                file_system.fsync(fd)
        finally:
            os.close(fd)
        write_atomically(tmp_path / "good", b"ok")  # elsewhere the disk works
        sim.disk.repair(tmp_path / "bad")
        fd = os.open(tmp_path / "bad" / "f", os.O_RDWR)
        try:
            assert file_system.pwrite(fd, b"y", 0) == 1
        finally:
            os.close(fd)
    on_disk(sim, body)


@pytest.mark.parametrize("segment_bytes", [4096, 300])
def test_a_truncated_log_keeps_its_epochs_after_a_machine_crash(tmp_path: Path,
                                                                segment_bytes: int) -> None:
    """A follower truncates its flushed tail (epoch 5) and fetches the new leader's records
    (epoch 7) at the same offsets; the leader epoch checkpoint, fsynced at once, gives epoch 7
    to those offsets. After a power loss every batch left must be of the epoch its leader
    epoch cache gives its offset: else OffsetsForLeaderEpoch and diverging epochs never find
    the stale batches, and the replicas differ below the HW (seeds 216 and 460 of the first
    exploration). With 300-byte segments the truncation also removes whole segments."""
    config = LogConfig(segment_bytes=segment_bytes)

    def batch(value: bytes) -> tuple[bytearray, list[BatchHeader]]:
        buf = bytearray(build_batch([Record(0, NOW, None, value)]))
        return buf, validate_batches(buf)

    for seed in range(6):  # each crash keeps a different torn tail
        sim = Simulation(seed)
        root = tmp_path / str(seed)
        root.mkdir()
        sim.disk.root = str(root)

        def body(root: Path = root) -> None:
            log = Log.open(root / "t-0", config, clock=lambda: NOW)
            for i in range(10):
                log.append_as_leader(*batch(b"old-%d" % i), 5, NOW)
            log.flush()  # offsets 0-9 durable, the recovery point at 10
            log.truncate_to(6)
            for i in range(2):  # offsets 6 and 7: the old 8 and 9 stay truncated
                log.append_as_leader(*batch(b"new-%d" % i), 7, NOW)
            log.release_handles()  # the machine goes down: no close
        on_disk(sim, body)
        sim.disk.machine_crash(root)

        def check(root: Path = root, seed: int = seed) -> None:
            log = Log.open(root / "t-0", config, recovery_point=10, clock=lambda: NOW)
            try:
                cache = log.leader_epoch_cache
                for segment in log.segments:
                    for header in segment.iter_headers(0):
                        assert header.partition_leader_epoch == \
                            cache.epoch_for_offset(header.base_offset), (
                                seed, header.base_offset, cache.entries())
            finally:
                log.close()
        on_disk(sim, check)


# -- whole brokers ----------------------------------------------------------------------------


async def produce(sim: Simulation, cluster: AsyncCluster, host: str, values: list[str],
                  acked: list[str]) -> None:
    producer = connect(sim, host, AsyncProducer({
        "bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 2,
        "batch.size": 1024,
        "delivery.timeout.ms": 120_000, "request.timeout.ms": 10_000}))
    await producer.start()
    try:
        for value in values:
            future = await producer.send(TOPIC, value.encode())
            future.add_done_callback(lambda f, v=value: acked.append(v)
                                     if not f.cancelled() and f.exception() is None else None)
        await producer.flush()
    finally:
        await producer.close()


async def create_topic(sim: Simulation, cluster: AsyncCluster, partitions: int) -> None:
    admin = connect(sim, "client-admin", AsyncAdmin({
        "bootstrap.servers": cluster.bootstrap_servers}))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(TOPIC, partitions, 3, config={
            "min.insync.replicas": "2", "segment.bytes": "4096"})])
    finally:
        await admin.close()
    await wait_until(lambda: all(
        (TOPIC, p) in b.replica_manager.partitions
        and b.replica_manager.partitions[(TOPIC, p)].leader_id is not None
        for b in cluster.brokers.values() for p in range(partitions)))


async def wait_until(predicate: Callable[[], bool], timeout: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.1)


def values_in_log(cluster: AsyncCluster, broker: int, partition: int) -> list[str]:
    lm = cluster.brokers[broker].log_manager
    assert lm is not None
    log = lm.get_log(TOPIC, partition)
    assert log is not None
    return [v.decode() for _, v in records_of(log)]


def machine_crash_run(seed: int, data_dir: Path, before: int = 300, during: int = 100
                      ) -> tuple[str, dict[str, int], list[str], dict[int, list[str]]]:
    """Three brokers, a topic of two partitions (RF 3, min.insync.replicas 2, small segments);
    `before` acks=all writes, then `during` more while the leader of partition 0 crashes with
    its machine (killed, its disk put back to what it synced), restarts and catches up.
    Returns the digest, the crash's report, what was acknowledged and each partition's records
    on the crashed broker once it caught up."""
    sim = Simulation(seed)
    acked: list[str] = []
    result: dict[str, object] = {}

    async def main(sim: Simulation) -> None:
        async with sim_cluster(sim, 3, data_dir=data_dir, overrides=CHECKPOINTS) as cluster:
            await create_topic(sim, cluster, 2)
            await produce(sim, cluster, "client-1", [f"a{i}-{PAD}" for i in range(before)], acked)
            await asyncio.sleep(2.0)  # the log flusher's round: rolled segments fsynced
            victim = cluster.brokers[0].replica_manager.partitions[(TOPIC, 0)].leader_id
            assert victim is not None
            more = asyncio.ensure_future(
                produce(sim, cluster, "client-2", [f"b{i}-{PAD}" for i in range(during)], acked))
            await asyncio.sleep(sim.random.fork("crash").uniform(0.0, 0.5))  # mid-writes
            await cluster.kill_broker(victim)
            result["report"] = sim.disk.machine_crash(data_dir / f"broker-{victim}")
            await more
            await cluster.restart_broker(victim)
            others = [b for b in cluster.brokers if b != victim]

            def caught_up() -> bool:
                for p in range(2):
                    parts = [cluster.brokers[b].replica_manager.partitions.get((TOPIC, p))
                             for b in cluster.brokers]
                    if any(x is None for x in parts):
                        return False
                    ends = {x.log_end_offset for x in parts}  # type: ignore[union-attr]
                    if len(ends) != 1:
                        return False
                return True
            await wait_until(caught_up)
            result["logs"] = {p: values_in_log(cluster, victim, p) for p in range(2)}
            for p in range(2):  # the same log on every replica
                assert all(values_in_log(cluster, b, p) == result["logs"][p]  # type: ignore
                           for b in others)
    sim.run(main)
    return (sim.digest.hexdigest(), result["report"], acked,  # type: ignore[return-value]
            result["logs"])  # type: ignore[return-value]


def test_a_machine_crash_loses_no_acknowledged_write(tmp_path: Path) -> None:
    _, report, acked, logs = machine_crash_run(4, tmp_path / "run")
    assert len(acked) == 400  # acks=all: every write acknowledged despite the crash
    # the crash lost something: unsynced files removed, tails torn or rolled back
    assert any(v != 0 for v in report.values()), report
    on_crashed = [v for values in logs.values() for v in values]
    assert set(acked) <= set(on_crashed)  # replication restored what the disk lost
    assert len(on_crashed) == len(set(on_crashed))  # each once: the torn tails were cut


def test_full_disk_takes_the_log_dir_offline_and_leadership_moves(tmp_path: Path) -> None:
    sim = Simulation(2)
    data_dir = tmp_path / "cluster"
    dirs = f"{data_dir / 'b0-a'},{data_dir / 'b0-b'}"
    acked: list[str] = []

    async def main(sim: Simulation) -> None:
        async with sim_cluster(sim, 3, data_dir=data_dir,
                               broker_overrides={0: {"log.dirs": dirs}}) as cluster:
            await create_topic(sim, cluster, 4)
            b0 = cluster.brokers[0]
            lm = b0.log_manager
            assert lm is not None
            by_dir = {p: lm.log_dir_of(lm.get_log(TOPIC, p).dir)  # type: ignore[union-attr]
                      for p in range(4)}
            full = data_dir / "b0-a"
            on_full = [p for p, d in by_dir.items() if Path(d) == full]
            others = cluster.brokers[1].replica_manager.partitions
            led = [p for p in on_full if others[(TOPIC, p)].leader_id == 0]
            assert led  # (seed 2 places some leaders of broker 0 there)
            sim.disk.fail(full, errno.ENOSPC)
            await produce(sim, cluster, "client-1", [f"v{i}" for i in range(200)], acked)
            await wait_until(lambda: Path(full).absolute() in
                             {Path(d).absolute() for d in lm.offline_dirs})
            reason = lm.failure_channel.reason(full)
            assert reason is not None and b0.started  # its other dir still serves
            await wait_until(lambda: all(others[(TOPIC, p)].leader_id not in (None, 0)
                                         and 0 not in others[(TOPIC, p)].isr
                                         for p in on_full))
            leaders = {p: others[(TOPIC, p)].leader_id for p in range(4)}
            got = {v for p, leader in leaders.items()
                   for v in values_in_log(cluster, leader, p)}  # type: ignore[arg-type]
            assert set(acked) <= got and len(acked) == 200
    sim.run(main)


def test_same_seed_same_digest(tmp_path: Path) -> None:
    first = machine_crash_run(9, tmp_path / "one", 120, 40)
    second = machine_crash_run(9, tmp_path / "two", 120, 40)
    assert first[0] == second[0] and first[1] == second[1]


def test_a_runs_temporary_directory_has_one_path_length_wherever_it_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's error messages name the log directory, so its path's length reaches the clients
    and the digest: a run's directory has the same length in memory or not."""
    import shutil
    import tempfile

    from odradek.sim import disk

    base = tempfile.mkdtemp(prefix="b", dir="/tmp")  # short enough to pad from
    made = [disk.temporary_data_dir()]
    monkeypatch.setattr(disk, "memory_dir", lambda: None)
    monkeypatch.setattr(disk.tempfile, "tempdir", base)
    made.append(disk.temporary_data_dir())
    try:
        assert made[1].startswith(base + "/odradek-sim-")
        assert [len(p) for p in made] == [disk.DATA_DIR_PATH_LENGTH] * 2
    finally:
        os.rmdir(made[0])
        shutil.rmtree(base)
