"""The explorer's operations: a seeded, weighted plan of Kafka client and admin operations that
`odradek sim --ops` interleaves with the fault schedule (docs/simulation.md, "The explorer's
operations"), so that a simulated run uses more of Kafka than the workload's producers and
consumers: plain producers (acks=0, acks=1), a consumer group's members joining, leaving,
committing and seeking (a static member, KIP-345, leaving and rejoining), topic creation and
deletion, CreatePartitions, config changes, reassignments with replication throttles (KIP-455,
KIP-73), preferred and unclean elections (KIP-460), replica moves between log dirs (KIP-113),
DeleteRecords, and brokers' controlled shutdowns and restarts.

`plan_operations` draws the plan from the seed's ``"operations"`` fork: operations one after
the other at exponential gaps (`rate` per virtual second), each kind once in a seeded order
first (a run as long as its kinds covers them all), then kinds drawn by `WEIGHTS`; each
operation's arguments are drawn with it. `sim/operation_runner.py` applies a plan during the
workload and records every operation in the checker's history (odradek.chaos.checker): an
invoke with ``f`` the kind, then ``ok``, ``fail`` (with the error's name) or ``info``.

Operations that may lose data Kafka allows to lose (acks=0 and acks=1 writes, unclean
elections, DeleteRecords, retention, compaction) act only on scratch topics (`SCRATCH_TOPICS`,
``scratch-<n>``), which the checker's rows do not read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .random import SimRandom

__all__ = ["LIFECYCLE_KINDS", "OPERATION_KINDS", "SCRATCH_TOPICS", "WEIGHTS",
           "PlannedOperation", "broker_overrides", "cluster_overrides", "coverage",
           "parse_kinds", "plan_operations"]

OPERATION_KINDS: tuple[str, ...] = (
    "produce-acks0", "produce-acks1",                        # plain producers, a scratch topic
    "consumer-join", "consumer-leave", "static-rejoin",      # group membership (KIP-345)
    "commit", "seek",                                        # committed offsets
    "create-topic", "delete-topic", "create-partitions",     # topics
    "alter-retention", "alter-compaction", "alter-min-isr",  # topic configs
    "reassign", "reassign-cancel",                           # KIP-455, throttled (KIP-73)
    "elect-preferred", "elect-unclean",                      # ElectLeaders (KIP-460)
    "move-log-dir", "delete-records",                        # KIP-113, KIP-107
    "controlled-shutdown", "restart",                        # brokers
)
#: How often each kind comes after the first round (relative weights).
WEIGHTS: Mapping[str, float] = {
    "produce-acks0": 3, "produce-acks1": 3, "consumer-join": 2, "consumer-leave": 1.5,
    "static-rejoin": 1, "commit": 3, "seek": 2, "create-topic": 1, "delete-topic": 1,
    "create-partitions": 1, "alter-retention": 1, "alter-compaction": 1, "alter-min-isr": 1,
    "reassign": 1.5, "reassign-cancel": 1, "elect-preferred": 1.5, "elect-unclean": 1,
    "move-log-dir": 1.5, "delete-records": 1, "controlled-shutdown": 0.7, "restart": 0.7,
}
#: Kinds that stop a broker (the runner keeps them away from the fault schedule's brokers).
LIFECYCLE_KINDS: tuple[str, ...] = ("controlled-shutdown", "restart")

ACKS_TOPIC = "scratch-acks"  # acks=0/1 writes, retention, DeleteRecords, partition growth
COMPACT_TOPIC = "scratch-compact"  # keyed writes, cleanup.policy=compact
UNCLEAN_TOPIC = "scratch-unclean"  # unclean.leader.election.enable=true
MOVES_TOPIC = "scratch-moves"  # replication factor 2: reassignments move data
SCRATCH_TOPICS: tuple[str, ...] = (ACKS_TOPIC, COMPACT_TOPIC, UNCLEAN_TOPIC, MOVES_TOPIC)
SCRATCH_SEGMENT_BYTES = 4096  # segments roll, so retention and the cleaner have work


@dataclass(frozen=True)
class PlannedOperation:
    """One operation: started `at` virtual seconds after the workload began; `args` are the
    kind's drawn arguments as (name, value) pairs (values JSON scalars)."""

    at: float
    kind: str
    args: tuple[tuple[str, object], ...] = ()

    def arg(self, name: str, default: object = None) -> object:
        for k, v in self.args:
            if k == name:
                return v
        return default

    def describe(self) -> str:
        return " ".join([self.kind, *(f"{k}={v}" for k, v in self.args)])

    def to_json(self) -> dict[str, object]:
        return {"at": self.at, "kind": self.kind, "args": dict(self.args)}

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> PlannedOperation:
        kind = str(d["kind"])
        if kind not in OPERATION_KINDS:
            raise ValueError(f"unknown operation kind {kind!r}; known: {OPERATION_KINDS}")
        args = d.get("args") or {}
        if not isinstance(args, Mapping):
            raise ValueError(f"args must be an object, not {args!r}")
        return cls(float(d["at"]), kind,  # type: ignore[arg-type]
                   tuple((str(k), v) for k, v in args.items()))


