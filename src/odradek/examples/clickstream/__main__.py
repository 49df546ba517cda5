"""The clickstream demo in one command (S-9.2): an in-process odradek cluster, the generator, the
Structured Streaming job on local Spark, and the result read back from Parquet and from the
`page-counts` topic, checked against the generator's own counts.

    python -m odradek.examples.clickstream --events 20000 --data-dir /tmp/clickstream

Progress goes to stderr; the tables go to stdout. Exit status 0 when both outputs hold exactly
the expected counts, 1 when they differ, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from .events import (
    DEFAULT_START_MS,
    GeneratorConfig,
    PageView,
    WindowKey,
    generate,
    heartbeat,
    iso_ms,
    parse_duration_ms,
    window_start,
)

_T0 = time.monotonic()


def progress(msg: str) -> None:
    print(f"[clickstream {time.monotonic() - _T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def _positive(text: str) -> int:
    try:
        v = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return v


def _rate(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return v


def _duration(text: str) -> str:
    try:
        parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m odradek.examples.clickstream",
        description="Page-view events -> odradek topic 'page-views' -> Spark Structured "
                    "Streaming (windowed page counts with a watermark) -> topic 'page-counts' "
                    "and Parquet; then the top pages per window, read back from both.")
    ap.add_argument("--events", type=_positive, default=20_000, help="page views (20000)")
    ap.add_argument("--data-dir", type=Path, required=True,
                    help="new or empty directory: the cluster's logs, the Parquet output and "
                         "the checkpoints go there")
    ap.add_argument("--overwrite", action="store_true",
                    help="remove a previous run's cluster/ and output/ from --data-dir first")
    ap.add_argument("--brokers", type=_positive, default=1,
                    help="brokers of the in-process cluster (1; replication factor min(3, N))")
    ap.add_argument("--partitions", type=_positive, default=4,
                    help="partitions of page-views (4)")
    ap.add_argument("--seed", type=int, default=42, help="generator seed (42)")
    ap.add_argument("--users", type=_positive, default=500, help="distinct users (500)")
    ap.add_argument("--rate", type=_rate, default=20.0,
                    help="events per second of event time (20): sets how many windows the "
                         "events span, not how fast they are produced")
    ap.add_argument("--start", default=None,
                    help="event time of the first event, ISO-8601, e.g. "
                         f"{iso_ms(DEFAULT_START_MS)} (default: now, to the minute; a start "
                         "older than retention.ms would let the broker delete the events)")
    ap.add_argument("--window", type=_duration, default="1 minute",
                    help="tumbling window ('1 minute')")
    ap.add_argument("--watermark", type=_duration, default="2 minutes",
                    help="watermark delay: how late an event may be ('2 minutes')")
    ap.add_argument("--max-offsets-per-trigger", type=_positive, default=None,
                    help="rate limit per micro-batch (default: all available)")
    ap.add_argument("--exactly-once", action="store_true",
                    help="the topic sink with deliveryGuarantee=exactly-once (Kafka "
                         "transactions committed by the driver; output read read_committed)")
    ap.add_argument("--master", default=None,
                    help="Spark master URL, e.g. spark://127.0.0.1:7077 (default local[2])")
    ap.add_argument("--top", type=_positive, default=3, help="pages shown per window (3)")
    ap.add_argument("--max-windows", type=_positive, default=20,
                    help="windows shown per table (20; first and last ones)")
    return ap


def _start_ms(text: str | None) -> int:
    from .report import iso_to_ms

    if text is None:
        now = int(time.time() * 1000)
        return now - now % 60_000
    try:
        return iso_to_ms(text)
    except ValueError:
        raise ValueError(f"--start: not an ISO-8601 time: {text!r}") from None


def _prepare(data_dir: Path, overwrite: bool) -> None:
    if data_dir.exists() and not data_dir.is_dir():
        raise ValueError(f"--data-dir {data_dir} exists and is not a directory")
    if data_dir.exists() and any(data_dir.iterdir()):
        if not overwrite:
            raise ValueError(f"--data-dir {data_dir} is not empty (a previous run?); choose "
                             "another directory or pass --overwrite")
        for sub in ("cluster", "output"):
            shutil.rmtree(data_dir / sub, ignore_errors=True)
    data_dir.mkdir(parents=True, exist_ok=True)


def run(args: argparse.Namespace) -> int:
    """The demo; arguments already checked by `main`."""
    from ...cluster import Cluster
    from . import generator, job, report

    window_ms = parse_duration_ms(args.window)
    delay_ms = parse_duration_ms(args.watermark)
    start_ms = _start_ms(args.start)
    gen_cfg = GeneratorConfig(seed=args.seed, users=args.users, start_ms=start_ms,
                              events_per_second=args.rate)

    progress(f"starting an odradek cluster of {args.brokers} broker(s) in {args.data_dir}")
    with Cluster(args.brokers, data_dir=args.data_dir / "cluster") as cluster:
        bootstrap = cluster.bootstrap_servers
        progress(f"cluster up; bootstrap.servers={bootstrap}")
        generator.ensure_topics(bootstrap, {job.SOURCE_TOPIC: args.partitions,
                                            job.SINK_TOPIC: 1},
                                replication_factor=min(3, args.brokers))

        # The expected counts, kept while producing (the events themselves are not kept).
        expected: Counter[WindowKey] = Counter()
        span: list[int] = []  # first and last event time

        def counted(it: Iterator[PageView]) -> Iterator[PageView]:
            for e in it:
                expected[(window_start(e.ts, window_ms), e.page)] += 1
                if span:
                    span[1] = e.ts
                else:
                    span.extend((e.ts, e.ts))
                yield e

        progress(f"producing {args.events:,} page views into {job.SOURCE_TOPIC} "
                 f"({args.partitions} partitions, seed {args.seed})")
        generator.produce(bootstrap, job.SOURCE_TOPIC, counted(generate(args.events, gen_cfg)),
                          progress=generator.stderr_progress("  produced"))
        # The tracker's heartbeat after the last view moves the watermark past the last
        # window's end, so every window is final when the job stops. The events come in
        # event-time order, so in one micro-batch none is late: every window is emitted with
        # all its views (events.expected_output of one batch; more batches, with
        # --max-offsets-per-trigger, can make views late only if the watermark delay is
        # shorter than the skew between partitions within a batch).
        first, last = span[0], span[-1]
        hb = heartbeat(window_start(last, window_ms) + window_ms + delay_ms)
        generator.produce(bootstrap, job.SOURCE_TOPIC, [hb])
        progress(f"events span {iso_ms(first)} .. {iso_ms(last)}; heartbeat at "
                 f"{iso_ms(hb.ts)}")

        progress(f"starting Spark ({args.master or 'local[2]'}); the first job takes a few "
                 "seconds more")
        spark = job.session(args.master)
        try:
            cfg = job.JobConfig(bootstrap_servers=bootstrap, output_dir=args.data_dir / "output",
                                window=args.window, watermark=args.watermark,
                                max_offsets_per_trigger=args.max_offsets_per_trigger,
                                delivery_guarantee="exactly-once" if args.exactly_once
                                else "at-least-once")
            progress(f"running the job (availableNow): {job.SOURCE_TOPIC} -> windows of "
                     f"{args.window}, watermark {args.watermark} -> {job.SINK_TOPIC} and "
                     f"{cfg.parquet_dir}")
            t = time.monotonic()
            runs = job.run_available_now(spark, cfg)
            progress(f"job done in {time.monotonic() - t:.1f} s")
            for r in runs:
                progress(f"  {r}")
            from_parquet = report.as_counts(report.read_parquet(spark, cfg.parquet_dir))
        finally:
            spark.stop()
        from_topic = report.as_counts(report.read_topic(bootstrap, job.SINK_TOPIC))

    ok = True
    for name, got in (("Parquet " + str(cfg.parquet_dir), from_parquet),
                      (f"topic {job.SINK_TOPIC}", from_topic)):
        print(f"\nTop {args.top} pages per {args.window} window, read back from {name} "
              f"({len(got)} rows, {sum(got.values()):,} views):\n")
        print(report.format_top(got, window_ms, args.top, args.max_windows))
        diff = report.compare(expected, got)
        if diff:
            ok = False
            print(f"\nMISMATCH with the generator's counts ({len(diff)} rows):", *diff[:20],
                  sep="\n")
            if args.max_offsets_per_trigger:
                print("(with --max-offsets-per-trigger, views may be late legitimately when "
                      "--watermark is shorter than the event-time skew between partitions "
                      "within a micro-batch)")
    if ok:
        print(f"\nOK: both outputs hold exactly the generator's counts: {len(expected)} "
              f"(window, page) rows, {sum(expected.values()):,} page views.")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if importlib.util.find_spec("pyspark") is None:
        ap.error("PySpark is not installed: pip install 'odradek[spark]' (PySpark 4.3, pyarrow)")
    try:
        _start_ms(args.start)
        _prepare(args.data_dir, args.overwrite)
    except (ValueError, OSError) as exc:
        ap.error(str(exc))
    from ...client.errors import KafkaError

    try:
        return run(args)
    except KeyboardInterrupt:
        progress("interrupted")
        return 130
    except (KafkaError, TimeoutError, RuntimeError, OSError) as exc:
        print(f"{ap.prog}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
