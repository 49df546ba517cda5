"""Replication benchmark: a 3-broker odradek cluster, 100-byte records (Kreps 2014's setup).

Brokers are three `odradek broker` processes (each its own Python interpreter) on a real
ZooKeeper (Debian's, started through `odradek.coordination.zk_server`); the load generators run
on the same machine and share its cores with the brokers and ZooKeeper. Measures:

1. produce throughput with acks=all into RF=3 topics (min.insync.replicas=2), against acks=1
   into the same kind of topic and acks=1 into RF=1 topics, driven by `kcat -P` (lines from a
   file, linger.ms=5, batch.size=1000000) and by confluent-kafka's Python produce() loop (the
   `produce` worker of bench_broker.py); 1 partition (leader pinned on broker 0, followers 1
   and 2) and 6 partitions (two led by each broker). After each run the high watermarks are
   polled until they cover every record sent: for acks=1 this says how long the followers
   needed after the producer was done ("replicated after");
2. end-to-end latency at a moderate rate (bench_broker.py's lat-produce / lat-consume workers:
   perf_counter_ns() stamped in the value, consumer on the same host), acks=all RF=3 against
   acks=1 RF=3 and acks=1 RF=1;
3. VmRSS of each broker: idle, peak under the acks=all loads, after the load;
4. `bench/bench_timer.py --ops N` (timing wheel against asyncio's heap timers), run as is with
   nothing else of this benchmark running, its table quoted;
5. optionally (py-spy installed) where the leader's and a follower's time goes under acks=all;
6. for comparison, the kcat rows on `odradek cluster` (3 brokers in ONE process, one loop).

Every run has a timeout; brokers, ZooKeeper and temp dirs are removed, also after errors.
Progress goes to stderr, markdown to stdout or --output. The section is delimited by
`<!-- replication:begin -->` / `<!-- replication:end -->`; `--update-doc docs/performance.md`
replaces it there (or appends it), keeping any hand-written block between
`<!-- replication-notes:begin -->` and `<!-- replication-notes:end -->` of the current file::

    python bench/bench_replication.py                          # full run, markdown on stdout
    python bench/bench_replication.py --quick                  # smoke test
    python bench/bench_replication.py --update-doc docs/performance.md
    python bench/bench_replication.py --splice F.md --update-doc docs/performance.md  # no run
    python bench/bench_replication.py --no-throughput --no-timer --no-profile  # latency only

Order: the latency runs on the fresh cluster, the throughput runs, the profiles, the one-process
cluster, then bench_timer.py (or `--timer-md` to quote an output bench/run_all.sh already has).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_broker import SCRIPT as BROKER_SCRIPT  # its worker subcommands
from bench_broker import summarise_profile, write_records_file
from common import (
    CLK_TCK,
    REPO,
    BrokerProcess,
    RssSampler,
    _kill_group,
    collapsed_stacks,
    cpu_seconds,
    fmt_int,
    fmt_mib,
    machine_facts,
    progress,
    python_worker,
    rss_kb,
    run_timed,
    table,
)
from plots import figure, latency_chart, percentiles, replication_chart

RECORD_SIZE = 100
MB = 2**20  # as Kreps 2014: 421,823 rec/s x 100 B = 40.2 "MB/s"
BEGIN, END = "<!-- replication:begin -->", "<!-- replication:end -->"
NOTES_BEGIN, NOTES_END = "<!-- replication-notes:begin -->", "<!-- replication-notes:end -->"

# Published anchors.
KAFKA_2014 = "Kafka 2014 (Kreps: 3 brokers, 6-core 2.5 GHz each, 1 GbE, 100 B records)"
ANCHOR_SYNC, ANCHOR_NOREP = 421_823, 821_557  # 3x sync replication (acks=all) / none
ANCHOR_RATIO = ANCHOR_SYNC / ANCHOR_NOREP  # 0.51
ANCHOR_LATENCY = (2.0, 3.0)  # ms, p50 / p99

# (label, replication factor, acks)
CONFIGS = (("RF=3, acks=all", 3, "all"), ("RF=3, acks=1", 3, "1"), ("RF=1, acks=1", 1, "1"))


# ==============================================================================================
# The cluster under test
# ==============================================================================================
class ProcessCluster:
    """ZooKeeper (java) + N `odradek broker` processes, each with its own temp log dir."""

    kind = "processes"

    def __init__(self, n: int = 3, overrides: dict[str, str] | None = None,
                 broker_overrides: dict[int, dict[str, str]] | None = None) -> None:
        self.n = n
        self.overrides = overrides or {}
        self.broker_overrides = broker_overrides or {}  # by broker id, e.g. broker.rack
        self.zk = None
        self.brokers: list[BrokerProcess] = []
        self.bootstrap = ""

    def start(self) -> ProcessCluster:
        from odradek.coordination.zk_server import ZooKeeperServer

        progress("starting ZooKeeper")
        self.zk = ZooKeeperServer(tick_time=500)
        self.zk.start()
        try:
            for i in range(self.n):
                progress(f"starting broker {i} (zookeeper.connect={self.zk.connect_string})")
                b = BrokerProcess({"broker.id": str(i), "zookeeper.connect": self.zk.connect_string,
                                   **self.overrides, **self.broker_overrides.get(i, {})},
                                  start_timeout=60)
                self.brokers.append(b)
                b.start()
        except BaseException:
            self.stop()
            raise
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers)
        return self

    @property
    def pids(self) -> dict[str, int]:
        return {f"broker {i}": b.pid for i, b in enumerate(self.brokers)}

    @property
    def zk_pid(self) -> int | None:
        return self.zk.pid if self.zk is not None else None

    def logs(self) -> list[Path]:
        out = []
        for b in self.brokers:
            if b.tmpdir is not None:
                out += [b.tmpdir / "broker.stderr", b.log_dir / "state-change.log"]
        return out

    def stop(self) -> None:
        # SIGTERM to all first (controlled shutdowns overlap), then wait for each; ZooKeeper
        # last, or the brokers' controlled shutdowns would wait for it forever.
        for b in self.brokers:
            if b.proc is not None and b.proc.poll() is None:
                b.proc.send_signal(signal.SIGTERM)
        for b in self.brokers:
            with contextlib.suppress(Exception):
                b.stop(timeout=15)
        self.brokers = []
        if self.zk is not None:
            with contextlib.suppress(Exception):
                self.zk.stop()
            self.zk = None

    def __enter__(self) -> ProcessCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EmbeddedCluster:
    """`odradek cluster --brokers N --base-port 0`: N brokers and their embedded coordination
    store in ONE Python process (one asyncio loop)."""

    kind = "embedded"
    READY = re.compile(r"bootstrap\.servers=(\S+)")

    def __init__(self, n: int = 3, start_timeout: float = 60.0) -> None:
        self.n = n
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.tmpdir: Path | None = None
        self.bootstrap = ""

    def start(self) -> EmbeddedCluster:
        self.tmpdir = Path(tempfile.mkdtemp(prefix="odradek-bench-repl-embedded-"))
        exe = shutil.which("odradek")
        cmd = [exe] if exe else [sys.executable, "-m", "odradek.cli"]
        cmd += ["cluster", "--brokers", str(self.n), "--base-port", "0",
                "--data-dir", str(self.tmpdir / "data")]
        self._stderr = open(self.tmpdir / "cluster.stderr", "wb")  # noqa: SIM115
        progress(f"starting `odradek cluster --brokers {self.n}` (one process)")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._stderr,
                                     start_new_session=True)
        found: list[str] = []

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for raw in self.proc.stdout:
                m = self.READY.search(raw.decode(errors="replace"))
                if m and not found:
                    found.append(m.group(1))

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        while not found:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.tmpdir / "cluster.stderr").read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"odradek cluster not ready; its stderr ends with:\n{tail}")
            time.sleep(0.05)
        self.bootstrap = found[0]
        return self

    @property
    def pids(self) -> dict[str, int]:
        assert self.proc is not None
        return {"all 3 brokers": self.proc.pid}

    zk_pid = None

    def logs(self) -> list[Path]:
        if self.tmpdir is None:
            return []
        return [self.tmpdir / "cluster.stderr",
                *(self.tmpdir / "data").glob("*/state-change.log")]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                _kill_group(self.proc.pid)
                self.proc.wait(5)
        if getattr(self, "_stderr", None) is not None:
            self._stderr.close()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def count_in_logs(cluster: ProcessCluster | EmbeddedCluster, needle: str) -> int:
    n = 0
    for p in cluster.logs():
        with contextlib.suppress(OSError):
            n += p.read_text(errors="replace").count(needle)
    return n


def error_lines(cluster: ProcessCluster | EmbeddedCluster) -> list[str]:
    out = []
    for p in cluster.logs():
        if p.name.endswith(".stderr"):
            with contextlib.suppress(OSError):
                out += [ln for ln in p.read_text(errors="replace").splitlines()
                        if " ERROR " in ln]
    return out


# ==============================================================================================
# Topics and high watermarks
# ==============================================================================================
class Admin:
    """An AdminClient and a Consumer (for high watermarks) kept open for the cluster's life."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "log_level": 0,
                                  "group.id": "odradek-bench-repl-watermarks",
                                  "enable.auto.commit": False})
        self.partitions: dict[str, int] = {}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.consumer.close()

    def create(self, name: str, partitions: int, rf: int, timeout: float = 30.0) -> None:
        """Leaders pinned: partition p is led by broker p % 3, followers the next ones."""
        from confluent_kafka.admin import NewTopic

        brokers = sorted(self.admin.list_topics(timeout=timeout).brokers)
        n = len(brokers)
        assign = [[brokers[(p + k) % n] for k in range(rf)] for p in range(partitions)]
        config = {"min.insync.replicas": "2"} if rf >= 3 else {}
        new = NewTopic(name, partitions, replica_assignment=assign, config=config)
        self.admin.create_topics([new], operation_timeout=timeout)[name].result(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            t = self.admin.list_topics(topic=name, timeout=timeout).topics.get(name)
            if t is not None and t.error is None and len(t.partitions) == partitions and all(
                    p.leader == assign[i][0] and len(p.isrs) == rf
                    for i, p in t.partitions.items()):
                self.partitions[name] = partitions
                return
            time.sleep(0.05)
        raise RuntimeError(f"topic {name} ({partitions} partitions, RF {rf}) did not appear "
                           f"with its leaders and full ISRs within {timeout:.0f} s")

    def delete(self, name: str, timeout: float = 30.0) -> None:
        """Delete a measured topic (frees the disk); waits until metadata no longer shows it."""
        with contextlib.suppress(Exception):
            self.admin.delete_topics([name], operation_timeout=timeout)[name].result(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if name not in self.admin.list_topics(timeout=timeout).topics:
                return
            time.sleep(0.1)
        progress(f"  (topic {name} still listed {timeout:.0f} s after its deletion)")

    def high_watermarks(self, name: str, timeout: float = 10.0) -> int:
        from confluent_kafka import TopicPartition

        total = 0
        for p in range(self.partitions[name]):
            _, high = self.consumer.get_watermark_offsets(TopicPartition(name, p),
                                                          timeout=timeout, cached=False)
            total += high
        return total

    def isrs(self, name: str) -> list[list[int]]:
        t = self.admin.list_topics(topic=name, timeout=10).topics[name]
        return [sorted(t.partitions[p].isrs) for p in sorted(t.partitions)]


# ==============================================================================================
# Measured runs
# ==============================================================================================
@dataclass
class Run:
    setup: str  # processes / embedded
    driver: str
    config: str
    partitions: int
    records: int
    seconds: float
    driver_cpu: float
    broker_cpu: dict[str, float]
    peak_rss_kb: dict[str, int]
    zk_cpu: float = 0.0
    replicated_after: float | None = None  # s after the driver finished until HW = records
    held: int = -1
    shrinks: int = 0
    note: str = ""
    others_load: float = 0.0  # other processes' CPU during the run, in cores (1.0 = one)
    topic: str = ""

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def mb_s(self) -> float:
        return self.records * RECORD_SIZE / self.seconds / MB

    @property
    def broker_cpu_total(self) -> float:
        return sum(self.broker_cpu.values())


@dataclass
class Results:
    facts: dict[str, str] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    rss: dict[str, dict[str, int]] = field(default_factory=dict)  # phase -> process -> KiB
    latency: list[dict[str, object]] = field(default_factory=list)
    timer_md: str = ""
    timer_seconds: float = 0.0
    profiles: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


def machine_busy_seconds() -> float:
    """Busy CPU time of the whole machine so far (all cores), from /proc/stat."""
    f = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def produce_once(cluster: ProcessCluster | EmbeddedCluster, admin: Admin, driver: str,
                 topic: str, acks: str, n: int, records_file: Path, timeout: float,
                 batch_size: int) -> tuple[float, float, str]:
    """Run one driver to completion: (wall s, driver CPU s, note)."""
    if driver == "kcat":
        cmd = ["kcat", "-P", "-b", cluster.bootstrap, "-t", topic, "-X", "linger.ms=5",
               "-X", f"batch.size={batch_size}", "-X", f"acks={acks}"]
        timed = run_timed(cmd, timeout=timeout, stdin_path=str(records_file))
        if timed.returncode != 0:
            raise RuntimeError(f"kcat -P failed ({timed.returncode}): {timed.stderr[-500:]}")
        return timed.wall, timed.cpu, ""
    cmd = python_worker(BROKER_SCRIPT, "worker", "produce", "--bootstrap", cluster.bootstrap,
                        "--topic", topic, "--records", str(n), "--acks", acks,
                        "--linger-ms", "5", "--timeout", str(timeout))
    timed = run_timed(cmd, timeout=timeout + 30)
    if timed.returncode != 0:
        raise RuntimeError(f"produce worker failed: {timed.stderr[-800:]}")
    out = json.loads(timed.stdout.strip().splitlines()[-1])
    note = f"{out['error_count']} delivery errors: {out['errors'][:2]}" if out["error_count"] \
        else ""
    return out["seconds"], timed.cpu, note


def measured_produce(cluster: ProcessCluster | EmbeddedCluster, admin: Admin, driver: str,
                     config: tuple[str, int, str], partitions: int, n: int, records_file: Path,
                     a: argparse.Namespace, rep: int) -> Run:
    label, rf, acks = config
    topic = f"{driver}-rf{rf}-acks{acks}-p{partitions}-r{rep}"
    admin.create(topic, partitions, rf)
    pids = cluster.pids
    shrinks0 = count_in_logs(cluster, "Shrinking ISR")
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    zk0 = cpu_seconds(cluster.zk_pid) if cluster.zk_pid else 0.0
    busy0, t_start = machine_busy_seconds(), time.monotonic()
    samplers = {k: RssSampler(p) for k, p in pids.items()}
    with contextlib.ExitStack() as stack:
        for s in samplers.values():
            stack.enter_context(s)
        wall, dcpu, note = produce_once(cluster, admin, driver, topic, acks, n, records_file,
                                        a.timeout, a.batch_size)
        t_end = time.monotonic()
        # Replication after the producer is done: poll the HWs until they cover every record
        # (HW = min LEO over the ISR, so this is "every ISR replica has it").
        held, after = -1, None
        deadline = t_end + a.catch_up_timeout
        while time.monotonic() < deadline:
            held = admin.high_watermarks(topic)
            if held >= n:
                after = time.monotonic() - t_end
                break
            time.sleep(0.005)
    busy, window = machine_busy_seconds() - busy0, time.monotonic() - t_start
    bcpu = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items()}
    zk_cpu = (cpu_seconds(cluster.zk_pid) - zk0) if cluster.zk_pid else 0.0
    # Everything else the machine ran meanwhile (other people's work; also this script's
    # HW polling). The window is the driver's run plus the catch-up polling.
    others = max(0.0, busy - sum(bcpu.values()) - zk_cpu - dcpu)
    shrinks = count_in_logs(cluster, "Shrinking ISR") - shrinks0
    isrs = admin.isrs(topic)
    if any(len(i) < rf for i in isrs):
        note = "; ".join(x for x in (note, f"ISRs after the run: {isrs}") if x)
    r = Run(cluster.kind, driver_label(driver, a.batch_size), label, partitions, n, wall, dcpu,
            bcpu, {k: s.peak_kb for k, s in samplers.items()}, zk_cpu, after, held, shrinks,
            note, others / window)
    r.topic = topic
    return r


def driver_label(driver: str, batch_size: int) -> str:
    return (f"kcat -P, batch.size={batch_size}" if driver == "kcat"
            else "confluent-kafka produce() loop")


def median_run(runs: list[Run]) -> Run:
    ordered = sorted(runs, key=lambda r: r.rate)
    mid = ordered[len(ordered) // 2]
    if len(runs) > 1:
        spread = f"{len(runs)} runs: {fmt_int(ordered[0].rate)}-{fmt_int(ordered[-1].rate)}"
        mid.note = "; ".join(x for x in (spread, mid.note) if x)
    mid.shrinks = sum(r.shrinks for r in runs)
    mid.peak_rss_kb = {k: max(r.peak_rss_kb[k] for r in runs) for k in mid.peak_rss_kb}
    return mid


def bench_throughput(res: Results, cluster: ProcessCluster | EmbeddedCluster, admin: Admin,
                     a: argparse.Namespace, records_file: Path, drivers: list[str],
                     partitions_list: list[int], repeat: int) -> None:
    for partitions in partitions_list:
        for driver in drivers:
            n = a.kcat_records if driver == "kcat" else a.py_records
            # Configurations interleaved (all, 1, RF=1, all, ...): load from outside this
            # benchmark drifts, and should hit every configuration alike.
            by_config: dict[str, list[Run]] = {c[0]: [] for c in CONFIGS}
            for rep in range(repeat):
                for config in CONFIGS:
                    runs = by_config[config[0]]
                    progress(f"[{cluster.kind}] {driver_label(driver, a.batch_size)}: {n:,} "
                             f"records, {config[0]}, {partitions} partition(s), "
                             f"run {rep + 1}/{repeat}")
                    r = measured_produce(cluster, admin, driver, config, partitions, n,
                                         records_file, a, rep)
                    after = ("-" if r.replicated_after is None
                             else f"{r.replicated_after * 1000:.0f} ms")
                    progress(f"  {fmt_int(r.rate)} rec/s in {r.seconds:.2f} s; brokers CPU "
                             + ", ".join(f"{v:.2f}" for v in r.broker_cpu.values())
                             + f" s, driver {r.driver_cpu:.2f} s; HW = all records "
                             f"{after} after the driver exited"
                             + (f"; {r.shrinks} ISR shrink(s)" if r.shrinks else "")
                             + (f"; {r.note}" if r.note else "")
                             + f"; other processes {r.others_load:.0%} of a core; peak RSS "
                             + "/".join(fmt_mib(v) for v in r.peak_rss_kb.values()) + " MiB")
                    runs.append(r)
            for runs in by_config.values():
                res.runs.append(median_run(runs))
            # Deleting a topic closes and unlinks GBs of segments on three brokers: done
            # between blocks of runs, then a pause, so that it does not land in a measured run.
            if not a.keep_topics:
                for runs in by_config.values():
                    for r in runs:
                        admin.delete(r.topic)
                time.sleep(2.0)


def bench_latency(res: Results, cluster: ProcessCluster, admin: Admin,
                  a: argparse.Namespace) -> None:
    for label, rf, acks in CONFIGS:
        topic = f"latency-rf{rf}-acks{acks}"
        admin.create(topic, 1, rf)
        progress(f"end-to-end latency, {label}: {a.latency_rate:g} msg/s for "
                 f"{a.latency_seconds:g} s")
        total = int(a.latency_rate * a.latency_seconds)
        common_args = ["--bootstrap", cluster.bootstrap, "--topic", topic,
                       "--rate", str(a.latency_rate), "--timeout", str(a.latency_seconds + 30)]
        consumer = subprocess.Popen(
            python_worker(BROKER_SCRIPT, "worker", "lat-consume", "--records", str(total),
                          "--warmup", "1", *common_args),
            stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert consumer.stdout is not None
            ready: list[str] = []
            stdout = consumer.stdout
            reader = threading.Thread(target=lambda: ready.append(stdout.readline()),  # noqa: B023
                                      daemon=True)
            reader.start()
            reader.join(30)
            if not ready or ready[0].strip() != "ready":
                raise RuntimeError("latency consumer did not start")
            pids = cluster.pids
            cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
            samplers = {k: RssSampler(p) for k, p in pids.items()}
            with contextlib.ExitStack() as stack:
                for s in samplers.values():
                    stack.enter_context(s)
                prod = run_timed(python_worker(
                    BROKER_SCRIPT, "worker", "lat-produce", "--seconds", str(a.latency_seconds),
                    "--acks", acks, "--linger-ms", "0", *common_args),
                    timeout=a.latency_seconds + 60)
                out, _ = consumer.communicate(timeout=a.latency_seconds + 60)
            lat: dict[str, object] = json.loads(out.strip().splitlines()[-1])
            lat.update(json.loads(prod.stdout.strip().splitlines()[-1]))
            lat["config"] = label
            lat["broker_cpu"] = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items()}
            lat["peak_rss_kb"] = {k: s.peak_kb for k, s in samplers.items()}
            lat["rate"], lat["duration"] = a.latency_rate, a.latency_seconds
            res.latency.append(lat)
            progress(f"  p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, p99.9 "
                     f"{lat['p999']:.2f} ms ({lat['measured']} of {lat['received']} measured, "
                     f"{lat['error_count']} delivery errors)")
        finally:
            if consumer.poll() is None:
                _kill_group(consumer.pid)
                consumer.wait()
        if not a.keep_topics:
            admin.delete(topic)


def bench_timer(res: Results, a: argparse.Namespace) -> None:
    progress(f"bench/bench_timer.py --ops {a.timer_ops} (nothing else of this benchmark runs)")
    timed = run_timed([sys.executable, str(REPO / "bench" / "bench_timer.py"), "--ops",
                       str(a.timer_ops)], timeout=1800)
    if timed.returncode != 0:
        res.timer_md = f"_bench_timer.py failed ({timed.returncode}): {timed.stderr[-400:]}_"
    else:
        res.timer_md = timed.stdout.strip()
    res.timer_seconds = timed.wall
    progress(f"  done in {timed.wall:.0f} s")


# -- profiles ----------------------------------------------------------------------------------
# Each busy sample goes to the first category (in this order) with a frame anywhere in its
# stack: e.g. a DelayedFetch completed by an append counts as serving the fetch, the kio encoding
# of a follower's Fetch request as the fetcher's round trip.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("follower: append fetched batches (Log.append_as_follower: CRC check, pwrite, indexes)",
     ("append_as_follower ",)),
    ("follower: fetcher round trip (encode the Fetch request with kio, read and decode the "
     "response)", ("RemoteLeaderEndpoint.",)),
    ("follower: fetcher bookkeeping (build the request, process partition data, HW)",
     ("(odradek/server/replication/fetcher.py)",)),
    ("leader: follower LEO and HW advance (update_follower_fetch_state, "
     "maybe_increment_high_watermark)",
     ("update_follower_fetch_state ", "maybe_increment_high_watermark ",
      "ReplicaManager._update_follower_fetch_states ")),
    ("leader: serve Fetch (read_from_local_log, DelayedFetch, encode the response)",
     ("read_from_local_log ", "fetch_messages ", "DelayedFetch.",
      "(odradek/server/apis/fetch.py)", "(odradek/protocol/fetch_response.py)")),
    ("purgatories: DelayedProduce, check_and_complete, timing wheel",
     ("(odradek/runtime/purgatory.py)", "DelayedProduce.", "(odradek/runtime/timer.py)")),
    ("leader: append produced batches (validate, copy, Log.append_as_leader, pwrite)",
     ("append_as_leader ", "validate_batches ", "ReplicaManager._append_one ")),
    ("produce request/response (apis/produce.py, response encoding)",
     ("(odradek/server/apis/produce.py)", "(odradek/protocol/produce_response.py)")),
    ("network: send (transport.write, sendfile; includes the kernel's loopback receive)",
     ("Connection._flush ", "Connection._send_regions ", "_sock_sendfile",
      "_SelectorSocketTransport.write ")),
    ("network: receive (recv, framing, request parsing; on a follower: fetch responses)",
     ("(odradek/protocol/framing.py)", "(odradek/protocol/codec.py)",
      "Connection.data_received ", "_read_ready", "StreamReader.")),
    ("ISR manager, controller, coordination (ZooKeeper via kazoo)",
     ("(odradek/server/replication/isr.py)", "(odradek/controller/", "(odradek/coordination/",
      "kazoo/")),
)


