"""Many seeded runs of `odradek sim` at once (`odradek sim --seeds A-B --jobs N`), each its own
process, each as deterministic as one `odradek sim --seed S` (docs/simulation.md, "Exploring
many seeds").

Importing odradek costs about two CPU seconds; a run of the explorer's default 60 virtual
seconds a few. So the runs are not fresh interpreters: a `multiprocessing` forkserver imports
the simulator once (`set_forkserver_preload`) and forks one child per run from it. A child
runs one `run_workload` in a fresh `Simulation(seed)` — no state carried from a run before, as
with a pool of long-lived workers — and sends back its summary. Its brokers' files are where
`odradek sim --seed S` puts them (the data directory's path is in Kafka's error messages, so
its length, fixed by `disk.temporary_data_dir`, is in the digest), and it tells the parent
each temporary directory it makes: the parent removes them, even when it had to kill the
child. A run that raises, or dies, or outlives its wall-time limit (killed) is a failure of
that seed, with the reason; the batch goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from .workload import SimReport, WorkloadConfig, run_workload

__all__ = ["Outcome", "explore", "parse_seeds", "result", "run_many", "run_one"]

#: each run's stderr, in its own temporary directory, and how much of it a failure shows
_LOG = "stderr.log"
_LOG_TAIL = 30
#: modules the forkserver imports once for all its children (sim/warm.py builds the protocol
#: classes, which each child would otherwise build for itself)
_PRELOAD = ["odradek.sim.explore", "odradek.sim.replay", "odradek.sim.warm"]


@dataclass
class Outcome:
    """What one run gave: its summary (`odradek sim --json`'s keys) or why it has none."""

    cfg: WorkloadConfig
    summary: dict[str, object] | None
    failed_rows: list[str] = field(default_factory=list)
    error: str | None = None  # the exception, the exit status or the timeout
    digest_tail: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    log_tail: list[str] = field(default_factory=list)  # a failed run's last stderr lines
    cpu_s: float = 0.0  # the child's CPU time (it starts at the fork: no import in it)
    examples: list[str] = field(default_factory=list)  # the failed rows' first examples

    @property
    def seed(self) -> int:
        return self.cfg.seed

    @property
    def ok(self) -> bool:
        return self.error is None and self.summary is not None and self.summary["ok"] is True

    def line(self) -> dict[str, object]:
        """The JSON line of the run: the summary, or the seed and the error."""
        if self.summary is not None and self.error is None:
            return self.summary
        return {"seed": self.seed, "wall_s": round(self.wall_s, 3), "ok": False,
                "error": self.error}


def parse_seeds(text: str) -> list[int]:
    """``A-B`` (both included), ``A`` or ``A,B,C-D``."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        first = int(lo)
        last = int(hi) if sep else first
        if last < first:
            raise ValueError(f"empty seed range {part!r}")
        seeds += range(first, last + 1)
    return seeds


def result(report: SimReport) -> dict[str, Any]:
    """What a child sends back of its run's report (`Outcome`'s fields)."""
    failed = [r for r in report.check.rows if r.verdict == "FAIL"]
    return {"summary": report.summary(), "failed_rows": [r.key for r in failed],
            "examples": [f"{r.key}: {e}" for r in failed for e in r.examples[:2]],
            "digest_tail": list(report.digest_tail[-40:])}


def _child(cfg: WorkloadConfig, tmp: str, conn: multiprocessing.connection.Connection) -> None:
    # the run's temporary directories are where `odradek sim --seed S` makes them (Kafka's
    # error messages name them, so their length is in the digest), each told to the parent,
    # which removes them even if it has to kill this child
    make = tempfile.mkdtemp

    def mkdtemp(*args: Any, **kwargs: Any) -> str:
        path = make(*args, **kwargs)
        conn.send({"tmp": path})
        return path

    tempfile.mkdtemp = mkdtemp  # type: ignore[assignment]
    # the brokers' log lines to a file: the parent's stderr is the batch's progress (a failed
    # run's last lines are shown with its failure)
    log = os.open(os.path.join(tmp, _LOG), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stderr.flush()
    os.dup2(log, 2)
    os.close(log)
    try:
        conn.send({**result(run_workload(cfg)), "cpu_s": time.process_time()})
    except BaseException as exc:  # reported as the seed's failure
        conn.send({"error": f"{type(exc).__name__}: {exc}", "cpu_s": time.process_time(),
                   "traceback": traceback.format_exc(limit=20)})
    finally:
        conn.close()


def _context() -> multiprocessing.context.BaseContext:
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


@dataclass
class _Running:
    cfg: WorkloadConfig
    process: BaseProcess
    conn: multiprocessing.connection.Connection
    tmp: str
    began: float
    message: dict[str, Any] | None = None  # the run's result
    made: list[str] = field(default_factory=list)  # the run's temporary directories

    def receive(self) -> None:
        """Read what the child sent: the directories it made, then its result."""
        while self.message is None and self.conn.poll():
            try:
                data = self.conn.recv()
            except EOFError:
                self.message = {}
                return
            if "tmp" in data:
                self.made.append(data["tmp"])
            else:
                self.message = data


def run_many(configs: Sequence[WorkloadConfig], jobs: int, timeout: float,
             ) -> Iterator[Outcome]:
    """Run every config, `jobs` at a time, each in its own child; yield each outcome as it
    finishes (in the order they finish). A run past `timeout` wall seconds is killed."""
    ctx = _context()
    pending = list(reversed(configs))
    running: list[_Running] = []
    root = tempfile.mkdtemp(prefix="odradek-explore-")
    try:
        while pending or running:
            while pending and len(running) < max(1, jobs):
                cfg = pending.pop()
                tmp = tempfile.mkdtemp(prefix=f"seed-{cfg.seed}-", dir=root)
                receive, send = ctx.Pipe(duplex=False)
                process = ctx.Process(target=_child, args=(cfg, tmp, send), daemon=True,
                                      name=f"odradek-sim-seed-{cfg.seed}")
                process.start()
                send.close()
                running.append(_Running(cfg, process, receive, tmp, time.perf_counter()))
            now = time.perf_counter()
            wait = min(r.began + timeout for r in running) - now
            waitables: list[Any] = [r.conn for r in running if r.message is None] \
                + [r.process.sentinel for r in running]
            multiprocessing.connection.wait(waitables, timeout=max(0.0, wait))
            for r in list(running):
                r.receive()
                elapsed = time.perf_counter() - r.began
                if r.message is None and r.process.is_alive() and elapsed < timeout:
                    continue
                if r.process.is_alive():
                    r.process.join(5.0 if r.message is not None else 0.0)
                outcome = _finish(r, elapsed, timeout)
                running.remove(r)
                yield outcome
    finally:
        for r in running:
            r.process.kill()
            r.process.join()
            r.receive()
            for path in r.made:
                shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def _finish(r: _Running, elapsed: float, timeout: float) -> Outcome:
    r.receive()  # what it sent just before it exited
    message = r.message or {}
    error: str | None = message.get("error")
    if r.process.is_alive():
        r.process.kill()
        r.process.join()
        if not message:
            error = f"no result after {timeout:g} wall seconds: killed"
    elif not message:
        error = f"the run's process died (exit status {r.process.exitcode})"
    r.conn.close()
    outcome = Outcome(r.cfg, message.get("summary"), message.get("failed_rows", []), error,
                      message.get("digest_tail", []), elapsed, cpu_s=message.get("cpu_s", 0.0),
                      examples=message.get("examples", []))
    if not outcome.ok:
        with contextlib.suppress(OSError):
            lines = Path(r.tmp, _LOG).read_text(errors="replace").splitlines()
            outcome.log_tail = lines[-_LOG_TAIL:]
    for path in [r.tmp, *r.made]:
        shutil.rmtree(path, ignore_errors=True)
    if error and message.get("traceback"):
        outcome.log_tail.append(message["traceback"])
    return outcome


def run_one(cfg: WorkloadConfig, timeout: float) -> Outcome:
    """One run in its own child (a hang or a crash is an outcome, not this process's end)."""
    return next(run_many([cfg], 1, timeout))


def seeds_per_hour(runs: int, wall_s: float) -> float:
    return round(runs * 3600.0 / wall_s, 1) if wall_s > 0 else 0.0


def explore(seeds: Sequence[int], make: Callable[[int], WorkloadConfig], jobs: int,
            timeout: float, on_outcome: Callable[[Outcome, int, int, float], None],
            replay: Callable[[WorkloadConfig], str], label: str) -> dict[str, object]:
    """Run `make(seed)` for every seed; `on_outcome(outcome, done, total, elapsed)` after each;
    the batch's summary object (`odradek sim --seeds ... --json`'s last line)."""
    began = time.perf_counter()
    failed: list[Outcome] = []
    done = 0
    cpu = 0.0
    for outcome in run_many([make(s) for s in seeds], jobs, timeout):
        done += 1
        cpu += outcome.cpu_s
        if not outcome.ok:
            failed.append(outcome)
        on_outcome(outcome, done, len(seeds), time.perf_counter() - began)
    wall = time.perf_counter() - began
    failed.sort(key=lambda o: o.seed)
    return {"seeds": label, "runs": done, "jobs": jobs,
            "failed": [o.seed for o in failed],
            "errors": {str(o.seed): o.error for o in failed if o.error},
            "replay": {str(o.seed): replay(o.cfg) for o in failed},
            "wall_s": round(wall, 3), "seeds_per_hour": seeds_per_hour(done, wall),
            # what the runs cost whatever else the machine runs: CPU seconds per seed, and
            # seeds an hour per CPU were nothing else running
            "cpu_s_per_seed": round(cpu / done, 3) if done else 0.0,
            "seeds_per_cpu_hour": seeds_per_hour(done, cpu), "cpus": os.cpu_count()}


# -- the command line (sim/command.py) ---------------------------------------------------------
def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _exit_on_sigterm() -> Iterator[None]:
    """While entered, SIGTERM (and SIGINT, which a shell leaves ignored in a background job)
    end the batch through `run_many`'s cleanup: its children killed, their files removed."""
    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def run_seeds(args: argparse.Namespace, make: Callable[[int], WorkloadConfig]) -> int:
    """`odradek sim --seeds A-B [--jobs N] [--json]`: a line per seed on stdout as each
    finishes (in the order they finish), progress on stderr, the batch's summary last; exit 1
    if any seed failed."""
    from .replay import replay_command

    seeds = parse_seeds(args.seeds)
    jobs = args.jobs or os.cpu_count() or 1

    def on_outcome(outcome: Outcome, done: int, total: int, elapsed: float) -> None:
        verdict = "ok" if outcome.ok else f"FAIL {outcome.error or ','.join(outcome.failed_rows)}"
        _progress(f"[{done}/{total}] seed {outcome.seed} {verdict} in {outcome.wall_s:.1f} s "
                  f"wall, {outcome.cpu_s:.1f} s CPU "
                  f"({seeds_per_hour(done, elapsed):g} seeds/hour so far)")
        if not outcome.ok:
            for line in outcome.examples:
                _progress(f"  {line}")
            for line in outcome.log_tail:
                _progress(f"  | {line}")
            _progress("  the digest's last events:")
            for line in outcome.digest_tail[-10:]:
                _progress(f"  {line}")
        if args.json:
            print(json.dumps(outcome.line()), flush=True)
        elif outcome.summary is not None:
            s = outcome.summary
            print(f"seed {s['seed']} virtual {s['virtual_s']}s wall {s['wall_s']}s operations "
                  f"{s['operations']} faults {s['faults']} digest {s['digest']} "
                  f"{'ok' if outcome.ok else 'FAIL'}", flush=True)
        else:
            print(f"seed {outcome.seed} FAIL {outcome.error}", flush=True)

    with _exit_on_sigterm():
        summary = explore(seeds, make, jobs, args.seed_timeout, on_outcome, replay_command,
                          args.seeds)
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        print(f"seeds {summary['seeds']}: {summary['runs']} runs, "
              f"{len(summary['failed'])} failed {summary['failed']}, wall {summary['wall_s']} s, "
              f"{summary['seeds_per_hour']} seeds/hour with {jobs} jobs")
        for seed, command in summary["replay"].items():  # type: ignore[attr-defined]
            print(f"replay seed {seed}: {command}")
    return 1 if summary["failed"] else 0


def run_shrink(args: argparse.Namespace, cfg: WorkloadConfig) -> int:
    """`odradek sim --seed S --shrink [--save-schedule FILE]`: the seed's run shrunk while it
    still fails, each candidate in its own child; the smallest schedule is written (to FILE,
    or shrunk-seed-S.json here) with its replay command and its digest's last events."""
    from .replay import dumps, explicit, replay_command, save_schedule, schedule_to_json
    from .shrink import shrink, size

    outcomes: dict[str, Outcome] = {}
    first: list[Outcome] = []

    def fails(candidate: WorkloadConfig) -> bool:
        outcome = run_one(candidate, args.seed_timeout)
        outcomes[json.dumps(schedule_to_json(candidate), sort_keys=True)] = outcome
        if not first:
            first.append(outcome)
        if outcome.ok:
            return False
        if args.shrink_same_row and first[0].failed_rows and outcome.error is None:
            return bool(set(outcome.failed_rows) & set(first[0].failed_rows))
        return True

    began = time.perf_counter()
    try:
        with _exit_on_sigterm():
            small = shrink(cfg, fails, args.shrink_runs, _progress)
    except ValueError as exc:
        _progress(f"odradek sim --shrink: {exc}")
        return 0
    path = args.save_schedule or f"shrunk-seed-{cfg.seed}.json"
    save_schedule(small, path, comment=f"shrunk from {replay_command(cfg)}")
    last = outcomes.get(json.dumps(schedule_to_json(small), sort_keys=True))
    print(dumps(schedule_to_json(small)), end="")

    print(f"shrunk in {len(outcomes)} runs, {time.perf_counter() - began:.0f} s: "
          f"{size(explicit(cfg))} -> {size(small)}")
    if last is not None:
        print(f"fails: {last.error or ', '.join(last.failed_rows)}")
        for line in last.examples:
            print(f"  {line}")
        print("the digest's last events:")
        for line in last.digest_tail[-20:]:
            print(f"  {line}")
    print(f"replay: {replay_command(small, path)}", flush=True)
    return 1
