"""``manage.py up`` for real: a subprocess with its own var dir (SQLite, secrets,
filesystem broker), started three times against the same data."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.console.up_process import ROOT, start, up_env_for

KEY_RE = re.compile(r"^sk-[a-z2-9]{10}_[A-Za-z0-9_-]{43}$")


@pytest.fixture
def up_env(tmp_path):
    return up_env_for(tmp_path / "var")


def shell_check(env: dict, email: str, password: str, keys: list[str]) -> dict:
    code = (
        "import json\n"
        "from django.contrib.auth import authenticate\n"
        "from accounts.keys import api_key_authenticate\n"
        f"print(json.dumps({{'login': authenticate(username={email!r}, password={password!r})"
        f" is not None, 'keys': [api_key_authenticate(k) is not None for k in {keys!r}]}}))\n"
    )
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def node_health(env: dict) -> str:
    code = (
        "from inference_node.models import Node\n"
        "n = Node.objects.get(organization=None, name='simulator-1')\n"
        "print(n.health, n.base_url, sorted(m.public_name for m in n.models.all()))\n"
    )
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def test_up_runs_the_console_and_reuses_its_data(up_env):
    var = Path(up_env["CONSOLE_VAR_DIR"])

    up, first = start(up_env)
    try:
        assert first["email"] == "demo@example.com"
        secret = (var / "secret_key").read_text().strip()
        expected = hmac.new(secret.encode(), b"demo-password", hashlib.sha256).hexdigest()[:16]
        assert first["password"] == expected
        assert KEY_RE.match(first["key"]), first["key"]
        with urllib.request.urlopen(first["url"] + "django-admin/login/", timeout=10) as resp:  # noqa: S310
            assert resp.status == 200
        # The bundled simulator node answers, and was probed healthy before Ready.
        with urllib.request.urlopen(first["node"] + "/v1/models", timeout=10) as resp:  # noqa: S310
            served = {m["id"] for m in json.load(resp)["data"]}
        assert {"sim-chat-small", "sim-chat-large", "sim-embed"} <= served
        health = node_health(up_env)
        assert health.startswith("healthy"), health
        assert f"http://127.0.0.1:{up.node_port} " in health
        # It says that it checked the printed key, and on what.
        checked = up.wait_for(r"^Checked the demo key on (.+): one call each")
        assert checked.group(1).split(", ") == [
            "sim-chat-small", "sim-chat-large", "sim-embed", "sim-gpt", "sim-claude", "sim-gemini"
        ]  # fmt: skip
        try:
            sdk_calls_through_the_gateway(first["url"].rstrip("/"), first["key"])
        except Exception as exc:
            # up's own lines (a child that exited, a probe that failed) say why.
            raise AssertionError(f"{exc}\n--- manage.py up said ---\n{up.output()}") from exc
    finally:
        code = up.stop()
    assert code == 0, "\n".join(up.seen)
    assert shell_check(up_env, first["email"], first["password"], [first["key"]]) == {
        "login": True,
        "keys": [True],
    }

    up, second = start(up_env)
    assert up.stop() == 0
    assert not any(line.startswith("Checked the demo key") for line in up.seen)
    assert second["password"] == first["password"]
    public_id = first["key"].split("_", 1)[0]
    assert second["key"] == (
        f"{public_id}… (shown once when it was issued; run with --new-demo-key for a fresh one)"
    )

    up, third = start(up_env, "--new-demo-key")
    assert up.stop() == 0
    assert KEY_RE.match(third["key"]), third["key"]
    assert third["key"] != first["key"]
    assert shell_check(up_env, third["email"], third["password"], [first["key"], third["key"]]) == {
        "login": True,
        "keys": [False, True],
    }


def vendor_channels_through_the_gateway(oa, an, gm) -> None:
    """The demo key reaches the three demo vendor channels at once (no probe
    to wait for: they are judged by traffic): the OpenAI API kind, the
    Anthropic kind natively, the Gemini kind natively."""
    from google.genai import types

    gpt = oa.chat.completions.create(
        model="sim-gpt", messages=[{"role": "user", "content": "Hello"}], max_tokens=12
    )
    assert gpt.choices[0].message.content and gpt.usage.prompt_tokens > 0
    claude = an.messages.create(
        model="sim-claude",
        max_tokens=12,
        system=[
            {"type": "text", "text": "You are terse. " * 40, "cache_control": {"type": "ephemeral"}}
        ],
        messages=[{"role": "user", "content": "Hello"}],
    )
    assert claude.content[-1].text and claude.usage.cache_creation_input_tokens > 0
    gemini = gm.models.generate_content(
        model="sim-gemini",
        contents="Hello",
        config=types.GenerateContentConfig(max_output_tokens=12),
    )
    assert gemini.text and gemini.usage_metadata.prompt_token_count > 0


def sdk_calls_through_the_gateway(base: str, key: str) -> None:
    """The official OpenAI, Anthropic and Gemini SDKs, pointed at up's own port
    with the printed demo key, get answers (plain and streamed) with usage."""
    import anthropic
    import openai
    from google import genai
    from google.genai import types

    oa = openai.OpenAI(api_key=key, base_url=f"{base}/v1", max_retries=0, timeout=30)
    # No retry: once up printed Ready. the first call is answered.
    chat = oa.chat.completions.create(
        model="sim-chat-small",
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hello"},
        ],
        max_tokens=12,
    )
    assert chat.choices[0].message.content and chat.usage.prompt_tokens > 0
    pieces = list(
        oa.chat.completions.create(
            model="sim-chat-small",
            messages=[{"role": "user", "content": "Count to three."}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert pieces[-1].usage and pieces[-1].usage.completion_tokens > 0
    an = anthropic.Anthropic(api_key=key, base_url=base, max_retries=0, timeout=30)
    message = an.messages.create(
        model="sim-chat-small",
        max_tokens=12,
        system="You are terse.",
        messages=[{"role": "user", "content": "Hello"}],
    )
    assert message.content[0].text and message.usage.output_tokens > 0
    gm = genai.Client(
        api_key=key,
        http_options=types.HttpOptions(base_url=base, api_version="v1beta", timeout=30_000),
    )
    reply = gm.models.generate_content(
        model="sim-chat-small",
        contents="Hello",
        config=types.GenerateContentConfig(max_output_tokens=12),
    )
    assert reply.text and reply.usage_metadata.prompt_token_count > 0
    vendor_channels_through_the_gateway(oa, an, gm)
    # Hang up: up's server should not wait on idle keep-alive connections to stop.
    oa.close()
    an.close()
    gm.close()
