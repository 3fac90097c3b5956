"""The name the client asked for, in every native answer: an Anthropic client on
an Anthropic channel, a Gemini client on a Gemini channel and the Responses API
on an OpenAI channel see the public model name (``sim-claude``, ``sim-gemini``,
``sim-gpt``), plain and streamed, never the vendor's id (``claude-sim``,
``gemini-sim``, ``gpt-sim``); the vendor still gets the client's body with
only the model id rewritten, the call record keeps the public name and the
channel (whose mapping names the vendor's id), and every other byte of the
answer is the vendor's, a pattern cut by a chunk boundary included."""

from __future__ import annotations

import base64
import contextlib
import http.client
import socket
import threading
import time
from types import SimpleNamespace
from urllib.parse import urlsplit

import anthropic
import httpx2
import openai
import orjson
import pytest
from google import genai
from google.genai import types

from gateway_bridge.pipeline.model_name import ModelRewriter, model_rewriter, rename_answer
from inference_node.models import NodeModel
from tests.gateway_bridge.vendor_fixtures import captured, channel, demo_channels


def recording_client() -> tuple[httpx2.Client, list[bytes]]:
    """An HTTP client for an SDK that keeps the bytes of each request body it sends."""
    bodies: list[bytes] = []

    def keep(request):
        bodies.append(request.read())

    return httpx2.Client(event_hooks={"request": [keep]}, timeout=20), bodies


def vendor_body(vendor) -> tuple[str, bytes]:
    sent = captured(vendor)[-1]
    return sent["path"], base64.b64decode(sent["body_base64"])


def recorded(gw, node, public: str, upstream: str, n: int) -> None:
    """The call records: the public name and the channel, whose mapping names the vendor's id."""
    events = gw.emitter.wait_for(n)
    assert {e["model"] for e in events} == {public}
    assert {e["node_id"] for e in events} == {node.pk}
    assert NodeModel.objects.get(node=node, public_name=public).upstream_name == upstream


# -- Anthropic -------------------------------------------------------------------


def test_anthropic_answers_name_the_public_model_plain_and_streamed(vendor, tenant, start_gateway):
    node = demo_channels(vendor.base_url)["anthropic"]
    gw = start_gateway()
    http_client, sdk_bodies = recording_client()
    client = anthropic.Anthropic(
        api_key=tenant.raw, base_url=gw.url, max_retries=0, http_client=http_client
    )
    ask = {
        "model": "sim-claude",
        "max_tokens": 32,
        "messages": [{"role": "user", "content": 'Say "model": "claude-sim" back.'}],
    }
    message = client.messages.create(**ask)
    assert message.model == "sim-claude" and message.content
    path, sent = vendor_body(vendor)
    assert path == "/v1/messages"
    assert sent == sdk_bodies[-1].replace(b'"sim-claude"', b'"claude-sim"', 1)

    starts = []
    with client.messages.stream(**ask) as stream:
        for event in stream:
            if event.type == "message_start":
                starts.append(event.message.model)
        final = stream.get_final_message()
    assert starts == ["sim-claude"] and final.model == "sim-claude"
    _, sent = vendor_body(vendor)
    assert sent == sdk_bodies[-1].replace(b'"sim-claude"', b'"claude-sim"', 1)
    recorded(gw, node, "sim-claude", "claude-sim", 2)


# -- Gemini ----------------------------------------------------------------------


def test_gemini_answers_name_the_public_model_plain_and_streamed(vendor, tenant, start_gateway):
    node = demo_channels(vendor.base_url)["gemini"]
    gw = start_gateway()
    http_client, sdk_bodies = recording_client()
    client = genai.Client(
        api_key=tenant.raw,
        http_options=types.HttpOptions(
            base_url=gw.url, api_version="v1beta", timeout=20_000, httpx_client=http_client
        ),
    )
    config = types.GenerateContentConfig(max_output_tokens=24)
    answer = client.models.generate_content(
        model="sim-gemini", contents="Tell me a fact.", config=config
    )
    assert answer.model_version == "sim-gemini" and answer.text
    path, sent = vendor_body(vendor)
    assert path == "/v1beta/models/gemini-sim:generateContent"
    assert sent == sdk_bodies[-1]  # Gemini names the model in the path: the body as sent

    chunks = list(
        client.models.generate_content_stream(
            model="sim-gemini", contents="Tell me a fact.", config=config
        )
    )
    assert len(chunks) > 1
    assert {c.model_version for c in chunks} == {"sim-gemini"}
    path, sent = vendor_body(vendor)
    assert path.startswith("/v1beta/models/gemini-sim:streamGenerateContent")
    assert sent == sdk_bodies[-1]
    recorded(gw, node, "sim-gemini", "gemini-sim", 2)


