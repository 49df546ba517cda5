"""UpdateFeatures (key 57, v0, server/apis/update_features.py) as a Kafka 2.8 ZooKeeper broker
answers it: no feature is supported, so every update fails with Kafka's INVALID_REQUEST reason;
a broker that is not the controller answers NOT_CONTROLLER, and without ALTER on the cluster the
request is CLUSTER_AUTHORIZATION_FAILED. Through kafka-python's update_features and
describe_features (which reads ApiVersions' empty feature lists), and kio requests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.cluster import Cluster
from odradek.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from odradek.server.apis.update_features import feature_update_error
from tests.integration.broker_harness import client_for, req_module, run, running_broker
from tests.integration.cluster_fixtures import module_cluster
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(120)

NOT_SUPPORTED = ("Could not apply finalized feature update because the provided feature is "
                 "not supported.")


def update_features(*updates: tuple[str, int, bool]) -> Any:
    m = req_module(57, 0)
    return m.UpdateFeaturesRequest(feature_updates=tuple(
        m.FeatureUpdateKey(feature=f, max_version_level=level, allow_downgrade=down)
        for f, level, down in updates))


def results(response: Any) -> dict[str, tuple[int, str | None]]:
    return {r.feature: (int(r.error_code), r.error_message) for r in response.results}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from module_cluster(tmp_path_factory, "update-features", {}, brokers=2)


def test_validation_reasons() -> None:
    assert feature_update_error("", 1, False) == (ErrorCode.invalid_request,
                                                  "Feature name can not be empty.")
    assert feature_update_error("f", 0, True) == (
        ErrorCode.invalid_request, "Can not delete non-existing finalized feature.")
    assert feature_update_error("f", -1, False) == (
        ErrorCode.invalid_request, "Can not provide maxVersionLevel: -1 less than 1 without "
        "setting the allowDowngrade flag to true in the request.")
    assert feature_update_error("metadata.version", 7, False) == (ErrorCode.invalid_request,
                                                                  NOT_SUPPORTED)


def test_through_kafka_python_and_at_a_broker_that_is_not_the_controller(
        cluster: Cluster) -> None:
    from kafka import KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        got = kp.update_features({"metadata.version": 3, "x": ("SAFE_DOWNGRADE", 0)})
        assert got == {"metadata.version": f"[Error 42] InvalidRequestError: {NOT_SUPPORTED}",
                       "x": "[Error 42] InvalidRequestError: Can not delete non-existing "
                            "finalized feature."}
        assert kp.describe_features() == {}
    finally:
        kp.close()

    other = next(b for i, b in cluster.brokers.items() if i != cluster.controller_id())

    async def ask() -> Any:
        c = await WireClient.connect("127.0.0.1", other.bound_ports[0])
        try:
            return await c.request(update_features(("f", 1, False)))
        finally:
            await c.close()
    r = cluster.run(ask())
    assert (r.error_code, r.error_message, r.results) == (
        ErrorCode.not_controller, "This is not the correct controller for this cluster.", ())


def test_needs_alter_on_the_cluster(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(
                tmp_path, authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
                allow_everyone_if_no_acl_found="true") as broker, client_for(broker) as c:
            r = await c.request(update_features(("f", 1, False), ("", 1, False)))
            assert r.error_code == ErrorCode.none
            assert results(r) == {"f": (42, NOT_SUPPORTED),
                                  "": (42, "Feature name can not be empty.")}
            # an ACL on the cluster: from now on only what it allows (CLUSTER_ACTION: the
            # broker's own requests), so ALTER is denied
            acls = req_module(30, 2)
            created = await c.request(acls.CreateAclsRequest(creations=(acls.AclCreation(
                resource_type=ResourceType.CLUSTER.value, resource_name="kafka-cluster",
                resource_pattern_type=PatternType.LITERAL.value, principal="User:ANONYMOUS",
                host="*", operation=AclOperation.CLUSTER_ACTION.value,
                permission_type=AclPermissionType.ALLOW.value),)))
            assert all(x.error_code == ErrorCode.none for x in created.results)
            for _ in range(100):  # the ACL reaches the broker's cache
                r = await c.request(update_features(("f", 1, False)))
                if r.error_code != ErrorCode.none:
                    break
                await asyncio.sleep(0.05)
            assert (r.error_code, r.error_message, r.results) == (
                ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", ())
    run(body)
