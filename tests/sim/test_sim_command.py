"""`odradek sim` (sim/command.py, sim/workload.py, sim/schedule.py): a seeded run of brokers,
clients and every kind of fault is checked by the consistency checker, and is a function of
its seed: two fresh processes with different PYTHONHASHSEEDs print the same digest and write
the same trace, event for event."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import odradek.sim
from odradek.sim.random import SimRandom
from odradek.sim.schedule import FAULT_KINDS, plan_faults

pytestmark = pytest.mark.sim

SRC = str(Path(odradek.sim.__file__).resolve().parents[2])
# every kind, in two runs, and a third of some kinds again with operations (a run covers each
# of its kinds once before any repeats; these seeds' schedules fit every kind of their run in
# its duration)
GROUPS = {11: "kill,store-cut,session-expiry,partition,one-way,machine-crash,disk-full",
          2: "isolate,stall,reset,loss,slow,disk-error",
          6: "kill,machine-crash,disk-full,disk-error"}
DURATION = "7"  # with --fault-scale 0.4: six or seven faults in a run
#: every run interleaves the explorer's operations (docs/simulation.md), three a second. Seed
#: 11's meet the coordination store cut (each must get an error code, not a closed connection
#: or a traceback); seed 6's delete records and move replicas before its machine crash: while
#: the simulated disk keyed files by inode number, two processes gave two digests (sim/disk.py)
OPERATIONS = {seed: ["--ops", "all", "--op-rate", "3"] for seed in (11, 2, 6)}
#: what the brokers log, with its stack, when the simulated disk fails a write (KIP-112)
DISK_ERRORS = ("No space left on device", "Input/output error")


def start(seed: int, kinds: str, hash_seed: str, trace: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "PYTHONHASHSEED": hash_seed}
    return subprocess.Popen(
        [sys.executable, "-m", "odradek.cli", "sim", "--seed", str(seed), "--duration",
         DURATION, "--fault-scale", "0.4", "--faults", kinds, "--producers", "1",
         "--consumers", "1", "--json", "--trace", str(trace), *OPERATIONS.get(seed, [])],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]) -> dict[str, object]:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, out + err
    unexpected = [t for t in err.split("Traceback")[1:]
                  if not any(e in t for e in DISK_ERRORS)]
    assert not unexpected and "never retrieved" not in err, err
    summary: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    assert set(summary) - {"coverage"} == {"seed", "virtual_s", "wall_s", "operations",
                                           "faults", "digest", "ok"}
    assert ("coverage" in summary) == (summary["seed"] in OPERATIONS)
    return summary


def test_every_fault_kind_same_seed_same_digest_in_two_processes(tmp_path: Path) -> None:
    runs = {}
    for seed, kinds in GROUPS.items():  # the two processes of a seed at once (two CPUs)
        pair = [start(seed, kinds, h, tmp_path / f"{seed}-{h}.jsonl") for h in ("1", "2")]
        runs[seed] = [finish(p) for p in pair]
    injected: set[str] = set()
    disk: set[str] = set()  # a machine crash put files back (only changed files are events)
    for seed, (first, second) in runs.items():
        assert first["ok"] is True and first["seed"] == seed
        assert {k: v for k, v in first.items() if k != "wall_s"} == \
            {k: v for k, v in second.items() if k != "wall_s"}
        one = (tmp_path / f"{seed}-1.jsonl").read_text()
        assert one == (tmp_path / f"{seed}-2.jsonl").read_text()
        events = [json.loads(line) for line in one.splitlines()]
        assert {e["source"] for e in events} == {"net", "op", "fault"}
        if seed in OPERATIONS:  # every operation in the history with its outcome
            coverage = first["coverage"]
            assert isinstance(coverage, dict)
            done = [e["f"] for e in events if e["source"] == "op" and e["type"] != "invoke"
                    and e["f"] not in ("send", "read", "commit", "seek")]
            assert len(done) == sum(n for k, n in coverage.items() if k.startswith("op:")
                                    and k.split(":")[1] not in ("commit", "seek"))
            assert any(k.endswith(":ok") for k in coverage)
        starts = [e["kind"] for e in events if e["source"] == "fault" and e["phase"] == "start"]
        assert len(starts) == first["faults"]
        injected |= set(starts)
        disk |= {e["kind"] for e in events if e.get("kind") in ("disk-crash", "disk-fail")}
    assert injected == set(FAULT_KINDS)
    assert disk == {"disk-crash", "disk-fail"}
    assert runs[11][0]["digest"] != runs[2][0]["digest"]


def test_the_schedule_is_a_function_of_the_seed_and_covers_every_kind() -> None:
    plan = plan_faults(SimRandom(5), 3, 60.0)
    assert plan == plan_faults(SimRandom(5), 3, 60.0)
    assert plan != plan_faults(SimRandom(6), 3, 60.0)
    assert {f.kind for f in plan[:len(FAULT_KINDS)]} == set(FAULT_KINDS)
    ends = [f.at + f.hold for f in plan]
    assert all(end < 60.0 for end in ends)
    assert all(b.at > a_end for a_end, b in zip(ends, plan[1:], strict=False))
    one = plan_faults(SimRandom(5), 1, 60.0)  # one broker: links to the clients only
    assert all(f.nodes[1:] in ((), ("clients",)) for f in one)
    half = plan_faults(SimRandom(5), 3, 30.0, scale=0.5)
    assert [f.kind for f in half[:5]] == [f.kind for f in plan[:5]]
    assert [f.hold for f in half[:5]] == pytest.approx([f.hold / 2 for f in plan[:5]], abs=1e-6)
    with pytest.raises(ValueError, match="unknown fault kinds"):
        plan_faults(SimRandom(5), 3, 60.0, ["meteor"])


def test_read_committed_seeing_aborted_data_fails_the_check() -> None:
    from odradek.sim.simulation import Simulation
    from odradek.sim.trace import Trace
    from odradek.sim.workload import WorkloadConfig, _Run

    run = _Run(Simulation(1), WorkloadConfig(1), Trace(None))
    aborted = run.invoke("txn-producer-0", "t0-0")
    run.aborted.add("t0-0")
    run.fail(aborted, "aborted")
    run.ok(run.invoke("producer-0", "p0-0"), "events", 0, 0)
    logs: dict[str, list[tuple[int, str | None]]] = {"events-0": [(0, "p0-0")], "txn-0": []}
    report = run.verdict(logs)
    assert report.ok and report.row("aborted").verdict == "ok"
    kept = run.verdict({**logs, "txn-0": [(0, "t0-0")]})  # the abort marker ignored
    assert not kept.ok and kept.row("aborted").verdict == "FAIL"
    run.read("reader-committed", "txn", 0, 0, "t0-0")
    seen = run.verdict(logs)
    assert not seen.ok and seen.row("aborted").observed == 1
    assert "reader-committed read aborted 't0-0'" in seen.row("aborted").examples[0]


def test_the_exit_status_and_the_json_line(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from odradek import cli
    from odradek.chaos.checker.consistency import Guarantees, check
    from odradek.chaos.checker.history import History
    from odradek.sim import command, workload

    history = History()
    history.ok(history.invoke("producer-0", "send", "v"), offset=0, partition=0)
    verdicts = {"ok": check(history, Guarantees(min_insync_replicas=2), {0: [(0, "v")]}),
                "lost": check(history, Guarantees(min_insync_replicas=2), {0: []})}
    assert "sim.command" in cli.TOOL_MODULES  # `odradek sim`
    parser = argparse.ArgumentParser(prog="odradek")
    command.add_parser(parser.add_subparsers(dest="command", required=True))
    for name, report in verdicts.items():
        monkeypatch.setattr(workload, "run_workload", lambda cfg, report=report:
                            workload.SimReport(cfg.seed, 1.5, 0.25, 2, 0, "ab" * 32, report,
                                               digest_tail=["0.1 syn #1 a>b 0B"]))
        args = parser.parse_args(["sim", "--seed", "9", "--json", "--faults", "none"])
        status = args.func(args)
        out, err = capsys.readouterr()
        assert json.loads(out.strip().splitlines()[-1]) == {
            "seed": 9, "virtual_s": 1.5, "wall_s": 0.25, "operations": 2, "faults": 0,
            "digest": "ab" * 32, "ok": name == "ok"}
        assert status == (0 if name == "ok" else 1)
        assert ("syn #1" in err) == (name == "lost")
