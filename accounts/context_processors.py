from accounts.permissions import Perm, can_view_keys, has_perm
from accounts.selectors import memberships_for_user


def organization(request):
    actor = getattr(request, "actor", None)
    if actor is None:
        return {"actor": None}
    role = actor.role
    perms = {p.name.lower(): has_perm(role, p) for p in Perm}
    perms["keys_view"] = can_view_keys(role)
    return {
        "actor": actor,
        "current_org": actor.organization,
        "perms": perms,
        "user_memberships": memberships_for_user(request.user),
    }
