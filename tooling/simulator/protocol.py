"""OpenAI request validation and response bodies.

Every user error becomes an ``ApiError`` rendered as OpenAI's
``{"error": {"message", "type", "param", "code"}}``. Fields the simulator does
not model (``temperature``, ``top_p``, ...) are accepted when well-typed and
otherwise ignored; unknown fields are ignored, as vLLM does.
``response_format`` and ``logprobs`` are honoured (``output_options``).

Tools are checked here as vLLM and OpenAI check them; what they make of the
answer (``ToolPlan``) is ``tool_plan``'s.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TypeGuard

from console.kernel import tokens as tokenizer
from console.kernel.tokens import template_messages

from . import output_options
from .errors import ApiError, invalid
from .tool_plan import ToolPlan, plan_answer

MAX_N = 16
CHAT_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


def load_json_object(raw: bytes) -> dict:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"The body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "The body must be a JSON object.", code="invalid_json")
    return data


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _opt_int(body: dict, name: str, low: int, high: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value) or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise invalid(name, f"'{name}' must be an integer {bound}.")
    return value


def _opt_number(body: dict, name: str, low: float, high: float) -> None:
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise invalid(name, f"'{name}' must be a number between {low} and {high}.")


def _opt_bool(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid(name, f"'{name}' must be a boolean.")
    return value


def model_name(body: dict) -> str:
    value = body.get("model")
    if not isinstance(value, str) or not value:
        raise invalid("model", "'model' is required and must be a string.")
    return value


@dataclass
class GenerationRequest:
    model: str
    prompt_ids: list[int]
    max_tokens: int | None
    n: int
    stop: tuple[str, ...]
    seed: int | None
    stream: bool
    include_usage: bool
    ignore_eos: bool
    prompt_param: str
    tools: ToolPlan = field(default_factory=lambda: ToolPlan())
    json_output: bool = False  # response_format json_object / json_schema
    json_schema: dict | None = None  # json_schema's schema (None: any object)
    logprobs: int | None = None  # top alternatives per token (None: no logprobs)


def _stop(body: dict) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return tuple(s for s in value if s)
    raise invalid("stop", "'stop' must be a string or a list of strings.")


def _common(body: dict, prompt_ids: list[int], prompt_param: str, max_name: str):
    max_tokens = _opt_int(body, max_name, 1)
    if max_name == "max_completion_tokens" and max_tokens is None:
        max_tokens = _opt_int(body, "max_tokens", 1)
    for name, low, high in (("temperature", 0, 2), ("top_p", 0, 1)):
        _opt_number(body, name, low, high)
    for name in ("presence_penalty", "frequency_penalty"):
        _opt_number(body, name, -2, 2)
    n = _opt_int(body, "n", 1, MAX_N) or 1
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise invalid("seed", "'seed' must be an integer.")
    stream = _opt_bool(body, "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise invalid("stream_options", "'stream_options' is only allowed with 'stream': true.")
        if not isinstance(options, dict):
            raise invalid("stream_options", "'stream_options' must be an object.")
        include_usage = _opt_bool(options, "include_usage")
    return GenerationRequest(
        model=model_name(body),
        prompt_ids=prompt_ids,
        max_tokens=max_tokens,
        n=n,
        stop=_stop(body),
        seed=seed,
        stream=stream,
        include_usage=include_usage,
        ignore_eos=_opt_bool(body, "ignore_eos"),
        prompt_param=prompt_param,
    )


_MEDIA_PARTS = {"image_url": "url", "input_audio": "data", "file": None}


def _check_content(index: int, message: dict) -> None:
    content = message.get("content")
    param = f"messages[{index}].content"
    if content is None:
        if message["role"] in {"assistant", "tool", "function"}:
            return
        raise invalid(param, f"'{param}' is required for role '{message['role']}'.")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise invalid(param, f"'{param}' must be a string or a list of content parts.")
    for part_index, part in enumerate(content):
        where = f"{param}[{part_index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise invalid(f"{where}.text", "A text part needs a string 'text'.")
        elif kind in _MEDIA_PARTS:  # counted by console.kernel.tokens' media rule
            if not isinstance(part.get(kind), dict | str):
                raise invalid(f"{where}.{kind}", f"A {kind} part needs an object '{kind}'.")
        else:
            raise invalid(
                where, "Content parts must be of type 'text', 'image_url', 'input_audio' or 'file'."
            )


def _check_tool_calls(index: int, message: dict) -> None:
    calls = message.get("tool_calls")
    if calls is None:
        return
    param = f"messages[{index}].tool_calls"
    if message["role"] != "assistant":
        raise invalid(param, f"'{param}' is only allowed in assistant messages.")
    if not isinstance(calls, list):
        raise invalid(param, f"'{param}' must be a list of tool calls.")
    for call_index, call in enumerate(calls):
        where = f"{param}[{call_index}]"
        if not isinstance(call, dict):
            raise invalid(where, f"'{where}' must be an object.")
        if not isinstance(call.get("id"), str):
            raise invalid(f"{where}.id", f"'{where}.id' is required and must be a string.")
        if call.get("type", "function") != "function":
            raise invalid(f"{where}.type", f"'{where}.type' must be 'function'.")
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise invalid(f"{where}.function", f"'{where}.function' must be an object.")
        for key in ("name", "arguments"):
            if not isinstance(fn.get(key), str):
                raise invalid(
                    f"{where}.function.{key}",
                    f"'{where}.function.{key}' is required and must be a string.",
                )


_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _tools(body: dict) -> list[dict]:
    """The function definitions of ``tools`` (checked), in order."""
    tools = body.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise invalid("tools", "'tools' must be a list of tools.")
    functions = []
    for index, tool in enumerate(tools):
        param = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise invalid(param, f"'{param}' must be an object.")
        if tool.get("type") != "function":
            raise invalid(f"{param}.type", f"'{param}.type' must be 'function'.")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise invalid(f"{param}.function", f"'{param}.function' must be an object.")
        name = fn.get("name")
        if not isinstance(name, str) or not _FUNCTION_NAME.fullmatch(name):
            raise invalid(
                f"{param}.function.name",
                f"'{param}.function.name' is required: 1 to 64 letters, digits, '_' or '-'.",
            )
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            raise invalid(
                f"{param}.function.description", f"'{param}.function.description' must be a string."
            )
        if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
            raise invalid(
                f"{param}.function.parameters",
                f"'{param}.function.parameters' must be a JSON schema object.",
            )
        functions.append(fn)
    return functions


def _tool_choice(body: dict, functions: list[dict]) -> str | dict:
    """``"none"``, ``"auto"``, ``"required"``, or the named function's definition."""
    choice = body.get("tool_choice")
    if choice is None:
        return "auto" if functions else "none"
    if choice != "none" and not functions:
        raise invalid("tool_choice", "When using 'tool_choice', 'tools' must be set.")
    if choice in ("none", "auto", "required"):
        return choice
    fn = choice.get("function") if isinstance(choice, dict) else None
    if not isinstance(fn, dict) or choice.get("type") != "function":
        raise invalid(
            "tool_choice",
            "'tool_choice' must be 'none', 'auto', 'required' or "
            "{'type': 'function', 'function': {'name': ...}}.",
        )
    for definition in functions:
        if definition["name"] == fn.get("name"):
            return definition
    raise invalid(
        "tool_choice",
        f"'tool_choice' names the function {fn.get('name')!r}, which is not in 'tools'.",
    )


