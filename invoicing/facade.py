"""What other apps may use of ``invoicing``: its one public face.

Other apps import from here and nowhere else in ``invoicing`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it).
"""

# --- monthly billing summaries (read by console.analytics.billing) ---
from invoicing.reports import MonthlyBilling as MonthlyBilling
from invoicing.reports import billing_monthly_totals as billing_monthly_totals
