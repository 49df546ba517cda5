"""The controller-to-broker APIs (ZooKeeper era): LeaderAndIsr (4), StopReplica (5),
UpdateMetadata (6), and ControlledShutdown (7, broker-to-controller).

kio lacks these; `protocol/interbroker.py` encodes them. Every request carries the controller
epoch: one older than the newest this broker has seen is refused with STALE_CONTROLLER_EPOCH
(S-5.3), so a deposed controller cannot move leadership.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...controller.context import TopicPartition
from ...controller.events import ControlledShutdown, ControllerMovedError
from ...protocol import interbroker as ib
from ...state_change import StateChangeLogger, leadership_text
from ..gc_freeze import freeze_long_lived
from ..metadata_cache import BrokerInfo, PartitionInfo
from ..network import CloseConnection, Connection

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger("odradek.apis.interbroker")

LEADER_DURING_DELETE = -2


def handle(broker: Broker, conn: Connection, payload: bytes) -> Any:
    try:
        key, version, cid, msg = ib.decode_request_frame(payload)
    except ib.DecodeError as exc:
        raise CloseConnection(str(exc)) from None
    if key == 4:
        return _leader_and_isr(broker, key, version, cid, msg)
    if key == 5:
        return ib.encode_response_frame(key, version, cid, stop_replica(broker, msg))
    if key == 6:
        return ib.encode_response_frame(key, version, cid, update_metadata(broker, msg, cid))
    return _controlled_shutdown(broker, key, version, cid, msg)


async def _leader_and_isr(broker: Broker, key: int, version: int, cid: int, req: Any) -> bytes:
    # A broker needs a topic's config overrides before it creates the topic's first log.
    await broker.topic_configs.ensure_loaded({s.topic_name for s in req.partition_states()})
    partitions_before = len(broker.replica_manager.partitions)
    response = leader_and_isr(broker, req, cid, version)
    freeze_long_lived(len(broker.replica_manager.partitions) - partitions_before,
                      collect=False, reason="LeaderAndIsr")  # many new partitions: long-lived
    # The new leader epochs are in the caches already; their leader-epoch-checkpoint files are
    # written by the log manager's writer thread, coalesced and off the loop. Answer once they
    # are on disk, as Kafka answers after LeaderEpochFileCache.assign's flush.
    if broker.log_manager is not None:
        await broker.log_manager.checkpoint_writer.flush()
    return ib.encode_response_frame(key, version, cid, response)


def _stale(broker: Broker, controller_id: int, epoch: int, what: str) -> bool:
    if epoch < broker.controller_epoch_seen:
        StateChangeLogger(broker.broker_id).broker(epoch, (
            f"Ignoring {what} request from controller {controller_id} with epoch {epoch} since "
            f"its epoch is older than the current controller epoch "
            f"{broker.controller_epoch_seen}"), logging.WARNING)
        return True
    broker.controller_epoch_seen = epoch
    return False


def leader_and_isr(broker: Broker, req: Any, correlation_id: int, version: int = 5) -> Any:
    states = req.partition_states()
    errors: list[Any] = []
    if _stale(broker, req.controller_id, req.controller_epoch, "LeaderAndIsr"):
        return ib.LeaderAndIsrResponse(error_code=ErrorCode.stale_controller_epoch)
    topic_ids = {t.topic_name: t.topic_id for t in getattr(req, "topic_states", ())}
    live_leaders = {ll.broker_id: (ll.host_name, ll.port) for ll in req.live_leaders}
    rm = broker.replica_manager
    sc = StateChangeLogger(broker.broker_id)
    for s in states:
        tp = TopicPartition(s.topic_name, s.partition_index)
        before = _role(broker, tp)
        code = rm.become_leader_or_follower(
            tp, s.leader, s.leader_epoch, list(s.isr), list(s.replicas), s.partition_epoch,
            live_leaders.get(s.leader))
        origin = (f"(LeaderAndIsr correlationId {correlation_id} from controller "
                  f"{req.controller_id})")
        if code == ErrorCode.none:
            sc.partition_change(req.controller_epoch, tp, before, _role(broker, tp),
                                f"{leadership_text(s.leader, s.leader_epoch, s.isr)} {origin}",
                                actor="Broker")
        else:
            sc.broker(req.controller_epoch, (
                f"Ignored the state of partition {tp} with "
                f"{leadership_text(s.leader, s.leader_epoch, s.isr)} {origin}: "
                f"{code.name.upper()}"), logging.WARNING)
        errors.append(ib.LeaderAndIsrPartitionError(topic_name=tp.topic,
                                                    partition_index=tp.partition,
                                                    error_code=int(code)))
    by_topic: dict[str, list[Any]] = {}
    for e in errors:
        by_topic.setdefault(e.topic_name, []).append(e)
    if version < 5:  # v0-4 list partition errors; v5+ group them by topic id
        return ib.LeaderAndIsrResponse(error_code=0, partition_errors=tuple(errors))
    return ib.LeaderAndIsrResponse(
        error_code=0,
        topics=tuple(ib.LeaderAndIsrTopicError(topic_id=topic_ids.get(t, uuid.UUID(int=0)),
                                               partition_errors=tuple(es))
                     for t, es in by_topic.items()))


def _role(broker: Broker, tp: TopicPartition) -> str:
    p = broker.replica_manager.partitions.get(tp)
    if p is None:
        return "NonExistent"
    return "Leader" if p.is_leader else "Follower"


def stop_replica(broker: Broker, req: Any) -> Any:
    if _stale(broker, req.controller_id, req.controller_epoch, "StopReplica"):
        return ib.StopReplicaResponse(error_code=ErrorCode.stale_controller_epoch)
    errors = []
    for topic, index, epoch, delete in _stop_replica_partitions(req):
        tp = TopicPartition(topic, index)
        before = _role(broker, tp)
        code = broker.replica_manager.stop_replica_request(tp, epoch, delete)
        StateChangeLogger(broker.broker_id).partition_change(
            req.controller_epoch, tp, before, "Deleted" if delete else "Stopped",
            f"StopReplica (delete={str(delete).lower()}) from controller {req.controller_id}: "
            f"{code.name.upper()}", actor="Broker")
        if delete and code == ErrorCode.none:
            broker.metadata_cache.remove_partition(topic, index)
            if broker.metadata_cache.topic(topic) is None:
                broker.topic_configs.forget(topic)
        errors.append(ib.StopReplicaPartitionError(topic_name=topic, partition_index=index,
                                                   error_code=int(code)))
    return ib.StopReplicaResponse(error_code=0, partition_errors=tuple(errors))


def _stop_replica_partitions(req: Any) -> list[tuple[str, int, int, bool]]:
    if req.topic_states:
        return [(t.topic_name, p.partition_index, p.leader_epoch, p.delete_partition)
                for t in req.topic_states for p in t.partition_states]
    if req.topics:
        return [(t.name, i, -1, req.delete_partitions) for t in req.topics
                for i in t.partition_indexes]
    return [(p.topic_name, p.partition_index, -1, req.delete_partitions)
            for p in req.ungrouped_partitions]


def update_metadata(broker: Broker, req: Any, correlation_id: int = -1) -> Any:
    if _stale(broker, req.controller_id, req.controller_epoch, "UpdateMetadata"):
        return ib.UpdateMetadataResponse(error_code=ErrorCode.stale_controller_epoch)
    cache = broker.metadata_cache
    cache.controller_id = req.controller_id
    brokers: dict[int, BrokerInfo] = {}
    for b in req.live_brokers:
        ep = next(iter(getattr(b, "endpoints", ()) or ()), None)
        host, port = (ep.host, ep.port) if ep is not None else (b.v0_host, b.v0_port)
        brokers[b.id] = BrokerInfo(b.id, host, port, b.rack)
    cache.brokers = brokers
    topic_ids = {t.topic_name: t.topic_id for t in getattr(req, "topic_states", ())}
    states = req.partition_states()
    for s in states:
        if s.leader == LEADER_DURING_DELETE:
            cache.remove_partition(s.topic_name, s.partition_index)
            continue
        cache.update_partition(
            s.topic_name, topic_ids.get(s.topic_name, uuid.UUID(int=0)), s.partition_index,
            PartitionInfo(s.leader, s.leader_epoch, list(s.replicas), list(s.isr),
                          list(s.offline_replicas), s.zk_version, s.controller_epoch),
            internal=s.topic_name.startswith("__"))
    # Kafka traces this per partition; one line per request says the same at DEBUG.
    StateChangeLogger(broker.broker_id).broker(req.controller_epoch, (
        f"Cached live brokers {sorted(brokers)} and the leadership of "
        f"{len(states)} partitions (UpdateMetadata correlationId "
        f"{correlation_id} from controller {req.controller_id})"), logging.DEBUG)
    cache.initialized.set()
    return ib.UpdateMetadataResponse(error_code=0)


async def _controlled_shutdown(broker: Broker, key: int, version: int, cid: int,
                               req: Any) -> bytes:
    controller = broker.controller
    if controller is None or not controller.is_active:
        return ib.encode_response_frame(key, version, cid, ib.ControlledShutdownResponse(
            error_code=ErrorCode.not_controller))
    reply: asyncio.Future[set[TopicPartition]] = asyncio.get_running_loop().create_future()
    controller.events.put(ControlledShutdown(broker_id=req.broker_id,
                                             broker_epoch=req.broker_epoch, reply=reply))
    try:
        remaining = await reply
    except ControllerMovedError:
        return ib.encode_response_frame(key, version, cid, ib.ControlledShutdownResponse(
            error_code=ErrorCode.not_controller))
    except KeyError:
        return ib.encode_response_frame(key, version, cid, ib.ControlledShutdownResponse(
            error_code=ErrorCode.broker_not_available))
    return ib.encode_response_frame(key, version, cid, ib.ControlledShutdownResponse(
        error_code=0, remaining_partitions=tuple(
            ib.RemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
            for tp in sorted(remaining))))
