"""The security sweep: every route of the URL configuration, walked from
``get_resolver()`` (includes, namespaces and DRF routers alike), is requested
by an anonymous visitor, by a member of each role and by a member of another
organization.

Each route must match a rule in ``RULES`` (by its namespaced name, first match
wins); a route that matches none fails ``test_every_route_is_classified`` with
its name and path, so a new page, partial, export or API endpoint is either
covered by an existing rule (``invoicing:*``, ``analytics:*``) or classified
before it lands. Each URL parameter is filled by ``PARAMS`` with a real object
(one per organization, built through the services and factories); a parameter
with no builder fails the same way.

What is checked, for every route:

* nobody ever gets a 500 (an exception in a view fails the sweep);
* anonymous: pages redirect to the login page, the API answers 401/403,
  public routes answer, the Stripe webhook answers 400 without a signature,
  the Django admin sends everyone (staff aside) to its own login;
* each role: a page or endpoint its permissions do not open answers 403 (or
  405 for a method the route does not take), one they open does not;
* object routes filled with another organization's objects answer 404 (403
  for a role the route is closed to): never 200, never a redirect that acted;
  the same routes filled with the member's own organization's objects open
  (so the 404 is the isolation, not a broken fixture).

The gateway's paths (``/v1/*``, ``/v1beta/*``) are not Django URLs; they are
covered at the end of this module through the real gateway.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.test import Client
from django.urls import get_resolver, resolve

from accounts.actors import Actor
from accounts.models import Role
from accounts.permissions import ROLE_PERMS, Perm
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory, issue_key

ROLES = [r.value for r in Role]
LOGIN_PATH = "/login/"
ADMIN_LOGIN_PATH = "/django-admin/login/"


# --- the classification --------------------------------------------------------------


@dataclass(frozen=True)
class Access:
    """Who may open a route.

    ``kind``: ``page`` (console page, htmx partial or export: session login),
    ``api`` (REST API: 401/403 without credentials), ``public``, ``webhook``
    (signed, no session), ``admin`` (Django admin: platform staff only).
    ``view``: any one of these permissions opens GET (empty: every member).
    ``change``: any one of these opens the other methods (None: as ``view``).
    """

    kind: str
    view: tuple[Perm, ...] = ()
    change: tuple[Perm, ...] | None = None

    def may_view(self, role: str) -> bool:
        return not self.view or any(p in ROLE_PERMS[role] for p in self.view)

    def may_change(self, role: str) -> bool:
        perms = self.view if self.change is None else self.change
        return not perms or any(p in ROLE_PERMS[role] for p in perms)


P = Perm
KEYS_SEE = (P.KEYS_VIEW_ALL, P.KEYS_MANAGE_OWN)
KEYS_CHANGE = (P.KEYS_MANAGE_ALL, P.KEYS_MANAGE_OWN)
USAGE = (P.USAGE_VIEW_ALL, P.USAGE_VIEW_OWN)
BILLING = Access("page", (P.BILLING_VIEW,), (P.BILLING_MANAGE,))
BILLING_API = Access("api", (P.BILLING_VIEW,), (P.BILLING_MANAGE,))

# First match wins; the key is "namespace:name" (names of the API's routers
# have no namespace). Unnamed routes are matched as "namespace:<path>".
RULES: list[tuple[str, Access]] = [
    # public
    ("console:health", Access("public")),
    ("accounts:login", Access("public")),
    ("accounts:logout", Access("public")),
    ("accounts:invitation_accept", Access("public")),  # the token is the credential
    ("stripe-webhook", Access("webhook")),
    ("admin:login", Access("public")),
    ("admin:logout", Access("public")),
    ("admin:*", Access("admin")),
    # console pages
    ("console:overview", Access("page", (P.ORG_VIEW,))),
    ("accounts:password_change", Access("page")),
    ("accounts:organization_switch", Access("page")),
    ("accounts:organization_settings", Access("page", (P.ORG_VIEW,), (P.ORG_MANAGE,))),
    ("accounts:members", Access("page", (P.MEMBERS_VIEW,), (P.MEMBERS_MANAGE,))),
    ("accounts:member_role", Access("page", (P.MEMBERS_MANAGE,))),
    ("accounts:member_remove", Access("page", (P.MEMBERS_VIEW,))),  # leaving is everyone's
    ("accounts:invitation_revoke", Access("page", (P.MEMBERS_MANAGE,))),
    ("accounts:sub_account*", Access("page", (P.SUBACCOUNTS_VIEW,), (P.SUBACCOUNTS_MANAGE,))),
    ("accounts:api_keys", Access("page", KEYS_SEE)),
    ("accounts:api_key_detail", Access("page", KEYS_SEE, KEYS_CHANGE)),
    ("accounts:api_key_*", Access("page", (P.KEYS_MANAGE_OWN,))),
    ("accounts:audit", Access("page", (P.AUDIT_VIEW,))),
    ("accounts:access_tokens", Access("page", (P.TOKENS_MANAGE_OWN,))),
    ("inference_node:nodes", Access("page", (P.NODES_VIEW,))),
    ("inference_node:node_detail", Access("page", (P.NODES_VIEW,), (P.NODES_MANAGE,))),
    ("inference_node:node_*", Access("page", (P.NODES_MANAGE,))),
    ("usage:models", Access("page")),
    ("usage:*", Access("page", USAGE)),
    ("invoicing:*", BILLING),  # billing: finance, owners, admins only
    ("analytics:index", Access("page", (*USAGE, P.BILLING_VIEW))),
    ("analytics:billing", Access("page", (P.BILLING_VIEW,))),
    ("analytics:chart_billing", Access("page", (P.BILLING_VIEW,))),
    ("analytics:*", Access("page", USAGE)),
    # REST API
    ("api-schema", Access("public")),  # the OpenAPI description: no data
    ("api-key-*", Access("api", KEYS_SEE, (P.KEYS_MANAGE_OWN,))),
    ("sub-account-*", Access("api", (P.SUBACCOUNTS_VIEW,), (P.SUBACCOUNTS_MANAGE,))),
    ("member-*", Access("api", (P.MEMBERS_VIEW,), (P.MEMBERS_MANAGE,))),
    ("invitation-*", Access("api", (P.MEMBERS_MANAGE,))),
    ("node-*", Access("api", (P.NODES_VIEW,), (P.NODES_MANAGE,))),
    ("call-*", Access("api", USAGE)),
    ("balance", BILLING_API),
    ("invoice-*", BILLING_API),
    ("credit-note-*", BILLING_API),
    ("ledger-entry-*", BILLING_API),
]


def classify(key: str) -> Access | None:
    for pattern, access in RULES:
        if fnmatch.fnmatchcase(key, pattern):
            return access
    return None


# --- walking the URL configuration ---------------------------------------------------


@dataclass
class Route:
    key: str  # "namespace:name", or "namespace:<path>" when unnamed
    template: str  # the full pattern text, route and regex syntax mixed
    params: list[str]
    methods: tuple[str, ...] | None  # known for DRF views, None for function views
    access: Access | None = field(default=None)

    @property
    def is_object_route(self) -> bool:
        return bool(self.params)


def _params(pattern) -> list[str]:
    return list(pattern.pattern.regex.groupindex)


def _methods(callback) -> tuple[str, ...] | None:
    actions = getattr(callback, "actions", None)
    if actions:  # a DRF viewset route
        return tuple(m.upper() for m in actions)
    cls = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if cls is not None:
        return tuple(
            m.upper() for m in cls.http_method_names if hasattr(cls, m) and m not in ("options",)
        )
    return None


def walk(patterns=None, prefix: str = "", ns: str | None = None):
    for p in get_resolver().url_patterns if patterns is None else patterns:
        sub = getattr(p, "url_patterns", None)
        if sub is not None:
            inner = ns
            if getattr(p, "namespace", None):
                inner = f"{ns}:{p.namespace}" if ns else p.namespace
            yield from walk(sub, prefix + str(p.pattern), inner)
            continue
        template = prefix + str(p.pattern)
        local = p.name or f"<{template}>"
        key = f"{ns}:{local}" if ns else local
        yield Route(key, template, _params(p), _methods(p.callback), classify(key))


def all_routes() -> list[Route]:
    return list(walk())


_ROUTE_PARAM = re.compile(r"<(?:(?P<conv>\w+):)?(?P<name>\w+)>")
_REGEX_PARAM = re.compile(r"\(\?P<(?P<name>\w+)>(?:[^()]|\([^()]*\))*\)")


def fill(template: str, values: dict[str, str]) -> str:
    """The URL of a pattern with ``values`` in its parameters (route or regex syntax)."""
    out = _REGEX_PARAM.sub(lambda m: str(values[m["name"]]), template)
    out = _ROUTE_PARAM.sub(lambda m: str(values[m["name"]]), out)
    out = out.replace("^", "").replace("$", "")
    return "/" + out


# --- what fills each URL parameter -------------------------------------------------------
# (route glob, parameter) -> the name of an object kind built per organization.

PARAMS: list[tuple[str, str, str]] = [
    ("accounts:invitation_accept", "token", "bogus_token"),
    ("admin:*", "*", "admin_value"),
    ("*", "membership_id", "membership"),
    ("*", "invitation_id", "invitation"),
    ("*", "sub_account_id", "sub_account"),
    ("*", "key_id", "api_key"),
    ("*", "node_id", "node"),
    ("*", "request_id", "call"),
    ("*", "invoice_id", "invoice"),
    ("*", "credit_note_id", "credit_note"),
    ("api-key-*", "pk", "api_key"),
    ("sub-account-*", "pk", "sub_account"),
    ("member-*", "pk", "membership"),
    ("invitation-*", "pk", "invitation"),
    ("node-*", "pk", "node"),
    ("invoice-*", "pk", "invoice"),
    ("credit-note-*", "pk", "credit_note"),
    ("ledger-entry-*", "pk", "ledger_entry"),
]

ADMIN_VALUES = {"app_label": "accounts", "url": "no-such-page/", "content_type_id": "1"}


def param_kind(route: Route, param: str) -> str | None:
    for glob, name, kind in PARAMS:
        if fnmatch.fnmatchcase(route.key, glob) and fnmatch.fnmatchcase(param, name):
            return kind
    return None


def _tenant(org, members) -> SimpleNamespace:
    """One organization's objects, one of each kind a URL can name."""
    from accounts.services import invitation_create, sub_account_create
    from invoicing.services import (
        credit_note_create,
        invoice_draft,
        invoice_finalize,
        prepaid_adjust,
    )
    from tests.inference_node.factories import NodeFactory
    from tests.usage.factories import event
    from usage.ingest import ingest_events

    owner = Actor(members[Role.OWNER], "203.0.113.5")
    finance = Actor(members[Role.FINANCE], "203.0.113.5")
    sub = sub_account_create(actor=owner, name=f"team-{org.slug}")
    # The developer's own key: every role that sees keys sees this one.
    key, _raw = issue_key(Actor(members[Role.DEVELOPER]), name=f"dev-{org.slug}")
    invitation, _ = invitation_create(actor=owner, email=f"new@{org.slug}.example", role="viewer")
    node = NodeFactory(organization=org, name=f"node-{org.slug}", serves=["sim-chat-small"])
    start = datetime(2025, 3, 15, 12, 0, tzinfo=UTC)
    events = [
        event(key, started_at=start + timedelta(minutes=i), input_tokens=1_000_000 + i)
        for i in range(3)
    ]
    ingest_events(events)
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=org.pk, period="2025-03").pk
    )
    note = credit_note_create(invoice_id=invoice.pk, actor=finance, amount=10_000, reason="sweep")
    entry = prepaid_adjust(actor=finance, amount=5_000_000, reason="sweep grant", kind="grant")
    return SimpleNamespace(
        org=org,
        members=members,
        values={
            "membership": members[Role.VIEWER].pk,
            "invitation": invitation.pk,
            "sub_account": sub.pk,
            "api_key": key.pk,
            "node": node.pk,
            "call": events[0]["request_id"],
            "invoice": invoice.pk,
            "credit_note": note.pk,
            "ledger_entry": entry.pk,
            "bogus_token": "not-a-real-invitation-token",
        },
    )


