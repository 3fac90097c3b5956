"""How the finance pages word an invoice line in the reader's language."""

from __future__ import annotations

from django import template

from invoicing.models import credit_description, line_description

register = template.Library()


@register.filter
def line_text(line) -> str:
    """``{{ line|line_text }}``: a usage line's description in the active
    language (the stored one is English); any other line's as stored."""
    return line_description(line)


@register.filter
def credit_text(description: str) -> str:
    """``{{ line.description|credit_text }}``: a credit note line's
    description in the active language."""
    return credit_description(description)
