"""The hot paths before and after a change: one broker's CPU per record under librdkafka's own
load generator (rdkafka_performance), two source trees interleaved.

    python bench/bench_hot_paths.py --before dc2516f [--after WORKTREE] [--rounds 5]

"before" is a git revision (its src/ is exported to a temporary directory), "after" the working
tree unless given. Each round starts one `odradek broker` process per tree in turn (the order
alternates between rounds, so drift of this shared machine falls on both) and runs, against a
topic of one partition:

* produce with 1 MB batches (librdkafka's default batch.size, ~10,000 records a batch),
* produce with 16 KB batches (the Java client's default batch.size, ~150 records a batch),
* a consume of everything from the beginning,

each of `--records` (2,000,000) records of 100 bytes, acks=all. The figure is the broker
process's CPU time (user + system, from /proc) during the load, divided by the records: what the
produce append and the fetch path cost per record. rdkafka_performance is built by
bench/build_rdkafka_performance.sh when it is not on PATH.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    READY,
    REPO,
    cpu_seconds,
    ensure_topic,
    machine_facts,
    progress,
    table,
)

SCENARIOS = ("produce, 1 MB batches", "produce, 16 KB batches", "consume")


def rdkafka_performance() -> str:
    found = shutil.which("rdkafka_performance")
    if found:
        return found
    out = subprocess.run(["bash", str(REPO / "bench" / "build_rdkafka_performance.sh")],
                         check=True, capture_output=True, text=True).stdout.split()
    return out[-1]


def export_revision(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


@dataclass
class Broker:
    """`odradek broker` from a given source tree (PYTHONPATH), on a temporary log dir."""

    src: Path
    proc: subprocess.Popen[str] | None = None
    tmp: Path | None = None
    bootstrap: str = ""
    stderr: list[str] = field(default_factory=list)

    def __enter__(self) -> Broker:
        self.tmp = Path(tempfile.mkdtemp(prefix="odradek-hot-"))
        env = {**os.environ, "PYTHONPATH": str(self.src)}
        cmd = [sys.executable, "-m", "odradek.cli", "broker",
               "--override", "broker.id=0",
               "--override", "listeners=PLAINTEXT://127.0.0.1:0",
               "--override", f"log.dirs={self.tmp / 'data'}",
               "--override", "num.partitions=1"]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True,
                                     start_new_session=True)
        deadline = time.monotonic() + 60
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"broker from {self.src} exited before it was ready")
            m = READY.search(line)
            if m:
                self.bootstrap = m.group(2)
                return self
        raise TimeoutError(f"broker from {self.src} not ready in 60 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def one_round(perf: str, src: Path, records: int) -> dict[str, float]:
    """Broker CPU microseconds per record of each scenario, on a fresh broker from `src`."""
    out: dict[str, float] = {}
    with Broker(src) as b:
        assert b.proc is not None
        ensure_topic(b.bootstrap, "hot", 1)
        common = [perf, "-b", b.bootstrap, "-t", "hot", "-p", "0", "-q"]
        runs = [
            (SCENARIOS[0], ["-P", "-s", "100", "-c", str(records), "-a", "-1",
                            "-X", "linger.ms=5", "-X", "batch.size=1000000"]),
            (SCENARIOS[1], ["-P", "-s", "100", "-c", str(records), "-a", "-1",
                            "-X", "linger.ms=5", "-X", "batch.size=16384"]),
            (SCENARIOS[2], ["-C", "-o", "beginning", "-c", str(2 * records)]),
        ]
        for name, args in runs:
            before = cpu_seconds(b.proc.pid)
            subprocess.run(common + args, check=True, timeout=600,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            spent = cpu_seconds(b.proc.pid) - before
            n = 2 * records if name == "consume" else records
            out[name] = spent / n * 1e6
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision measured as 'before'")
    ap.add_argument("--after", type=Path, default=REPO,
                    help="the tree measured as 'after' (default: this working tree)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--records", type=int, default=2_000_000)
    a = ap.parse_args()
    perf = rdkafka_performance()
    results: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": export_revision(a.before, Path(tmp)), "after": a.after / "src"}
        for r in range(a.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for which in order:
                progress(f"round {r + 1}/{a.rounds}: {which}")
                for name, us in one_round(perf, trees[which], a.records).items():
                    results[which].setdefault(name, []).append(us)
    rows = []
    for name in SCENARIOS:
        b, f = results["before"][name], results["after"][name]
        mb, mf = statistics.median(b), statistics.median(f)
        rows.append([name, f"{mb:.2f} ({min(b):.2f}-{max(b):.2f})",
                     f"{mf:.2f} ({min(f):.2f}-{max(f):.2f})", f"{mf / mb:.2f}"])
    facts = machine_facts()
    print(f"Machine: {facts.get('cpu model')}, {facts.get('cpus')} CPUs; {facts.get('date')}; "
          f"{a.rounds} rounds interleaved, {a.records:,} records of 100 B per produce run; "
          f"before = {a.before}, after = the working tree")
    print(table(["broker CPU µs per record", "before: median (range)",
                 "after: median (range)", "after / before"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
