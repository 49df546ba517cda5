"""The broker's log manager (Kafka's LogManager, S-2.1): every partition log under ``log.dirs``.

* Start-up loads each ``<topic>-<partition>`` directory of each log dir, with the dir's
  ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``. A
  ``.kafka_cleanshutdown`` marker (written by ``shutdown``) lets the logs skip recovery; it is
  removed at start-up so that a crash while running means recovery next time.
* New partitions go to the log dir holding the fewest partitions (Kafka's nextLogDirs).
* ``delete_log`` renames the directory ``<topic>-<partition>.<uuid>-delete`` (so the name is
  free at once and a crash cannot resurrect the log) and removes it -- in a thread when called
  on an event loop (removing a 440 MB partition took 0.1-0.9 s); leftover ``-delete``
  directories (a crash in between) are removed at start-up.
* Future logs (JBOD, KIP-113): ``create_future_log`` makes ``<topic>-<p>.<uuid>-future`` in
  another log dir; the ReplicaAlterLogDirs mover (server/replication/replica_alter_log_dirs.py)
  copies the
  current log into it and ``replace_current_with_future_log`` swaps them. Future logs are
  loaded at start-up (the move resumes) and checkpointed with their dir's logs.
  ``preferred_log_dirs`` remembers where AlterReplicaLogDirs wants a partition not yet hosted.
* The log cleaner (compaction, ``storage/cleaner.py``): ``cleaner`` runs passes (its thread
  starts with ``start_cleaner``), ``cleaner_manager`` keeps ``cleaner-offset-checkpoint``.
* Periodic hooks for the broker: ``flush_dirty_logs``, ``cleanup_logs``,
  ``checkpoint_recovery_points_and_log_start_offsets``, ``write_high_watermarks``.

Checkpoint files (the per-dir offset checkpoints and each partition's leader-epoch-checkpoint)
go through ``checkpoint_writer``, a ``CheckpointWriter`` thread: their content is computed on the
caller's thread (so a recovery point is never checkpointed before the flush it covers), the
write + fsyncs happen off the event loop. Called without a running event loop, the offset
checkpoint methods wait for their writes (the old synchronous behaviour). No global state:
several managers (on distinct dirs) can live in one process. Each log dir is locked with
``.lock`` (flock) as Kafka does, so two managers on the same dir fail fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from ..common import TopicPartition, clock, entropy, file_system
from ..metrics.stats import LogFlushStats
from .checkpoint_writer import CheckpointWriter
from .checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    OffsetCheckpointFile,
    fsync_dir,
    write_atomically,
)
from .cleaner import CleanerConfig
from .cleaner_manager import LogCleaner, LogCleanerManager
from .errors import KafkaStorageError
from .log import FlushPlan, Log, fsync_files, parse_topic_partition
from .log_config import LogConfig
from .log_dir_failure_channel import LogDirFailureChannel
from .producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from .segment import FileHandleCache

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")

log = logging.getLogger("odradek.log_manager")



MAX_PREFERRED_LOG_DIRS = 10_000


class LogDirNotFoundError(ValueError):
    """Kafka's LogDirNotFoundException (LOG_DIR_NOT_FOUND): not a configured log dir."""

    error_code = 57


class LogDirLockedError(RuntimeError):
    """Another log manager (in this or another process) holds the log dir."""


def _wall_clock_ms() -> int:
    return clock.now_ms()


