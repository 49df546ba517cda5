"""Single-broker benchmark of odradek with 100-byte records (the setup of Kreps 2014).

Measures, against `odradek broker` started as a subprocess with a fresh temporary log dir:

1. produce throughput, driven by kcat (`kcat -P`, lines from a file, linger.ms=5,
   batch.size=1000000) and by confluent-kafka's Python produce() loop (linger.ms=5), with
   acks=1 and acks=all, into pre-created topics of 1 and 6 partitions;
2. consume throughput: `kcat -C -e` and a confluent-kafka Consumer with assign(), reading the
   kcat-produced topic back from the beginning;
3. the broker's RSS (VmRSS from /proc every 100 ms): idle after start, peak in each phase, and
   after the load;
4. end-to-end latency at a moderate rate: a confluent producer stamps perf_counter_ns() into
   each value, a confluent consumer on the same host subtracts it on receipt;
5. local physical references: dd (1 GiB, conv=fdatasync, and into the page cache) and iperf3
   over loopback;
6. optionally (py-spy installed) where the broker's time goes: sampled stacks during a kcat
   produce run and a kcat consume run, summarised as text.

Every figure says which process drove it: the driver shares the machine's cores with the broker.
Each measurement is a fixed record count with a timeout; brokers and temp dirs are cleaned up.
Progress goes to stderr, the markdown section to stdout (or --output). Usage::

    python bench/bench_broker.py                        # the full run
    python bench/bench_broker.py --quick                # small counts, a smoke test
    python bench/bench_broker.py --output /tmp/broker.md

Internal: `python bench/bench_broker.py worker <kind> ...` runs one client in its own process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    BrokerProcess,
    RssSampler,
    collapsed_stacks,
    cpu_seconds,
    ensure_topic,
    fmt_int,
    fmt_mib,
    machine_facts,
    produce_records,
    progress,
    python_worker,
    rss_kb,
    run_timed,
    table,
    topic_record_count,
)
from plots import consume_chart, figure, latency_chart, percentiles, produce_chart

SCRIPT = Path(__file__).resolve()
RECORD_SIZE = 100
MB = 2**20  # Kreps 2014: 821,557 rec/s x 100 B = 78.3 "MB/s", i.e. MiB/s

# Published anchors, and reference figures measured before odradek on another instance of this
# machine kind: a do-nothing Python broker (kio parsing, records in memory), dd and iperf3.
KAFKA_2014 = "Kafka 2014 (3 brokers, 6-core 2.5 GHz, 100 B records)"
ANCHOR_PRODUCE = {"1": 821_557, "all": 421_823}  # no replication / 3x sync replication
ANCHOR_CONSUME = 940_521
ANCHOR_LATENCY = (2.0, 3.0)  # ms, p50 / p99
NOTHING_BROKER = {"kcat": 1_620_000, "confluent": 1_090_000}  # do-nothing Python broker
FACTS_DD_SYNC_MB = 350
FACTS_DD_CACHE_GB = 4.2
FACTS_IPERF_GBIT = 15.4


# ==============================================================================================
# Workers: one client per process, printing one JSON line on stdout
# ==============================================================================================
def worker_produce(a: argparse.Namespace) -> None:
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_error(err: object, msg: object = None) -> None:
        errors.append(str(err))

    p = Producer({"bootstrap.servers": a.bootstrap, "acks": a.acks, "linger.ms": a.linger_ms,
                  "queue.buffering.max.messages": 500_000, "enable.idempotence": False,
                  "delivery.report.only.error": True, "on_delivery": on_error,
                  "error_cb": on_error, "log_level": 0})
    p.list_topics(a.topic, timeout=10)  # connect and learn the partitions before timing
    value = b"x" * RECORD_SIZE
    t0 = time.perf_counter()
    produce_records(p, a.topic, value, a.records)
    left = p.flush(a.timeout)
    seconds = time.perf_counter() - t0
    print(json.dumps({"records": a.records - left, "seconds": seconds, "unflushed": left,
                      "errors": errors[:5], "error_count": len(errors)}), flush=True)


def worker_consume(a: argparse.Namespace) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    conf = {"bootstrap.servers": a.bootstrap, "group.id": "odradek-bench",
            "enable.auto.commit": False, "log_level": 0}
    conf.update(kv.split("=", 1) for kv in a.conf)
    c = Consumer(conf)
    md = c.list_topics(a.topic, timeout=10)
    parts = sorted(md.topics[a.topic].partitions)
    t0 = time.perf_counter()
    c.assign([TopicPartition(a.topic, p, OFFSET_BEGINNING) for p in parts])
    n = nbytes = 0
    deadline = time.monotonic() + a.timeout
    consume = c.consume
    while n < a.records and time.monotonic() < deadline:
        # consume(k, t) blocks until it has k messages or t passed: never ask for more than
        # are left, or the last call would sit out its timeout.
        for m in consume(min(10_000, a.records - n), 1.0):
            if m.error() is None:
                n += 1
                nbytes += len(m.value())
    seconds = time.perf_counter() - t0
    c.close()
    print(json.dumps({"records": n, "bytes": nbytes, "seconds": seconds}), flush=True)


_STAMP = struct.Struct(">qq")  # sequence number, perf_counter_ns at produce()


def worker_lat_produce(a: argparse.Namespace) -> None:
    from confluent_kafka import Producer

    errors: list[str] = []
    p = Producer({"bootstrap.servers": a.bootstrap, "acks": a.acks, "linger.ms": a.linger_ms,
                  "enable.idempotence": False, "delivery.report.only.error": True,
                  "on_delivery": lambda err, msg: errors.append(str(err)), "log_level": 0})
    p.list_topics(a.topic, timeout=10)
    pad = b"x" * (RECORD_SIZE - _STAMP.size)
    total = int(a.rate * a.seconds)
    t0 = time.perf_counter()
    for i in range(total):
        delay = t0 + i / a.rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        p.produce(a.topic, _STAMP.pack(i, time.perf_counter_ns()) + pad)
        p.poll(0)
    left = p.flush(a.timeout)
    print(json.dumps({"sent": total - left, "seconds": time.perf_counter() - t0,
                      "error_count": len(errors), "errors": errors[:5]}), flush=True)


def worker_lat_consume(a: argparse.Namespace) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "odradek-bench-latency",
                  "enable.auto.commit": False, "log_level": 0})
    c.assign([TopicPartition(a.topic, 0, OFFSET_BEGINNING)])
    c.consume(1, 0.5)  # connected, first (empty) fetch under way
    print("ready", flush=True)
    lat_ns: list[int] = []
    warmup = int(a.rate * a.warmup)
    n = 0
    deadline = time.monotonic() + a.timeout
    while n < a.records and time.monotonic() < deadline:
        m = c.poll(0.1)  # returns as soon as one message is there (consume(k, t) waits for k)
        now = time.perf_counter_ns()
        if m is not None and m.error() is None:
            seq, stamp = _STAMP.unpack_from(m.value())
            n += 1
            if seq >= warmup:
                lat_ns.append(now - stamp)
    c.close()
    lat_ns.sort()

    def pct(q: float) -> float:
        return lat_ns[min(len(lat_ns) - 1, int(q * len(lat_ns)))] / 1e6 if lat_ns else -1

    print(json.dumps({"received": n, "measured": len(lat_ns), "p50": pct(0.50),
                      "p90": pct(0.90), "p99": pct(0.99), "p999": pct(0.999),
                      "max": lat_ns[-1] / 1e6 if lat_ns else -1,
                      "mean": statistics.fmean(lat_ns) / 1e6 if lat_ns else -1}), flush=True)


def worker_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="bench_broker.py worker")
    ap.add_argument("kind", choices=["produce", "consume", "lat-produce", "lat-consume"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--records", type=int, default=0)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--conf", action="append", default=[], help="extra client config k=v")
    a = ap.parse_args(argv)
    {"produce": worker_produce, "consume": worker_consume, "lat-produce": worker_lat_produce,
     "lat-consume": worker_lat_consume}[a.kind](a)


# ==============================================================================================
# The benchmark
# ==============================================================================================
@dataclass
class Run:
    """One measured run: who drove it, how long, and what the broker spent meanwhile."""

    driver: str
    kind: str  # produce / consume
    partitions: int
    acks: str
    records: int
    seconds: float
    driver_cpu: float
    broker_cpu: float
    broker_peak_rss_kb: int
    verified: int = -1  # records the broker holds / the reader counted
    note: str = ""

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def mb_s(self) -> float:
        return self.records * RECORD_SIZE / self.seconds / MB


@dataclass
class Results:
    facts: dict[str, str] = field(default_factory=dict)
    physical: dict[str, str] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    rss: list[tuple[int, str, int]] = field(default_factory=list)  # partitions, phase, KiB
    latency: dict[str, object] = field(default_factory=dict)
    profiles: list[tuple[str, str]] = field(default_factory=list)  # title, markdown
    topic_creation: str = ""
    broker_errors: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


def write_records_file(path: Path, n: int) -> None:
    """n lines, each a 100-byte value (kcat -P splits on newlines, the newline is dropped)."""
    pad = "x" * (RECORD_SIZE - 10)
    with open(path, "w") as f:
        chunk = 100_000
        for start in range(0, n, chunk):
            f.write("".join(f"{i:010d}{pad}\n" for i in range(start, min(n, start + chunk))))


def measure(broker: BrokerProcess, cmd: list[str], timeout: float, **kw: object
            ) -> tuple[object, float, int]:
    """Run a driver command while sampling the broker: (Timed, broker CPU s, peak RSS KiB)."""
    cpu0 = cpu_seconds(broker.pid)
    with RssSampler(broker.pid) as rss:
        timed = run_timed(cmd, timeout=timeout, **kw)  # type: ignore[arg-type]
    return timed, cpu_seconds(broker.pid) - cpu0, rss.peak_kb


def kcat_produce(broker: BrokerProcess, topic: str, acks: str, records_file: Path, n: int,
                 timeout: float, batch_size: int = 1_000_000) -> Run:
    cmd = ["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-X", "linger.ms=5",
           "-X", f"batch.size={batch_size}", "-X", f"acks={acks}"]
    timed, bcpu, peak = measure(broker, cmd, timeout, stdin_path=str(records_file))
    if timed.returncode != 0:
        raise RuntimeError(f"kcat -P failed ({timed.returncode}): {timed.stderr[-500:]}")
    parts = len(topic_partitions_cache.get(topic, [0]))
    held = topic_record_count(broker.bootstrap, topic)
    return Run(f"kcat -P, batch.size={batch_size}", "produce", parts, acks, n, timed.wall,
               timed.cpu, bcpu, peak, held)


topic_partitions_cache: dict[str, list[int]] = {}


def py_produce(broker: BrokerProcess, topic: str, acks: str, n: int, timeout: float) -> Run:
    cmd = python_worker(SCRIPT, "worker", "produce", "--bootstrap", broker.bootstrap,
                        "--topic", topic, "--records", str(n), "--acks", acks,
                        "--linger-ms", "5", "--timeout", str(timeout))
    timed, bcpu, peak = measure(broker, cmd, timeout + 30)
    if timed.returncode != 0:
        raise RuntimeError(f"produce worker failed: {timed.stderr[-800:]}")
    out = json.loads(timed.stdout.strip().splitlines()[-1])
    held = topic_record_count(broker.bootstrap, topic)
    note = f"{out['error_count']} delivery errors" if out["error_count"] else ""
    parts = len(topic_partitions_cache.get(topic, [0]))
    return Run("confluent-kafka produce() loop", "produce", parts, acks, out["records"],
               out["seconds"], timed.cpu, bcpu, peak, held, note)


# librdkafka stops fetching a partition while more than queued.min.messages (100,000) or
# queued.max.messages.kbytes (64 MiB) wait in its local queue, and looks again only at its next
# wake-up (2.0: up to ~1 s later; >= 2.1: fetch.queue.backoff.ms, 1000 ms). A broker that
# answers faster than the application drains the queue hits this every few fetches: client-side
# pauses, which these settings remove (the whole topic may then be prefetched into memory).
BIG_QUEUE = ("queued.min.messages=10000000", "queued.max.messages.kbytes=2097151")


def kcat_consume(broker: BrokerProcess, topic: str, n: int, timeout: float,
                 conf: tuple[str, ...] = ()) -> Run:
    # -c N (exit after N records), not -e: kcat only learns it reached the end from an empty
    # fetch, which the broker rightly holds for fetch.wait.max.ms (500 ms): not throughput.
    cmd = ["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-o", "beginning", "-c", str(n),
           *(x for kv in conf for x in ("-X", kv))]
    timed, bcpu, peak = measure(broker, cmd, timeout, stdout_devnull=True)
    if timed.returncode != 0:
        raise RuntimeError(f"kcat -C failed ({timed.returncode}): {timed.stderr[-500:]}")
    parts = len(topic_partitions_cache.get(topic, [0]))
    label = "kcat -C -c N" + (", big prefetch queue" if conf else "")
    return Run(label, "consume", parts, "", n, timed.wall, timed.cpu, bcpu, peak, n)


def py_consume(broker: BrokerProcess, topic: str, n: int, timeout: float,
               conf: tuple[str, ...] = ()) -> Run:
    cmd = python_worker(SCRIPT, "worker", "consume", "--bootstrap", broker.bootstrap,
                        "--topic", topic, "--records", str(n), "--timeout", str(timeout),
                        *(x for kv in conf for x in ("--conf", kv)))
    timed, bcpu, peak = measure(broker, cmd, timeout + 30)
    if timed.returncode != 0:
        raise RuntimeError(f"consume worker failed: {timed.stderr[-800:]}")
    out = json.loads(timed.stdout.strip().splitlines()[-1])
    parts = len(topic_partitions_cache.get(topic, [0]))
    label = "confluent-kafka Consumer, assign()" + (", big prefetch queue" if conf else "")
    return Run(label, "consume", parts, "", out["records"], out["seconds"], timed.cpu, bcpu,
               peak, out["records"])


def median_run(runs: list[Run]) -> Run:
    """The run with the median rate, annotated with the spread of all repetitions."""
    ordered = sorted(runs, key=lambda r: r.rate)
    mid = ordered[len(ordered) // 2]
    if len(runs) > 1:
        spread = f"{len(runs)} runs: {fmt_int(ordered[0].rate)}-{fmt_int(ordered[-1].rate)}"
        mid.note = "; ".join(x for x in (spread, mid.note) if x)
    mid.broker_peak_rss_kb = max(r.broker_peak_rss_kb for r in runs)
    return mid


def bench_partitions(res: Results, partitions: int, a: argparse.Namespace,
                     records_file: Path) -> None:
    progress(f"--- {partitions} partition(s): starting a broker")
    with BrokerProcess({"num.partitions": str(partitions)}) as broker:
        time.sleep(1.0)
        res.rss.append((partitions, "idle, 1 s after start", rss_kb(broker.pid)))

        def topic(name: str) -> str:
            how = ensure_topic(broker.bootstrap, name, partitions)
            res.topic_creation = res.topic_creation or how
            topic_partitions_cache[name] = list(range(partitions))
            return name

        # 1a. kcat produce
        first_kcat_topic = ""
        for batch_size, acks in ((b, k) for b in a.kcat_batch_sizes for k in ("1", "all")):
            runs = []
            for rep in range(a.repeat):
                name = topic(f"kcat-b{batch_size}-acks{acks}-p{partitions}-r{rep}")
                first_kcat_topic = first_kcat_topic or name
                progress(f"kcat -P: {a.kcat_records:,} records, batch.size={batch_size}, "
                         f"acks={acks}, {partitions} partition(s), run {rep + 1}/{a.repeat}")
                r = kcat_produce(broker, name, acks, records_file, a.kcat_records, a.timeout,
                                 batch_size)
                progress(f"  {fmt_int(r.rate)} rec/s in {r.seconds:.2f} s "
                         f"(broker CPU {r.broker_cpu:.2f} s, kcat CPU {r.driver_cpu:.2f} s)")
                runs.append(r)
            res.runs.append(median_run(runs))
        res.rss.append((partitions, "peak during kcat produce",
                        max(r.broker_peak_rss_kb for r in res.runs
                            if r.partitions == partitions and r.driver.startswith("kcat -P"))))

        # 1b. confluent-kafka produce() loop
        for acks in ("1", "all"):
            runs = []
            for rep in range(a.repeat):
                name = topic(f"py-acks{acks}-p{partitions}-r{rep}")
                progress(f"confluent produce(): {a.py_records:,} records, acks={acks}, "
                         f"{partitions} partition(s), run {rep + 1}/{a.repeat}")
                r = py_produce(broker, name, acks, a.py_records, a.timeout)
                progress(f"  {fmt_int(r.rate)} rec/s in {r.seconds:.2f} s "
                         f"(broker CPU {r.broker_cpu:.2f} s, driver CPU {r.driver_cpu:.2f} s)")
                runs.append(r)
            res.runs.append(median_run(runs))
        res.rss.append((partitions, "peak during confluent produce",
                        max(r.broker_peak_rss_kb for r in res.runs if r.partitions == partitions
                            and r.driver.startswith("confluent") and r.kind == "produce")))

        # 2. consume what kcat produced (the first kcat topic, first repetition)
        readers = (("kcat -C", kcat_consume),
                   ("kcat -C, big prefetch queue", lambda *x: kcat_consume(*x, conf=BIG_QUEUE)),
                   ("confluent Consumer", py_consume),
                   ("confluent Consumer, big prefetch queue",
                    lambda *x: py_consume(*x, conf=BIG_QUEUE)))
        for label, fn in readers:
            runs = []
            # The default confluent consumer sits out ~1 s pauses (see BIG_QUEUE): its figure
            # is steady and slow, so one run is enough.
            repeat = 1 if label == "confluent Consumer" else a.repeat
            for rep in range(repeat):
                progress(f"{label}: {a.kcat_records:,} records from {first_kcat_topic}, "
                         f"run {rep + 1}/{repeat}")
                r = fn(broker, first_kcat_topic, a.kcat_records, a.timeout)
                progress(f"  {fmt_int(r.rate)} rec/s in {r.seconds:.2f} s "
                         f"(broker CPU {r.broker_cpu:.2f} s, driver CPU {r.driver_cpu:.2f} s)")
                runs.append(r)
            res.runs.append(median_run(runs))
        res.rss.append((partitions, "peak during consume",
                        max(r.broker_peak_rss_kb for r in res.runs
                            if r.partitions == partitions and r.kind == "consume")))
        time.sleep(2.0)
        res.rss.append((partitions, "after the load (2 s idle)", rss_kb(broker.pid)))
        res.broker_errors += broker.errors_logged()
        progress(f"--- {partitions} partition(s): stopping the broker")


def bench_latency(res: Results, a: argparse.Namespace) -> None:
    progress(f"--- end-to-end latency: {a.latency_rate:g} msg/s for {a.latency_seconds:g} s")
    with BrokerProcess() as broker:
        ensure_topic(broker.bootstrap, "latency", 1)
        total = int(a.latency_rate * a.latency_seconds)
        common_args = ["--bootstrap", broker.bootstrap, "--topic", "latency",
                       "--rate", str(a.latency_rate), "--timeout", str(a.latency_seconds + 30)]
        consumer = subprocess.Popen(
            python_worker(SCRIPT, "worker", "lat-consume", "--records", str(total),
                          "--warmup", "1", *common_args),
            stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert consumer.stdout is not None
            if consumer.stdout.readline().strip() != "ready":
                raise RuntimeError("latency consumer did not start")
            cpu0 = cpu_seconds(broker.pid)
            with RssSampler(broker.pid) as rss:
                prod = run_timed(python_worker(
                    SCRIPT, "worker", "lat-produce", "--seconds", str(a.latency_seconds),
                    "--acks", "1", "--linger-ms", "0", *common_args),
                    timeout=a.latency_seconds + 60)
                out, _ = consumer.communicate(timeout=a.latency_seconds + 60)
            res.latency = json.loads(out.strip().splitlines()[-1])
            res.latency.update(json.loads(prod.stdout.strip().splitlines()[-1]))
            res.latency["broker_cpu"] = cpu_seconds(broker.pid) - cpu0
            res.latency["broker_peak_rss_kb"] = rss.peak_kb
            res.latency["rate"] = a.latency_rate
            res.latency["duration"] = a.latency_seconds
        finally:
            if consumer.poll() is None:
                os.killpg(consumer.pid, signal.SIGKILL)
                consumer.wait()
        res.broker_errors += broker.errors_logged()
    lat = res.latency
    progress(f"  p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms "
             f"({lat['measured']} of {lat['received']} messages measured)")


# -- physical references ---------------------------------------------------------------------
def bench_physical(res: Results) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="odradek-bench-dd-"))
    try:
        for label, extra in (("dd 1 GiB, bs=1M, conv=fdatasync", ["conv=fdatasync"]),
                             ("dd 1 GiB, bs=1M, into the page cache", [])):
            progress(label)
            target = tmp / "dd.out"
            r = subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", "count=1024",
                                *extra], capture_output=True, text=True, timeout=300)
            m = re.search(r"copied, ([\d.]+) s, ([\d.,]+ \S+/s)", r.stderr)
            res.physical[label] = (f"{1024 / float(m.group(1)) * MB / 1e6:,.0f} MB/s "
                                   f"(dd says {m.group(2)})" if m else f"failed: {r.stderr}")
            target.unlink(missing_ok=True)
            subprocess.run(["sync"], timeout=120)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    label = "iperf3 over loopback, 1 stream, 5 s"
    if not shutil.which("iperf3"):
        res.physical[label] = "iperf3 not installed (apt-get install -y iperf3)"
        return
    progress(label)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        time.sleep(0.5)
        r = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "5", "-J"],
                           capture_output=True, text=True, timeout=60)
        bps = json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"]
        res.physical[label] = f"{bps / 1e9:.1f} Gbit/s ({bps / 8 / 1e9:.2f} GB/s)"
    except (ValueError, KeyError, subprocess.SubprocessError) as exc:
        res.physical[label] = f"failed: {exc}"
    finally:
        if server.poll() is None:
            server.terminate()
        server.wait(10)


# -- profiles ----------------------------------------------------------------------------------
IDLE_LEAVES = ("EpollSelector.select", "select")


def summarise_profile(raw: Path, seconds: float, rate: int, top: int = 12) -> str:
    """Text summary of py-spy's raw (collapsed) stacks: busy share, top self and odradek
    inclusive frames."""
    selfc: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = idle = 0
    for frames, n in collapsed_stacks(raw):
        total += n
        if frames[-1].split(" (")[0] in IDLE_LEAVES:
            idle += n
            continue
        selfc[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    busy = total - idle
    if busy <= 0:
        return "_no busy samples (py-spy saw an idle broker)_\n"
    expected = seconds * rate
    lines = [f"{total:,} samples over {seconds:.1f} s at {rate} Hz; busy (not in epoll "
             f"select) {busy:,} = {busy / expected:.0%} of the wall time, "
             f"{busy / total:.0%} of the samples.", ""]
    lines.append(table(["self (leaf) frame", "% of busy", "samples"],
                       [(f"`{f}`", f"{c / busy:.1%}", c) for f, c in selfc.most_common(top)],
                       "lrr"))
    lines.append("")
    ours = [(f, c) for f, c in incl.most_common() if "odradek/" in f and "cli.py" not in f
            and not f.startswith("<module>")]
    lines.append(table(["odradek frame, inclusive", "% of busy", "samples"],
                       [(f"`{f}`", f"{c / busy:.1%}", c) for f, c in ours[:top]], "lrr"))
    return "\n".join(lines) + "\n"


def bench_profiles(res: Results, a: argparse.Namespace, records_file: Path) -> None:
    pyspy = shutil.which("py-spy")
    if not pyspy:
        res.profiles.append(("not run", "py-spy is not installed (`pip install py-spy`)."))
        return
    rate = 250
    with BrokerProcess() as broker:
        tmp = broker.tmpdir
        assert tmp is not None
        ensure_topic(broker.bootstrap, "profile", 1)
        topic_partitions_cache["profile"] = [0]
        py_topic = "profile-py6"
        ensure_topic(broker.bootstrap, py_topic, 1)
        topic_partitions_cache[py_topic] = [0]

        ensure_topic(broker.bootstrap, "profile-small", 1)
        topic_partitions_cache["profile-small"] = [0]
        steps = [
            ("kcat -P, batch.size=1000000, acks=1, 1 partition",
             lambda: kcat_produce(broker, "profile", "1", records_file, a.kcat_records,
                                  a.timeout)),
            ("kcat -P, batch.size=16384, acks=1, 1 partition",
             lambda: kcat_produce(broker, "profile-small", "1", records_file, a.kcat_records,
                                  a.timeout, 16384)),
            ("kcat -C, big prefetch queue, 1 partition",
             lambda: kcat_consume(broker, "profile", a.kcat_records, a.timeout, BIG_QUEUE)),
            ("confluent-kafka produce() loop, acks=1, 1 partition",
             lambda: py_produce(broker, py_topic, "1", a.py_records, a.timeout)),
        ]
        for title, step in steps:
            title += f" (the load run {a.profile_loops} times)"
            progress(f"py-spy on the broker during: {title}")
            out = tmp / "profile.txt"
            spy = subprocess.Popen([pyspy, "record", "--format", "raw", "--rate", str(rate),
                                    "--nonblocking", "--pid", str(broker.pid), "-o", str(out)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   start_new_session=True)
            time.sleep(1.0)  # py-spy attached
            t0 = time.perf_counter()
            try:
                loads = [step() for _ in range(a.profile_loops)]
                r = Run(loads[0].driver, "", 0, "", sum(x.records for x in loads),
                        sum(x.seconds for x in loads), sum(x.driver_cpu for x in loads),
                        sum(x.broker_cpu for x in loads), 0)
            finally:
                seconds = time.perf_counter() - t0
                spy.send_signal(signal.SIGINT)
                try:
                    _, err = spy.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(spy.pid, signal.SIGKILL)
                    _, err = spy.communicate()
            if not out.exists():
                res.profiles.append((title, f"py-spy failed: {err.decode()[-400:]}"))
                continue
            # The sampling window starts 1 s before the load; count it.
            text = (f"Load: {fmt_int(r.rate)} rec/s while sampled (broker CPU "
                    f"{r.broker_cpu:.2f} s over {r.seconds:.2f} s).\n\n"
                    + summarise_profile(out, seconds + 1.0, rate))
            res.profiles.append((title, text))
            out.unlink()
        res.broker_errors += broker.errors_logged()


# -- report ------------------------------------------------------------------------------------
def summary(res: Results) -> str:
    """The headline figures beside their anchors, one line each."""
    def find(kind: str, driver: str, acks: str = "", parts: int = 1) -> Run | None:
        for r in res.runs:
            if (r.kind == kind and r.driver == driver and r.partitions == parts
                    and (not acks or r.acks == acks)):
                return r
        return None

    def cpu(r: Run) -> str:
        return (f"broker {r.broker_cpu / r.seconds:.0%} of a core, "
                f"driver {r.driver_cpu / r.seconds:.0%}")

    rows = []
    for label, r, anchor in (
        ("produce, acks=1", find("produce", "kcat -P, batch.size=1000000", "1"),
         f"{fmt_int(ANCHOR_PRODUCE['1'])} rec/s (no replication)"),
        ("produce, acks=1", find("produce", "confluent-kafka produce() loop", "1"),
         f"{fmt_int(ANCHOR_PRODUCE['1'])} rec/s (no replication)"),
        ("produce, acks=1, 16 KiB batches", find("produce", "kcat -P, batch.size=16384", "1"),
         f"{fmt_int(ANCHOR_PRODUCE['1'])} rec/s (no replication)"),
        ("produce, acks=all", find("produce", "kcat -P, batch.size=1000000", "all"),
         f"{fmt_int(ANCHOR_PRODUCE['all'])} rec/s (3x sync replication)"),
        ("consume", find("consume", "kcat -C -c N, big prefetch queue"),
         f"{fmt_int(ANCHOR_CONSUME)} rec/s"),
        ("consume", find("consume", "confluent-kafka Consumer, assign(), big prefetch queue"),
         f"{fmt_int(ANCHOR_CONSUME)} rec/s"),
        ("consume, librdkafka defaults", find("consume", "confluent-kafka Consumer, assign()"),
         f"{fmt_int(ANCHOR_CONSUME)} rec/s"),
    ):
        if r is not None:
            rows.append((label + ", 1 partition", r.driver, f"**{fmt_int(r.rate)}** rec/s "
                         f"({r.mb_s:.1f} MB/s)", anchor, cpu(r)))
    if res.latency:
        lat = res.latency
        rows.append((f"end-to-end latency at {lat['rate']:g} rec/s",
                     "confluent-kafka producer -> consumer",
                     f"p50 **{lat['p50']:.2f}** ms, p99 **{lat['p99']:.2f}** ms",
                     f"p50 {ANCHOR_LATENCY[0]:g} ms, p99 {ANCHOR_LATENCY[1]:g} ms", ""))
    rss = {(p, ph): kb for p, ph, kb in res.rss}
    idle = rss.get((1, "idle, 1 s after start"))
    if idle is not None:
        peak = max(kb for (p, ph), kb in rss.items() if p == 1 and ph.startswith("peak"))
        rows.append(("broker RSS, 1-partition run", "", f"idle {fmt_mib(idle)} MiB, "
                     f"peak {fmt_mib(peak)} MiB", "-", ""))
    return table(["figure", "driver", "odradek, this machine",
                  "Kafka 2014 (3 brokers, 6 cores each)", "CPU during the run"], rows)


def render(res: Results, a: argparse.Namespace) -> str:
    out: list[str] = []
    w = out.append
    w("## Summary\n")
    w(summary(res))
    w("")
    w("## Machine\n")
    w(table(["", ""], [(k, v) for k, v in res.facts.items()]))
    w("")
    w("The broker is one Python process (one asyncio loop). Every load generator runs on the "
      "same machine and shares its cores with the broker; each figure names its driver, and "
      "the CPU columns say how much of a core the broker and the driver each used (100% = "
      "one core busy for the whole run). When the driver's share is near 100% the driver, not "
      "the broker, set the pace.\n")

    if res.physical:
        w("## Local physical references\n")
        ref = {"dd 1 GiB, bs=1M, conv=fdatasync": f"{FACTS_DD_SYNC_MB} MB/s",
               "dd 1 GiB, bs=1M, into the page cache": f"{FACTS_DD_CACHE_GB} GB/s",
               "iperf3 over loopback, 1 stream, 5 s": f"{FACTS_IPERF_GBIT} Gbit/s"}
        w(table(["measurement (now, same filesystem as the log dirs)", "result",
                 "earlier, on another machine of this kind"],
                [(k, v, ref.get(k, "")) for k, v in res.physical.items()]))
        w("")
        w("The broker does not fsync on the produce path (flush.messages/flush.ms default to "
          "never, as in Kafka): appends go to the page cache, so the fdatasync figure bounds "
          "only a configuration that flushes every write. This is a VM: its virtual disk may "
          "acknowledge fdatasync from the host's cache, in which case the figure is far above "
          "what durable media take (compare the last column, measured on another "
          "instance of this machine kind).\n")

    def pct(cpu: float, wall: float) -> str:
        return f"{cpu / wall:.0%}"

    prod = [r for r in res.runs if r.kind == "produce"]
    if prod:
        w("## Produce throughput, 100-byte records\n")
        w(f"kcat: `kcat -P -b ... -t T -X linger.ms=5 -X batch.size=B -X acks=A` reading "
          f"{a.kcat_records:,} lines of 100 bytes from a file on stdin; time = the kcat "
          f"process from start to exit (it exits after every record is acknowledged). "
          f"B=1000000 is the do-nothing broker's reference setup (librdkafka's default; ~10,000 "
          f"records per "
          f"batch); B=16384 is the Java client's default batch.size (~150 records per batch), "
          f"which makes the broker's per-request cost show. confluent-kafka: a Python loop of "
          f"`produce(topic, value)` ({a.py_records:,} records, linger.ms=5, librdkafka's "
          f"default batch.size 1000000, queue.buffering.max.messages=500000, delivery reports "
          f"only for errors), timed from the first produce() to the end of flush(). Topics "
          f"pre-created with 1 or 6 partitions, replication factor 1; \"records\" was checked "
          f"against the partitions' high watermarks after each run. Median of {a.repeat} "
          f"run(s), the note gives the range. MB/s counts record values in 2^20 bytes, as "
          f"Kreps 2014 did (821,557 rec/s x 100 B = 78.3 MB/s).\n")
        rows = []
        for r in prod:
            anchor = ANCHOR_PRODUCE[r.acks]
            if r.driver.startswith("kcat"):
                ceiling = (fmt_int(NOTHING_BROKER["kcat"]) if "=1000000" in r.driver
                           else "-")
            else:
                ceiling = fmt_int(NOTHING_BROKER["confluent"])
            ok = "" if r.verified == r.records else f" (broker holds {r.verified:,}!)"
            rows.append((r.driver, r.acks, r.partitions, f"{r.records:,}{ok}",
                         f"{r.seconds:.2f}", f"**{fmt_int(r.rate)}**", f"{r.mb_s:.1f}",
                         pct(r.broker_cpu, r.seconds), pct(r.driver_cpu, r.seconds),
                         f"{r.broker_cpu / r.records * 1e6:.2f}",
                         f"{ceiling} / {fmt_int(anchor)}", r.note))
        w(table(["driver", "acks", "parts", "records", "s", "records/s", "MB/s",
                 "broker CPU", "driver CPU", "broker CPU µs/rec",
                 "do-nothing broker / Kafka 2014", "note"], rows, "llrrrrrrrrrl"))
        w("")
        w(figure("broker-produce", produce_chart(
            [(r.driver, r.acks, r.partitions, r.rate) for r in prod])))
        w("")
        w(f"Anchors: the do-nothing Python broker (kio parsing, records kept in memory) took "
          f"{fmt_int(NOTHING_BROKER['kcat'])} rec/s from the batch.size=1000000 kcat command "
          f"and {fmt_int(NOTHING_BROKER['confluent'])} rec/s from a confluent-kafka produce() "
          f"loop on this machine kind: ceilings set largely by the driver. {KAFKA_2014}: "
          f"{fmt_int(ANCHOR_PRODUCE['1'])} rec/s (78.3 MB/s) for one producer without "
          f"replication (compare acks=1), {fmt_int(ANCHOR_PRODUCE['all'])} rec/s (40.2 MB/s) "
          f"with 3x synchronous replication (acks=all; on one broker acks=all waits for an ISR "
          f"of one, so it is not the same work).\n")

    cons = [r for r in res.runs if r.kind == "consume"]
    if cons:
        w("## Consume throughput, 100-byte records\n")
        w("Reading back, from the beginning, the topic of the first kcat produce run "
          "(batch.size=1000000, acks=1). kcat: `kcat -C -b ... -t T -o beginning -c N > "
          "/dev/null` (every partition assigned; time = the process from start to exit after "
          "N records; `-e` would add the 500 ms the broker rightly holds the final, empty "
          "fetch). confluent-kafka: `Consumer.assign()` at OFFSET_BEGINNING and "
          "`consume(min(10000, left), 1.0)` until every record was seen, timed from "
          "assign(). Each client runs once with librdkafka's defaults and once with a \"big "
          "prefetch queue\" (`queued.min.messages=10000000`, "
          "`queued.max.messages.kbytes=2097151`): by default librdkafka stops fetching a "
          "partition while over 100,000 records (or 64 MiB) wait in its local queue and "
          "looks again only at its next wake-up, up to ~1 s later (2.0; since 2.1 "
          "`fetch.queue.backoff.ms`, 1000 ms). A broker that answers faster than the "
          "application drains the queue makes the client sit out these pauses, with both "
          "processes idle: the default rows measure that client behaviour, the big-queue "
          "rows the transfer. Default fetch sizes (fetch.max.bytes 50 MiB, "
          f"max.partition.fetch.bytes 1 MiB). Median of {a.repeat} run(s), the note gives "
          "the range; the confluent consumer with defaults runs once (its pauses make it "
          "slow and steady).\n")
        rows = []
        for r in cons:
            ok = "" if r.verified == r.records else f" (read {r.verified:,}!)"
            rows.append((r.driver, r.partitions, f"{r.records:,}{ok}", f"{r.seconds:.2f}",
                         f"**{fmt_int(r.rate)}**", f"{r.mb_s:.1f}",
                         pct(r.broker_cpu, r.seconds), pct(r.driver_cpu, r.seconds),
                         f"{r.broker_cpu / r.records * 1e6:.2f}", fmt_int(ANCHOR_CONSUME),
                         r.note))
        w(table(["driver", "parts", "records", "s", "records/s", "MB/s", "broker CPU",
                 "driver CPU", "broker CPU µs/rec", "Kafka 2014", "note"], rows,
                "lrrrrrrrrrl"))
        w("")
        w(figure("broker-consume", consume_chart([(r.driver, r.partitions, r.rate)
                                                  for r in cons])))
        w("")
        w(f"Anchor: {KAFKA_2014}, one consumer: {fmt_int(ANCHOR_CONSUME)} rec/s (89.7 MB/s).\n")

    if res.rss:
        w("## Broker memory (VmRSS)\n")
        w("Sampled from /proc/<pid>/status every 100 ms; \"peak\" is the largest sample while "
          "that phase ran. One fresh broker per partition count.\n")
        parts = sorted({p for p, _, _ in res.rss})
        phases = list(dict.fromkeys(ph for _, ph, _ in res.rss))
        vals = {(p, ph): kb for p, ph, kb in res.rss}
        rows = [(ph, *(fmt_mib(vals[(p, ph)]) if (p, ph) in vals else "" for p in parts))
                for ph in phases]
        if res.latency:
            rows.append(("peak during the latency run (1 partition)",
                         *(fmt_mib(int(res.latency["broker_peak_rss_kb"])) if p == 1 else ""
                           for p in parts)))
        w(table(["phase", *(f"{p} partition(s), MiB" for p in parts)], rows,
                "l" + "r" * len(parts)))
        w("")

    if res.latency:
        lat = res.latency
        w("## End-to-end latency\n")
        w(f"A confluent-kafka producer (acks=1, linger.ms=0) sends {lat['rate']:g} records/s "
          f"for {lat['duration']:g} s to a 1-partition topic, each value stamped with "
          f"`time.perf_counter_ns()` (CLOCK_MONOTONIC, shared by the processes of one host); a "
          f"confluent-kafka consumer in another process (assign(), fetch.wait.max.ms 500, "
          f"fetch.min.bytes 1: the broker holds the fetch until data arrives) subtracts it "
          f"when consume() hands the record to Python. The first second is a warm-up and is "
          f"not counted. Both clients and the broker share the cores.\n")
        w(table(["sent", "measured", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms",
                 "broker CPU", "Kafka 2014 p50 / p99"],
                [(f"{lat['sent']:,}", f"{lat['measured']:,}", f"**{lat['p50']:.2f}**",
                  f"{lat['p90']:.2f}", f"**{lat['p99']:.2f}**", f"{lat['p999']:.2f}",
                  f"{lat['max']:.2f}", pct(float(lat['broker_cpu']), float(lat['duration'])),
                  f"{ANCHOR_LATENCY[0]:g} ms / {ANCHOR_LATENCY[1]:g} ms")],
                "rrrrrrrrr"))
        w("")
        w(figure("broker-latency", latency_chart(
            {"1 broker, acks=1": percentiles(lat)},
            title=f"End-to-end latency, one broker, {lat['rate']:g} msg/s")))
        w("")

    if res.profiles:
        w("## Where the broker's time goes (py-spy)\n")
        w("`py-spy record --format raw --nonblocking` attached to the broker while one load "
          "ran (a separate broker and run: the sampler costs CPU on the shared cores, so "
          "these runs are not the measured ones). Frames are `function (file)`; \"self\" is "
          "the innermost Python frame, so time in C code (socket writes, CRC, memcpy) counts "
          "for the Python function that called it. Samples in `select` are the loop "
          "waiting.\n")
        for title, text in res.profiles:
            w(f"### {title}\n")
            w(text)

    notes = []
    if res.topic_creation:
        notes.append(f"Topic creation: {res.topic_creation}.")
    if res.broker_errors:
        uniq = list(dict.fromkeys(e.split("] ", 1)[-1] for e in res.broker_errors))
        notes.append(f"The broker logged {len(res.broker_errors)} ERROR line(s), e.g. "
                     f"`{uniq[0][:300]}`.")
    else:
        notes.append("The broker logged no ERROR lines during the measured runs.")
    argv = sys.argv[1:]
    if "--output" in argv:  # a temp path of run_all.sh's: not worth printing
        i = argv.index("--output")
        del argv[i:i + 2]
    cmd = " ".join(["python bench/bench_broker.py", *argv])
    notes.append(f"Benchmark wall time: {time.monotonic() - res.started:.0f} s (`{cmd}`).")
    w("## Run notes\n")
    w("\n".join(f"- {n}" for n in notes))
    w("")
    return "\n".join(out)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kcat-records", type=int, default=2_000_000,
                    help="records per kcat produce and per consume run (2,000,000)")
    ap.add_argument("--kcat-batch-sizes", default="1000000,16384",
                    help="kcat -P batch.size values (1000000 as in the do-nothing broker's "
                         "reference run; 16384, the Java client's default)")
    ap.add_argument("--py-records", type=int, default=1_000_000,
                    help="records per confluent-kafka produce run (1,000,000)")
    ap.add_argument("--partitions", default="1,6", help="partition counts (1,6)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is kept")
    ap.add_argument("--latency-rate", type=float, default=1000, help="msg/s (1000)")
    ap.add_argument("--latency-seconds", type=float, default=10, help="(10)")
    ap.add_argument("--timeout", type=float, default=300, help="per run, seconds (300)")
    ap.add_argument("--no-physical", action="store_true", help="skip dd and iperf3")
    ap.add_argument("--no-profile", action="store_true", help="skip the py-spy runs")
    ap.add_argument("--profile-loops", type=int, default=3,
                    help="times each load runs under py-spy (3), for enough samples")
    ap.add_argument("--no-latency", action="store_true", help="skip the latency run")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 200k/100k records, 1 run, 3 s latency, no dd/profiles")
    ap.add_argument("--output", help="write the markdown here instead of stdout")
    a = ap.parse_args()
    a.kcat_batch_sizes = [int(x) for x in a.kcat_batch_sizes.split(",")]
    if a.quick:
        a.kcat_records, a.py_records, a.repeat = 200_000, 100_000, 1
        a.latency_seconds, a.no_physical, a.no_profile = 3, True, True
    if not shutil.which("kcat"):
        sys.exit("kcat is not installed (apt-get install -y kcat)")

    res = Results(facts=machine_facts())
    progress(f"machine: {res.facts['cpu model']}, {res.facts['cpus']} CPUs")
    with tempfile.TemporaryDirectory(prefix="odradek-bench-records-") as tmp:
        records_file = Path(tmp) / "records.txt"
        progress(f"writing {a.kcat_records:,} 100-byte lines for kcat")
        write_records_file(records_file, a.kcat_records)
        if not a.no_physical:
            bench_physical(res)
        for p in (int(x) for x in a.partitions.split(",")):
            bench_partitions(res, p, a, records_file)
        if not a.no_latency:
            bench_latency(res, a)
        if not a.no_profile:
            bench_profiles(res, a, records_file)
    text = render(res, a)
    if a.output:
        Path(a.output).write_text(text)
        progress(f"wrote {a.output}")
    else:
        print(text)
    progress("done")


if __name__ == "__main__":
    main()
