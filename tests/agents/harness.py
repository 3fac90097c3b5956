"""Running the real coding agents against a started ``manage.py up``.

The clients are the current releases, unmodified: Claude Code, Codex, Gemini
CLI and Qwen Code from npm (``tests/agents/package.json`` and its lock,
installed with ``npm ci --prefix tests/agents``) and aider from PyPI
(``tests/agents/requirements.txt``, in a virtual environment of its own at
``.venv-aider``: its pins clash with the product's). ``.ci/run`` installs both.

Each run follows the client set-up as printed (docs/clients.md, "The coding
agents"; read with the README's and every docs/*.md's blocks through
``tests/docs_snippets.py``, so a block counts wherever it lives): the environment
variables of its ``sh`` blocks and the files of its ``toml`` / ``json`` blocks
tagged ``agent=<name>`` (``file=<path under $HOME>``), in a fresh ``$HOME``,
with only the base URL changed to the recorder's and the model named on the
command line. The task is scripted for the simulator (``sim-tool:`` lines:
``tooling.simulator.protocol``), so the agent really calls its tools (it
reads a file, then edits it) whatever the model.

Between the client and the gateway sits a recorder (``Recorder``): a byte-for-
byte reverse proxy on loopback that keeps every request the client sent and
the gateway's ``x-request-id``, so a test can find the run's calls in the call
log and replay the bodies to a native channel. Nothing here connects to any
address but 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
import sqlite3
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import ClientSession, ClientTimeout, web

from tests.docs_snippets import doc_blocks

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "tests" / "agents"
NODE_BIN = AGENTS / "node_modules" / ".bin"
AIDER = ROOT / ".venv-aider" / "bin" / "aider"
RECORDED = AGENTS / "recorded"  # committed recordings (the replay test's)
FRESH = ROOT / "test-artifacts" / "agent-recordings"  # this run's (gitignored)
README_BASE_URL = "http://127.0.0.1:8000"
KEY_VARIABLE = "GATEWAY_API_KEY"
RUN_TIMEOUT = 240
# Request headers the recordings keep (no credentials): what the vendor must see.
KEPT_HEADERS = ("content-type", "anthropic-version", "anthropic-beta", "user-agent")
_HOP = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade"}
)


# --------------------------------------------------------------------------- recorder


@dataclass
class Exchange:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int = 0
    request_id: str = ""
    error_body: bytes = b""


class Recorder:
    """A reverse proxy to ``target`` on a free loopback port, in a thread of
    its own, that relays each answer chunk by chunk as it comes and keeps the
    exchanges (``take`` hands over those since the last call)."""

    def __init__(self, target: str):
        self.target = target.rstrip("/")
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port = 0
        threading.Thread(target=self._serve, daemon=True).start()
        if not self._ready.wait(10):
            raise RuntimeError("the recorder did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def take(self) -> list[Exchange]:
        with self._lock:
            taken, self.exchanges = self.exchanges, []
        return taken

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        self._session = ClientSession(
            timeout=ClientTimeout(total=RUN_TIMEOUT), auto_decompress=False
        )
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._relay)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        exchange = Exchange(request.method, request.path_qs, dict(request.headers), body)
        with self._lock:  # kept even when the client hangs up before the stream's end
            self.exchanges.append(exchange)
        async with self._session.request(
            request.method, self.target + request.path_qs, data=body, headers=headers
        ) as upstream:
            exchange.status = upstream.status
            exchange.request_id = upstream.headers.get("x-request-id", "")
            answer = web.StreamResponse(status=upstream.status)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP:
                    answer.headers[name] = value
            await answer.prepare(request)
            async for chunk in upstream.content.iter_any():
                if upstream.status >= 400:
                    exchange.error_body += chunk
                await answer.write(chunk)
            await answer.write_eof()
        return answer


# --------------------------------------------------------------------------- set-up


@dataclass
class Setup:
    """What the client set-up (docs/clients.md) prints for one agent."""

    env: dict[str, str] = field(default_factory=dict)
    unset: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # path under $HOME → text


def documented_setup(agent: str, files: list[Path] | None = None) -> Setup:
    """The blocks tagged ``agent=<agent>`` in README.md and docs/*.md (or in
    ``files``): ``export`` / ``unset`` lines of ``sh`` blocks, and the text of
    blocks with ``file=<path>``. An agent with no block at all is an error, so a
    set-up that moved or lost its tag cannot run the agent unconfigured."""
    setup = Setup()
    for block in doc_blocks(files):
        options = block.options
        if options.get("agent") != agent:
            continue
        if "file" in options:
            setup.files[options["file"]] = block.code
        else:
            _shell_setup(block.code, setup)
    assert setup.env or setup.unset or setup.files, (
        f"no block tagged agent={agent} in README.md or docs/*.md"
    )
    return setup


def _shell_setup(text: str, setup: Setup) -> None:
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "export":
            for assignment in words[1:]:
                name, _, value = assignment.partition("=")
                setup.env[name] = value
        elif words[0] == "unset":
            setup.unset.extend(words[1:])
        else:
            raise AssertionError(f"agent set-up block line is not export/unset: {line!r}")


# --------------------------------------------------------------------------- runs


@dataclass
class Run:
    agent: str
    model: str
    returncode: int
    stdout: str
    stderr: str
    repo: Path
    exchanges: list[Exchange]

    @property
    def calls(self) -> list[Exchange]:
        """The model calls (POSTs) the client made."""
        return [e for e in self.exchanges if e.method == "POST"]

    def describe(self) -> str:
        lines = [f"{self.agent} on {self.model}: exit {self.returncode}"]
        for e in self.exchanges:
            lines.append(f"  {e.method} {e.path} -> {e.status} {e.error_body[:300]!r}")
        lines.append("stdout (end): " + self.stdout[-2000:])
        lines.append("stderr (end): " + self.stderr[-2000:])
        return "\n".join(lines)


def scratch_repo(path: Path) -> Path:
    """A git repository with one file the task reads and edits."""
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("hello world\n", encoding="utf-8")
    git = ["git", "-c", "user.email=agent@example.com", "-c", "user.name=agent"]
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run([*git, "add", "notes.txt"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=path, check=True)
    return path


def environment(setup: Setup, home: Path, base_url: str, key: str) -> dict[str, str]:
    """This process's environment with the documented set-up applied, in a fresh
    ``home``: the base URL is the recorder's, ``$GATEWAY_API_KEY`` the key."""
    env = {k: v for k, v in os.environ.items() if k not in setup.unset}
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        env.pop(name, None)
    env.update(
        HOME=str(home),
        PATH=f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}",
        NO_COLOR="1",
        CI="true",
        **{KEY_VARIABLE: key},
    )
    for name, value in setup.env.items():
        env[name] = value.replace(README_BASE_URL, base_url).replace(f"${KEY_VARIABLE}", key)
    for relative, text in setup.files.items():
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace(README_BASE_URL, base_url), encoding="utf-8")
    return env


def run_agent(
    agent: str,
    model: str,
    argv: list[str],
    *,
    tmp: Path,
    recorder: Recorder,
    key: str,
    env_overrides: dict[str, str] | None = None,
) -> Run:
    """One headless run of ``argv`` in a scratch repository with the documented
    set-up for ``agent`` (docs/clients.md), through ``recorder``."""
    home = tmp / "home"
    home.mkdir(parents=True)
    repo = scratch_repo(tmp / "repo")
    env = environment(documented_setup(agent), home, recorder.url, key)
    env.update(env_overrides or {})
    recorder.take()
    argv = [a.replace("{repo}", str(repo)) for a in argv]
    try:
        done = subprocess.run(
            argv,
            cwd=repo,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        code = -1
        out = (expired.stdout or b"").decode("utf-8", "replace")
        err = (expired.stderr or b"").decode("utf-8", "replace") + "\n(timed out)"
    time.sleep(0.2)  # the recorder files an exchange once its answer has gone out
    return Run(agent, model, code, out, err, repo, recorder.take())


# --------------------------------------------------------------------------- call log


@dataclass(frozen=True)
class Tokens:
    input: int = 0  # uncached prompt tokens
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0  # reasoning included

    @property
    def prompt(self) -> int:
        return self.input + self.cache_read + self.cache_write


def call_log(database: Path, request_ids: list[str], timeout: float = 60.0) -> list[sqlite3.Row]:
    """The call records of ``request_ids`` in ``up``'s SQLite database, once the
    worker has ingested every one of them."""
    deadline = time.monotonic() + timeout
    marks = ",".join("?" * len(request_ids))
    columns = (
        "request_id, status_code, model, input_tokens, cache_read_tokens, cache_write_tokens, "
        "output_tokens, cost"
    )
    query = f"SELECT {columns} FROM usage_call WHERE request_id IN ({marks})"  # noqa: S608
    rows: list[sqlite3.Row] = []
    while time.monotonic() < deadline:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(query, request_ids).fetchall()
        if len(rows) == len(set(request_ids)):
            return rows
        time.sleep(0.5)
    found = {r["request_id"] for r in rows}
    raise AssertionError(f"not in the call log after {timeout} s: {set(request_ids) - found}")


def logged_tokens(rows: list[sqlite3.Row]) -> Tokens:
    return Tokens(
        input=sum(r["input_tokens"] for r in rows),
        cache_read=sum(r["cache_read_tokens"] for r in rows),
        cache_write=sum(r["cache_write_tokens"] for r in rows),
        output=sum(r["output_tokens"] for r in rows),
    )


# --------------------------------------------------------------------------- recordings


def save_recordings(run: Run, directory: Path = FRESH) -> list[Path]:
    """The run's model calls as JSON files (path, kept headers, body), for the
    replay test."""
    directory.mkdir(parents=True, exist_ok=True)
    saved = []
    for n, exchange in enumerate(run.calls):
        headers = {
            k.lower(): v for k, v in exchange.headers.items() if k.lower() in KEPT_HEADERS
        }
        record = {
            "agent": run.agent,
            "model": run.model,
            "path": exchange.path,
            "headers": headers,
            "body_base64": base64.b64encode(exchange.body).decode(),
        }
        path = directory / f"{run.agent}-{run.model}-{n}.json"
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        saved.append(path)
    return saved
