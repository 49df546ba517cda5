"""`odradek configs --entity-type users|clients`: client quotas, as Kafka 2.8's ConfigCommand
handles them with --bootstrap-server (DescribeClientQuotas / AlterClientQuotas).

  --entity-type users --entity-name alice [--entity-type clients --entity-name app]
  --entity-type clients --entity-default         (or --user NAME / --client ID /
  --user-defaults / --client-defaults)
  --alter --add-config 'producer_byte_rate=1048576,consumer_byte_rate=2097152,request_percentage=50'
  --alter --delete-config producer_byte_rate
  --describe

Output as Kafka's:

  Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1048576.0
  Quota configs for the default client-id are consumer_byte_rate=1024.0
  Completed updating config for user alice.
  Completed updating default config for clients in the cluster.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..common.java_double import java_double
from .command import ToolError

if TYPE_CHECKING:
    from ..client import AsyncAdmin

QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")
SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
ENTITY_TYPE = {"users": "user", "clients": "client-id"}
_LABEL = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


class QuotaCommandError(Exception):
    """A refused alteration (printed as Kafka prints the Java exception)."""


def is_quota_key(key: str) -> bool:
    return key in QUOTA_KEYS


def check_keys(entity_types: list[str], to_add: dict[str, str], to_delete: list[str]) -> None:
    """ConfigCommand's checks: clients (alone or with a user) take quota configs only, users
    quota and SCRAM configs but not both at once."""
    unknown_add = [k for k in to_add if not is_quota_key(k) and k not in SCRAM_KEYS]
    unknown_del = [k for k in to_delete if not is_quota_key(k) and k not in SCRAM_KEYS]
    scram_add = [k for k in to_add if k in SCRAM_KEYS]
    scram_del = [k for k in to_delete if k in SCRAM_KEYS]
    if "clients" in entity_types:
        if unknown_add or scram_add:
            raise ToolError("Only quota configs can be added for 'clients' using "
                            f"--bootstrap-server. Unexpected config names: "
                            f"{', '.join(unknown_add + scram_add)}")
        if unknown_del or scram_del:
            raise ToolError("Only quota configs can be deleted for 'clients' using "
                            f"--bootstrap-server. Unexpected config names: "
                            f"{', '.join(unknown_del + scram_del)}")
        return
    if unknown_add:
        raise ToolError("Only quota and SCRAM credential configs can be added for 'users' "
                        f"using --bootstrap-server. Unexpected config names: "
                        f"{', '.join(unknown_add)}")
    if unknown_del:
        raise ToolError("Only quota and SCRAM credential configs can be deleted for 'users' "
                        f"using --bootstrap-server. Unexpected config names: "
                        f"{', '.join(unknown_del)}")
    has_quota = any(is_quota_key(k) for k in [*to_add, *to_delete])
    if (scram_add or scram_del) and has_quota:
        raise ToolError("Cannot alter both quota and SCRAM credential configs simultaneously "
                        "for 'users' using --bootstrap-server.")


def parse_values(to_add: dict[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in to_add.items():
        try:
            out[key] = float(value)
        except ValueError:
            raise ToolError(f"Cannot parse quota configuration value for {key}: "
                            f"{value}") from None
    return out


def filter_components(entity_types: list[str], entity_names: list[str | None]
                      ) -> list[tuple[str, Any]]:
    """ConfigCommand.getAllClientQuotasConfigs: a name matches it, "" the default entity, no
    name any entity of the type."""
    if len(entity_names) > len(entity_types):
        raise ToolError("More entity names specified than entity types")
    out: list[tuple[str, Any]] = []
    for i, entity_type in enumerate(entity_types):
        name = entity_names[i] if i < len(entity_names) else None
        match: Any = ... if name is None else (None if name == "" else name)
        out.append((ENTITY_TYPE[entity_type], match))
    return out


def format_quota_line(entity: dict[str, str | None], values: dict[str, float]) -> str:
    parts = []
    for entity_type in ("user", "client-id", "ip"):
        if entity_type in entity:
            name = entity[entity_type]
            label = _LABEL[entity_type]
            parts.append(f"{label} '{name}'" if name is not None else f"the default {label}")
    entries = ", ".join(f"{k}={java_double(v)}" for k, v in values.items())
    return f"Quota configs for {', '.join(parts)} are {entries}"


async def describe(admin: AsyncAdmin, entity_types: list[str],
                   entity_names: list[str | None]) -> list[str]:
    found = await admin.describe_client_quotas(filter_components(entity_types, entity_names),
                                               strict=True)
    return [format_quota_line(entity, values) for entity, values in found]


async def alter(admin: AsyncAdmin, entity_types: list[str], entity_names: list[str | None],
                to_add: dict[str, str], to_delete: list[str]) -> None:
    from ..client.errors import KafkaError

    if len(entity_types) != len(entity_names) or any(n is None for n in entity_names):
        raise ToolError("Exactly one entity name must be specified for every entity type")
    values = parse_values(to_add)
    components = filter_components(entity_types, entity_names)
    current = await admin.describe_client_quotas(components, strict=True)
    old = current[0][1] if current else {}
    invalid = [k for k in to_delete if k not in old]
    if invalid:
        raise QuotaCommandError("org.apache.kafka.common.errors.InvalidConfigurationException: "
                                f"Invalid config(s): {','.join(invalid)}")
    entity = {ENTITY_TYPE[t]: (n or None) for t, n in zip(entity_types, entity_names,
                                                          strict=True)}
    ops: dict[str, float | None] = {**dict.fromkeys(to_delete), **values}
    results = await admin.alter_client_quotas([(entity, ops)], raise_errors=False)
    for _, error in results:
        if error is not None:
            assert isinstance(error, KafkaError)
            raise QuotaCommandError(_java_text(error))


def _java_text(error: Any) -> str:
    name = str(getattr(error, "name", "") or "").lower()
    java = {"invalid_request": "org.apache.kafka.common.errors.InvalidRequestException",
            "cluster_authorization_failed":
                "org.apache.kafka.common.errors.ClusterAuthorizationException",
            }.get(name, "org.apache.kafka.common.errors.ApiException")
    text = str(error)
    marker = f"{name.upper()}: "
    return f"{java}: {text.split(marker, 1)[1] if marker in text else text}"


def completed(entity_types: list[str], entity_names: list[str | None]) -> str:
    head_type, head_name = entity_types[0], entity_names[0] if entity_names else None
    if head_name:
        return f"Completed updating config for {head_type[:-1]} {head_name}."
    return f"Completed updating default config for {head_type} in the cluster."


# -- the command line ----------------------------------------------------------------------------
class EntityNameAction(argparse.Action):
    """--entity-name NAME / --entity-default, in order, into `entity_names` ("" = default)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        names = list(getattr(namespace, "entity_names", None) or [])
        names.append("" if self.const == "" else str(values))
        namespace.entity_names = names


class EntityShortcutAction(argparse.Action):
    """Kafka's --user NAME, --client ID, --user-defaults, --client-defaults."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        entity_type, default = self.const
        types = list(getattr(namespace, "entity_types", None) or [])
        names = list(getattr(namespace, "entity_names", None) or [])
        types.append(entity_type)
        names.append("" if default else str(values))
        namespace.entity_types, namespace.entity_names = types, names
