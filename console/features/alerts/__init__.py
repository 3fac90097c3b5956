"""Alert rules: an organization's conditions on spend, balance, performance,
upstreams, rate limits and invoices, evaluated by beat every minute; each
fires once per crossing and resolves when it clears (``console.features.alerts.services``)."""
