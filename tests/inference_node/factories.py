"""factory_boy factories for the node registry."""

from __future__ import annotations

import factory

from inference_node.models import Node, NodeHealth, NodeModel, NodeStatus


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