class LogManager:
    """All partition logs of one broker. ``clock`` returns milliseconds. ``threads=False``
    starts no thread or process (checkpoints and log directory removals done inline), for
    the deterministic simulation."""

    def __init__(self, log_dirs: Iterable[Path], default_config: LogConfig | None = None,
                 clock: Callable[[], int] | None = None, *,
                 topic_configs: Mapping[str, LogConfig] | None = None,
                 max_open_segments: int = 1024,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 lock_dirs: bool = True, flush_stats: LogFlushStats | None = None,
                 failure_channel: LogDirFailureChannel | None = None,
                 threads: bool = True) -> None:
        self.log_dirs = [Path(d).absolute() for d in log_dirs]
        # KIP-112: I/O errors in a dir are reported here; the dir then goes offline
        self.failure_channel = failure_channel or LogDirFailureChannel()
        self.offline_dirs: set[Path] = set()
        # LogFlushRateAndTimeMs (metrics/)
        self.flush_stats = flush_stats if flush_stats is not None else LogFlushStats()
        if not self.log_dirs:
            raise ValueError("at least one log dir is required")
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"duplicate log dirs in {self.log_dirs}")
        self.default_config = default_config or LogConfig()
        self.clock = clock or _wall_clock_ms
        self.topic_configs: dict[str, LogConfig] = dict(topic_configs or {})
        self.handle_cache = FileHandleCache(max_open_segments)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.had_clean_shutdown: dict[Path, bool] = {}
        self._logs: dict[TopicPartition, Log] = {}
        self._future_logs: dict[TopicPartition, Log] = {}
        # AlterReplicaLogDirs for a partition not hosted yet: its log is created there
        self.preferred_log_dirs: dict[TopicPartition, Path] = {}
        self._locks: dict[Path, int] = {}
        self._lock_dirs = lock_dirs
        self._shut_down = False
        # threads=False (the deterministic simulation): checkpoints written inline, deleted
        # logs' directories removed inline, no thread and no helper process
        self.threads = threads
        self.checkpoint_writer = CheckpointWriter(
            "kafka-checkpoint-writer-" + "-".join(d.name for d in self.log_dirs),
            **({} if threads else {"threads": 0}))
        self.checkpoint_writer.on_error = self._on_checkpoint_error
        self._deletions: list[threading.Thread] = []
        try:
            self._load_logs()
        except BaseException:
            self.checkpoint_writer.close(abandon=True)
            self._release_locks()
            raise
        # the log cleaner (compaction, S-2.7): its checkpoints now, its thread on start_cleaner
        self.cleaner_manager = LogCleanerManager(self.log_dirs, lambda: self._logs,
                                                 self._write_checkpoint)
        self.cleaner = LogCleaner(self.cleaner_manager, clock=self.clock)
        for lg in self._logs.values():
            lg.on_truncated = self._on_truncated
            lg.on_io_error = self.report_io_error
        for tp, lg in self._future_logs.items():
            lg.on_io_error = self.report_io_error
            self.cleaner_manager.paused.add(tp)  # a move resumes: no cleaning until the swap
        if not self.live_log_dirs:
            self.close_without_shutdown()
            raise KafkaStorageError(f"every log dir of {self.log_dirs} is offline")

    def start_cleaner(self, config: CleanerConfig | None = None) -> None:
        """Start the log cleaner on the running loop (``log.cleaner.enable``)."""
        if config is not None:
            self.cleaner.configure(config)
        self.cleaner.start()

    def _on_truncated(self, lg: Log, new_end_offset: int) -> None:
        # Kafka's truncateTo: the cleaner checkpoint moves back to the active segment
        self.cleaner_manager.maybe_truncate_checkpoint(lg, lg.active_segment.base_offset)

    # -- start-up -------------------------------------------------------------------------------

    def _lock(self, log_dir: Path) -> None:
        if not self._lock_dirs or fcntl is None:
            return
        fd = os.open(log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LogDirLockedError(f"log dir {log_dir} is in use by another log manager") from None
        self._locks[log_dir] = fd

    def _release_locks(self) -> None:
        for fd in self._locks.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._locks.clear()

    def _read_offsets(self, path: Path) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(path).read()
        except (CheckpointError, OSError):
            # Kafka resets to 0 / the first segment: recovery then covers everything
            return {}

    def _load_logs(self) -> None:
        t0 = time.perf_counter()
        self._load_all_dirs()
        if self._logs:
            log.info("Loaded %d logs from %d log dirs (%s) in %.2f s", len(self._logs),
                     len(self.log_dirs),
                     "clean shutdown" if all(self.had_clean_shutdown.values()) else "recovery",
                     time.perf_counter() - t0)

    def _load_all_dirs(self) -> None:
        for log_dir in self.log_dirs:
            if self.failure_channel.has_offline_log_dir(log_dir):
                self._mark_offline(log_dir)  # failed before (meta.properties): not loaded
                continue
            try:
                self._load_dir(log_dir)
            except OSError as exc:
                # Kafka's loadLogs: a dir that fails to load is offline from the start
                for logs in (self._logs, self._future_logs):
                    for tp in [tp for tp, lg in logs.items() if lg.dir.parent == log_dir]:
                        logs.pop(tp).release_handles()
                self._mark_offline(log_dir)
                self.failure_channel.maybe_add_offline_log_dir(
                    log_dir, f"Error while loading log dir {log_dir}", exc)
        self._promote_lone_future_logs()

    def _load_dir(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self._lock(log_dir)
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        if clean:
            # a crash while this broker runs must mean recovery next time (KAFKA-10471)
            marker.unlink()
            fsync_dir(log_dir)
        self.had_clean_shutdown[log_dir] = clean
        recovery_points = self._read_offsets(log_dir / RECOVERY_POINT_CHECKPOINT)
        log_starts = self._read_offsets(log_dir / LOG_START_OFFSET_CHECKPOINT)
        with os.scandir(log_dir) as it:  # d_type: no stat per entry
            dirs = sorted(e.name for e in it if e.is_dir())
        for entry in dirs:
            path = log_dir / entry
            if entry.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
                continue
            if entry.endswith(STRAY_DIR_SUFFIX):
                continue
            try:
                tp = TopicPartition(*parse_topic_partition(entry))
            except ValueError:
                continue
            future = entry.endswith(FUTURE_DIR_SUFFIX)
            logs = self._future_logs if future else self._logs
            if tp in logs:
                raise RuntimeError(
                    f"duplicate log directories for {tp}: {path} and "
                    f"{self._logs[tp].dir}"
                )
            logs[tp] = self._open_log(path, self.config_for(tp.topic), recovery_points.get(tp, 0),
                                      log_starts.get(tp, 0), had_clean_shutdown=clean)

    def _promote_lone_future_logs(self) -> None:
        """A future log without a current log anywhere: the broker stopped inside
        ``replace_current_with_future_log`` after the current log was renamed for deletion (the
        future log was complete and flushed then). It becomes the current log. With a dir
        offline the current log may be there: the future log stays future."""
        if self.offline_dirs:
            return
        for tp in [tp for tp in self._future_logs if tp not in self._logs]:
            future = self._future_logs.pop(tp)
            future.close()
            target = future.dir.parent / str(tp)
            file_system.rename(future.dir, target)
            fsync_dir(future.dir.parent)
            log.warning("Completing the interrupted move of %s: %s is its log now", tp, target)
            self._logs[tp] = self._open_log(target, self.config_for(tp.topic),
                                            future.recovery_point, future.log_start_offset)

    # -- offline log dirs (KIP-112) -------------------------------------------------------------

    @property
    def live_log_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def log_dir_of(self, path: Path) -> Path | None:
        """The log dir holding `path` (a partition dir, a checkpoint file), if any."""
        path = Path(path).absolute()
        for d in self.log_dirs:
            if path == d or d in path.parents:
                return d
        return None

    def report_io_error(self, log_dir: Path, message: str, exc: OSError) -> None:
        """An I/O error in `log_dir` (any thread): the failure channel takes it offline."""
        self.failure_channel.maybe_add_offline_log_dir(log_dir, message, exc)

    def _on_checkpoint_error(self, path: Path, exc: OSError) -> None:
        log_dir = self.log_dir_of(path)
        if log_dir is not None:
            self.report_io_error(log_dir, f"Error while writing checkpoint file {path}", exc)

    def _mark_offline(self, log_dir: Path) -> None:
        self.offline_dirs.add(log_dir)
        fd = self._locks.pop(log_dir, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def handle_log_dir_failure(self, log_dir: Path) -> list[TopicPartition]:
        """Kafka's LogManager.handleLogDirFailure: the dir leaves the live dirs, its logs are
        closed (no flush, no snapshot: the disk failed) and no longer served, and nothing more
        is written there (checkpoints included). Returns the partitions whose logs were there.
        Raises KafkaStorageError when no live dir is left (the broker must stop)."""
        log_dir = Path(log_dir).absolute()
        if log_dir not in self.log_dirs:
            return []
        doomed = {tp: lg for tp, lg in self._logs.items() if lg.dir.parent == log_dir}
        for tp, lg in [(tp, lg) for tp, lg in self._future_logs.items()
                       if lg.dir.parent == log_dir]:
            del self._future_logs[tp]  # the move is abandoned (Kafka's removeFutureLocalReplica)
            lg.io_failed = lg.closed = True
            lg.release_handles()
            self.checkpoint_writer.forget(lg.dir)
        if log_dir not in self.offline_dirs:
            self._mark_offline(log_dir)
            log.error("Stopping serving logs in dir %s: %s", log_dir,
                      ", ".join(f"{t}-{p}" for t, p in sorted(doomed)) or "none")
        for tp, lg in doomed.items():
            del self._logs[tp]
            lg.io_failed = True
            lg.closed = True
            lg.release_handles()
            self.checkpoint_writer.forget(lg.dir)
        self.checkpoint_writer.forget(log_dir)
        if not self.live_log_dirs:
            raise KafkaStorageError(f"every log dir of {self.log_dirs} has failed")
        return sorted(doomed)

    # -- access ---------------------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self.topic_configs.get(topic, self.default_config)

    def update_topic_config(self, topic: str, config: LogConfig | None) -> None:
        """Set (or, with None, remove) a topic's config override; applies to existing logs."""
        if config is None:
            self.topic_configs.pop(topic, None)
        else:
            self.topic_configs[topic] = config
        for (t, _), log in [*self._logs.items(), *self._future_logs.items()]:
            if t == topic:
                log.config = self.config_for(topic)

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._logs)

    def logs_in_dir(self, log_dir: Path, *, future: bool = False) -> dict[TopicPartition, Log]:
        """The current logs in `log_dir` (with `future`, its future logs)."""
        log_dir = Path(log_dir).absolute()
        logs = self._future_logs if future else self._logs
        return {tp: log for tp, log in logs.items() if log.dir.parent == log_dir}

    # -- future logs (AlterReplicaLogDirs, KIP-113) ---------------------------------------------

    def get_future_log(self, topic: str, partition: int) -> Log | None:
        return self._future_logs.get((topic, partition))

    def future_logs(self) -> dict[TopicPartition, Log]:
        return dict(self._future_logs)

    def maybe_update_preferred_log_dir(self, tp: TopicPartition, log_dir: Path) -> None:
        """Kafka's maybeUpdatePreferredLogDir: remember `log_dir` for the partition unless its
        current or future log is there already. Bounded (the oldest entries go first)."""
        log_dir = Path(log_dir).absolute()
        tp = TopicPartition(*tp)
        for logs in (self._logs, self._future_logs):
            lg = logs.get(tp)
            if lg is not None and lg.dir.parent == log_dir:
                return
        self.preferred_log_dirs.pop(tp, None)
        self.preferred_log_dirs[tp] = log_dir
        while len(self.preferred_log_dirs) > MAX_PREFERRED_LOG_DIRS:
            del self.preferred_log_dirs[next(iter(self.preferred_log_dirs))]

    def check_log_dir(self, log_dir: str | Path) -> Path:
        """Kafka's isLogDirOnline for AlterReplicaLogDirs: the configured dir (the path made
        absolute as Java's getAbsolutePath does), or LogDirNotFoundError; KafkaStorageError for
        an offline one."""
        try:
            path = Path(os.path.abspath(log_dir))
        except (ValueError, OSError):  # a NUL byte, a vanished working dir
            raise LogDirNotFoundError(f"Log dir {log_dir} is not found in the config.") from None
        if path not in self.log_dirs:
            raise LogDirNotFoundError(f"Log dir {log_dir} is not found in the config.")
        if path in self.offline_dirs:
            raise KafkaStorageError(f"Log dir {log_dir} is offline")
        return path

    def _open_log(self, path: Path, config: LogConfig, recovery_point: int = 0,
                  log_start_offset: int = 0, had_clean_shutdown: bool = False) -> Log:
        """`Log.open` with what every log of this manager shares: the clock, the file handle
        cache, the producer id expiration and the checkpoint writer."""
        return Log.open(path, config, recovery_point, log_start_offset,
                        had_clean_shutdown=had_clean_shutdown, clock=self.clock,
                        handle_cache=self.handle_cache,
                        producer_id_expiration_ms=self.producer_id_expiration_ms,
                        checkpoint_writer=self.checkpoint_writer)

    def _create_log(self, path: Path, config: LogConfig, failure: str) -> Log:
        """A new empty log at `path`, its log dir's entry made durable. An I/O error is
        reported against the log dir (KIP-112) and raised as KafkaStorageError, both with
        `failure` as the message."""
        log_dir = path.parent
        try:
            created = self._open_log(path, config)
            fsync_dir(log_dir)
        except OSError as exc:
            self.report_io_error(log_dir, failure, exc)
            raise KafkaStorageError(f"{failure}: {exc}") from exc
        return created

    def create_future_log(self, topic: str, partition: int, log_dir: Path) -> Log:
        """The partition's future log in `log_dir`, created empty (Kafka's getOrCreateLog with
        isFuture): ``<topic>-<p>.<uuid>-future``. Refused (KafkaStorageError) while a dir is
        offline, so that two future logs of one partition can never exist."""
        self._check_running()
        tp = TopicPartition(topic, partition)
        existing = self._future_logs.get(tp)
        if existing is not None:
            return existing
        current = self._logs.get(tp)
        if current is None:
            raise KafkaStorageError(f"no current log of {topic}-{partition} to move")
        log_dir = self.check_log_dir(log_dir)
        if current.dir.parent == log_dir:
            raise ValueError(f"the current log of {topic}-{partition} is in {log_dir} already")
        if self.offline_dirs:
            raise KafkaStorageError(
                f"Can not create the future log of {topic}-{partition} because log dirs "
                f"{sorted(map(str, self.offline_dirs))} are offline")
        path = log_dir / _marked_dir_name(topic, partition, FUTURE_DIR_SUFFIX)
        future = self._create_log(
            path, self.config_for(topic),
            f"Error while creating the future log of {topic}-{partition} in {log_dir}")
        future.on_io_error = self.report_io_error
        self._future_logs[tp] = future
        self.preferred_log_dirs.pop(tp, None)
        # Kafka's abortAndPauseCleaning: no cleaning pass of it until the swap, and a pass under
        # way is aborted (LogCleaner._check_done) before it swaps a cleaned segment in
        self.cleaner_manager.paused.add(tp)
        log.info("Created the future log of %s-%d in %s", topic, partition, path)
        return future

    def delete_future_log(self, topic: str, partition: int) -> bool:
        """Abandon a move: the future log is renamed ``-delete`` and removed."""
        future = self._future_logs.pop((topic, partition), None)
        if future is None:
            return False
        self.cleaner_manager.paused.discard((topic, partition))
        self._remove_log_dir(future, topic, partition)
        return True

    def replace_current_with_future_log(self, topic: str, partition: int) -> Log:
        """Kafka's replaceCurrentWithFutureLog, called when the future log caught up (same log
        end offset): the future log becomes the partition's log, under the normal name in its
        dir, and the old one is deleted. Crash-safe in this order: the future log is flushed
        (its recovery point and leader epochs on disk), the current log is renamed
        ``.<uuid>-delete`` (removed at the next start if the broker stops here; a lone future
        log then becomes the current one, ``_promote_lone_future_logs``), then the future dir
        is renamed ``<topic>-<p>``. Returns the new current log (the caller points its
        partition at it; its high watermark is the old log's)."""
        tp = TopicPartition(topic, partition)
        source, dest = self._logs.get(tp), self._future_logs.get(tp)
        if source is None:
            raise KafkaStorageError(f"The current replica for {topic}-{partition} is offline")
        if dest is None:
            raise KafkaStorageError(f"The future replica for {topic}-{partition} is offline")
        if dest.log_end_offset != source.log_end_offset:
            raise ValueError(f"the future log of {topic}-{partition} is at "
                             f"{dest.log_end_offset}, its current log at "
                             f"{source.log_end_offset}")
        dest_dir = dest.dir.parent
        # epochs begun without a batch yet (a leader elected since the last append) are known
        # only to the current log's cache: the moved log takes them over (loading a log drops
        # epochs starting at its end, as Kafka's does)
        latest = dest.leader_epoch_cache.latest_epoch
        newer = [(e, o) for e, o in source.leader_epoch_cache.entries()
                 if (latest is None or e > latest) and o <= dest.log_end_offset]
        try:
            dest.close(flush=True)
            # the leader-epoch-checkpoint and producer snapshot written before the rename
            self.checkpoint_writer.flush_blocking()
        except (KafkaStorageError, OSError) as exc:
            self.report_io_error(dest_dir, f"Error while flushing the future log of "
                                 f"{topic}-{partition}", _as_os_error(exc))
            raise KafkaStorageError(str(exc)) from exc
        del self._future_logs[tp]
        del self._logs[tp]
        high_watermark = source.high_watermark
        self._remove_log_dir(source, topic, partition, checkpoint=False)
        target = dest_dir / f"{topic}-{partition}"
        try:
            file_system.rename(dest.dir, target)
            fsync_dir(dest_dir)
            new = self._open_log(target, self.config_for(topic), dest.recovery_point,
                                 dest.log_start_offset, had_clean_shutdown=True)
        except OSError as exc:
            message = f"Error while renaming the future log of {topic}-{partition} to {target}"
            self.report_io_error(dest_dir, message, exc)
            raise KafkaStorageError(f"{message}: {exc}") from exc
        if newer:
            new.leader_epoch_cache.assign_all(newer)
        if high_watermark is not None:
            new.high_watermark = min(high_watermark, new.log_end_offset)
        new.on_truncated = self._on_truncated
        new.on_io_error = self.report_io_error
        self._logs[tp] = new
        # the source dir, then the destination, as Kafka's replaceCurrentWithFutureLog (a set
        # here iterated in hash order: checkpoints written in another order in every process)
        for d in dict.fromkeys((source.dir.parent, dest_dir)):
            if d not in self.offline_dirs:
                self._checkpoint_dir(d)
        self.cleaner_manager.alter_checkpoint_dir(tp, source.dir.parent, dest_dir)
        self.cleaner_manager.paused.discard(tp)
        log.info("The current replica of %s-%d is replaced with the future replica in %s",
                 topic, partition, dest_dir)
        return new

    def _next_log_dir(self) -> Path:
        live = self.live_log_dirs
        if not live:
            raise KafkaStorageError(f"no log dir of {self.log_dirs} is online")
        if len(live) == 1:
            return live[0]
        counts = dict.fromkeys(live, 0)
        for log in self._logs.values():
            if log.dir.parent in counts:
                counts[log.dir.parent] += 1
        return min(live, key=lambda d: counts[d])

    def get_or_create_log(self, topic: str, partition: int,
                          config: LogConfig | None = None) -> Log:
        """The partition's log, created (empty, at offset 0) in the log dir holding the fewest
        partitions if it does not exist. `config` overrides the topic's config for a new log."""
        self._check_running()
        log = self._logs.get((topic, partition))
        if log is not None:
            return log
        if not _LEGAL_TOPIC.match(topic) or topic in (".", ".."):
            raise ValueError(f"illegal topic name {topic!r}")
        if partition < 0:
            raise ValueError(f"illegal partition {partition}")
        preferred = self.preferred_log_dirs.pop((topic, partition), None)
        log_dir = preferred if preferred in self.live_log_dirs else self._next_log_dir()
        log = self._create_log(
            log_dir / f"{topic}-{partition}", config or self.config_for(topic),
            f"Error while creating log for {topic}-{partition} in dir {log_dir}")
        log.on_truncated = self._on_truncated
        log.on_io_error = self.report_io_error
        self._logs[TopicPartition(topic, partition)] = log
        return log

    def delete_log(self, topic: str, partition: int) -> bool:
        """Remove a partition's log: rename its directory ``<topic>-<p>.<uuid>-delete`` (so a
        crash cannot resurrect it), then remove it."""
        self.delete_future_log(topic, partition)
        self.preferred_log_dirs.pop((topic, partition), None)
        log = self._logs.pop((topic, partition), None)
        if log is None:
            return False
        self._remove_log_dir(log, topic, partition)
        return True

    def _remove_log_dir(self, log: Log, topic: str, partition: int, *,
                        checkpoint: bool = True) -> None:
        """Close `log` (no longer in the maps), rename its directory
        ``<topic>-<p>.<uuid>-delete`` and remove it (in a thread on an event loop)."""
        log.close()
        self.checkpoint_writer.forget(log.dir)  # nothing is written there any more
        parent = log.dir.parent
        doomed = parent / _marked_dir_name(topic, partition, DELETE_DIR_SUFFIX)
        file_system.rename(log.dir, doomed)
        fsync_dir(parent)
        if self.threads and _on_event_loop():
            self._deletions = [t for t in self._deletions if t.is_alive()]
            thread = threading.Thread(target=_remove_tree, args=(doomed,), daemon=True,
                                      name=f"kafka-delete-log-{topic}-{partition}")
            thread.start()
            self._deletions.append(thread)
        else:
            _remove_tree(doomed)
        if checkpoint:
            self._checkpoint_dir(parent)
            self.cleaner_manager.update_checkpoints(parent, remove=(topic, partition))

    def wait_for_deletions(self, timeout: float | None = None) -> bool:
        """Wait for the directory removals started by ``delete_log``; False on timeout."""
        for thread in list(self._deletions):
            thread.join(timeout)
        self._deletions = [t for t in self._deletions if t.is_alive()]
        return not self._deletions

    # -- periodic hooks -------------------------------------------------------------------------

    def flush_dirty_logs(self, now_ms: int | None = None) -> int:
        """flush.ms / flush.messages and segments rolled since the last call. Returns the
        number of logs flushed."""
        now = self.clock() if now_ms is None else now_ms
        flushed = 0
        for lg in [*self._logs.values(), *self._future_logs.values()]:
            with contextlib.suppress(KafkaStorageError):  # reported: its dir goes offline
                flushed += lg.maybe_flush(now)
        return flushed

    async def flush_dirty_logs_async(self, now_ms: int | None = None) -> int:
        """``flush_dirty_logs`` with the fsyncs in a thread (one hop for every log): the
        decisions and the recovery points stay on the loop, and a recovery point moves only
        after the fsyncs it covers completed. Returns the number of logs flushed."""
        now = self.clock() if now_ms is None else now_ms
        plans = [(lg, plan) for lg in [*self._logs.values(), *self._future_logs.values()]
                 if (plan := lg.maybe_flush_plan(now)) is not None]
        if not plans:
            return 0
        started = time.perf_counter()
        failed = await asyncio.to_thread(_fsync_plans, [plan for _, plan in plans])
        for i in failed:
            lg = plans[i][0]
            if lg.closed and isinstance(failed[i], FileNotFoundError):
                continue  # deleted or moved (a finished move) meanwhile: not a disk failure
            self.report_io_error(lg.dir.parent, f"Error while flushing log {lg.name}",
                                 failed[i])
        elapsed_ms = (time.perf_counter() - started) * 1000
        for _ in range(len(plans) - len(failed)):  # one flush per log, fsynced together
            self.flush_stats.record_flush(elapsed_ms)
        for i, (lg, plan) in enumerate(plans):
            if not lg.closed:
                lg.complete_flush(plan, ok=i not in failed)
        return len(plans) - len(failed)

    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """Retention (retention.ms, retention.bytes, log start offset) on every log, and expiry
        of idle producer ids (producer.id.expiration.ms). Returns the segments deleted."""
        now = self.clock() if now_ms is None else now_ms
        deleted = 0
        for log in list(self._logs.values()):
            with contextlib.suppress(KafkaStorageError):  # reported: its dir goes offline
                deleted += log.delete_retention_segments(now)
            log.producer_state.remove_expired_producers(now)
        return deleted

    def _write_checkpoint(self, path: Path, data: bytes) -> None:
        """Through the writer thread (so writes of one file stay in order); a caller without
        an event loop waits for it. Nothing is written into an offline dir."""
        if self.log_dir_of(path) in self.offline_dirs:
            return
        self.checkpoint_writer.submit(path, data)
        if not _on_event_loop():
            self.checkpoint_writer.flush_blocking()

    def _checkpoint_dir(self, log_dir: Path) -> None:
        # a dir holds a partition's current log or its future log, never both
        logs = {**self.logs_in_dir(log_dir, future=True), **self.logs_in_dir(log_dir)}
        self._write_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile.encode(
            {tp: log.recovery_point for tp, log in logs.items()}))
        self._write_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT, OffsetCheckpointFile.encode(
            {tp: log.log_start_offset for tp, log in logs.items()}))

    def checkpoint_recovery_points_and_log_start_offsets(self) -> None:
        """Write every log dir's recovery-point-offset-checkpoint and
        log-start-offset-checkpoint."""
        for log_dir in self.live_log_dirs:
            self._checkpoint_dir(log_dir)

    def write_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Write each log dir's replication-offset-checkpoint with the high watermarks of the
        partitions it holds (partitions without a log here are ignored)."""
        live = {str(d): d for d in self.live_log_dirs}
        by_dir: dict[str, dict[TopicPartition, int]] = {name: {} for name in live}
        for tp, hw in high_watermarks.items():
            log = self._logs.get(tp)
            if log is not None:
                # the parent by name: a Path per log cost more than the file's encoding
                entries = by_dir.get(os.path.dirname(str(log.dir)))
                if entries is not None:
                    entries[tp] = hw
        for name, entries in by_dir.items():
            self._write_checkpoint(live[name] / REPLICATION_OFFSET_CHECKPOINT,
                                   OffsetCheckpointFile.encode(entries))

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        """The high watermarks of every log dir's replication-offset-checkpoint (a file that
        cannot be read counts as empty)."""
        out: dict[TopicPartition, int] = {}
        for log_dir in self.live_log_dirs:
            out.update(self._read_offsets(log_dir / REPLICATION_OFFSET_CHECKPOINT))
        return out

    # -- shutdown -------------------------------------------------------------------------------

    def _check_running(self) -> None:
        if self._shut_down:
            raise RuntimeError("the log manager is shut down")

    def shutdown(self, broker_epoch: int = -1) -> None:
        """Clean shutdown: flush and close every log, write the checkpoints, then the
        ``.kafka_cleanshutdown`` marker of each log dir, and release the dir locks."""
        if self._shut_down:
            return
        self.cleaner.shutdown_blocking()
        try:
            for log in [*self._logs.values(), *self._future_logs.values()]:
                try:
                    log.close(flush=True)
                except (KafkaStorageError, OSError) as exc:  # its dir is offline now
                    self.report_io_error(log.dir.parent, f"Error while closing {log.name}",
                                         exc if isinstance(exc, OSError) else OSError(str(exc)))
                    log.release_handles()
            for log_dir in self.live_log_dirs:
                self._checkpoint_dir(log_dir)
            # every checkpoint (leader epochs included) is on disk before the marker
            self.checkpoint_writer.close()
            self.wait_for_deletions()
            for log_dir in self.live_log_dirs:  # an offline dir recovers at the next start
                content = json.dumps({"version": 0, "brokerEpoch": broker_epoch},
                                     separators=(",", ":"))
                write_atomically(log_dir / CLEAN_SHUTDOWN_FILE, content.encode())
        finally:
            self._shut_down = True
            self._release_locks()

    def close_without_shutdown(self) -> None:
        """Drop every handle without flushing, checkpointing or the clean-shutdown marker (what
        a crash leaves behind; for tests and for a failed start-up)."""
        self.cleaner.shutdown_blocking()
        for log in [*self._logs.values(), *self._future_logs.values()]:
            log.release_handles()
        # The crash happens once the checkpoint writes already queued are done (a crash with
        # writes still queued: ``checkpoint_writer.close(abandon=True)`` first).
        self.checkpoint_writer.close()
        self._shut_down = True
        self._release_locks()


def _marked_dir_name(topic: str, partition: int, suffix: str) -> str:
    """Kafka's logDirNameWithSuffix: ``<topic>-<p>.<uuid hex>-delete`` / ``-future`` (the
    partition part cut to fit 255 bytes)."""
    tail = f".{entropy.uuid4().hex}{suffix}"
    return f"{topic}-{partition}"[: 255 - len(tail)] + tail


def _as_os_error(exc: BaseException) -> OSError:
    return exc if isinstance(exc, OSError) else OSError(str(exc))


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _fsync_plans(plans: list[FlushPlan]) -> dict[int, OSError]:
    """fsync every plan (in a thread); the indexes of the plans that failed, with the
    error."""
    failed: dict[int, OSError] = {}
    for i, plan in enumerate(plans):
        try:
            fsync_files(plan)
        except OSError as exc:
            log.exception("Error while flushing log %s", plan.directory or plan.files[:1])
            failed[i] = exc
    return failed


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        log.warning("Could not remove the deleted log directory %s", path)
