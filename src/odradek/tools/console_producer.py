"""`odradek console-producer` (S-6.7): Kafka's kafka-console-producer on odradek's client.

Reads lines from stdin and sends each as one record. Kafka's flags:

  --bootstrap-server HOST:PORT (or --broker-list)   --topic T (required)
  --property parse.key=true key.separator=<TAB>     key<sep>value lines
             parse.headers=true headers.delimiter=<TAB> headers.separator=, headers.key.separator=:
                                                    h1:v1,h2:v2<TAB>key<TAB>value lines
             null.marker=X                          a key, value or header value equal to X is null
             ignore.error=true                      a line without key separator: null key
  --producer-property KEY=VALUE, --producer.config FILE      any producer config
  --compression-codec [none|gzip|snappy|lz4|zstd]   (gzip when given without a value)
  --request-required-acks ACKS (default -1)  --sync  --batch-size  --timeout (linger.ms, 1000)
  --message-send-max-retries  --retry-backoff-ms  --request-timeout-ms  --max-block-ms
  --max-memory-bytes  --metadata-expiry-ms

Failed deliveries are reported on stderr as Kafka's ErrorLoggingCallback does; the exit status
is 1 when any record was not delivered.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

from .command import Subcommands, ToolError, prefixed, read_properties_file, run_tool

DEFAULTS = {"parse.key": "false", "key.separator": "\t", "parse.headers": "false",
            "headers.delimiter": "\t", "headers.separator": ",", "headers.key.separator": ":",
            "ignore.error": "false", "null.marker": None}


class LineError(ValueError):
    pass


def property_args(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"odradek console-producer: {what} expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out


def unescape(value: str) -> str:
    """Separators given on the command line as \\t or \\n mean the character."""
    return value.encode().decode("unicode_escape") if "\\" in value else value


class LineReader:
    """Kafka's LineMessageReader: a line -> (headers, key, value)."""

    def __init__(self, props: dict[str, str | None]) -> None:
        def flag(name: str) -> bool:
            return str(props.get(name, "false")).strip().lower() == "true"
        self.parse_key = flag("parse.key")
        self.parse_headers = flag("parse.headers")
        self.ignore_error = flag("ignore.error")
        self.key_sep = unescape(str(props.get("key.separator") or "\t"))
        self.headers_delim = unescape(str(props.get("headers.delimiter") or "\t"))
        self.headers_sep = unescape(str(props.get("headers.separator") or ","))
        self.headers_key_sep = unescape(str(props.get("headers.key.separator") or ":"))
        marker = props.get("null.marker")
        self.null_marker = None if marker is None else unescape(marker)
        self.line_number = 0

    def _nullable(self, s: str) -> bytes | None:
        return None if self.null_marker is not None and s == self.null_marker else s.encode()

    def parse(self, line: str) -> tuple[list[tuple[str, bytes | None]], bytes | None,
                                        bytes | None]:
        self.line_number += 1
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, sep, tail = rest.partition(self.headers_delim)
            if not sep:
                if not self.ignore_error:
                    raise LineError(f"No headers delimiter found on line number "
                                    f"{self.line_number}: '{line}'")
            else:
                rest = tail
                for item in head.split(self.headers_sep) if head else []:
                    k, ksep, v = item.partition(self.headers_key_sep)
                    if self.null_marker is not None and k == self.null_marker:
                        raise LineError(f"Header keys should not be equal to the null "
                                        f"marker '{self.null_marker}' as they can't be null")
                    headers.append((k, self._nullable(v) if ksep else None))
        key: bytes | None = None
        if self.parse_key:
            k, sep, v = rest.partition(self.key_sep)
            if not sep:
                if not self.ignore_error:
                    raise LineError(f"No key separator found on line number "
                                    f"{self.line_number}: '{line}'")
                return headers, None, self._nullable(rest)
            return headers, self._nullable(k), self._nullable(v)
        return headers, key, self._nullable(rest)