# -- OpenAI Responses ------------------------------------------------------------


def test_responses_answers_name_the_public_model_plain_streamed_and_stored(
    vendor, tenant, start_gateway
):
    node = demo_channels(vendor.base_url)["openai"]
    gw = start_gateway()
    http_client, sdk_bodies = recording_client()
    client = openai.OpenAI(
        api_key=tenant.raw, base_url=f"{gw.url}/v1", max_retries=0, http_client=http_client
    )
    first = client.responses.create(model="sim-gpt", input="Hello.", max_output_tokens=16)
    assert first.model == "sim-gpt" and first.output_text
    path, sent = vendor_body(vendor)
    assert path == "/v1/responses"
    assert sent == sdk_bodies[-1].replace(b'"sim-gpt"', b'"gpt-sim"', 1)

    events = list(
        client.responses.create(
            model="sim-gpt", input="Hello again.", max_output_tokens=16, stream=True
        )
    )
    carrying = [e for e in events if getattr(e, "response", None) is not None]
    kinds = [e.type for e in carrying]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert {e.response.model for e in carrying} == {"sim-gpt"}
    _, sent = vendor_body(vendor)
    assert sent == sdk_bodies[-1].replace(b'"sim-gpt"', b'"gpt-sim"', 1)
    # Stored as the client got them.
    assert client.responses.retrieve(first.id).model == "sim-gpt"
    assert client.responses.retrieve(carrying[-1].response.id).model == "sim-gpt"
    recorded(gw, node, "sim-gpt", "gpt-sim", 2)


# -- Every byte but the model: a scripted vendor, chunk boundaries in the pattern --


@contextlib.contextmanager
def scripted_vendor(content_type: bytes, pieces: list[bytes], gap: float = 0.03):
    """A loopback vendor answering each request with ``pieces``, one write each,
    ``gap`` seconds apart (so the gateway reads them as separate chunks)."""
    body = b"".join(pieces)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n" % (
        content_type,
        len(body),
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def serve():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn, contextlib.suppress(OSError):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.recv(65536)
                conn.sendall(head)
                for piece in pieces:
                    time.sleep(gap)
                    conn.sendall(piece)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        sock.close()


