"""AlterReplicaLogDirs (KIP-113) on an in-process 2-broker cluster with two log dirs per broker:
broker 0's replicas of a leader partition and of a follower partition move to its other dir
while acks=all producers keep writing. DescribeLogDirs shows the future replicas mid-move (the
move is throttled by replica.alter.log.dirs.io.max.bytes.per.second), the dirs are named as
Kafka names them, and afterwards every acknowledged record is in the moved logs, the old dirs
are gone and the brokers still serve. Bad input: an unconfigured dir answers LOG_DIR_NOT_FOUND,
a relative one too, an unknown partition UNKNOWN_TOPIC_OR_PARTITION, nothing crashes."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.cluster import AsyncCluster
from odradek.storage.partition_metadata import read_partition_metadata
from tests.integration.broker_harness import req_module, run
from tests.integration.disk_support import describe_log_dirs, produce_values, records_of
from tests.wire import WireClient

TOPIC = "mv"
FAST = {"replica.fetch.backoff.ms": "100", "replica.fetch.wait.max.ms": "100",
        "log.flush.offset.checkpoint.interval.ms": "500",
        "replica.high.watermark.checkpoint.interval.ms": "500",
        "replication.quota.window.num": "2", "replica.fetch.max.bytes": "16384"}
THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"


async def set_throttle(c: WireClient, broker: int, rate: int | None) -> None:
    """IncrementalAlterConfigs on the broker's dynamic config: SET (0) or DELETE (1)."""
    m = req_module(44, 1)
    r = await c.request(m.IncrementalAlterConfigsRequest(resources=(m.AlterConfigsResource(
        resource_type=4, resource_name=str(broker), configs=(m.AlterableConfig(
            name=THROTTLE, config_operation=0 if rate is not None else 1,
            value=None if rate is None else str(rate)),)),), validate_only=False))
    assert r.responses[0].error_code == 0, r.responses[0].error_message


def alter_request(moves: dict[str, list[tuple[str, int]]], version: int = 1) -> Any:
    m = req_module(34, version)
    dirs = []
    for path, tps in moves.items():
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        dirs.append(m.AlterReplicaLogDir(path=path, topics=tuple(
            m.AlterReplicaLogDirTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items())))
    return m.AlterReplicaLogDirsRequest(dirs=tuple(dirs))


def errors_of(response: Any) -> dict[tuple[str, int], int]:
    return {(t.topic_name, int(p.partition_index)): int(p.error_code)
            for t in response.results for p in t.partitions}


async def create_topic(c: WireClient) -> None:
    m = req_module(19, 7)
    request = m.CreateTopicsRequest(topics=(m.CreatableTopic(
        name=TOPIC, num_partitions=-1, replication_factor=-1,
        assignments=(m.CreatableReplicaAssignment(partition_index=0, broker_ids=(0, 1)),
                     m.CreatableReplicaAssignment(partition_index=1, broker_ids=(1, 0))),
        configs=()),), timeout=datetime.timedelta(seconds=10), validate_only=False)
    r = await c.request(request)
    assert r.topics[0].error_code == 0, r.topics[0].error_message


