"""Run a local Apache ZooKeeper (Debian's ``zookeeper`` package) as a plain java process.

Used by tests, chaos runs and ``odradek zookeeper``. Debian's ``zkServer.sh`` ignores the
environment and hides its logs, so the server is started directly::

    java -Xmx256m -XX:+UseSerialGC -cp CONF:zookeeper.jar:slf4j-log4j12.jar:log4j-1.2.jar \\
        org.apache.zookeeper.server.quorum.QuorumPeerMain CONF/zoo.cfg

in its own process group, standalone, bound to 127.0.0.1 on a free port, with the admin server
off and the four-letter words ``ruok,srvr,mntr,stat,cons`` allowed. It is ready when ``srvr``
answers a ``Mode:`` line (``ruok`` says ``imok`` even before the server serves).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "ZOOKEEPER_JAR",
    "ZooKeeperNotInstalledError",
    "ZooKeeperServer",
    "find_free_port",
    "four_letter_word",
    "main",
]

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
_LOG_JARS = (Path("/usr/share/java/slf4j-log4j12.jar"), Path("/usr/share/java/log4j-1.2.jar"))
_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

_LOG4J = """\
log4j.rootLogger={level}, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{{ISO8601}} %-5p [%t:%C{{1}}@%L] - %m%n
"""


class ZooKeeperNotInstalledError(RuntimeError):
    """ZooKeeper's jar (or java) is missing."""


