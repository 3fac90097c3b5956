"""Every console page in Simplified Chinese (issue 18): a user who chose
简体中文 opens every page, htmx partial and chart partial the URL
configuration has (``tests/console/routes.py`` walks it; the ``world`` of two
organizations with one object of every kind, plus recent calls so that the
charts have traces), and reads no English there.

What counts as English: a run of two or more English words, or a text node
that is English alone ("Save"), in the visible text, in what a person reads
in attributes (buttons' values, placeholders, titles, aria-labels,
confirmations) and in charts' titles, legends, axis titles and hover labels.
What does not: the organization's own data (names, e-mails, reasons, model
names: every string stored in the world's rows is taken out first), code
(``<code>``, ``<pre>``, ``translate="no"``), identifiers (``p99``,
``gpt-4o``, ``spend_cap_daily``), acronyms and currency codes (API, CSV,
USD) and the product and vendor names a Chinese console keeps in Latin
(``LATIN_TERMS``).

``-k accounts`` (or ``invoicing``, ``inference_node``, ``usage``, ``alerts``,
``analytics``, ``console``, ``capacity``) walks one area.
"""

from __future__ import annotations

import itertools
import json
import re
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.apps import apps
from django.db import models
from django.utils import timezone

from accounts.models import Role
from tests.console.routes import build_world, client_for, url_for

# Kept in Latin letters inside Chinese text by Chinese consoles and docs.
LATIN_TERMS = {
    "api", "token", "tokens", "csv", "pdf", "ip", "url", "ttft", "sdk", "http", "https", "json",
    "stripe", "openai", "anthropic", "gemini", "claude", "code", "codex", "cursor", "cline",
    "cherry", "studio", "vllm", "sglang", "kimi", "deepseek", "glm", "qwen", "moonshot", "zhipu",
    "dashscope", "azure", "bedrock", "vertex", "ai", "gpt", "sse", "htmx", "utc", "gmt", "id",
    "totp", "otp", "webhook", "base", "bearer", "x-api-key", "rpm", "tpm", "ok", "ssrf",
    "prometheus", "metrics", "visa", "mastercard", "amex", "sepa", "iban", "swift", "vat", "github",
    "google", "authenticator", "llm", "openrouter", "litellm", "new", "chat", "completions",
    "messages", "responses", "embeddings", "v1", "v1beta", "sim", "simulator", "simulators",
    "slack", "lark", "wecom", "dingtalk",
}  # fmt: skip
WORD = re.compile(r"[A-Za-z][A-Za-z']+")
HAN = re.compile(r"[\u4e00-\u9fff]")
# Identifiers, paths, acronyms: not words a translator writes.
NOT_PROSE = re.compile(
    r"[\w.+-]+@[\w.-]+"  # e-mail addresses
    r"|https?://\S+|/[\w/.:{}<>?=&%-]*"  # URLs and paths
    r"|\b[A-Za-z_]*[0-9_][\w.:-]*"  # identifiers with digits or underscores
    r"|\b[\w]+(?:[-.][\w]+)+"  # hyphenated or dotted identifiers: sim-chat-small, a.b
    r"|\b[A-Z]{2,6}s?\b"  # acronyms and currency codes
    r"|\b[A-Z][a-z]+/[\w/+-]+"  # time zones: America/Blanc-Sablon
)


