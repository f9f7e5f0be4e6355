"""The interface callers enqueue jobs through."""

from __future__ import annotations

from typing import Any, Protocol


class JobQueue(Protocol):
    """Enqueues named jobs with JSON-serialisable arguments."""

    async def enqueue(self, name: str, *, job_id: str | None = None, **kwargs: Any) -> bool:
        """Queue job `name`; with `job_id`, a job already queued under that id is not repeated.

        Returns whether a new job was queued.
        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...
