"""What every tool shares at its edges: the one ``ToolError``, the one ``run_tool`` wrapper that
turns a tool's outcome into Kafka's printed lines and an exit status, and the type of the
``subparsers`` each tool's ``add_parser`` registers itself with."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..coordination.zookeeper import ZooKeeperStore


class ToolError(Exception):
    """A bad command line or a refused operation: the tool prints the message as it prints such
    errors (``run_tool``'s ``refused``) and exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Subcommands(Protocol):
    """What ``add_parser(subcommands)`` needs of ``ArgumentParser.add_subparsers()``."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def add_admin_command(subcommands: Subcommands, name: str, help: str, description: str | None
                      ) -> argparse.ArgumentParser:
    """The parser of a tool on the admin API (Kafka's kafka-topics, -configs,
    -consumer-groups), with the options they all take: --bootstrap-server, --command-config."""
    p = subcommands.add_parser(name, help=help, description=description,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap-server", help="REQUIRED: the server(s) to connect to")
    p.add_argument("--command-config", help="properties file of admin client configs")
    return p


async def open_zookeeper(connect: str) -> ZooKeeperStore:
    """A started ZooKeeper session for a ``--zookeeper`` tool, with the brokers' identity when
    ``KAFKA_OPTS`` names a JAAS file with a ``Client`` section (then the znodes it creates get
    Kafka's secure ACLs, as Kafka's tools do when ZooKeeper authentication is on). A failure is a
    ``ToolError``: "Cannot connect to ZooKeeper at ...", or the JAAS file's problem."""
    import logging

    from ..coordination.zookeeper import ZooKeeperStore
    from ..security.zk_auth import ZkSecurity, ZooKeeperLoginError

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # our one-line error says it
    try:
        security = ZkSecurity.for_tool()
    except ZooKeeperLoginError as exc:
        raise ToolError(str(exc)) from None
    store = ZooKeeperStore(connect, 30000, connection_timeout_ms=15000,
                           auth_data=security.auth_data, acls=security.acl_provider)
    try:
        await store.start()
    except Exception as exc:
        raise ToolError(f"Cannot connect to ZooKeeper at {connect}: {exc}") from None
    return store


def reader_gone() -> int:
    """stdout's reader went away (`odradek ... | head`): stop quietly, without a traceback at
    exit (stdout now goes to /dev/null), exit status 0."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _cannot_read(path: str, what: str, exc: OSError) -> ToolError:
    return ToolError(f"Cannot read {what + ' ' if what else ''}{path}: {exc.strerror or exc}")


def read_input_file(path: str, what: str = "") -> str:
    """The UTF-8 text of a file a tool was given (``--from-file``, ``--offset-json-file``...);
    an unreadable one is a ``ToolError``: "Cannot read [what ]path: reason"."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise _cannot_read(path, what, exc) from None


def read_properties_file(path: str) -> dict[str, str]:
    """A Java properties file's settings."""
    from ..common.properties import parse_properties

    return dict(parse_properties(Path(path).read_text()))


def read_properties(path: str, what: str = "") -> dict[str, str]:
    """A properties file a tool was given (``--command-config``, ``--admin.config``...); an
    unreadable one is a ``ToolError``: "Cannot read [what ]path: reason"."""
    try:
        return read_properties_file(path)
    except OSError as exc:
        raise _cannot_read(path, what, exc) from None


def to_stderr(message: str) -> None:
    print(message, file=sys.stderr)


def prefixed(tool: str) -> Callable[[str], None]:
    """A refusal printed as ``odradek <tool>: <message>`` on stderr."""
    def refused(message: str) -> None:
        print(f"odradek {tool}: {message}", file=sys.stderr, flush=True)
    return refused


def _unhandled(exc: BaseException) -> int:
    raise exc


def run_tool(body: Callable[[], int | Iterable[str]], *,
             refused: Callable[[str], None] = to_stderr,
             failures: tuple[type[BaseException], ...] = (),
             failed: Callable[[BaseException], int] = _unhandled,
             status: Callable[[], int] = lambda: 0) -> int:
    """Run a tool's ``body`` and end as the Kafka tool it copies ends.

    The body returns its exit status (it printed its own output), or the lines to print on
    stdout (then the status is ``status()``). A ``ToolError`` is printed by ``refused`` and exits
    with its ``exit_code``; an exception of ``failures`` is printed by ``failed``, which returns
    the exit status; stdout's reader going away (`odradek ... | head`) ends quietly with 0."""
    try:
        result = body()
    except ToolError as exc:
        refused(str(exc))
        return exc.exit_code
    except BrokenPipeError:
        return reader_gone()
    except failures as exc:
        return failed(exc)
    if isinstance(result, int):
        return result
    try:
        for line in result:
            print(line)
    except BrokenPipeError:
        return reader_gone()
    return status()
