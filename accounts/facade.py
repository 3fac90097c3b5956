"""What other apps may use of ``accounts``: its one public face.

Other apps import from here and nowhere else in ``accounts`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it).
"""

# --- used by console.analytics (splits): who is asking, what they may see ---
from accounts.actors import Actor as Actor
from accounts.decorators import org_view as org_view
from accounts.models import ApiKey as ApiKey
from accounts.models import AuditEvent as AuditEvent
from accounts.models import SubAccount as SubAccount
from accounts.permissions import Perm as Perm
