"""Writes of the node registry. Each takes an ``Actor``, checks
``Perm.NODES_MANAGE``, runs in one transaction and records an audit event.
Shared platform nodes (no organization) are the platform staff's, changed in
the Django admin only; here they answer "permission denied"."""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction

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
from inference_node import health
from inference_node.models import Node, NodeHealth, NodeModel, NodeStatus
from inference_node.selectors import get_node, invalidate_routing_snapshot

NODE_FIELDS = ("name", "base_url", "token", "weight", "max_concurrency", "labels", "models")
MAX_WEIGHT = 1000
MAX_CONCURRENCY = 100_000
MAX_CONTEXT_WINDOW = 100_000_000
MAX_MODELS = 200
MAX_LABELS = 20
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")
_MODEL_NAME = re.compile(r"^\S{1,200}$")


@dataclass(frozen=True)
class ModelSpec:
    public_name: str
    upstream_name: str
    context_window: int | None = None


# --- validation -------------------------------------------------------------------------


def clean_base_url(value, *, allow_private: bool = True) -> str:
    """A node's base URL, normalized. ``allow_private=False`` (a tenant's node
    when the operator says so) also refuses non-public addresses."""
    url = (value or "").strip()
    if not url:
        raise ValueError("Enter the node's base URL.")
    if len(url) > 500:
        raise ValueError("Use at most 500 characters.")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ValueError("Enter a valid URL, e.g. http://10.0.0.5:8000.") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("Use an http:// or https:// URL.")
    if not parts.hostname:
        raise ValueError("The URL needs a host name.")
    if parts.username or parts.password:
        raise ValueError("Put no credentials in the URL; use the token field.")
    if parts.query or parts.fragment:
        raise ValueError("The base URL takes no query string or fragment.")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        raise ValueError("Give the server's root without /v1; the gateway adds it.")
    if not allow_private:
        _refuse_internal_host(parts.hostname)
    return f"{parts.scheme}://{parts.netloc}{path}"


def _refuse_internal_host(host: str) -> None:
    """A tenant's node must be on the public internet (unless the operator allows
    private addresses): otherwise the gateway and the health prober would reach,
    on the tenant's behalf, whatever listens on this deployment's own network
    (metadata services, Redis, the database)."""

    try:
        addresses = {ipaddress.ip_address(host)}
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError:
            raise ValueError(f"The host name {host!r} does not resolve.") from None
        addresses = {ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos}
    for address in addresses:
        mapped = getattr(address, "ipv4_mapped", None) or address
        if not mapped.is_global or mapped.is_multicast:
            raise ValueError(
                f"{host} is a private, loopback or reserved address ({mapped}); tenant nodes "
                "must be reachable on the public internet."
            )


def _clean_int(value, label: str, maximum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{label} must be a whole number.")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{label} must be a whole number.") from None
    if number != value and not isinstance(value, str):
        raise ValueError(f"{label} must be a whole number.")
    if not 1 <= number <= maximum:
        raise ValueError(f"{label} must be between 1 and {maximum}.")
    return number


def clean_labels(value) -> dict[str, str]:
    if value in (None, ""):
        return {}
    if not isinstance(value, dict):
        raise ValueError('Labels are a JSON object, e.g. {"region": "eu-west"}.')
    if len(value) > MAX_LABELS:
        raise ValueError(f"Use at most {MAX_LABELS} labels.")
    out = {}
    for key, val in value.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            raise ValueError(f"Label name {key!r} must be lower-case letters, digits, _ . -.")
        if not isinstance(val, (str, int, float)) or isinstance(val, bool):
            raise ValueError(f"Label {key!r} must have a text value.")
        text = str(val).strip()
        if len(text) > 120:
            raise ValueError(f"Label {key!r} may have at most 120 characters.")
        if text:
            out[key] = text
    return out


