"""The transactional producer's state machine (client/transaction_manager.py), its
classification of coordinator answers, and its coordinator requests' retries against a scripted
coordinator (client/txn_requests.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as E

from odradek.client import AsyncProducer
from odradek.client.errors import (
    ConfigException,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
)
from odradek.client.transaction_manager import (
    VALID_PREVIOUS,
    Outcome,
    TransactionManager,
    TxnApi,
    TxnState,
    classify,
    is_transition_valid,
)
from odradek.client.txn_requests import TransactionalRequests, add_partitions_outcome, offsets_of
from odradek.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

S = TxnState
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def ready() -> TransactionManager:
    m = TransactionManager("tx")
    m.begin_init()
    m.initialized(7, 0)
    return m


# -- the table ------------------------------------------------------------------------------------
def test_transition_table_is_kafkas() -> None:
    # TransactionManager.State.isTransitionValid of Kafka's client, spelled out
    kafka = {
        S.UNINITIALIZED: {S.READY, S.ABORTABLE_ERROR},
        S.INITIALIZING: {S.UNINITIALIZED, S.ABORTING_TRANSACTION},
        S.READY: {S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION},
        S.IN_TRANSACTION: {S.READY},
        S.COMMITTING_TRANSACTION: {S.IN_TRANSACTION},
        S.ABORTING_TRANSACTION: {S.IN_TRANSACTION, S.ABORTABLE_ERROR},
        S.ABORTABLE_ERROR: {S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR,
                            S.INITIALIZING},
    }
    for target, sources in kafka.items():
        assert VALID_PREVIOUS[target] == sources
    assert all(is_transition_valid(s, S.FATAL_ERROR) for s in TxnState)


def test_commit_and_abort_cycles() -> None:
    m = ready()
    assert m.state is S.READY and m.producer_id == 7
    m.begin_transaction()
    m.maybe_add_partition(TP0)
    m.maybe_add_partition(TP0)
    assert m.take_new_partitions() == [TP0] and not m.may_send_to(TP0)
    m.partitions_added([TP0])
    assert m.may_send_to(TP0) and m.transaction_started
    m.begin_commit()
    m.complete_transaction()
    assert m.state is S.READY and not m.partitions_in_txn and not m.transaction_started
    m.begin_transaction()
    m.begin_abort()
    m.complete_transaction()
    assert m.state is S.READY


def test_sending_outside_a_transaction_raises() -> None:
    m = TransactionManager("tx")
    with pytest.raises(IllegalStateError, match="before completing a call to initTransactions"):
        m.maybe_add_partition(TP0)
    m = ready()
    with pytest.raises(IllegalStateError,
                       match="Cannot add partition t-0 to transaction while in state  READY"):
        m.maybe_add_partition(TP0)
    with pytest.raises(IllegalStateError, match="Cannot send offsets if a transaction is not"):
        m.check_send_offsets()
    with pytest.raises(IllegalStateError, match="Invalid transition attempted from state READY "
                       "to state COMMITTING_TRANSACTION"):
        m.begin_commit()
    assert m.state is S.READY  # a refused transition changes nothing


def test_abortable_error_then_abort_bumps_the_epoch() -> None:
    m = ready()
    m.begin_transaction()
    m.batch_failed(int(E.not_enough_replicas), KafkaError.for_code(E.not_enough_replicas))
    assert m.state is S.ABORTABLE_ERROR and m.epoch_bump_required
    with pytest.raises(KafkaError, match="Cannot execute transactional method because we are "
                       "in an error state"):
        m.begin_commit()
    with pytest.raises(KafkaError):
        m.maybe_add_partition(TP1)
    m.begin_abort()
    m.complete_transaction()
    assert m.state is S.INITIALIZING  # the next epoch is asked for before the next transaction
    m.initialized(7, 1)
    assert m.state is S.READY and not m.epoch_bump_required


def test_fatal_errors_end_the_producer() -> None:
    m = ready()
    m.begin_transaction()
    m.batch_failed(int(E.producer_fenced), KafkaError.for_code(E.producer_fenced))
    assert m.state is S.FATAL_ERROR
    with pytest.raises(ProducerFencedError):
        m.begin_abort()
    with pytest.raises(ProducerFencedError):
        m.begin_transaction()
    with pytest.raises(ProducerFencedError):
        m.begin_init()


@pytest.mark.parametrize(("api", "code", "outcome"), [
    (TxnApi.INIT_PRODUCER_ID, E.coordinator_load_in_progress, Outcome.RETRY),
    (TxnApi.INIT_PRODUCER_ID, E.concurrent_transactions, Outcome.RETRY),
    (TxnApi.INIT_PRODUCER_ID, E.not_coordinator, Outcome.FIND_COORDINATOR),
    (TxnApi.INIT_PRODUCER_ID, E.transactional_id_authorization_failed, Outcome.ABORTABLE),
    (TxnApi.INIT_PRODUCER_ID, E.producer_fenced, Outcome.FATAL),
    (TxnApi.ADD_PARTITIONS, E.concurrent_transactions, Outcome.RETRY),
    (TxnApi.ADD_PARTITIONS, E.topic_authorization_failed, Outcome.ABORTABLE),
    (TxnApi.ADD_PARTITIONS, E.invalid_producer_epoch, Outcome.FATAL),
    (TxnApi.ADD_PARTITIONS, E.transactional_id_authorization_failed, Outcome.FATAL),
    (TxnApi.ADD_PARTITIONS, E.invalid_txn_state, Outcome.FATAL),
    (TxnApi.END_TXN, E.coordinator_not_available, Outcome.FIND_COORDINATOR),
    (TxnApi.END_TXN, E.invalid_producer_epoch, Outcome.FATAL),
    (TxnApi.END_TXN, E.unknown_producer_id, Outcome.ABORTABLE),
    (TxnApi.END_TXN, E.invalid_txn_state, Outcome.FATAL),
    (TxnApi.ADD_OFFSETS, E.group_authorization_failed, Outcome.ABORTABLE),
    (TxnApi.TXN_OFFSET_COMMIT, E.request_timed_out, Outcome.FIND_COORDINATOR),
    (TxnApi.TXN_OFFSET_COMMIT, E.unknown_topic_or_partition, Outcome.RETRY),
    (TxnApi.TXN_OFFSET_COMMIT, E.illegal_generation, Outcome.ABORTABLE),
    (TxnApi.TXN_OFFSET_COMMIT, E.fenced_instance_id, Outcome.ABORTABLE),
    (TxnApi.TXN_OFFSET_COMMIT, E.producer_fenced, Outcome.FATAL),
    (TxnApi.PRODUCE, E.invalid_producer_epoch, Outcome.ABORTABLE),  # KIP-588
    (TxnApi.PRODUCE, E.producer_fenced, Outcome.FATAL),
    (TxnApi.PRODUCE, E.transactional_id_authorization_failed, Outcome.FATAL),
    (TxnApi.PRODUCE, E.topic_authorization_failed, Outcome.ABORTABLE),
    (TxnApi.END_TXN, E.none, Outcome.DONE),
])
def test_classification(api: TxnApi, code: E, outcome: Outcome) -> None:
    assert classify(api, int(code)) is outcome


def test_add_partitions_outcome_prefers_retry_and_fatal() -> None:
    ok, auth = int(E.none), int(E.topic_authorization_failed)
    assert add_partitions_outcome({TP0: ok, TP1: ok})[0] is Outcome.DONE
    assert add_partitions_outcome({TP0: int(E.operation_not_attempted), TP1: auth}) == \
        (Outcome.ABORTABLE, auth)
    assert add_partitions_outcome({TP0: auth, TP1: int(E.concurrent_transactions)})[0] is \
        Outcome.RETRY


# -- random operation sequences -----------------------------------------------------------------
OPS = ["init", "initialized", "begin", "add", "added", "commit", "abort", "complete",
       "abortable", "fatal"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(OPS), max_size=30))
# an InitProducerId answer while a commit was in flight took COMMITTING to READY with the
# committing transaction's partition still pending, and then in the transaction
@example(ops=["init", "initialized", "begin", "add", "commit", "initialized", "added"])
def test_random_operations_only_take_valid_transitions(ops: list[str]) -> None:
    m = TransactionManager("tx")
    for op in ops:
        before = m.state
        try:
            {"init": m.begin_init,
             "initialized": lambda: m.initialized(1, max(0, m.producer_epoch + 1)),
             "begin": m.begin_transaction,
             "add": lambda: m.maybe_add_partition(TP0),
             "added": lambda: m.partitions_added(m.take_new_partitions()),
             "commit": m.begin_commit,
             "abort": m.begin_abort,
             "complete": m.complete_transaction,
             "abortable": lambda: m.abortable_error(KafkaError("boom")),
             "fatal": lambda: m.fatal_error(KafkaError("fatal"))}[op]()
        except KafkaError:
            assert m.state is before  # a refused call leaves the state alone
            continue
        assert m.state is before or is_transition_valid(before, m.state)
        if m.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
            assert m.last_error is not None
        if m.partitions_in_txn:
            assert m.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION,
                               S.ABORTING_TRANSACTION, S.ABORTABLE_ERROR, S.FATAL_ERROR)
        if before is S.FATAL_ERROR:
            assert m.state is S.FATAL_ERROR  # never left


# -- the producer's face ------------------------------------------------------------------------
def test_producer_config_and_send_checks() -> None:
    with pytest.raises(ConfigException, match="without also enabling idempotence"):
        AsyncProducer({"bootstrap.servers": "h:1", "transactional.id": "t",
                       "enable.idempotence": False})
    with pytest.raises(ConfigException, match="acks must be all"):
        AsyncProducer({"bootstrap.servers": "h:1", "transactional.id": "t", "acks": 1})
    p = AsyncProducer({"bootstrap.servers": "h:1", "transactional.id": "t"})
    assert p.txn is not None and p.txn.transaction_timeout_ms == 60000 and not p._need_pid
    with pytest.raises(IllegalStateError, match="before completing a call to initTransactions"):
        p._make_record("t", b"v", None, 0, None, None)
    with pytest.raises(IllegalStateError, match="before completing a call to initTransactions"):
        p.begin_transaction()
    plain = AsyncProducer({"bootstrap.servers": "h:1"})
    with pytest.raises(IllegalStateError, match="non-transactional producer"):
        plain.begin_transaction()


def test_offsets_of_accepts_mappings_and_confluent_lists() -> None:
    want = {TP0: OffsetAndMetadata(5), TP1: OffsetAndMetadata(9, "m")}
    assert offsets_of({("t", 0): 5, TP1: OffsetAndMetadata(9, "m")}) == want
    items = [SimpleNamespace(topic="t", partition=0, offset=5),
             SimpleNamespace(topic="t", partition=1, offset=9, metadata="m")]
    assert offsets_of(items) == want


# -- the coordinator requests, against a scripted coordinator -----------------------------------
class FakeConn:
    def __init__(self, node: int, script: list[tuple[int, Any]]) -> None:
        self.node = node
        self.script = script
        self.sent: list[tuple[int, int, dict[str, Any]]] = []

    async def send(self, api_key: int, request_timeout: float | None = None,
                   **kwargs: Any) -> Any:
        self.sent.append((self.node, api_key, kwargs))
        expected, resp = self.script.pop(0)
        assert expected == api_key
        if isinstance(resp, Exception):
            raise resp
        return resp


class FakeClient:
    """send_any answers FindCoordinator with the next of `coordinators`."""

    def __init__(self, coordinators: list[int], script: list[tuple[int, Any]]) -> None:
        self.coordinators = coordinators
        self.finds: list[tuple[str, int]] = []
        self.conns: dict[int, FakeConn] = {}
        self.script = script
        self.closed: list[tuple[int, str]] = []

    async def send_any(self, api_key: int, **kwargs: Any) -> Any:
        assert api_key == 10
        self.finds.append((kwargs["key"], kwargs["key_type"]))
        node = self.coordinators.pop(0) if len(self.coordinators) > 1 else self.coordinators[0]
        return SimpleNamespace(coordinators=[SimpleNamespace(
            error_code=0, node_id=node, host="h", port=node, error_message=None)])

    async def connect_address(self, node: int, host: str, port: int, purpose: str) -> FakeConn:
        return self.conns.setdefault(node, FakeConn(node, self.script))

    def close_connection(self, node: int, purpose: str) -> None:
        self.closed.append((node, purpose))


def _init(code: int, pid: int = 3, epoch: int = 0) -> tuple[int, Any]:
    return 22, SimpleNamespace(error_code=code, producer_id=pid, producer_epoch=epoch)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_init_retries_load_in_progress_and_follows_not_coordinator() -> None:
    script = [_init(E.coordinator_load_in_progress), _init(E.not_coordinator),
              _init(E.concurrent_transactions), _init(0, 3, 4)]
    client = FakeClient([1, 2], script)
    m = TransactionManager("tx", 1000)
    r = TransactionalRequests(client, m, 0.001, 1.0)  # type: ignore[arg-type]

    async def go() -> None:
        m.begin_init()
        await r.init_producer_id(asyncio.get_running_loop().time() + 5)
    _run(go())
    assert m.state is S.READY and (m.producer_id, m.producer_epoch) == (3, 4)
    assert client.finds == [("tx", 1), ("tx", 1)]  # looked up again after NOT_COORDINATOR
    assert [c.node for c in client.conns.values()] == [1, 2]
    first = client.conns[1].sent[0][2]
    assert first["transactional_id"] == "tx" and first["transaction_timeout"] == 1000
    assert (first["producer_id"], first["producer_epoch"]) == (-1, -1)


def test_init_times_out_and_resumes() -> None:
    client = FakeClient([1], [_init(E.coordinator_load_in_progress)] * 50)
    m = TransactionManager("tx")
    r = TransactionalRequests(client, m, 0.01, 1.0)  # type: ignore[arg-type]

    async def go() -> None:
        m.begin_init()
        await r.init_producer_id(asyncio.get_running_loop().time() + 0.05)
    with pytest.raises(KafkaTimeoutError):
        _run(go())
    assert m.state is S.INITIALIZING
    m.begin_init()  # calling init_transactions again resumes
    assert m.state is S.INITIALIZING


def test_fenced_end_txn_is_fatal_and_bad_generation_is_abortable() -> None:
    m = ready()
    m.begin_transaction()
    client = FakeClient([1], [(26, SimpleNamespace(error_code=int(E.producer_fenced)))])
    r = TransactionalRequests(client, m, 0.001, 1.0)  # type: ignore[arg-type]
    m.begin_commit()
    with pytest.raises(ProducerFencedError):
        _run(r.end_txn(True, 1e12))
    assert m.state is S.FATAL_ERROR

    m = ready()
    m.begin_transaction()
    commit = SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=[
        SimpleNamespace(partition_index=0, error_code=int(E.illegal_generation))])])
    client = FakeClient([1], [(25, SimpleNamespace(error_code=0)), (28, commit)])
    r = TransactionalRequests(client, m, 0.001, 1.0)  # type: ignore[arg-type]
    group = ConsumerGroupMetadata("g", 5, "member-1", "inst")
    with pytest.raises(KafkaError, match="consumer group metadata mismatch"):
        _run(r.send_offsets({TP0: OffsetAndMetadata(10)}, group, 1e12))
    assert m.state is S.ABORTABLE_ERROR and m.transaction_started
    sent = client.conns[1].sent
    assert [api for _, api, _ in sent] == [25, 28]
    assert sent[0][2]["group_id"] == "g"
    txn_commit = sent[1][2]
    assert (txn_commit["generation_id"], txn_commit["member_id"],
            txn_commit["group_instance_id"]) == (5, "member-1", "inst")
    assert txn_commit["topics"][0]["partitions"][0]["committed_offset"] == 10
    assert client.finds == [("tx", 1), ("g", 0)]  # TxnOffsetCommit goes to the group's


def test_add_partitions_retries_concurrent_transactions() -> None:
    def resp(code: int) -> Any:
        return SimpleNamespace(results_by_topic_v3_and_below=[SimpleNamespace(
            name="t", results_by_partition=[
                SimpleNamespace(partition_index=0, partition_error_code=code),
                SimpleNamespace(partition_index=1, partition_error_code=code)])])
    m = ready()
    m.begin_transaction()
    m.maybe_add_partition(TP0)
    m.maybe_add_partition(TP1)
    client = FakeClient([1], [(24, resp(int(E.concurrent_transactions))), (24, resp(0))])
    r = TransactionalRequests(client, m, 0.001, 1.0)  # type: ignore[arg-type]
    parts = m.take_new_partitions()
    _run(r.add_partitions(parts, 1e12))
    assert m.partitions_in_txn == {TP0, TP1} and not m.pending_partitions
    kwargs = client.conns[1].sent[0][2]
    assert kwargs["v3_and_below_topics"] == [{"name": "t", "partitions": [0, 1]}]
