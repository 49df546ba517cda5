"""Which compacted log to clean next, the cleaner checkpoints, and the cleaner thread
(Kafka's LogCleanerManager and LogCleaner/CleanerThread; the cleaning itself is
``storage/cleaner.py``).

* ``LogCleanerManager`` keeps each log dir's ``cleaner-offset-checkpoint`` (the first dirty
  offset of each compacted log: read at start-up, written after each clean through the log
  manager's checkpoint writer, reset by a truncation below it or removed with the topic) and
  the set of logs being cleaned, and picks the filthiest log (``grab_filthiest_compacted_log``).
* ``LogCleaner`` runs passes. ``clean_once`` does a whole pass in the calling thread (tests,
  tools: no event loop). ``start`` runs passes on the broker's loop (``clean_once_async``):
  planning and the swap happen on the loop, which owns the logs, while reading segments,
  building the offset map and writing the cleaned segments happen in one cleaner thread
  (``kafka-log-cleaner-thread-0``). When nothing was cleaned it waits ``log.cleaner.backoff.ms``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..common import TopicPartition
from ..common.clock import now_ms
from .checkpoints import CheckpointError, OffsetCheckpointFile
from .cleaner import (
    Cleaner,
    CleanerConfig,
    CleanResult,
    LogCleaningAbortedError,
    Work,
    clean_steps,
    format_stats,
    run_steps,
)
from .cleaning_plan import (
    LogToClean,
    filthiest,
    log_to_clean,
    max_compaction_delay,
    offsets_to_clean,
    segment_views,
)
from .errors import KafkaStorageError
from .log import Log

log = logging.getLogger("kafka.log.LogCleaner")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


def cleaner_config_from(cfg: Any) -> CleanerConfig:
    """The CleanerConfig of a broker's KafkaConfig (Kafka's LogCleaner.cleanerConfig)."""
    return CleanerConfig(
        num_threads=int(cfg["log.cleaner.threads"]),
        dedupe_buffer_size=int(cfg["log.cleaner.dedupe.buffer.size"]),
        dedupe_buffer_load_factor=float(cfg["log.cleaner.io.buffer.load.factor"]),
        io_buffer_size=int(cfg["log.cleaner.io.buffer.size"]),
        max_message_size=int(cfg["message.max.bytes"]),
        max_io_bytes_per_second=float(cfg["log.cleaner.io.max.bytes.per.second"]),
        backoff_ms=int(cfg["log.cleaner.backoff.ms"]),
        enable_cleaner=bool(cfg["log.cleaner.enable"]),
    )


class LogCleanerManager:
    """Cleaner checkpoints and the in-progress set. `logs` returns the log manager's logs;
    `write` writes a checkpoint file (the log manager's checkpoint writer). Used from one
    thread at a time (the broker's loop, or a test's thread); a lock makes that explicit."""

    def __init__(self, log_dirs: list[Path], logs: Callable[[], Mapping[TopicPartition, Log]],
                 write: Callable[[Path, bytes], None]) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self._logs = logs
        self._write = write
        self._lock = threading.RLock()
        self.in_progress: set[TopicPartition] = set()
        self.uncleanable: set[TopicPartition] = set()
        # partitions whose replica moves to another log dir (Kafka's abortAndPauseCleaning)
        self.paused: set[TopicPartition] = set()
        self.dirtiest_log_cleanable_ratio = 0.0
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        for d in self.log_dirs:
            try:
                self._checkpoints[d] = OffsetCheckpointFile(d / CLEANER_OFFSET_CHECKPOINT).read()
            except (CheckpointError, OSError):
                log.error("Failed to read the checkpoint file %s in dir %s",
                          CLEANER_OFFSET_CHECKPOINT, d)
                self._checkpoints[d] = {}

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        with self._lock:
            out: dict[TopicPartition, int] = {}
            for entries in self._checkpoints.values():
                out.update(entries)
            return out

    def _dir_of(self, lg: Log) -> Path:
        return lg.dir.parent.absolute()

    def update_checkpoints(self, log_dir: Path, update: tuple[TopicPartition, int] | None = None,
                           remove: TopicPartition | None = None) -> None:
        """Kafka's updateCheckpoints: keep the entries of existing logs, remove one, add or
        update one, and write the file."""
        log_dir = Path(log_dir).absolute()
        with self._lock:
            if log_dir not in self._checkpoints:
                return
            logs = self._logs()
            entries = {tp: off for tp, off in self._checkpoints[log_dir].items() if tp in logs}
            if remove is not None:
                entries.pop(remove, None)
            if update is not None:
                entries[update[0]] = update[1]
            self._checkpoints[log_dir] = entries
            self._write(log_dir / CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile.encode(entries))

    def alter_checkpoint_dir(self, tp: TopicPartition, source: Path, dest: Path) -> None:
        """Kafka's alterCheckpointDir: a replica moved from the `source` log dir to `dest`
        takes its cleaner checkpoint along."""
        source, dest = Path(source).absolute(), Path(dest).absolute()
        with self._lock:
            offset = self._checkpoints.get(source, {}).get(tp)
            if source in self._checkpoints:
                self.update_checkpoints(source, remove=tp)
            if offset is not None and dest in self._checkpoints:
                self.update_checkpoints(dest, update=(tp, offset))

    def maybe_truncate_checkpoint(self, lg: Log, offset: int) -> None:
        """Kafka's maybeTruncateCheckpoint: after a truncation, a checkpoint past `offset`
        moves back to it."""
        if not lg.config.compact:
            return
        tp = (lg.topic, lg.partition)
        log_dir = self._dir_of(lg)
        with self._lock:
            existing = self._checkpoints.get(log_dir, {})
            if existing.get(tp, 0) > offset:
                self.update_checkpoints(log_dir, update=(tp, offset))

    def cleanable(self, now_ms: int) -> list[tuple[TopicPartition, Log, LogToClean]]:
        """Every compacted log not being cleaned, with its LogToClean (empty logs left out);
        logs whose checkpoint is invalid get it reset (Kafka's forceUpdateCheckpoint)."""
        last_clean = self.all_cleaner_checkpoints()
        out = []
        for tp, lg in list(self._logs().items()):
            if not lg.config.compact or tp in self.in_progress or tp in self.uncleanable \
                    or tp in self.paused \
                    or lg.closed:
                continue
            views = segment_views(lg)
            offsets = offsets_to_clean(lg, last_clean.get(tp), now_ms, views)
            if offsets.force_update_checkpoint:
                self.update_checkpoints(self._dir_of(lg),
                                        update=(tp, offsets.first_dirty_offset))
            delay = max_compaction_delay(views, offsets.first_dirty_offset,
                                         lg.config.max_compaction_lag_ms, now_ms)
            ltc = log_to_clean(lg.name, views, offsets, delay > 0)
            if ltc.total_bytes > 0:
                out.append((tp, lg, ltc))
        return out

    def grab_filthiest_compacted_log(self, now_ms: int
                                     ) -> tuple[TopicPartition, Log, LogToClean] | None:
        """The compacted log with the highest dirty ratio among those above their
        ``min.cleanable.dirty.ratio`` (or forced by ``max.compaction.lag.ms``), marked in
        progress."""
        with self._lock:
            candidates = self.cleanable(now_ms)
            self.dirtiest_log_cleanable_ratio = max(
                (ltc.cleanable_ratio for _, _, ltc in candidates), default=0.0)
            best = filthiest([(ltc, lg.config.min_cleanable_dirty_ratio)
                              for _, lg, ltc in candidates])
            if best is None:
                return None
            for tp, lg, ltc in candidates:
                if ltc is best:
                    self.in_progress.add(tp)
                    return tp, lg, ltc
            return None

    def done_cleaning(self, tp: TopicPartition, lg: Log, end_offset: int | None) -> None:
        """Release the log; record `end_offset` (None: the pass did not complete)."""
        with self._lock:
            self.in_progress.discard(tp)
            if end_offset is not None and not lg.closed:
                self.update_checkpoints(self._dir_of(lg), update=(tp, end_offset))

    def mark_uncleanable(self, tp: TopicPartition) -> None:
        with self._lock:
            self.uncleanable.add(tp)


class LogCleaner:
    """Runs cleaning passes (one at a time) over the log manager's compacted logs."""

    def __init__(self, manager: LogCleanerManager, config: CleanerConfig | None = None,
                 clock: Callable[[], int] | None = None) -> None:
        self.manager = manager
        self.clock = clock or now_ms
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._pass_lock: asyncio.Lock | None = None
        self.passes = 0
        self.last_result: CleanResult | None = None
        self._cleaning: TopicPartition | None = None  # the partition of the pass under way
        self.configure(config or CleanerConfig())

    def configure(self, config: CleanerConfig) -> None:
        self.config = config
        self.cleaner = Cleaner(0, config, check_done=self._check_done)

    def _check_done(self) -> None:
        """Kafka's checkDone: the pass stops at shutdown, and when its partition's replica
        started moving to another log dir (abortAndPauseCleaning: ``paused``). Called between
        batches and, on the loop, before each swap: an aborted pass swaps nothing in."""
        if self._stopping:
            raise LogCleaningAbortedError("the log cleaner is shutting down")
        tp = self._cleaning
        if tp is not None and tp in self.manager.paused:
            log.info("The cleaning for partition %s-%d is aborted and paused", tp[0], tp[1])
            raise LogCleaningAbortedError(f"the cleaning of {tp[0]}-{tp[1]} is aborted")

    # -- one pass -------------------------------------------------------------------------------

    def _begin(self, now_ms: int | None) -> tuple[TopicPartition, Log, Iterator[Work]] | None:
        now = self.clock() if now_ms is None else now_ms
        grabbed = self.manager.grab_filthiest_compacted_log(now)
        if grabbed is None:
            return None
        tp, lg, ltc = grabbed
        self._cleaning = tp
        return tp, lg, clean_steps(self.cleaner, lg, now, ltc.first_dirty_offset)

    def _finish(self, tp: TopicPartition, lg: Log, result: CleanResult | None,
                error: BaseException | None) -> bool:
        self.passes += 1
        self._cleaning = None
        if error is not None:
            self.manager.done_cleaning(tp, lg, None)
            if isinstance(error, LogCleaningAbortedError | FileNotFoundError):
                return False  # shutdown, or a segment went away: try again later
            if isinstance(error, OSError):  # KIP-112: the log's dir goes offline
                lg.io_error(f"Failed to clean up log for {tp} in dir "
                            f"{lg.dir.parent} due to IOException", error)
                return False
            if isinstance(error, KafkaStorageError):
                return False  # the partition is already offline
            log.warning("Unexpected exception thrown when cleaning log %s. Marking its "
                        "partition (%s) as uncleanable", lg.name, tp,
                        exc_info=error)
            self.manager.mark_uncleanable(tp)
            return False
        self.last_result = result
        if result is None or not result.completed:
            self.manager.done_cleaning(tp, lg, None)
            return False
        self.manager.done_cleaning(tp, lg, result.end_offset)
        log.info(format_stats(self.cleaner.id, lg.name, result.first_dirty_offset,
                              result.end_offset, result.stats))
        if result.stats.invalid_messages_read > 0:
            log.warning("\tFound %d invalid messages during compaction.",
                        result.stats.invalid_messages_read)
        return True

    def clean_once(self, now_ms: int | None = None) -> bool:
        """One pass in the calling thread (which must own the logs): clean the filthiest
        compacted log, if any. True when a log was cleaned."""
        begun = self._begin(now_ms)
        if begun is None:
            return False
        tp, lg, gen = begun
        try:
            result = run_steps(gen)
        except Exception as exc:
            return self._finish(tp, lg, None, exc)
        return self._finish(tp, lg, result, None)

    async def clean_once_async(self, now_ms: int | None = None) -> bool:
        """One pass on the running loop, with the heavy parts in the cleaner thread."""
        if self._pass_lock is None:
            self._pass_lock = asyncio.Lock()
        async with self._pass_lock:
            if self._stopping:
                return False
            begun = self._begin(now_ms)
            if begun is None:
                return False
            tp, lg, gen = begun
            loop = asyncio.get_running_loop()
            executor = self._ensure_executor()
            result: CleanResult | None = None
            try:
                try:
                    item = next(gen)
                    while True:
                        fn, args = item
                        try:
                            value = await loop.run_in_executor(executor, fn, *args)
                        except Exception as exc:
                            item = gen.throw(exc)
                            continue
                        item = gen.send(value)
                except StopIteration as stop:
                    result = stop.value
            except asyncio.CancelledError:
                self._cleaning = None
                self.manager.done_cleaning(tp, lg, None)
                raise
            except Exception as exc:
                return self._finish(tp, lg, None, exc)
            return self._finish(tp, lg, result, None)

    def _ensure_executor(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="kafka-log-cleaner-thread-0")
        return self._executor

    # -- the background thread ------------------------------------------------------------------

    def start(self) -> None:
        """Run passes on the running loop until ``shutdown`` (nothing if
        ``log.cleaner.enable`` is false or ``log.cleaner.threads`` is 0)."""
        if not self.config.enable_cleaner or self.config.num_threads <= 0 or self._task:
            return
        self._stopping = False
        log.info("Starting the log cleaner")
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name="kafka-log-cleaner")

    async def _run(self) -> None:
        while not self._stopping:
            try:
                cleaned = await self.clean_once_async()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Log cleaner pass failed")
                cleaned = False
            if not cleaned:
                await asyncio.sleep(self.config.backoff_ms / 1000)

    def shutdown_blocking(self) -> None:
        """Stop: abort a pass in progress (its cleaned files are removed), cancel the task and
        wait for the cleaner thread."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    async def shutdown(self) -> None:
        task = self._task
        self._stopping = True
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.shutdown_blocking()