@pytest.fixture
def world(db, settings):
    """Two organizations, each with one member per role and one object of
    every kind; ``a`` is the one under test, ``b`` the other tenant."""
    from usage.ingest.directory import invalidate_directory
    from usage.prices import invalidate_price_book
    from usage.seed import seed_catalog

    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    settings.STRIPE_WEBHOOK_SECRET = "whsec_sweep_not_secret"
    invalidate_price_book()
    invalidate_directory()
    seed_catalog()
    out = {}
    for tag in ("a", "b"):
        org = OrganizationFactory(name=f"Org {tag.upper()}", slug=f"sweep-{tag}")
        members = {
            role: MembershipFactory(organization=org, role=role, user=UserFactory())
            for role in ROLES
        }
        out[tag] = _tenant(org, members)
    yield out
    invalidate_price_book()
    invalidate_directory()


def url_for(route: Route, tenant) -> str:
    values = {}
    for param in route.params:
        kind = param_kind(route, param)
        if kind == "admin_value":
            values[param] = ADMIN_VALUES.get(param, "1")
        else:
            values[param] = tenant.values[kind]
    return fill(route.template, values)


def snapshot(org) -> dict:
    """Everything of ``org`` a request could change, as comparable values."""
    from accounts.models import ApiKey, AuditEvent, Invitation, Membership, SubAccount
    from inference_node.models import Node
    from invoicing.models import CreditNote, Invoice, LedgerEntry

    def rows(model, *fields):
        return sorted(model.objects.filter(organization=org).values_list("pk", *fields))

    org.refresh_from_db()
    return {
        "org": (org.name, org.timezone, org.is_active),
        "members": rows(Membership, "role", "user_id"),
        "invitations": sorted(
            Invitation.objects.filter(organization=org).values_list("pk", "revoked_at")
        ),
        "sub_accounts": rows(SubAccount, "name", "status", "spend_cap_daily"),
        "keys": rows(ApiKey, "name", "status", "public_id", "secret_hash"),
        "nodes": rows(Node, "status", "name"),
        "invoices": rows(Invoice, "status", "total", "paid_minor"),
        "credit_notes": rows(CreditNote, "amount"),
        "ledger": rows(LedgerEntry, "amount"),
        "audit": AuditEvent.objects.filter(organization=org).count(),
    }


