"""How the protocol names the branches of a conversation (docs/branching.md)."""

from __future__ import annotations

from typing import Final, TypeAlias

MAIN_BRANCH: Final = "main"
"""The branch every conversation has from its creation, viewed when no other is named. Frames,
event-log entries and stream states name it `main`, other branches by their id."""

BranchRef: TypeAlias = int | str
"""A branch: its id (`int`) or its name (`str`). The client, and the routes and frames that
take a branch, also read a string of digits as an id."""
