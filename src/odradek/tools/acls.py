"""`odradek acls`: Kafka's kafka-acls (AclCommand) on odradek's admin client.

  --bootstrap-server HOST:PORT [--command-config FILE]
  --add | --remove | --list
  resources: --topic T, --group G (repeatable), --cluster, --transactional-id ID
             [--resource-pattern-type LITERAL|PREFIXED (add, remove) | ANY|MATCH (list, remove)]
  entries:   --allow-principal P, --deny-principal P, --allow-host H, --deny-host H,
             --operation OP (repeatable; default All), --principal P (list)
  shortcuts: --producer (Write, Describe, Create on topics; --idempotent: IdempotentWrite on the
             cluster; with --transactional-id: Write, Describe on it), --consumer (Read,
             Describe on topics, Read on groups)
  --force    remove without asking

Output as Kafka's AclCommand:

  Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=foo, patternType=LITERAL)`:
     (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

  Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=foo, patternType=LITERAL)`:
     (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from .command import Subcommands, ToolError, add_admin_command, read_properties, run_tool

if TYPE_CHECKING:
    from ..client import AsyncAdmin

NL = "\n"
Op = AclOperation
SUPPORTED_OPS = {  # Kafka's AclCommand.ResourceTypeToValidOperations
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.ALL),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                           Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE, Op.ALL),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE, Op.ALL),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE, Op.ALL),
}


def _pattern_type(args: argparse.Namespace) -> PatternType:
    text = args.resource_pattern_type or ("ANY" if args.list else "LITERAL")
    pt = PatternType.from_string(text)
    if pt == PatternType.UNKNOWN:
        raise ToolError(f"Invalid --resource-pattern-type: {text}")
    if args.add and not PatternType(pt).is_specific:
        raise ToolError(f"A 'ANY' or 'MATCH' resource pattern type is not valid with --add "
                        f"(got {PatternType(pt).name}).")
    return PatternType(pt)


def resource_filters(args: argparse.Namespace) -> list[ResourcePatternFilter]:
    pt = _pattern_type(args)
    out = [ResourcePatternFilter(ResourceType.TOPIC, t, pt) for t in args.topic or ()]
    out += [ResourcePatternFilter(ResourceType.GROUP, g, pt) for g in args.group or ()]
    if args.cluster:
        out.append(ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, pt))
    out += [ResourcePatternFilter(ResourceType.TRANSACTIONAL_ID, t, pt)
            for t in args.transactional_id or ()]
    return out


def _operations(args: argparse.Namespace) -> list[AclOperation]:
    ops = []
    for text in args.operation or ["All"]:
        op = AclOperation.from_string(text)
        if op in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise ToolError(f"Invalid operation: {text}")
        ops.append(AclOperation(op))
    return ops


def _entries(args: argparse.Namespace, operations: Iterable[AclOperation]
             ) -> list[AccessControlEntry]:
    out = []
    for principals, hosts, perm in (
            (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
            (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for p in principals or ():
            if ":" not in p:
                raise ToolError(f"Invalid principal {p}: expected principalType:name "
                                f"(User:alice)")
            for h in hosts or ["*"]:
                out += [AccessControlEntry(p, h, op, perm) for op in operations]
    return out


def bindings_to_add(args: argparse.Namespace) -> dict[ResourcePattern, list[AccessControlEntry]]:
    """Kafka's getResourceToAcls: the entries per resource, from the flags."""
    filters = resource_filters(args)
    if not args.allow_principal and not args.deny_principal:
        raise ToolError("You must specify one of: --allow-principal, --deny-principal when "
                        "trying to add ACLs.")
    out: dict[ResourcePattern, list[AccessControlEntry]] = {}

    def add(rt: ResourceType, name: str, ops: Iterable[AclOperation]) -> None:
        pattern = ResourcePattern(rt, name, filters[0].pattern_type if filters
                                  else PatternType.LITERAL)
        out.setdefault(pattern, []).extend(
            e for e in _entries(args, ops) if e not in out.get(pattern, []))

    if args.producer or args.consumer:
        topics = [f for f in filters if f.resource_type == ResourceType.TOPIC]
        if not topics:
            raise ToolError("With --producer or --consumer you must specify a --topic")
        for f in topics:
            ops = ([Op.WRITE, Op.DESCRIBE, Op.CREATE] if args.producer else []) + \
                ([Op.READ, Op.DESCRIBE] if args.consumer else [])
            add(ResourceType.TOPIC, f.name or "", dict.fromkeys(ops))
        if args.consumer:
            if not args.group:
                raise ToolError("With --consumer you must specify a --group")
            for g in args.group:
                add(ResourceType.GROUP, g, [Op.READ])
        if args.producer:
            for t in args.transactional_id or ():
                add(ResourceType.TRANSACTIONAL_ID, t, [Op.WRITE, Op.DESCRIBE])
            if args.idempotent:
                add(ResourceType.CLUSTER, CLUSTER_NAME, [Op.IDEMPOTENT_WRITE])
        return out
    if not filters:
        raise ToolError("You must provide at least one resource: --topic <topic> or --cluster "
                        "or --group <group> or --transactional-id <id>")
    ops = _operations(args)
    for f in filters:
        valid = SUPPORTED_OPS[f.resource_type]
        bad = [op for op in ops if op not in valid]
        if bad:
            raise ToolError(f"ResourceType {f.resource_type.pascal} only supports operations "
                            f"{','.join(o.pascal for o in valid)}")
        add(f.resource_type, f.name or "", ops)
    return out


