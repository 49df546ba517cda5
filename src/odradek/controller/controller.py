"""The controller (Kafka's ZooKeeper-era KafkaController), S-4 and S-5.

Every broker runs one; the broker that creates the ephemeral `/controller` node is the active
controller. Every input — coordination watches, ControlledShutdown requests, timers — becomes an
event on one queue processed by one task (S-5.5); watch callbacks only enqueue. The decisions are
the pure state-machine tables and leader selectors of this package; the partition and replica
state machines (state_machines.py) apply them, the reassignment, replica election and topic
deletion managers run their events, and the requests go out through the channel.

Fencing (S-5.3): the epoch is bumped in `/controller_epoch` with a version-checked write, every
controller write is a transaction that also checks `/controller_epoch`'s version (zk_client.py,
so a controller that was paused past its session cannot write after a successor took over), and
every request carries the epoch so brokers refuse an older controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from ..common.state_change import StateChangeLogger
from ..common.topic_id import topic_id_from_text
from ..coordination import paths
from ..coordination.store import (
    BadVersionError,
    CoordinationError,
    CoordinationStore,
    EventType,
    NodeExistsError,
    NoNodeError,
    SessionState,
)
from ..coordination.until_connected import UntilConnectedStore
from ..metrics.stats import ControllerStats
from ..security.protocol import SecurityProtocol
from .channel import LEADER_AND_ISR, UPDATE_METADATA, ControllerChannelManager, RequestSender
from .context import BrokerEndpoint, ControllerContext, LeaderAndIsr, TopicPartition
from .events import (
    AutoPreferredReplicaLeaderElection,
    BrokerChange,
    ControlledShutdown,
    ControllerChange,
    ControllerEvent,
    ControllerEventManager,
    ControllerMovedError,
    Expire,
    IsrChangeNotification,
    LeaderAndIsrResponseReceived,
    LogDirEventNotification,
    PartitionModifications,
    PartitionReassignment,
    PreferredReplicaLeaderElection,
    Reelect,
    RegisterBrokerAndReelect,
    StaleBrokerEpochError,
    Startup,
    TopicChange,
    TopicDeletion,
)
from .partition_states import PartitionState
from .pipeline import DEFAULT_WINDOW as STATE_WRITE_WINDOW
from .pipeline import run_bounded, yielding
from .preferred_election import FIRST_AUTO_REBALANCE_DELAY_S, ReplicaElectionManager
from .reassignment import ReassignmentManager
from .replica_states import ReplicaState
from .state_machines import PartitionStateMachine, ReplicaStateMachine
from .topic_deletion import TopicDeletionManager, TopicDeletionStopped
from .zk_client import ControllerZkClient

__all__ = ["ControllerConfig", "KafkaController"]

log = logging.getLogger("odradek.controller")
P = PartitionState
KAFKA_STORAGE_ERROR = 56  # a replica in an offline log dir (KIP-112)
R = ReplicaState


def _error_name(code: int) -> str:
    """Kafka's name of an error code (STALE_BROKER_EPOCH for 77)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error code {code}"


