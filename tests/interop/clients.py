"""Thin, uniform wrappers over the real clients the interop tests drive.

Producers return what the client acknowledged; consumers read assigned partitions (no group
coordination: confluent-kafka insists on a group.id, so it gets one, with assign() and auto
commit off) from the beginning until they hold `expected` records or time out. Every client is
used with its DEFAULT settings except what a test names (compression, acks, ...).
"""

from __future__ import annotations

import asyncio
import struct
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

Header = tuple[str, bytes]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
KCAT = "/usr/bin/kcat"


@dataclass(frozen=True)
class Out:
    """A record to produce."""

    key: bytes
    value: bytes
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class In:
    """A record as a consumer read it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp_ms: int = -1


Acked = dict[bytes, tuple[int, int]]  # value -> (partition, offset)


def _opt_codec(codec: str) -> str | None:
    return None if codec == "none" else codec


# -- admin -------------------------------------------------------------------------------------
def create_topic(bootstrap: str, topic: str, partitions: int = 3,
                 config: dict[str, str] | None = None, timeout: float = 15) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})],
                              operation_timeout=timeout)[topic]
    fut.result(timeout)
    wait_for_leaders(bootstrap, topic, partitions, timeout)


def wait_for_leaders(bootstrap: str, topic: str, partitions: int, timeout: float = 15) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        # All topics: a request naming the topic would auto-create it if it were missing.
        md = admin.list_topics(timeout=5).topics.get(topic)
        if (md is not None and md.error is None and len(md.partitions) == partitions
                and all(p.leader >= 0 and p.error is None for p in md.partitions.values())):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic} has no leaders after {timeout}s: {md}")
        time.sleep(0.05)


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """partition -> (low, high) through ListOffsets (confluent-kafka)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in range(partitions)}
    finally:
        c.close()


# -- producers -----------------------------------------------------------------------------------
def produce_confluent(bootstrap: str, topic: str, records: list[Out], codec: str = "none",
                      extra: dict[str, object] | None = None, timeout: float = 30) -> Acked:
    from confluent_kafka import Producer

    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "compression.type": codec}
    conf.update(extra or {})
    p = Producer(conf)
    acked: Acked = {}
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.value()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

    for i, r in enumerate(records):
        kw: dict[str, object] = {}
        if r.timestamp_ms is not None:
            kw["timestamp"] = r.timestamp_ms
        p.produce(topic, key=r.key, value=r.value, headers=list(r.headers),
                  on_delivery=on_delivery, **kw)
        # Pauses: linger.ms passes, so a partition gets several batches and several Produce
        # requests can be in flight at once (the first waits for the connection to be up).
        if i == 99:
            p.flush(timeout)
        p.poll(0.01 if i % 100 == 99 else 0)
    left = p.flush(timeout)
    assert left == 0, f"confluent-kafka: {left} records undelivered after {timeout}s"
    assert not errors, f"confluent-kafka delivery errors: {errors[:5]}"
    return acked


KAFKA_PYTHON_CODEC_PACKAGES = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}


def require_kafka_python_codecs(*codecs: str) -> None:
    """kafka-python compresses and decompresses snappy, lz4 and zstd only with optional
    packages; say which one is missing rather than fail deep inside the client."""
    import kafka.codec as kc

    have = {"snappy": kc.has_snappy, "lz4": kc.has_lz4, "zstd": kc.has_zstd}
    missing = [KAFKA_PYTHON_CODEC_PACKAGES[c] for c in codecs if c in have and not have[c]()]
    assert not missing, f"kafka-python needs {missing} for these codecs: pip install {missing}"


def produce_kafka_python(bootstrap: str, topic: str, records: list[Out], codec: str = "none",
                         extra: dict[str, object] | None = None, timeout: float = 30) -> Acked:
    from kafka import KafkaProducer

    require_kafka_python_codecs(codec)
    p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=_opt_codec(codec),
                      **(extra or {}))
    try:
        futures = [(r, p.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                              timestamp_ms=r.timestamp_ms)) for r in records]
        p.flush(timeout)
        acked: Acked = {}
        for r, f in futures:
            md = f.get(timeout)
            acked[r.value] = (md.partition, md.offset)
        return acked
    finally:
        p.close(5)


def produce_aiokafka(bootstrap: str, topic: str, records: list[Out], codec: str = "none",
                     extra: dict[str, object] | None = None, timeout: float = 30) -> Acked:
    from aiokafka import AIOKafkaProducer

    async def run() -> Acked:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=_opt_codec(codec),
                             **(extra or {}))
        await p.start()
        try:
            futs = [await p.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                                 timestamp_ms=r.timestamp_ms) for r in records]
            mds = await asyncio.wait_for(asyncio.gather(*futs), timeout)
            return {r.value: (md.partition, md.offset) for r, md in zip(records, mds, strict=True)}
        finally:
            await p.stop()

    return asyncio.run(run())


