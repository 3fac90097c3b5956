"""The OpenAI chat pivot → an Anthropic Messages request (``from_chat``).

What the pivot says and Anthropic cannot do is a 400 (code ``unsupported``)
naming the field; what it drops is listed in the package docstring.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from gateway_bridge.protocols.anthropic.thinking import EFFORTS, budget_of_effort
from gateway_bridge.protocols.base import GatewayError, invalid
from gateway_bridge.protocols.checks import ID_CHARS, is_int, is_number

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
#: The file name the Anthropic client adapter gives an untitled document.
DEFAULT_FILENAME = "document.pdf"
_CHOICES = {"auto": {"type": "auto"}, "none": {"type": "none"}, "required": {"type": "any"}}
# Pivot fields dropped on the way (see the package docstring).
_DROPPED = frozenset(
    {
        "stream_options",
        "seed",
        "continue_final_message",
        "add_generation_prompt",
        "metadata",
        "store",
        "service_tier",
        "prompt_cache_key",
    }
)
_HANDLED = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "stream",
        "temperature",
        "top_p",
        "stop",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning_effort",
        "user",
        "safety_identifier",
        "n",
        "logprobs",
        "top_logprobs",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "response_format",
        "audio",
        "modalities",
    }
)


def unsupported(path: str, what: str) -> GatewayError:
    return invalid(
        f"{path}: {what} not supported by Anthropic channels", param=path, code="unsupported"
    )


def _bad(path: str, problem: str) -> GatewayError:
    return invalid(f"{path}: {problem}", param=path)


def _data_url(url: str, path: str) -> tuple[str, str]:
    """(media type, base64 data) of a ``data:`` URL."""
    header, _, data = url[5:].partition(",")
    params = header.split(";")
    if "base64" not in params[1:]:
        raise unsupported(path, "data: URLs that are not base64 are")
    return params[0].strip().lower(), data


def _image(part: dict[str, Any], path: str) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url:
        raise _bad(f"{path}.image_url.url", "an image URL is required")
    if url.startswith("data:"):
        media, data = _data_url(url, f"{path}.image_url.url")
        if media not in IMAGE_TYPES:
            raise unsupported(f"{path}.image_url.url", f"images of type '{media}' are")
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise unsupported(f"{path}.image_url.url", "image URLs other than http(s) and data: URLs are")


def _file(part: dict[str, Any], path: str) -> dict[str, Any]:
    file = part.get("file")
    if not isinstance(file, dict):
        raise _bad(f"{path}.file", "a file object is required")
    data = file.get("file_data")
    if not isinstance(data, str) or not data:
        if file.get("file_id") is not None:
            raise unsupported(f"{path}.file.file_id", "uploaded files (file ids) are")
        raise _bad(f"{path}.file.file_data", "the file's data is required")
    name = file.get("filename")
    document: dict[str, Any] = {"type": "document"}
    if data.startswith(("http://", "https://")):
        document["source"] = {"type": "url", "url": data}
    else:
        if data.startswith("data:"):
            media, data = _data_url(data, f"{path}.file.file_data")
        else:  # bare base64: a PDF, as OpenAI takes files
            media = "application/pdf"
        if media == "application/pdf":
            document["source"] = {"type": "base64", "media_type": media, "data": data}
        elif media == "text/plain":
            try:
                text = base64.b64decode(data, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise _bad(f"{path}.file.file_data", "not base64 of UTF-8 text") from None
            document["source"] = {"type": "text", "media_type": media, "data": text}
        elif media in IMAGE_TYPES:
            source = {"type": "base64", "media_type": media, "data": data}
            return {"type": "image", "source": source}
        else:
            raise unsupported(f"{path}.file.file_data", f"files of type '{media}' are")
    if isinstance(name, str) and name and name != DEFAULT_FILENAME:
        document["title"] = name
    return document


def _blocks(content: object, path: str, *, media: bool = True) -> list[dict[str, Any]]:
    """OpenAI message content (text or parts) → Anthropic content blocks (empty
    texts left out: Anthropic refuses them)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise _bad(f"{path}.content", "content must be a string or a list of parts")
    blocks: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        ppath = f"{path}.content.{i}"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "refusal"):
            text = part.get(kind)
            if not isinstance(text, str):
                raise _bad(f"{ppath}.{kind}", "a string is required")
            if text:
                blocks.append({"type": "text", "text": text})
        elif kind == "image_url" and media:
            blocks.append(_image(part, ppath))
        elif kind == "file" and media:
            blocks.append(_file(part, ppath))
        elif kind == "input_audio":
            raise unsupported(ppath, "audio input is")
        else:
            raise unsupported(f"{ppath}.type", f"'{kind}' content parts here are")
    return blocks


