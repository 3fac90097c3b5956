"""What other apps may use of ``usage``: its one public face.

Other apps import from here and nowhere else in ``usage`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it).
"""

# --- used by console.analytics (splits): rollup series, the discount rule,
# the keys an actor may see and the filter fields of the call log ---
from usage.analytics import Series as Series
from usage.analytics import cache_savings as cache_savings
from usage.analytics import series as series
from usage.forms import KeyChoiceField as KeyChoiceField
from usage.forms import OrganizationFilterMixin as OrganizationFilterMixin
from usage.logs import visible_keys as visible_keys
from usage.models import CatalogModel as CatalogModel
from usage.rating import discount_ppm_for as discount_ppm_for
