"""`odradek configs` (S-6.3): Kafka's kafka-configs on odradek's admin client.

  --bootstrap-server HOST:PORT [--command-config FILE]    (or, for users only, --zookeeper)
  --entity-type topics|brokers|users  (--entity-name NAME | --entity-default)
      or Kafka's shortcuts --topic NAME | --broker ID | --broker-defaults
  --describe [--all]                       DescribeConfigs (dynamic configs; --all: every config)
  --alter [--add-config 'k1=v1,k2=[a,b]'] [--add-config-file FILE] [--delete-config k1,k2]
                                           IncrementalAlterConfigs (SET / DELETE)

Output as Kafka's ConfigCommand:

  Dynamic configs for topic t are:
    retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}
  Default configs for brokers in the cluster are:
  Completed updating config for topic t.
  Completed updating default config for brokers in the cluster.

Users' SCRAM credentials (KIP-554), as Kafka's docs create them:

  --alter --entity-type users --entity-name alice
      --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
  --alter --entity-type users --entity-name alice --delete-config 'SCRAM-SHA-512'
  --describe --entity-type users [--entity-name alice]

Client quotas (users, clients, a user's clients, and their defaults; tools/client_quotas.py):

  --alter --entity-type users --entity-name alice [--entity-type clients --entity-name app]
      --add-config 'producer_byte_rate=1048576,consumer_byte_rate=2097152,request_percentage=50'
  --alter --entity-type clients --entity-default --delete-config consumer_byte_rate
  --describe --entity-type users [--entity-name alice | --entity-default]

With --bootstrap-server they go through AlterUserScramCredentials / DescribeUserScramCredentials;
with --zookeeper HOST:PORT[/chroot] the tool writes `/config/users/<user>` and a change
notification itself, so the inter-broker user's credential exists before any broker runs.

A bad command line prints the reason on stderr and exits 1; a failed request prints
"Error while executing config command with args '...'" and the error, and exits 1. Broker-wide
defaults are `--entity-type brokers --entity-default`; the KIP-73 replication throttles are
`leader.replication.throttled.rate` / `follower.replication.throttled.rate` (brokers) and
`leader.replication.throttled.replicas` / `follower.replication.throttled.replicas` (topics).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from typing import TYPE_CHECKING, Any

from . import client_quotas
from .command import Subcommands, ToolError, add_admin_command, read_properties, run_tool

if TYPE_CHECKING:
    from ..client import AsyncAdmin

ENTITY_TYPES = {"topics": "topic", "brokers": "broker", "users": "user", "clients": "client"}
SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
           6: "DYNAMIC_BROKER_LOGGER_CONFIG"}
DYNAMIC_SOURCE = {"topics": 1, "brokers": 2}
DEFAULT_BROKER_SOURCE = 3

# Java names of the errors this tool meets (as Kafka prints them).
_JAVA = {
    "invalid_config": "org.apache.kafka.common.errors.InvalidConfigurationException",
    "invalid_request": "org.apache.kafka.common.errors.InvalidRequestException",
    "unknown_topic_or_partition": "org.apache.kafka.common.errors.UnknownTopicOrPartitionException",
    "invalid_topic_exception": "org.apache.kafka.common.errors.InvalidTopicException",
}


# Kafka's default messages (Errors) for answers without their own.
_DEFAULT_MESSAGES = {
    "unknown_topic_or_partition": "This server does not host this topic-partition.",
}


class ConfigCommandError(Exception):
    """A failed request or a refused alteration, as the Java exception Kafka's ConfigCommand
    meets prints itself (InvalidConfigurationException...); a bad command line is a
    ``ToolError``."""


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's parseConfigsToBeAdded: 'k1=v1,k2=[v2,v3]' (commas inside [] belong to the
    value, the brackets are dropped)."""
    out: dict[str, str] = {}
    for item in re.split(r",(?=[^\]]*(?:\[|$))", text):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ToolError('Invalid entity config: all configs to be added must be in the '
                            'format "key=val".')
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


def parse_delete_config(items: list[str]) -> list[str]:
    return [k.strip() for item in items for k in item.split(",") if k.strip()]


def format_entry(entry: Any) -> str:
    synonyms = ", ".join(f"{SOURCES.get(src, 'UNKNOWN')}:{name}={value}"
                         for name, value, src in entry.synonyms)
    value = None if entry.is_sensitive else entry.value
    return (f"  {entry.name}={'null' if value is None else value} "
            f"sensitive={str(entry.is_sensitive).lower()} synonyms={{{synonyms}}}")


