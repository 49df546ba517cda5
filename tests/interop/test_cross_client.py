"""Keyed records with headers, in every compression codec, written by one client and read back
exactly by a DIFFERENT client: keys, values, headers, per-partition offsets strictly increasing,
per-key order kept, and the codec the producer chose is what the log holds."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

from .clients import (
    CODECS,
    CONSUMERS,
    PRODUCERS,
    Acked,
    In,
    Out,
    batch_headers,
    codecs_on_disk,
    create_topic,
    watermarks,
)
from .conftest import BrokerProcess, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

PAIRS = [
    ("confluent", "kafka-python"),
    ("kafka-python", "aiokafka"),
    ("aiokafka", "confluent"),
    ("kcat", "confluent"),
    ("confluent", "kcat"),
]
PARTITIONS = 3
KEYS = [f"key-{k}".encode() for k in "abcdefgh"]
PER_KEY = 40
KCAT_HEADERS = (("src", b"kcat"), ("dup", b"1"), ("dup", b"2"), ("trace", b"abc-123"))


def make_records(producer: str, printable: bool) -> list[Out]:
    """PER_KEY records per key, keys interleaved. Values carry (key, seq) so order can be
    checked; a compressible body so the codecs have something to do; binary bytes (and a
    repeated header name, an empty header value) where the clients can carry them."""
    out = []
    for seq in range(PER_KEY):
        for key in KEYS:
            body = (f"{key.decode()}|{seq:04d}|" + "payload-" * (20 + seq)).encode()
            if printable:
                out.append(Out(key, body, KCAT_HEADERS))
            else:
                out.append(Out(key, body + bytes([0, 9, 10, 255, seq]), (
                    ("src", producer.encode()), ("seq", str(seq).encode()),
                    ("dup", b"first"), ("dup", b"second"), ("empty", b""),
                    ("bin", bytes([0, 1, 2, 254, 255])))))
    return out


def check_read_back(sent: list[Out], got: list[In], acked: Acked,
                    marks: dict[int, tuple[int, int]]) -> None:
    by_value = {r.value: r for r in sent}
    values = [r.value for r in got]
    missing = set(by_value) - set(values)
    assert not missing, f"{len(missing)} of {len(sent)} records not read back, e.g. " \
        f"{sorted(missing)[:3]}"
    assert len(values) == len(set(values)), "a record was read twice"
    assert len(got) == len(sent), f"read {len(got)} records, sent {len(sent)}"
    total = sum(hi - lo for lo, hi in marks.values())
    assert total == len(sent), f"the log holds {total} records, {len(sent)} were sent: {marks}"

    for r in got:
        s = by_value[r.value]
        assert r.key == s.key, f"key {r.key!r} != {s.key!r}"
        assert list(r.headers) == list(s.headers), \
            f"headers of {s.value[:20]!r}: {r.headers} != {s.headers}"
        if acked:
            assert (r.partition, r.offset) == acked[r.value], \
                f"{s.value[:20]!r} read at {(r.partition, r.offset)}, acked at {acked[r.value]}"

    offsets: dict[int, list[int]] = defaultdict(list)
    key_partition: dict[bytes, set[int]] = defaultdict(set)
    key_seqs: dict[bytes, list[int]] = defaultdict(list)
    for r in got:
        offsets[r.partition].append(r.offset)
        key_partition[r.key].add(r.partition)  # type: ignore[index]
        key_seqs[r.key].append(int(r.value.split(b"|")[1]))  # type: ignore[index, union-attr]
    for p, offs in offsets.items():
        assert all(a < b for a, b in itertools.pairwise(offs)), \
            f"partition {p}: offsets not strictly increasing: {offs}"
        lo, hi = marks[p]
        assert offs[0] == lo and offs[-1] == hi - 1, f"partition {p}: {offs} vs {marks[p]}"
    for key, parts in key_partition.items():
        assert len(parts) == 1, f"key {key!r} spread over partitions {parts}"
        assert key_seqs[key] == list(range(PER_KEY)), f"key {key!r} order: {key_seqs[key]}"
    assert len(offsets) > 1, "all keys went to one partition: the test would prove little"


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(("producer", "consumer"), PAIRS, ids=[f"{p}->{c}" for p, c in PAIRS])
def test_keyed_records_with_headers_cross_client(broker: BrokerProcess, producer: str,
                                                 consumer: str, codec: str) -> None:
    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic(f"x-{producer}-{consumer}-{codec}")
    create_topic(bs, topic, PARTITIONS)
    printable = "kcat" in (producer, consumer)
    sent = make_records(producer, printable)
    if producer == "kcat":
        acked = PRODUCERS[producer](bs, topic, sent, codec, headers=KCAT_HEADERS)
    else:
        acked = PRODUCERS[producer](bs, topic, sent, codec)
        assert len(acked) == len(sent)
    got = CONSUMERS[consumer](bs, topic, PARTITIONS, len(sent))
    check_read_back(sent, got, acked, watermarks(bs, topic, PARTITIONS))
    assert broker.log_dir is not None
    assert codecs_on_disk(broker.log_dir, topic, PARTITIONS) == {codec}
    batches = sum(len(batch_headers(broker.log_dir, topic, p)) for p in range(PARTITIONS))
    assert batches > PARTITIONS, f"{batches} batches: per-key order was never tested across " \
        "batches"


NULLS = [  # (key, value, headers): null and empty are different things on the wire
    (None, b"null key", (("h", b"v"),)),
    (b"", b"empty key", ()),
    (b"tombstone", None, (("why", b"deleted"),)),
    (b"empty-value", b"", (("empty", b""),)),
    (b"no-headers", b"x", ()),
]


@pytest.mark.parametrize("consumer", ["kafka-python", "aiokafka", "confluent"])
def test_null_and_empty_keys_values_headers(broker: BrokerProcess, consumer: str) -> None:
    """Null (length -1) and empty (length 0) keys and values, and empty header values, written
    by confluent-kafka, read back as such by each consumer."""
    from confluent_kafka import Producer

    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic(f"nulls-{consumer}")
    create_topic(bs, topic, 1)
    p = Producer({"bootstrap.servers": bs})
    for key, value, headers in NULLS:
        p.produce(topic, key=key, value=value, headers=list(headers), partition=0)
    assert p.flush(15) == 0
    got = CONSUMERS[consumer](bs, topic, 1, len(NULLS))
    assert [(r.offset, r.key, r.value, tuple(r.headers)) for r in got] == \
        [(i, k, v, h) for i, (k, v, h) in enumerate(NULLS)]
