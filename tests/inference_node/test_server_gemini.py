"""The simulator's Gemini front-end, through the official ``google-genai`` SDK and
raw HTTP: answers, both stream framings, implicit caching, thinking, function
calling, media counting, proto JSON spellings and errors in Google's shape."""

from __future__ import annotations

import base64
import json

import pytest
from google import genai
from google.genai import errors, types

from console.kernel.tokens import media_tokens
from tests.inference_node.server_helpers import TOKEN, inprocess_node, metric_value

MODEL = "gemini-sim"
SYSTEM = "You are the support assistant of a token-billing console. Answer briefly. " * 4
PATH = f"/v1beta/models/{MODEL}:generateContent"


@pytest.fixture(scope="module")
def node():
    with inprocess_node("--token", TOKEN, "--models", f"gpt-sim,{MODEL},text-embed-sim") as node:
        yield node


@pytest.fixture(autouse=True)
def clean(node):
    node.post("/admin/reset")


def make_client(node, version: str | None = None) -> genai.Client:
    options = types.HttpOptions(base_url=node.base_url, api_version=version, timeout=10_000)
    return genai.Client(api_key=TOKEN, http_options=options)


@pytest.fixture
def client(node):
    return make_client(node)


def config(**fields) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(**fields)


def call(node, body: dict, path: str = PATH) -> tuple[int, dict]:
    status, _, data = node.post(path, body, headers={"x-goog-api-key": TOKEN}, token="")
    return status, data


def contents(text: str) -> list[dict]:
    return [{"role": "user", "parts": [{"text": text}]}]


def test_a_plain_answer_through_the_sdk(node, client):
    response = client.models.generate_content(
        model=MODEL, contents="Tell me about invoices.", config=config(max_output_tokens=12)
    )
    assert response.text
    candidate = response.candidates[0]
    assert candidate.finish_reason == types.FinishReason.MAX_TOKENS
    assert candidate.content.role == "model"
    usage = response.usage_metadata
    assert usage.candidates_token_count == 12
    assert usage.total_token_count == usage.prompt_token_count + 12
    assert usage.cached_content_token_count is None and usage.thoughts_token_count is None
    assert response.model_version == MODEL and response.response_id
    counted = client.models.count_tokens(model=MODEL, contents="Tell me about invoices.")
    assert counted.total_tokens == usage.prompt_token_count
    assert metric_value(node.metrics(), "vllm:generation_tokens_total", MODEL) == 12


def test_a_short_answer_stops(client):
    response = client.models.generate_content(model=MODEL, contents="Hi")
    assert response.candidates[0].finish_reason == types.FinishReason.STOP


def test_the_sdk_stream_carries_running_usage_and_ends_with_the_finish(client):
    chunks = list(
        client.models.generate_content_stream(
            model=MODEL, contents="Stream a short answer.", config=config(max_output_tokens=6)
        )
    )
    assert len(chunks) == 6
    assert [c.usage_metadata.candidates_token_count for c in chunks] == [1, 2, 3, 4, 5, 6]
    assert [c.candidates[0].finish_reason for c in chunks][-1] == types.FinishReason.MAX_TOKENS
    assert all(c.candidates[0].finish_reason is None for c in chunks[:-1])
    plain = client.models.generate_content(
        model=MODEL, contents="Stream a short answer.", config=config(max_output_tokens=6)
    )
    assert "".join(c.text for c in chunks) == plain.text


