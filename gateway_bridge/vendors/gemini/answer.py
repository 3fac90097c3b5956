"""Gemini answers → OpenAI chat objects (translated calls), and the usage of
native ones. See the package docstring for the mapping and what is lost."""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from gateway_bridge.protocols.base import GatewayError, invalid_answer
from gateway_bridge.protocols.checks import ID_CHARS
from gateway_bridge.usage_mapping import TokenUsage, from_gemini, from_gemini_stream, to_openai
from gateway_bridge.vendors.gemini.errors import error_from

_FILTERED = {
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
}
_NO_REASON = (None, "", "FINISH_REASON_UNSPECIFIED")


def finish_reason(reason: object, calls: bool) -> str:
    """Gemini's ``finishReason`` → OpenAI's (a turn that called functions ends in
    ``tool_calls``)."""
    if reason == "MAX_TOKENS":
        return "length"
    if reason in _FILTERED:
        return "content_filter"
    return "tool_calls" if calls else "stop"


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _chat_id(response_id: object) -> str:
    raw = ID_CHARS.sub("", response_id) if isinstance(response_id, str) else ""
    return f"chatcmpl-{raw or 'gemini'}"


def _index(candidate: dict[str, Any], position: int) -> int:
    index = candidate.get("index")
    return index if type(index) is int and index >= 0 else position


def _blocked(obj: dict[str, Any]) -> bool:
    feedback = obj.get("promptFeedback")
    return isinstance(feedback, dict) and feedback.get("blockReason") not in _NO_REASON


def new_call_ids() -> str:
    """The id prefix of one answer's function calls that carry no id of their
    own (Gemini's often do not): ``call_<12 random hex>_`` then the call's
    position. Unique per answer, so a conversation's later calls never reuse
    an earlier call's id (a client keyed on ids, as Claude Code is, would take
    the second ``call_0`` for the first one answered again)."""
    return f"call_{secrets.token_hex(6)}_"


class _Parts:
    """One candidate's parts read as OpenAI fields."""

    def __init__(self, candidate: dict[str, Any], first_call: int, call_ids: str) -> None:
        self.text: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[dict[str, Any]] = []
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in _list(parts):
            if not isinstance(part, dict):
                continue
            text = part.get("text")
            if isinstance(text, str) and text:
                (self.thoughts if part.get("thought") is True else self.text).append(text)
            call = part.get("functionCall")
            if isinstance(call, dict):
                name = call.get("name") if isinstance(call.get("name"), str) else ""
                args = call.get("args") if isinstance(call.get("args"), dict) else {}
                own = ID_CHARS.sub("", call["id"]) if isinstance(call.get("id"), str) else ""
                self.calls.append(
                    {
                        "id": own or f"{call_ids}{first_call + len(self.calls)}",
                        "type": "function",
                        "function": {"name": name, "arguments": orjson.dumps(args).decode()},
                    }
                )


def _embeddings(obj: dict[str, Any], model: str) -> tuple[dict[str, Any], TokenUsage | None]:
    vectors = obj.get("embeddings")
    if vectors is None and isinstance(obj.get("embedding"), dict):
        vectors = [obj["embedding"]]
    data = []
    for i, vector in enumerate(_list(vectors)):
        values = vector.get("values") if isinstance(vector, dict) else None
        if not isinstance(values, list):
            raise invalid_answer("The Gemini API sent an embedding that is not a list of numbers.")
        data.append({"object": "embedding", "index": i, "embedding": values})
    if not data:
        raise invalid_answer("The Gemini API sent no embeddings.")
    usage = from_gemini(obj.get("usageMetadata"))
    out: dict[str, Any] = {"object": "list", "data": data, "model": model}
    if usage is not None:
        out["usage"] = {"prompt_tokens": usage.prompt_total, "total_tokens": usage.prompt_total}
    return out, usage


