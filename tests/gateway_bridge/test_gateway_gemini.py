"""The Gemini protocol end to end on raw HTTP (the forms the SDK does not
use): keys in ``?key=`` and ``x-goog-api-key``, the JSON-array stream without
``alt=sse``, function responses, model pages, and errors in Google's format
with the call recorded under its error type; and the Gemini channel taking
calls of the other protocols through the Gemini dialect."""

from __future__ import annotations

import base64
import json

import anthropic
import openai
from google import genai
from google.genai import types

from tests.gateway_bridge.test_gateway_openai import raw_request
from tests.gateway_bridge.vendor_fixtures import KEY_A, captured, demo_channels
from usage.ingest import ingest_events
from usage.models import CallRecord

BASE = "/v1beta/models/sim-chat-small"
HELLO = {"contents": [{"role": "user", "parts": [{"text": "Hello there"}]}]}


def post(gw, path, body, raw_key=None, headers=None, raw_body=None):
    h = {"Content-Type": "application/json", **(headers or {})}
    if raw_key:
        h["x-goog-api-key"] = raw_key
    status, resp_headers, data = raw_request(gw, "POST", path, body, h, raw_body=raw_body)
    return status, resp_headers, data


def test_key_in_query_string_and_header(gw, tenant):
    status, headers, data = post(gw, f"{BASE}:generateContent?key={tenant.raw}", HELLO)
    assert status == 200, data
    body = json.loads(data)
    assert body["candidates"][0]["content"]["role"] == "model"
    assert body["usageMetadata"]["promptTokenCount"] > 0
    assert headers["x-request-id"].startswith("req_")
    status, _, _ = post(gw, f"{BASE}:generateContent", HELLO, raw_key=tenant.raw)
    assert status == 200


def test_json_array_stream_without_alt_sse(gw, tenant):
    status, headers, data = post(gw, f"{BASE}:streamGenerateContent", HELLO, raw_key=tenant.raw)
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    chunks = json.loads(data)
    assert len(chunks) >= 2
    text = "".join(
        p.get("text", "") for c in chunks for p in c["candidates"][0]["content"]["parts"]
    )
    assert text
    [event] = gw.emitter.wait_for(1)
    assert event["endpoint"] == "streamGenerateContent" and event["stream"] is True
    assert event["output_tokens"] == chunks[-1]["usageMetadata"]["candidatesTokenCount"]


def test_function_response_turn_through_the_sdk(gw, tenant):
    client = genai.Client(
        api_key=tenant.raw,
        http_options=types.HttpOptions(base_url=gw.url, api_version="v1beta", timeout=20_000),
    )
    weather = types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name="get_weather",
                description="Weather in a city",
                parameters=types.Schema(
                    type="OBJECT", properties={"city": types.Schema(type="STRING")}
                ),
            )
        ]
    )
    config = types.GenerateContentConfig(
        tools=[weather], automatic_function_calling={"disable": True}
    )
    question = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
    first = client.models.generate_content(
        model="sim-chat-small", contents=[question], config=config
    )
    [call] = first.function_calls
    answer = client.models.generate_content(
        model="sim-chat-small",
        contents=[
            question,
            first.candidates[0].content,
            types.Content(
                role="user",
                parts=[types.Part.from_function_response(name=call.name, response={"temp_c": 21})],
            ),
        ],
        config=config,
    )
    assert answer.text and not answer.function_calls


def test_models_list_and_one_model(gw, tenant):
    status, _, data = raw_request(
        gw, "GET", "/v1beta/models", headers={"x-goog-api-key": tenant.raw}
    )
    assert status == 200
    names = {m["name"] for m in json.loads(data)["models"]}
    assert {"models/sim-chat-small", "models/sim-embed"} <= names
    status, _, data = raw_request(
        gw, "GET", "/v1beta/models/sim-embed", headers={"x-goog-api-key": tenant.raw}
    )
    assert status == 200 and json.loads(data)["name"] == "models/sim-embed"
    status, _, data = raw_request(
        gw, "GET", "/v1beta/models/nope", headers={"x-goog-api-key": tenant.raw}
    )
    assert status == 404 and json.loads(data)["error"]["status"] == "NOT_FOUND"


def test_batch_embed_and_count_tokens_raw(gw, tenant):
    body = {
        "requests": [
            {"model": "models/sim-embed", "content": {"parts": [{"text": t}]}} for t in ("a", "b")
        ]
    }
    status, _, data = post(
        gw, "/v1beta/models/sim-embed:batchEmbedContents", body, raw_key=tenant.raw
    )
    assert status == 200
    embeddings = json.loads(data)["embeddings"]
    assert len(embeddings) == 2 and all(e["values"] for e in embeddings)
    status, _, data = post(gw, f"{BASE}:countTokens", HELLO, raw_key=tenant.raw)
    assert status == 200 and json.loads(data)["totalTokens"] > 0


