"""The workload history: invoke/ok/fail/info records, thread safety, JSON lines, memory."""

from __future__ import annotations

import threading
import tracemalloc

import pytest

from odradek.chaos.checker.history import History, Op


def test_invoke_and_completions_inherit_the_invoke() -> None:
    h = History()
    a = h.invoke(process="producer-0", f="send", value="v-1", partition=3, node="broker-1")
    b = h.invoke(process="producer-0", f="send", value="v-2")
    c = h.invoke(process="producer-1", f="send", value="v-3", partition=0)
    ok = h.ok(a, offset=42)
    fail = h.fail(b, error="NOT_ENOUGH_REPLICAS", partition=1)
    info = h.info(c, error="timeout")
    r = h.read(process="consumer-0", partition=3, offset=42, value="v-1")
    ops = h.ops()
    assert [o.index for o in ops] == list(range(7))
    assert ops[ok] == Op(ok, "producer-0", "ok", "send", "v-1", 3, 42, "broker-1", None,
                         ops[ok].time, ops[ok].wall, a)
    assert (ops[fail].type, ops[fail].partition, ops[fail].error, ops[fail].ref) == \
        ("fail", 1, "NOT_ENOUGH_REPLICAS", b)
    assert (ops[info].type, ops[info].value, ops[info].ref) == ("info", "v-3", c)
    assert (ops[r].type, ops[r].f, ops[r].offset, ops[r].ref) == ("ok", "read", 42, None)
    assert h.completions() == {a: ops[ok], b: ops[fail], c: ops[info]}
    assert h.pending() == []
    assert ops[a].time <= ops[ok].time and ops[a].wall > 1e9
    assert h.counts() == {"send:invoke": 3, "send:ok": 1, "send:fail": 1, "send:info": 1,
                          "read:ok": 1}


def test_completing_something_that_is_not_an_invoke_is_refused() -> None:
    h = History()
    a = h.invoke("p", "send", "v")
    done = h.ok(a, offset=0)
    with pytest.raises(ValueError):
        h.ok(done)
    with pytest.raises(ValueError):
        h.info(17)


def test_pending_invokes() -> None:
    h = History()
    a = h.invoke("p", "send", "v-0")
    h.invoke("p", "send", "v-1")
    h.ok(a, offset=0)
    assert [o.value for o in h.pending()] == ["v-1"]


def test_save_and_load_round_trip(tmp_path) -> None:
    h = History()
    a = h.invoke("producer-0", "send", "v-1", partition="t-3")
    h.ok(a, offset=7, node="broker-2")
    b = h.invoke("producer-0", "send", "v-\"2\"\n", partition=0)
    h.info(b, error="timed out")
    h.read("consumer-0", 0, 5, None)
    path = h.save(tmp_path / "h" / "history.jsonl")
    loaded = History.load(path)
    assert loaded.ops() == h.ops()
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"index": 5, "proc')  # torn last line
    assert History.load(path).ops() == h.ops()


def test_loading_a_gapped_history_is_refused() -> None:
    with pytest.raises(ValueError):
        History([Op(1, "p", "invoke", "send")])


def test_threads_record_without_losing_ops() -> None:
    h = History()

    def work(p: int) -> None:
        for i in range(500):
            op = h.invoke(f"producer-{p}", "send", f"{p}-{i}", partition=p)
            h.ok(op, offset=i)

    threads = [threading.Thread(target=work, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ops = h.ops()
    assert len(ops) == 4000 and [o.index for o in ops] == list(range(4000))
    done = h.completions()
    assert all(ops[i].value == c.value and c.type == "ok" for i, c in done.items())
    assert len(done) == 2000


def test_memory_per_op_is_bounded() -> None:
    """100k ops (50k sends, acked) stay well under 400 bytes each, values included: a history
    of 1M ops takes a few hundred MB, not GBs."""
    n = 50_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        h = History()
        for i in range(n):
            op = h.invoke("producer-0", "send", f"v-{i}", partition=i % 8, node="broker-1")
            h.ok(op, offset=i)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(h) == 2 * n
    assert used / (2 * n) < 400, used / (2 * n)
