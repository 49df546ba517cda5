"""Reading one offset range of one partition on a Spark executor (S-9.1), straight into Arrow.

`read_range` fetches [from, until) from the partition's leader with Fetch requests of its own
(through `odradek.client`'s connections and metadata, `KafkaClient`), decodes the record batches
column by column (no Python object per record besides its key, value and headers) and yields
pyarrow RecordBatches in the exact schema of Spark's Kafka source.

Failures, as Spark's KafkaDataConsumer handles them:
* a partition that stays unknown to the cluster for a few seconds (its topic deleted after
  planning): data loss, as below (failOnDataLoss: an error; otherwise the range is skipped);
* a leader change (NOT_LEADER_OR_FOLLOWER and the other REFRESH_ERRORS) or a lost connection:
  refresh the metadata and retry, for up to `kafkaConsumer.pollTimeoutMs` without progress;
* OFFSET_OUT_OF_RANGE below the log start (retention deleted the records): with failOnDataLoss
  a DataLossError naming the offsets lost, otherwise a warning and the read goes on from the log
  start offset;
* the range ending beyond the log end (records gone with an unclean election): the same.

`kafka.isolation.level=read_committed` (as Spark's Kafka source passes it to its consumers):
the fetches ask for read_committed, so they stop at the last stable offset, and the batches of
aborted transactions the broker lists are skipped (client/read_committed.py, Kafka's consumer
logic), as are the transaction markers; the planned ranges end at the LSO (the driver's
ListOffsets is read_committed too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from kio.schema.errors import ErrorCode

from ..client.cluster_metadata import REFRESH_ERRORS, started
from ..client.consumer import AsyncConsumer
from ..client.errors import KafkaError
from ..client.read_committed import (
    READ_COMMITTED,
    AbortedTransactions,
    abort_marker_checker,
    aborted_of,
)
from ..client.types import TopicPartition
from ..protocol.compression import Codec, decompress
from ..protocol.records import HEADER_SIZE, check_batch, iter_headers, read_varint
from .offsets import (
    INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_FALSE,
    INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_TRUE,
    DataLossError,
    OffsetRange,
)

log = logging.getLogger("odradek.spark")

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
SPARK_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
                "timestamp timestamp, timestampType int")
SPARK_HEADERS = ", headers array<struct<key:string,value:binary>>"
DEFAULT_POLL_TIMEOUT_MS = 120000
DEFAULT_PARTITION_FETCH_BYTES = 4 * 1024 * 1024


def spark_schema(include_headers: bool) -> str:
    """The DDL of Spark's Kafka source schema (KafkaRecordToRowConverter.kafkaSchema)."""
    return SPARK_SCHEMA + (SPARK_HEADERS if include_headers else "")


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
              ("partition", pa.int32()), ("offset", pa.int64()),
              ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
    if include_headers:
        fields.append(("headers", HEADERS_TYPE))
    return pa.schema(fields)


