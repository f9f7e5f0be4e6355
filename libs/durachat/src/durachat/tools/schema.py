"""JSON schemas of tool inputs, shaped for OpenAI-style function calling.

Pydantic's `model_json_schema()` is a faithful JSON Schema, but models do better with less: the
generated `title` of every model and field only repeats names, and an object schema that does not
say `additionalProperties: false` invites the model to invent fields. `function_parameters` makes
that change and nothing else, so the schema still describes exactly what the model validates.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Final, TypeGuard

from pydantic import BaseModel

from durachat.types import JSONDict

__all__ = ["TOOL_NAME_PATTERN", "clean_json_schema", "function_parameters", "is_valid_tool_name"]

TOOL_NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""The function names OpenAI accepts; a single bad name makes the provider reject the call."""

# Keywords whose value maps arbitrary names (property names, definition names) to schemas: the
# names are data, so a property called "title" must survive.
_SCHEMA_MAPS: Final = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
_SCHEMA_LISTS: Final = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})
_SCHEMA_VALUES: Final = frozenset(
    {
        "items",
        "additionalItems",
        "additionalProperties",
        "unevaluatedProperties",
        "unevaluatedItems",
        "propertyNames",
        "contains",
        "not",
        "if",
        "then",
        "else",
    }
)


def is_valid_tool_name(name: object) -> TypeGuard[str]:
    """Tell whether `name` is usable as a function name (`^[A-Za-z0-9_-]{1,64}$`)."""
    return isinstance(name, str) and TOOL_NAME_PATTERN.fullmatch(name) is not None


def clean_json_schema(schema: JSONDict) -> JSONDict:
    """Return a copy of `schema` prepared for function calling.

    * Every `title` keyword is removed (keywords only: a property named `title`, or a `title`
      inside a `default`, `enum`, `const` or `examples` value, is kept).
    * Every schema with `properties` and no `additionalProperties` gets
      `additionalProperties: false`. An explicit value (`true` from `extra="allow"`, a value
      schema from `dict[str, X]`) is kept, and free-form objects without `properties` are left
      open.

    Args:
        schema: A JSON schema; not modified.

    Returns:
        A new schema sharing nothing with `schema`.
    """
    cleaned: JSONDict = _clean(schema)
    return cleaned


def function_parameters(model: type[BaseModel]) -> JSONDict:
    """Return the function-calling `parameters` schema of a pydantic input model.

    Args:
        model: The tool's input model.

    Returns:
        `clean_json_schema(model.model_json_schema())`: an object schema; nested models stay in
        `$defs` and are referenced with `$ref`.
    """
    return clean_json_schema(model.model_json_schema())


def _clean(node: Any) -> Any:
    if not isinstance(node, dict):
        # Boolean schemas (`true` / `false`) have no keywords to clean.
        return node
    out: JSONDict = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _clean(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_clean(sub) for sub in value]
        elif key in _SCHEMA_VALUES:
            out[key] = [_clean(sub) for sub in value] if isinstance(value, list) else _clean(value)
        else:
            out[key] = copy.deepcopy(value)
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out
