"""Client tools declared by the browser (`clientTools` in a chat request or a tool result).

Each entry is `{name, description?, parameters?: JSONSchema}`
(docs/agents.md#dynamic-client-tools). They become execute-less `Tool`s: the model may call them
and the client answers with `cf_agent_tool_result`. Entries are wire data, so a bad one is
skipped (with its reason reported) instead of failing the turn: a single invalid function
definition would make the provider reject the whole model call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from durachat.tools.schema import is_valid_tool_name
from durachat.tools.tool import Tool
from durachat.types import JSONDict

__all__ = ["DEFAULT_CLIENT_TOOL_PARAMETERS", "client_tools_from_schemas"]

DEFAULT_CLIENT_TOOL_PARAMETERS: Final[JSONDict] = {"type": "object", "properties": {}}
"""The schema of a client tool declared without `parameters` (an input with no fields)."""


def client_tools_from_schemas(
    client_tools: Iterable[object] | None, *, skipped: list[str] | None = None
) -> list[Tool]:
    """Build execute-less tools from client tool schemas.

    Args:
        client_tools: The request's `clientTools` (None or empty: no tools).
        skipped: If given, a reason is appended for every entry left out, as
            `"clientTools[<index>]: <reason>"`. An entry is left out when it is not an object,
            its `name` is not a valid function name (`^[A-Za-z0-9_-]{1,64}$`), its
            `description` is present but not a string, or its `parameters` is present but not
            an object schema (a dict with `"type": "object"`). When two entries share a name
            the later one wins, as in the reference, and the earlier one is reported.

    Returns:
        One client tool per distinct valid name, in order of first appearance. `parameters`
        is used verbatim (copied); a missing one becomes `DEFAULT_CLIENT_TOOL_PARAMETERS`, a
        missing description `""`.
    """
    tools: dict[str, tuple[int, Tool]] = {}
    for index, entry in enumerate(client_tools or ()):
        result = _client_tool(entry)
        if isinstance(result, str):
            _report(skipped, index, result)
            continue
        earlier = tools.get(result.name)
        if earlier is not None:
            _report(
                skipped,
                earlier[0],
                f"{result.name!r} is replaced by clientTools[{index}], which has the same name",
            )
        tools[result.name] = (index, result)
    return [entry for _, entry in tools.values()]


def _client_tool(entry: object) -> Tool | str:
    """The tool an entry declares, or why it declares none."""
    if not isinstance(entry, dict):
        return "not an object"
    name = entry.get("name")
    if not is_valid_tool_name(name):
        return f"name {name!r} is not a valid function name (^[A-Za-z0-9_-]{{1,64}}$)"
    description = entry.get("description")
    if description is not None and not isinstance(description, str):
        return f"{name!r}: description must be a string"
    parameters = entry.get("parameters")
    if parameters is None:
        parameters = DEFAULT_CLIENT_TOOL_PARAMETERS
    elif not isinstance(parameters, dict) or parameters.get("type") != "object":
        return f'{name!r}: parameters must be a JSON schema with "type": "object"'
    return Tool(name, description=description or "", parameters=parameters)


def _report(skipped: list[str] | None, index: int, reason: str) -> None:
    if skipped is not None:
        skipped.append(f"clientTools[{index}]: {reason}")
