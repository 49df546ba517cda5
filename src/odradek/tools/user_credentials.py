"""`odradek configs --entity-type users`: users' SCRAM credentials, as Kafka's ConfigCommand
handles them, through the admin API (--bootstrap-server) or straight in ZooKeeper (--zookeeper:
`/config/users/<user>` and a `users/<user>` change notification, so credentials exist before any
broker runs and running brokers pick them up).

  --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'  (iterations: 4096)
  --delete-config 'SCRAM-SHA-512'

Output as Kafka 2.8's:
  Completed updating config for user alice.                          (--bootstrap-server)
  Completed updating config for entity: user-principal 'alice'.      (--zookeeper)
  SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192
  Configs for user-principal 'alice' are SCRAM-SHA-256=salt=...,iterations=8192  (--zookeeper)
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..common.sanitizer import desanitize_user
from ..coordination.admin_zk import USERS, read_user_config, write_user_config
from ..coordination.store import CoordinationStore, NoNodeError
from ..security.scram import (
    DEFAULT_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    apply_credential_changes,
    credential_from_password,
)
from .command import ToolError

if TYPE_CHECKING:
    from ..client import AsyncAdmin


class ScramCommandError(Exception):
    """A refused alteration (printed as Kafka prints the Java exception)."""


def parse_scram_config(key: str, value: str) -> tuple[str, str, int]:
    """(mechanism, password, iterations) of one `--add-config` item, as Kafka's
    ConfigCommand parses 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'."""
    mechanism = key.strip().upper()
    if mechanism not in SCRAM_MECHANISMS:
        raise ToolError(f"Invalid config(s): {key} (only {', '.join(SCRAM_MECHANISMS)} "
                        "credentials are supported for users)")
    fields: dict[str, str] = {}
    for part in value.split(","):
        k, sep, v = part.partition("=")
        if not sep:
            raise ToolError(f"Invalid credential property {part!r} for {mechanism}: expected "
                            "iterations=N,password=P")
        fields[k.strip()] = v
    if "password" not in fields:
        raise ToolError(f"Invalid credential property for {mechanism}: password is required")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise ToolError(f"Invalid iterations {fields['iterations']!r} for {mechanism}") from None
    if iterations < MIN_ITERATIONS:
        raise ToolError(f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} "
                        f"required for {mechanism}")
    return mechanism, fields["password"], iterations


# (mechanism, password, iterations) of each upsertion, and the mechanisms to delete
Changes = tuple[list[tuple[str, str, int]], list[str]]


def scram_changes(to_add: list[dict[str, str]], to_delete: list[str]) -> Changes:
    """The credential changes of parsed `--add-config` items and `--delete-config` keys."""
    adds = [parse_scram_config(k, v) for items in to_add for k, v in items.items()]
    deletes = [m.upper() for m in to_delete]
    bad = [m for m in deletes if m not in SCRAM_MECHANISMS]
    if bad:
        raise ToolError(f"Invalid config(s): {','.join(bad)}")
    return adds, deletes


# -- through the admin API ----------------------------------------------------------------------
async def run_admin(admin: AsyncAdmin, args: argparse.Namespace, changes: Changes
                    ) -> list[str]:
    if args.describe:
        users = None if args.entity_name is None else [args.entity_name]
        found = await admin.describe_user_scram_credentials(users, raise_errors=False)
        lines = []
        for user, infos in found.items():
            if isinstance(infos, Exception):
                if args.entity_name is not None and getattr(infos, "code", 0) == 91:
                    continue  # Kafka prints nothing for a user without credentials
                raise infos
            lines.append(f"SCRAM credential configs for user-principal '{user}' are "
                         + ", ".join(f"{m}=iterations={i}" for m, i in infos))
        return lines
    adds, deletes = changes
    user = args.entity_name
    results = await admin.alter_user_scram_credentials(
        [(user, m, p, i) for m, p, i in adds], [(user, m) for m in deletes], raise_errors=False)
    error = results.get(user)
    if error is not None:
        raise error
    return [f"Completed updating config for user {user}."]


# -- straight into ZooKeeper --------------------------------------------------------------------
async def run_zookeeper(connect: str, args: argparse.Namespace, changes: Changes
                        ) -> list[str]:
    from .command import open_zookeeper

    store = await open_zookeeper(connect)  # the brokers' identity from KAFKA_OPTS, if set
    try:
        if args.describe:
            return await _describe_zk(store, args.entity_name)
        adds, deletes = changes
        user = args.entity_name
        await _alter_zk(store, user, adds, deletes)
        return [f"Completed updating config for entity: user-principal '{user}'."]
    finally:
        await store.close()


async def _describe_zk(store: CoordinationStore, user: str | None) -> list[str]:
    if user is None:
        try:
            users = sorted(desanitize_user(u) for u in await store.get_children(USERS))
        except NoNodeError:
            users = []
    else:
        users = [user]
    lines = []
    for u in users:
        config = await read_user_config(store, u)
        lines.append(f"Configs for user-principal '{u}' are "
                     + ",".join(f"{k}={v}" for k, v in sorted(config.items())))
    return lines


async def _alter_zk(store: CoordinationStore, user: str, adds: list[tuple[str, str, int]],
                    deletes: list[str]) -> None:
    config = await read_user_config(store, user)
    missing = [m for m in deletes if m not in config]
    if missing:
        raise ScramCommandError(
            "org.apache.kafka.common.errors.InvalidConfigurationException: Invalid config(s): "
            + ",".join(missing))
    upserts = {m: credential_from_password(m, p, i) for m, p, i in adds}
    await write_user_config(store, user, apply_credential_changes(config, upserts, deletes))
