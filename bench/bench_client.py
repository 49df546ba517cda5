#!/usr/bin/env python3
"""Client throughput (S-7): records per second through odradek's own client (`odradek.client`)
against confluent-kafka (librdkafka), each client alone in its own process, against one
`odradek broker` process (bench/common.py), 100-byte values, a topic of `--partitions` (1).

Producers (`--records`, 500,000, each run; acks=1, linger.ms=5, every client's other defaults,
so odradek's batch.size is Kafka's 16384 where librdkafka's is 1,000,000; the time runs from the
first send to the end of flush()):

(a) confluent-kafka: `bench_broker.py worker produce`, the produce() loop (poll on BufferError);
(b) odradek `Producer.send(topic, value)` in a loop, the handles dropped, then flush();
(c) the same with an `on_delivery` callback per record (counting deliveries);
(d) odradek `AsyncProducer`: `await send(topic, value)` in a loop, then `await flush()`;
(b') with `--baseline-rev REV`: (b) again on the odradek of git revision REV (its src/ exported
    by `git archive` to a temporary directory put first on PYTHONPATH), for a before/after.

Consumers (`--records` records produced beforehand by kcat -P): (e) confluent-kafka Consumer,
assign() from the beginning, consume() until N (librdkafka's defaults, and its big prefetch
queue of bench_broker.py); (f) odradek Consumer, assign(), seek_to_beginning(), poll() until N.

Each figure is the best of `--repeat` (3) runs, every run listed; record counts are checked (the
topic's high watermark grows by N per producer run). The broker's CPU share comes from /proc.
The markdown section goes between `<!-- client:begin -->` and `<!-- client:end -->`;
`--update-doc docs/performance.md` replaces it there (or appends it)::

    python bench/bench_client.py                                  # markdown on stdout
    python bench/bench_client.py --update-doc docs/performance.md
    python bench/bench_client.py --records 100000 --repeat 1      # a smoke test
    python bench/bench_client.py --baseline-rev b3d09f3 --update-doc docs/performance.md
    python bench/bench_client.py --splice F.md --update-doc docs/performance.md  # no run

Internal: `python bench/bench_client.py worker KIND ...` runs one odradek client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    BrokerProcess,
    add_section_options,
    cpu_seconds,
    ensure_topic,
    fmt_int,
    machine_facts,
    progress,
    python_worker,
    run_section,
    run_timed,
    table,
    topic_record_count,
)
from plots import bar_chart, img_dir, write_svg

SCRIPT = Path(__file__).resolve()
BENCH_BROKER = SCRIPT.parent / "bench_broker.py"
RECORD_SIZE = 100
MB = 2**20  # MiB, as the other sections
BEGIN, END = "<!-- client:begin -->", "<!-- client:end -->"
BIG_QUEUE = ("queued.min.messages=10000000", "queued.max.messages.kbytes=2097151")
PRODUCER_CONF = {"acks": "1", "linger.ms": 5}


# -- the odradek workers, each in its own process -----------------------------------------------
def _report(records: int, seconds: float, **extra: object) -> None:
    print(json.dumps({"records": records, "seconds": seconds, **extra}), flush=True)


def worker_sync(a: argparse.Namespace, callback: bool) -> None:
    from odradek.client import KafkaError, Producer, RecordMetadata

    p = Producer({"bootstrap.servers": a.bootstrap, **PRODUCER_CONF})
    p.partitions_for(a.topic)  # connect and learn the partitions before timing
    value = b"x" * RECORD_SIZE
    counts = {"ok": 0, "failed": 0}

    def on_delivery(err: KafkaError | None, md: RecordMetadata | None) -> None:
        counts["ok" if err is None else "failed"] += 1

    send, topic = p.send, a.topic
    t0 = time.perf_counter()
    if callback:
        for _ in range(a.records):
            send(topic, value, on_delivery=on_delivery)
    else:
        for _ in range(a.records):
            send(topic, value)
    left = p.flush(a.timeout)
    seconds = time.perf_counter() - t0
    p.close()
    if callback and counts["ok"] != a.records:
        raise SystemExit(f"{counts} delivery callbacks for {a.records} records")
    _report(a.records - left, seconds, unflushed=left)


def worker_async(a: argparse.Namespace) -> None:
    from odradek.client import AsyncProducer

    async def run() -> tuple[int, float]:
        async with AsyncProducer({"bootstrap.servers": a.bootstrap, **PRODUCER_CONF}) as p:
            await p.partitions_for(a.topic)
            value = b"x" * RECORD_SIZE
            send, topic = p.send, a.topic
            t0 = time.perf_counter()
            for _ in range(a.records):
                await send(topic, value)
            left = await p.flush(a.timeout)
            return left, time.perf_counter() - t0

    left, seconds = asyncio.run(run())
    _report(a.records - left, seconds, unflushed=left)


def worker_consume(a: argparse.Namespace) -> None:
    from odradek.client import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": a.bootstrap, "enable.auto.commit": False,
                  "max.poll.records": 10_000})
    tps = [TopicPartition(a.topic, p) for p in c.partitions_for_topic(a.topic)]
    t0 = time.perf_counter()
    c.assign(tps)
    c.seek_to_beginning(*tps)
    n = nbytes = 0
    deadline = time.monotonic() + a.timeout
    while n < a.records and time.monotonic() < deadline:
        for r in c.poll(1.0):
            n += 1
            nbytes += len(r.value or b"")
    seconds = time.perf_counter() - t0
    c.close(autocommit=False)
    _report(n, seconds, bytes=nbytes)


WORKERS = ("sync-send", "sync-send-callback", "async-send", "consume")


def worker_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="bench_client.py worker")
    ap.add_argument("kind", choices=WORKERS)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=300.0)
    a = ap.parse_args(argv)
    if a.kind == "sync-send":
        worker_sync(a, callback=False)
    elif a.kind == "sync-send-callback":
        worker_sync(a, callback=True)
    elif a.kind == "async-send":
        worker_async(a)
    else:
        worker_consume(a)


# -- measurements ------------------------------------------------------------------------------
@dataclass
class Run:
    client: str
    records: int
    seconds: float
    broker_cpu: float
    client_cpu: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds


@dataclass
class Results:
    facts: dict[str, str] = field(default_factory=dict)
    fill: str = ""
    runs: dict[str, list[Run]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def best(self, client: str) -> Run:
        return min(self.runs[client], key=lambda r: r.seconds)


def run_worker(broker: BrokerProcess, client: str, cmd: list[str], n: int, timeout: float,
               check: Callable[[], None] | None = None,
               env: dict[str, str] | None = None) -> Run:
    cpu0 = cpu_seconds(broker.pid)
    timed = run_timed(cmd, timeout=timeout + 30, env=env)
    broker_cpu = cpu_seconds(broker.pid) - cpu0
    if timed.returncode != 0:
        raise RuntimeError(f"{client} failed ({timed.returncode}): {timed.stderr[-800:]}")
    out = json.loads(timed.stdout.strip().splitlines()[-1])
    if int(out["records"]) != n or out.get("error_count"):
        raise RuntimeError(f"{client}: {out}, expected {n:,} records")
    if "bytes" in out and int(out["bytes"]) != n * RECORD_SIZE:
        raise RuntimeError(f"{client} read {out['bytes']:,} value bytes, expected "
                           f"{n * RECORD_SIZE:,}")
    if check is not None:
        check()
    run = Run(client, n, float(out["seconds"]), broker_cpu, timed.cpu)
    progress(f"  {client}: {run.seconds:.2f} s, {fmt_int(run.rate)} rec/s "
             f"(client CPU {timed.cpu:.1f} s, broker CPU {broker_cpu:.1f} s)")
    return run


CONFLUENT_P = "confluent-kafka `produce()` loop"
SYNC = "odradek `Producer.send()` loop"
SYNC_CB = "odradek `Producer.send(on_delivery=...)` loop"
ASYNC = "odradek `await AsyncProducer.send()` loop"
CONFLUENT_C = "confluent-kafka Consumer, assign()"
CONFLUENT_C_BIG = "confluent-kafka Consumer, assign(), big prefetch queue"
ODRADEK_C = "odradek Consumer, assign()"
PRODUCERS = (CONFLUENT_P, SYNC, SYNC_CB, ASYNC)


def baseline_name(rev: str) -> str:
    return f"odradek `Producer.send()` loop, git {rev} (before)"


def export_src(rev: str, into: Path) -> Path:
    """src/ of git revision `rev` in `into` (read-only git commands: archive)."""
    archive = subprocess.run(["git", "-C", str(SCRIPT.parent.parent), "archive", rev, "src"],
                             capture_output=True, timeout=60)
    if archive.returncode != 0:
        raise SystemExit(f"git archive {rev} failed: {archive.stderr.decode()[-300:]}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True,
                   timeout=60)
    return into / "src"
CONSUMERS = (CONFLUENT_C, CONFLUENT_C_BIG, ODRADEK_C)


def fill_topic(broker: BrokerProcess, topic: str, n: int, timeout: float) -> str:
    tmp = Path(tempfile.mkdtemp(prefix="odradek-bench-client-"))
    try:
        path = tmp / "records.txt"
        pad = "x" * (RECORD_SIZE - 10)
        with open(path, "w") as f:
            for start in range(0, n, 100_000):
                f.write("".join(f"{i:010d}{pad}\n" for i in range(start, min(n, start + 100_000))))
        timed = run_timed(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-X", "linger.ms=5",
                           "-X", "batch.size=1000000", "-X", "acks=1"],
                          timeout=timeout, stdin_path=str(path))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if timed.returncode != 0:
        raise RuntimeError(f"kcat -P failed ({timed.returncode}): {timed.stderr[-500:]}")
    held = topic_record_count(broker.bootstrap, topic)
    if held != n:
        raise RuntimeError(f"the topic holds {held:,} records, {n:,} were produced")
    return f"kcat -P: {n:,} records in {timed.wall:.1f} s ({fmt_int(n / timed.wall)} rec/s)"


def run_bench(a: argparse.Namespace) -> Results:
    res = Results(facts=machine_facts())
    n = a.records
    with BrokerProcess(overrides={"num.partitions": str(a.partitions)}) as broker:
        progress(f"broker {broker.pid} at {broker.bootstrap}")
        ptopic, ctopic = "client-produce", "client-consume"
        ensure_topic(broker.bootstrap, ptopic, a.partitions)
        ensure_topic(broker.bootstrap, ctopic, a.partitions)
        held = [0]

        def grew_by_n() -> None:
            now = topic_record_count(broker.bootstrap, ptopic)
            if now - held[0] != n:
                raise RuntimeError(f"{ptopic} grew by {now - held[0]:,} records, expected {n:,}")
            held[0] = now

        common = ["--bootstrap", broker.bootstrap, "--records", str(n),
                  "--timeout", str(a.timeout)]
        commands = {
            CONFLUENT_P: python_worker(BENCH_BROKER, "worker", "produce", "--topic", ptopic,
                                       "--acks", "1", "--linger-ms", "5", *common),
            SYNC: python_worker(SCRIPT, "worker", "sync-send", "--topic", ptopic, *common),
            SYNC_CB: python_worker(SCRIPT, "worker", "sync-send-callback", "--topic", ptopic,
                                   *common),
            ASYNC: python_worker(SCRIPT, "worker", "async-send", "--topic", ptopic, *common),
            CONFLUENT_C: python_worker(BENCH_BROKER, "worker", "consume", "--topic", ctopic,
                                       *common),
            CONFLUENT_C_BIG: python_worker(BENCH_BROKER, "worker", "consume", "--topic", ctopic,
                                           *common, *(x for kv in BIG_QUEUE
                                                      for x in ("--conf", kv))),
            ODRADEK_C: python_worker(SCRIPT, "worker", "consume", "--topic", ctopic, *common),
        }
        for client in PRODUCERS:
            progress(f"{client}: {a.repeat} run(s) of {n:,} records")
            res.runs[client] = [run_worker(broker, client, commands[client], n, a.timeout,
                                           grew_by_n) for _ in range(a.repeat)]
        if a.baseline_rev:
            tmp = Path(tempfile.mkdtemp(prefix="odradek-bench-baseline-"))
            try:
                env = {**os.environ, "PYTHONPATH": str(export_src(a.baseline_rev, tmp))}
                client = baseline_name(a.baseline_rev)
                progress(f"{client}: {a.repeat} run(s) of {n:,} records")
                res.runs[client] = [run_worker(broker, client, commands[SYNC], n, a.timeout,
                                               grew_by_n, env) for _ in range(a.repeat)]
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        progress(f"filling {ctopic} with kcat")
        res.fill = fill_topic(broker, ctopic, n, a.timeout)
        progress(res.fill)
        for client in CONSUMERS:
            progress(f"{client}: {a.repeat} run(s)")
            res.runs[client] = [run_worker(broker, client, commands[client], n, a.timeout)
                                for _ in range(a.repeat)]
        errors = broker.errors_logged()
        if errors:
            progress(f"the broker logged {len(errors)} ERROR lines, e.g. {errors[0]}")
    res.facts["load average at the end"] = " ".join(
        Path("/proc/loadavg").read_text().split()[:3])
    return res


# -- the section -------------------------------------------------------------------------------
def best_per_cpu(res: Results, client: str) -> float:
    return max(r.records / r.client_cpu for r in res.runs[client] if r.client_cpu > 0)


def _rows(res: Results, clients: tuple[str, ...], ref: str) -> list[list[str]]:
    rows = []
    base = res.best(ref).rate
    for c in clients:
        b = res.best(c)
        per_cpu = best_per_cpu(res, c)
        rows.append([c, fmt_int(b.rate), f"{b.rate * RECORD_SIZE / MB:.1f}", f"{b.seconds:.2f}",
                     f"{b.client_cpu:.1f}", fmt_int(per_cpu),
                     f"{100 * b.broker_cpu / b.seconds:.0f}%", f"{b.rate / base:.2f}",
                     ", ".join(f"{r.seconds:.2f}" for r in res.runs[c])])
    return rows


CHART = "client-produce"


def produce_figure(res: Results, producers: tuple[str, ...]) -> str:
    """docs/img/client-produce.svg: records/s and records per client CPU second by producer;
    returns its markdown image line."""
    groups = {c.replace("`", "").replace(" loop", ""): {
        "records/s (best run)": res.best(c).rate,
        "records per client CPU second": best_per_cpu(res, c)} for c in producers}
    write_svg(img_dir() / f"{CHART}.svg",
              bar_chart(groups, title="Producing 100-byte records, one broker, acks=1",
                        y_label="records", width=1100))
    return (f"![Producers: records/s and records per client CPU second, odradek against "
            f"confluent-kafka (bar chart)](img/{CHART}.svg)")


def render(res: Results, a: argparse.Namespace) -> str:
    lines: list[str] = []
    w = lines.append
    header = ["client", "records/s", "MB/s", "s (best)", "client CPU s",
              "records per client CPU s (best)", "broker CPU", "÷ confluent", "runs (s)"]
    producers = PRODUCERS + ((baseline_name(a.baseline_rev),) if a.baseline_rev else ())
    w(BEGIN)
    w("## Client (bench/bench_client.py)")
    w("")
    w(f"`python bench/bench_client.py --records {a.records} --partitions {a.partitions} "
      f"--repeat {a.repeat}`: {a.records:,} records of {RECORD_SIZE}-byte values per run, one "
      f"`odradek broker` process, a topic of {a.partitions} partition(s); each client alone in "
      "its own process. Best of the runs (all runs in the last column); record counts checked "
      "(the topic grows by exactly N per producer run, consumers read N records and N x 100 "
      "value bytes). MB/s = 100-byte values, MiB. Client CPU: the client process's user+system "
      "time for the whole run (interpreter start-up and imports included, all threads); "
      "records per client CPU second is the figure least moved by other work on the shared "
      "machine; broker CPU: the broker's share of one core during the run.")
    w("")
    w("### Producers: acks=1, linger.ms=5, each client's other defaults")
    w("")
    w(table(header, _rows(res, producers, CONFLUENT_P), "lrrrrrrrr"))
    w("")
    sync, asy, conf = (res.best(SYNC).rate, res.best(ASYNC).rate, res.best(CONFLUENT_P).rate)
    before = ""
    if a.baseline_rev:
        old = baseline_name(a.baseline_rev)
        before = (f" The row at git {a.baseline_rev} is the design before (a concurrent.futures."
                  "Future and its lock per record, the stock record encoder): "
                  f"{sync / res.best(old).rate:.1f}x fewer records/s, "
                  f"{best_per_cpu(res, SYNC) / best_per_cpu(res, old):.1f}x fewer per CPU "
                  "second.")
    w(f"odradek's synchronous `Producer.send` runs at {fmt_int(sync)} records/s, "
      f"{sync / asy:.2f}x its `AsyncProducer` ({fmt_int(asy)}) and {conf / sync:.1f}x slower "
      f"than librdkafka's produce() loop ({fmt_int(conf)}), which does its batching in C "
      "threads. `send` serializes and sizes the record on the caller's thread and appends it "
      "to a queue; the producer's loop thread is woken once per run of sends (not per record) "
      "and moves the queue into the per-partition batches; the record's result is a small "
      "`DeliveryHandle` completed by the loop thread (no concurrent.futures.Future with its "
      "own lock per record), and the record is encoded into its batch with table-driven "
      "varints." + before
      + " Every record costs Python "
      "bytecode twice: on the caller's thread (send) and on the loop thread (encoding it into "
      "its batch, completing its handle); the two threads share one interpreter lock, so the "
      "synchronous face gains nothing from the second core, and every hand-over of that lock "
      "waits for the OS to run the other thread, which takes longer the busier the machine "
      "is. Per client CPU second it does "
      f"{best_per_cpu(res, SYNC) / best_per_cpu(res, ASYNC):.2f}x the asyncio producer's work. "
      "Python clients pay for that per-record work where librdkafka does not; the broker is "
      "not the bottleneck (its CPU column).")
    w("")
    w(produce_figure(res, producers))
    w("")
    w("### Consumers: assign() from the beginning until N records")
    w("")
    w(f"Setup: {res.fill}.")
    w("")
    w(table(header, _rows(res, CONSUMERS, CONFLUENT_C), "lrrrrrrrr"))
    w("")
    w("librdkafka's defaults pause fetching while 100,000 records wait in its local queue "
      "(see \"Consume throughput\" above); with the big prefetch queue it fetches ahead. "
      "odradek's Consumer decodes every record into a `ConsumerRecord` object in Python.")
    w("")
    w(table(["machine", ""], [[k, v] for k, v in res.facts.items()]))
    w(END)
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=500_000, help="records per run (500,000)")
    ap.add_argument("--partitions", type=int, default=1, help="topic partitions (1)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per client; the best is kept")
    ap.add_argument("--timeout", type=float, default=300.0, help="per run, seconds (300)")
    ap.add_argument("--baseline-rev", metavar="REV",
                    help="also run the sync producer of this git revision (before/after)")
    add_section_options(ap, "client")
    a = ap.parse_args()
    if a.splice and not a.update_doc:
        ap.error("--splice needs --update-doc")
    if a.splice:
        run_section(a, "Client", run_bench, render, BEGIN, END)
        return
    if a.records < 1 or a.partitions < 1 or a.repeat < 1:
        ap.error("--records, --partitions and --repeat must be at least 1")
    if not shutil.which("kcat"):
        sys.exit("kcat is not installed (apt-get install -y kcat)")
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        sys.exit("confluent-kafka is not installed (pip install confluent-kafka)")
    run_section(a, "Client", run_bench, render, BEGIN, END)


if __name__ == "__main__":
    main()
