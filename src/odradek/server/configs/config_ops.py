"""Config alteration operations (Kafka's AlterConfigOp and ZkAdminManager's
prepareIncrementalConfigs), shared by the AlterConfigs handlers and the admin manager.

Pure: `apply_incremental` computes a resource's new dynamic configs from its current ones.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OPERATIONS = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


class InvalidRequestError(ValueError):
    """Maps to INVALID_REQUEST with the message as is."""


class UnknownTopicError(ValueError):
    """Maps to UNKNOWN_TOPIC_OR_PARTITION."""


class UnknownConfigKeyError(KeyError):
    """APPEND / SUBTRACT of a name the resource type does not define: Kafka's
    prepareIncrementalConfigs looks its type up in a Scala Map and fails with
    NoSuchElementException, answered UNKNOWN_SERVER_ERROR without a message."""


@dataclass(frozen=True)
class ConfigOp:
    name: str
    operation: int
    value: str | None


def check_duplicates(names: Iterable[str]) -> None:
    """IncrementalAlterConfigs (Kafka's incrementalAlterConfigs); AlterConfigs has no such
    check, its last value of a name wins."""
    seen: set[str] = set()
    dupes: set[str] = set()
    for n in names:
        if n in seen:
            dupes.add(n)
        seen.add(n)
    if dupes:
        raise InvalidRequestError(
            f"Error due to duplicate config keys : {','.join(sorted(dupes))}")


def apply_incremental(current: Mapping[str, str], ops: Iterable[ConfigOp],
                      list_defaults: Mapping[str, str],
                      known_names: Collection[str] | None = None) -> dict[str, str]:
    """Kafka's incrementalAlterConfigs checks (duplicate names, then null values of any
    operation but DELETE) and prepareIncrementalConfigs: the resource's new dynamic configs.
    `list_defaults` names the list-type configs (with their default value, used by APPEND /
    SUBTRACT when the resource has no value of its own); `known_names`, the names the resource
    type defines (APPEND / SUBTRACT of any other: UnknownConfigKeyError)."""
    ops = list(ops)
    check_duplicates(op.name for op in ops)
    nulls = [f"{OPERATIONS.get(op.operation, op.operation)}:{op.name}" for op in ops
             if op.value is None and op.operation != DELETE]
    if nulls:
        raise InvalidRequestError(f"Null value not supported for : {','.join(nulls)}")
    out = dict(current)
    for op in ops:
        if op.operation == SET:
            out[op.name] = op.value or ""
        elif op.operation == DELETE:
            out.pop(op.name, None)
        elif op.operation in (APPEND, SUBTRACT):
            verb = "append" if op.operation == APPEND else "subtract"
            if known_names is not None and op.name not in known_names:
                raise UnknownConfigKeyError(op.name)
            if op.name not in list_defaults:
                raise InvalidRequestError(
                    f"Config value {verb} is not allowed for config key: {op.name}")
            old = out.get(op.name, list_defaults[op.name])
            old_items = [x.strip() for x in old.split(",") if x.strip()]
            new_items = [x.strip() for x in (op.value or "").split(",") if x.strip()]
            if op.operation == APPEND:
                merged = list(dict.fromkeys(old_items + new_items))
            else:
                merged = [x for x in old_items if x not in new_items]
            out[op.name] = ",".join(merged)
        else:
            raise InvalidRequestError(f"Unknown config operation {op.operation} for config "
                                      f"key: {op.name}")
    return out
