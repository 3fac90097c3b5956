"""The Anthropic client protocol beyond text: images and documents reach the
pivot as OpenAI content parts (and come back out of the Anthropic dialect as
they were sent), ``thinking`` becomes ``reasoning_effort``, and what the pivot
cannot carry is recorded as untranslatable instead of refused."""

from __future__ import annotations

import pytest

from console.kernel import tokens as tokenizer
from gateway_bridge.protocols.anthropic.thinking import EFFORT_BUDGETS, effort_of_budget
from gateway_bridge.vendors import dialect_for
from tests.gateway_bridge.protocols.anthropic.common import USER, WEATHER_TOOL, parse

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
PDF = "JVBERi0xLjQKJcfsj6IKNSAwIG9iago8PC9MZW5ndGggNiAwIFI+PgpzdHJlYW0K" * 40
IMAGE_B64 = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
    "cache_control": {"type": "ephemeral"},
}
IMAGE_URL = {"type": "image", "source": {"type": "url", "url": "https://x.test/cat.jpg"}}
PDF_DOC = {
    "type": "document",
    "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
}
URL_DOC = {
    "type": "document",
    "source": {"type": "url", "url": "https://x.test/report.pdf"},
    "title": "report.pdf",
}


def user(*blocks):
    return [{"role": "user", "content": list(blocks)}]


def test_images_and_documents_become_pivot_parts_in_order():
    call = parse(
        messages=user(
            {"type": "text", "text": "Compare these."},
            IMAGE_B64,
            IMAGE_URL,
            PDF_DOC,
            URL_DOC,
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Notes."}},
        )
    )  # fmt: skip
    assert call.body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare these."},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "image_url", "image_url": {"url": "https://x.test/cat.jpg"}},
                {
                    "type": "file",
                    "file": {
                        "filename": "document.pdf",
                        "file_data": f"data:application/pdf;base64,{PDF}",
                    },
                },
                {
                    "type": "file",
                    "file": {"filename": "report.pdf", "file_data": "https://x.test/report.pdf"},
                },
                {"type": "text", "text": "Notes."},
            ],
        }
    ]
    assert call.untranslatable == ()


def test_media_count_in_the_prompt_estimate_by_the_media_rule():
    text_only = parse(messages=user({"type": "text", "text": "Compare these."}))
    with_pdf = parse(messages=user({"type": "text", "text": "Compare these."}, PDF_DOC))
    pdf_bytes = len(PDF) * 3 // 4
    assert with_pdf.prompt_tokens_estimate - text_only.prompt_tokens_estimate == (
        tokenizer.media_tokens(pdf_bytes)
    )


def test_an_image_and_a_document_round_trip_to_an_anthropic_channel():
    """Anthropic client → pivot → Anthropic dialect: the blocks come back as sent
    (``cache_control`` aside: the pivot does not carry it)."""
    call = parse(
        system="Describe precisely.",
        messages=user({"type": "text", "text": "What is this?"}, IMAGE_B64, IMAGE_URL, PDF_DOC, URL_DOC),
    )  # fmt: skip
    out = dialect_for("anthropic").from_chat(call.body, "claude-sonnet-4-5", False)
    sent_back = {k: v for k, v in IMAGE_B64.items() if k != "cache_control"}
    assert out["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                sent_back,
                IMAGE_URL,
                PDF_DOC,
                URL_DOC,
            ],
        }
    ]
    assert out["system"] == [{"type": "text", "text": "Describe precisely."}]
    assert out["max_tokens"] == 64


@pytest.mark.parametrize(
    ("thinking", "output_config", "effort"),
    [
        ({"type": "enabled", "budget_tokens": 1024}, None, "low"),
        ({"type": "enabled", "budget_tokens": 8192}, None, "medium"),
        ({"type": "enabled", "budget_tokens": 32000}, None, "high"),
        ({"type": "adaptive"}, {"effort": "max"}, "high"),
        ({"type": "adaptive"}, None, None),
        ({"type": "disabled"}, {"effort": "low"}, None),
    ],
)
def test_thinking_becomes_reasoning_effort(thinking, output_config, effort):
    fields = {"thinking": thinking, "max_tokens": 64000}
    if output_config:
        fields["output_config"] = output_config
    assert parse(**fields).body.get("reasoning_effort") == effort


