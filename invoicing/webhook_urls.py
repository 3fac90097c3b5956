"""Stripe's webhook endpoint (no session, no CSRF: the signature is the proof)."""

from django.urls import path

from invoicing.webhooks import stripe_webhook

urlpatterns = [
    path("billing/stripe/webhook/", stripe_webhook, name="stripe-webhook"),
]
