"""What other apps may use of ``usage``: its one public face.

Other apps import from here and nowhere else in ``usage`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it).
"""

# --- The usage contract (issue 14: contract) -------------------------------
# The usage event the gateway builds and the emitter encodes (``UsageEvent``,
# ``encode``, ``to_wire``, ``SCHEMA_VERSION``, ``ENDPOINTS``); the totals
# ingest hands to ``console.hooks.CALLS_INGESTED`` receivers
# (``OrgUsageTotals``); the one discount rule (``discount_for``); what a key
# or sub-account spent per period, for the gateway's cap seeding
# (``spend_by_period`` with ``SPEND_BY_KEY`` / ``SPEND_BY_SUB_ACCOUNT``).

from usage.events import ENDPOINTS, SCHEMA_VERSION, UsageEvent, encode, to_wire
from usage.rating import discount_for, discount_ppm_for
from usage.spend import KEY as SPEND_BY_KEY
from usage.spend import SUB_ACCOUNT as SPEND_BY_SUB_ACCOUNT
from usage.spend import spend_by_period
from usage.totals import OrgUsageTotals

__all__ = [
    "ENDPOINTS",
    "SCHEMA_VERSION",
    "SPEND_BY_KEY",
    "SPEND_BY_SUB_ACCOUNT",
    "OrgUsageTotals",
    "UsageEvent",
    "discount_for",
    "discount_ppm_for",
    "encode",
    "spend_by_period",
    "to_wire",
]
