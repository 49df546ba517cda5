"""A Jepsen-style consistency checker for Kafka workloads.

`check(history, guarantees, final_logs, ...)` is pure: it reads a `History` (what the clients
did and were told), the final logs of the partitions (what the cluster kept, read after the
faults healed) and optionally every replica's log with the high watermarks, and returns a
`CheckReport`: one row per guarantee, saying whether Kafka *promises* it under the settings
the workload used, how many violations were observed (with a few examples), and a verdict:

* ``ok``       -- nothing observed;
* ``FAIL``     -- violations of a guarantee Kafka promises under these settings (a bug);
* ``expected`` -- violations of something Kafka does not promise under these settings (e.g.
  acknowledged writes lost with acks=1: counted and reported, not a failure);
* ``info``     -- a count that is not a guarantee (outcomes the clients never learnt);
* ``skipped``  -- nothing to check (no data given for it).

What Kafka promises (2.8, ZooKeeper mode):

* no acknowledged write is lost: only with acks=all, min.insync.replicas >= 2 and unclean
  leader election off (an ack then means at least two replicas have the record, and only an
  in-sync replica can become leader);
* a consumer never reads a record that is later truncated: consumers only see records below
  the high watermark, which are on every in-sync replica; only an unclean election (an
  out-of-sync replica made leader) can throw them away;
* per-producer order within a partition: with idempotence (any max.in.flight <= 5) or with
  max.in.flight.requests.per.connection = 1; otherwise a retried batch can land after a later
  one;
* no duplicates: only with idempotence (or transactions); without, a retry after a lost
  response appends the batch again;
* replicas identical below the high watermark once the cluster has healed: always (the
  leader-epoch truncation protocol of KIP-101/KIP-279).

Operations whose outcome is unknown (``info``, or invokes never completed) are neither acked
nor failed: they are not counted lost when absent, and their presence is not a duplicate
unless the value occurs twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.chaos.checker.history import History, Op, PartitionKey

if TYPE_CHECKING:
    from odradek.common.fault_log import FaultEvent

__all__ = ["VERDICTS", "CheckReport", "Guarantees", "Row", "check", "check_copy",
           "through_pipeline"]

VERDICTS: tuple[str, ...] = ("ok", "FAIL", "expected", "info", "skipped")
_MISSING = "<missing>"
MAX_EXAMPLES = 5

LogEntries = Sequence[tuple[int, str | None]]


def _truthy(v: object) -> bool:
    return str(v).strip().lower() in ("true", "1", "yes", "on")


@dataclass(frozen=True)
class Guarantees:
    """The settings that decide what Kafka promises to a workload."""
    acks: str = "all"  # "all" (or "-1"), "1", "0"
    min_insync_replicas: int = 1
    unclean_leader_election: bool = False
    idempotent: bool = False
    transactional: bool = False
    max_in_flight: int = 5  # max.in.flight.requests.per.connection

    def __post_init__(self) -> None:
        acks = str(self.acks).strip().lower()
        object.__setattr__(self, "acks", "all" if acks in ("all", "-1") else acks)
        if self.acks not in ("all", "1", "0"):
            raise ValueError(f"acks must be all, -1, 1 or 0, not {self.acks!r}")

    @classmethod
    def from_configs(cls, topic: Mapping[str, object] | None = None,
                     producer: Mapping[str, object] | None = None) -> Guarantees:
        """From a topic's configs and a producer's configs (Kafka's names and defaults of
        2.8: acks=1, enable.idempotence=false, max.in.flight=5, min.insync.replicas=1,
        unclean.leader.election.enable=false)."""
        t, p = dict(topic or {}), dict(producer or {})
        transactional = bool(p.get("transactional.id"))
        return cls(acks=str(p.get("acks", "1")),
                   min_insync_replicas=int(str(t.get("min.insync.replicas", 1))),
                   unclean_leader_election=_truthy(t.get("unclean.leader.election.enable",
                                                         "false")),
                   idempotent=_truthy(p.get("enable.idempotence", "false")) or transactional,
                   transactional=transactional,
                   max_in_flight=int(str(p.get("max.in.flight.requests.per.connection", 5))))

    # -- what Kafka promises under these settings ----------------------------------------------

    @property
    def no_loss(self) -> bool:
        return (self.acks == "all" and self.min_insync_replicas >= 2
                and not self.unclean_leader_election)

    @property
    def no_truncated_reads(self) -> bool:
        return not self.unclean_leader_election

    @property
    def order(self) -> bool:
        return self.idempotent or self.transactional or self.max_in_flight <= 1

    @property
    def no_duplicates(self) -> bool:
        return self.idempotent or self.transactional

    def describe(self) -> str:
        return (f"acks={self.acks} min.insync.replicas={self.min_insync_replicas} "
                f"unclean.leader.election.enable={str(self.unclean_leader_election).lower()} "
                f"enable.idempotence={str(self.idempotent).lower()} "
                f"transactional={str(self.transactional).lower()} "
                f"max.in.flight={self.max_in_flight}")

    def why(self, key: str) -> str:
        """Why the guarantee `key` is (not) promised, in a few words."""
        if key == "lost":
            if self.no_loss:
                return "acks=all, min.isr>=2, unclean off"
            reasons = []
            if self.acks != "all":
                reasons.append(f"acks={self.acks}")
            if self.min_insync_replicas < 2:
                reasons.append(f"min.isr={self.min_insync_replicas}")
            if self.unclean_leader_election:
                reasons.append("unclean election on")
            return ", ".join(reasons)
        if key == "truncated-reads":
            return ("reads below the HW, unclean off" if self.no_truncated_reads
                    else "unclean election on")
        if key == "order":
            if self.idempotent or self.transactional:
                return "idempotent producer"
            return ("max.in.flight=1" if self.max_in_flight <= 1
                    else f"no idempotence, max.in.flight={self.max_in_flight}")
        if key == "duplicates":
            return "idempotent producer" if self.no_duplicates else "no idempotence"
        if key == "replicas":
            return "always, once healed"
        return ""


@dataclass(frozen=True)
class Row:
    key: str  # lost | truncated-reads | order | duplicates | unknown | replicas
    guarantee: str
    promised: bool
    why: str
    checked: int  # how many things were looked at (acked writes, reads, pairs, ...)
    observed: int  # violations (or, for "unknown", the ops with an unknown outcome)
    examples: tuple[str, ...]
    verdict: str

    @property
    def expected(self) -> bool:
        """The contract's name for `promised`: whether Kafka promises this guarantee."""
        return self.promised


