"""`odradek chaos`: the command of the replication chaos run (odradek.chaos.scenarios.replication)
and, with
``--transactions``, of the exactly-once pipeline run (odradek.chaos.scenarios.transactions), each
on an existing ZooKeeper or on a local one started for the run."""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..tools.command import Subcommands, ToolError, prefixed, run_tool
from .checker.verdict import format_report, plot_report
from .config import ADMIN_FAULT_KINDS, FAULT_KINDS, ChaosConfig
from .requirements import missing_client
from .scenarios.replication import run_chaos
from .scenarios.transactions import (
    TXN_FAULT_KINDS,
    TxnChaosConfig,
    format_txn_report,
    plot_txn_report,
    run_txn_chaos,
)
from .support import chaos_workdir, run_on_zookeeper, stderr_progress


def run(args: argparse.Namespace) -> int:
    return run_tool(lambda: _run(args), refused=prefixed("chaos"))


def _run(args: argparse.Namespace) -> int:
    problem = missing_client()  # before any ZooKeeper, broker or directory is made
    if problem:
        raise ToolError(problem, exit_code=2)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    chosen = [f"--{m}" for m in ("network", "disk", "transactions", "spark")
              if getattr(args, m)]
    if len(chosen) > 1:
        raise ToolError(f"{' and '.join(chosen)} are different runs: choose one", exit_code=2)
    if args.network:
        return _run_network(args, seed)
    if args.disk:  # KIP-112 log dir failures (chaos_disk)
        from .scenarios.disk import run_disk_command

        return run_disk_command(args, seed)
    if args.transactions:
        return _run_transactions(args, seed)
    if args.spark:  # the Spark sink on a standalone cluster (odradek.chaos.scenarios.spark)
        from .scenarios.spark import run_spark_command

        return run_spark_command(args)
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    known = FAULT_KINDS + ADMIN_FAULT_KINDS
    unknown = [f for f in faults if f not in known]
    if unknown or not faults:
        raise ToolError(f"unknown faults {unknown}; choose from {','.join(known)}", exit_code=2)
    if args.admin_ops:
        faults += tuple(k for k in ADMIN_FAULT_KINDS if k not in faults)
    if args.plot and not args.plot.endswith(".svg"):
        raise ToolError(f"--plot writes an SVG file: {args.plot!r} does not end in .svg",
                        exit_code=2)
    config = ChaosConfig(brokers=args.brokers, partitions=args.partitions,
                         duration_s=args.duration, seed=seed, producers=args.producers,
                         rate=args.rate, faults=faults, acks=args.acks,
                         idempotence=args.idempotence,
                         min_insync_replicas=args.min_insync_replicas,
                         unclean_leader_election=args.unclean_leader_election)
    report, workdir, own_dir = run_on_zookeeper(args, seed, "", "odradek-chaos-", config,
                                                run_chaos)
    print(format_report(report), flush=True)
    return _finish(report.ok, args, workdir, own_dir,
                   lambda path: plot_report(report, path), "throughput chart",
                   "broker logs and data")



def _finish(ok: bool, args: argparse.Namespace, workdir: Path, own_dir: bool,
            plot: Callable[[str], None], chart: str, kept: str) -> int:
    """The end of a run, once its report is printed: the --plot chart, the data directory
    removed after a success (unless --keep or given), the exit status."""
    if args.plot:
        try:
            plot(args.plot)
            print(f"{chart} written to {args.plot}", file=sys.stderr)
        except (OSError, ImportError, ValueError) as exc:  # ValueError: nothing to draw
            print(f"odradek chaos: could not write {args.plot}: {exc}", file=sys.stderr)
    if ok and own_dir and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"{kept} kept in {workdir}", file=sys.stderr)
    return 0 if ok else 1

def _run_transactions(args: argparse.Namespace, seed: int) -> int:
    """`odradek chaos --transactions`: the exactly-once pipeline under the transactional
    faults (run_txn_chaos); --duration is not used (the schedule is each fault once)."""
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    if args.faults == ",".join(FAULT_KINDS):  # the default of the replication run
        faults = TXN_FAULT_KINDS
    unknown = [f for f in faults if f not in TXN_FAULT_KINDS]
    if unknown or not faults:
        raise ToolError(f"unknown transactional faults {unknown}; choose from "
                        f"{','.join(TXN_FAULT_KINDS)}", exit_code=2)
    if args.plot and not args.plot.endswith(".svg"):
        raise ToolError(f"--plot writes an SVG file: {args.plot!r} does not end in .svg",
                        exit_code=2)
    config = TxnChaosConfig(brokers=args.brokers, partitions=args.partitions, seed=seed,
                            values=args.values, pipelines=args.pipelines, schedule=faults)
    report, workdir, own_dir = run_on_zookeeper(args, seed, " --transactions",
                                                "odradek-chaos-txn-", config, run_txn_chaos)
    print(format_txn_report(report), flush=True)
    return _finish(report.ok, args, workdir, own_dir,
                   lambda path: plot_txn_report(report, path), "commits chart",
                   "broker and pipeline logs")


