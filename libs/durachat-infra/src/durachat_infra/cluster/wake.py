"""Asking a conversation's owner to pick it up now (recover what a former owner left)."""

from __future__ import annotations

import logging

import httpx

from durachat_infra.cluster.membership import ClusterView
from durachat_infra.keys import conversation_tag
from durachat_infra.store import ConversationKey

log = logging.getLogger(__name__)

RECOVER_PATH = "/internal/v1/recover"
"""The shard endpoint that activates a conversation, recovering its unfinished turns."""


async def wake_owner(
    view: ClusterView, key: ConversationKey, http: httpx.AsyncClient, *, exclude: str = ""
) -> bool:
    """Ask the shard that owns `key` (by the current membership) to activate it; activation
    recovers any turn a former owner left unfinished. True if the owner accepted.

    `exclude` names a shard that must not be asked (a draining shard waking its successor).
    """
    owner = view.owner(conversation_tag(key.tenant, key.agent, key.name))
    if owner is None or owner.id == exclude:
        return False
    try:
        response = await http.post(
            f"http://{owner.address}{RECOVER_PATH}",
            json={"tenant": key.tenant, "agent": key.agent, "name": key.name},
        )
    except httpx.HTTPError as exc:
        log.info("could not reach %s to recover %s: %s", owner.id, key, exc)
        return False
    if response.status_code != 200:
        log.info("%s did not take %s yet: %s", owner.id, key, response.text[:200])
        return False
    return True
