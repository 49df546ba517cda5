"""The simulated disk: real files as the page cache, and beside them a record of what is durable,
so that a simulated machine crash keeps only what was synced (FoundationDB's simulated
`AsyncFileNonDurable`, TigerBeetle's storage fault model, in miniature).

The brokers write real files, as in production: those are the operating system's page cache,
which survives a process crash (`cluster.faults.kill`) whole. `SimDisk` is installed as the
file-system seam (`common.file_system`) for a run, and keeps

* per file the bytes it held at its last ``fsync``;
* per path the file its name durably points to: a name becomes durable when its directory is
  fsynced (a rename, a new file, a removal), or when a file with no durable name is fsynced
  (its creation, as ext4 and XFS commit it).

A file is known by a key of the model's own, not by its inode number: the kernel hands a
removed file's inode number to the next file created, at once on ext4, and which number goes to
which file depends on everything else on the machine. Had the record been keyed by inode, a
name removed but not yet synced would come back after a crash with the bytes of whichever file
took its number, and a run would not be a function of its seed. A key follows a file through
the seam's renames; the same inode number seen at another path, or with another inode
generation (``FS_IOC_GETVERSION``, where the file system has one), is a new file.

`machine_crash(directory)` (a power loss of the machine holding it; the broker must be killed
first) then rewrites the directory's files from that record: every durable name gets its inode's
synced bytes; a file whose current bytes extend them keeps a torn part of its unsynced tail
(drawn from the seed: none, some, or all of it, and half the time the end of what is kept is
garbage, as a write cut mid-sector leaves it); a file, rename or truncation never synced is
undone (a renamed-over file comes back, a file never synced disappears). Directories themselves
are not modelled: they survive, and a directory renamed (`file_system.rename`) moves what is
durable in it at once.

`fail(directory, errno.EIO)` (or ``"EIO"``, ``errno.ENOSPC``, ``"ENOSPC"``) makes every later
write and fsync of a file under the directory raise that OSError, as a failing or full disk
does, until `repair(directory)`.

Fsyncs cost no real fsync (the real files only need to survive the process) and no virtual time;
each reads the file back to keep its bytes, so its cost grows with the file (small segments, as
a simulation's, keep it low).
Each sync, crash and failure is folded into the run's digest with the path relative to `root`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .digest import Digest
from .random import SimRandom

__all__ = ["SimDisk", "memory_dir", "temporary_data_dir"]


#: the free space a memory-backed directory must have to take a run's files (a run of the
#: explorer's 60 virtual seconds leaves about 2 MB; two run at once)
MEMORY_DIR_MIN_FREE = 256 << 20


def memory_dir() -> str | None:
    """Where a run's brokers' files go by default: Linux's /dev/shm (a tmpfs) if it is there,
    writable and has `MEMORY_DIR_MIN_FREE` bytes free, else None (the default temporary
    directory). The simulated disk makes no real fsync, but the real file system still does the
    work of every creation, write, rename and removal: a run of the explorer's default mix,
    whose operations make leader-epoch and other checkpoints by the thousand, spends about a
    fifth less CPU on a tmpfs than on ext4 (docs/performance.md). tmpfs hands out fresh inode
    numbers rather than reusing removed ones, and the model keys files by its own keys anyway:
    a run's digest is the same on either."""
    shm = "/dev/shm"
    try:
        if not (os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK)):
            return None
        st = os.statvfs(shm)
    except OSError:
        return None
    return shm if st.f_bavail * st.f_frsize >= MEMORY_DIR_MIN_FREE else None


#: the length of a run's temporary data directory's path, wherever it is made
DATA_DIR_PATH_LENGTH = 48


def temporary_data_dir() -> str:
    """A new temporary directory for a run's brokers' files: in `memory_dir()` if the machine
    has one, else the default temporary directory; its path always `DATA_DIR_PATH_LENGTH`
    characters long (the name's prefix padded), where the base allows. Kafka's error messages
    name a log directory (a full disk's "Error while appending to ... in dir ..."), so the
    path's length is in the bytes the clients receive and in the run's digest: with a fixed
    length, a seed gives the same run on a machine with /dev/shm and on one without, and
    whatever TMPDIR says (up to 29 characters)."""
    base = memory_dir() or tempfile.gettempdir()
    prefix = "odradek-sim-"
    pad = DATA_DIR_PATH_LENGTH - len(os.path.join(base, prefix)) - 8  # mkdtemp adds 8
    return tempfile.mkdtemp(prefix=prefix + "-" * max(pad, 0), dir=base)


def _path_of(fd: int) -> str:
    """The path an open descriptor names now (Linux's /proc; ' (deleted)' once unlinked)."""
    return os.readlink(f"/proc/self/fd/{fd}")


