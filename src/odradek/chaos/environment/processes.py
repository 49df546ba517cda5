"""Broker processes for the interop and chaos layers and for `odradek chaos`.

`BrokerProcess` runs `odradek broker --override ...` as a subprocess, waits for its
`odradek broker <id> ready; bootstrap.servers=HOST:PORT` line (with a timeout), keeps its stderr
in a file that failure messages quote, and is always cleaned up (SIGTERM, then SIGKILL; an atexit
hook kills any left over). `stop()` is a clean shutdown (SIGTERM, exit status 0 expected);
`kill()` is SIGKILL; `restart()` starts it again on the same log dir (and on the same port when
one was fixed); `pause()`/`resume()` are SIGSTOP/SIGCONT.

`ProcessCluster` is N such brokers sharing one ZooKeeper connect string (a chroot), on fixed
free ports, with a kazoo client to read Kafka's znodes (S-5.2): the controller and its epoch, the
live broker ids, the partition state nodes. `stop_cleanly(cluster)` stops each running broker in
turn with a clean shutdown, naming those that did not exit 0 in time.

Secured clusters: `listener` names the brokers' one listener's security protocol
(``SASL_SSL://127.0.0.1:<port>``; its ssl.*/sasl.* configs come with `overrides`), and
`zookeeper_jaas` a JAAS file with a ``Client`` section (ZooKeeper's digest login), given to the
brokers as ``java.security.auth.login.config``. The inspection client `zk` then logs in with that
identity; `zookeeper_client(authenticated=False)` is one without it (to check what
``zookeeper.set.acl=true`` denies).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...security.zk_auth import LOGIN_CONFIG_KEY, ZkDigestIdentity, zookeeper_identity

if TYPE_CHECKING:
    from kazoo.client import KazooClient

READY = re.compile(r"odradek broker (-?\d+) ready; bootstrap\.servers=(\S+)")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class BrokerError(AssertionError):
    pass


_live: set[BrokerProcess] = set()


@atexit.register
def _kill_leftovers() -> None:
    """Should teardown be skipped (an interrupted run), no broker outlives pytest."""
    for b in list(_live):
        b.kill()


def _odradek_command() -> list[str]:
    """The `odradek` console script of this interpreter's environment (what users run), or
    the module when the script is not installed next to it."""
    script = Path(sys.executable).parent / "odradek"
    return [str(script)] if script.exists() else [sys.executable, "-m", "odradek.cli"]


class BrokerProcess:
    """One broker subprocess. Its log dir outlives restarts; stderr of every run is appended
    to `stderr_path` (runs separated by a marker line)."""

    def __init__(self, workdir: Path, broker_id: int = 0, port: int = 0,
                 overrides: dict[str, str] | None = None, log_level: str = "INFO",
                 listener: str = "PLAINTEXT", env: Mapping[str, str] | None = None,
                 host: str = "127.0.0.1", command_prefix: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.host = host  # the listener's address (a network namespace's own, say)
        self.command_prefix = list(command_prefix)  # e.g. ["ip", "netns", "exec", NS]
        self.listener = listener  # the security protocol of its one listener (and its name)
        self.env = dict(env or {})  # added to the environment (KAFKA_OPTS, say)
        self.log_level = log_level
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.broker_id = broker_id
        self.port = port
        self.log_dir = workdir / "logs"
        self.stderr_path = workdir / "broker.stderr"
        self.stdout_path = workdir / "broker.stdout"
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.bootstrap: str | None = None
        self.runs = 0
        self.exit_codes: list[int] = []  # one per finished run: 0 clean, -9 SIGKILL, ...
        self._reaped = True

    # -- lifecycle ----------------------------------------------------------------------------
    def command(self) -> list[str]:
        props = {"broker.id": str(self.broker_id),
                 "listeners": f"{self.listener}://{self.host}:{self.port}",
                 "log.dirs": str(self.log_dir), **self.overrides}
        cmd = [*self.command_prefix, *_odradek_command(), "broker", "--log-level",
               self.log_level]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = START_TIMEOUT_S) -> str:
        if self.proc is not None and self.proc.poll() is None:
            raise BrokerError("broker already running")
        self.runs += 1
        # stdout goes to a file too: a pipe we stopped reading could break the broker's prints.
        out_start = self.stdout_path.stat().st_size if self.stdout_path.exists() else 0
        with open(self.stderr_path, "ab") as err, open(self.stdout_path, "ab") as out:
            err.write(f"\n===== run {self.runs}: {' '.join(self.command())}\n".encode())
            err.flush()
            env = {**os.environ, **self.env} if self.env else None
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env=env)
        self._reaped = False
        _live.add(self)
        self.bootstrap = self._await_ready(out_start, timeout)
        return self.bootstrap

    def _await_ready(self, out_start: int, timeout: float) -> str:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            with open(self.stdout_path, "rb") as f:
                f.seek(out_start)
                text = f.read().decode(errors="replace")
            for line in text.splitlines(keepends=True):
                m = READY.search(line)
                if m and line.endswith("\n"):
                    return m.group(2)
            code = self.proc.poll()
            if code is not None:
                self._reap()
                raise BrokerError(f"broker exited with {code} before ready\n{self.tail()}")
            if time.monotonic() > deadline:
                self._force_kill()
                raise BrokerError(f"broker not ready after {timeout:.0f}s\n{self.tail()}")
            time.sleep(0.02)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait: a clean shutdown must exit 0."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._force_kill()
                raise BrokerError(f"broker ignored SIGTERM for {timeout:.0f}s\n"
                                  f"{self.tail()}") from None
        code = self._reap()
        if code != 0:
            raise BrokerError(f"clean shutdown exited with {code}\n{self.tail()}")
        return code

    def kill(self) -> None:
        """SIGKILL: no flush, no checkpoints (the page cache survives, as after a process
        crash)."""
        self._force_kill()

    def pause(self) -> None:
        """SIGSTOP: the process is frozen (its coordination session expires if paused longer
        than the session timeout) until `resume()`."""
        assert self.proc is not None and self.proc.poll() is None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause()`."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def _force_kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc is not None:
            self._reap()

    def _reap(self) -> int:
        """Record the exit status of this run, once."""
        assert self.proc is not None and self.proc.returncode is not None
        if not self._reaped:
            self._reaped = True
            self.exit_codes.append(self.proc.returncode)
            _live.discard(self)
        return self.proc.returncode

    def restart(self, *, clean: bool = True, timeout: float = START_TIMEOUT_S) -> str:
        if clean:
            self.stop()
        else:
            self.kill()
        if self.port == 0:
            return self.start(timeout)
        # A fixed port: the old listener may take a moment to be released.
        deadline = time.monotonic() + 10
        while True:
            try:
                return self.start(timeout)
            except BrokerError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        """Teardown: SIGTERM, escalating to SIGKILL; never raises."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.resume()  # a paused process would never handle SIGTERM
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._reap()

    # -- diagnostics --------------------------------------------------------------------------
    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 60) -> str:
        text = self.stderr_text().splitlines()[-lines:]
        return f"--- last {len(text)} lines of {self.stderr_path} ---\n" + "\n".join(text)

    def __repr__(self) -> str:
        return f"BrokerProcess(id={self.broker_id}, bootstrap={self.bootstrap})"