def test_errors_in_googles_format_and_recorded(gw, tenant):
    cases = [
        # (path, body, key, raw body, status, google status)
        (f"{BASE}:generateContent", HELLO, None, None, 401, "UNAUTHENTICATED"),
        (f"{BASE}:generateContent", HELLO, "sk-bogus_key", None, 401, "UNAUTHENTICATED"),
        (f"{BASE}:generateContent", None, tenant.raw, b"{not json", 400, "INVALID_ARGUMENT"),
        (
            f"{BASE}:generateContent",
            {"contents": [], "foo": 1},
            tenant.raw,
            None,
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "/v1beta/models/no-such-model:generateContent",
            HELLO,
            tenant.raw,
            None,
            404,
            "NOT_FOUND",
        ),
        ("/v1beta/models/x:frobnicate", HELLO, tenant.raw, None, 404, "NOT_FOUND"),
    ]
    for path, body, key, raw_body, status, google in cases:
        got, _, data = post(gw, path, body, raw_key=key, raw_body=raw_body)
        error = json.loads(data)["error"]
        assert (got, error["status"], error["code"]) == (status, google, status), (path, data)
        assert "Traceback" not in error["message"]
    # calls made with a valid key are recorded with their error type
    events = gw.emitter.wait_for(3)
    ingest_events(events)
    codes = sorted(r.status_code for r in CallRecord.objects.all())
    assert codes == [400, 400, 404]
    assert all(r.protocol == "gemini" and r.error_type for r in CallRecord.objects.all())


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def test_an_inline_image_reaches_the_model_check(gw, tenant):
    # Given a picture sent inline, which the Gemini adapter carries into the pivot
    body = {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "What is this?"},
                    {"inlineData": {"mimeType": "image/png", "data": PNG}},
                ],
            }
        ]
    }
    # When the model asked for takes text only
    status, _, data = post(gw, f"{BASE}:generateContent", body, raw_key=tenant.raw)
    # Then the gateway says so in Google's format, and the call is recorded
    error = json.loads(data)["error"]
    assert (status, error["status"]) == (400, "INVALID_ARGUMENT")
    assert "'sim-chat-small' takes text only" in error["message"]
    [event] = gw.emitter.wait_for(1)
    assert event["protocol"] == "gemini" and event["status_code"] == 400


def test_a_built_in_tool_is_refused_by_a_channel_of_another_protocol(gw, tenant):
    # Given a call the OpenAI pivot cannot carry whole (it parses all the same)
    body = {**HELLO, "tools": [{"googleSearch": {}}], "cachedContent": "cachedContents/c1"}
    # When its model is served by an OpenAI-compatible node
    status, _, data = post(gw, f"{BASE}:generateContent", body, raw_key=tenant.raw)
    # Then it is a 400 naming the first thing the node could not be sent
    error = json.loads(data)["error"]
    assert (status, error["status"]) == (400, "INVALID_ARGUMENT")
    assert error["message"].startswith("cached_content: a cached content")


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "additionalProperties": False,
        },
    },
}


def test_openai_sdk_on_the_gemini_channel_is_translated(vendor, tenant, start_gateway):
    # Given the demo Gemini channel (the simulator speaking Google's API)
    demo_channels(vendor.base_url)
    gw = start_gateway()
    client = openai.OpenAI(api_key=tenant.raw, base_url=f"{gw.url}/v1", max_retries=0)
    # When an OpenAI client sends a picture, a system prompt and a tool
    answer = client.chat.completions.create(
        model="sim-gemini",
        max_tokens=40,
        messages=[
            {"role": "system", "content": "You look at pictures."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                ],
            },
        ],
        tools=[WEATHER],
    )
    # Then Google's API got a GenerateContentRequest, keyed in the header
    sent = captured(vendor)[-1]
    assert sent["path"] == "/v1beta/models/gemini-sim:generateContent"
    assert sent["headers"]["x-goog-api-key"] == "…" + KEY_A[-4:]
    body = json.loads(base64.b64decode(sent["body_base64"]))
    assert body["systemInstruction"] == {"parts": [{"text": "You look at pictures."}]}
    assert body["contents"][0]["parts"][1] == {"inlineData": {"mimeType": "image/png", "data": PNG}}
    [declaration] = body["tools"][0]["functionDeclarations"]
    assert declaration["parameters"] == {
        "type": "OBJECT",
        "properties": {"city": {"type": "STRING"}},
    }
    assert body["generationConfig"] == {"maxOutputTokens": 40}
    # and the client an OpenAI answer, billed from Google's usage
    assert answer.object == "chat.completion" and answer.model == "sim-gemini"
    choice = answer.choices[0]
    assert choice.message.content or choice.message.tool_calls
    [event] = gw.emitter.wait_for(1)
    assert event["protocol"] == "openai" and event["model"] == "sim-gemini"
    assert event["input_tokens"] + event["cache_read_tokens"] == answer.usage.prompt_tokens
    assert event["output_tokens"] == answer.usage.completion_tokens


def test_openai_stream_on_the_gemini_channel_reads_googles_sse(vendor, tenant, start_gateway):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    client = openai.OpenAI(api_key=tenant.raw, base_url=f"{gw.url}/v1", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="sim-gemini",
            max_tokens=30,
            stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "Hello"}],
        )
    )
    assert captured(vendor)[-1]["path"] == (
        "/v1beta/models/gemini-sim:streamGenerateContent?alt=sse"
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    usage = chunks[-1].usage
    [event] = gw.emitter.wait_for(1)
    assert event["stream"] is True
    assert event["output_tokens"] == usage.completion_tokens > 0


def test_anthropic_sdk_on_the_gemini_channel_is_translated(vendor, tenant, start_gateway):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    client = anthropic.Anthropic(api_key=tenant.raw, base_url=gw.url, max_retries=0)
    message = client.messages.create(
        model="sim-gemini", max_tokens=30, messages=[{"role": "user", "content": "Hi"}]
    )
    assert message.type == "message" and message.content[0].text
    assert captured(vendor)[-1]["path"] == "/v1beta/models/gemini-sim:generateContent"
