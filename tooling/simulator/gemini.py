"""The Gemini front-end: ``models/{model}:generateContent``,
``:streamGenerateContent`` (``?alt=sse``: SSE ``data:`` events; without it a
JSON array streamed element by element, as Google does), ``:countTokens``,
and the model list and model (``models``, ``models/{model}``), under
``/v1beta/`` and ``/v1/`` alike.

A call runs the shared engine flow (faults, batch slot, prefix cache, prefill,
pacing, metrics, see ``generation``). Each candidate (``candidateCount``, up
to 8) is, in order:

* thoughts, when ``thinkingConfig.thinkingBudget`` is above 0 (at most that
  many tokens), -1 (dynamic: up to half the output budget) or a
  ``thinkingLevel`` is set; models do not think unless asked. They count in
  ``thoughtsTokenCount`` and against ``maxOutputTokens``, as Gemini 2.5 counts
  them; with ``includeThoughts`` they come as parts with ``"thought": true``;
* a ``functionCall`` part when the tools call for one (``toolConfig`` modes
  AUTO after a user turn, ANY, or one allowed function);
* otherwise text: JSON built from the response schema when
  ``responseMimeType`` is ``application/json`` (``{"answer": <text>}`` without
  a schema; an enum's first value for ``text/x.enum``), else generated text
  that honours ``stopSequences``.

``finishReason`` is ``STOP`` or ``MAX_TOKENS``. With ``responseLogprobs``
(``logprobs``: top candidates, 0 to 20) a text candidate carries
``logprobsResult`` (``chosenCandidates``, ``topCandidates``) and
``avgLogprobs``, each streamed chunk those of its token (``output_options``). ``usageMetadata`` has
``promptTokenCount`` (which includes ``cachedContentTokenCount``, present when
the prefix cache served part of the prompt: Gemini's implicit caching),
``candidatesTokenCount``, ``thoughtsTokenCount`` (when there were thoughts)
and ``totalTokenCount``. Every streamed chunk carries the running usage; a
candidate's last chunk carries its ``finishReason``.
"""

from __future__ import annotations

import base64
import json
import uuid
from urllib.parse import parse_qs

from . import protocol
from .config import CHAT
from .gemini_request import GenerateRequest, parse_generate
from .generation import GenerationEndpoints
from .http import Response
from .output_options import gemini_logprobs, token_logprobs
from .protocol import ApiError
from .text import (
    Generation,
    generate,
    generate_json,
    generate_thinking,
    generate_tool_call,
    results_lead,
)

