"""Where a chat lives: its WebSocket and HTTP URLs, branch references, and its transcript over
HTTP (`get-messages`, see docs/protocol.md#http-routes-gateway)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from durachat.client.errors import ClientError
from durachat.protocol import MAIN_BRANCH, BranchRef
from durachat.types import UIMessage

HTTP_TIMEOUT: Final = 30.0
"""The timeout of the client's HTTP requests, in seconds."""


def socket_url(
    base_url: str,
    agent: str,
    name: str,
    connection_id: str,
    branch: BranchRef | None = None,
) -> str:
    """Build the WebSocket URL of a chat.

    Args:
        base_url: `http(s)://host[:port][/prefix]` or `ws(s)://…`.
        agent: The agent namespace, kebab-case (`chat-agent`).
        name: The chat instance name.
        connection_id: The connection id, sent as `_pk`.
        branch: The branch the socket views (its id or name); `main` when None.

    Returns:
        `ws(s)://host/agents/{agent}/{name}?_pk={connection_id}`, with `&branch={branch}` for
        a branch other than `main`.
    """
    scheme, netloc, path = _split(base_url)
    ws_scheme = {"http": "ws", "https": "wss"}.get(scheme, scheme)
    query = f"_pk={quote(connection_id)}"
    ref = branch_query(branch)
    if ref is not None:
        query += f"&branch={quote(ref, safe='')}"
    return urlunsplit((ws_scheme, netloc, _chat_path(path, agent, name), query, ""))


def branch_query(branch: BranchRef | None) -> str | None:
    """The `?branch=` value naming a branch, or None for `main` (which needs none).

    Args:
        branch: A branch id or name; None, `""` and `"main"` mean `main`.

    Returns:
        The id or name as a string, or None for `main`.

    Raises:
        TypeError: if `branch` is neither a string nor an int.
    """
    if branch is None:
        return None
    if isinstance(branch, bool) or not isinstance(branch, (str, int)):
        raise TypeError(f"a branch is an id or a name, not {branch!r}")
    ref = str(branch)
    return None if ref in ("", MAIN_BRANCH) else ref


def is_branch(record: Mapping[str, Any], branch: BranchRef) -> bool:
    """Whether a branch record (`BranchOut`) is the branch a reference names.

    Args:
        record: `{"id", "name", …}`, as `ChatClient.branches` returns them.
        branch: A branch id (an int, or a string of digits) or name.

    Returns:
        True if `branch` is the record's id (digits) or its name (anything else).
    """
    ref = str(branch)
    if ref.isdigit() and ref.isascii():
        return str(record.get("id")) == ref
    return record.get("name") == ref


def http_url(base_url: str, agent: str, name: str, suffix: str = "") -> str:
    """Build the HTTP URL of a chat, or of a sub-path of it.

    Args:
        base_url: `http(s)://host[:port][/prefix]` or `ws(s)://…`.
        agent: The agent namespace.
        name: The chat instance name.
        suffix: A sub-path such as `/get-messages`.

    Returns:
        `http(s)://host/agents/{agent}/{name}{suffix}`.
    """
    scheme, netloc, path = _split(base_url)
    http_scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    return urlunsplit((http_scheme, netloc, _chat_path(path, agent, name) + suffix, "", ""))


def _split(base_url: str) -> tuple[str, str, str]:
    parts = urlsplit(base_url if "://" in base_url else f"http://{base_url}")
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        raise ValueError(f"not an http(s) or ws(s) URL: {base_url!r}")
    return parts.scheme, parts.netloc, parts.path.rstrip("/")


def _chat_path(prefix: str, agent: str, name: str) -> str:
    return f"{prefix}/agents/{quote(agent, safe='')}/{quote(name, safe='')}"


async def fetch_history(
    base_url: str,
    agent: str,
    name: str,
    *,
    branch: BranchRef | None = None,
    headers: Mapping[str, str] | None = None,
    http: httpx.AsyncClient | None = None,
) -> list[UIMessage]:
    """Fetch a chat's persisted transcript (`GET /agents/{agent}/{name}/get-messages`).

    Args:
        base_url: The server's base URL.
        agent: The agent namespace.
        name: The chat instance name.
        branch: The branch to read (its id or name); `main` when None.
        headers: Extra request headers (for example authentication).
        http: An HTTP client to use; a temporary one by default.

    Returns:
        The transcript (the branch's path), oldest first.

    Raises:
        ClientError: `unknown_branch` if the conversation has no such branch; `http_error` if
            the request fails or the answer is not a list.
    """
    url = http_url(base_url, agent, name, "/get-messages")
    ref = branch_query(branch)
    params = {"branch": ref} if ref is not None else None
    try:
        if http is None:
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as temporary:
                response = await temporary.get(url, params=params, headers=dict(headers or {}))
        else:
            response = await http.get(url, params=params, headers=dict(headers or {}))
    except httpx.HTTPError as exc:
        raise ClientError("http_error", f"GET {url} failed: {exc}") from exc
    if response.status_code != 200:
        coded = _error_body(response)
        if coded is not None and coded[0] == "unknown_branch":
            raise ClientError(coded[0], coded[1], status=response.status_code)
        raise ClientError(
            "http_error",
            f"GET {url} answered {response.status_code}: {response.text.strip()}",
            status=response.status_code,
        )
    try:
        messages = response.json()
    except ValueError as exc:
        raise ClientError("http_error", f"GET {url} did not answer JSON") from exc
    if not isinstance(messages, list):
        raise ClientError("http_error", f"GET {url} did not answer a list of messages")
    return [m for m in messages if isinstance(m, dict)]


def _error_body(response: httpx.Response) -> tuple[str, str] | None:
    """The `{"code", "message"}` of a JSON error answer, if it is one."""
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("code"), str):
        return None
    message = body.get("message")
    return body["code"], message if isinstance(message, str) else body["code"]
