"""Log handlers that write once per event-loop iteration (10,000 partitions).

A LeaderAndIsr request of thousands of partitions makes a broker log a few lines per partition
(Kafka's INFO lines: state changes, fetchers added and removed, truncations). ``StreamHandler``
writes and flushes each line, and stderr is line-buffered: one system call per line, each
giving the GIL away to the store's and the checkpoint writer's threads. In the 10,000-partition
kill -9 profile that was a quarter of the controller broker's loop.

These handlers keep the formatted lines of the running loop iteration and write them with one
``write`` and one ``flush`` from a callback scheduled with ``call_soon``: the lines of an
iteration reach the file as soon as it ends. A line logged outside a running loop (another
thread, start-up, shutdown) is written at once, with whatever is pending before it, so the
order is kept. ``flush`` and ``close`` (``logging.shutdown`` at exit) write what is pending.
"""

from __future__ import annotations

import asyncio
import logging
from typing import IO, Any


class _Batching:
    """The batching part, for a ``StreamHandler`` subclass."""

    stream: IO[str] | None
    terminator: str
    _pending: list[str]
    _scheduled: bool

    def _init_batching(self) -> None:
        self._pending = []
        self._scheduled = False

    def _queue(self, record: logging.LogRecord) -> None:
        handler: Any = self
        try:
            line = handler.format(record) + self.terminator
        except RecursionError:
            raise
        except Exception:
            handler.handleError(record)
            return
        self._pending.append(line)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._write_pending()
            return
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        handler: Any = self
        handler.acquire()
        try:
            self._scheduled = False
            self._write_pending()
        finally:
            handler.release()

    def flush(self) -> None:
        """What is pending, then the stream's own flush (the handler's lock held)."""
        handler: Any = self
        handler.acquire()
        try:
            self._write_pending()
            super().flush()  # type: ignore[misc]
        finally:
            handler.release()

    def _write_pending(self) -> None:
        stream = self.stream
        if not self._pending or stream is None:
            return
        data = "".join(self._pending)
        self._pending.clear()
        try:
            stream.write(data)
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: as logging, say it once
            logging.lastResort.handle(logging.LogRecord(
                "odradek.log", logging.WARNING, __file__, 0,
                "could not write %d buffered log bytes", (len(data),), None))


class BatchedStreamHandler(_Batching, logging.StreamHandler):  # type: ignore[type-arg]
    """``StreamHandler`` writing once per loop iteration (stderr of `odradek broker`)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        super().__init__(stream)
        self._init_batching()

    def emit(self, record: logging.LogRecord) -> None:
        self._queue(record)


class BatchedFileHandler(_Batching, logging.FileHandler):
    """``FileHandler`` writing once per loop iteration (a broker's state-change.log)."""

    def __init__(self, filename: Any, mode: str = "a", encoding: str | None = None) -> None:
        super().__init__(filename, mode, encoding)
        self._init_batching()

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is None and (self.mode != "w" or not self._closed):  # type: ignore[attr-defined]
            self.stream = self._open()
        if self.stream is not None:
            self._queue(record)

    def close(self) -> None:
        self.flush()
        super().close()


__all__ = ["BatchedFileHandler", "BatchedStreamHandler"]
