"""The checker in the replication chaos run: the guarantees of the run's settings, which
losses fail the run and which are expected, the table in the report (pure parts)."""

from __future__ import annotations

from odradek.chaos.checker.consistency import Guarantees
from odradek.chaos.checker.history import History
from odradek.chaos.checker.replicas import ReplicaCheck
from odradek.chaos.checker.verdict import ChaosReport, check_consistency, format_report
from odradek.chaos.config import RUN_GUARANTEES, ChaosConfig


def _report(config: ChaosConfig) -> ChaosReport:
    report = ChaosReport(config)
    report.replicas = [ReplicaCheck("chaos", 0, {1: 2, 2: 2}, 2)]
    h = report.history = History()
    for i, value in enumerate(["p0-0", "p0-1"]):
        h.ok(h.invoke("chaos-producer-0", "send", value), offset=i, partition=0)
    report.acked = 2
    report.lost = ["p0-1@p0:1"]  # what check_values found: the same loss
    check_consistency(report, {0: [(0, "p0-0")]}, None, None)
    return report


def test_the_default_run_promises_everything() -> None:
    assert Guarantees("all", 2, False, True, False, 5) == RUN_GUARANTEES
    assert ChaosConfig().producer_config() == {}
    assert ChaosConfig().broker_overrides()["min.insync.replicas"] == "2"


def test_weaker_settings_promise_less() -> None:
    c = ChaosConfig(acks="1", idempotence=False, min_insync_replicas=1,
                    unclean_leader_election=True)
    g = c.guarantees()
    assert not (g.no_loss or g.no_duplicates or g.order or g.no_truncated_reads)
    assert c.producer_config() == {"acks": "1", "enable.idempotence": False}
    overrides = c.broker_overrides()
    assert overrides["min.insync.replicas"] == "1"
    assert overrides["unclean.leader.election.enable"] == "true"


def test_a_loss_fails_the_safe_run() -> None:
    report = _report(ChaosConfig())
    assert report.consistency is not None and not report.consistency.ok
    assert not report.ok
    assert "1 acknowledged values lost" in report.failures
    assert any(f.startswith("consistency check failed: no acknowledged write lost (1)")
               for f in report.failures)
    text = format_report(report)
    assert "no acknowledged write lost" in text and "verdict: FAIL" in text


def test_a_loss_with_acks_1_is_expected() -> None:
    report = _report(ChaosConfig(acks="1", idempotence=False, min_insync_replicas=1))
    assert report.consistency is not None and report.consistency.ok
    assert report.consistency.row("lost").verdict == "expected"
    assert report.ok, report.failures
    text = format_report(report)
    assert "(allowed by these settings)" in text and "acks=1 producers" in text
    assert text.rstrip().endswith("RESULT: OK")
