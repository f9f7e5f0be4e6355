"""Errors raised by the model layer."""

from __future__ import annotations

__all__ = ["ModelError"]


class ModelError(Exception):
    """A model call failed (provider error, network failure, invalid request, ...).

    Raised by `stream_ui_chunks`, chained (`raise ... from`) to the litellm or provider
    exception that caused it.

    Attributes:
        message: Detailed description for logs. May contain provider output or request details,
            so it must not be shown to end users.
        public_message: A short description that is safe to show to end users.
    """

    def __init__(
        self, message: str, *, public_message: str = "The model failed to respond."
    ) -> None:
        super().__init__(message)
        self.message = message
        self.public_message = public_message
