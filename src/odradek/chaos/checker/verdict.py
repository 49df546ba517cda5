"""The verdict of a run of process faults: `ChaosReport` (what the run found, and `failures`:
what fails it under the run's settings), filled at the run's end by `check_values` (every
acknowledged value read back at its offset; lost, misplaced, duplicated, written unacknowledged),
`check_consistency` (the consistency checker on the run's history), `stop_and_compare_replicas`
(clean stops, then the replicas compared below the HW) and `close_run` (the brokers' tracebacks,
the elapsed time); printed by `format_report`, drawn by `plot_report`."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ...common.fault_log import FAULT_LOG_NAME, fault_spans, read_fault_events
from ..config import ChaosConfig
from ..environment.process_faults import FaultRecord, ReassignmentCheck
from ..environment.processes import ProcessCluster, stop_cleanly
from ..workload import ProducerStats
from .consistency import CheckReport, Guarantees, check
from .history import History
from .replicas import ReplicaCheck, compare_replicas


class RunOutcome(Protocol):
    """What every chaos run records besides its workload's checks (ChaosReport and the
    scenarios' own reports)."""

    faults: list[FaultRecord]
    healed: bool
    heal_problem: str | None
    stop_problems: list[str]
    errors: list[str]


def run_failures(run: RunOutcome) -> list[str]:
    """The failures of any run, whatever it checked: the cluster did not heal, a clean
    shutdown failed, the run broke off, a fault was not injected."""
    out = []
    if not run.healed:
        out.append(f"cluster did not heal: {run.heal_problem}")
    out.extend(f"clean shutdown failed: {p}" for p in run.stop_problems)
    out.extend(f"run aborted: {e}" for e in run.errors)
    out.extend(f"fault {f.kind} at {f.at_s:.1f}s: {f.error}" for f in run.faults if f.error)
    return out


@dataclass
class ChaosReport:
    config: ChaosConfig
    faults: list[FaultRecord] = field(default_factory=list)
    sent: int = 0
    acked: int = 0
    lost: list[str] = field(default_factory=list)  # acked, never read back
    misplaced: list[str] = field(default_factory=list)  # acked, read back at another offset
    duplicates: int = 0  # extra copies of values read back more than once
    unacked_written: int = 0  # read back, never acknowledged nor failed
    failed_written: int = 0  # read back, though delivery reported an error
    read_back: int = 0
    delivery_errors: Counter[str] = field(default_factory=Counter)
    undelivered: int = 0
    fatal_errors: list[str] = field(default_factory=list)
    replicas: list[ReplicaCheck] = field(default_factory=list)
    healed: bool = True
    heal_problem: str | None = None
    stop_problems: list[str] = field(default_factory=list)  # clean shutdowns that failed
    broker_tracebacks: dict[int, int] = field(default_factory=dict)  # in brokers' stderr
    errors: list[str] = field(default_factory=list)  # the run itself broke off
    acked_end: dict[int, int] = field(default_factory=dict)  # partition -> max acked + 1
    acked_without_offset: int = 0  # delivered, but librdkafka gave no offset (check_values)
    reassignments: list[ReassignmentCheck] = field(default_factory=list)
    throughput: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    workdir: Path | None = None
    elapsed_s: float = 0.0
    history: History | None = field(default=None, repr=False)  # the workload, op by op
    consistency: CheckReport | None = field(default=None, repr=False)  # the checker's verdict

    @property
    def replicas_identical(self) -> bool:
        return bool(self.replicas) and all(r.problem is None for r in self.replicas)

    @property
    def failures(self) -> list[str]:
        out = []
        promised = self.config.guarantees()  # acks=all, idempotence...: every check counts
        if self.lost and promised.no_loss:
            out.append(f"{len(self.lost)} acknowledged values lost")
        if self.misplaced and promised.no_loss:
            out.append(f"{len(self.misplaced)} acknowledged values at another offset")
        if self.duplicates and promised.no_duplicates:
            out.append(f"{self.duplicates} duplicates (idempotent producers: expected 0)")
        if not self.replicas_identical:
            out.append("replicas differ below the high watermark" if self.replicas
                       else "replicas not compared")
        out.extend(run_failures(self))
        out.extend(f"fatal producer error: {e}" for e in self.fatal_errors)
        if self.consistency is not None and not self.consistency.ok:
            out.append("consistency check failed: " + ", ".join(
                f"{r.guarantee} ({r.observed})" for r in self.consistency.rows
                if r.verdict == "FAIL"))
        stuck = [r for r in self.reassignments if not r.completed]
        if stuck:
            out.append(f"{len(stuck)} reassignments not completed after "
                       f"{self.config.reassign_grace_s:.0f}s: " + ", ".join(
                           f"p{r.partition} -> {list(r.target)} (AR "
                           f"{list(r.replicas) if r.replicas is not None else '?'}"
                           f"{', pending' if r.pending else ''})" for r in stuck))
        return out

    @property
    def ok(self) -> bool:
        return not self.failures


