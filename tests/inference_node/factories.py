"""factory_boy factories for the node registry."""

from __future__ import annotations

import factory

from console.kernel.crypto import hint
from inference_node.models import Credential, HealthCheck, Node, NodeHealth, NodeModel, NodeStatus


class NodeFactory(factory.django.DjangoModelFactory):
    """A healthy, active node of an organization (``organization=None``: shared)."""

    class Meta:
        model = Node
        skip_postgeneration_save = True

    organization = None
    name = factory.Sequence(lambda n: f"node-{n}")
    base_url = factory.Sequence(lambda n: f"http://10.0.0.{n % 250 + 1}:8000")
    token = ""
    status = NodeStatus.ACTIVE
    health = NodeHealth.HEALTHY
    weight = 1
    max_concurrency = 64

    @factory.post_generation
    def serves(obj, create, extracted, **kwargs):
        """``serves=["model-a", ("model-b", "upstream-b", 8192)]``."""
        if not (create and extracted):
            return
        for item in extracted:
            public, upstream, context = (item, item, None) if isinstance(item, str) else item
            NodeModel.objects.create(
                node=obj, public_name=public, upstream_name=upstream, context_window=context
            )


class NodeModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = NodeModel

    node = factory.SubFactory(NodeFactory)
    public_name = factory.Sequence(lambda n: f"model-{n}")
    upstream_name = factory.LazyAttribute(lambda o: o.public_name)


class CredentialFactory(factory.django.DjangoModelFactory):
    """An active API key of a node's pool (its hint computed from the secret)."""

    class Meta:
        model = Credential

    node = factory.SubFactory(NodeFactory)
    secret = factory.Sequence(lambda n: f"sk-test-key-{n:06d}-abcdef")
    secret_hint = factory.LazyAttribute(lambda o: hint(o.secret))
    label = ""
    weight = 1


def vendor_channel(*, organization=None, keys=("sk-test-vendor-key-0001",), **fields) -> Node:
    """A vendor channel (OpenAI-compatible, judged by its model list) with ``keys``."""
    fields.setdefault("health_check", HealthCheck.MODELS)
    fields.setdefault("base_url", "https://api.vendor.example")
    node = NodeFactory(organization=organization, **fields)
    for secret in keys:
        CredentialFactory(node=node, secret=secret)
    return node
