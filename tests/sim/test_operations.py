"""The explorer's operations (sim/operations.py, sim/operation_runner.py): the plan is a
function of the seed and survives JSON, and a run applying one operation of every kind without
faults has each of them succeed, recorded in the history the checker reads, with the checker's
verdict ok."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from odradek.sim.operations import (
    LIFECYCLE_KINDS,
    OPERATION_KINDS,
    PlannedOperation,
    coverage,
    parse_kinds,
    plan_operations,
)
from odradek.sim.random import SimRandom

pytestmark = pytest.mark.sim


def test_the_plan_is_a_function_of_the_seed_and_survives_json() -> None:
    plan = plan_operations(SimRandom(5).fork("operations"), OPERATION_KINDS, 60.0, 1.0, 3)
    assert plan == plan_operations(SimRandom(5).fork("operations"), OPERATION_KINDS, 60.0)
    assert plan != plan_operations(SimRandom(6).fork("operations"), OPERATION_KINDS, 60.0)
    assert {op.kind for op in plan[:len(OPERATION_KINDS)]} == set(OPERATION_KINDS)
    assert all(0 < a.at <= b.at < 60.0 for a, b in itertools.pairwise(plan))
    assert 30 < len(plan) < 100  # about one a second
    dense = plan_operations(SimRandom(5).fork("operations"), OPERATION_KINDS, 60.0, 4.0)
    assert len(dense) > 2 * len(plan)
    back = [PlannedOperation.from_json(json.loads(json.dumps(op.to_json()))) for op in plan]
    assert back == plan
    # the caller's order of the kinds is no input
    assert plan_operations(SimRandom(5).fork("operations"), OPERATION_KINDS[::-1], 60.0) == plan
    assert parse_kinds("all") == OPERATION_KINDS and parse_kinds("none") == ()
    assert parse_kinds(None) == () and parse_kinds("seek, commit") == ("seek", "commit")
    with pytest.raises(ValueError, match="unknown operation kinds"):
        parse_kinds("seek,meteor")
    with pytest.raises(ValueError, match="unknown operation kind"):
        PlannedOperation.from_json({"at": 1.0, "kind": "meteor"})
    assert coverage([("seek", "ok"), ("seek", "ok"), ("commit", "fail")], ["kill"]) == {
        "fault:kill": 1, "op:commit:fail": 1, "op:seek:ok": 2}


def test_every_kind_succeeds_without_faults_and_is_in_the_history(tmp_path: Path) -> None:
    from odradek.sim.workload import WorkloadConfig, run_workload

    # a drawn plan's first round (every kind once, with its drawn arguments), 0.3 s apart,
    # the brokers' shutdowns last: the operations after them would meet a broker down
    drawn = plan_operations(SimRandom(3).fork("operations"), OPERATION_KINDS, 60.0)
    first = sorted(drawn[:len(OPERATION_KINDS)], key=lambda op: op.kind in LIFECYCLE_KINDS)
    plan = [PlannedOperation(0.3 * (i + 1), op.kind, op.args) for i, op in enumerate(first)]
    report = run_workload(WorkloadConfig(3, duration=16.0, fault_kinds=(), producers=1,
                                         consumers=1, transactional_producers=0,
                                         operations=plan, trace=tmp_path / "trace.jsonl"))
    assert report.ok, report.check.to_text()
    assert report.coverage == {f"op:{k}:ok": 1 for k in sorted(OPERATION_KINDS)}
    assert report.summary()["coverage"] == report.coverage
    ops = [e for line in (tmp_path / "trace.jsonl").read_text().splitlines()
           if (e := json.loads(line))["source"] == "op"]
    done = {e["f"] for e in ops if e["type"] == "ok"}
    assert done >= set(OPERATION_KINDS) - {"commit"}
    seeks = [e for e in ops if e["f"] == "seek" and e["type"] == "ok"]
    commits = [e for e in ops if e["f"] == "commit" and e["type"] == "ok"]
    assert seeks and commits  # per partition: the group, the partition and the offset
    assert all(e["value"] == "ops-group" and e["partition"].startswith("events-")
               and e["offset"] >= 0 for e in seeks + commits)


def test_the_command_line_takes_the_kinds_and_prints_the_coverage(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from odradek.chaos.checker.consistency import Guarantees, check
    from odradek.chaos.checker.history import History
    from odradek.sim import command, workload

    seen: list[workload.WorkloadConfig] = []

    def run(cfg: workload.WorkloadConfig) -> workload.SimReport:
        seen.append(cfg)
        return workload.SimReport(cfg.seed, 1.5, 0.25, 2, 0, "ab" * 32,
                                  check(History(), Guarantees(), {}),
                                  coverage={"op:seek:ok": 1} if cfg.operation_kinds else {})

    monkeypatch.setattr(workload, "run_workload", run)
    parser = argparse.ArgumentParser(prog="odradek")
    command.add_parser(parser.add_subparsers(dest="command", required=True))
    for argv, kinds, rate in ((["--ops", "seek,commit", "--op-rate", "2"], ("seek", "commit"), 2.0),
                              (["--ops", "all"], OPERATION_KINDS, 1.0), ([], (), 1.0)):
        args = parser.parse_args(["sim", "--seed", "9", "--faults", "none", *argv])
        assert args.func(args) == 0
        assert (seen[-1].operation_kinds, seen[-1].operation_rate) == (kinds, rate)
        out = capsys.readouterr().out
        assert ("op:seek:ok" in out) == bool(kinds)
        args = parser.parse_args(["sim", "--seed", "9", "--json", "--faults", "none", *argv])
        assert args.func(args) == 0
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert summary.get("coverage") == ({"op:seek:ok": 1} if kinds else None)
    args = parser.parse_args(["sim", "--seed", "9", "--ops", "seek,meteor"])
    assert args.func(args) == 2 and len(seen) == 6
    assert "unknown operation kinds ['meteor']" in capsys.readouterr().err
