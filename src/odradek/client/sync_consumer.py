"""The synchronous consumer: an AsyncConsumer on a background loop thread (poll, subscribe,
assign, commit, seek with timeouts in seconds)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..common.loop_thread import LoopThread
from .consumer import AsyncConsumer
from .group import Listener
from .types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    TopicPartition,
)


class Consumer:
    """The synchronous consumer: an AsyncConsumer on a background loop thread.

        c = Consumer({"bootstrap.servers": ..., "group.id": "g", "auto.offset.reset": "earliest"})
        c.subscribe(["topic"])
        while True:
            for record in c.poll(1.0): ...
        c.close()

    Rebalance listeners run on the consumer's loop thread; from them, the state methods (seek,
    pause, resume, assignment, position of a known offset) may be called, not the blocking
    ones (commit, committed, poll).
    """

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        self._runner = LoopThread("odradek-consumer")
        try:
            self._c: AsyncConsumer = self._runner.run(self._create(config, kwargs))
        except BaseException:
            self._runner.stop()
            raise

    @staticmethod
    async def _create(config: Mapping[str, Any] | None, kwargs: dict[str, Any]) -> AsyncConsumer:
        c = AsyncConsumer(config, **kwargs)
        try:
            return await c.start()
        except BaseException:
            await c.client.close()
            raise

    def _sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a non-blocking core method on the loop (directly when already on it)."""
        if self._runner.in_loop_thread:
            return fn(*args)

        async def call() -> Any:
            return fn(*args)
        return self._runner.run(call())

    @property
    def config(self) -> dict[str, Any]:
        return self._c.config

    def subscribe(self, topics: Iterable[str], on_assign: Listener | None = None,
                  on_revoke: Listener | None = None) -> None:
        self._sync(self._c.subscribe, list(topics) if not isinstance(topics, str) else topics,
                   on_assign, on_revoke)

    def unsubscribe(self) -> None:
        self._runner.run(self._c.unsubscribe())

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        self._sync(self._c.assign, list(partitions))

    def unassign(self) -> None:
        self._sync(self._c.unassign)

    def assignment(self) -> set[TopicPartition]:
        return self._sync(self._c.assignment)

    def subscription(self) -> list[str]:
        return self._sync(self._c.subscription)

    def poll(self, timeout: float = 1.0, max_records: int | None = None
             ) -> list[ConsumerRecord]:
        return self._runner.run(self._c.poll(timeout, max_records))

    def __iter__(self) -> Any:
        while not self._c.closed:
            yield from self.poll(1.0)

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        self._sync(self._c.seek, tp, offset)

    def seek_to_beginning(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        self._sync(self._c.seek_to_beginning, *partitions)

    def seek_to_end(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        self._sync(self._c.seek_to_end, *partitions)

    def pause(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        self._sync(self._c.pause, *partitions)

    def resume(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        self._sync(self._c.resume, *partitions)

    def paused(self) -> set[TopicPartition]:
        return self._sync(self._c.paused)

    def position(self, tp: TopicPartition | tuple[str, int], timeout: float | None = None) -> int:
        known = self._c.known_position(TopicPartition(*tp))
        if self._runner.in_loop_thread and known is not None:
            return known
        return self._runner.run(self._c.position(tp, timeout))

    def highwater(self, tp: TopicPartition | tuple[str, int]) -> int:
        return self._sync(self._c.highwater, tp)

    def last_stable_offset(self, tp: TopicPartition | tuple[str, int]) -> int:
        return self._sync(self._c.last_stable_offset, tp)

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        return self._sync(self._c.consumer_group_metadata)

    def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
               asynchronous: bool = False, timeout: float | None = None) -> None:
        if asynchronous:
            self._sync(self._c.commit_async, offsets)
            return
        self._runner.run(self._c.commit(offsets, timeout))

    def commit_async(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
                     callback: Callable[..., Any] | None = None) -> None:
        self._sync(self._c.commit_async, offsets, callback)

    def committed(self, partitions: Iterable[TopicPartition | tuple[str, int]],
                  timeout: float | None = None) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._runner.run(self._c.committed(list(partitions), timeout))

    def beginning_offsets(self, partitions: Iterable[TopicPartition | tuple[str, int]],
                          timeout: float | None = None) -> dict[TopicPartition, int]:
        return self._runner.run(self._c.beginning_offsets(list(partitions), timeout))

    def end_offsets(self, partitions: Iterable[TopicPartition | tuple[str, int]],
                    timeout: float | None = None) -> dict[TopicPartition, int]:
        return self._runner.run(self._c.end_offsets(list(partitions), timeout))

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          timeout: float | None = None
                          ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._runner.run(self._c.offsets_for_times(timestamps, timeout))

    def list_topics(self) -> dict[str, list[int]]:
        return self._runner.run(self._c.list_topics())

    def partitions_for_topic(self, topic: str) -> list[int]:
        return self._runner.run(self._c.partitions_for_topic(topic))

    def close(self, autocommit: bool = True) -> None:
        try:
            self._runner.run(self._c.close(autocommit))
        finally:
            self._runner.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
