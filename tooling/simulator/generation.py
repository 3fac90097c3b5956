"""The generation endpoints: chat completions, completions and embeddings, and
the engine flow every front-end shares.

Flow of a generation request: validate, check the model and its context
window, draw faults, wait for a batch slot, look the prompt up in the prefix
cache, sleep the prefill time (uncached tokens only), then emit tokens one
inter-token latency apart (streamed) or all at once. ``run_generation``,
``pace``, ``whole_wait`` and ``record`` are that flow's pieces; the Anthropic
and Gemini front-ends (``anthropic``, ``gemini``) use them too, so latency,
faults (stalls and drops included) and metrics are the same whatever the
protocol.

What a request asks of its output's form (``response_format``, ``logprobs``) is
honoured by ``choices`` and ``output_options``; a choice a stop string ended
names it in vLLM's ``stop_reason``.

Context window rule: like vLLM, ``prompt + max_tokens`` must fit; when
``max_tokens`` is absent it defaults to what is left of the window, and a
prompt that fills the window alone is refused.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import random
import sys
import time
import uuid
from array import array
from typing import Any

from . import output_options, protocol
from .choices import first_delta, generation_of, message_of
from .config import CHAT, EMBEDDING, NodeConfig
from .engine import ModelEngine
from .faults import FaultInjector, fault_error
from .http import Response
from .latency import LatencyModel
from .protocol import ApiError
from .text import Generation, prompt_seed

_DONE = b"data: [DONE]\n\n"


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _event(obj) -> bytes:
    return b"data: " + _dumps(obj) + b"\n\n"


class GenerationEndpoints:
    """The flow every front-end shares (their endpoint classes derive from
    this one); NodeApp sets what it works with in its ``__init__``."""

    config: NodeConfig
    engines: dict[str, ModelEngine]
    latency: LatencyModel
    faults: FaultInjector
    started: int

    def _engine_for(self, name: str, kind: str):
        engine = self.engines.get(name)
        if engine is None:
            raise ApiError(
                404, f"The model '{name}' does not exist.", param="model", code="model_not_found"
            )
        if engine.spec.kind != kind:
            api = "embeddings" if kind == EMBEDDING else "chat and completions"
            raise ApiError(
                400,
                f"The model '{name}' does not support the {api} API.",
                param="model",
                code="model_not_supported",
            )
        return engine

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    async def _sleep(self, unscaled: float) -> None:
        seconds = unscaled * self.latency.time_scale
        if seconds > 0:
            await asyncio.sleep(seconds)

    def _draw_faults(self):
        """This request's fault decision; an injected error status is raised here."""
        decision = self.faults.decide()
        if decision.status:
            raise fault_error(decision.status)
        return decision

    async def _prefill(self, decision, uncached_tokens: int, running: int) -> None:
        """Sleep the prefill time of the uncached tokens (plus a drawn spike)."""
        prefill = self.latency.prefill_seconds(uncached_tokens, running)
        if decision.spike:
            prefill += self.faults.spike_seconds(prefill)
        if self.latency.sleeps or decision.spike:
            await self._sleep(prefill)

    async def run_generation(self, engine, prompt_ids: list[int], respond, *, uncached=None):
        """The flow every front-end shares: draw faults (an injected error is raised),
        take a batch slot, look the prompt up in the prefix cache, sleep the prefill,
        then return ``await respond(cached, started)``. ``uncached(cached)``, when
        given, says how many tokens to prefill instead (Anthropic's explicit cache)."""
        decision = self._draw_faults()
        started = asyncio.get_running_loop().time()
        scheduler = engine.scheduler
        await _batch_slot(scheduler)
        try:
            cached = engine.cache.admit(prompt_ids).cached_tokens
            engine.metrics.prompt_tokens += len(prompt_ids)
            todo = len(prompt_ids) - cached if uncached is None else uncached(cached)
            await self._prefill(decision, todo, scheduler.running)
            return await respond(cached, started)
        except asyncio.CancelledError:
            engine.metrics.success["abort"] += 1
            raise
        finally:
            scheduler.release()

    async def whole_wait(self, conn, engine, longest: int) -> bool:
        """Before a whole (unstreamed) answer of ``longest`` tokens: the stall and drop
        faults, then the decode time. False when the connection was dropped."""
        faults = self.faults.settings
        if faults.hang_after_tokens and longest > faults.hang_after_tokens:
            await asyncio.get_running_loop().create_future()  # stalls until the client goes
        if faults.drop_after_tokens and longest > faults.drop_after_tokens:
            conn.abort()
            return False
        if self.latency.sleeps and longest > 1:
            await self._sleep(self.latency.itl_seconds(engine.scheduler.running) * (longest - 1))
        return True

    async def pace(self, conn, engine, step: int) -> bool:
        """Before streamed output token ``step``: the stall and drop faults, then the
        inter-token gap. False when the connection was dropped."""
        faults = self.faults.settings
        if faults.hang_after_tokens and step == faults.hang_after_tokens:
            await asyncio.get_running_loop().create_future()  # stalls until the client goes
        if faults.drop_after_tokens and step == faults.drop_after_tokens:
            conn.abort()
            return False
        if step and self.latency.sleeps:
            await self._sleep(self.latency.itl_seconds(engine.scheduler.running))
        return True

    def record(self, engine, reasons, started: float, first_token_at: float, tokens: int) -> None:
        """Count a finished generation: output tokens, vLLM finish reasons
        (``stop``/``length``), time to first token and end-to-end latency."""
        now = asyncio.get_running_loop().time()
        metrics = engine.metrics
        metrics.generation_tokens += tokens
        for reason in reasons:
            metrics.success[reason] += 1
        metrics.ttft.observe(first_token_at - started)
        metrics.e2e.observe(now - started)

    async def generation(self, request, conn, *, chat: bool) -> Response | None:
        body = protocol.load_json_object(request.body)
        req = protocol.parse_chat(body) if chat else protocol.parse_completion(body)
        engine = self._engine_for(req.model, CHAT)
        context = engine.spec.context
        prompt_len = len(req.prompt_ids)
        if req.max_tokens is None:
            if prompt_len >= context:
                raise protocol.context_error(context, prompt_len, 0, req.prompt_param)
            max_tokens = context - prompt_len
        else:
            max_tokens = req.max_tokens
            if prompt_len + max_tokens > context:
                raise protocol.context_error(context, prompt_len, max_tokens, req.prompt_param)

        async def respond(cached: int, started: float):
            gens = [generation_of(req, max_tokens, i) for i in range(req.n)]
            meta = _Meta(chat, req, prompt_len, cached, started)
            if req.stream:
                return await self._stream(conn, engine, req, gens, meta)
            return await self._whole(conn, engine, gens, meta)

        return await self.run_generation(engine, req.prompt_ids, respond)

    async def _whole(self, conn, engine, gens: list[Generation], meta) -> Response | None:
        first_token_at = asyncio.get_running_loop().time()
        if not await self.whole_wait(conn, engine, max(len(g.deltas) for g in gens)):
            return None
        completion = sum(g.completion_tokens for g in gens)
        self._finish(engine, gens, meta, first_token_at, completion)
        created = int(time.time())
        usage = protocol.usage(meta.prompt, completion, meta.cached)
        probs = output_options.Logprobs(meta.logprobs, meta.prompt_ids, gens, chat=meta.chat)
        if meta.chat:
            choices = [
                {
                    "index": i,
                    "message": message_of(g),
                    "logprobs": probs.of(i, 0, len(g.deltas)),
                    "finish_reason": g.finish_reason,
                    "stop_reason": g.stop_sequence,
                }
                for i, g in enumerate(gens)
            ]
            body = {"id": _id("chatcmpl"), "object": "chat.completion", "created": created}
        else:
            choices = [
                {
                    "index": i,
                    "text": g.text,
                    "logprobs": probs.of(i, 0, len(g.deltas)),
                    "finish_reason": g.finish_reason,
                    "stop_reason": g.stop_sequence,
                }
                for i, g in enumerate(gens)
            ]
            body = {"id": _id("cmpl"), "object": "text_completion", "created": created}
        body.update(model=meta.model, choices=choices, usage=usage, system_fingerprint=None)
        return Response(200, _dumps(body))

    def _finish(self, engine, gens, meta, first_token_at: float, completion: int) -> None:
        # the engine's reasons: a tool call is a "stop"
        reasons = ["stop" if g.tool_call else g.finish_reason for g in gens]
        self.record(engine, reasons, meta.started, first_token_at, completion)

    async def _stream(self, conn, engine, req, gens: list[Generation], meta) -> None:
        loop = asyncio.get_running_loop()
        head = _stream_head(meta)
        extra = {"usage": None} if req.include_usage else {}

        def chunk(choices) -> bytes:
            return _event({**head, "choices": choices, **extra})

        probs = output_options.Logprobs(meta.logprobs, meta.prompt_ids, gens, chat=meta.chat)

        def content(index: int, step: int, finish=None) -> dict[str, Any]:
            return _stream_part(meta, gens[index], probs, index, step, finish)

        conn.start_stream("text/event-stream")
        first_token_at = loop.time()
        if meta.chat:
            roles = [
                {
                    "index": i,
                    "delta": first_delta(g),
                    "logprobs": None,
                    "finish_reason": None,
                }
                for i, g in enumerate(gens)
            ]
            await conn.write_chunk(chunk(roles))
        steps = max(len(g.deltas) for g in gens)
        for step in range(steps):
            if not await self.pace(conn, engine, step):
                return None
            parts = [content(i, step) for i, g in enumerate(gens) if step < len(g.deltas)]
            await conn.write_chunk(chunk(parts))
        finals = [content(i, 0, g.finish_reason) for i, g in enumerate(gens)]
        tail = chunk(finals)
        completion = sum(g.completion_tokens for g in gens)
        if req.include_usage:
            usage = protocol.usage(meta.prompt, completion, meta.cached)
            tail += _event({**head, "choices": [], "usage": usage})
        await conn.write_chunk(tail + _DONE)
        conn.end_stream()
        self._finish(engine, gens, meta, first_token_at, completion)
        return None

    async def embeddings(self, request, conn) -> Response:
        req = protocol.parse_embedding(protocol.load_json_object(request.body))
        engine = self._engine_for(req.model, EMBEDDING)
        spec = engine.spec
        for index, ids in enumerate(req.inputs):
            if len(ids) > spec.context:
                raise ApiError(
                    400,
                    f"Input {index} has {len(ids)} tokens; this model's maximum context "
                    f"length is {spec.context} tokens.",
                    param="input",
                    code="context_length_exceeded",
                )
        dims = req.dimensions or spec.dims
        if dims > spec.dims:
            raise protocol.invalid(
                "dimensions", f"'dimensions' must be at most {spec.dims} for '{spec.name}'."
            )
        decision = self._draw_faults()
        loop = asyncio.get_running_loop()
        started = loop.time()
        scheduler = engine.scheduler
        await _batch_slot(scheduler)
        try:
            total = sum(len(ids) for ids in req.inputs)
            engine.cache.queries_tokens += total
            engine.metrics.prompt_tokens += total
            await self._prefill(decision, total, scheduler.running)
        finally:
            scheduler.release()
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": _vector(ids, dims, req.encoding_format),
            }
            for i, ids in enumerate(req.inputs)
        ]
        elapsed = loop.time() - started
        engine.metrics.success["stop"] += 1
        engine.metrics.ttft.observe(elapsed)
        engine.metrics.e2e.observe(elapsed)
        usage: dict[str, Any] = {"prompt_tokens": total, "total_tokens": total}
        usage["prompt_tokens_details"] = {"cached_tokens": 0}
        body = {"object": "list", "data": data, "model": req.model, "usage": usage}
        return Response(200, _dumps(body))


