"""Controller events and the single-queue event manager (Kafka 1.1's controller design, S-5.5).

Every input of the controller (coordination watches, broker requests, timers) becomes one of
the events below, put on one queue and processed one at a time by one asyncio task, so the
controller's state needs no locks.  Watch callbacks only :meth:`ControllerEventManager.put`.
This mirrors Kafka's ``ControllerEventManager`` / ``ControllerEvent`` (``KafkaController.scala``),
including ``preempt``: events still queued when the manager is cleared (session expiry,
resignation) are told so, e.g. a pending controlled shutdown is answered "controller moved".
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from odradek.controller.context import TopicPartition

__all__ = [
    "AutoPreferredReplicaLeaderElection",
    "BrokerChange",
    "BrokerModifications",
    "ControlledShutdown",
    "ControllerChange",
    "ControllerEvent",
    "ControllerEventManager",
    "ControllerMovedError",
    "ControllerState",
    "Expire",
    "IsrChangeNotification",
    "LeaderAndIsrResponseReceived",
    "LogDirEventNotification",
    "PartitionModifications",
    "PartitionReassignment",
    "PreferredReplicaLeaderElection",
    "Reelect",
    "RegisterBrokerAndReelect",
    "StaleBrokerEpochError",
    "Startup",
    "TopicChange",
    "TopicDeletion",
    "TopicDeletionStopReplicaResponseReceived",
    "UpdateMetadataResponseReceived",
]

log = logging.getLogger(__name__)

NOT_CONTROLLER = 41
STALE_BROKER_EPOCH = 77
_NO_PARTITION = TopicPartition("", -1)


class ControllerMovedError(Exception):
    """This broker is no longer the controller (Kafka's ``ControllerMovedException``)."""

    error_code = NOT_CONTROLLER


class StaleBrokerEpochError(Exception):
    """A broker's request carries an older broker epoch than the controller holds for it
    (KIP-380, Kafka's ``StaleBrokerEpochException``): it was sent before the broker last
    registered, e.g. by an instance since restarted."""

    error_code = STALE_BROKER_EPOCH


class ControllerState(Enum):
    """What the controller is busy with (Kafka's ``ControllerState``, for metrics and logs)."""

    Idle = 0
    ControllerChange = 1
    BrokerChange = 2
    TopicChange = 3
    TopicDeletion = 4
    AlterPartitionReassignment = 5
    AutoLeaderBalance = 6
    ManualLeaderBalance = 7
    ControlledShutdown = 8
    IsrChange = 9
    LogDirChange = 20
    LeaderAndIsrResponseReceived = 10
    ControllerShutdown = 12
    UpdateMetadataResponseReceived = 16


@dataclass(frozen=True)
class ControllerEvent:
    """Base of all controller events; ``state`` says which :class:`ControllerState` it drives."""

    state: ClassVar[ControllerState] = ControllerState.Idle

    def preempt(self) -> None:
        """Called instead of processing when the event is dropped from the queue."""


def _fail(future: asyncio.Future[Any] | None, exc: BaseException) -> None:
    if future is not None and not future.done():
        future.set_exception(exc)


@dataclass(frozen=True)
class Startup(ControllerEvent):
    """Run for controller at broker start-up."""

    state: ClassVar[ControllerState] = ControllerState.ControllerChange


@dataclass(frozen=True)
class ControllerChange(ControllerEvent):
    """``/controller`` changed (created or its data changed): maybe resign."""

    state: ClassVar[ControllerState] = ControllerState.ControllerChange


@dataclass(frozen=True)
class Reelect(ControllerEvent):
    """``/controller`` was deleted: resign if needed, then run for election."""

    state: ClassVar[ControllerState] = ControllerState.ControllerChange


@dataclass(frozen=True)
class RegisterBrokerAndReelect(ControllerEvent):
    """New coordination session: register ``/brokers/ids/<id>`` again, then run for election."""

    state: ClassVar[ControllerState] = ControllerState.ControllerChange


@dataclass(frozen=True)
class Expire(ControllerEvent):
    """The coordination session expired: resign first (S-5.1)."""

    state: ClassVar[ControllerState] = ControllerState.ControllerChange


@dataclass(frozen=True)
class BrokerChange(ControllerEvent):
    """Children of ``/brokers/ids`` changed: brokers started or died (S-4.2, S-4.3)."""

    state: ClassVar[ControllerState] = ControllerState.BrokerChange


@dataclass(frozen=True)
class BrokerModifications(ControllerEvent):
    """A live broker's ``/brokers/ids/<id>`` data changed (e.g. new endpoints)."""

    state: ClassVar[ControllerState] = ControllerState.BrokerChange
    broker_id: int = -1


@dataclass(frozen=True)
class TopicChange(ControllerEvent):
    """Children of ``/brokers/topics`` changed: topics created (S-5.7)."""

    state: ClassVar[ControllerState] = ControllerState.TopicChange


@dataclass(frozen=True)
class PartitionModifications(ControllerEvent):
    """``/brokers/topics/<topic>`` changed: partitions added (S-6.3)."""

    state: ClassVar[ControllerState] = ControllerState.TopicChange
    topic: str = ""


@dataclass(frozen=True)
class TopicDeletion(ControllerEvent):
    """Children of ``/admin/delete_topics`` changed (S-5.7)."""

    state: ClassVar[ControllerState] = ControllerState.TopicDeletion


@dataclass(frozen=True)
class TopicDeletionStopReplicaResponseReceived(ControllerEvent):
    """A broker answered a deleting StopReplica: replica deletion succeeded or failed."""

    state: ClassVar[ControllerState] = ControllerState.TopicDeletion
    replica_id: int = -1
    error_code: int = 0
    partition_errors: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionReassignment(ControllerEvent):
    """``/admin/reassign_partitions`` was created or changed (S-6.2)."""

    state: ClassVar[ControllerState] = ControllerState.AlterPartitionReassignment


@dataclass(frozen=True)
class PreferredReplicaLeaderElection(ControllerEvent):
    """``/admin/preferred_replica_election`` was created, or an admin asked (S-6.1).

    ``partitions`` ``None``: read the partitions from the znode (ZK-triggered); otherwise an
    ElectLeaders request, whose ``reply`` receives partition -> (error code, message, leader)
    (see controller/preferred_election.py).
    """

    state: ClassVar[ControllerState] = ControllerState.ManualLeaderBalance
    partitions: frozenset[TopicPartition] | None = None
    reply: asyncio.Future[dict[TopicPartition, Any]] | None = None
    election_type: int = 0
    """ElectLeaders' election type: 0 = PREFERRED, 1 = UNCLEAN (admin requests only)."""

    def preempt(self) -> None:
        _fail(self.reply, ControllerMovedError("Controller moved to another broker"))


@dataclass(frozen=True)
class AutoPreferredReplicaLeaderElection(ControllerEvent):
    """Timer: check the preferred leader imbalance (``auto.leader.rebalance.enable``, S-6.1)."""

    state: ClassVar[ControllerState] = ControllerState.AutoLeaderBalance


@dataclass(frozen=True)
class IsrChangeNotification(ControllerEvent):
    """Children of ``/isr_change_notification`` changed: leaders shrank/expanded ISRs."""

    state: ClassVar[ControllerState] = ControllerState.IsrChange


@dataclass(frozen=True)
class LogDirEventNotification(ControllerEvent):
    """Children of ``/log_dir_event_notification`` changed: a broker lost a log dir
    (KIP-112)."""

    state: ClassVar[ControllerState] = ControllerState.LogDirChange


@dataclass(frozen=True)
class ControlledShutdown(ControllerEvent):
    """A broker asks to shut down cleanly (S-4.4).

    ``reply`` receives the partitions the broker still leads (empty = done), or
    :class:`ControllerMovedError` if the event is preempted, or :class:`StaleBrokerEpochError`
    if ``broker_epoch`` (-1: unknown, never stale) is older than the broker's registration.
    """

    state: ClassVar[ControllerState] = ControllerState.ControlledShutdown
    broker_id: int = -1
    broker_epoch: int = -1
    reply: asyncio.Future[set[TopicPartition]] | None = None

    def preempt(self) -> None:
        _fail(self.reply, ControllerMovedError("Controller moved to another broker"))


@dataclass(frozen=True)
class LeaderAndIsrResponseReceived(ControllerEvent):
    """A broker answered a LeaderAndIsr request (the decoded response)."""

    state: ClassVar[ControllerState] = ControllerState.LeaderAndIsrResponseReceived
    broker_id: int = -1
    response: Any = None


@dataclass(frozen=True)
class UpdateMetadataResponseReceived(ControllerEvent):
    """A broker answered an UpdateMetadata request (the decoded response)."""

    state: ClassVar[ControllerState] = ControllerState.UpdateMetadataResponseReceived
    broker_id: int = -1
    response: Any = None


@dataclass(frozen=True)
class _ShutdownEventThread(ControllerEvent):
    state: ClassVar[ControllerState] = ControllerState.ControllerShutdown


Processor = Callable[[ControllerEvent], Awaitable[None] | None]


@dataclass
class _Queued:
    event: ControllerEvent
    enqueued_at: float
    spent: bool = False


class ControllerEventManager:
    """One asyncio queue, one task, events processed strictly one at a time, in order.

    ``process(event)`` may be a plain function or a coroutine function.  An exception it raises
    is logged and the manager goes on (Kafka: "Uncaught error processing event").  ``put`` is
    synchronous and safe from any callback running on the loop; from another thread (kazoo's
    watcher thread) use ``loop.call_soon_threadsafe(manager.put, event)``.
    """

    def __init__(self, process: Processor, *, name: str = "controller-event-thread",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._process = process
        self._name = name
        self._clock = clock
        self._queue: asyncio.Queue[_Queued] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.state: ControllerState = ControllerState.Idle
        self.processed_count = 0
        self.last_queue_time: float = 0.0
        """Seconds the last processed event waited in the queue (Kafka's EventQueueTimeMs)."""

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the consuming task on the running loop."""
        if self._task is not None:
            raise RuntimeError("event manager already started")
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def close(self) -> None:
        """Stop after the event being processed; queued events are preempted."""
        if self._closed:
            return
        self._closed = True
        self._preempt_queued()
        self._queue.put_nowait(_Queued(_ShutdownEventThread(), self._clock()))
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            await task

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    # ---- producers -----------------------------------------------------------------------

    def put(self, event: ControllerEvent) -> None:
        """Enqueue ``event`` (never blocks).  After :meth:`close` the event is preempted."""
        if self._closed:
            event.preempt()
            return
        self._queue.put_nowait(_Queued(event, self._clock()))

    def clear_and_put(self, event: ControllerEvent) -> None:
        """Drop (and preempt) every queued event, then enqueue ``event`` (Kafka: on Expire)."""
        self._preempt_queued()
        self.put(event)

    def qsize(self) -> int:
        return self._queue.qsize()

    def is_empty(self) -> bool:
        return self._queue.empty()

    async def join(self) -> None:
        """Wait until every event put so far has been processed (tests, shutdown)."""
        await self._queue.join()

    # ---- internals -----------------------------------------------------------------------

    def _preempt_queued(self) -> None:
        while True:
            try:
                queued = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                if not queued.spent:
                    queued.spent = True
                    queued.event.preempt()
            except Exception:
                log.exception("[%s] error preempting event %r", self._name, queued.event)
            finally:
                self._queue.task_done()

    async def _run(self) -> None:
        while True:
            queued = await self._queue.get()
            try:
                event = queued.event
                if isinstance(event, _ShutdownEventThread):
                    return
                if queued.spent:
                    continue
                queued.spent = True
                self.state = event.state
                self.last_queue_time = self._clock() - queued.enqueued_at
                try:
                    result = self._process(event)
                    if inspect.isawaitable(result):
                        await result
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("[%s] Uncaught error processing event %r", self._name, event)
                finally:
                    self.processed_count += 1
                    self.state = ControllerState.Idle
            finally:
                self._queue.task_done()
