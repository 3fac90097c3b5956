"""The apps' facades are narrow: what another app gets from one is plain data
(dataclasses, named tuples, enums, functions), never an ORM model it could query
or save behind the owner's back, except a model another app's rows point at
(a foreign-key target: an organization, a key, a node...)."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.db import models

FACADES = [
    "accounts.facade",
    "usage.facade",
    "invoicing.facade",
    "inference_node.facade",
    "gateway_bridge.facade",
    "console.features.alerts.facade",
    "console.features.capacity.facade",
    "console.features.webhooks.facade",
]


def _foreign_key_targets() -> set[type[models.Model]]:
    """Models some other app's model points at (ForeignKey, OneToOne, ManyToMany)."""
    targets = set()
    for model in apps.get_models():
        for field in model._meta.get_fields():
            target = getattr(field, "related_model", None)
            if not field.is_relation or field.auto_created or target is None:
                continue
            if target._meta.app_label != model._meta.app_label:
                targets.add(target)
    return targets


@pytest.mark.parametrize("facade", FACADES)
def test_a_facade_exports_no_model_but_foreign_key_targets(facade):
    module = importlib.import_module(facade)
    names = getattr(module, "__all__", None)
    assert names is not None, f"{facade} names what it exports in __all__"
    targets = _foreign_key_targets()
    exported_models = {
        name: obj
        for name in names
        if isinstance(obj := getattr(module, name), type) and issubclass(obj, models.Model)
    }
    others = sorted(name for name, model in exported_models.items() if model not in targets)
    assert others == [], f"{facade} exports models no other app's rows point at: {others}"