def test_move_replicas_between_log_dirs_while_producing(tmp_path: Path) -> None:
    dirs = {b: [tmp_path / f"b{b}-x", tmp_path / f"b{b}-y"] for b in (0, 1)}

    async def scenario() -> None:
        async with AsyncCluster(2, data_dir=tmp_path / "cluster", overrides=FAST, http=False,
                                broker_overrides={b: {"log.dirs": ",".join(map(str, d))}
                                                  for b, d in dirs.items()}) as cluster:
            clients = {b: await WireClient.connect("127.0.0.1", cluster.ports[b]) for b in (0, 1)}
            acked: dict[int, list[tuple[int, list[bytes]]]] = {0: [], 1: []}
            stop = asyncio.Event()
            try:
                await create_topic(clients[0])
                await cluster.wait_for(lambda: all(
                    (TOPIC, p) in b.replica_manager.partitions for b in cluster.brokers.values()
                    for p in (0, 1)), what="topic hosted")
                payload = b"x" * 1000

                async def producer(p: int, n: int | None) -> None:
                    leader = await WireClient.connect("127.0.0.1",
                                                      cluster.ports[0 if p == 0 else 1])
                    try:
                        i = 0
                        while (n is None and not stop.is_set()) or (n is not None and i < n):
                            values = [b"%d-%d-%d-" % (p, i, j) + payload for j in range(10)]
                            code, base = await produce_values(leader, TOPIC, p, values)
                            assert code == 0, code
                            acked[p].append((base, values))
                            i += 1
                    finally:
                        await leader.close()

                await asyncio.gather(producer(0, 30), producer(1, 30))  # 300 KB each
                lm = cluster.brokers[0].log_manager
                assert lm is not None
                await cluster.wait_for(lambda: all(
                    (lg := lm.get_log(TOPIC, p)) is not None and lg.log_end_offset == 300
                    for p in (0, 1)), what="broker 0 has both partitions")
                sources = {p: lm.get_log(TOPIC, p).dir.parent for p in (0, 1)}  # type: ignore[union-attr]
                dest = {p: next(d.absolute() for d in dirs[0] if d.absolute() != sources[p])
                        for p in (0, 1)}
                rm = cluster.brokers[0].replica_manager
                assert rm is not None
                await set_throttle(clients[0], 0, 150_000)  # 600 KB to copy: mid-move for a while
                await cluster.wait_for(lambda: rm.alter_log_dirs.quota.quota == 150_000,
                                       what="throttle applied")
                writers = [asyncio.ensure_future(producer(p, None)) for p in (0, 1)]
                moves: dict[str, list[tuple[str, int]]] = {}
                for p in (0, 1):
                    moves.setdefault(str(dest[p]), []).append((TOPIC, p))
                r = await clients[0].request(alter_request(moves))
                assert errors_of(r) == {(TOPIC, 0): 0, (TOPIC, 1): 0}
                # mid-move: the future replicas, Kafka's dir names, DescribeLogDirs
                for p in (0, 1):
                    future = lm.get_future_log(TOPIC, p)
                    assert future is not None and future.dir.parent == dest[p]
                    assert future.dir.name.startswith(f"{TOPIC}-{p}.")
                    assert future.dir.name.endswith("-future")
                    assert len(future.dir.name) == len(f"{TOPIC}-{p}") + 1 + 32 + len("-future")
                r = await clients[0].request(describe_log_dirs())
                seen = {(res.log_dir, int(part.partition_index), bool(part.is_future_key)):
                        int(part.offset_lag)
                        for res in r.results for t in res.topics if t.name == TOPIC
                        for part in t.partitions}
                for p in (0, 1):
                    assert (str(sources[p]), p, False) in seen
                    assert seen[(str(dest[p]), p, True)] > 0, seen
                # bad input meanwhile: nothing crashes
                r = await clients[0].request(alter_request({
                    str(tmp_path / "not-configured"): [(TOPIC, 0)], "relative": [(TOPIC, 1)],
                    str(dest[0]): [("no-such-topic", 0)]}))
                assert errors_of(r) == {(TOPIC, 0): int(ErrorCode.log_dir_not_found),
                                        (TOPIC, 1): int(ErrorCode.log_dir_not_found),
                                        ("no-such-topic", 0):
                                            int(ErrorCode.unknown_topic_or_partition)}
                # throttled below the produce rate a move never catches up (as in Kafka): lift it
                await set_throttle(clients[0], 0, None)
                await cluster.wait_for(lambda: not lm.future_logs(), timeout=30,
                                       what="both moves finished")
                stop.set()
                await asyncio.gather(*writers)
                assert rm.alter_log_dirs.completed == 2
                await cluster.wait_for(lambda: all(
                    lm.get_log(TOPIC, p).log_end_offset  # type: ignore[union-attr]
                    == cluster.brokers[1].log_manager.get_log(TOPIC, p).log_end_offset  # type: ignore[union-attr]
                    for p in (0, 1)), what="broker 0 caught up")
                lm.wait_for_deletions(10)
                for p in (0, 1):
                    lg = lm.get_log(TOPIC, p)
                    assert lg is not None and lg.dir == dest[p] / f"{TOPIC}-{p}"
                    assert rm.partitions[(TOPIC, p)].log is lg
                    assert not [e for e in sources[p].iterdir()
                                if e.name.startswith(f"{TOPIC}-{p}")]
                    # the topic id moved with the log (Kafka's future log is created with it)
                    assert read_partition_metadata(lg.dir) == rm.partitions[(TOPIC, p)].topic_id
                    assert rm.partitions[(TOPIC, p)].topic_id is not None
                    got = records_of(lg)
                    assert [o for o, _ in got] == list(range(len(got)))  # nothing lost or doubled
                    by_offset = dict(got)
                    for base, values in acked[p]:
                        for i, v in enumerate(values):
                            assert by_offset[base + i] == v
                r = await clients[0].request(describe_log_dirs())
                after = {(res.log_dir, int(part.partition_index), bool(part.is_future_key))
                         for res in r.results for t in res.topics if t.name == TOPIC
                         for part in t.partitions}
                assert after == {(str(dest[p]), p, False) for p in (0, 1)}
                # the moved logs still take writes on broker 0 (leader of partition 0)
                code, _ = await produce_values(clients[0], TOPIC, 0, [b"after"])
                assert code == 0
            finally:
                stop.set()
                for c in clients.values():
                    await c.close()

    run(scenario, timeout=120)