def _block(title: str, resource: Any, entries: Iterable[Any]) -> str:
    body = NL.join("\t" + str(e) for e in entries)
    return f"{title} `{resource}`: {NL} {body} {NL}"


def _pattern_filter_text(f: ResourcePatternFilter) -> str:
    return (f"ResourcePattern(resourceType={f.resource_type.name}, "
            f"name={'<any>' if f.name is None else f.name}, patternType={f.pattern_type.name})")


async def list_acls(admin: AsyncAdmin, filters: list[ResourcePatternFilter],
                    principal: str | None = None) -> list[str]:
    entry = AccessControlEntryFilter(principal=principal)
    found: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for f in filters or [ResourcePatternFilter()]:
        for b in await admin.describe_acls(AclBindingFilter(f, entry)):
            found.setdefault(b.pattern, [])
            if b.entry not in found[b.pattern]:
                found[b.pattern].append(b.entry)
    title = "Current ACLs for resource" if principal is None else \
        f"ACLs for principal `{principal}`{NL}Current ACLs for resource"
    return [_block(title, p, entries) for p, entries in found.items()]


async def run(args: argparse.Namespace) -> list[str]:
    from ..client import AsyncAdmin

    cfg: dict[str, Any] = read_properties(args.command_config) if args.command_config else {}
    cfg["bootstrap.servers"] = args.bootstrap_server
    lines: list[str] = []
    async with AsyncAdmin(cfg) as admin:
        if args.add:
            to_add = bindings_to_add(args)
            for pattern, entries in to_add.items():
                lines.append(_block("Adding ACLs for resource", pattern, entries))
                await admin.create_acls([AclBinding(pattern, e) for e in entries])
            filters = [ResourcePatternFilter(p.resource_type, p.name, p.pattern_type)
                       for p in to_add]
            return lines + await list_acls(admin, filters)
        filters = resource_filters(args)
        if args.remove:
            if not filters:
                raise ToolError("You must provide at least one resource: --topic <topic> or "
                                "--cluster or --group <group> or --transactional-id <id>")
            ops = _operations(args) if args.operation else [AclOperation.ANY]
            entries = _entries(args, [o for o in ops if o != AclOperation.ANY]) \
                if (args.allow_principal or args.deny_principal) else []
            for f in filters:
                if entries:
                    binding_filters = [AclBindingFilter(f, AccessControlEntryFilter(
                        e.principal, e.host, e.operation, e.permission_type))
                        for e in entries]
                    question = (f"Are you sure you want to remove ACLs: {NL} "
                                f"{NL.join(chr(9) + str(e) for e in entries)} {NL} from "
                                f"resource filter `{_pattern_filter_text(f)}`? (y/n)")
                else:
                    binding_filters = [AclBindingFilter(f, AccessControlEntryFilter(
                        operation=ops[0] if len(ops) == 1 else AclOperation.ANY))]
                    question = (f"Are you sure you want to delete all ACLs for resource "
                                f"filter `{_pattern_filter_text(f)}`? (y/n)")
                if not args.force and not _confirm(question):
                    continue
                await admin.delete_acls(binding_filters)
            return lines + await list_acls(admin, filters)
        return await list_acls(admin, filters, args.principal)


def _confirm(question: str) -> bool:
    print(question, flush=True)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _check_args(args: argparse.Namespace) -> None:
    actions = [a for a in ("add", "remove", "list") if getattr(args, a)]
    if len(actions) != 1:
        raise ToolError("Command must include exactly one action: --list, --add, --remove. ")
    if not args.bootstrap_server:
        raise ToolError("Missing required argument \"[bootstrap-server]\"")
    if (args.producer or args.consumer) and not args.add:
        raise ToolError("--producer and --consumer are only valid with --add")
    if args.idempotent and not args.producer:
        raise ToolError("--idempotent is only valid with --producer")


def main(args: argparse.Namespace) -> int:
    from ..client.errors import KafkaError

    def body() -> list[str]:
        _check_args(args)
        return asyncio.run(run(args))

    def failed(exc: BaseException) -> int:
        print(f"Error while executing ACL command: {exc}", file=sys.stderr)
        return 1

    return run_tool(body, failures=(KafkaError, OSError, TimeoutError), failed=failed)


def add_parser(subparsers: Subcommands) -> None:
    p = add_admin_command(subparsers, "acls", "add, remove or list ACLs (Kafka's kafka-acls)",
                          __doc__)
    for flag in ("--add", "--remove", "--list", "--cluster", "--producer", "--consumer",
                 "--idempotent", "--force"):
        p.add_argument(flag, action="store_true")
    for flag in ("--topic", "--group", "--transactional-id", "--allow-principal",
                 "--deny-principal", "--allow-host", "--deny-host", "--operation"):
        p.add_argument(flag, action="append")
    p.add_argument("--principal", help="with --list: the ACLs of this principal")
    p.add_argument("--resource-pattern-type",
                   help="LITERAL, PREFIXED (--add, --remove), ANY or MATCH (--list, --remove)")
    p.set_defaults(func=main)
