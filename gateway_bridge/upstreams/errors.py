"""The upstream client's errors: what failed in an exchange with a node."""

from __future__ import annotations

REASONS = frozenset(
    {
        "connect",
        "connect_timeout",
        "first_byte_timeout",
        "idle_timeout",
        "total_timeout",
        "protocol",
        "closed",
    }
)


class UpstreamError(Exception):
    """A failed exchange with a node; ``reason`` says what failed (see ``REASONS``)."""

    def __init__(self, reason: str, message: str = ""):
        assert reason in REASONS, reason
        super().__init__(f"{reason}: {message}" if message else reason)
        self.reason = reason


class _Stale(Exception):
    """The connection closed before any response byte came (retryable if it was reused)."""


def _public(error: BaseException) -> BaseException:
    if isinstance(error, _Stale):
        return UpstreamError("closed", "the node closed the connection before answering")
    return error
