"""Change notices for what hangs beneath a node: the models it serves and the
API keys of its pool. Another app that caches what a node routes (the
gateway) connects a handler here rather than to those models themselves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models.signals import post_delete, post_save

from inference_node.models import Credential, NodeModel


def connect_node_rows_changed(handler: Callable[..., Any], *, dispatch_uid: str) -> None:
    """Call ``handler(sender, instance, **kwargs)`` after every save and delete
    of a node's served model or API key (the admin's too). The connections
    are strong and named ``{dispatch_uid}-{model label}-save`` / ``-delete``,
    so connecting twice connects once."""
    for model in (NodeModel, Credential):
        uid = f"{dispatch_uid}-{model._meta.label_lower}"
        post_save.connect(handler, sender=model, dispatch_uid=uid + "-save", weak=False)
        post_delete.connect(handler, sender=model, dispatch_uid=uid + "-delete", weak=False)
