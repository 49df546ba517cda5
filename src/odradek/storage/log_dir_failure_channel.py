"""Kafka's LogDirFailureChannel (KIP-112): where storage code reports an I/O error in a log
directory.

Any ``OSError`` (EIO, ENOSPC, EROFS, ...) met while appending, rolling, flushing, writing an
index or a checkpoint in a log directory is reported here with the directory; the first report
of a directory makes it offline (later reports of it are ignored) and tells the listeners (the
replica manager: its partitions go offline, the controller is told). Reports may come from any
thread (the checkpoint writer, the flusher): listeners are called on the reporting thread and
hand the work to their own loop. No global state: one channel per log manager.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("odradek.log_dir_failure")

Listener = Callable[[Path], None]


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offline: dict[Path, str] = {}
        self._listeners: list[Listener] = []

    def add_listener(self, listener: Listener) -> None:
        """`listener(log_dir)` once for each directory going offline from now on."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def maybe_add_offline_log_dir(self, log_dir: Path | str, message: str,
                                  exc: BaseException | None = None) -> bool:
        """Report an I/O error in `log_dir`; True if this report made it offline."""
        key = Path(log_dir).absolute()
        with self._lock:
            if key in self._offline:
                return False
            self._offline[key] = message
            listeners = list(self._listeners)
        log.error("%s: log directory %s goes offline", message, key,
                  exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None)
        for listener in listeners:
            try:
                listener(key)
            except Exception:
                log.exception("Error telling a listener that %s is offline", key)
        return True

    def has_offline_log_dir(self, log_dir: Path | str) -> bool:
        with self._lock:
            return Path(log_dir).absolute() in self._offline

    def offline_log_dirs(self) -> list[Path]:
        with self._lock:
            return list(self._offline)

    def reason(self, log_dir: Path | str) -> str | None:
        """The message of the report that took `log_dir` offline (None while it is online)."""
        with self._lock:
            return self._offline.get(Path(log_dir).absolute())


__all__ = ["LogDirFailureChannel"]
