"""What the log answers (Kafka's LogAppendInfo, FetchDataInfo, TimestampAndOffset) and how it is
flushed (the segments and files a flush makes durable, planned on the loop and fsynced off it)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .checkpoints import fsync_dir, fsync_path
from .segment import FileRegion
from .transaction_index import AbortedTransaction


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What an append did (Kafka's LogAppendInfo). For a duplicate of an idempotent producer's
    batch, the ORIGINAL offsets and ``duplicate=True``; nothing was written."""

    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    duplicate: bool = False
    valid_bytes: int = 0


@dataclass(slots=True)
class FetchData:
    """The result of ``Log.read``: file regions of whole batches (possibly from several
    segments) plus the offsets a Fetch response reports."""

    regions: list[FileRegion]
    fetch_offset: int
    high_offset: int  # the bound used: no batch at or after it was returned
    log_start_offset: int
    log_end_offset: int
    first_entry_incomplete: bool = False
    # read_committed reads: the aborted transactions overlapping the data (else None)
    aborted_transactions: list[AbortedTransaction] | None = None

    @property
    def size(self) -> int:
        return sum(r.size for r in self.regions)

    def read_bytes(self) -> bytes:
        return b"".join(r.read_bytes() for r in self.regions)


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class FlushPlan:
    """What a flush up to `offset` must fsync: files (log and indexes of the segments below
    it) and, for segments created since the last flush, their directory."""

    offset: int
    files: tuple[Path, ...]
    directory: Path | None
    truncations: int


def fsync_files(plan: FlushPlan) -> None:
    """The plan's fsyncs (any thread). A file removed meanwhile (retention, truncation) needs
    none; other errors propagate."""
    for path in plan.files:
        with contextlib.suppress(FileNotFoundError):
            fsync_path(path)
    if plan.directory is not None:
        fsync_dir(plan.directory)
