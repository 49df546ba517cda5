"""Moving a replica between log dirs (KIP-113): the mover's decisions (``next_step``), the
future log's life in the log manager (creation, Kafka's names, checkpoints, restart, the swap
and a crash inside it) and AlterReplicaLogDirs' error codes, without a broker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.common import TopicPartition
from odradek.protocol.records import build_batch, iter_headers, validate_batches
from odradek.server.replication.partition import Partition
from odradek.server.replication.replica_alter_log_dirs import (
    MoveStep,
    ReplicaAlterLogDirsManager,
    next_step,
)
from odradek.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from odradek.storage.log import Log, parse_topic_partition
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager

TP = TopicPartition("t", 0)


def produce(log: Log, n: int = 1, epoch: int = 0) -> None:
    for i in range(n):
        buf = bytearray(build_batch([(b"k%d" % i, b"v" * 100)], timestamp_ms=1000 + i))
        log.append_as_leader(buf, validate_batches(buf), epoch, 1000)


def values(log: Log) -> list[tuple[int, int]]:
    data = log.read(log.log_start_offset, 1 << 30).read_bytes()
    return [(h.base_offset, h.partition_leader_epoch) for h in iter_headers(data)]


class Broker:
    """A log manager on two dirs, one hosted partition, and the mover."""

    def __init__(self, tmp: Path, **config: object) -> None:
        self.dirs = [tmp / "a", tmp / "b"]
        self.lm = LogManager(self.dirs, LogConfig(**config))  # type: ignore[arg-type]
        self.parts: dict[TopicPartition, Partition] = {}
        self.offline: set[TopicPartition] = set()
        self.known: set[TopicPartition] = set()
        self.mover = ReplicaAlterLogDirsManager(self.lm, self.parts.get,
                                                lambda tp: tp in self.offline,
                                                lambda tp: tp in self.known, chunk_bytes=500)

    def host(self, tp: TopicPartition = TP) -> Partition:
        p = Partition(tp[0], tp[1], self.lm.get_or_create_log(*tp), 0)
        self.parts[tp] = p
        return p

    def run(self, tp: TopicPartition = TP, limit: int = 1000) -> list[str]:
        steps = []
        while tp in self.mover.moving and len(steps) < limit:
            steps.append(self.mover.step(tp))
        return steps


def test_next_step_decisions() -> None:
    assert next_step(0, 10, 0, None) == MoveStep("copy", 0)
    assert next_step(5, 10, 0, None) == MoveStep("reset", 5)  # below the log start
    assert next_step(0, 10, 10, 10) == MoveStep("swap")
    assert next_step(0, 10, 7, 4) == MoveStep("truncate", 4)  # diverging leader epoch
    assert next_step(0, 6, 8, None) == MoveStep("truncate", 6)  # the current log truncated
    assert next_step(3, 10, 7, 1) == MoveStep("truncate", 3)
    assert next_step(0, 10, 4, 10) == MoveStep("copy", 4)


def test_future_dir_names_parse_as_their_partition() -> None:
    assert parse_topic_partition("my-topic-3." + "ab" * 16 + "-future") == ("my-topic", 3)
    assert parse_topic_partition("t-0." + "0" * 32 + "-delete") == ("t", 0)
    with pytest.raises(ValueError):
        parse_topic_partition("t-future")


def test_move_copies_keeps_up_and_swaps(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    p = b.host()
    produce(p.log, 20, epoch=0)
    produce(p.log, 5, epoch=3)
    source_dir = p.log.dir.parent
    dest = next(d for d in b.dirs if d.absolute() != source_dir)
    before = values(p.log)
    assert b.mover.alter_replica_log_dirs({TP: str(dest)}) == {TP: ErrorCode.none}
    future = b.lm.get_future_log(*TP)
    assert future is not None and future.dir.parent == dest.absolute()
    assert future.dir.name.startswith("t-0.") and future.dir.name.endswith("-future")
    assert b.mover.step(TP) == "copy"
    produce(p.log, 3, epoch=3)  # appends while moving are copied too
    p.log.leader_epoch_cache.assign(4, 28)  # elected again: an epoch without a batch yet
    steps = b.run()
    assert steps[-1] == "swap" and set(steps[:-1]) == {"copy"}
    assert p.log.dir == dest.absolute() / "t-0"
    assert values(p.log) == before + values(p.log)[len(before):]
    assert len(values(p.log)) == 28
    assert p.log.leader_epoch_cache.entries() == [(0, 0), (3, 20), (4, 28)]
    assert b.lm.get_log(*TP) is p.log and b.lm.get_future_log(*TP) is None
    assert not any(e.name.startswith("t-0") for e in source_dir.iterdir())
    b.lm.shutdown()
    # after a restart the partition is in its new dir with everything
    lm = LogManager(b.dirs, LogConfig())
    lg = lm.get_log(*TP)
    assert lg is not None and lg.dir == dest.absolute() / "t-0" and len(values(lg)) == 28
    # loading drops an epoch starting at the log end (Kafka's truncateFromEnd); the next
    # LeaderAndIsr assigns it again
    assert lg.leader_epoch_cache.entries() == [(0, 0), (3, 20)]
    points = OffsetCheckpointFile(dest.absolute() / RECOVERY_POINT_CHECKPOINT).read()
    assert points == {TP: 28}
    assert OffsetCheckpointFile(source_dir / RECOVERY_POINT_CHECKPOINT).read() == {}
    lm.shutdown()


def test_move_follows_log_start_and_truncation(tmp_path: Path) -> None:
    b = Broker(tmp_path, segment_bytes=1000)
    p = b.host()
    produce(p.log, 30)
    p.high_watermark = p.log.high_watermark = 30
    p.log.maybe_increment_log_start_offset(12)
    dest = next(d for d in b.dirs if d.absolute() != p.log.dir.parent)
    b.mover.alter_replica_log_dirs({TP: str(dest)})
    assert b.mover.step(TP) == "reset"
    future = b.lm.get_future_log(*TP)
    assert future is not None and future.log_end_offset == 12
    b.mover.step(TP)
    p.log.truncate_to(20)  # a follower's truncation meanwhile
    b.run()
    assert p.log.log_start_offset == 12 and p.log.log_end_offset == 20
    assert [o for o, _ in values(p.log)] == list(range(12, 20))


def test_restart_mid_move_resumes(tmp_path: Path) -> None:
    b = Broker(tmp_path, segment_bytes=1000)
    p = b.host()
    produce(p.log, 40)
    dest = next(d for d in b.dirs if d.absolute() != p.log.dir.parent)
    b.mover.alter_replica_log_dirs({TP: str(dest)})
    for _ in range(5):
        b.mover.step(TP)
    future = b.lm.get_future_log(*TP)
    assert future is not None and 0 < future.log_end_offset < 40
    b.lm.flush_dirty_logs()
    b.lm.checkpoint_recovery_points_and_log_start_offsets()
    points = OffsetCheckpointFile(dest.absolute() / RECOVERY_POINT_CHECKPOINT).read()
    assert 0 < points[TP] <= future.log_end_offset  # the future log's own recovery point
    b.lm.close_without_shutdown()  # a crash
    b2 = Broker(tmp_path, segment_bytes=1000)
    assert b2.lm.get_future_log(*TP) is not None
    p2 = b2.host()
    b2.mover.maybe_resume(TP)
    assert b2.run()[-1] == "swap"
    assert p2.log.dir == dest.absolute() / "t-0" and len(values(p2.log)) == 40


def test_crash_inside_the_swap_keeps_the_complete_future_log(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    p = b.host()
    produce(p.log, 10)
    source = p.log.dir
    dest = next(d for d in b.dirs if d.absolute() != source.parent)
    b.mover.alter_replica_log_dirs({TP: str(dest)})
    while b.lm.get_future_log(*TP).log_end_offset < 10:  # type: ignore[union-attr]
        b.mover.step(TP)
    future = b.lm.get_future_log(*TP)
    assert future is not None
    future.flush(force=True)
    b.lm.close_without_shutdown()
    # the broker stopped after renaming the current log for deletion
    os.rename(source, source.parent / ("t-0." + "1" * 32 + "-delete"))
    lm = LogManager(b.dirs, LogConfig())
    lg = lm.get_log(*TP)
    assert lg is not None and lg.dir == dest.absolute() / "t-0" and len(values(lg)) == 10
    assert lm.get_future_log(*TP) is None
    assert [e.name for e in source.parent.iterdir() if e.is_dir()] == []
    lm.shutdown()


def test_alter_errors(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    p = b.host()
    here = str(p.log.dir.parent)
    other = next(str(d.absolute()) for d in b.dirs if d.absolute() != p.log.dir.parent)
    mover = b.mover
    assert mover.alter_replica_log_dirs({TP: str(tmp_path / "nope")}) == {
        TP: ErrorCode.log_dir_not_found}
    assert mover.alter_replica_log_dirs({TP: "relative/dir"}) == {
        TP: ErrorCode.log_dir_not_found}
    assert mover.alter_replica_log_dirs({TP: here}) == {TP: ErrorCode.none}
    assert b.lm.get_future_log(*TP) is None and not mover.moving
    # not hosted yet: REPLICA_NOT_AVAILABLE (unknown: UNKNOWN_TOPIC_OR_PARTITION), and the
    # log is created there later
    new = TopicPartition("u", 1)
    assert mover.alter_replica_log_dirs({new: other}) == {
        new: ErrorCode.unknown_topic_or_partition}
    b.known.add(new)
    assert mover.alter_replica_log_dirs({new: other}) == {new: ErrorCode.replica_not_available}
    long = TopicPartition("x" * 249, 0)
    assert mover.alter_replica_log_dirs({long: other}) == {
        long: ErrorCode.invalid_topic_exception}
    assert str(b.host(new).log.dir.parent) == other
    # a move, then back to the current dir: the move is abandoned
    assert mover.alter_replica_log_dirs({TP: other}) == {TP: ErrorCode.none}
    assert TP in mover.moving
    assert mover.alter_replica_log_dirs({TP: here}) == {TP: ErrorCode.none}
    assert b.lm.get_future_log(*TP) is None and TP not in mover.moving
    assert not [e for e in Path(other).iterdir() if e.name.endswith("-future")]
    b.offline.add(TP)
    assert mover.alter_replica_log_dirs({TP: other}) == {TP: ErrorCode.kafka_storage_error}
    b.offline.clear()
    b.lm.offline_dirs.add(Path(other))
    assert mover.alter_replica_log_dirs({TP: other}) == {TP: ErrorCode.kafka_storage_error}
    b.lm.offline_dirs.clear()
    b.lm.shutdown()


def test_preferred_log_dirs_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    import odradek.storage.log_manager as lm_mod

    monkeypatch.setattr(lm_mod, "MAX_PREFERRED_LOG_DIRS", 3)
    b = Broker(tmp_path)
    for i in range(5):
        b.lm.maybe_update_preferred_log_dir(TopicPartition("x", i), b.dirs[1])
    assert sorted(b.lm.preferred_log_dirs) == [("x", 2), ("x", 3), ("x", 4)]
    b.lm.shutdown()


def test_reassignment_plans_with_log_dirs() -> None:
    from odradek.tools import reassign_partitions as tool
    from odradek.tools.command import ToolError

    text = ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],'
            '"log_dirs":["any","/d/b"]},{"topic":"t","partition":1,"replicas":[2]}]}')
    assert tool.parse_reassignment_json(text) == {("t", 0): [1, 2], ("t", 1): [2]}
    assert tool.parse_log_dirs(text) == {("t", 0, 2): "/d/b"}
    with pytest.raises(ToolError, match="Size of replicas list"):
        tool.parse_reassignment_json('{"version":1,"partitions":[{"topic":"t","partition":0,'
                                     '"replicas":[1,2],"log_dirs":["any"]}]}')
    with pytest.raises(ToolError, match="log_dirs must be a list"):
        tool.parse_reassignment_json('{"version":1,"partitions":[{"topic":"t","partition":0,'
                                     '"replicas":[1],"log_dirs":"any"}]}')


def test_log_dir_move_states_and_lines() -> None:
    from odradek.tools import reassign_partitions as tool
    from odradek.tools.log_dirs import ReplicaLogDirInfo, replica_log_dir_infos

    dirs = [{"log_dir": "/a", "error_code": 0, "topics": [("t", [
                {"partition_index": 0, "partition_size": 9, "offset_lag": 0,
                 "is_future_key": False}])]},
            {"log_dir": "/b", "error_code": 0, "topics": [("t", [
                {"partition_index": 0, "partition_size": 3, "offset_lag": 7,
                 "is_future_key": True}])]},
            {"log_dir": "/c", "error_code": 56, "topics": []}]
    infos = replica_log_dir_infos(dirs, {("t", 0), ("t", 5)})
    assert infos == {("t", 0): ReplicaLogDirInfo("/a", 0, "/b", 7), ("t", 5): ReplicaLogDirInfo()}
    state = tool.log_dir_move_state
    states = {("t", 0, 1): state("/b", "/a", "/b", 7), ("t", 0, 0): state("/b", "/b", None),
              ("t", 1, 0): state("/c", "/a", "/b", 1), ("t", 2, 0): state("/c", "/a", None),
              ("t", 3, 0): state("/c", None, None), ("t", 4, 0): state("/c", None, None,
                                                                        found=False)}
    assert not states[("t", 0, 1)].done and states[("t", 0, 0)].done
    assert tool.move_status_lines(states) == [
        "Reassignment of replica t-0-0 completed successfully.",
        "Partition t-1 on broker 0 is being moved to log dir /b instead of /c.",
        "Partition t-2 on broker 0 is not being moved from log dir /a to /c.",
        "Partition t-3 is not found in any live log dir on broker 0. There is likely an "
        "offline log directory on the broker.",
        "Partition t-4 cannot be found in any live log directory on broker 0.",
        "Reassignment of replica t-0-1 is still in progress.",
    ]


def test_v0_of_the_log_dir_apis_is_decoded_as_v1() -> None:
    """AlterReplicaLogDirs and DescribeLogDirs v0 are v1 on the wire: a v0 frame decodes."""
    import struct

    from odradek.protocol.codec import build, decode_request, encode_request, request_class

    alter = request_class(34, 1)
    mod = __import__(alter.__module__, fromlist=["AlterReplicaLogDir"])
    frames = [
        encode_request(build(alter, dirs=(build(mod.AlterReplicaLogDir, path="/d", topics=(
            build(mod.AlterReplicaLogDirTopic, name="t", partitions=(0, 1)),)),)), 7, "c"),
        encode_request(build(request_class(35, 1), topics=None), 8, "c"),
    ]
    for frame, key in zip(frames, (34, 35), strict=True):
        payload = bytearray(frame[4:])
        struct.pack_into(">h", payload, 2, 0)  # request_api_version 0
        header, body = decode_request(bytes(payload))
        assert header.request_api_key == key and header.request_api_version == 0
        assert request_class(key, 0) is request_class(key, 1)
    assert body.topics is None


class _Denying:
    """An authorizer allowing everything but ALTER on the CLUSTER."""

    enabled = True

    def __init__(self) -> None:
        self.asked: list[tuple[object, object]] = []

    def authorize(self, principal: object, host: str, operation: object, resource_type: object,
                  name: str, **_kw: object) -> bool:
        from odradek.security.acl import AclOperation, ResourceType

        self.asked.append((operation, resource_type))
        return not (operation == AclOperation.ALTER and resource_type == ResourceType.CLUSTER)

    def authorize_any(self, *_a: object, **_kw: object) -> bool:
        return True


def test_handler_needs_alter_on_the_cluster(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from odradek.protocol.codec import build, decode_response, request_class, response_class
    from odradek.server.apis.alter_replica_log_dirs import AlterReplicaLogDirsApi

    b = Broker(tmp_path)
    b.host()
    other = next(str(d.absolute()) for d in b.dirs if d.absolute() != b.parts[TP].log.dir.parent)
    rm = SimpleNamespace(alter_log_dirs=b.mover)
    cls = request_class(34, 2)
    mod = __import__(cls.__module__, fromlist=["AlterReplicaLogDir"])
    request = build(cls, dirs=(
        build(mod.AlterReplicaLogDir, path=other, topics=(
            build(mod.AlterReplicaLogDirTopic, name="t", partitions=(0,)),)),
        build(mod.AlterReplicaLogDir, path="/nope", topics=(
            build(mod.AlterReplicaLogDirTopic, name="u", partitions=(3,)),))))
    header = SimpleNamespace(correlation_id=5)
    conn = SimpleNamespace(principal=None, peer="127.0.0.1:1")

    def answer(authorizer: object) -> dict[tuple[str, int], int]:
        api = AlterReplicaLogDirsApi(rm, authorizer)  # type: ignore[arg-type]
        frame = api.handle(header, request, conn)  # type: ignore[arg-type]
        cid, body = decode_response(response_class(cls), frame[4:])
        assert cid == 5
        return {(t.topic_name, int(p.partition_index)): int(p.error_code)
                for t in body.results for p in t.partitions}

    denying = _Denying()
    assert answer(denying) == {("t", 0): int(ErrorCode.cluster_authorization_failed),
                               ("u", 3): int(ErrorCode.cluster_authorization_failed)}
    assert b.lm.get_future_log(*TP) is None
    from odradek.security.authorizer import ALLOW_ALL

    assert answer(ALLOW_ALL) == {("t", 0): 0, ("u", 3): int(ErrorCode.log_dir_not_found)}
    assert b.lm.get_future_log(*TP) is not None
    b.lm.shutdown()


def test_a_failed_destination_dir_abandons_the_move(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    p = b.host()
    produce(p.log, 5)
    other = next(d.absolute() for d in b.dirs if d.absolute() != p.log.dir.parent)
    b.mover.alter_replica_log_dirs({TP: str(other)})
    b.mover.step(TP)
    b.lm.handle_log_dir_failure(other)  # KIP-112: the destination failed
    assert b.lm.get_future_log(*TP) is None
    assert b.mover.step(TP) == "idle" and TP not in b.mover.moving
    assert len(values(p.log)) == 5  # the partition keeps its current log
    assert b.mover.alter_replica_log_dirs({TP: str(other)}) == {
        TP: ErrorCode.kafka_storage_error}
    b.lm.shutdown()


def test_cleaning_pauses_during_a_move_and_its_checkpoint_moves_along(tmp_path: Path) -> None:
    from odradek.storage.cleaner_manager import CLEANER_OFFSET_CHECKPOINT

    b = Broker(tmp_path)
    p = b.host()
    produce(p.log, 6)
    source = p.log.dir.parent
    dest = next(d.absolute() for d in b.dirs if d.absolute() != source)
    cm = b.lm.cleaner_manager
    cm.update_checkpoints(source, update=(TP, 4))
    b.mover.alter_replica_log_dirs({TP: str(dest)})
    assert TP in cm.paused
    b.run()
    assert TP not in cm.paused
    assert OffsetCheckpointFile(dest / CLEANER_OFFSET_CHECKPOINT).read() == {TP: 4}
    assert OffsetCheckpointFile(source / CLEANER_OFFSET_CHECKPOINT).read() == {}
    b.lm.shutdown()


def test_dir_names_are_compared_as_absolute_paths(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    b = Broker(tmp_path)
    b.host()
    for given in ("", "b", "/", "\x00", str(tmp_path / "b" / ".." / "nope"), "a" * 5000):
        assert b.mover.alter_replica_log_dirs({TP: given}) == {TP: ErrorCode.log_dir_not_found}
    monkeypatch.chdir(tmp_path)
    here = b.parts[TP].log.dir.parent.name  # relative to the working dir, as Kafka's File
    other = next(d.name for d in b.dirs if d.name != here)
    assert b.mover.alter_replica_log_dirs({TP: other + "/"}) == {TP: ErrorCode.none}
    assert b.lm.get_future_log(*TP) is not None
    b.lm.shutdown()


# -- a log start offset inside a batch (DeleteRecords), retention, compaction, transactions --

NOW = 1_700_000_000_000


def produce_batches(log: Log, count: int, per_batch: int = 5, epoch: int = 0,
                    timestamp_ms: int = NOW, keys: int | None = None) -> None:
    """`count` batches of `per_batch` records each (keys modulo `keys` when given)."""
    for _ in range(count):
        start = log.log_end_offset
        records = [(b"k%d" % ((start + i) % keys if keys else start + i), b"v%d" % (start + i))
                   for i in range(per_batch)]
        buf = bytearray(build_batch(records, timestamp_ms=timestamp_ms))
        log.append_as_leader(buf, validate_batches(buf), epoch, timestamp_ms)


def delete_records(p: Partition, offset: int) -> None:
    """DeleteRecords on the partition's log (its high watermark at the log end offset)."""
    p.high_watermark = p.log.high_watermark = p.log.log_end_offset
    assert p.log.maybe_increment_log_start_offset(offset)


