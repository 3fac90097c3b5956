from django import template

from console.money import format_amount

register = template.Library()


@register.simple_tag(takes_context=True)
def money(context, micro, currency=None):
    """Format integer micro-units in the current organization's currency."""
    if currency is None:
        org = context.get("current_org")
        currency = org.currency if org else "USD"
    return format_amount(micro, currency)
