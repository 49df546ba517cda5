"""The fault log: what was done to a cluster on purpose, and when.

Whoever injects a fault (the in-process cluster's fault API, the `chaos` command, the console's
fault buttons) appends one `FaultEvent` per line of JSON to a `faults.log`; the HA timeline
(`state-change-log --plot`, the console) and the consistency checker's report read it to mark
the faults beside what the cluster did about them.

A fault that lasts has a ``start`` and an ``end`` event with the same ``fault_id``; one that is
over at once (a kill -9, a forced session expiry) is a single ``instant`` event. ``targets``
name nodes as strings: ``"broker-1"``, ``"zk-2"`` (or ``"store"`` for the in-process store),
``"clients"``, or a directory for disk faults.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from .clock import wall_seconds

Phase = Literal["start", "end", "instant"]
PHASES: tuple[str, ...] = ("start", "end", "instant")

FAULT_LOG_NAME = "faults.log"


@dataclass(frozen=True)
class FaultEvent:
    kind: str  # kill, restart, pause, partition, isolate-store, expire-session, slow-link, ...
    phase: Phase
    targets: tuple[str, ...] = ()
    detail: str = ""
    fault_id: int = 0  # pairs a start with its end
    # seconds since the epoch (common.clock: the simulation's virtual wall clock in a run)
    time: float = field(default_factory=wall_seconds)

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"fault phase must be one of {PHASES}, not {self.phase!r}")
        object.__setattr__(self, "targets", tuple(str(t) for t in self.targets))

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> FaultEvent:
        obj = json.loads(line)
        return cls(kind=str(obj["kind"]), phase=obj["phase"],
                   targets=tuple(obj.get("targets", ())), detail=str(obj.get("detail", "")),
                   fault_id=int(obj.get("fault_id", 0)), time=float(obj["time"]))


class FaultLog:
    """Appends events to a file, one JSON object per line, flushed at once (a crash of the
    process that injects faults must not lose the record of what it did). Thread-safe."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._next_id = 1

    def new_id(self) -> int:
        with self._lock:
            fault_id, self._next_id = self._next_id, self._next_id + 1
            return fault_id

    def append(self, event: FaultEvent) -> FaultEvent:
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(event.to_json() + "\n")
                f.flush()
                os.fsync(f.fileno())
        return event

    def start(self, kind: str, targets: Iterable[object], detail: str = "") -> int:
        fault_id = self.new_id()
        self.append(FaultEvent(kind, "start", tuple(map(str, targets)), detail, fault_id))
        return fault_id

    def end(self, fault_id: int, kind: str, targets: Iterable[object], detail: str = "") -> None:
        self.append(FaultEvent(kind, "end", tuple(map(str, targets)), detail, fault_id))

    def instant(self, kind: str, targets: Iterable[object], detail: str = "") -> None:
        self.append(FaultEvent(kind, "instant", tuple(map(str, targets)), detail,
                               self.new_id()))


def read_fault_events(path: str | Path) -> list[FaultEvent]:
    """The events of a fault log in file order; a torn last line (a crash mid-write) and
    lines that are not events are skipped."""
    return list(_events(Path(path)))


def _events(path: Path) -> Iterator[FaultEvent]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    for line in text.splitlines():
        try:
            yield FaultEvent.from_json(line)
        except (ValueError, KeyError, TypeError):
            continue


@dataclass(frozen=True)
class FaultSpan:
    """A fault from its start to its end (``end`` None: still active at the log's end)."""
    kind: str
    targets: tuple[str, ...]
    detail: str
    start: float
    end: float | None


def fault_label(span: FaultSpan) -> str:
    """A span's label in the timelines: kind, targets and detail."""
    targets = ",".join(span.targets)
    return f"{span.kind} {targets}".strip() + (f" ({span.detail})" if span.detail else "")


def fault_spans(events: Iterable[FaultEvent]) -> list[FaultSpan]:
    """Pairs starts with ends by fault id; instants become spans of zero length."""
    open_: dict[int, FaultEvent] = {}
    spans: list[FaultSpan] = []
    for e in events:
        if e.phase == "instant":
            spans.append(FaultSpan(e.kind, e.targets, e.detail, e.time, e.time))
        elif e.phase == "start":
            open_[e.fault_id] = e
        else:
            s = open_.pop(e.fault_id, None)
            if s is not None:
                spans.append(FaultSpan(s.kind, s.targets, s.detail, s.time, e.time))
    spans.extend(FaultSpan(s.kind, s.targets, s.detail, s.time, None) for s in open_.values())
    return sorted(spans, key=lambda s: s.start)
