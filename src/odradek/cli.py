"""`odradek`: one command, subcommands named after Kafka's tools.

  odradek broker --config server.properties [--override key=value ...]
  odradek cluster --brokers N [--base-port P] [--data-dir D]   N brokers in one process
          [--console-faults] [--no-http] [--log-config FILE]   (prints each broker's console)
          [--security-protocol SASL_SSL --sasl-mechanism SCRAM-SHA-256 --user alice:secret
           --super-user admin --acl User:alice,Read,Topic,events ...]   secured (prints the
           client properties files it wrote)
  odradek standalone [--port 9092] [--data-dir DIR]   a one-broker cluster, printing its bootstrap
  odradek zookeeper [--port P] [--data-dir D]         a local Debian ZooKeeper in the foreground
  odradek dump-log --files ...                        Kafka's DumpLogSegments
  odradek topics / configs / consumer-groups          kafka-topics, -configs, -consumer-groups
  odradek leader-election / preferred-replica-election  kafka-leader-election (S-6.1)
  odradek reassign-partitions                         kafka-reassign-partitions (S-6.2)
  odradek replica-verification                        kafka-replica-verification (S-6.4)
  odradek state-change-log                            the state-change log merger (S-6.5)
  odradek console-producer / console-consumer / chaos
  odradek broker-api-versions / get-offsets          kafka-broker-api-versions, GetOffsetShell
  odradek producer-perf-test / consumer-perf-test   kafka-producer-perf-test, -consumer-perf-test
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .common.properties import parse_properties
from .server.configs.config import ConfigError, KafkaConfig


def _setup_logging(level: str, log_config: str | None = None) -> None:
    """Kafka's log line shape on stderr; each broker also writes its own state-change.log.
    --log-config FILE then configures logging from a file (common/log_config.py: INI, JSON or
    YAML; Kafka's logger names map to odradek's)."""
    fmt = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"
    from .common.batched_log import BatchedStreamHandler

    # one write per loop iteration: a LeaderAndIsr of thousands of partitions logs thousands
    # of lines (common/batched_log.py)
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), format=fmt,
                        handlers=[BatchedStreamHandler(sys.stderr)])
    # Kafka's log4j.properties: state.change.logger writes state-change.log only
    # (additivity=false); on stderr too, a 10,000-partition failover wrote every line twice.
    logging.getLogger("state.change.logger").propagate = False
    if log_config:
        from .common.log_config import LogConfigError, configure

        try:
            configure(log_config)
        except LogConfigError as exc:
            raise SystemExit(f"odradek: --log-config: {exc}") from None


def _overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--override expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


class _Service(Protocol):
    async def start(self) -> object: ...

    async def stop(self) -> object: ...


async def _run_until_signal(service: _Service, announce: Callable[[], None]) -> int:
    """Start `service` (a broker, a cluster), `announce` it, and stop it cleanly on SIGTERM or
    SIGINT, as kafka-server-stop's SIGTERM makes Kafka shut down."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await service.start()
    announce()
    await stop.wait()
    await service.stop()
    return 0


async def _serve(config: KafkaConfig, announce: bool) -> int:
    from .server.broker import Broker

    broker = Broker(config)

    def ready() -> None:
        if announce:
            print(f"odradek broker {broker.broker_id} ready; "
                  f"bootstrap.servers={broker.bootstrap}", flush=True)
    return await _run_until_signal(broker, ready)


def cmd_broker(args: argparse.Namespace) -> int:
    text = Path(args.config).read_text() if args.config else ""
    config = KafkaConfig.from_properties(parse_properties(text), _overrides(args.override))
    _setup_logging(args.log_level, args.log_config)
    for key in config.unknown_keys:
        logging.getLogger("odradek.config").warning(
            "The configuration '%s' was supplied but isn't a known config.", key)
    return asyncio.run(_serve(config, announce=True))


def cmd_standalone(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="odradek-"))
    props = {"broker.id": "0", "listeners": f"PLAINTEXT://{args.host}:{args.port}",
             "log.dirs": str(data_dir / "broker-0")}
    config = KafkaConfig.from_properties(props, _overrides(args.override))
    _setup_logging(args.log_level, args.log_config)
    return asyncio.run(_serve(config, announce=True))


