"""Disk faults for a log directory (KIP-112 testing): a small filesystem of its own, filled up
or failed, then freed and unmounted. Root only (mount); every function raises DiskFaultError
with a clear message otherwise.

* ``mount_tmpfs(path, size)`` -- a tmpfs of `size` bytes at `path`: ``fill`` makes every write
  in it fail with ENOSPC (also writes to files already open), ``free`` gives the space back.
* ``mount_ext4(path, size, image)`` -- an ext4 filesystem in a loop-mounted image file, mounted
  ``errors=remount-ro``. ``fail(path)`` raises a filesystem error through ext4's
  ``trigger_fs_error`` (sysfs): the kernel turns the filesystem read-only at once and every
  later write or fsync -- through descriptors already open too -- fails with EROFS, as a disk
  failure does. On another filesystem ``fail`` remounts it read-only, which the kernel refuses
  while a file is open for writing (a running broker): use ext4 for a live broker.
* ``unmount(path)`` -- unmounts (lazily if busy; the loop device goes with its last user).

Also ``odradek disk-faults {mount-tmpfs,mount-ext4,fill,free,fail,unmount} PATH``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import subprocess
from pathlib import Path

from ...tools.command import Subcommands

FILLER = ".disk-filler"
_CHUNK = 1 << 20


class DiskFaultError(RuntimeError):
    """A disk fault could not be made (not root, no mount, a busy filesystem...)."""


def unavailable_reason() -> str | None:
    """Why disk faults cannot be made here (None: they can)."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "disk faults need a POSIX system"
    if os.geteuid() != 0:
        return "disk faults need root (they mount filesystems); run as root"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "disk faults need the mount and umount commands"
    return None


def _require() -> None:
    reason = unavailable_reason()
    if reason is not None:
        raise DiskFaultError(reason)


def _run(*cmd: str) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DiskFaultError(f"{' '.join(cmd)} failed: "
                             f"{(result.stderr or result.stdout).strip()}")


def _mount_info(path: Path) -> tuple[str, str, str] | None:
    """(source, fstype, options) of the filesystem mounted exactly at `path`."""
    target = str(Path(path).absolute())
    with open("/proc/self/mounts") as f:
        found = None
        for line in f:
            parts = line.split()
            if len(parts) >= 4 and parts[1].replace("\\040", " ") == target:
                found = (parts[0], parts[2], parts[3])  # the last mount on top wins
    return found


def is_mounted(path: Path | str) -> bool:
    return _mount_info(Path(path)) is not None


def mount_tmpfs(path: Path | str, size_bytes: int) -> Path:
    """A tmpfs of `size_bytes` at `path` (created if needed)."""
    _require()
    path = Path(path).absolute()
    path.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={int(size_bytes)}", "tmpfs", str(path))
    return path


def mount_ext4(path: Path | str, size_bytes: int, image: Path | str | None = None) -> Path:
    """An ext4 filesystem of `size_bytes` in the image file `image` (default: ``<path>.img``),
    loop-mounted at `path` with errors=remount-ro (``fail`` needs it)."""
    _require()
    path = Path(path).absolute()
    image = Path(image) if image is not None else path.with_name(path.name + ".img")
    if shutil.which("mkfs.ext4") is None:
        raise DiskFaultError("mkfs.ext4 is not installed (e2fsprogs)")
    path.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as f:
        f.truncate(int(size_bytes))
    _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
    _run("mount", "-o", "loop,errors=remount-ro", str(image), str(path))
    return path


def _write_until_full(fd: int, size: int, limit: int | None = None) -> int:
    """Writes of `size` zero bytes until the filesystem is full (ENOSPC or EDQUOT) or `limit`
    bytes are written; returns the bytes written."""
    written = 0
    chunk = b"\0" * size
    while limit is None or written < limit:
        want = size if limit is None else min(size, limit - written)
        try:
            n = os.write(fd, chunk[:want])
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                break
            raise
        if n <= 0:
            break
        written += n
    return written


def fill(path: Path | str, leave_bytes: int = 0) -> int:
    """Write a filler file in the filesystem of `path` until it is full (ENOSPC), leaving
    about `leave_bytes` free; returns the bytes written."""
    filler = Path(path) / FILLER
    target = max(0, shutil.disk_usage(path).free - leave_bytes)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        written = _write_until_full(fd, _CHUNK, target)
        if leave_bytes == 0:  # the last bytes: smaller writes until nothing fits
            for size in (4096, 512, 1):
                written += _write_until_full(fd, size)
    finally:
        os.close(fd)
    return written


def free(path: Path | str) -> None:
    """Remove the filler file: the space comes back."""
    (Path(path) / FILLER).unlink(missing_ok=True)


def fail(path: Path | str) -> str:
    """Make the filesystem mounted at `path` fail: every later write fails (EROFS). Returns
    how (``ext4-error`` or ``remount-ro``)."""
    _require()
    path = Path(path).absolute()
    info = _mount_info(path)
    if info is None:
        raise DiskFaultError(f"nothing is mounted at {path}")
    source, fstype, _options = info
    if fstype == "ext4":
        dev = os.path.basename(os.path.realpath(source))
        trigger = Path("/sys/fs/ext4") / dev / "trigger_fs_error"
        if trigger.exists():
            trigger.write_text("odradek disk-faults: injected failure\n")
            return "ext4-error"
    try:
        _run("mount", "-o", "remount,ro", str(path))
    except DiskFaultError as exc:
        raise DiskFaultError(
            f"{exc} (a filesystem with files open for writing cannot be remounted read-only: "
            f"mount the log dir with mount_ext4 to fail it under a running broker)") from exc
    return "remount-ro"


def unmount(path: Path | str) -> None:
    """Unmount `path` (everything mounted there); lazily when busy. No-op if not mounted."""
    path = Path(path).absolute()
    for _ in range(4):
        if not is_mounted(path):
            return
        result = subprocess.run(["umount", str(path)], capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@contextlib.contextmanager
def tmpfs(path: Path | str, size_bytes: int):  # type: ignore[no-untyped-def]
    """``mount_tmpfs`` for a with block; unmounted at the end, even on failure."""
    mounted = mount_tmpfs(path, size_bytes)
    try:
        yield mounted
    finally:
        unmount(mounted)


# -- the command ------------------------------------------------------------------------------

def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("disk-faults", help="mount, fill, free, fail or unmount a small "
                       "filesystem for a log dir (root only)")
    p.add_argument("action", choices=("mount-tmpfs", "mount-ext4", "fill", "free", "fail",
                                      "unmount"))
    p.add_argument("path")
    p.add_argument("--size", type=int, default=16 << 20, help="bytes (mount-*)")
    p.add_argument("--leave", type=int, default=0, help="bytes left free (fill)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "mount-tmpfs":
            mount_tmpfs(args.path, args.size)
        elif args.action == "mount-ext4":
            mount_ext4(args.path, args.size)
        elif args.action == "fill":
            print(f"wrote {fill(args.path, args.leave)} bytes")
        elif args.action == "free":
            free(args.path)
        elif args.action == "fail":
            print(fail(args.path))
        else:
            unmount(args.path)
    except (DiskFaultError, OSError) as exc:
        print(f"odradek disk-faults: {exc}")
        return 1
    return 0


__all__ = ["DiskFaultError", "fail", "fill", "free", "is_mounted", "mount_ext4", "mount_tmpfs",
           "tmpfs", "unavailable_reason", "unmount"]
