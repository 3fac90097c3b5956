"""Money in templates, through ``console.kernel.money`` (the one formatter):
``{% money micro currency %}``, ``{{ ppm|rate }}``,
``{% for label, text in event.params|money_params:currency %}``."""

from django import template

from console.kernel.money import format_amount, format_rate, param_texts

register = template.Library()


def _currency(context, currency):
    if currency:
        return currency
    org = context.get("current_org")
    return org.currency if org else "USD"


@register.simple_tag(takes_context=True)
def money(context, micro, currency=None):
    """Format integer micro-units in the currency (the current organization's
    by default), rounded to its minor unit."""
    return format_amount(micro, _currency(context, currency))


@register.filter
def rate(ppm):
    """A rate stored in parts per million as a percentage: ``190000`` → ``19 %``."""
    return format_rate(ppm)


@register.filter
def money_params(params, currency):
    """An event's recorded parameters as ``(label, text)``, amounts in ``currency``."""
    return param_texts(params, currency or "USD")
