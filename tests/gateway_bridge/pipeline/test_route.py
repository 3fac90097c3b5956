"""The route stage: every path an SDK calls maps to its protocol, endpoint
and action; unknown paths answer in the protocol their prefix implies."""

from __future__ import annotations

import json

import pytest

from gateway_bridge.pipeline import route
from gateway_bridge.pipeline.adapters import ADAPTERS

ANTHROPIC = {"anthropic-version": "2023-06-01"}


@pytest.mark.parametrize(
    ("method", "path", "headers", "expected"),
    [
        # OpenAI SDK
        ("POST", "/v1/chat/completions", {}, ("openai", "chat.completions", route.GENERATE, None)),
        ("POST", "/v1/chat/completions/", {}, ("openai", "chat.completions", route.GENERATE, None)),
        ("POST", "/v1/completions", {}, ("openai", "completions", route.GENERATE, None)),
        ("POST", "/v1/embeddings", {}, ("openai", "embeddings", route.GENERATE, None)),
        ("GET", "/v1/models", {}, ("openai", "models", route.MODELS, None)),
        ("GET", "/v1/models/", {}, ("openai", "models", route.MODELS, None)),
        ("GET", "/v1/models/sim-chat", {}, ("openai", "models", route.MODEL, "sim-chat")),
        # A key's balance and usage: OpenAI's old billing paths, OpenRouter's key path
        (
            "GET",
            "/v1/dashboard/billing/subscription",
            {},
            ("openai", "billing.subscription", route.ACCOUNT, None),
        ),
        (
            "GET",
            "/v1/dashboard/billing/usage",
            {},
            ("openai", "billing.usage", route.ACCOUNT, None),
        ),
        ("GET", "/v1/key", {}, ("openai", "key", route.ACCOUNT, None)),
        ("GET", "/api/v1/key", {}, ("openai", "key", route.ACCOUNT, None)),
        # Anthropic SDK
        ("POST", "/v1/messages", ANTHROPIC, ("anthropic", "messages", route.GENERATE, None)),
        ("POST", "/v1/messages/", ANTHROPIC, ("anthropic", "messages", route.GENERATE, None)),
        (
            "POST",
            "/v1/messages/count_tokens",
            ANTHROPIC,
            ("anthropic", "count_tokens", route.COUNT, None),
        ),
        ("GET", "/v1/models", ANTHROPIC, ("anthropic", "models", route.MODELS, None)),
        ("GET", "/v1/models/sim-chat", ANTHROPIC, ("anthropic", "models", route.MODEL, "sim-chat")),
        # Gemini SDK (google-genai)
        ("GET", "/v1beta/models", {}, ("gemini", "models", route.MODELS, None)),
        ("GET", "/v1beta/models/sim-chat", {}, ("gemini", "models", route.MODEL, "sim-chat")),
        (
            "POST",
            "/v1beta/models/sim-chat:generateContent",
            {},
            ("gemini", "generateContent", route.GENERATE, "sim-chat"),
        ),
        (
            "POST",
            "/v1beta/models/sim-chat:streamGenerateContent",
            {},
            ("gemini", "streamGenerateContent", route.GENERATE, "sim-chat"),
        ),
        (
            "POST",
            "/v1beta/models/sim-chat:countTokens",
            {},
            ("gemini", "countTokens", route.COUNT, "sim-chat"),
        ),
        (
            "POST",
            "/v1beta/models/sim-embed:embedContent",
            {},
            ("gemini", "embedContent", route.GENERATE, "sim-embed"),
        ),
        (
            "POST",
            "/v1beta/models/sim-embed:batchEmbedContents",
            {},
            ("gemini", "batchEmbedContents", route.GENERATE, "sim-embed"),
        ),
    ],
)
def test_every_sdk_path_maps_to_its_protocol_and_endpoint(method, path, headers, expected):
    got = route.resolve(path, headers)
    assert (got.protocol, got.endpoint, got.action, got.model) == expected
    assert got.method == method


