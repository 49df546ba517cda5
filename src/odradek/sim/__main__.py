"""`python -m odradek.sim echo --seed N`: one simulated run; prints its digest in hex."""

from __future__ import annotations

import argparse

from .workloads import run_echo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m odradek.sim",
                                     description="Run a simulated workload and print its digest")
    parser.add_argument("workload", choices=["echo"])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--no-faults", action="store_true")
    args = parser.parse_args(argv)
    report = run_echo(args.seed, args.clients, args.messages, faults=not args.no_faults)
    print(f"seed {report.seed} round trips {report.round_trips} reconnects "
          f"{report.reconnects} events {report.events} virtual {report.virtual_seconds:.3f}s "
          f"wall {report.wall_seconds:.3f}s")
    print(report.digest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