def inside_a_batch(log: Log, offset: int) -> bool:
    return any(h.base_offset < offset <= h.last_offset for h in log.iter_batch_headers(offset))


def from_log_start(log: Log) -> tuple[int, int, bytes, list[tuple[int, int]]]:
    """What a fetch from the log start offset sees: log start and end offsets, the bytes and the
    leader epochs."""
    data = log.read(log.log_start_offset, 1 << 30).read_bytes()
    return (log.log_start_offset, log.log_end_offset, data, log.leader_epoch_cache.entries())


def other_dir(b: Broker, log: Log) -> Path:
    return next(d.absolute() for d in b.dirs if d.absolute() != log.dir.parent)


def no_future_dirs(b: Broker) -> bool:
    return not [e for d in b.dirs for e in d.iterdir() if e.name.endswith("-future")]


@pytest.mark.parametrize("where", ["first segment", "later segment"])
def test_move_after_delete_records_inside_a_batch(tmp_path: Path, where: str) -> None:
    """The log start offset in the middle of a batch: the future log starts at the current
    log's log start offset, and the batch holding it (which begins below) is its first copy.
    Kafka's Partition.appendRecordsToFollowerOrFutureReplica restarts an empty log at that
    batch's base offset and appends it; the future log's log start offset then follows the
    current one's."""
    b = Broker(tmp_path, segment_bytes=1000)
    p = b.host()
    produce_batches(p.log, 12, epoch=0)
    produce_batches(p.log, 12, epoch=2)
    assert p.log.num_segments >= 4
    target = 7 if where == "first segment" else p.log.segments[2].base_offset + 8
    delete_records(p, target)
    p.log.delete_retention_segments(NOW)  # segments wholly below the log start offset go
    assert p.log.log_start_offset == target and inside_a_batch(p.log, target)
    assert p.log.segments[0].base_offset < target
    before = from_log_start(p.log)
    assert b.mover.alter_replica_log_dirs({TP: str(other_dir(b, p.log))}) == {TP: ErrorCode.none}
    steps = b.run()
    assert steps[-1] == "swap", steps[-3:]
    assert from_log_start(p.log) == before
    assert p.log.segments[0].base_offset < target  # the batch holding the log start is whole
    assert no_future_dirs(b) and b.mover.completed == 1
    b.lm.shutdown()
    lm = LogManager(b.dirs, LogConfig(segment_bytes=1000))  # and after a restart
    lg = lm.get_log(*TP)
    assert lg is not None and from_log_start(lg) == before
    lm.shutdown()


