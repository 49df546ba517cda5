"""A log dir gone offline on a running broker (KIP-112; docs/disk-faults.md): Kafka's
LogDirFailureHandler and the order of ReplicaManager.handleLogDirFailure.

The log dir failure channel reports a dir from any thread; the handling runs on the broker's
loop: the replica manager stops serving the dir's replicas (they go offline), the log manager
closes its logs, waiting requests of those partitions complete, and the controller is told with
a sequential ``/log_dir_event_notification/log_dir_event_<seq>`` node (Kafka's
propagateLogDirEvent), so that it moves leadership away. With no log dir left the broker stops
(``on_all_log_dirs_offline``), as Kafka halts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Set
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ...common import TopicPartition
from ...coordination import paths
from ...storage.errors import KafkaStorageError
from ...storage.log_manager import LogManager

if TYPE_CHECKING:
    from ...coordination.store import CoordinationStore

log = logging.getLogger("odradek.replica_manager")  # Kafka logs these from ReplicaManager


class OfflineReplicas(Protocol):
    """What a log dir failure changes in the replica manager: its partitions there go
    offline (Kafka's markPartitionOffline) and their waiting requests complete."""

    @property
    def offline_partitions(self) -> Set[TopicPartition]: ...

    def stop_serving_replicas_in_dir(self, log_dir: Path) -> list[TopicPartition]: ...

    def complete_offline(self, stopped: Iterable[TopicPartition],
                         closed: Iterable[TopicPartition]) -> None: ...


class LogDirFailureHandler:
    def __init__(self, broker_id: int, replicas: OfflineReplicas, log_manager: LogManager,
                 store: Callable[[], CoordinationStore | None],
                 on_all_log_dirs_offline: Callable[[], None]) -> None:
        self.broker_id = broker_id
        self.replicas = replicas
        self.log_manager = log_manager
        self._store = store
        self.on_all_log_dirs_offline = on_all_log_dirs_offline
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """From now on a log dir reported offline is handled on this loop, and so are the
        dirs that failed at start-up (Kafka's queue of offline dirs)."""
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        channel = self.log_manager.failure_channel
        channel.add_listener(self._on_log_dir_offline)
        for log_dir in channel.offline_log_dirs():
            self._on_log_dir_offline(log_dir)

    def shutdown(self) -> None:
        self.log_manager.failure_channel.remove_listener(self._on_log_dir_offline)
        for task in list(self._tasks):
            task.cancel()

    def _on_log_dir_offline(self, log_dir: Path) -> None:
        """The failure channel's listener (any thread): handled on the broker's loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            if asyncio.get_running_loop() is loop:
                loop.call_soon(self.handle_log_dir_failure, log_dir)
                return
        except RuntimeError:
            pass
        loop.call_soon_threadsafe(self.handle_log_dir_failure, log_dir)

    def handle_log_dir_failure(self, log_dir: Path, send_notification: bool = True) -> None:
        """Kafka's ReplicaManager.handleLogDirFailure: the dir's partitions stop fetching and
        go offline (KAFKA_STORAGE_ERROR from now on), the log manager closes their logs, the
        controller is told with a ``/log_dir_event_notification`` node (it moves leadership
        away), and waiting produces and fetches of those partitions complete. Every log dir
        offline: ``on_all_log_dirs_offline`` (the broker stops)."""
        log_dir = Path(log_dir).absolute()
        stopped = self.replicas.stop_serving_replicas_in_dir(log_dir)
        try:
            closed = self.log_manager.handle_log_dir_failure(log_dir)
        except KafkaStorageError:
            log.error("[ReplicaManager broker=%d] Shutting down the broker: every log dir "
                      "of %s has failed", self.broker_id, self.log_manager.log_dirs)
            self.on_all_log_dirs_offline()
            return
        self.replicas.complete_offline(stopped, closed)
        log.warning("[ReplicaManager broker=%d] Partitions %s are offline due to the failure "
                    "of log dir %s", self.broker_id,
                    ", ".join(f"{t}-{i}" for t, i in sorted(self.replicas.offline_partitions)),
                    log_dir)
        if send_notification:
            task = asyncio.ensure_future(self._propagate_log_dir_event())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _propagate_log_dir_event(self) -> None:
        """Kafka's propagateLogDirEvent: a sequential ``log_dir_event_<seq>`` node naming
        this broker; retried while the store is unreachable."""
        delay = 0.1
        while True:
            store = self._store()
            if store is not None:
                try:
                    await store.create(paths.log_dir_event_path(),
                                       paths.encode_log_dir_event(self.broker_id),
                                       sequence=True)
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("[ReplicaManager broker=%d] Could not write the log dir event "
                                "notification: %s; retrying", self.broker_id, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


__all__ = ["LogDirFailureHandler", "OfflineReplicas"]
