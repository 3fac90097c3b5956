"""Gemini requests → the OpenAI chat or embeddings pivot and the ``CallRequest``.

``systemInstruction`` becomes a leading system message; ``contents`` become
messages (``turns``); tools, ``toolConfig`` and ``generationConfig`` the
pivot's fields (``config``). What the pivot cannot carry does not fail the
call: it is left out of the pivot and named in ``CallRequest.untranslatable``
(``cachedContent``, the built-in tools, code execution parts, files by URI,
non-text output...), so a Gemini channel takes the call as sent and a channel
of another protocol answers 400 naming it. The prompt estimate (also the
``countTokens`` answer) and the affinity prefix come from the pivot
(``protocols.estimate``), as for every protocol; media count by the documented
media rule.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from gateway_bridge.protocols.base import CallRequest, dumps
from gateway_bridge.protocols.checks import json_object
from gateway_bridge.protocols.estimate import chat_prompt, texts_prompt
from gateway_bridge.protocols.gemini.answer import EmbedResponse, GenerateResponse
from gateway_bridge.protocols.gemini.config import (
    NO_FACTS,
    generation_of,
    tool_config_of,
    tools_of,
)
from gateway_bridge.protocols.gemini.request import (
    CONTENT,
    EMBED,
    PART,
    REQUEST,
    array,
    bad,
    check_safety,
    embed_options,
    embed_text,
    fields,
    missing_responses,
    model_name,
    part_text,
    string,
    tolerant,
)
from gateway_bridge.protocols.gemini.turns import Turns

CHAT_PATH = "/v1/chat/completions"
EMBED_PATH = "/v1/embeddings"


def _system(value: object) -> str:
    if isinstance(value, str):  # the REST API takes a Content; some clients send text
        return value
    content = fields(value, "system_instruction", CONTENT)
    texts = []
    for i, part in enumerate(array(content.get("parts", []), "system_instruction.parts")):
        ppath = f"system_instruction.parts[{i}]"
        part = fields(part, ppath, PART)
        text = part_text(part, ppath)
        if text is None:
            raise bad(ppath, "system instructions take text parts only.")
        texts.append(text)
    return "\n".join(t for t in texts if t)


def _parse_contents(body: dict[str, Any]) -> Turns:
    if "contents" not in body:
        raise bad("GenerateContentRequest.contents", "contents is not specified")
    contents = array(body["contents"], "contents")
    if not contents:
        raise bad("GenerateContentRequest.contents", "contents is not specified")
    turns = Turns()
    for index, content in enumerate(contents):
        turns.add(index, content)
    if turns.open:
        # The conversation ends on a model turn with calls: nothing to generate.
        raise missing_responses(len(contents) - 1, turns.open)
    return turns


def _request(
    body: object,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str], dict[str, Any], list[str]]:
    """Validate a GenerateContentRequest: (facts, messages, function names,
    pivot body without model and messages, what the pivot cannot carry)."""
    json_object(body)
    body = fields(body, "", REQUEST)
    lost: list[str] = []
    if body.get("cachedContent") is not None:
        string(body["cachedContent"], "cached_content")
        lost.append("cached_content: a cached content")
    turns = _parse_contents(body)
    messages = turns.messages
    lost.extend(turns.lost)
    if body.get("systemInstruction") is not None:
        system = _system(body["systemInstruction"])
        if system:
            messages.insert(0, {"role": "system", "content": system})
    out: dict[str, Any] = {}
    names: list[str] = []
    if body.get("tools") is not None:
        names = tools_of(body["tools"], out, lost)
    if body.get("toolConfig") is not None:
        tool_config_of(body["toolConfig"], names, out)
    if body.get("safetySettings") is not None:
        check_safety(body["safetySettings"])
    if body.get("labels") is not None and not isinstance(body["labels"], dict):
        raise bad("labels", "labels must be an object")
    facts = dict(NO_FACTS)
    if body.get("generationConfig") is not None:
        facts = generation_of(body["generationConfig"], out, lost)
    return facts, messages, names, out, lost


def parse_generate(
    path_model: str | None, body: object, *, stream: bool, alt_sse: bool
) -> CallRequest:
    """``:generateContent`` / ``:streamGenerateContent`` → a chat completion call."""
    with tolerant() as unknown:
        facts, messages, names, out, lost = _request(body)
    model = model_name(path_model, body.get("model") if isinstance(body, dict) else None)
    forward = {"model": model, "messages": messages, **out}
    if stream:
        forward["stream"] = True
    estimate, prefix = chat_prompt(forward["messages"], forward.get("tools"))
    deterministic = (facts["temperature"] == 0 or facts["seed"] is not None) and facts["n"] in (
        None,
        1,
    )
    return CallRequest(
        protocol="gemini",
        endpoint="streamGenerateContent" if stream else "generateContent",
        model=model,
        upstream_path=CHAT_PATH,
        body=forward,
        stream=stream,
        client_wants_usage=True,
        max_output_tokens=facts["max_tokens"],
        prompt_tokens_estimate=estimate,
        prefix_text=prefix,
        deterministic=deterministic,
        response=GenerateResponse(
            input_estimate=estimate,
            stream=stream,
            alt_sse=alt_sse,
            tool_names=names,
            include_thoughts=facts["include_thoughts"],
        ),
        extra={"tool_names": names} if names else {},
        untranslatable=tuple(lost),
        dropped=tuple(f"{path}: a field the translation does not carry" for path in unknown),
    )


def count_tokens(path_model: str | None, body: object) -> bytes:
    """``:countTokens``: ``{"contents": [...]}`` or ``{"generateContentRequest": {...}}``
    → ``{"totalTokens": n}`` by the documented tokenizer rule."""
    json_object(body)
    body = fields(body, "", {"contents", "generateContentRequest"})
    if "generateContentRequest" in body:
        if "contents" in body:
            raise bad("", "set contents or generate_content_request, not both.")
        _, messages, _, out, _ = _request(body["generateContentRequest"])
    else:
        messages = _parse_contents(body).messages
        out = {}
    return dumps({"totalTokens": chat_prompt(messages, out.get("tools"))[0]})


def _embed_call(model: str, texts: list[str], dims: int | None, endpoint: str) -> CallRequest:
    forward: dict[str, Any] = {"model": model, "input": texts if len(texts) > 1 else texts[0]}
    if dims is not None:
        forward["dimensions"] = dims
    tokens, prefix = texts_prompt(texts)
    return CallRequest(
        protocol="gemini",
        endpoint=endpoint,
        model=model,
        upstream_path=EMBED_PATH,
        body=forward,
        stream=False,
        client_wants_usage=True,
        max_output_tokens=0,
        prompt_tokens_estimate=tokens,
        prefix_text=prefix,
        deterministic=True,
        response=EmbedResponse(batch=endpoint == "batchEmbedContents"),
    )


def parse_embed(path_model: str | None, body: object) -> CallRequest:
    """``:embedContent`` → an embeddings call for one text."""
    json_object(body)
    request = fields(body, "", EMBED)
    model = model_name(path_model, request.get("model"))
    text = embed_text(request, "")
    dims = embed_options(request, "")
    return _embed_call(model, [text], dims, "embedContent")


def parse_batch_embed(path_model: str | None, body: object) -> CallRequest:
    """``:batchEmbedContents`` → one embeddings call for all the texts."""
    json_object(body)
    body = fields(body, "", {"requests"})
    model = model_name(path_model)
    requests = array(body.get("requests"), "requests")
    if not requests:
        raise bad("requests", "requests must not be empty.")
    texts: list[str] = []
    dims: set[int | None] = set()
    for i, request in enumerate(requests):
        path = f"requests[{i}]"
        request = fields(request, path, EMBED)
        own = request.get("model")
        if own is not None and model_name(None, string(own, f"{path}.model")) != model:
            raise bad(
                f"{path}.model",
                f"Model {own} differs from the model in the URL (models/{model}).",
            )
        texts.append(embed_text(request, path))
        dims.add(embed_options(request, path))
    if len(dims) > 1:
        raise bad("requests", "every request must ask for the same output_dimensionality.")
    return _embed_call(model, texts, dims.pop(), "batchEmbedContents")


def parse_call(
    endpoint: str,
    data: object,
    *,
    path_model: str | None,
    query: bytes,
    headers: dict[str, str],
) -> CallRequest:
    """The pipeline's one entry: the client's parsed JSON for ``endpoint``
    (``query`` is the raw query string: ``alt=sse`` picks the stream framing)."""
    if endpoint == "embedContent":
        return parse_embed(path_model, data)
    if endpoint == "batchEmbedContents":
        return parse_batch_embed(path_model, data)
    alt_sse = (parse_qs(query.decode("latin-1")).get("alt") or [""])[0] == "sse"
    return parse_generate(
        path_model, data, stream=endpoint == "streamGenerateContent", alt_sse=alt_sse
    )


def count_model(data: object, path_model: str | None) -> object:
    """The model a ``countTokens`` request names: the one in its path."""
    return path_model


def count_body(data: object, path_model: str | None) -> bytes:
    return count_tokens(path_model, data)