MINUTE = 60_000


@pytest.mark.parametrize("kind", ["time", "size"])
def test_move_after_retention_with_the_start_offset_moved(tmp_path: Path, kind: str) -> None:
    """Retention by time (retention.ms) or size (retention.bytes) moves the log start offset
    to a segment's base offset (a batch boundary), DeleteRecords then into the middle of a
    batch of that segment, and while the replica moves retention deletes the current log's
    first segment again: the future log restarts at the new log start offset ("reset") and
    the move completes with the log as it is."""
    day = 24 * 60 * MINUTE
    b = Broker(tmp_path, segment_bytes=1000, retention_ms=day if kind == "time" else -1)
    p = b.host()
    for i in range(40):  # a batch a minute
        produce_batches(p.log, 1, timestamp_ms=NOW + i * MINUTE)
    p.high_watermark = p.log.high_watermark = p.log.log_end_offset
    segs = p.log.segments
    assert len(segs) >= 5

    def retain(first_kept: int) -> None:
        """A retention pass that deletes the segments below `first_kept`."""
        kept = p.log.segments
        if kind == "time":
            now = kept[first_kept - 1].largest_timestamp() + day + 1
        else:
            doomed = sum(s.size for s in kept[:first_kept])
            b.lm.update_topic_config("t", LogConfig(segment_bytes=1000,
                                                    retention_bytes=p.log.size - doomed))
            p.log.config = b.lm.config_for("t")
            now = NOW + 40 * MINUTE
        assert p.log.delete_retention_segments(now) == first_kept

    retain(2)
    start = segs[2].base_offset
    assert p.log.log_start_offset == start and not inside_a_batch(p.log, start)
    delete_records(p, start + 3)
    assert inside_a_batch(p.log, start + 3)
    assert b.mover.alter_replica_log_dirs({TP: str(other_dir(b, p.log))}) == {TP: ErrorCode.none}
    steps = [b.mover.step(TP), b.mover.step(TP)]
    assert steps == ["reset", "copy"]
    future = b.lm.get_future_log(*TP)
    assert future is not None and future.log_end_offset < segs[3].base_offset
    retain(1)  # the current log's first segment goes while moving
    assert p.log.log_start_offset == segs[3].base_offset
    before = from_log_start(p.log)
    steps = b.run()
    assert steps[0] == "reset" and steps[-1] == "swap", steps
    assert from_log_start(p.log) == before
    assert no_future_dirs(b)
    b.lm.shutdown()