def test_without_alt_sse_the_stream_is_a_json_array(node):
    body = json.dumps(
        {"contents": contents("Stream it"), "generationConfig": {"maxOutputTokens": 4}}
    )
    headers = {"x-goog-api-key": TOKEN, "content-type": "application/json"}
    path = f"/v1beta/models/{MODEL}:streamGenerateContent"
    status, response_headers, array = node.raw("POST", path, body.encode(), headers)
    assert status == 200
    assert response_headers["content-type"].startswith("application/json")
    chunks = json.loads(array)
    assert len(chunks) == 4 and chunks[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"
    _, _, sse = node.raw("POST", path + "?alt=sse", body.encode(), headers)
    events = [json.loads(line[len("data: ") :]) for line in sse.decode().split("\r\n\r\n") if line]
    text = "".join(e["candidates"][0]["content"]["parts"][0]["text"] for e in events)
    assert text == "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)


def test_a_repeated_prefix_is_reported_as_implicitly_cached(client):
    def ask(question: str):
        return client.models.generate_content(
            model=MODEL,
            contents=question,
            config=config(system_instruction=SYSTEM, max_output_tokens=4),
        ).usage_metadata

    first = ask("How do I rotate a key?")
    assert first.cached_content_token_count is None
    second = ask("Where are my invoices?")
    cached = second.cached_content_token_count
    assert cached and cached % 16 == 0
    assert cached < second.prompt_token_count  # included in the prompt count, as Google does
    assert second.total_token_count == second.prompt_token_count + 4


def test_thinking_reports_thought_tokens_and_shows_thoughts_when_asked(client):
    thinking = types.ThinkingConfig(thinking_budget=512, include_thoughts=True)
    response = client.models.generate_content(
        model=MODEL, contents="Think first.", config=config(thinking_config=thinking)
    )
    parts = response.candidates[0].content.parts
    assert parts[0].thought is True and parts[0].text
    assert not parts[-1].thought and parts[-1].text
    usage = response.usage_metadata
    assert 0 < usage.thoughts_token_count <= 512
    assert usage.total_token_count == (
        usage.prompt_token_count + usage.candidates_token_count + usage.thoughts_token_count
    )
    hidden = client.models.generate_content(
        model=MODEL,
        contents="Think first.",
        config=config(thinking_config=types.ThinkingConfig(thinking_budget=512)),
    )
    assert not any(p.thought for p in hidden.candidates[0].content.parts)
    assert hidden.usage_metadata.thoughts_token_count == usage.thoughts_token_count


def test_thoughts_count_against_the_output_budget(client):
    thinking = types.ThinkingConfig(thinking_budget=-1)  # dynamic: up to half of the budget
    usage = client.models.generate_content(
        model=MODEL,
        contents="Think",
        config=config(max_output_tokens=20, thinking_config=thinking),
    ).usage_metadata
    assert 0 < usage.thoughts_token_count <= 10
    assert usage.thoughts_token_count + usage.candidates_token_count == 20


def test_function_calling_then_an_answer_to_the_response(client):
    weather = types.FunctionDeclaration(
        name="get_weather",
        description="The weather of a city today.",
        parameters=types.Schema(
            type="OBJECT", properties={"city": types.Schema(type="STRING")}, required=["city"]
        ),
    )
    tools = [types.Tool(function_declarations=[weather])]
    question = types.Content(role="user", parts=[types.Part(text="What is the weather in Paris?")])
    response = client.models.generate_content(
        model=MODEL, contents=[question], config=config(tools=tools)
    )
    call = response.function_calls[0]
    assert (call.name, call.args) == ("get_weather", {"city": "Paris"})
    assert response.candidates[0].finish_reason == types.FinishReason.STOP
    result = types.Part.from_function_response(name="get_weather", response={"sky": "Sunny"})
    history = [question, response.candidates[0].content, types.Content(role="user", parts=[result])]
    answer = client.models.generate_content(
        model=MODEL, contents=history, config=config(tools=tools)
    )
    assert "Sunny" in answer.text


def test_inline_images_are_counted_by_the_media_rule(client):
    image = types.Part.from_bytes(data=b"\x89PNG" + bytes(2996), mime_type="image/png")
    plain = client.models.generate_content(
        model=MODEL, contents=["Describe this."], config=config(max_output_tokens=2)
    )
    with_image = client.models.generate_content(
        model=MODEL, contents=[image, "Describe this."], config=config(max_output_tokens=2)
    )
    difference = (
        with_image.usage_metadata.prompt_token_count - plain.usage_metadata.prompt_token_count
    )
    assert difference == media_tokens(3000)
    by_uri = types.Part.from_uri(file_uri="https://example.com/a.pdf", mime_type="application/pdf")
    with_file = client.models.generate_content(
        model=MODEL, contents=[by_uri, "Describe this."], config=config(max_output_tokens=2)
    )
    assert (
        with_file.usage_metadata.prompt_token_count - plain.usage_metadata.prompt_token_count
        == media_tokens(0)
    )


def test_snake_case_and_camel_case_are_the_same_request(node):
    data = base64.b64encode(b"%PDF" + bytes(1496)).decode()
    camel = {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"inlineData": {"mimeType": "application/pdf", "data": data}},
                    {"text": "Summarize."},
                ],
            }
        ],
        "generationConfig": {"maxOutputTokens": 5, "stopSequences": ["zzz"]},
    }
    snake = {
        "system_instruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"inline_data": {"mime_type": "application/pdf", "data": data}},
                    {"text": "Summarize."},
                ],
            }
        ],
        "generation_config": {"max_output_tokens": 5, "stop_sequences": ["zzz"]},
    }
    (status_a, a), (status_b, b) = call(node, camel), call(node, snake)
    assert status_a == status_b == 200
    assert a["candidates"][0]["content"] == b["candidates"][0]["content"]
    assert a["usageMetadata"]["promptTokenCount"] == b["usageMetadata"]["promptTokenCount"]


