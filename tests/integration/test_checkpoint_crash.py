"""A crash at any moment leaves valid leader-epoch-checkpoint files (S-2.5, S-3.7), now that
the broker writes them off its event loop (storage/checkpoint_writer.py):

* a process driving a real ``LogManager`` (its writer thread, real fsyncs) through rounds of
  leader changes is killed with SIGKILL mid-stream: every file still parses, holds a prefix of
  the epochs assigned, and holds at least every round whose ``flush()`` had returned (the
  LeaderAndIsr handler answers only after that flush);
* a broker process killed with SIGKILL right after a topic's leaders were elected restarts,
  loads every checkpoint and serves the partitions;
* ``delete_log`` on the event loop renames the directory at once and removes it in a thread.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from odradek.storage.checkpoints import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from odradek.storage.log_manager import LogManager
from tests.processes import BrokerProcess

PARTITIONS = 60

DRIVER = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from odradek.storage.log_manager import LogManager

    async def main() -> None:
        lm = LogManager([Path(sys.argv[1])])
        logs = [lm.get_or_create_log("t", p) for p in range(int(sys.argv[2]))]
        epoch = 0
        while True:
            epoch += 1
            for log in logs:  # one LeaderAndIsr: every partition's leader changes
                log.leader_epoch_cache.assign(epoch, epoch * 10)
            await lm.checkpoint_writer.flush()
            print(f"flushed {epoch}", flush=True)
            await asyncio.sleep(0)

    asyncio.run(main())
""")


def test_sigkill_while_writing_leader_epochs_leaves_valid_checkpoints(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(log_dir), str(PARTITIONS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    flushed = 0
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while flushed < 25 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            flushed = int(line.split()[1])
        # SIGKILL while the next rounds' writes are queued or in progress
        proc.send_signal(signal.SIGKILL)
        rest, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert flushed >= 25, f"the driver did not get going: {err[-2000:]}"
    for line in rest.splitlines():  # rounds flushed between our last read and the kill
        flushed = max(flushed, int(line.split()[1]))
    latest = []
    for p in range(PARTITIONS):
        entries = LeaderEpochCheckpointFile(log_dir / f"t-{p}" / LEADER_EPOCH_CHECKPOINT).read()
        k = len(entries)
        assert entries == [(e, e * 10) for e in range(1, k + 1)], f"t-{p}: {entries}"
        assert k >= flushed, f"t-{p} lost epoch {flushed} after its flush returned"
        latest.append(k)
    assert max(latest) <= flushed + 1
    # the broker starts again on what the crash left
    lm = LogManager([log_dir])
    try:
        assert len(lm.partitions()) == PARTITIONS
    finally:
        lm.close_without_shutdown()


def test_broker_sigkill_right_after_leader_election(tmp_path: Path) -> None:
    from odradek.client import AsyncAdmin, AsyncProducer

    broker = BrokerProcess(tmp_path / "broker")
    try:
        broker.start()

        async def create() -> None:
            async with AsyncAdmin({"bootstrap.servers": broker.bootstrap}) as admin:
                await admin.create_topic("crash", 200, 1)

        asyncio.run(asyncio.wait_for(create(), 60))
        broker.kill()  # at once: leader epochs just assigned, checkpoints being written
        log_dir = broker.log_dir
        for p in range(200):
            path = log_dir / f"crash-{p}" / LEADER_EPOCH_CHECKPOINT
            if path.exists():
                assert LeaderEpochCheckpointFile(path).read() in ([], [(0, 0)]), path
        broker.start()

        async def produce() -> None:
            async with AsyncProducer({"bootstrap.servers": broker.bootstrap,
                                      "acks": "all"}) as producer:
                sent = [await producer.send("crash", b"v", partition=p) for p in (0, 99, 199)]
                for fut in sent:
                    assert (await fut).offset == 0

        asyncio.run(asyncio.wait_for(produce(), 60))
        broker.stop()
        for p in range(200):
            assert LeaderEpochCheckpointFile(
                log_dir / f"crash-{p}" / LEADER_EPOCH_CHECKPOINT).read() == [(0, 0)]
    finally:
        broker.close()


def test_delete_log_on_the_loop_renames_at_once_and_removes_in_a_thread(tmp_path: Path) -> None:
    lm = LogManager([tmp_path])
    log = lm.get_or_create_log("gone", 0)
    (log.dir / "big").write_bytes(os.urandom(1 << 20))

    async def delete() -> None:
        log.leader_epoch_cache.assign(3, 0)  # queued, must not land in the deleted dir
        assert lm.delete_log("gone", 0)
        assert not (tmp_path / "gone-0").exists()  # the name is free at once
        fresh = lm.get_or_create_log("gone", 0)
        assert fresh.leader_epoch_cache.entries() == []
        await lm.checkpoint_writer.flush()

    asyncio.run(delete())
    assert lm.wait_for_deletions(30)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("gone")) == ["gone-0"]
    # the queued (3, 0) did not land in the new log's dir (which may hold an empty
    # checkpoint and its spare, made by the writer when idle)
    assert LeaderEpochCheckpointFile(tmp_path / "gone-0" / LEADER_EPOCH_CHECKPOINT).read() == []
    lm.shutdown()