def producer_config(args: argparse.Namespace) -> dict[str, Any]:
    acks = str(args.request_required_acks)
    cfg: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server or args.broker_list,
        "client.id": "console-producer",
        "acks": "all" if acks in ("-1", "all") else acks,
        "linger.ms": args.timeout,
        "batch.size": args.batch_size,
        "retries": args.message_send_max_retries,
        "retry.backoff.ms": args.retry_backoff_ms,
        "request.timeout.ms": args.request_timeout_ms,
        "max.block.ms": args.max_block_ms,
        "buffer.memory": args.max_memory_bytes,
        "metadata.max.age.ms": args.metadata_expiry_ms,
        "compression.type": args.compression_codec or "none",
    }
    if args.producer_config:
        cfg.update(read_properties_file(args.producer_config))
    cfg.update(property_args(args.producer_property, "--producer-property"))
    return cfg


def run(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    return run_tool(lambda: produce(args, stdin), refused=prefixed("console-producer"))


def produce(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    from ..client import Producer
    from ..client.errors import KafkaError

    if not (args.bootstrap_server or args.broker_list):
        raise ToolError("--bootstrap-server is required", exit_code=2)
    props: dict[str, str | None] = dict(DEFAULTS)
    props.update(property_args(args.property, "--property"))
    reader = LineReader(props)
    failures = 0

    def report(topic: str, key: bytes | None, value: bytes | None
               ) -> Callable[[KafkaError | None, object], None]:
        def cb(err: KafkaError | None, _md: object) -> None:
            nonlocal failures
            if err is not None:
                failures += 1
                print(f"[ERROR] Error when sending message to topic {topic} with key: "
                      f"{'null' if key is None else f'{len(key)} bytes'}, value: "
                      f"{'null' if value is None else f'{len(value)} bytes'} with error: {err}",
                      file=sys.stderr, flush=True)
        return cb

    producer = Producer(producer_config(args))
    source = stdin if stdin is not None else sys.stdin.buffer
    interactive = source.isatty() if hasattr(source, "isatty") else False
    status = 0
    try:
        while True:
            if interactive:
                print(">", end="", flush=True)
            raw = source.readline()
            if not raw:
                break
            line = raw.decode("utf-8", "replace").rstrip("\n").removesuffix("\r")
            try:
                headers, key, value = reader.parse(line)
            except LineError as exc:
                print(f"[ERROR] {exc}", file=sys.stderr, flush=True)
                status = 1
                break
            fut = producer.send(args.topic, value, key=key, headers=headers or None,
                                on_delivery=report(args.topic, key, value))
            if args.sync:
                with contextlib.suppress(KafkaError):  # reported by the callback
                    fut.result()
    except KeyboardInterrupt:
        status = 130
    finally:
        producer.close()
    if failures:
        return 1
    return status


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("console-producer",
                       help="send lines from stdin as records (kafka-console-producer)")
    p.add_argument("--bootstrap-server", help="HOST:PORT[,HOST:PORT...] to connect to")
    p.add_argument("--broker-list", help="deprecated alias of --bootstrap-server")
    p.add_argument("--topic", required=True)
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="line reader properties: parse.key, key.separator, parse.headers, "
                        "headers.delimiter, headers.separator, headers.key.separator, "
                        "null.marker, ignore.error")
    p.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--producer.config", "--command-config", dest="producer_config",
                   metavar="FILE", help="producer properties (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--compression-codec", nargs="?", const="gzip", default=None,
                   choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--request-required-acks", default="-1")
    p.add_argument("--sync", action="store_true", help="wait for each record's delivery")
    p.add_argument("--batch-size", type=int, default=16384)
    p.add_argument("--timeout", type=int, default=1000, help="linger.ms")
    p.add_argument("--message-send-max-retries", type=int, default=3)
    p.add_argument("--retry-backoff-ms", type=int, default=100)
    p.add_argument("--request-timeout-ms", type=int, default=1500)
    p.add_argument("--max-block-ms", type=int, default=60000)
    p.add_argument("--max-memory-bytes", type=int, default=33554432)
    p.add_argument("--metadata-expiry-ms", type=int, default=300000)
    p.set_defaults(func=run)