def categorise_profile(raw: Path) -> str:
    counts: Counter[str] = Counter()
    busy = 0
    for frames, n in collapsed_stacks(raw):
        if frames[-1].split(" (")[0] in ("EpollSelector.select", "select"):
            continue
        busy += n
        joined = "\n".join(frames) + "\n"
        cat = next((name for name, pats in CATEGORIES if any(p in joined for p in pats)),
                   "other (event loop, asyncio callbacks, threads)")
        counts[cat] += n
    if not busy:
        return ""
    return table(["part of the path (first category found in the stack)", "% of busy",
                  "samples"],
                 [(c, f"{k / busy:.1%}", k) for c, k in counts.most_common()], "lrr") + "\n"


def bench_profiles(res: Results, cluster: ProcessCluster, admin: Admin, a: argparse.Namespace,
                   records_file: Path) -> None:
    pyspy = shutil.which("py-spy")
    if not pyspy:
        res.profiles.append(("not run", "py-spy is not installed (`pip install py-spy`)."))
        return
    rate = 250
    tmp = Path(tempfile.mkdtemp(prefix="odradek-bench-repl-spy-"))
    try:
        for driver in ("kcat", "confluent", "latency"):
            n = a.kcat_records if driver == "kcat" else a.py_records
            loops = 1 if driver == "latency" else a.profile_loops
            topics = []
            for i in range(loops):
                topics.append(f"profile-{driver}-{i}")
                admin.create(topics[-1], 1, 3)
            time.sleep(3.0)  # let earlier deletions and checkpoints settle
            if driver == "latency":
                title = (f"the latency workload without its consumer: {a.latency_rate:g} msg/s "
                         f"for {a.latency_seconds:g} s, linger.ms=0, RF=3, acks=all, 1 "
                         f"partition (leader broker 0)")
            else:
                title = (f"{driver_label(driver, a.batch_size)}, RF=3, acks=all, 1 partition "
                         f"(leader broker 0), the load run {loops} times")
            progress(f"py-spy on broker 0 (leader) and broker 1 (follower) during: {title}")
            targets = {"broker 0 (leader)": cluster.brokers[0].pid,
                       "broker 1 (follower)": cluster.brokers[1].pid}
            spies = {}
            for name, pid in targets.items():
                out = tmp / f"{driver}-{pid}.txt"
                spies[name] = (subprocess.Popen(
                    [pyspy, "record", "--format", "raw", "--rate", str(rate), "--nonblocking",
                     "--pid", str(pid), "-o", str(out)], stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, start_new_session=True), out)
            time.sleep(1.0)
            t0 = time.perf_counter()
            cpu0 = {k: cpu_seconds(p) for k, p in targets.items()}
            walls = []
            try:
                for t in topics:
                    if driver == "latency":
                        prod = run_timed(python_worker(
                            BROKER_SCRIPT, "worker", "lat-produce", "--bootstrap",
                            cluster.bootstrap, "--topic", t, "--rate", str(a.latency_rate),
                            "--seconds", str(a.latency_seconds), "--acks", "all",
                            "--linger-ms", "0", "--timeout", str(a.latency_seconds + 30)),
                            timeout=a.latency_seconds + 60)
                        walls.append(json.loads(prod.stdout.strip().splitlines()[-1])["seconds"])
                        n = int(a.latency_rate * a.latency_seconds)
                        continue
                    w, _, _ = produce_once(cluster, admin, driver, t, "all", n, records_file,
                                           a.timeout, a.batch_size)
                    walls.append(w)
            finally:
                seconds = time.perf_counter() - t0
                for spy, _ in spies.values():
                    spy.send_signal(signal.SIGINT)
                for spy, _ in spies.values():
                    try:
                        spy.communicate(timeout=30)
                    except subprocess.TimeoutExpired:
                        _kill_group(spy.pid)
                        spy.communicate()
            load = (f"Load: {fmt_int(n * len(walls) / sum(walls))} rec/s while sampled; CPU "
                    + ", ".join(f"{k} {cpu_seconds(p) - cpu0[k]:.2f} s" for k, p in
                                targets.items())
                    + f" over {sum(walls):.2f} s of load (two py-spy samplers shared the "
                    f"cores).\n")
            for name, (_spy, out) in spies.items():
                if not out.exists():
                    res.profiles.append((f"{title}: {name}", "py-spy failed"))
                    continue
                text = (load + "\n" + summarise_profile(out, seconds + 1.0, rate) + "\n"
                        + categorise_profile(out))
                res.profiles.append((f"{title}: {name}", text))
            if not a.keep_topics:
                for t in topics:
                    admin.delete(t)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ==============================================================================================