def cluster_security_from_args(args: argparse.Namespace) -> Any:
    """`odradek cluster`'s security flags as a ClusterSecurity (None: a PLAINTEXT cluster)."""
    from .cluster import ClusterAcl, ClusterSecurity

    if not args.security_protocol:
        if args.user or args.super_user or args.acl or args.sasl_mechanism:
            raise SystemExit("odradek cluster: --user, --super-user, --acl and --sasl-mechanism "
                             "need --security-protocol")
        return None
    users = {}
    for spec in args.user:
        name, sep, password = spec.partition(":")
        if not sep or not name:
            raise SystemExit(f"odradek cluster: --user takes NAME:PASSWORD, got {spec!r}")
        users[name] = password
    acls = []
    for spec in args.acl:
        fields = spec.split(",")
        if len(fields) < 3 or len(fields) > 7:
            raise SystemExit("odradek cluster: --acl takes PRINCIPAL,OPERATION,RESOURCE_TYPE"
                             f"[,NAME[,PATTERN[,PERMISSION[,HOST]]]], got {spec!r}")
        acls.append(ClusterAcl(*fields))
    try:
        return ClusterSecurity(
            listeners=tuple(args.security_protocol),
            sasl_mechanisms=tuple(args.sasl_mechanism or ["SCRAM-SHA-256"]),
            users=users, super_users=tuple(args.super_user), acls=acls,
            client_auth=args.ssl_client_auth, client_certificates=tuple(args.client_cert))
    except ValueError as exc:
        raise SystemExit(f"odradek cluster: {exc}") from None


def _write_client_properties(cluster: Any, security: Any, data_dir: Path) -> list[str]:
    """A client properties file per listener and principal: the brokers' super user on every
    listener, each SASL user on the SASL listeners, each certificate's user on SSL."""
    lines = []
    for listener in security.listeners:
        names: list[str | None] = [None]
        if listener.startswith("SASL_"):
            names += list(security.users)
        elif listener == "SSL":
            names += list(security.client_certificates)
        for name in names:
            suffix = ("" if name is None else f"-{name}") + (
                "" if listener == security.listeners[0] else f"-{listener.lower()}")
            path = cluster.write_client_properties(
                data_dir / f"client{suffix}.properties", name, listener=listener)
            who = name or (f"{security.broker_user} (super user)"
                           if listener.startswith("SASL_") else
                           "broker (the brokers' certificate)" if listener == "SSL"
                           else "anonymous")
            lines.append(f"client properties for {who} on {listener}: {path}")
    return lines


def cmd_cluster(args: argparse.Namespace) -> int:
    from .cluster import AsyncCluster

    security = cluster_security_from_args(args)
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="odradek-cluster-"))
    _setup_logging(args.log_level, args.log_config)

    async def serve() -> int:
        cluster = AsyncCluster(args.brokers, data_dir=data_dir, base_port=args.base_port,
                               host=args.host, overrides=_overrides(args.override),
                               security=security, http=not args.no_http,
                               console_faults=args.console_faults)

        def ready() -> None:
            print(f"odradek cluster of {args.brokers} brokers ready (controller: broker "
                  f"{cluster.controller_id()}, data in {data_dir}); "
                  f"bootstrap.servers={cluster.bootstrap_servers}", flush=True)
            if security is not None:
                for line in _write_client_properties(cluster, security, data_dir):
                    print(line, flush=True)
            for broker_id, url in sorted((i, b.http_url) for i, b in cluster.brokers.items()):
                if url:
                    print(f"console: {url}/ (broker {broker_id}; metrics at {url}/metrics)",
                          flush=True)
        return await _run_until_signal(cluster, ready)
    return asyncio.run(serve())


def cmd_zookeeper(args: argparse.Namespace) -> int:
    from .coordination import zk_server

    argv = []
    if args.port is not None:
        argv += ["--port", str(args.port)]
    if args.data_dir:
        argv += ["--data-dir", args.data_dir]
    return int(zk_server.main(argv) or 0)


# Each tool module (Kafka's tools under odradek/tools, the chaos kit's commands under
# odradek/chaos) exposes add_parser(subparsers), which registers its subcommand (named after
# Kafka's tool) with set_defaults(func=...).
TOOL_MODULES = [
    "tools.dump_log",
    "chaos.command",
    "tools.console_producer",
    "tools.console_consumer",
    "tools.topics",
    "tools.configs",
    "tools.acls",
    "tools.consumer_groups",
    "tools.transactions",
    "tools.leader_election",
    "tools.reassign_partitions",
    "tools.replica_verification",
    "tools.state_change_log",
    "tools.broker_api_versions",
    "tools.get_offsets",
    "tools.producer_perf_test",
    "tools.consumer_perf_test",
    "tools.delete_records",
    "tools.log_dirs",
    "chaos.environment.disk_faults",
    "sim.command",
]


