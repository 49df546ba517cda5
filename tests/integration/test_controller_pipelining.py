"""The controller pipelines the state znode writes of one event (controller/pipeline.py,
KAFKA-5642) on a real ZooKeeper (kazoo's asynchronous calls): a broker failure and a controlled
shutdown have many version-checked, epoch-fenced transactions in flight at once (each with the
state writes of up to 50 partitions, controller/zk_client.py) -- never more
than the window -- and the outcome is what the one-after-another writes gave (S-4.2, S-4.4):
every partition the victim led has a live leader at the next leader epoch, the victim is out
of every ISR, and the controller's state-change log has a line for each election."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.cluster import AsyncCluster
from odradek.controller.pipeline import DEFAULT_WINDOW
from odradek.coordination.store import SetDataOp
from tests.integration.broker_harness import create_topics, run
from tests.wire import WireClient
from tests.zookeeper_fixture import zookeeper_server  # noqa: F401

PARTITIONS = 240


class InFlight:
    """Counts the controller store's concurrent ``multi`` transactions (the real store's
    method, wrapped)."""

    def __init__(self, multi: Callable[[Sequence[Any]], Awaitable[list[Any]]]) -> None:
        self._multi = multi
        self.now = self.peak = self.calls = self.writes = 0

    async def __call__(self, ops: Sequence[Any]) -> list[Any]:
        self.now += 1
        self.calls += 1
        self.writes += sum(1 for op in ops if isinstance(op, SetDataOp))
        self.peak = max(self.peak, self.now)
        try:
            return await self._multi(ops)
        finally:
            self.now -= 1


async def states(store: Any, topic: str) -> dict[int, dict[str, Any]]:
    out = {}
    for p in range(PARTITIONS):
        data, _ = await store.get(f"/brokers/topics/{topic}/partitions/{p}/state")
        out[p] = json.loads(data)
    return out


def test_failure_and_controlled_shutdown_writes_are_pipelined(tmp_path: Path,
                                                               zookeeper_connect: str) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path,
                                overrides={"zookeeper.connect": zookeeper_connect}) as cluster:
            c = await WireClient.connect("127.0.0.1", cluster.ports[cluster.live_brokers()[0]])
            r = await c.request(create_topics("t", PARTITIONS, replication_factor=3))
            await c.close()
            assert r.topics[0].error_code == ErrorCode.none
            controller_id = cluster.controller_id()
            controller = cluster.brokers[controller_id].controller
            store = controller.store
            await cluster.wait_for(lambda: len(controller.ctx.all_partitions()) == PARTITIONS,
                                   what="topic created")
            await controller.wait_idle()
            before = await states(store, "t")
            victim, other = [b for b in cluster.live_brokers() if b != controller_id]
            led = {p for p, s in before.items() if s["leader"] == victim}
            assert led

            counter = InFlight(store.multi)
            store.multi = counter  # type: ignore[method-assign]
            await cluster.kill_broker(victim)

            async def settled(dead: set[int]) -> dict[int, dict[str, Any]]:
                # a deadline, not a count of reads: an idle controller answers wait_idle at
                # once, so 600 reads took ~2 s, less than a loaded machine's failover
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    now = await states(store, "t")
                    if all(s["leader"] not in dead and not dead & set(s["isr"])
                           for s in now.values()):
                        return now
                    await controller.wait_idle()
                    await asyncio.sleep(0.01)
                raise AssertionError(f"the controller did not settle in 30 s: {now}")

            after = await settled({victim})
            assert 1 < counter.peak <= DEFAULT_WINDOW, counter.peak
            # one ISR shrink or election per partition, several per transaction
            assert counter.writes >= PARTITIONS and counter.calls < PARTITIONS
            for p in led:
                assert after[p]["leader_epoch"] == before[p]["leader_epoch"] + 1
                assert after[p]["leader"] in after[p]["isr"]
            lines = (tmp_path / f"broker-{controller_id}" / "state-change.log").read_text()
            for p in led:  # each election logged once, with its leadership
                moved = [ln for ln in lines.splitlines() if f"Changed partition t-{p} state "
                         "from OfflinePartition to OnlinePartition" in ln]
                assert len(moved) == 1 and f"leader_epoch={after[p]['leader_epoch']} " in \
                    moved[0], moved

            counter.peak = counter.calls = counter.writes = 0
            led_by_other = {p for p, s in after.items() if s["leader"] == other}
            await cluster.stop_broker(other)  # controlled shutdown first
            final = await settled({victim, other})
            assert 1 < counter.peak <= DEFAULT_WINDOW, counter.peak
            lines = (tmp_path / f"broker-{controller_id}" / "state-change.log").read_text()
            for p in led_by_other:
                assert final[p]["leader"] == controller_id
                # the controlled shutdown's election; and one more bump if the new leader took
                # the stopping broker back into its ISR before it stopped (Kafka 2.8 keeps no
                # shutting-down broker out; KIP-841 came later): its failure removes it again
                bumps = final[p]["leader_epoch"] - after[p]["leader_epoch"]
                assert bumps in (1, 2), (p, after[p], final[p])
                if bumps == 2:
                    assert f"Removed replica {other} from the ISR of partition t-{p}: " in lines
    run(body, 150)
