"""`odradek console-consumer` (S-6.7): Kafka's kafka-console-consumer on odradek's client.

  --bootstrap-server HOST:PORT   --topic T | --include REGEX (--whitelist)
  --from-beginning               start at the earliest offset when there is no committed one
  --group G                      consume as a member of group G (offsets committed), else the
                                 topic's partitions are assigned directly, nothing committed
  --partition P [--offset earliest|latest|N]   one partition, from that offset
  --max-messages N  --timeout-ms MS (exit when no record arrives for that long)
  --property print.key=true print.value print.timestamp print.partition print.offset
             print.headers key.separator line.separator headers.separator null.literal
  --consumer-property KEY=VALUE, --consumer.config FILE, --isolation-level
  --skip-message-on-error

Records are written to stdout as Kafka's DefaultMessageFormatter writes them (fields in the
order timestamp, partition, offset, headers, key, value, separated by key.separator); "Processed
a total of N messages" goes to stderr at exit.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import time
from typing import Any, BinaryIO

from .command import Subcommands, ToolError, prefixed, read_properties_file, run_tool
from .console_producer import property_args, unescape


class Formatter:
    """Kafka's DefaultMessageFormatter."""

    def __init__(self, props: dict[str, str]) -> None:
        def flag(name: str, default: bool) -> bool:
            v = props.get(name)
            return default if v is None else v.strip().lower() == "true"
        self.print_timestamp = flag("print.timestamp", False)
        self.print_key = flag("print.key", False)
        self.print_value = flag("print.value", True)
        self.print_partition = flag("print.partition", False)
        self.print_offset = flag("print.offset", False)
        self.print_headers = flag("print.headers", False)
        self.key_sep = unescape(props.get("key.separator", "\t")).encode()
        self.line_sep = unescape(props.get("line.separator", "\n")).encode()
        self.headers_sep = unescape(props.get("headers.separator", ",")).encode()
        self.null_literal = props.get("null.literal", "null").encode()

    def format(self, r: Any) -> bytes:
        out = bytearray()
        fields: list[bytes] = []
        if self.print_timestamp:
            fields.append(f"{r.timestamp_type_name}:{r.timestamp}".encode()
                          if r.timestamp >= 0 else b"NO_TIMESTAMP")
        if self.print_partition:
            fields.append(f"Partition:{r.partition}".encode())
        if self.print_offset:
            fields.append(f"Offset:{r.offset}".encode())
        if self.print_headers:
            if r.headers:
                fields.append(self.headers_sep.join(
                    k.encode() + b":" + (self.null_literal if v is None else v)
                    for k, v in r.headers))
            else:
                fields.append(b"NO_HEADERS")
        if self.print_key:
            fields.append(self.null_literal if r.key is None else r.key)
        if self.print_value:
            fields.append(self.null_literal if r.value is None else r.value)
        out += self.key_sep.join(fields)
        if self.print_value or fields:
            out += self.line_sep
        return bytes(out)


def consumer_config(args: argparse.Namespace) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": "console-consumer",
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "isolation.level": args.isolation_level,
        "allow.auto.create.topics": False,
    }
    if args.group:
        cfg["group.id"] = args.group
    if args.consumer_config:
        cfg.update(read_properties_file(args.consumer_config))
    cfg.update(property_args(args.consumer_property, "--consumer-property"))
    return cfg


def check_args(args: argparse.Namespace) -> None:
    def usage(message: str) -> ToolError:
        return ToolError(message, exit_code=2)
    if not args.bootstrap_server:
        raise usage("--bootstrap-server is required")
    if bool(args.topic) == bool(args.include):
        raise usage("exactly one of --topic and --include is required")
    if args.offset is not None and args.partition is None:
        raise usage("--offset needs --partition")
    if args.offset is not None and args.from_beginning:
        raise usage("--offset and --from-beginning are exclusive")
    if args.partition is not None and args.group:
        raise usage("--partition and --group are exclusive")


def run(args: argparse.Namespace, stdout: BinaryIO | None = None) -> int:
    return run_tool(lambda: consume(args, stdout), refused=prefixed("console-consumer"))


def consume(args: argparse.Namespace, stdout: BinaryIO | None = None) -> int:
    from ..client import Consumer, TopicPartition
    from ..client.errors import KafkaError

    out = stdout if stdout is not None else sys.stdout.buffer
    check_args(args)
    formatter = Formatter(property_args(args.property, "--property"))
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)

    consumer = Consumer(consumer_config(args))
    count = 0
    status = 0
    try:
        if args.include:
            pattern = re.compile(args.include)
            topics = [t for t in consumer.list_topics() if pattern.fullmatch(t)
                      and not t.startswith("__")]
        else:
            topics = [args.topic]
        if args.partition is not None:
            tp = TopicPartition(args.topic or topics[0], args.partition)
            consumer.assign([tp])
            where = (args.offset or "latest").lower()
            if where == "earliest":
                consumer.seek_to_beginning(tp)
            elif where == "latest":
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, int(where))
        elif args.group:
            consumer.subscribe(topics)
        else:
            consumer.assign([TopicPartition(t, p) for t in topics
                             for p in consumer.partitions_for_topic(t)])
        last = time.monotonic()
        while not stop:
            try:
                # Never take more than will be printed: what poll() returns counts as
                # consumed, and is committed on close.
                left = None if args.max_messages is None else args.max_messages - count
                records = consumer.poll(0.2, max_records=left)
            except KafkaError as exc:
                if args.skip_message_on_error and exc.retriable:
                    continue
                print(f"[ERROR] Error processing message, terminating consumer process: {exc}",
                      file=sys.stderr, flush=True)
                status = 1
                break
            if records:
                last = time.monotonic()
            for r in records:
                out.write(formatter.format(r))
                count += 1
                if args.max_messages is not None and count >= args.max_messages:
                    stop = True
                    break
            out.flush()
            if args.timeout_ms is not None and (time.monotonic() - last) * 1000 > args.timeout_ms:
                print("[ERROR] Error processing message, terminating consumer process: "
                      f"no record for {args.timeout_ms} ms (TimeoutException)",
                      file=sys.stderr, flush=True)
                break
    finally:
        consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr, flush=True)
    return status


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("console-consumer",
                       help="print records of a topic to stdout (kafka-console-consumer)")
    p.add_argument("--bootstrap-server", help="HOST:PORT[,HOST:PORT...] to connect to")
    p.add_argument("--topic")
    p.add_argument("--include", "--whitelist", dest="include", metavar="REGEX",
                   help="consume every topic whose whole name matches REGEX")
    p.add_argument("--group", help="the consumer group id")
    p.add_argument("--from-beginning", action="store_true",
                   help="start with the earliest record when no offset is committed")
    p.add_argument("--partition", type=int)
    p.add_argument("--offset", help="earliest, latest or an offset (with --partition)")
    p.add_argument("--max-messages", type=int)
    p.add_argument("--timeout-ms", type=int, help="exit when no record came for this long")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="formatter properties: print.key, print.value, print.timestamp, "
                        "print.partition, print.offset, print.headers, key.separator, "
                        "line.separator, headers.separator, null.literal")
    p.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--consumer.config", "--command-config", dest="consumer_config",
                   metavar="FILE", help="consumer properties (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--isolation-level", default="read_uncommitted",
                   choices=["read_uncommitted", "read_committed"])
    p.add_argument("--skip-message-on-error", action="store_true")
    p.set_defaults(func=run)