@dataclass(frozen=True)
class CheckReport:
    guarantees: Guarantees
    rows: tuple[Row, ...]
    ops: tuple[Op, ...] = field(repr=False, default=())
    lost: tuple[Op, ...] = field(repr=False, default=())  # acked sends absent at the end
    truncated_reads: tuple[Op, ...] = field(repr=False, default=())
    order_violations: tuple[Op, ...] = field(repr=False, default=())
    duplicates: tuple[tuple[PartitionKey, str, tuple[int, ...]], ...] = field(repr=False,
                                                                             default=())

    @property
    def ok(self) -> bool:
        return all(r.verdict != "FAIL" for r in self.rows)

    @property
    def verdict(self) -> str:
        return "ok" if self.ok else "FAIL"

    def row(self, key: str) -> Row:
        for r in self.rows:
            if r.key == key:
                return r
        raise KeyError(key)

    def to_text(self, examples: bool = True) -> str:
        from odradek.chaos.checker.report import report_text
        return report_text(self, examples=examples)

    def plot(self, path: str | Path, faults: Iterable[FaultEvent] = (),
             title: str = "") -> Path:
        from odradek.chaos.checker.report import plot_report
        return plot_report(self, path, faults=faults, title=title)


# -- the checks -------------------------------------------------------------------------------


