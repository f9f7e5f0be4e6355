"""`message_concurrency`: what a send does while the previous reply is still streaming.

Serve it (from the repository root)::

    DURACHAT_AGENTS=durachat.demo,examples.concurrency_agents make run

Both agents answer with the model (the scripted model echoes; a message containing `slow`
streams for five seconds, long enough to send more while it runs).
"""

from __future__ import annotations

from durachat import Agent


class LiveSearchAgent(Agent):
    """Served as `live-search-agent`. Only the newest question matters: every send made while a
    reply streams is stored at once, but when the running reply ends only the newest of them is
    answered (it sees all of them in its transcript); the others end as `skipped`."""

    system_prompt = "Answer the user's latest question."
    message_concurrency = "latest"


class BurstyChatAgent(Agent):
    """Served as `bursty-chat-agent`. People who send several short messages in a row get one
    answer: a send made while a reply streams waits until 500 ms after it was sent, and is
    skipped if a newer one came in meanwhile."""

    message_concurrency = {"strategy": "debounce", "debounce_ms": 500}