class _Text(HTMLParser):
    """Text nodes a person reads, one entry each, without code."""

    SKIP = {"script", "style", "code", "pre", "kbd", "samp", "template"}
    VOID = {"input", "br", "img", "meta", "link", "hr", "source", "wbr", "col", "area", "base"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.nodes: list[str] = []
        self.scripts: list[str] = []
        self._stack: list[bool] = []  # per open element: skipped?

    @property
    def _skipping(self) -> bool:
        return any(self._stack)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        skip = tag in self.SKIP or a.get("translate") == "no"
        if not self._skipping:
            if tag == "input" and a.get("type") in ("submit", "button") and a.get("value"):
                self.nodes.append(a["value"])
            for name in ("data-confirm", "title", "placeholder", "aria-label", "alt"):
                if a.get(name):
                    self.nodes.append(a[name])
        if tag == "script":
            self._script_json = a.get("type") == "application/json"
        if tag not in self.VOID:
            self._stack.append(skip)

    def handle_endtag(self, tag):
        if tag not in self.VOID and self._stack:
            self._stack.pop()

    def handle_data(self, data):
        if self._stack and self._stack[-1] and getattr(self, "_script_json", False):
            self.scripts.append(data)
            return
        if not self._skipping and data.strip():
            self.nodes.append(data)


def _chart_texts(scripts: list[str]):
    """What a chart shows in words: trace names, titles, annotations, hover labels."""

    def walk(node, key=""):
        if isinstance(node, dict):
            for k, v in node.items():
                yield from walk(v, k)
        elif isinstance(node, list):
            for v in node:
                yield from walk(v, key)
        elif isinstance(node, str) and key in ("name", "text", "title", "hovertemplate"):
            # Plotly's %{…} fields and <extra>/<br> markup are not words.
            yield re.sub(r"%\{[^}]*\}|<[^>]+>", " ", node)

    for script in scripts:
        for blob in re.findall(r"\{.*\}", script, flags=re.S):
            try:
                yield from walk(json.loads(blob))
            except ValueError:
                continue


def english_in(text: str, data: list[str]) -> str | None:
    """The English a Chinese reader would meet in ``text``, or None."""
    for value in data:  # longest first: the organization's own strings
        if value in text:
            text = text.replace(value, " ")
    text = NOT_PROSE.sub(" ", text)
    words = [m for m in WORD.finditer(text) if m.group(0).lower() not in LATIN_TERMS]
    if not words:
        return None
    if not HAN.search(text) and any(len(m.group(0)) >= 3 for m in words):
        return " ".join(text.split())  # a node in English alone
    # Two English words in a row (only spaces and light punctuation between them).
    for first, second in itertools.pairwise(words):
        if re.fullmatch(r"[\s,'\u2019-]*", text[first.end() : second.start()]):
            return " ".join(text[max(0, first.start() - 30) : second.end() + 30].split())
    return None


def _stored_strings() -> list[str]:
    """Every string in the test database's rows of the console's apps: the
    organizations' own data (names, e-mails, reasons, catalogue entries)."""
    out: set[str] = set()
    for label in ("accounts", "usage", "invoicing", "inference_node", "webhooks", "alerts"):
        for model in apps.get_app_config(label).get_models():
            fields = [
                f.name
                for f in model._meta.concrete_fields
                if isinstance(f, (models.CharField, models.TextField, models.EmailField))
                and not f.choices
            ]
            if not fields:
                continue
            for row in model.objects.values_list(*fields):
                out.update(v for v in row if isinstance(v, str) and len(v.strip()) >= 3)
    return sorted(out, key=len, reverse=True)


AREAS = (
    "console", "accounts", "usage", "analytics", "invoicing", "inference_node",
    "webhooks", "capacity", "alerts",
)  # fmt: skip
SKIP = {
    "accounts:logout",
    "accounts:organization_switch",
    "accounts:set_language",
    "invoicing:invoice_pdf",  # PDFs: tests/invoicing
    "invoicing:credit_note_pdf",
}


@pytest.fixture
def world(db, settings):
    yield from build_world(settings)


def _recent_calls(tenant) -> None:
    """Calls in the last hours, so that every chart of the default range has
    traces: on the world's node, on a node deleted since, and answered locally
    (no node), as the margin report names them."""
    from accounts.models import ApiKey
    from inference_node.models import Node
    from tests.usage.factories import event
    from usage.ingest import ingest_events

    key = ApiKey.objects.filter(organization=tenant.org).first()
    node = Node.objects.filter(organization=tenant.org).first()
    deleted = Node.objects.order_by("-pk").first().pk + 1000
    now = timezone.now()
    ingest_events(
        [
            event(
                key,
                started_at=now - timedelta(hours=h),
                input_tokens=1_000 * h,
                status_code=status,
                error_type="" if status == 200 else "upstream_error",
                node_id=node_id,
            )
            for h, status, node_id in (
                (1, 200, node.pk),
                (2, 200, deleted),
                (3, 502, node.pk),
                (5, 200, 0),
            )
        ]
    )


@pytest.mark.parametrize("area", AREAS)
def test_a_chinese_reader_meets_no_english_on_the_pages(world, area, settings):
    from tests.factories import UserFactory

    tenant = world["a"]
    _recent_calls(tenant)
    # The public marketplace and status page are walked too (off by default: on here).
    settings.CONSOLE_PUBLIC_MARKETPLACE = True
    settings.CONSOLE_PUBLIC_STATUS = True
    owner = tenant.members[Role.OWNER].user
    owner.language = "zh-hans"
    owner.save(update_fields=["language"])
    readers = [client_for(tenant.members[Role.OWNER])]
    if area == "analytics":  # the staff margin report too
        staff = UserFactory(is_staff=True, language="zh-hans")
        from tests.factories import MembershipFactory

        MembershipFactory(organization=tenant.org, role=Role.OWNER, user=staff)
        client = client_for()
        client.force_login(staff)
        readers.append(client)
    # Names that are data, not interface: the brand, the seller on invoices (settings),
    # and each language named in itself in a language choice ("English", "简体中文").
    named = [settings.CONSOLE_BRAND, *settings.INVOICING_SELLER.values()]
    named += [name for _code, name in settings.LANGUAGES]
    data = sorted([*_stored_strings(), *filter(None, named)], key=len, reverse=True)

    from tests.console.routes import all_routes

    problems: list[str] = []
    pages = 0
    for route in all_routes():
        access = route.access
        if access is None or route.key in SKIP:
            continue
        if access.kind not in ("page", "admin") and not route.key.startswith("analytics:public_"):
            continue
        if route.key.split(":")[0] != area:
            continue
        if access.kind == "admin" and not route.key.startswith("analytics:margin"):
            continue
        url = url_for(route, tenant)
        for client in readers:
            for headers in ({}, {"HX-Request": "true"}):
                response = client.get(url, headers=headers)
                if response.status_code != 200:
                    continue
                kind = response.get("Content-Type", "")
                if "text/html" not in kind:
                    continue
                raw = (
                    b"".join(response.streaming_content) if response.streaming else response.content
                )
                parser = _Text()
                parser.feed(raw.decode())
                pages += 1
                where = f"{route.key} {url}{' (htmx)' if headers else ''}"
                texts = [*parser.nodes, *_chart_texts(parser.scripts)]
                seen = set()
                for text in texts:
                    found = english_in(text, data)
                    if found and found not in seen:
                        seen.add(found)
                        problems.append(f"{where}: {found!r}")
    assert pages, f"no page of {area} was read"
    assert not problems, f"{len(problems)} English leftovers:\n" + "\n".join(problems)
