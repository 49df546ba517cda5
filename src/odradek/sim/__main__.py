"""`python -m odradek.sim echo|kafka --seed N`: one simulated run; prints its digest in hex.

`echo`: the network's own workload (sim/workloads.py); `kafka`: whole brokers, a producer and a
consumer (sim/kafka_workload.py), `--brokers 3 --faults` with a broker killed and restarted and
a link cut; `--duration S --rate R` the steady workload the simulator's speed is measured with
(R records per virtual second for S virtual seconds, consumed as they are produced);
`txn-timeout`: a transaction left open past a ten-minute transaction.timeout.ms, aborted by
its coordinator (sim/kafka_workload.py's run_transaction_timeout)."""

from __future__ import annotations

import argparse

from .kafka_workload import run_kafka, run_transaction_timeout
from .workloads import run_echo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m odradek.sim",
                                     description="Run a simulated workload and print its digest")
    parser.add_argument("workload", choices=["echo", "kafka", "txn-timeout"])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--no-faults", action="store_true")
    parser.add_argument("--brokers", type=int, default=1, help="kafka: brokers")
    parser.add_argument("--records", type=int, default=200, help="kafka: records produced")
    parser.add_argument("--faults", action="store_true",
                        help="kafka: kill and restart a broker, cut a link (3+ brokers)")
    parser.add_argument("--duration", type=float, default=None,
                        help="kafka: produce steadily for this many virtual seconds "
                             "(instead of --records)")
    parser.add_argument("--rate", type=float, default=50.0,
                        help="kafka, with --duration: records per virtual second")
    parser.add_argument("--offsets-partitions", type=int, default=None,
                        help="kafka: the brokers' offsets.topic.num.partitions (default 50)")
    args = parser.parse_args(argv)
    if args.workload == "txn-timeout":
        txn = run_transaction_timeout(args.seed, args.brokers)
        print(f"seed {txn.seed} brokers {txn.brokers} commit {txn.commit_error} committed reads "
              f"{txn.committed_reads} virtual {txn.virtual_seconds:.3f}s wall "
              f"{txn.wall_seconds:.3f}s cpu {txn.cpu_seconds:.3f}s")
        print(txn.digest)
        return 0
    if args.workload == "kafka":
        kafka = run_kafka(args.seed, args.brokers, args.records, faults=args.faults,
                          duration=args.duration, rate=args.rate,
                          offsets_partitions=args.offsets_partitions)
        print(f"seed {kafka.seed} brokers {kafka.brokers} acked {kafka.acked} consumed "
              f"{kafka.consumed} missing {kafka.missing} events {kafka.events} virtual "
              f"{kafka.virtual_seconds:.3f}s wall {kafka.wall_seconds:.3f}s cpu "
              f"{kafka.cpu_seconds:.3f}s")
        for fault in kafka.faults:
            print(f"  {fault}")
        print(kafka.digest)
        return 0
    report = run_echo(args.seed, args.clients, args.messages, faults=not args.no_faults)
    print(f"seed {report.seed} round trips {report.round_trips} reconnects "
          f"{report.reconnects} events {report.events} virtual {report.virtual_seconds:.3f}s "
          f"wall {report.wall_seconds:.3f}s")
    print(report.digest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