def _verdict(promised: bool, observed: int, checked: int = 1) -> str:
    if checked == 0 and observed == 0:
        return "skipped"
    if observed == 0:
        return "ok"
    return "FAIL" if promised else "expected"


def _index_logs(final_logs: Mapping[PartitionKey, LogEntries]
                ) -> tuple[dict[PartitionKey, dict[int, str | None]],
                           dict[PartitionKey, dict[str | None, list[int]]]]:
    by_offset: dict[PartitionKey, dict[int, str | None]] = {}
    by_value: dict[PartitionKey, dict[str | None, list[int]]] = {}
    for p, entries in final_logs.items():
        offs: dict[int, str | None] = {}
        vals: dict[str | None, list[int]] = {}
        for off, val in entries:
            offs[int(off)] = val
            vals.setdefault(val, []).append(int(off))
        by_offset[p], by_value[p] = offs, vals
    return by_offset, by_value


def _row_by_design(key: str, guarantee: str, promised: bool, why: str, checked: int,
                   found: Sequence[Op], by_design: Callable[[Op], bool],
                   examples: tuple[str, ...]) -> Row:
    """A row whose violations may include records Kafka's design loses (`check`'s
    `lost_by_design`): those alone make it ``expected``, not ``FAIL``."""
    explained = sum(1 for op in found if by_design(op))
    if explained:
        why += f"; {explained} lost by Kafka's design (a crash of the last ISR member, KIP-966)"
    verdict = _verdict(promised, len(found) - explained, checked)
    if explained and verdict in ("ok", "skipped"):
        verdict = "expected"
    return Row(key, guarantee, promised, why, checked, len(found), examples, verdict)


def _ex(op: Op, what: str) -> str:
    return (f"{op.process} {op.f} {op.value!r} p{op.partition}"
            + (f"@{op.offset}" if op.offset is not None else "") + f": {what}")