def find_free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (bind port 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def four_letter_word(host: str, port: int, word: str = "srvr", timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter word (``srvr``, ``ruok``, ``mntr``, ...); return the answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class ZooKeeperServer:
    """A standalone ZooKeeper server process.

    ``port=0`` (the default) picks a free port at the first :meth:`start` and keeps it across
    restarts. ``data_dir`` holds ``data/`` (ZooKeeper's dataDir), ``conf/`` (zoo.cfg,
    log4j.properties) and ``zookeeper.log``; ``None`` uses a temporary directory that
    :meth:`stop` removes (:meth:`kill` and :meth:`restart` keep it, so the tree and the sessions
    survive as with a real restart).
    ``tick_time`` is ZooKeeper's tickTime in ms: sessions timeouts are clamped to 2 to 20 ticks.
    """

    def __init__(
        self,
        port: int = 0,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        tick_time: int = 500,
        java: str = "java",
        heap: str = "256m",
        log_level: str = "WARN",
        startup_timeout: float = 30.0,
        extra_config: dict[str, str] | None = None,
        server_id: int | None = None,
        peers: dict[int, str] | None = None,
        command_prefix: Sequence[str] = (),
    ) -> None:
        self.host = host
        # An ensemble member: its myid and every member's address (server.N lines, the
        # quorum port 2888 and the election port 3888 on each member's own address).
        self.server_id = server_id
        self.peers = dict(peers or {})
        self.command_prefix = list(command_prefix)  # e.g. ["ip", "netns", "exec", NS]
        self.port = port
        self.tick_time = tick_time
        self.java = java
        self.heap = heap
        self.log_level = log_level
        self.startup_timeout = startup_timeout
        self.extra_config = dict(extra_config or {})
        self._own_data_dir = data_dir is None
        self.data_dir: Path | None = None if data_dir is None else Path(data_dir)
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None

    # -- properties ----------------------------------------------------------------------------

    @property
    def connect_string(self) -> str:
        """``host:port`` for clients (append ``/chroot`` as needed)."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The java process id while running."""
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_file(self) -> Path | None:
        """The server's console log (stdout and stderr)."""
        return None if self.data_dir is None else self.data_dir / "zookeeper.log"

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, wait: bool = True) -> ZooKeeperServer:
        """Start the server and (with `wait`) wait until it serves; returns ``self``. A member
        of an ensemble serves only once a quorum is up: start them all with ``wait=False``,
        then `wait_ready` each."""
        if self.running:
            return self
        self._check_installed()
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="odradek-zk-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        pick_port = self.port == 0
        attempts = 3 if pick_port else 1
        for attempt in range(attempts):
            if pick_port:
                self.port = find_free_port(self.host)
            try:
                self._launch(wait)
                return self
            except OSError:
                self._terminate(signal.SIGKILL)
                if attempt + 1 == attempts:
                    raise
        return self  # pragma: no cover

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM to its process group, SIGKILL after ``timeout``)."""
        self._terminate(signal.SIGTERM, timeout)
        if self._own_data_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def kill(self) -> None:
        """Hard-kill the server (kill -9) keeping its data dir, for fault injection."""
        self._terminate(signal.SIGKILL)

    def mode(self) -> str | None:
        """``leader``, ``follower``, ``standalone`` from ``srvr``; None: not serving."""
        try:
            answer = four_letter_word(self.host, self.port, "srvr", timeout=0.5)
        except OSError:
            return None
        for line in answer.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def restart(self) -> ZooKeeperServer:
        """Stop (SIGTERM) and start again on the same port and data (sessions survive if the
        restart is shorter than their timeout)."""
        self._terminate(signal.SIGTERM)
        return self.start()

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until ``srvr`` answers a ``Mode:`` line."""
        deadline = time.monotonic() + (self.startup_timeout if timeout is None else timeout)
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise OSError(
                    f"ZooKeeper exited with code {self._proc.returncode} during start-up:\n"
                    f"{self._log_tail()}"
                )
            try:
                if "Mode:" in four_letter_word(self.host, self.port, "srvr", timeout=0.5):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"ZooKeeper at {self.connect_string} not ready after "
                    f"{self.startup_timeout}s:\n{self._log_tail()}"
                )
            time.sleep(0.05)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<ZooKeeperServer {self.connect_string} {state}>"

    # -- internals ----------------------------------------------------------------------------

    def _check_installed(self) -> None:
        if not ZOOKEEPER_JAR.exists():
            raise ZooKeeperNotInstalledError(
                f"{ZOOKEEPER_JAR} not found: install ZooKeeper with "
                "`apt-get install -y --no-install-recommends zookeeper`"
            )
        if shutil.which(self.java) is None:
            raise ZooKeeperNotInstalledError(
                f"{self.java!r} not found: ZooKeeper needs a Java runtime "
                "(`apt-get install zookeeper` brings one)"
            )

    def _write_config(self, conf_dir: Path) -> Path:
        assert self.data_dir is not None
        config = {
            "tickTime": str(self.tick_time),
            "initLimit": "10",
            "syncLimit": "5",
            "dataDir": str(self.data_dir / "data"),
            "clientPort": str(self.port),
            "clientPortAddress": self.host,
            "maxClientCnxns": "0",
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,mntr,stat,cons",
            **{f"server.{n}": f"{addr}:2888:3888" for n, addr in sorted(self.peers.items())},
            **self.extra_config,
        }
        if self.server_id is not None:
            (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
            (self.data_dir / "data" / "myid").write_text(f"{self.server_id}\n")
        conf_dir.mkdir(parents=True, exist_ok=True)
        cfg = conf_dir / "zoo.cfg"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        (conf_dir / "log4j.properties").write_text(_LOG4J.format(level=self.log_level))
        return cfg

    def _launch(self, wait: bool = True) -> None:
        assert self.data_dir is not None
        conf_dir = self.data_dir / "conf"
        cfg = self._write_config(conf_dir)
        classpath = os.pathsep.join(
            [str(conf_dir), str(ZOOKEEPER_JAR), *(str(j) for j in _LOG_JARS)]
        )
        cmd = [
            *self.command_prefix,
            self.java,
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-Dzookeeper.log.dir=" + str(self.data_dir),
            "-cp",
            classpath,
            _MAIN_CLASS,
            str(cfg),
        ]
        log_file = self.log_file
        assert log_file is not None
        with open(log_file, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: stop() kills it all
            )
        # Kill the process group if this object is collected or the interpreter exits.
        self._finalizer = weakref.finalize(self, _kill_group, self._proc.pid, signal.SIGKILL)
        if wait:
            self.wait_ready()

    def _terminate(self, sig: int, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if proc is None:
            return
        if proc.poll() is None:
            _kill_group(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid, signal.SIGKILL)
                proc.wait()
        # Reap anything left in the group (the JVM forks nothing, but be thorough).
        _kill_group(proc.pid, signal.SIGKILL)

    def _log_tail(self, lines: int = 30) -> str:
        log_file = self.log_file
        if log_file is None or not log_file.exists():
            return "(no log)"
        return "\n".join(log_file.read_text(errors="replace").splitlines()[-lines:])


def main(argv: Sequence[str] | None = None) -> int:
    """``odradek zookeeper``: run a local ZooKeeper in the foreground until interrupted."""
    parser = argparse.ArgumentParser(
        prog="odradek zookeeper",
        description="Run a standalone ZooKeeper (Debian's package) for odradek brokers.",
    )
    parser.add_argument(
        "--port", type=int, default=2181, help="client port (0 = a free port; default 2181)"
    )
    parser.add_argument(
        "--data-dir", default=None, help="data directory (default: a temporary one, removed)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (clientPortAddress)")
    parser.add_argument("--tick-time", type=int, default=500, help="tickTime in ms (default 500)")
    parser.add_argument("--log-level", default="WARN", help="log4j level (default WARN)")
    args = parser.parse_args(argv)

    server = ZooKeeperServer(
        args.port, args.data_dir, host=args.host, tick_time=args.tick_time, log_level=args.log_level
    )
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            server.start()
        except (ZooKeeperNotInstalledError, OSError, TimeoutError) as exc:
            print(f"odradek zookeeper: {exc}", file=sys.stderr)
            return 1
        print(server.connect_string, flush=True)
        print(f"ZooKeeper pid {server.pid}, data in {server.data_dir}", file=sys.stderr, flush=True)
        while not stop and server.running:
            time.sleep(0.2)
        return 0 if stop else 1
    finally:
        server.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
