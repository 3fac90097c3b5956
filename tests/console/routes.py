"""The console's routes as the access tests see them: every route of the URL
configuration, walked from ``get_resolver()`` (includes, namespaces and DRF
routers alike), classified by ``RULES`` (who may open it) and filled by
``PARAMS`` with a real object of one organization or another (``world``: two
organizations, one member per role, one object of every kind: ``build_world``); ``Sweep``
sends the requests and collects every departure from the rules.

Each route must match a rule in ``RULES`` (by its namespaced name, first match
wins); a route that matches none fails ``test_every_route_is_classified``
(``tests/console/test_route_access.py``) with its name and path, so a new
page, partial, export or API endpoint is either covered by an existing rule
(``invoicing:*``, ``analytics:*``) or classified before it lands. A URL
parameter with no builder in ``PARAMS`` fails the same way.

Used by ``test_route_access`` (anonymous visitors, each role, another
organization's member) and ``test_form_fuzz`` (hostile form input).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from django.test import Client
from django.urls import get_resolver

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
# Alert rules: owners, admins and finance all of them, developers those on their own keys.
ALERTS = (P.BILLING_MANAGE, P.KEYS_MANAGE_OWN)

# First match wins; the key is "namespace:name" (names of the API's routers
# have no namespace). Unnamed routes are matched as "namespace:<path>".
RULES: list[tuple[str, Access]] = [
    # public
    ("console:livez", Access("public")),  # liveness without dependencies: {"status": "ok"}
    ("console:health", Access("public")),
    ("console:readyz", Access("public")),  # readiness: names its checks, no data
    ("accounts:login", Access("public")),
    ("accounts:login_code", Access("public")),  # the second sign-in step (a pending session)
    ("accounts:logout", Access("public")),
    ("accounts:set_language", Access("public")),  # the language cookie; a signed-in user keeps it
    ("accounts:invitation_accept", Access("public")),  # the token is the credential
    ("accounts:password_reset*", Access("public")),  # the e-mailed token is the credential
    ("stripe-webhook", Access("webhook")),
    ("admin:login", Access("public")),
    ("admin:logout", Access("public")),
    ("admin:*", Access("admin")),
    # console pages
    ("console:overview", Access("page", (P.ORG_VIEW,))),
    ("accounts:password_change", Access("page")),
    ("accounts:two_factor", Access("page")),
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
    ("inference_node:credential_*", Access("page", (P.NODES_MANAGE,))),
    ("usage:models", Access("page")),
    ("usage:*", Access("page", USAGE)),
    ("invoicing:sla_staff_*", Access("admin")),  # platform staff only: 404 for everyone else
    ("invoicing:*", BILLING),  # billing: finance, owners, admins only
    ("analytics:margin*", Access("admin")),  # platform staff only: 404 for everyone else
    ("analytics:index", Access("page", (*USAGE, P.BILLING_VIEW))),
    ("analytics:marketplace", Access("page")),  # every member: platform-wide figures
    # No sign-in; 404 unless CONSOLE_PUBLIC_MARKETPLACE / CONSOLE_PUBLIC_STATUS is on; no tenant data.
    ("analytics:public_*", Access("public")),
    ("analytics:billing", Access("page", (P.BILLING_VIEW,))),
    ("analytics:chart_billing", Access("page", (P.BILLING_VIEW,))),
    ("analytics:chart_overview_sla", Access("page", (P.BILLING_VIEW,))),
    ("analytics:*", Access("page", USAGE)),
    # Outbound webhooks: whoever sees billing reads them, owners and admins manage them.
    ("webhooks:destinations", Access("page", (P.BILLING_VIEW,))),
    ("webhooks:deliveries", Access("page", (P.BILLING_VIEW,))),
    ("webhooks:*", Access("page", (P.ORG_MANAGE,))),
    # capacity planning: load tests are read with all usage, run and cancelled by owners and admins
    ("capacity:cancel", Access("page", (P.ORG_MANAGE,))),
    ("capacity:*", Access("page", (P.USAGE_VIEW_ALL,), (P.ORG_MANAGE,))),
    ("alerts:*", Access("page", ALERTS)),
    # REST API
    ("api-schema", Access("public")),  # the OpenAPI description: no data
    ("api-key-*", Access("api", KEYS_SEE, (P.KEYS_MANAGE_OWN,))),
    ("sub-account-*", Access("api", (P.SUBACCOUNTS_VIEW,), (P.SUBACCOUNTS_MANAGE,))),
    ("member-*", Access("api", (P.MEMBERS_VIEW,), (P.MEMBERS_MANAGE,))),
    ("invitation-*", Access("api", (P.MEMBERS_MANAGE,))),
    ("node-*", Access("api", (P.NODES_VIEW,), (P.NODES_MANAGE,))),
    ("call-*", Access("api", USAGE)),
    ("marketplace", Access("api")),  # every member: the marketplace page's figures
    ("spend-attribution", Access("api", USAGE)),
    ("balance", BILLING_API),
    ("invoice-*", BILLING_API),
    ("credit-note-*", BILLING_API),
    ("ledger-entry-*", BILLING_API),
    ("webhook-destination-*", Access("api", (P.BILLING_VIEW,), (P.ORG_MANAGE,))),
    ("webhook-event-*", Access("api", (P.BILLING_VIEW,))),
    ("webhook-delivery-*", Access("api", (P.BILLING_VIEW,), (P.ORG_MANAGE,))),
    ("load-test-*", Access("api", (P.USAGE_VIEW_ALL,), (P.ORG_MANAGE,))),
    ("alert-rule-*", Access("api", ALERTS)),
    ("alert-incident-*", Access("api", ALERTS)),
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
    ("accounts:password_reset_confirm", "uidb64", "bogus_token"),
    ("accounts:password_reset_confirm", "token", "bogus_token"),
    ("admin:*", "*", "admin_value"),
    ("*", "membership_id", "membership"),
    ("*", "invitation_id", "invitation"),
    ("*", "sub_account_id", "sub_account"),
    ("*", "key_id", "api_key"),
    ("*", "node_id", "node"),
    ("*", "credential_id", "credential"),
    ("*", "request_id", "call"),
    ("*", "invoice_id", "invoice"),
    ("*", "credit_note_id", "credit_note"),
    ("*", "load_test_id", "load_test"),
    ("invoicing:refund_mark_paid", "payment_id", "manual_refund"),
    ("api-key-*", "pk", "api_key"),
    ("sub-account-*", "pk", "sub_account"),
    ("member-*", "pk", "membership"),
    ("invitation-*", "pk", "invitation"),
    ("node-*", "pk", "node"),
    ("invoice-*", "pk", "invoice"),
    ("credit-note-*", "pk", "credit_note"),
    ("ledger-entry-*", "pk", "ledger_entry"),
    ("*", "destination_id", "webhook_destination"),
    ("*", "delivery_id", "webhook_delivery"),
    ("webhook-destination-*", "pk", "webhook_destination"),
    ("webhook-event-*", "pk", "webhook_event"),
    ("webhook-delivery-*", "pk", "webhook_delivery"),
    ("load-test-*", "pk", "load_test"),
    ("*", "rule_id", "alert_rule"),
    ("alert-rule-*", "pk", "alert_rule"),
    ("alert-incident-*", "pk", "alert_incident"),
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
    from console.features.capacity.models import LoadTest, LoadTestStep
    from console.features.webhooks.models import Delivery, Destination, OutboundEvent
    from invoicing.models import Payment
    from invoicing.services import (
        credit_note_create,
        invoice_draft,
        invoice_finalize,
        prepaid_adjust,
    )
    from tests.inference_node.factories import CredentialFactory, NodeFactory
    from tests.usage.factories import event
    from usage.ingest import ingest_events

    owner = Actor(members[Role.OWNER], "203.0.113.5")
    finance = Actor(members[Role.FINANCE], "203.0.113.5")
    sub = sub_account_create(actor=owner, name=f"team-{org.slug}")
    # The developer's own key: every role that sees keys sees this one.
    key, _raw = issue_key(Actor(members[Role.DEVELOPER]), name=f"dev-{org.slug}")
    invitation, _ = invitation_create(actor=owner, email=f"new@{org.slug}.example", role="viewer")
    node = NodeFactory(organization=org, name=f"node-{org.slug}", serves=["sim-chat-small"])
    credential = CredentialFactory(node=node)
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
    # An alert rule on the developer's own key (every role that manages alerts
    # reaches it) with an incident in its history.
    from console.features.alerts.models import AlertRule, Incident

    alert_rule = AlertRule.objects.create(
        organization=org, name=f"cap-{org.slug}", kind="spend_cap", scope="key", api_key=key,
        percents=[50, 80, 100], created_by=members[Role.DEVELOPER].user,
    )  # fmt: skip
    alert_incident = Incident.objects.create(
        rule=alert_rule, organization_id=org.pk, subject=f"key:{key.pk}",
        subject_label=key.name, threshold_key="80", period="d:2025-03-15", value=800, threshold=800,
    )  # fmt: skip
    # A refund finance pays by hand, pending (the note's refund, as a paid invoice's would be).
    refund = Payment.objects.create(
        organization=org, invoice=invoice, credit_note=note, kind="refund",
        method="bank_transfer", currency=invoice.currency, amount_minor=1, reference=note.number,
    )  # fmt: skip
    # An outbound webhook destination with one failed delivery (to a closed port).
    destination = Destination.objects.create(
        organization=org, name=f"hook-{org.slug}", kind="webhook",
        url="http://127.0.0.1:9/hook", secret="whsec_sweep_not_secret", events=["all"],
    )  # fmt: skip
    outbound = OutboundEvent.objects.create(
        organization=org, event_id=f"evt-{org.slug}", type="invoice.paid", data={}
    )
    delivery = Delivery.objects.create(
        event=outbound, destination=destination, status="abandoned", attempts=1,
        last_error="cannot connect", next_attempt_at=None,
    )  # fmt: skip
    load_test = LoadTest.objects.create(
        organization=org, started_by=members[Role.OWNER], model="sim-chat-small",
        input_tokens=64, output_tokens=8, prefix_share=50, steps=[2, 4], step_seconds=5,
        budget=1_000_000, status="running", knee_step=1,
    )  # fmt: skip
    for index, (clients, qps, p99) in enumerate([(2, 20.0, 100.0), (4, 21.0, 190.0)]):
        LoadTestStep.objects.create(
            load_test=load_test, index=index, concurrency=clients, seconds=5.0, requests=100,
            ok=99, errors=1, requests_per_second=qps, output_tokens_per_second=qps * 8,
            ttft_p50_ms=20.0, ttft_p99_ms=30.0, ttft_p999_ms=31.0, latency_p50_ms=p99 / 2,
            latency_p99_ms=p99, latency_p999_ms=p99 + 1,
        )  # fmt: skip
    return SimpleNamespace(
        org=org,
        members=members,
        values={
            "membership": members[Role.VIEWER].pk,
            "invitation": invitation.pk,
            "sub_account": sub.pk,
            "api_key": key.pk,
            "node": node.pk,
            "credential": credential.pk,
            "call": events[0]["request_id"],
            "invoice": invoice.pk,
            "credit_note": note.pk,
            "manual_refund": refund.pk,
            "ledger_entry": entry.pk,
            "webhook_destination": destination.pk,
            "webhook_event": outbound.pk,
            "webhook_delivery": delivery.pk,
            "load_test": load_test.pk,
            "alert_rule": alert_rule.pk,
            "alert_incident": alert_incident.pk,
            "bogus_token": "not-a-real-invitation-token",
        },
    )


def build_world(settings):
    """Two organizations, each with one member per role and one object of
    every kind; ``a`` is the one under test, ``b`` the other tenant (the
    ``world`` fixture of the tests that sweep the routes)."""
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
    from console.features.alerts.models import AlertRule
    from inference_node.models import Credential, Node
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
        "node_keys": sorted(
            Credential.objects.filter(node__organization=org).values_list("pk", "status", "weight")
        ),
        "invoices": rows(Invoice, "status", "total", "paid_minor"),
        "credit_notes": rows(CreditNote, "amount"),
        "ledger": rows(LedgerEntry, "amount"),
        "audit": AuditEvent.objects.filter(organization=org).count(),
        "alert_rules": rows(AlertRule, "name", "kind", "enabled", "percents", "threshold"),
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


def client_for(membership=None) -> Client:
    client = Client(raise_request_exception=True)
    if membership is not None:
        client.force_login(membership.user)
    return client


def sweep_anonymous(sweep: Sweep, routes: list[Route], tenant) -> None:
    client = client_for()
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


def sweep_member(sweep: Sweep, routes, membership, role: str, own, other, who: str) -> None:
    """``membership`` (of ``own``'s organization, with ``role``) against every
    route: non-object routes and own objects by the rules, ``other``'s objects
    never reachable."""
    for route in routes:
        access = route.access
        if access.kind in ("public", "webhook"):
            continue
        client = client_for(membership)  # fresh each route: a POST to logout must not leak
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


def classified() -> list[Route]:
    routes = all_routes()
    missing = [r for r in routes if r.access is None]
    unfilled = [
        (r.key, p) for r in routes if r.access is not None for p in r.params if not param_kind(r, p)
    ]
    assert not missing, (
        "routes with no access rule in tests/console/routes.py RULES (add one):\n"
        + "\n".join(f"  {r.key}  /{r.template}" for r in missing)
    )
    assert not unfilled, (
        f"URL parameters with no object builder in tests/console/routes.py PARAMS: {unfilled}"
    )
    return routes
