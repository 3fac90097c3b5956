"""What an OpenAI request asks of its output's form: JSON (``response_format``)
and log probabilities (``logprobs`` / ``top_logprobs``), checked as OpenAI
checks them and honoured, never silently ignored.

* ``response_format``: ``{"type": "text"}`` (the default); ``json_object`` → the
  content is a JSON object (``{"answer": <the text>}``); ``json_schema`` → a
  value of ``json_schema.schema`` (objects with their required properties,
  strings, numbers, integers, booleans, arrays, enums, nested; see
  ``text.generate_json``). Valid JSON unless ``max_tokens`` cuts it.
* Chat ``logprobs: true`` (+ ``top_logprobs`` 0..20): each content token's
  ``{"token", "logprob", "bytes", "top_logprobs"}`` under ``logprobs.content``,
  plain and per streamed chunk; the sampled token is the most likely of its
  top list, whose probabilities sum to at most 1. Completions' ``logprobs``
  (0..5) in the legacy shape (``tokens``, ``token_logprobs``,
  ``top_logprobs``, ``text_offset``). Gemini's ``responseLogprobs`` (+
  ``logprobs``) in its ``logprobsResult`` shape. Values are deterministic (drawn from the
  prompt's seed), not a model's; a tool call's arguments have none (null).
"""

from __future__ import annotations

import itertools
import math
import random

from .errors import invalid
from .text import WORDS, prompt_seed

MAX_TOP_CHAT = 20
MAX_TOP_COMPLETIONS = 5
_FORMATS = ("text", "json_object", "json_schema")


def response_format(body: dict) -> tuple[bool, dict | None]:
    """(JSON output?, the schema it follows: None for ``json_object``)."""
    fmt = body.get("response_format")
    if fmt is None:
        return False, None
    if not isinstance(fmt, dict) or fmt.get("type") not in _FORMATS:
        raise invalid(
            "response_format.type",
            "'response_format.type' must be one of 'text', 'json_object', 'json_schema'.",
        )
    if fmt["type"] == "text":
        return False, None
    if fmt["type"] == "json_object":
        return True, None
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict):
        raise invalid("response_format.json_schema", "'response_format.json_schema' is required.")
    if not isinstance(spec.get("name"), str) or not spec["name"]:
        raise invalid(
            "response_format.json_schema.name", "'response_format.json_schema.name' is required."
        )
    schema = spec.get("schema")
    if schema is not None and not isinstance(schema, dict):
        raise invalid(
            "response_format.json_schema.schema",
            "'response_format.json_schema.schema' must be a JSON schema object.",
        )
    return True, schema


def chat_logprobs(body: dict) -> int | None:
    """How many top alternatives a chat's tokens carry (None: no logprobs)."""
    wanted = body.get("logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise invalid("logprobs", "'logprobs' must be a boolean.")
    top = body.get("top_logprobs")
    if top is not None:
        if not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= MAX_TOP_CHAT:
            raise invalid(
                "top_logprobs", f"'top_logprobs' must be an integer between 0 and {MAX_TOP_CHAT}."
            )
        if not wanted:
            raise invalid("top_logprobs", "'top_logprobs' needs 'logprobs' set to true.")
    return (top or 0) if wanted else None


def completion_logprobs(body: dict) -> int | None:
    """Completions' ``logprobs``: how many top alternatives (None: none asked)."""
    top = body.get("logprobs")
    if top is None:
        return None
    if not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= MAX_TOP_COMPLETIONS:
        raise invalid(
            "logprobs", f"'logprobs' must be an integer between 0 and {MAX_TOP_COMPLETIONS}."
        )
    return top


def _token(text: str, logprob: float) -> dict:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


def token_logprobs(tokens: list[str], top: int, prompt_ids: list[int], index: int) -> list[dict]:
    """Chat ``logprobs.content`` entries of ``tokens``: the sampled token first in its
    top list (``top`` long), each alternative less likely than the one before."""
    rng = random.Random(prompt_seed(prompt_ids, None, index) ^ 0x10B5)  # noqa: S311
    entries = []
    for text in tokens:
        p = 0.35 + 0.64 * rng.random()
        chosen = round(math.log(p), 6)
        entry = _token(text, chosen)
        alternatives = [_token(text, chosen)]
        lead = " " if text.startswith(" ") else ""
        rest = 1.0 - p  # shared by the alternatives, halving each time: the sum stays < 1
        for word in rng.sample(WORDS, top) if top > 1 else ():
            if len(alternatives) == top:
                break
            if lead + word != text:
                rest /= 2
                alternatives.append(_token(lead + word, round(math.log(rest), 6)))
        entry["top_logprobs"] = alternatives[:top]
        entries.append(entry)
    return entries


class Logprobs:
    """The ``logprobs`` objects of a request's choices (``top``: None when none
    were asked for): ``of(index, start, end)`` covers tokens ``start:end`` of
    choice ``index``, in chat's or completions' shape."""

    def __init__(self, top: int | None, prompt_ids: list[int], gens, *, chat: bool):
        self.chat = chat
        # where each token's text starts in its choice's text (completions' text_offset)
        self.starts = (
            [[0, *itertools.accumulate(len(t) for t in g.deltas)] for g in gens]
            if top is not None and not chat
            else []
        )
        self.entries = (
            [
                None if g.tool_call else token_logprobs(g.deltas, top, prompt_ids, i)
                for i, g in enumerate(gens)
            ]
            if top is not None
            else None
        )

    def of(self, index: int, start: int, end: int) -> dict | None:
        rows = None if self.entries is None else self.entries[index]
        if rows is None:
            return None
        entries = rows[start:end]
        if self.chat:
            return {"content": entries, "refusal": None}
        return completion_shape(entries, self.starts[index][start])


def completion_shape(entries: list[dict], offset: int) -> dict:
    """Completions' legacy ``logprobs`` object of ``entries`` whose text starts at
    ``offset`` in the choice's text."""
    offsets = []
    for entry in entries:
        offsets.append(offset)
        offset += len(entry["token"])
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
        "text_offset": offsets,
    }


def gemini_logprobs(entries: list[dict]) -> dict:
    """Gemini's ``logprobsResult`` and ``avgLogprobs`` of a candidate's tokens."""

    def candidate(entry: dict) -> dict:
        return {"token": entry["token"], "logProbability": entry["logprob"]}

    result = {
        "topCandidates": [
            {"candidates": [candidate(t) for t in e["top_logprobs"]]} for e in entries
        ],
        "chosenCandidates": [candidate(e) for e in entries],
    }
    out: dict = {"logprobsResult": result}
    if entries:
        out["avgLogprobs"] = sum(e["logprob"] for e in entries) / len(entries)
    return out
