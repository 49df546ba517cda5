"""UpdateFeatures (key 57), v0 (KIP-584): finalize cluster-wide feature versions -- as a Kafka 2.8
ZooKeeper broker answers it.

Kafka's ``handleUpdateFeatures`` and the controller's ``processFeatureUpdates``: without ALTER on
the cluster the whole request is CLUSTER_AUTHORIZATION_FAILED, on a broker that is not the
active controller NOT_CONTROLLER (both top-level, with Kafka's messages and no per-feature
results); versioning is on (odradek's inter-broker protocol is 2.8's, past 2.7). Then each
update is validated against the finalized features, and answered per feature name.

A 2.8 broker supports no feature (``BrokerFeatures.createDefault`` is empty: the first features,
such as ``metadata.version``, came with KRaft), so no update can be applied and nothing is ever
finalized -- the finalized set the validation reads is always empty, and the ``/feature`` znode
never changes. What is left of the validation, in Kafka's order and words (all INVALID_REQUEST):
an empty name, a deletion (max_version_level < 1 with allow_downgrade) of a feature that is not
finalized, max_version_level < 1 without allow_downgrade, and any other update (the feature is
not supported). As in Kafka's map of results, a feature named twice gets one result, the last."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...controller.controller import KafkaController
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..network import Connection
from .authz import CLUSTER_NAME, allowed

SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {}  # Kafka 2.8's BrokerFeatures.createDefault


def feature_update_error(feature: str, max_version_level: int,
                         allow_downgrade: bool) -> tuple[ErrorCode, str | None]:
    """The result of one update on a 2.8 broker (no finalized features, none supported)."""
    if not feature:
        return ErrorCode.invalid_request, "Feature name can not be empty."
    if max_version_level < 1 and allow_downgrade:
        return ErrorCode.invalid_request, "Can not delete non-existing finalized feature."
    if max_version_level < 1:
        return (ErrorCode.invalid_request,
                f"Can not provide maxVersionLevel: {max_version_level} less than 1 without "
                "setting the allowDowngrade flag to true in the request.")
    assert feature not in SUPPORTED_FEATURES
    return (ErrorCode.invalid_request,
            "Could not apply finalized feature update because the provided feature is not "
            "supported.")


class UpdateFeaturesApi:
    def __init__(self, controller: KafkaController, authorizer: Authorizer = ALLOW_ALL) -> None:
        self.controller = controller
        self.authorizer = authorizer

    def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        top: tuple[ErrorCode, str | None] = (ErrorCode.none, None)
        results: dict[str, tuple[ErrorCode, str | None]] = {}
        if not allowed(self.authorizer, conn, AclOperation.ALTER, ResourceType.CLUSTER,
                       CLUSTER_NAME, request_name="UpdateFeatures"):
            top = (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
        elif not self.controller.is_active:
            top = (ErrorCode.not_controller,
                   "This is not the correct controller for this cluster.")
        else:
            for u in request.feature_updates:
                results[u.feature] = feature_update_error(u.feature, int(u.max_version_level),
                                                          bool(u.allow_downgrade))
        response = make(mod.UpdateFeaturesResponse, throttle_time=0, error_code=top[0],
                        error_message=top[1], results=tuple(
                            make(mod.UpdatableFeatureResult, feature=name, error_code=code,
                                 error_message=message)
                            for name, (code, message) in results.items()))
        return encode_response(type(request), header.correlation_id, response)
