"""Shrinking a failing run to a small one that still fails (docs/simulation.md, "Exploring
many seeds"): Zeller's delta debugging (ddmin, "Simplifying and Isolating Failure-Inducing
Input", 2002) over each explicit plan of the run — the faults, and every other list-valued plan
field of `WorkloadConfig` (sim/replay.py's `PLAN_FIELDS`) — then a shorter duration, then
fewer clients.

`shrink(config, fails)` takes any predicate, so a test that plants a bug can shrink in its own
process; `odradek sim --seed S --shrink` runs each candidate in a child process
(sim/explore.py) and calls a candidate failing when its check is not ok, or it raised or hung.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from .replay import PLAN_FIELDS, explicit
from .workload import WorkloadConfig

__all__ = ["Budget", "ddmin", "shrink"]

T = TypeVar("T")

#: the clients a shrink tries to do without, and the fewest it tries
CLIENT_FIELDS: dict[str, int] = {"producers": 0, "consumers": 0, "transactional_producers": 0}
#: the shortest duration the halving tries (virtual seconds)
MIN_DURATION = 0.5


class BudgetExhausted(Exception):
    """No runs left: the shrink keeps what it has."""


class Budget:
    """At most `runs` calls of the predicate; a candidate seen before is not run again.
    `smallest` is the last candidate that failed: every candidate a shrink tries is a
    reduction of the smallest failing one so far, so the last to fail is the smallest, and it
    is what a shrink keeps when the budget runs out in the middle of a step."""

    def __init__(self, fails: Callable[[WorkloadConfig], bool], runs: int,
                 log: Callable[[str], None] = lambda _: None) -> None:
        self.fails = fails
        self.left = runs
        self.runs = 0
        self.log = log
        self.smallest: WorkloadConfig | None = None
        self._seen: dict[Hashable, bool] = {}

    def __call__(self, cfg: WorkloadConfig, what: str) -> bool:
        key = _key(cfg)
        if key in self._seen:
            return self._seen[key]
        if self.left <= 0:
            raise BudgetExhausted
        self.left -= 1
        self.runs += 1
        result = bool(self.fails(cfg))
        self._seen[key] = result
        if result:
            self.smallest = cfg
        self.log(f"shrink run {self.runs}: {what}: {'fails' if result else 'passes'}")
        return result


def _key(cfg: WorkloadConfig) -> Hashable:
    return tuple((f.name, tuple(v) if isinstance(v := getattr(cfg, f.name), list) else v)
                 for f in dataclasses.fields(cfg))


def ddmin(items: Sequence[T], fails: Callable[[list[T]], bool]) -> list[T]:
    """A 1-minimal sublist of `items` (in their order) that still `fails`: removing any one
    element of it passes. `items` itself must fail. The empty list is tried first; a sublist
    tried before is not tried again."""
    seen: dict[tuple[int, ...], bool] = {}

    def test(indices: list[int]) -> bool:
        key = tuple(indices)
        if key not in seen:
            seen[key] = fails([items[i] for i in indices])
        return seen[key]

    current = list(range(len(items)))
    if current and test([]):
        return []
    n = 2
    while len(current) >= 2:
        size = len(current)
        chunks = [current[i * size // n:(i + 1) * size // n] for i in range(n)]
        for chunk in chunks:  # one chunk alone
            if len(chunk) < size and test(chunk):
                current, n = chunk, 2
                break
        else:
            for i in range(n):  # all but one chunk
                rest = [x for j, c in enumerate(chunks) if j != i for x in c]
                if len(rest) < size and test(rest):
                    current, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= size:
                    break
                n = min(size, 2 * n)
    return [items[i] for i in current]


def _end(item: Any) -> float:
    return float(getattr(item, "at", 0.0)) + float(getattr(item, "hold", 0.0))


def _within(cfg: WorkloadConfig, duration: float) -> WorkloadConfig:
    """`cfg` cut to `duration`: the plan items starting later dropped."""
    plans = {name: [x for x in getattr(cfg, name) if getattr(x, "at", 0.0) < duration]
             for name in PLAN_FIELDS if getattr(cfg, name) is not None}
    return dataclasses.replace(cfg, duration=duration, **plans)


def shrink(config: WorkloadConfig, fails: Callable[[WorkloadConfig], bool],
           max_runs: int = 200, log: Callable[[str], None] = lambda _: None
           ) -> WorkloadConfig:
    """The smallest failing config found from `config` (which must fail) within `max_runs`
    calls of `fails`: its drawn plans made explicit (sim/replay.py's `explicit`), each plan
    reduced by `ddmin`, the duration cut to just after the last planned item ends and then
    halved while it still fails, then each kind of client down to the fewest that still
    fails. Raises ValueError if `config` does not fail."""
    budget = Budget(fails, max_runs, log)
    cfg = explicit(config)
    if not budget(cfg, "the whole schedule"):
        raise ValueError(f"seed {cfg.seed}'s run does not fail: nothing to shrink")
    try:
        for name in PLAN_FIELDS:
            plan = getattr(cfg, name)
            if not plan:
                continue

            def plan_fails(subset: list[Any], name: str = name, base: WorkloadConfig = cfg,
                           whole: int = len(plan)) -> bool:
                return budget(dataclasses.replace(base, **{name: subset}),
                              f"{len(subset)} of {whole} {name}")

            cfg = dataclasses.replace(cfg, **{name: ddmin(plan, plan_fails)})
            log(f"shrink: {name} {len(plan)} -> {len(getattr(cfg, name))}")
        ends = [_end(x) for name in PLAN_FIELDS for x in getattr(cfg, name) or ()]
        last = round(max(ends, default=0.0) + 1.0, 3)  # a second after the last heal
        if last < cfg.duration and budget(_within(cfg, last), f"duration {last:g}"):
            cfg = _within(cfg, last)
        while cfg.duration / 2 >= MIN_DURATION:
            half = _within(cfg, round(cfg.duration / 2, 3))
            if not budget(half, f"duration {half.duration:g}"):
                break
            cfg = half
        log(f"shrink: duration {config.duration:g} -> {cfg.duration:g}")
        for name, fewest in CLIENT_FIELDS.items():
            for n in range(fewest, getattr(cfg, name)):
                fewer = dataclasses.replace(cfg, **{name: n})
                if budget(fewer, f"{name} {n}"):
                    cfg = fewer
                    break
    except BudgetExhausted:  # midway through a step (a ddmin): its progress is kept too
        assert budget.smallest is not None
        cfg = budget.smallest
        log(f"shrink: the budget of {max_runs} runs is spent; keeping the smallest so far")
    return cfg


def size(cfg: WorkloadConfig) -> dict[str, object]:
    """What a shrink makes smaller, for its before/after line."""
    out: dict[str, object] = {name: len(getattr(cfg, name) or ()) for name in PLAN_FIELDS}
    out["duration"] = cfg.duration
    out.update({name: getattr(cfg, name) for name in CLIENT_FIELDS})
    return out
