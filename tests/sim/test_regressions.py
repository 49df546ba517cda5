"""Regression cases of the simulator (tests/sim/regressions/README.md): every schedule file in
tests/sim/regressions is replayed (`odradek sim --schedule FILE`'s run, sim/replay.py) and
must pass the consistency check. The schedules run two at a time, each in its own child
(sim/explore.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.sim.explore import run_many
from odradek.sim.replay import load_schedule

pytestmark = pytest.mark.sim

CASES = sorted((Path(__file__).parent / "regressions").glob("*.json"))


def test_every_regression_schedule_replays_clean() -> None:
    assert CASES, "no regression schedules"
    configs = [load_schedule(path) for path in CASES]
    names = {id(cfg): path.name for cfg, path in zip(configs, CASES, strict=True)}
    outcomes = list(run_many(configs, jobs=2, timeout=300.0))
    assert len(outcomes) == len(CASES)
    failed = {names[id(o.cfg)]: o.error or o.failed_rows for o in outcomes if not o.ok}
    assert not failed, failed
