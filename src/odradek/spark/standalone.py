"""A Spark standalone cluster from the PySpark wheel (`SPARK_HOME` is the `pyspark` package
directory): one master and N workers, each a JVM of its own (`spark-class
org.apache.spark.deploy.master.Master` / `...worker.Worker`) in its own process group, on free
loopback ports, with work directories under one temporary directory. Used by the sink's
cluster tests, its chaos scenario and its benchmark.

    with StandaloneCluster(workers=2) as sc:
        subprocess.Popen([sys.executable, "-m", "odradek.spark.pipeline",
                          "--master", sc.url, ...], env=sc.env)
        sc.kill_worker(0)        # SIGKILL to the worker's process group: its executor dies too
        sc.start_worker(0)

`stop()` kills every process group it started (master, workers, their executors) and removes
its directory. Everything the JVMs and Python processes it starts (and drivers given `env`)
write goes under that directory: SPARK_LOCAL_DIRS (spark.local.dir: blockmgr-*, spark-*),
java.io.tmpdir (artifacts-*) and TMPDIR, so executors killed with -9, which never clean up
their own, leave nothing behind in the machine's temporary directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> str:
    import pyspark
    return str(Path(pyspark.__file__).parent)


class StandaloneCluster:
    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g",
                 base_dir: str | None = None, jvm_options: str = "") -> None:
        """`jvm_options`: more options for every JVM it and drivers given `env` start (through
        JAVA_TOOL_OPTIONS), e.g. tests' ``-XX:TieredStopAtLevel=1 -XX:+UseSerialGC``, which
        start a JVM with less CPU."""
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.dir = Path(base_dir or tempfile.mkdtemp(prefix="odradek-standalone-"))
        self.port = free_port()
        self.web_port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.master: subprocess.Popen[bytes] | None = None
        self.worker_procs: dict[int, subprocess.Popen[bytes]] = {}
        self.env = dict(os.environ)
        self.env.update({"SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1",
                         "PYSPARK_PYTHON": sys.executable,
                         "SPARK_LOG_DIR": str(self.dir / "logs"),
                         "SPARK_NO_DAEMONIZE": "1",
                         "SPARK_LOCAL_DIRS": str(self.dir / "local"),
                         "TMPDIR": str(self.dir / "tmp")})
        tmp = f"-Djava.io.tmpdir={self.dir / 'tmp'}"
        self.env["JAVA_TOOL_OPTIONS"] = " ".join(
            o for o in (os.environ.get("JAVA_TOOL_OPTIONS", ""), tmp, jvm_options) if o)
        src = str(Path(__file__).resolve().parents[2])  # the `odradek` this module is in
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (src, os.environ.get("PYTHONPATH", "")) if p)

    # -- processes -------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        cmd = [str(Path(spark_home()) / "bin" / "spark-class"), *args]
        try:
            return subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            log.close()

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        for d in (self.dir, self.dir / "local", self.dir / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        try:
            self.master = self._spawn("master", [
                "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                "--port", str(self.port), "--webui-port", str(self.web_port)])
            self._wait(lambda: self._state() is not None, timeout, "the master")
            for i in range(self.workers):
                self.start_worker(i, wait=False)
            self.wait_workers(self.workers, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self, i: int, wait: bool = True, timeout: float = 60.0) -> None:
        work = self.dir / f"worker-{i}"
        work.mkdir(parents=True, exist_ok=True)
        self.worker_procs[i] = self._spawn(f"worker-{i}", [
            "org.apache.spark.deploy.worker.Worker", "--cores", str(self.cores),
            "--memory", self.memory, "--work-dir", str(work), "--host", "127.0.0.1",
            "--webui-port", str(free_port()), self.url])
        if wait:
            self.wait_workers(len(self.worker_procs), timeout)

    def kill_worker(self, i: int) -> None:
        """kill -9 the worker's process group: the worker and its executor JVMs and their
        Python workers."""
        proc = self.worker_procs.pop(i, None)
        if proc is not None:
            _killpg(proc)

    def executor_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"],
                             capture_output=True, text=True, check=False).stdout
        mine = {os.getpgid(p.pid) for p in self.worker_procs.values() if p.poll() is None}
        pids = []
        for line in out.split():
            try:
                if os.getpgid(int(line)) in mine:
                    pids.append(int(line))
            except ProcessLookupError:
                pass
        return pids

    def stop(self) -> None:
        for i in list(self.worker_procs):
            self.kill_worker(i)
        if self.master is not None:
            _killpg(self.master)
            self.master = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- state -----------------------------------------------------------------------------
    def _state(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json",
                                        timeout=2) as r:
                return dict(json.load(r))
        except OSError:
            return None

    def alive_workers(self) -> int:
        st = self._state() or {}
        return sum(1 for w in st.get("workers", ()) if w.get("state") == "ALIVE")

    def wait_workers(self, n: int, timeout: float = 60.0) -> None:
        self._wait(lambda: self.alive_workers() >= n, timeout, f"{n} alive workers")

    def _wait(self, pred: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if self.master is not None and self.master.poll() is not None:
                raise RuntimeError(f"the Spark master exited; see {self.dir}/master.log")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Spark standalone: no {what} after {timeout}s "
                                   f"(logs in {self.dir})")
            time.sleep(0.3)


def _killpg(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)
