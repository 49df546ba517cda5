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
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_parser", "cmd_sim"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sim", help="a seeded deterministic simulation of brokers, clients and "
                                   "faults, checked for Kafka's guarantees")
    p.add_argument("--seed", type=int, required=True)
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
    p.add_argument("--ops", default="none", metavar="KIND,...|all|none",
                   help="the explorer's operations to interleave with the faults (default "
                        "none; docs/simulation.md, \"The explorer's operations\")")
    p.add_argument("--op-rate", type=float, default=1.0, metavar="N",
                   help="operations per virtual second (default 1)")
    p.add_argument("--json", action="store_true", help="the last line as one JSON object")
    p.add_argument("--trace", metavar="FILE", help="write every event as JSON lines")
    p.add_argument("--data-dir", help="keep the brokers' files here (default: a temporary "
                                      "directory, removed)")
    p.set_defaults(func=cmd_sim)


def cmd_sim(args: argparse.Namespace) -> int:
    from .operations import parse_kinds
    from .schedule import FAULT_KINDS
    from .workload import WorkloadConfig, run_workload

    if args.faults is None:
        kinds: tuple[str, ...] = FAULT_KINDS
    elif args.faults.strip().lower() == "none":
        kinds = ()
    else:
        kinds = tuple(k.strip() for k in args.faults.split(",") if k.strip())
    try:
        operation_kinds = parse_kinds(args.ops)
    except ValueError as exc:
        print(f"odradek sim: {exc}", file=sys.stderr)
        return 2
    report = run_workload(WorkloadConfig(args.seed, duration=args.duration,
                                         brokers=args.brokers, fault_kinds=kinds,
                                         fault_scale=args.fault_scale,
                                         producers=args.producers, consumers=args.consumers,
                                         transactional_producers=args.transactional,
                                         trace=args.trace, data_dir=args.data_dir,
                                         operation_kinds=operation_kinds,
                                         operation_rate=args.op_rate))
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