def _candidate_token(value: object) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    token, logprob = value.get("token"), value.get("logProbability")
    if not isinstance(token, str) or isinstance(logprob, bool):
        return None
    if not isinstance(logprob, int | float):
        return None
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def logprobs_of(candidate: dict[str, Any]) -> dict[str, Any] | None:
    """A candidate's ``logprobsResult`` → OpenAI's ``logprobs`` (None without one)."""
    result = candidate.get("logprobsResult")
    if not isinstance(result, dict):
        return None
    tops = _list(result.get("topCandidates"))
    content = []
    for i, chosen in enumerate(_list(result.get("chosenCandidates"))):
        entry = _candidate_token(chosen)
        if entry is None:
            continue
        top = tops[i].get("candidates") if i < len(tops) and isinstance(tops[i], dict) else None
        entry["top_logprobs"] = [t for t in map(_candidate_token, _list(top)) if t is not None]
        content.append(entry)
    return {"content": content, "refusal": None}


def to_chat(obj: dict[str, Any], model: str) -> tuple[dict[str, Any], TokenUsage | None]:
    """A ``generateContent`` answer → an OpenAI ``chat.completion`` (and a
    ``batchEmbedContents`` / ``embedContent`` answer → an OpenAI embeddings list)."""
    if not isinstance(obj, dict):
        raise invalid_answer("The Gemini API sent an answer that is not a JSON object.")
    if "embeddings" in obj or "embedding" in obj:
        return _embeddings(obj, model)
    usage = from_gemini(obj.get("usageMetadata"))
    candidates = obj.get("candidates")
    call_ids = new_call_ids()
    choices = []
    if isinstance(candidates, list) and candidates:
        for position, candidate in enumerate(candidates):
            if not isinstance(candidate, dict):
                raise invalid_answer("The Gemini API sent a candidate that is not an object.")
            parts = _Parts(candidate, 0, call_ids)
            message: dict[str, Any] = {
                "role": "assistant",
                "content": "".join(parts.text) if parts.text or not parts.calls else None,
            }
            if parts.thoughts:
                message["reasoning_content"] = "".join(parts.thoughts)
            if parts.calls:
                message["tool_calls"] = parts.calls
            reason = finish_reason(candidate.get("finishReason"), bool(parts.calls))
            choice = {"index": _index(candidate, position), "message": message}
            choice["logprobs"] = logprobs_of(candidate)
            choice["finish_reason"] = reason
            choices.append(choice)
    elif _blocked(obj):  # the prompt was refused: no candidate at all
        message = {"role": "assistant", "content": ""}
        choices.append({"index": 0, "message": message, "finish_reason": "content_filter"})
    else:
        raise invalid_answer("The Gemini API sent an answer without candidates.")
    chat: dict[str, Any] = {
        "id": _chat_id(obj.get("responseId")),
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        chat["usage"] = to_openai(usage)
    return chat, usage


class StreamReader:
    """``streamGenerateContent?alt=sse`` events → OpenAI chat chunks.

    Each event is a whole GenerateContentResponse: its text and thought parts
    become ``content`` / ``reasoning_content`` deltas (the first delta of a
    candidate carries ``role``), its function calls complete ``tool_calls``
    entries, and a ``finishReason`` a finish chunk of its own. Usage is the last
    ``usageMetadata`` (running totals); no usage chunk is emitted — the client
    adapter renders ``.usage``."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._id = "chatcmpl-gemini"
        self._last_usage: object = None
        self._started: set[int] = set()
        self._calls: dict[int, int] = {}  # candidate → tool calls sent
        self._open: set[int] = set()  # candidates seen without a finish reason yet
        self._blocked = False
        self._call_ids = new_call_ids()

    @property
    def usage(self) -> TokenUsage | None:
        return from_gemini_stream([self._last_usage])

    @property
    def finished(self) -> bool:
        return self._blocked or (bool(self._started) and not self._open)

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": self.model,
            "choices": choices,
        }

    def feed(self, event: str | None, data: dict[str, Any]) -> list[dict[str, Any]]:
        if not isinstance(data, dict):
            raise invalid_answer("The Gemini API streamed an event that is not a JSON object.")
        if isinstance(data.get("error"), dict):
            raise error_from(data["error"], 0)
        if data.get("usageMetadata") is not None:
            self._last_usage = data["usageMetadata"]
        if isinstance(data.get("responseId"), str) and self._id == "chatcmpl-gemini":
            self._id = _chat_id(data["responseId"])
        candidates = data.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            if _blocked(data) and not self._started:
                self._blocked = True
                choice = {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "finish_reason": "content_filter",
                }
                return [self._chunk([choice])]
            return []
        deltas, finishes = [], []
        for position, candidate in enumerate(candidates):
            if not isinstance(candidate, dict):
                raise invalid_answer("The Gemini API streamed a candidate that is not an object.")
            index = _index(candidate, position)
            sent = self._calls.get(index, 0)
            parts = _Parts(candidate, sent, self._call_ids)
            delta: dict[str, Any] = {}
            if index not in self._started:
                self._started.add(index)
                self._open.add(index)
                delta["role"] = "assistant"
            if parts.thoughts:
                delta["reasoning_content"] = "".join(parts.thoughts)
            if parts.text:
                delta["content"] = "".join(parts.text)
            if parts.calls:
                delta["tool_calls"] = [
                    {"index": sent + k, **call} for k, call in enumerate(parts.calls)
                ]
                self._calls[index] = sent + len(parts.calls)
            if delta:
                choice = {"index": index, "delta": delta, "finish_reason": None}
                logprobs = logprobs_of(candidate)
                if logprobs is not None:
                    choice["logprobs"] = logprobs
                deltas.append(choice)
            reason = candidate.get("finishReason")
            if reason not in _NO_REASON and index in self._open:
                self._open.discard(index)
                finish = finish_reason(reason, bool(self._calls.get(index)))
                finishes.append({"index": index, "delta": {}, "finish_reason": finish})
        return [self._chunk(choices) for choices in (deltas, finishes) if choices]


def native_usage(obj: object) -> TokenUsage | None:
    """The usage of a native answer: a GenerateContentResponse (or the JSON
    array of them a stream without ``alt=sse`` is)."""
    if isinstance(obj, dict):
        return from_gemini(obj.get("usageMetadata"))
    if isinstance(obj, list):
        return from_gemini_stream(
            item.get("usageMetadata") for item in obj if isinstance(item, dict)
        )
    return None


class NativeStreamUsage:
    """Watches a native stream (the data of each SSE event, or each element of
    the JSON array): the last ``usageMetadata``, the first generated part,
    the finish, a streamed error."""

    def __init__(self) -> None:
        self._last_usage: object = None
        self.content = False
        self.finished = False
        self.error: GatewayError | None = None

    @property
    def usage(self) -> TokenUsage | None:
        return from_gemini_stream([self._last_usage])

    def feed(self, event: str | None, data: bytes) -> None:
        if (
            self.content
            and b"usageMetadata" not in data
            and b"finishReason" not in data
            and b'"error"' not in data
        ):
            return  # a plain text event once content is known: nothing to learn
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(obj, dict):
            return
        if isinstance(obj.get("error"), dict):
            self.error = error_from(obj["error"], 0)
            return
        if obj.get("usageMetadata") is not None:
            self._last_usage = obj["usageMetadata"]
        if _blocked(obj):
            self.finished = True
        for candidate in _list(obj.get("candidates")):
            if not isinstance(candidate, dict):
                continue
            if not self.content:
                content = candidate.get("content")
                for part in _list(content.get("parts") if isinstance(content, dict) else None):
                    if isinstance(part, dict) and (part.get("text") or part.get("functionCall")):
                        self.content = True
                        break
            if candidate.get("finishReason") not in _NO_REASON:
                self.finished = True


def stream_reader(model: str) -> StreamReader:
    """The reader that turns this vendor's stream into OpenAI chunks."""
    return StreamReader(model)
