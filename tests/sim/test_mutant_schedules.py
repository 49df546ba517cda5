"""The planted bugs' shrunk schedules (tests/sim/mutant_schedules, written by
tests/sim/shrink_mutants.py): each replays in this process with its bug planted and fails the
row that caught it, and passes on the clean code, so the explorer's teeth stay sharp on every
change (docs/simulation.md, "Teeth: planted bugs")."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.sim.replay import load_schedule
from odradek.sim.workload import run_workload

from .mutants import MUTANTS
from .test_mutants import CASES, failing, quiet_logs  # noqa: F401 (the autouse fixture)

pytestmark = pytest.mark.sim

SCHEDULES = sorted((Path(__file__).parent / "mutant_schedules").glob("*.json"))


def test_there_are_shrunk_schedules() -> None:
    assert SCHEDULES, "no shrunk schedules of planted bugs"
    assert {p.stem for p in SCHEDULES} <= set(MUTANTS)


@pytest.mark.parametrize("path", SCHEDULES, ids=[p.stem for p in SCHEDULES])
def test_shrunk_schedule_fails_with_its_bug_and_passes_without(path: Path) -> None:
    name, cfg = path.stem, load_schedule(path)
    with MUTANTS[name]():
        planted = run_workload(cfg)
    assert CASES[name].row in failing(planted), (name, failing(planted))
    clean = run_workload(cfg)
    assert clean.ok, (name, failing(clean))