class Columns:
    """The records of one fetch, column by column."""

    __slots__ = ("headers", "keys", "offsets", "timestamps", "ts_types", "values")

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.ts_types: list[int] = []
        self.headers: list[list[tuple[str, bytes | None]]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def to_batch(self, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
        n = len(self.offsets)
        ts = pc.multiply(pa.array(self.timestamps, pa.int64()), 1000).cast(
            pa.timestamp("us", tz="UTC"))
        arrays = [pa.array(self.keys, pa.binary()), pa.array(self.values, pa.binary()),
                  pa.array([topic] * n, pa.string()), pa.array([partition] * n, pa.int32()),
                  pa.array(self.offsets, pa.int64()), ts, pa.array(self.ts_types, pa.int32())]
        if len(schema) == 8:
            arrays.append(pa.array(
                [[{"key": k, "value": v} for k, v in hs] for hs in self.headers], HEADERS_TYPE))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def decode_into(cols: Columns, data: bytes | memoryview, start: int, until: int,
                check_crcs: bool = True, with_headers: bool = False,
                aborted: AbortedTransactions | None = None) -> int:
    """Append the records of `data` (a Fetch response's record batches) with offsets in
    [start, until) to `cols`; control batches are skipped, and with `aborted` (read_committed)
    the batches of aborted transactions. Returns the offset after the last complete batch (at
    least `start`)."""
    view = memoryview(data)
    next_offset = start
    k_app, v_app, o_app = cols.keys.append, cols.values.append, cols.offsets.append
    t_app, tt_app, h_app = cols.timestamps.append, cols.ts_types.append, cols.headers.append
    for h in iter_headers(view):
        end = h.position + h.size
        if check_crcs:
            check_batch(view, h.position, end)
        if h.next_offset > next_offset:
            next_offset = h.next_offset
        if aborted is not None and aborted.skip(h, abort_marker_checker(view, h)):
            continue
        if h.is_control or h.next_offset <= start:
            continue
        if h.base_offset >= until:
            break
        body: bytes = bytes(view[h.position + HEADER_SIZE:end])
        if h.compression != Codec.NONE:
            body = decompress(h.compression, body)
        log_append = h.is_log_append_time
        ts_type = 1 if log_append else 0
        base_ts, base_off = h.base_timestamp, h.base_offset
        pos = 0
        # The per-record loop of the executor's read: zigzag varints are decoded inline for the
        # one- and two-byte cases (nearly every length and delta), falling back to
        # protocol.records.read_varint otherwise, so no call is made per field.
        for _ in range(h.records_count):
            b = body[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif body[pos + 1] < 0x80:
                b = (b & 0x7F) | (body[pos + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = read_varint(body, pos)
            rec_end = pos + length
            pos += 1  # attributes
            b = body[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif body[pos + 1] < 0x80:
                b = (b & 0x7F) | (body[pos + 1] << 7)
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                ts_delta, pos = read_varint(body, pos)
            b = body[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif body[pos + 1] < 0x80:
                b = (b & 0x7F) | (body[pos + 1] << 7)
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                off_delta, pos = read_varint(body, pos)
            offset = base_off + off_delta
            if offset < start or offset >= until:
                pos = rec_end
                continue
            b = body[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif body[pos + 1] < 0x80:
                b = (b & 0x7F) | (body[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = read_varint(body, pos)
            if n < 0:
                k_app(None)
            else:
                k_app(body[pos:pos + n])
                pos += n
            b = body[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif body[pos + 1] < 0x80:
                b = (b & 0x7F) | (body[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = read_varint(body, pos)
            if n < 0:
                v_app(None)
            else:
                v_app(body[pos:pos + n])
                pos += n
            o_app(offset)
            t_app(h.max_timestamp if log_append else base_ts + ts_delta)
            tt_app(ts_type)
            if with_headers:
                hdrs: list[tuple[str, bytes | None]] = []
                count, pos = read_varint(body, pos)
                for _ in range(count):
                    n, pos = read_varint(body, pos)
                    hk = body[pos:pos + n].decode("utf-8", "replace")
                    pos += n
                    n, pos = read_varint(body, pos)
                    if n < 0:
                        hv = None
                    else:
                        hv = body[pos:pos + n]
                        pos += n
                    hdrs.append((hk, hv))
                h_app(hdrs)
            pos = rec_end
    return next_offset


class _Retry(Exception):
    """A fetch to retry after a metadata refresh."""


class _Gone(_Retry):
    """The cluster's metadata does not have the partition (its topic was deleted, or never
    had that partition): retried like any _Retry, and data loss once it lasts."""


GONE_GRACE_S = 5.0  # how long a partition must stay unknown before it counts as deleted


class RangeReader:
    """Fetches the records of offset ranges for one Spark task (one connection pool, one
    event loop, closed when the task's iterator ends)."""

    def __init__(self, kafka: Mapping[str, str], *, fail_on_data_loss: bool,
                 include_headers: bool, poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS) -> None:
        cfg: dict[str, Any] = {"client.id": "odradek-spark",
                               "max.partition.fetch.bytes": DEFAULT_PARTITION_FETCH_BYTES,
                               "allow.auto.create.topics": False}  # a read creates no topic
        cfg.update({k: v for k, v in kafka.items() if k not in ("group.id",
                                                                 "group.instance.id")})
        self.config = cfg
        self.fail_on_data_loss = fail_on_data_loss
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self.poll_timeout = poll_timeout_ms / 1000
        # Spark options are strings: "false" must turn the check off (bool("false") is True).
        self.check_crcs = str(cfg.get("check.crcs", True)).strip().lower() not in ("false",
                                                                                  "0")
        self._max_bytes = 0  # max.partition.fetch.bytes, raised if a batch does not fit
        self._aborted: AbortedTransactions | None = None  # of the last read_committed fetch
        self._loop: asyncio.AbstractEventLoop | None = None
        self._consumer: AsyncConsumer | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def _run(self, coro: Any) -> Any:
        assert self._loop is not None
        return self._loop.run_until_complete(coro)

    def open(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._consumer = self._run(started(lambda: AsyncConsumer(self.config)))

    def close(self) -> None:
        if self._loop is None:
            return
        try:
            if self._consumer is not None:
                self._run(self._consumer.close(autocommit=False))
        except Exception:  # closing must not hide the task's own outcome
            log.debug("closing the reader's consumer failed", exc_info=True)
        finally:
            loop, self._loop = self._loop, None
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    # -- reading -------------------------------------------------------------------------------
    def read(self, r: OffsetRange) -> Iterator[pa.RecordBatch]:
        """The records of `r` as Arrow batches, one batch per fetch."""
        tp = TopicPartition(r.topic, r.partition)
        pos = r.from_offset
        progress_at = time.monotonic()
        while pos < r.until_offset:
            try:
                data, hw = self._run(self._fetch(tp, pos))
            except _Retry as why:
                waited = time.monotonic() - progress_at
                if isinstance(why, _Gone) and waited > min(GONE_GRACE_S, self.poll_timeout):
                    # A new topic can be unknown to a broker for a moment; one that stays
                    # unknown was deleted after the read was planned (Spark: data loss).
                    self._data_loss(f"Cannot fetch offsets [{pos}, {r.until_offset}) of "
                                    f"{tp.topic}-{tp.partition}: {why}")
                    return
                if waited > self.poll_timeout:
                    raise TimeoutError(
                        f"Cannot fetch records in [{pos}, {r.until_offset}) of {tp.topic}-"
                        f"{tp.partition} within kafkaConsumer.pollTimeoutMs "
                        f"({int(self.poll_timeout * 1000)} ms): {why}") from None
                time.sleep(0.1)
                continue
            if data is None:  # OFFSET_OUT_OF_RANGE
                pos = self._out_of_range(tp, pos, r.until_offset, progress_at)
                continue
            cols = Columns()
            nxt = decode_into(cols, data, pos, r.until_offset, self.check_crcs,
                              self.include_headers, self._aborted)
            if cols:
                progress_at = time.monotonic()
                pos = max(cols.offsets[-1] + 1, nxt)
                yield cols.to_batch(tp.topic, tp.partition, self.schema)
            elif nxt > pos:
                progress_at = time.monotonic()
                pos = nxt  # only control batches or a gap (compaction)
            elif hw <= pos:
                # The log ends before the range does (a new leader may still be catching up
                # its high watermark; otherwise the records were truncated away).
                if time.monotonic() - progress_at > self.poll_timeout:
                    self._data_loss(f"Cannot fetch offset {pos} of {tp.topic}-{tp.partition}: "
                                    f"the log ends at {hw}, before the requested end "
                                    f"{r.until_offset}")
                    return
                time.sleep(0.1)
            else:
                # Records are there but no complete batch came back: fetch more bytes.
                if time.monotonic() - progress_at > self.poll_timeout:
                    raise TimeoutError(f"Cannot fetch a complete record batch at offset {pos} "
                                       f"of {tp.topic}-{tp.partition}")
                self._max_bytes = max(self._max_bytes, len(data)) * 2

    def _data_loss(self, message: str) -> None:
        if self.fail_on_data_loss:
            raise DataLossError(message + "\n" + INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_TRUE)
        log.warning("%s\n%s", message, INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_FALSE)

    def _out_of_range(self, tp: TopicPartition, pos: int, until: int, since: float) -> int:
        assert self._consumer is not None
        earliest = self._run(self._consumer.beginning_offsets([tp]))[tp]
        if pos < earliest:
            lost_to = min(earliest, until)
            self._data_loss(f"Cannot fetch offset {pos} of {tp.topic}-{tp.partition}: the "
                            f"earliest available offset is {earliest}; records "
                            f"[{pos}, {lost_to}) are lost")
            return lost_to
        latest = self._run(self._consumer.end_offsets([tp]))[tp]
        if time.monotonic() - since > self.poll_timeout:
            self._data_loss(f"Cannot fetch offset {pos} of {tp.topic}-{tp.partition}: the log "
                            f"ends at {latest}, before the requested end {until}")
            return until
        time.sleep(0.1)
        return pos

    async def _refresh(self) -> None:
        assert self._consumer is not None
        with contextlib.suppress(KafkaError, OSError, TimeoutError):
            await self._consumer.client.refresh_metadata()

    async def _fetch(self, tp: TopicPartition, pos: int) -> tuple[bytes | None, int]:
        """One Fetch of `tp` at `pos`: (record bytes, high watermark - the last stable offset
        under read_committed, whose aborted transactions are kept for decoding), (None, -1)
        when the offset is out of range; raises _Retry on leader changes and connection
        losses."""
        assert self._consumer is not None
        c = self._consumer
        client = c.client
        client.add_topics([tp.topic])
        leader = client.metadata.leader(tp)
        if leader is None:
            await self._refresh()
            leader = client.metadata.leader(tp)
        if leader is None:
            t = client.metadata.topics.get(tp.topic)
            if t is not None and (t.error == ErrorCode.unknown_topic_or_partition or (
                    t.error == ErrorCode.none and t.partitions
                    and tp.partition not in t.partitions)):
                raise _Gone("the cluster does not have this partition any more (the topic "
                            "was deleted after the read was planned?)")
            raise _Retry(f"no leader for {tp.topic}-{tp.partition}")
        try:
            resp = await client.send(
                leader, 1, request_timeout=c.request_timeout + c.fetch_max_wait_ms / 1000,
                replica_id=-1, max_wait=c.fetch_max_wait_ms, min_bytes=1,
                max_bytes=c.fetch_max_bytes, isolation_level=c.isolation_level,
                session_id=0, session_epoch=-1,
                topics=[{"topic": tp.topic, "partitions": [{
                    "partition": tp.partition, "current_leader_epoch": -1,
                    "fetch_offset": pos, "last_fetched_epoch": -1, "log_start_offset": -1,
                    "partition_max_bytes": max(c.max_partition_fetch_bytes,
                                               self._max_bytes)}]}],
                forgotten_topics_data=[], rack_id="")
        except (TimeoutError, KafkaError, OSError) as exc:
            if isinstance(exc, KafkaError) and not exc.retriable:
                raise
            client.node_failed(leader)
            await self._refresh()
            raise _Retry(f"fetch from broker {leader} failed: {exc}") from None
        top = getattr(resp, "error_code", ErrorCode.none)
        if top != ErrorCode.none:
            if ErrorCode(top).retriable:
                await self._refresh()
                raise _Retry(f"Fetch failed: {ErrorCode(top).name}")
            raise KafkaError.for_code(top, context="Fetch")
        for t in resp.responses:
            for p in t.partitions:
                if p.partition_index != tp.partition:
                    continue
                code = p.error_code
                if code == ErrorCode.none:
                    if c.isolation_level == READ_COMMITTED:
                        self._aborted = AbortedTransactions(aborted_of(p))
                        lso = getattr(p, "last_stable_offset", -1)
                        return bytes(p.records or b""), lso if lso >= 0 else p.high_watermark
                    return bytes(p.records or b""), p.high_watermark
                if code == ErrorCode.offset_out_of_range:
                    return None, -1
                if code in REFRESH_ERRORS or ErrorCode(code).retriable:
                    client.request_update()
                    await self._refresh()
                    raise _Retry(f"{ErrorCode(code).name} from broker {leader}")
                raise KafkaError.for_code(code, context=f"Fetch {tp.topic}-{tp.partition}")
        raise _Retry(f"broker {leader} did not answer for {tp.topic}-{tp.partition}")


def read_ranges(ranges: list[OffsetRange], kafka: Mapping[str, str], *,
                fail_on_data_loss: bool, include_headers: bool,
                poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS) -> Iterator[pa.RecordBatch]:
    """Every record of `ranges`, in order, as Arrow batches (what a Spark task yields)."""
    reader = RangeReader(kafka, fail_on_data_loss=fail_on_data_loss,
                         include_headers=include_headers, poll_timeout_ms=poll_timeout_ms)
    reader.open()
    try:
        for r in ranges:
            yield from reader.read(r)
    finally:
        reader.close()
