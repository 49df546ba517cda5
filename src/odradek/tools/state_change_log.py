"""`odradek state-change-log` (Kafka's StateChangeLogMerger, S-6.5): merge the brokers'
`state-change.log` files in time order, filtered by time range, topic and partitions.

    odradek state-change-log --logs DIR|FILE[,...] [--logs-regex REGEX]
        [--start-time "yyyy-MM-dd HH:mm:ss,SSS"] [--end-time ...] [--topic T [--partitions 0,1]]
        [--engine local|spark] [--output DIR] [--master local[*]]

`--logs` takes files and directories (searched recursively for `state-change.log*`, rotated
files included). Each output line is the original line prefixed with its source (the broker
directory and file name) as `<source>: <line>`.

Two engines share the parsing and filtering functions below:

* `local` (default): a streaming k-way merge (`heapq.merge` over one lazy reader per file), so
  memory stays at one line per file whatever the logs weigh.
* `spark`: the same filter and order as a Spark job (text files -> parse -> filter -> sort by
  time, file, line), for clusters whose logs outgrow one machine; prints on stdout, or writes
  text files under `--output DIR`.

Ties (the same millisecond in two files) go to the file that comes first in the sorted list of
inputs, then by line order, in both engines, so both print the same lines in the same order.
Lines without a timestamp (stack traces) are skipped, and lines naming no partition are kept
only when no --topic is given, as Kafka's merger does.
"""

from __future__ import annotations

import argparse
import datetime
import heapq
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..state_change import LINE_RE, PARTITION_RE
from .dump_log import reader_gone

TIME_FORMAT = "%Y-%m-%d %H:%M:%S,%f"  # Kafka's "yyyy-MM-dd HH:mm:ss,SSS"
LOG_NAME = "state-change.log"
DEFAULT_LOGS_REGEX = r"state-change\.log.*"


class MergeInputError(ValueError):
    """Bad arguments: unparseable times, a --partitions list without --topic, no input files."""


def parse_time(text: str) -> str:
    """Validate a "yyyy-MM-dd HH:mm:ss,SSS" time and return it in canonical form (the fixed
    width makes string order time order)."""
    try:
        t = datetime.datetime.strptime(text.strip(), TIME_FORMAT)
    except ValueError:
        raise MergeInputError(
            f"{text!r} is not a time in the format yyyy-MM-dd HH:mm:ss,SSS "
            "(e.g. 2026-11-21 23:38:44,309)") from None
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"


@dataclass(frozen=True, slots=True)
class Criteria:
    """What to keep: start <= time <= end, and (with `topic`) lines about that topic's
    partitions (all of them, or those in `partitions`)."""

    start: str = "0000-01-01 00:00:00,000"
    end: str = "9999-12-31 23:59:59,999"
    topic: str | None = None
    partitions: frozenset[int] = frozenset()


def make_criteria(start: str | None = None, end: str | None = None, topic: str | None = None,
                  partitions: str | None = None) -> Criteria:
    """Criteria from the tool's string arguments; raises MergeInputError on bad input."""
    parts: frozenset[int] = frozenset()
    if partitions:
        if not topic:
            raise MergeInputError("--partitions needs --topic")
        try:
            parts = frozenset(int(p) for p in partitions.split(",") if p.strip())
        except ValueError:
            raise MergeInputError(
                f"--partitions expects comma-separated partition numbers, got {partitions!r}"
            ) from None
    c = Criteria(topic=topic or None, partitions=parts)
    if start:
        c = Criteria(parse_time(start), c.end, c.topic, c.partitions)
    if end:
        c = Criteria(c.start, parse_time(end), c.topic, c.partitions)
    if c.start > c.end:
        raise MergeInputError(f"--start-time {c.start} is after --end-time {c.end}")
    return c


def line_time(line: str) -> str | None:
    """The timestamp of a state-change.log line, None for anything else."""
    m = LINE_RE.match(line)
    return m.group("time") if m else None


