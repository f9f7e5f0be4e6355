"""A conversation's transcript on one branch: the in-memory path and its fenced persistence.

The transcript is the path from the root of the message tree to the branch's leaf. Changes
follow the reference's persistence rules (reconcile, sanitize, upsert) mapped onto the tree: a
request that carries a truncated transcript (regenerate, an edit that keeps the id) moves the
leaf back instead of deleting rows, so nothing is lost and the visible transcript has no stale
messages.

Every change is made in memory at once and returned as a `Change`: the SQL operations that make
it durable, applied later in one fenced transaction. The owner applies changes in the order it
made them, so the database always follows the same history as memory, a little behind. That
keeps SQL off the path to a reply's first chunk.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from durachat.messages import (
    reconcile_messages,
    resolve_tool_merge_id,
    sanitize_message,
    tool_call_ids,
)
from durachat.types import UIMessage
from durachat_infra.store import MAIN_BRANCH, BranchRef, FencedTransaction


@dataclass(slots=True, eq=False)
class _Node:
    message: UIMessage
    encoded: str
    pk: int | None = None
    """Row id, known once the node's insert has been applied."""


@dataclass(slots=True)
class _Op:
    kind: Literal["update", "insert", "leaf", "reparent", "clear", "trim"]
    node: _Node | None = None
    parent: _Node | None = None
    nodes: list[_Node] = field(default_factory=list)
    keep: int = 0


def _encode(message: UIMessage) -> str:
    return json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _pk(node: _Node | None) -> int | None:
    if node is None:
        return None
    assert node.pk is not None, "a change was applied out of order"
    return node.pk


@dataclass(slots=True)
class Change:
    """SQL operations that make one in-memory change durable (apply in order)."""

    branch: BranchRef
    ops: list[_Op] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.ops)

    async def apply(self, tx: FencedTransaction) -> None:
        """Write the change inside a fenced transaction."""
        for op in self.ops:
            if op.kind == "update":
                assert op.node is not None
                await tx.update_message(_pk(op.node) or 0, op.node.message)
            elif op.kind == "insert":
                pks = await tx.insert_chain(_pk(op.parent), [n.message for n in op.nodes])
                for node, pk in zip(op.nodes, pks, strict=True):
                    node.pk = pk
            elif op.kind == "leaf":
                await tx.set_leaf(self.branch, _pk(op.node))
            elif op.kind == "reparent":
                assert op.node is not None
                await tx.reparent(_pk(op.node) or 0, _pk(op.parent))
            elif op.kind == "trim":
                await tx.trim_path(self.branch, op.keep)
            else:
                await tx.clear()


