"""The frame constructors produce exactly the text the server and the Python client send
(docs/protocol.md): field order included, since the wire must not change."""

from __future__ import annotations

import json

import pytest

from durachat.protocol import chat_clear_frame, chat_messages_frame, encode_json
from durachat.protocol.client_frames import (
    branch_op_frame,
    branch_switch_frame,
    branches_request_frame,
    chat_request_cancel_frame,
    chat_request_frame,
    stream_resume_ack_frame,
    stream_resume_request_frame,
    tool_approval_frame,
    tool_result_frame,
)
from durachat.protocol.server_frames import (
    branch_op_answer_frame,
    branch_switched_frame,
    branches_frame,
    chat_recovering_frame,
    chunk_frame,
    done_frame,
    error_frame,
    gave_up_frame,
    identity_frame,
    mcp_servers_frame,
    message_updated_frame,
    rejected_request_frame,
    replay_end_frame,
    reply_error_frame,
    stream_pending_frame,
    stream_resume_none_frame,
    stream_resuming_frame,
)

R = '"type":"cf_agent_use_chat_response"'

SERVER_FRAMES = [
    (
        chunk_frame(
            "r1",
            3,
            encode_json({"type": "text-delta", "id": "t", "delta": "é"}),
            continuation=False,
        ),
        '{"body":"{\\"type\\":\\"text-delta\\",\\"id\\":\\"t\\",\\"delta\\":\\"é\\"}",'
        f'"done":false,"id":"r1",{R},"seq":3}}',
    ),
    (
        chunk_frame("r1", 0, "{}", continuation=True),
        f'{{"body":"{{}}","done":false,"id":"r1",{R},"seq":0,"continuation":true}}',
    ),
    (
        reply_error_frame("r1", "boom", message_ids=["u1"], continuation=True),
        f'{{"body":"boom","done":false,"error":true,"id":"r1",{R},"messageIds":["u1"],'
        '"continuation":true}',
    ),
    (
        reply_error_frame("r1", "boom", message_ids=None, continuation=False),
        f'{{"body":"boom","done":false,"error":true,"id":"r1",{R}}}',
    ),
    (
        done_frame("r1", outcome="aborted", message_ids=["u1"], continuation=True),
        f'{{"body":"","done":true,"id":"r1",{R},"messageIds":["u1"],"outcome":"aborted",'
        '"continuation":true}',
    ),
    (done_frame("r1"), f'{{"body":"","done":true,"id":"r1",{R}}}'),
    (
        gave_up_frame("r1", "gave up", continuation=True),
        f'{{"body":"gave up","done":true,"error":true,"id":"r1",{R},"continuation":true}}',
    ),
    (
        replay_end_frame("r1", live=True, continuation=True),
        f'{{"body":"","done":false,"id":"r1",{R},"replay":true,"replayComplete":true,'
        '"continuation":true}',
    ),
    (
        replay_end_frame("r1", live=False, continuation=False),
        f'{{"body":"","done":true,"id":"r1",{R},"replay":true}}',
    ),
    (
        rejected_request_frame("r1", "no"),
        f'{{{R},"id":"r1","body":"no","done":true,"error":true,"outcome":"error"}}',
    ),
    (
        chat_messages_frame([{"id": "m", "role": "user", "parts": []}]),
        '{"type":"cf_agent_chat_messages","messages":[{"id":"m","role":"user","parts":[]}]}',
    ),
    (chat_clear_frame(), '{"type":"cf_agent_chat_clear"}'),
    (stream_resuming_frame("r1"), '{"type":"cf_agent_stream_resuming","id":"r1"}'),
    (
        stream_resuming_frame("r1", "p"),
        '{"type":"cf_agent_stream_resuming","id":"r1","probeId":"p"}',
    ),
    (stream_pending_frame("r1", "p"), '{"type":"cf_agent_stream_pending","id":"r1","probeId":"p"}'),
    (stream_resume_none_frame(), '{"type":"cf_agent_stream_resume_none"}'),
    (
        stream_resume_none_frame(idle=True, probe_id="p"),
        '{"type":"cf_agent_stream_resume_none","reason":"idle","probeId":"p"}',
    ),
    (
        chat_recovering_frame("r0", active=True),
        '{"type":"cf_agent_chat_recovering","recovering":true,"id":"r0"}',
    ),
    (
        message_updated_frame({"id": "a"}),
        '{"type":"cf_agent_message_updated","message":{"id":"a"}}',
    ),
    (
        identity_frame("n", "chat-agent"),
        '{"type":"cf_agent_identity","name":"n","agent":"chat-agent"}',
    ),
    (
        mcp_servers_frame(),
        '{"mcp":{"prompts":[],"resources":[],"servers":{},"tools":[]},"type":"cf_agent_mcp_servers"}',
    ),
    (error_frame("c", "m"), '{"type":"durachat_error","code":"c","message":"m"}'),
    (
        branch_switched_frame("7", "edit"),
        '{"type":"durachat_branch_switched","branch":"7","reason":"edit"}',
    ),
    (
        branches_frame([{"id": 1}], "main"),
        '{"type":"durachat_branches","branches":[{"id":1}],"viewing":"main"}',
    ),
    (
        branch_op_answer_frame("create", 201, {"id": 2}, op_id="o1"),
        '{"type":"durachat_branch_op","op":"create","status":201,"id":"o1","body":{"id":2}}',
    ),
    (
        branch_op_answer_frame(None, 400, {}),
        '{"type":"durachat_branch_op","op":null,"status":400,"body":{}}',
    ),
]


