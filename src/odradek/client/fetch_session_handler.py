"""The fetching side of a fetch session (KIP-227; Kafka's clients FetchSessionHandler), one per
broker fetched from: pure bookkeeping, no I/O.

`build(next)` takes every partition to fetch now (with its request data: fetch offset, epochs,
max bytes, any value compared with ==) and returns what to send: all of them in a full fetch
(epoch 0: a new session is asked for, or -1 after the broker declined), else only the partitions
added or changed since the last request, and the ones no longer fetched as `to_forget`.
`handle_response(error, session_id, partitions)` moves to the next epoch, or back to a full
fetch on FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH or a response that does not
match the session; `handle_error()` after a failed send does the same (the next request closes
the old session and opens a new one).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..common import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 2**31 - 1
_NONE = 0  # ErrorCode.none
FETCH_SESSION_ID_NOT_FOUND = 70

D = TypeVar("D")


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    session_id: int = INVALID_SESSION_ID
    epoch: int = INITIAL_EPOCH

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)


@dataclass(frozen=True, slots=True)
class FetchRequestData(Generic[D]):
    """One request's content: `to_send` in the request's topics, `to_forget` in its
    forgotten_topics_data, `session` every partition the broker will read (the answer may
    hold any of them), `metadata` the session id and epoch to send."""

    to_send: dict[TopicPartition, D]
    to_forget: list[TopicPartition]
    session: dict[TopicPartition, D]
    metadata: FetchMetadata


class FetchSessionHandler(Generic[D]):
    def __init__(self, node: int = -1) -> None:
        self.node = node
        self.next_metadata = INITIAL
        self.session_partitions: dict[TopicPartition, D] = {}

    @property
    def session_id(self) -> int:
        return self.next_metadata.session_id

    def build(self, next_partitions: Mapping[TopicPartition, D]) -> FetchRequestData[D]:
        if self.next_metadata.is_full:
            self.session_partitions = dict(next_partitions)
            return FetchRequestData(dict(next_partitions), [], dict(next_partitions),
                                    self.next_metadata)
        to_send: dict[TopicPartition, D] = {}
        removed: list[TopicPartition] = []
        session = self.session_partitions
        for tp in list(session):
            data = next_partitions.get(tp)
            if data is None:
                del session[tp]
                removed.append(tp)
            elif data is not session[tp] and data != session[tp]:
                session[tp] = data
                to_send[tp] = data
        for tp, data in next_partitions.items():
            if tp not in session:
                session[tp] = data
                to_send[tp] = data
        return FetchRequestData(to_send, removed, dict(session), self.next_metadata)

    def handle_response(self, error: int, session_id: int,
                        partitions: Collection[TopicPartition], throttle_time_ms: int = 0
                        ) -> bool:
        """False: drop this response's partitions (the next request is a full fetch)."""
        meta = self.next_metadata
        if error != _NONE:
            self.next_metadata = INITIAL if error == FETCH_SESSION_ID_NOT_FOUND \
                else FetchMetadata(meta.session_id, INITIAL_EPOCH)
            return False
        known = self.session_partitions
        if meta.is_full:
            if not partitions and throttle_time_ms > 0:  # a throttled, empty answer
                self.next_metadata = INITIAL
                return False
            if set(partitions) != set(known):  # omitted or extra partitions
                self.next_metadata = INITIAL
                return False
            self.next_metadata = INITIAL if session_id == INVALID_SESSION_ID \
                else FetchMetadata(session_id, next_epoch(INITIAL_EPOCH))
            return True
        if any(tp not in known for tp in partitions):  # extra partitions
            self.next_metadata = FetchMetadata(meta.session_id, INITIAL_EPOCH)
            return False
        self.next_metadata = INITIAL if session_id == INVALID_SESSION_ID \
            else FetchMetadata(meta.session_id, next_epoch(meta.epoch))
        return True

    def handle_error(self) -> None:
        """A request failed to go or come back: close the session with the next one."""
        self.next_metadata = FetchMetadata(self.next_metadata.session_id, INITIAL_EPOCH)


__all__ = [
    "FINAL_EPOCH",
    "INITIAL",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "FetchMetadata",
    "FetchRequestData",
    "FetchSessionHandler",
    "next_epoch",
]