# --- requests ----------------------------------------------------------------------------

UNSAFE = ("POST", "PATCH", "PUT", "DELETE")


def methods_to_try(route: Route) -> list[str]:
    if route.methods is not None:
        return [m for m in route.methods if m in ("GET", *UNSAFE)]
    return ["GET", "POST"]  # function views: both, the view decides


class Sweep:
    """Sends the requests and collects every departure from the rules."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.requests = 0

    def send(self, client: Client, method: str, url: str, *, api: bool):
        self.requests += 1
        kwargs = {}
        if method != "GET":
            kwargs = {"content_type": "application/json", "data": "{}"} if api else {"data": {}}
        try:
            return getattr(client, method.lower())(url, **kwargs)
        except Exception as exc:  # a 500: the view raised
            self.failures.append(f"{method} {url}: raised {type(exc).__name__}: {exc}")
            return None

    def expect(self, who: str, method: str, url: str, response, allowed: set[int], why: str):
        if response is None:
            return
        if response.status_code >= 500 or response.status_code not in allowed:
            where = f" -> {response.get('Location')}" if response.status_code in (301, 302) else ""
            self.failures.append(
                f"{who}: {method} {url} answered {response.status_code}{where}, "
                f"expected one of {sorted(allowed)} ({why})"
            )

    def report(self) -> str:
        return f"{len(self.failures)} failures in {self.requests} requests:\n" + "\n".join(
            self.failures
        )


def _client(membership=None) -> Client:
    client = Client(raise_request_exception=True)
    if membership is not None:
        client.force_login(membership.user)
    return client


def _sweep_anonymous(sweep: Sweep, routes: list[Route], tenant) -> None:
    client = _client()
    for route in routes:
        access = route.access
        url = url_for(route, tenant)
        for method in methods_to_try(route):
            r = sweep.send(client, method, url, api=access.kind == "api")
            if r is None:
                continue
            if access.kind == "page":
                if r.status_code == 405:
                    continue
                to_login = r.status_code == 302 and r["Location"].startswith(LOGIN_PATH)
                if not to_login:
                    sweep.expect("anonymous", method, url, r, set(), "redirect to the login page")
            elif access.kind == "api":
                sweep.expect("anonymous", method, url, r, {401, 403}, "API needs credentials")
            elif access.kind == "admin":
                to_login = r.status_code == 302 and r["Location"].startswith(ADMIN_LOGIN_PATH)
                if not to_login and r.status_code not in (404, 405):
                    sweep.expect("anonymous", method, url, r, set(), "admin: staff only")
            elif access.kind == "webhook":
                allowed = {400} if method == "POST" else {405}
                sweep.expect("anonymous", method, url, r, allowed, "unsigned webhook")
                if method == "POST":
                    forged = client.post(
                        url,
                        data='{"id": "evt_1", "type": "payment_intent.succeeded"}',
                        content_type="application/json",
                        headers={"Stripe-Signature": "t=1,v1=00"},
                    )
                    sweep.expect("anonymous", method, url, forged, {400}, "forged signature")
            else:  # public
                sweep.expect("anonymous", method, url, r, set(range(200, 500)), "public, no 500")


def _sweep_member(sweep: Sweep, routes, membership, role: str, own, other, who: str) -> None:
    """``membership`` (of ``own``'s organization, with ``role``) against every
    route: non-object routes and own objects by the rules, ``other``'s objects
    never reachable."""
    for route in routes:
        access = route.access
        if access.kind in ("public", "webhook"):
            continue
        client = _client(membership)  # fresh each route: a POST to logout must not leak
        api = access.kind == "api"
        if access.kind == "admin":
            url = url_for(route, own)
            r = sweep.send(client, "GET", url, api=False)
            if r is not None and not (
                r.status_code in (404, 405)
                or (r.status_code == 302 and r["Location"].startswith(ADMIN_LOGIN_PATH))
            ):
                sweep.expect(who, "GET", url, r, set(), "admin: staff only")
            continue
        denied = {403, 405} if not api else {403, 404, 405}
        for method in methods_to_try(route):
            may = access.may_view(role) if method == "GET" else access.may_change(role)
            if route.is_object_route:
                # Another organization's object: not found (or closed to the role).
                url = url_for(route, other)
                r = sweep.send(client, method, url, api=api)
                allowed = {404, 405} if may else {403, 404, 405}
                sweep.expect(who, method, url, r, allowed, "another organization's object")
                if method != "GET":
                    continue  # never change one's own objects here: the sweep goes on
                url = url_for(route, own)
                r = sweep.send(client, method, url, api=api)
                allowed = {200, 302, 405} if may else denied | {404}
                sweep.expect(who, method, url, r, allowed, f"own object, may={may}")
                if may and r is not None and r.status_code == 200 and not api:
                    r = client.get(url, headers={"HX-Request": "true"})
                    sweep.requests += 1
                    sweep.expect(who, "GET(htmx)", url, r, {200, 302}, "htmx partial")
            else:
                url = url_for(route, own)
                r = sweep.send(client, method, url, api=api)
                if may:
                    allowed = {200, 302, 405} if method == "GET" else {200, 201, 302, 400, 405, 409}
                elif api and method != "GET":
                    # The API validates the body before the service checks the role:
                    # an empty body is a 400 either way (nothing is created).
                    allowed = denied | {400}
                else:
                    allowed = denied
                sweep.expect(who, method, url, r, allowed, f"may={may}")
                if method == "GET" and may and not api and r is not None and r.status_code == 200:
                    r = client.get(url, headers={"HX-Request": "true"})
                    sweep.requests += 1
                    sweep.expect(who, "GET(htmx)", url, r, {200, 302}, "htmx partial")


def _classified() -> list[Route]:
    routes = all_routes()
    missing = [r for r in routes if r.access is None]
    unfilled = [
        (r.key, p) for r in routes if r.access is not None for p in r.params if not param_kind(r, p)
    ]
    assert not missing, (
        "routes with no access rule in tests/test_security_sweep.py RULES (add one):\n"
        + "\n".join(f"  {r.key}  /{r.template}" for r in missing)
    )
    assert not unfilled, (
        f"URL parameters with no object builder in tests/test_security_sweep.py PARAMS: {unfilled}"
    )
    return routes


def test_every_route_is_classified():
    routes = _classified()
    # The walk reaches every kind of route: console, partials, exports, API, webhook, admin.
    keys = {r.key for r in routes}
    for expected in ("console:overview", "usage:calls_export", "api-key-detail", "stripe-webhook"):
        assert expected in keys
    assert any(r.access.kind == "admin" for r in routes)
    # Every filled URL resolves back to its own pattern.
    for route in routes:
        if route.access.kind == "admin":
            continue
        values = {p: "1" if param_kind(route, p) != "call" else "req-1" for p in route.params}
        if route.key == "accounts:invitation_accept":
            values = {"token": "abc"}
        match = resolve(fill(route.template, values))
        local = route.key.rsplit(":", 1)[-1]
        assert match.url_name == local, (route.key, match.url_name)


def test_anonymous_visitors(world):
    sweep = Sweep()
    _sweep_anonymous(sweep, _classified(), world["a"])
    assert not sweep.failures, sweep.report()


@pytest.mark.parametrize("role", ROLES)
def test_each_role(world, role):
    sweep = Sweep()
    a, b = world["a"], world["b"]
    before = snapshot(b.org)
    _sweep_member(sweep, _classified(), a.members[role], role, a, b, role)
    assert not sweep.failures, sweep.report()
    assert snapshot(b.org) == before, "a request changed another organization's data"


def test_member_of_another_organization(world):
    """Org B's owner: everything of org A is out of reach, its own opens."""
    sweep = Sweep()
    a, b = world["a"], world["b"]
    before = snapshot(a.org)
    _sweep_member(sweep, _classified(), b.members[Role.OWNER], Role.OWNER, b, a, "outsider")
    assert not sweep.failures, sweep.report()
    assert snapshot(a.org) == before, "a request changed another organization's data"


def test_a_user_without_an_organization_is_refused_everywhere(world):
    sweep = Sweep()
    client = _client()
    client.force_login(UserFactory())
    for route in _classified():
        if route.access.kind not in ("page", "api"):
            continue
        url = url_for(route, world["a"])
        for method in methods_to_try(route):
            r = sweep.send(client, method, url, api=route.access.kind == "api")
            if route.key == "accounts:password_change":
                sweep.expect("no-org", method, url, r, {200, 302}, "own password")
            else:
                sweep.expect("no-org", method, url, r, {403, 404, 405}, "no organization")
    assert not sweep.failures, sweep.report()


# --- the gateway's paths (not Django URLs) -------------------------------------------------

GATEWAY_CALLS = [
    # (protocol, method, path, body)
    ("openai", "POST", "/v1/chat/completions", {"model": "sim-chat-small", "messages": []}),
    ("openai", "POST", "/v1/completions", {"model": "sim-chat-small", "prompt": "hi"}),
    ("openai", "POST", "/v1/embeddings", {"model": "sim-embed", "input": "hi"}),
    ("openai", "GET", "/v1/models", None),
    ("openai", "GET", "/v1/models/sim-chat-small", None),
    ("anthropic", "POST", "/v1/messages", {"model": "sim-chat-small", "max_tokens": 5}),
    ("anthropic", "POST", "/v1/messages/count_tokens", {"model": "sim-chat-small"}),
    ("anthropic", "GET", "/v1/models", None),
    ("gemini", "POST", "/v1beta/models/sim-chat-small:generateContent", {"contents": []}),
    ("gemini", "POST", "/v1beta/models/sim-chat-small:streamGenerateContent", {"contents": []}),
    ("gemini", "POST", "/v1beta/models/sim-chat-small:countTokens", {"contents": []}),
    ("gemini", "POST", "/v1beta/models/sim-embed:embedContent", {"content": {}}),
    ("gemini", "POST", "/v1beta/models/sim-embed:batchEmbedContents", {"requests": []}),
    ("gemini", "GET", "/v1beta/models", None),
    ("gemini", "GET", "/v1beta/models/sim-chat-small", None),
]
# Where each protocol's clients send the key.
KEY_HEADERS = {
    "openai": lambda raw: {"Authorization": f"Bearer {raw}"},
    "anthropic": lambda raw: {"x-api-key": raw, "anthropic-version": "2023-06-01"},
    "gemini": lambda raw: {"x-goog-api-key": raw},
}
PROTOCOL_HEADERS = {"anthropic": {"anthropic-version": "2023-06-01"}}


def _auth_error(protocol: str, body: dict) -> bool:
    """Is ``body`` an authentication error in ``protocol``'s own format?"""
    if protocol == "openai":
        err = body.get("error") or {}
        return bool(err.get("message")) and "type" in err and "code" in err
    if protocol == "anthropic":
        err = body.get("error") or {}
        return body.get("type") == "error" and err.get("type") == "authentication_error"
    err = body.get("error") or {}
    return err.get("code") == 401 and err.get("status") == "UNAUTHENTICATED"


@pytest.fixture
def gateway_world(transactional_db, settings, tmp_path):
    """Org A with a private node and model, org B with its own key, a shared
    node for both; the real gateway on a loopback port. The nodes' URLs are
    a closed loopback port: nothing here may reach a node."""
    from tests.gateway_bridge.harness import running_gateway
    from tests.inference_node.factories import NodeFactory
    from usage.seed import seed_catalog

    settings.GATEWAY_SPOOL_DIR = tmp_path / "spool"
    settings.GATEWAY_LIMITS_STORE = "memory"
    settings.GATEWAY_RETRIES = 0
    seed_catalog()
    closed = "http://127.0.0.1:9/v1"
    NodeFactory(organization=None, base_url=closed, serves=["sim-chat-small", "sim-embed"])
    tenants = {}
    for tag in ("a", "b"):
        org = OrganizationFactory(name=f"Org {tag.upper()}", slug=f"gw-{tag}")
        owner = Actor(MembershipFactory(organization=org, role=Role.OWNER), "127.0.0.1")
        key, raw = issue_key(owner, name=f"key-{tag}")
        tenants[tag] = SimpleNamespace(org=org, owner=owner, key=key, raw=raw)
    NodeFactory(organization=tenants["a"].org, base_url=closed, serves=["acme-private"])
    _narrow, narrow_raw = issue_key(tenants["a"].owner, allowed_models=["sim-chat-small"])
    tenants["a"].narrow_raw = narrow_raw
    with running_gateway() as gw:
        yield SimpleNamespace(gw=gw, **tenants)


def _gateway_request(gw, method, path, body=None, headers=None):
    import http.client
    import json

    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        payload = json.dumps(body) if body is not None else None
        conn.request(
            method,
            path,
            body=payload,
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, data
    finally:
        conn.close()


def _model_names(protocol: str, data: bytes) -> set[str]:
    import json

    body = json.loads(data)
    if protocol == "gemini":
        return {m["name"].removeprefix("models/") for m in body["models"]}
    return {m["id"] for m in body["data"]}


def test_gateway_paths_without_a_key_answer_401_in_their_protocols_format(gateway_world):
    import json

    gw = gateway_world.gw
    failures = []
    for protocol, method, path, body in GATEWAY_CALLS:
        for label, headers in (
            ("no key", dict(PROTOCOL_HEADERS.get(protocol, {}))),
            ("unknown key", KEY_HEADERS[protocol]("sk-abcdefghij_" + "x" * 40)),
            ("malformed key", KEY_HEADERS[protocol]("not-a-key")),
            ("revoked-looking key", KEY_HEADERS[protocol](gateway_world.a.raw[:-1] + "Z")),
        ):
            status, data = _gateway_request(gw, method, path, body, headers)
            try:
                parsed = json.loads(data)
            except ValueError:
                parsed = {}
            if status != 401 or not _auth_error(protocol, parsed):
                failures.append(f"{label}: {method} {path} -> {status} {data[:200]!r}")
    assert not failures, "\n".join(failures)
    # Nothing was recorded for calls without a valid key.
    assert gw.emitter.events == []


def test_another_organizations_key_sees_none_of_its_models(gateway_world):
    w = gateway_world
    for protocol, path in (
        ("openai", "/v1/models"),
        ("anthropic", "/v1/models"),
        ("gemini", "/v1beta/models"),
    ):
        status, data = _gateway_request(w.gw, "GET", path, headers=KEY_HEADERS[protocol](w.a.raw))
        assert status == 200, data
        assert {"acme-private", "sim-chat-small"} <= _model_names(protocol, data)
        status, data = _gateway_request(w.gw, "GET", path, headers=KEY_HEADERS[protocol](w.b.raw))
        assert status == 200, data
        names = _model_names(protocol, data)
        assert "sim-chat-small" in names and "acme-private" not in names, (protocol, names)
        # A key narrowed to one model lists only that one.
        status, data = _gateway_request(
            w.gw, "GET", path, headers=KEY_HEADERS[protocol](w.a.narrow_raw)
        )
        assert _model_names(protocol, data) == {"sim-chat-small"}, (protocol, data)
    status, _ = _gateway_request(
        w.gw, "GET", "/v1/models/acme-private", headers=KEY_HEADERS["openai"](w.b.raw)
    )
    assert status == 404
    status, _ = _gateway_request(
        w.gw, "GET", "/v1beta/models/acme-private", headers=KEY_HEADERS["gemini"](w.b.raw)
    )
    assert status == 404
    # Org B cannot call org A's private model either: refused before any node.
    chat = {"model": "acme-private", "messages": [{"role": "user", "content": "hi"}]}
    status, data = _gateway_request(
        w.gw, "POST", "/v1/chat/completions", chat, KEY_HEADERS["openai"](w.b.raw)
    )
    assert status == 404, data
    messages = {
        "model": "acme-private",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    }
    status, data = _gateway_request(
        w.gw, "POST", "/v1/messages", messages, KEY_HEADERS["anthropic"](w.b.raw)
    )
    assert status == 404, data
    status, data = _gateway_request(
        w.gw,
        "POST",
        "/v1beta/models/acme-private:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        KEY_HEADERS["gemini"](w.b.raw),
    )
    assert status == 404, data


# --- console forms: whatever is typed, never a 500 ----------------------------------------

_INPUT_NAME = re.compile(r'<(?:input|select|textarea)[^>]*\sname="([^"]+)"')
# Field names of POST-only buttons, which have no page of their own to read them from.
COMMON_FIELDS = (
    "name", "role", "reason", "amount", "reference", "grace_seconds", "organization",
    "period", "status", "members", "revoke", "action", "full", "email", "kind",
)  # fmt: skip


HOSTILE = [
    "", "0", "-1", "1.5", "1e309", "9" * 30, "NaN", "inf", "2025-13-45", "acme",
    "a\x00b", "<script>", "\uff11\uff12", "1,000",
]  # fmt: skip


def _form_values():
    from hypothesis import strategies as st

    return st.one_of(
        st.text(max_size=20),
        st.sampled_from(HOSTILE),
        st.integers(-(2**70), 2**70).map(str),
    )


def _post_form(client, user, url, data, failures: list[str]) -> None:
    client.force_login(user)
    try:
        response = client.post(url, data)
    except Exception as exc:
        failures.append(f"POST {url} {data!r}: raised {type(exc).__name__}: {exc}")
        return
    if response.status_code >= 500:
        failures.append(f"POST {url} {data!r}: {response.status_code}")


def _fuzz_form(client, user, url, fields, failures: list[str]) -> None:
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=fields)
    def post(data):
        _post_form(client, user, url, data, failures)

    post()


def test_console_forms_never_answer_500(world):
    """Every console route that takes a POST, as the owner, with the fields its
    page shows (and common ones) set to arbitrary and hostile values: a form
    error, a message or a refusal, never a 500."""
    from hypothesis import strategies as st

    a = world["a"]
    failures: list[str] = []
    for route in _classified():
        if route.access.kind != "page" or route.key in ("accounts:logout",):
            continue
        url = url_for(route, a)
        client = _client(a.members[Role.OWNER])
        page = client.get(url)
        if page.status_code not in (200, 405):
            continue
        names = set(COMMON_FIELDS)
        if page.status_code == 200 and "text/html" in page.get("Content-Type", ""):
            names |= set(_INPUT_NAME.findall(page.content.decode())) - {"csrfmiddlewaretoken"}
        fields = st.dictionaries(st.sampled_from(sorted(names)), _form_values(), max_size=8)

        # Every field at once with each hostile value, then arbitrary mixes.
        owner = a.members[Role.OWNER].user
        for value in HOSTILE:
            _post_form(client, owner, url, dict.fromkeys(names, value), failures)
        _fuzz_form(client, owner, url, fields, failures)
    assert not failures, "\n".join(failures[:30])
