"""The ASGI callables' types, as the gateway's stages take them (aliases:
nothing at run time)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

Message = dict[str, Any]
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