def check(history: History | Iterable[Op], guarantees: Guarantees,
          final_logs: Mapping[PartitionKey, LogEntries],
          replica_logs: Mapping[PartitionKey, Mapping[int, LogEntries]] | None = None,
          high_watermarks: Mapping[PartitionKey, int] | None = None,
          max_examples: int = MAX_EXAMPLES,
          lost_by_design: Mapping[PartitionKey, Sequence[tuple[int, int]]] | None = None
          ) -> CheckReport:
    """Check `history` against the final logs (partition -> [(offset, value), ...], read after
    the cluster healed). Partitions missing from `final_logs` are not checked (their ops are
    not counted). `replica_logs` (partition -> broker id -> entries) with `high_watermarks`
    (partition -> HW; by default the smallest log end among the replicas) adds the replica
    check. `lost_by_design` (partition -> offset ranges [start, end)) names committed records
    Kafka 2.8 itself loses: the last in-sync replica's unsynced tail, lost in a machine crash,
    then elected cleanly (KIP-966's case); acknowledged writes and reads there are counted,
    verdict ``expected``, not failed."""
    design = {p: tuple(ranges) for p, ranges in (lost_by_design or {}).items()}

    def by_design(op: Op) -> bool:
        return op.offset is not None and any(
            start <= op.offset < end for start, end in design.get(op.partition, ()))  # type: ignore[arg-type]
    ops = tuple(history.ops() if isinstance(history, History) else history)
    g = guarantees
    by_offset, by_value = _index_logs(final_logs)
    all_values: dict[str | None, PartitionKey] = {}
    for p, vals in by_value.items():
        for v in vals:
            all_values.setdefault(v, p)
    invokes = {op.index: op for op in ops if op.type == "invoke"}
    completions = {op.ref: op for op in ops if op.ref is not None}
    sends_ok = [op for op in ops if op.f == "send" and op.type == "ok"]
    rows: list[Row] = []

    # 1. lost acknowledged writes
    lost: list[Op] = []
    checked = 0
    for op in sends_ok:
        if op.partition is None:
            checked += 1
            if op.value not in all_values:
                lost.append(op)
            continue
        if op.partition not in by_value:
            continue
        checked += 1
        if op.value not in by_value[op.partition]:
            lost.append(op)
    rows.append(_row_by_design("lost", "no acknowledged write lost", g.no_loss, g.why("lost"),
                               checked, lost, by_design,
                               tuple(_ex(o, "acked, absent from the final log")
                                     for o in lost[:max_examples])))

    # 2. reads of records later truncated
    truncated: list[Op] = []
    checked = 0
    log_start = {p: min(offs) for p, offs in by_offset.items() if offs}
    for op in ops:
        if op.f != "read" or op.type != "ok" or op.partition not in by_offset:
            continue
        offs = by_offset[op.partition]
        if op.offset is None or op.offset < log_start.get(op.partition, 0):
            continue  # below the final log's start: deleted by retention, not checkable
        checked += 1
        if op.offset not in offs or offs[op.offset] != op.value:
            truncated.append(op)
    examples = []
    for o in truncated[:max_examples]:
        now = by_offset[o.partition].get(o.offset or 0, "<none>") if o.offset is not None else ""
        examples.append(_ex(o, f"read, final log has {now!r} there"))
    rows.append(_row_by_design("truncated-reads", "no read of a truncated record",
                               g.no_truncated_reads, g.why("truncated-reads"), checked,
                               truncated, by_design, tuple(examples)))

    # 3. per-producer order within a partition (acked offsets increase in send order)
    lost_idx = {o.index for o in lost}
    streams: dict[tuple[str, PartitionKey], list[tuple[int, Op]]] = {}
    for op in sends_ok:
        if (op.index in lost_idx or op.offset is None or op.offset < 0 or op.partition is None
                or op.partition not in by_value):
            continue
        inv = invokes.get(op.ref if op.ref is not None else -1)
        streams.setdefault((op.process, op.partition), []).append(
            (inv.index if inv else op.index, op))
    disorder: list[Op] = []
    examples = []
    checked = 0
    for (_proc, _p), items in streams.items():
        items.sort(key=lambda t: t[0])
        prev: Op | None = None
        for _, op in items:
            if prev is not None:
                checked += 1
                if op.offset is not None and prev.offset is not None and op.offset <= prev.offset:
                    disorder.append(op)
                    if len(examples) < max_examples:
                        examples.append(f"{op.process} p{op.partition}: {prev.value!r}@"
                                        f"{prev.offset} sent before {op.value!r}@{op.offset}")
            prev = op
    rows.append(Row("order", "per-producer order in a partition", g.order, g.why("order"),
                    checked, len(disorder), tuple(examples),
                    _verdict(g.order, len(disorder), checked)))

    # 4. duplicates: a value at two offsets of the final logs
    places: dict[str, list[tuple[PartitionKey, int]]] = {}
    for p, vals in by_value.items():
        for v, offs in vals.items():
            if v is not None:
                places.setdefault(v, []).extend((p, o) for o in offs)
    dups = [(where[0][0], v, tuple(o for _, o in where))
            for v, where in places.items() if len(where) > 1]
    rows.append(Row("duplicates", "no duplicates", g.no_duplicates, g.why("duplicates"),
                    len(places), len(dups),
                    tuple(f"{v!r} in p{p} at offsets {list(o)}" for p, v, o in dups[:max_examples]),
                    _verdict(g.no_duplicates, len(dups), len(places))))

    # 5. unknown outcomes: info completions and invokes never completed
    unknown = [inv for i, inv in invokes.items() if inv.f == "send"
               and (i not in completions or completions[i].type == "info")]
    present = sum(1 for inv in unknown if inv.value in all_values)
    rows.append(Row("unknown", "unknown outcomes, not checked", False, "", len(invokes),
                    len(unknown),
                    (f"{present} in the final logs, {len(unknown) - present} not",
                     *(_ex(completions.get(i.index, i),
                           "in the final log" if i.value in all_values else "absent")
                       for i in unknown[:max_examples])) if unknown else (),
                    "info" if unknown else "ok"))

    # 6. replicas identical below the high watermark
    if replica_logs:
        diverged, examples, checked = _check_replicas(replica_logs, high_watermarks or {},
                                                      max_examples)
        rows.append(Row("replicas", "replicas identical below the HW", True, g.why("replicas"),
                        checked, diverged, tuple(examples), _verdict(True, diverged, checked)))
    else:
        rows.append(Row("replicas", "replicas identical below the HW", True, g.why("replicas"),
                        0, 0, (), "skipped"))

    return CheckReport(g, tuple(rows), ops, tuple(lost), tuple(truncated), tuple(disorder),
                       tuple(dups))


