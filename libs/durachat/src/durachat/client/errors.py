"""The error type of the chat client."""

from __future__ import annotations


class ClientError(Exception):
    """A failure reported by the server or met by the client.

    Attributes:
        code: A short machine-readable code: the server's `durachat_error` code (for example
            `invalid_frame`), `stream_error` for an error frame of a reply, or one of the
            client's own: `connect_failed`, `http_error`, `disconnected`, `closed`, `lost`,
            `timeout`, `nothing_to_regenerate`, `unknown_message` and `not_a_user_message` (an
            edit of a message the transcript does not have, or of a message that is not the
            user's), `left_branch` (a reply still running on a branch the client stopped
            viewing). Branches: `unknown_branch` (from the server, or from `get-messages`);
            the branch operations raise the code of the server's answer (`unknown_branch`,
            `unknown_message`, `branch_exists`, `main_branch`, `conversation_exists`,
            `invalid_branch_name`, `invalid_request`, `unavailable`, `database_unavailable`,
            …), or `server_error` for an answer they cannot read.
        message: A human-readable description.
        status: The HTTP status behind a `connect_failed` or `http_error`, if there was one, or
            the status of a branch operation's answer (404, 409, …).
    """

    def __init__(self, code: str, message: str, *, status: int | None = None) -> None:
        """Create the error.

        Args:
            code: The machine-readable code.
            message: The human-readable description.
            status: The HTTP status the server answered, if any.
        """
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    def __repr__(self) -> str:
        status = "" if self.status is None else f", status={self.status!r}"
        return f"ClientError(code={self.code!r}, message={self.message!r}{status})"
