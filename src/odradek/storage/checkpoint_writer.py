"""Checkpoint files written off the broker's event loop (docs/performance.md, "Control plane").

A partition that becomes leader records the new epoch in its leader epoch cache (S-3.7) at once
-- batches are stamped with it straight away -- but writing ``leader-epoch-checkpoint`` (a
``.tmp`` write, an fsync, a rename and a directory fsync) took 11-26 % of the loop during
10,000-partition failovers. ``CheckpointWriter`` moves those writes to a few threads per log
manager:

* **coalesced per file**: a file submitted again before it was written keeps its place in the
  queue and only its newest content is written (``CoalescingQueue``, pure);
* **in order**: a file is never written by two threads at once and its contents land in the
  order submitted; each write goes through ``write_atomically`` (tmp + fsync + rename + dir
  fsync), so a crash at any moment leaves either the previous or a newer complete
  checkpoint, never a torn one; a few threads write different files concurrently (their
  fsyncs share journal commits). Where Linux's syncfs(2) exists, a thread takes every file
  queued (up to ``BATCH_SIZE``; ``hold()`` lets a LeaderAndIsr queue all of its files
  first) and, from ``checkpoint_sync_process.MIN_FILES`` files on, a helper process writes
  them with ``write_atomically_batch``: all the ``.tmp`` files, one syncfs, all the
  renames, one more syncfs -- the same crash guarantee with two syncs per batch instead of
  two fsyncs per file (~3,300 files per LeaderAndIsr in a 10,000-partition failover), and
  no GIL hand-offs with the busy loop. syncfs also flushes other dirty data of that
  filesystem (segments written since the last writeback), which the answer then waits for;
* **awaitable**: ``await flush()`` returns once everything submitted before the call is on
  disk -- the LeaderAndIsr handler answers only then, as Kafka answers after
  ``LeaderEpochFileCache.assign``'s flush;
* ``forget(dir)`` (a log being deleted) drops the dir's pending files and waits for a write in
  progress, so nothing is written into a directory after it was renamed away;
* **spares** (storage/checkpoints.py): where the ``.tmp`` can be exchanged with the file, a
  write leaves the old content behind as the next write's ``.tmp``, so only a file's first
  write creates one. ``prepare(path)`` asks for an empty spare ahead of time and a first write
  asks for a new one; the threads create them (through the helper process when there is one),
  ``SPARE_CHUNK`` at a time and at most ``SPARES_PER_SECOND``, only when no write is pending or
  held (``make_spare``: O_EXCL, so a spare being written is left alone, and a directory gone
  meanwhile is passed over). A failover's thousands of leader epoch checkpoint writes then
  create and free no inode (docs/performance.md, "10,000 partitions").

Without a running writer (tools, unit tests) the caches write synchronously as before. With
``threads=0`` the writer has no thread and no helper process: ``submit`` writes the file at once
on the caller's thread, so the deterministic simulation (odradek.sim), which runs everything on
one loop, writes checkpoints in a fixed order (FoundationDB's simulator runs every actor on its
one thread the same way).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .checkpoint_sync_process import BatchWriteProcess
from .checkpoints import make_spare, spare_exchange_available, syncfs_available, write_atomically

log = logging.getLogger("odradek.checkpoint_writer")

#: writes many (path, content) pairs; returns the ones that failed, with their errors
BatchWrite = Callable[[list[tuple[Path, bytes]]], dict[Path, OSError]]

DEFAULT_THREADS = 8  # concurrent checkpoint writes per log manager
# files one thread writes per batch (two syncfs calls each): a whole failover's LeaderAndIsr
# in one (the helper process writes one batch at a time; two of 2,048 and 1,282 files took
# 0.50 s + 0.12 s, one after the other, on this project's test machine)
BATCH_SIZE = 16384
BATCH_THREADS = 2  # threads when writing in batches
SPARE_CHUNK = 256  # spares a thread makes before looking for writes again
# spares made per second at most: a new 10,000-partition broker makes its 20,000 files over
# ~5-10 s instead of competing at once with the topic creation for the cores
SPARES_PER_SECOND = 2000
SWITCH_INTERVAL_S = 0.0005  # see lower_switch_interval


def lower_switch_interval(interval_s: float = SWITCH_INTERVAL_S) -> float:
    """Lower the interpreter's thread switch interval (5 ms by default) to `interval_s`.

    A writer thread releases the GIL around each of a checkpoint's eight system calls and
    must get it back after each; while the event loop is busy, that takes up to one switch
    interval (the convoy effect): 333 files took 1.2-2.2 s behind a busy thread at 5 ms, and
    0.25-0.56 s at 0.5 ms (idle: 0.09 s). The interval matters only while threads contend
    for the GIL, i.e. while the writer has work. Returns the interval now in force."""
    if sys.getswitchinterval() > interval_s:
        sys.setswitchinterval(interval_s)
    return sys.getswitchinterval()


@dataclass(slots=True)
class CoalescingQueue:
    """Pending file contents keyed by path, in order of each path's oldest unwritten
    submission. Sequence numbers count submissions; ``done`` is the watermark: every submission
    with a sequence number <= ``done`` has been written (possibly with newer content)."""

    _pending: dict[Path, tuple[int, bytes]] = field(default_factory=dict)
    last_seq: int = 0
    done: int = 0
    in_flight: dict[Path, int] = field(default_factory=dict)  # being written: path -> seq

    def __len__(self) -> int:
        return len(self._pending)

    def submit(self, path: Path, data: bytes) -> int:
        """Queue `data` for `path`; a path already queued keeps its place, newest data wins."""
        self.last_seq += 1
        queued = self._pending.get(path)
        self._pending[path] = (queued[0] if queued else self.last_seq, data)
        self._advance()
        return self.last_seq

    def pop(self) -> tuple[Path, bytes] | None:
        """The next file to write: the oldest unwritten submission of a file not being written
        already (one file is never written by two threads at once); ``written(path)`` after."""
        for path in self._pending:
            if path not in self.in_flight:
                break
        else:
            return None
        seq, data = self._pending.pop(path)
        self.in_flight[path] = seq
        return path, data

    def written(self, path: Path) -> int:
        """The popped `path` is on disk (or was given up); returns the new watermark."""
        del self.in_flight[path]
        self._advance()
        return self.done

    def written_all(self, paths: list[Path]) -> int:
        """``written`` for each of `paths` (a batch), moving the watermark once."""
        for path in paths:
            del self.in_flight[path]
        self._advance()
        return self.done

    def forget(self, directory: Path) -> int:
        """Drop every pending file inside `directory`; returns how many."""
        doomed = [p for p in self._pending if p.parent == directory]
        for p in doomed:
            del self._pending[p]
        self._advance()
        return len(doomed)

    def clear(self) -> None:
        self._pending.clear()
        self._advance()

    def _advance(self) -> None:
        oldest = list(self.in_flight.values())
        if self._pending:
            oldest.append(next(iter(self._pending.values()))[0])
        self.done = max(self.done, (min(oldest) - 1) if oldest else self.last_seq)


class CheckpointWriter:
    """`threads` threads writing checkpoint files through a ``CoalescingQueue`` (see module
    doc); concurrent fsyncs of different files share the filesystem's journal commits.
    ``write`` is the I/O edge (``write_atomically``; tests may pass their own). ``threads=0``:
    inline, each file written by ``submit`` itself (no batches, no spares)."""

    def __init__(self, name: str = "checkpoint-writer",
                 write: Callable[[Path, bytes], object] = write_atomically,
                 threads: int = DEFAULT_THREADS,
                 write_batch: BatchWrite | bool | None = True) -> None:
        if threads < 0:
            raise ValueError(f"a checkpoint writer needs zero or more threads, not {threads}")
        self.name = name
        self._write = write
        self.inline = threads == 0
        if self.inline:
            write_batch = None
        # Batches (write_atomically_batch: two syncfs calls per batch instead of two fsyncs
        # per file, ~3,300 leader-epoch checkpoints per LeaderAndIsr of a 10,000-partition
        # failover) when syncfs exists and the default per-file write is used; True: that
        # choice, None/False: per file, a callable: that batch writer.
        if write_batch is True:  # large batches in a helper process (no GIL convoy)
            write_batch = (BatchWriteProcess()
                           if write is write_atomically and syncfs_available() else None)
        self._write_batch = write_batch or None
        # spares only with the real writes (a test's recorder writes no files)
        self._spares_on = not self.inline and write is write_atomically and \
            spare_exchange_available() and (
            self._write_batch is None or isinstance(self._write_batch, BatchWriteProcess))
        self._spares: dict[Path, None] = {}  # paths wanting a spare, oldest first
        self._spares_not_before = 0.0  # (time.monotonic) pacing, SPARES_PER_SECOND
        self.spares_made = 0
        self.batches = 0
        if self._write_batch is not None:  # one batch in the syncs, the next one forming
            threads = min(threads, BATCH_THREADS)
        self._queue = CoalescingQueue()
        self._cond = threading.Condition()  # guards _queue, _waiters, _stopping
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._tiebreak = itertools.count()
        self._n_threads = threads
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._abandon = False
        self._held = 0  # hold() depth
        self.files_written = 0
        self.write_errors = 0
        # told of every failed write (the log manager: its dir goes offline, KIP-112)
        self.on_error: Callable[[Path, OSError], None] | None = None

    # -- loop side ------------------------------------------------------------------------------

    def submit(self, path: Path, data: bytes) -> None:
        with self._cond:
            if self._stopping:
                raise RuntimeError(f"{self.name} is closed")
            self._queue.submit(Path(path), data)
            if self.inline:
                self._write_inline()
                return
            if len(self._threads) < min(self._n_threads, len(self._queue)):
                self._start_thread()
            if not (self._held and self._write_batch is not None):
                # (while held, a batch writer's threads could only wake to wait again, each
                # wake-up taking the GIL from the loop applying the LeaderAndIsr; the release
                # wakes them all)
                self._cond.notify()

    def prepare(self, path: Path) -> None:
        """Make `path` an empty ``.tmp`` spare when the writer is idle (see module doc), so its
        first write creates no file either; a no-op where spares are not used."""
        if not self._spares_on:
            return
        with self._cond:
            if self._stopping:
                return
            self._spares[Path(path)] = None
            if not self._threads:
                self._start_thread()
            self._cond.notify()

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._run, daemon=True,
                                  name=f"{self.name}-{len(self._threads)}")
        self._threads.append(thread)
        thread.start()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """While held (a LeaderAndIsr being applied), a batch writer starts no batch: the
        files submitted meanwhile go in one or a few batches once released, instead of a
        batch of one or two files each as the writer thread wakes (each batch costs two
        syncfs calls). A per-file writer writes on meanwhile."""
        with self._cond:
            self._held += 1
        try:
            yield
        finally:
            with self._cond:
                self._held -= 1
                self._cond.notify_all()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    async def flush(self) -> None:
        """Return once everything submitted before this call is written."""
        loop = asyncio.get_running_loop()
        with self._cond:
            target = self._queue.last_seq
            if self._queue.done >= target:
                return
            fut: asyncio.Future[None] = loop.create_future()
            heapq.heappush(self._waiters, (target, next(self._tiebreak), fut))
        await fut

    def flush_blocking(self, timeout: float | None = None) -> bool:
        """``flush`` for synchronous callers (clean shutdown, tests). False on timeout."""
        with self._cond:
            target = self._queue.last_seq
            return self._cond.wait_for(lambda: self._queue.done >= target, timeout)

    def forget(self, directory: Path) -> None:
        """Drop pending writes into `directory` and wait for a write into it in progress (one
        file): afterwards nothing more is written there (the log is being deleted)."""
        directory = Path(directory)
        with self._cond:
            self._queue.forget(directory)
            for p in [p for p in self._spares if p.parent == directory]:
                del self._spares[p]
            self._cond.wait_for(lambda: all(p.parent != directory
                                            for p in self._queue.in_flight))
        self._wake_waiters()

    def close(self, *, abandon: bool = False, timeout: float = 60.0) -> None:
        """Stop the thread: after writing everything pending, or (`abandon`, what a crash
        does) dropping it -- a write in progress still completes, atomically."""
        with self._cond:
            self._stopping = True
            self._abandon = abandon
            if abandon:
                self._queue.clear()
            self._spares.clear()
            self._cond.notify_all()
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout)
        close = getattr(self._write_batch, "close", None)
        if close is not None:
            close()
        self._wake_waiters()

    # -- writer thread --------------------------------------------------------------------------

    def _run(self) -> None:
        batched = self._write_batch is not None
        while True:
            items: list[tuple[Path, bytes]] = []
            spares: list[Path] = []
            with self._cond:
                while True:
                    if self._stopping and (self._abandon or not len(self._queue)):
                        return
                    item = None if batched and self._held and not self._stopping \
                        else self._queue.pop()
                    if item is not None:
                        items.append(item)
                        break
                    wait: float | None = None
                    if self._spares and not self._held and not len(self._queue):
                        wait = self._spares_not_before - time.monotonic()
                        if wait <= 0:
                            while self._spares and len(spares) < SPARE_CHUNK:
                                spare = next(iter(self._spares))
                                del self._spares[spare]
                                spares.append(spare)
                            self._spares_not_before = time.monotonic() + \
                                len(spares) / SPARES_PER_SECOND
                            break
                    self._cond.wait(wait)
                while items and batched and len(items) < BATCH_SIZE:
                    more = self._queue.pop()
                    if more is None:
                        break
                    items.append(more)
            if spares:
                self._make_spares(spares)
                continue
            without_spare: list[Path] = []
            if batched:
                self._write_many(items, without_spare)
            else:
                self._write_one(*items[0], without_spare)
            with self._cond:
                self._queue.written_all([path for path, _ in items])
                for path in without_spare:  # a first write used the spare: a new one, later
                    self._spares[path] = None
                self._cond.notify_all()
            self._wake_waiters()

    def _write_inline(self) -> None:
        """``threads=0``: write what ``submit`` just queued, now, on the caller's thread."""
        item = self._queue.pop()
        if item is None:
            return
        self._write_one(*item, [])
        self._queue.written_all([item[0]])

    def _make_spares(self, paths: list[Path]) -> None:
        try:
            if isinstance(self._write_batch, BatchWriteProcess):
                self.spares_made += self._write_batch.make_spares(paths)
                return
            for path in paths:
                self.spares_made += make_spare(path)
        except OSError as exc:  # (e.g. a full disk: the next write creates its .tmp)
            log.debug("No spares for %d checkpoint files: %s", len(paths), exc)

    def _write_many(self, items: list[tuple[Path, bytes]], without_spare: list[Path]) -> None:
        assert self._write_batch is not None
        if len(items) < getattr(self._write_batch, "min_files", 1):
            for item in items:  # a small batch: file by file, as without batches
                self._write_one(*item, without_spare)
            return
        phases: list[float] = []
        started = time.perf_counter()
        try:
            if self._spares_on:
                failed = self._write_batch(items, without_spare, phases)  # type: ignore[call-arg]
            else:
                failed = self._write_batch(items)
        except OSError as exc:
            failed = {path: exc for path, _ in items}
        if log.isEnabledFor(logging.DEBUG):
            log.debug("Wrote a batch of %d checkpoint files in %.3f s (%s)", len(items),
                      time.perf_counter() - started,
                      "writes, syncfs, moves, syncfs: " + " ".join(f"{x:.3f}" for x in phases)
                      if phases else "phases not timed")
        self.batches += 1
        self.files_written += len(items) - len(failed)
        for path, exc in failed.items():
            if isinstance(exc, FileNotFoundError):
                continue  # the partition directory is gone (log deleted): nothing to keep
            self.write_errors += 1
            log.error("Error while writing checkpoint file %s: %s", path, exc)
            if self.on_error is not None:
                self.on_error(path, exc)

    def _write_one(self, path: Path, data: bytes, without_spare: list[Path]) -> None:
        try:
            kept = self._write(path, data)
            self.files_written += 1
            if self._spares_on and kept is False:
                without_spare.append(path)
        except FileNotFoundError:
            pass  # the partition directory is gone (log deleted): nothing to keep
        except OSError as exc:
            self.write_errors += 1
            log.exception("Error while writing checkpoint file %s", path)
            if self.on_error is not None:
                self.on_error(path, exc)

    def _wake_waiters(self) -> None:
        ready: list[asyncio.Future[None]] = []
        with self._cond:
            done = self._queue.done
            while self._waiters and (self._waiters[0][0] <= done or self._stopping):
                ready.append(heapq.heappop(self._waiters)[2])
        for fut in ready:
            with contextlib.suppress(RuntimeError):  # that loop is closed
                fut.get_loop().call_soon_threadsafe(_resolve, fut)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
