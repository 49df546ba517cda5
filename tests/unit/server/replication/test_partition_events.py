"""A hosted partition's events in the replica manager (odradek.server.replication.
replica_manager.PartitionEvents): the purgatories hear every change, and a lost leadership
(the partition fenced by the state node) reaches the topic's role listener too, so that the
group and transaction coordinators stop serving a leadership their replica gave up. Without it
`odradek sim --seed 183 --duration 60 --rate 0.1 --ops all --op-rate 0.25` saw a fenced
leader's group coordinator keep its cache, skip the load when elected again three epochs
later, and serve sim-committed's offset of txn-0 as 73 after another coordinator had served
94 (the offsets-monotonic row)."""

from __future__ import annotations

from odradek.server.replication.replica_manager import PartitionEvents


class Purgatories:
    def __init__(self) -> None:
        self.told: list[tuple[str, tuple[str, int]]] = []

    def on_high_watermark_moved(self, tp: tuple[str, int]) -> None:
        self.told.append(("hw", tp))

    def on_leadership_lost(self, tp: tuple[str, int]) -> None:
        self.told.append(("lost", tp))

    def on_follower_high_watermark_moved(self, tp: tuple[str, int]) -> None:
        self.told.append(("follower-hw", tp))


def test_a_lost_leadership_resigns_the_partitions_coordinator() -> None:
    purgatories = Purgatories()
    listeners: dict = {}
    events = PartitionEvents(purgatories, listeners)  # type: ignore[arg-type]
    roles: list[tuple[int, bool, int]] = []
    listeners["__consumer_offsets"] = lambda *role: roles.append(role)  # registered later
    events.on_high_watermark_moved(("__consumer_offsets", 0))
    events.on_follower_high_watermark_moved(("__consumer_offsets", 0))
    events.on_leadership_lost(("__consumer_offsets", 0))
    events.on_leadership_lost(("events", 1))  # no listener for the topic: purgatories only
    assert purgatories.told == [("hw", ("__consumer_offsets", 0)),
                                ("follower-hw", ("__consumer_offsets", 0)),
                                ("lost", ("__consumer_offsets", 0)), ("lost", ("events", 1))]
    assert roles == [(0, False, -1)]
