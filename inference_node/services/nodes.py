"""Writes of the node registry: register, edit, drain / enable / disable and
test a node or vendor channel. Each takes an ``Actor``, checks
``Perm.NODES_MANAGE``, runs in one transaction and records an audit event.
Shared platform nodes (no organization) are the platform staff's, changed in
the Django admin only; here they answer "permission denied".

A preset (``inference_node.presets``) fills a new node's kind, base URL, API
path and health check where the caller gave none; on an edit it is only a
label. A vendor channel (health check other than ``health``) needs at least
one API key: the create call takes the first ones (``credentials``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from accounts.facade import (
    Actor,
    Conflict,
    FieldErrors,
    Perm,
    ValidationFailed,
    audit_record,
    changed,
    clean_unique_name,
)
from console.kernel.crypto import hint
from inference_node import health
from inference_node.models import Credential, HealthCheck, Node, NodeKind, NodeModel, NodeStatus
from inference_node.presets import PRESETS, get_preset
from inference_node.selectors import get_node
from inference_node.services._common import after_change, forget_health, mark_down_if_keyless
from inference_node.services.validation import (
    COST_FIELDS,
    MAX_CONCURRENCY,
    MAX_WEIGHT,
    ModelSpec,
    check_kind_and_health,
    clean_api_path,
    clean_base_url,
    clean_choice,
    clean_credentials,
    clean_int,
    clean_labels,
    clean_models,
)

NODE_FIELDS = (
    "name",
    "base_url",
    "token",
    "weight",
    "max_concurrency",
    "labels",
    "models",
    "kind",
    "preset",
    "api_path",
    "health_check",
)
# Marked for translation; raised as _(NEEDS_A_KEY) (English under /api/).
NEEDS_A_KEY = gettext_noop(
    "Add at least one API key: a vendor channel cannot call the vendor without one."
)
# Changing these means another server or API: what the prober saw is void.
_ADDRESS_FIELDS = ("base_url", "kind", "api_path", "health_check")


def _clean_preset(value) -> str:
    key = str(value or "").strip()
    if key and key not in PRESETS:
        raise ValueError(
            _("Choose one of the presets: %(presets)s.") % {"presets": ", ".join(PRESETS)}
        )
    return key


def _clean(actor: Actor, data: dict, *, instance: Node | None = None) -> dict:
    errors = FieldErrors()
    out: dict = {}
    if "name" in data:
        out["name"] = clean_unique_name(
            errors,
            data["name"],
            Node.objects.filter(organization_id=actor.organization_id),
            noun=_("node"),  # in the user's language: the message names it
            instance=instance,
        )
    if "base_url" in data:
        out["base_url"] = errors.run(
            "base_url",
            lambda url: clean_base_url(url, allow_private=settings.NODE_ALLOW_PRIVATE_URLS),
            data["base_url"],
        )
    if "token" in data:
        token = (data["token"] or "").strip()
        if len(token) > 500:
            errors.add("token", _("Use at most %(max)s characters.") % {"max": 500})
        elif any(c.isspace() for c in token):
            errors.add("token", _("A bearer token has no spaces."))
        out["token"] = token
    for key, label, maximum in (
        ("weight", gettext_noop("Weight"), MAX_WEIGHT),
        ("max_concurrency", gettext_noop("Max concurrency"), MAX_CONCURRENCY),
    ):
        if key in data:
            out[key] = errors.run(key, clean_int, data[key], _(label), maximum)
    if "labels" in data:
        out["labels"] = errors.run("labels", clean_labels, data["labels"])
    if "models" in data:
        out["models"] = errors.run("models", clean_models, data["models"])
    if "kind" in data:
        out["kind"] = errors.run("kind", clean_choice, data["kind"], NodeKind, gettext_noop("kind"))
    if "preset" in data:
        out["preset"] = errors.run("preset", _clean_preset, data["preset"])
    if "api_path" in data:
        out["api_path"] = errors.run("api_path", clean_api_path, data["api_path"])
    if "health_check" in data:
        out["health_check"] = errors.run(
            "health_check",
            clean_choice,
            data["health_check"],
            HealthCheck,
            gettext_noop("health check"),
        )
    if "credentials" in data:
        out["credentials"] = errors.run("credentials", clean_credentials, data["credentials"])
    kind = out.get("kind") or getattr(instance, "kind", None)
    check = out.get("health_check") or getattr(instance, "health_check", None)
    if kind and check and "health_check" not in errors.errors:
        errors.run("health_check", check_kind_and_health, kind, check)
    errors.raise_if_any()
    return out


def _audit_params(values: dict) -> dict:
    """What changed, without secrets: whether a token is set, the keys' hints."""
    params = {k: v for k, v in values.items() if k not in ("token", "models", "credentials")}
    if "token" in values:
        params["token"] = "set" if values["token"] else "cleared"
    if "models" in values:
        params["models"] = [m.public_name for m in values["models"]]
    if values.get("credentials"):
        params["credentials"] = [hint(c.secret) for c in values["credentials"]]
    return params


