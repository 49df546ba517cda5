"""SCRAM credentials of every user, on every broker (Kafka's CredentialCache fed by the
DynamicConfigManager's user config handler).

At start-up every `/config/users/<user>` is read; afterwards a change notification
`/config/changes/config_change_<seq>` with entity_path `users/<user>` reloads that user (the
broker's DynamicConfigManager, server/configs/dynamic_config_manager.py, calls
:meth:`CredentialCache.on_user_config_change`), so a credential added or deleted with
AlterUserScramCredentials or `odradek configs --zookeeper` is in force on all brokers without a
restart. Lookups are synchronous (a dict), as the SASL exchange needs them.
"""

from __future__ import annotations

import logging

from ..common.sanitizer import desanitize_user
from ..coordination import paths
from ..coordination.admin_zk import USERS, user_config_path
from ..coordination.store import CoordinationStore, NoNodeError
from ..security.scram import ScramCredential, user_credentials

log = logging.getLogger("odradek.security")

DEFAULT_ENTITY = "<default>"  # Kafka's ConfigEntityName.Default: quotas only, no credentials


class CredentialCache:
    def __init__(self, store: CoordinationStore) -> None:
        self.store = store
        self._credentials: dict[str, dict[str, ScramCredential]] = {}  # user -> mechanism -> c

    def get(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._credentials.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(c) for u, c in self._credentials.items()}

    async def start(self) -> None:
        """Load every user's credentials (the broker has the DynamicConfigManager take the
        existing notifications as seen before, so no change is missed)."""
        store = self.store
        try:
            children = await store.get_children(USERS)
        except NoNodeError:
            children = []
        for child in children:
            await self.reload(desanitize_user(child))

    async def reload(self, user: str) -> None:
        found = await self.store.get_or_none(user_config_path(user))
        credentials = user_credentials(paths.decode_entity_config(found[0])) if found else {}
        if credentials:
            self._credentials[user] = credentials
        else:
            self._credentials.pop(user, None)

    async def on_user_config_change(self, sanitized: str) -> None:
        """The `users` handler of the DynamicConfigManager: `sanitized` is the notification's
        name, `alice` or `alice/clients/app`; as Kafka's UserConfigHandler, only a user's own
        config (not a user/client one, not `<default>`) holds credentials."""
        if "/" in sanitized or sanitized == DEFAULT_ENTITY:
            return
        log.debug("Processing SCRAM credentials of user %s", desanitize_user(sanitized))
        await self.reload(desanitize_user(sanitized))
