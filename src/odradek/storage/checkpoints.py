"""Kafka's text checkpoint files (S-2.5), byte-compatible with Kafka's CheckpointFile:

    <version>            line 1, 0 for every file here
    <entry count>        line 2
    <entry>              one per line

* ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
  ``replication-offset-checkpoint`` (high watermarks), one per log dir: ``topic partition offset``.
* ``leader-epoch-checkpoint``, one per partition dir: ``epoch startOffset``.

Writes are atomic: a ``.tmp`` sibling is written and fsynced, moved over the file, and the
directory is fsynced, so a crash leaves either the old or the new content. A file that does not
parse raises ``CheckpointError`` naming the file and the bad line. A missing or empty file reads
as no entries (Kafka creates empty checkpoint files on start).

**The spare.** Creating a file is the expensive part of such a write: on this project's test
machine 0.2-0.4 ms of kernel time (a new inode, then the old one freed by the rename), against
~30 µs for everything else. So where Linux's ``renameat2(RENAME_EXCHANGE)`` works, the ``.tmp``
is *exchanged* with the file instead of renamed over it: afterwards ``.tmp`` holds the previous
content and is the next write's ``.tmp``, overwritten in place (a write at offset 0 and a
truncate: no inode made or freed). The crash guarantee is unchanged: the new content is durable
before the exchange, and a crash while the spare is being overwritten tears only the spare, which
nothing reads. A file without a spare yet (its first write, or a filesystem without the exchange)
is renamed as before; ``make_spare`` creates an empty spare ahead of time, and the file itself
(empty) if it is missing (the checkpoint writer does that off the hot path for every leader
epoch checkpoint, so a failover's first write of a partition's file is cheap too). A stale
``.tmp`` left by a crash is likewise just a spare.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ..common import TopicPartition, file_system

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
        file_system.fsync(fd)
    finally:
        os.close(fd)


def fsync_open_or_path(fd: int | None, path: Path) -> None:
    """fsync an index file: through its open descriptor, else (closed, not deleted) by path."""
    if fd is not None:
        file_system.fsync(fd)
    elif path.exists():
        fsync_path(path)


def fsync_dir(path: Path) -> None:
    """fsync a directory so that a rename or a new file in it survives a power loss (best
    effort: a directory that cannot be opened or fsynced is passed over)."""
    with contextlib.suppress(OSError):
        fsync_path(path, getattr(os, "O_DIRECTORY", 0))


def tmp_path(path: Path) -> Path:
    """The ``.tmp`` sibling a checkpoint is written through (and its spare, see module doc)."""
    return path.with_name(path.name + ".tmp")


def _write_tmp(tmp: Path | bytes, data: bytes, *, sync: bool) -> None:
    """Put `data` in `tmp`: the spare's inode overwritten in place if there is one (no O_TRUNC:
    a write at offset 0, then a truncate to the new length), else a new file."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        view = memoryview(data)
        offset = 0
        while offset < len(view):
            offset += file_system.pwrite(fd, view[offset:], offset)
        os.ftruncate(fd, len(data))
        if sync:
            file_system.fsync(fd)
    finally:
        os.close(fd)


def _libc_call(name: str, argtypes: list[Any]) -> Callable[..., int] | None:
    """A libc function through ctypes that returns 0 or the errno (-1 if errno is unset), or
    None where libc lacks it (syncfs has no wrapper in Python's os module)."""
    try:
        import ctypes
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int

    def call(*args: Any) -> int:
        return 0 if fn(*args) == 0 else ctypes.get_errno() or -1
    return call


def replace_keeping_spare(tmp: Path | bytes, path: Path | bytes) -> bool:
    """Move the written `tmp` over `path` atomically: exchanged with it when `path` exists and
    the filesystem can (`tmp` then holds the old content: the spare; True), else renamed
    (False: no spare left)."""
    exchange = file_system.exchange
    if exchange is not None:
        err = exchange(os.fsencode(tmp), os.fsencode(path))
        if err == 0:
            return True
        if err in (errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP):
            file_system.exchange = None  # not on this filesystem or kernel: rename from now on
        elif err != errno.ENOENT:  # (ENOENT: no file yet, renamed below)
            raise OSError(err, f"exchanging {tmp} with {path}: {os.strerror(err)}")
    file_system.replace(tmp, path)
    return False


