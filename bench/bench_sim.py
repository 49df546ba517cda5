"""How fast the deterministic simulator runs whole clusters: virtual seconds per wall second by
cluster size and workload (docs/simulation.md, "Speed"; docs/performance.md, "Simulation speed").

Every run is its own ``python -m odradek.sim`` (or ``odradek sim``) process, as a user starts
it; the figures are the ones the run prints of itself (its virtual, wall and CPU seconds, the
cluster's start and stop included, the interpreter's imports not). Each configuration runs
`--repeats` times, interleaved with the others, and the table gives the median and the range::

    python bench/bench_sim.py                          # the whole matrix, markdown on stdout
    python bench/bench_sim.py --repeats 1 --quick      # a smoke test (~20 s)
    python bench/bench_sim.py --update-doc docs/performance.md
    python bench/bench_sim.py --splice F.md --update-doc docs/performance.md  # no run

The workloads:

* ``steady``: ``python -m odradek.sim kafka --seed S --brokers B --duration D --rate R``, R
  records per virtual second (acks=all, keyed over a 3-partition topic, replication factor
  min(3, B)) for D virtual seconds, a consumer group reading meanwhile, Kafka's defaults
  otherwise (50 partitions of __consumer_offsets). The same seed twice gives the same digest,
  which the benchmark checks.
* ``steady (marginal)``: the same at two durations; (D2 - D1) / (wall2 - wall1) is the rate
  once the cluster runs, without its start-up.
* ``txn-timeout``: a transaction left open past transaction.timeout.ms = 600000, aborted by its
  coordinator: ten virtual minutes of waiting.
* ``explorer``: ``odradek sim --seed S --duration 60 --rate 0.1 --ops all --op-rate 0.25`` (the
  explorer's mix: three brokers, idempotent and transactional producers, a group, faults of
  every kind and operations), for comparison: its broker restarts and recoveries are work
  that virtual time does not skip.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    REPO,
    add_section_options,
    machine_facts,
    progress,
    run_section,
    table,
)

BEGIN, END = "<!-- sim-speed:begin -->", "<!-- sim-speed:end -->"
_STEADY = re.compile(r"seed (\d+) brokers (\d+) acked (\d+) consumed (\d+) missing (\d+) "
                     r"events (\d+) virtual ([\d.]+)s wall ([\d.]+)s cpu ([\d.]+)s")
_TXN = re.compile(r"virtual ([\d.]+)s wall ([\d.]+)s cpu ([\d.]+)s")


@dataclass(frozen=True)
class Config:
    name: str  # the table's first column
    brokers: int
    argv: tuple[str, ...]  # after the python executable
    parse: str  # "steady", "txn" or "explorer"


@dataclass
class Sample:
    virtual: float
    wall: float
    cpu: float
    digest: str
    ok: bool


@dataclass
class Results:
    started: float
    facts: dict[str, str]
    configs: list[Config]
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    seed: int = 5
    repeats: int = 3


def steady(brokers: int, rate: float, duration: float, seed: int) -> Config:
    return Config(f"steady, {rate:g} rec/s, {duration:g} s", brokers,
                  ("-m", "odradek.sim", "kafka", "--seed", str(seed), "--brokers", str(brokers),
                   "--duration", f"{duration:g}", "--rate", f"{rate:g}"), "steady")


def configs(quick: bool, seed: int) -> list[Config]:
    if quick:
        return [steady(1, 1, 30, seed), steady(3, 1, 30, seed), steady(3, 1, 60, seed)]
    return [
        steady(1, 1, 120, seed),
        steady(3, 1, 120, seed),
        steady(3, 1, 600, seed),
        steady(5, 1, 120, seed),
        steady(3, 10, 120, seed),
        steady(3, 50, 60, seed),
        Config("transaction timeout, 10 min", 1, ("-m", "odradek.sim", "txn-timeout",
                                                  "--seed", str(seed), "--brokers", "1"), "txn"),
        Config("transaction timeout, 10 min", 3, ("-m", "odradek.sim", "txn-timeout",
                                                  "--seed", str(seed), "--brokers", "3"), "txn"),
        Config("explorer's mix with faults, 60 s", 3,
               ("-m", "odradek.cli", "sim", "--seed", str(seed), "--duration", "60",
                "--rate", "0.1", "--ops", "all", "--op-rate", "0.25", "--json"), "explorer"),
    ]


def run_one(c: Config, timeout: float) -> Sample:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "src"), env.get("PYTHONPATH", "")) if p)
    out = subprocess.run([sys.executable, *c.argv], capture_output=True, text=True,
                         timeout=timeout, env=env, cwd=REPO)
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    if c.parse == "explorer":
        last = json.loads(lines[-1])
        return Sample(last["virtual_s"], last["wall_s"], float("nan"), last["digest"],
                      bool(last["ok"]) and out.returncode == 0)
    text = "\n".join(lines)
    m = (_STEADY if c.parse == "steady" else _TXN).search(text)
    if m is None or out.returncode != 0:
        raise RuntimeError(f"{' '.join(c.argv)} exited {out.returncode}:\n{out.stdout[-2000:]}"
                           f"\n{out.stderr[-2000:]}")
    virtual, wall, cpu = (float(x) for x in m.groups()[-3:])
    ok = c.parse != "steady" or m.group(5) == "0"
    return Sample(virtual, wall, cpu, lines[-1].split()[-1], ok)


def run(a: Any) -> Results:
    started = time.monotonic()
    res = Results(started, machine_facts(), configs(a.quick, a.seed), seed=a.seed,
                  repeats=a.repeats)
    total = len(res.configs) * a.repeats
    n = 0
    for round_ in range(a.repeats):  # interleaved: a drift in the machine's speed is shared
        for c in res.configs:
            n += 1
            progress(f"[{n}/{total}] round {round_ + 1}: {c.name}, {c.brokers} broker(s)")
            s = run_one(c, a.timeout)
            res.samples.setdefault(key(c), []).append(s)
            progress(f"    virtual {s.virtual:.1f} s, wall {s.wall:.2f} s, "
                     f"{s.virtual / s.wall:.0f} virtual s per wall s")
    return res


def key(c: Config) -> str:
    return f"{c.name}|{c.brokers}"


def _range(values: list[float], fmt: str) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def render(res: Results, a: Any) -> str:
    rows = []
    for c in res.configs:
        ss = res.samples[key(c)]
        digests = {s.digest for s in ss}
        cpus = [s.cpu for s in ss if s.cpu == s.cpu]
        rows.append([c.name, c.brokers, f"{statistics.median(s.virtual for s in ss):.1f}",
                     _range([s.wall for s in ss], ".2f"),
                     _range(cpus, ".2f") if cpus else "-",
                     _range([s.virtual / s.wall for s in ss], ".0f"),
                     "yes" if len(digests) == 1 else f"NO ({len(digests)})",
                     "yes" if all(s.ok for s in ss) else "NO"])
    out = [BEGIN, "", "### Simulation speed, by `bench/bench_sim.py`", ""]
    out.append("Machine: " + "; ".join(f"{k} {v}" for k, v in res.facts.items()
                                       if k in ("date", "cpus", "cpu model", "python",
                                                "load average at start", "odradek")) + ".")
    out.append("")
    out.append(f"Seed {res.seed}, {res.repeats} run(s) of each configuration, interleaved; "
               "median (range). Virtual, wall and CPU seconds as each run prints them (the "
               "cluster's start and stop included, the interpreter's imports not).")
    out.append("")
    out.append(table(["workload", "brokers", "virtual s", "wall s", "CPU s",
                      "virtual s per wall s", "same digest", "ok"], rows, "lrrrrrll"))
    short = [c for c in res.configs if c.parse == "steady" and c.brokers == 3
             and "1 rec/s" in c.name]
    if len(short) == 2:
        w1 = statistics.median(s.wall for s in res.samples[key(short[0])])
        w2 = statistics.median(s.wall for s in res.samples[key(short[1])])
        v1 = statistics.median(s.virtual for s in res.samples[key(short[0])])
        v2 = statistics.median(s.virtual for s in res.samples[key(short[1])])
        if w2 > w1:
            out.append("")
            out.append(f"Three brokers at 1 record/s once started (steady (marginal): the "
                       f"{v1:.0f} s and {v2:.0f} s runs' medians): "
                       f"**{(v2 - v1) / (w2 - w1):.0f} virtual s per wall s**; start-up and "
                       f"stop cost about {w1 - v1 * (w2 - w1) / (v2 - v1):.2f} wall s.")
    out.append("")
    out.append(END)
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="three short runs only")
    ap.add_argument("--timeout", type=float, default=900, help="wall seconds a run may take")
    add_section_options(ap, "sim-speed")
    a = ap.parse_args()
    if a.splice and not a.update_doc:
        ap.error("--splice needs --update-doc")
    run_section(a, "simulation speed", run, render, BEGIN, END)


if __name__ == "__main__":
    main()
