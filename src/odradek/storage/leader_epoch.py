"""The leader epoch cache of one replica (KIP-101, S-3.7): (leader epoch -> start offset) pairs,
the offset of the first message each leader wrote, persisted in the partition's
``leader-epoch-checkpoint``. A follower asks the leader for the end offset of its latest epoch
(OffsetsForLeaderEpoch) and truncates there instead of at its high watermark.

Kafka's rules (LeaderEpochFileCache):
* ``assign(epoch, start_offset)`` is a no-op when the epoch is already the latest one and the
  offset is not smaller; otherwise it first removes, from the end, every entry whose epoch >= the
  new epoch or whose start offset >= the new start offset, then adds the new entry, so that both
  epochs and start offsets strictly increase.
* ``end_offset_for(epoch, leo)``: see its docstring.
* truncation from the end (log truncation) and from the start (log start offset moved).
Every change is persisted at once: written synchronously, or -- with a ``CheckpointWriter``
(the broker's log manager has one) -- handed to the writer thread, which writes the newest
content off the event loop, atomically; the in-memory cache changes synchronously either way,
and the LeaderAndIsr handler awaits the writer before answering (docs/performance.md).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from pathlib import Path

from .checkpoint_writer import CheckpointWriter
from .checkpoints import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    """Epoch entries sorted by epoch (and therefore by start offset)."""

    def __init__(self, partition_dir: Path | None, *, load: bool = True,
                 writer: CheckpointWriter | None = None) -> None:
        self._writer = writer
        self._checkpoint = (LeaderEpochCheckpointFile(Path(partition_dir) / LEADER_EPOCH_CHECKPOINT)
                            if partition_dir is not None else None)
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        if load and self._checkpoint is not None:
            for epoch, offset in self._checkpoint.read():
                self._assign(epoch, offset)
        if writer is not None and self._checkpoint is not None:
            writer.prepare(self._checkpoint.path)  # its spare, made when the writer is idle

    # -- reading --------------------------------------------------------------------------------

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    def latest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[-1], self._offsets[-1]) if self._epochs else None

    def earliest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[0], self._offsets[0]) if self._epochs else None

    def previous_epoch(self, epoch: int) -> int | None:
        i = bisect.bisect_left(self._epochs, epoch)
        return self._epochs[i - 1] if i > 0 else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the leader that wrote `offset` (the last entry starting at or before)."""
        i = bisect.bisect_right(self._offsets, offset)
        return self._epochs[i - 1] if i > 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch, Kafka's semantics:

        * requested epoch UNDEFINED (-1): (-1, -1);
        * the latest epoch: (epoch, log end offset);
        * larger than every known epoch (or no entries): (-1, -1);
        * smaller than every known epoch: (requested epoch, start offset of the first epoch);
        * otherwise: (largest epoch <= requested, start offset of the first epoch > requested).
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and self._epochs[-1] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher >= len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    # -- changing -------------------------------------------------------------------------------

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._epochs and self._epochs[-1] == epoch and start_offset >= self._offsets[-1]:
            return False
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        return True

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that the leader of `epoch` wrote its first message at `start_offset`.
        Returns True when the cache changed (and was persisted)."""
        changed = self._assign(epoch, start_offset)
        if changed:
            self._persist()
        return changed

    def assign_all(self, entries: Iterable[tuple[int, int]]) -> bool:
        """``assign`` each (epoch, start offset) in turn; persist once."""
        changed = False
        for epoch, start_offset in entries:
            changed |= self._assign(epoch, start_offset)
        if changed:
            self._persist()
        return changed

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove every entry whose start offset >= end_offset (the log was truncated there)."""
        if end_offset < 0 or not self._offsets or self._offsets[-1] < end_offset:
            return
        keep = bisect.bisect_left(self._offsets, end_offset)
        del self._epochs[keep:]
        del self._offsets[keep:]
        self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start offset moved to `start_offset`: drop entries that start at or before
        it, keeping the last of them re-started at `start_offset` (so an entry at exactly
        `start_offset` survives)."""
        removed = bisect.bisect_right(self._offsets, start_offset)
        if removed == 0:
            return
        epoch = self._epochs[removed - 1]
        del self._epochs[:removed]
        del self._offsets[:removed]
        self._epochs.insert(0, epoch)
        self._offsets.insert(0, start_offset)
        self._persist()

    def clear(self) -> None:
        """Remove every entry and persist (truncate_fully_and_start_at)."""
        self._epochs.clear()
        self._offsets.clear()
        self._persist()

    def _persist(self) -> None:
        if self._checkpoint is None:
            return
        if self._writer is not None:  # off the loop; a deleted dir is skipped by the writer
            self._writer.submit(self._checkpoint.path,
                                LeaderEpochCheckpointFile.encode(self.entries()))
        elif self._checkpoint.path.parent.is_dir():
            self._checkpoint.write(self.entries())
