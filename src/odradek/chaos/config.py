"""The settings of a run of process faults (`ChaosConfig`): the cluster, the workload, the fault
schedule and the settings that decide what Kafka promises (the consistency checker's
`Guarantees`); the fault kinds the schedule chooses from (`FAULT_KINDS`, and with
``--admin-ops`` `ADMIN_FAULT_KINDS`); what the default settings promise (`RUN_GUARANTEES`).

The replication scenario runs with it; the transactional one hands one to the fault injector
(odradek.chaos.environment.process_faults), which reads its timings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .checker.consistency import Guarantees

FAULT_KINDS = ("kill_leader", "kill_controller", "pause_leader", "restart")
ADMIN_FAULT_KINDS = ("reassign", "elect_leaders")


@dataclass
class ChaosConfig:
    brokers: int = 3
    partitions: int = 6
    duration_s: float = 60.0  # the fault phase; a fault begun before its end completes
    seed: int = 0
    producers: int = 2
    rate: float = 200.0  # messages per second per producer
    consumers: int = 1  # read the topic during the faults (the checker's truncated reads)
    faults: tuple[str, ...] = FAULT_KINDS
    schedule: tuple[str, ...] | None = None  # exactly these faults in order (duration ignored)
    topic: str = "chaos"
    session_timeout_ms: int = 4000
    replica_lag_time_max_ms: int = 5000
    segment_bytes: int = 1 << 20  # small segments: the comparison crosses segment files
    first_fault_after_s: float = 2.0
    gap_s: tuple[float, float] = (1.0, 3.0)  # quiet time between faults, once healed
    restart_delay_s: float = 1.0  # between a kill -9 and the restart
    pause_s: float | None = None  # SIGSTOP length; default 1.5 x the session timeout
    heal_timeout_s: float = 60.0
    message_timeout_ms: int = 60000
    rebalance_check_s: int = 10  # leader.imbalance.check.interval.seconds: preferred elections
    reassign_grace_s: float = 60.0  # after healing, for the reassignments to complete
    log_level: str = "INFO"
    extra_overrides: dict[str, str] = field(default_factory=dict)
    # The settings that decide what Kafka promises (the consistency checker's Guarantees).
    # The defaults promise everything; with weaker ones (acks=1, say) the losses Kafka allows
    # are counted and reported as expected, not as failures.
    acks: str = "all"
    idempotence: bool = True
    min_insync_replicas: int = 2
    unclean_leader_election: bool = False

    def guarantees(self) -> Guarantees:
        return Guarantees.from_configs(
            {"min.insync.replicas": str(self.min_insync_replicas),
             "unclean.leader.election.enable": str(self.unclean_leader_election).lower()},
            # librdkafka's max.in.flight: 1000000 by default, at most 5 with idempotence
            {"acks": self.acks, "enable.idempotence": str(self.idempotence).lower(),
             "max.in.flight.requests.per.connection": "5" if self.idempotence else "1000000"})

    def producer_config(self) -> dict[str, Any]:
        """What the workload's producers are given over ProducerWorker's defaults."""
        if self.acks == "all" and self.idempotence:
            return {}
        return {"acks": self.acks, "enable.idempotence": self.idempotence}

    @property
    def pause_length_s(self) -> float:
        return self.pause_s if self.pause_s is not None else 1.5 * self.session_timeout_ms / 1000

    def broker_overrides(self) -> dict[str, str]:
        return {
            "default.replication.factor": str(min(3, self.brokers)),
            "min.insync.replicas": str(self.min_insync_replicas),
            "unclean.leader.election.enable": str(self.unclean_leader_election).lower(),
            "replica.lag.time.max.ms": str(self.replica_lag_time_max_ms),
            "controlled.shutdown.retry.backoff.ms": "200",
            "log.segment.bytes": str(self.segment_bytes),
            "leader.imbalance.check.interval.seconds": str(self.rebalance_check_s),
            **self.extra_overrides,
        }


# What the default replication run promises: acks=all idempotent producers (librdkafka caps
# the in-flight requests at 5 with idempotence), min.insync.replicas=2, unclean election off.
RUN_GUARANTEES = ChaosConfig().guarantees()
