"""`odradek replica-verification` (Kafka's ReplicaVerificationTool, S-6.4): check that every
replica of the chosen topics holds the same records below the high watermark.

    odradek replica-verification --bootstrap-server HOST:PORT [--topic-white-list REGEX]
        [--fetch-size BYTES] [--max-wait-ms MS] [--time -2|-1|TIMESTAMP]
        [--report-interval-ms MS] [--once]

As Kafka's tool does, it fetches each partition from EVERY replica as the debugging consumer
(replica id -2, which followers answer too; brokers serve it below their own high watermark),
walks the replicas' batches in lockstep, and compares them batch by batch: the same offsets and
the same bytes (a CRC32C computed over each batch's content, so a batch damaged on one disk
differs even though its stored CRC did not change). Only batches below each replica's high
watermark are compared. A difference is reported with the first differing record offset:

    2026-11-21 23:40:01,117: partition t-0: replicas 0,2 differ at offset 17 (replica 0's
        checksum 3405691582; replica 2's checksum 195872824)

and, every --report-interval-ms and at the end, Kafka's summary line:

    2026-11-21 23:40:01,120: max lag is 0 for partition t-0 at offset 120 among 3 partitions

Without --once the tool keeps verifying new data until interrupted (as Kafka's does) and exits
at the first difference. With --once it verifies up to the current high watermarks and exits.

Exit status: 0 all replicas agree, 1 some replicas differ, 2 a partition could not be verified
(a replica unreachable or answering an error) or bad arguments. Differences from Kafka's tool:
--time defaults to -2 (earliest: a one-shot check should cover the whole log; Kafka's -1 only
watches new data), --once, and the exit status.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..client.errors import KafkaConnectionError, KafkaError
from ..common import TopicPartition
from ..protocol import records as rb
from .command import Subcommands, ToolError, prefixed, read_properties, run_tool

DEBUGGING_CONSUMER_ID = -2  # Kafka's FetchRequest.DEBUGGING_CONSUMER_ID
DEFAULT_FETCH_SIZE = 1024 * 1024  # ConsumerConfig.DEFAULT_MAX_PARTITION_FETCH_BYTES
EARLIEST, LATEST = -2, -1



def now_text() -> str:
    """Kafka's tool prefixes its lines with "yyyy-MM-dd HH:mm:ss,SSS"."""
    t = datetime.datetime.now()
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"


# -- pure comparison ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """One batch as fetched from one replica."""

    base_offset: int
    last_offset: int
    checksum: int  # CRC32C of the batch content as read (not the stored field)
    stored_crc: int
    data: bytes

    @property
    def intact(self) -> bool:
        return self.checksum == self.stored_crc


def batch_infos(records: bytes | memoryview | None) -> list[BatchInfo]:
    """The whole batches of a fetched record set (a partial batch at the end is left out)."""
    if not records:
        return []
    buf = bytes(records)
    return [BatchInfo(h.base_offset, h.last_offset, rb.compute_crc(buf, h.position, h.size),
                      h.crc, buf[h.position:h.position + h.size])
            for h in rb.iter_headers(buf)]


def first_differing_offset(a: BatchInfo, b: BatchInfo) -> int:
    """The first record offset at which two batches differ (their base offset when the
    difference is in the batch header or a batch cannot be decoded)."""
    if a.base_offset != b.base_offset:
        return min(a.base_offset, b.base_offset)
    try:
        ra, rbs = rb.decode_records(a.data), rb.decode_records(b.data)
    except (rb.CorruptRecordError, ValueError):
        return a.base_offset
    for x, y in zip(ra, rbs, strict=False):
        if (x.offset, x.timestamp, x.key, x.value, x.headers) != \
                (y.offset, y.timestamp, y.key, y.value, y.headers):
            return min(x.offset, y.offset)
    if len(ra) != len(rbs):
        return a.base_offset + min(len(ra), len(rbs))
    return a.base_offset


@dataclass(frozen=True, slots=True)
class Mismatch:
    topic: str
    partition: int
    offset: int
    reference: int
    differing: tuple[int, ...]
    detail: str

    def line(self) -> str:
        replicas = ",".join(str(r) for r in (self.reference, *self.differing))
        return (f"partition {self.topic}-{self.partition}: replicas {replicas} differ at "
                f"offset {self.offset} ({self.detail})")