@pytest.mark.parametrize(("frame", "text"), SERVER_FRAMES)
def test_server_frames_keep_their_bytes(frame: object, text: str) -> None:
    assert encode_json(frame) == text


CLIENT_FRAMES = [
    (
        chat_request_frame("r1", '{"messages": []}'),
        '{"id": "r1", "init": {"method": "POST", "body": "{\\"messages\\": []}"}, '
        '"type": "cf_agent_use_chat_request"}',
    ),
    (chat_request_cancel_frame("r1"), '{"type": "cf_agent_chat_request_cancel", "id": "r1"}'),
    (
        stream_resume_request_frame("p"),
        '{"type": "cf_agent_stream_resume_request", "probeId": "p"}',
    ),
    (stream_resume_ack_frame("r1"), '{"type": "cf_agent_stream_resume_ack", "id": "r1"}'),
    (
        tool_result_frame(
            "c1", {"ok": 1}, tool_name="t", client_tools=[{"name": "x"}], auto_continue=True
        ),
        '{"type": "cf_agent_tool_result", "toolCallId": "c1", "toolName": "t", '
        '"clientTools": [{"name": "x"}], "output": {"ok": 1}, "autoContinue": true}',
    ),
    (
        tool_result_frame("c1", None, error_text="failed", auto_continue=False),
        '{"type": "cf_agent_tool_result", "toolCallId": "c1", "output": null, '
        '"state": "output-error", "errorText": "failed", "autoContinue": false}',
    ),
    (
        tool_approval_frame("c1", False, auto_continue=True),
        '{"type": "cf_agent_tool_approval", "toolCallId": "c1", "approved": false, '
        '"autoContinue": true}',
    ),
    (branches_request_frame(), '{"type": "durachat_branches"}'),
    (branch_switch_frame("7"), '{"type": "durachat_branch_switch", "branch": "7"}'),
    (
        branch_op_frame("o1", "create", {"name": "n", "at": "m1", "from_branch": "7"}),
        '{"type": "durachat_branch_op", "id": "o1", "op": "create", "name": "n", "at": "m1", '
        '"from_branch": "7"}',
    ),
]


@pytest.mark.parametrize(("frame", "text"), CLIENT_FRAMES)
def test_client_frames_keep_their_bytes(frame: object, text: str) -> None:
    # The Python client sends `json.dumps` with its default separators.
    assert json.dumps(frame) == text


def test_frames_are_plain_json_for_any_encoder() -> None:
    frame = chunk_frame("r1", 0, "{}", continuation=False)
    assert json.loads(encode_json(frame)) == {
        "body": "{}",
        "done": False,
        "id": "r1",
        "type": "cf_agent_use_chat_response",
        "seq": 0,
    }
    assert json.dumps(frame, separators=(",", ":"), ensure_ascii=False) == encode_json(frame)