def spare_exchange_available() -> bool:
    return file_system.exchange is not None


def make_spare(path: Path) -> int:
    """Create what `path` lacks of itself (empty: no entries, as Kafka creates its checkpoint
    files) and its ``.tmp`` spare, so that its next write is an exchange and creates no file.
    O_EXCL: an existing file, being written or not, is left alone; a directory gone meanwhile is
    passed over. Returns how many files were created."""
    made = 0
    for target in (Path(path), tmp_path(Path(path))):
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | getattr(os, "O_CLOEXEC", 0), 0o644))
        except FileExistsError:
            continue
        except (FileNotFoundError, NotADirectoryError):
            return made
        made += 1
    return made


def write_atomically(path: Path, data: bytes) -> bool:
    """Write `data` to `path` through a fsynced ``.tmp`` file (the spare, if any) moved over it,
    then fsync the directory. True if a spare is left (see ``replace_keeping_spare``)."""
    path = Path(path)
    tmp = tmp_path(path)
    _write_tmp(tmp, data, sync=True)
    kept = replace_keeping_spare(tmp, path)
    fsync_dir(path.parent)
    return kept


def _libc_syncfs() -> Callable[[int], int] | None:
    """Linux's syncfs(2) through libc (Python's os module has none), or None."""
    import ctypes
    return _libc_call("syncfs", [ctypes.c_int])


_SYNCFS = _libc_syncfs() if os.name == "posix" else None


def syncfs_available() -> bool:
    return _SYNCFS is not None


def syncfs_dirs(dirs: Iterable[Path | bytes]) -> None:
    """syncfs(2) the filesystems of these directories, once each (every dirty page and
    metadata change on them reaches the disk); raises OSError if one fails or syncfs is
    missing."""
    if _SYNCFS is None:
        raise OSError("syncfs is not available")
    one_per_fs: dict[int, Path | bytes] = {}
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
            raise OSError(err, f"syncfs of {os.fsdecode(d)} failed: "
                               f"{os.strerror(err) if err > 0 else err}")


def write_atomically_batch(items: Iterable[tuple[Path, bytes]],
                           without_spare: list[Path] | None = None,
                           phases: list[float] | None = None) -> dict[Path, OSError]:
    """``write_atomically`` for many files with two syncfs(2) calls instead of two fsyncs
    each: every ``.tmp`` written, one syncfs per filesystem (their contents are durable),
    every rename, one more syncfs (the renames are). A crash at any moment leaves each file
    with its old or its new complete content, never a torn one -- the guarantee of
    ``write_atomically``. Returns the files that failed, with their errors (FileNotFoundError: the
    partition directory is gone); the others are on disk when it returns. Files renamed rather
    than exchanged (no spare left, see the module doc) are appended to `without_spare`; the
    seconds of the four phases (writes, syncfs, moves, syncfs) to `phases`."""
    clock = time.perf_counter
    started = clock()
    marks: list[float] = []
    failed: dict[Path, OSError] = {}
    # byte paths in the loops: pathlib's with_name/parent cost more than the system calls
    renames: list[tuple[bytes, bytes, Path]] = []
    for path, data in items:
        target = os.fsencode(path)
        tmp = target + b".tmp"
        try:
            _write_tmp(tmp, data, sync=False)
        except OSError as exc:
            failed[path] = exc
            continue
        renames.append((tmp, target, path))
    marks.append(clock())
    try:
        syncfs_dirs({os.path.dirname(target) for _, target, _ in renames})
    except OSError as exc:  # contents not known durable: rename nothing
        for tmp, _, path in renames:
            failed[path] = exc
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return failed
    marks.append(clock())
    renamed: list[tuple[bytes, Path]] = []
    for tmp, target, path in renames:
        try:
            if not replace_keeping_spare(tmp, target) and without_spare is not None:
                without_spare.append(path)
        except OSError as exc:
            failed[path] = exc
            continue
        renamed.append((target, path))
    marks.append(clock())
    try:
        syncfs_dirs({os.path.dirname(target) for target, _ in renamed})
    except OSError as exc:
        for _, path in renamed:
            failed[path] = exc
    marks.append(clock())
    if phases is not None:
        phases.extend(b - a for a, b in zip([started, *marks], marks, strict=False))
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
