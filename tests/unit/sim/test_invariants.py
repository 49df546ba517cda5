"""sim/invariants.py's checks that need no running cluster: the store hook's controller fencing
and leader epoch rules, on a real embedded store, the epoch ranges epochs-agree compares, and
the late OffsetCommit requests offsets-monotonic lets set an offset back."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from odradek.chaos.checker.history import History
from odradek.coordination import paths
from odradek.coordination.embedded import EmbeddedZooKeeper
from odradek.sim.digest import Digest
from odradek.sim.invariants import InvariantMonitor, _epoch_ranges, _first_divergence
from odradek.sim.trace import Trace

STATE = paths.partition_state_path("t", 0)


def monitor(zk: EmbeddedZooKeeper) -> InvariantMonitor:
    cluster: Any = SimpleNamespace(zookeeper=zk, brokers={})
    m = InvariantMonitor(SimpleNamespace(now=1.5, digest=Digest()),  # type: ignore[arg-type]
                         cluster,
                         History(), Trace(None))
    m._hook_store()
    return m


def state(leader: int, leader_epoch: int, isr: tuple[int, ...], controller_epoch: int) -> bytes:
    return paths.encode_partition_state(
        paths.LeaderIsrAndControllerEpoch(leader, leader_epoch, isr, controller_epoch))


def names(m: InvariantMonitor) -> list[str]:
    return [v.invariant for v in m.violations]


def test_a_deposed_controllers_state_write_is_a_violation() -> None:
    zk = EmbeddedZooKeeper()
    m = monitor(zk)
    zk._create(paths.CONTROLLER_EPOCH, b"1", 0, False, False)
    zk._create(STATE, state(0, 1, (0, 1, 2), 1), 0, False, True)
    zk._set(paths.CONTROLLER_EPOCH, b"2", 0)  # a new controller took over
    zk._set(STATE, state(1, 2, (1, 2), 2), 0)  # its election: fine
    zk._set(STATE, state(1, 2, (1,), 2), 1)  # the leader's own ISR write: fine
    assert names(m) == []
    zk._set(STATE, state(2, 3, (2,), 1), 2)  # the old controller's election lands
    assert names(m) == ["controller-fenced"]
    assert "controller epoch 1 while the controller epoch is 2" in m.violations[0].description
    assert m.violations[0].where == "t-0" and m.violations[0].time == 1.5


def test_a_leader_epoch_going_back_or_changing_hands_is_a_violation() -> None:
    zk = EmbeddedZooKeeper()
    m = monitor(zk)
    zk._create(paths.CONTROLLER_EPOCH, b"1", 0, False, False)
    zk._create(STATE, state(0, 5, (0, 1), 1), 0, False, True)
    zk._set(STATE, state(1, 5, (0, 1), 1), 0)  # another leader, same epoch
    zk._set(STATE, state(1, 4, (0, 1), 1), 1)  # an older epoch
    assert names(m) == ["one-leader-per-epoch", "one-leader-per-epoch"]


def test_a_controller_epoch_going_back_is_a_violation() -> None:
    zk = EmbeddedZooKeeper()
    m = monitor(zk)
    zk._create(paths.CONTROLLER_EPOCH, b"3", 0, False, False)
    zk._set(paths.CONTROLLER_EPOCH, b"4", 0)
    zk._set(paths.CONTROLLER_EPOCH, b"2", 1)
    assert names(m) == ["controller-fenced"]
    m.stop()
    zk._set(paths.CONTROLLER_EPOCH, b"1", 2)  # unhooked: no longer seen
    assert names(m) == ["controller-fenced"]


def test_epoch_ranges_keep_the_epochs_holding_offsets_in_range() -> None:
    entries = [(0, 0), (1, 30), (2, 50), (3, 50), (4, 263)]  # epoch 2 appended nothing
    assert _epoch_ranges(entries, 0, 300) == [(0, 0), (1, 30), (3, 50), (4, 263)]
    assert _epoch_ranges(entries, 40, 100) == [(1, 40), (3, 50)]
    assert _epoch_ranges(entries, 0, 30) == [(0, 0)]
    # a follower that kept epoch 1's records past 50 differs from its leader
    assert _epoch_ranges([(0, 0), (1, 30), (4, 56)], 0, 60) != _epoch_ranges(entries, 0, 60)


def test_a_failing_sample_fails_the_verdict_not_the_run() -> None:
    broken: Any = SimpleNamespace(started=True, replica_manager=SimpleNamespace(partitions=None))
    cluster: Any = SimpleNamespace(zookeeper=EmbeddedZooKeeper(), brokers={0: broken})
    digest = Digest()
    m = InvariantMonitor(SimpleNamespace(now=0.0, digest=digest),  # type: ignore[arg-type]
                         cluster, History(), Trace(None))
    m.start()
    digest.record(0.0, "data", "#1 a:1>b:2", b"x")  # a delivery: the monitor samples
    assert isinstance(m.error, AttributeError)
    with pytest.raises(RuntimeError, match="the invariant monitor failed"):
        m.rows()
    m.stop()
    assert digest.observers == []


def offsets_monitor(closing: bool) -> tuple[InvariantMonitor, Any, Digest]:
    """A monitor over one broker coordinating group `g` (committed offset of `events-0` in
    `group.offsets`), and the simulated connection #7 from a consumer to it."""
    digest = Digest()
    group = SimpleNamespace(offsets={})
    manager = SimpleNamespace(owned={0}, loading=set(), epoch_for_partition={0: 1},
                              groups={"g": group}, partition_for=lambda group_id: 0)
    broker = SimpleNamespace(started=True, replica_manager=SimpleNamespace(partitions={}),
                             group_coordinator=SimpleNamespace(manager=manager, is_active=True),
                             txn_coordinator=None)
    client = SimpleNamespace(closing=closing, local=("client-consumer-0", 40001))
    network = SimpleNamespace(connections={7: SimpleNamespace(client=client)})
    cluster: Any = SimpleNamespace(zookeeper=EmbeddedZooKeeper(), brokers={0: broker})
    m = InvariantMonitor(SimpleNamespace(now=0.0, digest=digest,  # type: ignore[arg-type]
                                         network=network), cluster, History(), Trace(None))
    m.start()
    return m, group, digest


