"""The SQL store: conversations, message trees, branches and turns (DESIGN §3, §4, §6, §7).

SQLite (the embedded default) and PostgreSQL (the cluster) behave the same and are tested by the
same suite. Run `migrate(url)` once at startup, then use a `Store`::

    await migrate(url)
    async with Store.from_url(url) as store:
        conv = await store.get_or_create_conversation(ConversationKey("default", "chat", "c1"))

Writes to a conversation are fenced by its epoch: `Store.claim` raises the epoch for a new owner,
and `Store.transaction` rejects (with `FencedError`) a writer holding an older one.
"""

from durachat_infra.store._migrate import migrate
from durachat_infra.store._records import (
    MAIN_BRANCH,
    OPEN_TURN_STATUSES,
    Conversation,
    ConversationKey,
    IncidentRecord,
    OpenTurn,
    StoredMessage,
    ToolCallRecord,
    TurnKind,
    TurnRecord,
    TurnStatus,
)
from durachat_infra.store._store import Store
from durachat_infra.store._transaction import FencedTransaction
from durachat_infra.store.errors import (
    DatabaseUnavailableError,
    FencedError,
    StoreError,
    UnknownTenantError,
)

__all__ = [
    "MAIN_BRANCH",
    "OPEN_TURN_STATUSES",
    "Conversation",
    "ConversationKey",
    "DatabaseUnavailableError",
    "FencedError",
    "FencedTransaction",
    "IncidentRecord",
    "OpenTurn",
    "Store",
    "StoreError",
    "StoredMessage",
    "ToolCallRecord",
    "TurnKind",
    "TurnRecord",
    "TurnStatus",
    "UnknownTenantError",
    "migrate",
]
