"""`odradek sim`: one seeded run of whole brokers and clients on the deterministic simulation
under a fault schedule, checked by the consistency checker (docs/simulation.md).

    odradek sim --seed 7 --duration 20 [--brokers 3] [--faults kill,partition,...]
                [--ops all|KIND,...] [--op-rate 1] [--json] [--trace run.jsonl]

Exit 0 when every guarantee held, 1 otherwise (2 for an unknown fault or operation kind). The
last line gives the seed, the virtual and wall seconds, the operations, the faults and the
digest (`--json`: one JSON object with the keys seed, virtual_s, wall_s, operations, faults,
digest, ok, and with `--ops` coverage: the explorer's operations by kind and outcome, the
faults by kind). This module only declares the command (the console's parser imports it); the
run is imported when the command runs.

The explorer (docs/simulation.md, "Exploring many seeds"; sim/explore.py, sim/replay.py,
sim/shrink.py):

    odradek sim --seeds 1-1000 [--jobs N] [--duration 60] [--json]   many seeds, a summary
    odradek sim --seed 7 ... --save-schedule FILE                     the run's schedule
    odradek sim --schedule FILE                                       replay a schedule
    odradek sim --seed 7 ... --shrink [--save-schedule FILE]          a failing run, shrunk
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .workload import WorkloadConfig

__all__ = ["EXPLORER_OP_RATE", "EXPLORER_RATE", "add_parser", "cmd_sim"]

#: the producers' rate under `--seeds` (docs/performance.md, "Simulation speed": what keeps a
#: thousand seeds of 60 virtual seconds an hour on two CPUs)
EXPLORER_RATE = 0.1
#: the explorer's default mix (`--seeds` without `--ops`/`--op-rate`): every operation kind,
#: one every four virtual seconds on average, among every fault kind (docs/performance.md,
#: "Many seeds": about 900 seeds of 60 s an hour on two CPUs)
EXPLORER_OP_RATE = 0.25


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sim", help="a seeded deterministic simulation of brokers, clients and "
                                   "faults, checked for Kafka's guarantees")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--seed", type=int)
    which.add_argument("--seeds", metavar="A-B",
                       help="run every seed from A to B (or A,B,C-D), --jobs at a time, each "
                            "in its own process; a summary last (docs/simulation.md, "
                            "\"Exploring many seeds\")")
    which.add_argument("--schedule", metavar="FILE",
                       help="replay a schedule file (its seed, config and explicit plans; "
                            "the flags' workload values are ignored)")
    p.add_argument("--duration", type=float, default=20.0,
                   help="virtual seconds of workload under faults (default 20)")
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--faults", default=None, metavar="KIND,...",
                   help="the fault kinds to draw from (default all: kill, store-cut, "
                        "session-expiry, partition, one-way, isolate, stall, reset, loss, "
                        "slow, machine-crash, disk-full, disk-error); 'none' for none")
    p.add_argument("--fault-scale", type=float, default=1.0, metavar="X",
                   help="multiply the schedule's pauses (0.3-2 s) and holds (0.5-3 s) by X")
    p.add_argument("--producers", type=int, default=2, help="idempotent producers (default 2)")
    p.add_argument("--consumers", type=int, default=2, help="consumers in the group (default 2)")
    p.add_argument("--transactional", type=int, default=1,
                   help="transactional producers (default 1; 0: no read_committed reader)")
    p.add_argument("--rate", type=float, default=None, metavar="R",
                   help="the producers' send rate: their pauses divided by R (default 1; "
                        f"with --seeds {EXPLORER_RATE:g}, the explorer's)")
    p.add_argument("--jobs", type=int, default=None,
                   help="with --seeds: runs at once (default: the number of CPUs)")
    p.add_argument("--seed-timeout", type=float, default=900.0, metavar="S",
                   help="with --seeds or --shrink: wall seconds a run may take before it is "
                        "killed and counted as failed (default 900)")
    p.add_argument("--save-schedule", metavar="FILE",
                   help="write the run's schedule (made explicit) as a schedule file; with "
                        "--shrink the shrunk one")
    p.add_argument("--shrink", action="store_true",
                   help="shrink a failing run: fewer faults (and other planned items), a "
                        "shorter duration, fewer clients, while it still fails")
    p.add_argument("--shrink-runs", type=int, default=200, metavar="N",
                   help="at most N runs while shrinking (default 200)")
    p.add_argument("--shrink-same-row", action="store_true",
                   help="a smaller run still fails only if one of the rows that failed first "
                        "fails again (default: any failure)")
    p.add_argument("--ops", default=None, metavar="KIND,...|all|none",
                   help="the explorer's operations to interleave with the faults (default "
                        "none; with --seeds all; docs/simulation.md, \"The explorer's "
                        "operations\")")
    p.add_argument("--op-rate", type=float, default=None, metavar="N",
                   help="operations per virtual second (default 1; with --seeds "
                        f"{EXPLORER_OP_RATE:g})")
    p.add_argument("--json", action="store_true", help="the last line as one JSON object")
    p.add_argument("--trace", metavar="FILE", help="write every event as JSON lines")
    p.add_argument("--data-dir", help="keep the brokers' files here (default: a temporary "
                                      "directory, removed)")
    p.set_defaults(func=cmd_sim)


def _config(args: argparse.Namespace, seed: int, rate: float) -> WorkloadConfig:
    from .schedule import FAULT_KINDS
    from .workload import WorkloadConfig

    if args.faults is None:
        kinds: tuple[str, ...] = FAULT_KINDS
    elif args.faults.strip().lower() == "none":
        kinds = ()
    else:
        kinds = tuple(k.strip() for k in args.faults.split(",") if k.strip())
    return WorkloadConfig(seed, duration=args.duration, brokers=args.brokers,
                          fault_kinds=kinds, fault_scale=args.fault_scale,
                          producers=args.producers, consumers=args.consumers,
                          transactional_producers=args.transactional, trace=args.trace,
                          data_dir=args.data_dir, rate=rate,
                          operation_kinds=args.operation_kinds, operation_rate=args.op_rate)


def cmd_sim(args: argparse.Namespace) -> int:
    from .operations import parse_kinds
    from .replay import explicit, load_schedule, replay_command, save_schedule
    from .workload import run_workload

    explorer = args.seeds is not None
    if args.op_rate is None:
        args.op_rate = EXPLORER_OP_RATE if explorer else 1.0
    try:
        args.operation_kinds = parse_kinds(args.ops if args.ops is not None
                                           else "all" if explorer else "none")
    except ValueError as exc:
        print(f"odradek sim: {exc}", file=sys.stderr)
        return 2
    if args.rate is not None and args.rate <= 0:
        raise SystemExit("odradek sim: --rate must be positive")
    if args.seeds is not None:
        from .explore import run_seeds

        single = [flag for flag, value in (("--shrink", args.shrink), ("--trace", args.trace),
                                           ("--save-schedule", args.save_schedule),
                                           ("--data-dir", args.data_dir)) if value]
        if single:
            raise SystemExit(f"odradek sim: {', '.join(single)}: one run only (--seed or "
                             "--schedule), not --seeds")

        return run_seeds(args, lambda seed: _config(
            args, seed, EXPLORER_RATE if args.rate is None else args.rate))
    if args.schedule is not None:
        cfg = load_schedule(args.schedule, trace=args.trace, data_dir=args.data_dir)
    else:
        cfg = _config(args, args.seed, 1.0 if args.rate is None else args.rate)
    if args.shrink:
        from .explore import run_shrink

        return run_shrink(args, cfg)
    if args.save_schedule:
        save_schedule(explicit(cfg), args.save_schedule)
        print(f"schedule written to {args.save_schedule}; replay: "
              f"{replay_command(cfg, args.save_schedule)}", file=sys.stderr)
    report = run_workload(cfg)
    if not args.json:
        for line in report.fault_lines:
            print(line)
        print(report.check.to_text())
        if report.coverage:
            print("coverage:")
            for key, count in report.coverage.items():
                print(f"  {key:<40} {count}")
    if not report.ok:
        print("the digest's last events:", file=sys.stderr)
        for line in report.digest_tail[-20:]:
            print(f"  {line}", file=sys.stderr)
    print(json.dumps(report.summary()) if args.json else report.last_line(), flush=True)
    return 0 if report.ok else 1