_FS_IOC_GETVERSION = 0x80087601  # Linux's _IOR('v', 1, long): the inode's generation


def _generation(fd: int) -> int:
    """The generation of the inode `fd` is open on (a number the file system draws when it
    hands an inode number out again), 0 where the file system keeps none."""
    try:
        return int(struct.unpack("l", fcntl.ioctl(fd, _FS_IOC_GETVERSION, bytes(8)))[0])
    except OSError:
        return 0


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


class SimDisk:
    """The durability model of the simulated machines' disks (see the module doc). Install it
    with `common.file_system.use(disk)`; `Simulation.run` does."""

    exchange = None  # no renameat2 exchange: the checkpoint spare's rename is modelled instead

    def __init__(self, random: SimRandom, digest: Digest, time: Callable[[], float],
                 root: str | Path | None = None) -> None:
        self.random = random
        self.digest = digest
        self.time = time
        self.root = None if root is None else os.path.abspath(root)
        self._synced: dict[int, bytes] = {}  # file key -> its bytes at its last fsync
        self._names: dict[str, int] = {}  # durable path -> file key
        # the same names by directory, and how many name each file: a directory's fsync and
        # a name's removal then look only at what they concern (the high watermark checkpoint
        # syncs its directory every few seconds, among thousands of names)
        self._dirs: dict[str, dict[str, None]] = {}
        self._links: dict[int, int] = {}
        # inode number -> (key, path, generation) of the file last seen with it
        self._files: dict[int, tuple[int, str, int]] = {}
        self._keys = 0
        self._failed: dict[str, int] = {}  # directory (with a trailing /) -> errno
        self.fsyncs = 0
        self.torn_bytes = 0
        # every machine crash: (time, directory, its report); what the invariant monitor
        # needs to tell a crash's loss from a bug's
        self.crashes: list[tuple[float, str, dict[str, int]]] = []

    # -- the seam (common.file_system) ---------------------------------------------------------

    def fsync(self, fd: int) -> None:
        path = _path_of(fd)
        if self._failed:
            self._check(path)
        st = os.fstat(fd)
        self.fsyncs += 1
        if stat.S_ISDIR(st.st_mode):
            self._sync_dir(path)
            return
        if path.endswith(" (deleted)"):
            return
        data = _read(path)
        if data is None:
            return
        key = self._key(path, st.st_ino, _generation(fd))
        self._synced[key] = data
        if self._names.get(path) != key and (path not in self._names or key not in self._links):
            self._name(path, key)
        self._record("fsync", f"{self._rel(path)} {len(data)}")

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        if self._failed:
            self._check(_path_of(fd))
        return os.pwrite(fd, data, offset)

    def write(self, fd: int, data: Any) -> int:
        if self._failed:
            self._check(_path_of(fd))
        return os.write(fd, data)

    def replace(self, src: Any, dst: Any) -> None:
        self._move(src, dst, os.replace)

    def rename(self, src: Any, dst: Any) -> None:
        self._move(src, dst, os.rename)

    # -- faults ---------------------------------------------------------------------------------

    def fail(self, directory: str | Path, error: int | str) -> None:
        """From now on every write and fsync under `directory` raises OSError(`error`): an
        errno, or its name (``"EIO"``, ``"ENOSPC"``)."""
        if isinstance(error, str):
            error = int(getattr(errno, error))
        self._failed[os.path.join(os.path.abspath(directory), "")] = error
        self._record("fail", f"{self._rel(str(directory))} {error}")

    def repair(self, directory: str | Path) -> None:
        """Writes under `directory` succeed again (a disk replaced, space freed)."""
        self._failed.pop(os.path.join(os.path.abspath(directory), ""), None)
        self._record("repair", self._rel(str(directory)))

    def machine_crash(self, directory: str | Path) -> dict[str, int]:
        """Power loss of the machine holding `directory`: every file under it is put back to
        what was durable (see the module doc). Returns per file (relative to `directory`) the
        unsynced bytes kept (torn: garbage at their end half the time), -1 for a file
        removed, -2 for one put back to older content; files left as they were are omitted."""
        top = os.path.abspath(directory)
        prefix = os.path.join(top, "")
        rng = self.random
        current: dict[str, int] = {}  # path -> the key of the file there now
        for base, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(base, name)
                current[path] = self._key_of(path)
        durable = sorted(p for p in self._names if p.startswith(prefix))
        plan: dict[str, bytes] = {}
        report: dict[str, int] = {}
        for path in durable:
            key = self._names[path]
            if not os.path.isdir(os.path.dirname(path)):  # its directory was removed
                self._forget(path)
                continue
            synced = self._synced.get(key, b"")
            data = _read(path) if current.get(path) == key else None
            if data is not None and data == synced:
                continue
            if data is not None and len(data) > len(synced) and data.startswith(synced):
                tail = data[len(synced):]
                kept = rng.randrange(len(tail) + 1)
                torn = bytearray(tail[:kept])
                if torn and rng.random() < 0.5:
                    cut = rng.randrange(len(torn))
                    torn[cut:] = rng.randbytes(len(torn) - cut)
                plan[path] = synced + bytes(torn)
                report[os.path.relpath(path, top)] = kept
                self.torn_bytes += kept
            else:
                plan[path] = synced
                report[os.path.relpath(path, top)] = -2
        for path in sorted(current):
            if path not in self._names:
                os.unlink(path)
                report[os.path.relpath(path, top)] = -1
        for path, data in plan.items():  # each a file of its own from now on, all it holds synced
            with open(path, "wb") as f:
                f.write(data)
                key = self._key(path, os.fstat(f.fileno()).st_ino, _generation(f.fileno()),
                                new=True)
            self._name(path, key)
            self._synced[key] = data
        for rel in sorted(report):
            self._record("crash", f"{self._rel(os.path.join(top, rel))} {report[rel]}")
        self.crashes.append((self.time(), top, dict(report)))
        return report

    # -- the model ------------------------------------------------------------------------------

    def _check(self, path: str) -> None:
        for directory, error in self._failed.items():
            if path.startswith(directory):
                raise OSError(error, os.strerror(error), path)

    def _sync_dir(self, directory: str) -> None:
        """Every name in `directory` durable as it is now (files only; removed names dropped)."""
        present: dict[str, int] = {}
        with os.scandir(directory) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_file(follow_symlinks=False):
                    present[entry.path] = self._key_of(entry.path)
        gone = [p for p in self._dirs.get(directory, ()) if p not in present]
        for path, key in present.items():
            self._name(path, key)
        for path in gone:
            self._forget(path)
        self._record("fsync", f"{self._rel(directory)}/ {len(present)}")

    def _key(self, path: str, ino: int, generation: int, new: bool = False) -> int:
        """The key of the file at `path` with inode number `ino` and `generation`: the key
        last seen with them, unless the number was seen elsewhere (the file it named removed
        and the number handed out again) or `new` (a new file for the model)."""
        seen = self._files.get(ino)
        if not new and seen is not None and seen[1] == path and seen[2] == generation:
            return seen[0]
        self._keys += 1
        self._files[ino] = (self._keys, path, generation)
        return self._keys

    def _key_of(self, path: str) -> int:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            return self._key(path, os.fstat(fd).st_ino, _generation(fd))
        finally:
            os.close(fd)

    def _forget(self, path: str) -> None:
        self._unname(path)

    def _name(self, path: str, key: int) -> None:
        """`path` names file `key` durably."""
        old = self._names.get(path)
        if old == key:
            return
        self._names[path] = key
        self._links[key] = self._links.get(key, 0) + 1
        if old is not None:
            self._unlink(old)
        self._dirs.setdefault(os.path.dirname(path), {})[path] = None

    def _unname(self, path: str) -> int:
        """`path` names nothing durably any more: the file it named."""
        key = self._names.pop(path)
        self._unlink(key)
        directory = os.path.dirname(path)
        names = self._dirs[directory]
        del names[path]
        if not names:
            del self._dirs[directory]
        return key

    def _unlink(self, key: int) -> None:
        """One durable name fewer for file `key`; with none left, what it synced can never
        come back and is dropped."""
        left = self._links[key] - 1
        if left:
            self._links[key] = left
        else:
            del self._links[key]
            self._synced.pop(key, None)

    def _move(self, src: Any, dst: Any, move: Callable[[Any, Any], None]) -> None:
        source = os.path.abspath(os.fsdecode(src))
        target = os.path.abspath(os.fsdecode(dst))
        if not os.path.isdir(source):  # a file: its key follows it (its names stay as synced)
            try:
                ino = os.lstat(source).st_ino
            except FileNotFoundError:
                ino = -1
            move(src, dst)
            seen = self._files.get(ino)
            if seen is not None and seen[1] == source:
                self._files[ino] = (seen[0], target, seen[2])
            return
        move(src, dst)
        prefix = os.path.join(source, "")
        for path in [p for p in self._names if p.startswith(prefix)]:
            self._name(target + path[len(source):], self._names[path])
            self._unname(path)
        for ino, (key, path, generation) in list(self._files.items()):
            if path.startswith(prefix):
                self._files[ino] = (key, target + path[len(source):], generation)
        self._record("move", f"{self._rel(source)} {self._rel(target)}")

    def _rel(self, path: str) -> str:
        root = self.root
        if root is not None and path.startswith(root):
            return path[len(root):].lstrip("/")
        return os.path.basename(path.rstrip("/"))

    def _record(self, kind: str, fields: str) -> None:
        self.digest.record(self.time(), f"disk-{kind}", fields)