def _model_row(spec: ModelSpec) -> tuple:
    return (
        spec.upstream_name,
        spec.context_window,
        spec.tier,
        spec.weight,
        spec.cost_currency,
        *(getattr(spec, f) for f in COST_FIELDS),
    )


def _save_models(node: Node, specs: list[ModelSpec]) -> dict | None:
    before = {
        m.public_name: _model_row(m)  # a NodeModel has every ModelSpec attribute
        for m in node.models.all()
    }
    after = {s.public_name: _model_row(s) for s in specs}
    if before == after:
        return None
    node.models.all().delete()
    NodeModel.objects.bulk_create(NodeModel(node=node, **vars(s)) for s in specs)
    changed_models = sorted(
        name for name in set(before) | set(after) if before.get(name) != after.get(name)
    )
    return {"models": [sorted(before), sorted(after)], "models_changed": changed_models}


def _with_preset(fields: dict) -> dict:
    """The preset's defaults for what the caller left empty."""
    preset = get_preset(fields.get("preset"))
    if preset is None:
        return fields
    out = dict(fields)
    out["kind"] = out.get("kind") or preset.kind
    out["base_url"] = out.get("base_url") or preset.base_url
    if out.get("api_path") is None:
        out["api_path"] = preset.api_path
    out["health_check"] = out.get("health_check") or preset.health_check
    return out


# --- actions ----------------------------------------------------------------------------


def node_create(
    *,
    actor: Actor,
    name: str,
    base_url: str = "",
    token: str = "",
    weight: int = 1,
    max_concurrency: int = 64,
    labels: dict | None = None,
    models: list | None = None,
    kind: str | None = None,
    preset: str = "",
    api_path: str | None = None,
    health_check: str | None = None,
    credentials: list | None = None,
) -> Node:
    """Register one of the organization's own nodes or vendor channels (health
    unknown until probed). ``credentials``: the first API keys of its pool
    (dicts or ``CredentialSpec`` with ``secret``, ``label``, ``weight``,
    ``rpm_limit``, ``tpm_limit``, ``max_concurrency``)."""
    actor.require(Perm.NODES_MANAGE)
    fields = _with_preset(
        {
            "name": name,
            "base_url": base_url,
            "token": token,
            "weight": weight,
            "max_concurrency": max_concurrency,
            "labels": labels,
            "models": models,
            "kind": kind,
            "preset": preset,
            "api_path": api_path,
            "health_check": health_check,
            "credentials": credentials,
        }
    )
    fields["kind"] = fields["kind"] or NodeKind.OPENAI_COMPATIBLE
    fields["api_path"] = fields["api_path"] or ""
    # Only a self-hosted server has /health; a vendor's API is judged by its model list.
    fields["health_check"] = fields["health_check"] or (
        HealthCheck.HEALTH if fields["kind"] == NodeKind.OPENAI_COMPATIBLE else HealthCheck.MODELS
    )
    values = _clean(actor, fields)
    if values["health_check"] != HealthCheck.HEALTH and not values["credentials"]:
        raise ValidationFailed.from_fields({"credentials": _(NEEDS_A_KEY)})
    try:
        return _insert(actor, values)
    except IntegrityError:
        raise Conflict(
            _("A node named '%(name)s' already exists.") % {"name": values["name"]}
        ) from None


