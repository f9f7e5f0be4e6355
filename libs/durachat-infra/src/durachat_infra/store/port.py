"""The store port: what shards, gateways and jobs ask of conversation storage.

Two adapters implement it: `Store` with `FencedTransaction` (SQLite or PostgreSQL) and
`MemoryStore` with `MemoryTransaction` (`durachat_infra.store.memory`, for tests and tools). One
conformance suite (`tests/integration/store`) runs against all three backends, so what is
promised here is what the tests check. See docs/architecture.md#ports-and-adapters.

Every method may raise `StoreError` (`DatabaseUnavailableError` when the backend cannot be
reached, which is retryable); invalid arguments raise `ValueError` before anything is touched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from durachat.protocol import MAIN_BRANCH, BranchRef
from durachat_infra.store._records import (
    BranchRecord,
    Conversation,
    ConversationKey,
    IncidentRecord,
    OpenTurn,
    Siblings,
    StoredMessage,
    ToolCallRecord,
    TurnKind,
    TurnRecord,
    TurnStatus,
)
from durachat_infra.store._tenant_records import (
    ApiKeyRecord,
    Credentials,
    SigningKeyRecord,
    TenantRecord,
    TenantRemoval,
    WebhookRecord,
)

__all__ = ["StorePort", "TenantStorePort", "TransactionPort"]


T = TypeVar("T")


class TransactionPort(Protocol):
    """Writes to one conversation, all applied together or not at all, valid only under the
    fencing epoch the transaction was opened with.

    Opened by `StorePort.transaction`. Everything commits when the `async with` block exits
    normally; an exception escaping the block rolls everything back. A method that raises
    spoils the transaction even if the caller catches the error: later calls raise
    `StoreError`, and leaving the block raises `StoreError` and rolls back. After the block,
    every method raises `StoreError`. Messages are rows of a tree (`pk`, `parent_pk`), with
    sequence numbers that only grow and are never reused; a UIMessage id may occur on several
    rows. Writes never reach another conversation: naming its rows raises `StoreError`.
    """

    conversation_id: int
    """The conversation written to."""
    epoch: int
    """The fencing epoch the transaction holds."""

    async def insert_chain(
        self, parent_pk: int | None, messages: Sequence[dict[str, Any]]
    ) -> list[int]:
        """Insert `messages` as a chain below `parent_pk` (`None`: the first is a root), with
        the next sequence numbers; returns the new rows' keys in order. Moves no branch.

        Raises `ValueError` for a message without a string `id` and `role`, `StoreError` if
        `parent_pk` is not a message of this conversation."""
        ...

    async def update_message(self, pk: int, message: dict[str, Any]) -> None:
        """Replace the UIMessage of row `pk` (its id and role follow the body)."""
        ...

    async def reparent(self, pk: int, parent_pk: int | None) -> None:
        """Move row `pk` with its subtree under `parent_pk` (`None`: make it a root); refuses
        a cycle with `StoreError`."""
        ...

    async def set_leaf(self, branch: BranchRef, leaf_pk: int | None) -> None:
        """Point a branch at `leaf_pk` (`None` empties it); a name that names no branch
        creates one without lineage, an unknown id raises `UnknownBranchError`."""
        ...

    async def delete_messages(self, pks: Sequence[int]) -> None:
        """Delete rows `pks` (keys of other conversations are ignored); branches whose leaf or
        fork point goes point at nothing. Refuses (`StoreError`) to leave a surviving row
        whose parent is deleted."""
        ...

    async def clear(self) -> None:
        """Delete every message, every branch but `main` (left empty) and the request context;
        turns, tool calls, incidents and the sequence counter stay."""
        ...

    async def save_request_context(
        self, last_body: dict[str, Any] | None, last_client_tools: list[Any] | None
    ) -> None:
        """Store the last request body and client tool schemas."""
        ...

    async def begin_turn(
        self, request_id: str, *, kind: TurnKind, owner: str, request: dict[str, Any] | None
    ) -> bool:
        """Record turn `request_id` as `accepted` under this epoch; `False` (and no change) if
        the conversation has a turn with that id already."""
        ...

    async def update_turn(
        self,
        request_id: str,
        *,
        status: TurnStatus | None = None,
        message_id: str | None = None,
        error: str | None = None,
        heartbeat: bool = False,
        stash: dict[str, Any] | None = None,
        owner: str | None = None,
    ) -> None:
        """Change what is given of turn `request_id` (`owner` also records this epoch as the
        turn's); `StoreError` if there is no such turn."""
        ...

    async def create_branch(
        self,
        name: str,
        *,
        from_branch: BranchRef = MAIN_BRANCH,
        fork_message_id: str | None = None,
        at_root: bool = False,
        keep_leaf: bool = False,
    ) -> BranchRecord:
        """Create branch `name` forked from `from_branch` at a message of its path (its leaf by
        default; above the first message with `at_root`). With `keep_leaf` its leaf is
        `from_branch`'s leaf and the message only its fork point. See
        docs/branching.md#store-api."""
        ...

    async def rename_branch(self, branch: BranchRef, name: str) -> BranchRecord:
        """Rename a branch; refuses `main` and taken names."""
        ...

    async def delete_branch(self, branch: BranchRef) -> int:
        """Delete a branch and the messages only it reaches; returns how many messages went."""
        ...

    async def trim_path(self, branch: BranchRef, keep: int) -> int:
        """Keep the newest `keep` messages of a branch's path; returns how many were deleted."""
        ...

    async def record_tool_call(
        self, tool_call_id: str, *, tool_name: str, input: Any, owner: str
    ) -> ToolCallRecord | None:
        """Enter a server tool call as `running`; `None` if it is new, else its existing
        record, unchanged."""
        ...

    async def finish_tool_call(
        self, tool_call_id: str, *, output: Any = None, error: str | None = None
    ) -> None:
        """Record a tool call's output (`completed`) or `error` (`error`)."""
        ...

    async def save_incident(
        self, incident_id: str, *, request_id: str, status: str, attempt: int, data: dict[str, Any]
    ) -> None:
        """Create or replace a recovery incident."""
        ...


class TenantStorePort(Protocol):
    """Tenants, their API keys and the secrets their client tokens are signed with
    (docs/security.md). Not fenced: none of it belongs to a conversation's owner.

    Every query and write of a conversation is scoped by its key's tenant; these methods are
    the only ones that name a tenant alone.
    """

    async def create_tenant(
        self,
        tenant_id: str,
        *,
        name: str | None = None,
        quotas: dict[str, int] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> TenantRecord:
        """Create a tenant (`name` defaults to its id). `ValueError` for an invalid id
        (`check_tenant_id`), `TenantExistsError` if it exists."""
        ...

    async def get_tenant(self, tenant_id: str) -> TenantRecord | None:
        """One tenant, or `None`."""
        ...

    async def list_tenants(self) -> list[TenantRecord]:
        """Every tenant, by id."""
        ...

    async def update_tenant(
        self,
        tenant_id: str,
        *,
        name: str | None = None,
        quotas: dict[str, int] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> TenantRecord:
        """Replace what is given (an empty `quotas` or `settings` clears it); returns the
        tenant as it is now. `UnknownTenantError` for an unknown tenant."""
        ...

    async def delete_tenant(self, tenant_id: str) -> TenantRemoval:
        """Delete the tenant, every conversation of it with all its rows, and its keys, all at
        once; returns what went. `UnknownTenantError` for an unknown tenant."""
        ...

    async def count_conversations(self, tenant_id: str) -> int:
        """How many conversations the tenant has (0 for an unknown tenant)."""
        ...

    async def add_api_key(
        self, tenant_id: str, key_id: str, secret_hash: str, *, label: str | None = None
    ) -> ApiKeyRecord:
        """Store an API key (its secret hashed by the caller). `UnknownTenantError` for an
        unknown tenant, `StoreError` if `key_id` is taken."""
        ...

    async def list_api_keys(self, tenant_id: str) -> list[ApiKeyRecord]:
        """The tenant's API keys, revoked ones included, oldest first."""
        ...

    async def revoke_api_key(self, tenant_id: str, key_id: str) -> ApiKeyRecord | None:
        """Revoke the tenant's key `key_id` (idempotent); `None` if the tenant has no such key
        (a key of another tenant is not touched)."""
        ...

    async def add_signing_key(
        self, tenant_id: str, key_id: str, secret: str, *, retire_others_at: datetime | None
    ) -> SigningKeyRecord:
        """Store a signing key; the tenant's other keys retire at `retire_others_at` unless
        they retire sooner (`None`: unchanged). `UnknownTenantError` for an unknown tenant,
        `StoreError` if `key_id` is taken."""
        ...

    async def list_signing_keys(self, tenant_id: str) -> list[SigningKeyRecord]:
        """The tenant's signing keys, oldest first."""
        ...

    async def remove_signing_key(self, tenant_id: str, key_id: str) -> bool:
        """Delete the tenant's signing key `key_id`; False if the tenant has no such key."""
        ...

    async def load_credentials(self) -> Credentials:
        """Every tenant, every API key not revoked and every signing key: what a gateway
        checks credentials against without a database read per request."""
        ...

    async def add_webhook(
        self, tenant_id: str, webhook_id: str, *, url: str, types: list[str], secret: str
    ) -> WebhookRecord:
        """Register a webhook of the tenant. `UnknownTenantError` for an unknown tenant,
        `StoreError` if `webhook_id` is taken."""
        ...

    async def list_webhooks(self, tenant_id: str) -> list[WebhookRecord]:
        """The tenant's webhooks, oldest first."""
        ...

    async def get_webhook(self, tenant_id: str, webhook_id: str) -> WebhookRecord | None:
        """The tenant's webhook `webhook_id`, or `None` (a webhook of another tenant is not
        found)."""
        ...

    async def delete_webhook(self, tenant_id: str, webhook_id: str) -> bool:
        """Delete the tenant's webhook `webhook_id`; False if the tenant has no such one."""
        ...


class StorePort(TenantStorePort, Protocol):
    """Tenants and their keys, conversations, their message trees and branches, turns, tool
    calls and recovery incidents.

    Reads are not fenced and see only committed transactions. Writes to a conversation's
    content go through `transaction`, fenced by the conversation's epoch: `claim` raises the
    epoch for a new owner, waiting for a transaction of the old owner that is open, and from
    then on every transaction under an older epoch raises `FencedError` on entry with nothing
    applied (docs/architecture.md#ownership).
    """

    async def get_or_create_conversation(
        self, key: ConversationKey, *, epoch: int = 0
    ) -> Conversation:
        """The conversation `key`, created (at `epoch`, with an empty `main`) if needed; racing
        creators all get the same one. `UnknownTenantError` for an unknown tenant. A creator
        holding a fresh lease passes its epoch: the new row is claimed for it in the same
        write (`created` tells it so), no `claim` needed."""
        ...

    async def find_conversation(self, key: ConversationKey) -> Conversation | None:
        """The conversation `key`, or `None`."""
        ...

    async def claim(self, conversation_id: int, epoch: int, *, fresh: bool = False) -> None:
        """Raise the conversation's epoch to `epoch` (idempotent); `FencedError` if the stored
        epoch is greater (or equal, with `fresh`), `StoreError` for an unknown conversation."""
        ...

    def transaction(
        self, conversation_id: int, epoch: int
    ) -> AbstractAsyncContextManager[TransactionPort]:
        """Open a fenced write transaction: `FencedError` on entry if the conversation's epoch
        is not `epoch`, `StoreError` if the conversation does not exist."""
        ...

    async def run_transaction(
        self, conversation_id: int, epoch: int, work: Callable[[TransactionPort], Awaitable[T]]
    ) -> T:
        """Run `work` in a fenced write transaction (as `transaction`) and return its result;
        writes queued this way may share a turn of the database's write lock. Once started,
        `work` completes even if the caller is cancelled."""
        ...

    async def load_path(
        self, conversation_id: int, branch: str = MAIN_BRANCH
    ) -> list[StoredMessage]:
        """The messages on branch `branch` (by name), root first; `[]` if unknown or empty."""
        ...

    async def transcript(
        self, key: ConversationKey, branch: str = MAIN_BRANCH
    ) -> list[dict[str, Any]]:
        """The UIMessages on a branch of conversation `key`; `[]` if unknown. Creates
        nothing."""
        ...

    async def list_branches(self, conversation_id: int) -> list[BranchRecord]:
        """Every branch, oldest first (`main` first); `[]` for an unknown conversation."""
        ...

    async def get_branch(self, conversation_id: int, branch: BranchRef) -> BranchRecord | None:
        """One branch by id or name, or `None`."""
        ...

    async def branch_path(
        self, conversation_id: int, branch: BranchRef
    ) -> list[StoredMessage] | None:
        """The messages on a branch (by id or name), root first; `None` for an unknown
        branch."""
        ...

    async def siblings(
        self, conversation_id: int, message_id: str, branch: BranchRef | None = None
    ) -> Siblings | None:
        """The children of the parent of a message, oldest first, its index, and the branch
        that shows each; the message is found on `branch`'s path, else by its id alone when
        that is unique (on `main` when it is not and no branch is named). `None` if not found,
        `UnknownBranchError` for an unknown branch, `AmbiguousMessageError` when no branch
        decides."""
        ...

    async def fork_conversation(
        self, source: ConversationKey, branch: BranchRef, target: ConversationKey
    ) -> Conversation:
        """Copy the path of a branch into a new conversation `target`, as its `main`."""
        ...

    async def recent_request_ids(self, conversation_id: int, *, limit: int = 256) -> list[str]:
        """Request ids of the conversation's newest turns, newest first."""
        ...

    async def get_turn(self, conversation_id: int, request_id: str) -> TurnRecord | None:
        """One turn, or `None`."""
        ...

    async def open_turns(self, conversation_id: int) -> list[TurnRecord]:
        """The conversation's turns still `accepted` or `running`, oldest first."""
        ...

    async def all_open_turns(self, *, limit: int = 1000) -> list[OpenTurn]:
        """Open turns of every conversation, oldest first."""
        ...

    async def heartbeat_turns(self, owner: str) -> int:
        """Stamp every open turn of `owner` as alive now (not fenced); returns how many."""
        ...

    async def get_incident(self, conversation_id: int, incident_id: str) -> IncidentRecord | None:
        """One recovery incident, or `None`."""
        ...

    async def sweep_incidents(self, before: datetime) -> int:
        """Delete recovery incidents unchanged since `before`; returns how many."""
        ...

    async def load_request_context(
        self, conversation_id: int
    ) -> tuple[dict[str, Any] | None, list[Any] | None]:
        """`(last_body, last_client_tools)` as last saved; `(None, None)` if nothing was."""
        ...

    async def close(self) -> None:
        """Release the backend's resources; the store is not used afterwards."""
        ...


if TYPE_CHECKING:
    # Both adapters implement the port (checked by mypy, not at run time).
    from durachat_infra.store._store import Store
    from durachat_infra.store._transaction import FencedTransaction
    from durachat_infra.store.memory import MemoryStore, MemoryTransaction

    _STORES: tuple[type[StorePort], ...] = (Store, MemoryStore)
    _TRANSACTIONS: tuple[type[TransactionPort], ...] = (FencedTransaction, MemoryTransaction)
