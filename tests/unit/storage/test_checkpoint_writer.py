"""The off-loop checkpoint writer (storage/checkpoint_writer.py, S-2.5, S-3.7) and the
controller's bounded write pipeline (controller/pipeline.py, KAFKA-5642)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from odradek.controller.pipeline import run_bounded
from odradek.storage import checkpoints
from odradek.storage.checkpoint_writer import CheckpointWriter, CoalescingQueue
from odradek.storage.checkpoints import (
    LeaderEpochCheckpointFile,
    syncfs_available,
    write_atomically_batch,
)
from odradek.storage.leader_epoch import LeaderEpochFileCache

A, B, C = Path("/d/a/f"), Path("/d/b/f"), Path("/d/c/f")

# -- CoalescingQueue (pure) ---------------------------------------------------------------------


def test_queue_coalesces_keeping_the_oldest_place_and_the_newest_data() -> None:
    q = CoalescingQueue()
    assert q.submit(A, b"a1") == 1
    q.submit(B, b"b1")
    q.submit(A, b"a2")  # A keeps its place (first), its data is replaced
    assert len(q) == 2
    assert q.pop() == (A, b"a2")
    assert q.pop() == (B, b"b1")
    assert q.pop() is None


def test_queue_watermark_counts_only_written_submissions() -> None:
    q = CoalescingQueue()
    q.submit(A, b"a1")  # 1
    q.submit(B, b"b1")  # 2
    q.submit(A, b"a2")  # 3, coalesced into A's place (seq 1)
    assert q.done == 0
    assert q.pop() == (A, b"a2")
    assert q.done == 0  # in flight is not written
    assert q.written(A) == 1  # B (seq 2) is still pending
    q.pop()
    assert q.written(B) == 3  # nothing pending: every submission is on disk
    q.submit(C, b"c")
    assert q.done == 3


def test_queue_forget_drops_a_directory_and_advances_the_watermark() -> None:
    q = CoalescingQueue()
    q.submit(A, b"a")
    q.submit(B, b"b")
    assert q.forget(A.parent) == 1
    assert q.done == 1
    assert q.pop() == (B, b"b")
    assert q.written(B) == 2


def test_queue_never_hands_out_a_file_being_written() -> None:
    q = CoalescingQueue()
    q.submit(A, b"a1")
    assert q.pop() == (A, b"a1")
    q.submit(A, b"a2")  # resubmitted while its write is in flight
    q.submit(B, b"b")
    assert q.pop() == (B, b"b")  # A waits for its write in flight
    assert q.pop() is None
    assert q.written(B) == 0  # A's first write (seq 1) is still in flight
    assert q.written(A) == 1
    assert q.pop() == (A, b"a2")
    assert q.written(A) == 3


# -- CheckpointWriter (a real thread, recording writes) -----------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.writes: list[tuple[Path, bytes]] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, path: Path, data: bytes) -> None:
        self.gate.wait(10)
        self.writes.append((path, data))


def test_writer_flush_waits_for_the_newest_content_coalesced() -> None:
    rec = Recorder()
    writer = CheckpointWriter(write=rec, threads=1)

    async def main() -> None:
        rec.gate.clear()  # hold the thread so submissions pile up
        writer.submit(A, b"a1")
        await asyncio.sleep(0.05)  # A's first write is in progress (blocked)
        for i in range(2, 50):
            writer.submit(A, b"a%d" % i)
            writer.submit(B, b"b%d" % i)
        flushed = asyncio.ensure_future(writer.flush())
        await asyncio.sleep(0.05)
        assert not flushed.done()
        rec.gate.set()
        await asyncio.wait_for(flushed, 10)

    asyncio.run(main())
    writer.close()
    assert rec.writes[0] == (A, b"a1")
    assert rec.writes[-2:] == [(A, b"a49"), (B, b"b49")]
    assert len(rec.writes) == 3  # 97 submissions, 3 writes


def _blocked_on_first_write(*paths: Path) -> tuple[Recorder, CheckpointWriter]:
    rec = Recorder()
    writer = CheckpointWriter(write=rec, threads=1)
    rec.gate.clear()
    for path in paths:
        writer.submit(path, path.parent.name.encode())
    while writer.pending == len(paths):  # wait until the first write is in progress
        threading.Event().wait(0.005)
    threading.Timer(0.05, rec.gate.set).start()
    return rec, writer


def test_writer_forget_drops_a_directory_after_the_write_in_progress() -> None:
    rec, writer = _blocked_on_first_write(A, B, C)
    writer.forget(B.parent)  # B was pending: dropped
    writer.forget(A.parent)  # returns once A's write (in progress) is done
    assert rec.writes[0] == (A, b"a")
    assert writer.flush_blocking(10)
    writer.close()
    assert rec.writes == [(A, b"a"), (C, b"c")]


def test_writer_abandon_drops_what_is_queued() -> None:
    rec, writer = _blocked_on_first_write(A, B, C)
    writer.close(abandon=True)  # B and C are dropped, as a crash would; A completes
    assert rec.writes == [(A, b"a")]
    with pytest.raises(RuntimeError):
        writer.submit(A, b"late")


def test_writer_threads_never_write_one_file_concurrently(tmp_path: Path) -> None:
    writing: set[Path] = set()
    overlaps: list[Path] = []
    lock = threading.Lock()

    def write(path: Path, data: bytes) -> None:
        with lock:
            if path in writing:
                overlaps.append(path)
            writing.add(path)
        threading.Event().wait(0.0005)
        path.write_bytes(data)
        with lock:
            writing.discard(path)

    writer = CheckpointWriter(write=write, threads=4)
    paths = [tmp_path / f"f{i}" for i in range(5)]
    for n in range(300):
        writer.submit(paths[n % 5], b"%d" % n)
    assert writer.flush_blocking(30)
    writer.close()
    assert overlaps == []
    assert [p.read_bytes() for p in paths] == [b"%d" % (295 + i) for i in range(5)]


def test_writer_skips_a_deleted_directory(tmp_path: Path) -> None:
    writer = CheckpointWriter()
    writer.submit(tmp_path / "gone" / "leader-epoch-checkpoint", b"0\n0\n")
    writer.submit(tmp_path / "f", b"x")
    assert writer.flush_blocking(10)
    writer.close()
    assert (tmp_path / "f").read_bytes() == b"x"
    assert writer.write_errors == 0 and writer.files_written == 1


def test_leader_epoch_cache_persists_through_the_writer(tmp_path: Path) -> None:
    writer = CheckpointWriter()
    cache = LeaderEpochFileCache(tmp_path, load=False, writer=writer)
    for epoch in range(1, 200):
        cache.assign(epoch, epoch * 10)  # in memory at once
    assert cache.latest_entry() == (199, 1990)
    cache.truncate_from_end(1000)
    assert writer.flush_blocking(10)
    writer.close()
    assert LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint").read() == \
        cache.entries()
    assert writer.files_written < 199  # coalesced



def test_an_inline_writer_writes_in_submit_with_no_thread(tmp_path: Path) -> None:
    """threads=0 (the deterministic simulation): each file is on disk when submit returns,
    in the order submitted; no thread, no helper process, no spare."""
    before = threading.active_count()
    writer = CheckpointWriter(threads=0)
    writer.submit(tmp_path / "a", b"1")
    assert (tmp_path / "a").read_bytes() == b"1"
    writer.submit(tmp_path / "gone" / "leader-epoch-checkpoint", b"0\n0\n")  # skipped
    writer.prepare(tmp_path / "b")  # no spare
    writer.submit(tmp_path / "a", b"2")
    assert (tmp_path / "a").read_bytes() == b"2" and writer.pending == 0
    asyncio.run(writer.flush())  # nothing to wait for
    assert writer.flush_blocking(0)
    writer.close()
    assert threading.active_count() == before
    assert writer.files_written == 2 and writer.write_errors == 0
    assert not (tmp_path / "b.tmp").exists()  # prepare made no spare
    with pytest.raises(ValueError):
        CheckpointWriter(threads=-1)


# -- batches (two syncfs calls per batch instead of two fsyncs per file) ----------------------

needs_syncfs = pytest.mark.skipif(not syncfs_available(), reason="no syncfs(2) here")


@needs_syncfs
def test_batch_write_replaces_every_file_and_reports_a_gone_directory(tmp_path: Path) -> None:
    paths = [tmp_path / f"t-{i}" / "leader-epoch-checkpoint" for i in range(20)]
    for p in paths:
        p.parent.mkdir()
        p.write_bytes(b"old")
    gone = tmp_path / "gone" / "leader-epoch-checkpoint"
    failed = write_atomically_batch([(p, b"new %d" % i) for i, p in enumerate(paths)]
                                    + [(gone, b"x")])
    assert list(failed) == [gone] and isinstance(failed[gone], FileNotFoundError)
    assert [p.read_bytes() for p in paths] == [b"new %d" % i for i in range(20)]
    # exchanged where the filesystem can: each .tmp is the old content, the next write's spare
    from odradek.storage.checkpoints import spare_exchange_available
    spares = [p.read_bytes() for p in sorted(tmp_path.glob("*/*.tmp"))]
    assert spares == ([b"old"] * 20 if spare_exchange_available() else [])


@needs_syncfs
def test_batch_write_renames_nothing_when_the_contents_cannot_be_synced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "t-0" / "leader-epoch-checkpoint"
    p.parent.mkdir()
    p.write_bytes(b"old")
    monkeypatch.setattr(checkpoints, "_SYNCFS", lambda _fd: 5)  # EIO
    failed = write_atomically_batch([(p, b"new")])
    assert list(failed) == [p] and failed[p].errno == 5
    assert p.read_bytes() == b"old" and not list(tmp_path.glob("*/*.tmp"))


def test_writer_in_batches_reports_errors_but_not_gone_directories(tmp_path: Path) -> None:
    batches: list[list[Path]] = []
    bad, gone = tmp_path / "bad" / "f", tmp_path / "gone" / "f"
    submitted = threading.Event()

    def write_batch(items: list[tuple[Path, bytes]]) -> dict[Path, OSError]:
        submitted.wait(10)  # the rest queues meanwhile: it goes in one or two batches
        batches.append([p for p, _ in items])
        return {p: (FileNotFoundError(2, "gone") if p == gone else OSError(5, "EIO"))
                for p, _ in items if p in (bad, gone)}
    errors: list[Path] = []
    writer = CheckpointWriter(write_batch=write_batch)
    writer.on_error = lambda path, _exc: errors.append(path)
    paths = [tmp_path / f"t-{i}" / "f" for i in range(300)] + [bad, gone]
    for p in paths:
        writer.submit(p, b"x")
    submitted.set()
    assert writer.flush_blocking(10)
    writer.close()
    assert sorted(p for b in batches for p in b) == sorted(paths)  # each file once
    assert len(batches) <= 4 and writer.batches == len(batches)
    assert errors == [bad] and writer.write_errors == 1
    assert writer.files_written == len(paths) - 2


# -- run_bounded --------------------------------------------------------------------------------


def test_run_bounded_window_order_and_results() -> None:
    in_flight, peak, started = 0, 0, []

    async def op(x: int) -> int:
        nonlocal in_flight, peak
        started.append(x)
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001 * (x % 3))
        in_flight -= 1
        return x * x

    results = asyncio.run(run_bounded(range(50), op, window=7))
    assert results == [x * x for x in range(50)]
    assert started == list(range(50))
    assert peak == 7


def test_run_bounded_first_error_cancels_the_rest() -> None:
    finished: list[int] = []

    async def op(x: int) -> None:
        if x == 3:
            raise LookupError("controller moved")
        await asyncio.sleep(0.05)
        finished.append(x)

    with pytest.raises(LookupError):
        asyncio.run(run_bounded(range(100), op, window=10))
    assert finished == []
    with pytest.raises(ValueError):
        asyncio.run(run_bounded([1], op, window=0))


def test_lower_switch_interval_only_lowers() -> None:
    import sys

    from odradek.storage.checkpoint_writer import lower_switch_interval

    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        assert lower_switch_interval(0.0005) == pytest.approx(0.0005)
        assert lower_switch_interval(0.002) == pytest.approx(0.0005)  # never raised
    finally:
        sys.setswitchinterval(before)


@needs_syncfs
def test_large_batches_go_to_the_helper_process(tmp_path: Path) -> None:
    """Batches of at least `min_files` are written by the helper process (its own GIL),
    with the same results as in the broker process: files replaced, a gone directory
    reported as FileNotFoundError; closing stops the helper."""
    from odradek.storage.checkpoint_sync_process import BatchWriteProcess
    helper = BatchWriteProcess(min_files=3)
    try:
        paths = [tmp_path / f"t-{i}" / "leader-epoch-checkpoint" for i in range(4)]
        for p in paths:
            p.parent.mkdir()
        gone = tmp_path / "gone" / "leader-epoch-checkpoint"
        failed = helper([(p, b"%d" % i) for i, p in enumerate(paths)] + [(gone, b"x")])
        assert helper.batches_in_helper == 1
        assert list(failed) == [gone] and isinstance(failed[gone], FileNotFoundError)
        assert [p.read_bytes() for p in paths] == [b"0", b"1", b"2", b"3"]
        assert helper([(paths[0], b"small")]) == {}  # below min_files: in this process
        assert helper.batches_in_helper == 1 and paths[0].read_bytes() == b"small"
        proc = helper._proc
        assert proc is not None
    finally:
        helper.close()
    assert proc.poll() is not None


@needs_syncfs
def test_helper_process_reports_files_left_without_a_spare(tmp_path: Path) -> None:
    from odradek.storage.checkpoint_sync_process import BatchWriteProcess
    from odradek.storage.checkpoints import spare_exchange_available
    helper = BatchWriteProcess(min_files=2)
    try:
        paths = [tmp_path / f"t-{i}" / "leader-epoch-checkpoint" for i in range(3)]
        for p in paths:
            p.parent.mkdir()
        paths[0].write_bytes(b"0\n0\n")
        without: list[Path] = []
        assert helper([(p, b"0\n0\n") for p in paths], without) == {}
        assert helper.batches_in_helper == 1
        expected = paths[1:] if spare_exchange_available() else paths
        assert sorted(without) == sorted(expected)
    finally:
        helper.close()


def test_writer_prepares_spares_when_idle_and_after_a_first_write(tmp_path: Path) -> None:
    """prepare() makes the file (empty) and its spare off the hot path; a first write that
    had to rename gets a new spare; once a file has one, writes exchange and create nothing."""
    from odradek.storage.checkpoints import spare_exchange_available
    if not spare_exchange_available():
        pytest.skip("no renameat2(RENAME_EXCHANGE) here")
    writer = CheckpointWriter()
    try:
        dirs = [tmp_path / f"t-{i}" for i in range(5)]
        for d in dirs:
            d.mkdir()
        LeaderEpochFileCache(dirs[0], writer=writer)  # prepare()s its checkpoint
        fresh = LeaderEpochFileCache(dirs[1], load=False, writer=None)
        fresh_writer_path = dirs[1] / "leader-epoch-checkpoint"
        deadline = time.monotonic() + 10
        while writer.spares_made < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(p.name for p in dirs[0].iterdir()) == [
            "leader-epoch-checkpoint", "leader-epoch-checkpoint.tmp"]
        assert (dirs[0] / "leader-epoch-checkpoint").read_bytes() == b""  # no entries
        assert fresh.entries() == []
        writer.submit(fresh_writer_path, b"0\n1\n0 0\n")  # a first write: renamed
        assert writer.flush_blocking(10)
        deadline = time.monotonic() + 10
        while writer.spares_made < 3 and time.monotonic() < deadline:  # (counted once made)
            time.sleep(0.01)
        assert fresh_writer_path.with_name("leader-epoch-checkpoint.tmp").exists()
        made = writer.spares_made
        assert made == 3
        writer.submit(fresh_writer_path, b"0\n1\n5 50\n")
        assert writer.flush_blocking(10)
        assert fresh_writer_path.read_bytes() == b"0\n1\n5 50\n"
        assert fresh_writer_path.with_name("leader-epoch-checkpoint.tmp").read_bytes() == \
            b"0\n1\n0 0\n"  # exchanged: the old content is the spare
        time.sleep(0.05)
        assert writer.spares_made == made
    finally:
        writer.close()


def test_helper_process_makes_spares(tmp_path: Path) -> None:
    from odradek.storage.checkpoint_sync_process import BatchWriteProcess
    helper = BatchWriteProcess(min_files=2)
    try:
        paths = [tmp_path / f"t-{i}" / "leader-epoch-checkpoint" for i in range(3)]
        for p in paths:
            p.parent.mkdir()
        paths[0].write_bytes(b"0\n1\n2 20\n")
        gone = tmp_path / "gone" / "leader-epoch-checkpoint"
        assert helper.make_spares(paths[:1]) == 1  # below min_files: in this process
        assert helper._proc is None
        assert helper.make_spares([*paths, gone]) == 4  # 2 spares + 2 missing files
        assert helper._proc is not None and helper._proc.poll() is None  # (in the helper)
        assert paths[0].read_bytes() == b"0\n1\n2 20\n"  # never clobbered
        assert all(p.with_name(p.name + ".tmp").exists() for p in paths)
        assert helper.make_spares(paths) == 0
    finally:
        helper.close()


def test_yielding_hands_the_loop_back_every_n_items() -> None:
    import asyncio

    from odradek.controller.pipeline import yielding

    async def run() -> tuple[list[int], list[int]]:
        seen: list[int] = []
        ticks: list[int] = []

        async def ticker() -> None:
            while True:
                ticks.append(len(seen))
                await asyncio.sleep(0)
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        async for i in yielding(range(10), every=4):
            seen.append(i)
        task.cancel()
        return seen, ticks
    seen, ticks = asyncio.run(run())
    assert seen == list(range(10))
    assert ticks[:3] == [0, 4, 8]  # the other task ran after items 4 and 8
