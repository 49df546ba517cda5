"""Reading a sink's output back and counting it against its input: the exactly-once check of
the Spark sink's tests, benchmark and chaos scenario (every input value exactly once, nothing
else; under at-least-once, duplicates are counted, not failed)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..client import Consumer, TopicPartition


def read_topic(bootstrap: str, topic: str, read_committed: bool = True,
               timeout: float = 60.0) -> list[bytes]:
    """Every value of `topic` from its beginning up to its end offsets (the last stable
    offsets under read_committed), in partition order."""
    c = Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": "false",
                  "isolation.level": "read_committed" if read_committed
                  else "read_uncommitted", "client.id": "odradek-spark-audit"})
    try:
        tps = [TopicPartition(topic, p) for p in c.partitions_for_topic(topic)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        end = c.end_offsets(tps)
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while any(c.position(tp) < end[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} did not reach {end} in {timeout}s")
            out.extend(r.value for r in c.poll(0.5))
        return out
    finally:
        c.close(autocommit=False)


@dataclass
class CountCheck:
    """Input values against output values."""

    expected: int
    distinct_seen: int
    missing: list[bytes] = field(default_factory=list)
    duplicates: int = 0  # extra copies of expected values
    unexpected: list[bytes] = field(default_factory=list)

    @property
    def exactly_once(self) -> bool:
        return not self.missing and not self.duplicates and not self.unexpected

    @property
    def at_least_once(self) -> bool:
        return not self.missing and not self.unexpected

    def summary(self) -> str:
        return (f"{self.expected} expected, {self.distinct_seen} seen, "
                f"{len(self.missing)} missing, {self.duplicates} duplicates, "
                f"{len(self.unexpected)} unexpected")


def count_check(inputs: Iterable[bytes], outputs: Iterable[bytes]) -> CountCheck:
    want = Counter(inputs)
    got = Counter(outputs)
    missing = sorted(v for v in want if got[v] < want[v])
    dups = sum(max(0, got[v] - want[v]) for v in want)
    unexpected = sorted(v for v in got if v not in want)
    return CountCheck(sum(want.values()), len(got), missing, dups, unexpected)