def keep(line: str, time: str, criteria: Criteria) -> bool:
    """Kafka's merger filter, for a line whose time is `time`."""
    if not criteria.start <= time <= criteria.end:
        return False
    if criteria.topic is None:
        return True
    m = PARTITION_RE.search(line)
    if m is None or m.group("topic") != criteria.topic:
        return False
    return not criteria.partitions or int(m.group("partition")) in criteria.partitions


def select(lines: Iterable[str], criteria: Criteria) -> Iterator[tuple[str, str]]:
    """(time, line) for the lines of one file that pass `criteria`, in file order."""
    for raw in lines:
        line = raw.rstrip("\r\n")
        time = line_time(line)
        if time is not None and keep(line, time, criteria):
            yield time, line


def merge(sources: Sequence[tuple[str, Iterable[str]]], criteria: Criteria
          ) -> Iterator[str]:
    """The k-way merge: `sources` are (label, lines) in tie-break order; yields
    "<label>: <line>" in time order. Each source is read lazily, one line at a time."""
    streams = [_labelled(label, select(lines, criteria)) for label, lines in sources]
    for _, line in heapq.merge(*streams, key=lambda item: item[0]):
        yield line


def _labelled(label: str, selected: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    for time, line in selected:
        yield time, f"{label}: {line}"


# -- finding the files -------------------------------------------------------------------------


def find_logs(inputs: Sequence[str], logs_regex: str | None = None) -> list[Path]:
    """Files named by `inputs` (a directory is searched recursively for files whose name
    matches `logs_regex`, default state-change.log*), sorted by path, without duplicates."""
    try:
        name_re = re.compile(logs_regex or DEFAULT_LOGS_REGEX)
    except re.error as exc:
        raise MergeInputError(f"--logs-regex {logs_regex!r} is not a valid regex: {exc}"
                              ) from None
    found: set[Path] = set()
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found.update(f for f in p.rglob("*") if f.is_file() and name_re.fullmatch(f.name))
        elif p.is_file():
            found.add(p)
        else:
            raise MergeInputError(f"{item} is neither a file nor a directory")
    if not found:
        raise MergeInputError(f"no state change log files in {', '.join(inputs)}")
    return sorted(found, key=_rotation_key)


def _rotation_key(p: Path) -> tuple[str, int, str]:
    """Sort by directory, then rotated files (state-change.log.2, .1) before the live one."""
    suffix = p.name[len(LOG_NAME) + 1:] if p.name.startswith(LOG_NAME + ".") else ""
    rank = -int(suffix) if suffix.isdigit() else (0 if p.name == LOG_NAME else -(10**9))
    return (str(p.parent), rank, p.name)


def source_label(path: Path) -> str:
    """What prefixes a file's lines: its directory and file name (broker-0/state-change.log)."""
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8", errors="replace") as f:
        yield from f


def merge_local(files: Sequence[Path], criteria: Criteria) -> Iterator[str]:
    return merge([(source_label(p), _lines(p)) for p in files], criteria)


# -- Spark ------------------------------------------------------------------------------------


def uri_path(uri: str) -> str:
    """The local path of a file URI as Spark's input_file_name() gives it (file:/a, file:///a)."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def _spark_rows(criteria: Criteria, labels: dict[str, tuple[int, str]]) -> Any:
    """A picklable per-row function for the Spark job: the same select() as the local merge."""
    def parse(row: Any) -> list[tuple[str, int, int, str]]:
        path = uri_path(row.source)
        index, label = labels.get(path, (len(labels), path))
        return [(time, index, row.id, f"{label}: {line}")
                for time, line in select([row.value], criteria)]
    return parse


def merge_spark(spark: Any, files: Sequence[Path], criteria: Criteria) -> Any:
    """The merge as a Spark job; returns a DataFrame with one column `line`, sorted by (time,
    input file, line order)."""
    from pyspark.sql import functions as F

    resolved = [p.resolve() for p in files]
    df = (spark.read.text([str(p) for p in resolved])
          .withColumn("source", F.input_file_name())
          .withColumn("id", F.monotonically_increasing_id()))
    labels = {str(r): (i, source_label(p)) for i, (p, r) in enumerate(zip(files, resolved,
                                                                          strict=True))}
    rows = df.rdd.flatMap(_spark_rows(criteria, labels))
    ordered = rows.sortBy(lambda r: (r[0], r[1], r[2]))
    return spark.createDataFrame(ordered.map(lambda r: (r[3],)), schema="line string")


def run_spark(files: Sequence[Path], criteria: Criteria, output: str | None, master: str
              ) -> int:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        print("odradek state-change-log: --engine spark needs pyspark (pip install "
              "'odradek[spark]')", file=sys.stderr)
        return 2
    existing = SparkSession.getActiveSession()
    spark = existing or (SparkSession.builder.master(master)
                         .appName("odradek-state-change-log")
                         .config("spark.ui.enabled", "false").getOrCreate())
    try:
        df = merge_spark(spark, files, criteria)
        if output:
            df.coalesce(1).write.mode("overwrite").text(output)
            print(f"Merged lines written to {output}", file=sys.stderr)
        else:
            for row in df.toLocalIterator():
                sys.stdout.write(row.line + "\n")
    finally:
        if existing is None:
            spark.stop()
    return 0


# -- CLI --------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    try:
        criteria = make_criteria(args.start_time, args.end_time, args.topic, args.partitions)
        inputs = [x.strip() for x in args.logs.split(",") if x.strip()] if args.logs else []
        if args.logs_regex and not inputs:
            # Kafka's --logs-regex names a directory and a file-name pattern in one string.
            directory, _, pattern = args.logs_regex.rpartition("/")
            inputs, regex = [directory or "."], pattern
        else:
            regex = args.logs_regex
        if not inputs:
            raise MergeInputError("give --logs (files or directories) or --logs-regex")
        files = find_logs(inputs, regex)
    except MergeInputError as exc:
        print(f"odradek state-change-log: {exc}", file=sys.stderr)
        return 2
    print(f"Merging {len(files)} state change log file(s)", file=sys.stderr)
    try:
        return _merge_to_output(args, files, criteria)
    except BrokenPipeError:
        return reader_gone()
    except OSError as exc:
        print(f"odradek state-change-log: {exc}", file=sys.stderr)
        return 2


def _merge_to_output(args: argparse.Namespace, files: Sequence[Path], criteria: Criteria
                     ) -> int:
    if args.engine == "spark":
        return run_spark(files, criteria, args.output, args.master)
    out = sys.stdout
    if args.output:
        Path(args.output).mkdir(parents=True, exist_ok=True)
        target = Path(args.output) / "merged-state-change.log"
        with target.open("w") as f:
            for line in merge_local(files, criteria):
                f.write(line + "\n")
        print(f"Merged lines written to {target}", file=sys.stderr)
        return 0
    for line in merge_local(files, criteria):
        out.write(line + "\n")
    out.flush()
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("state-change-log",
                       help="merge the brokers' state-change.log files in time order "
                            "(Kafka's StateChangeLogMerger)")
    p.add_argument("--logs", help="comma-separated state-change.log files or directories "
                                  "(searched recursively)")
    p.add_argument("--logs-regex", help="file names to take from the --logs directories "
                                        "(default state-change.log*); without --logs, "
                                        "DIR/REGEX as Kafka's tool takes it")
    p.add_argument("--start-time", help='earliest time, "yyyy-MM-dd HH:mm:ss,SSS"')
    p.add_argument("--end-time", help='latest time, "yyyy-MM-dd HH:mm:ss,SSS"')
    p.add_argument("--topic", help="only lines about this topic")
    p.add_argument("--partitions", help="comma-separated partitions of --topic")
    p.add_argument("--engine", choices=("local", "spark"), default="local")
    p.add_argument("--output", help="write the merged lines under this directory")
    p.add_argument("--master", default="local[*]", help="Spark master for --engine spark")
    p.set_defaults(func=run)
