"""The one place that maps each protocol's usage object to the four billed
token classes, and back.

The classes (as in ``usage.models.CallRecord``): ``input`` is uncached prompt
tokens, ``cache_read`` and ``cache_write`` are their own classes, ``output``
includes reasoning tokens, and ``reasoning`` is the part of output spent
thinking (shown, never billed twice). The protocols disagree about what
their fields include:

- OpenAI: ``prompt_tokens`` *includes* ``prompt_tokens_details.cached_tokens``
  (so subtract them; DeepSeek says ``prompt_cache_hit_tokens``, Moonshot Kimi a
  top-level ``cached_tokens``, both included in ``prompt_tokens`` too);
  ``completion_tokens`` includes
  ``completion_tokens_details.reasoning_tokens``. The Responses API spells
  them ``input_tokens``/``input_tokens_details``/``output_tokens``.
- Anthropic: ``input_tokens`` *excludes* ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens`` (do not subtract). Cache writes are also
  broken down by lifetime in ``cache_creation.ephemeral_5m_input_tokens`` and
  ``ephemeral_1h_input_tokens``: cache write is their sum (the two spellings
  agree; when one is missing or short, the larger counts). In a stream,
  ``message_start`` carries the input side and each ``message_delta``
  carries cumulative counts: merge, never add.
- Gemini: ``promptTokenCount`` *includes* ``cachedContentTokenCount``;
  ``candidatesTokenCount`` excludes ``thoughtsTokenCount``, which is output
  too; tool-use prompt tokens are input. Stream chunks repeat the running
  totals: the last one wins.

A usage object that is missing, malformed, negative or absurdly large maps to ``None``
(the caller then counts tokens itself); a field that is merely absent
counts as zero."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TokenUsage:
    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int = 0

    @property
    def prompt_total(self) -> int:
        """Every prompt token, however it was billed."""
        return self.input + self.cache_read + self.cache_write


class _Malformed(Exception):
    pass


# More tokens than any call can have: a larger count is malformed (its sums
# would overflow the 64-bit integers of JSON encoders and database columns).
MAX_COUNT = 2**40


def _count(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    if value is None:
        return 0
    if type(value) is not int or value < 0 or value > MAX_COUNT:
        raise _Malformed(key)
    return value


def _sub(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _Malformed(key)
    return value


def _usage(build: Callable[[Mapping[str, Any]], TokenUsage], usage: object) -> TokenUsage | None:
    if not isinstance(usage, Mapping):
        return None
    try:
        result = build(usage)
    except _Malformed:
        return None
    if result.reasoning > result.output or result.input < 0:
        return None
    return result


def _openai(u: Mapping[str, Any]) -> TokenUsage:
    if "prompt_tokens" in u or "completion_tokens" in u:
        prompt, completion = _count(u, "prompt_tokens"), _count(u, "completion_tokens")
        cached = _count(_sub(u, "prompt_tokens_details"), "cached_tokens")
        if not cached:
            # OpenAI-compatible vendors' own spellings: DeepSeek's
            # ``prompt_cache_hit_tokens``, Moonshot Kimi's top-level ``cached_tokens``.
            cached = _count(u, "prompt_cache_hit_tokens") or _count(u, "cached_tokens")
        reasoning = _count(_sub(u, "completion_tokens_details"), "reasoning_tokens")
    else:  # the Responses API
        prompt, completion = _count(u, "input_tokens"), _count(u, "output_tokens")
        cached = _count(_sub(u, "input_tokens_details"), "cached_tokens")
        reasoning = _count(_sub(u, "output_tokens_details"), "reasoning_tokens")
    cached = min(cached, prompt)
    return TokenUsage(
        input=prompt - cached, cache_read=cached, output=completion, reasoning=reasoning
    )


def _anthropic(u: Mapping[str, Any]) -> TokenUsage:
    by_lifetime = _sub(u, "cache_creation")
    lifetimes = _count(by_lifetime, "ephemeral_5m_input_tokens") + _count(
        by_lifetime, "ephemeral_1h_input_tokens"
    )
    return TokenUsage(
        input=_count(u, "input_tokens"),
        cache_read=_count(u, "cache_read_input_tokens"),
        cache_write=max(_count(u, "cache_creation_input_tokens"), lifetimes),
        output=_count(u, "output_tokens"),
    )


def _gemini(u: Mapping[str, Any]) -> TokenUsage:
    prompt = _count(u, "promptTokenCount") + _count(u, "toolUsePromptTokenCount")
    cached = min(_count(u, "cachedContentTokenCount"), prompt)
    thoughts = _count(u, "thoughtsTokenCount")
    return TokenUsage(
        input=prompt - cached,
        cache_read=cached,
        output=_count(u, "candidatesTokenCount") + thoughts,
        reasoning=thoughts,
    )


def from_openai(usage: object) -> TokenUsage | None:
    # The common shapes first, as ``_openai`` maps them: two plain counts (and a
    # total), with or without ``prompt_tokens_details`` holding only cached_tokens.
    if type(usage) is dict and len(usage) <= 4:
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        if (
            type(prompt) is int
            and type(completion) is int
            and 0 <= prompt <= MAX_COUNT
            and 0 <= completion <= MAX_COUNT
        ):
            rest = len(usage) - 2 - ("total_tokens" in usage)
            if rest == 0:
                return TokenUsage(input=prompt, output=completion)
            details = usage.get("prompt_tokens_details")
            if rest == 1 and type(details) is dict and len(details) == 1:
                cached = details.get("cached_tokens")
                if type(cached) is int and 0 <= cached <= MAX_COUNT:
                    cached = min(cached, prompt)
                    return TokenUsage(input=prompt - cached, cache_read=cached, output=completion)
    return _usage(_openai, usage)


def from_anthropic(usage: object) -> TokenUsage | None:
    return _usage(_anthropic, usage)


def from_gemini(usage: object) -> TokenUsage | None:
    return _usage(_gemini, usage)


def from_anthropic_stream(usages: Iterable[Any]) -> TokenUsage | None:
    """The usage of a streamed Anthropic message from the ``usage`` objects of
    its events in order (``message_start``'s, then each ``message_delta``'s):
    every count is cumulative, so a later value replaces an earlier one."""
    merged: dict[str, Any] = {}
    for u in usages:
        if not isinstance(u, Mapping):
            return None
        merged.update({k: v for k, v in u.items() if v is not None})
    return from_anthropic(merged) if merged else None


def from_gemini_stream(usages: Iterable[Any]) -> TokenUsage | None:
    """Gemini stream chunks repeat the running totals: the last one wins."""
    last = None
    for u in usages:
        if u is not None:
            last = u
    return from_gemini(last) if last is not None else None


def to_openai(t: TokenUsage) -> dict[str, Any]:
    return {
        "prompt_tokens": t.prompt_total,
        "completion_tokens": t.output,
        "total_tokens": t.prompt_total + t.output,
        "prompt_tokens_details": {"cached_tokens": t.cache_read},
        "completion_tokens_details": {"reasoning_tokens": t.reasoning},
    }


def to_responses(t: TokenUsage) -> dict[str, Any]:
    """The Responses API's usage (``from_openai`` reads it back to the same counts)."""
    return {
        "input_tokens": t.prompt_total,
        "input_tokens_details": {"cached_tokens": t.cache_read},
        "output_tokens": t.output,
        "output_tokens_details": {"reasoning_tokens": t.reasoning},
        "total_tokens": t.prompt_total + t.output,
    }


def to_anthropic(t: TokenUsage) -> dict[str, Any]:
    return {
        "input_tokens": t.input,
        "cache_creation_input_tokens": t.cache_write,
        "cache_read_input_tokens": t.cache_read,
        "output_tokens": t.output,
    }


def to_gemini(t: TokenUsage) -> dict[str, Any]:
    out = {
        "promptTokenCount": t.prompt_total,
        "candidatesTokenCount": t.output - t.reasoning,
        "totalTokenCount": t.prompt_total + t.output,
    }
    if t.cache_read:
        out["cachedContentTokenCount"] = t.cache_read
    if t.reasoning:
        out["thoughtsTokenCount"] = t.reasoning
    return out