# Report
# ==============================================================================================
def pct(cpu: float, wall: float) -> str:
    return f"{cpu / wall:.0%}"


def find(res: Results, setup: str, driver: str, config: str, partitions: int) -> Run | None:
    for r in res.runs:
        if (r.setup, r.driver, r.config, r.partitions) == (setup, driver, config, partitions):
            return r
    return None


def render(res: Results, a: argparse.Namespace, notes: str) -> str:
    out: list[str] = []
    w = out.append
    f = res.facts
    w(BEGIN)
    w("## Replication: 3 brokers, RF=3 (bench/bench_replication.py)\n")
    w(f"_Generated {f['date']} on {f['cpu model']}, {f['cpus']} CPUs, {f['memory']}, "
      f"{f['python']}, {f['odradek']}; load average at start {f['load average at start']}. "
      f"Drivers: kcat {f['kcat']}, confluent-kafka {f['confluent-kafka']}._\n")
    w("Three `odradek broker` processes (one Python interpreter and asyncio loop each) on a "
      "real ZooKeeper 3.8 (java, tickTime 500 ms), all on this 2-core VM, with the load "
      "generator (and, for latency, a consumer) on the same cores: **every figure below is "
      "three brokers, ZooKeeper and the driver sharing two cores**, where Kreps had three "
      "6-core machines for the brokers and separate client machines. Topics are created "
      "before each run with CreateTopics and pinned assignments: 1 partition led by broker 0 "
      "(followers 1 and 2), or 6 partitions led two by each broker; RF=3 topics have "
      "`min.insync.replicas=2`. Broker settings are the defaults (replica.fetch.wait.max.ms "
      "500, replica.fetch.max.bytes 1 MiB, one fetcher per leader, no fsync on the produce "
      "path), except controlled.shutdown.enable=false, which only speeds up the teardown.\n")

    # -- summary
    rows = []
    chart_rows: list[tuple[int, str, float, float, float]] = []
    for partitions in (1, 6):
        for drv in (driver_label("kcat", a.batch_size), driver_label("confluent", 0)):
            rall = find(res, "processes", drv, "RF=3, acks=all", partitions)
            r1 = find(res, "processes", drv, "RF=3, acks=1", partitions)
            rno = find(res, "processes", drv, "RF=1, acks=1", partitions)
            if not (rall and rno):
                continue
            chart_rows.append((partitions, drv, rall.rate, r1.rate if r1 else math.nan,
                               rno.rate))
            rows.append((f"{partitions}", drv, f"**{fmt_int(rall.rate)}**",
                         fmt_int(r1.rate) if r1 else "-", fmt_int(rno.rate),
                         f"**{rall.rate / rno.rate:.2f}**",
                         f"{ANCHOR_RATIO:.2f} ({fmt_int(ANCHOR_SYNC)} / {fmt_int(ANCHOR_NOREP)})"))
    if rows:
        w("### Summary\n")
        w(table(["parts", "driver", "acks=all, RF=3 rec/s", "acks=1, RF=3 rec/s",
                 "acks=1, RF=1 rec/s", "ratio all/RF=1", "Kafka 2014 ratio"], rows,
                "llrrrrr"))
        w("")
        w(figure("replication-throughput", replication_chart(chart_rows)))
        w("")
        lat = next((x for x in res.latency if x["config"] == "RF=3, acks=all"), None)
        if lat:
            w(f"End-to-end latency at {lat['rate']:g} msg/s, acks=all, RF=3: p50 "
              f"**{lat['p50']:.2f} ms**, p99 **{lat['p99']:.2f} ms** (Kafka 2014: "
              f"{ANCHOR_LATENCY[0]:g} ms / {ANCHOR_LATENCY[1]:g} ms).\n")

    w(NOTES_BEGIN)
    w(notes.strip() if notes.strip() else
      "### Reading the numbers\n\n_Hand-written commentary goes here; "
      "bench_replication.py --update-doc keeps this block._")
    w(NOTES_END)
    w("")

    # -- throughput
    procs = [r for r in res.runs if r.setup == "processes"]
    if procs:
        w("### Produce throughput, 3 broker processes\n")
        w(f"kcat: `kcat -P -b <3 brokers> -t T -X linger.ms=5 -X batch.size={a.batch_size} "
          f"-X acks=A` reading {a.kcat_records:,} lines of 100 bytes from a file; time = the "
          f"kcat process from start to exit (after every record is acknowledged). "
          f"confluent-kafka: bench_broker.py's `produce` worker, a Python loop of "
          f"`produce(topic, value)` ({a.py_records:,} records, linger.ms=5, librdkafka's "
          f"default batch.size 1000000), timed from the first produce() to the end of "
          f"flush() (its CPU, from wait4, also counts the worker's start-up, ~0.2 s). "
          f"A fresh topic per run (deleted after each block of interleaved runs, then a 2 s "
          f"pause). CPU columns: share of one core over the "
          f"run for each broker and the driver; \"ours\" adds them up (and ZooKeeper) against "
          f"the 200% the machine has; \"other processes\" is the rest of the machine's busy "
          f"time meanwhile, as a share of one core over the driver's run and the "
          f"HW polling (/proc/stat, which samples at clock ticks, minus the exact per-process "
          f"times: other people's work on this shared VM, and this script; approximate, "
          f"and low for bursty work), so a large value marks a perturbed run. \"HW = all after\": "
          f"once the driver exited, the time until the high watermarks covered every record "
          f"(polled with ListOffsets every ~5 ms; for acks=all it is already there). Median "
          f"of {a.repeat} runs, the three configurations interleaved run by run; the note "
          f"gives the range. MB/s counts values in 2^20 bytes as Kreps did.\n")
        rows = []
        for r in procs:
            cpus = r.broker_cpu
            total = r.broker_cpu_total + r.driver_cpu + r.zk_cpu
            after = "-" if r.replicated_after is None else f"{r.replicated_after * 1000:.0f} ms"
            ok = "" if r.held >= r.records else f" (HW {r.held:,}!)"
            rows.append((r.driver, r.config, r.partitions, f"{r.records:,}{ok}",
                         f"{r.seconds:.2f}", f"**{fmt_int(r.rate)}**", f"{r.mb_s:.1f}",
                         " / ".join(pct(v, r.seconds) for v in cpus.values()),
                         pct(r.driver_cpu, r.seconds), f"{total / r.seconds:.0%}",
                         f"{r.others_load:.0%}",
                         f"{r.broker_cpu_total / r.records * 1e6:.2f}", after,
                         r.shrinks, " / ".join(f"{v / 1024:.0f}" for v in r.peak_rss_kb.values()),
                         r.note))
        w(table(["driver", "config", "parts", "records", "s", "records/s", "MB/s",
                 "CPU broker 0 / 1 / 2", "driver CPU", "ours (of 200%)", "other processes",
                 "brokers' CPU µs/rec", "HW = all after", "ISR shrinks",
                 "peak RSS MiB 0 / 1 / 2", "note"], rows, "llrrrrrrrrrrrrrl"))
        w("")
        w(f"Anchor: {KAFKA_2014}: {fmt_int(ANCHOR_NOREP)} rec/s (78.3 MB/s) with one producer "
          f"and no replication, {fmt_int(ANCHOR_SYNC)} rec/s (40.2 MB/s) with 3x synchronous "
          f"replication (acks=all): ratio {ANCHOR_RATIO:.2f}.\n")

    emb = [r for r in res.runs if r.setup == "embedded"]
    if emb:
        w("### For comparison: the 3 brokers in one process (`odradek cluster`)\n")
        w(f"`odradek cluster --brokers 3 --base-port 0`: the three brokers and the embedded "
          f"coordination store share one interpreter and one asyncio loop, so all broker work "
          f"is on one core (the driver gets the other). kcat as above, median of "
          f"{a.embedded_repeat} runs.\n")
        rows = []
        for r in emb:
            after = "-" if r.replicated_after is None else f"{r.replicated_after * 1000:.0f} ms"
            rows.append((r.driver, r.config, r.partitions, f"{r.seconds:.2f}",
                         f"**{fmt_int(r.rate)}**", f"{r.mb_s:.1f}",
                         pct(r.broker_cpu_total, r.seconds), pct(r.driver_cpu, r.seconds),
                         f"{r.broker_cpu_total / r.records * 1e6:.2f}", after, r.note))
        w(table(["driver", "config", "parts", "s", "records/s", "MB/s", "cluster process CPU",
                 "driver CPU", "brokers' CPU µs/rec", "HW = all after", "note"], rows,
                "llrrrrrrrrl"))
        w("")
        rall = find(res, "embedded", driver_label("kcat", a.batch_size), "RF=3, acks=all", 1)
        rno = find(res, "embedded", driver_label("kcat", a.batch_size), "RF=1, acks=1", 1)
        if rall and rno:
            w(f"Ratio acks=all RF=3 / acks=1 RF=1 in one process: **{rall.rate / rno.rate:.2f}**."
              "\n")

    # -- latency
    if res.latency:
        w("### End-to-end latency\n")
        lat0 = res.latency[0]
        w(f"bench_broker.py's latency workers on the 3 broker processes: a confluent-kafka "
          f"producer (linger.ms=0) sends {lat0['rate']:g} records/s for {lat0['duration']:g} s "
          f"to a 1-partition topic led by broker 0, each value stamped with "
          f"`time.perf_counter_ns()`; a confluent-kafka consumer in another process "
          f"(assign(), fetch.min.bytes 1, fetch.wait.max.ms 500) subtracts it when poll() "
          f"hands the record over. The consumer reads from the leader and only below the HW, "
          f"so for RF=3 every record has reached both followers before it is visible, "
          f"whatever the producer's acks. The first second is not counted. These runs come "
          f"first, on the fresh cluster (one new topic each). Brokers, ZooKeeper "
          f"and both clients share the two cores.\n")
        rows = []
        for lat in res.latency:
            cpu = lat["broker_cpu"]
            rows.append((lat["config"], f"{lat['sent']:,}", f"{lat['measured']:,}",
                         f"**{lat['p50']:.2f}**", f"{lat['p90']:.2f}", f"**{lat['p99']:.2f}**",
                         f"{lat['p999']:.2f}", f"{lat['max']:.2f}",
                         " / ".join(pct(v, float(lat['duration'])) for v in cpu.values()),
                         f"{ANCHOR_LATENCY[0]:g} ms / {ANCHOR_LATENCY[1]:g} ms"))
        w(table(["config", "sent", "measured", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms",
                 "max ms", "CPU broker 0 / 1 / 2", "Kafka 2014 p50 / p99"], rows,
                "lrrrrrrrrr"))
        w("")
        w(figure("replication-latency", latency_chart(
            {str(lat["config"]): percentiles(lat) for lat in res.latency},
            title=f"End-to-end latency, 3 broker processes, {lat0['rate']:g} msg/s")))
        w("")

    # -- memory
    if res.rss:
        w("### Broker memory (VmRSS)\n")
        w("From /proc/<pid>/status, sampled every 100 ms during runs. \"idle\" is 2 s after "
          "the three brokers were ready, before any topic existed; the latency runs came next, "
          "then the throughput runs; the acks=all peak is the "
          "largest sample over every measured acks=all run (1 and 6 partitions, both drivers); "
          "\"after\" is 2 s after the last load. ZooKeeper is a java process.\n")
        procs_names = list(next(iter(res.rss.values())).keys())
        rows = [(phase, *(fmt_mib(v.get(p, 0)) if v.get(p) else "-" for p in procs_names))
                for phase, v in res.rss.items()]
        w(table(["phase", *(f"{p}, MiB" for p in procs_names)], rows,
                "l" + "r" * len(procs_names)))
        w("")

    # -- timer
    if res.timer_md:
        w("### Delayed operations: timing wheel vs asyncio timers\n")
        when = (f"({res.timer_seconds:.0f} s), run by this benchmark after the clusters "
                f"were stopped" if res.timer_seconds else
                "(run by bench/run_all.sh just before this benchmark)")
        w(f"`python bench/bench_timer.py --ops {a.timer_ops}` {when}: the "
          f"purgatory's hierarchical timing wheel against asyncio's heap of timer handles for "
          f"delayed operations (DelayedProduce/DelayedFetch) that mostly complete early. "
          f"\"purgatory\" is the wheel behind DelayedOperationPurgatory with its watch keys. "
          f"Quoted as printed:\n")
        w(res.timer_md)
        w("")

    # -- profiles
    if res.profiles:
        w("### Where the time goes under acks=all (py-spy)\n")
        w("`py-spy record --format raw --nonblocking --rate 250` attached to broker 0 (the "
          "leader) and broker 1 (a follower) at once, while the load ran on fresh RF=3 topics "
          "after the measured runs (the samplers take CPU from the same two cores, so these "
          "runs are not the measured ones). \"self\" is the innermost Python frame (time in C "
          "code counts for its caller); samples in `select` are the loop waiting. The last "
          "table files each busy sample under a part of the replication path, by the first "
          "category (in the order of bench_replication.CATEGORIES) with a frame in its "
          "stack.\n")
        for title, text in res.profiles:
            w(f"#### {title}\n")
            w(text)

    # -- notes
    notes_l = []
    if res.errors:
        uniq = list(dict.fromkeys(e.split("] ", 1)[-1] for e in res.errors))
        notes_l.append(f"The brokers logged {len(res.errors)} ERROR line(s), e.g. "
                       f"`{uniq[0][:300]}`.")
    else:
        notes_l.append("The brokers logged no ERROR lines.")
    argv = [x for x in sys.argv[1:]]
    for opt in ("--output", "--update-doc"):
        if opt in argv:
            i = argv.index(opt)
            del argv[i:i + 2]
    notes_l.append(f"Benchmark wall time: {time.monotonic() - res.started:.0f} s "
                   f"(`{' '.join(['python bench/bench_replication.py', *argv])}`).")
    notes_l.append("Load average at the end: " + " ".join(
        Path("/proc/loadavg").read_text().split()[:3]) + " (1/5/15 min).")
    w("### Run notes\n")
    w("\n".join(f"- {n}" for n in notes_l))
    w("")
    w(END)
    return "\n".join(out) + "\n"


