from django.apps import AppConfig


class InferenceNodeConfig(AppConfig):
    name = "inference_node"
    verbose_name = "Inference nodes"