def _tool_id(raw: object) -> str:
    """A tool call id as Anthropic takes it (``^[a-zA-Z0-9_-]+$``); the same for
    the call and its result."""
    cleaned = ID_CHARS.sub("_", raw) if isinstance(raw, str) else ""
    return cleaned or "toolu_unnamed"


def _tool_uses(calls: object, path: str) -> list[dict[str, Any]]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise _bad(f"{path}.tool_calls", "a list is required")
    blocks = []
    for j, call in enumerate(calls):
        cpath = f"{path}.tool_calls.{j}"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _bad(f"{cpath}.function", "a function with a name is required")
        arguments = function.get("arguments")
        try:
            parsed = orjson.loads(arguments) if arguments else {}
        except (orjson.JSONDecodeError, TypeError):
            parsed = None
        if not isinstance(parsed, dict):
            raise _bad(f"{cpath}.function.arguments", "the arguments are not a JSON object")
        blocks.append(
            {
                "type": "tool_use",
                "id": _tool_id(call.get("id")),
                "name": function["name"],
                "input": parsed,
            }
        )
    return blocks


def _turns(messages: object) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Pivot messages → (system blocks, Anthropic messages), consecutive turns
    of one role merged."""
    if not isinstance(messages, list):
        raise _bad("messages", "a list is required")
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        path = f"messages.{i}"
        if not isinstance(message, dict):
            raise _bad(path, "a message object is required")
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend(_blocks(message.get("content"), path, media=False))
            continue
        if role == "user":
            blocks = _blocks(message.get("content"), path)
        elif role == "assistant":
            for name in ("audio", "function_call"):
                if message.get(name) is not None:
                    raise unsupported(f"{path}.{name}", f"assistant '{name}' is")
            blocks = _blocks(message.get("content"), path, media=False)
            blocks += _tool_uses(message.get("tool_calls"), path)
        elif role == "tool":
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": _tool_id(message.get("tool_call_id")),
            }
            content = _blocks(message.get("content"), path)
            if content:
                result["content"] = content
            role, blocks = "user", [result]
        else:
            raise unsupported(f"{path}.role", f"the role '{role}' is")
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if not turns:
        raise _bad("messages", "at least one user or assistant message is required")
    return system, turns


def _tools(tools: object) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise _bad("tools", "a list is required")
    out = []
    for j, tool in enumerate(tools):
        path = f"tools.{j}"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise unsupported(f"{path}.type", f"'{kind}' tools are")
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _bad(f"{path}.function", "a function with a name is required")
        entry: dict[str, Any] = {"name": function["name"]}
        if isinstance(function.get("description"), str):
            entry["description"] = function["description"]
        schema = function.get("parameters")
        entry["input_schema"] = schema if isinstance(schema, dict) else {"type": "object"}
        out.append(entry)
    return out


def _tool_choice(body: dict[str, Any], has_tools: bool) -> dict[str, Any] | None:
    choice = body.get("tool_choice")
    converted: dict[str, Any] | None
    if isinstance(choice, str) and choice in _CHOICES:
        converted = dict(_CHOICES[choice])
    elif isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise _bad("tool_choice.function.name", "a tool name is required")
        converted = {"type": "tool", "name": name}
    elif choice is None:
        converted = None
    else:
        raise unsupported("tool_choice", "this tool_choice is")
    if not has_tools:
        if converted is not None and converted["type"] in ("any", "tool"):
            raise _bad("tool_choice", "a tool choice needs tools")
        return None
    if body.get("parallel_tool_calls") is False and (converted or {}).get("type") != "none":
        converted = converted or {"type": "auto"}
        converted["disable_parallel_tool_use"] = True
    return converted


def _refuse_what_anthropic_lacks(body: dict[str, Any]) -> None:
    for key in body:
        if key not in _HANDLED and key not in _DROPPED:
            raise unsupported(key, f"'{key}' is")
    if body.get("n") not in (None, 1):
        raise unsupported("n", "more than one choice (n > 1) is")
    if body.get("logprobs"):
        raise unsupported("logprobs", "log probabilities are")
    if body.get("top_logprobs"):
        raise unsupported("top_logprobs", "log probabilities are")
    for name in ("presence_penalty", "frequency_penalty"):
        if body.get(name) not in (None, 0):
            raise unsupported(name, f"{name} is")
    if body.get("logit_bias"):
        raise unsupported("logit_bias", "logit_bias is")
    if body.get("audio") is not None:
        raise unsupported("audio", "audio output is")
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise unsupported("modalities", f"the modalities {modalities!r} are")


def _output_config(fmt: object) -> dict[str, Any] | None:
    """``response_format`` → Anthropic's ``output_config`` (structured outputs):
    a ``json_schema`` becomes ``format: {"type": "json_schema", "schema": ...}``;
    ``json_object`` (JSON without a schema) has no Anthropic form: refused."""
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else fmt
    if kind == "text":
        return None
    if kind != "json_schema":
        raise unsupported(
            "response_format",
            f"response_format '{kind}' (Anthropic takes JSON output only with a schema: "
            "use json_schema) is",
        )
    spec = fmt.get("json_schema") if isinstance(fmt, dict) else None
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise _bad("response_format.json_schema.schema", "a JSON schema object is required")
    return {"format": {"type": "json_schema", "schema": schema}}


def _max_tokens(body: dict[str, Any]) -> int:
    value = body.get("max_completion_tokens")
    name = "max_completion_tokens"
    if value is None:
        value, name = body.get("max_tokens"), "max_tokens"
    if value is None:
        raise _bad("max_tokens", "Anthropic requires max_tokens")
    if not is_int(value) or value < 1:
        raise _bad(name, "a positive integer is required")
    return value


def _sampling(body: dict[str, Any], out: dict[str, Any]) -> None:
    temperature = body.get("temperature")
    if temperature is not None:
        if not is_number(temperature) or temperature < 0:
            raise _bad("temperature", "a number from 0 is required")
        if temperature > 1:
            raise unsupported(
                "temperature", "a temperature above 1 (Anthropic's range is 0 to 1) is"
            )
        out["temperature"] = temperature
    if body.get("top_p") is not None:
        out["top_p"] = body["top_p"]
    stop = body.get("stop")
    if isinstance(stop, str):
        out["stop_sequences"] = [stop]
    elif isinstance(stop, list) and stop:
        out["stop_sequences"] = stop
    user = body.get("user") or body.get("safety_identifier")
    if isinstance(user, str) and user:
        out["metadata"] = {"user_id": user}


def _thinking(body: dict[str, Any], max_tokens: int) -> dict[str, Any] | None:
    effort = body.get("reasoning_effort")
    if effort is None:
        return None
    if effort not in EFFORTS:
        raise _bad("reasoning_effort", f"should be one of {', '.join(EFFORTS)}")
    try:
        budget = budget_of_effort(effort, max_tokens)
    except ValueError:
        raise unsupported(
            "reasoning_effort",
            f"reasoning with max_tokens {max_tokens} (Anthropic's thinking needs max_tokens "
            "above 1024) is",
        ) from None
    return None if budget is None else {"type": "enabled", "budget_tokens": budget}


def from_chat(body: dict[str, Any], upstream_model: str, stream: bool) -> dict[str, Any]:
    """The OpenAI chat pivot → an Anthropic Messages request body."""
    _refuse_what_anthropic_lacks(body)
    max_tokens = _max_tokens(body)
    system, turns = _turns(body.get("messages"))
    out: dict[str, Any] = {"model": upstream_model, "max_tokens": max_tokens, "messages": turns}
    if system:
        out["system"] = system
    if stream:
        out["stream"] = True
    _sampling(body, out)
    tools = _tools(body["tools"]) if body.get("tools") else []
    if tools:
        out["tools"] = tools
    choice = _tool_choice(body, bool(tools))
    if choice is not None:
        out["tool_choice"] = choice
    thinking = _thinking(body, max_tokens)
    if thinking is not None:
        out["thinking"] = thinking
    output_config = _output_config(body.get("response_format"))
    if output_config is not None:
        out["output_config"] = output_config
    return out