def through(gw_url: str, path: str, body: dict, headers: dict) -> tuple[int, bytes]:
    parts = urlsplit(gw_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(
            "POST",
            path,
            body=orjson.dumps(body),
            headers={"content-type": "application/json", **headers},
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def cut(stream: bytes, *marks: bytes) -> list[bytes]:
    """``stream`` in pieces, each mark the point a new piece starts (searched
    after the previous one)."""
    pieces, start = [], 0
    for mark in marks:
        at = stream.index(mark, start + 1)
        pieces.append(stream[start:at])
        start = at
    return [*pieces, stream[start:]]


ANTHROPIC_STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":'
    b'"message","role":"assistant","model":"claude-sim","content":[],"stop_reason":null,'
    b'"usage":{"input_tokens":12,"output_tokens":1}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"tool_use","id":"tu_1","name":"Task","input":{}}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":'
    b'{"type":"input_json_delta","partial_json":"{\\"model\\": \\"claude-sim\\"}"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"tool_use",'
    b'"stop_sequence":null},"usage":{"output_tokens":9}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
GEMINI_EVENT = (
    b'data: {"candidates": [{"content": {"parts": [{"text": "%s"}],"role": "model"},'
    b'"index": 0}],"usageMetadata": {"promptTokenCount": 5,"candidatesTokenCount": %d,'
    b'"totalTokenCount": %d},"modelVersion": "gemini-sim","responseId": "r-1"}\r\n\r\n'
)
GEMINI_STREAM = (
    GEMINI_EVENT % (b"Hello", 1, 6)
    + GEMINI_EVENT % (b" there", 2, 7)
    + GEMINI_EVENT.replace(b'"index": 0}', b'"finishReason": "STOP","index": 0}') % (b".", 3, 8)
)
GEMINI_ARRAY = (
    b'[{\n  "candidates": [{"content": {"parts": [{"text": "Hi"}], "role": "model"}}],\n'
    b'  "modelVersion": "gemini-sim"\n}\n,\r\n{\n  "candidates": [{"content": {"parts": '
    b'[{"text": "!"}], "role": "model"}, "finishReason": "STOP"}],\n  "usageMetadata": '
    b'{"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7},\n'
    b'  "modelVersion": "gemini-sim"\n}\n]'
)
RESPONSE = (
    b'{"id":"resp_1","object":"response","created_at":1,"status":"%s","model":"gpt-sim",'
    b'"output":%s,"metadata":{"model":"not-this-one"},"usage":%s}'
)
OUTPUT = (
    b'[{"type":"message","id":"m1","status":"completed","role":"assistant","content":'
    b'[{"type":"output_text","text":"Hi, gpt-sim here","annotations":[]}]}]'
)
USAGE = b'{"input_tokens":5,"output_tokens":4,"total_tokens":9}'
RESPONSES_STREAM = (
    b'event: response.created\ndata: {"type":"response.created","sequence_number":0,'
    b'"response":' + RESPONSE % (b"in_progress", b"[]", b"null") + b"}\n\n"
    b'event: response.in_progress\ndata: {"type":"response.in_progress","sequence_number":1,'
    b'"response":' + RESPONSE % (b"in_progress", b"[]", b"null") + b"}\n\n"
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"sequence_number":2,"item_id":"m1","output_index":0,"content_index":0,'
    b'"delta":"Hi, gpt-sim here"}\n\n'
    b'event: response.completed\ndata: {"type":"response.completed","sequence_number":3,'
    b'"response":' + RESPONSE % (b"completed", OUTPUT, USAGE) + b"}\n\n"
)


@pytest.mark.parametrize(
    ("kind", "public", "upstream", "path", "content_type", "stream", "marks"),
    [
        (
            "anthropic", "sim-claude", "claude-sim", "/v1/messages", b"text/event-stream",
            ANTHROPIC_STREAM, (b'model":"claude', b'-sim"', b"event: content_block_start"),
        ),
        (
            # The second and third events cut inside the key, then inside the value.
            "gemini", "sim-gemini", "gemini-sim",
            "/v1beta/models/sim-gemini:streamGenerateContent?alt=sse", b"text/event-stream",
            GEMINI_STREAM, (b'data: {"cand', b'elVersion": "gemini-sim",', b"data:",
                            b'sim","responseId'),
        ),
        (
            "gemini", "sim-gemini", "gemini-sim",
            "/v1beta/models/sim-gemini:streamGenerateContent", b"application/json",
            GEMINI_ARRAY, (b'"mo', b'ersion": "gem', b'"modelVersion', b'"gemini-sim"\n}\n]'),
        ),
        (
            # in_progress cut in the key, completed in the value and after its colon.
            "openai", "sim-gpt", "gpt-sim", "/v1/responses", b"text/event-stream",
            RESPONSES_STREAM, (b"event: response.in_progress", b'el":"gpt-sim","output":[]',
                               b"event: response.output_text.delta", b'"gpt-sim","output":[{',
                               b'-sim","output":[{'),
        ),
    ],
)  # fmt: skip
def test_a_native_stream_is_the_vendors_bytes_but_the_model_name(
    tenant, start_gateway, kind, public, upstream, path, content_type, stream, marks
):
    pieces = cut(stream, *marks)
    assert b"".join(pieces) == stream
    with scripted_vendor(content_type, pieces) as url:
        node = channel(url, kind, public, upstream)
        gw = start_gateway()
        body = {
            "anthropic": {"model": public, "max_tokens": 32, "stream": True, "messages": HI},
            "gemini": {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]},
            "openai": {"model": public, "input": "Hi", "stream": True},
        }[kind]
        status, answer = through(gw.url, path, body, {"authorization": f"Bearer {tenant.raw}"})
    assert status == 200, answer
    key = b'"modelVersion"' if kind == "gemini" else b'"model"'
    expected = stream
    for space in (b":", b": "):
        vendor_field = key + space + b'"' + upstream.encode() + b'"'
        expected = expected.replace(vendor_field, key + space + b'"' + public.encode() + b'"')
    # Only the answer's model fields changed: the vendor's id in a text, a
    # tool's input and a metadata "model" stay as they came.
    assert answer == expected != stream
    (event,) = gw.emitter.wait_for(1)
    assert event["model"] == public and event["node_id"] == node.pk
    assert event["status_code"] == 200 and event["output_tokens"] > 0


HI = [{"role": "user", "content": "Hi"}]
ANTHROPIC_PLAIN = (
    b'{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"tool_use",'
    b'"id":"tu_1","name":"Task","input":{"model":"claude-sim","prompt":"Go"}}],'
    b'"model":"claude-sim","stop_reason":"tool_use","stop_sequence":null,'
    b'"usage":{"input_tokens":12,"output_tokens":9}}'
)


def test_a_native_plain_answer_is_the_vendors_bytes_but_its_own_model(tenant, start_gateway):
    with scripted_vendor(b"application/json", [ANTHROPIC_PLAIN]) as url:
        channel(url, "anthropic", "sim-claude", "claude-sim")
        gw = start_gateway()
        body = {"model": "sim-claude", "max_tokens": 32, "messages": HI}
        status, answer = through(gw.url, "/v1/messages", body, {"x-api-key": tenant.raw})
    assert status == 200, answer
    # The tool's input named "model" (before the answer's own) is left alone.
    assert answer == ANTHROPIC_PLAIN.replace(
        b'"model":"claude-sim","stop', b'"model":"sim-claude","stop'
    )


# -- The rewriter, unit by unit ----------------------------------------------------


def anthropic_rewriter() -> ModelRewriter:
    rewriter = ModelRewriter("model", "sim-claude", "message")
    first = ANTHROPIC_STREAM.split(b"data: ", 1)[1].split(b"\n\n", 1)[0]
    assert rewriter.learn(first) and rewriter.learned == {"claude-sim"}
    return rewriter


def relay(rewriter: ModelRewriter, pieces: list[bytes]) -> bytes:
    return b"".join(rewriter.feed(p) for p in pieces) + rewriter.close()


def test_every_chunk_boundary_inside_the_pattern_gives_the_same_bytes():
    expected = ANTHROPIC_STREAM.replace(b'"model":"claude-sim"', b'"model":"sim-claude"')
    start = ANTHROPIC_STREAM.index(b'"model":"claude-sim"')
    for i in range(start - 2, start + len(b'"model":"claude-sim"') + 2):
        for j in range(i, i + 24):
            pieces = [ANTHROPIC_STREAM[:i], ANTHROPIC_STREAM[i:j], ANTHROPIC_STREAM[j:]]
            assert relay(anthropic_rewriter(), pieces) == expected, (i, j)
    # One byte at a time.
    assert relay(anthropic_rewriter(), [bytes([b]) for b in ANTHROPIC_STREAM]) == expected

    gemini = GEMINI_STREAM + GEMINI_ARRAY
    expected = gemini.replace(b'"modelVersion": "gemini-sim"', b'"modelVersion": "sim-gemini"')
    for i in range(len(gemini) + 1):
        pieces = [gemini[:i], gemini[i:]]
        assert relay(ModelRewriter("modelVersion", "sim-gemini", None), pieces) == expected, i


def test_only_the_undecided_tail_is_held_back():
    rewriter = anthropic_rewriter()
    # A chunk that cannot end in the pattern goes out whole, at once.
    text = b'event: content_block_delta\ndata: {"delta":{"text":"hi"}}\n\n'
    assert rewriter.feed(text) == text
    # A key cut short: everything before it goes out, the rest waits.
    assert rewriter.feed(b'{"id":"m","mo') == b'{"id":"m",'
    assert rewriter.feed(b'del" : "clau') == b""
    assert rewriter.feed(b'de-sim","x":1}') == b'"model" : "sim-claude","x":1}'
    # A key followed by something else, or another value, is decided at once.
    assert rewriter.feed(b'{"model":"claude-opus"}') == b'{"model":"claude-opus"}'
    assert rewriter.feed(b'{"model":{') == b'{"model":{'
    # The stream ends inside the pattern: the tail as it came.
    assert rewriter.feed(b'{"model":"claude-s') == b"{"
    assert rewriter.close() == b'"model":"claude-s'


def test_escaped_text_and_other_values_are_left_alone():
    rewriter = anthropic_rewriter()
    inside = b'{"text":"say \\"model\\":\\"claude-sim\\""}'
    assert rewriter.feed(inside) == inside
    # A key ending in an escaped quote and "model" (\"model"), cut at the backslash.
    odd = b'{"a\\"model":"claude-sim"}'
    assert relay(rewriter, [odd[:4], odd[4:]]) == odd
    assert relay(rewriter, [odd]) == odd
    # Before the vendor's id is known nothing is renamed (or held).
    blank = ModelRewriter("model", "sim-claude", "message")
    assert blank.feed(b'{"model":"claude-sim"') == b'{"model":"claude-sim"'
    assert not blank.learn(b'{"type":"ping"}') and blank.learning
    # The vendor already names the public model: nothing to do.
    same = ModelRewriter("model", "sim-claude", "message")
    assert same.learn(b'{"message":{"model":"sim-claude"}}')
    assert same.feed(b'"model":"sim-cl') == b'"model":"sim-cl'


def test_an_anthropic_stream_is_looked_at_until_its_message_start_went_out():
    rewriter = model_rewriter(SimpleNamespace(model="sim-claude"), "anthropic")
    first = ANTHROPIC_STREAM.split(b"event: content_block_start", 1)[0]
    assert rewriter.learning and rewriter.learn(first.split(b"data: ")[1].strip())
    # message_start cut inside the value: held, then renamed.
    at = first.index(b"claude-sim") + 3
    assert rewriter.feed(first[:at]) == first[: first.index(b'"model"')]
    assert rewriter.feed(first[at:]) == first[first.index(b'"model"') :].replace(
        b"claude-sim", b"sim-claude"
    )
    # Then nothing is looked at, or held.
    later = b'{"model":"claude-sim"} "mo'
    assert rewriter.feed(later) == later and rewriter.close() == b""
    # The Responses API and Gemini name the model later in the stream too.
    responses = model_rewriter(SimpleNamespace(model="sim-gpt"), "openai")
    assert responses.learn(b'{"type":"response.created","response":{"model":"gpt-sim"}}')
    done = b'{"response":{"model":"gpt-sim"}}'
    assert responses.feed(done) == responses.feed(done) == done.replace(b"gpt-sim", b"sim-gpt")
    gemini = model_rewriter(SimpleNamespace(model="sim-gemini"), "gemini")
    assert not gemini.learning
    assert (
        gemini.feed(b'{"modelVersion":"gemini-2.5-flash-001"}') == b'{"modelVersion":"sim-gemini"}'
    )


def test_rename_answer_edits_the_top_level_key_in_place():
    obj = orjson.loads(ANTHROPIC_PLAIN)
    raw, renamed = rename_answer(ANTHROPIC_PLAIN, obj, "model", "sim-claude")
    assert renamed["model"] == "sim-claude"
    assert renamed["content"][0]["input"]["model"] == "claude-sim"
    assert raw == ANTHROPIC_PLAIN.replace(b'"claude-sim","stop', b'"sim-claude","stop')
    # One key: replaced in place, whatever spacing.
    spaced = b'{ "model" :  "gpt-sim-2025" ,"output": [] }'
    raw, _ = rename_answer(spaced, orjson.loads(spaced), "model", "sim-gpt")
    assert raw == b'{ "model" :  "sim-gpt" ,"output": [] }'
    # Gemini's field.
    gemini = b'{"candidates": [], "modelVersion": "gemini-sim", "responseId": "r"}'
    raw, _ = rename_answer(gemini, orjson.loads(gemini), "modelVersion", "sim-gemini")
    assert raw == gemini.replace(b"gemini-sim", b"sim-gemini")
    # Nothing to rename: the same bytes.
    assert rename_answer(b'{"a":1}', {"a": 1}, "model", "x")[0] == b'{"a":1}'
    # No key that can be edited in place (the top-level one escaped, two others
    # inside): re-encoded, the same content.
    escaped = b'{"mod\\u0065l":"claude-sim","a":{"model":"claude-sim"},"b":{"model":"claude-sim"}}'
    raw, renamed = rename_answer(escaped, orjson.loads(escaped), "model", "sim-claude")
    inner = {"model": "claude-sim"}
    assert orjson.loads(raw) == renamed == {"model": "sim-claude", "a": inner, "b": inner}
