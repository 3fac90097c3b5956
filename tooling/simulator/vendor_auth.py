"""Credentials of the vendor front-ends: which key a call presents, whether it is
accepted, and the per-key faults.

Where each vendor wants its key: OpenAI ``Authorization: Bearer <key>``;
Anthropic ``x-api-key`` (or ``Authorization: Bearer``, which the API also takes
and the 2.x SDK sends); Gemini ``x-goog-api-key`` or the ``key`` query
parameter. With ``--api-keys`` only those keys are accepted, each in its
vendor's place, and a refusal is the vendor's own answer:

* OpenAI: 401 ``invalid_api_key``, "Incorrect API key provided: sk-...abcd"
  (only the last four characters shown); no key: OpenAI's "You didn't provide
  an API key" 401.
* Anthropic: 401 ``authentication_error`` "invalid x-api-key" (no key:
  "x-api-key header is required").
* Gemini: 400 ``INVALID_ARGUMENT`` "API key not valid. Please pass a valid API
  key." with the ``API_KEY_INVALID`` ErrorInfo detail (no key: 403
  ``PERMISSION_DENIED``, "Method doesn't allow unregistered callers").

Without ``--api-keys`` a node started with ``--token`` takes that token (in
the same places, or as ``Authorization: Bearer`` on every front-end), with the
OpenAI refusal it always had; a node with neither is open.

Per-key faults (``FaultSettings.key_faults``) are checked first, whatever the
keys: a call presenting a listed key gets its status in its vendor's format. 401
is that vendor's bad-key answer (Gemini's is its 400 ``API_KEY_INVALID``); 403 a
permission error; 429 a rate limit with ``retry-after:
key_retry_after_seconds``; 500 a server error; 529 and 503 "overloaded"
(Anthropic keeps the status asked; OpenAI and Gemini, which have no 529,
answer 503).
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qs

from .config import NodeConfig
from .dialects import ANTHROPIC, GEMINI, OPENAI
from .http import Request
from .protocol import ApiError

GEMINI_KEY_INVALID = [
    {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID",
        "domain": "googleapis.com",
    }
]


def mask(key: str) -> str:
    """How OpenAI shows a refused key: its ``sk-`` prefix if any, then the last four."""
    head = "sk-" if key.startswith("sk-") else ""
    return f"{head}...{key[-4:]}" if len(key) > 4 else "..."


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def presented_key(request: Request, dialect: str) -> str | None:
    """The key a call presents where its vendor wants it (None: no key there)."""
    if dialect == ANTHROPIC:
        return request.headers.get("x-api-key") or _bearer(request)
    if dialect == GEMINI:
        key = request.headers.get("x-goog-api-key")
        if key:
            return key
        values = parse_qs(request.query).get("key")
        return values[0] if values else None
    return _bearer(request)


def _refusal(dialect: str, key: str | None) -> ApiError:
    """The vendor's answer to a missing or wrong key."""
    if dialect == ANTHROPIC:
        message = "invalid x-api-key" if key else "x-api-key header is required"
        return ApiError(401, message, type="authentication_error")
    if dialect == GEMINI:
        if key:
            message = "API key not valid. Please pass a valid API key."
            return ApiError(400, message, details=GEMINI_KEY_INVALID)
        return ApiError(
            403,
            "Method doesn't allow unregistered callers (callers without established identity). "
            "Please use API Key or other form of API consumer identity to call this API.",
            type="permission_error",
        )
    if key:
        return ApiError(
            401,
            f"Incorrect API key provided: {mask(key)}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            code="invalid_api_key",
        )
    return ApiError(
        401,
        "You didn't provide an API key. You need to provide your API key in an Authorization "
        "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
    )


def key_fault_error(dialect: str, status: int, key: str, retry_after: int) -> ApiError:
    """The injected answer for a key listed in ``key_faults``."""
    if status == 401:
        return _refusal(dialect, key)
    if status in (503, 529) and dialect != ANTHROPIC:
        status = 503
    if status == 429:
        messages = {
            OPENAI: "Rate limit reached for requests on this key (injected key fault).",
            ANTHROPIC: "This request would exceed the rate limit for your organization "
            "(injected key fault).",
            GEMINI: "Resource has been exhausted (e.g. check quota) (injected key fault).",
        }
        return ApiError(
            429,
            messages[dialect],
            type="rate_limit_error",
            code="rate_limit_exceeded",
            headers=(("retry-after", str(retry_after)),),
        )
    if status == 403:
        messages = {
            OPENAI: "You are not allowed to use this model with this key (injected key fault).",
            ANTHROPIC: "Your API key does not have permission to use the specified resource "
            "(injected key fault).",
            GEMINI: "Permission denied: this API key is not allowed to call the model "
            "(injected key fault).",
        }
        return ApiError(403, messages[dialect], type="permission_error", code="permission_denied")
    if status in (503, 529):
        messages = {
            OPENAI: "The engine is currently overloaded, please try again later "
            "(injected key fault).",
            ANTHROPIC: "Overloaded (injected key fault).",
            GEMINI: "The model is overloaded. Please try again later. (injected key fault)",
        }
        return ApiError(status, messages[dialect], type="server_error", code="overloaded")
    return ApiError(
        500,
        "Internal server error (injected key fault).",
        type="server_error",
        code="internal_error",
    )


class KeyGuard:
    """Checks the credentials of every vendor call (see the module docstring)."""

    def __init__(self, config: NodeConfig, faults):
        self._keys = [k.encode() for k in config.api_keys]
        self._token = config.token.encode()
        self._faults = faults  # the FaultInjector: its settings change at runtime

    @property
    def vendor_mode(self) -> bool:
        return bool(self._keys)

    def _accepted(self, key: str | None) -> bool:
        if key is None:
            return False
        presented = key.encode()
        allowed = self._keys or [self._token]
        # every candidate is compared, so timing does not say which one matched
        return sum(hmac.compare_digest(presented, k) for k in allowed) > 0

    def check(self, request: Request, dialect: str) -> None:
        """Raise the vendor's error unless the call may proceed."""
        key = presented_key(request, dialect)
        settings = self._faults.settings
        if key is not None and key in settings.key_faults:
            status = settings.key_faults[key]
            raise key_fault_error(dialect, status, key, settings.key_retry_after_seconds)
        if self._keys:
            if not self._accepted(key):
                raise _refusal(dialect, key)
            return
        if not self._token:
            return
        if self._accepted(key) or self._accepted(_bearer(request)):
            return
        if dialect == OPENAI:
            raise ApiError(
                401,
                "Invalid or missing node token: send 'Authorization: Bearer <token>'.",
                code="invalid_api_key",
            )
        raise _refusal(dialect, key)
