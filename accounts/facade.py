"""What other apps may use of ``accounts``: its one public face.

Other apps import from here and nowhere else in ``accounts`` (the
``[tool.importlinter]`` contracts in pyproject.toml hold them to it).
"""

# --- used by console.analytics and invoicing's payment services (splits):
# who is asking and what they may do, errors, the audit log, organizations ---
from accounts.actors import Actor as Actor
from accounts.audit import audit_record as audit_record
from accounts.decorators import apply_errors as apply_errors
from accounts.decorators import org_view as org_view
from accounts.errors import Conflict as Conflict
from accounts.errors import DomainError as DomainError
from accounts.errors import NotFound as NotFound
from accounts.errors import ValidationFailed as ValidationFailed
from accounts.models import ApiKey as ApiKey
from accounts.models import AuditEvent as AuditEvent
from accounts.models import BillingMode as BillingMode
from accounts.models import Organization as Organization
from accounts.models import SubAccount as SubAccount
from accounts.permissions import Perm as Perm
