"""The idempotent producer's bookkeeping (KIP-98), the part of Kafka's client
``TransactionManager`` that every idempotent producer has: the producer id and epoch
(``ProducerIdAndEpoch``), and each partition's next sequence number (``TxnPartitionMap``).

A batch gets its producer id, epoch and base sequence when it is first drained for sending, and
keeps them through retries, so that the broker recognises a resent batch as a duplicate. A
batch with a sequence that fails for good leaves a gap: the broker would refuse the partition's
later sequences, so the producer asks for a new producer id once nothing is in flight
(UNKNOWN_PRODUCER_ID asks for one too). Pure: InitProducerId itself is the sender's.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from .errors import ConfigException, KafkaError, UnsupportedVersionError
from .producer_batch import ProducerBatch
from .types import TopicPartition

log = logging.getLogger("odradek.client.producer")


def idempotence_enabled(cfg: dict[str, Any], acks: int, max_in_flight: int, retries: int,
                        transactional_id: str | None) -> bool:
    """Whether the producer is idempotent: `enable.idempotence` (on by default, as in Kafka 3+),
    unless explicit settings conflict with it (Kafka 3.2+); a transactional producer must be."""
    if not cfg["enable.idempotence"]:
        if transactional_id is not None:
            raise ConfigException("Cannot set a transactional.id without also enabling "
                                  "idempotence.")
        return False
    problems = []
    if acks != -1:
        problems.append("acks must be all")
    if max_in_flight > 5:
        problems.append("max.in.flight.requests.per.connection must be at most 5")
    if retries <= 0:
        problems.append("retries must be positive")
    if problems:
        if transactional_id is not None:
            raise ConfigException("transactional.id is set, which needs idempotence: "
                                  + "; ".join(problems))
        if "enable.idempotence" in cfg["_explicit"]:
            raise ValueError("enable.idempotence=true: " + "; ".join(problems))
        return False  # Kafka 3.2+: the default gives way to explicit conflicting settings
    return True


@dataclass(slots=True)
class PartitionSequence:
    next_sequence: int = 0
    gap: bool = False  # a sequenced batch failed for good: later sequences will be refused
    last_acked_offset: int = -1  # the last offset of the last batch acknowledged (this id)


class IdempotenceState:
    """One producer's id, epoch and sequence numbers. `transactional`: the id comes from
    init_transactions() (the transaction manager), never from the sender's InitProducerId."""

    def __init__(self, enabled: bool, transactional: bool, explicit: bool) -> None:
        self.enabled = enabled
        self.transactional = transactional
        self.explicit = explicit  # enable.idempotence was set, not defaulted
        self.producer_id = -1
        self.producer_epoch = -1
        self.need_pid = enabled and not transactional
        self.sequences: dict[TopicPartition, PartitionSequence] = {}

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch: every partition's sequences start again at 0."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        for seq in self.sequences.values():
            seq.next_sequence = 0
            seq.gap = False
            seq.last_acked_offset = -1

    def has_gap(self, tp: TopicPartition) -> bool:
        seq = self.sequences.get(tp)
        return seq is not None and seq.gap

    def acked(self, b: ProducerBatch, base_offset: int) -> None:
        """`b` was acknowledged at `base_offset` (Kafka's updateLastAckedOffset)."""
        if self.enabled and base_offset >= 0 and b.producer_id == self.producer_id:
            seq = self._sequence(b.tp)
            seq.last_acked_offset = max(seq.last_acked_offset, base_offset + b.count - 1)

    def state_removed(self, tp: TopicPartition, log_start_offset: int) -> bool:
        """UNKNOWN_PRODUCER_ID explained by the log's head being removed (retention,
        DeleteRecords) with the producer's state: every record of the partition acknowledged under
        this producer id lies below the log start offset (Kafka's canRetry: lastAckedOffset <
        logStartOffset)."""
        seq = self.sequences.get(tp)
        return log_start_offset >= 0 and (-1 if seq is None else seq.last_acked_offset) \
            < log_start_offset

    def sequence_gap(self, tp: TopicPartition) -> None:
        """A batch of `tp` with a sequence failed for good: start a new producer id."""
        self.need_pid = True
        self._sequence(tp).gap = True

    def stale(self, b: ProducerBatch) -> bool:
        """A batch sent under an older producer id or epoch of this idempotent producer, its
        outcome unknown (a retry): resent under the new id it would be appended again if the
        broker had written it, so Kafka's Sender drops it ("the producer id changed ... in the
        mean time. This batch will be dropped", Kafka 2.4's Sender.completeBatch; 2.5+ keep a
        sequenced batch's producer id and epoch, RecordAccumulator.drain)."""
        return (self.enabled and not self.transactional and b.base_sequence >= 0
                and (b.producer_id, b.producer_epoch) != (self.producer_id,
                                                          self.producer_epoch))

    def assign(self, b: ProducerBatch) -> None:
        """Stamp a batch being sent with the producer id, epoch and its base sequence (a retried
        batch of the same producer id keeps its own)."""
        if self.enabled and (b.producer_id != self.producer_id or b.base_sequence < 0):
            seq = self._sequence(b.tp)
            b.producer_id, b.producer_epoch = self.producer_id, self.producer_epoch
            b.base_sequence = seq.next_sequence
            seq.next_sequence = (seq.next_sequence + b.count) & 0x7FFFFFFF
            b.transactional = self.transactional
            b.encoded = None

    def unsupported(self, exc: UnsupportedVersionError) -> KafkaError | None:
        """The broker cannot give a producer id: fatal when idempotence was asked for, else
        the producer goes on without it."""
        self.need_pid = False
        if self.explicit:
            return KafkaError(f"enable.idempotence=true: {exc}")
        log.warning("The broker does not support idempotence (%s): disabled", exc)
        self.enabled = False
        return None

    def in_flight_limit_reached(self, in_flight: Collection[ProducerBatch]) -> bool:
        """Kafka keeps at most 5 batches of a partition in flight when idempotent."""
        return self.enabled and len(in_flight) >= 5

    def _sequence(self, tp: TopicPartition) -> PartitionSequence:
        seq = self.sequences.get(tp)
        if seq is None:
            seq = self.sequences[tp] = PartitionSequence()
        return seq
