"""One prompt estimate and one affinity prefix for every protocol.

Every adapter translates its client's request into the node's OpenAI body;
``chat_prompt`` reads that canonical body (``messages`` and ``tools``) and
returns what the hot path needs before forwarding:

* the prompt's tokens as the node counts them: ``len(chat_prompt_tokens(
  template_messages(messages, tools)))`` of ``console.kernel.tokens``, the rule and
  chat template the simulator bills with — so reservations, TPM counting and
  disconnect billing are the same for the same conversation whatever protocol
  it came in;
* the start of the prompt as the node's template renders it (markers spelled
  out, at most ``PREFIX_CHARS``): prefix-affinity routing hashes its first
  blocks, so calls that share a system prompt and tools land on the node that
  has them cached, whatever protocol they came in.

Both are computed in one pass without building the rendered messages. The
rule costs ~0.1 µs a character, and most of a prompt repeats from call to
call (system prompt, tool definitions, the conversation so far), so counts
are remembered by text (two bounded caches). The compact JSON of tool
definitions and tool calls (``json.dumps``, as the template writes it) is
remembered by its ``orjson`` encoding, which is exact: equal bytes, equal
values.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import orjson

from console.kernel.tokens import content_media_tokens, count_tokens

#: How much of the rendered prompt ``CallRequest.prefix_text`` keeps (characters).
PREFIX_CHARS = 4096

# Texts up to _SHORT_MAX characters are remembered in a large cache (at most
# 8192 texts of 256 characters); longer ones up to _LONG_MAX in a smaller one (at
# most 1024 texts of 32 KiB). Longer texts are counted every time.
_SHORT_MAX = 256
_LONG_MAX = 32768


@lru_cache(maxsize=8192)
def _count_short(text: str) -> int:
    return count_tokens(text)


@lru_cache(maxsize=1024)
def _count_long(text: str) -> int:
    return count_tokens(text)


def count_text(text: str) -> int:
    """``console.kernel.tokens.count_tokens``, remembered for texts that repeat."""
    size = len(text)
    if size <= _SHORT_MAX:
        return _count_short(text)
    if size <= _LONG_MAX:
        return _count_long(text)
    return count_tokens(text)


@lru_cache(maxsize=1024)
def _compact_of(encoded: bytes) -> str:
    return json.dumps(orjson.loads(encoded), separators=(",", ":"), ensure_ascii=False)


def compact(obj: object) -> str:
    """The template's compact JSON of ``obj`` (``json.dumps``, no spaces, UTF-8 kept)."""
    try:
        encoded = orjson.dumps(obj)
    except TypeError:  # orjson.JSONEncodeError: a value orjson cannot encode (huge ints, ...)
        encoded = b"null"
    # orjson writes NaN and infinities as null (json.dumps as NaN, Infinity): those
    # objects, and the ones too large to remember, are written the template's way.
    if len(encoded) > _LONG_MAX or b"null" in encoded:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return _compact_of(encoded)


def content_text(content: object) -> str:
    """A message's content as the template renders it: text parts joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def _calls_text(calls: list[Any]) -> str:
    shown = [
        {"name": fn.get("name"), "arguments": fn.get("arguments")}
        for call in calls
        if isinstance(call, dict) and isinstance(fn := call.get("function"), dict)
    ]
    return compact(shown)


# <|start|> assistant <|sep|>: the generation prompt the template ends with.
_GENERATION_PROMPT = 2 + count_tokens("assistant")
_TOOLS_ROLE = count_tokens("tools")


def chat_prompt(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> tuple[int, str]:
    """(prompt tokens, affinity prefix) of the node's chat body: its ``messages``
    and ``tools`` as ``console.kernel.tokens.template_messages`` renders them."""
    total = _GENERATION_PROMPT
    pieces: list[str] = []
    size = 0
    if tools:
        text = compact(tools)
        total += 3 + _TOOLS_ROLE + count_text(text)
        piece = "<|start|>tools<|sep|>" + text + "<|end|>"
        pieces.append(piece)
        size = len(piece)
    for message in messages:
        role = message.get("role", "")
        total += 3 + count_text(str(role))
        name = message.get("name")
        if isinstance(name, str) and name:
            total += count_text(" " + name)
        else:
            name = ""
        content = message.get("content")
        text = content if isinstance(content, str) else content_text(content)
        calls = message.get("tool_calls")
        if calls and isinstance(calls, list):
            text += _calls_text(calls)
        total += count_text(text)
        if type(content) is list:
            total += content_media_tokens(content)
        if size < PREFIX_CHARS:
            piece = f"<|start|>{role}{' ' + name if name else ''}<|sep|>{text}<|end|>"
            pieces.append(piece)
            size += len(piece)
    return total, "".join(pieces)[:PREFIX_CHARS]


def texts_prompt(texts: list[str]) -> tuple[int, str]:
    """(tokens, affinity prefix) of plain input texts (completion prompts, embeddings)."""
    return sum(count_text(t) for t in texts), texts[0][:PREFIX_CHARS]


def chat_prompt_estimate(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> int:
    """The prompt tokens of ``chat_prompt`` alone."""
    return chat_prompt(messages, tools)[0]
