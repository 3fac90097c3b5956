from django.apps import AppConfig


class GatewayBridgeConfig(AppConfig):
    name = "gateway_bridge"
    verbose_name = "Gateway bridge"

    def ready(self) -> None:
        from gateway_bridge import notify

        notify.connect_signals()