def parse_kinds(text: str | None) -> tuple[str, ...]:
    """`--ops`: "all", "none" (or nothing) or kinds separated by commas."""
    if text is None or text.strip().lower() in ("", "none"):
        return ()
    if text.strip().lower() == "all":
        return OPERATION_KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(OPERATION_KINDS))
    if unknown:
        raise ValueError(f"unknown operation kinds {unknown}; known: {OPERATION_KINDS}")
    return kinds


def _args(rng: SimRandom, kind: str, brokers: int) -> tuple[tuple[str, object], ...]:
    """The drawn arguments of one operation of `kind`."""
    if kind in ("produce-acks0", "produce-acks1"):
        return (("records", rng.randint(1, 30)),)
    if kind == "static-rejoin":
        return (("hold", round(rng.uniform(0.2, 4.0), 3)),)
    if kind == "seek":
        return (("back", rng.randint(1, 50)),)
    if kind == "create-topic":
        return (("partitions", rng.randint(1, 3)),
                ("replication", rng.randint(1, min(3, brokers))))
    if kind == "create-partitions":
        return (("add", rng.randint(1, 2)),)
    if kind == "alter-retention":
        return ((("retention.ms", rng.choice([1000, 5000, 60_000, 604_800_000]))
                 if rng.random() < 0.5 else
                 ("retention.bytes", rng.choice([4096, 16_384, 65_536, -1]))),)
    if kind == "alter-compaction":
        return (("records", rng.randint(5, 40)), ("keys", rng.randint(1, 6)))
    if kind == "alter-min-isr":
        return (("min.insync.replicas", rng.randint(1, min(3, brokers))),)
    if kind == "reassign":
        return (("topic", rng.choice(["events", "txn", MOVES_TOPIC])),
                ("partition", rng.randrange(3)), ("shuffle", rng.randrange(1 << 16)),
                ("throttle", rng.choice([50_000, 200_000, 1_000_000])))
    if kind == "reassign-cancel":
        return (("partition", rng.randrange(3)), ("shuffle", rng.randrange(1 << 16)))
    if kind == "elect-preferred":
        return (("topic", rng.choice(["events", "txn", MOVES_TOPIC])),)
    if kind == "move-log-dir":
        return (("topic", rng.choice(["events", "txn", ACKS_TOPIC])),
                ("partition", rng.randrange(3)), ("replica", rng.randrange(3)))
    if kind == "delete-records":
        return (("partition", rng.randrange(3)), ("keep", rng.choice([-1, 0, 5, 20])))
    if kind in LIFECYCLE_KINDS:
        return (("broker", rng.randrange(brokers)),
                ("hold", round(rng.uniform(0.5, 3.0), 3) if kind == "controlled-shutdown"
                 else 0.0))
    return ()


def plan_operations(rng: SimRandom, kinds: Sequence[str], duration: float, rate: float = 1.0,
                    brokers: int = 3) -> list[PlannedOperation]:
    """Operations at exponential gaps of mean 1/`rate` seconds until `duration`: each kind
    once in a seeded order, then kinds drawn by `WEIGHTS`."""
    unknown = sorted(set(kinds) - set(OPERATION_KINDS))
    if unknown:
        raise ValueError(f"unknown operation kinds {unknown}; known: {OPERATION_KINDS}")
    if rate <= 0:
        raise ValueError("rate must be positive")
    ordered = [k for k in OPERATION_KINDS if k in set(kinds)]  # the caller's order is no input
    first = rng.sample(ordered, len(ordered))
    weights = [WEIGHTS[k] for k in ordered]
    out: list[PlannedOperation] = []
    t = 0.0
    while ordered:
        t += rng.expovariate(rate)
        if t >= duration:
            break
        kind = first.pop(0) if first else rng.choices(ordered, weights)[0]
        out.append(PlannedOperation(round(t, 6), kind, _args(rng, kind, brokers)))
    return out


def cluster_overrides(kinds: Iterable[str]) -> dict[str, object]:
    """Broker configs the kinds need: the log cleaner and retention checks on short timers
    (Kafka's defaults, 15 s and 5 min, would never run in a short run)."""
    kinds = set(kinds)
    out: dict[str, object] = {}
    if kinds & {"alter-retention", "delete-records", "produce-acks0", "produce-acks1"}:
        out["log.retention.check.interval.ms"] = 1000
    if "alter-compaction" in kinds:
        out["log.cleaner.backoff.ms"] = 500
    return out


def broker_overrides(kinds: Iterable[str], brokers: int, data_dir: Path
                     ) -> dict[int, dict[str, object]]:
    """Two log dirs per broker when replicas move between dirs (AlterReplicaLogDirs needs a
    second dir on the broker): ``broker-<id>`` (the cluster's own) and ``broker-<id>-b``."""
    if "move-log-dir" not in set(kinds):
        return {}
    return {b: {"log.dirs": f"{data_dir / f'broker-{b}'},{data_dir / f'broker-{b}-b'}"}
            for b in range(brokers)}


def coverage(outcomes: Iterable[tuple[str, str]], fault_kinds: Iterable[str]
             ) -> dict[str, int]:
    """Counts by ``op:<kind>:<outcome>`` (outcome ok, fail or info) and ``fault:<kind>``,
    sorted by key."""
    out: dict[str, int] = {}
    for kind, outcome in outcomes:
        key = f"op:{kind}:{outcome}"
        out[key] = out.get(key, 0) + 1
    for kind in fault_kinds:
        key = f"fault:{kind}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))
