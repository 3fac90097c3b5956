"""Vendor mode: API keys in each vendor's place and refusals in each vendor's
format, per-key faults, and the request capture of ``/admin/requests``."""

from __future__ import annotations

import base64
import json

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from tests.inference_node.server_helpers import TOKEN, inprocess_node, node_config, node_process

GOOD = "sk-good-0123456789abcd"
OTHER = "sk-other-9876543210wxyz"
BAD = "sk-proj-wrongkey9z8y"
MODELS = "gpt-sim,claude-sim,gemini-sim,text-embed-sim"
CHAT = {"model": "gpt-sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
MESSAGE = {"model": "claude-sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
GENERATE = {"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 3}}
GEMINI_PATH = "/v1beta/models/gemini-sim:generateContent"
GEMINI_INVALID_KEY = {
    "error": {
        "code": 400,
        "message": "API key not valid. Please pass a valid API key.",
        "status": "INVALID_ARGUMENT",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
            }
        ],
    }
}


@pytest.fixture(scope="module")
def node():
    with inprocess_node("--token", TOKEN, "--api-keys", f"{GOOD},{OTHER}", "--models", MODELS) as n:
        yield n


@pytest.fixture(autouse=True)
def clean(node):
    node.post("/admin/reset")
    node.post("/admin/faults", {"key_faults": {}, "key_retry_after_seconds": 2})


def openai_call(node, key: str | None):
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return node.post("/v1/chat/completions", CHAT, token="", headers=headers)


def anthropic_call(node, key: str | None, header: str = "x-api-key"):
    headers = {"anthropic-version": "2023-06-01"}
    if key:
        headers[header] = f"Bearer {key}" if header == "authorization" else key
    return node.post("/v1/messages", MESSAGE, token="", headers=headers)


def gemini_call(node, key: str | None, in_query: bool = False):
    if in_query:
        return node.post(f"{GEMINI_PATH}?key={key}", GENERATE, token="")
    headers = {"x-goog-api-key": key} if key else {}
    return node.post(GEMINI_PATH, GENERATE, token="", headers=headers)


CALLS = {"openai": openai_call, "anthropic": anthropic_call, "gemini": gemini_call}


def test_a_node_process_serves_every_front_end_with_vendor_keys():
    with node_process("--api-keys", f"{GOOD},{OTHER}", "--models", MODELS, via="module") as node:
        oa = openai.OpenAI(base_url=node.base_url + "/v1", api_key=GOOD, max_retries=0)
        chat = oa.chat.completions.create(model="gpt-sim", messages=CHAT["messages"], max_tokens=4)
        assert chat.usage.completion_tokens == 4
        embedding = oa.embeddings.create(model="text-embed-sim", input="hello")
        assert len(embedding.data[0].embedding) == 256
        claude = anthropic.Anthropic(base_url=node.base_url, api_key=OTHER, max_retries=0)
        message = claude.messages.create(
            model="claude-sim", max_tokens=4, messages=MESSAGE["messages"]
        )
        assert message.usage.output_tokens == 4
        gemini = genai.Client(api_key=GOOD, http_options=types.HttpOptions(base_url=node.base_url))
        answer = gemini.models.generate_content(
            model="gemini-sim",
            contents="hi",
            config=types.GenerateContentConfig(max_output_tokens=4),
        )
        assert answer.usage_metadata.candidates_token_count == 4
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=node.base_url + "/v1", api_key=BAD, max_retries=0).models.list()
        assert node.request("GET", "/health", token="")[0] == 200


@pytest.mark.parametrize("front", ["openai", "anthropic", "gemini"])
def test_each_front_end_takes_its_own_key_header(node, front):
    assert CALLS[front](node, GOOD)[0] == 200
    assert CALLS[front](node, OTHER)[0] == 200


def test_other_accepted_key_places(node):
    assert anthropic_call(node, GOOD, header="authorization")[0] == 200  # the 2.x SDK's way
    assert gemini_call(node, GOOD, in_query=True)[0] == 200
    assert gemini_call(node, BAD, in_query=True)[2] == GEMINI_INVALID_KEY


def test_openai_refuses_a_wrong_key_showing_only_its_last_four(node):
    status, _, error = openai_call(node, BAD)
    assert status == 401
    assert error["error"]["code"] == "invalid_api_key"
    assert error["error"]["message"].startswith("Incorrect API key provided: sk-...9z8y.")
    assert BAD not in json.dumps(error)
    status, _, error = openai_call(node, None)
    assert status == 401
    assert error["error"]["message"].startswith("You didn't provide an API key.")


def test_anthropic_refuses_a_wrong_or_missing_key(node):
    status, headers, error = anthropic_call(node, BAD)
    assert status == 401
    assert error["type"] == "error"
    assert error["error"] == {"type": "authentication_error", "message": "invalid x-api-key"}
    assert error["request_id"] == headers["request-id"]
    assert anthropic_call(node, None)[2]["error"]["message"] == "x-api-key header is required"


def test_gemini_refuses_a_wrong_or_missing_key(node):
    status, _, error = gemini_call(node, BAD)
    assert status == 400
    assert error == GEMINI_INVALID_KEY
    status, _, error = gemini_call(node, None)
    assert (status, error["error"]["status"]) == (403, "PERMISSION_DENIED")


def test_model_lists_need_a_key_but_health_does_not(node):
    assert node.request("GET", "/v1/models", token="")[0] == 401
    status, _, page = node.request(
        "GET", "/v1/models", token="", headers={"anthropic-version": "x", "x-api-key": GOOD}
    )
    assert status == 200 and page["data"][0]["type"] == "model"
    status, _, listed = node.request("GET", f"/v1beta/models?key={GOOD}", token="")
    assert status == 200 and listed["models"][0]["name"] == "models/gpt-sim"
    assert node.request("GET", "/health", token="")[0] == 200