def compare_replicas(tp: TopicPartition, offset: int, reference: int,
                     batches: Mapping[int, Sequence[BatchInfo]],
                     high_watermarks: Mapping[int, int]) -> tuple[int, Mismatch | None]:
    """Kafka's verifyCheckSum for one partition: take the next batch from every replica in
    lockstep while all have one below their own high watermark; stop at the first difference.
    Returns (the next offset to verify, the difference if any)."""
    iters = {r: iter(bs) for r, bs in batches.items()}
    others = sorted(r for r in batches if r != reference)
    position = offset
    while True:
        current: dict[int, BatchInfo] = {}
        for r in (reference, *others):
            b = next(iters[r], None)
            if b is None or b.last_offset >= high_watermarks[r]:
                return position, None
            current[r] = b
        ref = current[reference]
        differing = [r for r in others
                     if (current[r].base_offset, current[r].last_offset, current[r].checksum)
                     != (ref.base_offset, ref.last_offset, ref.checksum)]
        if differing:
            at = min(first_differing_offset(ref, current[r]) for r in differing)
            if any(current[r].last_offset != ref.last_offset for r in differing):
                detail = "; ".join([f"replica {reference}'s offset {ref.last_offset}"] + [
                    f"replica {r}'s offset {current[r].last_offset}" for r in differing])
            else:
                detail = "; ".join([f"replica {reference}'s checksum {ref.checksum}"] + [
                    f"replica {r}'s checksum {current[r].checksum}" for r in differing])
            broken = [r for r in (reference, *differing) if not current[r].intact]
            if broken:
                detail += "; the batch of replica " + ",".join(map(str, broken)) + \
                    " fails its own CRC check"
            topic, partition = tp  # plain (topic, partition) pairs work as well
            return position, Mismatch(topic, partition, at, reference, tuple(differing), detail)
        position = ref.last_offset + 1


def max_lag_line(lags: Mapping[TopicPartition, tuple[int, int]]) -> str:
    """Kafka's summary: lags maps partition -> (max HW among replicas, verified offset)."""
    worst: TopicPartition | None = None
    max_lag, at = -1, -1
    for tp in sorted(lags):
        hw, verified = lags[tp]
        if hw - verified > max_lag:
            max_lag, at, worst = hw - verified, verified, tp
    name = f"{worst[0]}-{worst[1]}" if worst else "null"
    return f"max lag is {max_lag} for partition {name} at offset {at} among {len(lags)} partitions"


# -- I/O ---------------------------------------------------------------------------------------


@dataclass
class Options:
    bootstrap: str
    topic_regex: str = ".*"
    fetch_size: int = DEFAULT_FETCH_SIZE
    max_wait_ms: int = 1000
    time: int = EARLIEST
    report_interval_ms: int = 30000
    once: bool = False
    #: --command-config's client properties (security.protocol, sasl.*, ssl.*).
    client_props: Mapping[str, str] = field(default_factory=dict)


@dataclass
class PartitionState:
    replicas: tuple[int, ...]
    reference: int
    offset: int = 0
    high_watermarks: dict[int, int] = field(default_factory=dict)
    mismatch: Mismatch | None = None
    error: str | None = None

    @property
    def max_hw(self) -> int:
        return max(self.high_watermarks.values(), default=self.offset)


CANNOT_RUN = 2  # the exit status when the verification could not run


def cannot_run(message: str) -> ToolError:
    """The verification could not run (no topics, no broker reachable, bad input)."""
    return ToolError(message, exit_code=CANNOT_RUN)


