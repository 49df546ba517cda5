"""The replica manager's three purgatories (Kafka's delayedProducePurgatory,
delayedFetchPurgatory and delayedDeleteRecordsPurgatory), each timed by its timing wheel's
driver (runtime/timer.py), and what a change of a partition completes in them: Kafka's
DelayedOperations of a partition, told by the appends, reads and state changes that may satisfy
a waiting request (S-3.6, S-8.2; docs/design.md).

A consumer's waiting fetch is watched under each of its partitions; a follower's under one key
per fetching replica (``FollowerFetchKey``), which a change of any partition re-checks for that
partition only.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...common import TopicPartition
from ...runtime.purgatory import DelayedOperationPurgatory
from ...runtime.timer import AsyncTimerDriver, Timer
from .delayed_delete_records import DelayedDeleteRecords
from .delayed_fetch import DelayedFetch, FollowerFetchKey
from .delayed_produce import DelayedProduce


class ReplicaPurgatories:
    def __init__(self) -> None:
        self.produce: DelayedOperationPurgatory[DelayedProduce] = \
            DelayedOperationPurgatory("Produce", Timer())
        self.fetch: DelayedOperationPurgatory[DelayedFetch] = \
            DelayedOperationPurgatory("Fetch", Timer())
        self.delete_records: DelayedOperationPurgatory[DelayedDeleteRecords] = \
            DelayedOperationPurgatory("DeleteRecords", Timer())
        self._drivers = [AsyncTimerDriver(self.produce.timer), AsyncTimerDriver(self.fetch.timer),
                         AsyncTimerDriver(self.delete_records.timer)]
        # the purgatory key of each replica that has fetched from this leader (a handful)
        self._follower_fetch_keys: dict[int, FollowerFetchKey] = {}

    def start(self) -> None:
        for d in self._drivers:
            d.start()

    def shutdown(self) -> None:
        for d in self._drivers:
            d.stop()
        self.produce.shutdown()
        self.fetch.shutdown()
        self.delete_records.shutdown()

    def watch_fetch(self, op: DelayedFetch, replica_id: int,
                    partitions: Iterable[TopicPartition]) -> None:
        """A fetch that must wait, its first check done (the read that made it wait: nothing
        can move before it is watched): a follower's under its one key, a consumer's under
        each of its partitions."""
        if replica_id >= 0:
            key = self._follower_fetch_keys.get(replica_id)
            if key is None:
                key = self._follower_fetch_keys[replica_id] = FollowerFetchKey(replica_id)
            self.fetch.try_complete_else_watch(op, [key], tried=True)
        else:
            self.fetch.try_complete_else_watch(op, list(partitions), tried=True)

    def check_fetches(self, tp: TopicPartition) -> None:
        """`tp`'s state moved: waiting consumer fetches of it (keyed by partition) and every
        follower's waiting fetch (keyed by replica; one that does not fetch `tp` ignores it)
        re-check it."""
        purgatory = self.fetch
        purgatory.check_and_complete(tp)
        for key in self._follower_fetch_keys.values():
            purgatory.check_and_complete(key, tp)

    def check_produce_and_fetch(self, tp: TopicPartition) -> None:
        """An append, a HW, ISR or role change of `tp`: its waiting fetches and produces
        re-check at once."""
        self.check_fetches(tp)
        self.produce.check_and_complete(tp)

    # -- Partition.delayed_operations (told by the ISR tasks, server/replication/isr.py, and
    #    the replica fetchers, server/replication/fetcher.py) ---------------------------------

    def on_high_watermark_moved(self, tp: TopicPartition) -> None:
        """An ISR write moved the HW (or the ISR): waiting produces and fetches re-check."""
        self.check_produce_and_fetch(tp)

    def on_follower_high_watermark_moved(self, tp: TopicPartition) -> None:
        """A fetch response moved this follower's HW (told by the replica fetcher once per
        response, Kafka 3.4's ReplicaFetcherThread.completeDelayedFetchRequests): the consumer
        fetches waiting on `tp` here (KIP-392, keyed by partition) re-check, as Kafka 3.4's
        ReplicaManager.completeDelayedFetchRequests does. No replica fetches from a follower,
        so the follower keys are left alone."""
        self.fetch.check_and_complete(tp)

    def on_leadership_lost(self, tp: TopicPartition) -> None:
        """The state node names another leader: waiting produces and DeleteRecords answer
        NOT_LEADER_OR_FOLLOWER."""
        self.check_produce_and_fetch(tp)
        self.delete_records.check_and_complete(tp)


__all__ = ["ReplicaPurgatories"]
