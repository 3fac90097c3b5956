"""The real coding agents, unmodified, through a started ``manage.py up``.

Claude Code, Codex, Gemini CLI and Qwen Code (npm) and aider (PyPI), each set up
exactly as docs/clients.md prints it (``tests/agents/harness.py``),
run headless on a scripted task in a scratch repository: read ``notes.txt``,
then change "hello" to "goodbye" in it with the agent's own tools. Each run
must exit 0 with the file edited, every call it made answered without a 4xx or
5xx and in the call log, and the call log's tokens equal to what the client
itself reports. The request bodies of the native runs are kept for the replay
test (``test_coding_agents_replay.py``).

The clients are installed by ``.ci/run`` (``npm install --prefix tests/agents``; aider
in ``.venv-aider``); without them these tests skip locally and fail under CI.
They start their own ``up`` (SQLite, the filesystem broker), so CI's embedded
pass leaves them out (``engine_independent``)."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from tests.agents.harness import (
    AIDER,
    NODE_BIN,
    Recorder,
    Run,
    Tokens,
    call_log,
    logged_tokens,
    run_agent,
    save_recordings,
)
from tests.console.up_process import start, up_env_for
from tests.services import require

pytestmark = [pytest.mark.agents, pytest.mark.engine_independent]

NOTES = "notes.txt"


def script(*steps: tuple[str, dict]) -> str:
    """The task, with the calls the simulated model makes (``sim-tool:`` lines)."""
    lines = ['Show notes.txt, then change "hello" to "goodbye" in it.']
    lines += [f"sim-tool: {name} {json.dumps(arguments)}" for name, arguments in steps]
    return "\n".join(lines)


def claude_code(model: str) -> tuple[list[str], dict]:
    task = script(
        ("Read", {"file_path": "{repo}/notes.txt"}),
        ("Edit", {"file_path": "{repo}/notes.txt", "old_string": "hello", "new_string": "goodbye"}),
    )
    argv = [str(NODE_BIN / "claude"), "-p", task, "--output-format", "json"]
    argv += ["--allowedTools", "Read,Edit"]
    return argv, {"ANTHROPIC_MODEL": model, "ANTHROPIC_DEFAULT_HAIKU_MODEL": model}


def codex(model: str) -> tuple[list[str], dict]:
    task = script(
        ("exec_command", {"cmd": "cat notes.txt"}),
        ("exec_command", {"cmd": "sed -i s/hello/goodbye/ notes.txt"}),
    )
    argv = [str(NODE_BIN / "codex"), "exec", "--json", "-m", model]
    return [*argv, "--sandbox", "workspace-write", task], {}


def gemini_cli(model: str) -> tuple[list[str], dict]:
    task = script(
        ("read_file", {"file_path": "notes.txt"}),
        ("replace", {"file_path": "notes.txt", "instruction": "Greet less.",
                     "old_string": "hello", "new_string": "goodbye"}),
    )
    argv = [str(NODE_BIN / "gemini"), "-m", model, "-p", task, "--yolo"]
    # a headless run trusts the scratch folder (docs/clients.md says so)
    return [*argv, "--output-format", "json"], {"GEMINI_CLI_TRUST_WORKSPACE": "true"}


def qwen_code(model: str) -> tuple[list[str], dict]:
    task = script(
        ("read_file", {"file_path": "{repo}/notes.txt"}),
        ("edit", {"file_path": "{repo}/notes.txt", "old_string": "hello", "new_string": "goodbye"}),
    )
    argv = [str(NODE_BIN / "qwen"), "-m", model, "-p", task, "--yolo"]
    return [*argv, "--output-format", "json"], {}


def aider(model: str, *, stream: bool = True) -> tuple[list[str], dict]:
    # aider edits through its answer's text (the "whole" edit format), not tools
    reply = f"{NOTES}\n```\ngoodbye world\n```\n"
    task = 'Change "hello" to "goodbye" in notes.txt.\nsim-say: ' + json.dumps(reply)
    argv = [str(AIDER), "--model", f"openai/{model}", "--edit-format", "whole"]
    argv += ["--yes-always", "--no-auto-commits", "--no-pretty"]
    if not stream:
        argv.append("--no-stream")
    return [*argv, "--message", task, NOTES], {}


# --------------------------------------------------------------------------- usage


def claude_code_usage(run: Run) -> Tokens:
    result = json.loads(run.stdout.strip().splitlines()[-1])
    models = result["modelUsage"].values()
    return Tokens(
        input=sum(m["inputTokens"] for m in models),
        cache_read=sum(m["cacheReadInputTokens"] for m in models),
        cache_write=sum(m["cacheCreationInputTokens"] for m in models),
        output=sum(m["outputTokens"] for m in models),
    )


def codex_usage(run: Run) -> tuple[int, int, int]:
    """(prompt tokens, cached, output) of the turns."""
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    turns = [e["usage"] for e in events if e.get("type") == "turn.completed"]
    assert turns, run.describe()
    return (
        sum(u["input_tokens"] for u in turns),
        sum(u["cached_input_tokens"] for u in turns),
        sum(u["output_tokens"] for u in turns),
    )


def gemini_usage(run: Run) -> tuple[int, int, int]:
    """(prompt tokens, cached, output) over the models the stats name."""
    start = run.stdout.index("{")
    models = json.loads(run.stdout[start:])["stats"]["models"].values()
    tokens = [m["tokens"] for m in models]
    return (
        sum(t["prompt"] for t in tokens),
        sum(t["cached"] for t in tokens),
        sum(t["candidates"] + t["thoughts"] for t in tokens),
    )


def qwen_usage(run: Run) -> tuple[int, int, int]:
    start = run.stdout.index("[")
    result = json.loads(run.stdout[start:])[-1]
    usage = result["usage"]
    return usage["input_tokens"], usage.get("cache_read_input_tokens", 0), usage["output_tokens"]


def aider_usage(run: Run) -> tuple[str, str]:
    """(sent, received) as aider's last "Tokens: N sent, M received." line
    prints them (aider rounds: "1.1k")."""
    found = re.findall(r"Tokens: ([\d.]+k?) sent, (?:.*?, )?([\d.]+k?) received", run.stdout)
    assert found, run.describe()
    return found[-1]


def aider_tokens(count: int) -> str:
    """``count`` as aider prints it (``aider.utils.format_tokens``)."""
    if count < 1000:
        return str(count)
    if count < 10000:
        return f"{count / 1000:.1f}k"
    return f"{round(count / 1000)}k"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """``manage.py up`` as a user starts it, behind the recorder."""
    require((NODE_BIN / "claude").exists(), "run `npm install --prefix tests/agents` first")
    var = tmp_path_factory.mktemp("agents") / "var"
    up, info = start(up_env_for(var))
    try:
        yield {**info, "database": var / "console.sqlite3", "recorder": Recorder(info["url"])}
    finally:
        up.stop()


def finished(
    gateway, tmp_path: Path, agent: str, model: str, command, *, min_calls: int = 2
) -> tuple[Run, list]:
    """A run that did its task: exit 0, the file edited, every call answered
    2xx and in the call log (its records returned). An agent with tools makes at
    least two calls: the tool calls' turns, then the answer."""
    argv, overrides = command(model)
    run = run_agent(
        agent,
        model,
        argv,
        tmp=tmp_path,
        recorder=gateway["recorder"],
        key=gateway["key"],
        env_overrides=overrides,
    )
    assert run.returncode == 0, run.describe()
    assert (run.repo / NOTES).read_text(encoding="utf-8") == "goodbye world\n", run.describe()
    assert len(run.calls) >= min_calls, run.describe()
    refused = [(e.path, e.status, e.error_body[:300]) for e in run.exchanges if e.status >= 400]
    assert not refused, run.describe()
    rows = call_log(gateway["database"], [e.request_id for e in run.calls])
    assert {r["status_code"] for r in rows} == {200}
    assert {r["model"] for r in rows} == {model}
    assert all(r["cost"] > 0 for r in rows)
    return run, rows


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("model", ["sim-claude", "sim-gpt", "sim-gemini", "sim-chat-large"])
def test_claude_code_does_its_task_and_the_call_log_matches_its_usage(gateway, tmp_path, model):
    run, rows = finished(gateway, tmp_path, "claude-code", model, claude_code)
    assert logged_tokens(rows) == claude_code_usage(run)
    if model == "sim-claude":
        save_recordings(run)