class ReplicaVerifier:
    def __init__(self, opts: Options, out: Any = None, err: Any = None) -> None:
        self.opts = opts
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.client: Any = None
        self.states: dict[TopicPartition, PartitionState] = {}

    def say(self, text: str) -> None:
        self.out.write(f"{now_text()}: {text}\n")
        self.out.flush()

    async def setup(self) -> None:
        from ..client.admin import explain_bootstrap_failure
        from ..client.cluster_metadata import KafkaClient
        from ..client.config import ADMIN, build_config

        try:
            pattern = re.compile(self.opts.topic_regex)
        except re.error:
            raise cannot_run(f"{self.opts.topic_regex} is an invalid regex") from None
        cfg = build_config(ADMIN, {"client.id": "replica-verification",
                                   **self.opts.client_props,
                                   "bootstrap.servers": self.opts.bootstrap,
                                   "allow.auto.create.topics": False}, {})
        self.client = KafkaClient(cfg)
        self.client.topics = None
        self.err.write("Getting topic metadata...\n")
        try:
            await self.client.start()
        except KafkaError as exc:
            if isinstance(exc, KafkaConnectionError):
                exc = await explain_bootstrap_failure(self.client, exc)
            raise cannot_run(
                f"cannot get the cluster metadata from {self.opts.bootstrap}: {exc}") from None
        md = self.client.metadata
        for name, t in sorted(md.topics.items()):
            if not pattern.fullmatch(name):
                continue
            for index, p in sorted(t.partitions.items()):
                replicas = tuple(p.replicas)
                if not replicas:
                    continue
                reference = p.leader if p.leader in replicas else replicas[0]
                self.states[TopicPartition(name, index)] = PartitionState(replicas, reference)
        if not self.states:
            raise cannot_run(
                "No topics found. --topic-white-list if specified, is either filtering out all "
                "topics or there is no topic.")
        await self._initial_offsets()

    async def _initial_offsets(self) -> None:
        """Where verification starts (--time), asked of each partition's leader; a timestamp
        after the last record starts at the log end, as Kafka's offsetsForTimes would."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp, st in self.states.items():
            by_leader.setdefault(st.reference, []).append(tp)
        for node, tps in by_leader.items():
            found = await self._list_offsets(node, tps, self.opts.time)
            missing = [tp for tp in tps if found.get(tp) == -1]
            if missing:
                found.update(await self._list_offsets(node, missing, LATEST))
            for tp, offset in found.items():
                self.states[tp].offset = max(offset, 0)

    async def _list_offsets(self, node: int, tps: list[TopicPartition], timestamp: int
                            ) -> dict[TopicPartition, int]:
        topics: dict[str, list[dict[str, int]]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append({"partition_index": p, "current_leader_epoch": -1,
                                             "timestamp": timestamp})
        try:
            resp = await self.client.send(node, 2, replica_id=-1, isolation_level=0,
                                          topics=[{"name": t, "partitions": ps}
                                                  for t, ps in topics.items()])
        except Exception as exc:  # connection errors of any kind
            for tp in tps:
                self.states[tp].error = f"cannot list offsets on broker {node}: {exc}"
            return {}
        out: dict[TopicPartition, int] = {}
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if tp not in self.states:
                    continue
                if p.error_code != ErrorCode.none:
                    self.states[tp].error = (f"ListOffsets on broker {node} answered "
                                             f"{ErrorCode(p.error_code).name.upper()}")
                else:
                    out[tp] = int(p.offset)
        return out

    def active(self) -> list[TopicPartition]:
        return [tp for tp, st in self.states.items() if st.mismatch is None and st.error is None]

    async def _fetch(self, node: int, tps: list[TopicPartition]
                     ) -> dict[TopicPartition, tuple[int, int, bytes] | str]:
        """(error code, HW, records) per partition from one broker, or an error text."""
        topics: dict[str, list[dict[str, int]]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append({
                "partition": p, "current_leader_epoch": -1, "fetch_offset": self.states[
                    (t, p)].offset, "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": self.opts.fetch_size})
        try:
            resp = await self.client.send(
                node, 1, purpose="verification", replica_id=DEBUGGING_CONSUMER_ID, max_wait=0,
                min_bytes=0, max_bytes=0x7FFFFFFF, isolation_level=0, session_id=0,
                session_epoch=-1, topics=[{"topic": t, "partitions": ps}
                                          for t, ps in topics.items()],
                forgotten_topics_data=[], rack_id="")
        except Exception as exc:  # connection refused, timeout, broker gone
            self.client.node_failed(node)
            return {tp: f"cannot fetch from broker {node}: {exc}" for tp in tps}
        out: dict[TopicPartition, tuple[int, int, bytes] | str] = {}
        for t in resp.responses:
            for p in t.partitions:
                out[TopicPartition(t.topic, p.partition_index)] = (
                    int(p.error_code), int(p.high_watermark), bytes(p.records or b""))
        return out

    async def round(self) -> bool:
        """Fetch every active partition from every replica once and compare; True when some
        partition's verified offset moved. Without --once a partition that could not be
        fetched is retried every round (Kafka's tool waits for a broker to come back)."""
        if not self.opts.once:
            for (t, p), st in self.states.items():
                if st.error is not None:
                    self.err.write(f"partition {t}-{p} not verified this round: {st.error}\n")
                    st.error = None
        active = self.active()
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp in active:
            for r in self.states[tp].replicas:
                by_broker.setdefault(r, []).append(tp)
        brokers = sorted(by_broker)
        results = await asyncio.gather(*(self._fetch(b, by_broker[b]) for b in brokers))
        fetched = dict(zip(brokers, results, strict=True))
        progress = False
        for tp in active:
            st = self.states[tp]
            batches: dict[int, list[BatchInfo]] = {}
            for r in st.replicas:
                got = fetched[r].get(tp, f"broker {r} did not answer for {tp}")
                if isinstance(got, str):
                    st.error = got
                    break
                code, hw, data = got
                if code != ErrorCode.none:
                    st.error = (f"replica {r} of {tp} answered "
                                f"{ErrorCode(code).name.upper()} at offset {st.offset}")
                    break
                st.high_watermarks[r] = hw
                batches[r] = batch_infos(data)
            if st.error is not None:
                continue
            new_offset, mismatch = compare_replicas(tp, st.offset, st.reference, batches,
                                                    st.high_watermarks)
            if new_offset > st.offset:
                progress = True
            st.offset = new_offset
            if mismatch is not None:
                st.mismatch = mismatch
                self.say(mismatch.line())
        return progress

    def lags(self) -> dict[TopicPartition, tuple[int, int]]:
        return {tp: (st.max_hw, st.offset) for tp, st in self.states.items()}

    async def run(self) -> int:
        await self.setup()
        self.say("verification process is started")
        loop = asyncio.get_running_loop()
        last_report = last_progress = loop.time()
        rounds = 0
        while True:
            progress = await self.round()
            rounds += 1
            now = loop.time()
            if progress:
                last_progress = now
            if now - last_report >= self.opts.report_interval_ms / 1000:
                self.say(max_lag_line(self.lags()))
                self.err.write(f"round {rounds}: {len(self.active())} of {len(self.states)} "
                               "partitions being verified\n")
                last_report = now
            if any(st.mismatch for st in self.states.values()) and not self.opts.once:
                break
            if not self.active():
                break
            caught_up = all(self.states[tp].offset >= self.states[tp].max_hw
                            for tp in self.active())
            if self.opts.once and caught_up:
                break
            if not progress:
                if self.opts.once and now - last_progress >= self.opts.max_wait_ms / 1000:
                    break  # replicas' high watermarks stopped moving: report the lag
                await asyncio.sleep(min(0.1, self.opts.max_wait_ms / 1000) if self.opts.once
                                    else self.opts.max_wait_ms / 1000)
        return self.finish()

    def finish(self) -> int:
        self.say(max_lag_line(self.lags()))
        errors = [(tp, st.error) for tp, st in sorted(self.states.items()) if st.error]
        for tp, error in errors:
            self.err.write(f"partition {tp} could not be verified: {error}\n")
        differ = [st.mismatch for _, st in sorted(self.states.items()) if st.mismatch]
        if differ:
            self.say(f"{len(differ)} of {len(self.states)} partitions have replicas that differ")
            return 1
        if errors:
            return 2
        self.say(f"all replicas of {len(self.states)} partitions agree up to the high watermark")
        return 0

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()


async def verify(opts: Options, out: Any = None, err: Any = None) -> int:
    v = ReplicaVerifier(opts, out, err)
    try:
        return await v.run()
    except ToolError as exc:
        (err or sys.stderr).write(f"{exc}\n")
        return exc.exit_code
    finally:
        await v.close()


def run(args: argparse.Namespace) -> int:
    bootstrap = args.bootstrap_server or args.broker_list

    def body() -> int:
        if not bootstrap:
            raise cannot_run("--broker-list or --bootstrap-server is required")
        for flag in ("fetch_size", "report_interval_ms"):
            if getattr(args, flag) <= 0:
                raise cannot_run(f"--{flag.replace('_', '-')} must be positive")
        if args.max_wait_ms < 0:
            raise cannot_run("--max-wait-ms must not be negative")
        props = (read_properties(args.command_config, "--command-config")
                 if args.command_config else {})
        opts = Options(bootstrap, args.topic_white_list, args.fetch_size, args.max_wait_ms,
                       args.time, args.report_interval_ms, args.once, props)
        started = time.monotonic()
        code = asyncio.run(verify(opts))
        with contextlib.suppress(OSError):
            print(f"replica verification took {time.monotonic() - started:.1f} s",
                  file=sys.stderr)
        return code

    def bad_broker_list(exc: BaseException) -> int:
        print(f"odradek replica-verification: bad broker list {bootstrap!r} (HOST:PORT,...): "
              f"{exc}", file=sys.stderr)
        return CANNOT_RUN

    return run_tool(body, refused=prefixed("replica-verification"), failures=(ValueError,),
                    failed=bad_broker_list)


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("replica-verification",
                       help="check that all replicas hold the same records "
                            "(Kafka's ReplicaVerificationTool)")
    p.add_argument("--broker-list", help="HOST:PORT,... of brokers to bootstrap from")
    p.add_argument("--bootstrap-server", help="same as --broker-list")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--topic-white-list", "--topics-include", default=".*",
                   dest="topic_white_list", help="regex of the topics to verify (default .*)")
    p.add_argument("--fetch-size", type=int, default=DEFAULT_FETCH_SIZE,
                   help="bytes per partition per fetch")
    p.add_argument("--max-wait-ms", type=int, default=1000,
                   help="wait between rounds with nothing new (with --once: how long to wait "
                        "for lagging high watermarks)")
    p.add_argument("--time", "--time-ms", type=int, default=EARLIEST, dest="time",
                   help="where to start: -2 earliest (default), -1 latest, or a timestamp")
    p.add_argument("--report-interval-ms", type=int, default=30000,
                   help="how often to print the max lag line")
    p.add_argument("--once", action="store_true",
                   help="verify up to the current high watermarks, then exit")
    p.set_defaults(func=run)
