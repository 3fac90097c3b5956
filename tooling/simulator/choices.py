"""The choices of an OpenAI chat or completion: what each one is (a tool call,
JSON of a ``response_format``, or text) and its message and first streamed
delta in OpenAI's shape."""

from __future__ import annotations

from .text import Generation, generate, generate_json, generate_tool_call, results_lead


def generation_of(req, max_tokens: int, index: int) -> Generation:
    """One choice: a tool call (or parallel calls) when the request's tools call for
    one, else text (which reports the tool results the conversation ends with, if any)."""
    plan = req.tools
    if plan.call is not None:
        answer = generate_tool_call(
            req.prompt_ids,
            plan.call,
            words=plan.words,
            max_tokens=max_tokens,
            seed=req.seed,
            index=index,
        )
        for k, function in enumerate(plan.also, start=1):  # parallel calls, in turn
            left = max_tokens - len(answer.deltas)
            if answer.finish_reason == "length" or left <= 0:
                answer.finish_reason = "length"
                break
            more = generate_tool_call(
                req.prompt_ids,
                function,
                words=plan.words,
                max_tokens=left,
                seed=req.seed,
                index=index + k * req.n,
            )
            assert more.tool_call is not None  # generate_tool_call always sets it
            answer.more_calls.append((more.tool_call, len(answer.deltas)))
            answer.deltas += more.deltas
            answer.completion_tokens += more.completion_tokens
            answer.finish_reason = more.finish_reason
        return answer
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
        said=plan.say,
    )


def message_of(g: Generation) -> dict:
    if g.tool_call is None:
        return {"role": "assistant", "content": g.text, "tool_calls": []}
    calls = [
        {"id": call["id"], "type": "function",
         "function": {"name": call["name"], "arguments": arguments}}
        for call, arguments in g.calls()
    ]  # fmt: skip
    return {"role": "assistant", "content": None, "tool_calls": calls}


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