LOG_CONFIG_HELP = ("configure logging from a file: Python logging's fileConfig INI, or a "
                   "dictConfig as JSON or YAML; Kafka's logger names (kafka.request.logger, "
                   "state.change.logger, kafka.controller, ...) apply (docs/console.md)")


def _add_broker_options(p: argparse.ArgumentParser, override_help: str | None = None) -> None:
    """The options of every command that runs brokers: server.properties overrides, the log
    level, a --log-config file."""
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help=override_help)
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--log-config", metavar="FILE", help=LOG_CONFIG_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="odradek", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("broker", help="run one broker (Kafka's kafka-server-start)")
    p.add_argument("--config", help="server.properties file")
    _add_broker_options(p)
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("standalone", help="a one-broker cluster on an embedded store")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9092)
    p.add_argument("--data-dir", help="default: a new temporary directory")
    _add_broker_options(p)
    p.set_defaults(func=cmd_standalone)

    p = sub.add_parser("cluster", help="N brokers in one process on an embedded store")
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--base-port", type=int, default=9092,
                   help="broker i listens on base-port + i (0: free ports)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--data-dir", help="default: a new temporary directory")
    _add_broker_options(p, "a server.properties setting for every broker")
    p.add_argument("--no-http", action="store_true",
                   help="no HTTP listener (by default broker i serves /metrics and the console "
                        "on base-port + i + 100 * number of listeners; free ports with "
                        "--base-port 0)")
    p.add_argument("--console-faults", action="store_true",
                   help="let the console kill, restart, pause, resume, isolate and heal "
                        "brokers (POST /api/faults/...); the brokers' links then pass through "
                        "the fault network (docs/faults.md)")
    security = p.add_argument_group(
        "security", "a secured cluster: one listener per --security-protocol (the first is the "
        "inter-broker one; listener k of broker i on base-port + i + 100k), certificates "
        "generated under DATA_DIR/security, a client properties file per user written in "
        "DATA_DIR and its path printed")
    security.add_argument("--security-protocol", action="append", default=[],
                          choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
                          help="a listener (repeatable)")
    security.add_argument("--sasl-mechanism", action="append", default=[],
                          choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                          help="enabled SASL mechanism (repeatable; default SCRAM-SHA-256)")
    security.add_argument("--user", action="append", default=[], metavar="NAME:PASSWORD",
                          help="a SASL user (repeatable); the brokers log in as admin")
    security.add_argument("--super-user", action="append", default=[], metavar="NAME",
                          help="a super user (repeatable; turns the ACL authorizer on)")
    security.add_argument("--acl", action="append", default=[],
                          metavar="PRINCIPAL,OPERATION,TYPE[,NAME[,PATTERN[,PERMISSION[,HOST]]]]",
                          help="an ACL, e.g. User:alice,Read,Topic,events (repeatable; turns the "
                               "ACL authorizer on)")
    security.add_argument("--ssl-client-auth", default="none",
                          choices=["none", "requested", "required"],
                          help="ssl.client.auth of the SSL listener")
    security.add_argument("--client-cert", action="append", default=[], metavar="NAME",
                          help="a client certificate with CN=NAME (repeatable)")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("zookeeper", help="run a local ZooKeeper (Debian's package)")
    p.add_argument("--port", type=int)
    p.add_argument("--data-dir")
    p.set_defaults(func=cmd_zookeeper)

    for name in TOOL_MODULES:
        importlib.import_module(f".{name}", __package__).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None and "hypothesis" not in sys.modules:
        # the program itself (not a call from Python): kio imports hypothesis, when installed,
        # only to offer strategies for its types, a third of a second of every command's
        # start-up that no command uses
        sys.modules["hypothesis"] = None  # type: ignore[assignment]
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.func in (cmd_broker, cmd_standalone, cmd_cluster) and argv is None:
        from .server.gc_freeze import own_process

        own_process()  # a broker process: it may tune GC and thread switching (gc_freeze.py)
    from .client.errors import KafkaError

    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"odradek: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except KafkaError as exc:  # e.g. no broker reachable: a message, not a traceback
        print(f"odradek {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `odradek ... | head`: the reader is gone, stop quietly
        from .tools.command import reader_gone

        return reader_gone()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
