"""Who is acting: a member of one organization, from one address. Every
service takes one, so the permission check and the audit trail are never
forgotten by a caller."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext as _

from accounts.errors import PermissionDenied
from accounts.models import Membership, role_noun
from accounts.permissions import Perm, has_perm


@dataclass(frozen=True)
class Actor:
    membership: Membership
    ip: str | None = None

    @property
    def user(self):
        return self.membership.user

    @property
    def organization(self):
        return self.membership.organization

    @property
    def organization_id(self) -> int:
        return self.membership.organization_id

    @property
    def role(self) -> str:
        return self.membership.role

    def can(self, perm: Perm) -> bool:
        return has_perm(self.role, perm)

    def require(self, perm: Perm) -> None:
        if not self.can(perm):
            raise PermissionDenied(
                _("Your role (%(role)s) does not allow this action.")
                % {"role": role_noun(self.role)},
                code="permission_denied",
            )
