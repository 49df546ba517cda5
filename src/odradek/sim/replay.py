"""Schedule files: a run of `odradek sim` written down so that it can be replayed exactly
(docs/simulation.md, "Exploring many seeds").

A schedule file is one JSON object: the seed, the config (every `WorkloadConfig` field but the
seed, the plans and where the trace and the files go) and the explicit plans, one key per
list-valued plan field of `WorkloadConfig` (`faults`, and any other field typed
``Sequence[X] | None`` whose X has `to_json`/`from_json`, such as the operations)::

    {"seed": 7, "config": {"duration": 12.5, "brokers": 3, "producers": 1, ...},
     "faults": [{"at": 1.2, "kind": "kill", "nodes": [0], "hold": 2.1, "amount": 0.0}]}

A plan left out of the file is drawn from the seed, as `odradek sim --seed S` draws it; a plan
present replaces the draw. `explicit(cfg)` makes the drawn fault plan explicit: the same run,
now shrinkable and editable.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import workload
from .operations import OPERATION_KINDS, plan_operations
from .random import SimRandom
from .schedule import FAULT_KINDS, plan_faults
from .workload import WorkloadConfig

__all__ = ["PLAN_FIELDS", "dumps", "explicit", "load_schedule", "replay_command", "save_schedule",
           "schedule_from_json", "schedule_to_json"]

#: fields that are where a run writes, not what it does
_LOCAL = ("seed", "trace", "data_dir")


def _plan_fields() -> dict[str, type]:
    """Every list-valued plan field of `WorkloadConfig`, with its element class: a field
    typed ``Sequence[X] | None`` where X has `from_json` (`faults`, the operations)."""
    hints = typing.get_type_hints(WorkloadConfig, vars(workload))
    out: dict[str, type] = {}
    for f in dataclasses.fields(WorkloadConfig):
        args = typing.get_args(hints[f.name])
        if type(None) not in args:
            continue
        for arg in args:
            inner = typing.get_args(arg)
            if typing.get_origin(arg) in (Sequence, list, tuple) and inner \
                    and hasattr(inner[0], "from_json"):
                out[f.name] = inner[0]
    return out


PLAN_FIELDS: dict[str, type] = _plan_fields()


def _drawn_faults(cfg: WorkloadConfig) -> list[Any]:
    # the same fork of the same root seed as `_Run.main`'s draw (`Simulation(seed).random` is
    # `SimRandom(seed)`, and a fork depends on the root seed and its name only)
    return plan_faults(SimRandom(cfg.seed).fork("faults"), cfg.brokers, cfg.duration,
                       cfg.fault_kinds, cfg.fault_scale)


def _drawn_operations(cfg: WorkloadConfig) -> list[Any]:
    # `_Run.main`'s draw: the fork "operations", only when operation kinds are set
    if not cfg.operation_kinds:
        return []
    return plan_operations(SimRandom(cfg.seed).fork("operations"), cfg.operation_kinds,
                           cfg.duration, cfg.operation_rate, cfg.brokers)


#: how a plan left to the seed is drawn, to make it explicit (a plan field without a drawer
#: here stays drawn: it replays, but the shrinker leaves it alone)
DRAWERS: dict[str, typing.Callable[[WorkloadConfig], list[Any]]] = {
    "faults": _drawn_faults, "operations": _drawn_operations}


def explicit(cfg: WorkloadConfig) -> WorkloadConfig:
    """`cfg` with every drawn plan it can draw written out: the same run."""
    changes = {name: list(draw(cfg)) for name, draw in DRAWERS.items()
               if name in PLAN_FIELDS and getattr(cfg, name) is None}
    return dataclasses.replace(cfg, **changes)


def _to_json(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [_to_json(v) for v in value]
    return value


def schedule_to_json(cfg: WorkloadConfig) -> dict[str, object]:
    """The schedule file's object for `cfg` (its explicit plans; drawn ones left out)."""
    config = {f.name: _to_json(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)
              if f.name not in _LOCAL and f.name not in PLAN_FIELDS}
    out: dict[str, object] = {"seed": cfg.seed, "config": config}
    for name in PLAN_FIELDS:
        plan = getattr(cfg, name)
        if plan is not None:
            out[name] = [item.to_json() for item in plan]
    return out


def schedule_from_json(data: dict[str, Any], **local: object) -> WorkloadConfig:
    """The `WorkloadConfig` of a schedule file's object; `local` sets trace or data_dir."""
    known = {f.name: f for f in dataclasses.fields(WorkloadConfig)}
    config = dict(data.get("config", {}))
    unknown = set(config) - set(known) | set(data) - {"seed", "config", "comment", *PLAN_FIELDS}
    if unknown:
        raise ValueError(f"unknown schedule keys {sorted(unknown)}")
    values: dict[str, object] = {}
    for name, value in config.items():
        values[name] = tuple(value) if isinstance(value, list) else value
    kinds = values.get("fault_kinds", ())
    assert isinstance(kinds, tuple)
    if set(kinds) - set(FAULT_KINDS):
        raise ValueError(f"unknown fault kinds {sorted(set(kinds) - set(FAULT_KINDS))}")
    for name, cls in PLAN_FIELDS.items():
        if data.get(name) is not None:
            values[name] = [cls.from_json(item) for item in data[name]]  # type: ignore[attr-defined]
    return WorkloadConfig(int(data["seed"]), **values, **local)  # type: ignore[arg-type]


def load_schedule(path: str | Path, **local: object) -> WorkloadConfig:
    return schedule_from_json(json.loads(Path(path).read_text()), **local)


def save_schedule(cfg: WorkloadConfig, path: str | Path, comment: str | None = None) -> None:
    data = schedule_to_json(cfg)
    if comment:
        data = {"comment": comment, **data}
    Path(path).write_text(dumps(data))


def dumps(data: dict[str, object]) -> str:
    """A schedule file's text: a key a line, a planned item a line (diffs stay readable)."""
    lines = []
    for key, value in data.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            items = ",\n".join(f"  {json.dumps(item)}" for item in value)
            lines.append(f" {json.dumps(key)}: [\n{items}\n ]")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def replay_command(cfg: WorkloadConfig, schedule: str | Path | None = None) -> str:
    """The command that runs `cfg` again: `odradek sim --schedule FILE` for a written
    schedule, else `odradek sim --seed S` with the flags that differ from the defaults (a
    config with explicit plans needs a schedule file)."""
    if schedule is not None:
        return f"odradek sim --schedule {shlex.quote(str(schedule))}"
    default = WorkloadConfig(cfg.seed)
    words = ["odradek", "sim", "--seed", str(cfg.seed)]
    flags = {"duration": "--duration", "brokers": "--brokers", "producers": "--producers",
             "consumers": "--consumers", "transactional_producers": "--transactional",
             "fault_scale": "--fault-scale", "rate": "--rate"}
    for name, flag in flags.items():
        if getattr(cfg, name) != getattr(default, name):
            words += [flag, f"{getattr(cfg, name):g}"]
    if tuple(cfg.fault_kinds) != tuple(default.fault_kinds):
        words += ["--faults", ",".join(cfg.fault_kinds) or "none"]
    if tuple(cfg.operation_kinds):  # `--ops`, the planned operations
        every = set(cfg.operation_kinds) == set(OPERATION_KINDS)
        words += ["--ops", "all" if every else ",".join(cfg.operation_kinds)]
        if cfg.operation_rate != default.operation_rate:
            words += ["--op-rate", f"{cfg.operation_rate:g}"]
    return " ".join(words)
