"""Tools: definitions, execution, client tools and the tool part state rules.

Pure library code: nothing here does I/O or keeps state between calls. Tool calls arrive as
UI chunks from `durachat.models.stream_ui_chunks`, and everything produced here is a UI chunk
or a UI part, so a turn engine plugs it in without translation.

Defining tools::

    class CityInput(BaseModel):
        city: str

    @tool(description="Current weather in a city", input=CityInput)
    async def get_weather(args: CityInput) -> Weather: ...

    @tool(description="Delete a file", input=PathInput, needs_approval=True)
    def delete_file(args: PathInput, context: ToolContext) -> str: ...

    pick_color = tool("pick_color", description="Ask the user for a color", input=ColorInput)
    # no execute: a client tool, answered by the browser with cf_agent_tool_result

Turn engine recipe (one model step; `agent_tools` is the agent's list of tools):

1. Tools of the turn::

       skipped: list[str] = []
       tools = ToolSet(agent_tools).merged(client_tools_from_schemas(turn.client_tools,
                                                                     skipped=skipped))

   (log `skipped`; the agent's tools win name clashes).
2. Stream the model with `tools=tools.for_model() or None`, forwarding every chunk and
   collecting the `tool-input-available` chunks (`toolCallId`, `toolName`, `input`).
3. For each collected call, `await tools.decide(name, input)`:

   * `EXECUTE`: record the call in the tool-execution ledger, then
     `async for event in run_tool(tools[name], call_id, input, abort=turn.abort,
     messages=...)` and stream `event.to_chunk()`; record `event` in the ledger when
     `event.final`.
   * `REQUEST_APPROVAL`: stream `approval_request_chunk(call_id)`.
   * `AWAIT_CLIENT`: nothing; the part stays `input-available`.
   * `UNAVAILABLE`: stream `tools.unavailable(call_id, name).to_chunk()`.

   If every call was executed (or unavailable), run the next step with the tool results in
   the transcript (`to_chat_messages` turns the parts into tool messages); otherwise end the
   turn: it waits on the client.
4. A continuation first runs `approved_tool_parts(last_assistant["parts"])` (input from the
   part's `input`, tool from `tool_part_name(part)`) the same way, then calls the model.

Client frames (applied serially per conversation):

* `cf_agent_tool_result`: `part = find_tool_part(parts, frame["toolCallId"])`;
  `new = apply_tool_result(part, output=frame.get("output"), state=frame.get("state"),
  error_text=frame.get("errorText"))`; if `new` is not None, replace the part, persist and
  broadcast `cf_agent_message_updated`. `None` means no change: skip the write and broadcast.
* `cf_agent_tool_approval`: the same with `apply_tool_approval(part, frame["approved"])`.
* Auto-continue (§8.3) waits while `parallel_batch_incomplete(latest_assistant["parts"])`.
  `pending_interaction` / `pending_client_interaction` over assistant messages give
  `has_pending_interaction` and the recovery check.
"""

from durachat.tools.client import DEFAULT_CLIENT_TOOL_PARAMETERS, client_tools_from_schemas
from durachat.tools.events import ToolEvent, ToolEventKind, approval_request_chunk, new_approval_id
from durachat.tools.ledger import (
    INTERRUPTED_TOOL_ERROR,
    LedgerEntry,
    MemoryToolLedger,
    ToolLedger,
)
from durachat.tools.output import ToolOutputError, to_json_output
from durachat.tools.pending import (
    parallel_batch_incomplete,
    pending_client_interaction,
    pending_interaction,
)
from durachat.tools.run import run_tool
from durachat.tools.schema import clean_json_schema, function_parameters, is_valid_tool_name
from durachat.tools.state import (
    DEFAULT_TOOL_ERROR_TEXT,
    apply_tool_approval,
    apply_tool_result,
    approved_tool_parts,
    tool_part_name,
)
from durachat.tools.tool import (
    ApprovalCheck,
    Tool,
    ToolContext,
    ToolDecorator,
    ToolInputError,
    tool,
)
from durachat.tools.toolset import ToolCallDecision, ToolSet

__all__ = [
    "DEFAULT_CLIENT_TOOL_PARAMETERS",
    "DEFAULT_TOOL_ERROR_TEXT",
    "INTERRUPTED_TOOL_ERROR",
    "ApprovalCheck",
    "LedgerEntry",
    "MemoryToolLedger",
    "Tool",
    "ToolCallDecision",
    "ToolContext",
    "ToolDecorator",
    "ToolEvent",
    "ToolEventKind",
    "ToolInputError",
    "ToolLedger",
    "ToolOutputError",
    "ToolSet",
    "apply_tool_approval",
    "apply_tool_result",
    "approval_request_chunk",
    "approved_tool_parts",
    "clean_json_schema",
    "client_tools_from_schemas",
    "function_parameters",
    "is_valid_tool_name",
    "new_approval_id",
    "parallel_batch_incomplete",
    "pending_client_interaction",
    "pending_interaction",
    "run_tool",
    "to_json_output",
    "tool",
    "tool_part_name",
]
