"""Load testing chat servers with Locust (`pip install durachat[load]`).

The simulated users (`ChatUser`, `ResumeUser`, ...) speak the agents chat protocol over a
WebSocket, so they load any server that speaks it; `durachat load run` starts Locust for
them and writes a report. See docs/load-testing.md.

The user classes are imported on first use: importing Locust monkey-patches the process with
gevent, which only a Locust process wants (`durachat.loadtest.agent`, served by shards, and the
`durachat load` front end import nothing of Locust).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durachat.loadtest.base import ChatSocketUser
    from durachat.loadtest.feed import EventFeedUser
    from durachat.loadtest.users import (
        BranchUser,
        ChatUser,
        IdleTabUser,
        LongReplyUser,
        ResumeUser,
        SecondTabUser,
        ToolUser,
    )

_USERS = {
    "ChatSocketUser": "durachat.loadtest.base",
    "BranchUser": "durachat.loadtest.users",
    "ChatUser": "durachat.loadtest.users",
    "EventFeedUser": "durachat.loadtest.feed",
    "IdleTabUser": "durachat.loadtest.users",
    "LongReplyUser": "durachat.loadtest.users",
    "ResumeUser": "durachat.loadtest.users",
    "SecondTabUser": "durachat.loadtest.users",
    "ToolUser": "durachat.loadtest.users",
}

__all__ = [
    "BranchUser",
    "ChatSocketUser",
    "ChatUser",
    "EventFeedUser",
    "IdleTabUser",
    "LongReplyUser",
    "ResumeUser",
    "SecondTabUser",
    "ToolUser",
]


def __getattr__(name: str) -> Any:
    module = _USERS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