def _apply_entity_shortcuts(args: argparse.Namespace) -> None:
    """Kafka's shortcuts `--topic T`, `--broker ID` and `--broker-defaults` stand for
    `--entity-type topics|brokers --entity-name ...|--entity-default`."""
    chosen = [(t, n, d) for t, n, d in (
        ("topics", getattr(args, "topic", None), False),
        ("brokers", getattr(args, "broker", None), False),
        ("brokers", None, bool(getattr(args, "broker_defaults", False)))) if n is not None or d]
    if not chosen:
        return
    if len(chosen) > 1 or args.entity_type is not None or args.entity_name is not None \
            or args.entity_default:
        raise ToolError("Only one entity type may be specified: use --topic, --broker, "
                        "--broker-defaults or --entity-type with --entity-name/--entity-default")
    args.entity_type, args.entity_name, args.entity_default = chosen[0]


def _normalize_entities(args: argparse.Namespace) -> None:
    """--entity-type / --entity-name / --entity-default may repeat (a user and a client): the
    first of each is `entity_type` / `entity_name` / `entity_default`, the lists stay in
    `entity_types` / `entity_names` ("" for a default)."""
    types = list(getattr(args, "entity_types", None) or [])
    names = list(getattr(args, "entity_names", None) or [])
    args.entity_types, args.entity_names = types, names
    args.entity_type = types[0] if types else None
    head = names[0] if names else None
    args.entity_name = head or None
    args.entity_default = head == ""


def _is_quota_command(args: argparse.Namespace) -> bool:
    """users or clients with quota configs (or clients at all): tools/client_quotas.py."""
    if args.entity_type not in ("users", "clients"):
        return False
    if "clients" in args.entity_types or args.describe:
        return True
    keys = [k for t in args.add_config for k in parse_add_config(t)]
    keys += parse_delete_config(args.delete_config)
    return any(client_quotas.is_quota_key(k) for k in keys)


def _check_args(args: argparse.Namespace) -> None:
    _normalize_entities(args)
    _apply_entity_shortcuts(args)
    if len(args.entity_types) > 1 and sorted(args.entity_types) != ["clients", "users"]:
        raise ToolError("Only one entity type may be specified, except users and clients "
                        "together (a user's client)")
    actions = [a for a in ("describe", "alter") if getattr(args, a)]
    if len(actions) != 1:
        raise ToolError("Command must include exactly one action: --describe, --alter")
    if args.entity_type is None:
        raise ToolError("--entity-type must be specified")
    if args.entity_type not in ENTITY_TYPES:
        raise ToolError(f"Invalid entity type {args.entity_type}, the entity type must be one "
                        f"of {', '.join(ENTITY_TYPES)}")
    zookeeper = getattr(args, "zookeeper", None)
    if zookeeper and args.bootstrap_server:
        raise ToolError("Only one of --bootstrap-server or --zookeeper must be specified")
    if zookeeper and args.entity_type != "users":
        raise ToolError("--zookeeper is only supported with --entity-type users (SCRAM "
                        "credentials); use --bootstrap-server")
    if not args.bootstrap_server and not zookeeper:
        raise ToolError("Missing required argument \"[bootstrap-server]\"")
    if args.entity_type in ("users", "clients") and (args.all or args.add_config_file):
        raise ToolError("--all and --add-config-file are not supported with --entity-type "
                        f"{args.entity_type}")
    if args.entity_type in ("users", "clients") and args.alter:
        client_quotas.check_keys(
            args.entity_types, {k: v for t in args.add_config
                                for k, v in parse_add_config(t).items()},
            parse_delete_config(args.delete_config))
        if args.entity_default and not _is_quota_command(args):
            raise ToolError("The use of --entity-default or --user-defaults is not allowed "
                            "with User SCRAM Credentials using --bootstrap-server.")
    if zookeeper and args.alter and _is_quota_command(args):
        raise ToolError("--zookeeper alters SCRAM credentials only; quotas go through "
                        "--bootstrap-server")
    if len(args.entity_names) > len(args.entity_types):
        raise ToolError("More entity names specified than entity types")
    if args.entity_default and args.entity_type == "topics":
        raise ToolError("--entity-default is not supported with --entity-type topics")
    if args.entity_type == "brokers" and args.entity_name is not None:
        try:
            int(args.entity_name)
        except ValueError:
            raise ToolError("The entity name for brokers must be a valid integer broker id, "
                            f"but it is: {args.entity_name}") from None
    if args.alter:
        if args.entity_name is None and not args.entity_default:
            raise ToolError("an entity name must be specified with --alter of "
                            f"{args.entity_type}")
        if not args.add_config and not args.add_config_file and not args.delete_config:
            raise ToolError("At least one of --add-config, --add-config-file or "
                            "--delete-config must be specified with --alter")
    if args.all and not args.describe:
        raise ToolError("--all is only valid with --describe")