def clean_models(value) -> list[ModelSpec]:
    """A list of ``ModelSpec`` or of dicts with public_name, upstream_name
    (defaults to the public name) and context_window."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise ValueError("Models are a list.")
    if len(value) > MAX_MODELS:
        raise ValueError(f"A node may serve at most {MAX_MODELS} models.")
    out: list[ModelSpec] = []
    seen: set[str] = set()
    for item in value:
        if isinstance(item, ModelSpec):
            item = vars(item)
        if not isinstance(item, dict):
            raise ValueError("Each model needs a public_name.")
        public = str(item.get("public_name") or "").strip()
        upstream = str(item.get("upstream_name") or "").strip() or public
        if not public:
            raise ValueError("Each model needs a public name.")
        for name in (public, upstream):
            if not _MODEL_NAME.match(name):
                raise ValueError(f"Model name {name[:60]!r}: no spaces, at most 200 characters.")
        if public in seen:
            raise ValueError(f"Model {public!r} is listed twice.")
        seen.add(public)
        context = item.get("context_window")
        if context in (None, ""):
            context = None
        else:
            context = _clean_int(context, f"Context window of {public}", MAX_CONTEXT_WINDOW)
        out.append(ModelSpec(public, upstream, context))
    return out


def _clean(actor: Actor, data: dict, *, instance: Node | None = None) -> dict:
    errors = FieldErrors()
    out: dict = {}
    if "name" in data:
        out["name"] = clean_unique_name(
            errors,
            data["name"],
            Node.objects.filter(organization_id=actor.organization_id),
            noun="node",
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
            errors.add("token", "Use at most 500 characters.")
        elif any(c.isspace() for c in token):
            errors.add("token", "A bearer token has no spaces.")
        out["token"] = token
    if "weight" in data:
        out["weight"] = errors.run("weight", _clean_int, data["weight"], "Weight", MAX_WEIGHT)
    if "max_concurrency" in data:
        out["max_concurrency"] = errors.run(
            "max_concurrency",
            _clean_int,
            data["max_concurrency"],
            "Max concurrency",
            MAX_CONCURRENCY,
        )
    if "labels" in data:
        out["labels"] = errors.run("labels", clean_labels, data["labels"])
    if "models" in data:
        out["models"] = errors.run("models", clean_models, data["models"])
    errors.raise_if_any()
    return out


def _audit_params(values: dict) -> dict:
    """What changed, without the token (only whether one is set)."""
    params = {k: v for k, v in values.items() if k not in ("token", "models")}
    if "token" in values:
        params["token"] = "set" if values["token"] else "cleared"
    if "models" in values:
        params["models"] = [m.public_name for m in values["models"]]
    return params


def _save_models(node: Node, specs: list[ModelSpec]) -> dict | None:
    before = {m.public_name: (m.upstream_name, m.context_window) for m in node.models.all()}
    after = {s.public_name: (s.upstream_name, s.context_window) for s in specs}
    if before == after:
        return None
    node.models.all().delete()
    NodeModel.objects.bulk_create(
        NodeModel(
            node=node,
            public_name=s.public_name,
            upstream_name=s.upstream_name,
            context_window=s.context_window,
        )
        for s in specs
    )
    return {"models": [sorted(before), sorted(after)]}


def _forget_health(node: Node) -> None:
    """Back to "unknown" until the next probe: not routable before it answers."""
    node.health = NodeHealth.UNKNOWN
    node.consecutive_failures = node.consecutive_successes = 0
    node.last_error = ""
    node.last_latency_ms = None
    node.discovered_models = []
    node.metrics_available = False
    node.running = node.waiting = node.kv_cache_usage = None
    node.prefix_cache_queries = node.prefix_cache_hits = node.prefix_cache_hit_rate = None


def _after_change() -> None:
    transaction.on_commit(invalidate_routing_snapshot)


# --- actions ----------------------------------------------------------------------------


def node_create(
    *,
    actor: Actor,
    name: str,
    base_url: str,
    token: str = "",
    weight: int = 1,
    max_concurrency: int = 64,
    labels: dict | None = None,
    models: list | None = None,
) -> Node:
    """Register one of the organization's own nodes (health unknown until probed)."""
    actor.require(Perm.NODES_MANAGE)
    values = _clean(
        actor,
        {
            "name": name,
            "base_url": base_url,
            "token": token,
            "weight": weight,
            "max_concurrency": max_concurrency,
            "labels": labels,
            "models": models,
        },
    )
    specs = values.pop("models")
    try:
        with transaction.atomic():
            node = Node.objects.create(organization_id=actor.organization_id, **values)
            _save_models(node, specs)
            audit_record(
                actor=actor,
                action="node.create",
                target=node,
                params=_audit_params({**values, "models": specs}),
            )
            _after_change()
    except IntegrityError:
        raise Conflict(f"A node named '{values['name']}' already exists.") from None
    return node


