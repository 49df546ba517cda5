"""An exactly-once consume-transform-produce process (confluent-kafka), the worker of
`odradek chaos --transactions`; run as ``python -m odradek.chaos.scenarios.txn_pipeline --bootstrap
...``.

It joins the consumer group `--group` on `--input` (read_committed, no auto commit) and, for each
batch it polls, writes ``transform(value)`` to `--output` and the batch's next offsets to the
group in ONE transaction of its producer (`--transactional-id`, stable across restarts, so a
restarted process fences its predecessor): Kafka's KIP-98/KIP-447 loop.

Every `--abort-every`-th transaction is aborted on purpose after writing the batch and marker
values ``ABORTED-<transactional id>-<n>`` to the output; the process then rewinds to the group's
committed offsets, as after any abortable error. None of it may ever be visible to a
read_committed consumer.

Errors: an abortable one (``txn_requires_abort``) aborts and rewinds; a retriable commit is
retried; a fatal one (fenced: a newer process with the same transactional id) ends the process
with exit status 3; a loop turn stalled past STALL_EXIT_S dumps every thread's stack and ends it
with status 1 (see IDLE_CLOSE_MS for the stall librdkafka is known for). SIGTERM ends it after
the current transaction. One progress line per
transaction goes to stdout (``committed <records> <total>`` / ``aborted <records>`` for a
deliberate abort / ``aborted after error``, each ending in `` @<unix time>``), so the harness
can count. ``--hold`` keeps each
transaction open for a while after its records reached the log, so that faults hit open
transactions.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
import time
from typing import Any

from ..requirements import missing_client

ABORT_MARKER = "ABORTED-"
EXIT_FATAL = 3
# A loop turn that takes longer than this dumps every thread's stack to stderr and ends the
# process (status 1); the harness restarts it and its successor fences it. Each client call
# below is bounded by 30 s, but librdkafka's send_offsets_to_transaction is known to block past
# its timeout (confluentinc/librdkafka#5456) and a crash-only restart is what an application
# can do about a call it cannot cancel.
STALL_EXIT_S = 150.0
# librdkafka (2.16 here) caches the group coordinator; when that broker dies and leaves the
# cluster's metadata, librdkafka drops the broker's handle but not the cache entry, and a
# TxnOffsetCommit waits for that handle to come up until some OTHER broker connection changes
# state (confluentinc/librdkafka#5511, open; fix proposed in #5512). Closing idle connections
# makes such a change happen within this many milliseconds of the stall, so the coordinator is
# looked up again. Kafka's brokers too list only live brokers in Metadata: it is a client bug.
IDLE_CLOSE_MS = 5000


def transform(value: bytes) -> bytes:
    """The pipeline's transformation: ``v17`` -> ``out:v17``."""
    return b"out:" + value


def producer_config(bootstrap: str, transactional_id: str,
                    transaction_timeout_ms: int = 20000) -> dict[str, Any]:
    """The pipeline's transactional producer (confluent-kafka), with librdkafka #5511 worked
    around (IDLE_CLOSE_MS)."""
    return {"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
            "transaction.timeout.ms": transaction_timeout_ms, "linger.ms": 5,
            "message.timeout.ms": transaction_timeout_ms,
            "connections.max.idle.ms": IDLE_CLOSE_MS}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m odradek.chaos.scenarios.txn_pipeline")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--transactional-id", required=True)
    p.add_argument("--batch", type=int, default=20, help="records per transaction (at most)")
    p.add_argument("--pause", type=float, default=0.0,
                   help="seconds between transactions (slows the pipeline down)")
    p.add_argument("--hold", type=float, default=0.0,
                   help="seconds a transaction stays open after its records reached the log, "
                        "before its offsets and commit (faults then hit open transactions)")
    p.add_argument("--abort-every", type=int, default=7,
                   help="abort every n-th transaction on purpose (0: never)")
    p.add_argument("--transaction-timeout-ms", type=int, default=20000)
    return p.parse_args(argv)


