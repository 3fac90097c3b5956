"""The Gemini dialect's requests: its paths and auth, and the OpenAI chat
pivot written as Google's GenerateContentRequest (checked against the official
``google-genai`` types, which refuse unknown fields). Answers, streams and
errors: ``test_gemini_dialect_answers``."""

from __future__ import annotations

import importlib

import pytest
from google.genai import types

from gateway_bridge.protocols.base import GatewayError
from gateway_bridge.vendors import dialect_for

gemini = importlib.import_module("gateway_bridge.vendors.gemini")

MODEL = "gemini-2.5-flash"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "city": {"type": "string", "format": "uri-reference", "minLength": 1},
                "unit": {"type": ["string", "null"], "enum": ["C", "F"]},
                "days": {"type": "integer", "enum": [1, 3, 7]},
                "when": {"anyOf": [{"$ref": "#/$defs/Day"}, {"type": "null"}]},
            },
            "required": ["city", "ghost"],
            "additionalProperties": False,
            "$defs": {"Day": {"type": "string", "format": "date-time"}},
        },
        "strict": True,
    },
}


def from_chat(body: dict, stream: bool = False) -> dict:
    out = gemini.from_chat({"model": MODEL, **body}, MODEL, stream)
    # Google's own types take every field we send (they forbid unknown ones)
    for content in out["contents"]:
        types.Content.model_validate(content)
    if "systemInstruction" in out:
        types.Content.model_validate(out["systemInstruction"])
    for tool in out.get("tools", []):
        types.Tool.model_validate(tool)
    if "toolConfig" in out:
        types.ToolConfig.model_validate(out["toolConfig"])
    if "generationConfig" in out:
        types.GenerationConfig.model_validate(out["generationConfig"])
    return out


def refused(body: dict) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        gemini.from_chat({"model": MODEL, **body}, MODEL, False)
    assert caught.value.status == 400
    return caught.value


# --------------------------------------------------------------------------- the interface