@pytest.mark.parametrize(
    ("path", "protocol"),
    [
        ("/v1beta/models/sim-chat:explode", "gemini"),
        ("/v1beta/tunedModels", "gemini"),
        ("/v1beta", "gemini"),
        ("/v1/messages/batches", "anthropic"),
        ("/v1/assistants", "openai"),
        ("/v1/", "openai"),
        ("/v1", "openai"),
    ],
)
def test_unknown_paths_answer_404_in_their_prefixs_protocol(path, protocol):
    got = route.resolve(path, {})
    assert (got.protocol, got.action, got.method) == (protocol, route.UNKNOWN, None)
    err = route.refusal(got, "POST", path)
    assert (err.status, err.code) == (404, "unknown_url")
    status, body = ADAPTERS[got.protocol].error_response(err)
    payload = json.loads(body)
    assert status == 404
    if protocol == "gemini":
        assert payload["error"]["status"] == "NOT_FOUND"
    elif protocol == "anthropic":
        assert payload["type"] == "error" and payload["error"]["type"] == "not_found_error"
    else:
        assert payload["error"]["code"] == "unknown_url"


def test_a_known_path_with_the_wrong_method_is_405_with_allow():
    got = route.resolve("/v1/chat/completions", {})
    err = route.refusal(got, "GET", "/v1/chat/completions")
    assert (err.status, err.code) == (405, "method_not_allowed")
    assert ("allow", "POST") in err.headers
    models = route.resolve("/v1beta/models", {})
    assert ("allow", "GET") in route.refusal(models, "POST", "/v1beta/models").headers


def test_fixed_routes_are_built_once():
    assert route.resolve("/v1/chat/completions", {}) is route.resolve("/v1/chat/completions", {})


GOOG = {"x-goog-api-key": "k"}


@pytest.mark.parametrize(
    ("method", "path", "headers", "query", "expected"),
    [
        # google-genai's default API version, v1: the verb alone says Gemini.
        (
            "POST",
            "/v1/models/sim-chat:generateContent",
            GOOG,
            b"",
            ("gemini", "generateContent", route.GENERATE, "sim-chat"),
        ),
        (
            "POST",
            "/v1/models/sim-chat:streamGenerateContent",
            {},
            b"alt=sse",
            ("gemini", "streamGenerateContent", route.GENERATE, "sim-chat"),
        ),
        ("POST", "/v1/models/m:countTokens", {}, b"", ("gemini", "countTokens", route.COUNT, "m")),
        (
            "POST",
            "/v1/models/e:embedContent",
            {},
            b"",
            ("gemini", "embedContent", route.GENERATE, "e"),
        ),
        (
            "POST",
            "/v1/models/e:batchEmbedContents",
            {},
            b"",
            ("gemini", "batchEmbedContents", route.GENERATE, "e"),
        ),
        # The model list and one model: Gemini's by its key's header or ?key=.
        ("GET", "/v1/models", GOOG, b"", ("gemini", "models", route.MODELS, None)),
        ("GET", "/v1/models", {}, b"pageSize=50&key=k", ("gemini", "models", route.MODELS, None)),
        ("GET", "/v1/models/sim-chat", GOOG, b"", ("gemini", "models", route.MODEL, "sim-chat")),
        ("GET", "/v1/models/sim-chat", {}, b"key=k", ("gemini", "models", route.MODEL, "sim-chat")),
        # Not a Gemini key: OpenAI's (a "monkey=" parameter is not a key).
        ("GET", "/v1/models", {}, b"monkey=1", ("openai", "models", route.MODELS, None)),
        # OpenAI ids with a colon (fine-tunes) or a slash stay OpenAI model ids.
        (
            "GET",
            "/v1/models/ft:gpt-4o-mini:acme::abc",
            {},
            b"",
            ("openai", "models", route.MODEL, "ft:gpt-4o-mini:acme::abc"),
        ),
        (
            "GET",
            "/v1/models/deepseek/deepseek-chat",
            {},
            b"",
            ("openai", "models", route.MODEL, "deepseek/deepseek-chat"),
        ),
    ],
)
def test_gemini_under_v1_and_the_ambiguous_model_paths(method, path, headers, query, expected):
    got = route.resolve(path, headers, query)
    assert (got.protocol, got.endpoint, got.action, got.model) == expected
    assert got.method == method
