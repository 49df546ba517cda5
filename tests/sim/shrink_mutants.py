"""Shrink each planted bug's failing run (docs/simulation.md, "Teeth: planted bugs") and keep
the shrunk schedule in tests/sim/mutant_schedules/NAME.json, which
tests/sim/test_mutant_schedules.py replays on every change (the bug planted: the same row
fails; the clean code: ok).

    PYTHONPATH=src python -m tests.sim.shrink_mutants [NAME ...] [--max-runs 60] [--slow]

For each mutant the first failing seed of its case (tests/sim/test_mutants.py) is found, then
`odradek.sim.shrink.shrink` reduces it, a candidate counting as failing only if the case's row
fails again under the bug. Prints each step, the sizes before and after and the replay
command. The mutants live in tests only, so this runs in-process, not through `odradek sim`.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from odradek.sim.replay import explicit, save_schedule
from odradek.sim.shrink import shrink, size
from odradek.sim.workload import WorkloadConfig, run_workload

from .mutants import MUTANTS
from .test_mutants import CASES, failing

SCHEDULES = Path(__file__).parent / "mutant_schedules"


def fails_with(name: str, row: str) -> Callable[[WorkloadConfig], bool]:
    def fails(cfg: WorkloadConfig) -> bool:
        with MUTANTS[name]():
            return row in failing(run_workload(cfg))
    return fails


def shrink_one(name: str, max_runs: int) -> Path | None:
    case = CASES[name]
    fails = fails_with(name, case.row)
    began = time.process_time()
    first = next((case.config(seed) for seed in range(case.first, case.first + case.seeds)
                  if fails(case.config(seed))), None)
    if first is None:
        print(f"{name}: not found in {case.seeds} seeds from {case.first}", flush=True)
        return None
    shrunk = shrink(first, fails, max_runs=max_runs,
                    log=lambda line: print(f"  {name}: {line}", flush=True))
    path = SCHEDULES / f"{name}.json"
    save_schedule(shrunk, path, comment=(
        f"planted bug {name} (tests/sim/mutants.py), caught by {case.row}: seed "
        f"{first.seed}'s run shrunk by tests/sim/shrink_mutants.py; must fail that row with "
        "the bug planted and pass without it (tests/sim/test_mutant_schedules.py)"))
    print(f"{name}: seed {first.seed} {size(explicit(first))} -> {size(shrunk)} in "
          f"{time.process_time() - began:.1f} CPU s; written to {path.name}", flush=True)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="mutants (default: every reached one)")
    p.add_argument("--max-runs", type=int, default=60)
    p.add_argument("--slow", action="store_true", help="also the cases marked slow")
    args = p.parse_args(argv)
    logging.disable(logging.CRITICAL)
    names = args.names or [n for n, c in sorted(CASES.items())
                           if c.reached and (args.slow or not c.slow)]
    SCHEDULES.mkdir(exist_ok=True)
    missing = [n for n in names if shrink_one(n, args.max_runs) is None]
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
