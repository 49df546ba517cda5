"""`odradek consumer-perf-test`: Kafka 2.8's kafka-consumer-perf-test (ConsumerPerformance).

  --bootstrap-server HOST:PORT (or the deprecated --broker-list)   --topic T   --messages N
  [--group G (default perf-consumer-<random>)] [--from-latest] [--fetch-size BYTES]
  [--consumer.config FILE] [--timeout MS (10000: the longest wait between records)]
  [--show-detailed-stats --reporting-interval MS (5000)] [--date-format FORMAT] [--hide-header]
  [--print-metrics] [--socket-buffer-size BYTES] [--threads N] [--num-fetch-threads N]

Joins group G for the topic on odradek's consumer and reads until N records have come (or no
record came for --timeout ms: then "WARNING: Exiting before consuming the expected number of
messages: timeout (10000 ms) exceeded. You can use the --timeout option to increase the
timeout."). It prints Kafka's CSV header

  start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
  rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec

and one line of values (MB are MiB of keys plus values; rebalance.time.ms is the time spent
joining the group, fetch.time.ms the rest). With --show-detailed-stats the header starts
"time, threadId, ..." and a line is printed every reporting interval instead (the progress of a
long run), with no summary line. --date-format takes Java's SimpleDateFormat letters (y M d H m
s S, quoted text). --threads and --num-fetch-threads are deprecated and ignored, with Kafka's
warning; --print-metrics prints the test's own counters in Kafka's "Metric Name  Value" table."""

from __future__ import annotations

import argparse
import datetime
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..common.clock import now_ms
from .command import Subcommands, ToolError, read_properties, run_tool
from .producer_perf_test import MB, metrics_table

DEFAULT_DATE_FORMAT = "yyyy-MM-dd HH:mm:ss:SSS"
HEADER_TAIL = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
SUMMARY_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                  "nMsg.sec" + HEADER_TAIL)
DETAILED_HEADER = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec" + HEADER_TAIL)


def header(detailed: bool) -> str:
    return DETAILED_HEADER if detailed else SUMMARY_HEADER


_TOKEN = re.compile(r"'[^']*'|([A-Za-z])\1*")


def java_date(fmt: str, epoch_ms: int) -> str:
    """`epoch_ms` (local time) in a Java SimpleDateFormat pattern: y, M, d, H, m, s, S (and
    quoted text; other letters are kept as they are)."""
    t = datetime.datetime.fromtimestamp(epoch_ms / 1000.0)
    values = {"y": t.year, "M": t.month, "d": t.day, "H": t.hour, "m": t.minute,
              "s": t.second, "S": epoch_ms % 1000}

    def one(m: re.Match[str]) -> str:
        tok = m.group(0)
        if tok.startswith("'"):
            return tok[1:-1] if tok != "''" else "'"
        letter, width = tok[0], len(tok)
        if letter not in values:
            return tok
        v = values[letter]
        if letter == "y" and width == 2:
            v %= 100
        return str(v).zfill(width)
    return _TOKEN.sub(one, fmt)


def ratio(x: float, y: float) -> float:
    """x / y as the JVM divides doubles: Infinity (or NaN for 0 / 0) when y is 0."""
    if y:
        return x / y
    return float("nan") if not x else float("inf") if x > 0 else float("-inf")


def fmt4(v: float) -> str:
    """Java's %.4f (Infinity and NaN spelled as Java does)."""
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    return f"{v:.4f}"


def summary_line(date_format: str, start_ms: int, end_ms: int, nbytes: int, messages: int,
                 join_ms: int) -> str:
    """The values line under the CSV header."""
    elapsed_s = (end_ms - start_ms) / 1000.0
    fetch_ms = end_ms - start_ms - join_ms
    mb = nbytes / MB
    return ", ".join([
        java_date(date_format, start_ms), java_date(date_format, end_ms), fmt4(mb),
        fmt4(ratio(mb, elapsed_s)), str(messages), fmt4(ratio(messages, elapsed_s)),
        str(join_ms), str(fetch_ms), fmt4(ratio(mb, fetch_ms / 1000.0)),
        fmt4(ratio(messages, fetch_ms / 1000.0))])


def progress_line(date_format: str, nbytes: int, last_bytes: int, messages: int,
                  last_messages: int, start_ms: int, end_ms: int, join_ms: int) -> str:
    """A --show-detailed-stats line: the interval from `start_ms` to `end_ms`."""
    elapsed = float(end_ms - start_ms)
    interval_mb = (nbytes - last_bytes) / MB
    fetch_ms = end_ms - start_ms - join_ms
    interval_msgs = messages - last_messages
    fetch_mb_s, fetch_msg_s = ((0.0, 0.0) if fetch_ms <= 0 else
                               (1000.0 * interval_mb / fetch_ms, 1000.0 * interval_msgs / fetch_ms))
    return ", ".join([
        java_date(date_format, end_ms), "0", fmt4(nbytes / MB),
        fmt4(ratio(1000.0 * interval_mb, elapsed)), str(messages),
        fmt4(ratio(interval_msgs, elapsed) * 1000.0), str(join_ms), str(fetch_ms),
        fmt4(fetch_mb_s), fmt4(fetch_msg_s)])


@dataclass
class Progress:
    """What the consume loop counts; `join_ms` is the total time spent (re)joining the group,
    `round_join_ms` that of the current reporting interval."""

    messages: int = 0
    nbytes: int = 0
    join_ms: int = 0
    round_join_ms: int = 0
    join_start: int = field(default_factory=now_ms)

    def assigned(self, _partitions: Any) -> None:
        spent = now_ms() - self.join_start
        self.join_ms += spent
        self.round_join_ms += spent

    def revoked(self, _partitions: Any) -> None:
        self.join_start = now_ms()