def node_update(*, actor: Actor, node_id: int, **fields) -> Node:
    """Change any of ``NODE_FIELDS``; ``models`` replaces the whole list."""
    actor.require(Perm.NODES_MANAGE)
    unknown = set(fields) - set(NODE_FIELDS)
    if unknown:
        raise ValidationFailed.from_fields(dict.fromkeys(sorted(unknown), "Unknown field."))
    try:
        with transaction.atomic():
            node = get_node(actor, node_id, for_change=True, lock=True)
            values = _clean(actor, fields, instance=node)
            specs = values.pop("models", None)
            token_changed = "token" in values and values["token"] != node.token
            token = values.pop("token", None)
            diff = changed(node, values)
            if token_changed:
                node.token = token
                diff["token"] = "set" if token else "cleared"
            if specs is not None:
                diff.update(_save_models(node, specs) or {})
            if "base_url" in diff:
                _forget_health(node)  # what was seen was another server
            if diff:
                node.save()
                audit_record(actor=actor, action="node.update", target=node, params=diff)
                _after_change()
    except IntegrityError:
        raise Conflict("A node with that name already exists.") from None
    return node


_STATUS_ACTIONS = {
    NodeStatus.ACTIVE: "node.enable",
    NodeStatus.DRAINING: "node.drain",
    NodeStatus.DISABLED: "node.disable",
}


def node_set_status(*, actor: Actor, node_id: int, status: str) -> Node:
    """Enable (active), drain or disable a node. Draining and disabled nodes get
    no new calls; draining ones are still probed so their health stays known."""
    actor.require(Perm.NODES_MANAGE)
    if status not in NodeStatus.values:
        raise ValidationFailed.from_fields({"status": "Choose active, draining or disabled."})
    with transaction.atomic():
        node = get_node(actor, node_id, for_change=True, lock=True)
        if node.status != status:
            before = node.status
            node.status = status
            if before == NodeStatus.DISABLED:
                # A disabled node was not probed: its old health proves nothing.
                _forget_health(node)
            node.save()
            audit_record(
                actor=actor,
                action=_STATUS_ACTIONS[status],
                target=node,
                params={"status": [before, status]},
            )
            _after_change()
    return node


@dataclass(frozen=True)
class NodeTestOutcome:
    node: Node
    result: health.ProbeResult
    change: health.HealthChange | None


def node_test(*, actor: Actor, node_id: int) -> NodeTestOutcome:
    """Probe one node now (whatever its status) and record the result like a
    scheduled probe would."""
    actor.require(Perm.NODES_MANAGE)
    node = get_node(actor, node_id, for_change=True)
    (result,) = health.run_probes([health.ProbeTarget.of(node)])
    with transaction.atomic():
        recorded, change = health.record_probe(result)
        audit_record(
            actor=actor,
            action="node.test",
            target=node,
            params={"ok": result.ok, "latency_ms": result.latency_ms, "error": result.error},
        )
    return NodeTestOutcome(node=recorded or node, result=result, change=change)
