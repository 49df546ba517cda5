#!/usr/bin/env python3
"""Transactions: what exactly-once costs a confluent-kafka producer against one
`odradek broker` process (bench/common.py), 100-byte values, a topic of `--partitions` (3).

1. Throughput. An idempotent producer (enable.idempotence, acks=all, linger.ms=5) writes
   `--records` (1,000,000) records: the baseline. Transactional producers (the same settings plus
   a transactional.id) write transactions of 10, 100 and 10,000 records: at most `--max-txns`
   (1,000) transactions per run, so the small sizes write fewer records (10 x 1,000 = 10,000).
   Each transaction: begin_transaction(), produce() its records, flush(), commit_transaction();
   init_transactions() and a warm-up record (in a committed transaction for the transactional
   producers) are outside the timing. Each worker runs in its own process; the time
   runs from the first produce() to the last commit. Record counts are checked: the topic's
   high watermark grows by the records plus one transaction marker per partition a transaction
   wrote to, and a read_committed ListOffsets (the last stable offset) equals it at the end.
2. Commit latency: the time of each commit_transaction() after the flush() (EndTxn: the
   coordinator writes PrepareCommit to `__transaction_state` and answers; the markers follow),
   p50/p99/max over every transaction of the best run.
3. LSO lag: while each producer runs, the benchmark process samples partition 0 every 20 ms
   with a 1-byte Fetch (odradek's protocol codec), whose response carries the high watermark
   and the last stable offset of the same instant; HW - LSO in records is how far a
   read_committed consumer trails a read_uncommitted one (it includes the open transaction's
   records, so it grows with the transaction size). At the end of each run ListOffsets with
   read_committed (the LSO) must equal ListOffsets with read_uncommitted (the HW).

Each figure is the best of `--repeat` (3) runs. The markdown section goes between
`<!-- transactions:begin -->` and `<!-- transactions:end -->`, with a bar chart in
docs/img/transactions-throughput.svg::

    python bench/bench_transactions.py                           # markdown on stdout
    python bench/bench_transactions.py --update-doc docs/performance.md
    python bench/bench_transactions.py --quick                   # smoke test, ~1 minute

Internal: `python bench/bench_transactions.py worker ...` runs one producer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
)
from plots import bar_chart, img_dir, write_svg

SCRIPT = Path(__file__).resolve()
RECORD_SIZE = 100
BEGIN, END = "<!-- transactions:begin -->", "<!-- transactions:end -->"
TXN_SIZES = (10, 100, 10_000)
# One broker: the transaction log and the offsets topic get one replica.
BROKER_OVERRIDES = {"transaction.state.log.replication.factor": "1",
                    "transaction.state.log.min.isr": "1",
                    "offsets.topic.replication.factor": "1"}
PRODUCER_CONF = {"enable.idempotence": True, "acks": "all", "linger.ms": 5}
IMAGE = "transactions-throughput"
IMAGE_ALT = "Records/s: idempotent producer against transactions of 10, 100, 10,000 records"


# -- the worker, in its own process ------------------------------------------------------------
def worker(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="bench_transactions.py worker")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--txn-size", type=int, default=0, help="0: idempotent, no transactions")
    ap.add_argument("--timeout", type=float, default=300.0)
    a = ap.parse_args(argv)
    from confluent_kafka import Producer

    conf: dict[str, Any] = {"bootstrap.servers": a.bootstrap, **PRODUCER_CONF}
    if a.txn_size:
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    errors: list[str] = []
    delivered = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            delivered[0] += 1
        else:
            errors.append(str(err))
    conf["on_delivery"] = on_delivery
    p = Producer(conf)
    value = b"x" * RECORD_SIZE
    produce, poll, topic = p.produce, p.poll, a.topic
    # Warm-up outside the timing: connections, the producer id and (transactional) the
    # coordinator, with one record (in one committed transaction).
    if a.txn_size:
        p.init_transactions(60)
        p.begin_transaction()
    produce(topic, value, partition=0)
    if a.txn_size:
        p.commit_transaction(60)
    if p.flush(60) or delivered[0] != 1:
        raise SystemExit(f"the warm-up record was not delivered: {errors}")
    delivered[0] = 0
    commits: list[float] = []
    t0 = time.perf_counter()
    if not a.txn_size:
        for _ in range(a.records):
            while True:
                try:
                    produce(topic, value)
                    break
                except BufferError:
                    poll(0.001)
        left = p.flush(a.timeout)
    else:
        left = 0
        for start in range(0, a.records, a.txn_size):
            p.begin_transaction()
            for _ in range(min(a.txn_size, a.records - start)):
                while True:
                    try:
                        produce(topic, value)
                        break
                    except BufferError:
                        poll(0.001)
            left += p.flush(a.timeout)
            c0 = time.perf_counter()
            p.commit_transaction(a.timeout)
            commits.append(time.perf_counter() - c0)
    seconds = time.perf_counter() - t0
    print(json.dumps({"records": delivered[0], "unflushed": left, "errors": errors[:5],
                      "seconds": seconds, "commits_ms": [c * 1000 for c in commits]}),
          flush=True)


# -- measurements ------------------------------------------------------------------------------
@dataclass
class Run:
    mode: str
    records: int
    txns: int
    seconds: float
    broker_cpu: float
    client_cpu: float
    commits_ms: list[float]
    lag: list[int]  # HW - LSO samples of partition 0

    @property
    def rate(self) -> float:
        return self.records / self.seconds


@dataclass
class Results:
    facts: dict[str, str] = field(default_factory=dict)
    runs: dict[str, list[Run]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def best(self, mode: str) -> Run:
        return min(self.runs[mode], key=lambda r: r.seconds / r.records)


def mode_name(txn_size: int) -> str:
    return "idempotent" if not txn_size else f"transactions of {txn_size:,}"


class LagSampler:
    """HW - LSO of one partition every `interval` seconds in a thread, both read from ONE Fetch
    response (v11, read_uncommitted, at most 1 byte: the partition's high watermark and last
    stable offset side by side, so the two figures are of the same instant; two ListOffsets
    requests would race the producer between them). Sent with odradek's protocol codec on a
    blocking socket."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.02) -> None:
        import socket

        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.topic = topic
        self.interval = interval
        self.samples: list[int] = []
        self.fetch_offset = 0
        self.correlation_id = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _request(self) -> Any:
        import datetime

        import kio.index
        from kio.static.constants import EntityType

        from odradek.protocol.codec import make

        m = kio.index.load_payload_module(1, 11, EntityType.request)
        p = make(m.FetchPartition, partition=0, current_leader_epoch=-1,
                 fetch_offset=self.fetch_offset, log_start_offset=-1, partition_max_bytes=1)
        return make(m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0,
                    max_bytes=1, isolation_level=0, session_id=0, session_epoch=-1,
                    topics=(make(m.FetchTopic, topic=self.topic, partitions=(p,)),),
                    forgotten_topics_data=(), rack_id="")

    def offsets(self) -> tuple[int, int]:
        """(LSO, HW) of partition 0 from one Fetch response."""
        import struct

        from odradek.protocol.codec import decode_response, encode_request, response_class

        request = self._request()
        self.correlation_id += 1
        self.sock.sendall(encode_request(request, self.correlation_id, "bench-lso"))
        size = struct.unpack(">i", self._read(4))[0]
        _cid, response = decode_response(response_class(type(request)), self._read(size))
        part = response.responses[0].partitions[0]
        if part.error_code != 0:
            raise RuntimeError(f"Fetch for the LSO sample: error {part.error_code}")
        # The next fetch from near the end: the 1-byte answer stays one batch at most.
        self.fetch_offset = max(self.fetch_offset, part.last_stable_offset)
        return part.last_stable_offset, part.high_watermark

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the sampling connection")
            data += chunk
        return data

    def _run(self) -> None:
        while not self._stop.is_set():
            lso, hw = self.offsets()
            self.samples.append(hw - lso)
            self._stop.wait(self.interval)

    def __enter__(self) -> LagSampler:
        self.offsets()  # connected before the run starts
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends",
                  "isolation.level": isolation, "log_level": 0})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    finally:
        c.close()


