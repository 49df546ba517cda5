"""sim/invariants.py's checks that need no running cluster: the store hook's controller fencing
and leader epoch rules, on a real embedded store, and the epoch ranges epochs-agree compares."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from odradek.chaos.checker.history import History
from odradek.coordination import paths
from odradek.coordination.embedded import EmbeddedZooKeeper
from odradek.sim.digest import Digest
from odradek.sim.invariants import InvariantMonitor, _epoch_ranges
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
