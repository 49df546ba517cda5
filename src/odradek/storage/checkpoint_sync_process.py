"""Large checkpoint batches written by a helper process (docs/performance.md, "10,000
partitions").

``write_atomically_batch`` makes one system call or more per file (open, write, close, rename).
A writer thread releases the GIL around each and must win it back from a busy event loop each
time: right after a 10,000-partition LeaderAndIsr, with the loop running the fetchers' first
rounds, 2,048 files took ~1 s per batch in the writer threads, ~0.45 ms a file. A helper
process has its own interpreter: the writer thread hands it the whole batch through a pipe
(marshal, a few system calls) and waits for the answer, and the helper does the writes and the
two syncfs calls. It also makes the files' spares (``checkpoints.make_spare``) the writer asks
for when idle. The crash guarantee is ``write_atomically_batch``'s (it is what the helper
runs); if the broker dies the helper finishes its batch and exits at the end of its input.

Batches below ``MIN_FILES`` are written file by file by the writer thread
(``CheckpointWriter`` looks at ``min_files``), so small brokers and tests never start a
process; once the helper failed, batches are written in the calling thread.
"""

from __future__ import annotations

import contextlib
import logging
import marshal
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from .checkpoints import make_spare, write_atomically_batch

log = logging.getLogger("odradek.checkpoint_writer")

MIN_FILES = 256  # smaller batches are written in the calling thread
SPARES = "spares"  # a frame (SPARES, [path, ...]) asks for make_spare of each
_LEN = struct.Struct(">I")


def _read_frame(stream: IO[bytes]) -> bytes | None:
    head = stream.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (n,) = _LEN.unpack(head)
    body = stream.read(n)
    if len(body) < n:
        return None
    return body


def _write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(_LEN.pack(len(payload)) + payload)
    stream.flush()


def _encode_answer(failed: dict[Path, OSError], without_spare: list[Path],
                   phases: list[float]) -> bytes:
    return marshal.dumps(([(str(p), exc.errno or 0, str(exc),
                            isinstance(exc, FileNotFoundError)) for p, exc in failed.items()],
                          [str(p) for p in without_spare], phases))


def _decode_answer(payload: bytes) -> tuple[dict[Path, OSError], list[Path], list[float]]:
    failures, without_spare, phases = marshal.loads(payload)
    out: dict[Path, OSError] = {}
    for path, errno, text, not_found in failures:
        out[Path(path)] = (FileNotFoundError(errno, text) if not_found
                           else OSError(errno, text))
    return out, [Path(p) for p in without_spare], list(phases)


def _decode_count(payload: bytes) -> int:
    made = marshal.loads(payload)
    if not isinstance(made, int):
        raise ValueError(f"unexpected answer {made!r}")
    return made


class BatchWriteProcess:
    """A ``BatchWrite`` (storage/checkpoint_writer.py) that hands batches of at least
    ``min_files`` files to a helper process, started at the first one; thread-safe (one batch
    at a time goes to the helper)."""

    def __init__(self, min_files: int = MIN_FILES) -> None:
        self.min_files = min_files
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._broken = False
        self.batches_in_helper = 0

    def __call__(self, items: list[tuple[Path, bytes]],
                 without_spare: list[Path] | None = None,
                 phases: list[float] | None = None) -> dict[Path, OSError]:
        if len(items) >= self.min_files and not self._broken:
            answer = self._ask(marshal.dumps([(str(p), d) for p, d in items]), _decode_answer)
            if answer is not None:
                self.batches_in_helper += 1
                failed, renamed, took = answer
                if without_spare is not None:
                    without_spare.extend(renamed)
                if phases is not None:
                    phases.extend(took)
                return failed
        return write_atomically_batch(items, without_spare, phases)  # (rewriting is harmless)

    def make_spares(self, paths: list[Path]) -> int:
        """``checkpoints.make_spare`` for each path, in the helper process (no GIL hand-offs
        with the loop for ~2 system calls a file) when it runs already or the chunk is as large
        as a batch it would be started for; returns the files made. A small broker (a test's
        embedded cluster) thus starts no process for its spares."""
        running = self._proc is not None and self._proc.poll() is None
        if (running or len(paths) >= self.min_files) and not self._broken:
            made = self._ask(marshal.dumps((SPARES, [str(p) for p in paths])), _decode_count)
            if made is not None:
                return made
        return sum(make_spare(p) for p in paths)

    def _ask(self, request: bytes, decode: Callable[[bytes], Any]) -> Any:
        """One request to the helper and its answer, decoded by `decode`; None once the helper
        failed (it is not asked again: the caller does the work itself)."""
        with self._lock:
            if self._broken:
                return None
            try:
                proc = self._start()
                assert proc.stdin is not None and proc.stdout is not None
                _write_frame(proc.stdin, request)
                answer = _read_frame(proc.stdout)
                if answer is None:
                    raise OSError("the checkpoint helper process exited")
                return decode(answer)
            except (OSError, ValueError, EOFError) as exc:
                log.warning("Checkpoint helper process failed (%s): writing checkpoints in the "
                            "broker process from now on", exc)
                self._broken = True
                self._stop()
        return None

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [package_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env, close_fds=True)
        return self._proc

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def close(self) -> None:
        with self._lock:
            self._stop()


def main() -> None:
    """The helper: one batch per frame on stdin, its failures per frame on stdout, until the
    end of its input."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while (frame := _read_frame(stdin)) is not None:
        request = marshal.loads(frame)
        if isinstance(request, tuple) and request[:1] == (SPARES,):
            _write_frame(stdout, marshal.dumps(sum(make_spare(Path(p)) for p in request[1])))
            continue
        items = [(Path(p), d) for p, d in request]
        without_spare: list[Path] = []
        phases: list[float] = []
        failed = write_atomically_batch(items, without_spare, phases)
        _write_frame(stdout, _encode_answer(failed, without_spare, phases))


if __name__ == "__main__":
    main()
