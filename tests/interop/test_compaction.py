"""Compaction seen by real clients (S-2.7): confluent-kafka (librdkafka) produces keyed values
and tombstones to a compacted topic with an idempotent producer; after forced cleaner passes,
every real consumer reading from the beginning sees exactly the latest value per key, in offset
order, across the offset gaps and the empty batches the cleaner leaves (a producer's last batch,
and the last batch of each cleaned group, are kept with no records)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.cluster import Cluster

from .clients import CONSUMERS, Out, create_topic, produce_confluent

confluent_kafka = pytest.importorskip("confluent_kafka")

Expected = list[tuple[int, bytes, bytes | None]]


@pytest.fixture(scope="module")
def compacted() -> Iterator[tuple[str, Expected, int]]:
    cluster = Cluster(1, overrides={"log.cleaner.backoff.ms": "600000"}).start()
    try:
        bootstrap = cluster.bootstrap_servers
        create_topic(bootstrap, "compacted", 1, {
            "cleanup.policy": "compact", "segment.bytes": "2048",
            "min.cleanable.dirty.ratio": "0.01"})
        keys = [b"k%d" % i for i in range(8)]
        records = [Out(keys[i % 8], b"v%d" % i) for i in range(400)]
        # tombstones: k3 and k5 deleted, k5 after an earlier delete was overwritten
        records += [Out(b"k5", None), Out(b"k5", b"again")]  # type: ignore[arg-type]
        records += [Out(b"k3", None)]  # type: ignore[arg-type]
        records += [Out(b"k%d" % (j % 3), b"filler-%d" % j) for j in range(60)]
        acked = produce_confluent(bootstrap, "compacted", records,
                                  extra={"batch.size": 600, "enable.idempotence": True})
        # one partition, in order: record i is at offset i
        assert all(acked[rec.value] == (0, i) for i, rec in enumerate(records)
                   if rec.value is not None)
        broker = cluster.brokers[0]
        lm = broker.log_manager
        assert lm is not None
        lg = broker.replica_manager.partitions[("compacted", 0)].log
        assert lg.num_segments >= 3

        async def roll() -> None:  # on the broker's loop: everything below the active segment
            lg.roll()

        cluster.run(roll())
        passes = 0
        while cluster.run(lm.cleaner.clean_once_async()):
            passes += 1
        assert passes >= 1
        empty_batches = sum(1 for h in lg.iter_batch_headers() if h.records_count == 0)
        # the latest record of each key, tombstones included (kept for delete.retention.ms)
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for i, rec in enumerate(records):
            latest[rec.key] = (i, rec.value)
        expected = sorted((o, k, v) for k, (o, v) in latest.items())
        assert dict((k, v) for _o, k, v in expected)[b"k3"] is None
        assert dict((k, v) for _o, k, v in expected)[b"k5"] == b"again"
        yield bootstrap, expected, empty_batches
    finally:
        cluster.stop()


def test_the_log_holds_empty_batches(compacted: tuple[str, Expected, int]) -> None:
    """The consumers below are tested against empty batches, not only offset gaps."""
    assert compacted[2] >= 1


@pytest.mark.parametrize("client", sorted(CONSUMERS))
def test_consumer_sees_the_latest_value_per_key_after_cleaning(
        client: str, compacted: tuple[str, Expected, int]) -> None:
    bootstrap, expected, _ = compacted
    got = CONSUMERS[client](bootstrap, "compacted", 1, len(expected), timeout=30)
    rows = [(r.offset, r.key, r.value) for r in got]
    if client == "kcat":  # kcat prints a null value as an empty string
        expected = [(o, k, b"" if v is None else v) for o, k, v in expected]
    assert rows == expected
