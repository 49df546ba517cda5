"""KIP-380 on the broker's side (Kafka's KafkaApis.isBrokerEpochStale): a LeaderAndIsr,
StopReplica or UpdateMetadata whose broker epoch is older than the broker's own (the czxid of
its current registration) was built by the controller for an earlier registration of this
broker, one that restarted since; it is answered STALE_BROKER_EPOCH and changes nothing. The
current epoch applies, and so do a newer one (the controller read the new registration before
its broker did) and -1 on either side (unknown: never stale)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.common import TopicPartition
from odradek.protocol import interbroker as ib
from odradek.server.apis.interbroker import InterBrokerApis
from odradek.server.metadata_cache import MetadataCache
from odradek.server.replication.replica_manager import ReplicaManager
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.replication_support import NoIsrChanges
from tests.unit.server.replication.test_follower_without_leader import RecordingFetchers

THIS = 1
CURRENT = 4711  # this broker's epoch
STALE = CURRENT - 10
TP = TopicPartition("t", 0)
LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6


class _TopicConfigs:
    async def ensure_loaded(self, topics: Iterable[str]) -> None:
        pass

    def forget(self, topic: str) -> None:
        pass


async def _flushed() -> None:
    pass


class _Broker:
    """The inter-broker APIs over a real replica manager and metadata cache."""

    def __init__(self, tmp_path: Path, broker_epoch: int) -> None:
        self.epoch = broker_epoch
        self.cache = MetadataCache()
        self.rm = ReplicaManager(THIS, LogManager([tmp_path / "logs"], lock_dirs=False),
                                 lambda _t: LogConfig(), fetcher_manager=RecordingFetchers(),
                                 isr_manager=NoIsrChanges(), metadata_cache=self.cache)
        self.apis = InterBrokerApis(self.rm, self.cache, _TopicConfigs(),  # type: ignore[arg-type]
                                    None, _flushed,  # type: ignore[arg-type]
                                    broker_epoch=lambda: self.epoch)

    def close(self) -> None:
        self.rm.shutdown()
        self.rm.log_manager.shutdown()

    async def send(self, key: int, version: int, msg: Any) -> Any:
        frame = ib.encode_request_frame(key, version, msg, 7, "controller-0")
        answer = self.apis.handle(None, frame[4:])  # type: ignore[arg-type]
        if asyncio.iscoroutine(answer):
            answer = await answer
        return ib.decode_response_frame(key, version, answer[4:])


def _leader_and_isr(broker_epoch: int, leader_epoch: int) -> ib.LeaderAndIsrRequest:
    return ib.LeaderAndIsrRequest(
        controller_id=0, controller_epoch=1, broker_epoch=broker_epoch,
        topic_states=(ib.LeaderAndIsrTopicState(topic_name=TP.topic, partition_states=(
            ib.LeaderAndIsrPartitionState(
                topic_name=TP.topic, partition_index=TP.partition, controller_epoch=1,
                leader=THIS, leader_epoch=leader_epoch, isr=(THIS,), replicas=(THIS,),
                partition_epoch=leader_epoch),)),))


def _update_metadata(broker_epoch: int, leader_epoch: int) -> ib.UpdateMetadataRequest:
    return ib.UpdateMetadataRequest(
        controller_id=0, controller_epoch=1, broker_epoch=broker_epoch,
        topic_states=(ib.UpdateMetadataTopicState(topic_name=TP.topic, partition_states=(
            ib.UpdateMetadataPartitionState(
                topic_name=TP.topic, partition_index=TP.partition, controller_epoch=1,
                leader=THIS, leader_epoch=leader_epoch, isr=(THIS,), zk_version=leader_epoch,
                replicas=(THIS,)),)),),
        live_brokers=(ib.UpdateMetadataBroker(id=THIS, endpoints=(ib.UpdateMetadataEndpoint(
            port=19091, host="127.0.0.1", listener="PLAINTEXT", security_protocol=0),)),))


def _stop_replica(broker_epoch: int) -> ib.StopReplicaRequest:
    return ib.StopReplicaRequest(
        controller_id=0, controller_epoch=1, broker_epoch=broker_epoch,
        topic_states=(ib.StopReplicaTopicState(topic_name=TP.topic, partition_states=(
            ib.StopReplicaPartitionState(partition_index=TP.partition, leader_epoch=-2,
                                         delete_partition=True),)),))


def _cached_leader_epoch(cache: MetadataCache) -> int | None:
    cached = cache.partition(TP.topic, TP.partition)
    return None if cached is None else cached.leader_epoch


@pytest.mark.parametrize("version", [2, 4, 5])
def test_a_leader_and_isr_of_an_older_broker_epoch_is_refused_and_changes_nothing(
        tmp_path: Path, version: int, caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        broker = _Broker(tmp_path, CURRENT)
        try:
            with caplog.at_level(logging.INFO, "odradek.apis.interbroker"):
                resp = await broker.send(LEADER_AND_ISR, version, _leader_and_isr(STALE, 0))
            assert resp.error_code == ErrorCode.stale_broker_epoch
            # every partition of the request named with the error, as Kafka's error response
            errors = ([e.error_code for e in resp.partition_errors] if version < 5 else
                      [e.error_code for t in resp.topics for e in t.partition_errors])
            assert errors == [ErrorCode.stale_broker_epoch]
            assert TP not in broker.rm.partitions and broker.rm.controller_epoch == 0
            assert any("stale broker epoch" in r.getMessage() and str(STALE) in r.getMessage()
                       and str(CURRENT) in r.getMessage() for r in caplog.records)
            # unknown (-1), the current epoch and a newer one all apply
            for leader_epoch, broker_epoch in enumerate((-1, CURRENT, CURRENT + 1)):
                resp = await broker.send(LEADER_AND_ISR, version,
                                         _leader_and_isr(broker_epoch, leader_epoch))
                assert resp.error_code == ErrorCode.none, broker_epoch
                assert broker.rm.partitions[TP].leader_epoch == leader_epoch
            # once applied, a stale one still moves nothing
            resp = await broker.send(LEADER_AND_ISR, version, _leader_and_isr(STALE, 9))
            assert resp.error_code == ErrorCode.stale_broker_epoch
            assert broker.rm.partitions[TP].leader_epoch == 2
        finally:
            broker.close()
    asyncio.run(body())


def test_an_update_metadata_of_an_older_broker_epoch_is_refused_and_changes_nothing(
        tmp_path: Path) -> None:
    async def body() -> None:
        broker = _Broker(tmp_path, CURRENT)
        try:
            resp = await broker.send(UPDATE_METADATA, 7, _update_metadata(STALE, 0))
            assert resp.error_code == ErrorCode.stale_broker_epoch
            assert _cached_leader_epoch(broker.cache) is None and not broker.cache.brokers
            assert not broker.cache.initialized.is_set()
            for leader_epoch, broker_epoch in enumerate((-1, CURRENT, CURRENT + 1)):
                resp = await broker.send(UPDATE_METADATA, 7,
                                         _update_metadata(broker_epoch, leader_epoch))
                assert resp.error_code == ErrorCode.none, broker_epoch
                assert _cached_leader_epoch(broker.cache) == leader_epoch
            resp = await broker.send(UPDATE_METADATA, 7, _update_metadata(STALE, 9))
            assert resp.error_code == ErrorCode.stale_broker_epoch
            assert _cached_leader_epoch(broker.cache) == 2
        finally:
            broker.close()
    asyncio.run(body())


@pytest.mark.parametrize("broker_epoch", [-1, CURRENT, CURRENT + 1])
def test_a_stop_replica_of_an_older_broker_epoch_is_refused_and_changes_nothing(
        tmp_path: Path, broker_epoch: int) -> None:
    async def body() -> None:
        broker = _Broker(tmp_path, CURRENT)
        try:
            assert (await broker.send(LEADER_AND_ISR, 5, _leader_and_isr(CURRENT, 0))
                    ).error_code == ErrorCode.none
            resp = await broker.send(STOP_REPLICA, 3, _stop_replica(STALE))
            assert resp.error_code == ErrorCode.stale_broker_epoch and not resp.partition_errors
            assert TP in broker.rm.partitions  # neither stopped nor deleted
            resp = await broker.send(STOP_REPLICA, 3, _stop_replica(broker_epoch))
            assert resp.error_code == ErrorCode.none
            assert [e.error_code for e in resp.partition_errors] == [ErrorCode.none]
            assert TP not in broker.rm.partitions
        finally:
            broker.close()
    asyncio.run(body())


def test_a_broker_that_does_not_know_its_epoch_yet_accepts_every_epoch(tmp_path: Path) -> None:
    """Before its registration is read, the broker's epoch is -1: nothing is stale."""
    async def body() -> None:
        broker = _Broker(tmp_path, -1)
        try:
            for leader_epoch, broker_epoch in enumerate((0, 1, STALE)):
                assert (await broker.send(UPDATE_METADATA, 7, _update_metadata(
                    broker_epoch, leader_epoch))).error_code == ErrorCode.none
                assert (await broker.send(LEADER_AND_ISR, 5, _leader_and_isr(
                    broker_epoch, leader_epoch))).error_code == ErrorCode.none
                assert broker.rm.partitions[TP].leader_epoch == leader_epoch
            assert (await broker.send(STOP_REPLICA, 3, _stop_replica(0))).error_code == 0
            assert TP not in broker.rm.partitions
        finally:
            broker.close()
    asyncio.run(body())


