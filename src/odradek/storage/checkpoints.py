"""Kafka's text checkpoint files (S-2.5), byte-compatible with Kafka's CheckpointFile:

    <version>            line 1, 0 for every file here
    <entry count>        line 2
    <entry>              one per line

* ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
  ``replication-offset-checkpoint`` (high watermarks), one per log dir: ``topic partition offset``.
* ``leader-epoch-checkpoint``, one per partition dir: ``epoch startOffset``.

Writes are atomic: a ``.tmp`` sibling is written and fsynced, renamed over the file, and the
directory is fsynced, so a crash leaves either the old or the new content. A file that does not
parse raises ``CheckpointError`` naming the file and the bad line. A missing or empty file reads
as no entries (Kafka creates empty checkpoint files on start).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from ..common import TopicPartition

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0

_WS = re.compile(r"\s+")
T = TypeVar("T")



class CheckpointError(OSError):
    """A checkpoint file that cannot be parsed (Kafka raises an IOException)."""


def fsync_path(path: Path, flags: int = 0) -> None:
    """fsync a file (or, with ``O_DIRECTORY`` in ``flags``, a directory) by its path; it is
    opened read-only, which is all fsync needs."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_open_or_path(fd: int | None, path: Path) -> None:
    """fsync an index file: through its open descriptor, else (closed, not deleted) by path."""
    if fd is not None:
        os.fsync(fd)
    elif path.exists():
        fsync_path(path)


def fsync_dir(path: Path) -> None:
    """fsync a directory so that a rename or a new file in it survives a power loss (best
    effort: a directory that cannot be opened or fsynced is passed over)."""
    with contextlib.suppress(OSError):
        fsync_path(path, getattr(os, "O_DIRECTORY", 0))


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a fsynced ``.tmp`` file and a rename."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _libc_syncfs() -> Callable[[int], int] | None:
    """Linux's syncfs(2) through libc (Python's os module has none), or None."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int

    def syncfs(fd: int) -> int:
        return 0 if fn(fd) == 0 else ctypes.get_errno() or -1
    return syncfs


_SYNCFS = _libc_syncfs() if os.name == "posix" else None


def syncfs_available() -> bool:
    return _SYNCFS is not None


def syncfs_dirs(dirs: Iterable[Path]) -> None:
    """syncfs(2) the filesystems of these directories, once each (every dirty page and
    metadata change on them reaches the disk); raises OSError if one fails or syncfs is
    missing."""
    if _SYNCFS is None:
        raise OSError("syncfs is not available")
    one_per_fs: dict[int, Path] = {}
    for d in dirs:
        with contextlib.suppress(FileNotFoundError):  # (a log deleted meanwhile)
            one_per_fs.setdefault(os.stat(d).st_dev, d)
    for d in one_per_fs.values():
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
                     | getattr(os, "O_DIRECTORY", 0))
        try:
            err = _SYNCFS(fd)
        finally:
            os.close(fd)
        if err:
            raise OSError(err, f"syncfs of {d} failed: {os.strerror(err) if err > 0 else err}")


def write_atomically_batch(items: Iterable[tuple[Path, bytes]]
                           ) -> dict[Path, OSError]:
    """``write_atomically`` for many files with two syncfs(2) calls instead of two fsyncs
    each: every ``.tmp`` written, one syncfs per filesystem (their contents are durable),
    every rename, one more syncfs (the renames are). A crash at any moment leaves each file
    with its old or its new complete content, never a torn one -- the guarantee of
    ``write_atomically``. Returns the files that failed, with their errors (FileNotFoundError: the
    partition directory is gone); the others are on disk when it returns."""
    failed: dict[Path, OSError] = {}
    renames: list[tuple[Path, Path]] = []
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    for path, data in items:
        tmp = path.with_name(path.name + ".tmp")
        try:
            fd = os.open(tmp, flags, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except OSError as exc:
            failed[path] = exc
            continue
        renames.append((tmp, path))
    try:
        syncfs_dirs({path.parent for _, path in renames})
    except OSError as exc:  # contents not known durable: rename nothing
        for tmp, path in renames:
            failed[path] = exc
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return failed
    renamed: list[Path] = []
    for tmp, path in renames:
        try:
            os.replace(tmp, path)
        except OSError as exc:
            failed[path] = exc
            continue
        renamed.append(path)
    try:
        syncfs_dirs({path.parent for path in renamed})
    except OSError as exc:
        for path in renamed:
            failed[path] = exc
    return failed


def encode(version: int, lines: list[str]) -> bytes:
    """A checkpoint file's bytes: version, entry count, one entry a line."""
    return (f"{version}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)).encode()


def _read(path: Path, version: int, parse: Callable[[list[str]], T | None]) -> list[T]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.splitlines()
    if not lines:
        return []

    def bad(line: str) -> CheckpointError:
        return CheckpointError(f"malformed line in checkpoint file {path}: {line!r}")

    def as_int(line: str) -> int:
        try:
            return int(line.strip())
        except ValueError:
            raise bad(line) from None

    read_version = as_int(lines[0])
    if read_version != version:
        raise CheckpointError(
            f"unrecognised version {read_version} in checkpoint file {path} "
            f"(expected {version})"
        )
    if len(lines) == 1:
        return []
    expected = as_int(lines[1])
    entries: list[T] = []
    for line in lines[2:]:
        parsed = parse(_WS.split(line.strip())) if line.strip() else None
        if parsed is None:
            raise bad(line)
        entries.append(parsed)
    if len(entries) != expected:
        raise CheckpointError(
            f"expected {expected} entries in checkpoint file {path} but found {len(entries)}"
        )
    return entries


class OffsetCheckpointFile:
    """``topic partition offset`` lines: recovery points, log start offsets, high watermarks."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        write_atomically(self.path, self.encode(offsets))

    @staticmethod
    def encode(offsets: Mapping[TopicPartition, int]) -> bytes:
        return encode(CHECKPOINT_VERSION, [f"{topic} {partition} {offset}"
                                           for (topic, partition), offset
                                           in sorted(offsets.items())])

    def read(self) -> dict[TopicPartition, int]:
        def parse(fields: list[str]) -> tuple[TopicPartition, int] | None:
            if len(fields) != 3:
                return None
            topic, partition, offset = fields
            try:
                return (topic, int(partition)), int(offset)
            except ValueError:
                return None

        return dict(_read(self.path, CHECKPOINT_VERSION, parse))


class LeaderEpochCheckpointFile:
    """``epoch startOffset`` lines of a partition's leader epoch cache (KIP-101)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, entries: Iterable[tuple[int, int]]) -> None:
        write_atomically(self.path, self.encode(entries))

    @staticmethod
    def encode(entries: Iterable[tuple[int, int]]) -> bytes:
        return encode(CHECKPOINT_VERSION, [f"{epoch} {offset}" for epoch, offset in entries])

    def read(self) -> list[tuple[int, int]]:
        def parse(fields: list[str]) -> tuple[int, int] | None:
            if len(fields) != 2:
                return None
            try:
                return int(fields[0]), int(fields[1])
            except ValueError:
                return None

        return _read(self.path, CHECKPOINT_VERSION, parse)
