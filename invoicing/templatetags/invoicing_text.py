"""How the finance pages word an invoice line in the reader's language."""

from __future__ import annotations

from django import template

from invoicing.models import line_description

register = template.Library()


@register.filter
def line_text(line) -> str:
    """``{{ line|line_text }}``: a usage line's description in the active
    language (the stored one is English); any other line's as stored."""
    return line_description(line)
