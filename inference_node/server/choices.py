"""The choices of an OpenAI chat or completion: what each one is (a tool call,
JSON of a ``response_format``, or text) and its message and first streamed
delta in OpenAI's shape."""

from __future__ import annotations

from .text import Generation, generate, generate_json, generate_tool_call, results_lead


def generation_of(req, max_tokens: int, index: int) -> Generation:
    """One choice: a tool call when the request's tools call for one, else text (which
    reports the tool results the conversation ends with, if any)."""
    plan = req.tools
    if plan.call is not None:
        return generate_tool_call(
            req.prompt_ids,
            plan.call,
            words=plan.words,
            max_tokens=max_tokens,
            seed=req.seed,
            index=index,
        )
    if req.json_output:
        return generate_json(
            req.prompt_ids,
            req.json_schema,
            words=plan.words,
            max_tokens=max_tokens,
            seed=req.seed,
            index=index,
        )
    return generate(
        req.prompt_ids,
        max_tokens=max_tokens,
        seed=req.seed,
        index=index,
        stop=req.stop,
        ignore_eos=req.ignore_eos,
        lead=results_lead(plan.results) if plan.results else "",
    )


def message_of(g: Generation) -> dict:
    if g.tool_call is None:
        return {"role": "assistant", "content": g.text, "tool_calls": []}
    call = {
        "id": g.tool_call["id"],
        "type": "function",
        "function": {"name": g.tool_call["name"], "arguments": g.text},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def first_delta(g: Generation) -> dict:
    """The role delta; for a tool call (as OpenAI streams one) also the call's id, type
    and name, with the arguments to follow in the next deltas."""
    if g.tool_call is None:
        return {"role": "assistant", "content": ""}
    call = {
        "index": 0,
        "id": g.tool_call["id"],
        "type": "function",
        "function": {"name": g.tool_call["name"], "arguments": ""},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}
