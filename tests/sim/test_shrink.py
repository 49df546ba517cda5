"""The shrinker (sim/shrink.py) and schedule files (sim/replay.py) on synthetic predicates: no
simulation runs, so these cost milliseconds. ddmin finds a 1-minimal failing subset; a shrink
makes the drawn faults explicit, reduces them, cuts the duration and the clients, and stays
within its run budget; a schedule file round-trips every field."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import pytest

from odradek.sim.replay import (
    PLAN_FIELDS,
    explicit,
    load_schedule,
    replay_command,
    save_schedule,
)
from odradek.sim.schedule import PlannedFault
from odradek.sim.shrink import ddmin, shrink
from odradek.sim.workload import WorkloadConfig

pytestmark = pytest.mark.sim


def counting(predicate):  # type: ignore[no-untyped-def]
    calls: list[object] = []

    def fails(x):  # type: ignore[no-untyped-def]
        calls.append(x)
        return predicate(x)
    return fails, calls


@pytest.mark.parametrize("needed", [{3}, {0, 19}, {2, 5, 11}, set()])
def test_ddmin_finds_exactly_the_elements_that_make_it_fail(needed: set[int]) -> None:
    fails, calls = counting(lambda xs: needed <= set(xs))
    assert ddmin(list(range(20)), fails) == sorted(needed)
    assert len(calls) < 60  # far fewer than the 2**20 subsets


def test_ddmin_result_is_one_minimal_for_an_interaction() -> None:
    # fails when two elements of different parity are both present: any such pair is minimal
    def fails(xs: list[int]) -> bool:
        return any(a % 2 != b % 2 and a + b > 20 for a, b in itertools.combinations(xs, 2))

    found = ddmin(list(range(16)), fails)
    assert fails(found) and len(found) == 2
    assert all(not fails([x for x in found if x != y]) for y in found)


def test_shrink_makes_the_draw_explicit_and_reduces_faults_duration_and_clients() -> None:
    cfg = WorkloadConfig(5, duration=60.0)
    drawn = explicit(cfg).faults
    assert drawn and len(drawn) > 10 and cfg.faults is None
    culprit = drawn[len(drawn) // 2]  # a run fails when this fault and a producer are in it

    def fails(c: WorkloadConfig) -> bool:
        assert c.faults is not None
        return culprit in c.faults and c.producers >= 1 and c.duration > culprit.at

    small = shrink(cfg, fails)
    assert small.faults == [culprit]
    assert culprit.at < small.duration <= culprit.at + culprit.hold + 1.0
    assert (small.producers, small.consumers, small.transactional_producers) == (1, 0, 0)
    assert small.seed == cfg.seed and small.fault_kinds == cfg.fault_kinds


def test_shrink_halves_the_duration_and_keeps_to_its_budget() -> None:
    cfg = WorkloadConfig(5, duration=60.0, faults=[])
    small = shrink(cfg, lambda c: c.duration >= 3.0)  # fails after 3 virtual seconds
    assert small.duration == pytest.approx(3.75)  # 60 halved while >= 3
    runs: list[WorkloadConfig] = []
    shrink(WorkloadConfig(5, duration=60.0), lambda c: runs.append(c) or True, max_runs=7)
    assert len(runs) == 7
    with pytest.raises(ValueError, match="does not fail"):
        shrink(cfg, lambda c: False)


def test_a_budget_spent_midway_through_ddmin_keeps_what_it_found() -> None:
    cfg = explicit(WorkloadConfig(5, duration=60.0))
    assert cfg.faults is not None and len(cfg.faults) > 10
    culprit = cfg.faults[3]
    fails, runs = counting(lambda c: culprit in c.faults)
    small = shrink(cfg, fails, max_runs=4)  # the whole, [], a half without it, the half with it
    assert len(runs) == 4 and small.faults is not None
    assert culprit in small.faults and len(small.faults) <= len(cfg.faults) // 2 + 1


def test_a_schedule_file_round_trips_and_names_its_replay(tmp_path: Path) -> None:
    assert "faults" in PLAN_FIELDS and PLAN_FIELDS["faults"] is PlannedFault
    cfg = explicit(WorkloadConfig(9, duration=12.5, producers=1, fault_scale=0.5, rate=0.5,
                                  fault_kinds=("kill", "slow", "partition")))
    path = tmp_path / "s.json"
    save_schedule(cfg, path, comment="a test")
    data = json.loads(path.read_text())
    assert data["seed"] == 9 and data["comment"] == "a test"
    assert "trace" not in data["config"] and "faults" not in data["config"]
    back = load_schedule(path)
    assert dataclasses.replace(back, faults=list(back.faults or ())) == cfg
    assert all(isinstance(f.nodes, tuple) for f in back.faults or ())
    assert replay_command(cfg, path) == f"odradek sim --schedule {path}"
    assert replay_command(dataclasses.replace(cfg, faults=None)) == (
        "odradek sim --seed 9 --duration 12.5 --producers 1 --fault-scale 0.5 --rate 0.5 "
        "--faults kill,slow,partition")
    data["config"]["meteors"] = 3
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="meteors"):
        load_schedule(path)


def test_replay_command_names_the_operations_and_their_rate() -> None:
    from odradek.sim.operations import OPERATION_KINDS

    every = WorkloadConfig(5, duration=60.0, rate=0.1, operation_kinds=OPERATION_KINDS[::-1],
                           operation_rate=0.25)
    assert replay_command(every) == (
        "odradek sim --seed 5 --duration 60 --rate 0.1 --ops all --op-rate 0.25")
    assert replay_command(WorkloadConfig(5, operation_kinds=("seek", "commit"))) == (
        "odradek sim --seed 5 --ops seek,commit")