async def _entries(admin: AsyncAdmin, entity_type: str, name: str, describe_all: bool
                   ) -> list[Any]:
    from ..client.types import ConfigResource

    resource = ConfigResource(ENTITY_TYPES[entity_type], name)
    found = await admin.describe_configs([resource], include_synonyms=True)
    entries = sorted(found[resource].values(), key=lambda e: e.name)
    if describe_all:
        return entries
    wanted = DEFAULT_BROKER_SOURCE if entity_type == "brokers" and name == "" \
        else DYNAMIC_SOURCE[entity_type]
    return [e for e in entries if e.source == wanted]


async def describe(admin: AsyncAdmin, args: argparse.Namespace) -> list[str]:
    lines: list[str] = []
    if args.entity_default:
        names = [""]
    elif args.entity_name is not None:
        names = [args.entity_name]
    elif args.entity_type == "topics":
        names = sorted(await admin.list_topics(include_internal=True))
    else:
        cluster = await admin.describe_cluster()
        names = [str(b.node_id) for b in sorted(cluster.brokers, key=lambda b: b.node_id)]
    for name in names:
        if name == "":
            lines.append(f"Default configs for {args.entity_type} in the cluster are:")
        else:
            kind = "All" if args.all else "Dynamic"
            lines.append(f"{kind} configs for {ENTITY_TYPES[args.entity_type]} {name} are:")
        lines += [format_entry(e) for e in
                  await _entries(admin, args.entity_type, name, args.all)]
    return lines


async def alter(admin: AsyncAdmin, args: argparse.Namespace) -> list[str]:
    from ..client.types import ConfigResource

    to_add: dict[str, str] = {}
    if args.add_config_file:
        to_add.update(read_properties(args.add_config_file))
    for text in args.add_config:
        to_add.update(parse_add_config(text))
    to_delete = parse_delete_config(args.delete_config)
    name = "" if args.entity_default else args.entity_name
    if to_delete:
        # Kafka: deleting a config that is not set (dynamically) fails the command
        current = {e.name for e in await _entries(admin, args.entity_type, name, False)}
        invalid = [k for k in to_delete if k not in current]
        if invalid:
            raise ConfigCommandError(
                f"{_JAVA['invalid_config']}: Invalid config(s): {','.join(invalid)}")
    changes: dict[str, str | None] = {**{k: None for k in to_delete}, **to_add}
    resource = ConfigResource(ENTITY_TYPES[args.entity_type], name)
    results = await admin.incremental_alter_configs({resource: changes}, raise_errors=False)
    error = results.get(resource)
    if error is not None:
        raise ConfigCommandError(_java_text(error))
    if name:
        return [f"Completed updating config for {ENTITY_TYPES[args.entity_type]} {name}."]
    return [f"Completed updating default config for {args.entity_type} in the cluster."]


def _java_text(error: Any) -> str:
    code_name = str(getattr(error, "name", "") or "")
    java = _JAVA.get(code_name.lower(), "org.apache.kafka.common.errors.ApiException")
    text = str(error)
    marker = f"{code_name.upper()}: "
    message = text.split(marker, 1)[1] if code_name and marker in text else \
        _DEFAULT_MESSAGES.get(code_name.lower(), text)
    return f"{java}: {message}"


async def run_quotas(admin: AsyncAdmin, args: argparse.Namespace) -> list[str]:
    from . import user_credentials

    types, names = args.entity_types, list(args.entity_names)
    if args.describe:
        lines = await client_quotas.describe(admin, types, names)
        if "clients" not in types and "" not in names:  # and the users' SCRAM credentials
            lines += await user_credentials.run_admin(admin, args, ([], []))
        return lines
    to_add = {k: v for t in args.add_config for k, v in parse_add_config(t).items()}
    await client_quotas.alter(admin, types, names, to_add,
                              parse_delete_config(args.delete_config))
    return [client_quotas.completed(types, names)]


