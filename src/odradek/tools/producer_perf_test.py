"""`odradek producer-perf-test`: Kafka's kafka-producer-perf-test (ProducerPerformance).

  --topic T --num-records N (--record-size S | --payload-file F [--payload-delimiter D])
  --throughput R (records/s; -1: no throttling)
  --producer-props k=v ... and/or --producer.config FILE   (one is required; bootstrap.servers
                                                             goes in one of them)
  [--print-metrics] [--transactional-id ID --transaction-duration-ms MS]
  [--client odradek|confluent-kafka]   (not Kafka's: which producer drives the test)

Sends N records of S bytes (random capital letters; with --payload-file, a random one of the
file's payloads, split on the delimiter), measures each record's latency from send to its
delivery callback, and prints Kafka's lines: every 5 s while sending

  N records sent, X records/sec (Y MB/sec), Z ms avg latency, W ms max latency.

and at the end, with the latency percentiles (of up to 500,000 sampled records, as Kafka)

  N records sent, X records/sec (Y MB/sec), Z ms avg latency, W ms max latency, A ms 50th,
  B ms 95th, C ms 99th, D ms 99.9th.

With --transaction-duration-ms > 0 the records are sent in transactions committed after that
long. --print-metrics prints the test's own counters in Kafka's "Metric Name  Value" table.

The producer is odradek's own client by default; ``--client confluent-kafka`` uses librdkafka
(much faster per record in Python, when the confluent-kafka package is installed: it is not a
dependency of odradek). Delivery errors are printed on stderr and counted as sent records with
their latency, as Kafka's tool does; the exit status is 0 unless the command line or the
producer's setup is refused."""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .command import Subcommands, ToolError, read_properties, run_tool

