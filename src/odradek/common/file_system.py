"""The file system calls that decide what a crash leaves, in one place: the seam through which
storage (segments, indexes, checkpoints, producer snapshots, partition.metadata) and the
embedded coordination store's journal reach the disk where it matters for durability or for an
I/O error (Kafka's storage goes through ``FileChannel.force``, ``Files.move`` and
``FileChannel.write`` the same way; its LogDirFailureChannel turns their IOExceptions into an
offline log directory, KIP-112).

* ``fsync(fd)``: a file's content (and, for a file never synced before, its name) reaches the
  disk; on a directory's descriptor, the names in it (renames, new files, removals);
* ``pwrite(fd, data, offset)`` and ``write(fd, data)``: where EIO and ENOSPC are met;
* ``replace(src, dst)`` and ``rename(src, dst)``: a directory moved (a log directory renamed to
  ``-delete`` or from ``-future``) moves what is durable in it;
* ``exchange``: Linux's ``renameat2(RENAME_EXCHANGE)`` (the checkpoint spare, see
  ``storage/checkpoints.py``), a callable returning 0 or the errno, or None where it is
  missing.

Callers reach them as attributes of this module (``file_system.fsync(fd)``, never ``from
file_system import fsync``) so that ``use(disk)`` can rebind them: without it they are the
``os`` functions themselves, so production pays one module attribute lookup, what ``os.fsync``
costs. The deterministic simulation installs its `SimDisk` (``odradek.sim.disk``) for a run:
it keeps, beside the real files (the page cache, which survives a process crash), what is
durable, so that a simulated machine crash keeps only that.

Creating, truncating and deleting files need no seam: what a crash leaves is computed from what
was synced, and a file or a truncation never synced is undone whatever call made it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, Protocol

__all__ = ["FileSystem", "exchange", "fsync", "pwrite", "rename", "replace", "use", "write"]

Exchange = Callable[[bytes, bytes], int]


def _libc_renameat2() -> Exchange | None:
    """renameat2(2) with RENAME_EXCHANGE through libc (glibc 2.28+; Python's os module has no
    wrapper), or None: the callable returns 0 or the errno (-1 if errno is unset)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2

    def call(a: bytes, b: bytes) -> int:
        return 0 if fn(at_fdcwd, a, at_fdcwd, b, rename_exchange) == 0 \
            else ctypes.get_errno() or -1
    return call


fsync: Callable[[int], None] = os.fsync
pwrite: Callable[[int, Any, int], int] = os.pwrite
write: Callable[[int, Any], int] = os.write
replace: Callable[..., None] = os.replace
rename: Callable[..., None] = os.rename
exchange: Exchange | None = _libc_renameat2()

_NAMES = ("fsync", "pwrite", "write", "replace", "rename", "exchange")


class FileSystem(Protocol):
    """What `use` installs: the seam's calls, same signatures as the ``os`` functions."""

    def fsync(self, fd: int) -> None: ...
    def pwrite(self, fd: int, data: Any, offset: int) -> int: ...
    def write(self, fd: int, data: Any) -> int: ...
    def replace(self, src: Any, dst: Any) -> None: ...
    def rename(self, src: Any, dst: Any) -> None: ...

    @property
    def exchange(self) -> Exchange | None: ...


@contextlib.contextmanager
def use(fs: FileSystem) -> Iterator[None]:
    """Route the seam's calls to `fs` in this process until the block ends (the previous
    bindings come back, even on error)."""
    module = sys.modules[__name__]
    saved = {name: getattr(module, name) for name in _NAMES}
    for name in _NAMES:
        setattr(module, name, getattr(fs, name))
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
