"""Kafka's processBrokerChange on a bounced broker: a broker that registered again (a newer
broker epoch, the czxid of /brokers/ids/<id>) while the controller's own session was cut shows
the same children of /brokers/ids before and after; the controller must still fail it and
start it again, else the restarted broker never hears of its replicas (no LeaderAndIsr) and
the partitions it leads in the store have no leader serving them. Until then, such a broker
answers STALE_BROKER_EPOCH to what the controller built for its previous registration
(KIP-380): the controller logs it, as Kafka, and neither fails nor sends anything again."""

from __future__ import annotations

import asyncio
import logging

import pytest

from odradek.controller.channel import LEADER_AND_ISR, UPDATE_METADATA
from odradek.controller.context import TopicPartition
from odradek.controller.events import LeaderAndIsrResponseReceived
from odradek.coordination import paths
from odradek.coordination.embedded import EmbeddedStore
from odradek.protocol import interbroker as ib

from .test_controller_scale_paths import PARTITIONS, _cluster, _partitions, _registration


def test_a_broker_bounced_while_the_controller_was_cut_off_gets_its_replicas(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        ctl, stores, rec = await _cluster(monkeypatch)
        old_epoch = ctl.ctx.live_broker_epochs.get(1, -1)
        stores[0].disconnect()  # the controller's store cut: watch events held
        await stores[1].close()  # broker 1 stops: its registration goes ...
        restarted = EmbeddedStore(stores[0].server)  # ... and comes back on a new session
        await restarted.start()
        await restarted.create(paths.broker_path(1), _registration(1), ephemeral=True)
        stores[0].reconnect()  # the children of /brokers/ids are 0, 1, 2 as before
        everything = {TopicPartition("t", p) for p in range(PARTITIONS)}

        def told() -> set[TopicPartition]:
            return {tp for b, api, m, _ in rec.sent if api == LEADER_AND_ISR and b == 1
                    for tp in _partitions(m)}

        for _ in range(100):  # the held BrokerChange events handled
            await asyncio.sleep(0.01)
            await ctl.wait_idle()
            if told() == everything:
                break
        # every replica of broker 1 is sent to it again (onBrokerStartup), ...
        assert told() == everything
        # under its new broker epoch (the registration's czxid) ...
        assert ctl.ctx.live_broker_epochs[1] > max(old_epoch, ctl.ctx.live_broker_epochs[2])
        # ... and what it led went to another replica first (onBrokerFailure): the restarted
        # broker holds no leadership the store gives it
        for p in range(0, PARTITIONS, 3):
            assert ctl.ctx.partition_leadership[TopicPartition("t", p)].leader in (0, 2)
        await restarted.close()
        await ctl.shutdown()

    asyncio.run(body())


def test_a_stale_broker_epoch_answer_is_logged_and_nothing_else(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Kafka's LeaderAndIsrResponseReceived and UpdateMetadataResponseReceived log an error
    answer; a STALE_BROKER_EPOCH one is no storage error (no replica goes offline), no
    controller failure, and no request is sent again."""
    stale = 77

    async def body() -> None:
        ctl, _stores, rec = await _cluster(monkeypatch)
        topic_id = ctl.ctx.topic_ids["t"]
        response = ib.LeaderAndIsrResponse(error_code=stale, topics=(ib.LeaderAndIsrTopicError(
            topic_id=topic_id, partition_errors=tuple(
                ib.LeaderAndIsrPartitionError(partition_index=p, error_code=stale)
                for p in range(PARTITIONS))),))
        before = dict(ctl.ctx.partition_leadership)
        with caplog.at_level(logging.INFO, logger="state.change.logger"):
            ctl.events.put(LeaderAndIsrResponseReceived(broker_id=1, response=response))
            ctl._on_request_response(2, UPDATE_METADATA,
                                     ib.UpdateMetadataResponse(error_code=stale))
            await ctl.wait_idle()
        assert ctl.is_active and rec.sent == []
        assert not ctl.ctx.replicas_on_offline_dirs
        assert ctl.ctx.partition_leadership == before and 1 in ctl.ctx.live_broker_ids
        logged = [(r.levelno, r.getMessage()) for r in caplog.records
                  if r.name == "state.change.logger"]
        assert (logging.ERROR, "[Controller id=0 epoch=1] Received error STALE_BROKER_EPOCH "
                "in LeaderAndIsr response from broker 1") in logged
        assert (logging.ERROR, "[Controller id=0 epoch=1] Received error STALE_BROKER_EPOCH "
                "in UpdateMetadata response from broker 2") in logged
        await ctl.shutdown()

    asyncio.run(body())
