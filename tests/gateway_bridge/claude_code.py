"""Claude Code's requests, as it sends them through ``ANTHROPIC_BASE_URL``
(its public documentation on LLM gateways and the ``anthropic`` SDK's types):
the beta client (``/v1/messages?beta=true``, ``anthropic-beta``), a system of
text blocks (the attribution block first, then the prompt, cached for an
hour), many tools with the last one cached, thinking, ``metadata.user_id``,
the last user block cached, images, tool results with text and images, and
earlier thinking and tool_use turns sent back. And what a well-formed answer
stream is, checked event by event."""

from __future__ import annotations

import copy

from tests.gateway_bridge.vendor_fixtures import PNG

BETAS = [
    "claude-code-20250219",
    "interleaved-thinking-2025-05-14",
    "fine-grained-tool-streaming-2025-05-14",
    "prompt-caching-scope-2026-01-05",
    "context-management-2025-06-27",
]
# Claude Code's SDK (TypeScript) calls the beta endpoints with ``?beta=true``;
# the Python SDK does not add it, so the tests do.
BETA_QUERY = {"beta": "true"}
SESSION = "4f7c2a0e-9d1b-4c57-8a3e-2b6f0d9c1e55"
# The headers Claude Code adds to every call (besides the SDK's own).
HEADERS = {
    "anthropic-version": "2023-06-01",
    "x-app": "cli",
    "User-Agent": "claude-cli/2.1.0 (external, cli)",
    "anthropic-dangerous-direct-browser-access": "true",
    "X-Claude-Code-Session-Id": SESSION,
}
METADATA = {"user_id": f"user_5d41402abc4b2a76b9719d911017c592_account__session_{SESSION}"}
HOUR = {"type": "ephemeral", "ttl": "1h"}
EPHEMERAL = {"type": "ephemeral"}

SYSTEM = [
    # The attribution block (no cache_control), as Claude Code 2.1 puts it first.
    {
        "type": "text",
        "text": "x-anthropic-billing-header: cc_version=2.1.0.a3f; cc_entrypoint=cli;",
    },
    {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
    {
        "type": "text",
        "text": (
            "You are an interactive CLI tool that helps users with software engineering "
            "tasks. Use the tools available to you. Keep answers short and concrete. " * 8
        ),
        "cache_control": HOUR,
    },
]


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "name": name,
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#",
        },
    }


TOOLS = [
    _tool(
        "Bash",
        "Executes a given bash command in a persistent shell session.",
        {
            "command": {"type": "string", "description": "The command to execute"},
            "timeout": {"type": "number", "description": "Optional timeout in milliseconds"},
            "description": {"type": "string", "description": "What the command does"},
        },
        ["command"],
    ),
    _tool(
        "Glob",
        "Fast file pattern matching tool that works with any codebase size.",
        {"pattern": {"type": "string"}, "path": {"type": "string"}},
        ["pattern"],
    ),
    _tool(
        "Grep",
        "A powerful search tool built on ripgrep.",
        {
            "pattern": {"type": "string"},
            "path": {"type": "string"},
            "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
            "-n": {"type": "boolean"},
        },
        ["pattern"],
    ),
    _tool(
        "Read",
        "Reads a file from the local filesystem, images included.",
        {
            "file_path": {"type": "string", "description": "The absolute path to the file"},
            "offset": {"type": "number"},
            "limit": {"type": "number"},
        },
        ["file_path"],
    ),
    _tool(
        "Edit",
        "Performs exact string replacements in files.",
        {
            "file_path": {"type": "string"},
            "old_string": {"type": "string"},
            "new_string": {"type": "string"},
            "replace_all": {"type": "boolean", "default": False},
        },
        ["file_path", "old_string", "new_string"],
    ),
    _tool(
        "TodoWrite",
        "Create and manage a structured task list for the current session.",
        {
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "minLength": 1},
                        "status": {
                            "type": "string",
                            "enum": ["pending", "in_progress", "completed"],
                        },
                        "activeForm": {"type": "string"},
                    },
                    "required": ["content", "status", "activeForm"],
                    "additionalProperties": False,
                },
            }
        },
        ["todos"],
    ),
]
TOOLS[-1]["cache_control"] = HOUR


def first_turn(
    text: str = "Use Glob and Bash to find the failing test, then Read its screenshot.",
) -> list[dict]:
    """The opening user turn: a reminder block, a screenshot, the ask (cached)."""
    return [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "<system-reminder>As you answer, use the todo list.</system-reminder>",
                },
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
                {"type": "text", "text": text, "cache_control": EPHEMERAL},
            ],
        }
    ]


