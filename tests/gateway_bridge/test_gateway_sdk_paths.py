"""The paths the official SDKs use by default, verbatim: google-genai's
default API version (``/v1/models/{model}:generateContent``, not ``/v1beta``)
and the openai SDK's ``models.retrieve`` (model ids with a ``/`` too), each
answered in the caller's own protocol, errors included."""

from __future__ import annotations

import json

import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from inference_node.models import NodeModel
from tests.factories import OrganizationFactory
from tests.gateway_bridge.test_gateway_openai import auth, client, raw_request
from tests.gateway_bridge.vendor_fixtures import captured, demo_channels
from tests.inference_node.factories import NodeFactory


def default_gemini_client(gw, raw) -> genai.Client:
    """google-genai as a user builds it: no ``api_version``, only the base URL."""
    c = genai.Client(api_key=raw, http_options=types.HttpOptions(base_url=gw.url, timeout=20_000))
    # The point of these tests: the SDK's default is the v1 API, not v1beta.
    assert c._api_client._http_options.api_version == "v1"
    return c


def test_google_genai_default_client_generates_streams_and_counts(gw, tenant):
    c = default_gemini_client(gw, tenant.raw)
    answer = c.models.generate_content(model="sim-chat-small", contents="Hello there")
    assert answer.text
    assert answer.usage_metadata.prompt_token_count > 0
    chunks = list(
        c.models.generate_content_stream(model="sim-chat-small", contents="Tell me a story")
    )
    assert "".join(ch.text or "" for ch in chunks)
    assert chunks[-1].usage_metadata.candidates_token_count > 0
    counted = c.models.count_tokens(model="sim-chat-small", contents="Hello there")
    assert counted.total_tokens == answer.usage_metadata.prompt_token_count
    embedded = c.models.embed_content(model="sim-embed", contents=["one", "two"])
    assert len(embedded.embeddings) == 2 and embedded.embeddings[0].values
    # Each call was recorded as a Gemini call.
    events = gw.emitter.wait_for(4)
    assert {e["protocol"] for e in events} == {"gemini"}


def test_google_genai_default_client_reads_models(gw, tenant):
    c = default_gemini_client(gw, tenant.raw)
    model = c.models.get(model="sim-chat-small")
    assert model.name == "models/sim-chat-small"
    assert model.input_token_limit == 8192
    names = {m.name for m in c.models.list()}
    assert {"models/sim-chat-small", "models/sim-embed"} <= names
    with pytest.raises(genai_errors.ClientError) as missing:
        c.models.get(model="no-such-model")
    assert missing.value.code == 404 and missing.value.status == "NOT_FOUND"


def test_v1_model_list_is_geminis_only_for_a_gemini_key(gw, tenant):
    # The key in ?key= makes /v1/models Gemini's list...
    status, _, data = raw_request(gw, "GET", f"/v1/models?key={tenant.raw}")
    assert status == 200 and "models" in json.loads(data)
    # ...a bearer key OpenAI's.
    status, _, data = raw_request(gw, "GET", "/v1/models", headers=auth(tenant.raw))
    assert status == 200 and json.loads(data)["object"] == "list"
    # A Gemini verb on /v1 is Gemini's whatever the key's header: errors in Google's shape.
    status, _, data = raw_request(
        gw, "GET", "/v1/models/sim-chat-small:generateContent", headers=auth(tenant.raw)
    )
    assert status == 405 and json.loads(data)["error"]["status"] == "INVALID_ARGUMENT"


def test_openai_models_retrieve_and_unknown_model_is_openai_404(gw, tenant):
    c = client(gw, tenant.raw)
    model = c.models.retrieve("sim-chat-large")
    assert (model.id, model.object) == ("sim-chat-large", "model")
    with pytest.raises(openai.NotFoundError) as missing:
        c.models.retrieve("no-such-model")
    assert missing.value.body["code"] == "model_not_found"
    assert missing.value.response.json()["error"]["type"] == "invalid_request_error"


def test_openai_models_retrieve_of_a_model_id_with_a_slash(tenant, start_gateway):
    NodeModel.objects.create(
        node=tenant.node, public_name="deepseek/deepseek-chat", upstream_name="sim-chat-small"
    )
    gw = start_gateway()
    c = client(gw, tenant.raw)
    assert c.models.retrieve("deepseek/deepseek-chat").id == "deepseek/deepseek-chat"
    answer = c.chat.completions.create(
        model="deepseek/deepseek-chat", messages=[{"role": "user", "content": "hi"}], max_tokens=5
    )
    assert answer.model == "deepseek/deepseek-chat" and answer.choices[0].message.content


def test_models_a_key_may_not_use_or_another_org_serves_are_404(tenant, start_gateway):
    other = OrganizationFactory(name="Other", slug="other")
    NodeFactory(organization=other, base_url=tenant.node.base_url, serves=["theirs"])
    gw = start_gateway()
    _, raw = tenant.new_key(allowed_models=["sim-chat-large"])
    c = client(gw, raw)
    assert c.models.retrieve("sim-chat-large").id == "sim-chat-large"
    for name in ("sim-chat-small", "theirs"):
        with pytest.raises(openai.NotFoundError):
            c.models.retrieve(name)
    assert "theirs" not in {m.id for m in client(gw, tenant.raw).models.list()}


@pytest.mark.parametrize(
    ("path", "check"),
    [
        ("/v1beta/tunedModels", lambda b: b["error"]["status"] == "NOT_FOUND"),
        ("/v1/messages/batches/x", lambda b: b["error"]["type"] == "not_found_error"),
        ("/v1/files", lambda b: b["error"]["code"] == "unknown_url"),
    ],
)
def test_unknown_get_paths_answer_in_their_prefixs_protocol(gw, tenant, path, check):
    status, _, data = raw_request(gw, "GET", path, headers=auth(tenant.raw))
    assert status == 404
    assert check(json.loads(data))


def test_a_v1_gemini_call_reaches_a_gemini_channel_on_its_own_api_path(
    vendor, tenant, start_gateway
):
    demo_channels(vendor.base_url)
    gw = start_gateway()
    c = default_gemini_client(gw, tenant.raw)
    answer = c.models.generate_content(model="sim-gemini", contents="Hello there")
    assert answer.text
    chunks = list(c.models.generate_content_stream(model="sim-gemini", contents="Hello again"))
    assert "".join(ch.text or "" for ch in chunks)
    paths = [r["path"] for r in captured(vendor)[-2:]]
    # Passed through natively, on the vendor's path, the upstream model id in it.
    assert paths[0] == "/v1beta/models/gemini-sim:generateContent"
    assert paths[1].startswith("/v1beta/models/gemini-sim:streamGenerateContent?alt=sse")
