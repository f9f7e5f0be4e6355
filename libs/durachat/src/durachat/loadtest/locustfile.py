"""durachat's own locustfile: every simulated user of `durachat.loadtest`.

    locust -f "$(durachat load locustfile)" --host http://127.0.0.1:8080 ChatUser ResumeUser

Pick the user classes by name (all of them by default, with their weights), or write your own
locustfile that imports them (docs/load-testing.md).
"""

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

__all__ = [
    "BranchUser",
    "ChatUser",
    "EventFeedUser",
    "IdleTabUser",
    "LongReplyUser",
    "ResumeUser",
    "SecondTabUser",
    "ToolUser",
]
