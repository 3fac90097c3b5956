"""What other modules may use of ``console.features.webhooks``: its one public face.

Apps never need it to send an event: they fire
``console.kernel.hooks.OUTBOUND_EVENT`` and this app's receiver records and
delivers it; its pages and API are reached through ``console.urls``. No model is
published (nothing outside the feature reads or writes a destination, an event
or a delivery). Published: ``signing`` (``sign`` / ``verify``, the documented
signature scheme, standard library only).
"""

from __future__ import annotations

from console.features.webhooks import signing

__all__ = ["signing"]
