"""The simulator's tokenizer rule, its stable ids and the chat template."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from console.kernel.tokens import (
    START_ID,
    chat_prompt_tokens,
    count_tokens,
    pieces,
    tokenize,
)
from tooling.simulator.text import generate


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("cat", 1),
        ("word", 1),
        ("words", 2),  # a run of 5 letters is ceil(5/4) = 2 tokens
        ("internationalization", 5),
        ("hello world", 4),  # "hell" "o" " worl" "d": whitespace joins the next token
        ("a, b!", 4),  # punctuation is one token each
        ("12345678", 2),
        ("snake_case", 4),  # "_" is not part of a run
        ("你好世界", 4),  # CJK: one token per character
        ("こんにちは", 5),  # Hiragana
        ("カタカナ", 4),  # Katakana
        ("안녕하세요", 5),  # Hangul
        ("tail ", 2),  # trailing whitespace is a token of its own
        ("a   b", 2),  # a whitespace run attaches to the next token as one
        ("mixed日本text", 5),  # "mixe" "d" "日" "本" "text"
    ],
)
def test_count_tokens_follows_the_documented_rule(text, expected):
    assert count_tokens(text) == expected
    assert len(tokenize(text)) == expected


def test_pieces_join_back_to_the_text():
    text = "Héllo,  wörld! 東京 is big_ish\n\tand 2024-01-01 "
    assert "".join(pieces(text)) == text
    assert len(pieces(text)) == count_tokens(text)


def test_ids_are_stable_across_processes():
    text = "The same prompt gives the same ids"
    code = (
        f"import json; from console.kernel.tokens import tokenize; print(json.dumps(tokenize({text!r})))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert json.loads(out.stdout) == tokenize(text)
    assert tokenize("cat") != tokenize("dog")
    assert tokenize(" cat") != tokenize("cat")  # leading whitespace is part of the piece


def test_chat_template_adds_three_markers_per_message_and_a_generation_prompt():
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello there"},
    ]
    ids = chat_prompt_tokens(messages)
    content = count_tokens("You are terse.") + count_tokens("Hello there")
    roles = count_tokens("system") + count_tokens("user") + count_tokens("assistant")
    assert len(ids) == content + roles + 3 * 2 + 2
    assert ids.count(START_ID) == 3
    assert chat_prompt_tokens(messages) == ids


def test_chat_template_reads_text_parts_and_names():
    parts = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    with_parts = chat_prompt_tokens([{"role": "user", "content": parts}])
    as_text = chat_prompt_tokens([{"role": "user", "content": "one\ntwo"}])
    assert with_parts == as_text
    named = chat_prompt_tokens([{"role": "user", "name": "ann", "content": "hi"}])
    assert len(named) == len(chat_prompt_tokens([{"role": "user", "content": "hi"}])) + 1


def test_generated_text_is_deterministic_and_counts_with_the_tokenizer():
    prompt = tokenize("Tell me a story")
    first = generate(prompt, max_tokens=50)
    assert first.text == generate(prompt, max_tokens=50).text
    assert first.completion_tokens == count_tokens(first.text) == 50
    assert first.finish_reason == "length"
    assert generate(prompt, max_tokens=50, seed=7).text != first.text
    assert generate(tokenize("Another prompt"), max_tokens=50).text != first.text
    assert all(word.isascii() for word in first.text.split())


def test_generation_ends_naturally_or_at_a_stop_string():
    prompt = tokenize("Tell me a story")
    natural = generate(prompt, max_tokens=1000)
    assert natural.finish_reason == "stop"
    assert natural.completion_tokens < 1000
    assert generate(prompt, max_tokens=1000, ignore_eos=True).completion_tokens == 1000
    stopped = generate(prompt, max_tokens=1000, stop=(".",))
    assert stopped.finish_reason == "stop"
    assert "." not in stopped.text
    assert natural.text.startswith(stopped.text + ".")
