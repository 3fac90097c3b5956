from django.apps import AppConfig

from console.kernel import hooks


def _balance_changed(*, organization_id: int, delta: int) -> None:
    """``console.kernel.hooks.BALANCE_CHANGED``: a prepaid balance moved (not by
    usage) and committed; credit the gateways' limit counters. Imported here:
    the limits read usage's models, which an AppConfig module may not import."""
    # deferred: the limits read usage's models, not importable with the AppConfig
    from gateway_bridge.limits import credit_balance

    credit_balance(organization_id, delta)


class GatewayBridgeConfig(AppConfig):
    name = "gateway_bridge"
    verbose_name = "Gateway bridge"

    def ready(self) -> None:
        # deferred: notify imports the apps' models, ready only once the registry is
        from gateway_bridge import notify

        notify.connect_signals()
        hooks.BALANCE_CHANGED.connect(_balance_changed)