async def run(args: argparse.Namespace) -> list[str]:
    from ..client import AsyncAdmin
    from . import user_credentials

    quota_command = _is_quota_command(args)
    changes = ([], []) if quota_command else user_credentials.scram_changes(
        [parse_add_config(t) for t in args.add_config], parse_delete_config(args.delete_config)
    ) if args.entity_type == "users" and args.alter else ([], [])
    if getattr(args, "zookeeper", None):
        return await user_credentials.run_zookeeper(args.zookeeper, args, changes)
    cfg: dict[str, Any] = read_properties(args.command_config) if args.command_config else {}
    cfg["bootstrap.servers"] = args.bootstrap_server
    async with AsyncAdmin(cfg) as admin:
        if quota_command:
            return await run_quotas(admin, args)
        if args.entity_type == "users":
            return await user_credentials.run_admin(admin, args, changes)
        if args.describe:
            return await describe(admin, args)
        return await alter(admin, args)


def main(args: argparse.Namespace) -> int:
    from ..client.errors import KafkaError
    from ..coordination.store import CoordinationError
    from .user_credentials import ScramCommandError

    def body() -> list[str]:
        _check_args(args)
        return asyncio.run(run(args))

    def failed(exc: BaseException) -> int:
        argv = " ".join(sys.argv[1:])
        print(f"Error while executing config command with args '{argv}'", file=sys.stderr)
        text = str(exc) if isinstance(exc, ConfigCommandError | ScramCommandError
                                      | client_quotas.QuotaCommandError) else (
            _java_text(exc) if isinstance(exc, KafkaError) else f"{type(exc).__name__}: {exc}")
        print(text, file=sys.stderr)
        return 1

    return run_tool(body, failures=(ConfigCommandError, KafkaError, OSError, TimeoutError,
                                    CoordinationError, ScramCommandError,
                                    client_quotas.QuotaCommandError),
                    failed=failed)


def add_parser(subparsers: Subcommands) -> None:
    p = add_admin_command(subparsers, "configs", "describe or change topic, broker and user "
                          "configs (Kafka's kafka-configs)", __doc__)
    p.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                   help="write users' SCRAM credentials straight into ZooKeeper (only with "
                        "--entity-type users)")
    p.add_argument("--entity-type", action="append", dest="entity_types",
                   help="type of entity (topics/brokers/users/clients); users and clients "
                        "may both be given (a user's client)")
    p.add_argument("--entity-name", action=client_quotas.EntityNameAction,
                   help="name of entity (topic name/broker id/user name/client id)")
    p.add_argument("--entity-default", action=client_quotas.EntityNameAction, nargs=0,
                   const="", help="the default entity (brokers, users, clients)")
    p.add_argument("--user", action=client_quotas.EntityShortcutAction,
                   const=("users", False), help="same as --entity-type users --entity-name")
    p.add_argument("--client", action=client_quotas.EntityShortcutAction,
                   const=("clients", False), help="same as --entity-type clients --entity-name")
    p.add_argument("--user-defaults", action=client_quotas.EntityShortcutAction, nargs=0,
                   const=("users", True), help="the default user (quotas)")
    p.add_argument("--client-defaults", action=client_quotas.EntityShortcutAction, nargs=0,
                   const=("clients", True), help="the default client id (quotas)")
    p.add_argument("--topic", help="the topic's name (same as --entity-type topics "
                   "--entity-name TOPIC)")
    p.add_argument("--broker", help="the broker's id (same as --entity-type brokers "
                   "--entity-name ID)")
    p.add_argument("--broker-defaults", action="store_true",
                   help="the config defaults for all brokers (same as --entity-type brokers "
                        "--entity-default)")
    p.add_argument("--describe", action="store_true", help="List configs for the given entity.")
    p.add_argument("--alter", action="store_true", help="Alter the configuration for the entity.")
    p.add_argument("--all", action="store_true",
                   help="List all configs for the given entity, not only the dynamic ones")
    p.add_argument("--add-config", action="append", default=[], metavar="K1=V1,K2=[V2,V3]",
                   help="configs to add, comma separated; list values in square brackets")
    p.add_argument("--add-config-file", help="properties file of configs to add")
    p.add_argument("--delete-config", action="append", default=[], metavar="K1,K2",
                   help="config keys to remove, comma separated")
    p.set_defaults(func=main)
