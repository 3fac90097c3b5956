"""Users, organizations, memberships, sub-accounts, API keys, personal access
tokens, invitations and the audit log."""

from __future__ import annotations

from decimal import Decimal

from django.contrib.auth.base_user import AbstractBaseUser, BaseUserManager
from django.contrib.auth.models import PermissionsMixin
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone as tz
from django.utils.translation import gettext_lazy as _

from console.kernel.choices import TextChoices
from console.kernel.crypto import SealedTextField


class UserManager(BaseUserManager):
    use_in_migrations = True

    def create_user(self, email: str, password: str | None = None, **extra):
        if not email:
            raise ValueError("An e-mail address is required")
        user = self.model(email=self.normalize_email(email).lower(), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_superuser(self, email: str, password: str | None = None, **extra):
        extra.setdefault("is_staff", True)
        extra.setdefault("is_superuser", True)
        return self.create_user(email, password, **extra)


class User(AbstractBaseUser, PermissionsMixin):
    email = models.EmailField(unique=True)
    full_name = models.CharField(max_length=150, blank=True)
    is_active = models.BooleanField(default=True)
    is_staff = models.BooleanField(default=False)
    date_joined = models.DateTimeField(default=tz.now)
    # The console language the user chose (a code of settings.LANGUAGES);
    # blank: the switcher's cookie or the browser's language (issue 18).
    language = models.CharField(max_length=16, blank=True, default="")

    objects = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []

    def __str__(self) -> str:
        return self.email

    @property
    def display_name(self) -> str:
        return self.full_name or self.email


class BillingMode(TextChoices):
    PREPAID = "prepaid", _("Prepaid")
    POSTPAID = "postpaid", _("Postpaid")


class Organization(models.Model):
    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=60, unique=True)
    currency = models.CharField(max_length=3, default="USD")
    timezone = models.CharField(max_length=64, default="UTC")
    billing_mode = models.CharField(
        max_length=16, choices=BillingMode.choices, default=BillingMode.POSTPAID
    )
    # Share of list price the organization pays: 1 = list price, 0.85 = 15 % off.
    discount_rate = models.DecimalField(
        max_digits=7,
        decimal_places=6,
        default=Decimal("1"),
        validators=[MinValueValidator(Decimal("0")), MaxValueValidator(Decimal("1"))],
    )
    # Models the organization may call; empty means every enabled model.
    allowed_models = models.JSONField(default=list, blank=True)
    # Gateway rate limits for the whole organization (staff set them); null = none.
    rpm_limit = models.PositiveIntegerField(null=True, blank=True)
    tpm_limit = models.PositiveIntegerField(null=True, blank=True)
    # The monthly spend cap (micro-units) every key a developer issues carries at
    # most; the key's default cap too. Null: developers' keys are not capped by it.
    developer_key_cap = models.BigIntegerField(null=True, blank=True)
    # Members must sign in with a second factor (accounts.two_factor); set by an owner.
    require_two_factor = models.BooleanField(default=False)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=tz.now)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class Role(TextChoices):
    OWNER = "owner", _("Owner")
    ADMIN = "admin", _("Admin")
    FINANCE = "finance", _("Finance")
    DEVELOPER = "developer", _("Developer")
    VIEWER = "viewer", _("Viewer")


_ROLE_NOUNS = {
    "owner": _("owner"),
    "admin": _("admin"),
    "finance": _("finance"),
    "developer": _("developer"),
    "viewer": _("viewer"),
}


def role_noun(role: str) -> str:
    """A role as a sentence names it ("as viewer", "the owner role"), in the
    active language; an unknown code as is."""
    noun = _ROLE_NOUNS.get(str(role))
    return str(noun) if noun is not None else str(role)


class Membership(models.Model):
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(default=tz.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "organization"], name="uniq_membership")
        ]
        ordering = ("created_at", "id")

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} ({self.role})"


class Invitation(models.Model):
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="invitations"
    )
    email = models.EmailField()
    role = models.CharField(max_length=16, choices=Role.choices)
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=tz.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at", "-id")
        indexes = [models.Index(fields=["organization", "email"])]

    def __str__(self) -> str:
        return f"{self.email} ({self.role})"

    @property
    def status(self) -> str:
        if self.accepted_at:
            return "accepted"
        if self.revoked_at:
            return "revoked"
        if self.expires_at <= tz.now():
            return "expired"
        return "pending"


class SubAccountStatus(TextChoices):
    ACTIVE = "active", _("Active")
    SUSPENDED = "suspended", _("Suspended")


class Limits(models.Model):
    """Restrictions shared by sub-accounts and keys. Money is integer micro-units
    of the organization's currency; ``None`` means no limit."""

    allowed_models = models.JSONField(default=list, blank=True)
    # Cost attribution: tag keys every call must carry in ``x-gateway-tags``
    # (``accounts.validators.normalize_tag_keys``); a key's calls need its own
    # and its sub-account's.
    required_tag_keys = models.JSONField(default=list, blank=True)
    spend_cap_daily = models.BigIntegerField(null=True, blank=True)
    spend_cap_monthly = models.BigIntegerField(null=True, blank=True)
    spend_cap_lifetime = models.BigIntegerField(null=True, blank=True)
    rpm_limit = models.PositiveIntegerField(null=True, blank=True)
    tpm_limit = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        abstract = True


class SubAccount(Limits):
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="sub_accounts"
    )
    name = models.CharField(max_length=120)
    status = models.CharField(
        max_length=16, choices=SubAccountStatus.choices, default=SubAccountStatus.ACTIVE
    )
    members = models.ManyToManyField(Membership, blank=True, related_name="sub_accounts")
    created_at = models.DateTimeField(default=tz.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="uniq_subaccount_name")
        ]
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class Priority(TextChoices):
    HIGH = "high", _("High")
    NORMAL = "normal", _("Normal")
    LOW = "low", _("Low")


