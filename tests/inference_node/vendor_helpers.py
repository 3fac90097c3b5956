"""A fake vendor API on 127.0.0.1 (an aiohttp web app in a thread of its
own): it lists models in the shape of the vendor it plays (OpenAI-style,
Anthropic or Gemini), checks the API key in that vendor's auth header, and
records every request so a test can see what the prober sent."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

from aiohttp import web

MODELS = {
    "openai": {
        "object": "list",
        "data": [
            {"id": "gpt-4.1", "object": "model", "owned_by": "openai"},
            {"id": "deepseek-chat", "object": "model", "context_length": 128000},
        ],
    },
    "anthropic": {
        "data": [
            {"id": "claude-sonnet-4-20250514", "type": "model", "max_input_tokens": 200000},
            {"id": "claude-3-5-haiku-20241022", "type": "model"},
        ],
        "has_more": False,
        "first_id": "claude-sonnet-4-20250514",
        "last_id": "claude-3-5-haiku-20241022",
    },
    "gemini": {
        "models": [
            {"name": "models/gemini-2.5-flash", "inputTokenLimit": 1048576},
            {"name": "models/gemini-2.5-pro", "inputTokenLimit": 1048576},
        ]
    },
}


@dataclass
class Seen:
    path: str
    query: dict
    headers: dict = field(repr=False)


class FakeVendor:
    def __init__(self, style: str, key: str, *, models_path: str = "/v1/models"):
        self.style = style  # "openai", "anthropic" or "gemini"
        self.key = key
        self.models_path = models_path
        self.status: int | None = None  # force an answer status
        self.seen: list[Seen] = []
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        started.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _authorized(self, request: web.Request) -> bool:
        if self.style == "anthropic":
            return (
                request.headers.get("x-api-key") == self.key
                and request.headers.get("anthropic-version") == "2023-06-01"
            )
        if self.style == "gemini":
            return request.headers.get("x-goog-api-key") == self.key
        return request.headers.get("Authorization") == f"Bearer {self.key}"

    async def _handle(self, request: web.Request) -> web.Response:
        self.seen.append(Seen(request.path, dict(request.query), dict(request.headers)))
        if self.status is not None:
            return web.json_response({"error": {"message": "forced"}}, status=self.status)
        if request.path != self.models_path:
            return web.json_response({"error": {"message": "no such path"}}, status=404)
        if not self._authorized(request):
            return web.json_response({"error": {"message": "invalid api key"}}, status=401)
        return web.json_response(MODELS[self.style])

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        started.set()
        self._loop.run_forever()

    def stop(self) -> None:
        async def shutdown():
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