def _plan(body: dict, messages: list[dict], functions: list[dict]) -> ToolPlan:
    choice = _tool_choice(body, functions)
    _opt_bool(body, "parallel_tool_calls")
    parallel = body.get("parallel_tool_calls") is not False
    return plan_answer(choice, parallel, messages, functions)


def tool_plan(body: dict, messages: list[dict]) -> ToolPlan:
    """The ``ToolPlan`` of an OpenAI-shaped ``tools`` / ``tool_choice`` and messages (the
    Anthropic and Gemini front-ends translate theirs to this shape first)."""
    return _plan(body, messages, _tools(body))


def parse_chat(body: dict) -> GenerationRequest:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "'messages' must be a non-empty list.")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise invalid(f"messages[{index}]", f"'messages[{index}]' must be an object.")
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise invalid(
                f"messages[{index}].role",
                f"'messages[{index}].role' must be one of {sorted(CHAT_ROLES)}.",
            )
        _check_content(index, message)
        _check_tool_calls(index, message)
        call_id = message.get("tool_call_id")
        if call_id is not None and not isinstance(call_id, str):
            raise invalid(f"messages[{index}].tool_call_id", "'tool_call_id' must be a string.")
    functions = _tools(body)
    plan = _plan(body, messages, functions)
    prompt_ids = tokenizer.chat_prompt_tokens(template_messages(messages, body.get("tools")))
    request = _common(body, prompt_ids, "messages", "max_completion_tokens")
    request.tools = plan
    request.json_output, request.json_schema = output_options.response_format(body)
    request.logprobs = output_options.chat_logprobs(body)
    return request


