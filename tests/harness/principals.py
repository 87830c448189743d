"""SCRAM users and ACLs on the harness broker, created through the Admin API as an operator would
(over the PLAINTEXT listener, whose principal is a super user: tests/harness/broker.Secured)."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

TIMEOUT_S = 30

Rule = tuple[ResourceType, str, AclOperation, ResourcePatternType]

# the ACLs docs/security.md tells an operator to grant, as rules for grant()
OFFSETS_READ: Rule = (ResourceType.TOPIC, "__consumer_offsets", AclOperation.READ, ResourcePatternType.LITERAL)
SPARK_GROUPS_DESCRIBE: Rule = (
    ResourceType.GROUP,
    "offsets-lakehouse-spark",
    AclOperation.DESCRIBE,
    ResourcePatternType.PREFIXED,
)
TOPICS_DESCRIBE: Rule = (ResourceType.TOPIC, "*", AclOperation.DESCRIBE, ResourcePatternType.LITERAL)
GROUPS_DESCRIBE: Rule = (ResourceType.GROUP, "*", AclOperation.DESCRIBE, ResourcePatternType.LITERAL)


def add_scram_user(bootstrap: str, user: str, password: str) -> None:
    """``user`` with ``password`` for SCRAM-SHA-512 and SCRAM-SHA-256."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # one mechanism per request: the broker refuses two changes to one user in a request
    for mech in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256):
        upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, 4096), password.encode())
        for fut in admin.alter_user_scram_credentials([upsert]).values():
            fut.result(TIMEOUT_S)


def grant(bootstrap: str, principal: str, rules: Iterable[Rule]) -> None:
    """ALLOW ``principal`` each (resource type, name, operation, pattern); ``*`` is the wildcard."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    bindings = [
        AclBinding(kind, name, pattern, principal, "*", op, AclPermissionType.ALLOW)
        for kind, name, op, pattern in rules
    ]
    for fut in admin.create_acls(bindings).values():
        fut.result(TIMEOUT_S)
