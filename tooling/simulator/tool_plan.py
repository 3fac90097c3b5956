"""What the tools of a chat request make of its answer (``ToolPlan``), once
the request is checked (``protocol``): with ``tools`` and a ``tool_choice``
other than ``"none"``, the answer is one call of a function when the choice
is ``"required"`` or names it, or is ``"auto"`` (the default) and the last
message is the user's — one call of each when that message names several
functions by their exact names ("Use Glob and Grep") and
``parallel_tool_calls`` is not false; after tool results the answer is text
that reports them. A user message with ``sim-tool:`` / ``sim-say:`` lines
scripts the answers instead (``_script``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from console.kernel.tokens import content_text

from .text import SCRIPTED_ARGUMENTS


@dataclass
class ToolPlan:
    """What the tools of a chat request make of its answer."""

    call: dict | None = None  # the function definition to call (``name``, ``parameters``)
    # Parallel calls after ``call``: the further functions the user's message names
    # (the Anthropic and OpenAI chat front-ends make them; Gemini's answers ``call`` alone).
    also: list[dict] = field(default_factory=list)
    words: str = ""  # the last user message: where string arguments come from
    results: list[tuple[str | None, str]] = field(default_factory=list)  # (function, result)
    say: str | None = None  # a scripted answer's exact text (``sim-say:``)


_STOP_TEXT = (
    "the and for with what who how when where which that this these from into are was "
    "were can could would should will you your our get set please"
)
_STOP_WORDS = frozenset(_STOP_TEXT.split())  # not evidence of which function is meant


def _words(text: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", text.lower()) if len(w) > 2 and w not in _STOP_WORDS}


def _best_function(functions: list[dict], text: str) -> dict:
    """The function whose name and description share the most words with ``text``
    (the first one on a tie)."""
    asked = _words(text)

    def score(fn: dict) -> int:
        own = _words(fn["name"].replace("_", " ") + " " + (fn.get("description") or ""))
        return len(asked & own)

    return max(functions, key=score)  # max keeps the first of equal scores


def _tool_results(messages: list[dict]) -> list[tuple[str | None, str]]:
    """The trailing tool messages' (function name, result text)."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            names[call["id"]] = call["function"]["name"]
    results = []
    for message in reversed(messages):
        if message["role"] != "tool":
            break
        name = names.get(message.get("tool_call_id")) or message.get("name")
        results.append((name, content_text(message.get("content"))))
    return results[::-1]


def _named(functions: list[dict], text: str) -> list[dict]:
    """The functions ``text`` names (their exact names as whole words), in the
    order it first names them."""
    found = []
    for fn in functions:
        match = re.search(rf"(?<![\w-]){re.escape(fn['name'])}(?![\w-])", text)
        if match is not None:
            found.append((match.start(), fn))
    return [fn for _, fn in sorted(found, key=lambda item: item[0])]


_SCRIPT_LINE = re.compile(
    r"^[ \t]*sim-(tool|say):[ \t]*(?:([A-Za-z0-9_.:-]+)[ \t]+)?(\{.*\}|\".*\")[ \t]*$", re.M
)


def _script(messages: list[dict], functions: list[dict], calls: bool) -> ToolPlan | None:
    """The plan of a scripted task (module docstring), or None when no user
    message holds ``sim-tool:`` or ``sim-say:`` lines. The step is the number
    of answers with tool calls since the user message that holds the script;
    ``calls`` False (``tool_choice`` "none") makes no call."""
    for at in range(len(messages) - 1, -1, -1):
        if messages[at]["role"] == "user":
            found = _SCRIPT_LINE.findall(content_text(messages[at].get("content")))
            if found:
                break
    else:
        return None
    offered = {fn["name"]: fn for fn in functions}
    steps, said = [], None
    for kind, name, value in found:
        try:
            parsed = json.loads(value)
        except ValueError:
            continue
        if kind == "say" and isinstance(parsed, str):
            said = parsed
        elif kind == "tool" and name in offered and isinstance(parsed, dict):
            steps.append({**offered[name], SCRIPTED_ARGUMENTS: parsed})
    done = sum(1 for m in messages[at + 1 :] if m["role"] == "assistant" and m.get("tool_calls"))
    plan = ToolPlan(words="", results=_tool_results(messages), say=said)
    if calls and done < len(steps):
        plan.call = steps[done]
    return plan


def plan_answer(
    choice: str | dict, parallel: bool, messages: list[dict], functions: list[dict]
) -> ToolPlan:
    """The plan for a checked ``tool_choice`` (``"none"``, ``"auto"``,
    ``"required"`` or the named function's definition), whether parallel calls
    are allowed, the messages and the offered functions."""
    if not isinstance(choice, dict):
        scripted = _script(messages, functions, calls=choice != "none")
        if scripted is not None:
            return scripted
    user_text = next(
        (content_text(m.get("content")) for m in reversed(messages) if m["role"] == "user"), ""
    )
    plan = ToolPlan(words=user_text, results=_tool_results(messages))
    if isinstance(choice, dict):
        plan.call = choice
    elif choice == "required" or (choice == "auto" and messages[-1]["role"] == "user"):
        named = _named(functions, user_text) if parallel else []
        if len(named) > 1:  # "Use Glob and Grep": one call of each, in parallel
            plan.call, plan.also = named[0], named[1:]
        else:
            plan.call = _best_function(functions, user_text)
    return plan
