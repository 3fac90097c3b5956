"""The Gemini adapter on what the OpenAI pivot carries beyond text: inline
images, audio and documents, image URLs, thinking settings and thoughts — and
what it cannot carry (cached contents, built-in tools, code execution, files
by URI), which no longer fails the call but is named in
``CallRequest.untranslatable`` for the gateway to decide by channel."""

from __future__ import annotations

import importlib
import json

import pytest
from google.genai import types

from console.kernel import tokens as tokenizer
from gateway_bridge.protocols import gemini as gp
from gateway_bridge.protocols.base import GatewayError
from gateway_bridge.usage_mapping import TokenUsage

vendor = importlib.import_module("gateway_bridge.vendors.gemini")

MODEL = "gemini-2.5-flash"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoKPDwvTGVuZ3RoIDMgMCBSPj4Kc3RyZWFtCg=="


def parse(body: dict, *, stream: bool = False):
    return gp.parse_generate(MODEL, body, stream=stream, alt_sse=True)


def user(*parts: dict) -> dict:
    return {"role": "user", "parts": list(parts)}


def test_an_inline_image_reaches_the_pivot_and_a_gemini_channel_unchanged():
    req = parse(
        {
            "contents": [
                user(
                    {"text": "What is in this picture?"},
                    {"inline_data": {"mime_type": "image/png", "data": PNG}},
                )
            ]
        }
    )
    [message] = req.body["messages"]
    assert message["content"] == [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
    assert req.untranslatable == ()
    # the image costs by the documented media rule, on top of the text
    text_only = len(
        tokenizer.chat_prompt_tokens([{"role": "user", "content": "What is in this picture?"}])
    )
    media = tokenizer.media_tokens(len(PNG) * 3 // 4)
    assert req.prompt_tokens_estimate == text_only + media
    # a translated call to a Gemini channel sends the same bytes back
    out = vendor.from_chat(req.body, MODEL, False)
    assert out["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "What is in this picture?"},
                {"inlineData": {"mimeType": "image/png", "data": PNG}},
            ],
        }
    ]


def test_documents_audio_and_image_urls_become_pivot_parts():
    req = parse(
        {
            "contents": [
                user(
                    {"inlineData": {"mimeType": "application/pdf", "data": PDF}},
                    {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}},
                    {"inlineData": {"mimeType": "audio/mpeg", "data": "SUQz"}},
                    {"fileData": {"fileUri": "https://example.com/cat.webp"}},
                    {"text": "Summarize all of these."},
                )
            ]
        }
    )
    assert req.body["messages"][0]["content"] == [
        {
            "type": "file",
            "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "file.pdf"},
        },
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.webp"}},
        {"type": "text", "text": "Summarize all of these."},
    ]
    assert req.untranslatable == ()


def test_url_safe_base64_is_sent_on_in_the_standard_alphabet():
    req = parse({"contents": [user({"inlineData": {"mimeType": "image/jpeg", "data": "_-8A"}})]})
    url = req.body["messages"][0]["content"][0]["image_url"]["url"]
    assert url == "data:image/jpeg;base64,/+8A"


def test_what_the_pivot_cannot_carry_is_named_and_the_call_still_parses():
    req = parse(
        {
            "contents": [
                user(
                    {"text": "Run this and look at the uploaded file."},
                    {
                        "fileData": {
                            "mimeType": "application/pdf",
                            "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc",
                        }
                    },
                    {"fileData": {"mimeType": "video/mp4", "fileUri": "gs://bucket/clip.mp4"}},
                ),
                {
                    "role": "model",
                    "parts": [
                        {"executableCode": {"language": "PYTHON", "code": "print(1 + 1)"}},
                        {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "2\n"}},
                        {"inlineData": {"mimeType": "image/png", "data": PNG}},
                        {"text": "It prints 2."},
                    ],
                },
                user({"text": "And now?"}),
            ],
            "cachedContent": "cachedContents/a1b2c3",
            "tools": [
                {"googleSearch": {}},
                {"codeExecution": {}},
                {"functionDeclarations": [{"name": "lookup", "description": "Look up a word"}]},
            ],
            "generationConfig": {"responseModalities": ["TEXT", "IMAGE"]},
        }
    )
    assert req.untranslatable == (
        "cached_content: a cached content",
        "contents[0].parts[1].file_data: a file uploaded to the Gemini Files API",
        "contents[0].parts[2].file_data: a file by a URI other vendors cannot read",
        "contents[1].parts[0].executable_code: an executable code part",
        "contents[1].parts[1].code_execution_result: a code execution result part",
        "contents[1].parts[2].inline_data: media in a model turn",
        "tools[0].google_search: the built-in tool googleSearch",
        "tools[1].code_execution: the built-in tool codeExecution",
        "generation_config.response_modalities[1]: the IMAGE output modality",
    )
    # what the pivot can carry is all there
    assert req.body["messages"] == [
        {"role": "user", "content": "Run this and look at the uploaded file."},
        {"role": "assistant", "content": "It prints 2."},
        {"role": "user", "content": "And now?"},
    ]
    assert [t["function"]["name"] for t in req.body["tools"]] == ["lookup"]


