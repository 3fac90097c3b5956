"""What other modules may use of ``console.features.webhooks``: its one public face.

Apps never need it to send an event: they fire
``console.kernel.hooks.OUTBOUND_EVENT`` and this app's receiver records and
delivers it. Published for the console's top (pages, commands): the models,
and ``signing`` (``sign`` / ``verify``, the documented signature scheme).
"""

from __future__ import annotations

from console.features.webhooks import signing
from console.features.webhooks.models import (
    Delivery,
    DeliveryStatus,
    Destination,
    DestinationKind,
    EventType,
    OutboundEvent,
)

__all__ = [
    "Delivery",
    "DeliveryStatus",
    "Destination",
    "DestinationKind",
    "EventType",
    "OutboundEvent",
    "signing",
]
