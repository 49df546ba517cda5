"""The explorer's runner (sim/explore.py): `odradek sim --seeds A-B --jobs 2` runs a batch in
forked children and each seed's digest is the one `odradek sim --seed S` prints; a run that
raises or outlives its wall-time limit is that seed's failure, not the batch's end; a
schedule file replays the run it was written from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import odradek.sim
from odradek.sim.command import EXPLORER_OP_RATE
from odradek.sim.explore import parse_seeds, run_many
from odradek.sim.workload import WorkloadConfig

pytestmark = pytest.mark.sim

SRC = str(Path(odradek.sim.__file__).resolve().parents[2])
#: a short run: three or four failed disks (KIP-112), one client of each kind, the producers at
#: the default rate. Seed 3's producer meets a failed log dir twice, and Kafka's answer names
#: the data directory ("Error while appending to events-2 in dir <path>/broker-2"): its digest
#: is the same alone and in the batch only if the path's name and length do not show in it.
FLAGS = ["--duration", "3", "--producers", "1", "--consumers", "1", "--rate", "1",
         "--faults", "disk-full,disk-error", "--fault-scale", "0.3"]
SUMMARY_KEYS = {"seed", "virtual_s", "wall_s", "operations", "faults", "digest", "ok"}


def sim(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "odradek.cli", "sim", *args], env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=600)


def test_a_batch_of_seeds_in_two_jobs_matches_single_runs_and_replays(tmp_path: Path) -> None:
    batch = sim("--seeds", "3-5", "--jobs", "2", "--json", *FLAGS, cwd=tmp_path)
    assert batch.returncode == 0, batch.stdout + batch.stderr[-3000:]
    lines = [json.loads(line) for line in batch.stdout.strip().splitlines()]
    runs, summary = lines[:-1], lines[-1]
    assert sorted(r["seed"] for r in runs) == [3, 4, 5]
    # the explorer's default mix: every operation kind at its rate, so each line has coverage
    assert all(set(r) == SUMMARY_KEYS | {"coverage"} and r["ok"] is True for r in runs)
    assert set(summary) == {"seeds", "runs", "jobs", "failed", "errors", "replay", "wall_s",
                            "seeds_per_hour", "cpu_s_per_seed", "seeds_per_cpu_hour", "cpus"}
    assert (summary["seeds"], summary["runs"], summary["jobs"]) == ("3-5", 3, 2)
    assert summary["failed"] == [] and summary["replay"] == {} and summary["seeds_per_hour"] > 0
    assert "[3/3] seed" in batch.stderr  # the progress
    digests = {r["seed"]: r["digest"] for r in runs}
    assert len(set(digests.values())) == 3
    # one seed alone, its schedule written, then replayed from the file: the same run
    one = sim("--seed", "3", "--json", "--save-schedule", "s3.json", "--ops", "all",
              "--op-rate", str(EXPLORER_OP_RATE), *FLAGS, cwd=tmp_path)
    assert json.loads(one.stdout.strip().splitlines()[-1])["digest"] == digests[3]
    replayed = sim("--schedule", "s3.json", "--json", cwd=tmp_path)
    assert json.loads(replayed.stdout.strip().splitlines()[-1])["digest"] == digests[3]


def test_a_run_that_raises_or_hangs_is_that_seeds_failure() -> None:
    configs = [WorkloadConfig(1, brokers=0), WorkloadConfig(2, duration=600.0)]
    outcomes = {o.seed: o for o in run_many(configs, jobs=2, timeout=5.0)}
    assert not outcomes[1].ok and "a cluster needs at least one broker" in \
        (outcomes[1].error or "")
    assert outcomes[1].line() == {"seed": 1, "wall_s": round(outcomes[1].wall_s, 3),
                                  "ok": False, "error": outcomes[1].error}
    assert not outcomes[2].ok and "killed" in (outcomes[2].error or "")


def test_seed_ranges() -> None:
    assert parse_seeds("3-5") == [3, 4, 5]
    assert parse_seeds("7") == [7]
    assert parse_seeds("1,4-5,9") == [1, 4, 5, 9]
    with pytest.raises(ValueError):
        parse_seeds("5-3")


def test_the_digest_does_not_depend_on_the_data_dir() -> None:
    from odradek.sim.digest import Digest

    def digest(root: str) -> str:
        d = Digest()
        d.place(root, "<data-dir>")
        d.record(1.5, "data", "#1 broker-2:40000>client-producer-1:40002",
                 f"Error while appending to events-2 in dir {root}/broker-2".encode())
        return d.hexdigest()

    assert digest("/tmp/odradek-sim-abcd1234") == digest("/tmp/odradek-sim-wxyz9876")
    assert digest("/tmp/odradek-sim-abcd1234") != Digest().hexdigest()


def test_a_failed_check_is_reported_with_its_rows_and_replay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from odradek.chaos.checker.consistency import Guarantees, check
    from odradek.chaos.checker.history import History
    from odradek.sim.explore import Outcome, explore, result
    from odradek.sim.replay import replay_command
    from odradek.sim.workload import SimReport

    history = History()
    history.ok(history.invoke("producer-0", "send", "v"), offset=0, partition=0)
    lost = check(history, Guarantees(min_insync_replicas=2), {0: []})
    sent = result(SimReport(9, 1.5, 0.25, 2, 0, "ab" * 32, lost, digest_tail=["0.1 syn"]))
    assert sent["summary"]["ok"] is False and sent["failed_rows"] == ["lost"]
    assert sent["examples"] and sent["examples"][0].startswith("lost: ")
    outcome = Outcome(WorkloadConfig(9, rate=0.1), sent["summary"], sent["failed_rows"])
    assert not outcome.ok and outcome.line() == sent["summary"]

    import odradek.sim.explore as explore_module

    seen: list[int] = []
    monkeypatch.setattr(explore_module, "run_many", lambda configs, jobs, timeout: iter(
        [Outcome(c, {**sent["summary"], "seed": c.seed, "ok": c.seed != 9},
                 [] if c.seed != 9 else ["lost"]) for c in configs]))
    summary = explore([8, 9], lambda s: WorkloadConfig(s, rate=0.1), 2, 10.0,
                      lambda o, done, total, elapsed: seen.append(o.seed), replay_command, "8-9")
    assert seen == [8, 9] and summary["failed"] == [9] and summary["runs"] == 2
    assert summary["replay"] == {"9": "odradek sim --seed 9 --rate 0.1"}


def test_the_shrink_command_writes_a_smaller_failing_schedule(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    import odradek.sim.explore as explore_module
    from odradek.sim import command
    from odradek.sim.explore import Outcome
    from odradek.sim.replay import explicit, load_schedule

    culprit = (explicit(WorkloadConfig(5, duration=60.0)).faults or [])[7]

    def run_one(cfg: WorkloadConfig, timeout: float) -> Outcome:  # a stand-in run
        bad = culprit in (cfg.faults or ()) and cfg.transactional_producers > 0
        return Outcome(cfg, {"seed": cfg.seed, "ok": not bad}, ["lost"] if bad else [],
                       digest_tail=["12.5 rst #7"])

    monkeypatch.setattr(explore_module, "run_one", run_one)
    parser = argparse.ArgumentParser(prog="odradek")
    command.add_parser(parser.add_subparsers(dest="command", required=True))
    path = tmp_path / "small.json"
    args = parser.parse_args(["sim", "--seed", "5", "--duration", "60", "--shrink",
                              "--save-schedule", str(path)])
    assert args.func(args) == 1
    out, err = capsys.readouterr()
    small = load_schedule(path)
    assert small.faults == [culprit] and small.duration < 60.0
    assert (small.producers, small.consumers, small.transactional_producers) == (0, 0, 1)
    assert f"replay: odradek sim --schedule {path}" in out and "12.5 rst #7" in out
    assert "'faults': 1" in out and "shrink run 1: the whole schedule: fails" in err
