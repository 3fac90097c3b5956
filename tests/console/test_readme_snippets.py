"""Every example in README.md and docs/*.md runs as printed against a started
``manage.py up``.

The README keeps the quickstart and docs/ the rest (``tests/docs_snippets.py``
reads the blocks of both). Each fenced block is either run here or marked as
not meant to run: a data or config language (``text``, ``json``, ``toml``,
...) or a ``no-run`` word after the language (```` ```sh no-run ````, for install
commands and placeholders). A ``python`` block runs as a script; a ``sh``
block must be one curl command, run by bash. Any other block fails
``test_every_readme_block_is_run_or_marked``, so an example nobody runs
cannot be added.

The examples read the key from ``GATEWAY_API_KEY``, which the quickstart
exports; the only text substituted is the base URL ``http://127.0.0.1:8000``,
for the port this module's ``up`` listens on. One ``up`` serves the module."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.console.up_process import start, up_env_for
from tests.docs_snippets import Fenced, doc_blocks, fenced_blocks

README_BASE_URL = "http://127.0.0.1:8000"
KEY_VARIABLE = "GATEWAY_API_KEY"
NOT_RUN_LANGUAGES = frozenset({"text", "json", "toml", "yaml", "ini"})
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell"})
NO_RUN = "no-run"
SNIPPET_TIMEOUT = 60


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    words: tuple[str, ...]  # the rest of the info string
    code: str
    source: str = "README.md"  # the file: "README.md", "docs/clients.md"

    @classmethod
    def of(cls, fenced: Fenced) -> Block:
        return cls(fenced.line, fenced.language, fenced.words, fenced.code, fenced.source)

    @property
    def id(self) -> str:
        return f"{self.source}:{self.line}:{self.language or 'bare'}"

    def verdict(self) -> str:
        """How the block is run (``python``, ``curl``), ``skip`` when it is not
        meant to run, or else why it can be neither."""
        if NO_RUN in self.words or self.language in NOT_RUN_LANGUAGES:
            return "skip"
        if self.language == "python":
            return "python"
        if self.language in SHELL_LANGUAGES:
            command = self.code.replace("\\\n", " ").strip()
            if command.startswith("curl ") and "\n" not in command:
                return "curl"
            return (
                "a shell block that is not one curl command: make it one, or mark it "
                f"'{self.language} {NO_RUN}' if it is not meant to run"
            )
        if not self.language:
            return "a block with no language: give it one ('text' for output)"
        return f"an unknown language '{self.language}': add a runner here, or mark it {NO_RUN}"


def readme_blocks(text: str, source: str = "README.md") -> list[Block]:
    return [Block.of(fenced) for fenced in fenced_blocks(text, source)]


# README.md's blocks, then those of docs/*.md: every example, wherever it lives.
BLOCKS = [Block.of(fenced) for fenced in doc_blocks()]
RUNNABLE = [b for b in BLOCKS if b.verdict() in ("python", "curl")]


def test_every_readme_block_is_run_or_marked():
    unrunnable = [
        f"{b.id}: {b.verdict()}" for b in BLOCKS if b.verdict() not in ("python", "curl", "skip")
    ]
    assert not unrunnable, "README/docs blocks this test cannot run:\n" + "\n".join(unrunnable)
    # The quickstart's examples are all here (README.md and docs/clients.md): each
    # SDK and curl.
    code = "\n".join(b.code for b in RUNNABLE)
    for needle in ("from openai import", "from anthropic import", "from google import genai"):
        assert needle in code
    assert sum(b.verdict() == "curl" for b in RUNNABLE) >= 3
    assert any(b.source == "README.md" and b.verdict() == "curl" for b in RUNNABLE), (
        "the README's quickstart lost its curl example"
    )
    for block in RUNNABLE:
        assert README_BASE_URL in block.code, f"{block.id} does not call the gateway"


@pytest.fixture(scope="module")
def started_up(tmp_path_factory):
    env = up_env_for(tmp_path_factory.mktemp("readme") / "var")
    up, info = start(env)
    try:
        yield info
    finally:
        up.stop()


def answer_text(payload) -> str:
    """The generated text of an OpenAI, Anthropic or Gemini answer ("" if none)."""
    if not isinstance(payload, dict):
        return ""
    if choices := payload.get("choices"):
        return (choices[0].get("message") or {}).get("content") or ""
    if isinstance(payload.get("content"), list):
        return "".join(part.get("text", "") for part in payload["content"])
    if candidates := payload.get("candidates"):
        parts = (candidates[0].get("content") or {}).get("parts") or []
        return "".join(part.get("text", "") for part in parts)
    return ""


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.id)
def test_readme_example_runs_as_printed(block, started_up, tmp_path):
    base = started_up["url"].rstrip("/")
    code = block.code.replace(README_BASE_URL, base)
    env = {**os.environ, KEY_VARIABLE: started_up["key"]}
    argv = [sys.executable, "-c", code] if block.verdict() == "python" else ["bash", "-c", code]
    done = subprocess.run(
        argv,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SNIPPET_TIMEOUT,
    )
    shown = f"{block.id} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.returncode == 0, shown
    out = done.stdout.strip()
    assert out, shown
    if block.verdict() == "curl":
        payload = json.loads(out)
        assert "error" not in payload and payload.get("type") != "error", shown
        assert answer_text(payload).strip(), shown
    else:
        first = out.splitlines()[0].strip()
        assert first and first != "None", shown
        assert "Traceback" not in done.stderr, shown


def test_readme_examples_use_the_exported_key():
    """No example carries a key of its own: each reads the one the quickstart exports."""
    for block in RUNNABLE:
        assert KEY_VARIABLE in block.code, f"{block.id} does not read ${KEY_VARIABLE}"
        assert not re.search(r"sk-[a-z2-9]{10}_", block.code), block.id


def test_blocks_are_read_as_a_reader_sees_them(tmp_path):
    """The extractor itself: languages, the no-run word, and the verdicts."""
    text = (
        "```python\nprint(1)\n```\n"
        "```sh no-run\npip install -e .\n```\n"
        "```sh\ncurl -s http://127.0.0.1:8000/v1/models \\\n  -H 'x: y'\n```\n"
        "```sh\npip install x\n```\n"
        "```\nConsole: ...\n```\n"
        "```toml\nmodel = 1\n```\n"
    )
    blocks = readme_blocks(text)
    assert [(b.line, b.language, b.words) for b in blocks] == [
        (1, "python", ()),
        (4, "sh", ("no-run",)),
        (7, "sh", ()),
        (11, "sh", ()),
        (14, "", ()),
        (17, "toml", ()),
    ]
    verdicts = [b.verdict() for b in blocks]
    assert verdicts[:3] == ["python", "skip", "curl"]
    assert "not one curl command" in verdicts[3]
    assert "no language" in verdicts[4]
    assert verdicts[5] == "skip"
