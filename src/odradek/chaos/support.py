"""What every chaos run shares that is neither its workload nor its faults: waiting for a
condition (`poll_for`), the progress lines on stderr (`Progress`, `stderr_progress`), the run's
directory (`chaos_workdir`), the file librdkafka's log lines go to (`client_logger`) and the
start of a run on its ZooKeeper (`run_on_zookeeper`)."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..tools.command import ToolError

T = TypeVar("T")
Progress = Callable[[str], None]


def poll_for(fn: Callable[[], T | None], timeout: float, what: str,
             interval: float = 0.05) -> T:
    """The first non-None result of `fn` (exceptions count as not yet); TimeoutError after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = fn()
            if value is not None:
                return value
        except Exception as exc:  # a znode in flux, a broker not answering yet
            last = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:.0f}s"
                               + (f" (last error: {last!r})" if last else ""))
        time.sleep(interval)


def client_logger(workdir: Path) -> logging.Logger:
    """librdkafka's log lines (disconnects during faults) go to `workdir/clients.log`, not to
    the terminal."""
    logger = logging.getLogger(f"odradek.chaos.clients.{workdir}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    if not logger.handlers:
        handler = logging.FileHandler(workdir / "clients.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
    return logger


def chaos_workdir(data_dir: str | None, prefix: str) -> tuple[Path, bool]:
    """A run's directory: `--data-dir` when given, else a new temporary one; and whether the
    run owns it (a run removes only its own directory, after a success without --keep)."""
    workdir = Path(data_dir or tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir, data_dir is None


def stderr_progress(t0: float) -> Progress:
    def progress(message: str) -> None:
        print(f"[{time.monotonic() - t0:7.1f}s] {message}", file=sys.stderr, flush=True)
    return progress


R = TypeVar("R")


def run_on_zookeeper(args: argparse.Namespace, seed: int, flag: str, dir_prefix: str,
                     config: Any, runner: Callable[[Any, Path, str, Progress], R]
                     ) -> tuple[R, Path, bool]:
    """A run as `odradek chaos{flag}` starts it: its directory (`chaos_workdir` with
    `dir_prefix`), progress on stderr, then `runner(config, brokers dir, connect string,
    progress)` on --zookeeper or on a local ZooKeeper started for the run, in a chroot of its
    own. A ZooKeeper missing or not starting is a ToolError (exit 2). Returns (the report, the
    directory, whether the run owns it)."""
    workdir, own_dir = chaos_workdir(args.data_dir, dir_prefix)
    progress = stderr_progress(time.monotonic())
    progress(f"odradek chaos{flag}: seed {seed}, data in {workdir}")
    chroot = f"/odradek-chaos-{uuid.uuid4().hex[:8]}"
    try:
        if args.zookeeper:
            report = runner(config, workdir / "brokers", args.zookeeper.rstrip("/") + chroot,
                            progress)
        else:
            from ..coordination.zk_server import ZooKeeperServer

            with ZooKeeperServer(data_dir=workdir / "zookeeper", tick_time=500) as zk:
                progress(f"ZooKeeper on {zk.connect_string}")
                report = runner(config, workdir / "brokers", zk.connect_string + chroot,
                                progress)
    except (OSError, RuntimeError, TimeoutError) as exc:
        raise ToolError(str(exc), exit_code=2) from None
    return report, workdir, own_dir
