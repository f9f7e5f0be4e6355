"""A conversation's transcript on one branch: the in-memory path and its fenced persistence.

The transcript is the path from the root of the message tree to the branch's leaf. Writes follow
the reference's persistence rules (reconcile, sanitize, upsert) mapped onto the tree: a request
that carries a truncated transcript (regenerate, edit) moves the leaf back instead of deleting
rows, so nothing is lost and the visible transcript has no stale messages.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass

from durachat.messages import reconcile_messages, resolve_tool_merge_id, sanitize_message
from durachat.types import UIMessage
from durachat_infra.store import FencedTransaction, Store

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Node:
    pk: int
    message: UIMessage
    encoded: str


def _encode(message: UIMessage) -> str:
    return json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Transcript:
    """The messages of one branch, cached in memory and written through to SQL."""

    def __init__(
        self,
        store: Store,
        conversation_id: int,
        epoch: int,
        nodes: list[tuple[int, UIMessage]],
        *,
        branch: str = "main",
    ) -> None:
        self._store = store
        self._conversation_id = conversation_id
        self._epoch = epoch
        self._branch = branch
        self._nodes = [_Node(pk, m, _encode(m)) for pk, m in nodes]

    @property
    def messages(self) -> list[UIMessage]:
        """The visible transcript."""
        return [n.message for n in self._nodes]

    @property
    def leaf_pk(self) -> int | None:
        """Row id of the last message, None when empty."""
        return self._nodes[-1].pk if self._nodes else None

    def index_of(self, message_id: str) -> int | None:
        """Position of a message on the path."""
        for i in range(len(self._nodes) - 1, -1, -1):
            if self._nodes[i].message.get("id") == message_id:
                return i
        return None

    async def reload(self) -> None:
        """Re-read the path from SQL (after a failed write left the cache unsure)."""
        stored = await self._store.load_path(self._conversation_id, self._branch)
        self._nodes = [_Node(m.pk, m.message, _encode(m.message)) for m in stored]

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[FencedTransaction]:
        """One fenced transaction for this conversation. The in-memory path follows the writes
        made through this transcript; if the transaction fails, it is re-read from SQL."""
        try:
            async with self._store.transaction(self._conversation_id, self._epoch) as tx:
                yield tx
        except BaseException:
            await _quietly(self.reload())
            raise

    async def persist(
        self, tx: FencedTransaction, incoming: list[UIMessage], *, truncate: bool
    ) -> list[UIMessage]:
        """Reconcile and store a client's transcript; returns the reconciled incoming list.

        With `truncate` (chat requests), an incoming list that is a prefix of the stored path
        (regenerate, or an edit that keeps the message id) becomes the new path: the leaf moves
        back to its last message; the messages after it stay in the tree, off the path. A list
        with new messages only updates the known ones and appends the new ones after the leaf,
        as the reference does. Without `truncate` (client `setMessages` sync) nothing ever
        leaves the path.
        """
        server = self.messages
        merged = reconcile_messages(incoming, server)
        resolved: list[UIMessage] = []
        for message in merged:
            message_id = resolve_tool_merge_id(message, server)
            resolved.append(
                message if message_id == message.get("id") else {**message, "id": message_id}
            )
        common = 0
        while (
            common < len(resolved)
            and common < len(self._nodes)
            and resolved[common].get("id") == self._nodes[common].message.get("id")
        ):
            common += 1
        # Bodies of messages the lists agree on.
        for i in range(common):
            if not _is_stale_placeholder(resolved[i], self._nodes[i].message):
                await self._update(tx, i, resolved[i])
        rest = resolved[common:]
        if truncate and not rest and common < len(self._nodes):
            del self._nodes[common:]
            await tx.set_leaf(self._branch, self.leaf_pk)
            return merged
        fresh: list[UIMessage] = []
        for message in rest:
            index = self.index_of(str(message.get("id")))
            if index is None:
                fresh.append(message)
            elif not _is_stale_placeholder(message, self._nodes[index].message):
                await self._update(tx, index, message)
        if fresh:
            await self._insert(tx, self.leaf_pk, fresh)
            await tx.set_leaf(self._branch, self.leaf_pk)
        return merged

    async def put_reply(
        self, tx: FencedTransaction, message: UIMessage, *, anchor: str | None
    ) -> None:
        """Store an assistant reply: update it in place if it is on the path already, else
        insert it right after `anchor` (the message it answers), splicing it into the path."""
        index = self.index_of(str(message["id"]))
        if index is not None:
            await self._update(tx, index, message)
            return
        at = self.index_of(anchor) if anchor is not None else None
        if at is None or at == len(self._nodes) - 1:
            await self._insert(tx, self.leaf_pk, [message])
            await tx.set_leaf(self._branch, self.leaf_pk)
            return
        stored = sanitize_message(message)
        (pk,) = await tx.insert_chain(self._nodes[at].pk, [stored])
        await tx.reparent(self._nodes[at + 1].pk, pk)
        self._nodes.insert(at + 1, _Node(pk, stored, _encode(stored)))

    async def clear(self, tx: FencedTransaction) -> None:
        """Delete every message of the conversation."""
        await tx.clear()
        self._nodes.clear()

    async def _update(self, tx: FencedTransaction, index: int, message: UIMessage) -> None:
        stored = sanitize_message(message)
        encoded = _encode(stored)
        node = self._nodes[index]
        if encoded == node.encoded:
            return
        await tx.update_message(node.pk, stored)
        node.message, node.encoded = stored, encoded

    async def _insert(
        self, tx: FencedTransaction, parent: int | None, messages: list[UIMessage]
    ) -> None:
        stored = [sanitize_message(m) for m in messages]
        pks = await tx.insert_chain(parent, stored)
        for pk, message in zip(pks, stored, strict=True):
            self._nodes.append(_Node(pk, message, _encode(message)))


async def _quietly(step: Awaitable[None]) -> None:
    try:
        await step
    except Exception:
        log.warning("could not reload the transcript", exc_info=True)


def _is_stale_placeholder(incoming: UIMessage, stored: UIMessage) -> bool:
    """A client's still-empty copy of an assistant reply the server has already filled in
    (a send made while that reply streamed). It must not wipe the stored reply."""
    return (
        incoming.get("role") == "assistant"
        and not incoming.get("parts")
        and bool(stored.get("parts"))
    )
