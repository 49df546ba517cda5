"""The one watcher of `/config/changes` on every broker (Kafka's DynamicConfigManager with its
ZkNodeChangeNotificationListener).

A config change is written to `/config/<type>/<name>` and then announced by a sequential
notification `/config/changes/config_change_<seq>` whose content names the entity, e.g.
`{"version":2,"entity_path":"users/alice/clients/app"}`. This manager holds the one children
watch on `/config/changes`, reads each new notification once, in sequence order, and hands the
entity name (`t`, `alice`, `alice/clients/app`, `<default>`, as written, i.e. sanitized) to every
handler of its entity type (Kafka's ConfigHandlers):

  topics   TopicConfigManager (topic overrides)
  brokers  BrokerConfigManager (dynamic broker configs, KIP-226)
  users    CredentialCache (SCRAM credentials) and ClientQuotaConfigManager (quotas)
  clients  ClientQuotaConfigManager (quotas)

A notification of an unknown entity type is logged and skipped (Kafka throws and logs it); a
handler that fails is logged and the other handlers and notifications still run. The
components load their full state themselves at start-up, so, unlike Kafka, which replays every
notification still present, the notifications present before the loads are taken as processed
(:meth:`DynamicConfigManager.skip_existing`, before the loads) and only newer ones are processed
once the manager starts (:meth:`DynamicConfigManager.start`, after the loads); nothing written
in between is missed.

As Kafka's listener does, each processing pass purges the notifications older than
`change_expiration_ms` (15 minutes), so `/config/changes` does not grow forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from ...common import clock
from ...coordination import paths
from ...coordination.store import CoordinationStore, NoNodeError, WatchHandle

log = logging.getLogger("odradek.config")

#: Kafka's ZkNodeChangeNotificationListener purges notifications older than this.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000

#: A ConfigHandler: called with the entity name of a notification (sanitized, as written).
ConfigHandler = Callable[[str], Awaitable[None]]


# -- decisions (pure) ----------------------------------------------------------------------------
def new_notifications(children: Iterable[str], seen: Iterable[str]) -> list[str]:
    """The notifications not processed yet, in sequence order (the sequential suffix has a
    fixed width, so the names sort as their numbers do)."""
    return sorted(set(children) - set(seen))


def split_entity_path(entity_path: str) -> tuple[str, str] | None:
    """(entity type, entity name) of a version-2 entity_path such as `users/alice/clients/app`
    -> ("users", "alice/clients/app"); None when it has no type or no name."""
    entity_type, sep, name = entity_path.partition("/")
    if not sep or not entity_type or not name:
        return None
    return entity_type, name


def handlers_for(entity_path: str, handlers: Mapping[str, Sequence[ConfigHandler]]
                 ) -> tuple[str, Sequence[ConfigHandler]] | None:
    """The entity name a notification's handlers are called with, and those handlers; None for
    a malformed entity_path or an entity type without handlers."""
    split = split_entity_path(entity_path)
    if split is None or split[0] not in handlers:
        return None
    return split[1], handlers[split[0]]


def expired_notifications(ctimes: Mapping[str, int], now_ms: int, expiration_ms: int
                          ) -> list[str]:
    """The notifications (name -> creation time in ms) older than `expiration_ms` at `now_ms`,
    in sequence order (Kafka's purgeObsoleteNotifications)."""
    return sorted(n for n, ctime in ctimes.items() if now_ms - ctime > expiration_ms)


# -- the watcher ---------------------------------------------------------------------------------
class DynamicConfigManager:
    """`handlers` maps an entity type ("topics", "clients", "users", "brokers") to one handler
    or a sequence of handlers, called in order for each of its notifications."""

    def __init__(self, store: CoordinationStore,
                 handlers: Mapping[str, ConfigHandler | Sequence[ConfigHandler]], *,
                 change_expiration_ms: int = CHANGE_EXPIRATION_MS,
                 now_ms: Callable[[], int] = clock.now_ms) -> None:
        self.store = store
        self.handlers: dict[str, tuple[ConfigHandler, ...]] = {
            kind: (h,) if callable(h) else tuple(h) for kind, h in handlers.items()}
        self.change_expiration_ms = change_expiration_ms
        self._now_ms = now_ms
        self._seen: set[str] | None = None  # None: existing notifications not taken yet
        self._ctimes: dict[str, int] = {}  # notification -> ctime (ms), once read
        self._lock = asyncio.Lock()  # one pass at a time: each notification once, in order
        self._watch: WatchHandle | None = None
        self._runner: asyncio.Task[None] | None = None
        self._dirty = False

    async def skip_existing(self) -> None:
        """Take the notifications present now as processed: call it before the components
        load their initial state, then :meth:`start` after the loads."""
        await self.store.ensure_path(paths.CONFIG_CHANGES)
        self._seen = set(await self.store.get_children(paths.CONFIG_CHANGES))

    async def start(self) -> None:
        """Watch `/config/changes` and process what arrived since :meth:`skip_existing`
        (called here if it was not)."""
        if self._seen is None:
            await self.skip_existing()
        self._watch = await self.store.watch_children(paths.CONFIG_CHANGES, self._on_changes)
        self._on_changes(None)  # the notifications written since skip_existing()

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        self._dirty = False
        if self._runner is not None:
            self._runner.cancel()
            self._runner = None

    def _on_changes(self, _event: Any) -> None:
        """The watch's callback: one pass runs at a time, and changes arriving meanwhile are
        folded into one more pass (Kafka's single queued ChangeNotification)."""
        self._dirty = True
        if self._runner is None or self._runner.done():
            self._runner = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self._dirty:
            self._dirty = False
            try:
                await self.process_changes()
            except Exception:  # e.g. the session is gone: the next change tries again
                log.exception("Error while processing notification change for path = %s",
                              paths.CONFIG_CHANGES)

    async def process_changes(self) -> None:
        """One pass: every notification not seen yet, in order, then the purge (before
        :meth:`skip_existing`, every notification present is new)."""
        async with self._lock:
            store = self.store
            try:
                children = await store.get_children(paths.CONFIG_CHANGES)
            except NoNodeError:
                return
            if not children:
                return
            now_ms = self._now_ms()
            seen = self._seen if self._seen is not None else set()
            for child in new_notifications(children, seen):
                path = f"{paths.CONFIG_CHANGES}/{child}"
                found = await store.get_or_none(path)
                if found is None:
                    log.warning("read null data from %s", path)
                    continue
                self._ctimes[child] = found[1].ctime
                await self._process(path, found[0])
                seen.add(child)
            self._seen = set(children)
            await self._purge(children, now_ms)

    async def _process(self, path: str, data: bytes) -> None:
        try:
            entity_path = paths.decode_config_change(data)
        except ValueError as exc:
            log.warning("Ignoring config change notification %s: %s", path, exc)
            return
        found = handlers_for(entity_path, self.handlers)
        if found is None:
            log.warning("Ignoring config change notification %s: entity_path %r does not start "
                        "with one of %s", path, entity_path,
                        ", ".join(f"'{kind}/'" for kind in self.handlers))
            return
        name, handlers = found
        log.info("Processing override for entity path %s", entity_path)
        for handler in handlers:
            try:
                await handler(name)
            except Exception:  # not CancelledError: stop() ends the pass
                log.exception("error processing change notification %s from %s",
                              entity_path, path)

    async def _purge(self, children: list[str], now_ms: int) -> None:
        """Delete the notifications older than change_expiration_ms (each broker does; the
        first delete wins)."""
        store = self.store
        present = set(children)
        self._ctimes = {c: t for c, t in self._ctimes.items() if c in present}
        for child in sorted(present - self._ctimes.keys()):  # e.g. the ones skipped at start
            stat = await store.exists(f"{paths.CONFIG_CHANGES}/{child}")
            if stat is not None:
                self._ctimes[child] = stat.ctime
        for child in expired_notifications(self._ctimes, now_ms, self.change_expiration_ms):
            log.debug("Purging change notification %s/%s", paths.CONFIG_CHANGES, child)
            with contextlib.suppress(NoNodeError):
                await store.delete(f"{paths.CONFIG_CHANGES}/{child}")
            self._ctimes.pop(child, None)