@transaction.atomic
def _insert(actor: Actor, values: dict) -> Node:
    """The new node with its models and first keys, audited (``values`` cleaned)."""
    specs = values.pop("models")
    keys = values.pop("credentials")
    node = Node.objects.create(organization_id=actor.organization_id, **values)
    _save_models(node, specs)
    Credential.objects.bulk_create(
        Credential(node=node, secret_hint=hint(k.secret), **vars(k)) for k in keys
    )
    audit_record(
        actor=actor,
        action="node.create",
        target=node,
        params=_audit_params({**values, "models": specs, "credentials": keys}),
    )
    after_change()
    return node


def node_update(*, actor: Actor, node_id: int, **fields) -> Node:
    """Change any of ``NODE_FIELDS``; ``models`` replaces the whole list. The
    key pool has its own services (``credential_*``)."""
    actor.require(Perm.NODES_MANAGE)
    unknown = set(fields) - set(NODE_FIELDS)
    if unknown:
        raise ValidationFailed.from_fields(dict.fromkeys(sorted(unknown), _("Unknown field.")))
    try:
        with transaction.atomic():
            node = get_node(actor, node_id, for_change=True, lock=True)
            values = _clean(actor, fields, instance=node)
            check = values.get("health_check", node.health_check)
            if check != HealthCheck.HEALTH and not node.credentials.exists():
                raise ValidationFailed.from_fields({"health_check": _(NEEDS_A_KEY)})
            specs = values.pop("models", None)
            token_changed = "token" in values and values["token"] != node.token
            token = values.pop("token", None)
            diff = changed(node, values)
            if token_changed:
                node.token = token
                diff["token"] = "set" if token else "cleared"
            if specs is not None:
                diff.update(_save_models(node, specs) or {})
            if any(f in diff for f in _ADDRESS_FIELDS):
                forget_health(node)  # what was seen was another server
            if diff:
                node.save()
                audit_record(actor=actor, action="node.update", target=node, params=diff)
                mark_down_if_keyless(node)  # forgotten health must not hide a keyless channel
                after_change()
    except IntegrityError:
        raise Conflict(_("A node with that name already exists.")) from None
    return node


_STATUS_ACTIONS: dict[str, str] = {
    NodeStatus.ACTIVE: "node.enable",
    NodeStatus.DRAINING: "node.drain",
    NodeStatus.DISABLED: "node.disable",
}


def node_set_status(*, actor: Actor, node_id: int, status: str) -> Node:
    """Enable (active), drain or disable a node. Draining and disabled nodes get
    no new calls; draining ones are still probed so their health stays known."""
    actor.require(Perm.NODES_MANAGE)
    if status not in NodeStatus.values:
        raise ValidationFailed.from_fields({"status": _("Choose active, draining or disabled.")})
    with transaction.atomic():
        node = get_node(actor, node_id, for_change=True, lock=True)
        if node.status != status:
            before = node.status
            node.status = status
            if before == NodeStatus.DISABLED:
                # A disabled node was not probed: its old health proves nothing.
                forget_health(node)
            node.save()
            audit_record(
                actor=actor,
                action=_STATUS_ACTIONS[status],
                target=node,
                params={"status": [before, status]},
            )
            after_change()
    return node


@dataclass(frozen=True)
class NodeTestOutcome:
    node: Node
    result: health.ProbeResult
    change: health.HealthChange | None
    # False for a channel judged by traffic: the test checked its key and
    # model list but leaves its health to the traffic.
    recorded: bool = True


def node_test(*, actor: Actor, node_id: int) -> NodeTestOutcome:
    """Probe one node now (whatever its status) and record the result like a
    scheduled probe would. A channel judged by traffic gets the vendor probe
    (its model list with its first active key), not recorded. The result
    returned for an organization's node is ``ProbeResult.relayed``: its
    health and model ids only."""
    actor.require(Perm.NODES_MANAGE)
    node = get_node(actor, node_id, for_change=True)
    target = health.ProbeTarget.of(node)
    by_traffic = node.health_check == HealthCheck.TRAFFIC
    if by_traffic:
        target = replace(target, health_check=HealthCheck.MODELS)
    (result,) = health.run_probes([target])
    shown = result.relayed() if node.organization_id is not None else result
    with transaction.atomic():
        recorded, change = (node, None) if by_traffic else health.record_probe(result)
        audit_record(
            actor=actor,
            action="node.test",
            target=node,
            params={"ok": result.ok, "latency_ms": result.latency_ms, "error": result.error},
        )
    return NodeTestOutcome(
        node=recorded or node, result=shown, change=change, recorded=not by_traffic
    )
