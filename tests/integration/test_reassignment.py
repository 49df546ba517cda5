"""Partition reassignment on in-process clusters (S-6.2, Kafka's ``onPartitionReassignment``):
the OAR {1,2,3} -> RAR {4,5,6} table of docs/design.md S-6.2, a controller killed
mid-way, replication factor changes, cancel, AlterPartitionReassignments /
ListPartitionReassignments through odradek's admin client."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client import AsyncAdmin, AsyncConsumer, AsyncProducer
from odradek.client.types import NewTopic
from odradek.cluster import AsyncCluster
from odradek.coordination.store import WatchEvent
from odradek.server.broker import Broker
from tests.integration.broker_harness import run

SEED_TABLE = [  # docs/design.md S-6.2: AR, leader/isr (as sets: Kafka writes AR as RAR + OAR - RAR)
    ({1, 2, 3}, 1, {1, 2, 3}),            # initial state
    ({1, 2, 3, 4, 5, 6}, 1, {1, 2, 3}),   # step 2
    ({1, 2, 3, 4, 5, 6}, 1, {1, 2, 3, 4, 5, 6}),  # step 4
    ({1, 2, 3, 4, 5, 6}, 4, {1, 2, 3, 4, 5, 6}),  # step 7
    ({1, 2, 3, 4, 5, 6}, 4, {4, 5, 6}),   # step 8
    ({4, 5, 6}, 4, {4, 5, 6}),            # step 10
]


def znode(cluster: AsyncCluster, path: str) -> Any:
    data = cluster.zookeeper.dump(path).get(path)
    return None if data is None else json.loads(data.decode())


def state(cluster: AsyncCluster, topic: str, p: int) -> dict[str, Any]:
    return znode(cluster, f"/brokers/topics/{topic}/partitions/{p}/state")


def assignment(cluster: AsyncCluster, topic: str) -> dict[str, Any]:
    return znode(cluster, f"/brokers/topics/{topic}")


@contextlib.asynccontextmanager
async def running_cluster(tmp_path: Path, n: int, **overrides: Any
                          ) -> AsyncIterator[AsyncCluster]:
    """Broker 0 first, so that it is the controller (the example's brokers 1..6 hold replicas);
    the cluster stops when the block ends."""
    cluster = AsyncCluster(n, data_dir=tmp_path, overrides=overrides)
    await cluster.start_broker(0)
    await cluster.wait_for(lambda: cluster.controller_id() == 0, what="broker 0 as controller")
    await asyncio.gather(*(cluster.start_broker(i) for i in range(1, n)))
    try:
        yield cluster
    finally:
        await cluster.stop()


def conf(cluster: AsyncCluster, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap_servers, **extra}


async def create_on(admin: AsyncAdmin, topic: str, replicas: list[int]) -> None:
    await admin.create_topics([NewTopic(topic, replica_assignment={0: replicas})])
    await admin.wait_for_topics([topic])


async def produce(cluster: AsyncCluster, topic: str, n: int, prefix: str = "v") -> None:
    async with AsyncProducer(conf(cluster, acks="all")) as p:
        futs = [await p.send(topic, f"{prefix}{i}".encode(), partition=0) for i in range(n)]
        await asyncio.gather(*futs)


async def consume(cluster: AsyncCluster, topic: str, n: int) -> list[bytes]:
    async with AsyncConsumer(conf(cluster, **{"auto.offset.reset": "earliest"})) as c:
        c.assign([(topic, 0)])
        got: list[bytes] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while len(got) < n and loop.time() < deadline:
            got += [r.value for r in await c.poll(1)]
        return got


def partition_dirs(cluster: AsyncCluster, broker: int, topic: str) -> list[str]:
    root = cluster.data_dir / f"broker-{broker}"
    if not root.exists():
        return []
    return sorted(d.name for d in root.iterdir() if d.name.startswith(f"{topic}-0"))


def pause_fetching(broker: Broker, topic: str) -> None:
    """Fault injection: this broker's replicas of `topic` do not fetch (a stuck new replica)."""
    rm = broker.replica_manager
    original = rm.start_fetching

    def start_fetching(p: Any, leader_endpoint: Any = None) -> None:
        if p.topic != topic:
            original(p, leader_endpoint)
    rm.start_fetching = start_fetching  # type: ignore[method-assign]


def resume_fetching(broker: Broker, topic: str) -> None:
    """The replica starts fetching from its current leader (as a slow replica catches up)."""
    rm = broker.replica_manager
    del rm.start_fetching
    p = rm.partitions.get((topic, 0))
    if p is not None and not p.is_leader:
        rm.start_fetching(p)


class Recorder:
    """(AR, leader, ISR) after every change of the topic znode or the state node."""

    def __init__(self, cluster: AsyncCluster, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self.rows: list[tuple[frozenset[int], int, frozenset[int]]] = []
        self.ar: frozenset[int] = frozenset()
        self.leader, self.isr = -1, frozenset[int]()
        self.handles: list[Any] = []

    async def start(self) -> None:
        store = self.cluster.zookeeper.client()
        await store.start()
        self.store = store
        t = f"/brokers/topics/{self.topic}"
        h1 = await store.watch_data(t, self._on_topic)
        h2 = await store.watch_data(f"{t}/partitions/0/state", self._on_state)
        self.handles = [h1, h2]
        self._topic(h1.initial_data)
        self._state(h2.initial_data)
        self._row()

    def _topic(self, data: bytes | None) -> None:
        if data:
            self.ar = frozenset(json.loads(data)["partitions"]["0"])

    def _state(self, data: bytes | None) -> None:
        if data:
            s = json.loads(data)
            self.leader, self.isr = s["leader"], frozenset(s["isr"])

    def _row(self) -> None:
        row = (self.ar, self.leader, self.isr)
        if not self.rows or self.rows[-1] != row:
            self.rows.append(row)

    def _on_topic(self, ev: WatchEvent) -> None:
        self._topic(ev.data)
        self._row()

    def _on_state(self, ev: WatchEvent) -> None:
        self._state(ev.data)
        self._row()

    async def stop(self) -> None:
        for h in self.handles:
            h.cancel()
        await self.store.close()


def is_subsequence(wanted: list[Any], rows: list[Any]) -> bool:
    it = iter(rows)
    return all(any(w == r for r in it) for w in wanted)


async def wait_done(cluster: AsyncCluster, topic: str, target: list[int],
                    timeout: float = 60) -> None:
    await cluster.wait_for(
        lambda: znode(cluster, "/admin/reassign_partitions") is None
        and assignment(cluster, topic)["partitions"]["0"] == target,
        timeout, what=f"reassignment of {topic}-0 to {target}")


def test_reassignment_oar_123_to_rar_456_steps(tmp_path: Path) -> None:
    """The example of S-6.2, through the admin node the tool writes: AR and leader/ISR in the
    coordination store go through the table's rows in order; at the end the data is on 4,5,6
    only, consumable, and the admin node is gone."""
    async def body() -> None:
        async with running_cluster(tmp_path, 7) as cluster, AsyncAdmin(conf(cluster)) as admin:
            await create_on(admin, "t", [1, 2, 3])
            await produce(cluster, "t", 300)
            await cluster.wait_for(lambda: set(state(cluster, "t", 0)["isr"]) == {1, 2, 3},
                                   what="ISR 1,2,3")
            rec = Recorder(cluster, "t")
            await rec.start()
            await admin.alter_partition_reassignments({("t", 0): [4, 5, 6]})
            await wait_done(cluster, "t", [4, 5, 6])
            await cluster.wait_for(lambda: rec.rows[-1][0] == {4, 5, 6}, what="last row")
            await rec.stop()
            assert is_subsequence(SEED_TABLE, rec.rows), rec.rows
            a = assignment(cluster, "t")
            assert "adding_replicas" not in a or not a["adding_replicas"]
            s = state(cluster, "t", 0)
            assert s["leader"] in (4, 5, 6) and sorted(s["isr"]) == [4, 5, 6]
            for b in (1, 2, 3):
                await cluster.wait_for(lambda b=b: not partition_dirs(cluster, b, "t"),
                                       what=f"t-0 deleted on broker {b}")
            for b in (4, 5, 6):
                assert partition_dirs(cluster, b, "t") == ["t-0"]
            assert await admin.list_partition_reassignments() == {}
            got = await consume(cluster, "t", 300)
            assert got == [f"v{i}".encode() for i in range(300)]
            await produce(cluster, "t", 10, prefix="after")  # the new leader takes writes
    run(body, 150)


def test_controller_killed_mid_reassignment_new_controller_finishes(tmp_path: Path) -> None:
    """Broker 6 does not fetch, so RAR {4,5,6} never joins the ISR: the move stops at step 4
    with AR = OAR + RAR in the store. The controller dies; a new one resumes the move from the
    store (admin node + topic znode) and completes it once 6 catches up."""
    async def body() -> None:
        async with running_cluster(tmp_path, 7) as cluster, AsyncAdmin(conf(cluster)) as admin:
            await create_on(admin, "t", [1, 2, 3])
            await produce(cluster, "t", 200)
            pause_fetching(cluster.brokers[6], "t")
            await admin.alter_partition_reassignments({("t", 0): [4, 5, 6]})
            await cluster.wait_for(lambda: set(state(cluster, "t", 0)["isr"]) >= {4, 5},
                                   what="4 and 5 in the ISR")
            a = assignment(cluster, "t")
            assert set(a["partitions"]["0"]) == {1, 2, 3, 4, 5, 6}
            assert a["adding_replicas"] == {"0": [4, 5, 6]}
            assert a["removing_replicas"] == {"0": [1, 2, 3]}
            ongoing = await admin.list_partition_reassignments([("t", 0)])
            assert set(ongoing) == {("t", 0)}
            assert sorted(ongoing[("t", 0)].adding_replicas) == [4, 5, 6]
            assert sorted(ongoing[("t", 0)].removing_replicas) == [1, 2, 3]
            await asyncio.sleep(1.0)  # stuck: 6 is not in the ISR, nothing completes
            assert 6 not in state(cluster, "t", 0)["isr"]
            assert znode(cluster, "/admin/reassign_partitions")["partitions"] == [
                {"topic": "t", "partition": 0, "replicas": [4, 5, 6]}]
            epoch = znode(cluster, "/controller_epoch")
            await cluster.kill_broker(0)
            await cluster.wait_for(lambda: cluster.controller_id() not in (-1, 0),
                                   what="a new controller")
            assert znode(cluster, "/controller_epoch") == epoch + 1
            # The new controller resumed the move (A1 again: leader epoch + 1 by it).
            await cluster.wait_for(
                lambda: state(cluster, "t", 0)["controller_epoch"] == epoch + 1,
                what="the new controller's write")
            assert 6 not in state(cluster, "t", 0)["isr"]
            resume_fetching(cluster.brokers[6], "t")
            await wait_done(cluster, "t", [4, 5, 6])
            s = state(cluster, "t", 0)
            assert s["leader"] in (4, 5, 6) and sorted(s["isr"]) == [4, 5, 6]
            for b in (1, 2, 3):
                await cluster.wait_for(lambda b=b: not partition_dirs(cluster, b, "t"),
                                       what=f"t-0 deleted on broker {b}")
            got = await consume(cluster, "t", 200)
            assert got == [f"v{i}".encode() for i in range(200)]
    run(body, 150)


@pytest.mark.parametrize(("before", "after"), [([0], [0, 1, 2]), ([0, 1, 2], [2, 1])])
def test_replication_factor_change(tmp_path: Path, before: list[int], after: list[int]) -> None:
    async def body() -> None:
        async with running_cluster(tmp_path, 3) as cluster, AsyncAdmin(conf(cluster)) as admin:
            await create_on(admin, "rf", before)
            await produce(cluster, "rf", 100)
            await admin.alter_partition_reassignments({("rf", 0): after})
            await wait_done(cluster, "rf", after)
            await cluster.wait_for(
                lambda: sorted(state(cluster, "rf", 0)["isr"]) == sorted(after),
                what="ISR = RAR")
            assert state(cluster, "rf", 0)["leader"] in after
            for b in set(before) - set(after):
                await cluster.wait_for(lambda b=b: not partition_dirs(cluster, b, "rf"),
                                       what=f"rf-0 deleted on broker {b}")
            for b in after:
                assert partition_dirs(cluster, b, "rf") == ["rf-0"]
            got = await consume(cluster, "rf", 100)
            assert got == [f"v{i}".encode() for i in range(100)]
    run(body, 120)


def test_cancel_reverts_to_the_original_replicas(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_cluster(tmp_path, 3) as cluster, AsyncAdmin(conf(cluster)) as admin:
            await create_on(admin, "c", [1])
            await produce(cluster, "c", 50)
            pause_fetching(cluster.brokers[2], "c")
            await admin.alter_partition_reassignments({("c", 0): [2]})
            await cluster.wait_for(lambda: assignment(cluster, "c")["partitions"]["0"]
                                   == [2, 1], what="AR = RAR + OAR")
            await cluster.wait_for(lambda: partition_dirs(cluster, 2, "c") == ["c-0"],
                                   what="the new replica created on broker 2")
            ongoing = await admin.list_partition_reassignments()
            assert ongoing[("c", 0)].replicas == [2, 1]
            assert ongoing[("c", 0)].adding_replicas == [2]
            assert ongoing[("c", 0)].removing_replicas == [1]
            # kafka-topics --describe shows the move (operator review: it did not) and
            # counts the replication factor without the replicas being added
            code, out = await cli_tool("topics", "--bootstrap-server",
                                       cluster.bootstrap_servers, "--describe",
                                       "--topic", "c")
            assert code == 0, out
            lines = out.splitlines()
            assert "\tReplicationFactor: 1\t" in lines[0], out
            assert lines[1] == ("\tTopic: c\tPartition: 0\tLeader: 1\tReplicas: 2,1\tIsr: 1"
                                "\tAdding Replicas: 2\tRemoving Replicas: 1"), out
            code, out = await cli_tool("topics", "--bootstrap-server",
                                       cluster.bootstrap_servers, "--describe",
                                       "--topic", "c", "--under-replicated-partitions")
            assert (code, out) == (0, ""), out
            await admin.alter_partition_reassignments({("c", 0): None})
            await wait_done(cluster, "c", [1])
            assert assignment(cluster, "c").get("adding_replicas") in (None, {})
            assert state(cluster, "c", 0)["leader"] == 1
            await cluster.wait_for(lambda: not partition_dirs(cluster, 2, "c"),
                                   what="the cancelled replica deleted")
            errors = await admin.alter_partition_reassignments({("c", 0): None},
                                                               raise_errors=False)
            assert errors[("c", 0)] is not None
            assert errors[("c", 0)].code == 85  # NO_REASSIGNMENT_IN_PROGRESS
            resume_fetching(cluster.brokers[2], "c")
            assert await consume(cluster, "c", 50) == [f"v{i}".encode() for i in range(50)]
    run(body, 120)


def test_topic_deletion_waits_for_a_reassignment(tmp_path: Path) -> None:
    """Kafka marks a topic being reassigned ineligible for deletion: the deletion is queued,
    and goes on once the move completes."""
    async def body() -> None:
        async with running_cluster(tmp_path, 3) as cluster, AsyncAdmin(conf(cluster)) as admin:
            await create_on(admin, "d", [1])
            await produce(cluster, "d", 20)
            pause_fetching(cluster.brokers[2], "d")
            await admin.alter_partition_reassignments({("d", 0): [2]})
            await cluster.wait_for(lambda: partition_dirs(cluster, 2, "d") == ["d-0"],
                                   what="the new replica created on broker 2")
            await admin.delete_topics(["d"], timeout=0.5, raise_errors=False)
            await cluster.wait_for(
                lambda: "/admin/delete_topics/d" in cluster.zookeeper.dump(
                    "/admin/delete_topics"), what="deletion queued")
            ctl = cluster.brokers[0].controller
            assert ctl is not None
            await cluster.wait_for(lambda: ctl.ctx.is_topic_queued_up_for_deletion("d"),
                                   30, "the controller to queue the deletion")
            # Queued, not started (the same handler decides both), while the move is on.
            assert not ctl.ctx.is_topic_deletion_in_progress("d")
            assert assignment(cluster, "d") is not None
            assert partition_dirs(cluster, 1, "d") == ["d-0"]
            resume_fetching(cluster.brokers[2], "d")
            await cluster.wait_for(lambda: assignment(cluster, "d") is None, 60,
                                   "the topic deleted after its move")
            await cluster.wait_for(lambda: not partition_dirs(cluster, 1, "d")
                                   and not partition_dirs(cluster, 2, "d"), 60,
                                   "the replicas' directories deleted")
    run(body, 120)


def test_invalid_reassignments_are_refused(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_cluster(tmp_path, 3) as cluster, AsyncAdmin(conf(cluster)) as admin:
            await create_on(admin, "i", [0, 1])
            errors = await admin.alter_partition_reassignments({
                ("i", 0): [1, 1], ("nope", 0): [0], ("i", 5): [0]}, raise_errors=False)
            assert errors[("i", 0)].code == 39  # INVALID_REPLICA_ASSIGNMENT
            assert errors[("nope", 0)].code == 3  # UNKNOWN_TOPIC_OR_PARTITION
            assert errors[("i", 5)].code == 3
            errors = await admin.alter_partition_reassignments({("i", 0): [0, 9]},
                                                               raise_errors=False)
            assert errors[("i", 0)].code == 39 and "not alive" in str(errors[("i", 0)])
            assert znode(cluster, "/admin/reassign_partitions") is None
            # Written straight to the admin node (as an old tool would): the controller
            # skips it with a log line and removes it.
            await cluster.brokers[1].store.create(  # type: ignore[union-attr]
                "/admin/reassign_partitions",
                b'{"version":1,"partitions":[{"topic":"i","partition":0,"replicas":[7]}]}')
            await cluster.wait_for(lambda: znode(cluster, "/admin/reassign_partitions")
                                   is None, what="the invalid request dropped")
            assert assignment(cluster, "i")["partitions"]["0"] == [0, 1]
    run(body, 90)


async def tool(*argv: str) -> tuple[int, str]:
    """`odradek reassign-partitions ...` through cli.main (in a thread: it runs its own loop)."""
    return await cli_tool("reassign-partitions", *argv)


async def cli_tool(*argv: str) -> tuple[int, str]:
    """`odradek ARGV` through cli.main in a thread -> (exit code, stdout)."""
    import contextlib
    import io

    from odradek import cli

    out = io.StringIO()

    def call() -> int:
        with contextlib.redirect_stdout(out):
            return cli.main(list(argv))
    code = await asyncio.to_thread(call)
    return code, out.getvalue()


def test_tool_generate_execute_verify(tmp_path: Path) -> None:
    """The tool walk-through of S-6.2: --generate a plan for moving a topic to other brokers,
    --execute it (the admin node appears), --verify until every partition is completed."""
    async def body() -> None:
        async with running_cluster(tmp_path / "c", 4) as cluster:
            async with AsyncAdmin(conf(cluster)) as admin:
                await admin.create_topics([NewTopic(
                    "topic1", replica_assignment={0: [0, 1], 1: [1, 0], 2: [0, 1]})])
                await admin.wait_for_topics(["topic1"])
            async with AsyncProducer(conf(cluster, acks="all")) as p:
                await asyncio.gather(*[await p.send("topic1", b"x%d" % i, partition=i % 3)
                                       for i in range(90)])
            bootstrap = cluster.bootstrap_servers
            topics_file = tmp_path / "topics-to-move.json"
            topics_file.write_text('{"topics":[{"topic":"topic1"}],"version":1}')
            code, out = await tool("--bootstrap-server", bootstrap, "--generate",
                                   "--topics-to-move-json-file", str(topics_file),
                                   "--broker-list", "2,3")
            assert code == 0, out
            lines = out.splitlines()
            assert lines[0] == "Current partition replica assignment"
            assert json.loads(lines[1])["partitions"][0] == {
                "topic": "topic1", "partition": 0, "replicas": [0, 1], "log_dirs": ["any", "any"]}
            assert lines[3] == "Proposed partition reassignment configuration"
            proposal = json.loads(lines[4])
            # The controller's assignment for new topics (S-3.1) over brokers 2,3.
            assert {e["partition"]: e["replicas"] for e in proposal["partitions"]} == {
                0: [2, 3], 1: [3, 2], 2: [2, 3]}
            plan = tmp_path / "reassign-plan.json"
            plan.write_text(lines[4])
            code, out = await tool("--bootstrap-server", bootstrap, "--execute",
                                   "--reassignment-json-file", str(plan))
            assert code == 0, out
            assert out.splitlines()[0] == "Current partition replica assignment"
            assert "Save this to use as the --reassignment-json-file option during rollback" in out
            assert out.splitlines()[-1] == (
                "Successfully started partition reassignments for topic1-0,topic1-1,topic1-2")
            code, out = await tool("--bootstrap-server", bootstrap, "--verify",
                                   "--reassignment-json-file", str(plan), "--wait",
                                   "--wait-timeout-ms", "60000", "--wait-interval-ms", "200")
            assert code == 0, out
            assert "Reassignment of partition topic1-0 is completed." in out.splitlines()
            assert "Reassignment of partition topic1-2 is completed." in out.splitlines()
            assert "Clearing topic-level throttles on topic topic1" in out
            assert assignment(cluster, "topic1")["partitions"] == {
                "0": [2, 3], "1": [3, 2], "2": [2, 3]}
            assert znode(cluster, "/admin/reassign_partitions") is None
            code, out = await tool("--bootstrap-server", bootstrap, "--list")
            assert (code, out.strip()) == (0, "No partition reassignments found.")
            # Bad input: a clear message and exit code 1, no traceback.
            bad = tmp_path / "bad.json"
            bad.write_text('{"version":1,"partitions":[{"topic":"topic1","partition":0,'
                           '"replicas":[2,2]}]}')
            code, out = await tool("--bootstrap-server", bootstrap, "--execute",
                                   "--reassignment-json-file", str(bad))
            assert code == 1 and "Traceback" not in out
            assert "topic1-0 contains multiple entries for 2" in out
            code, out = await tool("--bootstrap-server", bootstrap, "--execute",
                                   "--reassignment-json-file", str(tmp_path / "missing.json"))
            assert code == 1 and "Cannot read" in out
            bad.write_text('{"version":1,"partitions":[{"topic":"topic1","partition":0,'
                           '"replicas":[9]}]}')
            code, out = await tool("--bootstrap-server", bootstrap, "--execute",
                                   "--reassignment-json-file", str(bad))
            assert (code, out.strip()) == (1, "Unknown broker id 9")
    run(body, 120)


def test_throttled_reassignment_does_not_stop_a_producer(tmp_path: Path) -> None:
    """KIP-73: --execute --throttle sets the rates on the brokers involved and the throttled
    replica lists on the topic; the move is slow, a producer to the partition keeps getting
    acks (acks=all) all along, the move completes, --verify clears the throttles."""
    async def body() -> None:
        throttle = {"replication.quota.window.num": "2",
                    "replication.quota.window.size.seconds": "1",
                    "replica.fetch.max.bytes": "32768"}
        async with (running_cluster(tmp_path / "c", 3, **throttle) as cluster,
                    AsyncAdmin(conf(cluster)) as admin):
            await create_on(admin, "big", [0])
            value = b"x" * 4000
            async with AsyncProducer(conf(cluster, acks="all")) as p:
                await asyncio.gather(*[await p.send("big", value, partition=0)
                                       for _ in range(240)])  # ~960 KB to move
            plan = tmp_path / "plan.json"
            plan.write_text('{"version":1,"partitions":[{"topic":"big","partition":0,'
                            '"replicas":[0,1]}]}')
            bootstrap = cluster.bootstrap_servers
            code, out = await tool("--bootstrap-server", bootstrap, "--execute",
                                   "--reassignment-json-file", str(plan),
                                   "--throttle", "120000")
            assert code == 0, out
            assert "The inter-broker throttle limit was set to 120000 B/s" in out
            topic_cfg = (await admin.describe_configs([("topic", "big")]))
            entries = {n: e.value for n, e in next(iter(topic_cfg.values())).items()}
            assert entries["leader.replication.throttled.replicas"] == "0:0"
            assert entries["follower.replication.throttled.replicas"] == "0:1"
            # A --wait that times out with the move still running says so and fails.
            code, out = await tool("--bootstrap-server", bootstrap, "--verify",
                                   "--reassignment-json-file", str(plan), "--wait",
                                   "--wait-timeout-ms", "200", "--wait-interval-ms", "100")
            assert code == 1 and "is still in progress" in out, out
            assert out.strip().endswith("reassignments are still in progress."), out
            acks_during_move = 0
            async with AsyncProducer(conf(cluster, acks="all")) as p:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 60
                while loop.time() < deadline:
                    md = await p.send_and_wait("big", b"live", partition=0)
                    assert md.offset >= 0
                    if await admin.list_partition_reassignments([("big", 0)]):
                        acks_during_move += 1
                    else:
                        break
                    await asyncio.sleep(0.02)
            assert acks_during_move >= 10, acks_during_move
            code, out = await tool("--bootstrap-server", bootstrap, "--verify",
                                   "--reassignment-json-file", str(plan), "--wait",
                                   "--wait-timeout-ms", "60000")
            assert code == 0, out
            assert "Reassignment of partition big-0 is completed." in out
            assert "Clearing broker-level throttles on brokers 0,1,2" in out
            await cluster.wait_for(lambda: sorted(state(cluster, "big", 0)["isr"]) == [0, 1],
                                   what="ISR 0,1")
            topic_cfg = await admin.describe_configs([("topic", "big")])
            entries = {n: e.value for n, e in next(iter(topic_cfg.values())).items()}
            assert not entries.get("leader.replication.throttled.replicas")
            assert not entries.get("follower.replication.throttled.replicas")
            got = await consume(cluster, "big", 240 + acks_during_move)
            assert len(got) >= 240 + acks_during_move
    run(body, 150)


def test_kafka_python_admin_alter_list_cancel(tmp_path: Path) -> None:
    """kafka-python 3's KafkaAdminClient speaks AlterPartitionReassignments /
    ListPartitionReassignments to odradek: start a move, list it, cancel it, then move for real."""
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient

    from odradek.client import Admin
    from odradek.cluster import Cluster

    with Cluster(3, data_dir=tmp_path) as cluster:
        with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic("kp", replica_assignment={0: [0]})])
            admin.wait_for_topics(["kp"])
        zk = cluster.c
        pause_fetching(cluster.brokers[1], "kp")
        kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        try:
            tp = KTopicPartition("kp", 0)
            assert kp.alter_partition_reassignments({tp: [1]}) == {tp: None}
            cluster.wait_for(lambda: assignment(zk, "kp")["partitions"]["0"] == [1, 0],
                             what="AR = [1, 0]")
            listed = kp.list_partition_reassignments()
            assert listed == {tp: {"replicas": [1, 0], "adding_replicas": [1],
                                   "removing_replicas": [0]}}
            assert kp.alter_partition_reassignments({tp: None}) == {tp: None}  # cancel
            cluster.wait_for(lambda: znode(zk, "/admin/reassign_partitions") is None
                             and assignment(zk, "kp")["partitions"]["0"] == [0],
                             what="the move cancelled")
            assert kp.list_partition_reassignments() == {}
            errors = kp.alter_partition_reassignments({KTopicPartition("nope", 0): [1]})
            assert errors[KTopicPartition("nope", 0)].errno == 3  # UNKNOWN_TOPIC_OR_PARTITION
            cluster.run(_resume(cluster.brokers[1], "kp"))
            assert kp.alter_partition_reassignments({tp: [1, 2]}) == {tp: None}
            cluster.wait_for(lambda: znode(zk, "/admin/reassign_partitions") is None
                             and assignment(zk, "kp")["partitions"]["0"] == [1, 2],
                             what="the move to [1, 2]")
        finally:
            kp.close()


async def _resume(broker: Broker, topic: str) -> None:
    resume_fetching(broker, topic)


class _ControllerCrash(Exception):
    pass


def test_controller_dies_after_removing_oar_new_controller_finishes(tmp_path: Path) -> None:
    """The controller loses its session right after steps 8-9 (OAR - RAR out of the ISR,
    stopped and deleted) and before step 10 (AR = RAR in the store): the store still says
    AR = OAR + RAR, adding/removing replicas, and lists the target in the admin node. The new
    controller finishes from there (S-6.2: AR is written to the store only in the last step)."""
    async def body() -> None:
        async with running_cluster(tmp_path, 4) as cluster, AsyncAdmin(conf(cluster)) as admin:
            await create_on(admin, "t", [1, 2])
            await produce(cluster, "t", 100)
            manager = cluster.brokers[0].controller.reassignment  # type: ignore[union-attr]
            original = manager._stop_removed_replicas
            crashed = asyncio.Event()
            at_crash: dict[str, Any] = {}

            async def stop_then_crash(tp: Any, removing: Any) -> None:
                await original(tp, removing)
                at_crash.update(ar=assignment(cluster, "t"), state=state(cluster, "t", 0),
                                admin=znode(cluster, "/admin/reassign_partitions"))
                store = cluster.brokers[0].store
                assert store is not None
                await store.close()  # session gone: /controller vanishes
                crashed.set()
                raise _ControllerCrash("controller 0 crashed after step 9")
            manager._stop_removed_replicas = stop_then_crash  # type: ignore[method-assign]
            await admin.alter_partition_reassignments({("t", 0): [2, 3]})
            await asyncio.wait_for(crashed.wait(), 60)
            assert at_crash["ar"]["partitions"]["0"] == [2, 3, 1]  # AR = RAR + OAR - RAR
            assert at_crash["ar"]["adding_replicas"] == {"0": [3]}
            assert at_crash["ar"]["removing_replicas"] == {"0": [1]}
            assert at_crash["state"]["leader"] == 2 and at_crash["state"]["isr"] == [2, 3]
            assert at_crash["admin"]["partitions"][0]["replicas"] == [2, 3]
            await cluster.kill_broker(0)
            await cluster.wait_for(lambda: cluster.controller_id() not in (-1, 0),
                                   what="a new controller")
            await wait_done(cluster, "t", [2, 3])
            a = assignment(cluster, "t")
            assert not a.get("adding_replicas") and not a.get("removing_replicas")
            s = state(cluster, "t", 0)
            assert s["leader"] in (2, 3) and sorted(s["isr"]) == [2, 3]
            await cluster.wait_for(lambda: not partition_dirs(cluster, 1, "t"),
                                   what="t-0 deleted on broker 1")
            assert await consume(cluster, "t", 100) == [f"v{i}".encode() for i in range(100)]
    run(body, 120)


def test_controller_dies_before_a_removed_replica_is_deleted(tmp_path: Path) -> None:
    """The controller dies after the StopReplica(delete) of a removed replica was queued but
    before the broker answered it: the store must not say the move is done yet, so the new
    controller deletes the replica. (Found by the admin-ops chaos test: the directory of a
    removed replica stayed for good when the move had finished just before the kill.)"""
    from odradek.controller.channel import STOP_REPLICA

    async def body() -> None:
        async with running_cluster(tmp_path, 4) as cluster, AsyncAdmin(conf(cluster)) as admin:
            await create_on(admin, "t", [1, 2])
            await produce(cluster, "t", 50)
            channel = cluster.brokers[0].controller.channel  # type: ignore[union-attr]
            assert channel is not None
            original = channel.send
            dropped = asyncio.Event()

            def send(broker_id: int, api_key: int, version: int, message: Any,
                     body: Any = None) -> Any:
                if broker_id == 1 and api_key == STOP_REPLICA and any(
                        ps.delete_partition for _t, ps in message.partition_states()):
                    dropped.set()  # never delivered: the controller dies first
                    return asyncio.get_running_loop().create_future()
                return original(broker_id, api_key, version, message, body)
            channel.send = send  # type: ignore[method-assign]
            await admin.alter_partition_reassignments({("t", 0): [2, 3]})
            await asyncio.wait_for(dropped.wait(), 60)
            store = cluster.brokers[0].store
            assert store is not None
            await store.close()  # the crash: session gone, nothing more reaches the store
            # The move is not recorded as done while the deletion is unanswered.
            assert assignment(cluster, "t").get("removing_replicas") == {"0": [1]}
            await cluster.kill_broker(0)
            await cluster.wait_for(lambda: cluster.controller_id() not in (-1, 0),
                                   what="a new controller")
            await wait_done(cluster, "t", [2, 3])
            await cluster.wait_for(lambda: not partition_dirs(cluster, 1, "t"),
                                   what="t-0 deleted on broker 1 by the new controller")
    run(body, 120)


def test_tool_on_real_zookeeper(tmp_path: Path, zookeeper_connect: str) -> None:
    """Kafka 2.x's invocation, `--zookeeper HOST:PORT`: brokers on a real ZooKeeper (kazoo), the
    tool writes /admin/reassign_partitions through kazoo, the controller moves the partition and
    removes the node; --verify reads the result from ZooKeeper."""
    from odradek.coordination.zookeeper import ZooKeeperStore
    from tests.integration.broker_harness import broker_config

    async def body() -> None:
        brokers = {i: Broker(broker_config(tmp_path / f"b{i}", broker_id=i, **{
            "zookeeper.connect": zookeeper_connect,
            "controlled.shutdown.retry.backoff.ms": "200"})) for i in range(3)}
        for b in brokers.values():
            await b.start()
        zk = ZooKeeperStore(zookeeper_connect, 10000)
        await zk.start()
        try:
            bootstrap = ",".join(f"127.0.0.1:{b.bound_ports[0]}" for b in brokers.values())
            async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
                await admin.create_topics([NewTopic("z", replica_assignment={0: [0], 1: [1]})])
                await admin.wait_for_topics(["z"], 60)
            async with AsyncProducer({"bootstrap.servers": bootstrap, "acks": "all"}) as p:
                await asyncio.gather(*[await p.send("z", b"%d" % i, partition=i % 2)
                                       for i in range(40)])
            topics = tmp_path / "topics.json"
            topics.write_text('{"topics":[{"topic":"z"}],"version":1}')
            code, out = await tool("--zookeeper", zookeeper_connect, "--generate",
                                   "--topics-to-move-json-file", str(topics),
                                   "--broker-list", "1,2")
            assert code == 0, out
            assert json.loads(out.splitlines()[4])["partitions"][0]["replicas"] == [1]
            plan = tmp_path / "plan.json"
            plan.write_text('{"version":1,"partitions":[{"topic":"z","partition":0,'
                            '"replicas":[1,2]},{"topic":"z","partition":1,"replicas":[2]}]}')
            code, out = await tool("--zookeeper", zookeeper_connect, "--execute",
                                   "--reassignment-json-file", str(plan))
            assert code == 0, out
            assert out.splitlines()[-1] == "Successfully started partition reassignments for " \
                "z-0,z-1"
            code, out = await tool("--zookeeper", zookeeper_connect, "--verify",
                                   "--reassignment-json-file", str(plan), "--wait",
                                   "--wait-timeout-ms", "60000", "--wait-interval-ms", "200")
            assert code == 0, out
            assert out.splitlines() == ["Status of partition reassignment:",
                                        "Reassignment of partition z-0 is completed.",
                                        "Reassignment of partition z-1 is completed."]
            assert await zk.exists("/admin/reassign_partitions") is None
            topic = json.loads((await zk.get("/brokers/topics/z"))[0])
            assert topic["partitions"] == {"0": [1, 2], "1": [2]}
            # Kafka 2.x's tool refuses to write over a running reassignment; no --throttle here.
            code, out = await tool("--zookeeper", zookeeper_connect, "--execute",
                                   "--reassignment-json-file", str(plan), "--throttle", "10")
            assert (code, out.strip()) == (1, "--throttle requires --bootstrap-server")
        finally:
            await zk.close()
            for b in brokers.values():
                if b.started:
                    await b.stop()
    run(body, 150)