def _token_array(value: object) -> TypeGuard[list[int]]:
    return isinstance(value, list) and bool(value) and all(_is_int(t) and t >= 0 for t in value)


def parse_completion(body: dict) -> GenerationRequest:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and not _is_int(prompt[0]):
        prompt = prompt[0]
    if isinstance(prompt, str):
        prompt_ids = tokenizer.tokenize(prompt)
    elif _token_array(prompt):
        prompt_ids = list(prompt)
    elif isinstance(prompt, list) and prompt and not _is_int(prompt[0]):
        raise invalid("prompt", "Batched prompts are not supported; send one prompt per request.")
    else:
        raise invalid("prompt", "'prompt' must be a string or a non-empty list of token ids.")
    if not prompt_ids:
        raise invalid("prompt", "'prompt' must not be empty.")
    if body.get("echo"):
        raise invalid("echo", "'echo' is not supported by the simulator.")
    request = _common(body, prompt_ids, "prompt", "max_tokens")
    request.json_output, request.json_schema = output_options.response_format(body)
    request.logprobs = output_options.completion_logprobs(body)
    return request


@dataclass
class EmbeddingRequest:
    model: str
    inputs: list[list[int]]
    encoding_format: str
    dimensions: int | None


def parse_embedding(body: dict) -> EmbeddingRequest:
    raw = body.get("input")
    if isinstance(raw, str):
        inputs = [tokenizer.tokenize(raw)]
    elif _token_array(raw):
        inputs = [list(raw)]
    elif isinstance(raw, list) and raw and all(isinstance(item, str) for item in raw):
        inputs = [tokenizer.tokenize(item) for item in raw]
    elif isinstance(raw, list) and raw and all(_token_array(item) for item in raw):
        inputs = [list(item) for item in raw]
    else:
        raise invalid(
            "input",
            "'input' must be a string, a list of strings, a token array or a list of token arrays.",
        )
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise invalid("encoding_format", "'encoding_format' must be 'float' or 'base64'.")
    return EmbeddingRequest(
        model=model_name(body),
        inputs=inputs,
        encoding_format=encoding,
        dimensions=_opt_int(body, "dimensions", 1),
    )


def context_error(context: int, prompt: int, completion: int, param: str) -> ApiError:
    where = "messages" if param == "messages" else "prompt"
    if completion:
        detail = (
            f"However, you requested {prompt + completion} tokens ({prompt} in the {where}, "
            f"{completion} in the completion). Please reduce the length of the {where} or "
            "completion."
        )
    else:
        detail = f"However, your {where} resulted in {prompt} tokens. Please reduce its length."
    return ApiError(
        400,
        f"This model's maximum context length is {context} tokens. {detail}",
        param=param,
        code="context_length_exceeded",
    )


def usage(prompt: int, completion: int, cached: int) -> dict:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