METHODS = ("generateContent", "streamGenerateContent", "countTokens")


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class _Candidate:
    """One candidate's output as a list of steps: (kind, part or None), kind in
    thought / text / call; a thought not shown is a step with no part."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, dict | None]] = []
        self.thoughts = 0
        self.tokens = 0
        self.finish = "STOP"
        self.logprobs: list[dict] | None = None  # the text's tokens (responseLogprobs)
        self.text_start = 0  # the step of the text's first token


def _text_generation(req: GenerateRequest, left: int, index: int) -> Generation:
    if req.mime_type in ("application/json", "text/x.enum"):
        enum = (req.schema or {}).get("enum")
        if req.mime_type == "text/x.enum" and isinstance(enum, list):
            deltas = [str(enum[0])] if enum else []
            return Generation(deltas, len(deltas), "stop")
        return generate_json(  # no schema: an object with the answer's text
            req.prompt_ids,
            req.schema,
            words=req.plan.words,
            max_tokens=left,
            seed=req.seed,
            index=index,
        )
    lead = results_lead(req.plan.results) if req.plan.results else ""
    return generate(
        req.prompt_ids,
        max_tokens=left,
        seed=req.seed,
        index=index,
        stop=req.stop,
        lead=lead,
        said=req.plan.say,
    )


def _candidate(req: GenerateRequest, max_tokens: int, index: int) -> _Candidate:
    out = _Candidate()
    left = max_tokens
    if req.thinking_budget:
        budget = req.thinking_budget if req.thinking_budget > 0 else max(1, max_tokens // 2)
        thought = generate_thinking(req.prompt_ids, budget=min(budget, left), seed=index)
        for piece in thought.deltas:
            part = {"text": piece, "thought": True} if req.include_thoughts else None
            out.steps.append(("thought", part))
        out.thoughts = thought.completion_tokens
        left -= out.thoughts
    if left <= 0:
        out.finish = "MAX_TOKENS"
        return out
    if req.plan.call is not None:
        call = generate_tool_call(
            req.prompt_ids,
            req.plan.call,
            words=req.plan.words,
            max_tokens=left,
            seed=req.seed,
            index=index,
        )
        out.tokens = call.completion_tokens
        if call.finish_reason == "length":
            out.finish = "MAX_TOKENS"
        else:
            args = json.loads(call.text)
            assert call.tool_call is not None  # generate_tool_call always sets it
            out.steps.append(
                ("call", {"functionCall": {"name": call.tool_call["name"], "args": args}})
            )
        return out
    text = _text_generation(req, left, index)
    out.text_start = len(out.steps)
    out.steps.extend(("text", {"text": piece}) for piece in text.deltas)
    if req.logprobs is not None:
        out.logprobs = token_logprobs(text.deltas, req.logprobs, req.prompt_ids, index)
    out.tokens = text.completion_tokens
    out.finish = "MAX_TOKENS" if text.finish_reason == "length" else "STOP"
    return out


def _merged_parts(steps) -> list[dict]:
    """The parts of a whole answer: consecutive text pieces of one kind joined."""
    parts: list[dict] = []
    for kind, part in steps:
        if part is None:
            continue
        previous = parts[-1] if parts else {}
        same_kind = bool(previous.get("thought")) == (kind == "thought")
        if kind in ("text", "thought") and "text" in previous and same_kind:
            parts[-1] = {**previous, "text": previous["text"] + part["text"]}
            continue
        parts.append(dict(part))
    return parts


def _usage(prompt: int, cached: int, answer: int, thoughts: int) -> dict:
    usage = {"promptTokenCount": prompt, "candidatesTokenCount": answer}
    if cached:
        usage["cachedContentTokenCount"] = cached
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    usage["totalTokenCount"] = prompt + answer + thoughts
    return usage


def _response_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes[:12]).decode()


def _stream_candidate(
    answer: _Candidate, index: int, step: int, answer_tokens: list[int], thought_tokens: list[int]
) -> dict | None:
    """A candidate's part of the ``step``-th streamed chunk (None: it has none),
    counting its tokens so far into ``answer_tokens`` and ``thought_tokens``."""
    last = step == max(len(answer.steps), 1) - 1
    part = None
    if step < len(answer.steps):
        kind, part = answer.steps[step]
        if kind == "thought":
            thought_tokens[index] += 1
        elif kind == "text":
            answer_tokens[index] += 1
        else:
            answer_tokens[index] = answer.tokens
    if last:
        thought_tokens[index] = answer.thoughts
        answer_tokens[index] = answer.tokens
    if part is None and not last:
        return None
    content: dict = {"role": "model"}
    if part is not None:
        content["parts"] = [part]
    entry: dict = {"content": content, "index": index}
    if part is not None and kind == "text" and answer.logprobs is not None:
        token = answer.logprobs[step - answer.text_start]
        entry.update(gemini_logprobs([token]))
    if last:
        entry["finishReason"] = answer.finish
    return entry


class GeminiEndpoints(GenerationEndpoints):
    """Mixed into NodeApp; the shared generation flow is inherited."""

    def _gemini_engine(self, name: str, method: str, version: str):
        engine = self.engines.get(name)
        if engine is None or engine.spec.kind != CHAT:
            raise ApiError(
                404,
                f"models/{name} is not found for API version {version}, or is not supported "
                f"for {method}. Call ListModels to see the list of available models and their "
                "supported methods.",
            )
        return engine

    async def gemini_call(self, request, conn, version: str, model: str, method: str):
        if method not in METHODS:
            raise ApiError(404, f"Method not found: models/{model}:{method}.")
        model = model.removeprefix("models/")
        body = protocol.load_json_object(request.body)
        engine = self._gemini_engine(model, method, version)
        if method == "countTokens":
            req = parse_generate(body, model, count_only=True)
            total = len(req.prompt_ids)
            details = [{"modality": "TEXT", "tokenCount": total}]
            return Response(200, _dumps({"totalTokens": total, "promptTokensDetails": details}))
        req = parse_generate(body, model)
        prompt = len(req.prompt_ids)
        context = engine.spec.context
        max_tokens = req.max_tokens or context - prompt
        if prompt >= context or prompt + max_tokens > context:
            raise ApiError(
                400,
                f"The input token count ({prompt}) plus the output budget ({max_tokens}) "
                f"exceeds the maximum number of tokens allowed ({context}).",
            )

        async def respond(cached: int, started: float):
            answers = [_candidate(req, max_tokens, i) for i in range(req.candidates)]
            meta = (model, prompt, cached, started)
            if method == "streamGenerateContent":
                sse = "sse" in parse_qs(request.query).get("alt", [])
                return await self._gemini_stream(conn, engine, answers, meta, sse)
            return await self._gemini_whole(conn, engine, answers, meta)

        return await self.run_generation(engine, req.prompt_ids, respond)

    def _gemini_record(self, engine, answers, started: float, first: float) -> None:
        reasons = ["length" if a.finish == "MAX_TOKENS" else "stop" for a in answers]
        tokens = sum(a.tokens + a.thoughts for a in answers)
        self.record(engine, reasons, started, first, tokens)

    async def _gemini_whole(self, conn, engine, answers, meta):
        model, prompt, cached, started = meta
        first = self._now()
        if not await self.whole_wait(conn, engine, max(a.tokens + a.thoughts for a in answers)):
            return None
        candidates = []
        for index, answer in enumerate(answers):
            content: dict = {"role": "model"}
            parts = _merged_parts(answer.steps)
            if parts:
                content["parts"] = parts
            candidate = {"content": content, "finishReason": answer.finish, "index": index}
            if answer.logprobs is not None:
                candidate.update(gemini_logprobs(answer.logprobs))
            candidates.append(candidate)
        usage = _usage(
            prompt, cached, sum(a.tokens for a in answers), sum(a.thoughts for a in answers)
        )
        body = {
            "candidates": candidates,
            "usageMetadata": usage,
            "modelVersion": model,
            "responseId": _response_id(),
        }
        self._gemini_record(engine, answers, started, first)
        return Response(200, _dumps(body))

    async def _gemini_stream(self, conn, engine, answers, meta, sse: bool):
        model, prompt, cached, started = meta
        response_id = _response_id()
        if sse:
            conn.start_stream("text/event-stream")
        else:
            conn.start_stream("application/json; charset=UTF-8")
        first = self._now()
        sent = 0
        steps = max(len(a.steps) for a in answers)
        answer_tokens = [0] * len(answers)
        thought_tokens = [0] * len(answers)
        for step in range(max(steps, 1)):
            if not await self.pace(conn, engine, step):
                return None
            candidates = []
            for index, answer in enumerate(answers):
                entry = _stream_candidate(answer, index, step, answer_tokens, thought_tokens)
                if entry is not None:
                    candidates.append(entry)
            if not candidates:
                continue
            usage = _usage(prompt, cached, sum(answer_tokens), sum(thought_tokens))
            chunk = _dumps(
                {
                    "candidates": candidates,
                    "usageMetadata": usage,
                    "modelVersion": model,
                    "responseId": response_id,
                }
            )
            if sse:
                await conn.write_chunk(b"data: " + chunk + b"\r\n\r\n")
            else:
                await conn.write_chunk((b"[" if sent == 0 else b",\r\n") + chunk)
            sent += 1
        if not sse:
            await conn.write_chunk(b"]" if sent else b"[]")
        conn.end_stream()
        self._gemini_record(engine, answers, started, first)
        return None

    # -- models ---------------------------------------------------------------------------

    @staticmethod
    def _gemini_model(spec) -> dict:
        return {
            "name": f"models/{spec.name}",
            "version": "001",
            "displayName": spec.name,
            "description": "A simulated model of the bundled inference node.",
            "inputTokenLimit": spec.context,
            "outputTokenLimit": spec.context,
            "supportedGenerationMethods": list(METHODS),
            "temperature": 1.0,
            "maxTemperature": 2.0,
            "topP": 0.95,
            "topK": 64,
            "thinking": True,
        }

    async def gemini_models(self, request, conn, version: str, model: str | None = None):
        specs = [s for s in self.config.models if s.kind == CHAT]
        if model is None:
            return Response(200, _dumps({"models": [self._gemini_model(s) for s in specs]}))
        name = model.removeprefix("models/")
        for spec in specs:
            if spec.name == name:
                return Response(200, _dumps(self._gemini_model(spec)))
        raise ApiError(404, f"models/{name} is not found for API version {version}.")
