"""Usage retention, invoicing (the seller, PDFs, top-ups), Stripe and the SLA
ledger, with their beat tasks."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from console.kernel import config
from console.settings.base import PRODUCTION
from console.settings.workers import CELERY_BEAT_SCHEDULE

# --- usage ----------------------------------------------------------------
# Call records older than this many days are deleted (rollups stay); 0 keeps them forever.
USAGE_RETENTION_DAYS = config.env_int("USAGE_RETENTION_DAYS", 0, minimum=0)
USAGE_PRUNE_BATCH = config.env_int("USAGE_PRUNE_BATCH", 10_000, minimum=1)
# PostgreSQL: monthly partitions of the call table kept ready this many months ahead.
USAGE_PARTITION_MONTHS_AHEAD = config.env_int("USAGE_PARTITION_MONTHS_AHEAD", 3, minimum=1)
# Events that claim to start further in the future than this are dead-lettered.
USAGE_MAX_FUTURE_SKEW_SECONDS = config.env_int("USAGE_MAX_FUTURE_SKEW_SECONDS", 300, minimum=0)
# How long the ingest worker trusts its cached price book, organizations and keys.
USAGE_PRICEBOOK_TTL_SECONDS = config.env_int("USAGE_PRICEBOOK_TTL_SECONDS", 30, minimum=0)

# --- invoicing ------------------------------------------------------------
# Hours after every time zone's month has ended before beat drafts its invoices
# (late usage events still arrive in that window).
INVOICING_GRACE_HOURS = config.env_int("INVOICING_GRACE_HOURS", 6, minimum=0)
# Who issues the invoices (printed on every invoice and credit note).
INVOICING_SELLER = {
    "name": config.env_str("INVOICING_SELLER_NAME", "Token Billing Console"),
    "address": config.env_str("INVOICING_SELLER_ADDRESS").replace("\\n", "\n"),
    "tax_id": config.env_str("INVOICING_SELLER_TAX_ID"),
    # Where customers write about an invoice (printed under the seller's address).
    "email": config.env_str("INVOICING_SELLER_EMAIL"),
}
# How to pay, printed on every invoice with an amount due (bank details; "\n" for new lines).
INVOICING_PAYMENT_INSTRUCTIONS = config.env_str("INVOICING_PAYMENT_INSTRUCTIONS").replace(
    "\\n", "\n"
)
# The invoice and credit-note PDFs' fonts (TrueType/OpenType files; empty = the fonts the
# fontpkg-noto-sans and noto-cjk-sans-otc packages install, then Debian's Noto and DejaVu).
# Without a Unicode font the PDFs fall back to Latin-only Helvetica and log a warning.
INVOICING_PDF_FONT = config.env_str("INVOICING_PDF_FONT")
# The fallback for characters the main font lacks (Chinese, Japanese, Korean); a .ttc/.otc
# collection's Simplified Chinese face is used when it has one.
INVOICING_PDF_CJK_FONT = config.env_str("INVOICING_PDF_CJK_FONT")
# Largest single top-up, in currency units (a typo guard).
INVOICING_MAX_TOP_UP = config.env_int("INVOICING_MAX_TOP_UP", 100_000, minimum=1)
# Stripe is off unless a secret key is set; without it finance records payments by hand.
STRIPE_SECRET_KEY = config.env_str("STRIPE_SECRET_KEY")
STRIPE_PUBLISHABLE_KEY = config.env_str("STRIPE_PUBLISHABLE_KEY")
# Stripe.js for the card pages; Stripe requires it from js.stripe.com (never vendored).
STRIPE_JS_URL = config.env_str("STRIPE_JS_URL", "https://js.stripe.com/v3/")
STRIPE_WEBHOOK_SECRET = config.env_str("STRIPE_WEBHOOK_SECRET")
# Point stripe-python elsewhere (localstripe in tests); empty = api.stripe.com.
STRIPE_API_BASE = config.env_str("STRIPE_API_BASE")
# Webhook signatures older than this are refused (Stripe's default tolerance).
STRIPE_WEBHOOK_TOLERANCE_SECONDS = config.env_int(
    "STRIPE_WEBHOOK_TOLERANCE_SECONDS", 300, minimum=1
)
# How far ahead of our clock a webhook signature's timestamp may be (clock skew);
# later ones are refused.
STRIPE_WEBHOOK_FUTURE_TOLERANCE_SECONDS = config.env_int(
    "STRIPE_WEBHOOK_FUTURE_TOLERANCE_SECONDS", 300, minimum=0
)
if PRODUCTION and STRIPE_SECRET_KEY and not STRIPE_WEBHOOK_SECRET:
    raise ImproperlyConfigured("STRIPE_SECRET_KEY is set but STRIPE_WEBHOOK_SECRET is missing")
CELERY_BEAT_SCHEDULE["invoicing-run-monthly"] = {
    "task": "invoicing.run_monthly",
    "schedule": 3600.0,
    "options": {"expires": 3000.0},
}
# Card refunds, collections and top-ups left pending by a Stripe outage or a lost webhook.
CELERY_BEAT_SCHEDULE["invoicing-retry-pending-payments"] = {
    "task": "invoicing.retry_pending_payments",
    "schedule": 900.0,
    "options": {"expires": 800.0},
}

# Finalized invoices past their due date with an amount due: invoice.overdue, once each.
CELERY_BEAT_SCHEDULE["invoicing-notify-overdue"] = {
    "task": "invoicing.notify_overdue",
    "schedule": 3600.0,
    "options": {"expires": 3000.0},
}

# The SLA ledger (invoicing.services.sla): the platform's default monthly availability
# target in parts per million (999000 = 99.9 %); platform staff override it per organization.
SLA_AVAILABILITY_TARGET_PPM = config.env_int(
    "SLA_AVAILABILITY_TARGET_PPM", 999_000, minimum=500_000
)
if SLA_AVAILABILITY_TARGET_PPM > 1_000_000:
    raise ImproperlyConfigured("SLA_AVAILABILITY_TARGET_PPM is at most 1000000 (100 %)")
# The platform's default bound on a month's p99 time to first token, in milliseconds
# (0: none). A month over it is breached too (the first credit tier).
SLA_TTFT_P99_MS = config.env_int("SLA_TTFT_P99_MS", 0, minimum=0)
# Each organization's month just ended (in its time zone) is evaluated once its invoicing
# grace period is over; a breach drafts a credit for finance to approve.
CELERY_BEAT_SCHEDULE["invoicing-sla-evaluate"] = {
    "task": "invoicing.sla_evaluate_closed",
    "schedule": 3600.0,
    "options": {"expires": 3000.0},
}