def test_tools_reassign_log_dirs_with_throttle_and_verify(tmp_path: Path) -> None:
    """`odradek reassign-partitions --execute` with "log_dirs" and
    --replica-alter-log-dirs-throttle, `odradek log-dirs --describe` mid-move, and
    `--verify --wait` until the move completed (the throttle cleared then)."""
    import json

    from tests.integration.test_reassignment import cli_tool

    dirs = [tmp_path / "x", tmp_path / "y"]

    async def scenario() -> None:
        async with AsyncCluster(1, data_dir=tmp_path / "cluster", http=False, overrides={
                **FAST, "log.dirs": ",".join(map(str, dirs))}) as cluster:
            c = await WireClient.connect("127.0.0.1", cluster.ports[0])
            try:
                m = req_module(19, 7)
                r = await c.request(m.CreateTopicsRequest(topics=(m.CreatableTopic(
                    name=TOPIC, num_partitions=1, replication_factor=1, assignments=(),
                    configs=()),), timeout=datetime.timedelta(seconds=10), validate_only=False))
                assert r.topics[0].error_code == 0
                await cluster.wait_for(lambda: (TOPIC, 0) in cluster.brokers[0].replica_manager
                                       .partitions, what="hosted")  # type: ignore[union-attr]
                for i in range(40):  # 400 KB
                    code, _ = await produce_values(c, TOPIC, 0, [b"%d-%d" % (i, j) + b"y" * 1000
                                                                for j in range(10)])
                    assert code == 0
            finally:
                await c.close()
            lm = cluster.brokers[0].log_manager
            assert lm is not None
            source = lm.get_log(TOPIC, 0).dir.parent  # type: ignore[union-attr]
            dest = next(str(d.absolute()) for d in dirs if d.absolute() != source)
            plan = tmp_path / "plan.json"
            plan.write_text(json.dumps({"version": 1, "partitions": [
                {"topic": TOPIC, "partition": 0, "replicas": [0], "log_dirs": [dest]}]}))
            bootstrap = cluster.bootstrap_servers
            code, out = await cli_tool("reassign-partitions", "--bootstrap-server", bootstrap,
                                       "--execute", "--reassignment-json-file", str(plan),
                                       "--replica-alter-log-dirs-throttle", "100000")
            assert code == 0, out
            assert "The replica-alter-dir throttle limit was set to 100000 B/s" in out
            assert f"Successfully started log directory move for: {TOPIC}-0-0" in out
            rm = cluster.brokers[0].replica_manager
            assert rm is not None and rm.alter_log_dirs.quota.quota == 100000
            code, out = await cli_tool("log-dirs", "--describe", "--bootstrap-server",
                                       bootstrap, "--topic-list", TOPIC)
            assert code == 0, out
            doc = json.loads(out.strip().splitlines()[-1])
            parts = {(d["logDir"], p["isFuture"]): p for d in doc["brokers"][0]["logDirs"]
                     for p in d["partitions"]}
            assert parts[(str(source), False)]["partition"] == f"{TOPIC}-0"
            assert parts[(dest, True)]["offsetLag"] > 0, parts
            code, out = await cli_tool("reassign-partitions", "--bootstrap-server", bootstrap,
                                       "--verify", "--wait", "--wait-interval-ms", "200",
                                       "--wait-timeout-ms", "30000", "--reassignment-json-file",
                                       str(plan))
            assert code == 0, out
            assert f"Reassignment of replica {TOPIC}-0-0 completed successfully." in out
            assert "Clearing broker-level throttles on broker 0" in out
            await cluster.wait_for(lambda: rm.alter_log_dirs.quota.quota == 2**63 - 1,
                                   what="throttle cleared")
            assert lm.get_log(TOPIC, 0).dir == Path(dest) / f"{TOPIC}-0"  # type: ignore[union-attr]
            # a plan naming a dir the broker does not have: LOG_DIR_NOT_FOUND, said clearly
            plan.write_text(json.dumps({"version": 1, "partitions": [
                {"topic": TOPIC, "partition": 0, "replicas": [0],
                 "log_dirs": [str(tmp_path / "nowhere")]}]}))
            code, out = await cli_tool("reassign-partitions", "--bootstrap-server", bootstrap,
                                       "--execute", "--additional", "--reassignment-json-file",
                                       str(plan))
            assert code != 0 and f"Failed to alter dir for {TOPIC}-0-0: LOG_DIR_NOT_FOUND" in out
            # --cancel of a (slow) move back: the replica stays, the future log goes
            plan.write_text(json.dumps({"version": 1, "partitions": [
                {"topic": TOPIC, "partition": 0, "replicas": [0], "log_dirs": [str(source)]}]}))
            code, out = await cli_tool("reassign-partitions", "--bootstrap-server", bootstrap,
                                       "--execute", "--reassignment-json-file", str(plan),
                                       "--replica-alter-log-dirs-throttle", "10000")
            assert code == 0, out
            assert lm.get_future_log(TOPIC, 0) is not None
            code, out = await cli_tool("reassign-partitions", "--bootstrap-server", bootstrap,
                                       "--cancel", "--reassignment-json-file", str(plan))
            assert code == 0, out
            assert out.splitlines()[:2] == [
                "None of the specified partition reassignments are active.",
                f"Successfully started log directory move for: {TOPIC}-0-0"], out
            assert lm.get_future_log(TOPIC, 0) is None and not rm.alter_log_dirs.moving
            assert lm.get_log(TOPIC, 0).dir == Path(dest) / f"{TOPIC}-0"  # type: ignore[union-attr]
            await cluster.wait_for(lambda: rm.alter_log_dirs.quota.quota == 2**63 - 1,
                                   what="throttle cleared by --cancel")

    run(scenario, timeout=120)