def check_values(report: ChaosReport, stats: Sequence[ProducerStats],
                 read: dict[int, list[tuple[int, str]]]) -> None:
    """Acknowledged values against what a consumer reads back: each at the partition and
    offset of its delivery report. librdkafka's idempotent producer may deliver a message with
    no offset: when a batch it is about to resend turns out to be written (a later batch's ack
    proves it, since the broker takes a producer's batches only in sequence order), it reports
    the batch's messages as delivered without offsets (rd_kafka_msgq_move_acked). Those are
    checked by partition only."""
    at: dict[tuple[int, int], str] = {}
    read_in: dict[str, int] = {}
    copies: Counter[str] = Counter()
    for p, records in read.items():
        for offset, value in records:
            at[(p, offset)] = value
            read_in[value] = p
            copies[value] += 1
    report.read_back = sum(copies.values())
    report.duplicates = sum(n - 1 for n in copies.values() if n > 1)
    acked: dict[str, tuple[int, int]] = {}
    failed: dict[str, str] = {}
    for s in stats:
        acked.update(s.acked)
        failed.update(s.failed)
        report.delivery_errors.update(s.failed.values())
        report.sent += s.sent
        report.undelivered += s.undelivered
        if s.fatal:
            report.fatal_errors.append(f"producer {s.index}: {s.fatal}")
    report.acked = len(acked)
    for p, offset in acked.values():
        if offset is not None:
            report.acked_end[p] = max(report.acked_end.get(p, 0), offset + 1)
    for value, (p, offset) in sorted(acked.items()):
        if offset is None:
            report.acked_without_offset += 1
            if read_in.get(value) == p:
                continue
        elif at.get((p, offset)) == value:
            continue
        (report.misplaced if value in copies else report.lost).append(
            f"{value}@p{p}:{'?' if offset is None else offset}")
    report.failed_written = sum(1 for v in copies if v in failed)
    report.unacked_written = sum(1 for v in copies if v not in acked and v not in failed)


def check_consistency(report: ChaosReport, final_logs: dict[int, list[tuple[int, str]]],
                      replica_logs: dict[int, dict[int, list[tuple[int, str | None]]]] | None,
                      high_watermarks: dict[int, int] | None,
                      guarantees: Guarantees | None = None) -> CheckReport | None:
    """The checker (odradek.chaos.checker.consistency) on the run's history, the logs read back
    after
    healing and the replicas' logs below their HW, with the guarantees of the run's settings
    (`report.config.guarantees()`) unless others are given; kept in `report.consistency`."""
    if report.history is None:
        return None
    report.consistency = check(report.history, guarantees or report.config.guarantees(),
                               final_logs, replica_logs, high_watermarks)
    return report.consistency


def stop_and_compare_replicas(cluster: ProcessCluster, topic: str, report: ChaosReport,
                              progress: Callable[[str], None]) -> None:
    """The end of a run: every broker stopped cleanly, then the replicas' logs compared below
    the high watermark."""
    progress("stopping every broker cleanly, then comparing replicas")
    assignment = cluster.assignment(topic)
    report.stop_problems = stop_cleanly(cluster)
    report.replicas = compare_replicas(cluster, topic, assignment, report.acked_end)


def close_run(cluster: ProcessCluster, report: ChaosReport, logger: logging.Logger,
              t_start: float) -> None:
    """Close the cluster, count the tracebacks in the brokers' logs, detach the run's log
    handlers and record the elapsed time."""
    cluster.close()
    report.broker_tracebacks = {i: b.stderr_text().count("Traceback")
                                for i, b in cluster.brokers.items()}
    for handler in list(logger.handlers):
        handler.close()
        logger.removeHandler(handler)
    report.elapsed_s = time.monotonic() - t_start


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}s"