class Pipeline:
    def __init__(self, a: argparse.Namespace) -> None:
        from confluent_kafka import Consumer, Producer

        self.a = a
        self.stopping = False
        self.consumer = Consumer({
            "bootstrap.servers": a.bootstrap, "group.id": a.group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed", "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 60000})
        self.producer = Producer(producer_config(a.bootstrap, a.transactional_id,
                                                 a.transaction_timeout_ms))
        self.txns = 0
        self.committed = 0

    def on_term(self, _signum: int, _frame: object) -> None:
        self.stopping = True

    def say(self, line: str) -> None:
        print(f"{line} @{time.time():.3f}", flush=True)

    def rewind(self) -> None:
        """Back to the group's committed offsets (the beginning where there are none)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        assignment = self.consumer.assignment()
        if not assignment:
            return
        for tp in self.consumer.committed(assignment, timeout=30):
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    def run(self) -> int:
        from confluent_kafka import KafkaException

        self.producer.init_transactions(60)
        # From here SIGTERM ends the loop after the current transaction (before, it ends the
        # process at once).
        signal.signal(signal.SIGTERM, self.on_term)
        self.consumer.subscribe([self.a.input])
        self.say("ready")
        while not self.stopping:
            # Where a stalled pipeline waited shows in pipeline-N.err. Re-arming cancels the
            # previous timer.
            faulthandler.dump_traceback_later(STALL_EXIT_S, exit=True)
            msgs = [m for m in self.consumer.consume(self.a.batch, 0.5) if m.error() is None]
            if not msgs:
                continue
            try:
                self.one_transaction(msgs)
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal():
                    self.say(f"fatal {err.name()}: {err.str()}")
                    return EXIT_FATAL
                self.say(f"error {err.name()} (abortable={err.txn_requires_abort()}): "
                         f"{err.str()}")
                self.abort_and_rewind()
            if self.a.pause:
                time.sleep(self.a.pause)
        faulthandler.cancel_dump_traceback_later()
        self.consumer.close()
        return 0

    def one_transaction(self, msgs: list[Any]) -> None:
        self.txns += 1
        deliberate_abort = bool(self.a.abort_every) and self.txns % self.a.abort_every == 0
        self.producer.begin_transaction()
        for m in msgs:
            self.producer.produce(self.a.output, key=m.key(), value=transform(m.value()))
        if deliberate_abort:
            for p in range(3):
                self.producer.produce(self.a.output, partition=p, value=(
                    f"{ABORT_MARKER}{self.a.transactional_id}-{self.txns}-p{p}".encode()))
        if self.a.hold:
            self.producer.flush(30)
            time.sleep(self.a.hold)
        positions = self.consumer.position(self.consumer.assignment())
        self.producer.send_offsets_to_transaction(
            [tp for tp in positions if tp.offset >= 0],
            self.consumer.consumer_group_metadata(), 30)
        if deliberate_abort:
            self.producer.flush(30)  # the records reach the log: the abort must hide them
            self.producer.abort_transaction(30)
            self.say(f"aborted {len(msgs)}")
            self.rewind()
            return
        self.commit()
        self.committed += len(msgs)
        self.say(f"committed {len(msgs)} {self.committed}")

    def commit(self) -> None:
        from confluent_kafka import KafkaException

        for _attempt in range(10):
            try:
                self.producer.commit_transaction(30)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
                self.say(f"retrying commit: {exc.args[0].name()}")
                time.sleep(0.5)
        self.producer.commit_transaction(30)

    def abort_and_rewind(self) -> None:
        from confluent_kafka import KafkaException

        try:
            self.producer.abort_transaction(30)
        except KafkaException as exc:
            if exc.args[0].fatal():
                raise SystemExit(EXIT_FATAL) from None
            raise
        self.say("aborted after error")
        self.rewind()


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    problem = missing_client()
    if problem:
        raise SystemExit(f"txn_pipeline: {problem}")
    return Pipeline(args).run()


if __name__ == "__main__":
    sys.exit(main())
