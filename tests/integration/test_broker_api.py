"""One in-process broker spoken to over the wire: the APIs of S-1/S-2/S-3.6 and bad input."""

from __future__ import annotations

import asyncio
import datetime
import struct
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol import list_offsets_v0 as lo0
from odradek.protocol import records as rb
from odradek.protocol.records import decode_records, iter_headers
from tests.integration.broker_harness import (
    batch,
    client_for,
    create_topics,
    fetch,
    fetched_records,
    list_offsets,
    metadata,
    produce,
    req_module,
    run,
    running_broker,
)


def _offsets(data: bytes) -> list[int]:
    return [r.offset for r in decode_records(data)] if data else []


def _all_offsets(data: bytes) -> list[int]:
    out: list[int] = []
    for h in iter_headers(data):
        out += _offsets(data[h.position:h.position + h.size])
    return out


def test_produce_then_fetch_assigns_contiguous_offsets(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            r = await c.request(create_topics("t", 2))
            assert r.topics[0].error_code == ErrorCode.none
            bases = []
            for i in range(3):
                resp = await c.request(produce("t", 1, batch([b"a%d" % i, b"b%d" % i])))
                p = resp.responses[0].partition_responses[0]
                assert p.error_code == ErrorCode.none
                bases.append(p.base_offset)
            assert bases == [0, 2, 4]
            f = await c.request(fetch("t", 1, 0))
            part = f.responses[0].partitions[0]
            assert part.high_watermark == 6
            assert _all_offsets(part.records) == list(range(6))
            # From the middle of a batch: the whole batch comes back (Kafka's behaviour).
            f = await c.request(fetch("t", 1, 3))
            assert _all_offsets(fetched_records(f))[0] == 2
            # At the end: nothing; past the end: OFFSET_OUT_OF_RANGE.
            assert not fetched_records(await c.request(fetch("t", 1, 6)))
            f = await c.request(fetch("t", 1, 7))
            assert f.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
    run(body)


def test_corrupt_and_invalid_batches_are_refused_and_log_untouched(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("t"))
            good = bytearray(batch([b"x"]))
            flipped = bytearray(good)
            flipped[-1] ^= 0xFF
            cases = {
                ErrorCode.corrupt_message: bytes(flipped),
                ErrorCode.invalid_record: bytes(good[:16]) + b"\x01" + bytes(good[17:]),
            }
            for code, data in cases.items():
                resp = await c.request(produce("t", 0, data))
                assert resp.responses[0].partition_responses[0].error_code == code
            truncated = bytes(good[:-3])
            resp = await c.request(produce("t", 0, truncated))
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
            resp = await c.request(produce("t", 0, bytes(good)))
            assert resp.responses[0].partition_responses[0].base_offset == 0
            resp = await c.request(produce("nope", 0, bytes(good)))
            assert resp.responses[0].partition_responses[0].error_code == \
                ErrorCode.unknown_topic_or_partition
            f = await c.request(fetch("t", 0, 0))
            assert _all_offsets(fetched_records(f)) == [0]
    run(body)


def test_bad_frames_close_only_their_connection(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path, socket_request_max_bytes=1000) as broker:
            async with client_for(broker) as bad:
                await bad.raw(struct.pack(">i", 5000))  # over socket.request.max.bytes
                assert await bad.is_closed_by_peer()
            async with client_for(broker) as bad:
                await bad.raw(struct.pack(">i", -1))
                assert await bad.is_closed_by_peer()
            async with client_for(broker) as bad:  # unknown API key 999
                await bad.raw(struct.pack(">ihhi", 8, 999, 0, 1))
                assert await bad.is_closed_by_peer()
            async with client_for(broker) as bad:  # Metadata v12 header, garbage body
                payload = struct.pack(">hhi", 3, 12, 1) + b"\xff" * 7
                await bad.raw(struct.pack(">i", len(payload)) + payload)
                assert await bad.is_closed_by_peer()
            async with client_for(broker) as good:
                r = await good.request(metadata(None))
                assert r.brokers[0].node_id == 0
    run(body)


def test_api_versions_fallback_to_v0_with_unsupported_version(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            m = req_module(18, 3)
            r = await c.request(m.ApiVersionsRequest(client_software_name="t",
                                                     client_software_version="1"))
            keys = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
            # Produce is advertised from v0 as Kafka 4.0 does (librdkafka compresses only then);
            # v0-v2 requests themselves are refused.
            assert keys[0] == (0, 10) and keys[1] == (4, 16) and keys[18] == (0, 3)
            assert keys[4] == (0, 5) and keys[6] == (0, 7)  # LeaderAndIsr, UpdateMetadata
            assert keys[2] == (0, 7)  # ListOffsets: v0 as Kafka 2.8, v7 (KIP-734) as 3.0
            # ApiVersions v4 (newer than we support): v0-shaped answer, error 35.
            m4 = req_module(18, 4)
            c.send(m4.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
            payload = await c.read_frame()
            _cid, err, n = struct.unpack_from(">ihi", payload)
            assert err == ErrorCode.unsupported_version and n == len(keys)
    run(body)


def test_pipelined_requests_answer_in_order_and_acks0_has_no_response(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("t"))
            # A long-polling fetch first, then requests behind it on the same connection.
            f = fetch("t", 0, 0, max_wait_ms=300, min_bytes=10**6)
            ids = [c.send(f)]
            c.send(produce("t", 0, batch([b"fire-and-forget"]), acks=0))
            md = metadata(["t"])
            ids += [c.send(md) for _ in range(5)]
            got = [(await c.receive(f))[0]]
            for _ in range(5):
                got.append((await c.receive(md))[0])
            assert got == ids
            f2 = await c.request(fetch("t", 0, 0))
            assert [r.value for r in decode_records(fetched_records(f2))] == [b"fire-and-forget"]
    run(body)


def test_long_poll_fetch_completes_when_data_arrives(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as consumer, \
                client_for(broker) as producer:
            await producer.request(create_topics("t"))
            start = time.monotonic()
            waiting = asyncio.ensure_future(
                consumer.request(fetch("t", 0, 0, max_wait_ms=20_000, min_bytes=1)))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            await producer.request(produce("t", 0, batch([b"late"])))
            resp = await waiting
            # Completed by the append (DelayedFetch), far before max_wait.
            assert time.monotonic() - start < 10
            assert [r.value for r in decode_records(fetched_records(resp))] == [b"late"]
    run(body)


def test_first_batch_returned_even_if_larger_than_max_bytes(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("t"))
            big = batch([b"x" * 5000])
            await c.request(produce("t", 0, big))
            await c.request(produce("t", 0, batch([b"y"])))
            f = await c.request(fetch("t", 0, 0, max_bytes=100, partition_max_bytes=100))
            data = fetched_records(f)
            assert len(data) == len(big)  # exactly the first batch, whole
    run(body)


def test_list_offsets_earliest_latest_and_by_timestamp(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("t"))
            for i, ts in enumerate((1000, 2000, 3000)):
                await c.request(produce("t", 0, batch([b"%d" % i], timestamp_ms=ts)))

            async def lookup(ts: int) -> tuple[int, int]:
                r = await c.request(list_offsets("t", 0, ts))
                p = r.topics[0].partitions[0]
                return p.offset, p.timestamp
            assert (await lookup(-2))[0] == 0
            assert (await lookup(-1))[0] == 3
            assert await lookup(1500) == (1, 2000)
            assert await lookup(2000) == (1, 2000)
            assert await lookup(3001) == (-1, -1)
            assert await lookup(-3) == (2, 3000)
    run(body)


def test_list_offsets_v0_answers_segment_bases_and_the_log_end(tmp_path: Path) -> None:
    """ListOffsets v0 as raw bytes (Kafka 2.8 serves it; kio cannot encode it): the log end
    offset and the segments' base offsets, largest first, up to max_num_offsets; the
    connection stays open for the next request."""
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            r = await c.request(create_topics("t", configs={"segment.bytes": "200"}))
            assert r.topics[0].error_code == ErrorCode.none
            for i in range(6):
                await c.request(produce("t", 0, batch([b"%d" % i * 60])))

            async def v0(timestamp: int, max_num: int, topic: str = "t",
                         replica_id: int = -1) -> tuple[int, tuple[int, ...]]:
                request = lo0.ListOffsetsRequestV0(replica_id=replica_id, topics=(
                    lo0.ListOffsetsTopicV0(name=topic, partitions=(lo0.ListOffsetsPartitionV0(
                        partition_index=0, timestamp=timestamp, max_num_offsets=max_num),)),))
                c.correlation_id += 1
                await c.raw(lo0.encode_request_frame(request, c.correlation_id, "v0-test"))
                cid, response = lo0.decode_response_frame(await c.read_frame())
                assert cid == c.correlation_id
                (p,) = response.topics[0].partitions
                return p.error_code, p.old_style_offsets

            log = broker.replica_manager.partitions[("t", 0)].log
            bases = [s.base_offset for s in log.segments]
            assert len(bases) > 2
            assert await v0(-1, 100) == (0, (6, *reversed(bases)))
            assert await v0(-1, 1) == (0, (6,))
            assert await v0(-2, 100) == (0, (0,))
            assert await v0(int(time.time() * 1000) + 60_000, 2) == (0, (6, bases[-1]))
            assert await v0(1, 100) == (0, ())  # no segment file is that old
            assert await v0(-1, 1, topic="nope") == (ErrorCode.unknown_topic_or_partition, ())
            r = await c.request(list_offsets("t", 0, -1))
            assert r.topics[0].partitions[0].offset == 6
    run(body)


def test_idempotent_duplicates_and_sequence_gaps(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("t"))
            m = req_module(22, 4)
            r = await c.request(m.InitProducerIdRequest(
                transactional_id=None, transaction_timeout=datetime.timedelta(0), producer_id=-1,
                producer_epoch=-1))
            pid, epoch = r.producer_id, r.producer_epoch
            assert pid >= 0 and epoch == 0

            def b(seq: int, n: int = 2) -> bytes:
                return rb.build_batch([(None, b"v%d" % (seq + i)) for i in range(n)],
                                      producer_id=pid, producer_epoch=epoch, base_sequence=seq)
            first = await c.request(produce("t", 0, b(0)))
            again = await c.request(produce("t", 0, b(0)))  # a retry of the same batch
            p1 = first.responses[0].partition_responses[0]
            p2 = again.responses[0].partition_responses[0]
            assert p1.error_code == p2.error_code == ErrorCode.none
            assert p1.base_offset == p2.base_offset == 0
            gap = await c.request(produce("t", 0, b(5)))
            assert gap.responses[0].partition_responses[0].error_code == \
                ErrorCode.out_of_order_sequence_number
            nxt = await c.request(produce("t", 0, b(2)))
            assert nxt.responses[0].partition_responses[0].base_offset == 2
            f = await c.request(fetch("t", 0, 0))
            assert _all_offsets(fetched_records(f)) == [0, 1, 2, 3]
            # A second InitProducerId gets a different id.
            r2 = await c.request(m.InitProducerIdRequest(
                transactional_id=None, transaction_timeout=datetime.timedelta(0), producer_id=-1,
                producer_epoch=-1))
            assert r2.producer_id != pid
    run(body)


def test_topic_configs_max_message_bytes_and_log_append_time(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            r = await c.request(create_topics("small", configs={"max.message.bytes": "200"}))
            assert r.topics[0].error_code == ErrorCode.none
            resp = await c.request(produce("small", 0, batch([b"z" * 500])))
            assert resp.responses[0].partition_responses[0].error_code == \
                ErrorCode.message_too_large
            await c.request(create_topics("lat", configs={"message.timestamp.type":
                                                          "LogAppendTime"}))
            before = int(time.time() * 1000)
            resp = await c.request(produce("lat", 0, batch([b"a"], timestamp_ms=5)))
            p = resp.responses[0].partition_responses[0]
            assert p.log_append_time is not None
            f = await c.request(fetch("lat", 0, 0))
            ts = decode_records(fetched_records(f))[0].timestamp
            assert ts >= before
            bad = await c.request(create_topics("bad", configs={"retention.ms": "soon"}))
            assert bad.topics[0].error_code == ErrorCode.invalid_config
            unknown = await c.request(create_topics("bad2", configs={"no.such.config": "1"}))
            assert unknown.topics[0].error_code == ErrorCode.invalid_config
            dup = await c.request(create_topics("lat"))
            assert dup.topics[0].error_code == ErrorCode.topic_already_exists
            rf = await c.request(create_topics("rf", replication_factor=3))
            assert rf.topics[0].error_code == ErrorCode.invalid_replication_factor
            name = await c.request(create_topics("bad/name"))
            assert name.topics[0].error_code == ErrorCode.invalid_topic_exception
    run(body)


def test_retention_deletes_old_segments_and_advances_log_start(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("r", configs={"segment.bytes": "200",
                                                        "retention.ms": "1000"}))
            old = int(time.time() * 1000) - 60_000
            for i in range(6):
                await c.request(produce("r", 0, batch([b"%03d" % i * 30], timestamp_ms=old)))
            await c.request(produce("r", 0, batch([b"new"])))
            assert broker.log_manager is not None
            broker.log_manager.cleanup_logs(int(time.time() * 1000))
            start = (await c.request(list_offsets("r", 0, -2))).topics[0].partitions[0].offset
            assert start > 0
            f = await c.request(fetch("r", 0, 0))
            assert f.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
            f = await c.request(fetch("r", 0, start))
            assert _all_offsets(fetched_records(f))[-1] == 6
    run(body)


def test_auto_create_and_delete_topics(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path, num_partitions=3) as broker, client_for(broker) as c:
            r = await c.request(metadata(["auto"]))
            assert r.topics[0].error_code in (ErrorCode.leader_not_available, ErrorCode.none)
            for _ in range(100):
                r = await c.request(metadata(["auto"]))
                if r.topics[0].error_code == ErrorCode.none:
                    break
                await asyncio.sleep(0.02)
            assert len(r.topics[0].partitions) == 3
            assert all(p.leader_id == 0 for p in r.topics[0].partitions)
            r = await c.request(metadata(["not-created"], auto_create=False))
            assert r.topics[0].error_code == ErrorCode.unknown_topic_or_partition
            m = req_module(20, 6)
            d = await c.request(m.DeleteTopicsRequest(
                topics=(m.DeleteTopicState(name="auto", topic_id=None),),
                timeout=datetime.timedelta(seconds=10)))
            assert d.responses[0].error_code == ErrorCode.none
            r = await c.request(metadata(None))
            assert "auto" not in {t.name for t in r.topics}
            assert not list(tmp_path.glob("auto-*[0-9]"))
    run(body)


def test_restart_serves_every_record_again(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("t", 2, configs={"segment.bytes": "300"}))
            for i in range(20):
                await c.request(produce("t", i % 2, batch([b"r%02d" % i])))
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            for p in (0, 1):
                f = await c.request(fetch("t", p, 0))
                assert _all_offsets(fetched_records(f)) == list(range(10))
            resp = await c.request(produce("t", 0, batch([b"after"])))
            assert resp.responses[0].partition_responses[0].base_offset == 10
    run(body)


@pytest.mark.parametrize("version", [3, 7, 9, 10])
def test_every_advertised_produce_version(tmp_path: Path, version: int) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("t"))
            resp = await c.request(produce("t", 0, batch([b"v"]), version=version))
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
    run(body)


@pytest.mark.parametrize("version", [4, 7, 11, 12])
def test_every_advertised_fetch_version(tmp_path: Path, version: int) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("t"))
            await c.request(produce("t", 0, batch([b"v"])))
            f = await c.request(fetch("t", 0, 0, version=version))
            assert [r.value for r in decode_records(fetched_records(f))] == [b"v"]
    run(body)