def test_a_broker_registered_again_refuses_what_was_built_for_its_previous_registration(
        tmp_path: Path) -> None:
    """The ordering KIP-380 is for: the broker registers again (a new session: a larger
    epoch) while a request built for its previous registration is still on its way."""
    async def body() -> None:
        broker = _Broker(tmp_path, CURRENT)
        try:
            assert (await broker.send(LEADER_AND_ISR, 5, _leader_and_isr(CURRENT, 0))
                    ).error_code == ErrorCode.none
            broker.epoch = CURRENT + 100  # registered again
            resp = await broker.send(LEADER_AND_ISR, 5, _leader_and_isr(CURRENT, 1))
            assert resp.error_code == ErrorCode.stale_broker_epoch
            assert (await broker.send(STOP_REPLICA, 3, _stop_replica(CURRENT))
                    ).error_code == ErrorCode.stale_broker_epoch
            assert broker.rm.partitions[TP].leader_epoch == 0
            # the controller, having read the new registration, sends the new epoch
            assert (await broker.send(LEADER_AND_ISR, 5, _leader_and_isr(CURRENT + 100, 1))
                    ).error_code == ErrorCode.none
            assert broker.rm.partitions[TP].leader_epoch == 1
        finally:
            broker.close()
    asyncio.run(body())
