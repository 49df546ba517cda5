"""The controller alone at 10,000 partitions: an in-process
:class:`KafkaController` on Debian's real ZooKeeper, with the brokers replaced by their
registrations and the channel by a recorder that encodes each request (as the real sender
task would) and answers at once. No broker processes, so the figures are the controller's own
cost without the replication load of bench_scale.py.

Steps (``--partitions`` of RF 3 on brokers 0, 1, 2; the controller is broker 0):

1. **controlled shutdown** of broker 1 (leads a third): ControlledShutdown event put to
   answered, and when its LeaderAndIsr / UpdateMetadata requests were handed to the channel;
2. broker 1 registers again (broker start-up);
3. **broker failure**: broker 2 (leads the other two thirds) closes its ZooKeeper session, so
   its ephemeral registration goes: from the BrokerChange event to the LeaderAndIsr and
   UpdateMetadata requests handed to the channel;
4. **UpdateMetadata apply**: the last 10,000-partition UpdateMetadata request, applied to a
   fresh broker MetadataCache with ``MetadataCache.update_metadata`` (what the replica manager
   calls once the request passed its controller-epoch check).

    python bench/bench_controller_scale.py [--partitions 10000] [--profile DIR]

``--profile DIR`` writes cProfile stats of steps 1, 3 and 4 to DIR (read with pstats).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import logging
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from odradek.common.topic_id import topic_id_to_text
from odradek.controller import controller as controller_module
from odradek.controller.controller import ControllerConfig, KafkaController
from odradek.controller.events import BrokerChange, ControlledShutdown
from odradek.coordination import paths
from odradek.coordination.zk_server import ZooKeeperServer
from odradek.coordination.zookeeper import ZooKeeperStore
from odradek.protocol import interbroker as ib

PER_TOPIC = 1000


class Recorder:
    """Stands in for ControllerChannelManager: encodes each request, records when it was
    handed over, answers None."""

    instances: list[Recorder] = []

    def __init__(self, controller_id: int, *_a: Any, **_k: Any) -> None:
        self.controller_id = controller_id
        self.sent: list[tuple[float, int, int, Any, int]] = []
        self.encode_s = 0.0
        Recorder.instances.append(self)

    def add_broker(self, broker_id: int, endpoint: Any) -> None:
        pass

    def remove_broker(self, broker_id: int) -> None:
        pass

    async def shutdown(self) -> None:
        pass

    def send(self, broker: int, api_key: int, version: int, message: Any,
             body: Any = None) -> asyncio.Future[Any]:
        t = time.perf_counter()
        frame = (ib.encode_request_frame(api_key, version, message, 1, "bench") if body is None
                 else ib.encode_request_frame(api_key, version, message, 1, "bench", body.get()))
        self.encode_s += time.perf_counter() - t
        self.sent.append((time.perf_counter(), broker, api_key, message, len(frame)))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


class Cache:
    controller_id = -1


class TopicConfigs:
    async def ensure_loaded(self, topics: Any) -> None:
        pass


class TopicConfig:
    unclean_leader_election_enable = False


def registration(broker_id: int) -> bytes:
    return paths.encode_broker_registration(paths.BrokerRegistration(
        broker_id, (paths.Endpoint("PLAINTEXT", "127.0.0.1", 19090 + broker_id),)))


def populate(hosts: str, partitions: int) -> None:
    """Topics of PER_TOPIC partitions, replicas rotated over 0,1,2; broker 1 leads p % 3 == 0,
    broker 2 the rest (the controller's own broker 0 leads none)."""
    zk = KazooClient(hosts=hosts)
    zk.start()
    try:
        for path in ("/brokers/ids", "/brokers/topics", "/admin/delete_topics",
                     "/isr_change_notification", "/log_dir_event_notification"):
            zk.ensure_path(path)
        for t in range((partitions + PER_TOPIC - 1) // PER_TOPIC):
            n = min(PER_TOPIC, partitions - t * PER_TOPIC)
            topic = f"t{t}"
            assignment = {p: tuple((p + i) % 3 for i in range(3)) for p in range(n)}
            zk.create(paths.topic_path(topic), paths.encode_topic_assignment(
                paths.TopicAssignment(assignment, topic_id=topic_id_to_text(uuid.uuid4()))))
            zk.create(paths.topic_partitions_path(topic))
            txn = zk.transaction()
            for p in range(n):
                leader = 1 if p % 3 == 0 else 2
                txn.create(paths.topic_partition_path(topic, p))
                txn.create(paths.partition_state_path(topic, p), paths.encode_partition_state(
                    paths.LeaderIsrAndControllerEpoch(leader, 0, (0, 1, 2), 1)))
                if len(txn.operations) >= 1000:
                    txn.commit()
                    txn = zk.transaction()
            if txn.operations:
                txn.commit()
    finally:
        zk.stop()
        zk.close()


async def register(hosts: str, broker_id: int) -> ZooKeeperStore:
    store = ZooKeeperStore(hosts, 6000)
    await store.start()
    await store.create(paths.broker_path(broker_id), registration(broker_id), ephemeral=True)
    return store


def summary(rec: Recorder, since: int, t0: float) -> str:
    out = []
    for t, broker, api, msg, size in rec.sent[since:]:
        name = {4: "LeaderAndIsr", 5: "StopReplica", 6: "UpdateMetadata"}[api]
        n = sum(len(ts.partition_states) for ts in msg.topic_states)
        out.append(f"    +{t - t0:6.3f} s {name:14} -> {broker}: {n} partitions, {size} B")
    return "\n".join(out)


async def main(a: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING)
    controller_module.ControllerChannelManager = Recorder  # type: ignore[misc,assignment]
    if a.window:
        from odradek.controller import state_machines
        controller_module.STATE_WRITE_WINDOW = state_machines.STATE_WRITE_WINDOW = a.window
    server = ZooKeeperServer(tick_time=500)
    server.start()
    profiles: dict[str, cProfile.Profile] = {}
    try:
        hosts = f"{server.connect_string}/bench"
        root = KazooClient(hosts=server.connect_string)
        root.start()
        root.ensure_path("/bench")
        root.stop()
        root.close()
        t = time.perf_counter()
        populate(hosts, a.partitions)
        print(f"populate {a.partitions} partitions: {time.perf_counter() - t:.1f} s")
        brokers = {b: await register(hosts, b) for b in (1, 2)}
        store = ZooKeeperStore(hosts, 6000)
        await store.start()
        await store.create(paths.broker_path(0), registration(0), ephemeral=True)
        config = ControllerConfig(auto_leader_rebalance_enable=False)
        ctl = KafkaController(store, 0, config, Cache(), TopicConfigs(),  # type: ignore[arg-type]
                              lambda _t: TopicConfig())
        t = time.perf_counter()
        await ctl.startup()
        while not ctl.is_active:
            await asyncio.sleep(0.05)
        await ctl.wait_idle()
        print(f"controller failover (load context, {a.partitions} partitions): "
              f"{time.perf_counter() - t:.2f} s")
        rec = Recorder.instances[-1]

        # 1. controlled shutdown of broker 1
        led = len(ctl.ctx.partition_leaders_on_broker(1))
        since = len(rec.sent)
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        prof = profiles["shutdown"] = cProfile.Profile() if a.profile else None  # type: ignore
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        ctl.events.put(ControlledShutdown(broker_id=1, broker_epoch=-1, reply=reply))
        remaining = await reply
        t1 = time.perf_counter()
        await ctl.wait_idle()
        if prof:
            prof.disable()
        print(f"controlled shutdown of broker 1 leading {led}: answered in {t1 - t0:.3f} s "
              f"({len(remaining)} left)\n{summary(rec, since, t0)}")

        # 2. broker 1 comes back (its session ends, then a new registration)
        await brokers[1].close()
        await ctl.wait_idle()
        brokers[1] = await register(hosts, 1)
        while 1 not in ctl.ctx.live_brokers:
            await asyncio.sleep(0.05)
        await ctl.wait_idle()

        # 3. broker 2 fails
        led = len(ctl.ctx.partitions_led_by({2}))
        since = len(rec.sent)
        original = ctl._dispatch
        started: list[float] = []

        async def timed(event: Any) -> None:
            if isinstance(event, BrokerChange) and not started:
                started.append(time.perf_counter())
            await original(event)
        ctl._dispatch = timed  # type: ignore[method-assign]
        prof = profiles["failure"] = cProfile.Profile() if a.profile else None  # type: ignore
        if prof:
            prof.enable()
        t_close = time.perf_counter()
        await brokers[2].close()
        while 2 in ctl.ctx.live_brokers or not started:
            await asyncio.sleep(0.01)
        await ctl.wait_idle()
        t_done = time.perf_counter()
        if prof:
            prof.disable()
        t0 = started[0]
        print(f"failure of broker 2 leading {led}: BrokerChange {t0 - t_close:.3f} s after "
              f"its session closed; processed in {t_done - t0:.3f} s (channel encode "
              f"{rec.encode_s:.2f} s in all runs)\n{summary(rec, since, t0)}")

        # 4. UpdateMetadata applied by a broker
        ums = [m for _, _, api, m, _ in rec.sent if api == 6]
        biggest = max(ums, key=lambda m: sum(len(ts.partition_states) for ts in m.topic_states))
        await apply_update_metadata(biggest, a, profiles)
        await ctl.shutdown()
        await store.close()
        for s in brokers.values():
            await s.close()
    finally:
        server.stop()
        if a.profile:
            os.makedirs(a.profile, exist_ok=True)
            for name, p in profiles.items():
                if p is not None:
                    p.dump_stats(str(Path(a.profile) / f"{name}.prof"))


async def apply_update_metadata(msg: Any, a: argparse.Namespace,
                                profiles: dict[str, cProfile.Profile]) -> None:
    """Decode the request as the broker does, then apply it to an empty cache and again."""
    from odradek.server.metadata_cache import MetadataCache
    n = sum(len(ts.partition_states) for ts in msg.topic_states)
    frame = ib.encode_request_frame(6, 7, msg, 1, "bench")
    t = time.perf_counter()
    decoded = ib.decode_request_frame(frame[4:])[3]
    t_dec = time.perf_counter() - t
    cache = MetadataCache()
    prof = profiles["update_metadata"] = cProfile.Profile() if a.profile else None  # type: ignore
    if prof:
        prof.enable()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        cache.update_metadata(decoded)
        times.append(time.perf_counter() - t)
    if prof:
        prof.disable()
    print(f"UpdateMetadata of {n} partitions ({len(frame)} B): decode {t_dec * 1000:.0f} ms, "
          f"apply to an empty cache {times[0] * 1000:.0f} ms, again "
          f"{min(times[1:]) * 1000:.0f} ms")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, default=10000)
    p.add_argument("--profile", metavar="DIR")
    p.add_argument("--window", type=int, help="state writes in flight (pipeline.DEFAULT_WINDOW)")
    args = p.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, git "
          f"{os.popen('git rev-parse --short HEAD').read().strip()}", file=sys.stderr)
    asyncio.run(main(args))
