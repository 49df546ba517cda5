"""The controller (Kafka's ZooKeeper-era KafkaController), S-4 and S-5.

Every broker runs one; the broker that creates the ephemeral `/controller` node is the active
controller. Every input — coordination watches, ControlledShutdown requests, timers — becomes an
event on one queue processed by one task (S-5.5); watch callbacks only enqueue. The decisions are
the pure state machines and leader selectors of this package; this module reads and writes the
coordination store and sends LeaderAndIsr / UpdateMetadata / StopReplica through the channel.

Fencing (S-5.3): the epoch is bumped in `/controller_epoch` with a version-checked write, every
state-node write is a transaction that also checks `/controller_epoch`'s version (so a controller
that was paused past its session cannot write after a successor took over), and every request
carries the epoch so brokers refuse an older controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..common.topic_id import topic_id_from_text
from ..coordination import paths
from ..coordination.store import (
    BadVersionError,
    CheckVersionOp,
    CoordinationError,
    CreateOp,
    EventType,
    NodeExistsError,
    NoNodeError,
    SessionState,
    SetDataOp,
)
from ..state_change import StateChangeLogger, leadership_text
from . import leader_selectors as sel
from . import preferred_election as pe
from .channel import ControllerChannelManager, RequestBatch
from .context import (
    BrokerEndpoint,
    ControllerContext,
    LeaderAndIsr,
    PartitionAndReplica,
    TopicPartition,
)
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
    PartitionModifications,
    PartitionReassignment,
    PreferredReplicaLeaderElection,
    Reelect,
    RegisterBrokerAndReelect,
    Startup,
    TopicChange,
    TopicDeletion,
)
from .partition_states import IllegalStateTransition, PartitionState
from .pipeline import DEFAULT_WINDOW as STATE_WRITE_WINDOW
from .pipeline import run_bounded
from .reassignment import ReassignmentManager
from .replica_states import ReplicaState

if TYPE_CHECKING:
    from ..server.broker import Broker

log = logging.getLogger("odradek.controller")
P = PartitionState
R = ReplicaState


class _ControllerMoved(Exception):
    """A write failed because `/controller_epoch` moved: another controller is active."""


class KafkaController:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.broker_id = broker.broker_id
        self.config = broker.config
        self.ctx = ControllerContext()
        self.sc = StateChangeLogger(broker.broker_id)
        self.events = ControllerEventManager(self._process,
                                             name=f"controller-event-thread-{self.broker_id}")
        self.channel: ControllerChannelManager | None = None
        self.active_controller_id = -1
        self._watches: list[Any] = []
        self._topic_watches: dict[str, Any] = {}
        self._deletion_tasks: set[asyncio.Task[Any]] = set()
        self.reassignment = ReassignmentManager(self)  # S-6.2

    @property
    def store(self):
        return self.broker.store

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
            await self._dispatch(event)
        except _ControllerMoved:
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
            await self._on_topic_deletion()
        elif isinstance(event, IsrChangeNotification):
            await self._on_isr_change_notification()
        elif isinstance(event, ControlledShutdown):
            await self._on_controlled_shutdown(event)
        elif isinstance(event, _DeletionStopped):
            await self._complete_topic_deletion(event.topic, event.ok)
        elif isinstance(event, PartitionReassignment):
            await self.reassignment.on_admin_node_change()
        elif isinstance(event, PreferredReplicaLeaderElection):
            await pe.process_election(self, event)
        elif isinstance(event, AutoPreferredReplicaLeaderElection):
            await pe.process_auto_rebalance(self, event)

    # -- election (S-5.1) -----------------------------------------------------------------------
    async def _elect(self) -> None:
        found = await self.store.get_or_none(paths.CONTROLLER)
        if found is not None:
            reg = paths.decode_controller(found[0])
            self.active_controller_id = reg.broker_id if reg else -1
            if self.active_controller_id != self.broker_id and self.channel is not None:
                await self._resign()
            self.broker.metadata_cache.controller_id = self.active_controller_id
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
        except _ControllerMoved:
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
                raise _ControllerMoved() from None
            self.ctx.epoch, self.ctx.epoch_zk_version = epoch, version
            return

    async def _on_controller_failover(self) -> None:
        """S-5.6: epoch, watches, context, metadata to all, state machines, resume work."""
        await self._increment_controller_epoch()
        log.info("[Controller id=%d] Became the controller with epoch %d", self.broker_id,
                 self.ctx.epoch)
        self.sc.controller(self.ctx.epoch, f"Controller {self.broker_id} became active")
        self.broker.metadata_cache.controller_id = self.broker_id
        put = self.events.put
        self._watches = [
            await self.store.watch_children(paths.BROKER_IDS, lambda _e: put(BrokerChange())),
            await self.store.watch_children(paths.TOPICS, lambda _e: put(TopicChange())),
            await self.store.watch_children(paths.DELETE_TOPICS, lambda _e: put(TopicDeletion())),
            await self.store.watch_children(paths.ISR_CHANGE_NOTIFICATION,
                                            lambda _e: put(IsrChangeNotification())),
            await self.store.watch_data(  # S-6.1; DELETED is the controller's own delete
                paths.PREFERRED_REPLICA_ELECTION, lambda e: None if e.type is EventType.DELETED
                else put(PreferredReplicaLeaderElection())),
            await self.store.watch_data(  # S-6.2; DELETED is the controller's own delete
                paths.REASSIGN_PARTITIONS, lambda e: None if e.type is EventType.DELETED
                else put(PartitionReassignment())),
        ]
        self.channel = ControllerChannelManager(
            self.broker_id, self.config["controller.socket.timeout.ms"])
        await self._load_context()
        self._initialize_states(self.ctx.all_partitions())
        for b, ep in self.ctx.live_brokers.items():
            self.channel.add_broker(b, ep)
        # Metadata first, in a batch of its own (Kafka's onControllerFailover): each broker's
        # queue is FIFO, so every broker knows the live brokers and the controller before any
        # LeaderAndIsr, and a client bootstrapping from it never sees a controller id missing
        # from the broker list.
        batch = self._batch()
        batch.add_update_metadata(self.ctx.live_or_shutting_down_broker_ids,
                                  self.ctx.all_partitions())
        batch.send(self.channel)
        # Replica state machine start-up: every live replica learns its partition's leadership.
        batch = self._batch()
        for tp in sorted(self.ctx.all_partitions()):
            leadership = self.ctx.leader_and_isr(tp)
            if leadership is not None:
                replicas = self.ctx.partition_replica_assignment(tp)
                batch.add_leader_and_isr([r for r in replicas if r in self.ctx.live_brokers],
                                         tp, leadership, replicas)
        batch.send(self.channel)
        await self._trigger_online_partitions()
        # Replicas on brokers that died with the old controller: OfflineReplica, which takes
        # them out of the ISRs (Kafka's replica state machine start-up), so acks=all does not
        # wait for the leaders' own lag check.
        batch = self._batch()
        for tp in sorted(self.ctx.all_partitions()):
            leadership = self.ctx.leader_and_isr(tp)
            if leadership is None or self.ctx.is_topic_queued_up_for_deletion(tp.topic):
                continue
            for r in leadership.isr:
                if r not in self.ctx.live_brokers:
                    await self._remove_replica_from_isr(tp, r, batch)
        batch.send(self.channel)
        self.events.put(TopicDeletion())
        self.events.put(IsrChangeNotification())
        self.events.put(PreferredReplicaLeaderElection())  # resume a pending one (S-5.6)
        self.events.put(PartitionReassignment())  # resume pending reassignments (S-5.6, S-6.2)
        # Kafka's first check comes 5 s after failover, then every check interval.
        pe.schedule_auto_rebalance(self, min(pe.FIRST_AUTO_REBALANCE_DELAY_S, float(
            self.config["leader.imbalance.check.interval.seconds"])))

    async def _resign(self) -> None:
        if self.channel is None:
            return
        log.info("[Controller id=%d] Resigning as the controller (epoch %d)", self.broker_id,
                 self.ctx.epoch)
        for w in [*self._watches, *self._topic_watches.values()]:
            w.cancel()
        self._watches.clear()
        self._topic_watches.clear()
        pe.cancel_auto_rebalance(self)
        channel, self.channel = self.channel, None
        await channel.shutdown()
        for t in list(self._deletion_tasks):
            t.cancel()
        self.ctx.reset()

    # -- context --------------------------------------------------------------------------------
    async def _read_broker(self, broker_id: int) -> BrokerEndpoint | None:
        found = await self.store.get_or_none(paths.broker_path(broker_id))
        if found is None:
            return None
        reg = paths.decode_broker_registration(broker_id, found[0])
        ep = reg.plaintext_endpoint or reg.endpoints[0]
        return BrokerEndpoint(ep.host, ep.port, ep.listener_name, rack=reg.rack)

    async def _load_context(self) -> None:
        ctx = self.ctx
        for child in await self.store.get_children(paths.BROKER_IDS):
            ep = await self._read_broker(int(child))
            if ep is not None:
                ctx.add_live_broker(int(child), ep)
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
        await self.broker.topic_configs.ensure_loaded([topic])  # unclean election is per topic
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
                self._move(tp, P.NewPartition)
                self._move_replicas(tp, assignment.partitions[p], R.NewReplica)
        if topic not in self._topic_watches:
            self._topic_watches[topic] = await self.store.watch_data(
                paths.topic_path(topic),
                lambda _e, t=topic: self.events.put(PartitionModifications(topic=t)))
        return new

    # -- writes, fenced by the controller epoch --------------------------------------------------
    async def _write_state(self, tp: TopicPartition, new: LeaderAndIsr, create: bool = False
                           ) -> LeaderAndIsr | None:
        """Write a partition state node conditionally on its version and on the controller
        epoch. Returns the stored value (with its new version), or None if the node moved
        (the caller re-reads and decides again, S-4.2)."""
        path = paths.partition_state_path(tp.topic, tp.partition)
        data = paths.encode_partition_state(paths.LeaderIsrAndControllerEpoch(
            new.leader, new.leader_epoch, tuple(new.isr), self.ctx.epoch))
        check = CheckVersionOp(paths.CONTROLLER_EPOCH, self.ctx.epoch_zk_version)
        try:
            if create:
                parent = paths.topic_partition_path(tp.topic, tp.partition)
                with contextlib.suppress(NodeExistsError):
                    await self.store.create(parent, b"", makepath=True)
                await self.store.multi([check, CreateOp(path, data)])
                version = 0
            else:
                results = await self.store.multi([check, SetDataOp(path, data, new.zk_version)])
                version = results[1].version
        except (BadVersionError, NodeExistsError, NoNodeError) as exc:
            if getattr(exc, "op_index", None) == 0:
                raise _ControllerMoved() from None
            return None
        stored = LeaderAndIsr(new.leader, new.leader_epoch, tuple(new.isr), version,
                              self.ctx.epoch)
        self.ctx.put_leader_and_isr(tp, stored)
        return stored

    async def _refresh_leadership(self, tp: TopicPartition) -> LeaderAndIsr | None:
        found = await self.store.get_or_none(paths.partition_state_path(tp.topic, tp.partition))
        if found is None:
            return None
        decoded = paths.decode_partition_state(found[0])
        if decoded is None:
            return None
        value = LeaderAndIsr(decoded.leader, decoded.leader_epoch, tuple(decoded.isr),
                             found[1].version, decoded.controller_epoch)
        if decoded.controller_epoch > self.ctx.epoch:
            raise _ControllerMoved()
        self.ctx.put_leader_and_isr(tp, value)
        return value

    def _batch(self) -> RequestBatch:
        return RequestBatch(self.broker_id, self.ctx.epoch, self.ctx)

    # -- the state machines (S-5.4): tables in partition_states / replica_states ------------------
    def _initialize_states(self, partitions: Iterable[TopicPartition]) -> None:
        """Kafka's initializePartitionState / initializeReplicaState at failover: states are
        read off the stored leadership and the live brokers, not transitioned."""
        ctx = self.ctx
        for tp in partitions:
            leadership = ctx.leader_and_isr(tp)
            if leadership is None:
                state = P.NewPartition
            elif leadership.leader >= 0 and leadership.leader in ctx.live_brokers:
                state = P.OnlinePartition
            else:
                state = P.OfflinePartition
            ctx.partition_states.put(tp, state)
            for r in ctx.partition_replica_assignment(tp):
                ctx.replica_states.put(PartitionAndReplica(tp, r), R.OnlineReplica
                                       if r in ctx.live_brokers else R.ReplicaDeletionIneligible
                                       if ctx.is_topic_queued_up_for_deletion(tp.topic)
                                       else R.OfflineReplica)

    def _move(self, tp: TopicPartition, target: PartitionState,
              leadership: LeaderAndIsr | None = None) -> bool:
        """One partition transition, checked against the table and logged."""
        try:
            change = self.ctx.partition_states.transition(tp, target)
        except IllegalStateTransition as exc:
            self.sc.controller(self.ctx.epoch, f"Invalid state change: {exc}", logging.ERROR)
            return False
        detail = "" if leadership is None else leadership_text(
            leadership.leader, leadership.leader_epoch, leadership.isr)
        self.sc.partition_change(self.ctx.epoch, tp, change.from_state, change.to_state, detail)
        return True

    def _move_replicas(self, tp: TopicPartition, replicas: Iterable[int],
                       target: ReplicaState) -> None:
        for r in replicas:
            key = PartitionAndReplica(tp, r)
            try:
                change = self.ctx.replica_states.transition(key, target)
            except IllegalStateTransition as exc:
                self.sc.controller(self.ctx.epoch, f"Invalid state change: {exc}", logging.ERROR)
                continue
            self.sc.replica_change(self.ctx.epoch, r, tp, change.from_state, change.to_state)

    def _partition_state(self, tp: TopicPartition) -> PartitionState:
        return self.ctx.partition_states.state(tp)

    async def _trigger_online_partitions(self, only: Iterable[TopicPartition] | None = None
                                         ) -> None:
        """New and offline partitions go online: initial leaders for new ones, the offline
        partition leader election for the others (S-4.1, S-5.7)."""
        ctx = self.ctx
        candidates = sorted(ctx.all_partitions() if only is None else only)
        batch = self._batch()

        async def online(tp: TopicPartition) -> None:
            if ctx.is_topic_queued_up_for_deletion(tp.topic):
                return
            state = self._partition_state(tp)
            if state is P.NewPartition:
                await self._initialize_leadership(tp, batch)
            elif state is P.OfflinePartition:
                await self._elect_leader(tp, batch, "offline")

        # the state znode writes are pipelined (KAFKA-5642), each partition's steps in order
        await run_bounded([tp for tp in candidates
                           if self._partition_state(tp) in (P.NewPartition, P.OfflinePartition)],
                          online, STATE_WRITE_WINDOW)
        if self.channel is not None:
            batch.send(self.channel)

    async def _initialize_leadership(self, tp: TopicPartition, batch: RequestBatch) -> None:
        replicas = self.ctx.partition_replica_assignment(tp)
        result = sel.new_partition_leader(replicas, self.ctx.live_broker_ids)
        if result.leader is None:
            self.sc.controller(self.ctx.epoch, (
                f"Encountered error during state change of partition {tp} from NewPartition to "
                f"OnlinePartition: no live replica among {replicas}"), logging.ERROR)
            return
        leadership = LeaderAndIsr.initial(result.leader, result.isr, self.ctx.epoch)
        stored = await self._write_state(tp, leadership, create=True)
        if stored is None:  # someone created it: read what is there and elect from it
            await self._refresh_leadership(tp)
            self._move(tp, P.OfflinePartition)
            await self._elect_leader(tp, batch, "offline")
            return
        self._move(tp, P.OnlinePartition, stored)
        self._move_replicas(tp, [r for r in replicas if r in self.ctx.live_brokers],
                            R.OnlineReplica)
        batch.add_leader_and_isr(result.recipients or result.isr, tp, stored, replicas,
                                 is_new=True)

    async def _elect_leader(self, tp: TopicPartition, batch: RequestBatch, strategy: str,
                            shutting_down: set[int] | None = None) -> bool:
        """One leader election with a version-checked write, re-read and retried when the
        state node moved (S-4.2). Returns True if a leader was written."""
        ctx = self.ctx
        for _ in range(10):
            current = ctx.leader_and_isr(tp)
            if current is None:
                return False
            replicas = ctx.partition_replica_assignment(tp)
            live = ctx.live_broker_ids
            if strategy in ("offline", "unclean"):  # unclean: ElectLeaders UNCLEAN (S-6.1)
                unclean = strategy == "unclean" or self._unclean_enabled(tp.topic)
                result = sel.offline_partition_leader(replicas, current.isr, live, unclean)
            elif strategy == "preferred":
                result = sel.preferred_replica_leader(replicas, current.isr, live)
            else:
                result = sel.controlled_shutdown_leader(replicas, current.isr,
                                                        ctx.live_or_shutting_down_broker_ids,
                                                        shutting_down or set())
            new = sel.apply_election(current, result)
            if new is None:
                self.sc.controller(ctx.epoch, (
                    f"No leader could be elected for partition {tp} ({strategy} election): "
                    f"assigned replicas {replicas}, isr {list(current.isr)}, live brokers "
                    f"{sorted(live)}; it stays {self._partition_state(tp)}"), logging.ERROR)
                return False
            stored = await self._write_state(tp, new)
            if stored is None:
                await self._refresh_leadership(tp)
                continue
            if result.unclean:
                self.sc.controller(ctx.epoch, (
                    f"Unclean leader election for partition {tp}: replica {stored.leader} "
                    f"outside the ISR {list(current.isr)} became leader; data may be lost"),
                    logging.WARNING)
            self._move(tp, P.OnlinePartition, stored)
            batch.add_leader_and_isr([r for r in result.recipients if r in ctx.live_brokers],
                                     tp, stored, replicas)
            return True
        log.error("Giving up electing a leader for %s after repeated version conflicts", tp)
        return False

    def _unclean_enabled(self, topic: str) -> bool:
        return bool(self.broker.topic_config(topic).unclean_leader_election_enable)

    async def _remove_replica_from_isr(self, tp: TopicPartition, replica: int,
                                       batch: RequestBatch) -> None:
        """OfflineReplica: the replica leaves the ISR; if it led, the leader becomes -1."""
        for _ in range(10):
            current = self.ctx.leader_and_isr(tp)
            if current is None or (replica not in current.isr and current.leader != replica):
                return
            new = sel.remove_replica_from_isr(current, replica)
            if new is None:
                return
            stored = await self._write_state(tp, new)
            if stored is None:
                await self._refresh_leadership(tp)
                continue
            self.sc.controller(self.ctx.epoch, (
                f"Removed replica {replica} from the ISR of partition {tp}: "
                f"{leadership_text(stored.leader, stored.leader_epoch, stored.isr)}"))
            replicas = self.ctx.partition_replica_assignment(tp)
            batch.add_leader_and_isr([r for r in replicas if r in self.ctx.live_broker_ids
                                      and r != replica], tp, stored, replicas)
            return

    # -- brokers (S-4.2, S-4.3) -------------------------------------------------------------------
    async def _on_broker_change(self) -> None:
        ctx = self.ctx
        current = {int(c) for c in await self.store.get_children(paths.BROKER_IDS)}
        known = set(ctx.live_brokers)
        new, dead = current - known, known - current
        if dead:
            await self._on_broker_failure(dead)
        if new:
            await self._on_broker_startup(new)

    async def _on_broker_startup(self, new: set[int]) -> None:
        ctx = self.ctx
        assert self.channel is not None
        for b in sorted(new):
            ep = await self._read_broker(b)
            if ep is None:
                continue
            ctx.add_live_broker(b, ep)
            self.channel.add_broker(b, ep)
            log.info("[Controller id=%d] Newly added brokers: %d", self.broker_id, b)
        # Kafka's onBrokerStartup order: UpdateMetadata (all partitions) in a batch of its own,
        # then the new brokers' replicas go online with LeaderAndIsr. A restarted broker thus
        # learns the cluster before it starts following, not after its first fetches.
        batch = self._batch()
        batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, ctx.all_partitions())
        batch.send(self.channel)
        batch = self._batch()
        for b in sorted(new):
            for tp in sorted(ctx.partitions_on_broker(b)):
                leadership = ctx.leader_and_isr(tp)
                if leadership is not None and not ctx.is_topic_queued_up_for_deletion(tp.topic):
                    batch.add_leader_and_isr([b], tp, leadership,
                                             ctx.partition_replica_assignment(tp))
                    self._move_replicas(tp, [b], R.OnlineReplica)
        batch.send(self.channel)
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
                self._move(tp, P.OfflinePartition)
        await self._trigger_online_partitions(led)
        batch = self._batch()

        async def offline_replicas(tp: TopicPartition) -> None:
            for b in dead:
                if b in ctx.partition_replica_assignment(tp):
                    self._move_replicas(tp, [b], R.OfflineReplica)
                    await self._remove_replica_from_isr(tp, b, batch)

        await run_bounded(sorted(hosted), offline_replicas, STATE_WRITE_WINDOW)  # pipelined
        batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, hosted | led)
        batch.send(self.channel)

    # -- controlled shutdown (S-4.4) --------------------------------------------------------------
    async def _on_controlled_shutdown(self, event: ControlledShutdown) -> None:
        ctx = self.ctx
        b = event.broker_id
        reply = event.reply
        if b not in ctx.live_brokers:
            if reply is not None and not reply.done():
                reply.set_exception(KeyError(f"broker {b} is not alive"))
            return
        ctx.shutting_down_broker_ids.add(b)
        log.info("[Controller id=%d] Shutting down broker %d", self.broker_id, b)
        batch = self._batch()
        movable = [tp for tp in sorted(ctx.partitions_on_broker(b))
                   if len(ctx.partition_replica_assignment(tp)) > 1
                   and ctx.leader_and_isr(tp) is not None
                   and not ctx.is_topic_queued_up_for_deletion(tp.topic)]
        # Leaders first (Kafka's doControlledShutdown): leadership leaves the broker before the
        # ISR shrinks of the partitions it only follows.
        # Each phase's state znode writes are pipelined (KAFKA-5642).
        async def move_leadership(tp: TopicPartition) -> None:
            if ctx.leader_and_isr(tp).leader == b:  # type: ignore[union-attr]
                await self._elect_leader(tp, batch, "controlled_shutdown", {b})

        async def leave_isr(tp: TopicPartition) -> None:
            if ctx.leader_and_isr(tp).leader != b:  # type: ignore[union-attr]
                batch.add_stop_replica([b], tp, delete=False)
                self._move_replicas(tp, [b], R.OfflineReplica)
                await self._remove_replica_from_isr(tp, b, batch)

        await run_bounded(movable, move_leadership, STATE_WRITE_WINDOW)
        await run_bounded(movable, leave_isr, STATE_WRITE_WINDOW)
        batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, ctx.partitions_on_broker(b))
        assert self.channel is not None
        batch.send(self.channel)
        remaining = {tp for tp in ctx.partition_leaders_on_broker(b)
                     if len(ctx.partition_replica_assignment(tp)) > 1}
        if reply is not None and not reply.done():
            reply.set_result(remaining)

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

    async def _on_topic_deletion(self) -> None:
        ctx = self.ctx
        try:
            queued = set(await self.store.get_children(paths.DELETE_TOPICS))
        except NoNodeError:
            return
        for topic in sorted(queued):
            if topic not in ctx.all_topics:
                with contextlib.suppress(NoNodeError):
                    await self.store.delete(paths.delete_topic_path(topic))
                continue
            if not self.config["delete.topic.enable"]:
                log.info("Removing %s from the deletion queue: delete.topic.enable is false",
                         topic)
                with contextlib.suppress(NoNodeError):
                    await self.store.delete(paths.delete_topic_path(topic))
                continue
            ctx.queue_topic_deletion([topic])
        for topic in sorted(ctx.topics_to_be_deleted):
            if topic in ctx.topics_with_deletion_started:
                continue
            replicas = {r for tp in ctx.partitions_for_topic(topic)
                        for r in ctx.partition_replica_assignment(tp)}
            if not replicas <= set(ctx.live_brokers):
                log.info("Deletion of topic %s waits for brokers %s", topic,
                         sorted(replicas - set(ctx.live_brokers)))
                continue
            if any(tp.topic == topic for tp in ctx.partitions_being_reassigned):
                # Kafka marks a topic ineligible for deletion while it is being reassigned and
                # resumes its deletion when the move completes (reassignment._complete).
                log.info("Deletion of topic %s waits for its partition reassignment", topic)
                continue
            await self._start_topic_deletion(topic)

    async def _start_topic_deletion(self, topic: str) -> None:
        ctx = self.ctx
        ctx.begin_topic_deletion([topic])
        batch = self._batch()
        partitions = sorted(ctx.partitions_for_topic(topic))
        batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, partitions)
        for tp in partitions:
            self._move(tp, P.OfflinePartition)
            replicas = ctx.partition_replica_assignment(tp)
            self._move_replicas(tp, replicas, R.OfflineReplica)
            self._move_replicas(tp, replicas, R.ReplicaDeletionStarted)
            batch.add_stop_replica(ctx.partition_replica_assignment(tp), tp, delete=True,
                                   leader_epoch=-2)
        assert self.channel is not None
        futures = batch.send(self.channel)

        async def await_responses() -> None:
            ok = True
            for f in futures:
                try:
                    resp = await f
                except (asyncio.CancelledError, Exception):
                    ok = False
                    continue
                if getattr(resp, "error_code", 0):
                    ok = False
            self.events.put(_DeletionStopped(topic=topic, ok=ok))
        task = asyncio.create_task(await_responses())
        self._deletion_tasks.add(task)
        task.add_done_callback(self._deletion_tasks.discard)

    async def _complete_topic_deletion(self, topic: str, ok: bool) -> None:
        ctx = self.ctx
        partitions = sorted(ctx.partitions_for_topic(topic))
        if not ok:
            ctx.topics_with_deletion_started.discard(topic)
            for tp in partitions:
                self._move_replicas(tp, ctx.partition_replica_assignment(tp),
                                    R.ReplicaDeletionIneligible)
            log.warning("Deletion of topic %s failed on some replica; it will be retried", topic)
            return
        for tp in partitions:
            replicas = ctx.partition_replica_assignment(tp)
            self._move_replicas(tp, replicas, R.ReplicaDeletionSuccessful)
            self._move_replicas(tp, replicas, R.NonExistentReplica)
            self._move(tp, P.NonExistentPartition)
        self._forget_topic(topic)
        ctx.topics_to_be_deleted.discard(topic)
        ctx.topics_with_deletion_started.discard(topic)
        for path in (paths.topic_path(topic), paths.topic_config_path(topic),
                     paths.delete_topic_path(topic)):
            with contextlib.suppress(NoNodeError):
                await self.store.delete(path, recursive=True)
        log.info("[Controller id=%d] Deletion of topic %s successfully completed",
                 self.broker_id, topic)

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
            with contextlib.suppress(NoNodeError):
                await self.store.delete(path)
        changed = {tp for tp in changed if tp.topic in self.ctx.all_topics}
        for tp in changed:
            await self._refresh_leadership(tp)
        await self.reassignment.on_isr_change(changed)  # RAR in the ISR? (S-6.2)
        if changed:
            batch = self._batch()
            batch.add_update_metadata(self.ctx.live_or_shutting_down_broker_ids, changed)
            assert self.channel is not None
            batch.send(self.channel)


class _Call(ControllerEvent):
    """Run a coroutine function on the controller's queue (shutdown, tests)."""

    def __init__(self, fn: Any) -> None:
        object.__setattr__(self, "fn", fn)


class _DeletionStopped(ControllerEvent):
    """Every replica of a topic being deleted answered StopReplica(delete)."""

    def __init__(self, topic: str, ok: bool) -> None:
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "ok", ok)