def test_the_kind_gemini_gets_this_dialect_and_its_paths():
    assert dialect_for("gemini") is gemini and gemini.PROTOCOL == "gemini"
    assert gemini.auth_headers("AIza-secret", {"x-goog-api-key": "client"}) == [
        ("x-goog-api-key", "AIza-secret")
    ]
    assert gemini.auth_headers("", {}) == []
    assert gemini.path("chat.completions", MODEL, False) == (
        "/v1beta/models/gemini-2.5-flash:generateContent"
    )
    assert gemini.path("chat.completions", f"models/{MODEL}", True) == (
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )
    assert gemini.path("embeddings", "gemini-embedding-001", False) == (
        "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    )
    with pytest.raises(GatewayError) as caught:
        gemini.path("completions", MODEL, False)
    assert caught.value.code == "unsupported" and caught.value.status == 400
    assert gemini.models_path == "/v1beta/models"


def test_native_path_keeps_the_query_but_never_a_key():
    assert gemini.native_path("streamGenerateContent", MODEL, True, "alt=sse") == (
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )
    assert gemini.native_path("countTokens", MODEL, False, "") == (
        "/v1beta/models/gemini-2.5-flash:countTokens"
    )
    leaked = gemini.native_path("streamGenerateContent", MODEL, True, "key=AIza-secret&alt=sse")
    assert "AIza" not in leaked and leaked.endswith("?alt=sse")
    with pytest.raises(GatewayError):
        gemini.native_path("generateContent/../../files", MODEL, False, "")


# --------------------------------------------------------------------------- pivot → Gemini


def test_a_conversation_with_system_images_and_tools_becomes_generate_content():
    out = from_chat(
        {
            "messages": [
                {"role": "system", "content": "Be terse."},
                {"role": "developer", "content": [{"type": "text", "text": "Metric units."}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Where is this, and what's the weather?"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                        {
                            "type": "image_url",
                            "image_url": {"url": "https://ex.com/a/street.JPG?s=1"},
                        },
                    ],
                },
                {"role": "user", "content": "Be quick."},
                {
                    "role": "assistant",
                    "content": "Paris. Checking the weather.",
                    "reasoning_content": "The Eiffel tower is visible.",
                    "tool_calls": [
                        {
                            "id": "call_abc",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_abc", "content": '{"temp_c": 21}'},
                {"role": "user", "content": "Thanks!"},
            ],
            "tools": [WEATHER_TOOL],
            "tool_choice": "auto",
        }
    )
    assert out["systemInstruction"] == {"parts": [{"text": "Be terse."}, {"text": "Metric units."}]}
    user, model, answer = out["contents"]
    assert user["role"] == "user" and user["parts"] == [
        {"text": "Where is this, and what's the weather?"},
        {"inlineData": {"mimeType": "image/png", "data": PNG}},
        {"fileData": {"fileUri": "https://ex.com/a/street.JPG?s=1", "mimeType": "image/jpeg"}},
        {"text": "Be quick."},  # consecutive user turns merge
    ]
    assert model == {
        "role": "model",
        "parts": [
            {"text": "Paris. Checking the weather."},
            {
                "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                "thoughtSignature": "skip_thought_signature_validator",
            },
        ],
    }
    # the tool message is named after its call; the user's text joins its turn
    assert answer == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"temp_c": 21}}},
            {"text": "Thanks!"},
        ],
    }
    assert out["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}


def test_json_schemas_are_cut_to_what_gemini_takes():
    out = from_chat(
        {"messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER_TOOL]}
    )
    [declaration] = out["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "get_weather"
    assert declaration["parameters"] == {
        "type": "OBJECT",
        "properties": {
            "city": {"type": "STRING", "minLength": 1},  # a format Gemini refuses is dropped
            "unit": {"type": "STRING", "nullable": True, "enum": ["C", "F"]},
            "days": {"type": "INTEGER"},  # Gemini's enums are strings
            "when": {"type": "STRING", "format": "date-time", "nullable": True},
        },
        "required": ["city"],
    }
    types.Schema.model_validate(declaration["parameters"])


def test_a_function_without_parameters_is_declared_without_them():
    tool = {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}
    out = from_chat({"messages": [{"role": "user", "content": "Time?"}], "tools": [tool]})
    assert out["tools"] == [{"functionDeclarations": [{"name": "now"}]}]


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"mode": "ANY", "allowedFunctionNames": ["get_weather"]},
        ),
    ],
)
def test_tool_choice_becomes_function_calling_config(choice, config):
    out = from_chat(
        {
            "messages": [{"role": "user", "content": "Weather?"}],
            "tools": [WEATHER_TOOL],
            "tool_choice": choice,
        }
    )
    assert out["toolConfig"] == {"functionCallingConfig": config}


def test_sampling_and_output_format_become_generation_config():
    out = from_chat(
        {
            "messages": [{"role": "user", "content": "A city as JSON"}],
            "max_tokens": 50,
            "max_completion_tokens": 200,
            "temperature": 0.2,
            "top_p": 0.9,
            "stop": "END",
            "seed": 7,
            "n": 2,
            "presence_penalty": 0.5,
            "parallel_tool_calls": True,
            "user": "u-1",
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "city",
                    "strict": True,
                    "schema": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "pop": {"type": "integer"}},
                        "required": ["name", "pop"],
                        "additionalProperties": False,
                    },
                },
            },
        }
    )
    assert out["generationConfig"] == {
        "maxOutputTokens": 200,  # max_completion_tokens wins
        "temperature": 0.2,
        "topP": 0.9,
        "seed": 7,
        "presencePenalty": 0.5,
        "candidateCount": 2,
        "stopSequences": ["END"],
        "responseMimeType": "application/json",
        "responseSchema": {
            "type": "OBJECT",
            "properties": {"name": {"type": "STRING"}, "pop": {"type": "INTEGER"}},
            "propertyOrdering": ["name", "pop"],
            "required": ["name", "pop"],
        },
    }
    plain = from_chat(
        {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}
    )
    assert plain["generationConfig"] == {"responseMimeType": "application/json"}