REPORTING_INTERVAL_MS = 5000
MAX_SAMPLES = 500000
PERCENTILES = (0.5, 0.95, 0.99, 0.999)
MB = 1024.0 * 1024.0


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Stats:
    """Kafka's ProducerPerformance.Stats: totals, a window printed every `interval_ms`, and a
    sample of latencies (every `sampling`-th record) for the percentiles. `record` is called
    from delivery callbacks (any thread); `out` gets each line."""

    def __init__(self, num_records: int, interval_ms: int = REPORTING_INTERVAL_MS,
                 out: Callable[[str], None] = print,
                 clock: Callable[[], int] = _monotonic_ms) -> None:
        self.clock = clock
        self.out = out
        self.start = self.window_start = clock()
        self.sampling = max(1, num_records // max(1, min(num_records, MAX_SAMPLES)))
        self.latencies: list[int] = []
        self.iteration = 0
        self.count = self.bytes = self.total_latency = self.max_latency = 0
        self.window_count = self.window_bytes = 0
        self.window_total_latency = self.window_max_latency = 0
        self.errors = 0
        self.interval_ms = interval_ms
        self.lock = threading.Lock()

    def next_completion(self, size: int) -> Callable[[Any, Any], None]:
        """The delivery callback of the next record sent now (`size` bytes)."""
        iteration, start = self.iteration, self.clock()
        self.iteration += 1

        def done(err: Any, _metadata: Any) -> None:
            if err is not None:
                self.errors += 1
                print(f"Error when sending a record: {err}", file=sys.stderr, flush=True)
            self.record(iteration, self.clock() - start, size)
        return done

    def record(self, iteration: int, latency: int, size: int, now: int | None = None) -> None:
        with self.lock:
            self.count += 1
            self.bytes += size
            self.total_latency += latency
            self.max_latency = max(self.max_latency, latency)
            self.window_count += 1
            self.window_bytes += size
            self.window_total_latency += latency
            self.window_max_latency = max(self.window_max_latency, latency)
            if iteration % self.sampling == 0:
                self.latencies.append(latency)
            now = self.clock() if now is None else now
            if now - self.window_start >= self.interval_ms:
                self.out(self.window_line(now))
                self.window_start = now
                self.window_count = self.window_bytes = 0
                self.window_total_latency = self.window_max_latency = 0

    def window_line(self, now: int) -> str:
        elapsed = max(1, now - self.window_start)
        return (f"{self.window_count} records sent, "
                f"{1000.0 * self.window_count / elapsed:.1f} records/sec "
                f"({1000.0 * self.window_bytes / elapsed / MB:.2f} MB/sec), "
                f"{self.window_total_latency / max(1, self.window_count):.1f} ms avg latency, "
                f"{float(self.window_max_latency):.1f} ms max latency.")

    def total_line(self, now: int | None = None) -> str:
        elapsed = max(1, (self.clock() if now is None else now) - self.start)
        p50, p95, p99, p999 = percentiles(self.latencies, PERCENTILES)
        return (f"{self.count} records sent, {1000.0 * self.count / elapsed:f} records/sec "
                f"({1000.0 * self.bytes / elapsed / MB:.2f} MB/sec), "
                f"{self.total_latency / max(1, self.count):.2f} ms avg latency, "
                f"{float(self.max_latency):.2f} ms max latency, {p50} ms 50th, {p95} ms 95th, "
                f"{p99} ms 99th, {p999} ms 99.9th.")

    def metrics(self, now: int | None = None) -> dict[str, float | int]:
        elapsed_s = max(1, (self.clock() if now is None else now) - self.start) / 1000.0
        return {
            "record-send-total": self.count,
            "record-error-total": self.errors,
            "record-send-rate": self.count / elapsed_s,
            "byte-rate": self.bytes / elapsed_s,
            "record-size-avg": self.bytes / max(1, self.count),
            "record-latency-avg": self.total_latency / max(1, self.count),
            "record-latency-max": self.max_latency,
        }


def percentiles(latencies: list[int], wanted: tuple[float, ...]) -> list[int]:
    """Kafka's: the sorted sample's element at int(p * size) (0 without samples)."""
    ordered = sorted(latencies)
    return [ordered[int(p * len(ordered))] if ordered else 0 for p in wanted]


def metrics_table(group: str, client_id: str, values: dict[str, float | int]) -> list[str]:
    """Kafka's ToolsUtils.printMetrics layout: "group:name:{tags}" padded, " : value"."""
    names = {f"{group}:{name}:{{client-id={client_id}}}": v for name, v in values.items()}
    width = max(len(n) for n in names)
    lines = ["", f"{'Metric Name':<{width}}   Value"]
    for name in sorted(names):
        v = names[name]
        lines.append(f"{name:<{width}} : {v:.3f}" if isinstance(v, float)
                     else f"{name:<{width}} : {v}")
    return lines


def parse_props(items: list[str] | None) -> dict[str, str]:
    """--producer-props k=v ...: Kafka refuses an item that is not exactly one k=v."""
    out = {}
    for item in items or []:
        pieces = item.split("=")
        if len(pieces) != 2:
            raise ToolError(f"Invalid property: {item}")
        out[pieces[0]] = pieces[1]
    return out


def producer_props(args: argparse.Namespace) -> dict[str, str]:
    if args.producer_props is None and args.producer_config is None:
        raise ToolError("Either --producer-props or --producer.config must be specified.")
    props = read_properties(args.producer_config) if args.producer_config else {}
    props.update(parse_props(args.producer_props))
    if args.transaction_duration_ms > 0:
        props["transactional.id"] = args.transactional_id
    return props


def random_payload(size: int, rng: random.Random) -> bytes:
    """`size` random capital letters (Kafka's payload)."""
    return bytes(rng.randrange(26) + 65 for _ in range(size))


def read_payloads(path: str, delimiter: str) -> list[bytes]:
    p = Path(path)
    print(f"Reading payloads from: {p.absolute()}")
    if not p.exists() or p.stat().st_size == 0:
        raise ToolError("File does not exist or empty file provided.")
    sep = "\n" if delimiter == "\\n" else delimiter
    payloads = [s.encode() for s in p.read_text(encoding="utf-8").split(sep)]
    print(f"Number of messages read: {len(payloads)}")
    return payloads


MIN_SLEEP_S = 0.002  # Kafka's ThroughputThrottler.MIN_SLEEP_NS: shorter sleeps are deferred


class Throttler:
    """Kafka's ThroughputThrottler: at most `throughput` records/s on average (-1: no limit;
    0: stop sending); sleeps of less than 2 ms are left to accumulate."""

    def __init__(self, throughput: int, start_ms: int) -> None:
        self.throughput = throughput
        self.start_ms = start_ms

    def delay_s(self, sent: int, now_ms: int) -> float:
        """How long to sleep after `sent` records at `now_ms` (0: none)."""
        if self.throughput < 0:
            return 0.0
        if self.throughput == 0:
            return float("inf")
        due = self.start_ms + 1000.0 * sent / self.throughput
        delay = (due - now_ms) / 1000.0
        return delay if delay >= MIN_SLEEP_S else 0.0


def librdkafka_props(props: dict[str, str]) -> dict[str, str]:
    """A Java client's properties as librdkafka takes them, for ``--client confluent-kafka``:
    ``sasl.jaas.config``'s username and password as ``sasl.username``/``sasl.password``, PEM
    trust and key stores as ``ssl.ca.location``/``ssl.certificate.location`` and
    ``ssl.key.location``, an empty ``ssl.endpoint.identification.algorithm`` as ``none``; the
    other names are passed as they are (librdkafka's own names too)."""
    from ..security.jaas import JaasError, parse_jaas_config

    out = dict(props)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas:
        try:
            options = parse_jaas_config(jaas).options
        except JaasError as exc:
            raise ToolError(f"Invalid sasl.jaas.config: {exc}") from None
        for java, rd in (("username", "sasl.username"), ("password", "sasl.password")):
            if java in options:
                out.setdefault(rd, str(options[java]))
    for store, names in (("truststore", ("ssl.ca.location",)),
                         ("keystore", ("ssl.certificate.location", "ssl.key.location"))):
        kind = out.pop(f"ssl.{store}.type", "PEM").upper()
        location = out.pop(f"ssl.{store}.location", None)
        if location is not None:
            if kind != "PEM":
                raise ToolError(f"--client confluent-kafka reads PEM files only, not "
                                f"ssl.{store}.type={kind}")
            for name in names:
                out.setdefault(name, location)
    if out.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out


class _Client:
    """The producer the test drives: send(topic, value, callback), poll(), flush(), close(),
    and the transaction calls, on odradek's client or confluent-kafka."""

    def __init__(self, kind: str, props: dict[str, str]) -> None:
        self.kind = kind
        self.closed = False
        if kind == "confluent-kafka":
            try:
                from confluent_kafka import Producer as CkProducer
            except ImportError:
                raise ToolError("--client confluent-kafka needs the confluent-kafka package "
                                "(pip install confluent-kafka)") from None
            try:
                self.p: Any = CkProducer(librdkafka_props(props))
            except Exception as exc:
                raise ToolError(f"Invalid producer configuration: {exc}") from None
        else:
            from ..client import Producer

            try:
                self.p = Producer(dict(props))
            except ValueError as exc:
                raise ToolError(f"Invalid producer configuration: {exc}") from None

    def send(self, topic: str, value: bytes, callback: Callable[[Any, Any], None]) -> None:
        if self.kind == "odradek":
            self.p.send(topic, value, on_delivery=callback)
            return
        while True:
            try:
                self.p.produce(topic, value, on_delivery=callback)
                break
            except BufferError:  # librdkafka's queue is full: serve callbacks, then retry
                self.p.poll(0.01)
        self.p.poll(0)

    def wait(self, seconds: float) -> None:
        """Sleep while throttled (confluent-kafka serves its delivery callbacks meanwhile)."""
        if self.kind == "odradek":
            time.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.p.poll(left)  # returns early once it served a callback

    def flush(self) -> None:
        self.p.flush()

    def close(self) -> None:
        """Deliver what is buffered and stop (once)."""
        if self.closed:
            return
        self.closed = True
        if self.kind == "odradek":
            self.p.close()
        else:
            self.p.flush()


def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    if args.num_records < 0:
        raise ToolError("--num-records must not be negative")
    props = producer_props(args)
    payloads = read_payloads(args.payload_file, args.payload_delimiter) \
        if args.payload_file else []
    rng = random.Random(0)
    payload = random_payload(args.record_size, rng) if args.record_size is not None else b""
    client = _Client(args.client, props)
    transactions = args.transaction_duration_ms > 0
    try:
        if transactions:
            client.p.init_transactions()
        stats = Stats(args.num_records, REPORTING_INTERVAL_MS, out)
        throttler = Throttler(args.throughput, stats.start)
        in_txn = 0
        txn_start = 0
        for i in range(args.num_records):
            if transactions and in_txn == 0:
                client.p.begin_transaction()
                txn_start = _monotonic_ms()
            if payloads:
                payload = payloads[rng.randrange(len(payloads))]
            client.send(args.topic, payload, stats.next_completion(len(payload)))
            in_txn += 1
            now = _monotonic_ms()
            if transactions and args.transaction_duration_ms <= now - txn_start:
                client.p.commit_transaction()
                in_txn = 0
            delay = throttler.delay_s(i + 1, now)
            if delay:
                client.wait(delay)
        if transactions and in_txn:
            client.p.commit_transaction()
        if args.print_metrics:
            client.flush()
            out(stats.total_line())
            for line in metrics_table("producer-performance", props.get("client.id", "perf"),
                                      stats.metrics()):
                out(line)
        else:
            client.close()
            out(stats.total_line())
    finally:
        client.close()
    return 0


def main(args: argparse.Namespace) -> int:
    def body() -> int:
        return run(args, lambda line: print(line, flush=True))
    return run_tool(body)


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("producer-perf-test", help="producer throughput and latency "
                                                  "(kafka-producer-perf-test)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topic", required=True, metavar="TOPIC",
                   help="produce messages to this topic")
    p.add_argument("--num-records", required=True, type=int, metavar="NUM-RECORDS",
                   help="number of messages to produce")
    payload = p.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=int, metavar="RECORD-SIZE",
                         help="message size in bytes")
    payload.add_argument("--payload-file", metavar="PAYLOAD-FILE",
                         help="UTF-8 file of payloads, one picked at random per record")
    p.add_argument("--payload-delimiter", default="\\n", metavar="PAYLOAD-DELIMITER",
                   help="delimiter of the payloads in --payload-file (default: new line)")
    p.add_argument("--throughput", required=True, type=int, metavar="THROUGHPUT",
                   help="at most about THROUGHPUT records/sec; -1: no throttling")
    p.add_argument("--producer-props", nargs="+", metavar="PROP-NAME=PROP-VALUE",
                   help="producer configs (bootstrap.servers, acks, linger.ms, ...); they take "
                        "precedence over --producer.config")
    p.add_argument("--producer.config", dest="producer_config", metavar="CONFIG-FILE",
                   help="producer config properties file")
    p.add_argument("--print-metrics", action="store_true",
                   help="print the test's metrics at the end")
    p.add_argument("--transactional-id", default="performance-producer-default-transactional-id",
                   metavar="TRANSACTIONAL-ID",
                   help="the transactional.id when --transaction-duration-ms > 0")
    p.add_argument("--transaction-duration-ms", type=int, default=0,
                   metavar="TRANSACTION-DURATION",
                   help="commit a transaction after this long (> 0 turns transactions on)")
    p.add_argument("--client", choices=["odradek", "confluent-kafka"], default="odradek",
                   help="the producer to drive (not Kafka's option; default odradek's client)")
    p.set_defaults(func=main)
