"""Kafka's text checkpoint files: exact format, atomic replacement, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.storage.checkpoints import (
    CheckpointError,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    make_spare,
    spare_exchange_available,
    write_atomically,
    write_atomically_batch,
)


def test_offset_checkpoint_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write({("orders", 1): 42, ("__consumer_offsets", 17): 0,
                                      ("my-topic", 0): 2**40})
    assert path.read_text() == ("0\n3\n__consumer_offsets 17 0\nmy-topic 0 1099511627776\n"
                                "orders 1 42\n")
    assert OffsetCheckpointFile(path).read() == {
        ("orders", 1): 42, ("__consumer_offsets", 17): 0, ("my-topic", 0): 2**40}


def test_reads_a_file_written_by_kafka(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text("0\n2\nfoo 0 10\nfoo.bar-baz 3 7\n")
    assert OffsetCheckpointFile(path).read() == {("foo", 0): 10, ("foo.bar-baz", 3): 7}


def test_missing_or_empty_file_has_no_entries(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "nope").read() == {}
    (tmp_path / "empty").write_text("")
    assert OffsetCheckpointFile(tmp_path / "empty").read() == {}
    OffsetCheckpointFile(tmp_path / "zero").write({})
    assert (tmp_path / "zero").read_text() == "0\n0\n"
    assert OffsetCheckpointFile(tmp_path / "zero").read() == {}


@pytest.mark.parametrize(("content", "message"), [
    ("1\n0\n", "version"),
    ("x\n0\n", "malformed"),
    ("0\n2\nfoo 0 10\n", "expected 2 entries"),
    ("0\n1\nfoo 0\n", "malformed"),
    ("0\n1\nfoo zero 10\n", "malformed"),
    ("0\n1\nfoo 0 ten\n", "malformed"),
    ("0\nmany\n", "malformed"),
])
def test_malformed_files_raise_a_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_text(content)
    with pytest.raises(CheckpointError, match=message) as info:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(info.value)


def test_leader_epoch_checkpoint_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(path).write([(0, 0), (3, 120), (7, 4500)])
    assert path.read_text() == "0\n3\n0 0\n3 120\n7 4500\n"
    assert LeaderEpochCheckpointFile(path).read() == [(0, 0), (3, 120), (7, 4500)]
    path.write_text("0\n1\n3 120 9\n")
    with pytest.raises(CheckpointError):
        LeaderEpochCheckpointFile(path).read()


def test_writes_replace_atomically(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    cp = OffsetCheckpointFile(path)
    cp.write({("a", 0): 1})
    cp.write({("a", 0): 2, ("b", 1): 3})
    assert cp.read() == {("a", 0): 2, ("b", 1): 3}
    # the first write renamed its .tmp; the second exchanged it, so the old content stays
    # behind as the next write's .tmp (the spare), where the filesystem can exchange
    names = sorted(p.name for p in tmp_path.iterdir())
    if spare_exchange_available():
        assert names == ["cp", "cp.tmp"]
        assert OffsetCheckpointFile(tmp_path / "cp.tmp").read() == {("a", 0): 1}
    else:
        assert names == ["cp"]


needs_exchange = pytest.mark.skipif(not spare_exchange_available(),
                                    reason="no renameat2(RENAME_EXCHANGE) here")


@needs_exchange
def test_a_spare_is_overwritten_in_place_and_keeps_its_inode(tmp_path: Path) -> None:
    """Once a file has a spare, writes create no inode: the file and its .tmp swap inodes, and
    a shorter content truncates the longer old one."""
    path = tmp_path / "leader-epoch-checkpoint"
    cp = LeaderEpochCheckpointFile(path)
    cp.write([(0, 0), (1, 10), (2, 20)])
    cp.write([(0, 0)])  # creates the spare (exchange)
    inodes = {path.stat().st_ino, (tmp_path / "leader-epoch-checkpoint.tmp").stat().st_ino}
    for epoch in range(3, 9):
        entries = [(0, 0)] if epoch % 2 else [(0, 0), (epoch, epoch * 100)]
        cp.write(entries)
        assert cp.read() == entries
        assert {path.stat().st_ino,
                (tmp_path / "leader-epoch-checkpoint.tmp").stat().st_ino} == inodes
    assert path.read_text() == "0\n2\n0 0\n8 800\n"


@needs_exchange
def test_batch_writes_report_the_files_left_without_a_spare(tmp_path: Path) -> None:
    first = tmp_path / "a" / "leader-epoch-checkpoint"
    second = tmp_path / "b" / "leader-epoch-checkpoint"
    for p in (first, second):
        p.parent.mkdir()
    second.write_bytes(b"0\n0\n")
    without: list[Path] = []
    assert write_atomically_batch([(first, b"0\n1\n0 0\n"), (second, b"0\n1\n3 7\n")],
                                  without) == {}
    assert without == [first]  # renamed: no spare; `second` was exchanged
    assert (second.with_name(second.name + ".tmp")).read_bytes() == b"0\n0\n"
    assert not first.with_name(first.name + ".tmp").exists()


def test_make_spare_creates_only_what_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    assert make_spare(path) == 2  # the empty file (no entries, as Kafka creates it) and .tmp
    assert LeaderEpochCheckpointFile(path).read() == []
    LeaderEpochCheckpointFile(path).write([(4, 40)])
    assert make_spare(path) == (0 if spare_exchange_available() else 1)
    assert LeaderEpochCheckpointFile(path).read() == [(4, 40)]  # never clobbered
    assert make_spare(tmp_path / "gone" / "leader-epoch-checkpoint") == 0


def test_a_stale_tmp_file_does_not_matter(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    (tmp_path / "cp.tmp").write_text("garbage from a crash")
    OffsetCheckpointFile(path).write({("a", 0): 5})
    assert OffsetCheckpointFile(path).read() == {("a", 0): 5}
    write_atomically(tmp_path / "raw", b"bytes")
    assert (tmp_path / "raw").read_bytes() == b"bytes"
