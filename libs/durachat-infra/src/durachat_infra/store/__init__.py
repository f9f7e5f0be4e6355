"""The SQL store: tenants and their keys, conversations, message trees, branches and turns
(docs/architecture.md#storage).

SQLite (the embedded default) and PostgreSQL (the cluster) behave the same and are tested by the
same suite. Run `migrate(url)` once at startup, then use a `Store`::

    await migrate(url)
    async with Store.from_url(url) as store:
        conv = await store.get_or_create_conversation(ConversationKey("default", "chat", "c1"))

Writes to a conversation are fenced by its epoch: `Store.claim` raises the epoch for a new owner,
and `Store.transaction` rejects (with `FencedError`) a writer holding an older one.

Branches (docs/branching.md): `Store.list_branches`, `get_branch`, `branch_path` and
`siblings` read them; `FencedTransaction.create_branch`, `rename_branch`, `delete_branch` and
`trim_path` change them; `Store.fork_conversation` copies a branch into a new conversation.
"""

from durachat.protocol import MAIN_BRANCH, BranchRef
from durachat_infra.store._migrate import migrate
from durachat_infra.store._records import (
    MAX_BRANCH_NAME,
    OPEN_TURN_STATUSES,
    BranchRecord,
    Conversation,
    ConversationKey,
    IncidentRecord,
    OpenTurn,
    ShownOn,
    Siblings,
    StoredMessage,
    ToolCallRecord,
    TurnKind,
    TurnRecord,
    TurnStatus,
    check_branch_name,
    parse_branch_ref,
)
from durachat_infra.store._store import Store
from durachat_infra.store._tenant_records import (
    MAX_TENANT_ID,
    ApiKeyRecord,
    Credentials,
    SigningKeyRecord,
    TenantRecord,
    TenantRemoval,
    WebhookRecord,
    check_tenant_id,
)
from durachat_infra.store._transaction import FencedTransaction
from durachat_infra.store.errors import (
    AmbiguousMessageError,
    BranchExistsError,
    ConversationExistsError,
    DatabaseUnavailableError,
    FencedError,
    MainBranchError,
    StoreError,
    TenantExistsError,
    UnknownBranchError,
    UnknownConversationError,
    UnknownMessageError,
    UnknownTenantError,
)

__all__ = [
    "MAIN_BRANCH",
    "MAX_BRANCH_NAME",
    "MAX_TENANT_ID",
    "OPEN_TURN_STATUSES",
    "AmbiguousMessageError",
    "ApiKeyRecord",
    "BranchExistsError",
    "BranchRecord",
    "BranchRef",
    "Conversation",
    "ConversationExistsError",
    "ConversationKey",
    "Credentials",
    "DatabaseUnavailableError",
    "FencedError",
    "FencedTransaction",
    "IncidentRecord",
    "MainBranchError",
    "OpenTurn",
    "ShownOn",
    "Siblings",
    "SigningKeyRecord",
    "Store",
    "StoreError",
    "StoredMessage",
    "TenantExistsError",
    "TenantRecord",
    "TenantRemoval",
    "ToolCallRecord",
    "TurnKind",
    "TurnRecord",
    "TurnStatus",
    "UnknownBranchError",
    "UnknownConversationError",
    "UnknownMessageError",
    "UnknownTenantError",
    "WebhookRecord",
    "check_branch_name",
    "check_tenant_id",
    "migrate",
    "parse_branch_ref",
]