def one_run(broker: BrokerProcess, a: argparse.Namespace, txn_size: int, i: int) -> Run:
    topic = f"txn-bench-{txn_size}-{i}-{uuid.uuid4().hex[:6]}"
    ensure_topic(broker.bootstrap, topic, a.partitions)
    records = a.records if not txn_size else min(a.records, txn_size * a.max_txns)
    txns = 0 if not txn_size else -(-records // txn_size)
    cmd = python_worker(SCRIPT, "worker", "--bootstrap", broker.bootstrap, "--topic", topic,
                        "--records", str(records), "--txn-size", str(txn_size))
    cpu0 = cpu_seconds(broker.pid)
    with LagSampler(broker.bootstrap, topic) as sampler:
        timed = run_timed(cmd, timeout=a.timeout + 60)
    broker_cpu = cpu_seconds(broker.pid) - cpu0
    name = mode_name(txn_size)
    if timed.returncode != 0:
        raise RuntimeError(f"{name} worker failed ({timed.returncode}): {timed.stderr[-800:]}")
    out = json.loads(timed.stdout.strip().splitlines()[-1])
    if out["records"] != records or out["unflushed"] or out["errors"]:
        raise RuntimeError(f"{name}: {out['records']:,} of {records:,} delivered, "
                           f"{out['unflushed']} unflushed, errors {out['errors']}")
    hw = end_offsets(broker.bootstrap, topic, a.partitions, "read_uncommitted")
    lso = end_offsets(broker.bootstrap, topic, a.partitions, "read_committed")
    # The warm-up record (and its transaction's marker), then the records: each transaction
    # leaves one marker in each partition it wrote to (at least one, at most all of them).
    written = records + 1 + (1 if txns else 0)
    if not written + txns <= hw <= written + txns * a.partitions or (not txns and hw != written):
        raise RuntimeError(f"{name}: HW sum {hw:,} for {records:,} records in {txns} "
                           "transactions (+ the warm-up)")
    if lso != hw:
        raise RuntimeError(f"{name}: LSO sum {lso:,} != HW sum {hw:,} after the last commit")
    run = Run(name, records, txns, float(out["seconds"]), broker_cpu, timed.cpu,
              out["commits_ms"], sampler.samples)
    progress(f"  {name}: {records:,} records in {run.seconds:.2f} s, {fmt_int(run.rate)} "
             f"rec/s; markers {hw - written:,}; broker CPU {broker_cpu:.1f} s")
    return run


def run_bench(a: argparse.Namespace) -> Results:
    res = Results(facts=machine_facts())
    with BrokerProcess(overrides=BROKER_OVERRIDES) as broker:
        progress(f"broker {broker.bootstrap}")
        for i in range(a.repeat):
            for size in (0, *TXN_SIZES):
                res.runs.setdefault(mode_name(size), []).append(one_run(broker, a, size, i))
        errors = broker.errors_logged()
        if errors:
            res.facts["broker ERROR lines"] = f"{len(errors)}, e.g. {errors[0][:160]}"
    return res


# -- output ------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def fmt_ms(v: float) -> str:
    return "-" if v != v else f"{v:,.1f}"


def render(res: Results, a: argparse.Namespace) -> str:
    lines: list[str] = []
    w = lines.append
    modes = [mode_name(s) for s in (0, *TXN_SIZES)]
    base = res.best(modes[0]).rate
    w(BEGIN)
    w("## Transactions (bench/bench_transactions.py)")
    w("")
    w(f"`python bench/bench_transactions.py --records {a.records} --max-txns {a.max_txns} "
      f"--partitions {a.partitions} --repeat {a.repeat}`: confluent-kafka producers "
      f"(enable.idempotence, acks=all, linger.ms=5), {RECORD_SIZE}-byte values, one `odradek "
      f"broker` process, a fresh topic of {a.partitions} partitions per run; each producer in its "
      "own process. A transaction is begin_transaction(), its produce() calls, flush(), "
      "commit_transaction(); producer id, connections and coordinator are set up by "
      "init_transactions() and one warm-up record before the timing. With no key, librdkafka's "
      "sticky partitioner keeps a transaction's records on one partition for up to 10 ms, so "
      "small transactions touch one partition (one marker each). Best of the runs (all runs in "
      "the last column). Checked per run: every record delivered, the high watermarks grew by "
      "the records plus one to three markers per transaction, and the LSO equals the HW after "
      "the last commit. Broker CPU: "
      "its user+system seconds per 10,000 records.")
    w("")
    rows = []
    for m in modes:
        r = res.best(m)
        rows.append([m, f"{r.records:,}", f"{r.txns:,}" if r.txns else "-", fmt_int(r.rate),
                     f"{r.rate / base:.3f}", f"{r.broker_cpu / r.records * 10_000:.2f}",
                     ", ".join(f"{x.seconds:.2f}" for x in res.runs[m])])
    w(table(["producer", "records", "transactions", "records/s", "÷ idempotent",
             "broker CPU s / 10k records", "runs (s)"], rows, "lrrrrrl"))
    w("")
    overhead = {m: (1 / res.best(m).rate - 1 / base) * res.best(m).records / res.best(m).txns
                * 1000 for m in modes[1:]}
    w("Each transaction costs a fixed time beyond its records' share of the idempotent "
      "producer's: " + ", ".join(f"{v:.1f} ms ({m})" for m, v in overhead.items())
      + " — AddPartitionsToTxn for each new partition, the flush of its batches (no linger "
      "across transactions), EndTxn and the markers the coordinator then writes, each a round "
      "trip the producer waits for. Small transactions are bound by it; at 10,000 records it "
      "is mostly spread.")
    w("")
    w("### Commit latency: commit_transaction() after flush(), ms, every transaction of the "
      "best run")
    w("")
    rows = []
    for m in modes[1:]:
        c = res.best(m).commits_ms
        rows.append([m, f"{len(c):,}", fmt_ms(pct(c, 0.5)), fmt_ms(pct(c, 0.99)),
                     fmt_ms(max(c) if c else float("nan")),
                     fmt_ms(statistics.fmean(c) if c else float("nan"))])
    w(table(["transactions", "commits", "p50", "p99", "max", "mean"], rows, "lrrrrr"))
    w("")
    w("### LSO lag behind the HW under load: partition 0, HW - LSO in records, sampled every "
      "20 ms from one Fetch response each")
    w("")
    rows = []
    for m in modes:
        lag = [float(x) for x in res.best(m).lag]
        behind = sum(1 for x in lag if x > 0) / len(lag) if lag else 0.0
        rows.append([m, f"{len(lag):,}", f"{behind:.0%}",
                     fmt_int(pct(lag, 0.5)) if lag else "-",
                     fmt_int(pct(lag, 0.99)) if lag else "-", fmt_int(max(lag)) if lag else "-",
                     f"{statistics.fmean(lag):,.1f}" if lag else "-"])
    w(table(["producer", "samples", "samples with LSO < HW", "p50", "p99", "max", "mean"],
            rows, "lrrrrrr"))
    w("")
    w("Without transactions the LSO is the HW (lag 0: nothing is ever pending). With them a "
      "read_committed consumer trails by the open transaction's records on the partition, and "
      "by the records of a committed transaction until its marker is written. With the sticky "
      "partitioner a transaction's records mostly go to one of the three partitions, so "
      "partition 0 is often not in the open transaction at all (the share of samples with LSO "
      "< HW); when it is, the lag is up to one transaction's records.")
    w("")
    w(figure(res, modes))
    w("")
    w(table(["machine", ""], [[k, v] for k, v in res.facts.items()]))
    w(END)
    return "\n".join(lines)


def figure(res: Results, modes: list[str]) -> str:
    groups = {m.replace("transactions of ", "txn of "): {"records/s": res.best(m).rate}
              for m in modes}
    svg = bar_chart(groups, title="confluent-kafka producer, one broker: idempotent against "
                                  "transactional (best run)", y_label="records/s", width=800)
    write_svg(img_dir() / f"{IMAGE}.svg", svg)
    return f"![{IMAGE_ALT}](img/{IMAGE}.svg)"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000,
                    help="records per run (1,000,000)")
    ap.add_argument("--max-txns", type=int, default=1_000,
                    help="transactions per run at most (1,000)")
    ap.add_argument("--partitions", type=int, default=3, help="topic partitions (3)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per producer; best kept (3)")
    ap.add_argument("--timeout", type=float, default=300.0, help="per run, seconds (300)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 40,000 records, 200 transactions, 1 run")
    add_section_options(ap, "transactions")
    a = ap.parse_args()
    if a.quick:
        a.records, a.max_txns, a.repeat = 40_000, 200, 1
    if a.splice and not a.update_doc:
        ap.error("--splice needs --update-doc")
    if a.records < 1 or a.partitions < 1 or a.repeat < 1 or a.max_txns < 1:
        ap.error("--records, --max-txns, --partitions and --repeat must be at least 1")
    run_section(a, "Transactions", run_bench, render, BEGIN, END)


if __name__ == "__main__":
    main()