def _stream_head(meta) -> dict[str, Any]:
    """What every chunk of a streamed answer starts with."""
    if meta.chat:
        head: dict[str, Any] = {"id": _id("chatcmpl"), "object": "chat.completion.chunk"}
    else:
        head = {"id": _id("cmpl"), "object": "text_completion"}
    head.update(created=int(time.time()), model=meta.model)
    return head


def _chat_delta(g: Generation, step: int, text: str) -> dict[str, Any]:
    """A chat chunk's delta at ``step``: text, or a piece of a tool call's arguments."""
    if not g.tool_call:
        return {"content": text}
    # A parallel call opens with its id, type and name (as OpenAI streams it).
    k, opens = g.call_at(step)
    call: dict[str, Any] = {"index": k, "function": {"arguments": text}}
    if opens is not None:
        call.update(id=opens["id"], type="function")
        call["function"] = {"name": opens["name"], "arguments": text}
    return {"tool_calls": [call]}


def _stream_part(
    meta, g: Generation, probs: output_options.Logprobs, index: int, step: int, finish=None
) -> dict[str, Any]:
    """One choice's part of a streamed chunk: its ``step``-th delta, or (with
    ``finish``) its closing part."""
    text = g.deltas[step] if finish is None else ""
    logprobs = probs.of(index, step, step + 1) if finish is None else None
    part: dict[str, Any]
    if meta.chat:
        delta = {} if finish is not None else _chat_delta(g, step, text)
        part = {"index": index, "delta": delta, "logprobs": logprobs}
    else:
        part = {"index": index, "text": text, "logprobs": logprobs}
    part["finish_reason"] = finish
    if finish is not None:
        part["stop_reason"] = g.stop_sequence  # vLLM's: the stop string that matched
    return part


class _Meta:
    __slots__ = ("cached", "chat", "logprobs", "model", "prompt", "prompt_ids", "started")

    def __init__(self, chat, req, prompt, cached, started):
        self.chat = chat
        self.model = req.model
        self.prompt_ids = req.prompt_ids
        self.logprobs = req.logprobs
        self.prompt = prompt
        self.cached = cached
        self.started = started


async def _batch_slot(scheduler) -> None:
    """Take a running-sequence slot, queueing when the batch is full (the
    caller releases it)."""
    if not scheduler.try_acquire():
        await scheduler.acquire()


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def _vector(ids: list[int], dims: int, encoding: str):
    """A deterministic unit vector for the token ids (the same input, the same vector)."""
    rng = random.Random(prompt_seed(ids, None, dims))  # noqa: S311 - deterministic vectors
    values = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    values = [v / norm for v in values]
    if encoding == "float":
        return values
    packed = array("f", values)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode()