def through_pipeline(history: History | Iterable[Op], transform: Callable[[str], str]
                     ) -> list[Op]:
    """The ops of a consume-transform-produce pipeline's history, as `check` reads them against
    the pipeline's *output* logs: each send to the input topic becomes the send of its
    transformed value to any partition of the output (the pipeline, e.g. Spark's sink, picks
    the output partition: partition and offset are dropped, so the order row skips them); reads
    (of the output) are kept. An acknowledged input value missing from the output is then
    lost, one at two offsets of the output is a duplicate; a record of an aborted transaction
    read with read_committed and absent from the final (read_committed) output is a read of a
    truncated record."""
    ops = history.ops() if isinstance(history, History) else history
    return [op._replace(value=None if op.value is None else transform(op.value), partition=None,
                        offset=None) if op.f == "send" else op for op in ops]


def check_copy(sent: Iterable[str], output: Mapping[PartitionKey, LogEntries],
               guarantees: Guarantees, transform: Callable[[str], str] = str) -> CheckReport:
    """`check` of a copy of values known to be in the input (each an acknowledged send) against
    the output logs read back (partition -> [(offset, value), ...]): a batch job's or a test's
    check of a sink, where no history was recorded while the input was written."""
    h = History()
    for value in sent:
        h.ok(h.invoke("input", "send", value))
    return check(through_pipeline(h, transform), guarantees, output)


def _check_replicas(replica_logs: Mapping[PartitionKey, Mapping[int, LogEntries]],
                    high_watermarks: Mapping[PartitionKey, int], max_examples: int
                    ) -> tuple[int, list[str], int]:
    """Offsets below the HW (and at or above every replica's first offset) where replicas
    differ or one lacks a record the others have. Returns (count, examples, offsets checked)."""
    diverged, checked = 0, 0
    examples: list[str] = []
    for p, replicas in replica_logs.items():
        logs = {b: {int(o): v for o, v in entries} for b, entries in replicas.items()}
        if len(logs) < 2:
            continue
        ends = [max(log) + 1 if log else 0 for log in logs.values()]
        hw = high_watermarks.get(p, min(ends))
        start = max((min(log) for log in logs.values() if log), default=0)
        offsets = sorted({o for log in logs.values() for o in log if start <= o < hw})
        ordered = [logs[b] for b in sorted(logs)]
        for o in offsets:
            checked += 1
            first = ordered[0].get(o, _MISSING)
            if all(log.get(o, _MISSING) == first for log in ordered[1:]):
                continue
            diverged += 1
            if len(examples) < max_examples:
                vals = {b: logs[b].get(o, _MISSING) for b in sorted(logs)}
                examples.append(f"p{p}@{o} (HW {hw}): "
                                + ", ".join(f"broker {b}={v!r}" for b, v in vals.items()))
    return diverged, examples, checked
