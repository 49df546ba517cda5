"""The controller's broker-failure and controlled-shutdown paths at scale, on
the embedded store with the channel replaced by a recorder: one request message (encoded once)
shared by the brokers told the same thing, but for the broker epoch each one's copy carries
(KIP-380), and Kafka's doControlledShutdown split (the partitions the broker leads are moved,
only the ones it follows are stopped)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

import pytest

from odradek.common.topic_id import topic_id_to_text
from odradek.controller import controller as controller_module
from odradek.controller.channel import (
    LEADER_AND_ISR,
    STOP_REPLICA,
    UPDATE_METADATA,
    EncodedBody,
)
from odradek.controller.context import TopicPartition
from odradek.controller.controller import ControllerConfig, KafkaController
from odradek.controller.events import ControlledShutdown, StaleBrokerEpochError
from odradek.coordination import paths
from odradek.coordination.embedded import EmbeddedStore, EmbeddedZooKeeper
from odradek.protocol import interbroker as ib

PARTITIONS = 30


class Recorder:
    """Stands in for the ControllerChannelManager."""

    last: Recorder | None = None

    def __init__(self, *_a: Any, **_k: Any) -> None:
        self.sent: list[tuple[int, int, Any, EncodedBody | None]] = []
        Recorder.last = self

    def add_broker(self, broker_id: int, endpoint: Any) -> None:
        pass

    def remove_broker(self, broker_id: int) -> None:
        pass

    async def shutdown(self) -> None:
        pass

    def send(self, broker: int, api_key: int, version: int, message: Any,
             body: EncodedBody | None = None) -> asyncio.Future[Any]:
        self.sent.append((broker, api_key, message, body))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


class _Cache:
    controller_id = -1


class _Configs:
    async def ensure_loaded(self, topics: Any) -> None:
        pass


class _TopicConfig:
    unclean_leader_election_enable = False


def _registration(b: int) -> bytes:
    return paths.encode_broker_registration(paths.BrokerRegistration(
        b, (paths.Endpoint("PLAINTEXT", "127.0.0.1", 19090 + b),)))


def _partitions(msg: Any) -> dict[TopicPartition, Any]:
    return {TopicPartition(ts.topic_name, s.partition_index): s
            for ts in msg.topic_states for s in ts.partition_states}


async def _cluster(monkeypatch: pytest.MonkeyPatch
                   ) -> tuple[KafkaController, dict[int, EmbeddedStore], Recorder]:
    """Brokers 0 (the controller), 1, 2; topic t, replicas rotated; broker 1 leads p % 3 == 0,
    broker 2 the others."""
    monkeypatch.setattr(controller_module, "ControllerChannelManager", Recorder)
    zk = EmbeddedZooKeeper()
    stores = {b: EmbeddedStore(zk) for b in (0, 1, 2)}
    for store in stores.values():
        await store.start()
    s0 = stores[0]
    for path in (paths.BROKER_IDS, paths.DELETE_TOPICS, paths.ISR_CHANGE_NOTIFICATION,
                 paths.LOG_DIR_EVENT_NOTIFICATION):
        await s0.create(path, b"", makepath=True)
    assignment = {p: tuple((p + i) % 3 for i in range(3)) for p in range(PARTITIONS)}
    await s0.create(paths.topic_path("t"), paths.encode_topic_assignment(paths.TopicAssignment(
        assignment, topic_id=topic_id_to_text(uuid.uuid4()))), makepath=True)
    for p in range(PARTITIONS):
        await s0.create(paths.partition_state_path("t", p), paths.encode_partition_state(
            paths.LeaderIsrAndControllerEpoch(1 if p % 3 == 0 else 2, 0, (0, 1, 2), 1)),
            makepath=True)
    for b, store in stores.items():
        await store.create(paths.broker_path(b), _registration(b), ephemeral=True, makepath=True)
    ctl = KafkaController(s0, 0, ControllerConfig(auto_leader_rebalance_enable=False), _Cache(),
                          _Configs(), lambda _t: _TopicConfig())  # type: ignore[arg-type]
    await ctl.startup()
    for _ in range(200):
        if ctl.is_active:
            break
        await asyncio.sleep(0.01)
    await ctl.wait_idle()
    assert Recorder.last is not None
    Recorder.last.sent.clear()
    return ctl, stores, Recorder.last


def test_broker_failure_sends_one_shared_message_per_distinct_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        ctl, stores, rec = await _cluster(monkeypatch)
        await stores[2].close()  # its registration goes: a broker failure
        for _ in range(200):
            if 2 not in ctl.ctx.live_brokers:
                break
            await asyncio.sleep(0.01)
        await ctl.wait_idle()
        lai = [(b, m, body) for b, api, m, body in rec.sent if api == LEADER_AND_ISR]
        um = [(b, m, body) for b, api, m, body in rec.sent if api == UPDATE_METADATA]
        # first batch: the elections of the 20 partitions broker 2 led, told to 0 and 1 alike
        (b0, m0, e0), (b1, m1, e1) = lai[:2]
        assert {b0, b1} == {0, 1} and m0.topic_states is m1.topic_states and e0 is e1
        epochs = ctl.ctx.live_broker_epochs
        assert (m0.broker_epoch, m1.broker_epoch) == (epochs[b0], epochs[b1])
        assert len(_partitions(m0)) == 20
        assert all(s.leader in (0, 1) and 2 not in s.isr for s in _partitions(m0).values())
        # every UpdateMetadata of a batch is one message, one body, for every live broker
        assert {b for b, _, _ in um[:2]} == {0, 1}
        assert um[0][1].topic_states is um[1][1].topic_states and um[0][2] is um[1][2]
        assert [m.broker_epoch for b, m, _ in um[:2]] == [epochs[b] for b, _, _ in um[:2]]
        assert e0 is not None and e0.get() == ib.encode_request(
            LEADER_AND_ISR, 5, dataclasses.replace(m0, broker_epoch=-1))
        assert e0.get() is e0.get()  # encoded once
        assert all(2 not in s.isr for s in ctl.ctx.partition_leadership.values())
        await ctl.shutdown()

    asyncio.run(body())


def test_controlled_shutdown_moves_led_partitions_and_stops_only_followed_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        ctl, _stores, rec = await _cluster(monkeypatch)
        led = {TopicPartition("t", p) for p in range(0, PARTITIONS, 3)}
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        ctl.events.put(ControlledShutdown(broker_id=1, broker_epoch=-1, reply=reply))
        assert await reply == set()
        stop = [m for b, api, m, _ in rec.sent if api == STOP_REPLICA]
        assert len(stop) == 1 and [b for b, api, _, _ in rec.sent if api == STOP_REPLICA] == [1]
        stopped = {TopicPartition(ts.topic_name, s.partition_index)
                   for ts in stop[0].topic_states for s in ts.partition_states}
        assert stopped == {TopicPartition("t", p) for p in range(PARTITIONS)} - led
        # the moved partitions tell broker 1 to follow their new leader (Kafka's recipients)
        to_1 = [m for b, api, m, _ in rec.sent if api == LEADER_AND_ISR and b == 1]
        assert len(to_1) == 1 and set(_partitions(to_1[0])) == led
        for tp, lai in ctl.ctx.partition_leadership.items():
            assert lai.leader in (0, 2) and 1 not in lai.isr, (tp, lai)
        # brokers 0 and 2 are told the same states: one message between them
        lai_02 = [(m, e) for b, api, m, e in rec.sent if api == LEADER_AND_ISR and b in (0, 2)]
        assert len(lai_02) == 2 and lai_02[0][1] is lai_02[1][1]
        assert lai_02[0][0].topic_states is lai_02[1][0].topic_states
        await ctl.shutdown()

    asyncio.run(body())


def test_controlled_shutdown_from_a_stale_broker_epoch_moves_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """KIP-380: a request carrying an older broker epoch than the broker's registration is
    refused (STALE_BROKER_EPOCH) before anything moves; the current epoch proceeds."""
    async def body() -> None:
        ctl, _stores, rec = await _cluster(monkeypatch)
        current = ctl.ctx.live_broker_epochs[1]
        assert current > 0  # the czxid of broker 1's registration
        before = dict(ctl.ctx.partition_leadership)
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        ctl.events.put(ControlledShutdown(broker_id=1, broker_epoch=current - 1, reply=reply))
        with pytest.raises(StaleBrokerEpochError):
            await reply
        await ctl.wait_idle()
        assert ctl.is_active  # refused, not a controller failure
        assert rec.sent == [] and ctl.ctx.partition_leadership == before
        assert 1 not in ctl.ctx.shutting_down_broker_ids
        reply = asyncio.get_running_loop().create_future()
        ctl.events.put(ControlledShutdown(broker_id=1, broker_epoch=current, reply=reply))
        assert await reply == set()
        assert all(lai.leader in (0, 2) for lai in ctl.ctx.partition_leadership.values())
        assert 1 in ctl.ctx.shutting_down_broker_ids
        await ctl.shutdown()

    asyncio.run(body())


def test_a_frame_with_a_shared_body_is_the_frame_encoded_alone() -> None:
    msg = ib.StopReplicaRequest(controller_id=0, controller_epoch=1, topic_states=())
    shared = EncodedBody(STOP_REPLICA, 3, msg)
    assert ib.encode_request_frame(STOP_REPLICA, 3, msg, 7, "c", shared.get()) == \
        ib.encode_request_frame(STOP_REPLICA, 3, msg, 7, "c")


@pytest.mark.parametrize("state", [
    paths.LeaderIsrAndControllerEpoch(0, 0, (0, 1, 2), 1),
    paths.LeaderIsrAndControllerEpoch(-1, 17, (), 3),
    paths.LeaderIsrAndControllerEpoch(12, 2**31 - 1, (12,), 2**31 - 1),
])
def test_partition_state_json_is_what_json_dumps_gave(state: paths.LeaderIsrAndControllerEpoch
                                                      ) -> None:
    import json
    expected = json.dumps({"controller_epoch": state.controller_epoch, "leader": state.leader,
                           "version": 1, "leader_epoch": state.leader_epoch,
                           "isr": list(state.isr)}, separators=(",", ":")).encode()
    assert paths.encode_partition_state(state) == expected
    assert paths.decode_partition_state(expected) == state
