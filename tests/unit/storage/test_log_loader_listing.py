"""Start-up loading with one directory listing per log (10,000 partitions):
stray files are still removed, the listing the load works from reflects the removals, and an
empty last segment's log end offset is its base offset (no index read). And a clean close
fsyncs only what is not durable yet."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.common import file_system
from odradek.protocol.records import build_batch
from odradek.storage.log import Log
from odradek.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager


def _written_log(root: Path) -> Path:
    log = Log.open(root / "t-0")
    log.append_as_follower(build_batch([(b"k", b"v")] * 3, base_offset=0,
                                       partition_leader_epoch=1))
    log.roll()
    log.close(flush=True)
    return root / "t-0"


def test_reopening_keeps_the_log_end_offset_of_an_empty_rolled_segment(tmp_path: Path) -> None:
    d = _written_log(tmp_path)
    for clean in (True, False):
        log = Log.open(d, recovery_point=3, had_clean_shutdown=clean)
        assert log.log_end_offset == 3
        assert [s.base_offset for s in log.segments] == [0, 3]
        log.close(flush=True)


def test_stray_files_are_removed_and_orphan_indexes_dropped(tmp_path: Path) -> None:
    d = _written_log(tmp_path)
    (d / "00000000000000000000.log.deleted").write_bytes(b"x")
    (d / "00000000000000000100.log.cleaned").write_bytes(b"")
    (d / "00000000000000000200.index").write_bytes(b"")  # no .log: orphan
    log = Log.open(d, recovery_point=3, had_clean_shutdown=True)
    names = {p.name for p in d.iterdir()}
    assert "00000000000000000000.log.deleted" not in names
    assert "00000000000000000100.log.cleaned" not in names
    assert "00000000000000000200.index" not in names
    assert log.log_end_offset == 3
    log.close(flush=True)


def test_log_manager_loads_only_partition_directories(tmp_path: Path) -> None:
    lm = LogManager([tmp_path])
    for p in range(3):
        lm.get_or_create_log("t", p)
    lm.shutdown()
    (tmp_path / "not-a-partition-file").write_bytes(b"")
    (tmp_path / "junk").mkdir()
    lm = LogManager([tmp_path])
    try:
        assert sorted(lm.partitions()) == [("t", 0), ("t", 1), ("t", 2)]
        assert lm.had_clean_shutdown[tmp_path.absolute()] is True
        assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    finally:
        lm.shutdown()


def _count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = file_system.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)
    monkeypatch.setattr(file_system, "fsync", counting)
    return calls


def test_clean_close_of_an_idle_log_fsyncs_nothing(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log.open(tmp_path / "t-0")
    log.append_as_follower(build_batch([(b"k", b"v")] * 3, base_offset=0))
    log.flush()
    log.close(flush=True)  # writes the final time index entry: fsynced
    log = Log.open(tmp_path / "t-0", recovery_point=3, had_clean_shutdown=True)
    calls = _count_fsyncs(monkeypatch)
    log.close(flush=True)  # nothing new since: as Kafka, no fsync
    assert calls == []
    log = Log.open(tmp_path / "t-0", recovery_point=3, had_clean_shutdown=True)
    log.append_as_follower(build_batch([(b"k", b"w")], base_offset=3))
    log.close(flush=True)  # unflushed data: fsynced, the recovery point moves
    assert calls and log.recovery_point == 4
