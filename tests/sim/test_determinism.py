"""A run is a function of its seed: the same seed gives the same digest in another process
(with another PYTHONHASHSEED), another seed another digest (FoundationDB's and TigerBeetle's
determinism check)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import odradek.sim
from odradek.sim.workloads import run_echo

pytestmark = pytest.mark.sim

SRC = str(Path(odradek.sim.__file__).resolve().parents[2])


def digest_in_a_fresh_process(seed: int, hash_seed: str) -> str:
    env = {**os.environ, "PYTHONPATH": SRC, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run(
        [sys.executable, "-m", "odradek.sim", "echo", "--seed", str(seed), "--clients", "10",
         "--messages", "30"], env=env, capture_output=True, text=True, timeout=120, check=True)
    digest = out.stdout.strip().splitlines()[-1]
    assert len(digest) == 64
    # a clean shutdown: no task left to die with the loop, no unretrieved exception
    assert "Traceback" not in out.stderr and "never retrieved" not in out.stderr, out.stderr
    return digest


def test_the_same_seed_gives_the_same_digest_in_two_processes() -> None:
    first = digest_in_a_fresh_process(20261201, hash_seed="1")
    second = digest_in_a_fresh_process(20261201, hash_seed="2")
    assert first == second
    assert digest_in_a_fresh_process(20261202, hash_seed="1") != first


def test_the_same_seed_gives_the_same_run_in_process() -> None:
    a, b = run_echo(5, clients=8, messages=20), run_echo(5, clients=8, messages=20)
    assert (a.digest, a.events, a.round_trips, a.reconnects, a.virtual_seconds) == \
        (b.digest, b.events, b.round_trips, b.reconnects, b.virtual_seconds)
    assert run_echo(6, clients=8, messages=20).digest != a.digest


def test_an_echo_workload_of_many_clients_completes_under_faults() -> None:
    reports = [run_echo(seed, clients=30, messages=40) for seed in range(4)]
    assert all(r.round_trips == 30 * 40 for r in reports)
    assert sum(r.reconnects for r in reports) > 0  # the faults did break connections
    quiet = run_echo(0, clients=30, messages=40, faults=False)
    assert quiet.reconnects == 0 and quiet.round_trips == 1200
