"""Business actions of the accounts app. Each takes keyword arguments, checks
the actor's permission, runs in one transaction and writes the audit trail.
Other apps reach the ones they need through ``accounts.facade``. A service that
hands work to Celery enqueues the task by its name
(``console.kernel.celery.registered_task``): ``accounts.tasks`` imports services,
never the reverse."""

from accounts.services.api_keys import (
    api_key_collect_secret,
    api_key_issue,
    api_key_revoke,
    api_key_rotate,
    api_key_update,
    api_keys_expire_due,
    get_api_key,
)
from accounts.services.organizations import (
    invitation_accept,
    invitation_accept_new_user,
    invitation_create,
    invitation_lookup,
    invitation_revoke,
    membership_change_role,
    membership_remove,
    organization_create,
    organization_update,
)
from accounts.services.sub_accounts import (
    get_sub_account,
    sub_account_create,
    sub_account_set_members,
    sub_account_update,
)
from accounts.services.tokens import (
    personal_access_token_authenticate,
    personal_access_token_issue,
    personal_access_token_revoke,
)

__all__ = [
    "api_key_collect_secret",
    "api_key_issue",
    "api_key_revoke",
    "api_key_rotate",
    "api_key_update",
    "api_keys_expire_due",
    "get_api_key",
    "get_sub_account",
    "invitation_accept",
    "invitation_accept_new_user",
    "invitation_create",
    "invitation_lookup",
    "invitation_revoke",
    "membership_change_role",
    "membership_remove",
    "organization_create",
    "organization_update",
    "personal_access_token_authenticate",
    "personal_access_token_issue",
    "personal_access_token_revoke",
    "sub_account_create",
    "sub_account_set_members",
    "sub_account_update",
]
