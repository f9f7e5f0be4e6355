"""Records of tenants and their credentials, as the store hands them out (docs/security.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from durachat_infra.store._records import ConversationKey

MAX_TENANT_ID: Final = 63
"""Longest tenant id, in characters (a DNS label's length, so ids fit host names too)."""

_TENANT_ID: Final = re.compile(r"[a-z0-9][a-z0-9-]*")


def check_tenant_id(tenant_id: str) -> None:
    """Validate the id of a new tenant: lowercase letters, digits and `-`, starting with a
    letter or digit, at most `MAX_TENANT_ID` characters.

    Raises:
        ValueError: the id does not follow those rules.
    """
    if (
        not isinstance(tenant_id, str)
        or len(tenant_id) > MAX_TENANT_ID
        or not _TENANT_ID.fullmatch(tenant_id)
    ):
        raise ValueError(
            f"a tenant id is 1..{MAX_TENANT_ID} lowercase letters, digits and '-', "
            "starting with a letter or digit"
        )


@dataclass(frozen=True, slots=True)
class TenantRecord:
    """A tenant.

    Attributes:
        id: the tenant's id (what credentials and conversation keys name).
        name: a display name.
        quotas: the tenant's own quota values, overriding the configured defaults (only the
            quotas it overrides).
        settings: free-form settings of the tenant.
        created_at: when the tenant was created.
    """

    id: str
    name: str
    quotas: dict[str, int]
    settings: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """An API key of a tenant. Only a hash of its secret is stored.

    Attributes:
        id: the key's public id (part of the key itself, so a key is found without a scan).
        tenant: the tenant the key acts for.
        secret_hash: the hash of the key's secret (hex).
        label: what the key is for, as given when it was made.
        created_at: when it was made.
        revoked_at: when it was revoked; `None` while it is valid.
    """

    id: str
    tenant: str
    secret_hash: str
    label: str | None
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class SigningKeyRecord:
    """A secret a tenant's client tokens are signed with.

    Attributes:
        id: the key id tokens name in their header (`kid`).
        tenant: the tenant whose tokens it signs.
        secret: the HMAC secret.
        created_at: when it was made; the newest key signs new tokens.
        retires_at: from when tokens signed with it are no longer accepted; `None`: never.
    """

    id: str
    tenant: str
    secret: str
    created_at: datetime
    retires_at: datetime | None


@dataclass(frozen=True, slots=True)
class WebhookRecord:
    """A URL a tenant's events are delivered to (docs/observability.md#webhooks).

    Attributes:
        id: the webhook's id.
        tenant: the tenant whose events it receives.
        url: where deliveries are POSTed (http or https).
        types: the event type patterns it receives (`prefix:*` globs); empty: every type.
        secret: the HMAC secret its deliveries are signed with.
        created_at: when it was registered.
    """

    id: str
    tenant: str
    url: str
    types: list[str]
    secret: str
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The webhook as the API shows it (without its secret)."""
        return {
            "id": self.id,
            "url": self.url,
            "types": list(self.types),
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class Credentials:
    """Everything needed to check credentials without reading the database per request: every
    tenant, every API key not revoked, every signing key."""

    tenants: list[TenantRecord] = field(default_factory=list)
    api_keys: list[ApiKeyRecord] = field(default_factory=list)
    signing_keys: list[SigningKeyRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TenantRemoval:
    """What deleting a tenant removed from the store.

    Attributes:
        conversations: the keys of the conversations removed (their event logs live in Redis
            and are removed by the caller).
        messages: messages removed.
        branches: branches removed.
        turns: turns removed.
        api_keys: API keys removed (revoked ones included).
    """

    conversations: list[ConversationKey]
    messages: int
    branches: int
    turns: int
    api_keys: int
