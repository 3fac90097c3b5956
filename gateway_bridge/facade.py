"""What other apps may use of ``gateway_bridge``: its one public face.

Other apps import from here and nowhere else in ``gateway_bridge`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it). Inside
``gateway_bridge`` modules import each other directly, never this module.
No app imports the gateway: only the console's ASGI entry point mounts it
(``Router``), and the gateway hears of changes it caches through its own
signal handlers (``notify``) and ``console.kernel.hooks``.
"""

from __future__ import annotations

from gateway_bridge.app import Router

__all__ = ["Router"]
