"""Which real services a test may use, and the rule for when they are missing:
skip with a reason locally, fail under CI (``CI=true``), where they must run."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
CHROMIUM = "/usr/bin/chromium"


def require(condition: bool, reason: str) -> None:
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required under CI: {reason}")
    pytest.skip(reason)


def require_chromium() -> None:
    require(os.path.exists(CHROMIUM), f"{CHROMIUM} is not installed (apt-get install chromium)")
