"""Errors raised by the SQL store.

Every error the store raises derives from `StoreError`; driver exceptions (SQLAlchemy, asyncpg,
sqlite3, socket errors) never escape. They are translated where the store talks to the database
and chained with `from`, so the original stays visible in tracebacks::

    StoreError                     anything the store could not do
    ├── FencedError                a write was rejected: a newer epoch owns the conversation
    ├── UnknownTenantError         the tenant of a conversation key does not exist
    └── DatabaseUnavailableError   no connection, connection lost, or too busy; retryable

Invalid arguments (a message without an `id`, an unknown turn status) raise `ValueError`, because
they are bugs in the caller, not states of the database.
"""

from __future__ import annotations

__all__ = ["DatabaseUnavailableError", "FencedError", "StoreError", "UnknownTenantError"]


class StoreError(Exception):
    """Root of the store's errors."""


class FencedError(StoreError):
    """A fenced write was rejected because the caller no longer owns the conversation.

    Raised before anything is applied. The caller is a former owner ("zombie") and must stop
    writing for this conversation.

    Attributes:
        conversation_id: the conversation the write was for.
        epoch: the fencing token the caller presented.
        current_epoch: the epoch stored in the database.
    """

    def __init__(self, conversation_id: int, epoch: int, current_epoch: int) -> None:
        super().__init__(
            f"conversation {conversation_id}: epoch {epoch} is fenced "
            f"(stored epoch is {current_epoch})"
        )
        self.conversation_id = conversation_id
        self.epoch = epoch
        self.current_epoch = current_epoch


class UnknownTenantError(StoreError):
    """The tenant named in a conversation key does not exist.

    Attributes:
        tenant: the tenant id that was not found.
    """

    def __init__(self, tenant: str) -> None:
        super().__init__(f"unknown tenant {tenant!r}")
        self.tenant = tenant


class DatabaseUnavailableError(StoreError):
    """The database cannot be reached, dropped the connection, or was too busy.

    "Too busy" is SQLite's write lock outlasting the busy timeout, or PostgreSQL aborting the
    transaction as a deadlock or serialization failure.

    A transaction cut off before its commit is rolled back by the database. If the connection
    was lost during the commit itself the outcome is unknown, which is why writes are idempotent
    by request id: retrying is always safe.
    """
