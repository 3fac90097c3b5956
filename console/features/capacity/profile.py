"""The prompt profile of a load test as request bodies.

Every body is an OpenAI chat request for the test's model asking for exactly
``output_tokens`` tokens (``max_tokens``), streamed with the usage chunk at
the end (so the generator reads time to first token and output tokens). Its
prompt is about ``input_tokens`` tokens under the shared token rule
(``console.kernel.tokens``; the chat template adds a few): the first
``prefix_share`` percent of them are the same in every body (what a prompt
cache can reuse), the rest differ from body to body.
"""

from __future__ import annotations

import hashlib

BODIES = 64  # distinct bodies, sent round-robin
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _words(seed: str, count: int) -> str:
    """``count`` words of four letters, each one token (a leading space attaches)."""
    out: list[str] = []
    block = b""
    n = 0
    while len(out) < count:
        if len(block) < 4:
            block = hashlib.blake2b(f"{seed}:{n}".encode(), digest_size=64).digest()
            n += 1
        out.append(" " + "".join(_LETTERS[b % 26] for b in block[:4]))
        block = block[4:]
    return "".join(out)


def bodies(model: str, input_tokens: int, output_tokens: int, prefix_share: int) -> list[dict]:
    shared = round(input_tokens * prefix_share / 100)
    prefix = _words("shared", shared)
    return [
        {
            "model": model,
            "messages": [
                {"role": "user", "content": prefix + _words(f"body-{i}", input_tokens - shared)}
            ],
            "max_tokens": output_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        for i in range(BODIES)
    ]
