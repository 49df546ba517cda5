"""Log compaction under kill -9 (S-2.7, S-2.5): a broker process cleans a compacted topic
continuously (tiny segments, cleaner backoff 20 ms, any dirty ratio) while an idempotent acks=all
producer overwrites 40 keys, and the process is killed with SIGKILL at random moments, cleaning
or not, and restarted on the same log dir. Every restart must recover a valid log, and at the end
the log must hold, for every key, a value at least as new as the last one acknowledged, every
record must be one that was written (offsets increasing, key and value matching), and the
cleaner must have removed most of what was written."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.chaos.environment.processes import BrokerProcess, free_ports

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]

KEYS = 40
ROUNDS = 6


def _produce_until(bootstrap: str, stop: threading.Event, first_seq: int,
                   acked: dict[bytes, int], rng: random.Random) -> int:
    """Overwrite keys until `stop`; values are b"<key>:<seq>" with seq increasing over the whole
    test, so the newest write of a key has the highest seq. Returns the next seq."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 2, "message.timeout.ms": 4000, "batch.num.messages": 50})
    lock = threading.Lock()

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            key, value = msg.key(), msg.value()  # type: ignore[attr-defined]
            seq = int(value.split(b":")[1])
            with lock:
                acked[key] = max(acked.get(key, -1), seq)

    seq = first_seq
    while not stop.is_set():
        key = b"k%02d" % rng.randrange(KEYS)
        try:
            p.produce("kv", key=key, value=key + b":%d" % seq, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.05)
            continue
        seq += 1
        if seq % 200 == 0:
            p.poll(0)
            time.sleep(0.005)
    p.flush(10)
    return seq


def _read_all(bootstrap: str, end: int) -> list[tuple[int, bytes, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-chaos",
                  "enable.auto.commit": False})
    rows: list[tuple[int, bytes, bytes]] = []
    try:
        c.assign([TopicPartition("kv", 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not rows or rows[-1][0] < end - 1):
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            rows.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return rows


def test_compacted_log_survives_kill9_while_cleaning(tmp_path: Path) -> None:
    rng = random.Random(7)
    broker = BrokerProcess(tmp_path / "broker", port=free_ports(1)[0], overrides={
        "log.cleaner.backoff.ms": "20", "auto.create.topics.enable": "false",
        "log.retention.check.interval.ms": "1000"})
    broker.start()
    try:
        bootstrap = broker.bootstrap
        assert bootstrap is not None
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("kv", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "4096",
            "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0"})])["kv"].result(30)

        acked: dict[bytes, int] = {}
        seq = 0
        for _ in range(ROUNDS):
            stop = threading.Event()
            result: list[int] = []
            t = threading.Thread(target=lambda s=seq, st=stop, out=result: out.append(
                _produce_until(bootstrap, st, s, acked, rng)))
            t.start()
            time.sleep(rng.uniform(0.8, 2.0))  # writing, rolling and cleaning all the while
            broker.kill()
            stop.set()
            t.join(30)
            assert result, "the producer thread did not finish"
            seq = result[0]
            broker.restart(clean=False)  # recovery of whatever the kill left must succeed
            assert broker.bootstrap == bootstrap

        # A last pass of writes with the broker up, then let the cleaner catch up.
        stop = threading.Event()
        timer = threading.Timer(1.0, stop.set)
        timer.start()
        seq = _produce_until(bootstrap, stop, seq, acked, rng)
        time.sleep(1.0)

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
        try:
            _low, high = c.get_watermark_offsets(TopicPartition("kv", 0), timeout=10)
        finally:
            c.close()
        rows = _read_all(bootstrap, high)
        assert rows and rows[-1][0] == high - 1, (len(rows), high)
        offsets = [o for o, _k, _v in rows]
        assert offsets == sorted(set(offsets)), "offsets must increase strictly"
        last: dict[bytes, int] = {}
        for _o, key, value in rows:
            k, _, s = value.partition(b":")
            assert k == key, (key, value)  # every record is one that was written
            assert int(s) < seq
            last[key] = int(s)
        for key, seq_acked in acked.items():
            assert last.get(key, -1) >= seq_acked, (key, last.get(key), seq_acked)
        # The cleaner ran through the kills: far fewer records than were acknowledged.
        assert len(acked) == KEYS
        assert len(rows) < high // 2, (len(rows), high)
        assert "Swapping in cleaned segment" in broker.stderr_text()
        assert broker.stop() == 0
        assert broker.exit_codes.count(-9) == ROUNDS
    finally:
        broker.close()