@pytest.mark.parametrize("model", ["sim-gpt", "sim-claude", "sim-chat-small"])
def test_codex_with_its_default_features_does_its_task(gateway, tmp_path, model):
    run, rows = finished(gateway, tmp_path, "codex", model, codex)
    logged = logged_tokens(rows)
    assert (logged.prompt, logged.cache_read, logged.output) == codex_usage(run)
    if model == "sim-gpt":
        save_recordings(run)


@pytest.mark.parametrize("model", ["sim-gemini", "sim-claude"])
def test_gemini_cli_does_its_task(gateway, tmp_path, model):
    run, rows = finished(gateway, tmp_path, "gemini-cli", model, gemini_cli)
    logged = logged_tokens(rows)
    assert (logged.prompt, logged.cache_read, logged.output) == gemini_usage(run)
    if model == "sim-gemini":
        save_recordings(run)


@pytest.mark.parametrize("model", ["sim-gpt", "sim-chat-small"])
def test_qwen_code_does_its_task(gateway, tmp_path, model):
    run, rows = finished(gateway, tmp_path, "qwen-code", model, qwen_code)
    logged = logged_tokens(rows)
    assert (logged.prompt, logged.cache_read, logged.output) == qwen_usage(run)


@pytest.mark.parametrize(("model", "stream"), [("sim-gpt", True), ("sim-claude", False)])
def test_aider_does_its_task(gateway, tmp_path, model, stream):
    require(AIDER.exists(), "install aider: python3 -m venv .venv-aider && "
            ".venv-aider/bin/pip install -r tests/agents/requirements.txt")  # fmt: skip
    command = functools.partial(aider, stream=stream)
    run, rows = finished(gateway, tmp_path, "aider", model, command, min_calls=1)
    if not stream:
        # streamed, aider asks for no usage and prints its own tokenizer's estimate;
        # plain, it prints the usage the answer reports
        logged = logged_tokens(rows)
        assert (aider_tokens(logged.prompt), aider_tokens(logged.output)) == aider_usage(run)
