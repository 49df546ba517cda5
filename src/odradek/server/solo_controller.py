"""The controller of a one-broker cluster.

A standalone broker is its own controller: it wins `/controller`, bumps `/controller_epoch`, and
acts on the same coordination nodes a cluster controller does (S-5.7): a new
`/brokers/topics/<t>` gets state nodes with this broker as leader and ISR, a grown assignment gets
its new partitions, `/admin/delete_topics/<t>` removes the logs and then the nodes. On start-up
every partition it hosts is led anew with the leader epoch bumped, as an offline partition coming
back would be. All work runs as events on one queue, one at a time (S-5.5); watch callbacks only
enqueue.

The multi-broker controller (state machines, LeaderAndIsr to other brokers, failover) replaces
this class when brokers share a cluster; the znodes it writes are the same.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..coordination import paths
from ..coordination.store import BadVersionError, NodeExistsError, NoNodeError
from .admin_manager import topic_id_from_text
from .metadata_cache import PartitionInfo
from .topic_names import INTERNAL_TOPICS

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("odradek.controller")
state_change_log = logging.getLogger("state.change.logger")


class SoloController:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.epoch = 0
        self._queue: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._watches: list[Any] = []
        self._known_topics: set[str] = set()
        self._topic_watches: dict[str, Any] = {}
        self.ready = asyncio.Event()

    @property
    def store(self):  # noqa: ANN201
        return self.broker.store

    async def start(self) -> None:
        await self._elect()
        self._task = asyncio.create_task(self._run(), name="solo-controller")
        self._watches.append(await self.store.watch_children(
            paths.TOPICS, lambda _e: self._put(self._on_topics_changed)))
        self._watches.append(await self.store.watch_children(
            paths.DELETE_TOPICS, lambda _e: self._put(self._on_delete_topics)))
        self._put(self._on_topics_changed)
        self._put(self._on_delete_topics)
        done = asyncio.Event()

        async def mark() -> None:
            done.set()
        self._put(mark)
        await done.wait()
        self.ready.set()

    async def stop(self) -> None:
        for w in [*self._watches, *self._topic_watches.values()]:
            w.cancel()
        self._watches.clear()
        self._topic_watches.clear()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def _put(self, event: Callable[[], Awaitable[None]]) -> None:
        self._queue.put_nowait(event)

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await event()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Error processing a controller event")

    # -- election -----------------------------------------------------------------------------
    async def _elect(self) -> None:
        bid = self.broker.broker_id
        try:
            await self.store.create(paths.CONTROLLER, paths.encode_controller(bid),
                                    ephemeral=True)
        except NodeExistsError:
            data, _ = await self.store.get(paths.CONTROLLER)
            current = paths.decode_controller(data)
            raise RuntimeError(
                f"/controller is held by broker {current.broker_id if current else '?'}: a "
                "standalone broker needs a coordination store of its own") from None
        while True:
            found = await self.store.get_or_none(paths.CONTROLLER_EPOCH)
            try:
                if found is None:
                    self.epoch = 1
                    await self.store.create(paths.CONTROLLER_EPOCH,
                                            paths.encode_controller_epoch(1))
                else:
                    self.epoch = paths.decode_controller_epoch(found[0]) + 1
                    await self.store.set(paths.CONTROLLER_EPOCH,
                                         paths.encode_controller_epoch(self.epoch),
                                         version=found[1].version)
                break
            except (NodeExistsError, BadVersionError):
                continue
        self.broker.metadata_cache.controller_id = bid
        log.info("Broker %d became the controller with epoch %d", bid, self.epoch)

    # -- topics ---------------------------------------------------------------------------------
    async def _on_topics_changed(self) -> None:
        topics = set(await self.store.get_children(paths.TOPICS))
        for topic in sorted(topics - self._known_topics):
            self._known_topics.add(topic)
            self._topic_watches[topic] = await self.store.watch_data(
                paths.topic_path(topic),
                lambda _e, t=topic: self._put(lambda: self._on_partitions_changed(t)))
            await self._on_partitions_changed(topic)
        for topic in self._known_topics - topics:
            self._forget(topic)

    def _forget(self, topic: str) -> None:
        self._known_topics.discard(topic)
        watch = self._topic_watches.pop(topic, None)
        if watch is not None:
            watch.cancel()

    async def _on_partitions_changed(self, topic: str) -> None:
        found = await self.store.get_or_none(paths.topic_path(topic))
        if found is None:
            return
        assignment = paths.decode_topic_assignment(found[0])
        topic_id = topic_id_from_text(assignment.topic_id)
        overrides = await self._read_topic_config(topic)
        self.broker.set_topic_overrides(topic, overrides)
        cache = self.broker.metadata_cache
        known = cache.topic(topic)
        for partition, replicas in sorted(assignment.partitions.items()):
            if known is not None and partition in known.partitions and \
                    self._hosted(topic, partition):
                continue
            await self._online_partition(topic, topic_id, partition, list(replicas))

    async def _read_topic_config(self, topic: str) -> dict[str, str]:
        found = await self.store.get_or_none(paths.topic_config_path(topic))
        return paths.decode_entity_config(found[0]) if found else {}

    def _hosted(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.broker.replica_manager.partitions

    async def _online_partition(self, topic: str, topic_id: Any, partition: int,
                                replicas: list[int]) -> None:
        """OfflinePartition/NewPartition -> OnlinePartition with this broker as leader."""
        bid = self.broker.broker_id
        state_path = paths.partition_state_path(topic, partition)
        while True:
            found = await self.store.get_or_none(state_path)
            old = paths.decode_partition_state(found[0]) if found else None
            live = bid in replicas
            leader = bid if live else -1
            epoch = 0 if old is None else old.leader_epoch + 1
            isr = (bid,) if live else (old.isr if old else ())
            new = paths.LeaderIsrAndControllerEpoch(leader, epoch, isr, self.epoch)
            try:
                if found is None:
                    await self.store.create(state_path, paths.encode_partition_state(new),
                                            makepath=True)
                    version = 0
                else:
                    stat = await self.store.set(state_path, paths.encode_partition_state(new),
                                                version=found[1].version)
                    version = stat.version
                break
            except (NodeExistsError, BadVersionError):
                continue  # the node moved under us: read it again (S-4.2)
        before = "NewPartition" if old is None else "OfflinePartition"
        if live:
            self.broker.replica_manager.make_leader(topic, partition, epoch, list(isr), replicas)
            after = "OnlinePartition"
        else:
            after = "OfflinePartition"
        state_change_log.info(
            "[Controller id=%d epoch=%d] Partition %s-%d state changed from %s to %s with "
            "leader=%d leader_epoch=%d isr=%s", bid, self.epoch, topic, partition, before, after,
            leader, epoch, list(isr))
        self.broker.metadata_cache.update_partition(
            topic, topic_id, partition,
            PartitionInfo(leader, epoch, replicas, list(isr), zk_version=version,
                          controller_epoch=self.epoch),
            internal=topic in INTERNAL_TOPICS)

    # -- deletion ---------------------------------------------------------------------------------
    async def _on_delete_topics(self) -> None:
        try:
            queued = await self.store.get_children(paths.DELETE_TOPICS)
        except NoNodeError:
            return
        for topic in queued:
            await self._delete_topic(topic)

    async def _delete_topic(self, topic: str) -> None:
        bid = self.broker.broker_id
        found = await self.store.get_or_none(paths.topic_path(topic))
        if found is not None:
            for partition in sorted(paths.decode_topic_assignment(found[0]).partitions):
                self.broker.replica_manager.stop_replica(topic, partition, delete=True)
                state_change_log.info(
                    "[Controller id=%d epoch=%d] Partition %s-%d state changed from "
                    "OnlinePartition to NonExistentPartition (topic deletion)",
                    bid, self.epoch, topic, partition)
            await self.store.delete(paths.topic_path(topic), recursive=True)
        for path in (paths.topic_config_path(topic), paths.delete_topic_path(topic)):
            try:
                await self.store.delete(path, recursive=True)
            except NoNodeError:
                pass
        self._forget(topic)
        self.broker.metadata_cache.remove_topic(topic)
        self.broker.set_topic_overrides(topic, None)
        log.info("Deleted topic %s", topic)