@pytest.mark.parametrize(
    ("effort", "thinking"),
    [
        ("none", {"thinkingBudget": 0}),
        ("minimal", {"thinkingBudget": 1024, "includeThoughts": True}),
        ("low", {"thinkingBudget": 1024, "includeThoughts": True}),
        ("medium", {"thinkingBudget": 8192, "includeThoughts": True}),
        ("high", {"thinkingBudget": 24576, "includeThoughts": True}),
    ],
)
def test_reasoning_effort_becomes_a_thinking_budget(effort, thinking):
    out = from_chat({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": effort})
    assert out["generationConfig"]["thinkingConfig"] == thinking


def test_documents_and_audio_become_inline_data():
    pdf = "JVBERi0xLjQK"
    out = from_chat(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "file",
                            "file": {
                                "file_data": f"data:application/pdf;base64,{pdf}",
                                "filename": "a.pdf",
                            },
                        },
                        {"type": "file", "file": {"file_data": pdf}},
                        {
                            "type": "input_audio",
                            "input_audio": {"data": "UklGRg==", "format": "wav"},
                        },
                    ],
                }
            ]
        }
    )
    assert out["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "application/pdf", "data": pdf}},
        {"inlineData": {"mimeType": "application/pdf", "data": pdf}},
        {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}},
    ]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"audio": {"voice": "alloy", "format": "mp3"}}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "https://ex.com/pic"}}
                        ],
                    }
                ]
            },
            "messages[0].content[0].image_url.url",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}
                ]
            },
            "messages[0].content[0].file.file_id",
        ),
        (
            {"messages": [{"role": "tool", "tool_call_id": "nobody", "content": "x"}]},
            "messages[0].tool_call_id",
        ),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ],
)
def test_what_gemini_cannot_take_is_a_400_naming_it(body, param):
    err = refused({"messages": [{"role": "user", "content": "x"}], **body})
    assert err.param == param
    assert param.split(".")[0].split("[")[0] in err.message


def test_logprobs_become_response_logprobs_and_come_back_in_openais_shape():
    body = {"messages": [{"role": "user", "content": "Hi"}], "logprobs": True, "top_logprobs": 2}
    config = from_chat(body)["generationConfig"]
    assert (config["responseLogprobs"], config["logprobs"]) == (True, 2)
    candidate = {
        "content": {"role": "model", "parts": [{"text": "Hi there"}]},
        "finishReason": "STOP",
        "logprobsResult": {
            "chosenCandidates": [
                {"token": "Hi", "logProbability": -0.1},
                {"token": " there", "logProbability": -0.5},
            ],
            "topCandidates": [
                {"candidates": [{"token": "Hi", "logProbability": -0.1}]},
                {"candidates": [{"token": " there", "logProbability": -0.5}, {"token": 7}]},
            ],
        },
    }
    answer, _ = gemini.to_chat({"candidates": [candidate]}, "public")
    content = answer["choices"][0]["logprobs"]["content"]
    assert [(e["token"], e["logprob"]) for e in content] == [("Hi", -0.1), (" there", -0.5)]
    assert content[1]["top_logprobs"] == [
        {"token": " there", "logprob": -0.5, "bytes": list(b" there")}
    ]  # the malformed alternative is left out
    plain, _ = gemini.to_chat({"candidates": [{**candidate, "logprobsResult": None}]}, "p")
    assert plain["choices"][0]["logprobs"] is None
    reader = gemini.StreamReader("public")
    chunks = reader.feed(None, {"candidates": [candidate]})
    assert chunks[0]["choices"][0]["logprobs"]["content"][0]["token"] == "Hi"


def test_embeddings_become_batch_embed_contents():
    out = gemini.from_chat(
        {"model": "gemini-embedding-001", "input": ["a", "b"], "dimensions": 256},
        "gemini-embedding-001",
        False,
    )
    assert out == {
        "requests": [
            {
                "model": "models/gemini-embedding-001",
                "content": {"parts": [{"text": t}]},
                "outputDimensionality": 256,
            }
            for t in ("a", "b")
        ]
    }
    with pytest.raises(GatewayError) as caught:
        gemini.from_chat({"input": [[1, 2, 3]]}, "gemini-embedding-001", False)
    assert caught.value.param == "input"
    answer, usage = gemini.to_chat(
        {"embeddings": [{"values": [0.1, 0.2]}, {"values": [0.3, 0.4]}]}, "emb"
    )
    assert [d["embedding"] for d in answer["data"]] == [[0.1, 0.2], [0.3, 0.4]]
    assert answer["object"] == "list" and usage is None  # Google reports none: the gateway counts
