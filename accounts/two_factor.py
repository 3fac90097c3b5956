"""Optional TOTP second factor for console sign-in.

The authenticator is django-otp's ``TOTPDevice`` (RFC 6238, 30 s steps, one
step of tolerance); a code is refused when it is not newer than the last one
accepted (``last_t``), so a code seen once cannot be replayed, and the row is
locked while it is checked so two requests cannot both spend it.
``RECOVERY_CODES`` one-time recovery codes are shown once when the factor is
turned on; only an HMAC of each (keyed by ``SECRET_KEY``) is stored.

Sign-in: the password step (``accounts.signin_views.LoginView``) does not log a
user with a confirmed device in; it keeps ``PENDING_KEY`` in the session for
``PENDING_SECONDS`` and the code step (``two_factor_views.login_code``)
finishes, behind the same throttle as passwords (``accounts.throttle``)."""

from __future__ import annotations

import secrets
import time
from base64 import b32encode

import segno
from django.db import transaction
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac
from django.utils.translation import gettext as _
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.audit import audit_record
from accounts.errors import PermissionDenied, ValidationFailed
from accounts.models import Organization, RecoveryCode, Role

RECOVERY_CODES = 10
PENDING_KEY = "two_factor_pending"
PENDING_SECONDS = 300
_HMAC_SALT = "accounts.two_factor.recovery-code"


def confirmed_device(user) -> TOTPDevice | None:
    return TOTPDevice.objects.filter(user=user, confirmed=True).first()


def is_enabled(user) -> bool:
    return TOTPDevice.objects.filter(user=user, confirmed=True).exists()


def setup_device(user) -> TOTPDevice:
    """The device being set up (unconfirmed; created on first use)."""
    device = TOTPDevice.objects.filter(user=user, confirmed=False).first()
    if device is None:
        device = TOTPDevice.objects.create(user=user, name="Authenticator app", confirmed=False)
    return device


def qr_svg(device: TOTPDevice) -> str:
    """The device's ``otpauth://`` URI as an inline SVG QR code."""
    return segno.make(device.config_url, error="m").svg_inline(scale=4, border=2)


def secret_text(device: TOTPDevice) -> str:
    """The key in base32, in groups of four, for typing into an app by hand."""
    raw = b32encode(device.bin_key).decode().rstrip("=")
    return " ".join(raw[i : i + 4] for i in range(0, len(raw), 4))


def _normalized(code: str) -> str:
    return "".join(ch for ch in (code or "") if ch.isalnum()).lower()


def _hash(code: str) -> str:
    return salted_hmac(_HMAC_SALT, _normalized(code), algorithm="sha256").hexdigest()


def issue_recovery_codes(user) -> list[str]:
    """New recovery codes (the old ones stop working); returned once, stored hashed."""
    codes = [f"{secrets.token_hex(3)}-{secrets.token_hex(3)}" for _ in range(RECOVERY_CODES)]
    with transaction.atomic():
        RecoveryCode.objects.filter(user=user).delete()
        RecoveryCode.objects.bulk_create(
            RecoveryCode(user=user, code_hash=_hash(code)) for code in codes
        )
    return codes


def recovery_codes_left(user) -> int:
    return RecoveryCode.objects.filter(user=user, used_at__isnull=True).count()


def _verify_totp(device_qs, token: str) -> bool:
    token = (token or "").strip().replace(" ", "")
    if not (token.isascii() and token.isdigit() and len(token) == 6):
        return False
    with transaction.atomic():
        device = device_qs.select_for_update().first()
        return device is not None and device.verify_token(token)


def confirm_setup(user, token: str) -> list[str] | None:
    """Turn the factor on when ``token`` is right for the device being set
    up; returns the recovery codes to show once (None: wrong code)."""
    device = TOTPDevice.objects.filter(user=user, confirmed=False).first()
    if device is None or not _verify_totp(TOTPDevice.objects.filter(pk=device.pk), token):
        return None
    with transaction.atomic():
        TOTPDevice.objects.filter(user=user).exclude(pk=device.pk).delete()
        TOTPDevice.objects.filter(pk=device.pk).update(confirmed=True)
    return issue_recovery_codes(user)


def verify(user, code: str) -> bool:
    """A current authenticator code (never one accepted before) or an unused
    recovery code (spent by this call)."""
    if _verify_totp(TOTPDevice.objects.filter(user=user, confirmed=True), code):
        return True
    normalized = _normalized(code)
    if len(normalized) != 12:
        return False
    digest = _hash(normalized)
    for row in RecoveryCode.objects.filter(user=user, used_at__isnull=True):
        if constant_time_compare(row.code_hash, digest):
            # Spent atomically: of two requests with the same code, one wins.
            return (
                RecoveryCode.objects.filter(pk=row.pk, used_at__isnull=True).update(
                    used_at=timezone.now()
                )
                == 1
            )
    return False


def disable(user) -> None:
    with transaction.atomic():
        TOTPDevice.objects.filter(user=user).delete()
        RecoveryCode.objects.filter(user=user).delete()


def begin_sign_in(request, user, next_url: str) -> None:
    """The password was right; the session waits for the code."""
    request.session[PENDING_KEY] = {
        "user": user.pk,
        "backend": getattr(user, "backend", None),
        "next": next_url,
        "at": time.time(),
    }


def pending_sign_in(request) -> dict | None:
    pending = request.session.get(PENDING_KEY)
    if not pending or time.time() - pending.get("at", 0) > PENDING_SECONDS:
        request.session.pop(PENDING_KEY, None)
        return None
    return pending


def set_organization_requirement(*, actor, required: bool) -> None:
    """An owner requires (or stops requiring) a second factor of every member
    of the organization; they must have one themselves first."""
    if actor.membership.role != Role.OWNER:
        raise PermissionDenied(_("Only an owner can require two-factor sign-in."))
    if required and not is_enabled(actor.user):
        raise ValidationFailed(_("Turn on two-factor sign-in for yourself first."))
    org = actor.organization
    if org.require_two_factor == required:
        return
    Organization.objects.filter(pk=org.pk).update(require_two_factor=required)
    org.require_two_factor = required
    audit_record(
        actor=actor,
        action="organization.require_two_factor",
        target=org,
        params={"required": required},
    )


def must_enroll(request) -> bool:
    """The current organization requires a second factor and this signed-in
    user has none yet (``RequireTwoFactorMiddleware`` sends them to set one up)."""
    actor = getattr(request, "actor", None)
    return bool(
        actor is not None and actor.organization.require_two_factor and not is_enabled(actor.user)
    )