def test_json_output_follows_the_response_schema(client):
    schema = types.Schema(
        type="OBJECT",
        properties={"city": types.Schema(type="STRING"), "days": types.Schema(type="INTEGER")},
        required=["city", "days"],
    )
    response = client.models.generate_content(
        model=MODEL,
        contents="Plan a trip to Rome.",
        config=config(response_mime_type="application/json", response_schema=schema),
    )
    answer = json.loads(response.text)
    assert answer["city"] == "Rome" and isinstance(answer["days"], int)


def test_v1_serves_the_same_as_v1beta(node):
    client = make_client(node, "v1")
    response = client.models.generate_content(
        model=MODEL, contents="Hello", config=config(max_output_tokens=3)
    )
    assert response.usage_metadata.candidates_token_count == 3
    assert [m.name for m in client.models.list()] == ["models/gpt-sim", f"models/{MODEL}"]


def test_the_model_list_has_geminis_shape(node, client):
    models = list(client.models.list())
    assert [m.name for m in models] == ["models/gpt-sim", f"models/{MODEL}"]
    assert "generateContent" in models[0].supported_actions
    status, _, one = node.request(
        "GET", f"/v1beta/models/{MODEL}", headers={"x-goog-api-key": TOKEN}, token=""
    )
    assert status == 200
    assert one["name"] == f"models/{MODEL}" and one["inputTokenLimit"] == 8192
    assert set(one) >= {"displayName", "outputTokenLimit", "supportedGenerationMethods"}


@pytest.mark.parametrize(
    ("body", "status", "name", "message"),
    [
        ({"contents": []}, 400, "INVALID_ARGUMENT", "contents is not specified"),
        (
            {"contents": contents("hi"), "bogus": 1},
            400,
            "INVALID_ARGUMENT",
            'Unknown name "bogus": Cannot find field.',
        ),
        (
            {"contents": [{"role": "robot", "parts": [{"text": "hi"}]}]},
            400,
            "INVALID_ARGUMENT",
            "Please use a valid role",
        ),
        (
            {"contents": contents("hi"), "generationConfig": {"temperature": 9}},
            400,
            "INVALID_ARGUMENT",
            "temperature",
        ),
    ],
)
def test_invalid_requests_get_googles_error_shape(node, body, status, name, message):
    got, error = call(node, body)
    assert got == status
    assert error["error"]["code"] == status
    assert error["error"]["status"] == name
    assert message in error["error"]["message"]


def test_an_unknown_model_is_not_found(client):
    with pytest.raises(errors.ClientError) as raised:
        client.models.generate_content(model="gemini-nope", contents="hi")
    assert raised.value.code == 404
    assert raised.value.status == "NOT_FOUND"


def test_injected_faults_answer_in_googles_format(node):
    node.post("/admin/faults", {"fault_429_rate": 1.0})
    try:
        status, error = call(node, {"contents": contents("hi")})
    finally:
        node.post("/admin/faults", {"fault_429_rate": 0.0})
    assert status == 429
    assert error["error"]["status"] == "RESOURCE_EXHAUSTED"


def test_the_prompt_counts_as_the_gateway_estimates_it(node):
    from gateway_bridge.protocols.gemini.translate import parse_generate

    body = {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "The weather of a city.",
                        "parameters": {
                            "type": "OBJECT",
                            "properties": {"city": {"type": "STRING"}},
                        },
                    }
                ]
            }
        ],
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
            {
                "role": "model",
                "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"sky": "Sunny"}}},
                    {"text": "Thanks"},
                ],
            },
        ],
    }
    status, answer = call(node, body)
    assert status == 200
    estimate = parse_generate(MODEL, body, stream=False, alt_sse=False).prompt_tokens_estimate
    assert answer["usageMetadata"]["promptTokenCount"] == estimate


def test_several_candidates_are_answered_and_counted(client):
    response = client.models.generate_content(
        model=MODEL, contents="Hello", config=config(candidate_count=3, max_output_tokens=5)
    )
    assert [c.index for c in response.candidates] == [0, 1, 2]
    texts = {c.content.parts[0].text for c in response.candidates}
    assert len(texts) == 3
    assert response.usage_metadata.candidates_token_count == 15
