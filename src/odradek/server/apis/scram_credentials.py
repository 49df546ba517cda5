"""DescribeUserScramCredentials (key 50, v0) and AlterUserScramCredentials (key 51, v0), KIP-554,
as Kafka's ZkAdminManager answers them.

Credentials live in `/config/users/<user>` under the mechanism's name; an alteration writes the
user's config and a change notification `users/<user>`, so every broker's CredentialCache
reloads it (this broker's at once). Errors are per user: DUPLICATE_RESOURCE (a user and
mechanism twice in one request), UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL (empty
name, too few or too many iterations), RESOURCE_NOT_FOUND
(deleting a credential that does not exist); a user with any error has none of its changes made.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from ...common.sanitizer import desanitize_user
from ...coordination.admin_zk import USERS, read_user_config, write_user_config
from ...coordination.store import CoordinationStore, NoNodeError
from ...protocol.codec import encode_response, make, response_module
from ...security import errors
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ...security.scram import (
    ScramCredential,
    ScramMechanism,
    alteration_error,
    apply_credential_changes,
    credential_from_salted_password,
    user_credentials,
)
from ..credential_cache import CredentialCache
from ..network import Connection
from .authz import allowed


class ScramCredentialApis:
    """Kafka's handleDescribeUserScramCredentialsRequest (DESCRIBE on the cluster) and
    handleAlterUserScramCredentialsRequest (ALTER on the cluster)."""

    def __init__(self, store: CoordinationStore, cache: CredentialCache,
                 authorizer: Authorizer = ALLOW_ALL) -> None:
        self.store = store
        self.cache = cache
        self.authorizer = authorizer

    async def _all_users(self) -> list[str]:
        try:
            children = await self.store.get_children(USERS)
        except NoNodeError:
            return []
        return sorted(desanitize_user(c) for c in children)

    async def handle_describe(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        if not allowed(self.authorizer, conn, AclOperation.DESCRIBE, ResourceType.CLUSTER,
                       request_name="DescribeUserScramCredentials"):
            resp = make(mod.DescribeUserScramCredentialsResponse, throttle_time=0,
                        error_code=ErrorCode.cluster_authorization_failed,
                        error_message=None, results=())
            return encode_response(type(request), header.correlation_id, resp)
        requested = [u.name for u in request.users or ()]
        describe_all = not requested
        counts = Counter(requested)
        results = []
        for user in (await self._all_users() if describe_all else list(dict.fromkeys(requested))):
            code, message, infos = ErrorCode.none, None, ()
            if not user:
                code, message = ErrorCode(errors.RESOURCE_NOT_FOUND), "Username must not be empty"
            elif counts[user] > 1:
                code = ErrorCode(errors.DUPLICATE_RESOURCE)
                message = ("Cannot describe SCRAM credentials for the same user twice in a "
                           f"single request: {user}")
            else:
                creds = user_credentials(await read_user_config(self.store, user))
                if not creds:
                    if describe_all:
                        continue
                    code = ErrorCode(errors.RESOURCE_NOT_FOUND)
                    message = f"Attempt to describe a user credential that does not exist: {user}"
                infos = tuple(make(mod.CredentialInfo,
                                   mechanism=ScramMechanism.from_name(m).value,
                                   iterations=c.iterations)
                              for m, c in sorted(creds.items()))
            results.append(make(mod.DescribeUserScramCredentialsResult, user=user,
                                error_code=code, error_message=message, credential_infos=infos))
        resp = make(mod.DescribeUserScramCredentialsResponse, throttle_time=0,
                    error_code=ErrorCode.none, error_message=None, results=tuple(results))
        return encode_response(type(request), header.correlation_id, resp)

    async def handle_alter(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        users = list(dict.fromkeys([d.name for d in request.deletions]
                                   + [u.name for u in request.upsertions]))
        if not allowed(self.authorizer, conn, AclOperation.ALTER, ResourceType.CLUSTER,
                       request_name="AlterUserScramCredentials"):
            resp = make(mod.AlterUserScramCredentialsResponse, throttle_time=0, results=tuple(
                make(mod.AlterUserScramCredentialsResult, user=user,
                     error_code=ErrorCode.cluster_authorization_failed, error_message=None)
                for user in users))
            return encode_response(type(request), header.correlation_id, resp)
        failures: dict[str, tuple[int, str]] = {}
        # empty names, unknown mechanisms, iterations out of range (an upsertion's error wins)
        checks = ([(d.name, d.mechanism, None) for d in request.deletions]
                  + [(u.name, u.mechanism, u.iterations) for u in request.upsertions])
        for name, mechanism, iterations in checks:
            error = ((errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty") if not name
                     else alteration_error(ScramMechanism.from_type(mechanism), iterations))
            if error:
                failures[name] = error
        # a user and mechanism twice among the remaining alterations
        pairs = Counter((n, m) for n, m, _ in checks if n not in failures)
        for (name, _), count in pairs.items():
            if count > 1:
                failures[name] = (errors.DUPLICATE_RESOURCE,
                                  "A user credential cannot be altered twice in the same request")
        results = []
        for user in users:
            if user not in failures:
                failure = await self._alter_user(user, request)
                if failure:
                    failures[user] = failure
            code, message = failures.get(user, (0, None))
            results.append(make(mod.AlterUserScramCredentialsResult, user=user,
                                error_code=ErrorCode(code), error_message=message))
        resp = make(mod.AlterUserScramCredentialsResponse, throttle_time=0,
                    results=tuple(results))
        return encode_response(type(request), header.correlation_id, resp)

    async def _alter_user(self, user: str, request: Any) -> tuple[int, str] | None:
        config = await read_user_config(self.store, user)
        existing = user_credentials(config)
        deletions = [ScramMechanism.from_type(d.mechanism).mechanism_name
                     for d in request.deletions if d.name == user]
        if any(m not in existing for m in deletions):
            return errors.RESOURCE_NOT_FOUND, ("Attempt to delete a user credential that does "
                                               "not exist")
        upserts: dict[str, ScramCredential] = {}
        for u in request.upsertions:
            if u.name == user:
                mech = ScramMechanism.from_type(u.mechanism).mechanism_name
                upserts[mech] = credential_from_salted_password(
                    mech, bytes(u.salt), bytes(u.salted_password), u.iterations)
        await write_user_config(self.store, user,
                                apply_credential_changes(config, upserts, deletions))
        await self.cache.reload(user)
        return None
