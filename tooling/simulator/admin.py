"""The simulator's admin endpoint: who may use it, and a client for it.

A node started with an admin secret (``--admin-secret``, or the environment
variable ``SIM_ADMIN_SECRET``, which keeps it off the process list) answers
``/admin/*`` only to a loopback peer that sends the secret in
``X-Sim-Admin-Secret``; the node token and the vendor API keys (what a gateway
holds) no longer open it. ``manage.py up`` hands its simulators a secret derived
from ``SECRET_KEY`` (``derive_admin_secret``), so ``manage.py simulator_faults``
can derive it again. Without an admin secret the node token opens the admin
endpoint, as before (the soak cluster and the tests use that).

``FaultControl`` is the client: read, set (optionally for a while) and clear a
running node's faults.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from .protocol import ApiError

ADMIN_SECRET_HEADER = "x-sim-admin-secret"  # noqa: S105 - a header name
ADMIN_SECRET_ENV = "SIM_ADMIN_SECRET"  # noqa: S105 - a variable name
EXPIRES_HEADER = "x-faults-expires-in"


def derive_admin_secret(secret_key: str) -> str:
    """The admin secret ``up`` gives its simulators (the same on every start, never printed)."""
    digest = hmac.new(secret_key.encode(), b"simulator-admin-secret", hashlib.sha256)
    return "sim-admin-" + digest.hexdigest()[:40]


def is_loopback_peer(peername: object) -> bool:
    """Whether a socket peer (``(host, port, ...)``, as ``getpeername`` gives it) is
    a loopback address (127.0.0.0/8, ::1, or IPv4-mapped loopback)."""
    if not isinstance(peername, tuple) or not peername or not isinstance(peername[0], str):
        return False
    host = peername[0].split("%", 1)[0]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def check_admin_secret(presented: str, secret: bytes, peername: object) -> None:
    """Raise the ApiError a request to the admin endpoint gets when it is not from a
    loopback peer or does not carry the admin secret."""
    if not is_loopback_peer(peername):
        raise ApiError(
            403,
            "The admin endpoint answers loopback clients only.",
            type="permission_error",
            code="admin_not_loopback",
        )
    if not hmac.compare_digest(presented.strip().encode(), secret):
        raise ApiError(
            401,
            f"Invalid or missing admin secret: send '{ADMIN_SECRET_HEADER}: <secret>'.",
            code="invalid_admin_secret",
        )


class FaultControlError(Exception):
    """The node could not be reached, or refused the change (the message says why)."""


@dataclass(frozen=True)
class FaultState:
    settings: dict
    expires_in: float | None  # seconds until a timed change runs out


class FaultControl:
    """The admin client of one node at ``base_url`` (loopback only)."""

    def __init__(self, base_url: str, secret: str, timeout: float = 5.0):
        parts = urlsplit(base_url)
        if not parts.hostname or not is_loopback_peer((parts.hostname, 0)):
            raise FaultControlError(f"{base_url} is not a loopback address")
        self._host = parts.hostname
        self._port = parts.port or 80
        self._secret = secret
        self._timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None) -> FaultState:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        headers = {ADMIN_SECRET_HEADER: self._secret, "content-type": "application/json"}
        try:
            conn.request(method, path, json.dumps(body) if body is not None else None, headers)
            response = conn.getresponse()
            data = response.read()
            expires = response.getheader(EXPIRES_HEADER)
        except OSError as error:
            raise FaultControlError(f"cannot reach the node: {error}") from None
        finally:
            conn.close()
        try:
            payload = json.loads(data or b"{}")
        except ValueError:
            payload = {}
        if response.status != 200:
            message = payload.get("error", {}).get("message") if payload else None
            raise FaultControlError(f"the node answered {response.status}: {message or data!r}")
        return FaultState(payload, float(expires) if expires else None)

    def get(self) -> FaultState:
        return self._call("GET", "/admin/faults")

    def set(self, changes: dict, for_seconds: float | None = None) -> FaultState:
        query = f"?{urlencode({'for_seconds': for_seconds})}" if for_seconds else ""
        return self._call("POST", f"/admin/faults{query}", changes)

    def clear(self) -> FaultState:
        return self._call("DELETE", "/admin/faults")