def request(messages: list[dict], **extra) -> dict:
    """A Claude Code call's body (less ``stream``, which the SDK sets)."""
    return {
        "model": extra.pop("model"),
        "max_tokens": 32000,
        "system": copy.deepcopy(SYSTEM),
        "tools": copy.deepcopy(TOOLS),
        "messages": messages,
        "metadata": METADATA,
        "thinking": {"type": "enabled", "budget_tokens": 4096},
        # With thinking on, Claude Code keeps every earlier thinking block.
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        **extra,
    }


def uncached(messages: list[dict]) -> list[dict]:
    """``messages`` with their ``cache_control`` marks taken off (Claude Code
    moves the mark to the newest user block on each turn)."""
    out = copy.deepcopy(messages)
    for message in out:
        if isinstance(message["content"], list):
            for block in message["content"]:
                block.pop("cache_control", None)
    return out


# What the tools answer, in turn: text blocks (a Glob), a string (a Bash), ...
TOOL_OUTPUTS = [
    [{"type": "text", "text": "tests/test_parser.py\ntests/test_lexer.py"}],
    "exit code 1: 2 failed, 40 passed",
]
# ... and the last call's result: text and a picture (a Read of a screenshot).
PICTURE_RESULT = [
    {"type": "text", "text": "The screenshot of the failing run:"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
]


def tool_turns(answer: dict) -> list[dict]:
    """The turns after an answer that called tools: the answer sent back as it
    came (thinking with its signature, the tool_use blocks), then one user turn
    with every call's result (``TOOL_OUTPUTS`` in turn, the last one
    ``PICTURE_RESULT``, the newest block, cached)."""
    calls = [b for b in answer["content"] if b["type"] == "tool_use"]
    assert calls, answer
    results = [
        {"type": "tool_result", "tool_use_id": call["id"], "content": TOOL_OUTPUTS[i % 2]}
        for i, call in enumerate(calls)
    ]
    results[-1]["content"] = PICTURE_RESULT
    # Claude Code marks the newest block of the conversation.
    results[-1]["cache_control"] = EPHEMERAL
    return [
        {"role": "assistant", "content": answer["content"]},
        {"role": "user", "content": results},
    ]


def check_stream(events: list) -> dict:
    """The raw events of one answer in the order Anthropic sends them: a
    message_start, each block's start / deltas / stop (indexes 0, 1, ... in
    turn, never interleaved), a message_delta with usage, a message_stop.
    Returns the summary: block types, delta types, usage from both ends."""
    kinds = [e.type for e in events if e.type != "ping"]
    assert kinds[0] == "message_start", kinds
    assert kinds[-2:] == ["message_delta", "message_stop"], kinds
    blocks: list[str] = []
    deltas: list[str] = []
    open_index = None
    for event in events[1:]:
        if event.type in ("ping", "message_delta", "message_stop"):
            continue
        if event.type == "content_block_start":
            assert open_index is None, kinds
            assert event.index == len(blocks), kinds
            open_index = event.index
            blocks.append(event.content_block.type)
        elif event.type == "content_block_delta":
            assert event.index == open_index, kinds
            deltas.append(event.delta.type)
        elif event.type == "content_block_stop":
            assert event.index == open_index, kinds
            open_index = None
        else:
            raise AssertionError(f"unexpected event {event.type}")
    assert open_index is None and blocks, kinds
    start = events[0].message
    delta = next(e for e in events if e.type == "message_delta")
    assert start.role == "assistant" and start.content == []
    assert delta.usage.output_tokens > 0
    return {
        "blocks": blocks,
        "deltas": deltas,
        "start_usage": start.usage,
        "usage": delta.usage,
        "stop_reason": delta.delta.stop_reason,
        "id": start.id,
    }


def reported(summary: dict) -> tuple[int, int, int, int]:
    """(input, cache read, cache write, output) as the SDK's events report them:
    the input side from message_start (or message_delta, when it carries it),
    output from message_delta."""
    start, usage = summary["start_usage"], summary["usage"]

    def pick(name: str) -> int:
        value = getattr(usage, name, None)
        return value if value is not None else getattr(start, name) or 0

    return (
        pick("input_tokens"),
        pick("cache_read_input_tokens"),
        pick("cache_creation_input_tokens"),
        usage.output_tokens,
    )


def billed(event: dict) -> tuple[int, int, int, int]:
    """A usage event's four token classes."""
    return (
        event["input_tokens"],
        event["cache_read_tokens"],
        event["cache_write_tokens"],
        event["output_tokens"],
    )


# The raw events among what ``messages.stream`` yields (it adds text, thinking,
# input_json, signature and citation events of its own).
RAW_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
    }
)
