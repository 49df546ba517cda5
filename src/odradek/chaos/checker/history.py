"""A Jepsen-style history of a workload: every operation a client invoked and how it ended.

Each operation is recorded twice: an ``invoke`` when the client starts it, and a completion
when it knows the outcome: ``ok`` (it happened: a send was acknowledged at an offset), ``fail``
(it certainly did not happen: the broker refused it) or ``info`` (unknown: a timeout, a lost
connection; the write may or may not be in the log). A consumed record is a single ``ok`` op
with ``f == "read"``. The consistency checker (`odradek.chaos.checker.consistency`) reads a history
together with the final logs and says which of Kafka's guarantees held.

Memory is bounded per op: an `Op` is a small named tuple (strings that repeat, like
process, function and node names, are interned), so a million ops take a few hundred MB at
most, not GBs. The history is thread-safe (producer callbacks run on client threads) and is
saved and loaded as JSON lines. Times come from `common.clock` (Kafka's `Time`), so under the
deterministic simulation (odradek.sim) they are the virtual clock's, as the brokers' are.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal, NamedTuple

from odradek.common import clock

__all__ = ["OP_TYPES", "History", "Op", "OpType", "PartitionKey"]

OpType = Literal["invoke", "ok", "fail", "info"]
OP_TYPES: tuple[str, ...] = ("invoke", "ok", "fail", "info")
PartitionKey = int | str  # a partition number, or "topic-3" when a workload spans topics
_ENCODER = json.JSONEncoder(separators=(",", ":"))  # one, not one per json.dumps call


class Op(NamedTuple):
    """One line of a history. ``ref`` is, for a completion, the index of its invoke. A named
    tuple: as small as a ``__slots__`` record and cheaper to create (the workload records
    from client callback threads)."""
    index: int
    process: str
    type: str  # invoke | ok | fail | info
    f: str  # send | read | ...
    value: str | None = None
    partition: PartitionKey | None = None
    offset: int | None = None
    node: str | None = None
    error: str | None = None
    time: float = 0.0  # clock.monotonic() of the recording process (virtual when simulated)
    wall: float = 0.0  # clock.wall_seconds(): seconds since the epoch, as the fault logs'
    ref: int | None = None

    def to_json(self) -> str:
        d = {"index": self.index, "process": self.process, "type": self.type, "f": self.f,
             "time": self.time, "wall": self.wall}
        for k in ("value", "partition", "offset", "node", "error", "ref"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        return _ENCODER.encode(d)

    @classmethod
    def from_json(cls, line: str) -> Op:
        o = json.loads(line)
        if o["type"] not in OP_TYPES:
            raise ValueError(f"op type must be one of {OP_TYPES}, not {o['type']!r}")
        return cls(index=int(o["index"]), process=_intern(o["process"]), type=_intern(o["type"]),
                   f=_intern(o["f"]), value=o.get("value"), partition=o.get("partition"),
                   offset=o.get("offset"), node=_intern_opt(o.get("node")),
                   error=o.get("error"), time=float(o.get("time", 0.0)),
                   wall=float(o.get("wall", 0.0)), ref=o.get("ref"))


def _intern(s: object) -> str:
    return sys.intern(str(s))


def _intern_opt(s: object) -> str | None:
    return None if s is None else sys.intern(str(s))


class History:
    """An append-only, thread-safe list of `Op`s. Indexes are positions in the list."""

    def __init__(self, ops: Iterable[Op] = ()) -> None:
        self._lock = threading.Lock()
        self._ops: list[Op] = []
        for op in ops:
            if op.index != len(self._ops):
                raise ValueError(f"op index {op.index} at position {len(self._ops)}")
            self._ops.append(op)

    # -- recording ----------------------------------------------------------------------------

    def _append(self, process: str, type_: str, f: str, value: str | None,
                partition: PartitionKey | None, offset: int | None, node: str | None,
                error: str | None, ref: int | None) -> int:
        mono, wall = clock.monotonic(), clock.wall_seconds()
        with self._lock:
            index = len(self._ops)
            self._ops.append(Op(index, _intern(process), type_, _intern(f), value, partition,
                                offset, _intern_opt(node), error, mono, wall, ref))
            return index

    def invoke(self, process: str, f: str, value: str | None = None,
               partition: PartitionKey | None = None, node: str | None = None) -> int:
        """Record the start of an operation; returns its index (pass it to ok/fail/info)."""
        return self._append(process, "invoke", f, value, partition, None, node, None, None)

    def _complete(self, op: int, type_: str, offset: int | None, partition: PartitionKey | None,
                  node: str | None, error: str | None, value: str | None) -> int:
        with self._lock:
            if not 0 <= op < len(self._ops) or self._ops[op].type != "invoke":
                raise ValueError(f"op {op} is not an invoke of this history")
            inv = self._ops[op]
        return self._append(inv.process, type_, inv.f, inv.value if value is None else value,
                            inv.partition if partition is None else partition, offset,
                            inv.node if node is None else node, error, op)

    def ok(self, op: int, offset: int | None = None, partition: PartitionKey | None = None,
           node: str | None = None, value: str | None = None) -> int:
        """The operation `op` happened (a send: acknowledged at `offset` of `partition`)."""
        return self._complete(op, "ok", offset, partition, node, None, value)

    def fail(self, op: int, error: str = "", partition: PartitionKey | None = None,
             node: str | None = None) -> int:
        """The operation `op` certainly did not happen."""
        return self._complete(op, "fail", None, partition, node, error, None)

    def info(self, op: int, error: str = "", partition: PartitionKey | None = None,
             node: str | None = None) -> int:
        """The outcome of `op` is unknown (timeout, connection lost): it may have happened."""
        return self._complete(op, "info", None, partition, node, error, None)

    def read(self, process: str, partition: PartitionKey, offset: int, value: str | None,
             node: str | None = None) -> int:
        """A consumer read `value` at `offset` of `partition` (one ``ok`` op, f="read")."""
        return self._append(process, "ok", "read", value, partition, offset, node, None, None)

    # -- reading ------------------------------------------------------------------------------

    def ops(self) -> list[Op]:
        """A snapshot of the ops so far."""
        with self._lock:
            return list(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops())

    def __getitem__(self, index: int) -> Op:
        return self._ops[index]

    def completions(self) -> dict[int, Op]:
        """Invoke index -> its completion (invokes still open have none)."""
        return {op.ref: op for op in self.ops() if op.ref is not None}

    def pending(self) -> list[Op]:
        """Invokes without a completion (the client never learnt the outcome): treated like
        ``info`` by the checker."""
        done = self.completions()
        return [op for op in self.ops() if op.type == "invoke" and op.index not in done]

    def counts(self) -> dict[str, int]:
        """Ops by "f:type", e.g. {"send:invoke": 10, "send:ok": 9, "send:info": 1}."""
        out: dict[str, int] = {}
        for op in self.ops():
            k = f"{op.f}:{op.type}"
            out[k] = out.get(k, 0) + 1
        return out

    # -- files --------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            for op in self.ops():
                f.write(op.to_json() + "\n")
        return p

    @classmethod
    def load(cls, path: str | Path) -> History:
        """A saved history; a torn last line (the writer crashed) is skipped."""
        ops: list[Op] = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    ops.append(Op.from_json(line))
                except (ValueError, KeyError, TypeError):
                    break
        return cls(ops)