def current_notes(doc: Path) -> str:
    if not doc.exists():
        return ""
    m = re.search(re.escape(NOTES_BEGIN) + r"\n?(.*?)" + re.escape(NOTES_END),
                  doc.read_text(), re.S)
    return m.group(1) if m else ""


def splice(section: str, doc: Path) -> None:
    """Replace the replication section of `doc` (or append it), keeping the current
    hand-written notes block. Nothing else of the file changes."""
    text = doc.read_text() if doc.exists() else ""
    notes = current_notes(doc)
    if notes.strip():
        section = re.sub(re.escape(NOTES_BEGIN) + r".*?" + re.escape(NOTES_END),
                         lambda _m: f"{NOTES_BEGIN}\n{notes.strip()}\n{NOTES_END}", section,
                         flags=re.S)
    section = section.strip()
    m = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), text, re.S)
    if m:
        text = text[:m.start()] + section + text[m.end():]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    doc.write_text(text)


# ==============================================================================================
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kcat-records", type=int, default=4_000_000, help="per kcat run (4M)")
    ap.add_argument("--py-records", type=int, default=2_000_000,
                    help="per confluent-kafka run (2M)")
    ap.add_argument("--batch-size", type=int, default=1_000_000, help="kcat batch.size (1000000)")
    ap.add_argument("--partitions", default="1,6", help="partition counts (1,6)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is kept")
    ap.add_argument("--embedded-repeat", type=int, default=3,
                    help="runs per figure on `odradek cluster` (3)")
    ap.add_argument("--no-embedded", action="store_true", help="skip the one-process cluster")
    ap.add_argument("--latency-rate", type=float, default=1000, help="msg/s (1000)")
    ap.add_argument("--latency-seconds", type=float, default=10, help="(10)")
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--no-throughput", action="store_true", help="skip the throughput runs")
    ap.add_argument("--timer-ops", type=int, default=1_000_000,
                    help="bench_timer.py --ops (1,000,000)")
    ap.add_argument("--no-timer", action="store_true", help="skip bench_timer.py")
    ap.add_argument("--timer-md", metavar="MD",
                    help="quote this bench_timer.py output (run with --timer-ops) instead of "
                         "running it again (run_all.sh has just run it)")
    ap.add_argument("--notes-from", metavar="DOC", default=str(REPO / "docs" / "performance.md"),
                    help="carry the hand-written replication notes over from DOC "
                         "(default docs/performance.md)")
    ap.add_argument("--no-profile", action="store_true", help="skip the py-spy runs")
    ap.add_argument("--profile-loops", type=int, default=3, help="loads per profile (3)")
    ap.add_argument("--timeout", type=float, default=300, help="per driver run, seconds")
    ap.add_argument("--catch-up-timeout", type=float, default=60,
                    help="how long to wait for the HW to cover all records after a run")
    ap.add_argument("--keep-topics", action="store_true", help="do not delete measured topics")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 200k/100k records, 1 run, 1 partition, 3 s latency, "
                         "100k timer ops, no profiles, no embedded cluster")
    ap.add_argument("--output", help="write the markdown section here instead of stdout")
    ap.add_argument("--update-doc", metavar="DOC",
                    help="replace the section between the replication markers in DOC")
    ap.add_argument("--splice", metavar="MD",
                    help="with --update-doc: splice this already generated section, no run")
    a = ap.parse_args()
    if a.splice:
        if not a.update_doc:
            sys.exit("--splice needs --update-doc")
        splice(Path(a.splice).read_text(), Path(a.update_doc))
        progress(f"spliced {a.splice} into {a.update_doc}")
        return
    if a.quick:
        a.kcat_records, a.py_records, a.repeat, a.partitions = 200_000, 100_000, 1, "1"
        a.latency_seconds, a.timer_ops, a.no_profile, a.no_embedded = 3, 100_000, True, True
    if not shutil.which("kcat"):
        sys.exit("kcat is not installed (apt-get install -y kcat)")
    partitions_list = [int(x) for x in a.partitions.split(",")]

    res = Results(facts=machine_facts())
    progress(f"machine: {res.facts['cpu model']}, {res.facts['cpus']} CPUs; load "
             f"{res.facts['load average at start'].split(' (')[0]}")
    with tempfile.TemporaryDirectory(prefix="odradek-bench-repl-records-") as tmp:
        records_file = Path(tmp) / "records.txt"
        progress(f"writing {a.kcat_records:,} 100-byte lines for kcat")
        write_records_file(records_file, a.kcat_records)

        # Controlled shutdown off: only the teardown is affected. With it on, stopping all three
        # at once (or the controller first) makes the others retry ControlledShutdown against
        # the stopped controller's address, 3 x 5 s each.
        with ProcessCluster(overrides={"controlled.shutdown.enable": "false"}) as cluster:
            admin = Admin(cluster.bootstrap)
            try:
                time.sleep(2.0)
                names = {**cluster.pids}
                res.rss["idle, 2 s after start"] = {
                    **{k: rss_kb(p) for k, p in names.items()},
                    "ZooKeeper": rss_kb(cluster.zk_pid or 0)}
                # Latency first, on the fresh cluster: the throughput runs leave GBs of
                # segments to delete (deletion blocks a broker's loop for 0.1-1 s per log).
                if not a.no_latency:
                    bench_latency(res, cluster, admin, a)
                    res.rss["peak during the latency runs"] = {
                        k: max(int(x["peak_rss_kb"][k]) for x in res.latency)  # type: ignore[index]
                        for k in names}
                if not a.no_throughput:
                    bench_throughput(res, cluster, admin, a, records_file,
                                     ["kcat", "confluent"], partitions_list, a.repeat)
                peaks: dict[str, int] = {}
                for r in res.runs:
                    if r.config == "RF=3, acks=all":
                        for k, v in r.peak_rss_kb.items():
                            peaks[k] = max(peaks.get(k, 0), v)
                if peaks:
                    res.rss["peak under acks=all, RF=3 (throughput runs)"] = peaks
                time.sleep(2.0)
                res.rss["after the load (2 s idle)"] = {
                    **{k: rss_kb(p) for k, p in names.items()},
                    "ZooKeeper": rss_kb(cluster.zk_pid or 0)}
                if not a.no_profile:
                    bench_profiles(res, cluster, admin, a, records_file)
                res.errors += error_lines(cluster)
            finally:
                admin.close()
                progress("stopping the brokers and ZooKeeper")

        if not a.no_embedded and not a.no_throughput:
            with EmbeddedCluster() as emb:
                admin = Admin(emb.bootstrap)
                try:
                    bench_throughput(res, emb, admin, a, records_file, ["kcat"], [1],
                                     a.embedded_repeat)
                    res.errors += error_lines(emb)
                finally:
                    admin.close()
                    progress("stopping the embedded cluster")

    if a.timer_md:
        res.timer_md = Path(a.timer_md).read_text().strip()
    elif not a.no_timer:
        bench_timer(res, a)  # last, with every cluster stopped
    notes = current_notes(Path(a.update_doc)) if a.update_doc else ""
    if not notes.strip() and a.notes_from:
        notes = current_notes(Path(a.notes_from))
    text = render(res, a, notes)
    if a.output:
        Path(a.output).write_text(text)
        progress(f"wrote {a.output}")
    if a.update_doc:
        splice(text, Path(a.update_doc))
        progress(f"updated the replication section of {a.update_doc}")
    if not a.output and not a.update_doc:
        print(text)
    progress(f"done in {time.monotonic() - res.started:.0f} s")


if __name__ == "__main__":
    main()