class ApiKeyStatus(TextChoices):
    ACTIVE = "active", _("Active")
    REVOKED = "revoked", _("Revoked")
    EXPIRED = "expired", _("Expired")


class ApiKey(Limits):
    """A gateway key. The secret is never stored: only an HMAC-SHA256 of the
    whole key under the server's pepper, and a public id shown as its prefix."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="api_keys"
    )
    sub_account = models.ForeignKey(
        SubAccount, null=True, blank=True, on_delete=models.PROTECT, related_name="api_keys"
    )
    owner = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="api_keys")
    name = models.CharField(max_length=120)
    public_id = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    # After a rotation with a grace period the old secret keeps working until then.
    previous_public_id = models.CharField(max_length=16, unique=True, null=True, blank=True)
    previous_secret_hash = models.CharField(max_length=64, blank=True)
    previous_valid_until = models.DateTimeField(null=True, blank=True)
    ip_allowlist = models.JSONField(default=list, blank=True)
    # The limits a key manager (an admin) set on this key, {field: value}: the
    # key's owner may tighten them but not loosen or clear them (see
    # accounts.services.api_keys). JSON values: ints, lists, ISO datetimes.
    ceiling = models.JSONField(default=dict, blank=True)
    # A new secret made by someone who may not see it (an admin rotating an
    # owner's key), sealed, until the key's owner collects it once.
    pending_secret = SealedTextField(blank=True, default="")
    # Exact-match response cache for deterministic requests: how long an answer
    # is reused, in seconds; 0 = off (the default).
    response_cache_seconds = models.PositiveIntegerField(default=0)
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.NORMAL)
    # A load test's own key whose owner chose "not billed": its calls are
    # recorded and rated, but on no invoice and debited from no prepaid
    # balance. Set only when the key is issued (``api_key_issue``'s
    # ``test_traffic``, by console.features.capacity), never through the key form.
    test_traffic = models.BooleanField(default=False)
    # Platform staff's load tests of one channel: the gateway sends every call
    # of this key to this inference_node Node (its id; no foreign key, as
    # accounts sits below inference_node) and nowhere else. Set only when the
    # key is issued (``api_key_issue(pinned_node_id=...)``), never by a form.
    pinned_node_id = models.PositiveIntegerField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(
        max_length=8, choices=ApiKeyStatus.choices, default=ApiKeyStatus.ACTIVE
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=tz.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    rotated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at", "-id")
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "sub_account", "name"],
                condition=Q(sub_account__isnull=False) & ~Q(status="revoked"),
                name="uniq_key_name_in_subaccount",
            ),
            models.UniqueConstraint(
                fields=["organization", "name"],
                condition=Q(sub_account__isnull=True) & ~Q(status="revoked"),
                name="uniq_key_name_in_org",
            ),
        ]
        indexes = [models.Index(fields=["organization", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def prefix(self) -> str:
        return f"sk-{self.public_id}"

    @property
    def is_usable(self) -> bool:
        if self.status != ApiKeyStatus.ACTIVE:
            return False
        return not (self.expires_at and self.expires_at <= tz.now())

    @property
    def effective_status(self) -> str:
        if self.status == ApiKeyStatus.ACTIVE and not self.is_usable:
            return ApiKeyStatus.EXPIRED
        return self.status


class TokenScope(TextChoices):
    READ_ONLY = "read", _("Read only")
    READ_WRITE = "write", _("Read and write")


class PersonalAccessToken(models.Model):
    """A token for automation against the REST API, acting as one member of one
    organization with that member's role. Distinct from gateway keys."""

    membership = models.ForeignKey(
        Membership, on_delete=models.CASCADE, related_name="access_tokens"
    )
    name = models.CharField(max_length=120)
    public_id = models.CharField(max_length=16, unique=True)
    token_hash = models.CharField(max_length=64)
    # Read-only tokens may only read (GET, HEAD, OPTIONS); the member's role
    # still bounds what either kind may do.
    scope = models.CharField(
        max_length=8, choices=TokenScope.choices, default=TokenScope.READ_WRITE
    )
    created_at = models.DateTimeField(default=tz.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at", "-id")

    def __str__(self) -> str:
        return self.name

    @property
    def prefix(self) -> str:
        return f"pat_{self.public_id}"

    @property
    def read_only(self) -> bool:
        return self.scope == TokenScope.READ_ONLY

    @property
    def state(self) -> str:
        """``revoked``, ``expired`` or ``active``."""
        if self.revoked_at:
            return "revoked"
        if self.expires_at and self.expires_at <= tz.now():
            return "expired"
        return "active"


class AuditEvent(models.Model):
    organization = models.ForeignKey(
        Organization, null=True, on_delete=models.CASCADE, related_name="audit_events"
    )
    actor = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    actor_label = models.CharField(max_length=254, blank=True)
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    target_label = models.CharField(max_length=254, blank=True)
    params = models.JSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(default=tz.now)

    class Meta:
        ordering = ("-created_at", "-id")
        indexes = [models.Index(fields=["organization", "-created_at", "-id"])]

    def __str__(self) -> str:
        return (
            f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_label} {self.action} {self.target_label}"
        )


class RecoveryCode(models.Model):
    """A one-time code that stands in for the authenticator app at sign-in
    (``accounts.two_factor``). Only an HMAC of the code is kept."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="recovery_codes")
    code_hash = models.CharField(max_length=64)
    used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["user", "code_hash"])]

    def __str__(self) -> str:
        return f"recovery code of user {self.user_id}" + (" (used)" if self.used_at else "")