def test_a_broken_inline_part_is_still_google_s_400():
    with pytest.raises(GatewayError) as caught:
        parse(
            {"contents": [user({"inlineData": {"mimeType": "image/png", "data": "not base64!"}})]}
        )
    assert caught.value.param == "contents[0].parts[0].inline_data.data"
    assert "Base64 decoding failed" in caught.value.message


@pytest.mark.parametrize(
    ("thinking", "effort"),
    [
        ({"thinkingBudget": 0}, "none"),
        ({"thinkingBudget": 512}, "low"),
        ({"thinkingBudget": 1024}, "low"),
        ({"thinkingBudget": 8192}, "medium"),
        ({"thinkingBudget": 24576}, "high"),
        ({"thinkingBudget": -1}, None),
        ({"thinkingLevel": "LOW"}, "low"),
        ({"thinking_level": "HIGH", "include_thoughts": True}, "high"),
    ],
)
def test_thinking_config_becomes_reasoning_effort(thinking, effort):
    req = parse(
        {"contents": [user({"text": "Why?"})], "generationConfig": {"thinkingConfig": thinking}}
    )
    assert req.body.get("reasoning_effort") == effort
    # and a Gemini channel gets the same budget back (Google's own table)
    budget = thinking.get("thinkingBudget")
    if budget in (0, 1024, 8192, 24576):
        out = vendor.from_chat(req.body, MODEL, False)
        assert out["generationConfig"]["thinkingConfig"]["thinkingBudget"] == budget


def test_an_unknown_thinking_level_is_refused():
    with pytest.raises(GatewayError) as caught:
        parse(
            {
                "contents": [user({"text": "Why?"})],
                "generationConfig": {"thinkingConfig": {"thinkingLevel": "ENORMOUS"}},
            }
        )
    assert caught.value.param == "generation_config.thinking_config.thinking_level"


def thinking_answer() -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "42.",
                    "reasoning_content": "Six times seven.",
                },
                "finish_reason": "stop",
            }
        ],
    }


def test_thoughts_come_back_as_thought_parts_only_when_asked():
    asked = parse(
        {
            "contents": [user({"text": "Why?"})],
            "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
        }
    )
    usage = TokenUsage(input=5, output=9, reasoning=4)
    reply = types.GenerateContentResponse.model_validate(
        json.loads(asked.response.render(thinking_answer(), usage, MODEL))
    )
    thought, said = reply.candidates[0].content.parts
    assert thought.thought is True and thought.text == "Six times seven."
    assert said.text == "42." and not said.thought
    assert reply.text == "42."  # the SDK's text leaves thoughts out
    assert reply.usage_metadata.thoughts_token_count == 4
    silent = parse({"contents": [user({"text": "Why?"})]})
    body = json.loads(silent.response.render(thinking_answer(), usage, MODEL))
    assert body["candidates"][0]["content"]["parts"] == [{"text": "42."}]


def test_streamed_thoughts_come_before_the_text():
    req = parse(
        {
            "contents": [user({"text": "Why?"})],
            "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
        },
        stream=True,
    )
    frames = [
        req.response.stream_chunk({"id": "c1", "choices": [{"index": 0, "delta": delta}]}, MODEL)
        for delta in ({"reasoning_content": "Six times seven."}, {"content": "42."})
    ]
    parts = [json.loads(f[len(b"data: ") :])["candidates"][0]["content"]["parts"] for f in frames]
    assert parts == [[{"text": "Six times seven.", "thought": True}], [{"text": "42."}]]
