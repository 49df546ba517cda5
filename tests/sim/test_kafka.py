"""Whole brokers (server/broker.py, with the embedded coordination store, through the
in-process cluster) on the simulated loop and network, with odradek.client producing (acks=all)
and consuming: every acknowledged record is read back, and a run is a function of its seed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import odradek.sim
from odradek.common import clock, entropy
from odradek.sim.kafka_workload import run_kafka, run_transaction_timeout

pytestmark = pytest.mark.sim

SRC = str(Path(odradek.sim.__file__).resolve().parents[2])


def kafka_in_a_fresh_process(seed: int, hash_seed: str, *args: str) -> tuple[str, str]:
    """The run's summary (up to its virtual seconds: wall and CPU time vary) and digest, from
    `python -m odradek.sim kafka`."""
    env = {**os.environ, "PYTHONPATH": SRC, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run([sys.executable, "-m", "odradek.sim", "kafka", "--seed", str(seed),
                          *args], env=env, capture_output=True, text=True, timeout=300,
                         check=True)
    lines = out.stdout.strip().splitlines()
    assert len(lines[-1]) == 64
    assert "Traceback" not in out.stderr and "never retrieved" not in out.stderr, out.stderr
    return lines[0].split(" wall ")[0], lines[-1]


def test_one_broker_serves_a_producer_and_a_consumer(tmp_path: Path) -> None:
    report = run_kafka(11, brokers=1, records=150, data_dir=tmp_path)
    assert report.acked == report.consumed == 150 and report.missing == 0
    assert report.virtual_seconds > 0 and report.events > 0
    # the brokers' files are real: the topic's logs and the store's journal
    assert sorted(p.name for p in (tmp_path / "broker-0").glob("events-*")) == \
        ["events-0", "events-1", "events-2"]
    # the seams are back to the system's after the run
    assert clock._source is None and clock._monotonic is None and entropy._source is None


def test_one_broker_same_seed_same_digest_in_two_processes() -> None:
    first = kafka_in_a_fresh_process(31, "1", "--records", "120")
    second = kafka_in_a_fresh_process(31, "2", "--records", "120")
    assert first == second
    assert "acked 120 consumed 120 missing 0" in first[0]
    assert kafka_in_a_fresh_process(32, "1", "--records", "120")[1] != first[1]


def test_three_brokers_replicate_through_a_kill_restart_a_store_cut_and_a_cut() -> None:
    report = run_kafka(8, brokers=3, records=300, faults=True)
    assert [f.split(" at ")[0].split()[0] for f in report.faults] == \
        ["kill", "isolate", "heal", "cut", "heal", "restart"]
    assert report.acked == 300 and report.missing == 0


def test_three_brokers_same_seed_same_digest_in_two_processes() -> None:
    args = ("--brokers", "3", "--faults", "--records", "300")
    first = kafka_in_a_fresh_process(9, "1", *args)
    second = kafka_in_a_fresh_process(9, "2", *args)
    assert first == second
    assert "acked 300 consumed 300 missing 0" in first[0]


def test_a_ten_minute_transaction_timeout_costs_no_wall_time(tmp_path: Path) -> None:
    report = run_transaction_timeout(13, brokers=1, data_dir=tmp_path)
    # the coordinator aborted the open transaction and bumped the producer's epoch
    assert report.commit_error in ("ProducerFencedError", "InvalidProducerEpochError")
    assert report.committed_reads == 0
    assert report.virtual_seconds > 600
    # ten idle minutes are a few hundred wake-ups, not ten minutes (generous: the machine
    # is shared; a run takes about 1 CPU second)
    assert report.cpu_seconds < report.virtual_seconds / 50