def _run_network(args: argparse.Namespace, seed: int) -> int:
    """`odradek chaos --network`: brokers and a ZooKeeper ensemble of three in network
    namespaces, network faults between them (odradek.chaos.scenarios.network); needs root."""
    from .environment.netns import netns_problem
    from .scenarios.network import (
        NETWORK_FAULT_KINDS,
        NetChaosConfig,
        format_network_report,
        plot_network_report,
        run_network_chaos,
    )

    faults = NETWORK_FAULT_KINDS
    if args.faults != ",".join(FAULT_KINDS):  # not the replication run's default
        faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = [f for f in faults if f not in NETWORK_FAULT_KINDS]
    if unknown or not faults:
        raise ToolError(f"unknown network faults {unknown}; choose from "
                        f"{','.join(NETWORK_FAULT_KINDS)}", exit_code=2)
    if args.brokers < 3:
        raise ToolError("--network needs at least 3 brokers (RF 3)", exit_code=2)
    if args.plot and not args.plot.endswith(".svg"):
        raise ToolError(f"--plot writes an SVG file: {args.plot!r} does not end in .svg",
                        exit_code=2)
    problem = netns_problem()
    if problem:
        raise ToolError(f"--network: {problem}", exit_code=2)
    config = NetChaosConfig(brokers=args.brokers, partitions=args.partitions,
                            cycles=args.cycles, seed=seed, faults=faults,
                            producers=args.producers, rate=args.rate)
    workdir, own_dir = chaos_workdir(args.data_dir, "odradek-chaos-net-")
    progress = stderr_progress(time.monotonic())
    progress(f"odradek chaos --network: seed {seed}, {args.cycles} cycles, data in {workdir}")
    # SIGTERM unwinds like Ctrl-C, so that the namespaces, the bridge and the processes go too.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        report = run_network_chaos(config, workdir, progress)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(format_network_report(report), flush=True)
    return _finish(report.ok, args, workdir, own_dir,
                   lambda path: plot_network_report(report, path), "checker timeline",
                   "broker, ZooKeeper and client logs, histories and faults.log")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("chaos", help="replication under faults: acks=all writes, kill -9, "
                       "SIGSTOP, restarts; verify nothing acknowledged is lost")
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--duration", type=float, default=60.0,
                   help="seconds of fault injection (default 60)")
    p.add_argument("--seed", type=int, help="random seed (default: random, printed)")
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--rate", type=float, default=200.0,
                   help="values per second per producer (default 200)")
    p.add_argument("--data-dir", help="broker data and logs (default: a temporary directory, "
                   "removed after a successful run)")
    p.add_argument("--keep", action="store_true", help="keep the data dir after success")
    p.add_argument("--zookeeper", metavar="HOST:PORT",
                   help="an existing ZooKeeper (default: start a local one)")
    p.add_argument("--faults", default=",".join(FAULT_KINDS),
                   help=f"comma-separated subset of {','.join(FAULT_KINDS + ADMIN_FAULT_KINDS)}")
    p.add_argument("--admin-ops", action="store_true",
                   help="add admin operations to the faults: partition reassignment to random "
                        "replica sets (AlterPartitionReassignments, sometimes with the "
                        "controller killed right after) and preferred leader election "
                        "(ElectLeaders); the report checks every reassignment completed")
    p.add_argument("--transactions", action="store_true",
                   help="instead: an exactly-once consume-transform-produce pipeline "
                        "(confluent-kafka processes, transactions with "
                        "send_offsets_to_transaction) under kill -9 of the transaction and "
                        "group coordinators, partition leaders and the pipeline processes; "
                        "checks every input value is read_committed exactly once and nothing "
                        f"aborted is visible (faults: {','.join(TXN_FAULT_KINDS)})")
    p.add_argument("--spark", action="store_true",
                   help="the Spark pipeline (odradek source, sink with exactly-once and "
                        "at-least-once side by side) on a standalone cluster: kill -9 a worker "
                        "and each driver while the sinks write, the transaction coordinator; "
                        "output checked exactly once (duplicates counted at-least-once) "
                        "(odradek.chaos.scenarios.spark; needs the spark extra)")
    p.add_argument("--network", action="store_true",
                   help="instead: network faults between broker and ZooKeeper processes, each "
                        "in a Linux network namespace of its own (needs root), on a ZooKeeper "
                        "ensemble of three: the partition leader cut from ZooKeeper and its "
                        "followers while clients still reach it, isolation, one-way cuts, "
                        "ZooKeeper leader kill, quorum loss and regain, lossy links, kill, "
                        "pause; the consistency checker's report at the end")
    p.add_argument("--cycles", type=int, default=8,
                   help="with --network: fault cycles (default 8)")
    p.add_argument("--disk", action="store_true",
                   help="instead: log dir failures (root only): a broker's log dir on a small "
                        "tmpfs filled up (disk-full), another's on ext4 failed (disk-fail), "
                        "under acks=all writes; checks leaders move, the other dir keeps "
                        "serving and nothing acknowledged is lost (odradek.chaos.scenarios.disk)")
    p.add_argument("--values", type=int, default=3000,
                   help="with --transactions: the input's unique values (default 3000)")
    p.add_argument("--pipelines", type=int, default=2,
                   help="with --transactions: pipeline processes (default 2)")
    settings = p.add_argument_group(
        "the replication run's settings (the checker reports what Kafka does not promise "
        "under weaker ones as expected, not as a failure: docs/checker.md)")
    settings.add_argument("--acks", choices=("all", "1", "0"), default="all",
                          help="the producers' acks (default all)")
    settings.add_argument("--no-idempotence", dest="idempotence", action="store_false",
                          help="enable.idempotence=false for the producers")
    settings.add_argument("--min-insync-replicas", type=int, default=2,
                          help="the topic's min.insync.replicas (default 2)")
    settings.add_argument("--unclean-leader-election", action="store_true",
                          help="unclean.leader.election.enable=true on the brokers")
    p.add_argument("--plot", metavar="FILE.svg",
                   help="write the consistency checker's timeline (operations per second, "
                        "lost writes and truncated reads marked, the injected faults shaded) "
                        "over the acknowledged writes per second per producer")
    p.set_defaults(func=run)