def consumer_props(args: argparse.Namespace) -> dict[str, Any]:
    props: dict[str, Any] = read_properties(args.consumer_config) if args.consumer_config else {}
    props.update({
        "bootstrap.servers": args.bootstrap_server or args.broker_list,
        "group.id": args.group,
        "receive.buffer.bytes": str(args.socket_buffer_size),
        "max.partition.fetch.bytes": str(args.fetch_size),
        "auto.offset.reset": "latest" if args.from_latest else "earliest",
        "check.crcs": "false",
    })
    return props


def consume(consumer: Any, args: argparse.Namespace, progress: Progress,
            out: Callable[[str], None]) -> None:
    """Kafka's ConsumerPerformance.consume: poll until --messages records or --timeout ms
    without any; a progress line per reporting interval with --show-detailed-stats."""
    consumer.subscribe([args.topic], on_assign=progress.assigned, on_revoke=progress.revoked)
    now = last_report = last_consumed = now_ms()
    last_bytes = last_messages = 0
    while progress.messages < args.messages and now - last_consumed <= args.timeout:
        records = consumer.poll(0.1)
        now = now_ms()
        if records:
            last_consumed = now
        for r in records:
            progress.messages += 1
            progress.nbytes += (len(r.key) if r.key is not None else 0) + (
                len(r.value) if r.value is not None else 0)
            if now - last_report >= args.reporting_interval:
                if args.show_detailed_stats:
                    out(progress_line(args.date_format, progress.nbytes, last_bytes,
                                      progress.messages, last_messages, last_report, now,
                                      progress.round_join_ms))
                progress.round_join_ms = 0
                last_report, last_messages, last_bytes = now, progress.messages, progress.nbytes
    if progress.messages < args.messages:
        out(f"WARNING: Exiting before consuming the expected number of messages: timeout "
            f"({args.timeout} ms) exceeded. You can use the --timeout option to increase the "
            "timeout.")


def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    from ..client import Consumer

    if not (args.bootstrap_server or args.broker_list):
        raise ToolError('Missing required argument "[bootstrap-server]"')
    if args.messages is None:
        raise ToolError('Missing required argument "[messages]"')
    if args.reporting_interval <= 0:
        raise ToolError("Reporting interval must be greater than 0.")
    if args.threads is not None or args.num_fetch_threads is not None:
        out("WARNING: option [threads] and [num-fetch-threads] have been deprecated and will be "
            "ignored by the test")
    if not args.hide_header:
        out(header(args.show_detailed_stats))
    try:
        consumer = Consumer(consumer_props(args))
    except ValueError as exc:
        raise ToolError(f"Invalid consumer configuration: {exc}") from None
    progress = Progress()
    try:
        start_ms = now_ms()
        progress.join_start = start_ms
        consume(consumer, args, progress, out)
        end_ms = now_ms()
    finally:
        consumer.close()
    if not args.show_detailed_stats:
        out(summary_line(args.date_format, start_ms, end_ms, progress.nbytes, progress.messages,
                         progress.join_ms))
    if args.print_metrics:
        elapsed_s = max(1, end_ms - start_ms) / 1000.0
        for line in metrics_table("consumer-performance", "consumer-perf-test", {
                "records-consumed-total": progress.messages,
                "bytes-consumed-total": progress.nbytes,
                "records-consumed-rate": progress.messages / elapsed_s,
                "bytes-consumed-rate": progress.nbytes / elapsed_s,
                "rebalance-time-total": progress.join_ms}):
            out(line)
    return 0


def main(args: argparse.Namespace) -> int:
    return run_tool(lambda: run(args, lambda line: print(line, flush=True)))


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("consumer-perf-test", help="consumer throughput "
                                                  "(kafka-consumer-perf-test)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="REQUIRED unless --broker-list: the server(s) to connect to")
    p.add_argument("--broker-list", help="DEPRECATED, use --bootstrap-server instead")
    p.add_argument("--topic", required=True, help="REQUIRED: the topic to consume from")
    p.add_argument("--messages", type=int, metavar="COUNT",
                   help="REQUIRED: the number of messages to consume")
    p.add_argument("--group", default=f"perf-consumer-{random.randrange(100000)}",
                   metavar="GID", help="the group id to consume on")
    p.add_argument("--fetch-size", type=int, default=1024 * 1024, metavar="SIZE",
                   help="max.partition.fetch.bytes")
    p.add_argument("--from-latest", action="store_true",
                   help="without a committed offset, start at the latest offset (default: "
                        "the earliest)")
    p.add_argument("--socket-buffer-size", type=int, default=2 * 1024 * 1024, metavar="SIZE")
    p.add_argument("--threads", type=int, help="DEPRECATED AND IGNORED")
    p.add_argument("--num-fetch-threads", type=int, help="DEPRECATED AND IGNORED")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                   help="consumer config properties file")
    p.add_argument("--print-metrics", action="store_true", help="print the test's metrics")
    p.add_argument("--show-detailed-stats", action="store_true",
                   help="a line per reporting interval")
    p.add_argument("--timeout", type=int, default=10000, metavar="MS",
                   help="the longest time allowed between returned records")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="INTERVAL_MS")
    p.add_argument("--date-format", default=DEFAULT_DATE_FORMAT,
                   help="Java SimpleDateFormat of the time fields")
    p.add_argument("--hide-header", action="store_true", help="no header line")
    p.set_defaults(func=main)
