"""The soak's clients: closed-loop virtual clients (each sends a call, waits
for the whole answer, sends the next), alternating between the gateway
processes, in the three protocols, plain and streamed; a share of streams
hang up after the first event. Every answer is kept as a ``Result``."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from dataclasses import dataclass, field

import aiohttp

from tooling.soak.scenario import KeySpec

PROTOCOLS = ("openai", "anthropic", "gemini")
MAX_TOKENS = 16
QUESTIONS = [
    "Summarize the rules in one sentence.",
    "Which rule matters most today?",
    "Give me a short example.",
    "What should I check first?",
    "Answer with a haiku about invoices.",
]


@dataclass
class Result:
    request_id: str | None
    key: str
    org: str
    protocol: str
    stream: bool
    status: int  # 0: no HTTP answer (transport error)
    t0: float  # wall clock, seconds
    t1: float
    ttft: float | None = None
    started: bool = False  # a stream event reached the client
    disconnected: bool = False  # the client hung up mid-stream on purpose
    code: str = ""
    step: int = 0
    gateway: int = 0

    @property
    def latency(self) -> float:
        return self.t1 - self.t0


def request_for(key: KeySpec, protocol: str, stream: bool, question: str):
    """(path, headers, body) of one call in ``protocol``."""
    if protocol == "openai":
        body = {
            "model": key.model,
            "messages": [
                {"role": "system", "content": key.system},
                {"role": "user", "content": question},
            ],
            "max_tokens": MAX_TOKENS,
        }
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return "/v1/chat/completions", {"authorization": f"Bearer {key.raw}"}, body
    if protocol == "anthropic":
        body = {
            "model": key.model,
            "max_tokens": MAX_TOKENS,
            "system": key.system,
            "messages": [{"role": "user", "content": question}],
            "stream": stream,
        }
        return "/v1/messages", {"x-api-key": key.raw, "anthropic-version": "2023-06-01"}, body
    verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
    body = {
        "contents": [{"role": "user", "parts": [{"text": question}]}],
        "systemInstruction": {"parts": [{"text": key.system}]},
        "generationConfig": {"maxOutputTokens": MAX_TOKENS},
    }
    return f"/v1beta/models/{key.model}:{verb}", {"x-goog-api-key": key.raw}, body


def _error_code(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return "unreadable"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return ""
    details = error.get("details")
    if isinstance(details, list) and details and isinstance(details[0], dict):
        return str(details[0].get("reason") or error.get("status") or "")
    return str(error.get("code") or error.get("type") or "")


@dataclass
class Traffic:
    gateway_urls: list[str]
    keys: list[KeySpec]
    stream_share: float = 0.4
    disconnect_share: float = 0.05
    results: list[Result] = field(default_factory=list)
    step: int = 0
    seed: int = 1

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)  # noqa: S311 - traffic mix, not security
        self._weights = [k.weight for k in self.keys]
        self._turn = itertools.count()
        self.sessions: list[aiohttp.ClientSession] = []

    async def open(self, connections: int) -> None:
        timeout = aiohttp.ClientTimeout(total=120, sock_connect=10)
        for _ in self.gateway_urls:
            connector = aiohttp.TCPConnector(limit=connections, force_close=False)
            self.sessions.append(aiohttp.ClientSession(connector=connector, timeout=timeout))

    async def close(self) -> None:
        for session in self.sessions:
            await session.close()

    def pick(self) -> tuple[KeySpec, str, bool, bool]:
        key = self._rng.choices(self.keys, self._weights)[0]
        protocol = self._rng.choice(PROTOCOLS)
        stream = self._rng.random() < self.stream_share
        disconnect = stream and self._rng.random() < self.disconnect_share
        return key, protocol, stream, disconnect

    async def call(
        self, key: KeySpec, protocol: str, stream: bool, disconnect: bool = False, gateway=None
    ) -> Result:
        gw = next(self._turn) % len(self.gateway_urls) if gateway is None else gateway
        path, headers, body = request_for(key, protocol, stream, self._rng.choice(QUESTIONS))
        result = Result(None, key.label, key.org, protocol, stream, 0, time.time(), 0.0)
        result.step, result.gateway = self.step, gw
        t0 = time.perf_counter()
        try:
            async with self.sessions[gw].post(
                self.gateway_urls[gw] + path, json=body, headers=headers
            ) as resp:
                result.request_id = resp.headers.get("x-request-id")
                result.status = resp.status
                if stream and resp.status == 200:
                    async for line in resp.content:
                        if line.startswith(b"data:"):
                            if not result.started:
                                result.started = True
                                result.ttft = time.perf_counter() - t0
                            if disconnect:
                                result.disconnected = True
                                resp.close()  # hang up: the gateway must cancel and bill
                                break
                else:
                    raw = await resp.read()
                    if resp.status >= 400:
                        result.code = _error_code(raw)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            result.code = f"transport:{type(exc).__name__}"
        result.t1 = result.t0 + (time.perf_counter() - t0)
        self.results.append(result)
        return result

    async def client(self, index: int, active: list[int], stop: asyncio.Event) -> None:
        """One virtual client: runs while ``index < active[0]`` and not stopped."""
        while not stop.is_set() and index < active[0]:
            key, protocol, stream, disconnect = self.pick()
            await self.call(key, protocol, stream, disconnect)

    async def burst(self, key: KeySpec, n: int) -> list[Result]:
        """``n`` calls at once (alternating gateways), plain, in the three protocols."""
        calls = [
            self.call(key, PROTOCOLS[i % 3], False, gateway=i % len(self.gateway_urls))
            for i in range(n)
        ]
        return list(await asyncio.gather(*calls))