def latest_per_key(log: Log) -> dict[bytes | None, tuple[int, bytes | None]]:
    from odradek.protocol.records import decode_records

    data = log.read(log.log_start_offset, 1 << 30).read_bytes()
    latest: dict[bytes | None, tuple[int, bytes | None]] = {}
    for h in iter_headers(data):
        for r in decode_records(data[h.position:h.position + h.size]):
            if r.offset >= log.log_start_offset:
                latest[r.key] = (r.offset, r.value)
    return latest


def test_move_while_the_log_is_being_cleaned(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A compact,delete topic whose log start offset is inside a batch (DeleteRecords) moves
    while a cleaning pass of it is under way: the move starts after the pass cleaned its first
    group and before that group is swapped in. As Kafka's alterReplicaLogDirs
    (abortAndPauseCleaning) the pass is aborted: the current log is not cleaned under the
    copy, the moved log is the log as it was, and cleaning resumes on the moved log."""
    from odradek.storage.cleaner import CleanerConfig

    b = Broker(tmp_path, segment_bytes=1000, cleanup_policy=("compact", "delete"),
               min_cleanable_dirty_ratio=0.0)
    p = b.host()
    produce_batches(p.log, 40, keys=7)
    delete_records(p, 13)
    assert inside_a_batch(p.log, 13)
    cleaner = b.lm.cleaner
    cleaner.configure(CleanerConfig(dedupe_buffer_size=1 << 20))
    real = cleaner.cleaner.clean_group
    before: list[tuple[int, int, bytes, list[tuple[int, int]]]] = []

    def moving_meanwhile(*args: object) -> object:
        cleaned = real(*args)  # type: ignore[arg-type]
        if not before:
            before.append(from_log_start(p.log))
            assert b.mover.alter_replica_log_dirs({TP: str(other_dir(b, p.log))}) == {
                TP: ErrorCode.none}
            for _ in range(3):
                b.mover.step(TP)
        return cleaned

    monkeypatch.setattr(cleaner.cleaner, "clean_group", moving_meanwhile)
    source = p.log.dir
    assert cleaner.clean_once(NOW) is False  # aborted
    assert before and from_log_start(p.log) == before[0]  # nothing swapped in
    assert not [f for f in source.iterdir() if f.name.endswith(".cleaned")]
    assert b.run()[-1] == "swap"
    assert from_log_start(p.log) == before[0]
    assert no_future_dirs(b)
    latest = latest_per_key(p.log)
    size = p.log.size
    cleaner.configure(CleanerConfig(dedupe_buffer_size=1 << 20))  # the real clean_group
    assert cleaner.clean_once(NOW) is True  # cleaning resumes on the moved log
    assert latest_per_key(p.log) == latest and p.log.size < size
    assert p.log.log_start_offset == 13
    b.lm.shutdown()

# -- transactions ---------------------------------------------------------------------------

def txn_batch(log: Log, pid: int, seq: int, count: int) -> None:
    buf = bytearray(build_batch([(b"p%d" % pid, b"%d-%d" % (pid, seq + i)) for i in range(count)],
                                timestamp_ms=NOW, producer_id=pid, producer_epoch=0,
                                base_sequence=seq, is_transactional=True))
    log.append_as_leader(buf, validate_batches(buf), 0, NOW)


def end_txn(log: Log, pid: int, commit: bool) -> bytes:
    """The coordinator's marker appended to `log` (as leader); its bytes."""
    from odradek.protocol.control_records import (
        ControlRecordType,
        EndTransactionMarker,
        build_end_txn_marker_batch,
    )
    from odradek.storage.append_origin import AppendOrigin

    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    buf = bytearray(build_end_txn_marker_batch(EndTransactionMarker(kind, 3), pid, 0,
                                               timestamp_ms=NOW))
    at = log.log_end_offset
    log.append_as_leader(buf, validate_batches(buf, allow_control=True), 0, NOW,
                         AppendOrigin.COORDINATOR)
    return log.read(at, 1 << 20).read_bytes()


def txn_view(log: Log, high_watermark: int | None = None) -> dict[str, object]:
    """What read_committed sees of `log` (high watermark: its log end offset unless given):
    the last stable offset, the records a read_committed consumer gets from the log start
    offset (Kafka's consumer skipping), the aborted transactions (.txnindex) overlapping the
    log from its start, and the producer state."""
    from odradek.client.read_committed import AbortedTransactions, abort_marker_checker
    from odradek.protocol.records import decode_records

    log.high_watermark = log.log_end_offset if high_watermark is None else high_watermark
    lso = log.last_stable_offset
    fetched = log.read(log.log_start_offset, 1 << 30, max_offset=lso, include_aborted_txns=True)
    data = memoryview(fetched.read_bytes())
    skipping = AbortedTransactions([(a.producer_id, a.first_offset)
                                    for a in fetched.aborted_transactions or ()])
    records = []
    for h in iter_headers(data):
        if skipping.skip(h, abort_marker_checker(data, h)) or h.is_control:
            continue
        batch = data[h.position:h.position + h.size]
        records += [(r.offset, r.value) for r in decode_records(batch)
                    if r.offset >= log.log_start_offset]
    return {
        "log start": log.log_start_offset, "log end": log.log_end_offset, "lso": lso,
        "first unstable": log.first_unstable_offset, "read_committed": records,
        "aborted": log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset),
        "producers": {pid: (e.producer_epoch, e.last_seq, e.last_data_offset,
                            e.current_txn_first_offset, e.coordinator_epoch)
                      for pid, e in sorted(log.producer_state.producers.items())},
    }


