"""Topic deletion (Kafka's TopicDeletionManager, S-5.7).

An admin queues a topic under ``/admin/delete_topics``; the controller takes it out of service
(partitions OfflinePartition, replicas OfflineReplica then ReplicaDeletionStarted, UpdateMetadata
with leader -2), sends StopReplica with deletion to every replica, and once all answered removes
the topic's znodes (fenced, zk_client.py). A deletion waits while a replica's broker is down or
a partition is being reassigned; a failed replica deletion is retried at the next trigger.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ..coordination import paths
from ..coordination.store import NoNodeError
from .channel import RequestSender
from .context import ControllerContext
from .events import ControllerEvent
from .partition_states import PartitionState
from .replica_states import ReplicaState
from .state_machines import PartitionStateMachine, ReplicaStateMachine
from .zk_client import ControllerZkClient

__all__ = ["TopicDeletionManager", "TopicDeletionStopped"]

log = logging.getLogger("odradek.controller")
P = PartitionState
R = ReplicaState


@dataclass(frozen=True)
class TopicDeletionStopped(ControllerEvent):
    """Every replica of a topic being deleted answered StopReplica(delete) (``ok``: all
    without error)."""

    topic: str = ""
    ok: bool = False


@dataclass(eq=False, repr=False)
class TopicDeletionManager:
    """Runs topic deletions on the controller's event loop (every method is called from an
    event, except :meth:`cancel`)."""

    broker_id: int
    ctx: ControllerContext
    zk: ControllerZkClient
    partitions: PartitionStateMachine
    replicas: ReplicaStateMachine
    requests: RequestSender
    put_event: Callable[[ControllerEvent], None]
    forget_topic: Callable[[str], None]
    delete_topic_enable: bool
    tasks: set[asyncio.Task[None]] = field(init=False, default_factory=set)

    def cancel(self) -> None:
        """Stop waiting for StopReplica answers (the controller resigns)."""
        for t in list(self.tasks):
            t.cancel()

    async def on_topic_deletion(self) -> None:
        """``/admin/delete_topics`` changed (or a deletion may resume): queue the topics listed
        and start the deletions that can run."""
        ctx = self.ctx
        try:
            queued = set(await self.zk.store.get_children(paths.DELETE_TOPICS))
        except NoNodeError:
            return
        for topic in sorted(queued):
            if topic not in ctx.all_topics:
                await self.zk.delete(paths.delete_topic_path(topic))
                continue
            if not self.delete_topic_enable:
                log.info("Removing %s from the deletion queue: delete.topic.enable is false",
                         topic)
                await self.zk.delete(paths.delete_topic_path(topic))
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
                # resumes its deletion when the move completes (reassignment.py).
                log.info("Deletion of topic %s waits for its partition reassignment", topic)
                continue
            await self._start(topic)

    async def _start(self, topic: str) -> None:
        ctx = self.ctx
        ctx.begin_topic_deletion([topic])
        batch = self.requests.new_batch()
        partitions = sorted(ctx.partitions_for_topic(topic))
        batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, partitions)
        for tp in partitions:
            self.partitions.transition(tp, P.OfflinePartition)
            replicas = ctx.partition_replica_assignment(tp)
            self.replicas.transition(tp, replicas, R.OfflineReplica)
            self.replicas.transition(tp, replicas, R.ReplicaDeletionStarted)
            batch.add_stop_replica(ctx.partition_replica_assignment(tp), tp, delete=True,
                                   leader_epoch=-2)
        futures = self.requests.send(batch)

        async def await_responses() -> None:
            # A request the channel dropped (its broker removed) is a cancelled future: that
            # replica's deletion failed. The task's own cancellation (the controller resigns,
            # `cancel`) ends it: swallowed, the task went on waiting for answers nothing would
            # give, and the controller's event loop outlived it.
            answers = await asyncio.gather(*futures, return_exceptions=True)
            ok = not any(isinstance(a, BaseException) or getattr(a, "error_code", 0)
                         for a in answers)
            self.put_event(TopicDeletionStopped(topic=topic, ok=ok))
        task = asyncio.create_task(await_responses())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def on_stopped(self, event: TopicDeletionStopped) -> None:
        """The replicas answered: complete the deletion, or mark it to be retried."""
        topic, ok = event.topic, event.ok
        ctx = self.ctx
        partitions = sorted(ctx.partitions_for_topic(topic))
        if not ok:
            ctx.topics_with_deletion_started.discard(topic)
            for tp in partitions:
                self.replicas.transition(tp, ctx.partition_replica_assignment(tp),
                                         R.ReplicaDeletionIneligible)
            log.warning("Deletion of topic %s failed on some replica; it will be retried", topic)
            return
        for tp in partitions:
            replicas = ctx.partition_replica_assignment(tp)
            self.replicas.transition(tp, replicas, R.ReplicaDeletionSuccessful)
            self.replicas.transition(tp, replicas, R.NonExistentReplica)
            self.partitions.transition(tp, P.NonExistentPartition)
        self.forget_topic(topic)
        ctx.topics_to_be_deleted.discard(topic)
        ctx.topics_with_deletion_started.discard(topic)
        for path in (paths.topic_path(topic), paths.topic_config_path(topic),
                     paths.delete_topic_path(topic)):
            await self.zk.delete_recursive(path)
        log.info("[Controller id=%d] Deletion of topic %s successfully completed",
                 self.broker_id, topic)