def produce_kcat(bootstrap: str, topic: str, records: list[Out], codec: str = "none",
                 headers: tuple[Header, ...] = (), timeout: float = 30) -> Acked:
    """kcat -P: key<TAB>value lines; headers (-H) are the same for every record of a run, so
    records must all carry `headers`. kcat reports no offsets: returns {}."""
    for r in records:
        assert r.headers == headers, "kcat gives every record of one run the same headers"
        assert b"\t" not in r.key and b"\n" not in r.key + r.value
    cmd = [KCAT, "-P", "-b", bootstrap, "-t", topic, "-K", "\t", "-z", codec, "-q"]
    for name, value in headers:
        cmd += ["-H", f"{name}={value.decode()}"]
    lines = [r.key + b"\t" + r.value + b"\n" for r in records]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None
    try:
        for i in range(0, len(lines), 100):  # in parts, so partitions get several batches
            proc.stdin.write(b"".join(lines[i:i + 100]))
            proc.stdin.flush()
            time.sleep(0.05)
        _out, err = proc.communicate(timeout=timeout)  # closes stdin: kcat flushes, exits
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"kcat -P exited {proc.returncode}: {err.decode()}"
    return {}


# -- consumers -----------------------------------------------------------------------------------
def consume_confluent(bootstrap: str, topic: str, partitions: int, expected: int,
                      timeout: float = 20, extra: dict[str, object] | None = None
                      ) -> list[In]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    conf: dict[str, object] = {"bootstrap.servers": bootstrap,
                               "group.id": f"interop-{uuid.uuid4().hex[:8]}",
                               "enable.auto.commit": False}
    conf.update(extra or {})
    c = Consumer(conf)
    out: list[In] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, f"confluent-kafka consumer error: {m.error()}"
            out.append(In(m.partition(), m.offset(), m.key(), m.value(),
                          tuple(m.headers() or ()), m.timestamp()[1]))
    finally:
        c.close()
    return out


def consume_kafka_python(bootstrap: str, topic: str, partitions: int, expected: int,
                         timeout: float = 20) -> list[In]:
    from kafka import KafkaConsumer, TopicPartition

    require_kafka_python_codecs(*KAFKA_PYTHON_CODEC_PACKAGES)  # whatever the log holds
    c = KafkaConsumer(bootstrap_servers=bootstrap)  # group_id None: no coordinator
    out: list[In] = []
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning()
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for _tp, msgs in c.poll(500).items():
                out.extend(In(m.partition, m.offset, m.key, m.value, tuple(m.headers),
                              m.timestamp) for m in msgs)
    finally:
        c.close()
    return out


def consume_aiokafka(bootstrap: str, topic: str, partitions: int, expected: int,
                     timeout: float = 20) -> list[In]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[In]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap)  # group_id None
        await c.start()
        out: list[In] = []
        try:
            c.assign([TopicPartition(topic, p) for p in range(partitions)])
            await c.seek_to_beginning()
            deadline = time.monotonic() + timeout
            while len(out) < expected and time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=500)
                for _tp, msgs in batches.items():
                    out.extend(In(m.partition, m.offset, m.key, m.value, tuple(m.headers),
                                  m.timestamp) for m in msgs)
        finally:
            await c.stop()
        return out

    return asyncio.run(run())


def consume_kcat(bootstrap: str, topic: str, partitions: int, expected: int,
                 timeout: float = 20) -> list[In]:
    """kcat -C -e from the beginning; one line per record: partition, offset, key, value,
    headers (`%h`: name=value pairs joined by commas). Values must be printable."""
    fmt = "%p\t%o\t%k\t%s\t%h\n"
    res = subprocess.run([KCAT, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e",
                          "-q", "-f", fmt], capture_output=True, timeout=timeout)
    assert res.returncode == 0, f"kcat -C exited {res.returncode}: {res.stderr.decode()}"
    out = []
    for line in res.stdout.split(b"\n"):
        if not line:
            continue
        p, o, k, v, h = line.split(b"\t")
        headers = tuple((n.decode(), val) for n, _, val in
                        (pair.partition(b"=") for pair in h.split(b",") if pair))
        out.append(In(int(p), int(o), k, v, headers))
    return out


PRODUCERS = {"confluent": produce_confluent, "kafka-python": produce_kafka_python,
             "aiokafka": produce_aiokafka, "kcat": produce_kcat}
CONSUMERS = {"confluent": consume_confluent, "kafka-python": consume_kafka_python,
             "aiokafka": consume_aiokafka, "kcat": consume_kcat}


# -- the bytes on disk ---------------------------------------------------------------------------
def batch_headers(log_dir: Path, topic: str, partition: int) -> list[dict[str, int]]:
    """The v2 record batch headers of a partition, read straight from its segment files (base
    offset, length, leader epoch, magic, crc, attributes, last offset delta, timestamps,
    producer id, epoch, base sequence, record count): an independent look at what the broker
    stored."""
    out = []
    for seg in sorted((log_dir / f"{topic}-{partition}").glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            if length <= 0:
                break
            magic = data[pos + 16]
            assert magic == 2, f"{seg}: magic {magic} at position {pos}"
            attrs, last_delta = struct.unpack_from(">hi", data, pos + 21)
            pid, epoch, base_seq, count = struct.unpack_from(">qhii", data, pos + 43)
            out.append({"base_offset": base, "last_offset": base + last_delta,
                        "codec": attrs & 7, "pid": pid, "epoch": epoch, "base_seq": base_seq,
                        "count": count})
            pos += 12 + length
    return out


def codecs_on_disk(log_dir: Path, topic: str, partitions: int) -> set[str]:
    """The compression codecs of a topic's stored record batches."""
    names = {v: k for k, v in CODEC_IDS.items()}
    return {names.get(h["codec"], f"codec{h['codec']}")
            for p in range(partitions) for h in batch_headers(log_dir, topic, p)}