def test_move_with_open_transactions(tmp_path: Path) -> None:
    """A partition with transactions around a log start offset inside a batch: A open since
    before the log start offset (no batch of it after), B aborted with its first batch below
    the log start offset and its marker above, E open whose first batch holds the log start
    offset, D committed and C open above it. The moved log has the original's last stable
    offset (never below the log start offset, Kafka's maybeIncrementFirstUnstableOffset),
    producer state and aborted transactions: a read_committed consumer reads what it read
    from a copy of the original that never moved -- while moving, after E aborts during the
    move, after A commits and C aborts after it, and after a restart."""
    b = Broker(tmp_path, segment_bytes=100_000)
    p = b.host()
    lg = p.log
    produce_batches(lg, 1)      # 0-4
    txn_batch(lg, 1, 0, 3)      # 5-7    A
    txn_batch(lg, 2, 0, 3)      # 8-10   B
    txn_batch(lg, 5, 0, 5)      # 11-15  E: the log start offset 13 in it
    end_txn(lg, 2, commit=False)  # 16  B aborted
    txn_batch(lg, 4, 0, 3)      # 17-19  D
    end_txn(lg, 4, commit=True)  # 20
    produce_batches(lg, 1)      # 21-25
    txn_batch(lg, 3, 0, 2)      # 26-27  C
    produce_batches(lg, 1)      # 28-32
    reference = Log.open(tmp_path / "reference" / "t-0", LogConfig())
    reference.append_as_follower(lg.read(0, 1 << 30).read_bytes())
    for log in (lg, reference):
        log.high_watermark = log.log_end_offset
        assert log.maybe_increment_log_start_offset(13)
    p.high_watermark = lg.log_end_offset
    view = txn_view(reference)
    assert txn_view(lg) == view
    assert view["lso"] == 13  # A keeps the first unstable offset at the log start offset
    assert [t.producer_id for t in view["aborted"]] == [2]  # type: ignore[attr-defined]
    assert b.mover.alter_replica_log_dirs({TP: str(other_dir(b, lg))}) == {TP: ErrorCode.none}
    b.mover.chunk_bytes = 1  # a batch a step
    assert [b.mover.step(TP) for _ in range(3)] == ["reset", "copy", "copy"]
    future = b.lm.get_future_log(*TP)
    assert future is not None
    assert txn_view(future, high_watermark=lg.log_end_offset)["lso"] == 13
    reference.append_as_follower(end_txn(lg, 5, commit=False))  # E aborts meanwhile
    p.high_watermark = lg.log_end_offset
    assert b.run()[-1] == "swap"
    assert no_future_dirs(b) and p.log is not lg
    assert txn_view(p.log) == txn_view(reference)
    reference.append_as_follower(end_txn(p.log, 1, commit=True))  # A commits
    reference.append_as_follower(end_txn(p.log, 3, commit=False))  # C aborts
    p.high_watermark = p.log.log_end_offset
    after = txn_view(reference)
    assert after["lso"] == after["log end"] and after["first unstable"] is None
    assert txn_view(p.log) == after
    b.lm.shutdown()
    lm = LogManager(b.dirs, LogConfig(segment_bytes=100_000))
    moved = lm.get_log(*TP)
    assert moved is not None and txn_view(moved) == after
    lm.shutdown()
    reference.close()


