"""ISR changes made by partition leaders (S-3.4): Kafka's ISR expiration task and ZkIsrManager.

* Shrink: every `replica.lag.time.max.ms` / 2, each partition led here drops the ISR followers
  that have not caught up with its LEO within `replica.lag.time.max.ms`.
* Expand: a follower whose fetch reaches the HW (and the current leader epoch's start offset)
  joins the ISR (`ReplicaManager` calls `expand_isr` from the follower's fetch).
* Each change is one write of the partition state node, conditional on the version the
  partition holds (`Partition.zk_version`, from LeaderAndIsr or our previous write). If the
  version moved, the controller changed the state: the update is skipped ("Cached zkVersion ...
  not equal to that in zookeeper") and, if the node names another leader, the partition is
  fenced — it refuses produces and answers waiting acks=all produces NOT_LEADER_OR_FOLLOWER
  until the controller's LeaderAndIsr arrives (S-4.1: a paused old leader never acknowledges).
* Changed partitions are announced to the controller with a sequential
  `/isr_change_notification/isr_change_<seq>` node, batched: written once no change has come
  for `linger_ms`, or after `max_delay_ms` at the latest (Kafka's 5 s / 60 s, scaled down so an
  ISR change reaches every broker's metadata within a few hundred milliseconds).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ...common import TopicPartition
from ...common.state_change import StateChangeLogger
from ...coordination import paths
from ...coordination.store import BadVersionError, CoordinationError, NoNodeError
from ...metrics.stats import IsrStats
from ...runtime.scheduler import schedule_periodically
from .partition import Partition, fmt_isr

if TYPE_CHECKING:
    from ...coordination.store import CoordinationStore

log = logging.getLogger("odradek.isr")



class IsrChanges(Protocol):
    """The ISR tasks as the replica manager drives them (as Kafka's ReplicaManager drives its
    AlterIsrManager): started and stopped with it, told of a follower that caught up.
    `IsrChangeManager` is the one."""

    def start(self) -> None: ...

    def expand_isr(self, p: Partition, new_isr: Iterable[int], follower: int) -> None: ...

    def shutdown(self) -> None: ...


class IsrChangeManager:
    def __init__(self, broker_id: int, partitions: Mapping[TopicPartition, Partition],
                 store: Callable[[], CoordinationStore | None], clock: Callable[[], int], *,
                 replica_lag_time_max_ms: int,
                 check_interval_ms: int = 100, linger_ms: int = 100,
                 max_delay_ms: int = 500, isr_stats: IsrStats | None = None) -> None:
        self.broker_id = broker_id
        self.isr_stats = isr_stats if isr_stats is not None else IsrStats()
        # the partitions this broker hosts, as the replica manager keeps them (it alone
        # changes them); the waiting requests of each are its `delayed_operations`
        self.partitions = partitions
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.store = store
        self.clock = clock
        self.check_interval_ms = check_interval_ms
        self.linger_ms = linger_ms
        self.max_delay_ms = max_delay_ms
        self.state_change = StateChangeLogger(broker_id)
        self.isr_change_set: set[TopicPartition] = set()
        # set while isr_change_set is not empty: the propagation task sleeps otherwise
        self._changes_pending = asyncio.Event()
        self.last_isr_change_ms = clock()
        self.last_isr_propagation_ms = clock()
        self._loops: list[asyncio.Task[None]] = []
        self._inflight: set[asyncio.Task[Any]] = set()

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        lag = self.replica_lag_time_max_ms
        self._loops = [
            self._every(f"isr-expiration-{self.broker_id}", max(lag // 2, 1),
                        self.maybe_shrink_isrs),
            self._every(f"isr-change-propagation-{self.broker_id}", self.check_interval_ms,
                        self.maybe_propagate_isr_changes, pending=self._changes_pending),
        ]

    def _every(self, name: str, interval_ms: int, fn: Callable[[], None],
               pending: asyncio.Event | None = None) -> asyncio.Task[None]:
        task = schedule_periodically(name, interval_ms, fn, logger=log, pending=pending)
        assert task is not None, f"{name}: interval {interval_ms} ms"
        return task

    def shutdown(self) -> None:
        for t in [*self._loops, *self._inflight]:
            t.cancel()
        self._loops.clear()
        self._inflight.clear()

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    # -- decisions ------------------------------------------------------------------------------

    def maybe_shrink_isrs(self) -> None:
        """Kafka's maybeShrinkIsr over every partition led here."""
        now = self.clock()
        for p in list(self.partitions.values()):
            new_isr, out = p.isr_to_shrink_to(now)
            if not out:
                continue
            lagging = " ".join(f"(brokerId: {r}, endOffset: "
                               f"{p.remote[r].log_end_offset if r in p.remote else -1})"
                               for r in sorted(out))
            self._submit(p, new_isr, (
                f"Shrinking ISR of partition {p} from {fmt_isr(p.isr)} to {fmt_isr(new_isr)}. "
                f"Leader: (highWatermark: {p.high_watermark}, endOffset: "
                f"{p.log_end_offset}). Out of sync replicas: {lagging}."))

    def expand_isr(self, p: Partition, new_isr: Iterable[int], follower: int) -> None:
        new_isr = tuple(new_isr)
        self._submit(p, new_isr, (
            f"Expanding ISR of partition {p} from {fmt_isr(p.isr)} to {fmt_isr(new_isr)} "
            f"(follower {follower} caught up to the high watermark {p.high_watermark})"))

    def _submit(self, p: Partition, new_isr: tuple[int, ...], message: str) -> None:
        if p.isr_update_in_flight or not p.is_leader:
            return
        p.begin_isr_update(new_isr)
        self._spawn(self._update_isr(p, new_isr, p.leader_epoch, p.zk_version, message),
                    f"isr-update-{p}")

    # -- the state node write -------------------------------------------------------------------

    def _prefix(self, p: Partition) -> str:
        return f"[Partition {p} broker={self.broker_id}]"

    def _still_current(self, p: Partition, new_isr: tuple[int, ...], epoch: int,
                       version: int) -> bool:
        """No LeaderAndIsr (or StopReplica) came while the write was in flight."""
        return (self.partitions.get((p.topic, p.index)) is p
                and p.is_leader and p.leader_epoch == epoch and p.zk_version == version
                and p.pending_isr == new_isr)

    async def _update_isr(self, p: Partition, new_isr: tuple[int, ...], epoch: int,
                          version: int, message: str) -> None:
        store = self.store()
        path = paths.partition_state_path(p.topic, p.index)
        if store is None:
            self._drop(p, new_isr, epoch, version)
            return
        try:
            data, stat = await store.get(path)
            current = paths.decode_partition_state(data)
            if not self._still_current(p, new_isr, epoch, version):
                self._drop(p, new_isr, epoch, version)
                return
            if current is None or stat.version != version or current.leader != self.broker_id \
                    or current.leader_epoch != epoch:
                self._skip(p, new_isr, epoch, version, current, stat.version)
                return
            self.state_change.broker(current.controller_epoch, f"{self._prefix(p)} {message}")
            new = paths.LeaderIsrAndControllerEpoch(self.broker_id, epoch, new_isr,
                                                    current.controller_epoch)
            new_stat = await store.set(path, paths.encode_partition_state(new), version)
        except BadVersionError:
            found = await self._read(store, path)
            if found is None:
                self._drop(p, new_isr, epoch, version)
                return
            current, zk_version = found
            if current is not None and current.leader == self.broker_id \
                    and current.leader_epoch == epoch and set(current.isr) == set(new_isr):
                # Our own write, whose answer was lost on the way (Kafka's
                # checkLeaderAndIsrZkData): take it as done.
                self._committed(p, new_isr, epoch, version, zk_version, current.controller_epoch)
            elif self._still_current(p, new_isr, epoch, version):
                self._skip(p, new_isr, epoch, version, current, zk_version)
            else:
                self._drop(p, new_isr, epoch, version)
            return
        except NoNodeError:
            self._drop(p, new_isr, epoch, version)  # the topic is being deleted
            return
        except (CoordinationError, OSError, ValueError) as exc:
            log.warning("%s Could not write the ISR %s to %s: %s", self._prefix(p),
                        fmt_isr(new_isr), path, exc)
            self._drop(p, new_isr, epoch, version)
            return
        self._committed(p, new_isr, epoch, version, new_stat.version, current.controller_epoch)

    @staticmethod
    def _drop(p: Partition, new_isr: tuple[int, ...], epoch: int, version: int) -> None:
        """Forget a proposal overtaken by a LeaderAndIsr (which already reset it) or failed —
        only if it is still the partition's pending one: the same ISR at the same leader epoch
        and state version. A stale write of an earlier epoch must not abort a newer proposal of
        the same ISR (that proposal's write would then succeed in the store but be discarded
        here, leaving the leader with an ISR and version the store no longer has)."""
        if p.pending_isr == new_isr and p.leader_epoch == epoch and p.zk_version == version:
            p.abort_isr_update()

    async def _read(self, store: CoordinationStore, path: str
                    ) -> tuple[paths.LeaderIsrAndControllerEpoch | None, int] | None:
        try:
            found = await store.get_or_none(path)
            if found is None:
                return None
            return paths.decode_partition_state(found[0]), found[1].version
        except (CoordinationError, OSError, ValueError):
            return None

    def _committed(self, p: Partition, new_isr: tuple[int, ...], epoch: int, version: int,
                   new_version: int, controller_epoch: int) -> None:
        tp = (p.topic, p.index)
        # Announce even if a LeaderAndIsr overtook us: the controller re-reads the node.
        self.isr_change_set.add(tp)
        self._changes_pending.set()
        self.last_isr_change_ms = self.clock()
        # The write is in the store: apply it unless a LeaderAndIsr (new epoch or version) or
        # a StopReplica replaced what it was based on, even if the proposal is no longer
        # pending, so memory never holds an older ISR and version than the store.
        if not (self.partitions.get(tp) is p and p.is_leader
                and p.leader_epoch == epoch and p.zk_version == version):
            self._drop(p, new_isr, epoch, version)
            return
        self.isr_stats.record_isr_change(p.isr, new_isr)  # IsrShrinksPerSec, IsrExpandsPerSec
        p.complete_isr_update(new_isr, new_version, controller_epoch)
        self.state_change.broker(controller_epoch, (
            f"{self._prefix(p)} ISR of partition {p} updated to {fmt_isr(new_isr)} and "
            f"zkVersion updated to {new_version}"))
        p.delayed_operations.on_high_watermark_moved(tp)

    def _skip(self, p: Partition, new_isr: tuple[int, ...], epoch: int, version: int,
              current: paths.LeaderIsrAndControllerEpoch | None, zk_version: int) -> None:
        """The controller changed the state node: skip the update; fence a deposed leader."""
        controller_epoch = current.controller_epoch if current is not None else -1
        self.state_change.broker(controller_epoch, (
            f"{self._prefix(p)} Cached zkVersion {version} not equal to that in zookeeper "
            f"({zk_version}), skip updating ISR of partition {p} to {fmt_isr(new_isr)}"),
            logging.WARNING)
        p.abort_isr_update()
        if current is None or current.leader != self.broker_id:
            leader = current.leader if current is not None else -1
            new_epoch = current.leader_epoch if current is not None else -1
            self.state_change.broker(controller_epoch, (
                f"{self._prefix(p)} Partition {p} is now led by {leader} at leader epoch "
                f"{new_epoch} (ours: {epoch}); refusing writes until the controller's "
                f"LeaderAndIsr arrives"), logging.WARNING)
            p.fence()
            p.delayed_operations.on_leadership_lost((p.topic, p.index))

    # -- notifications to the controller --------------------------------------------------------

    def maybe_propagate_isr_changes(self) -> None:
        """Kafka's maybePropagateIsrChanges: announce the changed partitions once no change
        came for `linger_ms`, or `max_delay_ms` after the last announcement."""
        now = self.clock()
        if self.isr_change_set and (
                self.last_isr_change_ms + self.linger_ms < now
                or self.last_isr_propagation_ms + self.max_delay_ms < now):
            batch = sorted(self.isr_change_set)
            self.isr_change_set.clear()
            self._changes_pending.clear()
            self.last_isr_propagation_ms = now
            self._spawn(self._propagate(batch), f"isr-change-notification-{self.broker_id}")

    async def _propagate(self, batch: list[TopicPartition]) -> None:
        store = self.store()
        try:
            if store is None:
                raise CoordinationError("no coordination store")
            await store.create(paths.isr_change_path(),
                               paths.encode_isr_change_notification(batch), sequence=True)
        except (CoordinationError, OSError) as exc:
            log.warning("Could not announce ISR changes of %s: %s; will retry",
                        ", ".join(f"{t}-{p}" for t, p in batch), exc)
            self.isr_change_set.update(batch)
            self._changes_pending.set()
