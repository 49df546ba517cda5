"""The simulator's teeth (docs/simulation.md, "Teeth: planted bugs"): each bug of
tests/sim/mutants.py, planted in this process, makes `odradek sim`'s run fail within a stated
number of seeds, caught by a stated row (a checker row or an invariant of sim/invariants.py);
the failing seed replays (same verdict, same digest); and the clean code passes those seeds.

Each case uses the cheapest workload found that still finds its bug: one producer, one
consumer, a few virtual seconds, and only the fault kinds the bug needs. Cases marked slow
(a bug the workload reaches only in long runs) run with ODRADEK_SLOW_MUTANTS=1; a case the
workload does not reach at all yet is skipped, its mutant kept for the explorer.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from odradek.sim.workload import SimReport, WorkloadConfig, run_workload

from .mutants import MUTANTS

pytestmark = pytest.mark.sim

SLOW = os.environ.get("ODRADEK_SLOW_MUTANTS") == "1"


@dataclass(frozen=True)
class Case:
    """Seeds `first`..`first + seeds - 1` of this workload find the bug, caught by `row`."""

    row: str
    seeds: int
    workload: dict[str, Any] = field(default_factory=dict)
    first: int = 1
    slow: bool = False
    reached: bool = True  # False: no seed tried reaches the bug yet (docs/simulation.md)

    def config(self, seed: int) -> WorkloadConfig:
        return WorkloadConfig(seed, **{"producers": 1, "consumers": 1, **self.workload})


QUIET: dict[str, Any] = {"duration": 4.0, "fault_kinds": ()}
CASES: dict[str, Case] = {
    "hw-max-leo": Case("hw-within-isr", 1, QUIET),
    "fetch-session-misses-hw": Case("liveness-isr", 1, QUIET),
    "marker-not-written": Case("txn-markers", 1, QUIET),
    "isr-shrink-not-in-store": Case("isr-in-store", 1, {
        "duration": 12.0, "fault_kinds": ("partition",), "fault_scale": 3.0}),
    "no-truncation-on-diverging-epoch": Case("replicas", 1, {
        "duration": 30.0, "fault_kinds": ("session-expiry", "store-cut", "isolate", "one-way"),
        "producers": 2, "consumers": 2}, first=5, slow=True),
    # a deposed controller writes only with an event of its own waiting on the store while its
    # session expires (the controller's requests retry until connected, as Kafka's): a long
    # store cut and operations that go to the controller (ControlledShutdown, ElectLeaders,
    # AlterPartitionReassignments)
    "controller-without-epoch-check": Case("controller-fenced", 1, {
        "duration": 20.0, "fault_kinds": ("store-cut",), "fault_scale": 4.0,
        "operation_kinds": ("controlled-shutdown", "elect-preferred", "reassign"),
        "operation_rate": 1.0}),
}


@pytest.fixture(autouse=True)
def quiet_logs() -> Iterator[None]:
    """The brokers log every fault's consequences; a run's verdict is what is checked."""
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


@functools.cache
def clean(cfg: WorkloadConfig) -> SimReport:
    return run_workload(cfg)


def failing(report: SimReport) -> list[str]:
    return [row.key for row in report.check.rows if row.verdict == "FAIL"]


def test_every_mutant_has_a_case() -> None:
    assert set(CASES) == set(MUTANTS)


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_found_and_replays(name: str) -> None:
    case = CASES[name]
    if not case.reached:
        pytest.skip("today's workload does not reach this bug (docs/simulation.md)")
    if case.slow and not SLOW:
        pytest.skip("a long run: ODRADEK_SLOW_MUTANTS=1")
    seeds = range(case.first, case.first + case.seeds)
    found: SimReport | None = None
    for seed in seeds:
        with MUTANTS[name]():
            report = run_workload(case.config(seed))
        if not report.ok:
            found = report
            break
    assert found is not None, f"{name}: not found in seeds {list(seeds)}"
    assert case.row in failing(found), (name, failing(found))
    # the failing seed replays: same verdict, same digest
    with MUTANTS[name]():
        again = run_workload(case.config(found.seed))
    assert (again.digest, failing(again)) == (found.digest, failing(found))
    # the clean code passes the same seeds
    for seed in range(case.first, found.seed + 1):
        report = clean(case.config(seed))
        assert report.ok, (seed, failing(report))
