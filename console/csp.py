"""The Content-Security-Policy of every console answer (pages, the API, the
admin). The gateway's paths never pass through Django and carry none.

The policy, and why each source is there:

* ``script-src 'self'`` plus Stripe.js's origin (``STRIPE_JS_URL``; for the
  real one, Stripe's documented hosts): our scripts, htmx and plotly.js are
  served from our own static files, and no page has an inline script or an
  inline event handler (``static/console/console.js`` reacts to ``data-``
  attributes instead), so no nonce and no ``'unsafe-inline'`` are needed.
  ``<script type="application/json">`` blocks (figures, presets) are data,
  never run.
* ``style-src 'self' 'unsafe-inline'``: plotly.js and htmx insert ``<style>``
  elements and style attributes at run time and have no nonce hook for the
  former; styles cannot run code, so this is the usual trade.
* ``img-src 'self' data: blob:`` (plotly's image export and icons),
  ``connect-src 'self'`` (htmx, the call-log page) plus Stripe's API,
  ``frame-src`` only Stripe's card frames.
* ``object-src 'none'``, ``base-uri 'self'``, ``form-action 'self'``,
  ``frame-ancestors 'none'`` (with ``X-Frame-Options: DENY``, for old browsers).

``CSP_REPORT_ONLY`` sends it as ``Content-Security-Policy-Report-Only``
instead, to try a change of policy on a live site without breaking pages.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings

# Stripe's documented sources for Stripe.js and its Elements.
_STRIPE = {
    "script-src": ("https://js.stripe.com", "https://*.js.stripe.com"),
    "frame-src": ("https://js.stripe.com", "https://*.js.stripe.com", "https://hooks.stripe.com"),
    "connect-src": ("https://api.stripe.com",),
}


def _origin(url: str) -> str | None:
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


@lru_cache(maxsize=8)
def policy(stripe_js_url: str) -> str:
    directives: dict[str, list[str]] = {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:", "blob:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "frame-src": ["'none'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
    stripe = _origin(stripe_js_url)
    if stripe:
        extra = (
            _STRIPE
            if stripe == "https://js.stripe.com"
            else dict.fromkeys(("script-src", "frame-src", "connect-src"), (stripe,))
        )
        for name, sources in extra.items():
            values = [v for v in directives[name] if v != "'none'"]
            directives[name] = values + [s for s in sources if s not in values]
    return "; ".join(f"{name} {' '.join(values)}" for name, values in directives.items())


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        header = (
            "Content-Security-Policy-Report-Only"
            if settings.CSP_REPORT_ONLY
            else "Content-Security-Policy"
        )
        if header not in response:
            response[header] = policy(settings.STRIPE_JS_URL)
        return response
