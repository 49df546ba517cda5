"""common.file_system: the os functions themselves in production, another file system for the
length of a `use` block (then the os functions again, even after an error), and storage's
writes, syncs and renames reach it."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.common import file_system
from odradek.storage.checkpoints import write_atomically
from odradek.storage.partition_metadata import write_partition_metadata
from odradek.storage.segment import LogSegment


class Recording:
    """The os functions, each call noted as (name, path of the descriptor or argument)."""

    exchange = None

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def _note(self, name: str, fd: int) -> None:
        self.calls.append((name, os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))

    def fsync(self, fd: int) -> None:
        self._note("fsync", fd)
        os.fsync(fd)

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        self._note("pwrite", fd)
        return os.pwrite(fd, data, offset)

    def write(self, fd: int, data: Any) -> int:
        self._note("write", fd)
        return os.write(fd, data)

    def replace(self, src: Any, dst: Any) -> None:
        self.calls.append(("replace", os.path.basename(os.fsdecode(dst))))
        os.replace(src, dst)

    def rename(self, src: Any, dst: Any) -> None:
        self.calls.append(("rename", os.path.basename(os.fsdecode(dst))))
        os.rename(src, dst)


def test_production_binds_the_os_functions() -> None:
    assert file_system.fsync is os.fsync and file_system.pwrite is os.pwrite
    assert file_system.write is os.write and file_system.replace is os.replace
    assert file_system.rename is os.rename


def test_use_rebinds_for_the_block_and_restores_after_an_error() -> None:
    fs = Recording()
    exchange = file_system.exchange
    with pytest.raises(RuntimeError), file_system.use(fs):
        assert file_system.fsync == fs.fsync and file_system.exchange is None
        raise RuntimeError
    assert file_system.fsync is os.fsync and file_system.exchange is exchange


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux's /proc")
def test_storage_writes_syncs_and_renames_through_the_seam(tmp_path: Path) -> None:
    fs = Recording()
    with file_system.use(fs):
        write_atomically(tmp_path / "checkpoint", b"0\n0\n")
        write_partition_metadata(tmp_path, uuid.UUID(int=7))
        segment = LogSegment.create(tmp_path, 0)
        segment.append(0, 1, 0, b"x" * 70)
        segment.flush()
        segment.close()
    assert ("pwrite", "checkpoint.tmp") in fs.calls and ("fsync", "checkpoint.tmp") in fs.calls
    assert ("replace", "checkpoint") in fs.calls and ("fsync", tmp_path.name) in fs.calls
    assert ("write", "partition.metadata.tmp") in fs.calls
    assert ("replace", "partition.metadata") in fs.calls
    log = f"{0:020d}.log"
    assert ("pwrite", log) in fs.calls and ("fsync", log) in fs.calls