def committed(group: Any, offset: int) -> None:
    group.offsets[("events", 0)] = SimpleNamespace(
        offset_and_metadata=SimpleNamespace(offset=offset))


def offset_commit(offset: int) -> bytes:
    from odradek.client.connection import request_for
    from odradek.protocol.codec import encode_request

    return encode_request(request_for(
        8, 8, group_id="g", generation_id_or_member_epoch=1, member_id="m",
        group_instance_id=None, retention_time=-1, topics=[{"name": "events", "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]), 3, "consumer-0")


@pytest.mark.parametrize("closing", [True, False])
def test_offsets_go_back_only_to_a_request_its_client_gave_up_on(closing: bool) -> None:
    """A commit delivered after its client closed the connection (it timed out and committed
    newer offsets on another connection) may set the offset back to what it carried; the same
    request on an open connection is the client's own later commit: a violation."""
    m, group, digest = offsets_monitor(closing)
    committed(group, 18)
    m._check_offsets(list(m._live()))
    digest.record(0.1, "data", "#7 client-consumer-0:40001>broker-0:9092", offset_commit(10))
    committed(group, 10)
    m._check_offsets(list(m._live()))
    assert m.error is None
    assert names(m) == ([] if closing else ["offsets-monotonic"])
    committed(group, 12)  # and from there on up
    m._check_offsets(list(m._live()))
    assert names(m) == ([] if closing else ["offsets-monotonic"] * 2)
    m.stop()


def test_a_leader_missing_committed_records_after_its_crash_is_a_crash_loss() -> None:
    """Broker 1 leads events-1 in epoch 4 from offset 12, below the HW 42 seen before: a
    `CrashLoss` [12, 42) only if a machine crash cut events-1's files on broker 1; the
    group's committed offset of events-1 may then go back (not events-0's)."""
    m, group, _ = offsets_monitor(closing=False)
    m.cluster.brokers[1] = SimpleNamespace(started=False,
                                           config=SimpleNamespace(log_dirs=["/d/broker-1"]))
    m.sim.disk = SimpleNamespace(crashes=[(1.0, "/d/broker-1", {"events-0/0.log": 5})])
    leader: Any = SimpleNamespace(log_end_offset=20, log=SimpleNamespace(
        leader_epoch_cache=SimpleNamespace(entries=lambda: [(0, 0), (1, 7), (4, 12)])))
    m._committed[(("events", 1), None)] = 42
    m._note_crash_loss(1, ("events", 1), leader, 4)
    assert m.losses == []  # the crash cut another partition's files
    m.sim.disk.crashes.append((2.0, "/d/broker-0", {"events-1/0.log": -2}))
    m._note_crash_loss(1, ("events", 1), leader, 4)
    assert m.losses == []  # another broker's
    m.sim.disk.crashes.append((3.0, "/d/broker-1", {"events-1/0.log": 0}))
    m._note_crash_loss(1, ("events", 1), leader, 4)
    assert [(x.start, x.end, x.broker) for x in m.losses] == [(12, 42, 1)]
    assert m._lost(("events", 1), 12) and not m._lost(("events", 1), 42)
    assert not m._lost(("events", 0), 20)
    for tp in (("events", 1), ("events", 0)):
        group.offsets[tp] = SimpleNamespace(offset_and_metadata=SimpleNamespace(offset=40))
    m.sample()
    for tp in (("events", 1), ("events", 0)):
        group.offsets[tp] = SimpleNamespace(offset_and_metadata=SimpleNamespace(offset=3))
    m.sample()
    assert [v.where for v in m.violations] == ["g events-0"]
    assert m.exempted["offsets-monotonic"] == 1
    rows = {r.key: r for r in m.rows()}
    assert rows["offsets-monotonic"].verdict == "FAIL"


def test_first_divergence_of_two_epoch_lists() -> None:
    assert _first_divergence([(0, 0), (1, 7)], [(0, 0), (1, 7), (4, 12)]) == 12
    assert _first_divergence([(0, 0), (1, 7), (2, 30)], [(0, 0), (1, 7), (4, 12)]) == 12
    assert _first_divergence([(0, 0), (3, 7)], [(0, 0), (1, 5)]) == 5


@pytest.mark.parametrize("acknowledged", [True, False])
def test_a_seeks_commit_may_land_after_its_invoke_once(acknowledged: bool) -> None:
    """A seek of events-0 back to 14 is invoked while 39 is committed; its commit lands
    later, before the seek's outcome (acknowledged, or unknown: the seek gave up) is
    recorded; once: a later step back fails."""
    m, group, _ = offsets_monitor(closing=False)
    committed(group, 39)
    m.sample()
    seek = m.history.invoke("member-1", "seek", "g", partition="events-0")
    m.sample()  # the commit is on its way: 39 still
    committed(group, 14)  # it lands before the seek's outcome is recorded
    m.sample()
    if acknowledged:
        m.history.ok(seek, offset=14)
    else:
        m.history.info(seek, error="CancelledError")
    m.sample()
    assert m.violations == []
    committed(group, 20)
    m.sample()
    committed(group, 15)
    m.sample()
    assert [v.description for v in m.violations] == ["committed offset went back from 20 to 15"]


def test_a_topic_created_again_under_its_name_starts_its_leader_epochs_again() -> None:
    """KIP-516: a topic deleted and created again under its name is another topic (another
    id), whose partitions begin at leader epoch 0 with another leader, as the first one's
    did; within one topic id two leaders of an epoch stay a violation."""
    import uuid

    m = monitor(EmbeddedZooKeeper())

    def led(broker: int, topic_id: uuid.UUID) -> None:
        p: Any = SimpleNamespace(
            leader_epoch=0, high_watermark=0, log_end_offset=0, topic_id=topic_id,
            isr=(broker,), pending_isr=None, isr_update_in_flight=False,
            log=SimpleNamespace(last_stable_offset=0,
                                producer_state=SimpleNamespace(ongoing_txns={}),
                                leader_epoch_cache=SimpleNamespace(entries=lambda: [(0, 0)])))
        m._check_leader(broker, ("scratch", 0), p, 0, set())

    first, second = uuid.uuid4(), uuid.uuid4()
    led(0, first)
    led(1, second)  # the topic created again: broker 1 leads its epoch 0
    assert names(m) == []
    led(2, second)
    assert names(m) == ["one-leader-per-epoch"]