def test_a_replica_new_to_its_broker_is_created_in_the_planned_dir(tmp_path: Path) -> None:
    """AlterReplicaLogDirs for a replica its broker does not host yet answers
    REPLICA_NOT_AVAILABLE and the broker remembers the dir: when a reassignment brings the
    replica there, its log is created in that dir directly (no move). (The tool asks after
    starting the reassignment, as Kafka's does, so the replica may already exist and then moves:
    here the dir is asked for first, by hand.)"""
    import json

    from tests.integration.test_reassignment import cli_tool

    dirs = {b: [tmp_path / f"n{b}-x", tmp_path / f"n{b}-y"] for b in (0, 1)}

    async def scenario() -> None:
        async with AsyncCluster(2, data_dir=tmp_path / "cluster", overrides=FAST, http=False,
                                broker_overrides={b: {"log.dirs": ",".join(map(str, d))}
                                                  for b, d in dirs.items()}) as cluster:
            c = await WireClient.connect("127.0.0.1", cluster.ports[1])
            try:
                m = req_module(19, 7)
                r = await c.request(m.CreateTopicsRequest(topics=(m.CreatableTopic(
                    name="nb", num_partitions=-1, replication_factor=-1,
                    assignments=(m.CreatableReplicaAssignment(partition_index=0,
                                                              broker_ids=(1,)),),
                    configs=()),), timeout=datetime.timedelta(seconds=10), validate_only=False))
                assert r.topics[0].error_code == 0
                await cluster.wait_for(lambda: ("nb", 0) in cluster.brokers[1].replica_manager
                                       .partitions, what="hosted")  # type: ignore[union-attr]
                for i in range(20):
                    code, _ = await produce_values(c, "nb", 0, [b"nb-%d" % i])
                    assert code == 0
            finally:
                await c.close()
            lm = cluster.brokers[0].log_manager
            assert lm is not None and not lm.partitions()
            target = str(dirs[0][1].absolute())  # not the first dir an empty broker picks
            c0 = await WireClient.connect("127.0.0.1", cluster.ports[0])
            try:
                r = await c0.request(alter_request({target: [("nb", 0)]}, version=2))
                assert errors_of(r) == {("nb", 0): int(ErrorCode.replica_not_available)}
            finally:
                await c0.close()
            assert lm.preferred_log_dirs == {("nb", 0): Path(target)}
            plan = tmp_path / "plan.json"
            plan.write_text(json.dumps({"version": 1, "partitions": [
                {"topic": "nb", "partition": 0, "replicas": [0], "log_dirs": [target]}]}))
            code, out = await cli_tool("reassign-partitions", "--bootstrap-server",
                                       cluster.bootstrap_servers, "--execute",
                                       "--reassignment-json-file", str(plan))
            assert code == 0, out
            assert "Successfully started log directory move for: nb-0-0" in out
            await cluster.wait_for(lambda: (lg := lm.get_log("nb", 0)) is not None
                                   and lg.log_end_offset == 20, what="replica on broker 0")
            lg = lm.get_log("nb", 0)
            assert lg is not None and str(lg.dir.parent) == target
            rm = cluster.brokers[0].replica_manager
            assert rm is not None and rm.alter_log_dirs.completed == 0  # created there
            assert not lm.preferred_log_dirs

    run(scenario, timeout=120)
