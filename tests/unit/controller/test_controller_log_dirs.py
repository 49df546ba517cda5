"""KIP-112 in the controller's context: a replica in an offline log dir is not online (leader
elections and offline_replicas skip it) until its broker restarts or dies."""

from __future__ import annotations

from odradek.controller.context import BrokerEndpoint, ControllerContext, LeaderAndIsr
from odradek.controller.context import TopicPartition as TP


def context() -> ControllerContext:
    ctx = ControllerContext()
    for b in (0, 1, 2):
        ctx.add_live_broker(b, BrokerEndpoint("127.0.0.1", 9092 + b, "PLAINTEXT", 0))
    ctx.set_topic_assignment("t", {0: [0, 1, 2], 1: [1, 0, 2]})
    ctx.put_leader_and_isr(TP("t", 0), LeaderAndIsr(0, 0, (0, 1, 2), 0, 1))
    ctx.put_leader_and_isr(TP("t", 1), LeaderAndIsr(1, 0, (1, 0, 2), 0, 1))
    return ctx


def test_replica_in_offline_dir_is_not_online() -> None:
    ctx = context()
    ctx.replicas_on_offline_dirs[0] = {TP("t", 0)}
    assert not ctx.is_replica_online(0, TP("t", 0))
    assert ctx.is_replica_online(0, TP("t", 1))
    assert ctx.is_replica_online(0)  # the broker itself is live
    assert ctx.partitions_with_offline_leader() == {TP("t", 0)}
    assert ctx.live_replicas(TP("t", 0)) == [1, 2]
    online, offline = ctx.online_and_offline_replicas()
    assert [(r.topic_partition, r.replica) for r in offline] == [(TP("t", 0), 0)]
    assert len(online) == 5


def test_dead_broker_forgets_its_offline_replicas() -> None:
    ctx = context()
    ctx.replicas_on_offline_dirs[0] = {TP("t", 0)}
    ctx.remove_live_brokers([0])
    assert 0 not in ctx.replicas_on_offline_dirs
    ctx.replicas_on_offline_dirs[1] = {TP("t", 1)}
    ctx.reset()
    assert ctx.replicas_on_offline_dirs == {}
