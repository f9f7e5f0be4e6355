"""The local transcript: user message ids, and the transcript an edit sends."""

from __future__ import annotations

import secrets
import string
from collections.abc import Sequence
from typing import Final

from durachat.client.errors import ClientError
from durachat.types import UIMessage

_ID_ALPHABET: Final = string.ascii_letters + string.digits


def new_message_id() -> str:
    """Allocate a user message id the way the AI SDK's `generateId()` does.

    Returns:
        16 random characters from `A-Za-z0-9`.
    """
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(16))


def edit_transcript(
    messages: Sequence[UIMessage], message_id: str, text: str
) -> tuple[list[UIMessage], frozenset[str]]:
    """The transcript an edit sends, like the AI SDK's `sendMessage({text, messageId})`.

    Args:
        messages: The transcript, oldest first.
        message_id: The id of the user message to edit (the one nearest the end, if the id
            occurs twice).
        text: The message's new text.

    Returns:
        The messages before it, then the edited message (same id, one text part); and the ids
        of the messages the edit drops (those after it).

    Raises:
        ClientError: `unknown_message` if the transcript has no message `message_id`;
            `not_a_user_message` if that message is not a user message.
    """
    index = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("id") == message_id),
        None,
    )
    if index is None:
        raise ClientError("unknown_message", f"the transcript has no message {message_id!r}")
    role = messages[index].get("role")
    if role != "user":
        raise ClientError(
            "not_a_user_message", f"the message {message_id!r} is not a user message ({role})"
        )
    edited: UIMessage = {
        "id": message_id,
        "role": "user",
        "parts": [{"type": "text", "text": text}],
    }
    dropped = frozenset(str(m.get("id")) for m in messages[index + 1 :] if m.get("id") is not None)
    return [*messages[:index], edited], dropped
