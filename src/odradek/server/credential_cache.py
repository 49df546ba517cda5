"""SCRAM credentials of every user, on every broker (Kafka's CredentialCache fed by the
DynamicConfigManager's user config handler).

At start-up every `/config/users/<user>` is read; afterwards a change notification
`/config/changes/config_change_<seq>` with entity_path `users/<user>` reloads that user, so a
credential added or deleted with AlterUserScramCredentials or `odradek configs --zookeeper` is
in force on all brokers without a restart. Lookups are synchronous (a dict), as the SASL
exchange needs them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..common.sanitizer import desanitize_user
from ..coordination import paths
from ..coordination.admin_zk import USERS, new_config_changes, user_config_path
from ..coordination.store import CoordinationStore, NoNodeError
from ..security.scram import ScramCredential, user_credentials

log = logging.getLogger("odradek.security")



class CredentialCache:
    def __init__(self, store: CoordinationStore) -> None:
        self.store = store
        self._credentials: dict[str, dict[str, ScramCredential]] = {}  # user -> mechanism -> c
        self._seen_changes: set[str] = set()
        self._watch: Any = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()

    def get(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._credentials.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(c) for u, c in self._credentials.items()}

    async def start(self) -> None:
        store = self.store
        await store.ensure_path(paths.CONFIG_CHANGES)
        self._seen_changes = set(await store.get_children(paths.CONFIG_CHANGES))
        self._watch = await store.watch_children(paths.CONFIG_CHANGES, self._on_changes)
        try:
            children = await store.get_children(USERS)
        except NoNodeError:
            children = []
        for child in children:
            await self.reload(desanitize_user(child))

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for t in list(self._tasks):
            t.cancel()

    async def reload(self, user: str) -> None:
        found = await self.store.get_or_none(user_config_path(user))
        credentials = user_credentials(paths.decode_entity_config(found[0])) if found else {}
        if credentials:
            self._credentials[user] = credentials
        else:
            self._credentials.pop(user, None)

    def _on_changes(self, _event: Any) -> None:
        task = asyncio.ensure_future(self._process_changes())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _process_changes(self) -> None:
        async with self._lock:
            children, changes = await new_config_changes(self.store, self._seen_changes)
            for kind, name in changes:
                if kind == "users" and name:
                    log.info("Processing SCRAM credentials of user %s", desanitize_user(name))
                    await self.reload(desanitize_user(name))
            self._seen_changes = children
