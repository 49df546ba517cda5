"""The consistency checker's report: a text table and a timeline picture with the faults.

`report_text(report)` is the table `CheckReport.to_text()` prints; `checker_svg(report,
faults)` the picture `CheckReport.plot()` writes: the workload's operations per second (sends
acknowledged, failed, unknown; records read), the acknowledged writes later lost and the reads
of records later truncated (by the time they happened), over the injected faults, shaded from
start to end and labelled ("kill broker-2", "partition broker-1|broker-2,broker-3").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

from odradek.chaos.checker.history import Op
from odradek.common.fault_log import FaultEvent, fault_label, fault_spans
from odradek.common.plot import line_chart, write_svg


class _Settings(Protocol):
    @property
    def acks(self) -> str: ...
    @property
    def min_insync_replicas(self) -> int: ...
    def describe(self) -> str: ...


class _Row(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def guarantee(self) -> str: ...
    @property
    def promised(self) -> bool: ...
    @property
    def why(self) -> str: ...
    @property
    def checked(self) -> int: ...
    @property
    def observed(self) -> int: ...
    @property
    def examples(self) -> tuple[str, ...]: ...
    @property
    def verdict(self) -> str: ...


class CheckReport(Protocol):
    """What this module reads of `odradek.chaos.checker.consistency.CheckReport` (a protocol, so
    that
    the checker can import this module and not the other way round)."""
    @property
    def guarantees(self) -> _Settings: ...
    @property
    def rows(self) -> Sequence[_Row]: ...
    @property
    def ops(self) -> Sequence[Op]: ...
    @property
    def lost(self) -> Sequence[Op]: ...
    @property
    def truncated_reads(self) -> Sequence[Op]: ...
    @property
    def verdict(self) -> str: ...

__all__ = ["checker_svg", "per_second", "plot_report", "report_text"]


def _yes(b: bool) -> str:
    return "yes" if b else "no"


def report_text(report: CheckReport, examples: bool = True) -> str:
    """The table: one row per guarantee (promised under these settings?, how many checked,
    how many observed, verdict), each violation row followed by its examples."""
    ops = report.ops
    sends = [o for o in ops if o.f == "send"]
    n_inv = sum(1 for o in sends if o.type == "invoke")
    n = {t: sum(1 for o in sends if o.type == t) for t in ("ok", "fail", "info")}
    reads = sum(1 for o in ops if o.f == "read")
    lines = [f"consistency check ({report.guarantees.describe()})",
             f"history: {n_inv} sends ({n['ok']} acknowledged, {n['fail']} failed, "
             f"{n['info']} unknown, {n_inv - sum(n.values())} never completed), {reads} reads"]
    head = ("guarantee", "Kafka promises it", "checked", "observed", "verdict")
    body = [(r.guarantee, (f"{_yes(r.promised)}: {r.why}" if r.why else
                           ("-" if r.key == "unknown" else _yes(r.promised))),
             str(r.checked), str(r.observed), r.verdict) for r in report.rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{'<' if i < 2 else '>'}{w}}}" if i < 4 else "{}"
                    for i, w in enumerate(widths))
    lines.append(fmt.format(*head))
    lines.append("  ".join("-" * w for w in widths))
    for row, cells in zip(report.rows, body, strict=True):
        lines.append(fmt.format(*cells))
        if examples and row.observed and row.examples:
            examples_ = list(row.examples)
            if row.key == "unknown":  # first the summary, then the examples
                lines.append(f"    {examples_.pop(0)}")
            lines.extend(f"    e.g. {e}" for e in examples_)
            if row.observed > len(examples_):
                lines.append(f"    ... and {row.observed - len(examples_)} more")
    lines.append(f"verdict: {report.verdict}")
    return "\n".join(lines) + "\n"


def per_second(times: Iterable[float], t0: float, end: float | None = None
               ) -> list[tuple[float, float]]:
    """(second, count) for each whole second from `t0` up to the last time (or `end`),
    zeros included, so a step chart shows the gaps."""
    counts: dict[int, int] = {}
    for t in times:
        s = int(t - t0) if t >= t0 else 0
        counts[s] = counts.get(s, 0) + 1
    if not counts and end is None:
        return []
    last = max([*counts, int(end - t0) if end is not None else 0])
    return [(float(s), float(counts.get(s, 0))) for s in range(last + 1)]


def checker_svg(report: CheckReport, faults: Iterable[FaultEvent] = (), title: str = "",
                width: int = 1000, height: int = 460, legend_chars: int | None = None) -> str:
    """The timeline picture (see the module doc). Times are seconds since the first op."""
    ops: Sequence[Op] = report.ops
    spans = fault_spans(faults)
    starts = [o.wall for o in ops if o.wall > 0] + [s.start for s in spans]
    t0 = min(starts) if starts else 0.0
    end_t = max([o.wall for o in ops] + [s.end or s.start for s in spans], default=t0)

    def times(pred: Callable[[Op], bool]) -> list[float]:
        return [o.wall for o in ops if pred(o)]

    series: dict[str, list[tuple[float, float]]] = {
        "acknowledged": per_second(times(lambda o: o.f == "send" and o.type == "ok"), t0,
                                   end_t),
        "failed": per_second(times(lambda o: o.f == "send" and o.type == "fail"), t0, end_t),
        "unknown (info)": per_second(times(lambda o: o.f == "send" and o.type == "info"), t0,
                                     end_t),
    }
    if any(o.f == "read" for o in ops):
        series["read"] = per_second(times(lambda o: o.f == "read"), t0, end_t)
    if report.lost:
        series["LOST (acked, by ack time)"] = per_second((o.wall for o in report.lost), t0,
                                                         end_t)
    if report.truncated_reads:
        series["TRUNCATED reads"] = per_second((o.wall for o in report.truncated_reads), t0,
                                               end_t)
    bands = [(s.start - t0, (s.end if s.end is not None else end_t) - t0, fault_label(s))
             for s in spans]
    # The anomalies are few next to the ops per second: a marker per second that has any,
    # so that they are seen whatever the scale.
    markers = [(x, f"LOST {int(n)} acked writes")
               for x, n in per_second((o.wall for o in report.lost), t0) if n]
    markers += [(x, f"TRUNCATED {int(n)} reads")
                for x, n in per_second((o.wall for o in report.truncated_reads), t0) if n]
    verdicts = ", ".join(f"{r.key} {r.observed}" for r in report.rows
                         if r.observed and r.key != "unknown")
    heading = title or (f"consistency check: {report.verdict}"
                        + (f" ({verdicts})" if verdicts else "")
                        + f" -- acks={report.guarantees.acks} "
                        f"min.isr={report.guarantees.min_insync_replicas}")
    return line_chart(series, title=heading, x_label="seconds since the workload started",
                      y_label="operations per second", bands=bands, markers=markers,
                      step=True,
                      width=width, height=height, legend_chars=legend_chars)


def plot_report(report: CheckReport, path: str | Path, faults: Iterable[FaultEvent] = (),
                title: str = "") -> Path:
    return write_svg(path, checker_svg(report, faults, title))
