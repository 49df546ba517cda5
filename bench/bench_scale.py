"""10,000 partitions: three `odradek broker` processes on a real ZooKeeper.

Each broker is its own Python process (its own loop, as on separate machines, but the three share
this machine's 2 cores with ZooKeeper and this script). One CreateTopics request creates
``--partitions`` partitions of RF ``--rf`` (topics of 1,000 partitions), so every broker hosts
every partition. Then, in this order:

1. **idle**: once every ISR is full, the brokers' CPU over ``--idle-seconds`` (utime+stime from
   /proc; the replica fetchers' idle Fetch requests are what costs) and their RSS; the RSS grown
   since the empty broker divided by the partitions it hosts is the *memory per hosted partition*;
2. **controlled shutdown**: SIGTERM to the non-controller broker leading the most partitions.
   Times from the signal: the ControlledShutdown answer (the victim's log line "Controlled shutdown
   succeeded", as Kafka counts it), both survivors' metadata caches naming live leaders for every
   partition the victim led, the process's exit;
3. **start-up, clean**: that broker restarted on its log dir (with its clean-shutdown marker):
   seconds until it printed "ready" (logs loaded, registered, metadata received) and its own
   "Loaded N logs" line;
4. **kill -9 and session expiry**: SIGKILL to the non-controller broker leading the most
   partitions (``zookeeper.session.timeout.ms`` = ``--session-timeout-ms``). A kazoo watch on
   ``/brokers/ids/<victim>`` sees the session expire; from that moment, the time until both
   survivors' metadata caches (polled with Metadata requests) name live leaders for every
   partition the victim led -- the 2 s target;
5. **start-up after kill -9**: the victim restarted without the marker (recovery);
6. **load in-process**: a worker process opens a copy of one broker's log dir with
   ``LogManager`` alone, timed, then again under ``tracemalloc`` (Python bytes per loaded log).

``--profile`` attaches ``py-spy record --idle`` to both survivors during step 4 and summarises
where their loops went. Caches are polled with Metadata requests (v1) of one topic each, each
survivor on its own: a waiting topic every ``--poll-interval``, and once one has moved, every
other waiting topic at once, each on its own connection; the table says what one such request
costs the broker (with this script's decode). ``--timeline`` adds what the brokers logged
after the expiry: the controller's failure callback, each survivor's LeaderAndIsr and
UpdateMetadata requests (in, answered), the apply and the checkpoint batches.

    python bench/bench_scale.py                      # 10,000 partitions, markdown on stdout
    python bench/bench_scale.py --partitions 2000 --idle-seconds 5    # quicker
    python bench/bench_scale.py --update-doc docs/performance.md
    python bench/bench_scale.py --splice F.md --update-doc docs/performance.md   # no run

The section goes between ``<!-- scale:begin -->`` and ``<!-- scale:end -->``; the hand-written
block between ``<!-- scale-notes:begin -->`` and ``<!-- scale-notes:end -->`` is carried over.
Every wait is bounded by ``--timeout``; processes and temp dirs are removed also on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_failover import summarise_profile
from common import (
    READY,
    add_section_options,
    cpu_seconds,
    fmt_int,
    machine_facts,
    progress,
    rss_kb,
    splice_section,
    table,
)

TOPIC_SIZE = 1000
STEPS = ("idle", "shutdown", "kill", "restart", "load")
BEGIN, END = "<!-- scale:begin -->", "<!-- scale:end -->"
NOTES_BEGIN, NOTES_END = "<!-- scale-notes:begin -->", "<!-- scale-notes:end -->"
LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
LOADED = re.compile(r"Loaded (\d+) logs .* in ([\d.]+) s")
FINISHED_LAI = re.compile(r"Finished LeaderAndIsr request in (\d+)ms .* for (\d+) partitions")


# -- brokers -----------------------------------------------------------------------------------
@dataclass
class Broker:
    """One `odradek broker` process on a log dir that outlives it (restartable)."""

    broker_id: int
    zk: str
    root: Path
    overrides: dict[str, str]
    extra_args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    bootstrap: str = ""
    port: int = 0
    runs: int = 0

    @property
    def log_dir(self) -> Path:
        return self.root / f"broker-{self.broker_id}"

    @property
    def stderr_path(self) -> Path:
        return self.root / f"broker-{self.broker_id}.{self.runs}.stderr"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float) -> float:
        """Start and wait for "ready"; returns the seconds it took."""
        self.runs += 1
        props = {"broker.id": str(self.broker_id), "zookeeper.connect": self.zk,
                 "listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": str(self.log_dir),
                 **self.overrides}
        exe = shutil.which("odradek")
        cmd = [exe] if exe else [sys.executable, "-m", "odradek.cli"]
        cmd.append("broker")
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        cmd += self.extra_args
        err = open(self.stderr_path, "wb")  # noqa: SIM115 (the child holds it)
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                     start_new_session=True)
        err.close()
        found: list[str] = []
        proc = self.proc

        def read() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                m = READY.search(raw.decode(errors="replace"))
                if m and not found:
                    found.append(m.group(2))
        threading.Thread(target=read, daemon=True).start()
        deadline = t0 + timeout
        while not found:
            if proc.poll() is not None:
                raise RuntimeError(f"broker {self.broker_id} exited: {self.tail()}")
            if time.perf_counter() > deadline:
                raise TimeoutError(f"broker {self.broker_id} not ready in {timeout} s: "
                                   f"{self.tail()}")
            time.sleep(0.01)
        took = time.perf_counter() - t0
        self.bootstrap = found[0]
        self.port = int(self.bootstrap.rsplit(":", 1)[1])
        return took

    def tail(self, n: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-n:])
        return ""

    def log_time(self, needle: str) -> float | None:
        """Epoch seconds of the first log line of this run containing `needle`."""
        for when, line in self.log_lines(self.stderr_path):
            if needle in line:
                return when
        return None

    @staticmethod
    def log_lines(path: Path, after: float = 0.0) -> list[tuple[float, str]]:
        """(epoch seconds, line) of a log file's lines stamped at or after `after`."""
        out: list[tuple[float, str]] = []
        with contextlib.suppress(OSError):
            for line in path.read_text(errors="replace").splitlines():
                if (m := LOG_TIME.match(line)):
                    when = _log_epoch(m.group(1))
                    if when >= after:
                        out.append((when, line))
        return out

    def log_match(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        with contextlib.suppress(OSError):
            return pattern.search(self.stderr_path.read_text(errors="replace"))
        return None

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait_exit(self, timeout: float) -> float:
        assert self.proc is not None
        t0 = time.perf_counter()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        return time.perf_counter() - t0


def _log_epoch(stamp: str) -> float:
    dt = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")
    return dt.replace(tzinfo=datetime.UTC).timestamp() if time.timezone == 0 else dt.timestamp()


# the brokers' request log (kafka.request.logger at DEBUG, on stderr) for --timeline
REQUEST_LOG_CONFIG = {"version": 1, "incremental": True,
                      "loggers": {"kafka.request.logger": {"level": "DEBUG"},
                                  "odradek.checkpoint_writer": {"level": "DEBUG"},
                                  "odradek.apis.interbroker": {"level": "DEBUG"}}}
CHECKPOINTS_WAITED = re.compile(r"checkpoints were on disk ([\d.]+) s after")
CHECKPOINT_BATCH = re.compile(r"Wrote a batch of (\d+) checkpoint files in ([\d.]+) s \(([^)]*)\)")
INTERBROKER_KEYS = {4: "LeaderAndIsr", 6: "UpdateMetadata", 5: "StopReplica"}


def kill_timeline(expired: float, controller: Broker, survivors: list[Broker]) -> str:
    """What the controller and each survivor logged from the session expiry (epoch seconds)
    on: the controller's failure callback, each inter-broker request a survivor received and
    answered (its request log), and each LeaderAndIsr's apply ("Finished LeaderAndIsr request
    in ...", state-change.log); seconds from the expiry."""
    parts: list[str] = []
    for t, line in controller.log_lines(controller.stderr_path, expired - 1):
        if "Broker failure callback" in line:
            parts.append(f"controller {controller.broker_id}'s failure callback {t - expired:.2f}")
            break
    for b in survivors:
        events: list[str] = []
        for t, line in b.log_lines(b.stderr_path, expired - 1):
            if "Completed request:" not in line:
                continue
            desc = json.loads(line.split("Completed request:", 1)[1].rsplit(" (", 1)[0])
            name = INTERBROKER_KEYS.get(desc["requestHeader"].get("requestApiKey"))
            if name is None:
                continue
            start = t - desc["totalTimeMs"] / 1000
            if start < expired - 0.5:
                continue
            events.append(f"{name} in {start - expired:.2f} out {t - expired:.2f}")
        for t, line in b.log_lines(b.stderr_path, expired - 0.5):
            if (m := CHECKPOINTS_WAITED.search(line)):
                events.append(f"its checkpoints waited for {float(m.group(1)):.2f}")
            elif (m := CHECKPOINT_BATCH.search(line)):
                events.append(f"checkpoint batch of {m.group(1)} files {float(m.group(2)):.2f} "
                              f"by {t - expired:.2f} ({m.group(3)})")
        for t, line in b.log_lines(b.log_dir / "state-change.log", expired - 0.5):
            if (m := FINISHED_LAI.search(line)):
                events.append(f"LeaderAndIsr of {m.group(2)} applied in "
                              f"{int(m.group(1)) / 1000:.2f} by {t - expired:.2f}")
        parts.append(f"broker {b.broker_id}: " + ("; ".join(events) or "nothing logged"))
    return " — ".join(parts)  # (no "|": it is a markdown table cell)


# -- the Kafka protocol, raw (Metadata v1, CreateTopics v7) ------------------------------------
class Conn:
    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.corr = 0

    async def call(self, req: Any, timeout: float) -> Any:
        from odradek.protocol.codec import decode_response, encode_request, response_class
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        self.corr += 1
        self.writer.write(encode_request(req, self.corr, "bench-scale"))

        async def read() -> bytes:
            assert self.reader is not None
            size = int.from_bytes(await self.reader.readexactly(4), "big")
            return await self.reader.readexactly(size)
        try:
            payload = await asyncio.wait_for(read(), timeout)
        except BaseException:
            self.close()
            raise
        return decode_response(response_class(type(req)), payload)[1]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def metadata_request(topics: list[str] | None = None) -> Any:
    """Metadata v1 for `topics` (None: every topic)."""
    import kio.index
    from kio.static.constants import EntityType
    m = kio.index.load_payload_module(3, 1, EntityType.request)
    return m.MetadataRequest(topics=None if topics is None else tuple(
        m.MetadataRequestTopic(name=t) for t in topics))


def partition_view(resp: Any) -> tuple[int, dict[tuple[str, int], tuple[int, int]]]:
    """(controller id, {(topic, partition): (leader, len(isr))})."""
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            out[(t.name, p.partition_index)] = (int(p.leader_id), len(p.isr_nodes))
    return int(resp.controller_id), out


async def create_topics(port: int, partitions: int, rf: int, timeout: float) -> float:
    import kio.index
    from kio.static.constants import EntityType
    m = kio.index.load_payload_module(19, 7, EntityType.request)
    names = [f"scale-{i}" for i in range((partitions + TOPIC_SIZE - 1) // TOPIC_SIZE)]
    sizes = [min(TOPIC_SIZE, partitions - i * TOPIC_SIZE) for i in range(len(names))]
    req = m.CreateTopicsRequest(
        topics=tuple(m.CreatableTopic(name=n, num_partitions=s, replication_factor=rf,
                                      assignments=(), configs=())
                     for n, s in zip(names, sizes, strict=True)),
        timeout=datetime.timedelta(seconds=timeout), validate_only=False)
    c = Conn(port)
    t0 = time.perf_counter()
    try:
        resp = await c.call(req, timeout)
    finally:
        c.close()
    bad = [(t.name, int(t.error_code)) for t in resp.topics if int(t.error_code) != 0]
    if bad:
        raise RuntimeError(f"CreateTopics failed: {bad[:3]}")
    return time.perf_counter() - t0


async def wait_view(ports: list[int], ok: Any, timeout: float, interval: float,
                    t0: float | None = None) -> tuple[float, dict[int, float]]:
    """Poll Metadata of every port in turn until ``ok(view)`` holds for each; returns the time
    (from `t0`, default now) when the last one did, and each port's time."""
    t0 = time.perf_counter() if t0 is None else t0
    conns = {p: Conn(p) for p in ports}
    done: dict[int, float] = {}
    deadline = time.perf_counter() + timeout
    req = metadata_request()
    try:
        while len(done) < len(ports):
            for p in ports:
                if p in done:
                    continue
                with contextlib.suppress(OSError, asyncio.IncompleteReadError,
                                         asyncio.TimeoutError):
                    _, view = partition_view(await conns[p].call(req, 30))
                    if ok(view):
                        done[p] = time.perf_counter() - t0
            if time.perf_counter() > deadline:
                raise TimeoutError(f"metadata condition not met within {timeout} s on "
                                   f"{sorted(set(ports) - set(done))}")
            if len(done) < len(ports):
                await asyncio.sleep(interval)
    finally:
        for c in conns.values():
            c.close()
    return max(done.values()), done


async def wait_moved(ports: list[int], theirs: set[tuple[str, int]], victim: int,
                     timeout: float, interval: float, t0: float) -> tuple[float, dict[int, float]]:
    """Until every port's cache names a live leader (not `victim`, not -1) for every partition
    in `theirs`. Each port is polled on its own, concurrently: one waiting topic (rotating) every
    `interval` (a 1,000-partition answer costs the broker ~1/10th of a whole-cluster one); once
    it has moved, every other waiting topic of that port is asked at once, each on its own
    connection (one UpdateMetadata usually moves them all), so the time recorded -- when the
    last of those answers came back -- trails the cache by about one round trip. Returns the
    time (from `t0`) the last port was done, and each port's."""
    by_topic: dict[str, set[tuple[str, int]]] = {}
    for tp in theirs:
        by_topic.setdefault(tp[0], set()).add(tp)
    deadline = time.perf_counter() + timeout
    done: dict[int, float] = {}

    async def moved(conn: Conn, topic: str) -> bool:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            _, view = partition_view(await conn.call(metadata_request([topic]), 30))
            return all(view.get(tp, (victim, 0))[0] not in (victim, -1)
                       for tp in by_topic[topic])
        return False

    async def one_port(port: int) -> None:
        waiting = sorted(by_topic)
        conns = {topic: Conn(port) for topic in waiting}
        try:
            while waiting:
                if await moved(conns[waiting[0]], waiting[0]):
                    waiting.pop(0)
                    results = await asyncio.gather(*(moved(conns[t], t) for t in waiting))
                    waiting = [t for t, ok in zip(waiting, results, strict=True) if not ok]
                    if not waiting:
                        done[port] = time.perf_counter() - t0
                        return
                else:
                    waiting.append(waiting.pop(0))  # rotate
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"leaders not moved within {timeout} s on {port}")
                await asyncio.sleep(interval)
        finally:
            for c in conns.values():
                c.close()

    await asyncio.gather(*(one_port(p) for p in ports))
    return max(done.values()), done


async def view_of(port: int) -> tuple[int, dict[tuple[str, int], tuple[int, int]]]:
    c = Conn(port)
    try:
        return partition_view(await c.call(metadata_request(), 60))
    finally:
        c.close()


# -- results -------------------------------------------------------------------------------------
@dataclass
class Results:
    started: float
    facts: dict[str, str]
    args: dict[str, Any]
    rows: list[tuple[str, str, str]] = field(default_factory=list)  # (what, figure, target)
    loads: list[tuple[str, str]] = field(default_factory=list)
    profile: str = ""
    notes: list[str] = field(default_factory=list)

    def add(self, what: str, figure: str, target: str = "") -> None:
        progress(f"{what}: {figure}")
        self.rows.append((what, figure, target))

    def load(self, when: str) -> None:
        self.loads.append((when, " ".join(Path("/proc/loadavg").read_text().split()[:3])))


def _proc_cpu(pids: list[int]) -> list[float]:
    return [cpu_seconds(p) for p in pids]


def _leader_counts(view: dict[tuple[str, int], tuple[int, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for leader, _ in view.values():
        out[leader] = out.get(leader, 0) + 1
    return out


def _victim(view: dict[tuple[str, int], tuple[int, int]], controller: int,
            alive: list[int]) -> int:
    counts = _leader_counts(view)
    return max((b for b in alive if b != controller), key=lambda b: counts.get(b, 0))


async def pick_victim(brokers: list[Broker], alive: list[int]
                      ) -> tuple[int, int, set[tuple[str, int]]]:
    """(controller, the non-controller broker leading the most partitions, those partitions)."""
    controller, view = await view_of(brokers[0].port)
    v = _victim(view, controller, alive)
    return controller, v, {tp for tp, (ld, _) in view.items() if ld == v}


def _pyspy() -> str | None:
    local = Path.home() / ".local" / "bin" / "py-spy"  # `pip install --user py-spy`
    return shutil.which("py-spy") or (str(local) if local.exists() else None)


def _spy(pid: int, out: Path, rate: int) -> subprocess.Popen[bytes] | None:
    exe = _pyspy()
    if exe is None:
        return None
    return subprocess.Popen([exe, "record", "--nonblocking", "--idle", "--rate", str(rate),
                             "--format", "raw", "--pid", str(pid), "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def start_spies(a: argparse.Namespace, root: Path, label: str, targets: list[Broker]
                ) -> list[tuple[Broker, subprocess.Popen[bytes] | None, Path]]:
    if not a.profile:
        return []
    return [(b, _spy(b.pid, root / f"spy-{label}-{b.broker_id}.txt", 100),
             root / f"spy-{label}-{b.broker_id}.txt") for b in targets]


def stop_spies(res: Results, spies: list[tuple[Broker, subprocess.Popen[bytes] | None, Path]],
               title: str, controller: int, seconds: float) -> None:
    for _, spy, _ in spies:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
    for b, spy, out in spies:
        if spy is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy.wait(60)
        if out.exists():
            role = " (controller)" if b.broker_id == controller else ""
            res.profile += (f"\n\n#### broker {b.broker_id}{role}, {title}\n\n"
                            + summarise_profile(out, seconds, 100))


# -- the run -------------------------------------------------------------------------------------
async def scenario(a: argparse.Namespace, res: Results, root: Path) -> None:
    from kazoo.client import KazooClient

    from odradek.coordination.zk_server import ZooKeeperServer

    zk = ZooKeeperServer(tick_time=500, data_dir=root / "zk", heap="512m")
    brokers: list[Broker] = []
    kz: KazooClient | None = None
    rf, n = a.rf, a.partitions
    overrides = {"zookeeper.session.timeout.ms": str(a.session_timeout_ms), **dict(
        kv.split("=", 1) for kv in a.override)}
    extra: list[str] = []
    if a.timeline:
        (root / "request-log.json").write_text(json.dumps(REQUEST_LOG_CONFIG))
        extra = ["--log-config", str(root / "request-log.json")]
    steps = set(a.steps.split(","))
    unknown = steps - set(STEPS)
    if unknown:
        raise SystemExit(f"--steps: unknown {sorted(unknown)}; known: {','.join(STEPS)}")
    try:
        progress("starting ZooKeeper")
        zk.start()
        for i in range(a.brokers):
            b = Broker(i, zk.connect_string, root, overrides, extra)
            brokers.append(b)
            b.start(a.timeout)
        kz = KazooClient(hosts=zk.connect_string)
        kz.start(timeout=30)
        await asyncio.sleep(1)
        empty_rss = [rss_kb(b.pid) for b in brokers]
        res.load("before create")
        progress(f"creating {n} partitions of RF {rf}")
        t0 = time.perf_counter()
        created = await create_topics(brokers[0].port, n, rf, a.timeout)
        ports = [b.port for b in brokers]
        led, _ = await wait_view(ports, lambda v: len(v) >= n and all(
            ld >= 0 for ld, _ in v.values()), a.timeout, 0.5, t0)
        full, _ = await wait_view(ports, lambda v: len(v) >= n and all(
            k == rf for _, k in v.values()), a.timeout, 1.0, t0)
        res.add(f"create {fmt_int(n)} partitions RF {rf}: CreateTopics answered / every cache "
                "has the leaders / every ISR full (s)", f"{created:.1f} / {led:.1f} / {full:.1f}")
        # one Metadata request's cost (what the cache polling below adds)
        c = Conn(brokers[0].port)
        t1 = time.perf_counter()
        for _ in range(5):
            await c.call(metadata_request(), 30)
        all_ms = (time.perf_counter() - t1) / 5 * 1000
        t1 = time.perf_counter()
        for _ in range(5):
            await c.call(metadata_request(["scale-0"]), 30)
        c.close()
        res.add("one Metadata v1 request, all topics / one topic of 1,000 partitions, round "
                "trip incl. this script's decode (ms; the caches are polled one topic at a time)",
                f"{all_ms:.0f} / {(time.perf_counter() - t1) / 5 * 1000:.0f}")

        alive = [b.broker_id for b in brokers]
        if "idle" in steps:
            # 1. idle
            await asyncio.sleep(2)
            res.load("idle")
            pids = [b.pid for b in brokers]
            c0 = _proc_cpu(pids)
            zc0 = cpu_seconds(zk.pid) if zk.pid else 0.0
            t1 = time.perf_counter()
            await asyncio.sleep(a.idle_seconds)
            wall = time.perf_counter() - t1
            cpu = [x - y for x, y in zip(_proc_cpu(pids), c0, strict=True)]
            zcpu = (cpu_seconds(zk.pid) if zk.pid else 0.0) - zc0
            res.add(f"idle cluster, CPU per broker over {wall:.0f} s (% of one core)",
                    " / ".join(f"{100 * x / wall:.0f}%" for x in cpu)
                    + f" (ZooKeeper {100 * zcpu / wall:.0f}%)", "little (fetch sessions)")
            rss = [rss_kb(p) for p in pids]
            res.add("RSS per broker, empty / with the partitions (MiB)",
                    " / ".join(f"{e // 1024}->{r // 1024}" for e, r in zip(empty_rss, rss,
                                                                            strict=True)))
            per = [(r - e) * 1024 / n for e, r in zip(empty_rss, rss, strict=True)]
            res.add("RSS per hosted partition (KiB, grown since empty / partitions hosted)",
                    " / ".join(f"{x / 1024:.1f}" for x in per), "recorded")
            if a.profile:  # a separate window: the sampler costs CPU too
                spies = start_spies(a, root, "idle", brokers[:1])
                await asyncio.sleep(10)
                stop_spies(res, spies, "idle, 10 s", -1, 10)

        if "shutdown" in steps:
            # 2. controlled shutdown
            controller, v, theirs = await pick_victim(brokers, alive)
            victim = brokers[v]
            survivors = [b for b in brokers if b.broker_id != v]
            res.load("controlled shutdown")
            progress(f"controlled shutdown of broker {v} (leads {len(theirs)}; controller "
                     f"{controller})")
            spies = start_spies(a, root, "cs", survivors)
            await asyncio.sleep(1 if spies else 0)
            t0 = time.perf_counter()
            w0 = time.time()
            victim.signal(signal.SIGTERM)
            exited: list[float] = []
            proc = victim.proc
            assert proc is not None
            waiter = threading.Thread(target=lambda: (proc.wait(), exited.append(
                time.perf_counter() - t0)), daemon=True)
            waiter.start()
            moved, _ = await wait_moved([s.port for s in survivors], theirs, v, a.timeout,
                                        a.poll_interval, t0)
            stop_spies(res, spies, "SIGTERM of the victim until the caches are done", controller,
                       moved)
            victim.wait_exit(a.timeout)
            waiter.join(10)
            answered = victim.log_time("Controlled shutdown succeeded")
            completed = victim.log_time("shut down completed")
            res.add(f"controlled shutdown of a broker leading {fmt_int(len(theirs))}: "
                    "ControlledShutdown answered (s)",
                    f"{answered - w0:.2f}" if answered else "not logged", "< 3 s")
            res.add("controlled shutdown: survivors' caches name the new leaders / victim logged "
                    "\"shut down completed\" / its process exited (s)",
                    f"{moved:.2f} / " + (f"{completed - w0:.2f}" if completed else "?") + " / "
                    + (f"{exited[0]:.2f}" if exited else "?"))

            # 3. clean start-up
            res.load("clean start-up")
            took = victim.start(a.timeout)
            m = victim.log_match(LOADED)
            res.add(f"start-up with {fmt_int(n)} partition dirs after a clean shutdown: ready / "
                    "logs loaded (s)", f"{took:.1f} / {m.group(2) if m else '?'}", "seconds")
            full, _ = await wait_view(ports, lambda vw: all(k == rf for _, k in vw.values()),
                                      a.timeout, 1.0)
            progress(f"every ISR full again after {full:.1f} s")
            await asyncio.sleep(2)

        if "kill" in steps:
            # 4. kill -9 and session expiry
            controller, v, theirs = await pick_victim(brokers, alive)
            victim = brokers[v]
            survivors = [b for b in brokers if b.broker_id != v]
            gone = threading.Event()
            gone_at: list[float] = []
            gone_wall: list[float] = []

            def on_change(ev: Any) -> None:
                if ev.type == "DELETED" and not gone_at:
                    gone_at.append(time.perf_counter())
                    gone_wall.append(time.time())
                    gone.set()
            if kz.exists(f"/brokers/ids/{v}", watch=on_change) is None:
                raise RuntimeError(f"/brokers/ids/{v} missing before the kill")
            res.load("kill -9")
            progress(f"kill -9 broker {v} (leads {len(theirs)}; controller {controller}); "
                     f"session timeout {a.session_timeout_ms} ms")
            tk = time.perf_counter()
            victim.signal(signal.SIGKILL)
            victim.wait_exit(10)
            loop = asyncio.get_running_loop()
            if not await loop.run_in_executor(None, gone.wait, a.timeout):
                raise TimeoutError("the victim's session did not expire")
            te, te_wall = gone_at[0], gone_wall[0]
            spies = start_spies(a, root, "kill", survivors)  # from the expiry (attaching ~0.1 s)
            moved, each = await wait_moved([s.port for s in survivors], theirs, v, a.timeout,
                                           a.poll_interval, te)
            stop_spies(res, spies, "session expiry until the caches are done", controller,
                       moved)
            res.add(f"kill -9 of a broker leading {fmt_int(len(theirs))}: its session expired "
                    "after (s)", f"{te - tk:.2f}")
            res.add("kill -9: from the session expiry until every survivor's metadata cache names "
                    "the new leaders (s)",
                    f"**{moved:.2f}** (" + ", ".join(
                        f"broker {b.broker_id} {each[b.port]:.2f}" for b in survivors) + ")",
                    "< 2 s")
            if a.timeline:
                res.add("kill -9: timeline from the session expiry (s; request log and "
                        "state-change.log)", kill_timeline(
                            te_wall, brokers[controller], survivors))

        if "kill" in steps and "restart" in steps:
            # 5. start-up after kill -9
            res.load("start-up after kill -9")
            took = victim.start(a.timeout)
            m = victim.log_match(LOADED)
            res.add(f"start-up with {fmt_int(n)} partition dirs after kill -9 (recovery): ready / "
                    "logs loaded (s)", f"{took:.1f} / {m.group(2) if m else '?'}", "seconds")
        if "load" in steps:
            src_dir = brokers[0].log_dir
            for b in brokers[1:]:  # only broker 0's dir is used below: the others need no flush
                b.signal(signal.SIGKILL)
                b.wait_exit(a.timeout)
            brokers[0].signal(signal.SIGTERM)
            brokers[0].wait_exit(a.timeout)
            # 6. in-process load of one log dir
            copy = root / "copy"
            shutil.copytree(src_dir, copy, symlinks=True)
            for marker in (".lock",):
                (copy / marker).unlink(missing_ok=True)
            out = subprocess.run([sys.executable, __file__, "load-worker", str(copy)],
                                 capture_output=True, text=True, timeout=a.timeout)
            if out.returncode != 0:
                raise RuntimeError(f"load worker failed: {out.stderr[-2000:]}")
            w = json.loads(out.stdout.strip().splitlines()[-1])
            res.add(f"LogManager alone opening {fmt_int(w['logs'])} logs, clean (s)",
                    f"{w['seconds']:.2f}")
            res.add("tracemalloc: Python bytes per loaded log (LogManager only)",
                    f"{w['bytes_per_log']:.0f}")
    finally:
        if kz is not None:
            with contextlib.suppress(Exception):
                kz.stop()
                kz.close()
        for b in brokers:
            b.signal(signal.SIGTERM)
        for b in brokers:
            if b.proc is not None:
                with contextlib.suppress(Exception):
                    b.wait_exit(30)
        with contextlib.suppress(Exception):
            zk.stop()


def load_worker(log_dir: str) -> None:
    """Open a log dir with LogManager alone: once timed, once under tracemalloc."""
    import tracemalloc

    from odradek.storage.log_manager import LogManager
    marker = Path(log_dir) / ".kafka_cleanshutdown"
    saved = marker.read_bytes() if marker.exists() else None
    t0 = time.perf_counter()
    lm = LogManager([Path(log_dir)])
    seconds = time.perf_counter() - t0
    logs = len(lm.all_logs())
    lm.shutdown()
    if saved is None:
        marker.unlink(missing_ok=True)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    lm = LogManager([Path(log_dir)])
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(json.dumps({"logs": logs, "seconds": seconds,
                      "bytes_per_log": (after - before) / max(len(lm.all_logs()), 1)}))
    lm.close_without_shutdown()


def render(res: Results, notes: str) -> str:
    f = res.facts
    lines = [
        BEGIN,
        "## 10,000 partitions (bench/bench_scale.py)",
        "",
        f"`python bench/bench_scale.py {res.args['argv']}` on {f['date']}: {f['cpus']} CPUs "
        f"({f['cpu model']}), Python {f.get('python', '?')}, odradek {f.get('odradek', '?')}; "
        f"the run took {time.monotonic() - res.started:.0f} s. Three `odradek broker` processes "
        f"and Debian's ZooKeeper on this machine, {fmt_int(res.args['partitions'])} partitions "
        f"of RF {res.args['rf']} (every broker hosts every partition), "
        f"`zookeeper.session.timeout.ms={res.args['session_timeout_ms']}`. The machine is "
        "shared: the load average (1, 5, 15 min) at each step is below.",
        "",
        table(["measure", "figure", "target"], res.rows, "lll"),
        "",
        "Load average: " + "; ".join(f"{w} {v}" for w, v in res.loads) + ".",
    ]
    if res.profile:
        lines += ["", "### Where the brokers' loops went (py-spy --idle)", "",
                  "Windows: 10 s idle after the measured one; the controlled shutdown from 1 s "
                  "before the signal; the kill from the session expiry. The sampler takes CPU "
                  "from the brokers, so these windows are longer than the measured ones.",
                  res.profile.strip()]
    lines += ["", notes, END]
    return "\n".join(lines)


def current_notes(doc: Path | None) -> str:
    if doc is not None and doc.exists():
        m = re.search(re.escape(NOTES_BEGIN) + r".*?" + re.escape(NOTES_END), doc.read_text(),
                      re.S)
        if m:
            return m.group(0)
    return f"{NOTES_BEGIN}\n_Hand-written notes go here; kept across reruns._\n{NOTES_END}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["load-worker"]:
        load_worker(argv[1])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--idle-seconds", type=float, default=20.0)
    ap.add_argument("--poll-interval", type=float, default=0.1,
                    help="seconds between the Metadata polls of the survivors' caches")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--profile", action="store_true", help="py-spy on the survivors (kill -9)")
    ap.add_argument("--steps", default=",".join(STEPS),
                    help="steps to run after the create, comma-separated (default: all): "
                         "idle, shutdown (controlled shutdown and clean start-up), kill, "
                         "restart (after kill -9), load")
    ap.add_argument("--timeline", action="store_true",
                    help="the brokers log their requests (kafka.request.logger at DEBUG); a row "
                         "lists what the controller and the survivors did after the expiry")
    ap.add_argument("--override", action="append", default=[], metavar="K=V",
                    help="broker config for all three (repeatable)")
    add_section_options(ap, "scale:begin/end")
    a = ap.parse_args(argv)
    if a.splice:
        splice_section(a.splice.read_text(), a.update_doc, BEGIN, END)
        return 0
    facts = machine_facts()
    from odradek.server.gc_freeze import own_process  # noqa: F401 (import check only)
    res = Results(time.monotonic(), facts, {**vars(a), "argv": " ".join(argv)})
    root = Path(tempfile.mkdtemp(prefix="odradek-scale-"))
    try:
        asyncio.run(scenario(a, res, root))
    finally:
        if not os.environ.get("BENCH_SCALE_KEEP"):
            shutil.rmtree(root, ignore_errors=True)
        else:
            progress(f"kept {root}")
    text = render(res, current_notes(a.update_doc))
    if a.output:
        a.output.write_text(text + "\n")
    if a.update_doc:
        splice_section(text, a.update_doc, BEGIN, END)
    if not a.output and not a.update_doc:
        print(text)
    progress(f"done in {time.monotonic() - res.started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