class ConfigValues(Protocol):
    def __getitem__(self, name: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The broker configs the controller reads."""

    socket_timeout_ms: int = 30000
    delete_topic_enable: bool = True
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: float = 300.0
    inter_broker_listener: str = "PLAINTEXT"
    inter_broker_security: Any = None  # security.connector.ClientSecurity (None: PLAINTEXT)
    connector: Any = None  # security.connector.Connector for the channel (None: open_connection)

    @classmethod
    def from_broker_config(cls, config: ConfigValues) -> ControllerConfig:
        security = getattr(config, "inter_broker_client_security", None)
        return cls(
            inter_broker_listener=getattr(config, "inter_broker_listener_name", "PLAINTEXT"),
            inter_broker_security=security() if security is not None else None,
            socket_timeout_ms=int(config["controller.socket.timeout.ms"]),
            delete_topic_enable=bool(config["delete.topic.enable"]),
            auto_leader_rebalance_enable=bool(config["auto.leader.rebalance.enable"]),
            leader_imbalance_per_broker_percentage=int(
                config["leader.imbalance.per.broker.percentage"]),
            leader_imbalance_check_interval_seconds=float(
                config["leader.imbalance.check.interval.seconds"]))


class ControllerIdHolder(Protocol):
    """Where this broker publishes the active controller's id (its metadata cache)."""

    controller_id: int


class TopicConfigLoader(Protocol):
    """Loads topics' config overrides (unclean leader election is a topic config)."""

    async def ensure_loaded(self, topics: Iterable[str]) -> None: ...


class TopicElectionConfig(Protocol):
    @property
    def unclean_leader_election_enable(self) -> bool: ...


class KafkaController:
    def __init__(self, store: CoordinationStore, broker_id: int, config: ControllerConfig,
                 metadata_cache: ControllerIdHolder, topic_configs: TopicConfigLoader,
                 topic_config: Callable[[str], TopicElectionConfig], *,
                 stats: ControllerStats | None = None,
                 gc_pause: Callable[[], AbstractContextManager[None]] = nullcontext) -> None:
        self.store = store
        # wraps each event: the broker pauses the cyclic GC during one (server/gc_freeze.py)
        self.gc_pause = gc_pause
        self.broker_id = broker_id
        self.config = config
        self.metadata_cache = metadata_cache
        self.topic_configs = topic_configs
        self.ctx = ControllerContext()
        self.sc = StateChangeLogger(broker_id)
        self.events = ControllerEventManager(self._process,
                                             name=f"controller-event-thread-{self.broker_id}")
        self.active_controller_id = -1
        self._watches: list[Any] = []
        self._topic_watches: dict[str, Any] = {}
        self.zk = ControllerZkClient(store, self.ctx)
        self.requests = RequestSender(broker_id, self.ctx)
        self.requests.on_response = self._on_request_response
        self.replica_state_machine = ReplicaStateMachine(self.ctx, self.zk, self.sc)
        self.partition_state_machine = PartitionStateMachine(
            self.ctx, self.zk, self.replica_state_machine, self.sc,
            lambda topic: bool(topic_config(topic).unclean_leader_election_enable),
            stats if stats is not None else ControllerStats())
        self.topic_deletion = TopicDeletionManager(
            broker_id, self.ctx, self.zk, self.partition_state_machine,
            self.replica_state_machine, self.requests, self.events.put, self._forget_topic,
            config.delete_topic_enable)
        self.reassignment = ReassignmentManager(  # S-6.2
            broker_id, self.ctx, self.zk, self.partition_state_machine,
            self.replica_state_machine, self.requests, self.sc, self.events.put)
        self.elections = ReplicaElectionManager(  # S-6.1
            broker_id, self.ctx, self.zk, self.partition_state_machine, self.requests, self.sc,
            self.events.put, lambda: self.is_active, config.auto_leader_rebalance_enable,
            config.leader_imbalance_per_broker_percentage,
            config.leader_imbalance_check_interval_seconds)

    @property
    def channel(self) -> ControllerChannelManager | None:
        return self.requests.channel

    @property
    def is_active(self) -> bool:
        return self.active_controller_id == self.broker_id and self.channel is not None

    # -- lifecycle ------------------------------------------------------------------------------
    async def startup(self) -> None:
        self.events.start()
        self._controller_watch = await self.store.watch_data(
            paths.CONTROLLER, lambda _e: self.events.put(ControllerChange()))
        self.events.put(Startup())

    async def shutdown(self) -> None:
        self._controller_watch.cancel()
        done = asyncio.get_running_loop().create_future()

        async def resign() -> None:
            await self._resign()
            if not done.done():  # the wait below may have given up
                done.set_result(None)
        self.events.put(_Call(resign))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(done, 10)
        if isinstance(self.store, UntilConnectedStore):  # an event waiting for the store ends
            self.store.stop_waiting()
        await self.events.close()
        await self._resign()

    def on_session_state(self, state: SessionState) -> None:
        """Called by the broker on coordination session changes (S-5.1)."""
        if state is SessionState.EXPIRED:
            self.events.clear_and_put(Expire())

    def session_reestablished(self) -> None:
        self.events.put(RegisterBrokerAndReelect())

    def enable_unclean_leader_election(self, topic: str | None = None) -> None:
        """Kafka's TopicUncleanLeaderElectionEnable (and the broker-wide dynamic variant): an
        unclean.leader.election.enable that became true makes the active controller retry the
        offline partitions (of `topic`, or all) at once instead of at the next broker change."""
        if not self.is_active:
            return

        async def elect() -> None:
            if self.is_active:
                await self._trigger_online_partitions(
                    None if topic is None else self.ctx.partitions_for_topic(topic))
        self.events.put(_Call(elect))

    async def wait_idle(self) -> None:
        """Wait until every event queued so far has been processed (tests, tools)."""
        done = asyncio.get_running_loop().create_future()

        async def mark() -> None:
            done.set_result(None)
        self.events.put(_Call(mark))
        await done

    # -- event dispatch -------------------------------------------------------------------------
    async def _process(self, event: ControllerEvent) -> None:
        try:
            with self.gc_pause():
                await self._dispatch(event)
        except ControllerMovedError:
            log.info("[Controller id=%d] Controller moved to another broker; resigning",
                     self.broker_id)
            await self._resign()
            await self._elect()

    async def _dispatch(self, event: ControllerEvent) -> None:
        if isinstance(event, _Call):
            await event.fn()
        elif isinstance(event, Startup | Reelect | RegisterBrokerAndReelect):
            await self._elect()
        elif isinstance(event, ControllerChange):
            await self._on_controller_change()
        elif isinstance(event, Expire):
            await self._resign()
        elif not self.is_active:
            if isinstance(event, ControlledShutdown | PreferredReplicaLeaderElection) \
                    and event.reply is not None and not event.reply.done():
                event.reply.set_exception(ControllerMovedError("not the controller"))
            return
        elif isinstance(event, BrokerChange):
            await self._on_broker_change()
        elif isinstance(event, TopicChange):
            await self._on_topic_change()
        elif isinstance(event, PartitionModifications):
            await self._on_partition_modifications(event.topic)
        elif isinstance(event, TopicDeletion):
            await self.topic_deletion.on_topic_deletion()
        elif isinstance(event, IsrChangeNotification):
            await self._on_isr_change_notification()
        elif isinstance(event, LogDirEventNotification):
            await self._on_log_dir_event_notification()
        elif isinstance(event, LeaderAndIsrResponseReceived):
            await self._on_leader_and_isr_response(event.broker_id, event.response)
        elif isinstance(event, ControlledShutdown):
            await self._on_controlled_shutdown(event)
        elif isinstance(event, TopicDeletionStopped):
            await self.topic_deletion.on_stopped(event)
        elif isinstance(event, PartitionReassignment):
            await self.reassignment.on_admin_node_change()
        elif isinstance(event, PreferredReplicaLeaderElection):
            await self.elections.process_election(event)
        elif isinstance(event, AutoPreferredReplicaLeaderElection):
            await self.elections.process_auto_rebalance(event)

    # -- election (S-5.1) -----------------------------------------------------------------------
    async def _elect(self) -> None:
        found = await self.store.get_or_none(paths.CONTROLLER)
        if found is not None:
            reg = paths.decode_controller(found[0])
            self.active_controller_id = reg.broker_id if reg else -1
            if self.active_controller_id != self.broker_id and self.channel is not None:
                await self._resign()
            self.metadata_cache.controller_id = self.active_controller_id
            return
        try:
            await self.store.create(paths.CONTROLLER, paths.encode_controller(self.broker_id),
                                    ephemeral=True)
        except NodeExistsError:
            found = await self.store.get_or_none(paths.CONTROLLER)
            reg = paths.decode_controller(found[0]) if found else None
            self.active_controller_id = reg.broker_id if reg else -1
            return
        self.active_controller_id = self.broker_id
        try:
            await self._on_controller_failover()
        except ControllerMovedError:
            raise
        except Exception:
            log.exception("[Controller id=%d] Error during controller failover; resigning",
                          self.broker_id)
            await self._resign()
            with contextlib.suppress(CoordinationError):
                await self.store.delete(paths.CONTROLLER)

    async def _on_controller_change(self) -> None:
        found = await self.store.get_or_none(paths.CONTROLLER)
        if found is None:
            if self.channel is not None:
                await self._resign()
            await self._elect()
            return
        reg = paths.decode_controller(found[0])
        new_id = reg.broker_id if reg else -1
        was_active = self.is_active
        self.active_controller_id = new_id
        if was_active and new_id != self.broker_id:
            await self._resign()

    async def _increment_controller_epoch(self) -> None:
        while True:
            found = await self.store.get_or_none(paths.CONTROLLER_EPOCH)
            try:
                if found is None:
                    epoch = 1
                    await self.store.create(paths.CONTROLLER_EPOCH,
                                            paths.encode_controller_epoch(epoch))
                    version = 0
                else:
                    epoch = paths.decode_controller_epoch(found[0]) + 1
                    stat = await self.store.set(paths.CONTROLLER_EPOCH,
                                                paths.encode_controller_epoch(epoch),
                                                version=found[1].version)
                    version = stat.version
            except (BadVersionError, NodeExistsError):
                raise ControllerMovedError("Controller epoch changed") from None
            self.ctx.epoch, self.ctx.epoch_zk_version = epoch, version
            return

    async def _on_controller_failover(self) -> None:
        """S-5.6: epoch, watches, context, metadata to all, state machines, resume work."""
        await self._increment_controller_epoch()
        log.info("[Controller id=%d] Became the controller with epoch %d", self.broker_id,
                 self.ctx.epoch)
        self.sc.controller(self.ctx.epoch, f"Controller {self.broker_id} became active")
        self.metadata_cache.controller_id = self.broker_id
        put = self.events.put
        self._watches = [
            await self.store.watch_children(paths.BROKER_IDS, lambda _e: put(BrokerChange())),
            await self.store.watch_children(paths.TOPICS, lambda _e: put(TopicChange())),
            await self.store.watch_children(paths.DELETE_TOPICS, lambda _e: put(TopicDeletion())),
            await self.store.watch_children(paths.ISR_CHANGE_NOTIFICATION,
                                            lambda _e: put(IsrChangeNotification())),
            await self.store.watch_children(paths.LOG_DIR_EVENT_NOTIFICATION,  # KIP-112
                                            lambda _e: put(LogDirEventNotification())),
            await self.store.watch_data(  # S-6.1; DELETED is the controller's own delete
                paths.PREFERRED_REPLICA_ELECTION, lambda e: None if e.type is EventType.DELETED
                else put(PreferredReplicaLeaderElection())),
            await self.store.watch_data(  # S-6.2; DELETED is the controller's own delete
                paths.REASSIGN_PARTITIONS, lambda e: None if e.type is EventType.DELETED
                else put(PartitionReassignment())),
        ]
        channel = ControllerChannelManager(self.broker_id, self.config.socket_timeout_ms,
                                           security=self.config.inter_broker_security,
                                           **({"connector": self.config.connector}
                                              if self.config.connector is not None else {}))
        self.requests.channel = channel
        # Kafka deletes the log dir events left over: the LeaderAndIsr of every replica below
        # finds the offline ones again (KAFKA_STORAGE_ERROR in the responses)
        await self._delete_log_dir_events()
        await self._load_context()
        self.partition_state_machine.initialize(self.ctx.all_partitions())
        self.replica_state_machine.initialize(self.ctx.all_partitions())
        for b, ep in self.ctx.live_brokers.items():
            channel.add_broker(b, ep)
        # Metadata first, in a batch of its own (Kafka's onControllerFailover): each broker's
        # queue is FIFO, so every broker knows the live brokers and the controller before any
        # LeaderAndIsr, and a client bootstrapping from it never sees a controller id missing
        # from the broker list.
        batch = self.requests.new_batch()
        batch.add_update_metadata(self.ctx.live_or_shutting_down_broker_ids,
                                  self.ctx.all_partitions())
        self.requests.send(batch)
        # Replica state machine start-up: every live replica learns its partition's leadership.
        batch = self.requests.new_batch()
        for tp in sorted(self.ctx.all_partitions()):
            leadership = self.ctx.leader_and_isr(tp)
            if leadership is not None:
                replicas = self.ctx.partition_replica_assignment(tp)
                batch.add_leader_and_isr([r for r in replicas if r in self.ctx.live_brokers],
                                         tp, leadership, replicas)
        self.requests.send(batch)
        await self._trigger_online_partitions()
        # Replicas on brokers that died with the old controller: OfflineReplica, which takes
        # them out of the ISRs (Kafka's replica state machine start-up), so acks=all does not
        # wait for the leaders' own lag check.
        batch = self.requests.new_batch()
        for tp in sorted(self.ctx.all_partitions()):
            leadership = self.ctx.leader_and_isr(tp)
            if leadership is None or self.ctx.is_topic_queued_up_for_deletion(tp.topic):
                continue
            for r in leadership.isr:
                if r not in self.ctx.live_brokers:
                    await self.replica_state_machine.remove_replica_from_isr(tp, r, batch)
        self.requests.send(batch)
        self.events.put(TopicDeletion())
        self.events.put(IsrChangeNotification())
        self.events.put(PreferredReplicaLeaderElection())  # resume a pending one (S-5.6)
        self.events.put(PartitionReassignment())  # resume pending reassignments (S-5.6, S-6.2)
        # Kafka's first check comes 5 s after failover, then every check interval.
        self.elections.schedule_auto_rebalance(min(
            FIRST_AUTO_REBALANCE_DELAY_S, self.config.leader_imbalance_check_interval_seconds))

    async def _resign(self) -> None:
        if self.channel is None:
            return
        log.info("[Controller id=%d] Resigning as the controller (epoch %d)", self.broker_id,
                 self.ctx.epoch)
        for w in [*self._watches, *self._topic_watches.values()]:
            w.cancel()
        self._watches.clear()
        self._topic_watches.clear()
        self.elections.cancel_auto_rebalance()
        channel, self.requests.channel = self.channel, None
        await channel.shutdown()
        self.topic_deletion.cancel()
        self.ctx.reset()

    # -- context --------------------------------------------------------------------------------
    async def _read_broker(self, broker_id: int) -> tuple[BrokerEndpoint, int] | None:
        """A broker's registration: its endpoint and its broker epoch (the czxid of its
        ephemeral node, as Kafka's getAllBrokerAndEpochsInCluster reads it)."""
        found = await self.store.get_or_none(paths.broker_path(broker_id))
        if found is None:
            return None
        reg = paths.decode_broker_registration(broker_id, found[0])
        ep = (reg.endpoint(self.config.inter_broker_listener) or reg.plaintext_endpoint
              or reg.endpoints[0])
        listeners = tuple((e.listener_name, e.host, e.port, _protocol_id(e.security_protocol))
                          for e in reg.endpoints)
        return BrokerEndpoint(ep.host, ep.port, ep.listener_name,
                              _protocol_id(ep.security_protocol), rack=reg.rack,
                              listeners=listeners), found[1].czxid

    async def _load_context(self) -> None:
        ctx = self.ctx
        for child in await self.store.get_children(paths.BROKER_IDS):
            found = await self._read_broker(int(child))
            if found is not None:
                ctx.add_live_broker(int(child), *found)
        for topic in await self.store.get_children(paths.TOPICS):
            await self._load_topic(topic)

    async def _load_topic(self, topic: str) -> set[TopicPartition]:
        """Read a topic's assignment and state nodes into the context; returns new partitions."""
        found = await self.store.get_or_none(paths.topic_path(topic))
        if found is None:
            return set()
        assignment = paths.decode_topic_assignment(found[0])
        ctx = self.ctx
        ctx.all_topics.add(topic)
        await self.topic_configs.ensure_loaded([topic])  # unclean election is per topic
        ctx.topic_ids[topic] = topic_id_from_text(assignment.topic_id)
        known = set(ctx.partition_assignments.get(topic, {}))
        ctx.set_topic_assignment(topic, {p: list(r) for p, r in assignment.partitions.items()})
        new: set[TopicPartition] = set()
        for p in assignment.partitions:
            tp = TopicPartition(topic, p)
            state = await self.store.get_or_none(paths.partition_state_path(topic, p))
            if state is not None:
                decoded = paths.decode_partition_state(state[0])
                if decoded is not None:
                    ctx.put_leader_and_isr(tp, LeaderAndIsr(
                        decoded.leader, decoded.leader_epoch, tuple(decoded.isr),
                        state[1].version, decoded.controller_epoch))
            elif p not in known:
                new.add(tp)
                self.partition_state_machine.transition(tp, P.NewPartition)
                self.replica_state_machine.transition(tp, assignment.partitions[p], R.NewReplica)
        if topic not in self._topic_watches:
            self._topic_watches[topic] = await self.store.watch_data(
                paths.topic_path(topic),
                lambda _e, t=topic: self.events.put(PartitionModifications(topic=t)))
        return new

    async def _trigger_online_partitions(self, only: Iterable[TopicPartition] | None = None
                                         ) -> None:
        """New and offline partitions go online (the partition state machine), then the
        requests go out."""
        batch = self.requests.new_batch()
        await self.partition_state_machine.trigger_online_partitions(batch, only)
        self.requests.send(batch)

    # -- brokers (S-4.2, S-4.3) -------------------------------------------------------------------
    async def _on_broker_change(self) -> None:
        """Kafka's processBrokerChange: new brokers start, dead ones fail, and a bounced broker
        (registered again, under a newer broker epoch, since the controller last looked: a
        restart whose two changes of /brokers/ids the controller saw as one, or missed while
        its own session was cut) fails and starts again, so that it is sent its replicas'
        LeaderAndIsr; it restarted with none of them."""
        ctx = self.ctx
        current = {int(c) for c in await self.store.get_children(paths.BROKER_IDS)}
        known = set(ctx.live_brokers)
        new, dead = current - known, known - current
        bounced: set[int] = set()
        for b in sorted(current & known):
            found = await self._read_broker(b)
            if found is None:  # gone since get_children: the next change says so
                continue
            if found[1] > ctx.live_broker_epochs.get(b, -1):
                bounced.add(b)
        if new:  # Kafka's order: new, bounced, dead
            await self._on_broker_startup(new)
        if bounced:
            log.info("[Controller id=%d] Bounced brokers: %s", self.broker_id, sorted(bounced))
            await self._on_broker_failure(bounced)
            await self._on_broker_startup(bounced)
        if dead:
            await self._on_broker_failure(dead)

    async def _on_broker_startup(self, new: set[int]) -> None:
        ctx = self.ctx
        assert self.channel is not None
        for b in sorted(new):
            ctx.replicas_on_offline_dirs.pop(b, None)  # a restarted broker loaded its dirs anew
            found = await self._read_broker(b)
            if found is None:
                continue
            ep, broker_epoch = found
            ctx.add_live_broker(b, ep, broker_epoch)
            self.channel.add_broker(b, ep)
            log.info("[Controller id=%d] Newly added brokers: %d", self.broker_id, b)
        # Kafka's onBrokerStartup order: UpdateMetadata (all partitions) in a batch of its own,
        # then the new brokers' replicas go online with LeaderAndIsr. A restarted broker thus
        # learns the cluster before it starts following, not after its first fetches.
        batch = self.requests.new_batch()
        batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, ctx.all_partitions())
        self.requests.send(batch)
        batch = self.requests.new_batch()
        for b in sorted(new):
            for tp in sorted(ctx.partitions_on_broker(b)):
                leadership = ctx.leader_and_isr(tp)
                if leadership is not None and not ctx.is_topic_queued_up_for_deletion(tp.topic):
                    batch.add_leader_and_isr([b], tp, leadership,
                                             ctx.partition_replica_assignment(tp))
                    self.replica_state_machine.transition(tp, [b], R.OnlineReplica)
        self.requests.send(batch)
        await self._trigger_online_partitions()
        await self.reassignment.on_broker_startup(new)  # onBrokerStartup step 4 (S-4.3)
        self.events.put(TopicDeletion())  # deletions waiting for these brokers may resume

    async def _on_broker_failure(self, dead: set[int]) -> None:
        ctx = self.ctx
        assert self.channel is not None
        log.info("[Controller id=%d] Broker failure callback for %s", self.broker_id, sorted(dead))
        led = ctx.partitions_led_by(dead)
        hosted = {tp for b in dead for tp in ctx.partitions_on_broker(b)}
        ctx.remove_live_brokers(dead)
        for b in dead:
            self.channel.remove_broker(b)
        for tp in sorted(led):
            if not ctx.is_topic_queued_up_for_deletion(tp.topic):
                self.partition_state_machine.transition(tp, P.OfflinePartition)
        await self._trigger_online_partitions(led)
        batch = self.requests.new_batch()

        for b in sorted(dead):  # ISR shrinks decided at once, written in transactions of many
            on_b = [tp for tp in sorted(hosted) if b in ctx.replicas_of(tp)]
            async for tp in yielding(on_b):  # (the survivors' UpdateMetadata goes meanwhile)
                self.replica_state_machine.transition(tp, [b], R.OfflineReplica)
            await self.replica_state_machine.remove_replicas_from_isr(on_b, b, batch)
        batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, hosted | led)
        self.requests.send(batch)

    # -- controlled shutdown (S-4.4) --------------------------------------------------------------
    async def _on_controlled_shutdown(self, event: ControlledShutdown) -> None:
        """Kafka's processControlledShutdown: the outcome, a result or an error (the
        coordination store unreachable midway), goes to the broker's request; only a lost
        controllership is the event loop's to handle."""
        reply = event.reply
        try:
            remaining = await self._do_controlled_shutdown(event.broker_id, event.broker_epoch)
        except Exception as exc:
            if reply is not None and not reply.done():
                reply.set_exception(exc)
            if isinstance(exc, ControllerMovedError):
                raise
            if isinstance(exc, StaleBrokerEpochError):
                return  # refused, nothing moved (logged where refused)
            log.warning("[Controller id=%d] Controlled shutdown of broker %d failed: %r",
                        self.broker_id, event.broker_id, exc)
            return
        if reply is not None and not reply.done():
            reply.set_result(remaining)

    async def _do_controlled_shutdown(self, b: int, broker_epoch: int = -1
                                      ) -> set[TopicPartition]:
        """Kafka's doControlledShutdown: the partitions broker `b` still leads afterwards.
        KIP-380: a request from an older broker epoch than the broker's current registration
        (-1: unknown, from a broker that does not send it, is never stale) is refused with
        StaleBrokerEpochError before anything moves."""
        ctx = self.ctx
        cached_epoch = ctx.live_broker_epochs.get(b)
        if broker_epoch != -1 and cached_epoch is not None and broker_epoch < cached_epoch:
            log.info("[Controller id=%d] Refusing the controlled shutdown of broker %d: its "
                     "request's broker epoch %d is older than the current broker epoch %d",
                     self.broker_id, b, broker_epoch, cached_epoch)
            raise StaleBrokerEpochError(
                f"stale broker epoch {broker_epoch} of broker {b} (current: {cached_epoch})")
        if b not in ctx.live_brokers:
            raise KeyError(f"broker {b} is not alive")
        ctx.shutting_down_broker_ids.add(b)
        log.info("[Controller id=%d] Shutting down broker %d", self.broker_id, b)
        batch = self.requests.new_batch()
        movable = [tp for tp in sorted(ctx.partitions_on_broker(b))
                   if len(ctx.partition_replica_assignment(tp)) > 1
                   and ctx.leader_and_isr(tp) is not None
                   and not ctx.is_topic_queued_up_for_deletion(tp.topic)]
        # Kafka's doControlledShutdown splits the partitions once, before anything moves:
        # those the broker leads get a controlled-shutdown election (whose new ISR leaves the
        # broker out, and which tells it to follow); those it only follows are stopped
        # (StopReplica without delete) and shrink their ISR. Leaders first.
        # The elections and the ISR shrinks are each decided at once and written in
        # transactions of many.
        led = [tp for tp in movable if ctx.leader_and_isr(tp).leader == b]  # type: ignore
        led_set = set(led)
        followed = [tp for tp in movable if tp not in led_set]

        await self.partition_state_machine.elect_leaders(led, batch, "controlled_shutdown", {b})
        async for tp in yielding(followed):
            batch.add_stop_replica([b], tp, delete=False)
            self.replica_state_machine.transition(tp, [b], R.OfflineReplica)
        await self.replica_state_machine.remove_replicas_from_isr(followed, b, batch)
        batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, ctx.partitions_on_broker(b))
        assert self.channel is not None
        self.requests.send(batch)
        return {tp for tp in ctx.partition_leaders_on_broker(b)
                if len(ctx.partition_replica_assignment(tp)) > 1}

    # -- topics (S-5.7) ---------------------------------------------------------------------------
    async def _on_topic_change(self) -> None:
        ctx = self.ctx
        topics = set(await self.store.get_children(paths.TOPICS))
        new_partitions: set[TopicPartition] = set()
        for topic in sorted(topics - ctx.all_topics):
            new_partitions |= await self._load_topic(topic)
        for topic in ctx.all_topics - topics:
            self._forget_topic(topic)
        if new_partitions:
            await self._trigger_online_partitions(new_partitions)

    async def _on_partition_modifications(self, topic: str) -> None:
        if topic not in self.ctx.all_topics or self.ctx.is_topic_queued_up_for_deletion(topic):
            return
        new_partitions = await self._load_topic(topic)
        if new_partitions:
            log.info("[Controller id=%d] New partitions to be added %s", self.broker_id,
                     sorted(str(tp) for tp in new_partitions))
            await self._trigger_online_partitions(new_partitions)

    def _forget_topic(self, topic: str) -> None:
        watch = self._topic_watches.pop(topic, None)
        if watch is not None:
            watch.cancel()
        self.ctx.remove_topic(topic)

    # -- ISR changes made by leaders (S-3.4) ------------------------------------------------------
    async def _on_isr_change_notification(self) -> None:
        try:
            children = await self.store.get_children(paths.ISR_CHANGE_NOTIFICATION)
        except NoNodeError:
            return
        changed: set[TopicPartition] = set()
        for child in children:
            path = f"{paths.ISR_CHANGE_NOTIFICATION}/{child}"
            found = await self.store.get_or_none(path)
            if found is not None:
                changed |= {TopicPartition(t, p)
                            for t, p in paths.decode_isr_change_notification(found[0])}
            await self.zk.delete(path)
        changed = {tp for tp in changed if tp.topic in self.ctx.all_topics}
        for tp in changed:
            await self.zk.refresh_leadership(tp)
        await self.reassignment.on_isr_change(changed)  # RAR in the ISR? (S-6.2)
        if changed:
            batch = self.requests.new_batch()
            batch.add_update_metadata(self.ctx.live_or_shutting_down_broker_ids, changed)
            assert self.channel is not None
            self.requests.send(batch)


    # -- log dir failures (KIP-112) ---------------------------------------------------------------
    async def _delete_log_dir_events(self, children: Iterable[str] | None = None) -> None:
        if children is None:
            try:
                children = await self.store.get_children(paths.LOG_DIR_EVENT_NOTIFICATION)
            except NoNodeError:
                return
        for child in children:
            await self.zk.delete(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{child}")

    async def _on_log_dir_event_notification(self) -> None:
        """Kafka's processLogDirEventNotification + onBrokerLogDirFailure: every replica of
        the brokers named gets a LeaderAndIsr (OnlineReplica); those in an offline dir answer
        KAFKA_STORAGE_ERROR (``_on_leader_and_isr_response``). The notifications are deleted."""
        try:
            children = await self.store.get_children(paths.LOG_DIR_EVENT_NOTIFICATION)
        except NoNodeError:
            return
        brokers: set[int] = set()
        for child in sorted(children):
            found = await self.store.get_or_none(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{child}")
            if found is None:
                continue
            try:
                broker = paths.decode_log_dir_event(found[0])
            except ValueError:
                log.warning("[Controller id=%d] Ignoring a malformed log dir event %s",
                            self.broker_id, child)
                continue
            if broker is not None:
                brokers.add(broker)
        try:
            ctx = self.ctx
            brokers &= set(ctx.live_brokers)
            if brokers:
                log.info("[Controller id=%d] Handling log directory failure for brokers %s",
                         self.broker_id, ",".join(map(str, sorted(brokers))))
                batch = self.requests.new_batch()
                for b in sorted(brokers):
                    for tp in sorted(ctx.partitions_on_broker(b)):
                        leadership = ctx.leader_and_isr(tp)
                        if leadership is None or ctx.is_topic_queued_up_for_deletion(tp.topic):
                            continue
                        batch.add_leader_and_isr([b], tp, leadership,
                                                 ctx.partition_replica_assignment(tp))
                        self.replica_state_machine.transition(tp, [b], R.OnlineReplica)
                self.requests.send(batch)
        finally:
            await self._delete_log_dir_events(children)

    def _on_request_response(self, broker_id: int, api_key: int, response: Any) -> None:
        if api_key == LEADER_AND_ISR:
            self.events.put(LeaderAndIsrResponseReceived(broker_id=broker_id,
                                                         response=response))
        elif api_key == UPDATE_METADATA and getattr(response, "error_code", 0):
            # Kafka's UpdateMetadataResponseReceived: an error is logged, nothing retried
            self._log_error_response("UpdateMetadata", broker_id, response.error_code)

    def _log_error_response(self, api: str, broker_id: int, code: int) -> None:
        """A broker refused a request of this controller (STALE_BROKER_EPOCH, KIP-380: it
        registered again since the request was built; the controller sends it new ones once it
        sees that registration). Logged as Kafka logs it; nothing is retried."""
        self.sc.controller(self.ctx.epoch, f"Received error {_error_name(code)} in {api} "
                           f"response from broker {broker_id}", level=logging.ERROR)

    async def _on_leader_and_isr_response(self, broker_id: int, response: Any) -> None:
        """Kafka's onLeaderAndIsrResponseReceived: replicas answering KAFKA_STORAGE_ERROR are
        in an offline log dir; the new ones go offline (``_on_replicas_become_offline``)."""
        if response is None:
            return
        if getattr(response, "error_code", 0) != 0:
            self._log_error_response("LeaderAndIsr", broker_id, response.error_code)
            return
        ctx = self.ctx
        names = {tid: t for t, tid in ctx.topic_ids.items()}
        errors = [(TopicPartition(e.topic_name, e.partition_index), e.error_code)
                  for e in getattr(response, "partition_errors", ())]
        for topic in getattr(response, "topics", ()):
            name = names.get(topic.topic_id)
            if name is not None:
                errors += [(TopicPartition(name, e.partition_index), e.error_code)
                           for e in topic.partition_errors]
        offline = {tp for tp, code in errors if code == KAFKA_STORAGE_ERROR}
        online = {tp for tp, code in errors if code == 0}
        previous = ctx.replicas_on_offline_dirs.get(broker_id, set())
        current = (previous - online) | offline
        if current:
            ctx.replicas_on_offline_dirs[broker_id] = current
        else:
            ctx.replicas_on_offline_dirs.pop(broker_id, None)
        new = current - previous
        if new and broker_id in ctx.live_brokers:
            self.sc.controller(ctx.epoch, (
                f"Mark replicas {', '.join(str(tp) for tp in sorted(new))} on broker "
                f"{broker_id} as offline"))
            await self._on_replicas_become_offline(broker_id, new)

    async def _on_replicas_become_offline(self, broker_id: int,
                                          partitions: set[TopicPartition]) -> None:
        """Kafka's onReplicasBecomeOffline: partitions whose leader is now offline elect
        another (from the ISR), then the replicas go OfflineReplica (out of the ISRs)."""
        ctx = self.ctx
        with_offline_leader = ctx.partitions_with_offline_leader()
        for tp in sorted(with_offline_leader):
            self.partition_state_machine.transition(tp, P.OfflinePartition)
        await self._trigger_online_partitions()
        batch = self.requests.new_batch()

        async def offline_replica(tp: TopicPartition) -> None:
            self.replica_state_machine.transition(tp, [broker_id], R.OfflineReplica)
            await self.replica_state_machine.remove_replica_from_isr(tp, broker_id, batch)

        await run_bounded(sorted(tp for tp in partitions
                                 if not ctx.is_topic_queued_up_for_deletion(tp.topic)),
                          offline_replica, STATE_WRITE_WINDOW)
        batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids,
                                  partitions | with_offline_leader)
        self.requests.send(batch)


class _Call(ControllerEvent):
    """Run a coroutine function on the controller's queue (shutdown, tests)."""

    def __init__(self, fn: Any) -> None:
        object.__setattr__(self, "fn", fn)


def _protocol_id(name: str) -> int:
    """A registration's security protocol name as its wire id (unknown names: PLAINTEXT)."""
    try:
        return SecurityProtocol.for_name(name).id
    except ValueError:
        return 0