def test_a_restart_mid_move_keeps_the_open_transactions(tmp_path: Path) -> None:
    """The producer state the future log starts with is in a snapshot at its start offset:
    a broker stopping mid-move (kill -9) loads it with the future log, and the moved log still
    holds the transaction open since before its log start offset."""
    b = Broker(tmp_path, segment_bytes=100_000)
    p = b.host()
    txn_batch(p.log, 1, 0, 3)   # 0-2: open
    produce_batches(p.log, 6)   # 3-32
    delete_records(p, 10)
    assert txn_view(p.log)["lso"] == 10
    b.mover.alter_replica_log_dirs({TP: str(other_dir(b, p.log))})
    b.mover.chunk_bytes = 1
    assert [b.mover.step(TP) for _ in range(3)] == ["reset", "copy", "copy"]
    b.lm.checkpoint_recovery_points_and_log_start_offsets()  # the log start offsets
    b.lm.close_without_shutdown()
    b2 = Broker(tmp_path, segment_bytes=100_000)
    p2 = b2.host()
    future = b2.lm.get_future_log(*TP)
    assert future is not None and 10 < future.log_end_offset < 33
    b2.mover.maybe_resume(TP)
    assert b2.run()[-1] == "swap"
    view = txn_view(p2.log)
    assert view["lso"] == 10 and view["first unstable"] == 10
    assert view["producers"][1][3] == 0  # type: ignore[index]
    b2.lm.shutdown()