def test_the_node_token_is_not_a_vendor_key_but_still_opens_admin(node):
    assert openai_call(node, TOKEN)[0] == 401
    assert node.request("GET", "/admin/faults")[0] == 200


def test_one_key_of_a_pool_rate_limited_while_the_other_works(node):
    status, _, settings = node.post(
        "/admin/faults", {"key_faults": {OTHER: 429}, "key_retry_after_seconds": 7}
    )
    assert status == 200 and settings["key_faults"] == {OTHER: 429}
    expected = {
        "openai": lambda e: e["error"]["type"] == "rate_limit_error",
        "anthropic": lambda e: e["error"]["type"] == "rate_limit_error",
        "gemini": lambda e: e["error"]["status"] == "RESOURCE_EXHAUSTED",
    }
    for front, call in CALLS.items():
        status, headers, error = call(node, OTHER)
        assert status == 429, front
        assert headers["retry-after"] == "7"
        assert expected[front](error), error
        assert call(node, GOOD)[0] == 200


@pytest.mark.parametrize(
    ("fault", "front", "status", "kind"),
    [
        (401, "openai", 401, "invalid_api_key"),
        (401, "anthropic", 401, "authentication_error"),
        (401, "gemini", 400, "INVALID_ARGUMENT"),
        (403, "openai", 403, "permission_error"),
        (403, "anthropic", 403, "permission_error"),
        (403, "gemini", 403, "PERMISSION_DENIED"),
        (500, "openai", 500, "server_error"),
        (500, "anthropic", 500, "api_error"),
        (500, "gemini", 500, "INTERNAL"),
        (529, "openai", 503, "server_error"),
        (529, "anthropic", 529, "overloaded_error"),
        (529, "gemini", 503, "UNAVAILABLE"),
        (503, "anthropic", 503, "overloaded_error"),
    ],
)
def test_key_faults_answer_in_each_vendors_format(node, fault, front, status, kind):
    node.post("/admin/faults", {"key_faults": {GOOD: fault}})
    got, _, error = CALLS[front](node, GOOD)
    assert got == status
    if front == "gemini":
        assert error["error"]["status"] == kind
    elif front == "anthropic":
        assert error["error"]["type"] == kind
    else:
        assert kind in (error["error"]["type"], error["error"]["code"])


@pytest.mark.parametrize("value", [{"k": 418}, {"k": "429"}, [GOOD], {"": 429}, {"k": True}])
def test_bad_key_faults_are_refused(node, value):
    status, _, error = node.post("/admin/faults", {"key_faults": value})
    assert status == 400
    assert error["error"]["param"] == "key_faults"
    assert node.request("GET", "/admin/faults")[2]["key_faults"] == {}


def test_key_faults_set_at_start_need_no_api_keys():
    flags = ("--key-faults", f"{BAD}=429", "--key-retry-after-seconds", "5", "--models", MODELS)
    with inprocess_node(*flags) as node:
        status, headers, _ = openai_call(node, BAD)
        assert (status, headers["retry-after"]) == (429, "5")
        assert openai_call(node, GOOD)[0] == 200  # an open node takes any other key


def test_capture_returns_the_exact_bytes_and_masks_the_keys(node):
    raw = '{ "model":"gpt-sim",\n "messages":[{"role":"user","content":"héllo ✓"}], "max_tokens":2}'
    sent = raw.encode()
    headers = {"authorization": f"Bearer {GOOD}", "content-type": "application/json", "x-t": "1"}
    assert node.raw("POST", "/v1/chat/completions", sent, headers)[0] == 200
    anthropic_call(node, OTHER)
    gemini_call(node, BAD, in_query=True)
    node.request("GET", "/v1/models", token="", headers={"authorization": f"Bearer {GOOD}"})
    status, _, captured = node.request("GET", "/admin/requests")
    assert status == 200
    first, second, third = captured["requests"]  # GETs are not kept; refusals are
    assert captured["total"] == 3
    assert first["method"] == "POST" and first["path"] == "/v1/chat/completions"
    assert base64.b64decode(first["body_base64"]) == sent
    assert first["headers"]["authorization"] == "…abcd"
    assert first["headers"]["x-t"] == "1"
    assert second["headers"]["x-api-key"] == "…wxyz"
    assert json.loads(base64.b64decode(second["body_base64"])) == MESSAGE
    assert third["path"] == f"{GEMINI_PATH}?key=…9z8y"
    assert GOOD not in json.dumps(captured) and BAD not in json.dumps(captured)
    node.post("/admin/reset")
    assert node.request("GET", "/admin/requests")[2] == {"requests": [], "total": 0}


def test_capture_keeps_the_last_32(node):
    for index in range(35):
        node.post(
            "/v1/embeddings",
            {"model": "text-embed-sim", "input": f"text {index}"},
            token="",
            headers={"authorization": f"Bearer {GOOD}"},
        )
    entries = node.request("GET", "/admin/requests")[2]["requests"]
    assert len(entries) == 32
    bodies = [json.loads(base64.b64decode(e["body_base64"]))["input"] for e in entries]
    assert bodies[0] == "text 3" and bodies[-1] == "text 34"


def test_the_capture_is_an_admin_endpoint(node):
    assert node.request("GET", "/admin/requests", token="")[0] == 401
    with inprocess_node() as open_node:
        status, _, error = open_node.request("GET", "/admin/requests")
        assert (status, error["error"]["code"]) == (403, "admin_disabled")


def test_the_keys_can_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("SIM_API_KEYS", f"{GOOD},{OTHER}")
    assert node_config().api_keys == (GOOD, OTHER)
    assert node_config("--api-keys", BAD).api_keys == (BAD,)  # the flag wins
