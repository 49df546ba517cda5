"""A follower told by LeaderAndIsr that its partition has no leader (-1: every ISR member is
down, the partition offline) or a leader that is not a live broker: as Kafka's makeFollowers,
it adds no replica fetcher for it (it used to start one to broker -1, which only failed to
connect), yet it is a follower at the new leader epoch and the fetcher it had stops."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from kio.schema.errors import ErrorCode

from odradek.common import TopicPartition
from odradek.protocol import interbroker as ib
from odradek.server.metadata_cache import BrokerInfo
from odradek.server.replication.fetcher import InitialFetchState
from odradek.server.replication.replica_manager import ReplicaManager
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.replication_support import NoIsrChanges

TP = TopicPartition("t", 0)
THIS = 2


class RecordingFetchers:
    """A fetcher manager that only records which partitions it fetches, from which leader."""

    def __init__(self) -> None:
        self.fetching: dict[TopicPartition, InitialFetchState] = {}

    def add_fetcher_for_partitions(self, initial: Mapping[TopicPartition, InitialFetchState]
                                   ) -> None:
        self.fetching.update(initial)

    def remove_fetcher_for_partitions(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.fetching.pop(tp, None)

    def is_fetching(self, tp: TopicPartition) -> bool:
        return tp in self.fetching

    def shutdown(self) -> None:
        self.fetching.clear()


def follower(tmp_path: Path) -> tuple[ReplicaManager, RecordingFetchers]:
    fetchers = RecordingFetchers()
    rm = ReplicaManager(THIS, LogManager([tmp_path / "logs"], lock_dirs=False),
                        lambda _t: LogConfig(), fetcher_manager=fetchers,
                        isr_manager=NoIsrChanges())
    return rm, fetchers


def leader_and_isr(leader: int, leader_epoch: int, isr: list[int], partition_epoch: int,
                   live_leaders: Iterable[int] = ()) -> ib.LeaderAndIsrRequest:
    return ib.LeaderAndIsrRequest(
        controller_id=0, controller_epoch=1,
        topic_states=(ib.LeaderAndIsrTopicState(topic_name=TP.topic, partition_states=(
            ib.LeaderAndIsrPartitionState(
                topic_name=TP.topic, partition_index=TP.partition, controller_epoch=1,
                leader=leader, leader_epoch=leader_epoch, isr=tuple(isr), replicas=(1, THIS),
                partition_epoch=partition_epoch),)),),
        live_leaders=tuple(ib.LeaderAndIsrLiveLeader(broker_id=b, host_name="127.0.0.1",
                                                     port=19090 + b) for b in live_leaders))


def apply(rm: ReplicaManager, req: ib.LeaderAndIsrRequest) -> None:
    assert rm.become_leader_or_followers(req, 1) == (ErrorCode.none, [(TP, ErrorCode.none)])


def test_leader_and_isr_naming_no_leader_stops_the_follower_fetcher(tmp_path: Path) -> None:
    rm, fetchers = follower(tmp_path)
    try:
        apply(rm, leader_and_isr(1, 0, [1, THIS], 0, live_leaders=[1]))
        assert fetchers.fetching[TP].leader_id == 1
        # broker 1 failed while this replica was out of the ISR: the partition is offline
        apply(rm, leader_and_isr(-1, 1, [1], 1))
        assert TP not in fetchers.fetching  # no fetcher to broker -1, the one to 1 stopped
        p = rm.partitions[TP]
        assert not p.is_leader and p.leader_id == -1 and p.leader_epoch == 1
        assert p.isr == [1]
        apply(rm, leader_and_isr(-1, 1, [1], 1))  # the same state again: still none
        assert TP not in fetchers.fetching
        # broker 1 is back and leads again: the follower fetches from it at the new epoch
        apply(rm, leader_and_isr(1, 2, [1], 2, live_leaders=[1]))
        assert fetchers.fetching[TP].leader_id == 1
        assert fetchers.fetching[TP].current_leader_epoch == 2
    finally:
        rm.shutdown()
        rm.log_manager.shutdown()


def test_a_leader_that_is_not_a_live_broker_gets_no_fetcher(tmp_path: Path) -> None:
    """Alive: among the request's live leaders or in the metadata cache's live brokers."""
    rm, fetchers = follower(tmp_path)
    try:
        apply(rm, leader_and_isr(1, 0, [1, THIS], 0))  # broker 1 known to neither
        assert TP not in fetchers.fetching
        assert rm.partitions[TP].leader_id == 1 and rm.partitions[TP].leader_epoch == 0
        rm.metadata_cache.brokers[1] = BrokerInfo(1, "127.0.0.1", 19091)
        apply(rm, leader_and_isr(1, 0, [1, THIS], 0))  # the same state, the leader now alive
        assert fetchers.fetching[TP].leader_id == 1
    finally:
        rm.shutdown()
        rm.log_manager.shutdown()
