"""Errors raised by the SQL store.

Every error the store raises derives from `StoreError`; driver exceptions (SQLAlchemy, asyncpg,
sqlite3, socket errors) never escape. They are translated where the store talks to the database
and chained with `from`, so the original stays visible in tracebacks::

    StoreError                     anything the store could not do
    ├── FencedError                a write was rejected: a newer epoch owns the conversation
    ├── UnknownTenantError         the tenant of a conversation key does not exist
    ├── TenantExistsError          a tenant to be created exists already
    ├── UnknownConversationError   a conversation named by its key does not exist
    ├── ConversationExistsError    a conversation to be created exists already
    ├── UnknownBranchError         no such branch in the conversation
    ├── BranchExistsError          a branch name is taken in the conversation
    ├── MainBranchError            `main` cannot be deleted or renamed
    ├── UnknownMessageError        a message is not on the branch it was looked for on
    ├── AmbiguousMessageError      a message id occurs more than once; name a branch
    └── DatabaseUnavailableError   no connection, connection lost, or too busy; retryable

Invalid arguments (a message without an `id`, an unknown turn status) raise `ValueError`, because
they are bugs in the caller, not states of the database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durachat.protocol import BranchRef
    from durachat_infra.store._records import ConversationKey

__all__ = [
    "AmbiguousMessageError",
    "BranchExistsError",
    "ConversationExistsError",
    "DatabaseUnavailableError",
    "FencedError",
    "MainBranchError",
    "StoreError",
    "TenantExistsError",
    "UnknownBranchError",
    "UnknownConversationError",
    "UnknownMessageError",
    "UnknownTenantError",
]


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


class UnknownConversationError(StoreError):
    """The conversation named by a key does not exist.

    Attributes:
        key: the conversation's key.
    """

    def __init__(self, key: ConversationKey) -> None:
        super().__init__(f"unknown conversation {key.tenant}/{key.agent}/{key.name}")
        self.key = key


class ConversationExistsError(StoreError):
    """A conversation was to be created (a fork's target) but exists already.

    Attributes:
        key: the conversation's key.
    """

    def __init__(self, key: ConversationKey) -> None:
        super().__init__(f"conversation {key.tenant}/{key.agent}/{key.name} exists already")
        self.key = key


class UnknownBranchError(StoreError):
    """The conversation has no such branch.

    Attributes:
        conversation_id: the conversation looked in.
        branch: the branch asked for, by id (`int`) or name (`str`).
    """

    def __init__(self, conversation_id: int, branch: BranchRef) -> None:
        what = f"id {branch}" if isinstance(branch, int) else repr(branch)
        super().__init__(f"conversation {conversation_id} has no branch {what}")
        self.conversation_id = conversation_id
        self.branch = branch


class BranchExistsError(StoreError):
    """A branch of that name exists already in the conversation (names are unique).

    Attributes:
        conversation_id: the conversation.
        name: the name that is taken.
    """

    def __init__(self, conversation_id: int, name: str) -> None:
        super().__init__(f"conversation {conversation_id} already has a branch {name!r}")
        self.conversation_id = conversation_id
        self.name = name


class MainBranchError(StoreError):
    """`main` was to be deleted or renamed; every conversation keeps its `main`.

    Attributes:
        conversation_id: the conversation.
        action: what was refused (`"delete"` or `"rename"`).
    """

    def __init__(self, conversation_id: int, action: str) -> None:
        super().__init__(f"conversation {conversation_id}: the main branch cannot be {action}d")
        self.conversation_id = conversation_id
        self.action = action


class UnknownMessageError(StoreError):
    """A message is not on the branch's path (it may exist elsewhere in the tree).

    Attributes:
        conversation_id: the conversation.
        message_id: the UIMessage id looked for.
        branch: the branch whose path was searched.
    """

    def __init__(self, conversation_id: int, message_id: str, branch: BranchRef) -> None:
        super().__init__(
            f"conversation {conversation_id}: message {message_id!r} is not on branch {branch!r}"
        )
        self.conversation_id = conversation_id
        self.message_id = message_id
        self.branch = branch


class AmbiguousMessageError(StoreError):
    """A UIMessage id occurs more than once in the conversation (an edit keeps its message's
    id), none of the occurrences is on `main`, and no branch was named to choose one.

    Attributes:
        conversation_id: the conversation.
        message_id: the UIMessage id looked for.
    """

    def __init__(self, conversation_id: int, message_id: str) -> None:
        super().__init__(
            f"conversation {conversation_id}: message {message_id!r} occurs more than once; "
            "name the branch to look on"
        )
        self.conversation_id = conversation_id
        self.message_id = message_id


class TenantExistsError(StoreError):
    """A tenant was to be created but one with that id exists already.

    Attributes:
        tenant: the tenant id.
    """

    def __init__(self, tenant: str) -> None:
        super().__init__(f"tenant {tenant!r} exists already")
        self.tenant = tenant
