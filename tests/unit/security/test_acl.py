"""The pure ACL model (security/acl.py): Kafka's wire codes, filter matching, the decision
table, and the ACL znodes' JSON and change notifications (coordination/paths.py,
server/authorizer.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.coordination import paths
from odradek.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    authorize,
    authorize_by_resource_type,
    parse_super_users,
)
from odradek.server.authorizer import (
    change_notification,
    entry_from_json,
    entry_to_json,
    parse_change_notification,
    resource_path,
)

A, D = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def test_wire_codes_are_kafkas() -> None:
    assert [(m.name, int(m)) for m in ResourceType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("TOPIC", 2), ("GROUP", 3), ("CLUSTER", 4),
        ("TRANSACTIONAL_ID", 5), ("DELEGATION_TOKEN", 6)]
    assert [(m.name, int(m)) for m in PatternType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("MATCH", 2), ("LITERAL", 3), ("PREFIXED", 4)]
    assert [int(m) for m in AclOperation] == list(range(13))
    assert AclOperation.IDEMPOTENT_WRITE == 12 and AclOperation.CLUSTER_ACTION == 9
    assert [(m.name, int(m)) for m in AclPermissionType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("DENY", 2), ("ALLOW", 3)]
    assert AclOperation.from_code(99) == AclOperation.UNKNOWN


def test_names_both_spellings() -> None:
    assert ResourceType.TRANSACTIONAL_ID.pascal == "TransactionalId"
    assert ResourceType.from_string("TransactionalId") == ResourceType.TRANSACTIONAL_ID
    assert ResourceType.from_string("TRANSACTIONAL_ID") == ResourceType.TRANSACTIONAL_ID
    assert AclOperation.from_string("idempotentwrite") == Op.IDEMPOTENT_WRITE
    assert AclOperation.DESCRIBE_CONFIGS.pascal == "DescribeConfigs"
    assert AclOperation.from_string("nonsense") == Op.UNKNOWN
    assert str(ResourcePattern(T, "foo", LIT)) == \
        "ResourcePattern(resourceType=TOPIC, name=foo, patternType=LITERAL)"
    assert str(AccessControlEntry("User:alice", "*", Op.READ, A)) == \
        "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"


def _index(*acls: tuple[ResourceType, str, PatternType, str, str, AclOperation,
                        AclPermissionType]) -> AclIndex:
    idx = AclIndex()
    grouped: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for rt, name, pt, principal, host, op, perm in acls:
        grouped.setdefault(ResourcePattern(rt, name, pt), set()).add(
            AccessControlEntry(principal, host, op, perm))
    for p, entries in grouped.items():
        idx.set(p, entries)
    return idx


ALICE = "User:alice"
# (acls, principal, host, operation, resource type, name, super users, allow-if-none) -> allowed
CASES = [
    # no ACL on the resource: the no-ACL default
    ((), ALICE, "1.1.1.1", Op.READ, T, "foo", "", False, False),
    ((), ALICE, "1.1.1.1", Op.READ, T, "foo", "", True, True),
    # an ACL elsewhere does not make the resource "with ACLs"
    (((T, "bar", LIT, ALICE, "*", Op.READ, A),), ALICE, "h", Op.READ, T, "foo", "", True, True),
    # literal allow
    (((T, "foo", LIT, ALICE, "*", Op.READ, A),), ALICE, "h", Op.READ, T, "foo", "", False, True),
    # another principal: denied (ACLs exist, none match)
    (((T, "foo", LIT, ALICE, "*", Op.READ, A),), "User:bob", "h", Op.READ, T, "foo", "", True,
     False),
    # another operation
    (((T, "foo", LIT, ALICE, "*", Op.READ, A),), ALICE, "h", Op.WRITE, T, "foo", "", False,
     False),
    # Read, Write, Delete, Alter imply Describe
    (((T, "foo", LIT, ALICE, "*", Op.WRITE, A),), ALICE, "h", Op.DESCRIBE, T, "foo", "", False,
     True),
    (((T, "foo", LIT, ALICE, "*", Op.ALTER, A),), ALICE, "h", Op.DESCRIBE, T, "foo", "", False,
     True),
    (((T, "foo", LIT, ALICE, "*", Op.DESCRIBE, A),), ALICE, "h", Op.READ, T, "foo", "", False,
     False),
    # AlterConfigs implies DescribeConfigs, not the other way
    (((T, "foo", LIT, ALICE, "*", Op.ALTER_CONFIGS, A),), ALICE, "h", Op.DESCRIBE_CONFIGS, T,
     "foo", "", False, True),
    (((T, "foo", LIT, ALICE, "*", Op.DESCRIBE_CONFIGS, A),), ALICE, "h", Op.ALTER_CONFIGS, T,
     "foo", "", False, False),
    # ALL matches everything
    (((C, "kafka-cluster", LIT, ALICE, "*", Op.ALL, A),), ALICE, "h", Op.CLUSTER_ACTION, C,
     "kafka-cluster", "", False, True),
    # deny beats allow, also through wildcards and ALL
    (((T, "foo", LIT, ALICE, "*", Op.READ, A), (T, "foo", LIT, ALICE, "*", Op.READ, D)), ALICE,
     "h", Op.READ, T, "foo", "", True, False),
    (((T, "foo", LIT, ALICE, "*", Op.ALL, A), (T, "*", LIT, "User:*", "*", Op.ALL, D)), ALICE,
     "h", Op.WRITE, T, "foo", "", True, False),
    # a deny of Read does not deny Describe (deny is not expanded)
    (((T, "foo", LIT, ALICE, "*", Op.WRITE, A), (T, "foo", LIT, ALICE, "*", Op.READ, D)), ALICE,
     "h", Op.DESCRIBE, T, "foo", "", False, True),
    # wildcard resource and principal
    (((T, "*", LIT, "User:*", "*", Op.READ, A),), ALICE, "h", Op.READ, T, "anything", "", False,
     True),
    # prefixed
    (((T, "app-", PRE, ALICE, "*", Op.WRITE, A),), ALICE, "h", Op.WRITE, T, "app-1", "", False,
     True),
    (((T, "app-", PRE, ALICE, "*", Op.WRITE, A),), ALICE, "h", Op.WRITE, T, "ap", "", False,
     False),
    (((T, "app-", PRE, ALICE, "*", Op.WRITE, A), (T, "app-secret", LIT, ALICE, "*", Op.WRITE, D)),
     ALICE, "h", Op.WRITE, T, "app-secret", "", False, False),
    # hosts
    (((T, "foo", LIT, ALICE, "10.0.0.1", Op.READ, A),), ALICE, "10.0.0.1", Op.READ, T, "foo", "",
     False, True),
    (((T, "foo", LIT, ALICE, "10.0.0.1", Op.READ, A),), ALICE, "10.0.0.2", Op.READ, T, "foo", "",
     False, False),
    (((T, "foo", LIT, ALICE, "*", Op.READ, A), (T, "foo", LIT, ALICE, "10.0.0.2", Op.READ, D)),
     ALICE, "10.0.0.2", Op.READ, T, "foo", "", False, False),
    # super users, even against a deny
    (((T, "foo", LIT, "User:admin", "*", Op.ALL, D),), "User:admin", "h", Op.DELETE, T, "foo",
     "User:admin;User:broker", False, True),
    # resource types are separate
    (((G, "foo", LIT, ALICE, "*", Op.READ, A),), ALICE, "h", Op.READ, T, "foo", "", False,
     False),
]


@pytest.mark.parametrize(("acls", "principal", "host", "op", "rt", "name", "supers", "everyone",
                          "expected"), CASES)
def test_decision_table(acls: tuple[object, ...], principal: str, host: str, op: AclOperation,
                        rt: ResourceType, name: str, supers: str, everyone: bool,
                        expected: bool) -> None:
    idx = _index(*acls)  # type: ignore[arg-type]
    assert authorize(idx, principal, host, op, rt, name, super_users=parse_super_users(supers),
                     allow_everyone_if_no_acl_found=everyone) is expected


def test_cannot_authorize_any() -> None:
    with pytest.raises(ValueError):
        authorize(AclIndex(), ALICE, "h", Op.ANY, T, "t", super_users=frozenset(),
                  allow_everyone_if_no_acl_found=True)


def test_authorize_by_resource_type() -> None:
    idx = _index((T, "a", LIT, ALICE, "*", Op.WRITE, A))
    kw = {"super_users": frozenset(), "allow_everyone_if_no_acl_found": False}
    assert authorize_by_resource_type(idx, ALICE, "h", Op.WRITE, T, **kw)  # type: ignore[arg-type]
    assert not authorize_by_resource_type(idx, "User:bob", "h", Op.WRITE, T, **kw)  # type: ignore[arg-type]
    idx2 = _index((T, "a", LIT, ALICE, "*", Op.WRITE, A), (T, "", PRE, ALICE, "*", Op.WRITE, D))
    assert not authorize_by_resource_type(idx2, ALICE, "h", Op.WRITE, T, **kw)  # type: ignore[arg-type]


FOO_LIT = ResourcePattern(T, "foo", LIT)
STAR_LIT = ResourcePattern(T, "*", LIT)
FO_PRE = ResourcePattern(T, "fo", PRE)
BAR_LIT = ResourcePattern(T, "bar", LIT)
GROUP_FOO = ResourcePattern(G, "foo", LIT)
ALL_PATTERNS = [FOO_LIT, STAR_LIT, FO_PRE, BAR_LIT, GROUP_FOO]


@pytest.mark.parametrize(("filt", "matched"), [
    (ResourcePatternFilter(), ALL_PATTERNS),
    (ResourcePatternFilter(T, None, PatternType.ANY), [FOO_LIT, STAR_LIT, FO_PRE, BAR_LIT]),
    (ResourcePatternFilter(T, "foo", PatternType.ANY), [FOO_LIT]),
    (ResourcePatternFilter(T, "foo", PatternType.MATCH), [FOO_LIT, STAR_LIT, FO_PRE]),
    (ResourcePatternFilter(T, "foo", LIT), [FOO_LIT]),
    (ResourcePatternFilter(T, "fo", PRE), [FO_PRE]),
    (ResourcePatternFilter(T, "foo", PRE), []),
    (ResourcePatternFilter(ResourceType.ANY, "foo", PatternType.ANY), [FOO_LIT, GROUP_FOO]),
])
def test_pattern_filters(filt: ResourcePatternFilter, matched: list[ResourcePattern]) -> None:
    assert [p for p in ALL_PATTERNS if filt.matches(p)] == matched


def test_entry_filter_and_indefinite_fields() -> None:
    e = AccessControlEntry(ALICE, "*", Op.READ, A)
    assert AccessControlEntryFilter().matches(e)
    assert AccessControlEntryFilter(ALICE, None, Op.READ, A).matches(e)
    assert not AccessControlEntryFilter("User:bob").matches(e)
    assert not AccessControlEntryFilter(operation=Op.WRITE).matches(e)
    assert AclBindingFilter().matches(AclBinding(FOO_LIT, e))
    assert ResourcePattern(T, "x", PatternType.MATCH).indefinite_field()
    assert AccessControlEntry(ALICE, "*", Op.ANY, A).indefinite_field()
    assert AccessControlEntry("alice", "*", Op.READ, A).indefinite_field()
    assert AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN)).indefinite_field()


def test_znode_layout_and_json() -> None:
    assert resource_path(FOO_LIT) == "/kafka-acl/Topic/foo"
    assert resource_path(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", LIT)) == \
        "/kafka-acl/TransactionalId/tx"
    assert resource_path(ResourcePattern(G, "app-", PRE)) == \
        "/kafka-acl-extended/prefixed/Group/app-"
    e = AccessControlEntry(ALICE, "*", Op.READ, A)
    assert paths.encode_acls([entry_to_json(e)]) == (
        b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
        b'"operation":"Read","host":"*"}]}')
    assert paths.encode_acls([]) == b'{"version":1,"acls":[]}'
    with pytest.raises(ValueError):
        paths.acl_resource_path("LITERAL", "Topic", "a/b")


def test_change_notifications() -> None:
    prefix, data = change_notification(FOO_LIT)
    assert prefix == "/kafka-acl-changes/acl_changes_"
    assert data == b"TOPIC:foo"
    assert parse_change_notification(paths.ACL_CHANGES, data) == FOO_LIT
    assert parse_change_notification(paths.ACL_CHANGES, b"Topic:a:b") == \
        ResourcePattern(T, "a:b", LIT)  # Kafka 1.x wrote the PascalCase name
    prefix, data = change_notification(FO_PRE)
    assert prefix == "/kafka-acl-extended-changes/acl_changes_"
    assert data == b'{"version":1,"resourceType":"TOPIC","name":"fo","patternType":"PREFIXED"}'
    assert parse_change_notification(paths.ACL_EXTENDED_CHANGES, data) == FO_PRE
    for bad in (b"nocolon", b"Nonsense:x"):
        with pytest.raises(ValueError):
            parse_change_notification(paths.ACL_CHANGES, bad)
    with pytest.raises(ValueError):
        parse_change_notification(paths.ACL_EXTENDED_CHANGES, b'{"version":2}')


entries = st.builds(
    AccessControlEntry,
    st.sampled_from(["User:alice", "User:*", "User:bob o'neil", "Group:ünï"]),
    st.sampled_from(["*", "127.0.0.1", "::1"]),
    st.sampled_from([o for o in AclOperation if o not in (Op.ANY, Op.UNKNOWN)]),
    st.sampled_from([A, D]))


@given(st.frozensets(entries, max_size=12))
def test_acls_json_round_trip(es: frozenset[AccessControlEntry]) -> None:
    data = paths.encode_acls(entry_to_json(e) for e in es)
    assert {entry_from_json(o) for o in paths.decode_acls(data)} == es


@given(st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID,
                        ResourceType.CLUSTER, ResourceType.DELEGATION_TOKEN]),
       st.text(min_size=1, max_size=30).filter(lambda s: "/" not in s and s not in (".", "..")),
       st.sampled_from([LIT, PRE]))
def test_change_notification_round_trip(rt: ResourceType, name: str, pt: PatternType) -> None:
    p = ResourcePattern(rt, name, pt)
    prefix, data = change_notification(p)
    root = prefix.rsplit("/", 1)[0]
    assert parse_change_notification(root, data) == p


@given(st.lists(st.tuples(st.sampled_from([T, G]), st.sampled_from(["a", "ab", "abc", "*", "b"]),
                          st.sampled_from([LIT, PRE]), entries), max_size=10),
       st.sampled_from([T, G]), st.sampled_from(["a", "ab", "abc", "b", "zz"]))
def test_index_matching_equals_filter_match(acls: list[tuple[ResourceType, str, PatternType,
                                                             AccessControlEntry]],
                                            rt: ResourceType, name: str) -> None:
    """The index finds exactly the entries of the patterns a MATCH filter selects."""
    idx = AclIndex()
    grouped: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for t, n, pt, e in acls:
        grouped.setdefault(ResourcePattern(t, n, pt), set()).add(e)
    for p, es in grouped.items():
        idx.set(p, es)
    filt = ResourcePatternFilter(rt, name, PatternType.MATCH)
    expected = sorted((e for p, es in grouped.items() if filt.matches(p) for e in es), key=str)
    assert sorted(idx.matching(rt, name), key=str) == expected
