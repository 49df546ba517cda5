"""The exactly-once sink's transaction timeout, deterministically (no Spark job, no racing a
slow UDF): the two phases of `odradek.spark.eos` driven directly, as a task
(`write_transactional`, outside Spark: partition 0, no micro-batch) and the driver
(`commit_all`) run them, on a broker with a small transaction.max.timeout.ms and a short
transaction.abort.timed.out.transaction.cleanup.interval.ms.

* kafka.transaction.timeout.ms above the broker's transaction.max.timeout.ms: InitProducerId
  answers INVALID_TRANSACTION_TIMEOUT and the sink says which option to lower.
* A micro-batch outliving kafka.transaction.timeout.ms: the coordinator aborts its transaction
  (Kafka's TransactionCoordinator.abortTimedOutTransactions, bumping the epoch), the driver's
  EndTxn COMMIT answers PRODUCER_FENCED / INVALID_PRODUCER_EPOCH, and the sink's error names
  the timeout; read_committed readers see nothing of the batch (read_uncommitted shows its
  records were written).
* A commit fenced for another reason (a newer attempt's InitProducerId) within the timeout is
  not blamed on the timeout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from kio.schema.errors import ErrorCode

from odradek.client import Admin
from odradek.client.two_phase import TransactionLostError, TwoPhaseProducer
from odradek.cluster import Cluster
from odradek.spark.eos import EXACTLY_ONCE, Delivery, TaskTxn, commit_all, write_transactional
from odradek.spark.offsets import OptionError
from tests.interop.spark_helpers import (
    bootstrap,
    create_topic,
    read_values,
    start_cluster,
    topic_name,
)

MAX_TIMEOUT_MS = 5000  # the broker's transaction.max.timeout.ms
FENCED = {int(ErrorCode.producer_fenced), int(ErrorCode.invalid_producer_epoch)}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = start_cluster(1, **{"transaction.max.timeout.ms": MAX_TIMEOUT_MS,
                            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    try:
        yield c
    finally:
        c.stop()


def _write(bs: str, topic: str, prefix: str, timeout_ms: int, n: int = 20) -> TaskTxn:
    """Phase one as a task runs it: `n` rows in a transaction left open."""
    batch = pa.RecordBatch.from_pydict({"value": [f"{prefix}-{i}".encode() for i in range(n)]})

    def rows_of(b: pa.RecordBatch) -> list[tuple[str, Any, Any, None, None]]:
        return [(topic, v, None, 0, None) for v in b.column("value").to_pylist()]

    written, txn = write_transactional(iter([batch]), rows_of, {"bootstrap.servers": bs},
                                       Delivery(EXACTLY_ONCE, prefix, timeout_ms))
    assert written == n and txn.prepared is not None
    return txn


def _wait_aborted_by_coordinator(bs: str, tid: str, epoch: int, timeout: float = 20) -> None:
    """Until the coordinator has aborted the timed-out transaction: epoch bumped, markers
    written."""
    deadline = time.monotonic() + timeout
    with Admin({"bootstrap.servers": bs}) as admin:
        while True:
            d = admin.describe_transactions([tid])[tid]
            if d.producer_epoch > epoch and d.state == "CompleteAbort":
                return
            assert time.monotonic() < deadline, f"{tid} not aborted after {timeout}s: {d}"
            time.sleep(0.1)


def test_timeout_above_the_brokers_max_is_a_clear_error(cluster: Cluster) -> None:
    bs = bootstrap(cluster)
    topic = topic_name("eos-max")
    create_topic(bs, topic, 1)
    with pytest.raises(OptionError, match=(
            rf"kafka\.transaction\.timeout\.ms={MAX_TIMEOUT_MS + 1000} was refused .*"
            r"INVALID_TRANSACTION_TIMEOUT.* at most the brokers' transaction\.max\.timeout\.ms")):
        _write(bs, topic, "eos-max", MAX_TIMEOUT_MS + 1000)
    assert read_values(bs, topic, 1, read_committed=False) == []


def test_a_batch_committed_after_its_transaction_timed_out(cluster: Cluster) -> None:
    bs = bootstrap(cluster)
    topic = topic_name("eos-late")
    create_topic(bs, topic, 1)
    txn = _write(bs, topic, "eos-late", 2000)
    assert txn.prepared is not None
    _wait_aborted_by_coordinator(bs, txn.prepared.transactional_id, txn.prepared.producer_epoch)
    with pytest.raises(OptionError, match=(
            r"micro-batch 7 took \d+ ms from its first transaction to its commit, more than "
            r"kafka\.transaction\.timeout\.ms=2000: the coordinator aborted")) as err:
        commit_all({"bootstrap.servers": bs}, [txn], Delivery(EXACTLY_ONCE, "eos-late", 2000),
                   "micro-batch 7")
    lost = err.value.__cause__
    assert isinstance(lost, TransactionLostError) and lost.code in FENCED, repr(lost)
    assert read_values(bs, topic, 1) == []
    assert len(read_values(bs, topic, 1, read_committed=False)) == 20  # written, then aborted


def test_a_commit_fenced_within_the_timeout_is_not_blamed_on_it(cluster: Cluster) -> None:
    bs = bootstrap(cluster)
    topic = topic_name("eos-fenced")
    create_topic(bs, topic, 1)
    txn = _write(bs, topic, "eos-fenced", MAX_TIMEOUT_MS)
    assert txn.prepared is not None
    # A retried attempt of the same task: its InitProducerId fences and aborts the first.
    with TwoPhaseProducer({"bootstrap.servers": bs, "transaction.timeout.ms": MAX_TIMEOUT_MS,
                           "transactional.id": txn.prepared.transactional_id}) as newer:
        newer.begin()
    with pytest.raises(TransactionLostError, match="newer producer") as err:
        commit_all({"bootstrap.servers": bs}, [txn],
                   Delivery(EXACTLY_ONCE, "eos-fenced", MAX_TIMEOUT_MS), "micro-batch 8")
    assert not isinstance(err.value, OptionError) and err.value.code in FENCED
    assert read_values(bs, topic, 1) == []
