"""Turning what a tool returns into the JSON value that goes on the wire and into storage."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

__all__ = ["ToolOutputError", "to_json_output"]


class ToolOutputError(ValueError):
    """A tool produced a value that cannot be represented as JSON."""


def to_json_output(value: object) -> Any:
    """Convert a tool's output to a JSON value.

    Args:
        value: What the tool returned or yielded.

    Returns:
        `value.model_dump(mode="json")` for a pydantic model; otherwise `value` converted by
        pydantic's JSON rules (models nested in containers dumped the same way, tuples and sets
        as lists, datetimes and UUIDs as strings, dict keys as strings).

    Raises:
        ToolOutputError: `value` holds something with no JSON form (an arbitrary object).
    """
    try:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json")
        # by_alias=False: the same field names as `model_dump` for nested models.
        return to_jsonable_python(value, by_alias=False)
    except PydanticSerializationError as exc:
        raise ToolOutputError(f"Tool output is not JSON-serialisable: {exc}") from exc
