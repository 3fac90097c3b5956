"""What other apps may use of ``accounts``: its one public face.

Other apps import from here and nowhere else in ``accounts`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it). Inside
``accounts`` modules import each other directly, never this module.

What is published, by topic:

* who is acting and what they may do: ``Actor``, ``Perm``, ``can_view_keys``,
  and the domain errors every app raises and the pages and API render
  (``DomainError`` and its kinds);
* the audit trail: ``audit_record`` to write it, ``audit_trail`` (``AuditRow``
  tuples) and ``audit_recorded`` to read it;
* the models other apps hold foreign keys to, filter by or seed (tenants,
  members, sub-accounts, keys) with their choices;
* the gateway's key check: ``api_key_authenticate``, ``AuthenticatedKey``,
  ``checksum_refuses`` (a mistyped key, refused offline), ``keyed_hash`` and
  ``new_secret`` (the stored form of a key);
* the cost-attribution tag-key rule (``MAX_TAGS``, ``MAX_TAG_KEY``,
  ``TAG_KEY_RE``), which keys' and sub-accounts' ``required_tag_keys`` follow;
  ``usage.attribution_rules`` builds on it;
* the services other apps' commands call (seeding, benchmarks, the soak), and
  ``api_key_list``;
* the pieces every app's pages and API are built on: ``org_view`` and
  ``apply_errors`` for console views, ``OrgViewSet`` and ``IsOrgMember`` for
  DRF, ``FieldErrors``, ``changed`` and ``clean_unique_name`` for services
  that validate like the accounts ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accounts.actors import Actor
from accounts.audit import AuditRow, audit_record, audit_recorded, audit_trail
from accounts.decorators import apply_errors, org_view
from accounts.errors import Conflict, DomainError, NotFound, PermissionDenied, ValidationFailed
from accounts.keys import (
    KEY_PREFIX,
    AuthenticatedKey,
    api_key_authenticate,
    checksum_refuses,
    keyed_hash,
    new_secret,
)
from accounts.models import (
    ApiKey,
    ApiKeyStatus,
    BillingMode,
    Membership,
    Organization,
    Role,
    SubAccount,
    SubAccountStatus,
    User,
)
from accounts.permissions import Perm, can_view_keys
from accounts.selectors import api_key_list
from accounts.services import (
    api_key_issue,
    api_key_revoke,
    organization_create,
    sub_account_create,
)
from accounts.services._common import FieldErrors, changed, clean_unique_name
from accounts.validators import MAX_TAG_KEY, MAX_TAGS, TAG_KEY_RE

if TYPE_CHECKING:
    from accounts.api import IsOrgMember, OrgViewSet

_LAZY = {"IsOrgMember", "OrgViewSet"}


def __getattr__(name: str) -> Any:
    """The DRF base pieces, imported on first use: DRF and drf-spectacular cost
    seconds to import, and the gateway and Celery processes import this facade
    without ever serving the REST API."""
    if name in _LAZY:
        from accounts import api  # deferred: DRF is slow to import (see above)

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "KEY_PREFIX",
    "MAX_TAGS",
    "MAX_TAG_KEY",
    "TAG_KEY_RE",
    "Actor",
    "ApiKey",
    "ApiKeyStatus",
    "AuditRow",
    "AuthenticatedKey",
    "BillingMode",
    "Conflict",
    "DomainError",
    "FieldErrors",
    "IsOrgMember",
    "Membership",
    "NotFound",
    "OrgViewSet",
    "Organization",
    "Perm",
    "PermissionDenied",
    "Role",
    "SubAccount",
    "SubAccountStatus",
    "User",
    "ValidationFailed",
    "api_key_authenticate",
    "api_key_issue",
    "api_key_list",
    "api_key_revoke",
    "apply_errors",
    "audit_record",
    "audit_recorded",
    "audit_trail",
    "can_view_keys",
    "changed",
    "checksum_refuses",
    "clean_unique_name",
    "keyed_hash",
    "new_secret",
    "org_view",
    "organization_create",
    "sub_account_create",
]
