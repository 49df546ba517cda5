"""odradek.client.two_phase: a transaction written and flushed by one producer, left open, and
committed or aborted from elsewhere by (transactional id, producer id, epoch) through
FindCoordinator(key type 1) + EndTxn, as Flink's Kafka sink resumes a pre-committed one; a
replayed commit is harmless; a fenced or timed-out transaction is a TransactionLostError."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from odradek.client import Admin, NewTopic, OffsetAndMetadata, TopicPartition
from odradek.client.two_phase import (
    TransactionLostError,
    TwoPhaseProducer,
    finish_transactions,
)
from odradek.cluster import Cluster
from tests.interop.spark_helpers import read_values, wait_until


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(brokers=3, overrides={"transaction.abort.timed.out.transaction.cleanup."
                                      "interval.ms": 500}).start()
    try:
        yield c
    finally:
        c.stop()


def _bs(c: Cluster) -> str:
    assert c.inner is not None
    return c.inner.bootstrap_servers


def _topic(bs: str, name: str, partitions: int = 2, replication: int = 1) -> str:
    with Admin({"bootstrap.servers": bs}) as a:
        a.create_topics([NewTopic(name, partitions, replication)])
        a.wait_for_topics([name], timeout=30)
    return name


def _write(bs: str, tid: str, topic: str, values: list[bytes], **cfg: object):
    with TwoPhaseProducer({"bootstrap.servers": bs, "transactional.id": tid, **cfg}) as p:
        p.begin()
        p.send_rows((topic, v, None, None, None) for v in values)
        p.send_offsets({TopicPartition(topic, 0): OffsetAndMetadata(7, "batch 7")}, tid)
        return p.prepare()


def test_commit_from_another_client_and_replay(cluster: Cluster) -> None:
    bs = _bs(cluster)
    topic = _topic(bs, "two-phase-commit")
    values = [f"v{i}".encode() for i in range(50)]
    prepared = _write(bs, "tp-commit-0", topic, values)
    assert prepared.producer_id >= 0 and prepared.started
    assert read_values(bs, topic, 2) == []  # open: invisible under read_committed
    finish_transactions({"bootstrap.servers": bs}, [prepared], commit=True)
    assert sorted(read_values(bs, topic, 2)) == sorted(values)
    # The offsets were committed with the records.
    with Admin({"bootstrap.servers": bs}) as a:
        got = a.list_consumer_group_offsets("tp-commit-0")
    assert got[TopicPartition(topic, 0)].metadata == "batch 7"
    # A replayed commit (the driver died after EndTxn, before recording it) is harmless.
    finish_transactions({"bootstrap.servers": bs}, [prepared], commit=True)
    assert sorted(read_values(bs, topic, 2)) == sorted(values)


def test_abort_and_fencing(cluster: Cluster) -> None:
    bs = _bs(cluster)
    topic = _topic(bs, "two-phase-abort")
    first = _write(bs, "tp-fence-0", topic, [b"a1", b"a2"])
    finish_transactions({"bootstrap.servers": bs}, [first], commit=False)
    assert read_values(bs, topic, 2) == []
    # A retried attempt's InitProducerId fences an earlier attempt's open transaction.
    stale = _write(bs, "tp-fence-1", topic, [b"old"])
    fresh = _write(bs, "tp-fence-1", topic, [b"new"])
    assert (fresh.producer_id, fresh.producer_epoch) != (stale.producer_id,
                                                          stale.producer_epoch)
    with pytest.raises(TransactionLostError, match="newer producer"):
        finish_transactions({"bootstrap.servers": bs}, [stale], commit=True)
    finish_transactions({"bootstrap.servers": bs}, [fresh], commit=True)
    assert read_values(bs, topic, 2) == [b"new"]


def test_timed_out_transaction_is_lost(cluster: Cluster) -> None:
    bs = _bs(cluster)
    topic = _topic(bs, "two-phase-timeout")
    prepared = _write(bs, "tp-timeout-0", topic, [b"late"],
                      **{"transaction.timeout.ms": 1000})
    time.sleep(3.0)
    with pytest.raises(TransactionLostError):
        finish_transactions({"bootstrap.servers": bs}, [prepared], commit=True)
    assert read_values(bs, topic, 2) == []


def test_timeout_above_broker_max_is_a_clear_error(cluster: Cluster) -> None:
    bs = _bs(cluster)
    with pytest.raises(Exception, match=r"(?i)invalid.transaction.timeout"):
        _write(bs, "tp-too-long", _topic(bs, "two-phase-max"), [b"x"],
               **{"transaction.timeout.ms": 3_600_000})


def test_commit_after_the_coordinator_moved(cluster: Cluster) -> None:
    """The coordinator's broker dies between prepare and commit: EndTxn finds the new one
    (FindCoordinator again after the lost connection / NOT_COORDINATOR)."""
    bs = _bs(cluster)
    topic = _topic(bs, "two-phase-moved", 1, 3)
    prepared = _write(bs, "tp-moved-0", topic, [b"m1", b"m2", b"m3"])
    with Admin({"bootstrap.servers": bs}) as a:
        node = a.describe_transactions(["tp-moved-0"])["tp-moved-0"].coordinator_id
    cluster.faults.kill(node)
    try:
        finish_transactions({"bootstrap.servers": bs}, [prepared], commit=True, timeout=90)
        # EndTxn answers once PrepareCommit is logged; the markers that make the records
        # visible to read_committed follow (the partition's leader may have moved too).
        wait_until(lambda: sorted(read_values(bs, topic, 1)) == [b"m1", b"m2", b"m3"], 30,
                   "the committed records visible to read_committed")
    finally:
        cluster.faults.restart(node, clean=False)