class Transcript:
    """The messages of one branch, kept in memory; changes come back as `Change`s to apply."""

    def __init__(
        self,
        nodes: list[tuple[int, UIMessage]],
        *,
        branch: BranchRef = MAIN_BRANCH,
        sanitize: Callable[[UIMessage], UIMessage] = sanitize_message,
    ) -> None:
        self._branch = branch
        self._sanitize = sanitize
        self._nodes = [_Node(m, _encode(m), pk) for pk, m in nodes]

    @property
    def messages(self) -> list[UIMessage]:
        """The visible transcript."""
        return [n.message for n in self._nodes]

    def index_of(self, message_id: str) -> int | None:
        """Position of a message on the path."""
        for i in range(len(self._nodes) - 1, -1, -1):
            if self._nodes[i].message.get("id") == message_id:
                return i
        return None

    def persist(
        self, incoming: list[UIMessage], *, truncate: bool
    ) -> tuple[list[UIMessage], Change]:
        """Reconcile a client's transcript into this one; returns the reconciled incoming list.

        With `truncate` (chat requests), an incoming list that is a prefix of the stored path
        (regenerate, or an edit that keeps the message id) becomes the new path: the leaf moves
        back to its last message; the messages after it stay in the tree, off the path. A list
        with new messages only updates the known ones and appends the new ones after the leaf,
        as the reference does. Without `truncate` (client `setMessages` sync) nothing ever
        leaves the path.
        """
        change = Change(self._branch)
        server = self.messages
        merged = reconcile_messages(incoming, server)
        resolved: list[UIMessage] = []
        for message in merged:
            # Only assistant messages with tool calls can adopt another message's id.
            if message.get("role") != "assistant" or not tool_call_ids(message):
                resolved.append(message)
                continue
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
                self._update(change, i, resolved[i])
        rest = resolved[common:]
        if truncate and not rest and common < len(self._nodes):
            del self._nodes[common:]
            change.ops.append(_Op("leaf", node=self._leaf))
            return merged, change
        fresh: list[UIMessage] = []
        for message in rest:
            index = self.index_of(str(message.get("id")))
            if index is None:
                fresh.append(message)
            elif not _is_stale_placeholder(message, self._nodes[index].message):
                self._update(change, index, message)
        if fresh:
            self._append(change, fresh)
            change.ops.append(_Op("leaf", node=self._leaf))
        return merged, change

    def put_reply(self, message: UIMessage, *, anchor: str | None) -> Change:
        """Add an assistant reply: update it in place if it is on the path already, else insert
        it right after `anchor` (the message it answers), splicing it into the path."""
        change = Change(self._branch)
        index = self.index_of(str(message["id"]))
        if index is not None:
            self._update(change, index, message)
            return change
        at = self.index_of(anchor) if anchor is not None else None
        if at is None or at == len(self._nodes) - 1:
            self._append(change, [message])
            change.ops.append(_Op("leaf", node=self._leaf))
            return change
        stored = self._sanitize(message)
        node = _Node(stored, _encode(stored))
        change.ops.append(_Op("insert", parent=self._nodes[at], nodes=[node]))
        change.ops.append(_Op("reparent", node=self._nodes[at + 1], parent=node))
        self._nodes.insert(at + 1, node)
        return change

    def replace_tail(self, count: int, message: UIMessage) -> Change:
        """Put `message` in place of the last `count` messages of the path (they stay in the
        tree, off the path)."""
        change = Change(self._branch)
        del self._nodes[len(self._nodes) - count :]
        self._append(change, [message])
        change.ops.append(_Op("leaf", node=self._leaf))
        return change

    def trim(self, keep: int) -> Change:
        """Keep only the newest `keep` messages of the path; older ones are deleted, with
        anything only they lead to, unless another branch still reaches them."""
        change = Change(self._branch)
        if keep <= 0 or len(self._nodes) <= keep:
            return change
        del self._nodes[: len(self._nodes) - keep]
        change.ops.append(_Op("trim", keep=keep))
        return change

    @property
    def branch(self) -> BranchRef:
        """The branch this transcript is the path of (`main`, or a branch id)."""
        return self._branch

    def clear(self) -> Change:
        """On `main`, remove every message of the conversation (and every other branch); on
        another branch, empty that branch only."""
        self._nodes.clear()
        if self._branch == MAIN_BRANCH:
            return Change(self._branch, [_Op("clear")])
        return Change(self._branch, [_Op("leaf", node=None)])

    @property
    def _leaf(self) -> _Node | None:
        return self._nodes[-1] if self._nodes else None

    def _update(self, change: Change, index: int, message: UIMessage) -> None:
        node = self._nodes[index]
        # Clients send the whole transcript with every request, mostly exactly as stored; a
        # plain comparison spares sanitising and encoding every message every time.
        if message == node.message:
            return
        stored = self._sanitize(message)
        encoded = _encode(stored)
        if encoded == node.encoded:
            return
        node.message, node.encoded = stored, encoded
        change.ops.append(_Op("update", node=node))

    def _append(self, change: Change, messages: list[UIMessage]) -> None:
        nodes = [_Node(s, _encode(s)) for s in (self._sanitize(m) for m in messages)]
        change.ops.append(_Op("insert", parent=self._leaf, nodes=nodes))
        self._nodes.extend(nodes)


def _is_stale_placeholder(incoming: UIMessage, stored: UIMessage) -> bool:
    """A client's still-empty copy of an assistant reply the server has already filled in
    (a send made while that reply streamed). It must not wipe the stored reply."""
    return (
        incoming.get("role") == "assistant"
        and not incoming.get("parts")
        and bool(stored.get("parts"))
    )