# -- a cluster of broker processes on ZooKeeper ---------------------------------------------------


def free_ports(n: int) -> list[int]:
    """`n` distinct ports that were free a moment ago (all bound at once, then released)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_until(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
               interval: float = 0.05) -> Any:
    """Poll `pred` until it returns something true (returned); exceptions count as not yet (a
    znode in flux). AssertionError after `timeout` seconds, quoting the last result."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except Exception as exc:  # a znode in flux: look again
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


DEFAULT_OVERRIDES = {
    "controlled.shutdown.retry.backoff.ms": "200",
    "replica.lag.time.max.ms": "10000",
}


class ProcessCluster:
    """N `odradek broker` processes (ids 0..N-1) sharing one ZooKeeper connect string (with its
    chroot), on fixed ports, each in `workdir/broker-<id>`; `zk` is a kazoo client on the same
    chroot for inspection (with the brokers' ZooKeeper identity when `zookeeper_jaas` gives
    one)."""

    def __init__(self, workdir: Path, connect: str, brokers: int = 3,
                 overrides: dict[str, str] | None = None, session_timeout_ms: int = 4000,
                 log_level: str = "INFO", listener: str = "PLAINTEXT",
                 zookeeper_jaas: str | Path | None = None,
                 hosts: Mapping[int, str] | None = None,
                 command_prefixes: Mapping[int, Sequence[str]] | None = None) -> None:
        """`hosts` and `command_prefixes` (broker id -> address, command prefix) run each broker
        in a network namespace of its own (odradek.chaos.environment.netns), all on port 9092."""
        self.connect = connect
        self.hosts = {i: (hosts or {}).get(i, "127.0.0.1") for i in range(brokers)}
        self.listener = listener
        self.zk_identity: ZkDigestIdentity | None = None
        if zookeeper_jaas is not None:
            self.zk_identity = zookeeper_identity(Path(zookeeper_jaas).read_text())
            if self.zk_identity is None:
                raise ValueError(f"{zookeeper_jaas} has no ZooKeeper 'Client' digest login")
        self.ports = [9092] * brokers if hosts else free_ports(brokers)
        base = {"zookeeper.connect": connect,
                "zookeeper.session.timeout.ms": str(session_timeout_ms),
                "default.replication.factor": str(min(3, brokers)),
                **DEFAULT_OVERRIDES}
        if zookeeper_jaas is not None:
            base[LOGIN_CONFIG_KEY] = str(zookeeper_jaas)
        base.update(overrides or {})
        self.brokers = {i: BrokerProcess(Path(workdir) / f"broker-{i}", broker_id=i,
                                         port=self.ports[i], overrides=base,
                                         log_level=log_level, listener=listener,
                                         host=self.hosts[i],
                                         command_prefix=(command_prefixes or {}).get(i, ()))
                        for i in range(brokers)}
        self.zk = self.zookeeper_client()

    def zookeeper_client(self, *, authenticated: bool = True) -> KazooClient:
        """A new (not started) kazoo client on the cluster's chroot: with the brokers' digest
        identity when they have one and `authenticated`, else anonymous."""
        from kazoo.client import KazooClient

        auth = ([self.zk_identity.auth_data]
                if authenticated and self.zk_identity is not None else None)
        return KazooClient(hosts=self.connect, auth_data=auth)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> ProcessCluster:
        for b in self.brokers.values():
            b.start()  # one by one: the first broker creates the chroot
        self.zk.start(timeout=15)
        self.wait_registered(timeout)
        return self

    def wait_registered(self, timeout: float = 30.0) -> None:
        """Every broker's ephemeral `/brokers/ids/<id>` exists."""
        wait_until(lambda: len(self.live_ids()) == len(self.brokers), timeout=timeout,
                   what="all brokers registered")

    def stop_all(self) -> dict[int, int]:
        """Clean shutdown (SIGTERM) of every running broker, one at a time; exit codes."""
        return {i: b.stop() for i, b in self.brokers.items() if b.running()}

    def close(self) -> None:
        """Teardown: SIGKILL every broker (SIGCONT first, harmless), close the kazoo client."""
        for b in self.brokers.values():
            b.resume()
            b.kill()
        self.zk.stop()
        self.zk.close()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.hosts[i]}:{p}" for i, p in enumerate(self.ports))

    # -- inspection -----------------------------------------------------------------------------
    def json(self, path: str) -> Any:
        data, _ = self.zk.get(path)
        return json.loads(data)

    def live_ids(self) -> list[int]:
        """Broker ids registered in `/brokers/ids`."""
        return sorted(int(i) for i in self.zk.get_children("/brokers/ids"))

    def controller(self) -> int:
        return int(self.json("/controller")["brokerid"])

    def controller_or_none(self) -> int | None:
        """The controller's id, None while `/controller` does not exist."""
        try:
            return self.controller()
        except Exception:
            return None

    def controller_epoch(self) -> int:
        return int(self.zk.get("/controller_epoch")[0])

    def assignment(self, topic: str) -> dict[int, list[int]]:
        """Partition -> replica list (AR) from `/brokers/topics/<topic>`."""
        return {int(p): list(r) for p, r in
                self.json(f"/brokers/topics/{topic}")["partitions"].items()}

    def state(self, topic: str, p: int) -> dict[str, Any]:
        return self.json(f"/brokers/topics/{topic}/partitions/{p}/state")

    def states(self, topic: str) -> dict[int, dict[str, Any]]:
        parts = self.json(f"/brokers/topics/{topic}")["partitions"]
        return {int(p): self.state(topic, int(p)) for p in parts}

    def leader(self, topic: str, p: int) -> int:
        return int(self.state(topic, p)["leader"])

    def fully_replicated(self, topic: str) -> bool:
        """Every partition has a leader and its ISR holds every assigned replica."""
        assignment = self.assignment(topic)
        states = self.states(topic)
        return all(states[p]["leader"] >= 0 and set(states[p]["isr"]) == set(ar)
                   for p, ar in assignment.items())

    def pid(self, broker_id: int) -> int | None:
        proc = self.brokers[broker_id].proc
        return None if proc is None else proc.pid


def stop_cleanly(cluster: ProcessCluster) -> list[str]:
    """SIGTERM each running broker in turn; the brokers that did not exit 0 (in time). A
    broker SIGKILLed after ignoring SIGTERM still has its log (appends are written at once),
    so the replica comparison goes on."""
    problems = []
    for i, broker in cluster.brokers.items():
        if not broker.running():
            continue
        try:
            broker.stop()
        except AssertionError as exc:  # BrokerError
            problems.append(f"broker {i}: {str(exc).splitlines()[0]}")
    return problems
