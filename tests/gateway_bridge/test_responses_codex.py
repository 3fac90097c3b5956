"""Codex's requests replayed against the gateway with http.client: the body
shape codex-rs builds for ``wire_api = "responses"`` (instructions,
developer and user message items, flat function tools, ``tool_choice:
"auto"``, ``parallel_tool_calls``, ``reasoning``, ``store: false``,
``stream: true``, ``include: ["reasoning.encrypted_content"]``,
``prompt_cache_key``, ``text.verbosity``), a tool turn sending back the
reasoning, function call and its output, and the event stream it reads."""

from __future__ import annotations

import http.client
import json

from usage.ingest import ingest_events
from usage.models import CallRecord

SHELL_TOOL = {
    "type": "function",
    "name": "shell",
    "description": "Runs a shell command and returns its output.",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {
            "command": {"type": "array", "items": {"type": "string"}},
            "workdir": {"type": "string"},
            "timeout_ms": {"type": "number"},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
}
PLAN_TOOL = {
    "type": "function",
    "name": "update_plan",
    "description": "Updates the task plan.",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {
            "explanation": {"type": "string"},
            "plan": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"step": {"type": "string"}, "status": {"type": "string"}},
                    "required": ["step", "status"],
                },
            },
        },
        "required": ["plan"],
    },
}


def text_item(role: str, text: str) -> dict:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def codex_body(input_items: list) -> dict:
    return {
        "model": "sim-chat-small",
        "instructions": "You are Codex, a coding agent. Use the shell tool to inspect files.",
        "input": input_items,
        "tools": [SHELL_TOOL, PLAN_TOOL],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a7c4-5c1e-7d52-b0a4-3f2b8e2f7a11",
        "text": {"verbosity": "medium"},
    }


def post_stream(gw, raw: str, body: dict) -> tuple[int, str, list[tuple[str, dict]]]:
    """(status, content type, [(event name, data)]) of one streamed call."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=20)
    try:
        conn.request(
            "POST",
            "/v1/responses",
            body=json.dumps(body),
            headers={
                "Authorization": f"Bearer {raw}",
                "Content-Type": "application/json",
                "Accept": "text/event-stream",
                "OpenAI-Beta": "responses=experimental",
                "originator": "codex_cli_rs",
                "session_id": "0199a7c4-5c1e-7d52-b0a4-3f2b8e2f7a11",
            },
        )
        resp = conn.getresponse()
        payload = resp.read().decode()
        ctype = resp.getheader("content-type", "")
        status = resp.status
    finally:
        conn.close()
    events = []
    for frame in payload.split("\n\n"):
        if not frame.strip():
            continue
        lines = dict(line.split(": ", 1) for line in frame.splitlines())
        events.append((lines.get("event", ""), json.loads(lines["data"])))
    return status, ctype, events


def assert_valid_sequence(events: list[tuple[str, dict]]) -> dict:
    """The checks a Responses stream reader relies on; returns the final response."""
    names = [name for name, _ in events]
    assert all(name == data["type"] for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    opened: dict[int, str] = {}
    for name, data in events[2:-1]:
        if name == "response.output_item.added":
            opened[data["output_index"]] = data["item"]["id"]
        elif name == "response.output_item.done":
            assert opened.pop(data["output_index"]) == data["item"]["id"]
        else:
            assert data["item_id"] == opened[data["output_index"]]
    assert not opened  # every item added was finished
    final = events[-1][1]["response"]
    assert final["status"] == "completed" and final["id"].startswith("resp_")
    usage = final["usage"]
    assert set(usage) >= {"input_tokens", "output_tokens", "total_tokens"}
    assert "cached_tokens" in usage["input_tokens_details"]
    assert "reasoning_tokens" in usage["output_tokens_details"]
    return final


def test_codex_turns_stream_valid_event_sequences(gw, tenant):
    turn = [
        text_item(
            "developer",
            "<permissions instructions>Sandbox: workspace-write.</permissions instructions>",
        ),
        text_item("user", "<environment_context><cwd>/work/project</cwd></environment_context>"),
        text_item("user", "Run ls to list the files in the project."),
    ]
    status, ctype, events = post_stream(gw, tenant.raw, codex_body(turn))
    assert status == 200 and ctype.startswith("text/event-stream")
    first = assert_valid_sequence(events)
    [call] = [item for item in first["output"] if item["type"] == "function_call"]
    assert call["name"] in ("shell", "update_plan")
    json.loads(call["arguments"])  # the arguments Codex will parse

    # The next turn: the history as Codex keeps it (a reasoning item from an
    # earlier model included), the call and the tool's output.
    follow_up = [
        *turn,
        {
            "type": "reasoning",
            "id": "rs_0001",
            "summary": [{"type": "summary_text", "text": "I should list the files."}],
            "encrypted_content": "gAAAAABo-opaque-to-the-gateway",
        },
        {k: call[k] for k in ("type", "id", "call_id", "name", "arguments")},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "README.md src"},
    ]
    status, _, events = post_stream(gw, tenant.raw, codex_body(follow_up))
    assert status == 200
    second = assert_valid_sequence(events)
    assert second["output"][0]["type"] == "message"
    deltas = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    assert deltas == second["output"][0]["content"][0]["text"]
    assert "README" in deltas  # the node saw the tool's output

    ingest_events(gw.emitter.wait_for(2))
    billed = sorted(
        (r.input_tokens + r.cache_read_tokens, r.output_tokens) for r in CallRecord.objects.all()
    )
    reported = sorted(
        (f["usage"]["input_tokens"], f["usage"]["output_tokens"]) for f in (first, second)
    )
    assert billed == reported
