"""Anthropic's extended thinking and OpenAI's ``reasoning_effort``: the one
table between a thinking budget and an effort, used both ways.

    reasoning_effort   thinking.budget_tokens      budget_tokens   reasoning_effort
    none               (thinking left out)          1024 .. 4095    low
    minimal            1024                         4096 .. 16383   medium
    low                2048                         16384 ..        high
    medium             8192
    high               24576
    xhigh              32768

* An effort becomes at most ``max_tokens - 1`` (Anthropic counts thinking in
  ``max_tokens`` and wants the budget below it, as OpenAI counts reasoning in
  ``max_completion_tokens``); when that leaves less than Anthropic's minimum
  of 1024 the call is refused (400 naming ``reasoning_effort``), never sent
  without thinking.
* A budget becomes ``low``, ``medium`` or ``high`` only: the values every
  OpenAI-compatible server takes (vLLM refuses the others). Each effort's
  budget maps back to the same effort (``minimal`` and ``xhigh`` to their
  neighbours).
* Adaptive thinking (the model decides how much) carries
  ``output_config.effort`` when the client gave one (``xhigh`` and ``max``
  become ``high``); without it, and with thinking disabled, the pivot has no
  ``reasoning_effort`` (the node's default).
"""

from __future__ import annotations

from typing import Any

MIN_BUDGET = 1024

EFFORT_BUDGETS = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 24576,
    "xhigh": 32768,
}
#: The efforts a pivot may carry: ``none`` turns thinking off.
EFFORTS = ("none", *EFFORT_BUDGETS)

# Budgets from these many tokens up mean the effort (highest first).
_EFFORT_FLOORS = ((16384, "high"), (4096, "medium"), (0, "low"))
_ADAPTIVE = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def effort_of_budget(budget: int) -> str:
    """The pivot's ``reasoning_effort`` for a ``thinking.budget_tokens``."""
    for floor, effort in _EFFORT_FLOORS:
        if budget >= floor:
            return effort
    return "low"


def effort_of_thinking(thinking: dict[str, Any] | None, output_effort: object) -> str | None:
    """The pivot's ``reasoning_effort`` for a (validated) ``thinking`` request
    field and ``output_config.effort``; None when there is none."""
    if not isinstance(thinking, dict):
        return None
    kind = thinking.get("type")
    if kind == "enabled":
        return effort_of_budget(thinking["budget_tokens"])
    if kind in ("adaptive", "between_tools") and isinstance(output_effort, str):
        return _ADAPTIVE.get(output_effort)
    return None


def budget_of_effort(effort: str, max_tokens: int) -> int | None:
    """The ``thinking.budget_tokens`` for an effort under ``max_tokens``: None
    for ``none``; ValueError when ``max_tokens`` leaves no room for the minimum."""
    if effort == "none":
        return None
    budget = min(EFFORT_BUDGETS[effort], max_tokens - 1)
    if budget < MIN_BUDGET:
        raise ValueError(budget)
    return budget
