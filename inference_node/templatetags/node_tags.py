"""Template helpers of the nodes pages: a preset's label and a cost price per
million tokens (exact micro-units, through ``console.money``)."""

from __future__ import annotations

from django import template

from console.money import format_exact
from inference_node.presets import get_preset

register = template.Library()


@register.filter
def preset_label(key: str) -> str:
    preset = get_preset(key)
    return preset.label if preset else key


@register.simple_tag
def cost_price(micro, currency):
    """A cost per million tokens, with as many decimals as it needs."""
    return "—" if micro is None or not currency else format_exact(micro, currency)