def format_report(report: ChaosReport) -> str:
    rows = [("t", "fault", "target", "failover", "healed", "what happened")]
    for f in report.faults:
        rows.append((f"{f.at_s:.1f}s", f.kind, str(f.target), _secs(f.failover_s),
                     _secs(f.healed_s), f.detail + (f" ERROR: {f.error}" if f.error else "")))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5]
             for r in rows]
    lines.insert(1, "-" * min(120, sum(widths) + 12 + len(rows[0][5])))
    c = report.config
    errors = ", ".join(f"{k}={v}" for k, v in sorted(report.delivery_errors.items())) or "none"
    identical = "yes" if report.replicas_identical else "NO"
    lines += [
        "",
        f"seed {c.seed}, {c.brokers} brokers, {c.partitions} partitions, RF "
        f"{min(3, c.brokers)}, min.insync.replicas {c.min_insync_replicas}"
        + (", unclean election on" if c.unclean_leader_election else "")
        + f", {c.producers} {'idempotent ' if c.idempotence else ''}acks={c.acks} "
        f"producers, {len(report.faults)} faults, {report.elapsed_s:.0f}s in all",
        f"sent               {report.sent}",
        f"acknowledged       {report.acked}" + (
            f" ({report.acked_without_offset} delivered by librdkafka without an offset, "
            "checked by partition)" if report.acked_without_offset else ""),
        f"read back          {report.read_back}",
        f"lost               {len(report.lost)}" + _examples(report.lost)
        + ("  (allowed by these settings)" if report.lost and not c.guarantees().no_loss
           else ""),
        f"misplaced          {len(report.misplaced)}" + _examples(report.misplaced),
        f"duplicates         {report.duplicates}" + (
            ("  (FAILURE: idempotence should make this 0)" if c.idempotence
             else "  (allowed without idempotence)") if report.duplicates else ""),
        f"unacked-written    {report.unacked_written} (+{report.failed_written} written "
        "though delivery failed)",
        f"delivery failures  {errors}; still queued after flush: {report.undelivered}",
        f"replicas identical {identical} below the HW ({len(report.replicas)} partitions)",
        f"broker tracebacks  {sum(report.broker_tracebacks.values())} in their stderr"
        + (f" {report.broker_tracebacks}" if any(report.broker_tracebacks.values()) else ""),
    ]
    lines += [f"  p{r.partition}: {r.problem} (HWs {r.high_watermarks})"
              for r in report.replicas if r.problem]
    if report.reassignments:
        done = sum(1 for r in report.reassignments if r.completed)
        lines.append(f"reassignments      {done}/{len(report.reassignments)} partitions at "
                     "their last target: " + ", ".join(
                         f"p{r.partition}->{list(r.target)}"
                         + ("" if r.completed else " NOT COMPLETED") for r in
                         report.reassignments))
    if report.consistency is not None:
        lines += ["", report.consistency.to_text().rstrip()]
    lines.append("RESULT: " + ("OK" if report.ok else "FAILED: " + "; ".join(report.failures)))
    return "\n".join(lines)


def _examples(items: list[str]) -> str:
    return f"  e.g. {', '.join(items[:5])}" if items else ""


def plot_report(report: ChaosReport, path: str) -> None:
    """The run as an SVG file: the consistency checker's timeline (operations per second,
    lost or truncated records) over the acknowledged writes per second of each producer,
    both with the injected faults shaded (from the run's faults.log; without one, the
    faults as markers)."""
    from ...common import plot
    from ...common.fault_log import fault_label
    from .report import checker_svg

    events = (read_fault_events(report.workdir / FAULT_LOG_NAME)
              if report.workdir is not None else [])
    spans = fault_spans(events)
    t0 = (min(op.wall for op in report.history.ops())
          if report.history is not None and len(report.history) else None)
    if spans and t0 is not None:
        end = t0 + max((x for pts in report.throughput.values() for x, _ in pts), default=0.0)
        bands = [(s.start - t0, (s.end if s.end is not None else end) - t0, fault_label(s))
                 for s in spans]
        markers: list[tuple[float, str]] = []
    else:
        bands, markers = [], [(f.at_s, f.kind) for f in report.faults]
    charts = []
    legend = 26  # the longest of both legends ("LOST (acked, by ack time)"): x axes aligned
    if report.consistency is not None:
        charts.append(checker_svg(report.consistency, events, legend_chars=legend))
    charts.append(plot.line_chart(
        report.throughput,
        title=f"odradek chaos, seed {report.config.seed}: acknowledged writes per second",
        x_label="seconds since the workload started", y_label="acks/s",
        markers=markers, bands=bands, step=True, width=1000, legend_chars=legend))
    plot.write_svg(path, plot.stack(charts))