def test_each_effort_budget_maps_back_to_an_effort_a_node_takes():
    for effort, budget in EFFORT_BUDGETS.items():
        back = effort_of_budget(budget)
        assert back in ("low", "medium", "high")
        if effort in ("low", "medium", "high"):
            assert back == effort


def test_thinking_blocks_in_history_are_left_out_of_the_pivot():
    call = parse(
        messages=[
            USER,
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Paris is in France.", "signature": "EqQB"},
                    {"type": "redacted_thinking", "data": "EmwKAhgB"},
                    {"type": "text", "text": "Sunny."},
                ],
            },
            {"role": "user", "content": "Thanks"},
        ]
    )
    assert call.body["messages"][1] == {"role": "assistant", "content": "Sunny."}
    assert call.untranslatable == ()


def test_what_the_pivot_cannot_carry_is_recorded_and_the_call_parses():
    search = {
        "type": "search_result",
        "source": "https://x.test",
        "title": "T",
        "content": [{"type": "text", "text": "c"}],
    }
    call = parse(
        container="container_011CPR5CNjB747bTd36fQLFk",
        mcp_servers=[{"type": "url", "url": "https://mcp.test/sse", "name": "m"}],
        context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
        tools=[WEATHER_TOOL, {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
        tool_choice={"type": "tool", "name": "web_search"},
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Find it."}, search]},
            {
                "role": "assistant",
                "content": [
                    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
                    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                    {"type": "text", "text": "Found."},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "file", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}},
                    {**PDF_DOC, "citations": {"enabled": True}},
                ],
            },
        ],
    )  # fmt: skip
    assert call.untranslatable == (
        "container: the container field",
        "mcp_servers: the mcp_servers field",
        "context_management: the context_management field",
        "messages.0.content.1: search_result content blocks",
        "messages.1.content.0: server_tool_use content blocks",
        "messages.1.content.1: web_search_tool_result content blocks",
        "messages.2.content.0: image blocks from an uploaded file (file_id)",
        "messages.2.content.1: citations",
        "tools.1: the server tool 'web_search_20250305'",
    )
    # the pivot keeps what it can: the text, the PDF, the function tool
    assert call.body["messages"][0] == {"role": "user", "content": "Find it."}
    assert call.body["messages"][1] == {"role": "assistant", "content": "Found."}
    assert [p["type"] for p in call.body["messages"][2]["content"]] == ["file"]
    assert [t["function"]["name"] for t in call.body["tools"]] == ["get_weather"]
    assert "tool_choice" not in call.body  # it names the server tool
    assert call.client_body["container"] == "container_011CPR5CNjB747bTd36fQLFk"


def test_images_in_a_tool_result_follow_its_text_in_a_user_message():
    # Claude Code's Read of a picture: the tool message keeps the text (an OpenAI
    # tool message is text), the picture follows in the user message after it.
    call = parse(
        messages=[
            USER,
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}},
                    {"type": "tool_use", "id": "toolu_2", "name": "shot", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "Screenshot:"}, IMAGE_B64],
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": [PDF_DOC]},
                    {"type": "text", "text": "Compare them."},
                ],
            },
        ]
    )
    assert call.body["messages"][2:] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Screenshot:"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": ""},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Attachments of the result of tool call toolu_1:"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "text", "text": "Attachments of the result of tool call toolu_2:"},
                {
                    "type": "file",
                    "file": {
                        "filename": "document.pdf",
                        "file_data": f"data:application/pdf;base64,{PDF}",
                    },
                },
                {"type": "text", "text": "Compare them."},
            ],
        },
    ]
    assert call.untranslatable == ()


def test_a_context_management_that_only_clears_thinking_needs_no_translation():
    # Claude Code sends it with thinking on; the pivot drops earlier thinking anyway.
    keep_all = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    assert parse(context_management=keep_all).untranslatable == ()
    assert "context_management" not in parse(context_management=keep_all).body
    both = {"edits": [keep_all["edits"][0], {"type": "clear_tool_uses_20250919"}]}
    assert parse(context_management=both).untranslatable == (
        "context_management: the context_management field",
    )
