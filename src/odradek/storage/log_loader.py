"""Opening a log directory (Kafka's LogLoader): remove stray ``.deleted``/``.cleaned`` files,
complete interrupted ``.swap``s, drop orphan indexes, rebuild missing or corrupt indexes,
recover every segment from the one holding the recovery point after an unclean shutdown (CRC
check, truncation at the first bad batch), then rebuild the leader epoch cache and the
producer state. After a crash at any moment the loaded log is a valid prefix of what was
written."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common import file_system
from ..protocol.control_records import end_txn_marker_of
from ..protocol.records import BatchHeader, CorruptRecordError, InvalidRecordError
from .checkpoint_writer import CheckpointWriter
from .checkpoints import CheckpointError
from .index import CorruptIndexError
from .leader_epoch import LeaderEpochFileCache
from .log_config import LONG_MAX, LogConfig
from .log_segments import LogSegments, segment_kwargs
from .producer_state import SNAPSHOT_SUFFIX, ProducerStateManager
from .segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    FileHandleCache,
    LogSegment,
    offset_from_filename,
)
from .transaction_index import TXN_INDEX_SUFFIX


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """What loading found (Kafka's LoadedLogOffsets, plus the leader epoch cache it read or
    rebuilt)."""

    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    leader_epoch_cache: LeaderEpochFileCache


def rebuild_producer_state(producer_state: ProducerStateManager, segments: LogSegments,
                           log_start_offset: int, log_end_offset: int) -> None:
    """Producer state = newest snapshot at or below the log end offset + the batches after it
    up to `log_end_offset` (Kafka's rebuildProducerState / truncateAndReload: headers only, plus
    the first record of each control batch for its transaction marker). Ongoing transactions
    come back with it, so the last stable offset survives restarts and truncations."""
    start = producer_state.load_latest_snapshot(log_start_offset, log_end_offset)
    replay_producer_batches(producer_state, segments, start, log_end_offset)


def replay_producer_batches(producer_state: ProducerStateManager, segments: LogSegments,
                            start: int, end: int) -> None:
    """Apply the batches of `segments` from `start` (or the first segment) up to `end` to
    `producer_state`: headers only, plus the first record of each control batch for its
    transaction marker."""
    if start < end:
        for segment, header in segments.iter_segment_headers(max(start, segments.bases[0]),
                                                             end):
            if header.producer_id < 0:
                producer_state.update(header)
                continue
            marker = None
            if header.is_control:
                try:
                    marker = end_txn_marker_of(segment.read_batch(header.position, header.size))
                except (InvalidRecordError, CorruptRecordError):
                    marker = None
            producer_state.update(header, marker=marker)
    producer_state.update_map_end_offset(end)


def txn_index_looks_valid(segment: LogSegment) -> bool:
    """Whether a segment's ``.txnindex`` can be trusted without recovery: absent (no abort), or
    whole entries passing the sanity check (a torn tail or a bad entry means recover)."""
    txn = segment.txn_index
    if not txn.path.exists():
        return True
    try:
        txn.sanity_check()
    except CorruptIndexError:
        return False
    ok = txn.torn_tail_bytes == 0
    txn.release()
    return ok


class LogLoader:
    """Loads the log in `directory` into `segments` (empty), `producer_state` and a leader
    epoch cache it creates."""

    def __init__(self, directory: Path, config: LogConfig, segments: LogSegments,
                 producer_state: ProducerStateManager, *, clock: Callable[[], int],
                 handle_cache: FileHandleCache,
                 checkpoint_writer: CheckpointWriter | None = None) -> None:
        self.dir = directory
        self.config = config
        self.segments = segments
        self.producer_state = producer_state
        self.clock = clock
        self.handle_cache = handle_cache
        self.checkpoint_writer = checkpoint_writer

    def load(self, recovery_point: int, log_start_offset: int, clean: bool) -> LoadedLog:
        """Load the directory (creating it, and an empty first segment at `log_start_offset`,
        if needed); recover from `recovery_point` unless `clean` (a clean shutdown)."""
        segments = self.segments
        self.dir.mkdir(parents=True, exist_ok=True)
        names = sorted(self._remove_temp_files_and_complete_swaps())
        log_bases = {offset_from_filename(n) for n in names
                     if n.endswith(LOG_SUFFIX) and n[: -len(LOG_SUFFIX)].isdigit()}
        for name in names:
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                stem = name[: -len(suffix)]
                if name.endswith(suffix) and stem.isdigit() and int(stem) not in log_bases:
                    (self.dir / name).unlink(missing_ok=True)  # orphaned index
        recover_from = None if clean else recovery_point
        for base in sorted(log_bases):
            segment = LogSegment(self.dir, base, **self._segment_kwargs())
            if not segment.index_files_look_valid() and (clean or base < recovery_point):
                segment.rebuild_indexes()
            if (recover_from is None or base < recover_from) \
                    and not txn_index_looks_valid(segment):
                recover_from = base  # Kafka recovers a segment whose txn index is corrupt
            segments.add_loaded(segment)

        rebuild_epochs = False
        try:
            cache = LeaderEpochFileCache(self.dir, writer=self.checkpoint_writer)
        except (CheckpointError, ValueError):
            # unreadable leader-epoch-checkpoint: the batch headers carry the epochs
            cache = LeaderEpochFileCache(self.dir, load=False, writer=self.checkpoint_writer)
            rebuild_epochs = True
        if recover_from is not None:
            self._recover_from(recover_from, cache, log_start_offset)
        leo = log_start_offset
        if segments:  # an empty .log holds no batch: its base offset, without its index
            last = segments.segments[-1]
            leo = last.read_next_offset() if last.size else last.base_offset
        if segments and leo < log_start_offset:
            # the log start checkpoint is ahead of the data (segment files were removed)
            segments.delete(list(segments.segments))
            cache.clear()
            self.producer_state.truncate_fully_and_start_at(log_start_offset)
            leo = log_start_offset
        if not segments:
            segments.add_active(LogSegment.create(self.dir, log_start_offset,
                                                  **self._segment_kwargs()))
            leo = log_start_offset
        segments.segments[-1].active = True
        loaded = LoadedLog(log_start_offset=max(log_start_offset, segments.bases[0]),
                           recovery_point=leo if clean else min(recovery_point, leo),
                           log_end_offset=leo, leader_epoch_cache=cache)
        if rebuild_epochs:
            self._rebuild_leader_epochs(cache)
        cache.truncate_from_end(leo)
        cache.truncate_from_start(loaded.log_start_offset)
        rebuild_producer_state(self.producer_state, segments, loaded.log_start_offset, leo)
        return loaded

    def _segment_kwargs(self) -> dict[str, Any]:
        return segment_kwargs(self.config, self.handle_cache, self.clock())

    def _remove_temp_files_and_complete_swaps(self) -> list[str]:
        """Returns the names in the directory afterwards (one listing serves the whole load
        when nothing had to be removed or renamed: 10,000 logs are 10,000 listings)."""
        swaps: list[str] = []
        min_cleaned = LONG_MAX
        names: list[str] = []
        changed = False
        with os.scandir(self.dir) as entries:
            listing = [(e.name, e.is_file()) for e in entries]  # d_type: no stat per file
        for name, is_file in listing:
            names.append(name)
            if not is_file:
                continue
            path = self.dir / name
            if name.endswith(CLEANED_SUFFIX):
                if name.split(".", 1)[0].isdigit():
                    min_cleaned = min(min_cleaned, offset_from_filename(name))
                path.unlink(missing_ok=True)
                changed = True
            elif name.endswith((DELETED_SUFFIX, SNAPSHOT_SUFFIX + ".tmp")):
                path.unlink(missing_ok=True)
                changed = True
            elif name.endswith(SWAP_SUFFIX):
                swaps.append(name)
        # a .swap at or above the lowest .cleaned file belongs to an unfinished segment split
        # (Kafka's KAFKA-6264 rule): it is dropped, the original segments stay
        valid = []
        for name in swaps:
            if name.split(".", 1)[0].isdigit() and offset_from_filename(name) < min_cleaned:
                valid.append(name)
            else:
                (self.dir / name).unlink(missing_ok=True)
                changed = True
        swaps = valid
        if not swaps:
            return os.listdir(self.dir) if changed else names
        lo, hi = LONG_MAX, -1
        for name in swaps:
            if name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                base = offset_from_filename(name)
                seg = LogSegment(self.dir, base, suffix=SWAP_SUFFIX)
                end = base
                for header in seg.iter_headers(0):
                    end = header.next_offset
                seg.close_handles()
                lo, hi = min(lo, base), max(hi, end)
        for name in os.listdir(self.dir):
            stem = name.split(".", 1)[0]
            if name.endswith(SWAP_SUFFIX) or not stem.isdigit():
                continue
            if name.endswith((LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)) \
                    and lo <= int(stem) < hi:
                (self.dir / name).unlink(missing_ok=True)
        for name in swaps:
            file_system.replace(self.dir / name, self.dir / name[: -len(SWAP_SUFFIX)])
        return os.listdir(self.dir)

    def _recover_from(self, recovery_point: int, cache: LeaderEpochFileCache,
                      log_start_offset: int) -> None:
        segments = self.segments.segments
        if not segments:
            return
        start = self.segments.floor_index(recovery_point)
        # the producer state as of the first recovered segment: recovery applies every batch
        # after it and rebuilds the transaction indexes (Kafka's recoverSegment)
        psm = self.producer_state
        rebuild_producer_state(psm, self.segments, log_start_offset,
                               segments[start].base_offset)

        def on_batch(header: BatchHeader) -> None:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (cache.latest_epoch is None or epoch > cache.latest_epoch):
                cache.assign(epoch, header.base_offset)

        for i in range(start, len(segments)):
            segment = segments[i]
            later = list(segments[i + 1:])
            # later segments go before the corrupt tail is cut, so that a crash in between
            # leaves the corrupt tail (found again next time), never a hole
            truncated = segment.recover(self.config.max_message_bytes, on_batch,
                                        lambda later=later: self._delete(later), psm)
            if truncated > 0:
                break

    def _delete(self, doomed: list[LogSegment]) -> None:
        if doomed:
            self.segments.delete(doomed)

    def _rebuild_leader_epochs(self, cache: LeaderEpochFileCache) -> None:
        """Rebuild the epoch cache from the partition leader epochs in the batch headers."""
        entries: list[tuple[int, int]] = []
        for header in self.segments.iter_batch_headers(self.segments.bases[0]):
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not entries or epoch > entries[-1][0]):
                entries.append((epoch, header.base_offset))
        cache.clear()
        cache.assign_all(entries)


__all__ = ["LoadedLog", "LogLoader", "rebuild_producer_state", "txn_index_looks_valid"]
